"""The method registry (design.md section 7): every placement / scheduling method behind one call.

  sol = solve("heft", graph, topology, objective="makespan", seed=0, budget=None, **overrides)
  sol = solve("xla_fusion", graph, topology, placement=p, priority=q, decisions=fuse)  # fusion

A method is a function `(problem, config) -> Proposal` registered under a name with its default
config. `solve` times the search, then re-simulates the proposal with `simulator.simulate`, so
a `Solution`'s objective is always exactly what the simulator gives for its placement and
priority, whatever the method believed. Methods never crash on infeasible memory: the
solution comes back with `feasible=False` and a reason.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import jax
import numpy as np

from go_jax import objectives
from simulator import runtime
from simulator.graph import CompGraph, upward_rank
from simulator.reference import check_actions, check_time_range
from simulator.simulate import simulate
from simulator.topology import Topology


@dataclasses.dataclass(frozen=True)
class Problem:
  """What a method is asked to solve."""
  graph: CompGraph
  topology: Topology
  objective: str  # a key of objectives.OBJECTIVES
  seed: int
  budget: Optional[int]  # simulator evaluations allowed (None: the method's default)
  placement: Optional[np.ndarray]  # (N,) fixed placement, for scheduling and fusion methods
  priority: Optional[np.ndarray] = None  # (N,) fixed priority, for fusion methods

  @property
  def key(self):
    return jax.random.PRNGKey(self.seed)

  def upper_bound(self) -> float:
    return objectives.get_objective(self.objective).upper_bound(self.graph, self.topology)


@dataclasses.dataclass(frozen=True)
class Proposal:
  """A method's answer before it is checked by the simulator."""
  placement: np.ndarray  # (N,) int device ids
  priority: Optional[np.ndarray] = None  # (N,) float; None: the given or critical-path one
  evaluations: int = 0  # simulator calls (one action = one evaluation)
  info: Dict[str, Any] = dataclasses.field(default_factory=dict)
  fuse: Optional[np.ndarray] = None  # (N,) bool fuse requests (design.md 4.1); None: no fusion
  # The graph the placement and priority belong to, when it is not the problem's graph: the
  # expanded graph of a partitioning method (design.md 4.2). None: the problem's graph.
  graph: Optional[CompGraph] = None


@dataclasses.dataclass(frozen=True)
class Solution:
  """A method's result, as the simulator scores it."""
  method: str
  objective_kind: str
  placement: np.ndarray  # (N,) int
  priority: np.ndarray  # (N,) float
  objective: float  # lower is better; infeasible ones rank below every feasible one
  makespan: float  # seconds
  peak_memory: np.ndarray  # (D,) bytes
  feasible: bool
  search_seconds: float
  evaluations: int
  lower_bound: float  # best known lower bound of the objective on this graph and topology
  gap: float  # objective / lower_bound - 1 (inf where the bound is 0)
  reason: str = ""  # why infeasible, or solver notes
  info: Dict[str, Any] = dataclasses.field(default_factory=dict)
  fuse: Optional[np.ndarray] = None  # (N,) bool fuse requests where the method fuses
  # The graph the placement, priority and fuse mask belong to and that was simulated: the
  # problem's graph, or the expanded graph of a partitioning method (design.md 4.2).
  graph: Optional[CompGraph] = None


@dataclasses.dataclass(frozen=True)
class MethodSpec:
  fn: Callable[[Problem, Dict[str, Any]], Proposal]
  kind: str  # "placement", "schedule" / "fusion" (need problem.placement), "joint" or
  #            "partition" (answers on its own expanded graph, design.md 4.2)
  description: str
  defaults: Dict[str, Any]
  # Whether the method's answer comes from a trained policy (a pretrained checkpoint, or one
  # trained on the instance: HDP): it is what a comparison measures, never one of the fast
  # baselines it is measured against (go-jax-transfer refuses it there).
  learned: bool = False


KINDS = ("placement", "schedule", "joint", "fusion", "partition")

# Every registered method by name. Read it through `get` / `available`, which load the
# built-in methods first; only `register` writes it.
METHODS: Dict[str, MethodSpec] = {}


def register(name: str, kind: str, description: str, *, learned: bool = False, **defaults):
  """Decorator registering `fn(problem, config) -> Proposal` under `name`; `learned` marks a
  method whose answer comes from a trained policy (`MethodSpec.learned`, `learned_methods`)."""
  if kind not in KINDS:
    raise ValueError(f"method kind must be one of {KINDS}, got {kind!r}")

  def wrap(fn):
    if name in METHODS:
      raise ValueError(f"method '{name}' is registered twice")
    METHODS[name] = MethodSpec(fn, kind, description, dict(defaults), bool(learned))
    return fn
  return wrap


def available(kinds: Optional[Sequence[str]] = None) -> Dict[str, str]:
  """Method name -> one-line description of every registered method (of the given kinds:
  a subset of `KINDS`; None: all)."""
  _load_builtin_methods()
  if kinds is not None:
    bad = sorted(set(kinds) - set(KINDS))
    if bad:
      raise ValueError(f"unknown method kind(s) {bad}; kinds: {list(KINDS)}")
  return {k: v.description for k, v in sorted(METHODS.items())
          if kinds is None or v.kind in kinds}


def get(name: str) -> MethodSpec:
  """The registered method `name`, after loading the built-in methods.

  Raises:
    ValueError: `name` is not registered (the message lists the available names), or it is a
      built-in method whose optional dependency is missing (the message names the package).
  """
  _load_builtin_methods()
  spec = METHODS.get(name)
  if spec is not None:
    return spec
  if name in _UNAVAILABLE:
    raise ValueError(f"method '{name}' is not available: {_UNAVAILABLE[name]}")
  raise ValueError(f"unknown method {name!r}; available: {sorted(METHODS)}")


def learned_methods() -> List[str]:
  """The registered methods marked learned (`MethodSpec.learned`), sorted."""
  _load_builtin_methods()
  return sorted(n for n, spec in METHODS.items() if spec.learned)


def usable(names: Sequence[str], what: str = "methods") -> Tuple[List[str], Dict[str, str]]:
  """(the registered ones of `names`, in order and without repeats; {name: why} of the built-in
  ones that are not available here, e.g. metis without pymetis). Sweeps and comparisons skip
  the latter with a warning, so that one config serves installs with and without the optional
  extras; a name that is neither is a typo and stops them.

  Raises:
    ValueError: a name that is not a method at all (the message says `what` it was given as and
      lists the registered names).
  """
  _load_builtin_methods()
  unknown = [n for n in names if n not in METHODS and n not in _UNAVAILABLE]
  if unknown:
    raise ValueError(f"{what}: unknown method(s) {unknown}; available: {sorted(METHODS)}")
  skipped = {n: _UNAVAILABLE[n] for n in names if n not in METHODS}
  return [n for n in dict.fromkeys(names) if n in METHODS], skipped


def unavailable() -> Dict[str, str]:
  """Built-in modules and methods that could not be loaded -> why (e.g. a missing optional
  dependency and the package to install); empty when everything loaded."""
  _load_builtin_methods()
  return dict(_UNAVAILABLE)


def evaluate(graph: CompGraph, topology: Topology, placement, priority,
             objective: str = "makespan", fuse=None) -> Dict[str, Any]:
  """Simulates one action (with its fuse mask, if any) and scores it: objective, makespan,
  peak_memory, feasible."""
  return evaluate_batch(graph, topology, placement, priority, objective, fuse=fuse)[0]


def evaluate_batch(graph: CompGraph, topology: Topology, placements, priorities,
                   objective: str = "makespan", fuse=None) -> List[Dict[str, Any]]:
  """`evaluate` of B actions ((B, N) placements and priorities) in one simulator call."""
  res = simulate(graph, topology, placements, priorities, fuse=fuse)
  ub = objectives.get_objective(objective).upper_bound(graph, topology)
  values = np.asarray(objectives.objective_of(objective, res, topology, ub), np.float64)
  return [{"objective": float(values[b]), "makespan": float(res.makespan[b]),
           "peak_memory": np.asarray(res.peak_memory[b], np.float64),
           "feasible": not bool(res.oom[b])} for b in range(len(values))]


def anytime_curve(points, offset: float = 0.0) -> List[Dict[str, float]]:
  """A method's `info["curve"]`: the best objective found so far over wall time.

  `points` are dicts with "seconds" and "best_objective" (or "objective"): a search loop's
  history rows, a learned method's stages; rows without both are skipped. `offset` is added
  to every time (e.g. the seconds spent loading a checkpoint before the loop's clock
  started). Returns [{"seconds", "best_objective"}] sorted by time, keeping only the points
  where the best so far improves (the first point always)."""
  pts = []
  for p in points:
    value = p.get("best_objective", p.get("objective"))
    if p.get("seconds") is None or value is None:
      continue
    pts.append((float(p["seconds"]) + offset, float(value)))
  curve: List[Dict[str, float]] = []
  for t, v in sorted(pts):
    if not curve or v < curve[-1]["best_objective"]:
      curve.append({"seconds": t, "best_objective": v})
  return curve


class Refused(ValueError):
  """A method cannot serve this instance as asked, though every option is valid: a learned
  policy on a topology with more devices than it serves, or fresh parameters without
  fine-tuning. `go-jax-place` then runs the baselines alone and says why; any other ValueError
  (a bad option value) stops it."""


# The simulator's objective is float32 and the bounds float64: an objective at the bound can
# come out a rounding below it. A gap above -GAP_ROUNDING is that and reads 0; one below is kept
# (it would be a wrong bound, which the tests look for).
GAP_ROUNDING = 1e-6


def bound_gap(objective: float, bound: float) -> float:
  """objective / bound - 1 (bound > 0), 0.0 where that is within GAP_ROUNDING below 0: the gap
  `solve` gives a Solution and the harness stores in a row."""
  gap = float(objective) / float(bound) - 1.0
  return 0.0 if -GAP_ROUNDING < gap < 0 else gap


def integral(value) -> bool:
  """Whether an option value is an integer: an int (not a bool) or a whole float."""
  return (isinstance(value, (int, np.integer)) and not isinstance(value, bool)) or (
      isinstance(value, (float, np.floating)) and float(value).is_integer())


# The largest seed `solve` takes. Every seed source keeps at most 31 bits of it: JAX's keys
# (`jax.random.key`, without x64) the low 32 bits, CP-SAT's random_seed the seed mod 2**31 and
# METIS a C int, so a larger seed silently gave another seed's answer (brkga with seed 2**32 is
# seed 0's), or a traceback from deep inside a library (2**63 and up).
MAX_SEED = 2**31 - 1


def check_seed(seed, where: str) -> int:
  """A sweep config's seed, checked before its first cell: ValueError (naming `where`) unless
  it is an int (not a bool, not a float; a NumPy integer counts, as in `solve`) in
  [0, MAX_SEED]; every cell's `solve` would refuse it (or, above MAX_SEED, silently repeat
  another seed's answer). Returns it as an int."""
  if isinstance(seed, np.integer):
    seed = int(seed)
  if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
    raise ValueError(f"{where}: seed must be an integer in [0, {MAX_SEED}], got {seed!r}")
  return seed


def _check_arguments(name: str, spec: "MethodSpec", seed, budget, overrides) -> None:
  """ValueError for a seed that is not an integer in [0, MAX_SEED], a budget that is not an
  integer >= 1 (or None), and a fractional value for an option whose default is an integer."""
  if not integral(seed) or seed < 0:
    raise ValueError(f"method '{name}': seed must be an integer >= 0, got {seed!r}")
  if seed > MAX_SEED:
    raise ValueError(f"method '{name}': seed must be an integer >= 0 and <= {MAX_SEED} "
                     f"(2**31 - 1: the random number generators keep 31 bits of it, so a "
                     f"larger seed repeats a smaller one's answer), got {seed!r}")
  if budget is not None and (not integral(budget) or budget < 1):
    raise ValueError(f"method '{name}': budget (simulator evaluations) must be an integer >= 1 "
                     f"or None, got {budget!r}")
  for key, value in overrides.items():
    default = spec.defaults.get(key)
    if (isinstance(default, int) and not isinstance(default, bool)
        and isinstance(value, (float, np.floating)) and not float(value).is_integer()):
      raise ValueError(f"method '{name}': option {key}={value!r} must be an integer "
                       f"(default {default})")


def solve(name: str, graph: CompGraph, topology: Topology, *, objective: str = "makespan",
          seed: int = 0, budget: Optional[int] = None, placement=None,
          **overrides) -> Solution:
  """Runs method `name` and returns its simulator-checked `Solution`.

  Schedule and fusion methods take a fixed `placement`; fusion methods also take a fixed
  `priority=(N,)` (default: the critical-path one) unless they return their own. For other
  kinds `priority` is an ordinary method option (m-TOPO has one), so it is read here only for
  fusion methods.
  """
  spec = get(name)
  # A loop of solves in one process (a script, a notebook: not only the sweep executors, which
  # call it after every cell) keeps every compiled program; a learned method's holds about
  # 4,000 memory mappings, so about 16 such solves reach Linux's per-process limit and XLA
  # fails with "Cannot allocate memory". Drop JAX's caches before that (simulator/runtime.py).
  runtime.release_compiled_code_if_needed()
  priority = overrides.pop("priority", None) if spec.kind == "fusion" else None
  objectives.get_objective(objective)
  unknown = sorted(set(overrides) - set(spec.defaults))
  if unknown:
    raise ValueError(f"method '{name}' has no option(s) {unknown}; options: "
                     f"{sorted(spec.defaults)}")
  if spec.kind in ("schedule", "fusion") and placement is None:
    raise ValueError(f"method '{name}' works on a fixed placement: pass placement=(N,) ids")
  _check_arguments(name, spec, seed, budget, overrides)
  check_time_range(graph, topology)  # before a search that the final simulation would refuse
  fixed = fixed_prio = None
  if placement is not None:  # integer ids in range, as `simulate` checks them
    fixed, fixed_prio = check_actions(
        graph, topology, placement, np.zeros(np.shape(placement)) if priority is None
        else priority)
    if fixed.ndim != 1:
      raise ValueError(f"method '{name}': placement must have shape (N,), got {fixed.shape}")
    fixed_prio = None if priority is None else fixed_prio
  problem = Problem(graph, topology, objective, int(seed), budget, fixed, fixed_prio)
  config = dict(spec.defaults, **overrides)
  t0 = time.perf_counter()
  prop = spec.fn(problem, config)
  seconds = time.perf_counter() - t0
  place = np.asarray(prop.placement if spec.kind not in ("schedule", "fusion") else fixed,
                     np.int64)
  sim_graph = graph if prop.graph is None else prop.graph  # a partitioning's expanded graph
  if place.shape == (sim_graph.num_nodes,):  # rule 1: each op where it runs (its group's root)
    place = place[sim_graph.colocation_root()]
  for stage in prop.info.get("stages") or ():  # a learned method's answers along the way too
    stage_place = np.asarray(stage.get("placement"))
    if stage_place.shape == (sim_graph.num_nodes,):
      stage["placement"] = stage_place.astype(np.int64)[sim_graph.colocation_root()]
  if prop.priority is not None:
    prio = np.asarray(prop.priority, np.float64)
  else:
    prio = upward_rank(sim_graph) if fixed_prio is None else fixed_prio
  fuse = None if prop.fuse is None else np.asarray(prop.fuse, bool)
  scored = evaluate(sim_graph, topology, place, prio, objective, fuse=fuse)
  bounded = (sim_graph, topology) if fuse is None else objectives.fusion_relaxation(
      sim_graph, topology)  # a fused answer beats the unfused graph's bounds
  lb = objectives.get_objective(objective).lower_bound(*bounded)["bound"]
  # a float32 objective a rounding below the float64 bound is at it (bound_gap)
  gap = bound_gap(scored["objective"], lb) if lb > 0 else float("inf")
  reason = prop.info.get("reason", "")
  if not scored["feasible"]:
    over = np.flatnonzero(scored["peak_memory"] > topology.mem_capacity)
    reason = (reason + "; " if reason else "") + (
        f"out of memory on device(s) {over.tolist()}: peak "
        f"{scored['peak_memory'][over].tolist()} > capacity "
        f"{topology.mem_capacity[over].tolist()} bytes")
  return Solution(method=name, objective_kind=objective, placement=place, priority=prio,
                  objective=scored["objective"], makespan=scored["makespan"],
                  peak_memory=scored["peak_memory"], feasible=scored["feasible"],
                  search_seconds=seconds, evaluations=int(prop.evaluations),
                  lower_bound=float(lb), gap=float(gap), reason=reason,
                  info=dict(prop.info), fuse=fuse, graph=sim_graph)


# Modules whose import registers the built-in methods.
BUILTIN_MODULES = ("go_jax.methods.simple", "go_jax.methods.list_scheduling",
                   "go_jax.methods.exact", "go_jax.methods.exact_memory",
                   "go_jax.methods.partition",
                   "go_jax.methods.evolution", "go_jax.methods.annealing", "go_jax.methods.xla",
                   "go_jax.methods.learned", "go_jax.methods.regal_baselines",
                   "go_jax.methods.tuned", "go_jax.methods.regal", "go_jax.methods.fusion",
                   "go_jax.methods.hdp", "go_jax.methods.placeto",
                   "go_jax.methods.partitioning")

# Built-in modules with an optional dependency: module -> (pip package, methods it registers).
# Such a module imports its dependency at the top (or, where that import is slow, checks with
# importlib.util.find_spec that it is there and imports it on first use); when that fails, only
# these methods are missing, and `get` says what to install.
OPTIONAL_DEPENDENCIES: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "go_jax.methods.partition": ("pymetis", ("metis",)),
    "go_jax.methods.exact": ("ortools", ("cpsat",)),
    "go_jax.methods.exact_memory": ("ortools", ("cpsat_memory",)),
}

_OWN_PACKAGES = ("go_jax", "simulator", "experiments")
_UNAVAILABLE: Dict[str, str] = {}  # module or method -> why it is not registered
_loaded = False
_loading = False


def _load_module(module: str) -> None:
  """Imports one built-in module. On ImportError of a third-party package (a missing optional
  dependency) removes whatever it registered before failing and records why in
  `_UNAVAILABLE`; any other error, an ImportError of the project's own modules included, is a
  bug and propagates (after the same clean-up, so that a retry does not register twice)."""
  before = set(METHODS)
  try:
    importlib.import_module(module)
  except ImportError as e:
    for name in set(METHODS) - before:
      del METHODS[name]
    missing = (e.name or "").partition(".")[0]
    if missing in _OWN_PACKAGES or not (missing or module in OPTIONAL_DEPENDENCIES):
      raise  # a module of the project itself is missing or broken: a bug, not an option
    package, names = OPTIONAL_DEPENDENCIES.get(module, (missing, ()))
    _UNAVAILABLE[module] = (f"{module} could not be imported ({type(e).__name__}: {e}); "
                            f"install {package} (pip install {package}) to use its methods")
    for name in names:
      _UNAVAILABLE[name] = f"it needs {package} (pip install {package}): {e}"
  except BaseException:
    for name in set(METHODS) - before:
      del METHODS[name]
    raise


def _load_builtin_methods() -> None:
  """Imports the modules that register the built-in methods (once per process; a no-op when
  called again while they are being imported)."""
  global _loaded, _loading
  if _loaded or _loading:
    return
  _loading = True
  try:
    for module in BUILTIN_MODULES:
      _load_module(module)
  finally:
    _loading = False
  _loaded = True
