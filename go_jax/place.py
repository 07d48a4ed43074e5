"""Place one graph on one topology with GO and the fast baselines, and compare them (go-jax-place).

  graph = place.load_graph_arg("layered:n=300,width=16,seed=0")
  result = place.place(graph, "nvlink4@mem=0.6x", finetune_seconds=60)
  print(place.header(result)); print(place.markdown_table(result)); print(place.verdict(result))
  place.write_outputs(result, "results/place")

`place` is a run of the evaluation harness (`go_jax.harness`: the same cell runner, row format
and results files) on one (graph, topology) instance: GO is the registered learned method
(`methods.solve("go_hint", ..., finetune_seconds=...)`, `go_jax.methods.learned`) whose stages
become the rows "go zero-shot (greedy)", "go zero-shot (best of K)" and "go fine-tuned (60s)";
then the baselines (`methods.solve`). Every action is re-simulated with `methods.evaluate`, so
every number in the table is what the simulator gives for the placement and priority shown.
GO's search seconds are its measured wall time including loading and XLA compilation, which
dominates on small graphs; the baselines' are `Solution.search_seconds`.

GO is skipped, with its reason in the header and the verdict, where the method refuses the
instance (e.g. a topology with more devices than its policy serves): the baselines still run.
With a memory limit that no method meets, the verdict says so and how much memory the least
demanding answer needs; no winner is declared and no infeasible objective is shown as a value.

Graphs with more than `max_nodes` nodes are coarsened (`simulator.coarsen`) and solved on the
coarse graph; the saved placements are expanded back to the original nodes (and re-simulated on
the original graph) next to the coarse ones.

Graph arguments (`load_graph_arg`): a source spec (`layered:n=300,width=16,seed=0`,
`pipedream:vgg16`, `zoo:gnmt2,size=tiny`, see `simulator.sources`), a `.npz` file of
`CompGraph.save`, a bare model name (PipeDream if it is one, else a model-zoo model), or
`package.module:function`, a function of no arguments returning a `CompGraph` or a JAX program
`(fn, args)` that `simulator.from_jax` turns into its pre-optimisation HLO graph.

Tasks (`task`, `go_jax.place_tasks`): "joint" (the above), "fusion" (GO's `go_fusion` and the
fusion baselines fuse one fixed schedule, `placement_from`'s placement and priority) and
"joint3" (GO's `go_joint3` places, orders and fuses, against the baselines and the best one's
placement followed by xla_fusion / fuse_all). Rows that fuse show `groups` (fused graph nodes).
`go_jax.place_execute` (--execute) runs the rows' placements on the local devices and times them.

The report of a result (`markdown_table`, `header`, `verdict`, `to_json`, `write_outputs`,
`write_results_json` and the output file names) is `go_jax.place_report`'s, re-exported here.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import ml_collections
import numpy as np
from absl import logging

import simulator
from go_jax import harness, methods, objectives, place_tasks, pretrained, results
# The report of a result, re-exported: callers use place.verdict, place.LAUNCHER, ...
from go_jax.place_report import (  # noqa: F401
    BARS_NAME, BOUND_MARKS, CSV_NAME, JSON_NAME, LAUNCHER, MD_NAME, NPZ_NAME, bound_kind,
    bound_lines, gap_text, header, markdown_table, to_json, verdict, write_outputs,
    write_results_json)
from simulator import coarsen as coarsen_lib
from simulator import sources, topology_spec
from simulator.graph import CompGraph

DEFAULT_GRAPH = "layered:n=300,width=16,seed=0"
DEFAULT_TOPOLOGY = "nvlink4@mem=0.6x"
DEFAULT_METHOD = "go_hint"  # the learned method GO's rows come from
DEFAULT_BASELINES = ("heft", "m_etf", "m_sct", "metis", "expert", "brkga", "brkga_seeded")
BRKGA_METHODS = ("brkga", "brkga_seeded")  # take brkga_budget as their evaluations
DEFAULT_MAX_NODES = 2000
DEFAULT_FINETUNE_SECONDS = 60.0
DEFAULT_BRKGA_BUDGET = 5000
DEFAULT_LEARNING_RATE = 1e-3
DEFAULT_DEVICE_SPEC = "v100"
NO_CHECKPOINT = "none"
GO_LABEL = "go"  # GO's rows in the table: "go zero-shot (greedy)", ...
# Row keys (file-safe ids) of GO's stages.
STAGE_KEYS = {"zero-shot greedy": "go_zero_shot_greedy", "fine-tuned": "go_finetuned"}


# ------------------------------------------------------------------ graphs
def load_graph_arg(text: str, *, device_spec: str = DEFAULT_DEVICE_SPEC,
                   shapes: bool = False) -> CompGraph:
  """The graph a command-line argument names: `simulator.sources.load_graph`, the one graph
  parser of every launcher (forms in its module docstring), with `device_spec` (a
  `simulator.costmodel` device name) costing a JAX program whose argument names no device.

  Raises:
    ValueError: malformed spec, unknown name (the message lists the options), missing file,
      a module or function that cannot be imported or called, or a bad return value.
  """
  spec = sources.resolve_spec(text, device=device_spec)
  if shapes:  # a zoo: program keeps its HLO: the partitioning methods' strategy space
    from simulator.partition import programs
    return programs.load_graph(spec)
  return sources.load_graph(spec)


PARTITION_ALL = ("tofu", "data_parallel", "megatron")


def partition_methods(names: Sequence[str]) -> List[str]:
  """The --partition list: registered methods of kind "partition"; "all": PARTITION_ALL."""
  out = []
  for name in names:
    for n in (PARTITION_ALL if name == "all" else (name,)):
      if n not in methods.available(("partition",)):
        raise ValueError(f"unknown partition method {n!r}; choose from "
                         f"{sorted(methods.available(('partition',)))} or 'all'")
      if n not in out:
        out.append(n)
  return out


# ------------------------------------------------------------------ GO policy
def load_policy(checkpoint: str = pretrained.DEFAULT
                ) -> Tuple[ml_collections.ConfigDict, Any, str]:
  """(config, params, label) of a shipped checkpoint name or a training workdir.

  "none" gives fresh parameters (params None) of the shipped default checkpoint's policy and
  training config: fine-tuning from scratch, the no-transfer comparison.
  """
  if checkpoint == NO_CHECKPOINT:
    return pretrained.load_config(pretrained.DEFAULT), None, "none (fresh parameters)"
  config, params = pretrained.load(checkpoint)
  return config, params, checkpoint


# ------------------------------------------------------------------ results
@dataclasses.dataclass(frozen=True)
class Row:
  """One method's action on the solved graph, as the simulator scores it."""
  method: str  # display name, e.g. "go fine-tuned (60s)" or "heft"
  key: str  # file-safe id, e.g. "go_finetuned" or "heft"
  kind: str  # "go", "baseline", "pipeline" (joint3: a baseline's placement, then fusion) or
  #            "partition" (placement and priority on its own expanded graph)
  objective: float  # lower is better; infeasible actions score above every feasible one
  makespan: float  # seconds
  peak_memory: np.ndarray  # (D,) bytes
  feasible: bool
  gap: float  # objective / lower bound - 1
  search_seconds: float  # wall time (GO: loading + compile + search)
  placement: np.ndarray  # (N,) int, on the solved graph
  priority: np.ndarray  # (N,) float
  info: Dict[str, Any] = dataclasses.field(default_factory=dict)
  data: Dict[str, Any] = dataclasses.field(default_factory=dict)  # the harness row
  fuse: Optional[np.ndarray] = None  # (N,) bool fuse requests of a fusing method
  groups: Optional[int] = None  # nodes of the fused graph (None: no fusion)


@dataclasses.dataclass
class PlaceResult:
  rows: List[Row]
  best: Row  # the row of smallest objective (a baseline wins ties); see `winner`
  graph: CompGraph  # the graph solved (the coarse one when coarsened)
  original: CompGraph  # the graph given
  coarsened: Optional[coarsen_lib.Coarsened]
  topology: simulator.Topology
  lower_bound: float
  settings: Dict[str, Any]
  original_scores: Dict[str, Dict[str, Any]]  # coarsened: row key -> expanded, re-simulated

  def row(self, key: str) -> Optional[Row]:
    return next((r for r in self.rows if r.key == key), None)

  @property
  def winner(self) -> Optional[Row]:
    """The best row if it is feasible; None when no method found a feasible placement."""
    return self.best if self.best.feasible else None

  @property
  def go_row(self) -> Optional[Row]:
    """GO's final answer: fine-tuned, else zero-shot best of K (None: GO did not run)."""
    return _go_final(self.rows)

  @property
  def best_baseline(self) -> Optional[Row]:
    rows = [r for r in self.rows if r.kind not in ("go", "partition")]
    return min(rows, key=lambda r: r.objective) if rows else None

  def expand(self, values: np.ndarray) -> np.ndarray:
    """Per-node values of the solved graph carried to the original graph's nodes."""
    return values if self.coarsened is None else self.coarsened.expand(values)


def _go_final(rows: Sequence[Row]) -> Optional[Row]:
  by_key = {r.key: r for r in rows}
  return by_key.get("go_finetuned", by_key.get("go_zero_shot_best"))


def _row_key(data: Mapping[str, Any]) -> str:
  stage = data.get("stage")
  if not stage:
    return data["label"]
  return STAGE_KEYS.get(stage, "go_zero_shot_best" if stage.startswith("zero-shot best")
                        else "go_" + re.sub(r"[^A-Za-z0-9]+", "_", stage))


def _as_row(data: Dict[str, Any], answer: harness.Answer, kind: str, graph=None) -> Row:
  s = answer.scores
  gap = data["gap"] if data.get("gap") is not None else math.inf
  info = {k: data[k] for k in ("updates", "evaluations", "reason") if data.get(k) is not None}
  place = np.asarray(answer.placement, np.int64)
  fuse = None if answer.fuse is None else np.asarray(answer.fuse, bool)
  return Row(results.row_name(data), _row_key(data), kind, float(s["objective"]),
             float(s["makespan"]), np.asarray(s["peak_memory"], np.float64),
             bool(s["feasible"]), float(gap), float(data.get("search_seconds") or 0.0),
             place, np.asarray(answer.priority, np.float64), info, data, fuse,
             place_tasks.groups(graph, place, fuse))


def _since(t0: float) -> str:
  return f"{time.perf_counter() - t0:.1f} s elapsed"


def _topology_spec(topology) -> Tuple[str, Any]:
  """(text naming the topology, parsed spec) of a spec string or a Topology object."""
  spec = topology_spec.parse_topology(topology)
  if isinstance(topology, simulator.Topology):
    return "custom", spec
  return spec.spec, spec


# ------------------------------------------------------------------ place
def _check_brkga_budget(budget, names) -> None:
  """ValueError where `brkga_budget` cannot pay one generation of a BRKGA baseline named: a
  bad option of the run, not an instance the method refuses (which would only skip its row)."""
  from go_jax.methods import evolution  # pylint: disable=g-import-not-at-top
  counts = evolution._brkga_counts  # pylint: disable=protected-access
  for name in names:
    population, elites, _, _ = counts(methods.get(name).defaults, name)
    if budget < population - elites:
      raise ValueError(f"brkga_budget={budget} is below one generation of {name} "
                       f"({population - elites} evaluations: population - elites)")


def place(graph: CompGraph, topology: Union[str, simulator.Topology], *,
          objective: str = "makespan", seed: int = 0, method: Optional[str] = place_tasks.AUTO,
          checkpoint: Optional[str] = None,
          finetune_seconds: float = DEFAULT_FINETUNE_SECONDS,
          finetune_updates: Optional[int] = None,
          learning_rate: float = DEFAULT_LEARNING_RATE, samples: Optional[int] = None,
          baselines: Optional[Sequence[str]] = None,
          brkga_budget: int = DEFAULT_BRKGA_BUDGET, max_nodes: int = DEFAULT_MAX_NODES,
          graph_spec: Optional[str] = None, task: str = "joint",
          placement_from: str = place_tasks.DEFAULT_PLACEMENT_FROM,
          device_spec: str = DEFAULT_DEVICE_SPEC,
          partition: Sequence[str] = ()) -> PlaceResult:
  """Runs GO (zero-shot, fine-tuned) and the baselines on one instance; see module docstring.

  Args:
    graph: the graph to place.
    topology: 'PRESET', 'PRESET@mem=VALUE', 'file.json[@mem=VALUE]'
      (`simulator.topology_spec`) or a `Topology` object.
    objective: "makespan" or "peak_memory".
    seed: seed of GO and of the randomised baselines.
    method: the registered learned method of GO's rows ("go_hint", "go", "gdp", "go_fusion",
      "go_joint3"; its kind must fit the task); "auto": the task's (`place_tasks.TASK_METHODS`:
      go_hint, go_fusion, go_joint3); None: no GO.
    checkpoint: GO's starting policy (a shipped name, a folder, or "none": fresh parameters;
      None: the method's own shipped checkpoint).
    finetune_seconds: fine-tuning wall-clock budget (0: zero-shot only).
    finetune_updates: optional cap on fine-tuning updates (None: the time budget decides).
    learning_rate, samples: fine-tuning learning rate and K (None: the method's default,
      methods/learned.py FINETUNE_SAMPLES, else the checkpoint's K).
    baselines: method names; built-in ones not available here (e.g. metis without pymetis)
      are skipped, an unknown name is a ValueError;
      None: the task's (DEFAULT_BASELINES; fusion: no_fusion, fuse_all, xla_fusion).
    brkga_budget: simulator evaluations of brkga and brkga_seeded.
    max_nodes: graphs above this many nodes are coarsened to it.
    graph_spec: the text the graph came from (recorded in the settings; xla_fusion rebuilds
      XLA's decisions from a zoo: or jax: pre-optimisation spec).
    task: "joint", "fusion" or "joint3" (module docstring, `go_jax.place_tasks`).
    placement_from: fusion: the placement or joint method whose placement and priority every
      fusion method fuses.
    device_spec: cost-model device of the program rebuilt for XLA's fusion decisions.
    partition: operator-partitioning methods (kind "partition": tofu, data_parallel,
      megatron; design.md 4.2) whose rows join the table, of kind "partition": each runs on
      the graph given (never coarsened) on every device and answers on its expanded graph, so
      its row is not the winner placement (no Gantt chart, not in placement.npz).
  """
  t0 = time.perf_counter()
  objectives.get_objective(objective)
  if finetune_seconds < 0:
    raise ValueError(f"finetune_seconds must be >= 0, got {finetune_seconds}")
  if finetune_updates is not None and finetune_updates < 1:
    raise ValueError(f"finetune_updates must be >= 1 or None, got {finetune_updates}")
  if samples is not None and samples < 1:
    raise ValueError(f"samples must be >= 1, got {samples}")
  if not isinstance(max_nodes, (int, np.integer)) or max_nodes < 2:
    raise ValueError(f"max_nodes must be an integer >= 2, got {max_nodes!r}")
  topo_text, tspec = _topology_spec(topology)
  job = place_tasks.resolve(task, method, baselines, placement_from,
                            default_baselines=DEFAULT_BASELINES, graph_spec=graph_spec,
                            device_spec=device_spec)  # ValueError: kinds that do not fit
  method, baselines, unknown = job.method, job.baselines, job.unknown
  job.check_graph(graph, max_nodes)  # the fusing tasks: a cost reference, no coarsening
  _check_brkga_budget(brkga_budget, [b for b in baselines if b in BRKGA_METHODS])

  # The instance: coarsen big graphs, then the topology (its memory may scale with the graph).
  original, coarse = graph, None
  if graph.num_nodes > max_nodes:
    coarse = coarsen_lib.coarsen(graph, int(max_nodes))
    graph = coarse.graph
    logging.info("coarsened %d -> %d nodes (%s) to solve (%s)", original.num_nodes,
                 graph.num_nodes, ", ".join(f"{s}: {m}" for s, m in coarse.steps), _since(t0))
  # Capacities from the graph given (a "0.6x" footprint is the user's graph's), not the coarse.
  topo, footprint = topology_spec.make_topology(tspec, original)
  lb = float(objectives.get_objective(objective).lower_bound(graph, topo)["bound"])
  logging.info("instance: %r on %s (%d devices), %s lower bound %.6g (%s)", graph, topo_text,
               topo.num_devices, objective, lb, _since(t0))

  # One harness run on this instance: GO's cell, then the baselines' cells.
  gspec = graph_spec or graph.name
  options = lambda name: {"evaluations": int(brkga_budget)} if name in BRKGA_METHODS else {}
  inst = job.instances(graph, topo, objective=objective, seed=int(seed), options=options)

  def run(name, label=None, kind="baseline", instances=inst, solved=graph, **opts) -> List[Row]:
    instances.add_graph(gspec, solved)
    instances.add_topology(topo_text, gspec, topo, footprint)
    data, answers = harness.run_cell(harness.Cell(
        name, gspec, topo_text, int(seed), objective, label,
        tuple(sorted((k, v) for k, v in opts.items() if v is not None))), instances)
    return [_as_row(d, a, kind, None if kind == "partition" else solved)
            for d, a in zip(data, answers)]

  rows: List[Row] = []
  go_skipped = None
  label = None
  if method is not None:
    opts = dict(finetune_seconds=float(finetune_seconds), max_updates=finetune_updates,
                learning_rate=float(learning_rate), samples=samples, checkpoint=checkpoint)
    label = checkpoint or methods.get(method).defaults.get("checkpoint")
    logging.info("GO (%s from %s): %s (%s)", method, label,
                 f"fine-tuning for {finetune_seconds:g} s" if finetune_seconds else "zero-shot",
                 _since(t0))
    try:
      rows += run(method, GO_LABEL, "go", **opts, **job.options(method, graph))
    except methods.Refused as e:  # the instance, not an option: the baselines run alone
      go_skipped = " ".join(str(e).split())
      logging.warning("GO skipped: %s", go_skipped)
    else:
      logging.info("GO: %s (%s)", ", ".join(f"{r.method} {r.objective:.6g}" for r in rows),
                   _since(t0))
  errors = {}
  for name in baselines:
    try:
      rows += run(name, **options(name), **job.options(name, graph))
    except ValueError as e:  # the method refuses the instance: one line in the header
      errors[name] = harness.error_text(e)
      logging.warning("%s: %s", name, errors[name])
      continue
    logging.info("%s: %.6g in %.1f s (%s)", name, rows[-1].objective, rows[-1].search_seconds,
                 _since(t0))
  rows += job.pipeline_rows(rows, run, graph, errors)  # joint3: best baseline, then fusion
  for name in partition:
    if methods.get(name).kind != "partition":
      raise ValueError(f"partition method {name!r} is of kind {methods.get(name).kind!r}; "
                       f"partition methods: {sorted(methods.available(('partition',)))}")
    whole = job.instances(original, topo, objective=objective, seed=int(seed), options=options)
    try:
      rows += run(name, kind="partition", instances=whole, solved=original)
    except ValueError as e:
      errors[name] = harness.error_text(e)
      logging.warning("%s: %s", name, errors[name])
  if not rows:
    raise ValueError("nothing to compare: no baselines ran and no GO rows (give baselines, "
                     "finetune_seconds > 0 or a pretrained checkpoint)"
                     + (f"; GO skipped: {go_skipped}" if go_skipped else "")
                     + "".join(f"; {k}: {v}" for k, v in errors.items()))
  placed = [r for r in rows if r.kind != "partition"] or rows
  best = min(placed, key=lambda r: (r.objective, r.kind == "go"))

  original_scores = {}  # every action expanded to the original nodes, scored there
  if coarse is not None:
    for r in placed:
      s = methods.evaluate(original, topo, coarse.expand(r.placement),
                           coarse.expand(r.priority), objective)
      original_scores[r.key] = {"objective": s["objective"], "makespan": s["makespan"],
                                "peak_memory": float(np.max(s["peak_memory"])),
                                "feasible": s["feasible"]}
  caps = np.asarray(topo.mem_capacity, np.float64)
  settings = {
      "graph": graph_spec, "graph_name": original.name, "nodes": original.num_nodes,
      "edges": original.num_edges, "solved_nodes": graph.num_nodes,
      "coarsened": coarse is not None, "max_nodes": int(max_nodes),
      "topology": topo_text, "devices": topo.num_devices,
      "mem_capacity": results.finite(caps.min()),
      "mem_capacities": [results.finite(c) for c in caps.tolist()],
      "mem_reference": results.finite(footprint), "objective": objective, "seed": int(seed),
      "lower_bound": lb, "method": method, "checkpoint": label,
      "go_skipped": go_skipped, "baseline_errors": errors,
      "finetune_seconds": float(finetune_seconds), "finetune_updates": finetune_updates,
      "learning_rate": float(learning_rate), "samples": samples,
      "baselines": list(baselines), "skipped_baselines": unknown,
      "brkga_budget": int(brkga_budget), "partition": list(partition), **job.settings(),
      "seconds": time.perf_counter() - t0,
  }
  return PlaceResult(rows, best, graph, original, coarse, topo, lb, settings, original_scores)


__all__ = ["place", "load_graph_arg", "partition_methods", "PARTITION_ALL", "load_policy", "PlaceResult", "Row",
           "markdown_table", "header", "verdict", "to_json", "write_outputs", "write_results_json",
           "bound_kind", "bound_lines", "gap_text", "DEFAULT_GRAPH", "DEFAULT_TOPOLOGY",
           "DEFAULT_BASELINES", "DEFAULT_METHOD"]
