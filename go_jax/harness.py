"""The evaluation harness (design.md section 7): methods x graphs x topologies x seeds -> tables.

  rows = harness.run(config, out="results/evaluate")   # config: see DEFAULTS

Every cell (method, graph spec, topology spec, seed, objective) is one `methods.solve` call
(`run_cell`, the one cell runner of go-jax-evaluate, go-jax-place and go-jax-transfer); its
`Solution` becomes one row (`go_jax.results.COLUMNS`), or one row per stage for a method that
reports stages (the learned methods' "zero-shot greedy", "zero-shot best of K", "fine-tuned").
Every row records whether re-simulating its placement and priority with `methods.evaluate`
gives exactly the objective the method reported (`agrees`), so that no method can report a
number the simulator would not give. Results go to `<out>/`:

  results.json  every row plus the config and the launcher that wrote it (the store the run
                resumes from; another launcher's folder is refused with a ValueError)
  results.csv   the same rows, one line each
  results.md    the leaderboard, a table of the rows, then per graph a pivot of objective by
                method (rows: topology, best feasible per row in bold; an infeasible cell shows
                the memory it needs against the capacity, and a topology where no method is
                feasible says so)
  plots/        with `plots`: a Gantt/memory chart per cell and a bar chart per graph/topology
                (file names: `plot_file_name`, bounded and one per cell; a chart that cannot be
                written is a warning and its row's note says so, the row is kept)

Resumable: results.json is rewritten atomically after every cell, and a later run with the same
out folder skips every cell whose key (method, graph, topology, seed, objective) already has
rows without an error, made with the same settings (`cell_settings`: the cell's options, the
budget, for schedulers the placement method, for a checkpoint option its parameters' digest;
results.json records them per cell). Rows
that recorded an error, or whose settings changed, are run again. A cell that raises becomes a
row whose `error` is one line (the traceback is logged at --v=1), unless `fail_fast`: then
the run stops at it, and go-jax-evaluate's one line names the cell (`failed_cell`).
`method_options` gives a method options of its own (e.g. a smaller BRKGA population for a
small budget).

Topology specs (`simulator.topology_spec`, re-exported here) are `PRESET`, a topology `.json`
file, or either with `@mem=VALUE`: VALUE is bytes per device ("2e9", "inf") or a multiple of
the graph's single-device footprint ("0.6x"); any factor below 1 makes every single-device
placement infeasible: the memory-constrained setting in which the model must be split.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from absl import logging

import simulator
from go_jax import distributed, methods, plotting, results
# The row format and file names (go_jax.results) and the topology specs (simulator.topology_spec)
# are re-exported here for the modules and tests that use them under harness.
from go_jax.results import (  # pylint: disable=unused-import
    COLUMNS, CSV_NAME, JSON_NAME, KEY_FIELDS, MD_NAME, row_key)
from simulator import sources
from simulator.topology_spec import (  # pylint: disable=unused-import
    TOPOLOGY_OPTIONS, TopologySpec, make_topology, parse_topology, single_device_footprint)
# The reports (Markdown tables, pivots, comparison plots) live in go_jax.harness_reports.
from go_jax.harness_reports import (  # pylint: disable=unused-import
    markdown, markdown_pivots, markdown_table, plot_comparisons, plot_file_name, summarize,
    try_plot)
# The config, its checks and its cells live in go_jax.harness_plan.
from go_jax.harness_plan import (  # pylint: disable=unused-import
    DEFAULTS, FIXED_PLACEMENT, Cell, _kind, cell_key, check_graph, plan, same_instances, settings,
    topology_identity)

LAUNCHER = "evaluate"


class Instances:
  """Graphs, topologies and fixed placements, built once per spec and cached. `add_graph` /
  `add_topology` register objects the caller already has (go-jax-place's)."""

  def __init__(self, cfg):
    self.cfg = cfg
    self._graphs, self._topos, self._placements = {}, {}, {}

  def add_graph(self, spec: str, graph) -> None:
    self._graphs[spec] = graph

  def add_topology(self, spec: str, graph_spec: str, topology, footprint=None) -> None:
    self._topos[(spec, graph_spec)] = (topology, footprint)

  def graph(self, spec: str):
    if spec not in self._graphs:
      try:
        self._graphs[spec] = sources.load_graph(spec)
      except ValueError as e:
        if spec in str(e):
          raise
        raise ValueError(f"graph spec {spec!r}: {e}") from e
    return self._graphs[spec]

  def topology(self, spec: str, graph_spec: str):
    key = (spec, graph_spec)
    if key not in self._topos:
      self._topos[key] = make_topology(parse_topology(spec), self.graph(graph_spec))
    return self._topos[key]

  def fixed_placement(self, cell: Cell) -> np.ndarray:
    """The placement a scheduling method orders: schedule_placement's solution."""
    key = (cell.graph, cell.topology, cell.seed, cell.objective)
    if key not in self._placements:
      topo, _ = self.topology(cell.topology, cell.graph)
      sp = self.cfg["schedule_placement"]
      sol = methods.solve(sp, self.graph(cell.graph), topo, objective=cell.objective,
                          seed=cell.seed, budget=self.cfg.get("budget"),
                          **placement_options(self.cfg))
      self._placements[key] = sol.placement
    return self._placements[key]


def _topology_fields(spec: str) -> str:
  """The preset (or file, or 'custom') a topology spec names."""
  try:
    return parse_topology(spec).preset
  except ValueError:
    return spec


def _base_row(cell: Cell, cfg) -> Dict[str, Any]:
  try:
    kind = _kind(cell.method)
  except ValueError:
    kind = None
  return results.empty_row(
      method=cell.method, label=cell.name, method_kind=kind, graph=cell.graph,
      topology=cell.topology, preset=_topology_fields(cell.topology), seed=cell.seed,
      objective_kind=cell.objective, budget=cfg.get("budget"),
      placement_from=cfg.get("schedule_placement") if kind in FIXED_PLACEMENT else None,
      error="")


@dataclasses.dataclass
class Answer:
  """One row's action and its re-simulated scores (per-device peak memory)."""
  placement: np.ndarray  # (N,) int
  priority: np.ndarray  # (N,) float
  scores: Dict[str, Any]
  fuse: Optional[np.ndarray] = None  # (N,) bool fuse requests of a fusing method, else None


def _scored_row(row, graph, topo, footprint, scores, believed=None) -> Dict[str, Any]:
  cap = np.asarray(topo.mem_capacity, float)
  lb = row["lower_bound"]
  finite = results.finite
  row.update(graph_name=graph.name, nodes=graph.num_nodes, edges=graph.num_edges,
             devices=topo.num_devices, mem_capacity=finite(cap.min()),
             mem_capacities=[finite(c) for c in cap.tolist()], mem_reference=finite(footprint),
             objective=finite(scores["objective"]), makespan=finite(scores["makespan"]),
             peak_memory=finite(np.max(scores["peak_memory"])),
             feasible=bool(scores["feasible"]),
             # within rounding below the bound: 0, as methods.solve's Solution.gap
             gap=(results.finite(methods.bound_gap(scores["objective"], lb))
                  if lb and lb > 0 and np.isfinite(scores["objective"]) else None),
             resimulated_objective=results.finite(scores["objective"]),
             agrees=bool(believed is None or believed == scores["objective"]))
  if not row["feasible"] and not row.get("reason"):
    row["reason"] = results.infeasible_text(row)
  return row


def run_cell(cell: Cell, inst: Instances, plot_dir: Optional[str] = None
             ) -> Tuple[List[Dict[str, Any]], List[Answer]]:
  """One solve, every answer re-simulated: (rows, answers), one per stage of a method that
  reports stages (`info["stages"]`: GO's zero-shot and fine-tuned answers), else one.
  Exceptions propagate."""
  cfg = inst.cfg
  graph = inst.graph(cell.graph)
  topo, footprint = inst.topology(cell.topology, cell.graph)
  fixed = inst.fixed_placement(cell) if _kind(cell.method) in FIXED_PLACEMENT else None
  sol = methods.solve(cell.method, graph, topo, objective=cell.objective, seed=cell.seed,
                      budget=cfg.get("budget"), placement=fixed, **dict(cell.options))
  stages = sol.info.get("stages") or []
  rows, answers = [], []
  base = _base_row(cell, cfg)
  base.update(lower_bound=results.finite(sol.lower_bound), evaluations=int(sol.evaluations))
  if not stages:
    scores = methods.evaluate(graph if sol.graph is None else sol.graph, topo,
                              sol.placement, sol.priority, cell.objective, fuse=sol.fuse)
    row = dict(base, search_seconds=float(sol.search_seconds), reason=sol.reason)
    rows.append(_scored_row(row, graph, topo, footprint, scores, believed=sol.objective))
    answers.append(Answer(np.asarray(sol.placement), np.asarray(sol.priority), scores,
                          sol.fuse))
  chosen = sol.info.get("stage")  # the stage the solution is (its objective is checked)
  for st in stages:
    place = np.asarray(st["placement"], np.int64)
    prio = np.asarray(st["priority"], np.float64)
    fuse = None if st.get("fuse") is None else np.asarray(st["fuse"], bool)
    scores = methods.evaluate(graph, topo, place, prio, cell.objective, fuse=fuse)
    stage = str(st["stage"])
    if stage.endswith(" of K") and sol.info.get("samples"):
      stage = stage[:-1] + str(sol.info["samples"])
    tuned = stage == "fine-tuned"
    row = dict(base, stage=stage, search_seconds=results.finite(st.get("seconds")),
               reason=sol.reason if st["stage"] == chosen else "",
               updates=sol.info.get("updates") if tuned else None,
               budget_seconds=(results.finite(dict(cell.options).get("finetune_seconds"))
                               if tuned else None))
    rows.append(_scored_row(row, graph, topo, footprint, scores,
                            believed=sol.objective if st["stage"] == chosen else None))
    answers.append(Answer(place, prio, scores, fuse))
  if plot_dir is not None:
    for row, ans in zip(rows, answers):
      path = os.path.join(plot_dir, _file_name(cell, row.get("stage")) + ".png")
      title = (f"{results.row_name(row)} on {graph.name} / {cell.topology} (seed {cell.seed}): "
               f"{cell.objective} {results.value_text(row)}")
      what = f"{results.row_name(row)} on {cell.graph} / {cell.topology} (seed {cell.seed})"
      if ans.fuse is not None:  # one bar per fused group
        failed = try_plot(what, plotting.plot_fused_schedule, graph, topo, ans.placement,
                          ans.priority, ans.fuse, path, title=title)
      else:
        failed = try_plot(what, lambda: plotting.plot_schedule(
            graph, topo, simulator.reference_simulate(graph, topo, ans.placement, ans.priority),
            path, title=title))
      if failed:  # the scored row stands; its note says the chart is missing
        row["reason"] = "; ".join(t for t in (row.get("reason"), f"plot not written: {failed}")
                                  if t)
  return rows, answers


def _file_name(cell: Cell, stage: Optional[str] = None) -> str:
  """A cell's (and stage's) plot file name: bounded and distinct per cell (`plot_file_name`)."""
  return plot_file_name(cell.graph, cell.topology, cell.name, f"s{cell.seed}", cell.objective,
                        *((stage,) if stage else ()))


def error_text(exc: BaseException) -> str:
  """An exception as the one line a row (or a launcher) reports."""
  return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def failed_cell(exc: BaseException) -> Optional[str]:
  """The cell ("method on graph / topology (seed s)") whose error `exc` is, where `execute`
  stopped at it (fail_fast); None for any other exception."""
  return getattr(exc, "go_jax_cell", None)


def _error_row(cell: Cell, cfg, exc: BaseException) -> Dict[str, Any]:
  row = _base_row(cell, cfg)
  row.update(error=error_text(exc), feasible=False, agrees=False)
  return row


# ------------------------------------------------------------------ run
def load_rows(out: str, launcher: str = LAUNCHER) -> List[Dict[str, Any]]:
  """Rows of `<out>/results.json` written by `launcher`, or [] where there is none yet;
  ValueError if another launcher wrote it (`results.load`)."""
  return results.load_store(out, launcher)["rows"]


def _ordered(done: Dict[Tuple, List[Dict]], cells: Sequence[Cell]) -> List[Dict[str, Any]]:
  """This config's rows in cell order, then rows of other configs kept from the store."""
  planned = [c.key for c in cells]
  ours = set(planned)
  return ([r for k in planned if k in done for r in done[k]] +
          [r for k, rs in done.items() if k not in ours for r in rs])


class CellTask:
  """`run_cell` as a picklable task of an executor (`go_jax.executors`): cell -> rows.

  Locally it uses the `Instances` it was given (graphs a launcher registered included); sent to
  a Ray worker it travels as (cfg, plot_dir) alone and solves with the worker process's own
  `Instances` of that cfg (`worker_instances`), built on its first cell and kept for the next.
  """

  def __init__(self, inst: Instances, plot_dir: Optional[str] = None):
    self.cfg, self.plot_dir, self._inst = inst.cfg, plot_dir, inst

  def __getstate__(self):
    return {"cfg": self.cfg, "plot_dir": self.plot_dir}

  def __setstate__(self, state):
    self.cfg, self.plot_dir, self._inst = state["cfg"], state["plot_dir"], None

  def __call__(self, cell: Cell) -> List[Dict[str, Any]]:
    inst = self._inst if self._inst is not None else worker_instances(self.cfg)
    return run_cell(cell, inst, self.plot_dir)[0]


def worker_instances(cfg: Mapping[str, Any]) -> Instances:
  """This process's `Instances` of `cfg` (one per distinct config, cached)."""
  from go_jax import executors  # pylint: disable=g-import-not-at-top
  return executors.process_cache("harness", cfg, lambda: Instances(dict(cfg)))


def placement_options(cfg: Mapping[str, Any]) -> Dict[str, Any]:
  """method_options of the config's schedule_placement method ({} where none are given)."""
  return dict((cfg.get("method_options") or {}).get(cfg.get("schedule_placement"), {}))


def cell_settings(cell: Cell, cfg: Mapping[str, Any]) -> Dict[str, Any]:
  """What a cell's rows depend on beyond its key (`results.cell_record`): its options, the
  search budget and, for a method that works on a fixed placement, the method that made it
  and that method's options."""
  fixed = _kind(cell.method) in FIXED_PLACEMENT if cell.method in methods.METHODS else False
  return results.cell_record(dict(cell.options), cfg.get("budget"),
                             cfg.get("schedule_placement") if fixed else None,
                             placement_options(cfg) if fixed else None)


def execute(cells: Sequence[Cell], inst: Instances, out: Optional[str], *, launcher: str,
            config: Mapping[str, Any], fail_fast: bool = False, progress: bool = True,
            plot_dir: Optional[str] = None, before_cell=None, describe=None,
            executor=None) -> List[Dict[str, Any]]:
  """Runs every cell without rows in `<out>/results.json` (or only error rows), rewriting the
  file atomically after each as it finishes; returns this config's rows, in cell order (the
  file also keeps the rows of other configs it held).

  before_cell(cell) runs in this process before a cell is solved or dispatched (e.g.
  pretraining a missing checkpoint); describe(cell) -> str is the progress bar's text.
  executor (`go_jax.executors`; default: the local one) runs the cells: in this process, or
  as Ray tasks whose rows come back here, so that only this process writes the results file.
  A cell that raises (in `before_cell` or in its solve) becomes an error row unless fail_fast.
  `out` None writes nothing: a multi-process run's other processes (`go_jax.distributed`),
  which skip the cells that process 0 found in its results file.
  """
  import tqdm  # pylint: disable=g-import-not-at-top
  from go_jax import executors  # pylint: disable=g-import-not-at-top
  executor = executor if executor is not None else executors.make("local")
  # This run is the folder's one writer until it ends (results.sole_writer): a second run
  # there stops at once. Taken where the file is read, on process 0, so that its refusal
  # stops every process of a multi-process run alike.
  lock = contextlib.ExitStack()

  def read():
    if out is not None:
      lock.enter_context(results.sole_writer(out, results.LAUNCHERS.get(launcher, launcher)))
    return results.load_store(out, launcher)

  with lock:
    done: Dict[Tuple, List[Dict]] = {}
    # Every process of a multi-process run resumes from process 0's file (the same cells).
    stored = distributed.from_primary(read)
    for r in stored["rows"]:
      done.setdefault(cell_key(r), []).append(r)
    # Each cell's settings as its rows were made (a file from before they were recorded has none:
    # its rows are taken as they are).
    made_with: Dict[str, Any] = dict(stored.get("cell_settings") or {})
    now = {c.key: cell_settings(c, inst.cfg) for c in cells}

    finished = lambda c: c.key in done and not any(r.get("error") for r in done[c.key])
    changed = lambda c: made_with.get(results.cell_text(c.key), now[c.key]) != now[c.key]
    stale = [c for c in cells if finished(c) and changed(c)]
    if stale:
      logging.warning("%d finished cell(s) run again: their options or budget changed since their "
                      "rows were written (e.g. %s on %s)", len(stale), stale[0].name,
                      stale[0].graph)
    todo = [c for c in cells if not finished(c) or changed(c)]
    bar = tqdm.tqdm(total=len(cells), initial=len(cells) - len(todo), unit="cell",
                    disable=not progress, dynamic_ncols=True)
    payload = lambda: {"config": dict(config), "rows": _ordered(done, cells),
                       "cell_settings": made_with}
    text = lambda cell: (describe(cell) if describe else
                         f"{cell.name} {cell.graph} {cell.topology} s{cell.seed}")

    def before(cell):
      bar.set_postfix_str(text(cell))
      if before_cell is not None:
        before_cell(cell)

    def on_done(cell, rows, exc):
      if exc is not None:
        if fail_fast:  # the launcher's one line names the cell (`failed_cell`)
          exc.go_jax_cell = (f"{cell.name} on {cell.graph} / {cell.topology} "
                             f"(seed {cell.seed})")
          raise exc
        logging.warning("%s on %s / %s (seed %d): %s", cell.name, cell.graph, cell.topology,
                        cell.seed, error_text(exc))
        logging.debug("traceback of that error:", exc_info=exc)  # at --v=1
        rows = [_error_row(cell, inst.cfg, exc)]
      done[cell.key] = rows
      # recomputed now: a checkpoint pretrained just before this cell (before_cell) is in it
      made_with[results.cell_text(cell.key)] = cell_settings(cell, inst.cfg)
      if out is not None:
        results.write_json(out, launcher, payload())
      bar.update(1)

    try:
      executor.run(CellTask(inst, plot_dir), todo, on_done, before=before)
    finally:
      bar.close()
    if out is not None:  # once more: the config of this run, also where no cell ran
      results.write_json(out, launcher, payload())
    # Only this config's rows: the store keeps other configs' rows (a seed dropped now and asked
    # for again later is not recomputed), but every report is of the config that was run.
    return [r for c in cells if c.key in done for r in done[c.key]]


def run(config, out: Optional[str], *, plots: Optional[bool] = None, progress: bool = True,
        executor=None) -> List[Dict[str, Any]]:
  """Runs every cell of `config` not already in `<out>/results.json`; returns all rows.

  Args:
    config: ConfigDict or mapping with the fields of DEFAULTS.
    out: result folder (created); None: nothing written (`execute`).
    plots: overrides config.plots.
    progress: show a tqdm bar (cells done, rate, ETA).
    executor: runs the cells (`go_jax.executors`; None: in this process).

  Raises:
    ValueError: a bad config, or `out` holds results of another launcher.
  """
  cfg = settings(config)
  if plots is not None:
    cfg["plots"] = bool(plots)
  cells = plan(cfg)
  if out is not None:
    results.load(out, LAUNCHER)  # another launcher's folder: stop before any work
  plot_dir = os.path.join(out, "plots") if cfg["plots"] and out is not None else None
  rows = execute(cells, Instances(cfg), out, launcher=LAUNCHER, config=cfg,
                 fail_fast=cfg["fail_fast"], progress=progress, plot_dir=plot_dir,
                 executor=executor)
  if out is not None:
    write_outputs(out, cfg, rows)
  if plot_dir is not None:
    plot_comparisons(rows, plot_dir)
  return rows


def write_outputs(out: str, cfg, rows) -> Dict[str, str]:
  """Writes results.csv and results.md of `rows` (atomically) beside the results.json that
  `execute` wrote (every stored row and the cell settings a resumed run compares); returns
  the three paths."""
  return {"json": os.path.join(out, results.JSON_NAME), "csv": results.write_csv(out, rows),
          "md": results.write_markdown(out, markdown(rows))}
