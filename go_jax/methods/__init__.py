"""The method registry (DESIGN section 7): every placement / scheduling method behind one call.

  sol = solve("heft", graph, topology, objective="makespan", seed=0, budget=None, **overrides)

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
from typing import Any, Callable, Dict, Optional

import jax
import numpy as np

from go_jax import objectives
from go_jax.placements import upward_rank
from simulator.graph import CompGraph
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
  placement: Optional[np.ndarray]  # (N,) fixed placement, for scheduling-only methods

  @property
  def key(self):
    return jax.random.PRNGKey(self.seed)

  def upper_bound(self) -> float:
    return objectives.get_objective(self.objective).upper_bound(self.graph, self.topology)


@dataclasses.dataclass(frozen=True)
class Proposal:
  """A method's answer before it is checked by the simulator."""
  placement: np.ndarray  # (N,) int device ids
  priority: Optional[np.ndarray] = None  # (N,) float; None: critical-path priority
  evaluations: int = 0  # simulator calls (one action = one evaluation)
  info: Dict[str, Any] = dataclasses.field(default_factory=dict)


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


@dataclasses.dataclass(frozen=True)
class MethodSpec:
  fn: Callable[[Problem, Dict[str, Any]], Proposal]
  kind: str  # "placement", "schedule" (needs problem.placement) or "joint"
  description: str
  defaults: Dict[str, Any]


METHODS: Dict[str, MethodSpec] = {}


def register(name: str, kind: str, description: str, **defaults):
  """Decorator registering `fn(problem, config) -> Proposal` under `name`."""
  if kind not in ("placement", "schedule", "joint"):
    raise ValueError(f"method kind must be placement, schedule or joint, got {kind!r}")

  def wrap(fn):
    if name in METHODS:
      raise ValueError(f"method '{name}' is registered twice")
    METHODS[name] = MethodSpec(fn, kind, description, dict(defaults))
    return fn
  return wrap


def available() -> Dict[str, str]:
  """Method name -> one-line description."""
  _load_builtin_methods()
  return {k: v.description for k, v in sorted(METHODS.items())}


def evaluate(graph: CompGraph, topology: Topology, placement, priority,
             objective: str = "makespan") -> Dict[str, Any]:
  """Simulates one action and scores it: objective, makespan, peak_memory, feasible."""
  res = simulate(graph, topology, placement, priority)
  ub = objectives.get_objective(objective).upper_bound(graph, topology)
  value = float(np.asarray(objectives.objective_of(objective, res, topology, ub))[0])
  return {"objective": value, "makespan": float(res.makespan[0]),
          "peak_memory": np.asarray(res.peak_memory[0], np.float64),
          "feasible": not bool(res.oom[0])}


def solve(name: str, graph: CompGraph, topology: Topology, *, objective: str = "makespan",
          seed: int = 0, budget: Optional[int] = None, placement=None,
          **overrides) -> Solution:
  """Runs method `name` and returns its simulator-checked `Solution`."""
  _load_builtin_methods()
  if name not in METHODS:
    raise ValueError(f"unknown method '{name}'; available: {sorted(METHODS)}")
  spec = METHODS[name]
  objectives.get_objective(objective)
  unknown = sorted(set(overrides) - set(spec.defaults))
  if unknown:
    raise ValueError(f"method '{name}' has no option(s) {unknown}; options: "
                     f"{sorted(spec.defaults)}")
  if spec.kind == "schedule" and placement is None:
    raise ValueError(f"method '{name}' schedules a fixed placement: pass placement=(N,) ids")
  fixed = None if placement is None else np.asarray(placement, np.int64)
  problem = Problem(graph, topology, objective, int(seed), budget, fixed)
  config = dict(spec.defaults, **overrides)
  t0 = time.perf_counter()
  prop = spec.fn(problem, config)
  seconds = time.perf_counter() - t0
  place = np.asarray(prop.placement if spec.kind != "schedule" else fixed, np.int64)
  prio = (upward_rank(graph) if prop.priority is None
          else np.asarray(prop.priority, np.float64))
  scored = evaluate(graph, topology, place, prio, objective)
  lb = objectives.get_objective(objective).lower_bound(graph, topology)["bound"]
  gap = scored["objective"] / lb - 1.0 if lb > 0 else float("inf")
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
                  info=dict(prop.info))


# Modules whose import registers the built-in methods.
BUILTIN_MODULES = ("go_jax.methods.simple", "go_jax.methods.list_scheduling",
                   "go_jax.methods.exact", "go_jax.methods.partition",
                   "go_jax.methods.evolution", "go_jax.methods.xla")


def _load_builtin_methods():
  """Imports the modules that register the built-in methods (idempotent)."""
  for module in BUILTIN_MODULES:
    importlib.import_module(module)
