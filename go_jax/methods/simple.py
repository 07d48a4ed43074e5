"""The simple placement baselines and the classic priority (scheduling) rules.

Placements: single device (the fastest one that fits), random (best of K, one batched
simulator call), round-robin, and the expert contiguous split (the ops in topological order cut
into D stages of balanced cost, as a human pipeline split). Priorities for a fixed placement:
BFS and DFS topological orders, critical path first, and a memory-greedy rule.
"""

from __future__ import annotations

import collections

import numpy as np

from go_jax import objectives, placements
from go_jax.methods import Problem, Proposal, register
from simulator.simulate import simulate


def _best_of(problem: Problem, place: np.ndarray, prio: np.ndarray):
  """Index of the lowest-objective action of a batch, its objective, and the batch size."""
  res = simulate(problem.graph, problem.topology, place, prio)
  ub = problem.upper_bound()
  value = np.asarray(objectives.objective_of(problem.objective, res, problem.topology, ub))
  return int(np.argmin(value)), float(value.min()), place.shape[0]


@register("single", "placement", "every op on one device: the fastest one that fits")
def single(problem: Problem, config) -> Proposal:
  del config
  n, d = problem.graph.num_nodes, problem.topology.num_devices
  place = np.repeat(np.arange(d)[:, None], n, axis=1)
  prio = np.broadcast_to(placements.upward_rank(problem.graph), (d, n))
  best, _, evals = _best_of(problem, place, prio)
  return Proposal(place[best], evaluations=evals, info={"device": best})


@register("random", "placement", "best of K uniformly random placements", samples=256)
def random_best(problem: Problem, config) -> Proposal:
  k = int(config["samples"] if problem.budget is None else problem.budget)
  if k < 1:
    raise ValueError(f"random: samples must be >= 1, got {k}")
  rng = np.random.default_rng(problem.seed)
  n, d = problem.graph.num_nodes, problem.topology.num_devices
  place = rng.integers(0, d, (k, n))
  prio = np.broadcast_to(placements.upward_rank(problem.graph), (k, n))
  best, _, evals = _best_of(problem, place, prio)
  return Proposal(place[best], evaluations=evals)


@register("round_robin", "placement", "k-th op in topological order on device k mod D")
def round_robin(problem: Problem, config) -> Proposal:
  del config
  return Proposal(placements.round_robin(problem.graph, problem.topology))


def contiguous_split(graph, num_devices: int) -> np.ndarray:
  """(N,) stage of each op: topological order cut into `num_devices` runs of balanced cost."""
  order = graph.topological_order()
  cum = np.cumsum(graph.cost[order])
  total = cum[-1] if cum.size and cum[-1] > 0 else 0.0
  if total > 0:
    stage = np.minimum((cum - graph.cost[order] / 2) / total * num_devices,
                       num_devices - 1).astype(np.int64)
  else:  # no costs: balance op counts
    stage = np.arange(graph.num_nodes) * num_devices // graph.num_nodes
  out = np.empty(graph.num_nodes, np.int64)
  out[order] = stage
  return out


@register("expert", "placement",
          "topological order cut into D contiguous stages of balanced cost (pipeline split)")
def expert(problem: Problem, config) -> Proposal:
  del config
  return Proposal(contiguous_split(problem.graph, problem.topology.num_devices))


# ------------------------------------------------------------------ priorities
def _topological_rank(graph, depth_first: bool) -> np.ndarray:
  """(N,) priority from a BFS (FIFO) or DFS (LIFO) topological order: earlier = higher."""
  indeg = graph.in_degree().copy()
  ptr, succ = graph.successor_csr()
  frontier = collections.deque(int(i) for i in np.flatnonzero(indeg == 0))
  order = []
  while frontier:
    u = frontier.pop() if depth_first else frontier.popleft()
    order.append(u)
    nxt = [int(v) for v in succ[ptr[u]:ptr[u + 1]]]
    for v in (reversed(nxt) if depth_first else nxt):
      indeg[v] -= 1
      if indeg[v] == 0:
        frontier.append(v)
  prio = np.empty(graph.num_nodes)
  prio[np.asarray(order)] = -np.arange(len(order), dtype=np.float64)
  return prio


@register("bfs", "schedule", "breadth-first topological order as priority")
def bfs(problem: Problem, config) -> Proposal:
  del config
  return Proposal(problem.placement, _topological_rank(problem.graph, False))


@register("dfs", "schedule", "depth-first topological order as priority")
def dfs(problem: Problem, config) -> Proposal:
  del config
  return Proposal(problem.placement, _topological_rank(problem.graph, True))


@register("critical_path", "schedule", "longest remaining path (upward rank) first")
def critical_path(problem: Problem, config) -> Proposal:
  del config
  return Proposal(problem.placement, placements.upward_rank(problem.graph))


@register("memory_greedy", "schedule",
          "frees the most bytes first: ops whose run releases inputs, minus what they hold")
def memory_greedy(problem: Problem, config) -> Proposal:
  """Priority = bytes an op can free (inputs it is the only remaining consumer of, estimated
  as input bytes shared by their consumer count) minus bytes it allocates (output + scratch)."""
  del config
  g = problem.graph
  share = g.out_bytes[g.senders] / np.maximum(g.out_degree()[g.senders], 1)
  frees = np.zeros(g.num_nodes)
  np.add.at(frees, g.receivers, share)
  return Proposal(problem.placement, frees - g.out_bytes - g.temp_bytes)
