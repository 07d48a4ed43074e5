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

import functools
import time
from typing import Dict, List, Tuple

import flax
import jax
import jax.numpy as jnp
import numpy as np

import go_jax.methods as registry
from go_jax import objectives
from go_jax.methods import Problem, Proposal, register
from go_jax.methods import simple
from simulator.graph import upward_rank
from simulator.padding import PaddedGraph
from simulator.simulate import padded, simulate, simulate_padded
from simulator.topology import Topology

WEIGHTS = ("auto", "cost", "bytes")

# Python-level trace count of the jitted climb, for no-retrace tests.
TRACES: Dict[str, int] = {"local_search": 0}


def _order_priority(order) -> np.ndarray:
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
  try:
    from go_jax.methods import partition  # pylint: disable=g-import-not-at-top  (pymetis)
  except ImportError as e:
    raise ValueError(f"gp_dfs needs pymetis (pip install pymetis): {e}") from e
  g = problem.graph
  weights = _partition_weights(problem, str(config["weights"]))
  if weights == "bytes":  # METIS balances the contracted vertices' "cost": give it bytes
    g = g.replace(cost=g.param_bytes + g.out_bytes + g.temp_bytes)
  sub = Problem(g, problem.topology, problem.objective, problem.seed, None, None)
  part = partition.metis(sub, {"seed": int(config["seed"]), "ufactor": int(config["ufactor"]),
                               "speed_weights": weights == "cost"})
  placed = Problem(problem.graph, problem.topology, problem.objective, problem.seed, None,
                   part.placement)
  prio = simple.dfs(placed, {}).priority
  return Proposal(part.placement, prio, info=dict(part.info, weights=weights))


# ------------------------------------------------------------------ local search
@flax.struct.dataclass
class _Climb:
  """Hill-climbing loop state (padded op axis Np)."""
  place: jnp.ndarray  # (Np,) int32 current placement
  prio: jnp.ndarray  # (Np,) float32 current priority
  start: jnp.ndarray  # (Np,) float32 start times of the current action (+inf on padding)
  obj: jnp.ndarray  # () current objective (+inf before step 0)
  tie: jnp.ndarray  # () current tie-break score
  start_obj: jnp.ndarray  # () objective of the starting action
  step: jnp.ndarray  # () int32 batches evaluated
  stall: jnp.ndarray  # () int32 batches since the last improvement
  improvements: jnp.ndarray  # () int32 accepted moves


def _neighbours(place, start, coloc_root, node_mask, d: int):
  """(next (Np,), prev (Np,)) op before / after each op in its device's schedule (by start
  time, ties by id), -1 where there is none."""
  np_ = place.shape[0]
  dev = jnp.where(node_mask, place[coloc_root], d)
  ids = jnp.arange(np_)
  order = jnp.lexsort((ids, jnp.where(node_mask, start, jnp.inf), dev))
  same = dev[order[1:]] == dev[order[:-1]]
  nxt = jnp.full(np_, -1, jnp.int32).at[order[:-1]].set(jnp.where(same, order[1:], -1))
  prv = jnp.full(np_, -1, jnp.int32).at[order[1:]].set(jnp.where(same, order[:-1], -1))
  return nxt, prv


@functools.partial(jax.jit, static_argnames=("kind", "batch"))
def _climb(pg: PaddedGraph, topo: Topology, key, ub, num_steps, patience, swap_prob,
           place0, prio0, movable, num_movable, edge_prob=0.0, relabel_prob=0.0, *,
           kind: str, batch: int):
  """The whole hill climb: at most `num_steps` (traced) batches of `batch` moves.

  edge_prob: the share of relocations drawn along an edge (a random edge's consumer group
  moves to its producer's device, or the other way round) instead of a random group to a
  random other device; 0 draws exactly what it drew before the option existed.
  relabel_prob: the share of moves that swap two devices' whole loads (every op on device a
  goes to b and every op on b to a, priorities kept): on a topology whose links differ it maps
  a partition onto better links in one move, where single relocations would first have to pass
  through worse placements; 0 draws what it drew before the option existed."""
  TRACES["local_search"] += 1
  d = topo.speed.shape[0]
  np_ = place0.shape[0]
  num_real = jnp.sum(pg.node_mask).astype(jnp.int32)
  num_edges = jnp.sum(pg.edge_mask).astype(jnp.int32)  # the real edges come first
  rows = jnp.arange(batch)

  def pick(x, n):  # uniform integer in [0, n) from a uniform x in [0, 1)
    return jnp.minimum((x * n).astype(jnp.int32), n - 1)

  def score(place, prio):
    res = simulate_padded(pg, topo, place, prio)
    obj = objectives.get_objective(kind).value(res.makespan, res.peak_memory, res.oom,
                                               topo.mem_capacity, ub)
    if kind == "peak_memory":
      tie = jnp.sum(res.peak_memory, -1)
    else:
      tie = jnp.sum(jnp.where(pg.node_mask, res.finish, 0.0), -1)
    return obj.astype(jnp.float32), tie.astype(jnp.float32), res.start

  def body(c: _Climb):
    u = jax.random.uniform(jax.random.fold_in(key, c.step), (batch, 4))
    swap = (u[:, 0] < swap_prob) if d > 1 else jnp.ones(batch, bool)
    op = movable[pick(u[:, 1], num_movable)]
    new_dev = (c.place[op] + 1 + pick(u[:, 2], max(d - 1, 1))) % d
    # along an edge: one end's group joins the other end's device (own key: the draws above
    # stay those of edge_prob 0)
    v = jax.random.uniform(jax.random.fold_in(jax.random.fold_in(key, c.step), 1), (batch, 3))
    e = pick(v[:, 1], jnp.maximum(num_edges, 1))
    up = v[:, 2] < 0.5
    mover = pg.coloc_root[jnp.where(up, pg.senders[e], pg.receivers[e])]
    target = c.place[pg.coloc_root[jnp.where(up, pg.receivers[e], pg.senders[e])]]
    along = (v[:, 0] < edge_prob) & (num_edges > 0) & (c.place[mover] != target)
    op, new_dev = jnp.where(along, mover, op), jnp.where(along, target, new_dev)
    place = jnp.broadcast_to(c.place, (batch, np_))
    place = place.at[rows, op].set(jnp.where(swap, c.place[op], new_dev))
    # a swap of two devices' loads (own key as above); it keeps the priorities
    w = jax.random.uniform(jax.random.fold_in(jax.random.fold_in(key, c.step), 2), (batch, 3))
    relabel = (w[:, 0] < relabel_prob) & (d > 1)
    da = pick(w[:, 1], d)
    db = (da + 1 + pick(w[:, 2], max(d - 1, 1))) % d
    swapped = jnp.where(c.place[None, :] == da[:, None], db[:, None],
                        jnp.where(c.place[None, :] == db[:, None], da[:, None], c.place[None, :]))
    place = jnp.where(relabel[:, None] & pg.node_mask[None, :], swapped, place)
    swap = swap & ~relabel
    nxt, prv = _neighbours(c.place, c.start, pg.coloc_root, pg.node_mask, d)
    i = pick(u[:, 3], num_real)
    j = jnp.where(nxt[i] >= 0, nxt[i], jnp.where(prv[i] >= 0, prv[i], i))
    j = jnp.where(swap, j, i)  # relocations keep the priorities
    prio = jnp.broadcast_to(c.prio, (batch, np_))
    prio = prio.at[rows, i].set(c.prio[j]).at[rows, j].set(c.prio[i])
    first = c.step == 0  # row 0 of the first batch scores the starting action itself
    keep = first & (rows == 0)
    place = jnp.where(keep[:, None], c.place, place)
    prio = jnp.where(keep[:, None], c.prio, prio)
    obj, tie, start = score(place, prio)
    b = jnp.lexsort((rows, tie, obj))[0]  # best of the batch: objective, then tie, then row
    better = (obj[b] < c.obj) | ((obj[b] == c.obj) & (tie[b] < c.tie))
    return _Climb(
        place=jnp.where(better, place[b], c.place), prio=jnp.where(better, prio[b], c.prio),
        start=jnp.where(better, start[b], c.start), obj=jnp.where(better, obj[b], c.obj),
        tie=jnp.where(better, tie[b], c.tie),
        start_obj=jnp.where(first, obj[0], c.start_obj), step=c.step + 1,
        stall=jnp.where(better | first, 0, c.stall + 1),
        improvements=c.improvements + jnp.where(better & ~first, 1, 0))

  def cond(c: _Climb):
    return (c.step < num_steps) & ((patience <= 0) | (c.stall < patience))

  # Before the first simulation the schedule is the priority order (per device).
  start0 = jnp.where(pg.node_mask, -prio0, jnp.inf).astype(jnp.float32)
  inf = jnp.float32(jnp.inf)
  init = _Climb(place=place0, prio=prio0, start=start0, obj=inf, tie=inf, start_obj=inf,
                step=jnp.int32(0), stall=jnp.int32(0), improvements=jnp.int32(0))
  return jax.lax.while_loop(cond, body, init)


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


def _dense_rank(prio: np.ndarray) -> np.ndarray:
  """Priorities as float32-exact dense ranks (same order and ties): swaps then move ranks."""
  _, rank = np.unique(np.asarray(prio, np.float64), return_inverse=True)
  return rank.reshape(-1).astype(np.float32)


def _climb_inputs(problem: Problem, placement, priority):
  """(padded graph, place0 (Np,), prio0 (Np,) dense ranks, movable roots (Np,), count) of a
  climb from the action (placement, priority) of `problem`'s graph."""
  g = problem.graph
  pg = padded(g)
  np_, n = pg.num_nodes_padded, g.num_nodes
  place0 = np.zeros(np_, np.int32)
  place0[:n] = np.asarray(placement, np.int64)[g.colocation_root()]
  prio0 = np.zeros(np_, np.float32)
  prio0[:n] = _dense_rank(priority)
  return (pg, place0, prio0) + movable_roots(g, np_)


def movable_roots(graph, num_nodes_padded: int):
  """(movable (Np,) int32: the colocation roots first, then zeros; their count, int32): the ops
  a climb relocates (moving a root moves its group)."""
  roots = np.flatnonzero(graph.colocation_root() == np.arange(graph.num_nodes))
  movable = np.zeros(num_nodes_padded, np.int32)
  movable[:roots.size] = roots
  return movable, jnp.int32(roots.size)


def timed_climb(problem: Problem, placement, priority, seconds: float, *, swap_prob: float,
                batch: int = 64, chunk_seconds: float = 2.0, kick: float = 0.0,
                edge_prob: float = 0.0,
                relabel_prob: float = 0.0) -> Tuple[np.ndarray, np.ndarray, Dict[str, float]]:
  """`local_search`'s hill climb from a given action for about `seconds` of wall time.

  Returns (placement (N,), priority (N,), info). Runs `_climb` in calls of about
  `chunk_seconds` (the first, of 4 steps, compiles and times a step; the wall clock is read
  between calls, never inside the jitted loop); each call starts from the previous one's action
  with the key folded with the call's index and scores its start first, so the answer is never
  worse than the given action. swap_prob 0 keeps the priority (placement methods). edge_prob:
  the share of relocations drawn along an edge; relabel_prob: the share of moves that swap two
  devices' loads (both `_climb`).

  kick > 0 makes it an iterated local search: when a call ends without lowering the objective
  of its own start (a local optimum of single moves, or a plateau), the next call starts from
  the best action of all calls so far with round(kick x movable ops) of them (at least one)
  moved to other devices at random (priorities kept); the best action of all calls is returned.
  info: start_objective, best_objective, steps, calls, improvements, kicks, seconds.
  """
  if not 0.0 <= swap_prob <= 1.0:
    raise ValueError(f"timed_climb: swap_prob must be in [0, 1], got {swap_prob}")
  if batch < 1:
    raise ValueError(f"timed_climb: batch must be >= 1, got {batch}")
  if not 0.0 <= edge_prob <= 1.0:
    raise ValueError(f"timed_climb: edge_prob must be in [0, 1], got {edge_prob}")
  if not 0.0 <= relabel_prob <= 1.0:
    raise ValueError(f"timed_climb: relabel_prob must be in [0, 1], got {relabel_prob}")
  if not 0.0 <= kick <= 1.0:
    raise ValueError(f"timed_climb: kick must be a share of the movable ops in [0, 1], got "
                     f"{kick}")
  t0 = time.perf_counter()
  pg, place, prio, movable, num_movable = _climb_inputs(problem, placement, priority)
  key, ub = jax.random.key(problem.seed, impl="rbg"), jnp.float32(problem.upper_bound())
  rng = np.random.default_rng(problem.seed)  # the kicks' draws (host side, between calls)
  d, roots = problem.topology.num_devices, np.asarray(movable)[:int(num_movable)]
  num_kick = max(1, int(round(kick * roots.size)))
  steps, calls, done, improvements, kicks, start_obj = 4, 0, 0, 0, 0, None
  best = (np.inf, np.inf, place, prio)  # (objective, tie, place, prio) of the best call end
  while True:
    t1 = time.perf_counter()
    c = _climb(pg, problem.topology, jax.random.fold_in(key, calls), ub, jnp.int32(steps),
               jnp.int32(0), jnp.float32(swap_prob), place, prio, movable, num_movable,
               jnp.float32(edge_prob), jnp.float32(relabel_prob), kind=problem.objective,
               batch=batch)
    place, prio = c.place, c.prio
    obj, tie = float(c.obj), float(c.tie)  # blocks: the call is done
    start_obj = float(c.start_obj) if start_obj is None else start_obj
    calls, done, improvements = calls + 1, done + steps, improvements + int(c.improvements)
    stuck = not obj < float(c.start_obj)  # the call lowered nothing from its own start
    if (obj, tie) < best[:2]:
      best = (obj, tie, place, prio)
    if kick > 0 and d > 1 and stuck:  # a local optimum: restart from the best, perturbed
      place = np.array(best[2])
      ops = rng.choice(roots, size=min(num_kick, roots.size), replace=False)
      place[ops] = (place[ops] + rng.integers(1, d, size=ops.size)) % d
      prio, kicks = best[3], kicks + 1
    now = time.perf_counter()
    per_step = (now - t1) / steps
    left = seconds - (now - t0)
    if left < per_step:
      break
    steps = max(1, int(min(left, chunk_seconds) / per_step))
  g = problem.graph
  n = g.num_nodes
  obj, _, place, prio = best
  return (np.asarray(place[:n], np.int64)[g.colocation_root()],  # groups follow their root
          np.asarray(prio[:n], np.float64),
          {"start_objective": start_obj, "best_objective": obj, "steps": done, "calls": calls,
           "improvements": improvements, "kicks": kicks, "seconds": time.perf_counter() - t0})


@register("local_search", "joint",
          "hill climbing from GP + DFS: relocate a colocation group / swap schedule neighbours",
          start="gp_dfs", evaluations=5000, batch=64, swap_prob=0.3, patience=0)
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
  k = min(k, budget)
  steps = budget // k
  start, prio = _start_action(problem, str(config["start"]))
  pg, place0, prio0, movable, num_movable = _climb_inputs(problem, start.placement, prio)
  c = _climb(pg, problem.topology, jax.random.key(problem.seed, impl="rbg"),
             jnp.float32(problem.upper_bound()), jnp.int32(steps), jnp.int32(patience),
             jnp.float32(swap_prob), place0, prio0, movable, num_movable,
             kind=problem.objective, batch=k)
  g, n = problem.graph, problem.graph.num_nodes
  done = int(c.step)
  return Proposal(
      placement=np.asarray(c.place[:n], np.int64)[g.colocation_root()],  # groups follow
      priority=np.asarray(c.prio[:n], np.float64),
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
  prios = [_order_priority(XLA_ORDERS[k](problem.graph)) for k in names]
  place = np.asarray(problem.placement, np.int64)
  # One action per call: the batch shape `solve` re-simulates with, so no second compile.
  values = [float(_objective_of(problem, place, p)[0]) for p in prios]
  best = int(np.argmin(values))  # first minimum: list, then dfs, then post_order
  return Proposal(problem.placement, prios[best], evaluations=len(names),
                  info={"chosen": names[best],
                        "objectives": {k: float(v) for k, v in zip(names, values)}})
