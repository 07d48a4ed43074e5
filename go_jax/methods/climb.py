"""The hill climb of `local_search` (docs/regal_baselines.md), also the polish of
`regal_hint` (go_jax/regal/guided.py) and of the learned methods' fine-tuning
(go_jax/methods/learned.py, `timed_climb`).

From an action, each step proposes a batch of moves (relocate a colocation group, swap two
schedule neighbours' priorities, and the options below), scores the batch with one
`simulate_padded` call and moves to its best when that is lexicographically better on
(objective, tie); the whole climb is one jitted `lax.while_loop` (`hill_climb`).
`timed_climb` runs it in calls of a few seconds for a wall-clock budget.
"""

from __future__ import annotations

import functools
import time
from typing import Dict, Tuple

import flax
import jax
import jax.numpy as jnp
import numpy as np

from go_jax import objectives
from go_jax.methods import Problem
from go_jax.methods import peak_moves
from simulator import sharding as sharding_lib
from simulator.padding import PaddedGraph
from simulator.simulate import padded, simulate_padded
from simulator.topology import Topology

TRACES: Dict[str, int] = {"local_search": 0}  # traces of `hill_climb` (tests: one per shape)


@flax.struct.dataclass
class _Climb:
  """Hill-climbing loop state (padded op axis Np)."""
  place: jnp.ndarray  # (Np,) int32 current placement
  prio: jnp.ndarray  # (Np,) float32 current priority
  start: jnp.ndarray  # (Np,) float32 start times of the current action (+inf on padding)
  # (Np,) float32 bytes each op holds at the current action's memory peak
  # (`peak_moves.peak_holders`; zeros where `peak_prob` is 0): recomputed only when the climb
  # moves, since it depends on the current action alone
  held: jnp.ndarray
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


@functools.partial(jax.jit, static_argnames=("kind", "batch", "sharding"))
def hill_climb(pg: PaddedGraph, topo: Topology, key, ub, num_steps, patience, swap_prob,
               place0, prio0, movable, num_movable, edge_prob=0.0, relabel_prob=0.0,
               peak_prob=0.0, *, kind: str, batch: int, sharding=None):
  """The whole hill climb: at most `num_steps` (traced) batches of `batch` moves.

  sharding: `simulator.sharding.batch_sharding(batch)` splits each batch's simulations across
  the run's devices (`map_batch`), as BRKGA's generations are split; the moves are drawn
  replicated, so the climb is the same on any device count (None: one device, as before).

  edge_prob: the share of relocations drawn along an edge (a random edge's consumer group
  moves to its producer's device, or the other way round) instead of a random group to a
  random other device; 0 draws exactly what it drew before the option existed.
  relabel_prob: the share of moves that swap two devices' whole loads (every op on device a
  goes to b and every op on b to a, priorities kept): on a topology whose links differ it maps
  a partition onto better links in one move, where single relocations would first have to pass
  through worse placements; 0 draws what it drew before the option existed.
  peak_prob: the share of moves (relocations and swaps alike) whose op is drawn in proportion
  to the bytes it holds at the current action's memory peak (`peak_moves.peak_holders`)
  instead of uniformly; never on the first batch (nothing is simulated yet); 0 draws what it
  drew before the option existed."""
  TRACES["local_search"] += 1
  d = topo.speed.shape[0]
  np_ = place0.shape[0]
  num_real = jnp.sum(pg.node_mask).astype(jnp.int32)
  num_edges = jnp.sum(pg.edge_mask).astype(jnp.int32)  # the real edges come first
  rows = jnp.arange(batch)

  def pick(x, n):  # uniform integer in [0, n) from a uniform x in [0, 1)
    return jnp.minimum((x * n).astype(jnp.int32), n - 1)

  def score(place, prio):
    res = sharding_lib.map_batch(simulate_padded, sharding, (pg, topo), (place, prio))
    obj = objectives.get_objective(kind).value(res.makespan, res.peak_memory, res.oom,
                                               topo.mem_capacity, ub)
    if kind == "peak_memory":
      tie = jnp.sum(res.peak_memory, -1)
    else:
      tie = jnp.sum(jnp.where(pg.node_mask, res.finish, 0.0), -1)
    return (obj.astype(jnp.float32), tie.astype(jnp.float32), res.start,
            res.finish.astype(jnp.float32), res.peak_memory.astype(jnp.float32))

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
    # peak-directed: the op (relocated or swapped) drawn by the bytes it holds at the current
    # action's peak (own key as above)
    p = jax.random.uniform(jax.random.fold_in(jax.random.fold_in(key, c.step), 3), (batch, 3))
    aimed = (p[:, 0] < peak_prob) & (c.step > 0)
    aimed_i = peak_moves.draw(c.held, p[:, 1], op)
    aimed_op = pg.coloc_root[aimed_i]
    moved = aimed & ~swap
    op = jnp.where(moved, aimed_op, op)
    new_dev = jnp.where(moved, (c.place[aimed_op] + 1 + pick(p[:, 2], max(d - 1, 1))) % d,
                        new_dev)
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
    i = jnp.where(aimed & swap, aimed_i, i)
    j = jnp.where(nxt[i] >= 0, nxt[i], jnp.where(prv[i] >= 0, prv[i], i))
    j = jnp.where(swap, j, i)  # relocations keep the priorities
    prio = jnp.broadcast_to(c.prio, (batch, np_))
    prio = prio.at[rows, i].set(c.prio[j]).at[rows, j].set(c.prio[i])
    first = c.step == 0  # row 0 of the first batch scores the starting action itself
    keep = first & (rows == 0)
    place = jnp.where(keep[:, None], c.place, place)
    prio = jnp.where(keep[:, None], c.prio, prio)
    obj, tie, start, finish, peak = score(place, prio)
    b = jnp.lexsort((rows, tie, obj))[0]  # best of the batch: objective, then tie, then row
    better = (obj[b] < c.obj) | ((obj[b] == c.obj) & (tie[b] < c.tie))
    new_place = jnp.where(better, place[b], c.place)
    held = jax.lax.cond(  # only where the option is on and the action changed
        better & (peak_prob > 0),
        lambda: peak_moves.peak_holders(pg, new_place[pg.coloc_root], start[b], finish[b],
                                        peak[b]),
        lambda: c.held)
    return _Climb(
        place=new_place, prio=jnp.where(better, prio[b], c.prio),
        start=jnp.where(better, start[b], c.start), held=held,
        obj=jnp.where(better, obj[b], c.obj),
        tie=jnp.where(better, tie[b], c.tie),
        start_obj=jnp.where(first, obj[0], c.start_obj), step=c.step + 1,
        stall=jnp.where(better | first, 0, c.stall + 1),
        improvements=c.improvements + jnp.where(better & ~first, 1, 0))

  def cond(c: _Climb):
    return (c.step < num_steps) & ((patience <= 0) | (c.stall < patience))

  # Before the first simulation the schedule is the priority order (per device).
  start0 = jnp.where(pg.node_mask, -prio0, jnp.inf).astype(jnp.float32)
  inf = jnp.float32(jnp.inf)
  init = _Climb(place=place0, prio=prio0, start=start0, held=jnp.zeros(np_, jnp.float32),
                obj=inf, tie=inf, start_obj=inf,
                step=jnp.int32(0), stall=jnp.int32(0), improvements=jnp.int32(0))
  return jax.lax.while_loop(cond, body, init)


def _dense_rank(prio: np.ndarray) -> np.ndarray:
  """Priorities as float32-exact dense ranks (same order and ties): swaps then move ranks."""
  _, rank = np.unique(np.asarray(prio, np.float64), return_inverse=True)
  return rank.reshape(-1).astype(np.float32)


def climb_inputs(problem: Problem, placement, priority):
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


def action_of(graph, place, prio) -> Tuple[np.ndarray, np.ndarray]:
  """(placement (N,) int64, priority (N,) float64) of a climb's padded (Np,) place / prio: each
  colocation group follows its root; sliced on the host (a jnp slice to N would compile once
  per graph size)."""
  n = graph.num_nodes
  return (np.asarray(place)[:n].astype(np.int64)[graph.colocation_root()],
          np.asarray(prio)[:n].astype(np.float64))


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
  """The hill climb from a given action for about `seconds` of wall time.

  Returns (placement (N,), priority (N,), info). Runs `hill_climb` in calls of about
  `chunk_seconds` (the first, of 4 steps, compiles and times a step; the wall clock is read
  between calls, never inside the jitted loop); each call starts from the previous one's action
  with the key folded with the call's index and scores its start first, so the answer is never
  worse than the given action. swap_prob 0 keeps the priority (placement methods). edge_prob:
  the share of relocations drawn along an edge; relabel_prob: the share of moves that swap two
  devices' loads (both `hill_climb`).

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
  pg, place, prio, movable, num_movable = climb_inputs(problem, placement, priority)
  sharding = sharding_lib.batch_sharding(batch)
  if sharding is not None:  # as each call's output comes back: one compile serves every call
    place, prio = sharding_lib.put_replicated((place, prio))
  key, ub = jax.random.key(problem.seed, impl="rbg"), jnp.float32(problem.upper_bound())
  rng = np.random.default_rng(problem.seed)  # the kicks' draws (host side, between calls)
  d, roots = problem.topology.num_devices, np.asarray(movable)[:int(num_movable)]
  num_kick = max(1, int(round(kick * roots.size)))
  steps, calls, done, improvements, kicks, start_obj = 4, 0, 0, 0, 0, None
  best = (np.inf, np.inf, place, prio)  # (objective, tie, place, prio) of the best call end
  while True:
    t1 = time.perf_counter()
    c = hill_climb(pg, problem.topology, jax.random.fold_in(key, calls), ub, jnp.int32(steps),
                   jnp.int32(0), jnp.float32(swap_prob), place, prio, movable, num_movable,
                   jnp.float32(edge_prob), jnp.float32(relabel_prob), kind=problem.objective,
                   batch=batch, sharding=sharding)
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
      if sharding is not None:  # placed as the calls' outputs are: no second compile
        place = sharding_lib.put_replicated(place)
    now = time.perf_counter()
    per_step = (now - t1) / steps
    left = seconds - (now - t0)
    if left < per_step:
      break
    steps = max(1, int(min(left, chunk_seconds) / per_step))
  obj, _, place, prio = best
  placement, priority = action_of(problem.graph, place, prio)
  return (placement, priority,
          {"start_objective": start_obj, "best_objective": obj, "steps": done, "calls": calls,
           "improvements": improvements, "kicks": kicks, "seconds": time.perf_counter() - t0})
