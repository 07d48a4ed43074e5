"""REGAL's guided BRKGA (Paliwal et al., ICLR 2020): BRKGA whose random keys come from per-op
Beta distributions and whose crossover bias is per op (normative semantics: docs/regal.md).

It is `go_jax.methods.evolution._brkga_run` itself, given a `Guide` (no second BRKGA): the
search is ONE jit, and the plain BRKGA is exactly the guide alpha = beta = 1, bias = elite_bias.

  guide = make_guide(alpha, beta, bias)             # (Np, D + 1), (Np, D + 1), (Np,) numpy
  prop = search(problem, guide, brkga_config)       # a methods.Proposal, like brkga's
  best = batched_best(pg, topo, keys, ub, guides, ...)   # (G, R) for training, one jit

Key draws (inverse CDF, so a guided run consumes exactly the uniforms u of the plain run with
the same seed: common random numbers, which make REGAL's reward far less noisy): a key of op i,
slot k is F^-1(u) of Beta(alpha[i, k], beta[i, k]); exactly u where alpha = beta = 1,
u ** (1 / alpha) where beta = 1, 1 - (1 - u) ** (1 / beta) where alpha = 1 (closed forms), and
otherwise bisection on the regularized incomplete beta function (BISECTION_STEPS steps, float32
resolution; compiled only for guides built with `closed_form=False`).
Crossover: a child takes key (i, k) from its elite parent when a random byte is below
`threshold[i]` = min(round(256 * bias[i]), 256), the plain BRKGA's coin with a per-op bias.

Polish (config `polish`, a fraction of the budget, 0: none; docs/regal.md section 4.2): the
BRKGA runs its whole generations within budget - floor(polish * budget) evaluations, and every
evaluation they leave goes to `local_search`'s hill climb (go_jax/methods/climb.py) from the
guided BRKGA's best, in the same jit, in whole batches of `polish_batch` moves with swap
probability `polish_swap`, the share `polish_peak` of them aimed at the memory peak (the
climb's `peak_prob`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Dict

import flax
import jax
import jax.numpy as jnp
import numpy as np

from go_jax.methods import Problem, Proposal
from go_jax.methods import evolution
from go_jax.methods import climb as climb_lib
from simulator import sharding as sharding_lib
from simulator.padding import PaddedGraph
from simulator.simulate import padded
from simulator.topology import Topology

BISECTION_STEPS = 30  # general Beta quantiles: interval halvings (2**-30 < float32 spacing)


def bias_threshold(bias):
  """Per-op elite-key coin thresholds in 1/256 (int32), as BRKGA quantises elite_bias."""
  return jnp.minimum(jnp.round(jnp.asarray(bias, jnp.float32) * 256), 256).astype(jnp.int32)


def beta_quantile(u, alpha, beta, closed_form: bool = True):
  """F^-1(u) of Beta(alpha, beta), elementwise (see the module docstring); u itself where
  alpha = beta = 1. `closed_form`: every pair has alpha = 1 or beta = 1 (no bisection)."""
  one_a, one_b = alpha == 1.0, beta == 1.0
  high = u ** (1.0 / alpha)  # Beta(a, 1): CDF x**a
  low = 1.0 - (1.0 - u) ** (1.0 / beta)  # Beta(1, b): CDF 1 - (1 - x)**b
  x = jnp.where(one_b, high, low)
  if not closed_form:
    a, b = jnp.broadcast_to(alpha, u.shape), jnp.broadcast_to(beta, u.shape)

    def halve(_, bounds):
      lo, hi = bounds
      mid = 0.5 * (lo + hi)
      below = jax.scipy.special.betainc(a, b, mid) < u
      return jnp.where(below, mid, lo), jnp.where(below, hi, mid)

    lo, hi = jax.lax.fori_loop(0, BISECTION_STEPS, halve,
                               (jnp.zeros_like(u), jnp.ones_like(u)))
    x = jnp.where(one_a | one_b, x, 0.5 * (lo + hi))
  return jnp.where(one_a & one_b, u, x)


@flax.struct.dataclass
class Guide:
  """Per-op key distributions and crossover bias of a guided BRKGA (padded ops included)."""
  alpha: jnp.ndarray  # (Np, D + 1) float32 > 0: Beta alpha of each op's D affinity + priority key
  beta: jnp.ndarray  # (Np, D + 1) float32 > 0: Beta beta of the same keys
  threshold: jnp.ndarray  # (Np,) int32 in [0, 256]: coin byte < threshold -> elite parent's key
  closed_form: bool = flax.struct.field(pytree_node=False, default=True)  # alpha=1 or beta=1

  def draw(self, u):
    """Keys (..., Np, D + 1) from uniforms u of the same shape."""
    return beta_quantile(u, self.alpha, self.beta, self.closed_form).astype(u.dtype)


def make_guide(alpha, beta, bias) -> Guide:
  """A Guide from host arrays: alpha, beta (Np, D + 1) > 0 and bias (Np,) in [0, 1].

  Raises:
    ValueError: shapes that do not pair up, non-finite or non-positive Beta parameters, or a
      bias outside [0, 1].
  """
  alpha, beta = np.asarray(alpha, np.float32), np.asarray(beta, np.float32)
  bias = np.asarray(bias, np.float64)
  if alpha.ndim != 2 or alpha.shape != beta.shape or bias.shape != alpha.shape[:1]:
    raise ValueError(f"guide: alpha and beta must be (Np, D + 1) and bias (Np,), got "
                     f"{alpha.shape}, {beta.shape} and {bias.shape}")
  for name, x in (("alpha", alpha), ("beta", beta)):
    if not np.all(np.isfinite(x) & (x > 0)):
      raise ValueError(f"guide: {name} must be finite and > 0")
  if not np.all((bias >= 0) & (bias <= 1)):
    raise ValueError("guide: bias must be in [0, 1]")
  closed = bool(np.all((alpha == 1) | (beta == 1)))
  return Guide(alpha=jnp.asarray(alpha), beta=jnp.asarray(beta),
               threshold=bias_threshold(bias), closed_form=closed)


def uniform_guide(num_nodes_padded: int, num_devices: int, elite_bias: float) -> Guide:
  """The guide of the plain BRKGA: Beta(1, 1) keys, bias = elite_bias on every op."""
  shape = (num_nodes_padded, num_devices + 1)
  return make_guide(np.ones(shape), np.ones(shape), np.full(num_nodes_padded, elite_bias))


@functools.partial(jax.jit, static_argnames=("kind", "population", "elites", "mutants",
                                             "elite_bias", "scan_len", "sharding", "batch",
                                             "climb_sharding"))
def _polished_run(pg: PaddedGraph, topo: Topology, key, ub, num_gens, seed_keys, seed_mask,
                  guide, polish_key, polish_steps, swap_prob, movable, num_movable,
                  peak_prob, *,
                  kind: str, population: int, elites: int, mutants: int, elite_bias: float,
                  scan_len: int, sharding, batch: int, climb_sharding):
  """The guided BRKGA, then the hill climb from its best chromosome: one jit (each split
  across the devices as its own batch allows: `sharding`, `climb_sharding`)."""
  pop, best = evolution._brkga_run(  # pylint: disable=protected-access
      pg, topo, key, ub, num_gens, seed_keys, seed_mask, kind=kind, population=population,
      elites=elites, mutants=mutants, elite_bias=elite_bias, scan_len=scan_len,
      sharding=sharding, guide=guide)
  d = topo.speed.shape[0]
  keys = pop.keys[0]
  place0 = jnp.argmax(keys[:, :d], -1).astype(jnp.int32)[pg.coloc_root]  # groups: root's
  place0 = jnp.where(pg.node_mask, place0, 0)
  climb = climb_lib.hill_climb(
      pg, topo, polish_key, ub, polish_steps, jnp.int32(0), swap_prob, place0, keys[:, d],
      movable, num_movable, peak_prob=peak_prob, kind=kind, batch=batch,
      sharding=climb_sharding)
  return best, climb


def _polish_settings(config: Dict[str, Any], budget: int, name: str):
  """(evaluations kept from the BRKGA, batch, swap probability, peak-directed share) from
  the config, checked; none kept (no polish) where the share holds less than one batch."""
  frac = float(config.get("polish") or 0.0)
  batch = 16 if config.get("polish_batch") is None else int(config["polish_batch"])
  swap = 0.5 if config.get("polish_swap") is None else float(config["polish_swap"])
  peak = float(config.get("polish_peak") or 0.0)
  if not 0.0 <= frac < 1.0:
    raise ValueError(f"{name}: polish must be a fraction of the budget in [0, 1), got {frac}")
  if batch < 1:
    raise ValueError(f"{name}: polish_batch must be >= 1, got {batch}")
  if not 0.0 <= swap <= 1.0:
    raise ValueError(f"{name}: polish_swap must be in [0, 1], got {swap}")
  if not 0.0 <= peak <= 1.0:
    raise ValueError(f"{name}: polish_peak must be in [0, 1], got {peak}")
  kept = int(frac * budget)
  return (kept if kept >= batch else 0), batch, swap, peak


def search(problem: Problem, guide: Guide, config: Dict[str, Any],
           name: str = "guided_brkga", seed_actions=(), seed_slots: int = 0,
           spent: int = 0) -> Proposal:
  """The guided BRKGA on one problem, with brkga's config fields (population, elite_frac,
  mutant_frac, elite_bias, evaluations) and budget semantics; `seed_heuristics` is not used
  (REGAL's populations are drawn from the guide). With `uniform_guide` and no polish its answer
  and info are exactly those of `methods.solve("brkga", ...)` with the same seed and config.
  With a polish (module docstring) the BRKGA runs within the rest of the budget and info adds
  brkga_objective, polish_evaluations and polish_improvements. `seed_actions` [(placement (N,),
  priority (N,))] become the first generation's first chromosomes (`evolution.encode_action`;
  info `seeded`), in max(seed_slots, len(seed_actions), 3) slots, so a fixed `seed_slots` keeps
  one compile whatever the number of actions. `spent`: evaluations the caller already took
  from the method's budget (regal's hint), named with the polish's share when too little is
  left for one generation, so that the message quotes the budget the user gave."""
  budget = evolution.search_budget(problem, config)
  polish, batch, swap, peak = _polish_settings(config, budget, name)
  per_gen = evolution.generation_evaluations(config, name)
  if (spent or polish) and budget - polish < per_gen:
    taken = ([f"{spent} for the hint"] if spent else []) + (
        [f"{polish} for the polish (polish={config['polish']:g})"] if polish else [])
    raise ValueError(f"{name}: budget {budget + spent} leaves {budget - polish} evaluations "
                     f"for the BRKGA after {' and '.join(taken)}, below one generation "
                     f"({per_gen} = population - elites); raise the budget"
                     + (" or lower polish" if polish else ""))
  if polish:
    problem = dataclasses.replace(problem, budget=budget - polish)
  p, e, mu, bias, gens = evolution._brkga_generations(  # pylint: disable=protected-access
      problem, config, name)
  # the climb: the polish's share and what the BRKGA's whole generations leave of theirs
  steps = (budget - gens * (p - e)) // batch if polish else 0
  pg = padded(problem.graph)
  n, d = problem.graph.num_nodes, problem.topology.num_devices
  want = (pg.num_nodes_padded, d + 1)
  if tuple(guide.alpha.shape) != want:
    raise ValueError(f"{name}: the guide is for {tuple(guide.alpha.shape)} keys, the problem "
                     f"needs {want} (padded ops, devices + 1)")
  seed_keys, seed_mask = evolution._seed_keys(problem, pg.num_nodes_padded, False)  # pylint: disable=protected-access
  slots = max(seed_slots, len(seed_actions))
  if slots > p - e:
    raise ValueError(f"{name}: {slots} seed actions for a first generation of {p - e} "
                     "chromosomes")
  if slots > seed_keys.shape[0]:  # more slots: a fixed count per config (shapes: one compile)
    extra = slots - seed_keys.shape[0]
    seed_keys = np.concatenate([seed_keys, np.zeros((extra,) + seed_keys.shape[1:],
                                                    seed_keys.dtype)])
    seed_mask = np.concatenate([seed_mask, np.zeros(extra, bool)])
  for i, (place, prio) in enumerate(seed_actions):  # first generation's first chromosomes
    seed_keys[i] = evolution.encode_action(place, prio, d, pg.num_nodes_padded)
    seed_mask[i] = True
  ub = jnp.float32(problem.upper_bound())
  run = dict(kind=problem.objective, population=p, elites=e, mutants=mu, elite_bias=bias,
             scan_len=evolution.step_bucket(gens), sharding=sharding_lib.batch_sharding(p - e))
  info = dict(generations=gens, population=p, elites=e, mutants=mu,
              seeded=len(seed_actions))
  if not polish:
    pop, best = evolution._brkga_run(  # pylint: disable=protected-access
        pg, problem.topology, evolution.loop_key(problem), ub, jnp.int32(gens),
        seed_keys, seed_mask, guide=guide, **run)
    keys = np.asarray(pop.keys[0])
    best = np.asarray(best, np.float64)[:gens]
    return Proposal(placement=np.argmax(keys[:n, :d], axis=-1),
                    priority=keys[:n, d].astype(np.float64), evaluations=gens * (p - e),
                    info=dict(info, best_per_generation=best.tolist(),
                              best_objective=float(best[-1])))
  movable, num_movable = climb_lib.movable_roots(problem.graph, pg.num_nodes_padded)
  best, climb = _polished_run(
      pg, problem.topology, evolution.loop_key(problem), ub, jnp.int32(gens), seed_keys,
      seed_mask, guide, jax.random.fold_in(evolution.loop_key(problem), 1), jnp.int32(steps),
      jnp.float32(swap), movable, num_movable, jnp.float32(peak), batch=batch,
      climb_sharding=sharding_lib.batch_sharding(batch), **run)
  best = np.asarray(best, np.float64)[:gens]
  placement, priority = climb_lib.action_of(problem.graph, climb.place, climb.prio)
  return Proposal(placement=placement, priority=priority,
                  evaluations=gens * (p - e) + steps * batch,
                  info=dict(info, best_per_generation=best.tolist(),
                            brkga_objective=float(best[-1]), best_objective=float(climb.obj),
                            polish_evaluations=steps * batch,
                            polish_improvements=int(climb.improvements)))


def batched_best(pg: PaddedGraph, topo: Topology, keys, ub, guides: Guide, *, kind: str,
                 population: int, elites: int, mutants: int, elite_bias: float,
                 generations: int):
  """(G, R) best objective of R guided BRKGA runs on each of G instances (traceable).

  pg, topo: stacked instances (leading axis G, one padded size and device count); keys (G,)
  PRNG keys (one BRKGA seed per instance, shared by its R runs: common random numbers, since
  the key is not batched over runs); ub (G,) upper bounds; guides: Guide fields (G, R, ...).
  Each generation's population is split across every device of the run, as in `search`
  (`simulator.sharding`; G and R stay whole on each device).
  """
  np_ = pg.cost.shape[-1]
  d = topo.speed.shape[-1]
  seed_keys = jnp.zeros((evolution.NUM_SEEDS, np_, d + 1), jnp.float32)
  seed_mask = jnp.zeros((evolution.NUM_SEEDS,), bool)
  sharding = sharding_lib.batch_sharding(population - elites)

  def instance(pg_i, topo_i, key_i, ub_i, guides_i):
    def run(guide):
      pop, _ = evolution._brkga_run(  # pylint: disable=protected-access
          pg_i, topo_i, key_i, ub_i, jnp.int32(generations), seed_keys, seed_mask,
          kind=kind, population=population, elites=elites, mutants=mutants,
          elite_bias=elite_bias, scan_len=generations, guide=guide,
          sharding=sharding)
      return pop.fitness[0]
    return jax.vmap(run)(guides_i)

  return jax.vmap(instance)(pg, topo, keys, ub, guides)
