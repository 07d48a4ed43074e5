"""An evaluation sweep's config and cells (`go_jax.harness`, which re-exports them): the
config's fields and defaults (`DEFAULTS`), their checks (`settings`), the one cell of a
`methods.solve` call (`Cell`) and the cells of a config in table order (`plan`), with the
checks a sweep makes before any cell runs (a graph that does not exist, a graph or topology
given twice, method options no method has).

Kept apart from running the cells (`harness.execute`): planning runs no method and builds no
topology, so a bad config stops the launch before any work.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from go_jax import methods, objectives
from go_jax.results import row_key
from simulator import sources
from simulator.topology_spec import TopologySpec, parse_topology

DEFAULTS: Dict[str, Any] = {
    "methods": ["single", "random", "round_robin", "expert"],
    "graphs": ["layered:n=100,width=10,seed=0"],
    "topologies": ["nvlink4"],
    "seeds": [0],
    # or a list of objectives (on a command line: --config.objective=makespan,peak_memory)
    "objective": "makespan",
    "budget": None,  # simulator evaluations per search (None: each method's default)
    "method_options": {},  # method -> its options (overrides of its registered defaults)
    "schedule_placement": "expert",  # placement method whose result scheduling methods order
    "plots": False,
    "fail_fast": False,
}


# ------------------------------------------------------------------ cells
@dataclasses.dataclass(frozen=True)
class Cell:
  """One `methods.solve` call: method on (graph, topology) with a seed and an objective.

  label names the row in the tables (default: the method); options are the method's overrides
  (sorted (name, value) pairs, so that a cell stays hashable).
  """
  method: str
  graph: str
  topology: str
  seed: int
  objective: str
  label: Optional[str] = None
  options: Tuple[Tuple[str, Any], ...] = ()

  @property
  def name(self) -> str:
    return self.label or self.method

  @property
  def key(self) -> Tuple:
    return (self.name, self.graph, self.topology, self.seed, self.objective)


def cell_key(row: Mapping[str, Any]) -> Tuple:
  """The key of the cell a row came from (rows of one cell differ only in their stage)."""
  return row_key(row)[:5]


def _as_list(value, field: str) -> List:
  if isinstance(value, (str, int)):
    return [value]
  if value is None or not list(value):
    raise ValueError(f"harness config: {field} must be a non-empty list, got {value!r}")
  return list(value)


def settings(config) -> Dict[str, Any]:
  """DEFAULTS updated by `config` (a ConfigDict or mapping); ValueError on unknown fields."""
  given = config.to_dict() if hasattr(config, "to_dict") else dict(config or {})
  unknown = sorted(set(given) - set(DEFAULTS))
  if unknown:
    raise ValueError(f"harness config: unknown field(s) {unknown}; fields: {sorted(DEFAULTS)}")
  out = dict(DEFAULTS, **given)
  if isinstance(out["objective"], str) and "," in out["objective"]:  # a string-typed config
    out["objective"] = [o.strip() for o in out["objective"].split(",")]  # field, overridden
  for field in ("methods", "graphs", "topologies", "seeds", "objective"):
    out[field] = _as_list(out[field], field)
  for field in ("graphs", "topologies", "seeds", "objective"):  # a repeat would run and store
    seen = [x for i, x in enumerate(out[field]) if x in out[field][:i]]  # a cell twice
    if seen:
      raise ValueError(f"harness config: {field} gives {seen[0]!r} twice")
  # Before the first cell, not in every cell; the one seed rule of every sweep config
  # (methods.check_seed).
  out["seeds"] = [methods.check_seed(s, f"harness config: seeds[{i}]")
                  for i, s in enumerate(out["seeds"])]
  budget = out["budget"]
  if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, np.integer))
                             or budget < 1):
    raise ValueError(f"harness config: budget (simulator evaluations per search) must be an "
                     f"integer >= 1 or None, got {budget!r}")
  options = out["method_options"] or {}
  if not isinstance(options, Mapping):
    raise ValueError(f"harness config: method_options must map a method to its options, got "
                     f"{options!r}")
  for k, v in options.items():
    if not isinstance(v, Mapping):
      raise ValueError(f"harness config: method_options[{k!r}] must be a dict of options, got "
                       f"{v!r}")
    bad = [o for o, x in v.items() if isinstance(x, float) and not np.isfinite(x)]
    if bad:
      raise ValueError(f"harness config: method_options[{k!r}][{bad[0]!r}] is {v[bad[0]]!r}; "
                       "give a finite number")
  out["method_options"] = {str(k): dict(v) for k, v in options.items()}
  return out


# Method kinds that work on a fixed placement (the config's `schedule_placement` solution).
FIXED_PLACEMENT = ("schedule", "fusion")


def _kind(method: str) -> str:
  return methods.get(method).kind


def check_graph(spec: str, what: str) -> str:
  """`sources.check_spec` of a config's graph, the message prefixed by `what` (the field): a
  sweep checks its graphs before any cell runs, so that a typo stops the launch instead of
  failing every cell of that graph."""
  try:
    return sources.check_spec(spec)
  except ValueError as e:
    raise ValueError(f"{what}: {e}") from None


def topology_identity(spec: TopologySpec) -> Tuple:
  """What a parsed topology spec names: the preset (or the file's real path) and the memory
  option's value, so that ' nvlink2' and 'nvlink2', or 'x@mem=2e9' and 'x@mem=2000000000',
  are one topology."""
  where = os.path.realpath(spec.preset) if spec.topology is not None else spec.preset
  return (where, spec.mem_bytes, spec.mem_factor)


_ONE = {"graphs": "graph", "topologies": "topology"}


def same_instances(specs: Sequence[str], identities: Sequence[Any], field: str,
                   what: str = "harness config") -> None:
  """ValueError naming the first two entries of a config's `field` that name the same graph
  or topology (their `identities`: `sources.spec_identity`, `topology_identity`): they would
  run every cell twice and count twice in the summary. `what` names the config."""
  first: Dict[Any, int] = {}
  for i, ident in enumerate(identities):
    if ident in first:
      j = first[ident]
      raise ValueError(f"{what}: {field}[{j}] {specs[j]!r} and {field}[{i}] "
                       f"{specs[i]!r} are the same {_ONE[field]}; give it once")
    first[ident] = i


def plan(cfg: Mapping[str, Any]) -> List[Cell]:
  """Every cell of a config, in table order. Built-in methods not available here (a missing
  optional dependency) are dropped with a warning; unknown method names and graphs that do not
  exist are a ValueError."""
  names, skipped = methods.usable(cfg["methods"], "harness config: methods")
  known = methods.available()
  for m, why in skipped.items():
    logging.warning("harness: skipping method %s: %s", m, why)
  if not names:
    raise ValueError(f"harness config: none of the methods {cfg['methods']} is available; "
                     f"available: {sorted(known)}")
  options = cfg.get("method_options") or {}
  # schedule_placement's own options (e.g. a BRKGA's population) are options of a method that
  # need not be a row of the table.
  stray = sorted(set(options) - set(cfg["methods"]) - {cfg["schedule_placement"]})
  if stray:
    raise ValueError(f"harness config: method_options for {stray}, which are not in methods "
                     f"{list(cfg['methods'])} nor schedule_placement "
                     f"{cfg['schedule_placement']!r}")
  for m, opts in options.items():
    if m in known:
      bad = sorted(set(opts) - set(methods.get(m).defaults))
      if bad:
        raise ValueError(f"harness config: method_options[{m!r}]: no option(s) {bad}; "
                         f"options: {sorted(methods.get(m).defaults)}")
  same_instances(cfg["graphs"], [sources.spec_identity(check_graph(g, "harness config: graphs"))
                                  for g in cfg["graphs"]], "graphs")
  same_instances(cfg["topologies"], [topology_identity(parse_topology(t))
                                      for t in cfg["topologies"]], "topologies")
  for obj in cfg["objective"]:
    objectives.get_objective(obj)
  sp = cfg["schedule_placement"]
  if any(_kind(m) in FIXED_PLACEMENT for m in names) and (
      sp not in known or _kind(sp) not in ("placement", "joint")):
    raise ValueError(f"harness config: schedule_placement {sp!r} must name a placement "
                     "method, e.g. 'expert'")
  return [Cell(m, g, t, s, o, options=tuple(sorted(options.get(m, {}).items())))
          for o in cfg["objective"] for g in cfg["graphs"]
          for t in cfg["topologies"] for m in names for s in cfg["seeds"]]
