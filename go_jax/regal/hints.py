"""Heuristic hints for REGAL's policy (`policy.hints = True`, the `regal_hint` method).

  choice = hint_choices(graph, topology, objective, max_devices, num_nodes_padded)
  # (Np, Dmax + 1) int32

A hint is one key choice per op and key slot, in policy.BETA_CHOICES' indices, built from two
millisecond-cheap baselines of REGAL's own table:
* affinity slots: "mildly high" (Beta(3, 1)) on the device of GP's placement (the `gp_dfs`
  method: a METIS partition balancing bytes for peak memory, compute for makespan), uniform on
  the other slots;
* the priority slot: the op's place in a memory-friendly order, in fifths: "strongly high"
  (Beta(12, 1)), "mildly high", uniform, "mildly low" (Beta(1, 3)), "strongly low". The order
  is XLA's memory scheduler's (`xla_memory` on GP's placement) for `peak_memory`, and the
  critical-path order (upward rank) for `makespan`.
Padded ops and unused slots: uniform.

Why these: of nine such fixed guides tried on REGAL's 32 *training* graphs (BENCHMARKS.md "REGAL
with hints"), this one made BRKGA 5K's peak memory lowest (2.9% lower on average, 27 of 32
graphs), while each baseline alone is 20-35% worse than BRKGA. A hinted policy reads the hint
(an embedding and a learned logit bonus, policy.RegalPolicy) and starts from it (its most
likely guide at initialisation is the hint); REINFORCE is to learn where to deviate (so far it
has not: docs/regal.md section 4.1). The hint is computed on the host for every graph, in
training (trainer.build_data) and at inference (methods/regal.py).
"""

from __future__ import annotations

import numpy as np

from simulator.graph import CompGraph, upward_rank
from simulator.topology import Topology

# indices in policy.BETA_CHOICES: Beta(3, 1), (1, 3), (12, 1), (1, 12)
MILD_HIGH, MILD_LOW, STRONG_HIGH, STRONG_LOW = 1, 2, 3, 4
FIFTHS = (STRONG_HIGH, MILD_HIGH, 0, MILD_LOW, STRONG_LOW)  # first fifth of the order first


def fifths(priority: np.ndarray) -> np.ndarray:
  """(N,) int32 priority-slot choice by the op's fifth in order of decreasing priority (ties:
  lower op id first): FIFTHS[k] for the k-th fifth."""
  n = priority.shape[0]
  order = np.lexsort((np.arange(n), -np.asarray(priority, np.float64)))
  rank = np.empty(n, np.int64)
  rank[order] = np.arange(n)
  return np.asarray(FIFTHS, np.int32)[np.minimum(5 * rank // max(n, 1), 4)]


def hint_choices(graph: CompGraph, topology: Topology, objective: str, max_devices: int,
                 num_nodes_padded: int) -> np.ndarray:
  """(Np, Dmax + 1) int32 hinted key choice per op and slot (module docstring)."""
  # The registered functions' proposals, not methods.solve: no re-simulation or bound of the
  # baselines inside regal_hint's timed search. (Imported here: the methods import regal.)
  from go_jax import methods  # pylint: disable=g-import-not-at-top
  n, d = graph.num_nodes, topology.num_devices
  if d > max_devices or num_nodes_padded < n:
    raise ValueError(f"hint_choices: {d} devices for {max_devices} slots, or {n} ops padded "
                     f"to {num_nodes_padded}")
  gp_spec = methods.get("gp_dfs")
  gp = gp_spec.fn(methods.Problem(graph, topology, objective, 0, None, None),
                  dict(gp_spec.defaults))
  if objective == "peak_memory":
    xla_spec = methods.get("xla_memory")
    prio = xla_spec.fn(methods.Problem(graph, topology, objective, 0, None, gp.placement),
                       dict(xla_spec.defaults)).priority
  else:
    prio = upward_rank(graph)
  out = np.zeros((num_nodes_padded, max_devices + 1), np.int32)
  out[np.arange(n), gp.placement] = MILD_HIGH
  out[:n, max_devices] = fifths(prio)
  return out
