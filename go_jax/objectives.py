"""Objectives and bounds (design.md section 5): what every method minimises and how far off it is.

An objective turns simulator results into one number per action, lower is better:
`makespan`, or `peak_memory` (max over devices). Infeasible actions (some device over its
memory capacity) must rank below every feasible action on the same graph, so they score
`upper bound * (1 + overflow ratio)`: the upper bound is a value no feasible action can exceed.
The same functions work on numpy and inside jit (they only use `jnp`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Optional

import jax.numpy as jnp
import numpy as np

from simulator.graph import CompGraph
from simulator.topology import Topology


def durations(graph: CompGraph, topology: Topology) -> np.ndarray:
  """(N, D) seconds of each op on each device (rule 2: cost / speed + overhead)."""
  return graph.cost[:, None] / topology.speed[None, :] + topology.overhead[None, :]


def makespan_upper_bound(graph: CompGraph, topology: Topology) -> float:
  """Every op on its slowest device plus every edge on its slowest link, back to back.

  In the simulator some op or transfer is always in progress until the last op finishes (a
  device idles only while an op it could run waits for a transfer), and there are at most E
  transfers, so no action's makespan exceeds this.
  """
  d = topology.num_devices
  work = durations(graph, topology).max(axis=1).sum()
  if d == 1 or graph.num_edges == 0:
    return float(work)
  latency, per_byte = topology.link_tables()
  comm = (latency.max() + graph.out_bytes[graph.senders] * per_byte.max()).sum()
  return float(work + comm)


def memory_upper_bound(graph: CompGraph) -> float:
  """All parameters, outputs (and one copy per consumer) and scratch bytes at once."""
  copies = graph.out_bytes[graph.senders].sum()
  return float(graph.param_bytes.sum() + graph.out_bytes.sum() + copies +
               graph.temp_bytes.sum())


def makespan_lower_bound(graph: CompGraph, topology: Topology) -> Dict[str, float]:
  """Lower bounds on the makespan of any action, and their max under key 'bound'.

  critical_path: the longest path with every op at its fastest device and free transfers.
  work: total cost over total speed (all devices busy all the time, overheads ignored).
  """
  fastest = durations(graph, topology).min(axis=1)
  ptr, succ = graph.successor_csr()
  longest = np.zeros(graph.num_nodes)
  for u in graph.topological_order()[::-1].tolist():
    nxt = succ[ptr[u]:ptr[u + 1]]
    longest[u] = fastest[u] + (longest[nxt].max() if nxt.size else 0.0)
  cp = float(longest.max())
  work = float(graph.cost.sum() / topology.speed.sum())
  return {"critical_path": cp, "work": work, "bound": max(cp, work)}


# Shortest duration, relative to the makespan's upper bound (no event comes later), that the
# float32 simulator is sure to tell from an instant (float32's relative precision is 6e-8).
VISIBLE_DURATION = 1e-6


def memory_lower_bound(graph: CompGraph, topology: Topology) -> Dict[str, float]:
  """Lower bounds on the peak memory (max over devices) of any action.

  params: parameter bytes spread perfectly evenly. op: while an op that takes visibly long
  runs, its device holds its output, its scratch and a copy of every input (each live at least
  until the op finishes), plus the op's own parameters. "Visibly long" is at least
  VISIBLE_DURATION of the makespan's upper bound on every device (as in cpsat's necessary
  memory conditions, methods/exact.py): the jitted simulator adds times in float32, where a
  shorter op (1e-9 s after a 1 s op) can start and finish at the same instant and so hold no
  memory; counting it made the bound exceed such an action's peak (a gap of -1).
  """
  d = topology.num_devices
  params = float(graph.param_bytes.sum() / d)
  ins = np.zeros(graph.num_nodes)
  np.add.at(ins, graph.receivers, graph.out_bytes[graph.senders])
  shortest = durations(graph, topology).min(axis=1)
  runs = (shortest > 0) & (shortest >= VISIBLE_DURATION * makespan_upper_bound(graph, topology))
  per_op = graph.out_bytes + graph.temp_bytes + ins + graph.param_bytes
  op = float(per_op[runs].max()) if runs.any() else 0.0
  return {"params": params, "op": op, "bound": max(params, op)}


def _overflow(peak_memory, mem_capacity):
  """Largest relative excess over capacity across devices; 0 when everything fits."""
  cap = jnp.asarray(mem_capacity)
  ratio = jnp.where(jnp.isfinite(cap), (peak_memory - cap) / jnp.maximum(cap, 1.0), 0.0)
  return jnp.maximum(jnp.max(ratio, axis=-1), 0.0)


def _penalty(peak_memory, mem_capacity, upper_bound):
  """(B,) the objective of an infeasible action: upper_bound * (1 + overflow), and at least
  a little above upper_bound. The bound is floored at float32's smallest normal number: a
  bound of 0 (every op free, links free) made every infeasible action score 0, as good as
  the feasible ones, where it must rank below all of them (design.md section 5)."""
  ub = jnp.maximum(upper_bound, jnp.finfo(jnp.float32).tiny)
  penalty = ub * (1.0 + _overflow(peak_memory, mem_capacity))
  return jnp.maximum(penalty, ub * (1.0 + 1e-6))


def makespan_objective(makespan, peak_memory, oom, mem_capacity, upper_bound):
  """(B,) makespan where feasible, else upper_bound * (1 + overflow) (worse than any feasible)."""
  return jnp.where(oom, _penalty(peak_memory, mem_capacity, upper_bound), makespan)


def peak_memory_objective(makespan, peak_memory, oom, mem_capacity, upper_bound):
  """(B,) max-over-devices peak bytes where feasible, else upper_bound * (1 + overflow)."""
  del makespan
  return jnp.where(oom, _penalty(peak_memory, mem_capacity, upper_bound),
                   jnp.max(peak_memory, axis=-1))


def fusion_relaxation(graph: CompGraph, topology: Topology):
  """(graph, topology) whose lower bounds hold for every FUSED action too (design.md 4.1).

  Fusion lowers costs (a group launches once and skips its inner tensors), so the bounds of
  the unfused graph do not bound a fused answer. No group costs less than the sum of: its
  unfusible members, which are groups of one, unchanged; its heavy member (at most one, F2),
  which is its anchor (no other class comes before a dot's or a convolution's), at least its
  flops at its class's rate; one launch (the lowest overhead of any class) where its root is
  an op that can never fuse into its consumer; nothing for the rest; and never more than the
  op's own cost (a group of one costs exactly that). The topology's per-op overheads are paid
  once per group, so the relaxed topology has none; outputs and scratch may be absorbed, so
  only parameters (a group holds the sum of its members') stay in the memory bound. A graph
  without a cost reference cannot be fused and is returned as it is."""
  from simulator import fusion  # pylint: disable=g-import-not-at-top
  if graph.reference is None:
    return graph, topology
  t = fusion.node_tables(graph)
  heavy_cost = np.where(t.heavy > 0, t.flops / t.rate_flops, 0.0)
  # A fusible op whose request can never be legal (not one consumer, or an unfusible one) is
  # its group's root: the group launches once, at least at the lowest overhead of any class
  # (its anchor's), unless every member costs nothing (F4).
  root = ~t.single | ~t.fusible[t.consumer]
  launch = np.where(root, float(np.min(t.overhead)), 0.0)
  # (no more than the op's own cost either: a group of one costs exactly that, whatever made it)
  cost = np.where(t.fusible, np.minimum(graph.cost, heavy_cost + launch), graph.cost)
  zero = np.zeros(graph.num_nodes)
  relaxed = dataclasses.replace(graph, cost=cost, out_bytes=zero, temp_bytes=zero)
  return relaxed, Topology.create(topology.speed, np.zeros(topology.num_devices),
                                  topology.mem_capacity, topology.bandwidth, topology.latency)


@dataclasses.dataclass(frozen=True)
class Objective:
  """A registered objective: its per-action value, its bounds on a (graph, topology) and the
  unit its values are in ("s" or "bytes"), which every table formats them with."""
  value: Callable  # (makespan, peak_memory, oom, mem_capacity, upper_bound) -> (B,)
  upper_bound: Callable[[CompGraph, Topology], float]
  lower_bound: Callable[[CompGraph, Topology], Dict[str, float]]
  unit: str = "s"  # "s" or "bytes"

  def format(self, value: Optional[float], digits: int = 4) -> str:
    """A value with its unit ('12.3 ms', '1.5 GB'); '-' for None or NaN."""
    from go_jax import plotting  # pylint: disable=g-import-not-at-top  (matplotlib: lazy)
    if value is None or value != value:
      return "-"
    if self.unit == "bytes":
      return plotting.format_bytes(float(value), digits)
    return plotting.format_seconds(float(value), digits)


OBJECTIVES: Dict[str, Objective] = {
    "makespan": Objective(makespan_objective, makespan_upper_bound, makespan_lower_bound, "s"),
    "peak_memory": Objective(peak_memory_objective, lambda g, t: memory_upper_bound(g),
                             memory_lower_bound, "bytes"),
}


def get_objective(kind: str) -> Objective:
  if kind not in OBJECTIVES:
    raise ValueError(f"unknown objective '{kind}'; available: {sorted(OBJECTIVES)}")
  return OBJECTIVES[kind]


def objective_of(kind: str, result, topology: Topology, ub: float):
  """(B,) objective values of a `SimResult` batch."""
  return get_objective(kind).value(result.makespan, result.peak_memory, result.oom,
                                   topology.mem_capacity, ub)
