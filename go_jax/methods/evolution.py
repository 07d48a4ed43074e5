"""Population search baselines: a biased random-key genetic algorithm (brkga, brkga_seeded) here,
and the search machinery it shares with simulated annealing (sa, in `annealing.py`).

Both are joint placement + scheduling searches whose whole run is ONE `jax.jit` call: a
`lax.scan` over generations (BRKGA) or annealing steps (SA) in which every step evaluates its
whole batch of candidate actions with one batched `simulate_padded` call. Nothing goes back to
the host between steps. The helpers both searches use (budget, loop PRNG key, scan-length
bucket, batched objective, heuristic seeds and critical-path priority) are public here;
`annealing.py` imports them, so the rules below hold for both.

brkga (Goncalves & Resende's BRKGA, the "BRKGA 5K" baseline of REGAL, Paliwal et al. 2020):
  A chromosome holds, for every op, D device-affinity keys and one priority key, all in [0, 1)
  (shape (Np, D + 1) over the padded ops). Decoding: device = argmax of the op's affinity keys
  (colocation is applied by the simulator, rule 1: only a group's lowest-id op matters);
  priority = the priority key. Each generation keeps the E = round(elite_frac * P) best
  chromosomes unchanged and NOT re-evaluated, adds Mu = round(mutant_frac * P) fresh random ones
  and P - E - Mu children of a uniformly drawn elite and non-elite parent, each key taken from
  the elite parent with probability `elite_bias` (quantised to 1/256: the coins are random
  bytes, to keep the RNG cheap). Because elites survive with their scores, the best objective
  never worsens.

sa: K chains of simulated annealing over actions (`annealing.py`'s docstring has its moves and
  acceptance rule).

Budgets are counted in simulator evaluations (one action = one evaluation): `budget` if given,
else the config's `evaluations` (default 5000, REGAL's "BRKGA 5K"). Only whole batches are
run and the budget is never exceeded:
  brkga: every generation, including the first, evaluates M = P - E new chromosomes, so
    generations G = budget // M (5000 with P = 100, E = 20: G = 62, 4960 evaluations). The
    first generation evaluates M random chromosomes; the other E of the initial population are
    random, unevaluated (objective +inf), rank last and only serve as non-elite parents once.
    This keeps the batch at M in every step, so the simulator is traced and compiled once.
  sa: steps S = budget // K (`annealing.py`).

Seeding (`seed_heuristics`, default False, so both stay the uninformed searches the learned
methods are compared with): when True the first batch also holds the expert contiguous split,
round-robin and the fastest single device, all with critical-path (upward rank) priority;
BRKGA encodes them as keys (affinity 0.75 on the chosen device, 0.25 elsewhere).

brkga_seeded: BRKGA whose first generation also holds the answers of other methods (option
  `seed_methods`, default "heft,m_etf,m_sct": the list schedulers), computed host-side before
  the one jitted search. Each answer is encoded so that decoding gives it back exactly: affinity
  0.75 on its device and 0.25 elsewhere; its priority replaced by its dense rank among the
  answer's distinct priorities, scaled into [0, 1) (order and ties kept, so the simulator runs
  the same schedule). The seeds are evaluated in generation 0 and the elites keep the best, so
  the result is never worse than the best seed. Same budget semantics as brkga; the seeding
  methods' own time counts in its search time, their evaluations (none for the list
  schedulers) in its evaluations.

Compilation: one executable per (graph bucket, topology size, population or chain count, step
bucket, objective, options). The graph, topology, upper bound, PRNG key and the number of steps
are traced arguments, and the scan length is the number of steps rounded up to a power of two
(steps past the real count are skipped with `lax.cond`), so other graphs of the same bucket,
other seeds and most other budgets reuse the executable, and generations never retrace.
Where several devices exist (`simulator.runtime.configure_cpu_devices` makes CPU cores devices;
`go_jax.distributed.initialize` joins several processes' devices) and they divide the batch,
each step's simulator batch is split across them (`simulator.sharding`; the same answer as on
one device, tests/test_sharding.py; speed: experiments/bench_sharding.py).

Randomness: deterministic per seed. The loops draw from JAX's "rbg" PRNG (XLA's
RngBitGenerator) keyed with `problem.seed` rather than from `problem.key` (threefry): threefry's
hash, inlined at every draw in the loop, made the XLA CPU compile about 4x slower, and compile
time, not run time, dominates these searches on small graphs.
"""

from __future__ import annotations

import functools
from typing import Dict, Tuple

import flax
import jax
import jax.numpy as jnp
import numpy as np

import go_jax.methods as registry
from go_jax import objectives, placements
from go_jax.methods import Problem, Proposal, register
from go_jax.methods import list_scheduling  # noqa: F401  registers brkga_seeded's default seeds
from go_jax.methods.simple import contiguous_split
from simulator.padding import PaddedGraph, bucket
from simulator import sharding as sharding_lib
from simulator.simulate import padded, simulate_padded
from simulator.topology import Topology

NUM_SEEDS = 3  # heuristic actions that `seed_heuristics` injects (fixed: shapes never change)

# Python-level trace counts of the jitted searches (brkga here, sa in annealing.py), for
# no-retrace tests.
TRACES: Dict[str, int] = {"brkga": 0, "sa": 0}


# ------------------------------------------------------------------ shared helpers (also sa's)
def search_budget(problem: Problem, config) -> int:
  budget = int(problem.budget if problem.budget is not None else config["evaluations"])
  if budget < 1:
    raise ValueError(f"budget (evaluations) must be >= 1, got {budget}")
  return budget


def loop_key(problem: Problem):
  """The searches' PRNG key: "rbg" seeded with problem.seed (see the module docstring)."""
  return jax.random.key(problem.seed, impl="rbg")


def step_bucket(steps: int) -> int:
  """Scan length for `steps` real steps: a power of two, so most budgets share one compile."""
  return bucket(steps, 1)


def objective_values(pg: PaddedGraph, topo: Topology, place, prio, kind: str, ub,
                      sharding=None):
  """(B,) objective of B actions (placement (B, Np) int, priority (B, Np) float); traceable.

  With a `sharding` the batch is split across devices inside the jitted loop; the actions are
  drawn replicated and each device simulates its part (`simulator.sharding.map_batch`), so
  the search is the same on any device count."""
  res = sharding_lib.map_batch(simulate_padded, sharding, (pg, topo), (place, prio))
  return objectives.get_objective(kind).value(res.makespan, res.peak_memory, res.oom,
                                              topo.mem_capacity, ub)


def _normalised_rank(graph) -> np.ndarray:
  """(N,) upward rank scaled into [0, 1): critical-path priority as a key."""
  rank = placements.upward_rank(graph)
  top = rank.max() if rank.size and rank.max() > 0 else 1.0
  return (rank / top * 0.999).astype(np.float32)


def heuristic_actions(problem: Problem, np_: int, enabled: bool):
  """(placement (NUM_SEEDS, Np) int32, mask (NUM_SEEDS,) bool) of the seeding heuristics."""
  g, topo = problem.graph, problem.topology
  out = np.zeros((NUM_SEEDS, np_), np.int32)
  if enabled:
    out[0, :g.num_nodes] = contiguous_split(g, topo.num_devices)
    out[1, :g.num_nodes] = placements.round_robin(g, topo)
    out[2, :g.num_nodes] = int(np.argmax(topo.speed))
  return out, np.full(NUM_SEEDS, enabled)


def padded_rank(problem: Problem, np_: int) -> np.ndarray:
  """(Np,) normalised upward rank, 0 on padded ops."""
  out = np.zeros(np_, np.float32)
  out[:problem.graph.num_nodes] = _normalised_rank(problem.graph)
  return out


# ------------------------------------------------------------------ BRKGA
@flax.struct.dataclass
class _Population:
  """BRKGA loop state: the population sorted by objective, best first."""
  keys: jnp.ndarray  # (P, Np, D + 1) float32 in [0, 1): D affinity keys + 1 priority key per op
  fitness: jnp.ndarray  # (P,) objective (lower is better); +inf = not evaluated


def _decode(keys, d: int):
  """Chromosomes (B, Np, D + 1) -> placement (B, Np) int32, priority (B, Np) float32."""
  return jnp.argmax(keys[..., :d], axis=-1).astype(jnp.int32), keys[..., d]


@functools.partial(jax.jit, static_argnames=("kind", "population", "elites", "mutants",
                                             "elite_bias", "scan_len", "sharding"))
def _brkga_run(pg: PaddedGraph, topo: Topology, key, ub, num_gens, seed_keys, seed_mask, *,
               kind: str, population: int, elites: int, mutants: int, elite_bias: float,
               scan_len: int, sharding=None, guide=None):
  """The whole BRKGA run: `num_gens` generations (traced) in a scan of `scan_len` steps.

  seed_keys (S, Np, D + 1) replace the first chromosomes of the first generation where
  seed_mask (S,) is set (S = NUM_SEEDS for brkga, the number of seeds for brkga_seeded).
  `guide` (REGAL's guided BRKGA, go_jax/regal/guided.py; None: plain BRKGA) maps the uniform
  keys of the initial population and the mutants to its per-op Beta draws (`guide.draw(u)`) and
  gives the per-op elite-key coin thresholds in 1/256 (`guide.threshold`, (Np,) int32).
  Returns the final sorted population and the best objective after each scan step (scan_len,).
  """
  TRACES["brkga"] += 1
  np_, d = pg.cost.shape[0], topo.speed.shape[0]
  shape = (np_, d + 1)
  new_n = population - elites  # chromosomes evaluated per generation
  children = new_n - mutants
  coin_threshold = min(int(round(elite_bias * 256)), 256)  # byte < threshold: elite's key
  k_init, k_loop = jax.random.split(key)
  draw = (lambda u: u) if guide is None else guide.draw
  threshold = coin_threshold if guide is None else guide.threshold[:, None]  # (Np, 1)
  init = _Population(keys=draw(jax.random.uniform(k_init, (population,) + shape)),
                     fitness=jnp.full((population,), jnp.inf, jnp.float32))

  def generation(pop: _Population, t):
    # XLA's CPU RNG costs ~25 ns per number, as much as the rest of a generation, so draw
    # few: float keys for the mutants only; the children's crossover coins are bytes, four per
    # 32-bit word (p = round(256 * elite_bias) / 256); one more word per child picks parents.
    k_mut, k_coin = jax.random.split(jax.random.fold_in(k_loop, t))
    mutant_keys = draw(jax.random.uniform(k_mut, (mutants,) + shape))
    words = -(-(d + 1) // 4)
    bits = jax.random.bits(k_coin, (children, np_ + 1, words), jnp.uint32)
    coins = jax.lax.bitcast_convert_type(bits[:, :np_], jnp.uint8).reshape(
        children, np_, 4 * words)[..., :d + 1]  # (C, Np, D + 1) uniform bytes
    take_elite = coins.astype(jnp.int32) < threshold
    pick = bits[:, np_, 0]  # (C,) uint32: high half elite parent, low half the other
    e_par = ((pick >> 16) * elites >> 16).astype(jnp.int32)
    n_par = elites + ((pick & 0xFFFF) * (population - elites) >> 16).astype(jnp.int32)
    child_keys = jnp.where(take_elite, pop.keys[e_par], pop.keys[n_par])
    bred = jnp.concatenate([mutant_keys, child_keys])  # (M, Np, D + 1)
    # First generation: the random initial population, with the heuristics seeded.
    m = min(seed_keys.shape[0], new_n)
    first = pop.keys[elites:].at[:m].set(
        jnp.where(seed_mask[:m, None, None], seed_keys[:m], pop.keys[elites:elites + m]))
    new = jnp.where(t == 0, first, bred)
    place, prio = _decode(new, d)
    fit = objective_values(pg, topo, place, prio, kind, ub, sharding).astype(jnp.float32)
    all_keys = jnp.concatenate([pop.keys[:elites], new])
    all_fit = jnp.concatenate([pop.fitness[:elites], fit])
    order = jnp.argsort(all_fit, stable=True)  # ties: survivors first (deterministic)
    return _Population(keys=all_keys[order], fitness=all_fit[order])

  def step(pop: _Population, t):
    pop = jax.lax.cond(t < num_gens, generation, lambda p, _: p, pop, t)
    return pop, pop.fitness[0]

  return jax.lax.scan(step, init, jnp.arange(scan_len))


def _seed_keys(problem: Problem, np_: int, enabled: bool):
  """Heuristic actions as chromosomes: (NUM_SEEDS, Np, D + 1) keys and (NUM_SEEDS,) mask."""
  d = problem.topology.num_devices
  place, mask = heuristic_actions(problem, np_, enabled)
  keys = np.where(np.arange(d) == place[..., None], 0.75, 0.25).astype(np.float32)
  prio = np.broadcast_to(padded_rank(problem, np_), (NUM_SEEDS, np_))[..., None]
  return np.concatenate([keys, prio], -1), mask


def _fraction_count(frac: float, population: int, name: str) -> int:
  if not 0.0 <= frac < 1.0:
    raise ValueError(f"brkga: {name} must be in [0, 1), got {frac}")
  return int(round(frac * population))


def encode_action(placement, priority, num_devices: int, np_: int) -> np.ndarray:
  """(Np, D + 1) float32 chromosome that `_decode` maps back to the same action.

  Affinity 0.75 on the op's device, 0.25 elsewhere (padded ops: device 0); the priority key is
  the dense rank of the op's priority among the distinct values, (rank + 0.5) / K in [0, 1), so
  the order and the ties (broken by op id in the simulator) are exactly those of `priority`.
  """
  placement = np.asarray(placement, np.int64)
  n = placement.shape[0]
  if n > np_ or np.any((placement < 0) | (placement >= num_devices)):
    raise ValueError(f"encode_action: placement must hold {n} <= {np_} device ids in "
                     f"[0, {num_devices})")
  place = np.zeros(np_, np.int64)
  place[:n] = placement
  keys = np.where(np.arange(num_devices) == place[:, None], 0.75, 0.25).astype(np.float32)
  values, rank = np.unique(np.asarray(priority, np.float64), return_inverse=True)
  prio = np.zeros((np_, 1), np.float32)
  prio[:n, 0] = (rank.reshape(-1) + 0.5) / values.size
  return np.concatenate([keys, prio], -1)


def _brkga_counts(config, name: str):
  """(population, elites, mutants, elite_bias) of a BRKGA config; ValueError if bad."""
  p = int(config["population"])
  e = max(1, _fraction_count(float(config["elite_frac"]), p, "elite_frac"))
  mu = _fraction_count(float(config["mutant_frac"]), p, "mutant_frac")
  bias = float(config["elite_bias"])
  if p < 2 or e + mu >= p:
    raise ValueError(f"{name}: population {p} must exceed elites ({e}) + mutants ({mu}); "
                     "lower elite_frac / mutant_frac or raise population")
  if not 0.0 <= bias <= 1.0:
    raise ValueError(f"{name}: elite_bias must be in [0, 1], got {bias}")
  return p, e, mu, bias


def generation_evaluations(config=None, name: str = "brkga") -> int:
  """Simulator evaluations of one BRKGA generation (population - elites: 80 with brkga's
  defaults) for `config` (None: the registered brkga defaults). A budget below it is refused
  by `solve("brkga", ...)`, so callers that pick budgets (REGAL's filter) check against it
  before any work. ValueError for a bad config, as brkga's."""
  if config is None:
    config = registry.METHODS["brkga"].defaults
  p, e, _, _ = _brkga_counts(config, name)
  return p - e


def _brkga_generations(problem: Problem, config, name: str):
  """(population, elites, mutants, elite_bias, generations) of a BRKGA run within the budget
  (shared by brkga and REGAL's guided BRKGA, go_jax/regal/guided.py)."""
  p, e, mu, bias = _brkga_counts(config, name)
  budget = search_budget(problem, config)
  per_gen = p - e
  if budget < per_gen:
    raise ValueError(f"{name}: budget {budget} is below one generation ({per_gen} = "
                     f"population - elites evaluations); lower population or raise the budget")
  return p, e, mu, bias, budget // per_gen


def _brkga_search(problem: Problem, config, name: str, seeds) -> Proposal:
  """Runs the jitted BRKGA with first-generation `seeds(np_) -> (keys (S, Np, D + 1), mask
  (S,), evaluations spent making them, info)`; info holds the best objective per generation."""
  p, e, mu, bias, gens = _brkga_generations(problem, config, name)
  pg = padded(problem.graph)
  seed_keys, seed_mask, seed_evals, seed_info = seeds(pg.num_nodes_padded)
  ub = jnp.float32(problem.upper_bound())
  pop, best = _brkga_run(pg, problem.topology, loop_key(problem), ub, jnp.int32(gens),
                         seed_keys, seed_mask, kind=problem.objective,
                         population=p, elites=e, mutants=mu, elite_bias=bias,
                         scan_len=step_bucket(gens), sharding=sharding_lib.batch_sharding(p - e))
  n, d = problem.graph.num_nodes, problem.topology.num_devices
  keys = np.asarray(pop.keys[0])
  place = np.argmax(keys[:n, :d], axis=-1)
  best = np.asarray(best, np.float64)[:gens]
  return Proposal(placement=place, priority=keys[:n, d].astype(np.float64),
                  evaluations=gens * (p - e) + seed_evals,
                  info=dict(seed_info, best_per_generation=best.tolist(), generations=gens,
                            best_objective=float(best[-1]), population=p, elites=e,
                            mutants=mu))


@register("brkga", "joint",
          "biased random-key genetic algorithm over device + priority keys (REGAL's BRKGA 5K)",
          population=100, elite_frac=0.2, mutant_frac=0.1, elite_bias=0.7, evaluations=5000,
          seed_heuristics=False)
def brkga(problem: Problem, config) -> Proposal:
  """See the module docstring; info holds the best objective after every generation."""
  def seeds(np_):
    keys, mask = _seed_keys(problem, np_, bool(config["seed_heuristics"]))
    return keys, mask, 0, {}
  return _brkga_search(problem, config, "brkga", seeds)


def seed_proposals(problem: Problem, names) -> Dict[str, Proposal]:
  """Host-side answers of the registered methods `names` on `problem` (their defaults)."""
  choices = sorted(k for k in registry.available(kinds=("placement", "joint"))
                   if k not in ("brkga", "brkga_seeded"))
  out = {}
  for name in names:
    if name not in choices:
      raise ValueError(f"brkga_seeded: seed method {name!r} is not a registered placement or "
                       f"joint method; choices: {choices}")
    spec = registry.get(name)
    sub = Problem(problem.graph, problem.topology, problem.objective, problem.seed, None, None)
    out[name] = spec.fn(sub, dict(spec.defaults))
  return out


def _seed_names(value) -> Tuple[str, ...]:
  names = tuple(x.strip() for x in (value.split(",") if isinstance(value, str) else value)
                if x.strip())
  if not names:
    raise ValueError("brkga_seeded: seed_methods must name at least one method, e.g. "
                     "'heft,m_etf,m_sct'")
  return names


@register("brkga_seeded", "joint",
          "BRKGA whose first population holds HEFT's, m-ETF's and m-SCT's answers",
          population=100, elite_frac=0.2, mutant_frac=0.1, elite_bias=0.7, evaluations=5000,
          seed_methods="heft,m_etf,m_sct", seed_heuristics=False)
def brkga_seeded(problem: Problem, config) -> Proposal:
  """BRKGA seeded with other methods' answers (module docstring); info["seeds"] names them."""
  names = _seed_names(config["seed_methods"])
  _brkga_counts(config, "brkga_seeded")  # bad options fail before the seeds are computed

  def seeds(np_):
    props = seed_proposals(problem, names)
    d = problem.topology.num_devices
    keys = [encode_action(prop.placement,
                          placements.upward_rank(problem.graph) if prop.priority is None
                          else prop.priority, d, np_) for prop in props.values()]
    mask = [True] * len(keys)
    if config["seed_heuristics"]:
      heur, heur_mask = _seed_keys(problem, np_, True)
      keys += list(heur)
      mask += heur_mask.tolist()
    evals = sum(int(prop.evaluations) for prop in props.values())
    return np.stack(keys), np.asarray(mask), evals, {"seeds": list(props)}
  return _brkga_search(problem, config, "brkga_seeded", seeds)

