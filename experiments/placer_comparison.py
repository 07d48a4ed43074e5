r"""The learned placers at equal search time (issue 14, part 3): GO, GDP, Placeto and HDP against
the best classic methods, on graphs the learned methods did not train on.

An experiment, not library code; its launcher is experiments/learned_placers.py (which holds the
flags, so that tests import this module without defining any).

A cell is one (graph, topology, method), solved once with `methods.solve` (so every final
objective is the registry's re-simulation). A learned method gets the largest search time of the
config's `seconds` through its time option (`finetune_seconds`; `seconds` for HDP): loading the
checkpoint, compiling and the zero-shot pass all count, and JAX's caches are cleared before every
cell (`cold_start`) so that no cell profits from an earlier one's compilation. Its anytime curve
(`info["curve"]`, `methods.anytime_curve`: the best objective found so far over wall time) gives
its objective after t seconds: the curve's best at t, or none if its first answer came later.
A classic method runs to completion once; its objective counts at every t from its own time on.

Per cell, `<out>/learned_placers.json` (atomically; resumable: cells already there are skipped,
cells that recorded an error or ran with another time than now asked are run again; a cell
the report could not read, hand-edited or damaged, is refused naming the file, cell and field
(`check_cells`); several processes may share one --out, each taking its `shard` of the cells)
records the objective,
feasibility, seconds, curve, the zero-shot objective of a learned method, and the time to come
within `within` (5%) of the method's final objective. Then the report
(experiments/placer_report.py, `summarize`):

  per budget t: each method's objective / the reference method's (HEFT) per cell;
  per cell and method: the final objective and the time to within 5% of it;
  the claims: Placeto zero-shot against Placeto fine-tuned on graphs it did not train on
    (within 10%?), Placeto against HDP at each t, GO against Placeto and HDP at `compare_at`
    per family, and GO's "15x faster convergence": the time GO takes to reach HDP's final
    objective against the time HDP takes to reach it;
  `<out>/convergence.png`: one panel per (graph, topology), best objective / reference over
    wall time, one line per learned method, the classic methods as points.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from experiments import cli, regal_comparison
from experiments.placer_report import cell_key, markdown, plot, summarize

DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs",
                              "learned_placers.py")
ResultsFileError = regal_comparison.ResultsFileError  # a results file's fault, not the config's
LAUNCHER = "learned_placers"
JSON_NAME = "learned_placers.json"
MD_NAME = "learned_placers.md"
PLOT_NAME = "convergence.png"
# Fields that must be equal for a run to resume another's cells (they change every number).
SETTINGS = ("objective", "seed", "samples", "budgets", "method_options")
# The time option of a learned method, by the option its registry entry has.
TIME_OPTIONS = ("finetune_seconds", "seconds")


# ------------------------------------------------------------------ config
def as_settings(config) -> Dict[str, Any]:
  """The config as plain data, checked: ValueError naming the field for anything unusable."""
  from go_jax import methods, objectives  # pylint: disable=g-import-not-at-top
  cfg = cli.plain(config)
  missing = [k for k in ("graphs", "topologies", "classic", "learned", "reference", "seconds",
                         "objective", "seed") if k not in cfg]
  if missing:
    raise ValueError(f"the config has no field(s) {missing}")
  for key, value in (("families", {}), ("seen", {}), ("budgets", {}), ("method_options", {}),
                     ("samples", None), ("within", 0.05), ("compare_at", None),
                     ("shard", "0/1"), ("cold_start", True), ("plots", True),
                     ("fail_fast", False), ("go", "go"), ("placeto", "placeto"),
                     ("hdp", "hdp")):
    cfg.setdefault(key, value)
  classic, learned = [str(m) for m in cfg["classic"]], [str(m) for m in cfg["learned"]]
  names = classic + learned
  if not names or len(set(names)) != len(names):
    raise ValueError(f"config.classic + config.learned: give distinct method names, got {names}")
  # A built-in method missing an optional dependency (metis without pymetis) is skipped with
  # a warning, as every sweep does (docs/design.md section 8); a typo stops the run.
  usable = {}
  for field, given in (("classic", classic), ("learned", learned)):
    usable[field], skipped = methods.usable(given, f"config.{field}")
    for name, why in skipped.items():
      if name == cfg["reference"]:
        raise ValueError(f"config.reference={name!r} is not available here: {why}")
      print(f"placer_comparison: skipping method {name}: {why}", file=sys.stderr, flush=True)
  classic, learned = usable["classic"], usable["learned"]
  for name in learned:
    if time_option(name) is None:
      raise ValueError(f"config.learned: method {name!r} has no time option "
                       f"({' or '.join(TIME_OPTIONS)}); put it in config.classic")
  if cfg["reference"] not in classic:
    raise ValueError(f"config.reference={cfg['reference']!r} is not in config.classic {classic}")
  for field in ("budgets", "method_options", "seen", "families"):
    if not isinstance(cfg[field], Mapping):
      raise ValueError(f"config.{field} must be a mapping, got {cfg[field]!r}")
  for name, opts in cfg["method_options"].items():
    if name in names and name not in classic + learned:  # a skipped method's options
      continue
    bad = sorted(set(opts) - set(methods.get(name).defaults))
    if bad:
      raise ValueError(f"config.method_options.{name}: no option(s) {bad}; options: "
                       f"{sorted(methods.get(name).defaults)}")
  for name in list(cfg["budgets"]) + list(cfg["seen"]):
    if name not in names:
      raise ValueError(f"config.budgets / config.seen: {name!r} is not a method of the config")
  objectives.get_objective(cfg["objective"])
  methods.check_seed(cfg["seed"], "config")  # solve_cell's int() would truncate 1.5 and True
  secs = cfg["seconds"]
  if not secs or not all(isinstance(t, (int, float)) and t > 0 for t in secs):
    raise ValueError(f"config.seconds: give search times > 0, got {secs}")
  cfg["seconds"] = sorted(float(t) for t in secs)
  if cfg["compare_at"] is None:
    cfg["compare_at"] = cfg["seconds"][min(1, len(cfg["seconds"]) - 1)]
  if float(cfg["compare_at"]) not in cfg["seconds"]:  # the comparison reads that column
    raise ValueError(f"config.compare_at={cfg['compare_at']!r}: must be one of config.seconds "
                     f"{cfg['seconds']}")
  if not 0 <= float(cfg["within"]) < 1:
    raise ValueError(f"config.within must be in [0, 1), got {cfg['within']}")
  if not cfg["graphs"] or not cfg["topologies"]:
    raise ValueError("config.graphs and config.topologies must not be empty")
  from go_jax import harness  # pylint: disable=g-import-not-at-top
  from simulator import sources  # pylint: disable=g-import-not-at-top
  harness.same_instances(cfg["graphs"], [sources.spec_identity(harness.check_graph(
      g, "config.graphs")) for g in cfg["graphs"]], "graphs", "config")
  topologies = []
  for spec in cfg["topologies"]:
    try:
      topologies.append(harness.topology_identity(harness.parse_topology(spec)))
    except ValueError as e:
      raise ValueError(f"config.topologies: {e}") from None
  harness.same_instances(cfg["topologies"], topologies, "topologies", "config")
  shard_index(cfg["shard"])
  cfg["classic"], cfg["learned"] = classic, learned
  return cfg


def time_option(method: str) -> Optional[str]:
  """The option that sets a method's search time (None: it runs to completion)."""
  from go_jax import methods  # pylint: disable=g-import-not-at-top
  defaults = methods.get(method).defaults
  return next((o for o in TIME_OPTIONS if o in defaults), None)


def shard_index(text: str) -> Tuple[int, int]:
  """'i/n' -> (i, n): this process runs cells i, i + n, i + 2n, ... of the plan."""
  try:
    i, n = (int(x) for x in str(text).split("/"))
  except ValueError:
    i, n = -1, 0
  if not 0 <= i < n:
    raise ValueError(f"config.shard must be 'i/n' with 0 <= i < n, got {text!r}")
  return i, n


def plan(cfg: Mapping[str, Any]) -> List[Tuple[str, str, str]]:
  """Every (graph, topology, method): per instance the reference first, then the classic
  methods, then the learned ones."""
  order = [cfg["reference"]] + [m for m in cfg["classic"] if m != cfg["reference"]]
  return [(g, t, m) for g in cfg["graphs"] for t in cfg["topologies"]
          for m in order + list(cfg["learned"])]


# ------------------------------------------------------------------ one cell
def solve_cell(cfg: Mapping[str, Any], method: str, graph, topology) -> Dict[str, Any]:
  """One method on one instance: its final objective, curve and zero-shot stage (module
  docstring)."""
  import jax  # pylint: disable=g-import-not-at-top
  from go_jax import methods, objectives  # pylint: disable=g-import-not-at-top
  if cfg["cold_start"]:
    jax.clear_caches()
  opts = dict(cfg["method_options"].get(method, {}))
  option = time_option(method) if method in cfg["learned"] else None
  budget_seconds = None
  if option is not None:
    budget_seconds = max(cfg["seconds"])
    opts[option] = budget_seconds
    if cfg["samples"] is not None and "samples" in methods.get(method).defaults:
      opts["samples"] = int(cfg["samples"])
  t0 = time.perf_counter()
  sol = methods.solve(method, graph, topology, objective=cfg["objective"],
                      seed=int(cfg["seed"]), budget=cfg["budgets"].get(method), **opts)
  wall = time.perf_counter() - t0
  ub = objectives.get_objective(cfg["objective"]).upper_bound(graph, topology)
  curve = methods.anytime_curve(sol.info.get("curve", []) + sol.info.get("stages", []))
  if not curve or curve[-1]["best_objective"] > sol.objective:
    curve.append({"seconds": wall, "best_objective": sol.objective})
  zero = next((s for s in sol.info.get("stages", []) if s["stage"] == "zero-shot greedy"), None)
  return {"objective": sol.objective, "feasible": bool(sol.feasible), "reason": sol.reason,
          "makespan": sol.makespan, "seconds": wall, "search_seconds": sol.search_seconds,
          "budget_seconds": budget_seconds, "evaluations": sol.evaluations,
          "upper_bound": float(ub), "lower_bound": sol.lower_bound,
          "curve": [[p["seconds"], p["best_objective"]] for p in curve],
          "zero_shot": None if zero is None else float(zero["objective"]),
          "zero_shot_seconds": None if zero is None else float(zero["seconds"]),
          "updates": sol.info.get("updates"), "placement": sol.placement.tolist()}


# ------------------------------------------------------------------ the run
def _locked_merge(path: str, result: Dict[str, Any], mine: Sequence[str]) -> Dict[str, Any]:
  """Writes `result` to `path` atomically under a lock, first taking every cell another
  process sharing the folder wrote since (its cells are kept; this process's `mine` win)."""
  from simulator import fileio  # pylint: disable=g-import-not-at-top
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  with open(path + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if os.path.isfile(path):  # another shard's cells are checked as a resumed file's are
      try:
        with open(path, encoding="utf-8") as fh:
          disk = json.load(fh)
      except (OSError, ValueError, RecursionError) as e:
        raise ResultsFileError(f"{path}: not a readable results JSON ({e}); another process "
                                   "wrote it badly, or it was edited") from e
      disk = disk.get("cells") if isinstance(disk, dict) else None
      if not isinstance(disk, dict):
        raise ResultsFileError(f"{path}: has no 'cells' object; another process wrote "
                                   "it badly, or it was edited")
      check_cells(disk, path)
      ours = set(mine)
      for key, row in disk.items():
        if key not in ours:
          result["cells"][key] = row
    fileio.write_json(path, result)
  return result


def check_cells(cells: Mapping[str, Any], path: str) -> None:
  """`regal_comparison.check_cells` (a ResultsFileError naming `path`, the cell and the field)
  for a cell the report could not read, and also an answer whose `upper_bound` is not a
  finite number, whose `budget_seconds` or `zero_shot` is neither a number nor null, or whose
  `curve` is not a list of [seconds, objective] pairs: a hand-edited or damaged file is
  refused before any cell runs, not met as a traceback in the report."""
  regal_comparison.check_cells(cells, path)
  number = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
  for key, cell in cells.items():
    if "error" in cell:
      continue
    bad = ([f for f in ("upper_bound",) if not number(cell.get(f))] +
           [f for f in ("budget_seconds", "zero_shot") if cell.get(f) is not None
            and not number(cell.get(f))])
    curve = cell.get("curve")
    if not (isinstance(curve, list) and all(isinstance(p, list) and len(p) == 2
                                            and all(number(x) for x in p) for p in curve)):
      bad.append("curve")
    if bad:
      raise ResultsFileError(f"{path}: cell {key!r} field {bad[0]!r} is "
                             + ("missing" if bad[0] not in cell else
                                f"not what an earlier run writes: {cell[bad[0]]!r}"))


def _pending(cfg, row: Optional[Mapping[str, Any]], method: str) -> bool:
  """Not run yet, an error, or a learned method run with another time than now asked (a
  longer run's final answer is not the shorter budget's: its report would be mislabelled)."""
  if row is None or "error" in row:
    return True
  return method in cfg["learned"] and row.get("budget_seconds") != max(cfg["seconds"])


class CellTask:
  """One cell (graph, topology, method) -> its row, as an executor's task (`go_jax.executors`):
  graphs and topologies are kept per process (a Ray worker builds each once for the cells it
  runs); sent to a worker it travels as the config alone."""

  def __init__(self, cfg):
    self.cfg = cfg
    self._cache = {"graphs": {}, "topos": {}}

  def __getstate__(self):
    return {"cfg": self.cfg}

  def __setstate__(self, state):
    from go_jax import executors  # pylint: disable=g-import-not-at-top
    self.cfg = state["cfg"]
    self._cache = executors.process_cache(LAUNCHER, self.cfg, lambda: {"graphs": {}, "topos": {}})

  def __call__(self, item) -> Dict[str, Any]:
    from simulator import sources, topology_spec  # pylint: disable=g-import-not-at-top
    g, topo_spec, m = item
    graphs, topos = self._cache["graphs"], self._cache["topos"]
    if g not in graphs:
      graphs[g] = sources.load_graph(g)
    if (g, topo_spec) not in topos:
      topos[(g, topo_spec)] = topology_spec.make_topology(
          topology_spec.parse_topology(topo_spec), graphs[g])[0]
    row = solve_cell(self.cfg, m, graphs[g], topos[(g, topo_spec)])
    row["load_average"] = [round(x, 2) for x in os.getloadavg()]  # of the machine it ran on
    return row


def run_comparison(config, out: str, log: Callable[[str], None] = print,
                   executor=None) -> Dict[str, Any]:
  """Runs (or resumes) this process's shard of the comparison in folder `out`, then writes
  the report of every cell the folder holds; returns the JSON written plus "computed" and
  "skipped" cell counts of this run. executor (`go_jax.executors`; None: this process) runs
  the cells; this process merges their rows and writes the JSON."""
  from go_jax import executors  # pylint: disable=g-import-not-at-top
  cfg = as_settings(config)
  settings = {k: cfg[k] for k in SETTINGS}
  path = os.path.join(out, JSON_NAME)
  old = cli.load_resumable(path, LAUNCHER, settings)
  check_cells(old.get("cells", {}), path)
  cells: Dict[str, Any] = dict(old.get("cells", {}))
  machine = cli.machine_info()
  result = {"launcher": LAUNCHER, "settings": settings, "config": cfg, "machine": machine,
            "command": " ".join(sys.argv), "cells": cells}
  i, n = shard_index(cfg["shard"])
  everything = plan(cfg)
  todo = [p for p in everything[i::n] if _pending(cfg, cells.get(cell_key(*p)), p[2])]
  log(f"[{LAUNCHER}] {len(everything)} cells, shard {i}/{n}: {len(todo)} to run; "
      f"{len(cfg['graphs'])} graphs x {len(cfg['topologies'])} topologies; learned methods "
      f"get {max(cfg['seconds']):g} s each; load average {machine['load_average']}")
  mine: List[str] = []
  t0 = time.perf_counter()
  planned = sum(max(cfg["seconds"]) if m in cfg["learned"] else 10.0 for _, _, m in todo)
  state = {"spent_planned": 0.0}

  def on_done(item, row, exc):
    g, topo_spec, m = item
    key = cell_key(g, topo_spec, m)
    if exc is not None:
      if cfg["fail_fast"]:
        raise exc
      row = {"error": cli.one_line(exc), "load_average": [round(x, 2) for x in os.getloadavg()]}
    row.update(graph=g, topology=topo_spec, method=m, family=cfg["families"].get(g, "other"))
    cells[key] = row
    mine.append(key)
    _locked_merge(path, result, mine)
    state["spent_planned"] += max(cfg["seconds"]) if m in cfg["learned"] else 10.0
    spent = state["spent_planned"]
    elapsed = time.perf_counter() - t0
    eta = elapsed / spent * (planned - spent) if spent else math.inf
    what = (f"error: {row['error']}" if "error" in row else
            f"{row['objective']:.6g}{'' if row['feasible'] else ' (OOM)'} in "
            f"{row['seconds']:.1f} s")
    log(f"[{len(mine)}/{len(todo)}] {g} {topo_spec} {m}: {what} | elapsed "
        f"{cli.duration_text(elapsed)}, ETA {cli.duration_text(eta)}")

  executor = executor if executor is not None else executors.make("local")
  executor.run(CellTask(cfg), todo, on_done)
  result = _locked_merge(path, result, mine)
  result["table"] = summarize(cfg, result["cells"])
  result["markdown"] = markdown(cfg, result["table"])
  if cfg["plots"]:
    result["plot"] = plot(cfg, result["cells"], os.path.join(out, PLOT_NAME))
  result = _locked_merge(path, result, mine)
  from simulator import fileio  # pylint: disable=g-import-not-at-top
  with fileio.atomic_open(os.path.join(out, MD_NAME), "w", make_dirs=True) as fh:
    fh.write(result["markdown"])
  return dict(result, computed=len(mine), skipped=len(everything[i::n]) - len(todo))
