"""go-jax-place's tasks (docs/design.md sections 4.1 and 7): what `go_jax.place.place` compares.

  result = place.place(graph, "nvlink1", task="fusion",
                       graph_spec="zoo:gpt2_small,size=tiny,stage=pre")

* `joint` (default): GO's placement and priority (`go_hint`) against the placement and joint
  baselines (heft, m_etf, ...): go-jax-place as it always was.
* `fusion`: the schedule is fixed: the placement and priority of `placement_from` (a placement
  or joint method, default heft; on one device every op is on device 0 whatever the method).
  Every fusion method (GO's `go_fusion`; the baselines no_fusion, fuse_all, xla_fusion) is
  given that same placement and priority, so the rows differ only in their fuse masks.
* `joint3`: GO places, orders and fuses (`go_joint3`) against the placement baselines and the
  sequential pipelines of the best feasible baseline: its placement and priority fused by
  xla_fusion and by fuse_all (rows "heft + xla_fusion", "heft + fuse_all", of kind "pipeline").

xla_fusion needs XLA's own decisions, which only a zoo: or jax: pre-optimisation program gives
(`go_jax.methods.fusion.xla_decisions_for_spec`, from the graph spec): elsewhere, or when the
program's pre graph is not the graph given, its rows are skipped with the reason in the header.
The fusing tasks need a graph with a cost reference (`simulator.fusion.check_fusable`) and do
not coarsen it (fused groups are costed from the original ops). Rows that fuse carry their fuse
mask and `groups`, the node count of the fused graph (`simulator.fusion.fuse_graph`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
from absl import logging

from go_jax import harness, methods
from simulator import fusion

TASKS = ("joint", "fusion", "joint3")
AUTO = "auto"  # the `method` meaning the task's own learned method
TASK_METHODS = {"joint": "go_hint", "fusion": "go_fusion", "joint3": "go_joint3"}
FUSION_BASELINES = ("no_fusion", "fuse_all", "xla_fusion")
PIPELINE_FUSIONS = ("xla_fusion", "fuse_all")  # what follows the best baseline in joint3
DEFAULT_PLACEMENT_FROM = "heft"
PLACING = ("placement", "joint")  # kinds that place (and perhaps order) the ops


def _kind(name: str) -> str:
  return methods.get(name).kind  # ValueError listing the methods


def groups(graph, placement, fuse) -> Optional[int]:
  """Nodes of the fused graph of one action (None: the action does not fuse)."""
  if fuse is None:
    return None
  return int(fusion.fuse_graph(graph, placement, fuse).graph.num_nodes)


class FixedSchedule(harness.Instances):
  """Harness instances whose fusion cells all fuse one given placement (the harness would solve
  `schedule_placement` again from its own config, without go-jax-place's options for it; the
  priority goes in the cell options)."""

  def __init__(self, cfg, placement):
    super().__init__(cfg)
    self.placement = np.asarray(placement, np.int64)

  def fixed_placement(self, cell) -> np.ndarray:
    del cell
    return self.placement


@dataclasses.dataclass
class Task:
  """One task of go-jax-place, resolved: its learned method, baselines and fixed schedule."""
  name: str
  method: Optional[str]  # GO's method (None: no GO rows)
  baselines: List[str]  # registered, of the task's kind
  unknown: List[str]  # built-in baselines given but not available here (skipped)
  placement_from: Optional[str]  # fusion: the method whose placement and priority are fused
  graph_spec: Optional[str] = None
  device_spec: str = "v100"
  schedule: Optional[methods.Solution] = None  # fusion: placement_from's solution
  pipeline_from: Optional[str] = None  # joint3: the baseline the pipelines start from
  _decisions: Any = None  # XLA's decisions, or the text of why there are none

  @property
  def fusing(self) -> bool:
    return self.name != "joint"

  def check_graph(self, graph, max_nodes: int) -> None:
    """ValueError unless the fusing tasks can fuse `graph` as it is."""
    if not self.fusing:
      return
    fusion.check_fusable(graph)
    if graph.num_nodes > max_nodes:
      raise ValueError(f"task '{self.name}' does not coarsen (fused groups are costed from the "
                       f"original ops): graph '{graph.name}' has {graph.num_nodes} nodes > "
                       f"max_nodes={max_nodes}; raise max_nodes")

  def instances(self, graph, topo, *, objective: str, seed: int,
                options: Callable[[str], Dict[str, Any]]) -> harness.Instances:
    """The harness instances of the task's cells; fusion: solves the fixed schedule first."""
    cfg = {"budget": None, "schedule_placement": self.placement_from}
    if self.name != "fusion":
      return harness.Instances(cfg)
    self.schedule = methods.solve(self.placement_from, graph, topo, objective=objective,
                                  seed=seed, **options(self.placement_from))
    logging.info("schedule: %s, %s %.6g unfused", self.placement_from, objective,
                 self.schedule.objective)
    return FixedSchedule(cfg, self.schedule.placement)

  def decisions(self, graph) -> np.ndarray:
    """XLA's fuse decisions on `graph` (computed once); ValueError saying why there are none."""
    if self._decisions is None:
      try:
        if not self.graph_spec:
          raise ValueError("no graph spec was given (graph_spec): XLA's decisions are rebuilt "
                           "from a zoo: or jax: pre-optimisation spec")
        from go_jax.methods import fusion as fusion_methods
        self._decisions = fusion_methods.xla_decisions_for_spec(self.graph_spec, graph,
                                                                self.device_spec)
      except ValueError as e:
        self._decisions = " ".join(str(e).split())
    if isinstance(self._decisions, str):
      raise ValueError(self._decisions)
    return self._decisions

  def options(self, name: Optional[str], graph) -> Dict[str, Any]:
    """A cell's extra options: in the fusion task the fixed priority (and XLA's decisions)."""
    if self.name != "fusion" or name is None:
      return {}
    out = {"priority": self.schedule.priority}
    if name == "xla_fusion":
      out["decisions"] = self.decisions(graph)
    return out

  def pipeline_rows(self, rows: Sequence[Any], run: Callable[..., List[Any]], graph,
                    errors: Dict[str, str]) -> List[Any]:
    """joint3: the best feasible baseline's placement and priority fused by each of
    PIPELINE_FUSIONS (`run(method, label, kind, instances, **options)` -> rows); a pipeline
    that cannot run is an entry of `errors`."""
    if self.name != "joint3":
      return []
    feasible = [r for r in rows if r.kind == "baseline" and r.feasible]
    if not feasible:
      errors["pipelines"] = "no baseline found a feasible placement to fuse"
      return []
    base = min(feasible, key=lambda r: r.objective)
    self.pipeline_from = base.method
    inst = FixedSchedule({"budget": None, "schedule_placement": base.method}, base.placement)
    out = []
    for name in PIPELINE_FUSIONS:
      label = f"{base.method} + {name}"
      try:
        opts = {"priority": base.priority}
        if name == "xla_fusion":
          opts["decisions"] = self.decisions(graph)
        new = run(name, label, "pipeline", inst, **opts)
      except ValueError as e:
        errors[label] = harness.error_text(e)
        logging.warning("%s: %s", label, errors[label])
        continue
      out += [dataclasses.replace(r, key=f"{base.key}+{name}") for r in new]
    return out

  def settings(self) -> Dict[str, Any]:
    out: Dict[str, Any] = {"task": self.name}
    if self.name == "fusion":
      s = self.schedule
      out.update(placement_from=self.placement_from,
                 schedule={"objective": s.objective, "makespan": s.makespan,
                           "feasible": bool(s.feasible)} if s is not None else None)
    if self.name == "joint3":
      out["pipeline_from"] = self.pipeline_from
    return out


def header_lines(settings: Dict[str, Any], fmt: Callable[[float], str]) -> List[str]:
  """The header's line on the task (none for "joint"); `fmt` formats an objective value."""
  task = settings.get("task", "joint")
  note = ("groups: nodes of the fused graph; a row that fuses has its gap to LB against the "
          "fusion relaxation's lower bound [F], which a fused answer cannot beat (the unfused "
          "graph's can be)")
  if task == "fusion":
    s = settings.get("schedule") or {}
    value = fmt(s["objective"]) if s.get("feasible") else "OUT OF MEMORY"
    return [f"task: fusion of {settings['placement_from']}'s placement and priority (unfused "
            f"{settings['objective']} {value}): every fusion method fuses this schedule", note]
  if task == "joint3":
    base = settings.get("pipeline_from")
    return ["task: joint3 (placement, priority and fusion); pipelines: " + (
        f"{base}'s placement and priority, then {' / '.join(PIPELINE_FUSIONS)}" if base
        else "none"), note]
  return []


def plot_gantt(graph, topology, row, path: str, title: str) -> str:
  """A row's Gantt/memory chart: one bar per fused group where the row fuses."""
  from go_jax import plotting  # local: matplotlib
  from simulator import reference_simulate
  if row.fuse is not None:
    return plotting.plot_fused_schedule(graph, topology, row.placement, row.priority, row.fuse,
                                        path, title=title)
  ref = reference_simulate(graph, topology, row.placement, row.priority)
  return plotting.plot_schedule(graph, topology, ref, path, title=title)


def resolve(task: str, method: Optional[str], baselines: Optional[Sequence[str]],
            placement_from: Optional[str], *, default_baselines: Sequence[str],
            graph_spec: Optional[str] = None, device_spec: str = "v100") -> Task:
  """The `Task` of place's arguments: `method` AUTO is the task's learned method (None: none),
  `baselines` None the task's defaults. ValueError naming both where a method, baseline or
  placement_from is of a kind the task cannot use, or the task is unknown."""
  if task not in TASKS:
    raise ValueError(f"unknown task {task!r}; tasks: {', '.join(TASKS)}")
  fits = ("fusion",) if task == "fusion" else PLACING
  if method == AUTO:
    method = TASK_METHODS[task]
  elif method is not None and _kind(method) not in fits:
    raise ValueError(f"method '{method}' (kind {_kind(method)}) does not fit task '{task}', "
                     f"which takes a {' or '.join(fits)} method, e.g. {TASK_METHODS[task]}")
  if baselines is None:
    baselines = FUSION_BASELINES if task == "fusion" else default_baselines
  if len(set(baselines)) != len(baselines):
    raise ValueError(f"baselines {list(baselines)}: a method is given twice")
  baselines, skipped = methods.usable(baselines, "baselines")
  unknown = list(skipped)
  for b, why in skipped.items():
    logging.warning("baseline %r is not available: %s; skipped", b, why)
  wrong = [b for b in baselines if _kind(b) not in fits]
  if wrong and task == "fusion":
    raise ValueError(f"task 'fusion': baselines {wrong} are not fusion methods; give fusion "
                     f"methods (e.g. {','.join(FUSION_BASELINES)}); the schedule they fuse is "
                     "placement_from's")
  if wrong:
    kinds = {_kind(b) for b in wrong}
    what = ("only schedule a fixed placement" if kinds == {"schedule"} else
            f"are of kind(s) {sorted(kinds)}")
    raise ValueError(f"baselines {wrong} {what}; give placement or joint methods for task "
                     f"'{task}'" + (" (fusion methods: task 'fusion')" if "fusion" in kinds
                                    else ""))
  if task == "fusion":
    if not placement_from:
      raise ValueError("task 'fusion' needs placement_from, a placement or joint method")
    try:
      methods.get(placement_from)
    except ValueError as e:
      raise ValueError(f"placement_from: {e}") from None
    if _kind(placement_from) not in PLACING:
      raise ValueError(f"placement_from '{placement_from}' (kind {_kind(placement_from)}) must "
                       f"be a placement or joint method, e.g. {DEFAULT_PLACEMENT_FROM}")
  return Task(task, method, list(baselines), unknown,
              placement_from if task == "fusion" else None, graph_spec, device_spec)


__all__ = ["TASKS", "TASK_METHODS", "FUSION_BASELINES", "PIPELINE_FUSIONS",
           "DEFAULT_PLACEMENT_FROM", "AUTO", "Task", "FixedSchedule", "resolve", "groups",
           "header_lines", "plot_gantt"]
