"""TEMPORARY placeholder while the jitted simulator is written: loops over reference_simulate."""
import flax
import numpy as np
from simulator.reference import reference_simulate


@flax.struct.dataclass
class SimResult:
  makespan: np.ndarray  # (B,)
  start: np.ndarray  # (B, N)
  finish: np.ndarray  # (B, N)
  peak_memory: np.ndarray  # (B, D)
  oom: np.ndarray  # (B,)


def simulate(graph, topology, placement, priority):
  placement, priority = np.atleast_2d(placement), np.atleast_2d(priority)
  rs = [reference_simulate(graph, topology, p, q) for p, q in zip(placement, priority)]
  return SimResult(np.array([r.makespan for r in rs]), np.stack([r.start for r in rs]),
                   np.stack([r.finish for r in rs]), np.stack([r.peak_memory for r in rs]),
                   np.array([r.oom for r in rs]))
