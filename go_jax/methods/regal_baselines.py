"""The non-learned baselines of REGAL (Paliwal et al., "Reinforced Genetic Algorithm Learning
for Optimizing Computation Graphs", ICLR 2020) beside CP-SAT and BRKGA: `gp_dfs`,
`local_search`, and XLA's default memory scheduler `xla_memory` (docs/regal_baselines.md).

gp_dfs (joint): graph partitioning then a depth-first schedule. The placement is METIS's k-way
  min-cut partition of the colocation-contracted graph (the registered `metis` method, run on a
  copy of the graph whose vertex weights are chosen by option `weights`: "cost" balances
  compute, "bytes" balances param + output + scratch bytes; "auto", the default, is "bytes" for
  the peak_memory objective and "cost" otherwise). The priority is the registered `dfs` rule: a
  LIFO (depth-first) topological order, which runs a consumer chain to its end before it starts
  another branch, so few tensors are live at once. One priority for the whole graph: each
  device runs its ops in the order this global order restricts to it.

local_search (joint): a hill climber from a starting action (option `start`, default "gp_dfs";
  any registered placement or joint method, run with its defaults). Each step proposes a batch
  of `batch` moves from the current action, each either
    - relocate: one colocation group (its root op: the simulator's rule 1 moves the group) to
      another device, or, with probability `swap_prob` (always on one device),
    - swap: the priorities of an op and its neighbour in the current schedule of its device
      (the next op by start time on that device, else the previous one),
  scores them all with one batched `simulate_padded` call and moves to the best of the batch if
  it improves the current action lexicographically on (objective, tie), tie being the sum over
  devices of the peak memory (peak_memory) or the sum of op finish times (makespan): a move
  that only shrinks a device below the peak or finishes ops earlier is progress on a plateau.
  With probability `peak_prob` (default 0) a move's op is drawn instead in proportion to the
  bytes it holds at the current action's memory peak (go_jax/methods/peak_moves.py). The climb
  itself is go_jax/methods/climb.py.
  The first batch holds the starting action itself as row 0 (it scores the start; the answer
  can therefore never be worse than it). Budget: `budget` evaluations (default `evaluations`,
  5000, REGAL's accounting), steps = budget // batch whole batches (a budget below one batch
  runs one batch of that size). The whole climb is ONE jitted `lax.while_loop`; it stops early
  after `patience` batches without improvement when patience > 0. Deterministic per seed
  (JAX's "rbg" PRNG keyed with the seed, as the evolutionary searches do). Before the first
  simulation the "schedule" is the priority order per device.

xla_memory (schedule): XLA's DefaultMemoryScheduler (xla/service/hlo_memory_scheduler.cc) on
  the given placement. Three orders of the whole graph, each a topological order:
    - list: XLA's ListMemoryScheduler. Repeatedly schedules the ready op of highest
      (bytes freed - bytes defined, number of users), bytes freed being the outputs it is the
      last unscheduled consumer of and bytes defined its output; ties: the op that became ready
      last (XLA's multimap picks the last inserted entry of the highest key);
    - dfs: XLA's DFSMemoryScheduler. A post-order depth-first walk from the sinks that visits
      the inputs of an op by decreasing cumulative extra users (users - 1 summed over the op's
      ancestors, counted through each path), then decreasing cumulative bytes, then op id;
    - post_order: XLA's MakeInstructionPostOrder: a post-order depth-first walk from the sinks
      in id order, inputs in id order.
  Each becomes a priority (earlier = higher) and is simulated on the placement; the lowest
  objective wins (XLA keeps the lowest peak memory; here the problem's objective decides; ties:
  list, dfs, post_order, XLA's preference). info holds every candidate's objective.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import jax
import jax.numpy as jnp
import numpy as np

import go_jax.methods as registry
from go_jax import objectives
from go_jax.methods import Problem, Proposal, register
from go_jax.methods import climb
from go_jax.methods import simple
from simulator import sharding as sharding_lib
from simulator.graph import upward_rank
from simulator.simulate import simulate

WEIGHTS = ("auto", "cost", "bytes")

# Python-level trace count of the jitted climb, for no-retrace tests.


def order_priority(order) -> np.ndarray:
  """(N,) priority of a topological order: its first op gets the highest value."""
  prio = np.empty(len(order))
  prio[np.asarray(order, np.int64)] = -np.arange(len(order), dtype=np.float64)
  return prio


def _objective_of(problem: Problem, place: np.ndarray, prio: np.ndarray) -> np.ndarray:
  """(B,) objective of B actions of `problem` (one batched simulator call)."""
  res = simulate(problem.graph, problem.topology, place, prio)
  return np.asarray(objectives.objective_of(problem.objective, res, problem.topology,
                                            problem.upper_bound()), np.float64)


# ------------------------------------------------------------------ GP + DFS
def _partition_weights(problem: Problem, choice: str) -> str:
  if choice not in WEIGHTS:
    raise ValueError(f"gp_dfs: weights must be one of {list(WEIGHTS)}, got {choice!r}")
  if choice == "auto":
    return "bytes" if problem.objective == "peak_memory" else "cost"
  return choice


@register("gp_dfs", "joint",
          "REGAL's GP + DFS: METIS min-cut partition, then a depth-first topological order",
          weights="auto", seed=0, ufactor=30)
def gp_dfs(problem: Problem, config) -> Proposal:
  """Config: weights ("auto", "cost", "bytes": what METIS balances), seed and ufactor (the
  `metis` method's). info: the partition's (metis's info) and the weights used."""
  weights = _partition_weights(problem, str(config["weights"]))
  (place, info), = gp_placements(problem, [int(config["seed"])], weights,
                                 int(config["ufactor"]))
  placed = Problem(problem.graph, problem.topology, problem.objective, problem.seed, None, place)
  prio = simple.dfs(placed, {}).priority
  return Proposal(place, prio, info=dict(info, weights=weights))


def gp_placements(problem: Problem, seeds, weights: str = "auto", ufactor: int = 30):
  """[(placement (N,), metis info)] of GP's partition (gp_dfs's placement) with each METIS
  seed in `seeds` (the problem's seed added, as gp_dfs does): the weighted graph, its
  contraction and CSR are built once."""
  try:
    from go_jax.methods import partition  # pylint: disable=g-import-not-at-top  (pymetis)
  except ImportError as e:
    raise ValueError(f"gp_dfs needs pymetis (pip install pymetis): {e}") from e
  g = problem.graph
  weights = _partition_weights(problem, str(weights))
  if weights == "bytes":  # METIS balances the contracted vertices' "cost": give it bytes
    g = g.replace(cost=g.param_bytes + g.out_bytes + g.temp_bytes)
  return partition.metis_placements(g, problem.topology,
                                    [int(s) + int(problem.seed) for s in seeds], int(ufactor),
                                    weights == "cost")


# ------------------------------------------------------------------ local search
# The climb itself: go_jax/methods/climb.py (`hill_climb`, `timed_climb`).
def _start_action(problem: Problem, name: str) -> Tuple[Proposal, np.ndarray]:
  """The starting proposal of method `name` (its defaults) and its priority (N,)."""
  choices = sorted(k for k in registry.available(kinds=("placement", "joint"))
                   if k != "local_search")
  if name not in choices:
    raise ValueError(f"local_search: start {name!r} is not a registered placement or joint "
                     f"method; choices: {choices}")
  spec = registry.get(name)
  sub = Problem(problem.graph, problem.topology, problem.objective, problem.seed, None, None)
  prop = spec.fn(sub, dict(spec.defaults))
  prio = upward_rank(problem.graph) if prop.priority is None else prop.priority
  return prop, np.asarray(prio, np.float64)


@register("local_search", "joint",
          "hill climbing from GP + DFS: relocate a colocation group / swap schedule neighbours",
          start="gp_dfs", evaluations=5000, batch=64, swap_prob=0.3, patience=0,
          peak_prob=0.0)
def local_search(problem: Problem, config) -> Proposal:
  """See the module docstring. info: start (method), start_objective, best_objective, steps,
  improvements, batch."""
  k = int(config["batch"])
  swap_prob, patience = float(config["swap_prob"]), int(config["patience"])
  budget = int(problem.budget if problem.budget is not None else config["evaluations"])
  if k < 1:
    raise ValueError(f"local_search: batch must be >= 1, got {k}")
  if budget < 1:
    raise ValueError(f"local_search: budget (evaluations) must be >= 1, got {budget}")
  if not 0.0 <= swap_prob <= 1.0:
    raise ValueError(f"local_search: swap_prob must be in [0, 1], got {swap_prob}")
  peak_prob = float(config["peak_prob"])
  if not 0.0 <= peak_prob <= 1.0:
    raise ValueError(f"local_search: peak_prob must be in [0, 1], got {peak_prob}")
  k = min(k, budget)
  steps = budget // k
  start, prio = _start_action(problem, str(config["start"]))
  pg, place0, prio0, movable, num_movable = climb.climb_inputs(problem, start.placement, prio)
  c = climb.hill_climb(pg, problem.topology, jax.random.key(problem.seed, impl="rbg"),
                       jnp.float32(problem.upper_bound()), jnp.int32(steps),
                       jnp.int32(patience), jnp.float32(swap_prob), place0, prio0, movable,
                       num_movable, peak_prob=jnp.float32(peak_prob), kind=problem.objective,
                       batch=k, sharding=sharding_lib.batch_sharding(k))
  done = int(c.step)
  placement, priority = climb.action_of(problem.graph, c.place, c.prio)
  return Proposal(
      placement=placement, priority=priority,
      evaluations=done * k + int(start.evaluations),
      info={"start": str(config["start"]), "start_objective": float(c.start_obj),
            "best_objective": float(c.obj), "steps": done, "batch": k,
            "improvements": int(c.improvements), "start_evaluations": int(start.evaluations)})


# ------------------------------------------------------------------ XLA's memory schedulers
def _consumers(graph) -> List[List[int]]:
  ptr, succ = graph.successor_csr()
  return [succ[ptr[u]:ptr[u + 1]].tolist() for u in range(graph.num_nodes)]


def _producers(graph) -> List[List[int]]:
  ptr, pred = graph.predecessor_csr()
  return [pred[ptr[v]:ptr[v + 1]].tolist() for v in range(graph.num_nodes)]


def list_memory_order(graph) -> List[int]:
  """XLA's ListMemoryScheduler order (module docstring): greedy most-bytes-freed first."""
  n = graph.num_nodes
  users, preds = _consumers(graph), _producers(graph)
  size = graph.out_bytes.tolist()
  remaining = [len(u) for u in users]  # unscheduled consumers of each op's output
  missing = [len(p) for p in preds]  # unscheduled inputs of each op
  def priority(v):
    freed = sum(size[p] for p in preds[v] if remaining[p] == 1)
    return (freed - size[v], len(users[v]))

  # ready op -> (priority, insertion seq); XLA re-inserts an entry whose priority changed.
  ready: Dict[int, Tuple] = {v: (priority(v), v) for v in range(n) if missing[v] == 0}
  seq = n
  order = []
  while ready:
    v = max(ready, key=ready.get)
    del ready[v]
    order.append(v)
    for p in preds[v]:
      remaining[p] -= 1
    for w in users[v]:
      missing[w] -= 1
      if missing[w] == 0:
        ready[w] = (priority(w), seq)
        seq += 1
    for p in preds[v]:  # an input down to one unscheduled use: its last user frees it
      if remaining[p] == 1:
        for w in users[p]:
          if w in ready and priority(w) != ready[w][0]:
            ready[w] = (priority(w), seq)
            seq += 1
  return order


def _post_order(graph, inputs_of, sinks) -> List[int]:
  """Iterative depth-first post-order from `sinks`, visiting inputs in `inputs_of(v)` order."""
  seen = np.zeros(graph.num_nodes, bool)
  order = []
  for root in sinks:
    if seen[root]:
      continue
    seen[root] = True
    stack = [(root, iter(inputs_of(root)))]
    while stack:
      v, it = stack[-1]
      nxt = next((p for p in it if not seen[p]), None)
      if nxt is None:
        stack.pop()
        order.append(v)
      else:
        seen[nxt] = True
        stack.append((nxt, iter(inputs_of(nxt))))
  return order


def post_order(graph) -> List[int]:
  """XLA's PostOrderMemoryScheduler order: post-order from the sinks (id order), inputs in id
  order."""
  preds = _producers(graph)
  sinks = np.flatnonzero(graph.out_degree() == 0).tolist()
  return _post_order(graph, lambda v: preds[v], sinks)


def dfs_memory_order(graph) -> List[int]:
  """XLA's DFSMemoryScheduler order: post-order visiting inputs by decreasing cumulative extra
  users, then decreasing cumulative bytes, then op id (module docstring)."""
  n = graph.num_nodes
  users, preds = _consumers(graph), _producers(graph)
  extra = np.zeros(n, np.int64)
  total = np.zeros(n)
  cumulative = 0.0
  for v in graph.topological_order().tolist():
    extra[v] = max(len(users[v]) - 1, 0) + sum(int(extra[p]) for p in preds[v])
    cumulative += float(graph.out_bytes[v])
    total[v] = min(float(graph.out_bytes[v]) + sum(float(total[p]) for p in preds[v]),
                   cumulative)  # XLA caps the double-counted sums likewise
    extra[v] = min(int(extra[v]), n)

  def by_visit(ops):
    return sorted(ops, key=lambda p: (-extra[p], -total[p], p))
  sorted_preds = [by_visit(p) for p in preds]
  sinks = by_visit(np.flatnonzero(graph.out_degree() == 0).tolist())
  return _post_order(graph, lambda v: sorted_preds[v], sinks)


XLA_ORDERS = {"list": list_memory_order, "dfs": dfs_memory_order, "post_order": post_order}


@register("xla_memory", "schedule",
          "XLA's default memory scheduler: best of its list, DFS and post-order schedules")
def xla_memory(problem: Problem, config) -> Proposal:
  """See the module docstring. info: chosen (name), objectives (name -> objective)."""
  del config
  names = list(XLA_ORDERS)
  prios = [order_priority(XLA_ORDERS[k](problem.graph)) for k in names]
  place = np.asarray(problem.placement, np.int64)
  # One action per call: the batch shape `solve` re-simulates with, so no second compile.
  values = [float(_objective_of(problem, place, p)[0]) for p in prios]
  best = int(np.argmin(values))  # first minimum: list, then dfs, then post_order
  return Proposal(problem.placement, prios[best], evaluations=len(names),
                  info={"chosen": names[best],
                        "objectives": {k: float(v) for k, v in zip(names, values)}})
