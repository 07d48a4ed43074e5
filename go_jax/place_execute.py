"""go-jax-place --execute: run every row's placement for real and set the measured step time
beside the simulator's prediction (docs/design.md section 9).

  check_request("zoo:gnmt2,size=tiny", task="joint")        # before any work: can it run?
  program = load_program("zoo:gnmt2,size=tiny")              # the JAX program the graph is of
  result = place.place(graph, "nvlink2", ...)                # the comparison, as ever
  report = execute(result, program, repeats=5)               # each row placed and timed
  print(markdown_table(report)); write_outputs(result, report, "results/place", files)

Why: the simulator ranks placements by a predicted makespan; running them says whether the
ranking holds on real devices. Each row's placement and priority (carried to the original
graph's nodes when the graph was coarsened) is run with `go_jax.execute.place_program` on the
first D local JAX devices (D: the topology's), and timed (median step seconds). The prediction
shown is re-simulated on the placement actually run (`PlacedProgram.node_placement`, which can
differ from the row's where one jaxpr equation holds nodes the row put on several devices), and
the row's own makespan is shown beside it where the two differ. The Spearman rank correlation
of predicted and measured over the rows says how well the simulator orders them.

Only graphs that are JAX programs can be run: `zoo:<model>[,size=..][,knob=..]` (the model
zoo's training step on `ZooStep.concrete_args(seed)`) and `jax:package.module:function` (or
bare `package.module:function`; `jax.ShapeDtypeStruct` arguments become zeros). Their
pre-optimisation graph (`stage=pre`, the default) is the one placements index; the cost-model
options (device, calibration, cache) only cost the graph. Predictions are in the seconds of the
graph's cost-model device: for numbers comparable to the measured ones, cost the graph with a
calibration of this machine (`go-jax-calibrate`, `device=local,calibration=...`) and use the
topology `go-jax-calibrate --topology` measures.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from go_jax import execute as execute_lib
from go_jax import methods, plotting, results
from go_jax import place as place_lib
from go_jax import place_report
from simulator import fileio, sources, topology_spec
from simulator.graph import CompGraph
from simulator.sources import jax_program
from simulator.sources import zoo as zoo_source

MD_NAME = place_report.EXECUTION_MD  # place_report removes a stale one
DEFAULT_REPEATS = 5
PROGRAM_KINDS = ("zoo", "jax")  # graph sources that are JAX programs
TASKS = ("joint",)  # tasks whose rows are placements to run (fusion is not executed)


# ------------------------------------------------------------------ the program
@dataclasses.dataclass(frozen=True)
class Program:
  """A JAX program to run: `fn(*args)` with concrete arguments."""
  fn: Callable[..., Any]
  args: Tuple[Any, ...]
  spec: str  # the graph spec it came from


def _parse(graph_spec: str) -> Tuple[str, str, Dict[str, str]]:
  """(kind, positional argument, {key: value text}) of a program's graph spec.

  Raises:
    ValueError: not a zoo:/jax: spec, a `coarsen=N` item, or a stage other than "pre".
  """
  spec = sources.resolve_spec(graph_spec)
  base, limit = sources.split_coarsen(spec)
  kind, _, rest = base.partition(":")
  kind = kind.strip()
  if base.endswith(".npz") or kind not in PROGRAM_KINDS:
    raise ValueError(f"placed execution needs a graph that is a JAX program (zoo:... or "
                     f"jax:...), got {graph_spec!r}")
  if limit is not None:  # the coarse graph's nodes are not the program's
    raise ValueError(f"graph {graph_spec!r}: placed execution runs the program's own graph; "
                     f"drop coarsen={limit} (go-jax-place coarsens above --max_nodes itself "
                     "and expands the placements back)")
  positional, keys = "", {}
  for item in (x.strip() for x in rest.split(",") if x.strip()):
    key, eq, value = item.partition("=")
    if eq:
      keys[key.strip()] = value.strip()
    elif not positional:
      positional = item
  stage = keys.get("stage", jax_program.DEFAULT_STAGE)
  if stage != "pre":
    raise ValueError(f"graph {graph_spec!r}: placed execution needs stage=pre (placements "
                     f"index the pre-optimisation graph), got stage={stage}")
  return kind, positional, keys


def check_request(graph_spec: str, task: str = "joint") -> None:
  """That `graph_spec`'s placements can be executed for `task`, before any work is done.

  Raises:
    ValueError: a task whose rows are not plain placements (fusion, joint3), a graph that is not
      a JAX program (layered:, pipedream:, .npz, ...), a coarsened spec or stage=post.
  """
  if task not in TASKS:
    raise ValueError(f"placed execution runs plain placements (task {' or '.join(TASKS)}), "
                     f"got task {task!r}: fusion is not executed")
  _parse(graph_spec)


def _concrete(x):
  """Zeros for a `jax.ShapeDtypeStruct` argument (a program given abstractly), else `x`."""
  return jnp.zeros(x.shape, x.dtype) if isinstance(x, jax.ShapeDtypeStruct) else x


def load_program(graph_spec: str, seed: int = 0) -> Program:
  """The JAX program whose pre-optimisation graph `graph_spec` names (module docstring).

  Raises:
    ValueError: what `check_request` refuses, an unknown zoo model, size or knob, a `jax:`
      function that cannot be imported or called, returns a CompGraph (no program to run) or
      something other than `(fn, args)`.
  """
  kind, positional, keys = _parse(graph_spec)
  if kind == "zoo":
    from simulator import zoo  # pylint: disable=g-import-not-at-top
    known = sources.REGISTRY["zoo"].keys()  # size, stage and the cost keys; the rest: knobs
    knobs = {k: zoo_source.parse_knob(v) for k, v in keys.items() if k not in known}
    try:
      z = zoo.build(positional, keys.get("size", "default"), **knobs)
    except ValueError as e:
      raise ValueError(f"graph {graph_spec!r}: {e}") from e
    return Program(z.step, tuple(z.concrete_args(seed)), graph_spec)
  out = jax_program.call_target(positional)
  if isinstance(out, CompGraph):
    raise ValueError(f"graph {graph_spec!r}: {positional.rpartition(':')[2]}() returns a "
                     "CompGraph, not a JAX program (fn, args): there is no program to execute")
  return Program(out[0], tuple(jax.tree_util.tree_map(_concrete, out[1])), graph_spec)


# ------------------------------------------------------------------ devices
def topology_devices(topology) -> int:
  """The device count of a topology spec (preset or file; its memory option aside)."""
  return int(topology_spec.parse_topology(topology).base().num_devices)


def local_devices(count: int) -> List[Any]:
  """The first `count` local JAX devices (default backend).

  Raises:
    ValueError: fewer local devices than `count` (on a CPU,
      `simulator.runtime.configure_cpu_devices(count)` before JAX starts exposes more).
  """
  devices = jax.local_devices()  # starts JAX's backends: after configure_cpu_devices
  if len(devices) < count:
    kinds = ", ".join(sorted({d.platform for d in devices}))
    raise ValueError(f"the topology has {count} devices but JAX sees {len(devices)} local "
                     f"{kinds} device(s)")
  return list(devices[:count])


# ------------------------------------------------------------------ execution
@dataclasses.dataclass(frozen=True)
class Execution:
  """One row's placement run on the local devices."""
  key: str  # the row's key (results.json)
  method: str  # the row's display name
  predicted: float  # seconds: simulated makespan of the placement actually run
  row_predicted: float  # seconds: the row's own makespan (on the original graph's nodes)
  measured: float  # seconds: median wall time of a step
  segments: int  # jitted pieces the program was split into
  split_equations: int  # equations whose nodes the row put on several devices
  moved_nodes: int  # nodes that run on another device than the row chose
  feasible: bool  # the placement run fits the topology's memory (simulator)
  compile_seconds: float  # tracing (shared), planning and compiling this placement

  @property
  def ratio(self) -> float:
    return self.measured / self.predicted if self.predicted > 0 else math.inf

  def to_json(self) -> Dict[str, Any]:
    return {"method": self.method, "predicted_makespan": results.finite(self.predicted),
            "row_makespan": results.finite(self.row_predicted),
            "measured_seconds": results.finite(self.measured),
            "ratio": results.finite(self.ratio), "segments": self.segments,
            "split_equations": self.split_equations, "moved_nodes": self.moved_nodes,
            "feasible": self.feasible, "compile_seconds": self.compile_seconds}


@dataclasses.dataclass(frozen=True)
class ExecutionReport:
  records: List[Execution]  # one per row, in the rows' order
  devices: List[str]  # the devices run on
  repeats: int  # steps timed per row (median)
  spearman: Optional[float]  # rank correlation of predicted and measured (None: < 3 rows)
  graph_name: str  # the graph whose costs the predictions are in
  topology: str
  trace_seconds: float
  seconds: float  # the whole execution

  def to_json(self) -> Dict[str, Any]:
    """results.json's "execution" entry: the settings and one record per row key."""
    return {"devices": self.devices, "repeats": self.repeats,
            "spearman": results.finite(self.spearman) if self.spearman is not None else None,
            "graph_name": self.graph_name, "topology": self.topology,
            "trace_seconds": self.trace_seconds, "seconds": self.seconds,
            "rows": {r.key: r.to_json() for r in self.records}}


def spearman(predicted: Sequence[float], measured: Sequence[float]) -> Optional[float]:
  """Spearman's rank correlation (None for fewer than 3 pairs or a constant column)."""
  if len(predicted) < 3:
    return None
  from scipy import stats  # pylint: disable=g-import-not-at-top
  with warnings.catch_warnings():  # a constant column: nan, and a warning we need not show
    warnings.simplefilter("ignore")
    rho = float(stats.spearmanr(predicted, measured).statistic)
  return rho if math.isfinite(rho) else None


def execute(result: place_lib.PlaceResult, program: Program, *,
            devices: Optional[Sequence[Any]] = None,
            repeats: int = DEFAULT_REPEATS) -> ExecutionReport:
  """Runs every row of `result` (placement and priority, on the original graph's nodes) with
  `go_jax.execute.place_program` and times it (median of `repeats` steps after 2 warm-ups).

  The program is traced once for all rows; consecutive rows with the same placement and
  priority share one compiled program (each is timed on its own).

  Args:
    result: a `place.place` result (task joint: the rows carry no fuse masks).
    program: what `load_program` gives for the graph `result` placed.
    devices: the devices placement index d runs on (default: the first D local devices, D the
      topology's).
    repeats: timed steps per row.

  Raises:
    ValueError: rows that fuse, fewer devices than the topology's, repeats < 1, or a program
      whose pre-optimisation graph has other nodes than the graph placed.
  """
  t0 = time.perf_counter()
  if repeats < 1:
    raise ValueError(f"repeats must be >= 1, got {repeats}")
  fused = [r.method for r in result.rows if r.fuse is not None]
  if fused:
    raise ValueError(f"rows {fused} fuse ops: placed execution runs placements only (task "
                     "joint)")
  d = result.topology.num_devices
  devices = local_devices(d) if devices is None else list(devices)
  if len(devices) < d:
    raise ValueError(f"the topology has {d} devices, {len(devices)} given")
  traced = execute_lib.trace_program(program.fn, *program.args)
  trace_seconds = time.perf_counter() - t0
  graph = result.original
  if traced.num_nodes != graph.num_nodes:
    raise ValueError(f"the program of {program.spec!r} lowers to {traced.num_nodes} nodes, the "
                     f"graph placed ({graph.name!r}) has {graph.num_nodes}: not the same "
                     "program (placements index the pre-optimisation graph)")
  # Only the last compiled program is kept (rows in a row often share one: GO's greedy and
  # best-of-K): each segment's executable holds a few memory maps, and every row's at once can
  # pass the kernel's limit (vm.max_map_count) on a large graph.
  last_key, placed = None, None
  records = []
  for r in result.rows:
    placement = np.asarray(result.expand(r.placement), np.int64)
    priority = np.asarray(result.expand(r.priority), np.float64)
    key = (placement.tobytes(), priority.tobytes())
    t1 = time.perf_counter()
    if key != last_key:
      placed = None  # released before the next is compiled
      placed = execute_lib.place_program(program.fn, program.args, placement, devices[:d],
                                         priority=priority, traced=traced)
      last_key = key
    built = time.perf_counter() - t1
    measured = placed.measure(repeats)
    run = np.asarray(placed.node_placement, np.int64)
    s = methods.evaluate(graph, result.topology, run, priority, "makespan")
    own = (result.original_scores[r.key]["makespan"] if result.coarsened is not None
           else r.makespan)
    records.append(Execution(
        r.key, r.method, float(s["makespan"]), float(own), measured, placed.num_segments,
        int(placed.plan.split_equations), int(np.sum(run != placement)), bool(s["feasible"]),
        built))
    logging.info("executed %s: %d segments, %s measured, %s predicted (%.1f s)", r.method,
                 placed.num_segments, plotting.format_seconds(measured),
                 plotting.format_seconds(records[-1].predicted), time.perf_counter() - t0)
  rho = spearman([x.predicted for x in records], [x.measured for x in records])
  return ExecutionReport(records, [str(x) for x in devices[:d]], int(repeats), rho, graph.name,
                         str(result.settings.get("topology")), trace_seconds,
                         time.perf_counter() - t0)


# ------------------------------------------------------------------ reporting
def _same(a: float, b: float) -> bool:
  return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15)


def markdown_table(report: ExecutionReport) -> str:
  """The measured table (Markdown) with a line above on what was run and a line below with the
  rank correlation."""
  head = ("method", "predicted makespan", "measured step", "measured / predicted", "segments",
          "nodes moved")
  body = []
  for r in report.records:
    pred = plotting.format_seconds(r.predicted)
    if not _same(r.predicted, r.row_predicted):
      pred += f" (row: {plotting.format_seconds(r.row_predicted)})"
    if not r.feasible:
      pred += " OOM"
    body.append((r.method, pred, plotting.format_seconds(r.measured), f"{r.ratio:.3g}",
                 str(r.segments), str(r.moved_nodes)))
  top = (f"executed on {len(report.devices)} local devices ({', '.join(report.devices)}), "
         f"median of {report.repeats} steps; predicted: the simulator's makespan on "
         f"{report.topology} in the costs of '{report.graph_name}', of the placement run")
  rho = "n/a" if report.spearman is None else f"{report.spearman:+.3f}"
  bottom = (f"Spearman rank correlation, predicted vs measured over {len(report.records)} "
            f"rows: {rho}")
  table = results.markdown_table(head, body, ["l"] + ["r"] * (len(head) - 1))
  return f"{top}\n\n{table}\n\n{bottom}"


def write_outputs(result: place_lib.PlaceResult, report: ExecutionReport, out: str,
                  files: Mapping[str, str]) -> Dict[str, str]:
  """Writes execution.md and results.json again with the "execution" entry (atomically);
  `files` are those `place.write_outputs` wrote. Returns the paths written."""
  path = os.path.join(out, MD_NAME)
  with fileio.atomic_open(path, "w", make_dirs=True) as fh:
    fh.write(markdown_table(report) + "\n")
  listed = {k: v for k, v in files.items() if k != "results"}
  listed["execution"] = path
  written = {"execution": os.path.abspath(path),
             "results": os.path.abspath(place_lib.write_results_json(
                 result, out, listed, extra={"execution": report.to_json()}))}
  return written


__all__ = ["DEFAULT_REPEATS", "Execution", "ExecutionReport", "MD_NAME", "Program",
           "check_request", "execute", "load_program", "local_devices", "markdown_table",
           "spearman", "topology_devices", "write_outputs"]
