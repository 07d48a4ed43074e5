"""Simulated annealing over joint placement + priority actions: the "sa" baseline.

sa: K chains of simulated annealing over actions. A move relocates one colocation group (its
  root op, which the simulator's rule 1 makes the whole group follow) to another device, or,
  with probability `swap_prob` (always when D = 1), swaps the priorities of two ops. All K
  proposals are scored in one batched call; Metropolis acceptance on the relative change
  (new - cur) / cur with a geometric temperature schedule from `t_start` to `t_end`, so the
  temperatures do not depend on the objective's unit. Returns the best action any chain saw.

Budget: steps S = budget // K (the budget as in `evolution.py`: `budget` if given, else the
config's `evaluations`); step 0 evaluates the K starting actions (uniform random placements,
the seeding heuristics first with `seed_heuristics`, critical-path priorities), the others one
move each.

Separate from `evolution.py` (the genetic algorithm BRKGA and its seeded variant) because it is
another search with its own state and moves; what the two share (one jitted `lax.scan` per run,
the budget, the "rbg" loop key, the power-of-two scan length, the batch split across devices,
the heuristic seeds, the trace counter `evolution.TRACES`) is imported from `evolution.py`,
whose docstring describes it (compilation, sharding, randomness).
"""

from __future__ import annotations

import functools
from typing import Tuple

import flax
import jax
import jax.numpy as jnp
import numpy as np

from go_jax.methods import Problem, Proposal, register
from go_jax.methods.evolution import (NUM_SEEDS, TRACES, heuristic_actions, loop_key,
                                      objective_values, padded_rank, search_budget, step_bucket)
from simulator import sharding as sharding_lib
from simulator.padding import PaddedGraph
from simulator.simulate import padded
from simulator.topology import Topology


@flax.struct.dataclass
class _Chains:
  """SA loop state of K chains: current and best-seen action of each."""
  place: jnp.ndarray  # (K, Np) int32 current placement
  prio: jnp.ndarray  # (K, Np) float32 current priority
  obj: jnp.ndarray  # (K,) current objective; +inf before step 0
  best_place: jnp.ndarray  # (K, Np) int32
  best_prio: jnp.ndarray  # (K, Np) float32
  best_obj: jnp.ndarray  # (K,)
  accepted: jnp.ndarray  # () int32 accepted moves (steps >= 1), for diagnostics


def _propose(c: _Chains, u, movable, num_movable, num_real, d: int, swap_prob: float):
  """One move per chain from uniforms u (K, 5): a colocation group to another device, or a
  priority swap of two ops."""
  k = c.place.shape[0]
  rows = jnp.arange(k)

  def pick(x, n):  # uniform integer in [0, n) from a uniform x in [0, 1)
    return jnp.minimum((x * n).astype(jnp.int32), n - 1)

  swap = (u[:, 0] < swap_prob) if d > 1 else jnp.ones(k, bool)
  op = movable[pick(u[:, 1], num_movable)]
  shift = 1 + pick(u[:, 2], max(d - 1, 1))
  cur = c.place[rows, op]
  place = c.place.at[rows, op].set(jnp.where(swap, cur, (cur + shift) % d))
  i, j = pick(u[:, 3], num_real), pick(u[:, 4], num_real)
  pi, pj = c.prio[rows, i], c.prio[rows, j]
  prio = c.prio.at[rows, i].set(jnp.where(swap, pj, pi))
  prio = prio.at[rows, j].set(jnp.where(swap, pi, prio[rows, j]))
  return place, prio


@functools.partial(jax.jit, static_argnames=("kind", "swap_prob", "t_start", "t_end",
                                             "scan_len", "sharding"))
def _sa_run(pg: PaddedGraph, topo: Topology, key, ub, num_steps, init_place, init_prio,
            movable, num_movable, *, kind: str, swap_prob: float, t_start: float,
            t_end: float, scan_len: int, sharding=None):
  """The whole SA run: `num_steps` (traced) batched steps in a scan of `scan_len`.

  init_place (K, Np) int32 and init_prio (K, Np) float32 start the chains; movable (Np,) int32
  lists the colocation roots (first num_movable entries). Returns the final chains and the best
  objective over all chains after each scan step (scan_len,).
  """
  TRACES["sa"] += 1
  k = init_place.shape[0]
  d = topo.speed.shape[0]
  num_real = jnp.sum(pg.node_mask).astype(jnp.int32)
  inf = jnp.full((k,), jnp.inf, jnp.float32)
  init = _Chains(place=init_place, prio=init_prio, obj=inf, best_place=init_place,
                 best_prio=init_prio, best_obj=inf, accepted=jnp.int32(0))
  ratio = t_end / t_start
  denom = jnp.maximum(num_steps - 2, 1).astype(jnp.float32)

  def anneal(c: _Chains, t):
    u = jax.random.uniform(jax.random.fold_in(key, t), (k, 6))  # one draw per step
    moved_place, moved_prio = _propose(c, u[:, :5], movable, num_movable, num_real, d,
                                       swap_prob)
    place = jnp.where(t == 0, c.place, moved_place)  # step 0 scores the starting actions
    prio = jnp.where(t == 0, c.prio, moved_prio)
    new = objective_values(pg, topo, place, prio, kind, ub, sharding).astype(jnp.float32)
    temp = t_start * ratio ** (jnp.maximum(t - 1, 0).astype(jnp.float32) / denom)
    rel = (new - c.obj) / jnp.maximum(jnp.abs(c.obj), 1e-30)
    accept = (new <= c.obj) | (u[:, 5] < jnp.exp(-rel / temp))
    better = new < c.best_obj
    return _Chains(
        place=jnp.where(accept[:, None], place, c.place),
        prio=jnp.where(accept[:, None], prio, c.prio),
        obj=jnp.where(accept, new, c.obj),
        best_place=jnp.where(better[:, None], place, c.best_place),
        best_prio=jnp.where(better[:, None], prio, c.best_prio),
        best_obj=jnp.where(better, new, c.best_obj),
        accepted=c.accepted + jnp.where(t > 0, jnp.sum(accept), 0).astype(jnp.int32))

  def step(c: _Chains, t):
    c = jax.lax.cond(t < num_steps, anneal, lambda x, _: x, c, t)
    return c, jnp.min(c.best_obj)

  return jax.lax.scan(step, init, jnp.arange(scan_len))


def _sa_start(problem: Problem, chains: int, np_: int, seeded: bool):
  """(K, Np) int32 starting placements (uniform random, heuristics first if seeded) and
  (K, Np) float32 priorities (critical path)."""
  rng = np.random.default_rng(problem.seed)
  d = problem.topology.num_devices
  place = rng.integers(0, d, (chains, np_)).astype(np.int32)
  heur, mask = heuristic_actions(problem, np_, seeded)
  m = min(chains, NUM_SEEDS)
  place[:m] = np.where(mask[:m, None], heur[:m], place[:m])
  prio = np.broadcast_to(padded_rank(problem, np_), (chains, np_)).copy()
  return place, prio


def _movable_ops(graph, np_: int) -> Tuple[np.ndarray, int]:
  """(Np,) int32 colocation roots (ops whose placement counts) first, and their number."""
  roots = np.flatnonzero(graph.colocation_root() == np.arange(graph.num_nodes))
  out = np.zeros(np_, np.int32)
  out[:roots.size] = roots
  return out, int(roots.size)


@register("sa", "joint",
          "simulated annealing, K parallel chains: move a colocation group / swap priorities",
          chains=64, evaluations=5000, t_start=0.05, t_end=5e-4, swap_prob=0.1,
          seed_heuristics=False)
def simulated_annealing(problem: Problem, config) -> Proposal:
  """See the module docstring; info holds the best objective after every step."""
  k = int(config["chains"])
  t0, t1, swap = float(config["t_start"]), float(config["t_end"]), float(config["swap_prob"])
  if k < 1:
    raise ValueError(f"sa: chains must be >= 1, got {k}")
  if not (t0 > 0 and t1 > 0):
    raise ValueError(f"sa: temperatures must be > 0, got t_start={t0}, t_end={t1}")
  if not 0.0 <= swap <= 1.0:
    raise ValueError(f"sa: swap_prob must be in [0, 1], got {swap}")
  budget = search_budget(problem, config)
  if budget < k:
    raise ValueError(f"sa: budget {budget} is below one step ({k} chains); lower chains")
  steps = budget // k
  pg = padded(problem.graph)
  np_ = pg.num_nodes_padded
  place0, prio0 = _sa_start(problem, k, np_, bool(config["seed_heuristics"]))
  movable, num_movable = _movable_ops(problem.graph, np_)
  ub = jnp.float32(problem.upper_bound())
  chains, best = _sa_run(pg, problem.topology, loop_key(problem), ub, jnp.int32(steps),
                         place0, prio0, movable, jnp.int32(num_movable),
                         kind=problem.objective, swap_prob=swap, t_start=t0, t_end=t1,
                         scan_len=step_bucket(steps), sharding=sharding_lib.batch_sharding(k))
  i = int(np.argmin(np.asarray(chains.best_obj)))
  n = problem.graph.num_nodes
  best = np.asarray(best, np.float64)[:steps]
  moves = (steps - 1) * k
  # sliced on the host: a jnp slice to n would compile once per graph size
  return Proposal(placement=np.asarray(chains.best_place)[i, :n],
                  priority=np.asarray(chains.best_prio)[i, :n].astype(np.float64),
                  evaluations=steps * k,
                  info={"best_per_step": best.tolist(), "steps": steps, "chains": k,
                        "best_objective": float(best[-1]),
                        "accept_rate": float(chains.accepted) / moves if moves else 0.0})
