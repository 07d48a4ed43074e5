"""The evaluation harness (DESIGN section 7): methods x graphs x topologies x seeds -> tables.

  rows = harness.run(config, out="results/evaluate")   # config: see DEFAULTS

Every cell (method, graph spec, topology spec, seed, objective) is one `methods.solve` call;
its `Solution` becomes one row, which also records whether re-simulating the solution's
placement and priority with `methods.evaluate` gives exactly the same objective (`agrees`), so
that no method can report a number the simulator would not give. Results go to `<out>/`:

  results.json  every row plus the config (the store the run resumes from)
  results.csv   the same rows, one line each
  results.md    a table of the rows, then per graph a pivot of objective by method (rows:
                topology, best per row in bold)
  plots/        with `plots`: a Gantt/memory chart per cell and a bar chart per graph/topology

Resumable: results.json is rewritten atomically after every cell, and a later run with the same
out folder skips every cell whose key (method, graph, topology, seed, objective) already has a
row without an error (rows that recorded an error are run again). A cell that raises becomes a
row with `error` set, unless `fail_fast`.

Topology specs are `PRESET` or `PRESET@mem=VALUE`: VALUE is bytes per device ("2e9", "inf") or
a multiple of the graph's single-device footprint ("0.6x"). The footprint is the smallest peak
memory over devices of the placements that put every op on one device (priority: critical path,
infinite memory), i.e. what `solve("single")` needs; any factor below 1 therefore makes every
single-device placement infeasible: the memory-constrained setting in which the model must be
split.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from absl import logging

import simulator
from go_jax import leaderboard, methods, objectives, plotting
from go_jax.placements import upward_rank
from simulator import fileio, sources

DEFAULTS: Dict[str, Any] = {
    "methods": ["single", "random", "round_robin", "expert"],
    "graphs": ["layered:n=100,width=10,seed=0"],
    "topologies": ["nvlink4"],
    "seeds": [0],
    "objective": "makespan",  # or a list of objectives
    "budget": None,  # simulator evaluations per search (None: each method's default)
    "schedule_placement": "expert",  # placement method whose result scheduling methods order
    "plots": False,
    "fail_fast": False,
}
JSON_NAME, CSV_NAME, MD_NAME = "results.json", "results.csv", "results.md"

# Row fields, in CSV order.
COLUMNS = (
    "method", "method_kind", "graph", "graph_name", "nodes", "edges", "topology", "preset",
    "devices", "mem_capacity", "mem_reference", "seed", "objective_kind", "budget",
    "placement_from", "objective", "makespan", "peak_memory", "feasible", "reason",
    "lower_bound", "gap", "search_seconds", "evaluations", "resimulated_objective", "agrees",
    "error")
KEY_FIELDS = ("method", "graph", "topology", "seed", "objective_kind")


# ------------------------------------------------------------------ topology specs
def _parse_mem(text: str, spec: str) -> Tuple[Optional[float], Optional[float]]:
  """'2e9' / 'inf' -> (bytes, None); '0.6x' -> (None, factor)."""
  relative = text.endswith("x")
  try:
    value = float(text[:-1] if relative else text)
  except ValueError:
    value = float("nan")
  if not value >= 0 or (relative and not math.isfinite(value)):
    raise ValueError(f"topology spec {spec!r}: mem must be bytes >= 0 ('2e9', 'inf') or a "
                     f"finite factor of the single-device footprint ('0.6x'), got {text!r}")
  return (None, value) if relative else (value, None)


# Option key -> parser of its value: (bytes, factor of the single-device footprint).
TOPOLOGY_OPTIONS = {"mem": _parse_mem}


@dataclasses.dataclass(frozen=True)
class TopologySpec:
  """A parsed topology spec: preset name and an optional memory override."""
  spec: str
  preset: str
  mem_bytes: Optional[float] = None  # absolute per-device capacity
  mem_factor: Optional[float] = None  # capacity = factor * single-device footprint


def parse_topology(spec: str) -> TopologySpec:
  """Parses 'PRESET' or 'PRESET@mem=VALUE' (see the module docstring); ValueError if bad."""
  if not isinstance(spec, str) or not spec.strip():
    raise ValueError(f"topology spec must be a non-empty string, got {spec!r}")
  name, *options = [s.strip() for s in spec.strip().split("@")]
  if name not in simulator.available_presets():
    raise ValueError(f"topology spec {spec!r}: unknown preset {name!r}; available: "
                     f"{sorted(simulator.available_presets())}")
  parsed = {}
  for option in options:
    key, eq, value = option.partition("=")
    if not eq or key.strip() not in TOPOLOGY_OPTIONS:
      raise ValueError(f"topology spec {spec!r}: bad option {option!r}; expected one of "
                       f"{[k + '=VALUE' for k in TOPOLOGY_OPTIONS]}")
    if key.strip() in parsed:
      raise ValueError(f"topology spec {spec!r}: option {key.strip()!r} given twice")
    parsed[key.strip()] = TOPOLOGY_OPTIONS[key.strip()](value.strip(), spec)
  mem_bytes, mem_factor = parsed.get("mem", (None, None))
  return TopologySpec(spec.strip(), name, mem_bytes, mem_factor)


def single_device_footprint(graph, topology) -> float:
  """Smallest peak memory (bytes) over devices of 'every op on device d', memory unbounded."""
  d, n = topology.num_devices, graph.num_nodes
  free = topology.with_memory(np.inf)
  place = np.repeat(np.arange(d)[:, None], n, axis=1)
  prio = np.broadcast_to(upward_rank(graph), (d, n))
  res = simulator.simulate(graph, free, place, prio)
  return float(np.asarray(res.peak_memory).max(axis=1).min())


def make_topology(spec: TopologySpec, graph) -> Tuple[simulator.Topology, Optional[float]]:
  """(topology of the spec for this graph, footprint it was scaled from or None)."""
  topo = simulator.preset(spec.preset)
  if spec.mem_bytes is not None:
    return topo.with_memory(spec.mem_bytes), None
  if spec.mem_factor is not None:
    ref = single_device_footprint(graph, topo)
    return topo.with_memory(spec.mem_factor * ref), ref
  return topo, None


# ------------------------------------------------------------------ cells
@dataclasses.dataclass(frozen=True)
class Cell:
  method: str
  graph: str
  topology: str
  seed: int
  objective: str

  @property
  def key(self) -> Tuple:
    return (self.method, self.graph, self.topology, self.seed, self.objective)


def row_key(row: Mapping[str, Any]) -> Tuple:
  return tuple(row[k] for k in KEY_FIELDS)


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
  for field in ("methods", "graphs", "topologies", "seeds", "objective"):
    out[field] = _as_list(out[field], field)
  out["seeds"] = [int(s) for s in out["seeds"]]
  return out


def plan(cfg: Mapping[str, Any]) -> List[Cell]:
  """Every cell of a config, in table order; methods not registered are dropped (warning)."""
  known = methods.available()
  missing = [m for m in cfg["methods"] if m not in known]
  if missing:
    logging.warning("harness: skipping method(s) not available: %s (available: %s)",
                    missing, sorted(known))
  names = [m for m in dict.fromkeys(cfg["methods"]) if m in known]
  if not names:
    raise ValueError(f"harness config: none of the methods {cfg['methods']} is available; "
                     f"available: {sorted(known)}")
  for spec in cfg["topologies"]:
    parse_topology(spec)
  for obj in cfg["objective"]:
    objectives.get_objective(obj)
  sp = cfg["schedule_placement"]
  if any(methods.METHODS[m].kind == "schedule" for m in names) and (
      sp not in known or methods.METHODS[sp].kind == "schedule"):
    raise ValueError(f"harness config: schedule_placement {sp!r} must name a placement "
                     "method, e.g. 'expert'")
  return [Cell(m, g, t, s, o) for o in cfg["objective"] for g in cfg["graphs"]
          for t in cfg["topologies"] for m in names for s in cfg["seeds"]]


class _Instances:
  """Graphs, topologies and fixed placements, built once per spec and cached."""

  def __init__(self, cfg):
    self.cfg = cfg
    self._graphs, self._topos, self._placements = {}, {}, {}

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
      sol = methods.solve(self.cfg["schedule_placement"], self.graph(cell.graph), topo,
                          objective=cell.objective, seed=cell.seed, budget=self.cfg["budget"])
      self._placements[key] = sol.placement
    return self._placements[key]


def _finite(x) -> Optional[float]:
  """JSON-safe float: None for NaN / inf (strict JSON has neither)."""
  if x is None:
    return None
  x = float(x)
  return x if math.isfinite(x) else None


def _base_row(cell: Cell, cfg) -> Dict[str, Any]:
  row = {c: None for c in COLUMNS}
  kind = methods.METHODS[cell.method].kind
  row.update(method=cell.method, method_kind=kind, graph=cell.graph, topology=cell.topology,
             preset=parse_topology(cell.topology).preset, seed=cell.seed,
             objective_kind=cell.objective, budget=cfg["budget"],
             placement_from=cfg["schedule_placement"] if kind == "schedule" else None, error="")
  return row


def run_cell(cell: Cell, inst: _Instances, plot_dir: Optional[str] = None):
  """One solve + re-simulation; returns (row, solution). Exceptions propagate."""
  cfg = inst.cfg
  row = _base_row(cell, cfg)
  graph = inst.graph(cell.graph)
  row.update(graph_name=graph.name, nodes=graph.num_nodes, edges=graph.num_edges)
  topo, footprint = inst.topology(cell.topology, cell.graph)
  cap = np.asarray(topo.mem_capacity, float)
  row.update(devices=topo.num_devices, mem_capacity=_finite(cap.min()),
             mem_reference=_finite(footprint))
  fixed = (inst.fixed_placement(cell) if row["method_kind"] == "schedule" else None)
  sol = methods.solve(cell.method, graph, topo, objective=cell.objective, seed=cell.seed,
                      budget=cfg["budget"], placement=fixed)
  again = methods.evaluate(graph, topo, sol.placement, sol.priority, cell.objective)
  row.update(objective=_finite(sol.objective), makespan=_finite(sol.makespan),
             peak_memory=_finite(np.max(sol.peak_memory)), feasible=bool(sol.feasible),
             reason=sol.reason, lower_bound=_finite(sol.lower_bound), gap=_finite(sol.gap),
             search_seconds=float(sol.search_seconds), evaluations=int(sol.evaluations),
             resimulated_objective=_finite(again["objective"]),
             agrees=bool(again["objective"] == sol.objective))
  if plot_dir is not None:
    ref = simulator.reference_simulate(graph, topo, sol.placement, sol.priority)
    plotting.plot_schedule(graph, topo, ref, os.path.join(plot_dir, _file_name(cell) + ".png"),
                           title=f"{cell.method} on {graph.name} / {cell.topology} (seed "
                           f"{cell.seed}): {cell.objective} {sol.objective:.6g}"
                           f"{'' if sol.feasible else ', OUT OF MEMORY'}")
  return row, sol


def _file_name(cell: Cell) -> str:
  parts = (cell.graph, cell.topology, cell.method, f"s{cell.seed}", cell.objective)
  return "__".join(re.sub(r"[^A-Za-z0-9_.=-]+", "_", p) for p in parts)


def _error_row(cell: Cell, cfg, exc: BaseException) -> Dict[str, Any]:
  row = _base_row(cell, cfg)
  row.update(error=f"{type(exc).__name__}: {exc}", feasible=False, agrees=False)
  return row


# ------------------------------------------------------------------ run
def load_rows(out: str) -> List[Dict[str, Any]]:
  """Rows of `<out>/results.json`, or [] where there is none yet."""
  path = os.path.join(out, JSON_NAME)
  if not os.path.exists(path):
    return []
  with open(path) as fh:
    data = json.load(fh)
  if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
    raise ValueError(f"{path}: not a harness result file (expected an object with 'rows')")
  return data["rows"]


def _ordered(done: Dict[Tuple, Dict], cells: Sequence[Cell]) -> List[Dict[str, Any]]:
  """This config's rows in cell order, then rows of other configs kept from the store."""
  planned = [c.key for c in cells]
  ours = set(planned)
  return ([done[k] for k in planned if k in done] +
          [r for k, r in done.items() if k not in ours])


def run(config, out: str, *, plots: Optional[bool] = None,
        progress: bool = True) -> List[Dict[str, Any]]:
  """Runs every cell of `config` not already in `<out>/results.json`; returns all rows.

  Args:
    config: ConfigDict or mapping with the fields of DEFAULTS.
    out: result folder (created).
    plots: overrides config.plots.
    progress: show a tqdm bar (cells done, rate, ETA).
  """
  import tqdm  # pylint: disable=g-import-not-at-top
  cfg = settings(config)
  if plots is not None:
    cfg["plots"] = bool(plots)
  cells = plan(cfg)
  os.makedirs(out, exist_ok=True)
  done = {row_key(r): r for r in load_rows(out)}
  todo = [c for c in cells if not (c.key in done and not done[c.key].get("error"))]
  inst = _Instances(cfg)
  plot_dir = os.path.join(out, "plots") if cfg["plots"] else None
  bar = tqdm.tqdm(total=len(cells), initial=len(cells) - len(todo), unit="cell",
                  disable=not progress, dynamic_ncols=True)
  try:
    for cell in todo:
      bar.set_postfix_str(f"{cell.method} {cell.graph} {cell.topology} s{cell.seed}")
      try:
        row, _ = run_cell(cell, inst, plot_dir)
      except Exception as exc:  # pylint: disable=broad-except
        if cfg["fail_fast"]:
          raise
        logging.warning("harness: cell %s failed: %s", cell, exc, exc_info=True)
        row = _error_row(cell, cfg, exc)
      done[cell.key] = row
      _write_json(out, cfg, _ordered(done, cells))
      bar.update(1)
  finally:
    bar.close()
  rows = _ordered(done, cells)
  write_outputs(out, cfg, rows)
  if plot_dir is not None:
    plot_comparisons(rows, plot_dir)
  return rows


def _write_json(out: str, cfg, rows) -> str:
  return fileio.write_json(os.path.join(out, JSON_NAME), {"config": dict(cfg), "rows": rows})


def write_outputs(out: str, cfg, rows) -> Dict[str, str]:
  """Writes results.json, results.csv and results.md (atomically); returns their paths."""
  paths = {"json": _write_json(out, cfg, rows), "csv": os.path.join(out, CSV_NAME),
           "md": os.path.join(out, MD_NAME)}
  with fileio.atomic_open(paths["csv"], "w", make_dirs=True) as fh:
    writer = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows([{c: ("" if r.get(c) is None else r.get(c)) for c in COLUMNS}
                      for r in rows])
  with fileio.atomic_open(paths["md"], "w", make_dirs=True) as fh:
    fh.write(markdown(rows))
  return paths


# ------------------------------------------------------------------ reports
def _fmt_value(value, kind: str) -> str:
  """Objective value with its unit: seconds for makespan, bytes for memory."""
  if value is None:
    return "-"
  return (plotting.format_bytes(value) if kind == "peak_memory"
          else plotting.format_seconds(value))


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
  """One Markdown line per row."""
  head = ("method", "graph", "N", "topology", "D", "seed", "objective", "makespan",
          "peak mem", "feasible", "gap", "search", "evals", "agrees", "note")
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    note = r.get("error") or r.get("reason") or ""
    cells = (r["method"], r.get("graph_name") or r["graph"], r.get("nodes"), r["topology"],
             r.get("devices"), r["seed"],
             f"{r['objective_kind']} {_fmt_value(r.get('objective'), r['objective_kind'])}",
             _fmt_value(r.get("makespan"), "makespan"),
             _fmt_value(r.get("peak_memory"), "peak_memory"),
             "error" if r.get("error") else ("yes" if r.get("feasible") else "NO"),
             "-" if r.get("gap") is None else f"{r['gap']:.1%}",
             "-" if r.get("search_seconds") is None else f"{r['search_seconds']:.3g} s",
             r.get("evaluations"), "yes" if r.get("agrees") else "NO",
             str(note).replace("|", "/").replace("\n", " ")[:80])
    lines.append("| " + " | ".join("-" if c is None else str(c) for c in cells) + " |")
  return "\n".join(lines)


def _mean_objectives(rows) -> Dict[Tuple, Dict[str, Any]]:
  """(objective, graph, topology, method) -> mean objective over seeds, all feasible, errors."""
  groups: Dict[Tuple, List] = {}
  for r in rows:
    groups.setdefault((r["objective_kind"], r["graph"], r["topology"], r["method"]), []).append(r)
  out = {}
  for key, rs in groups.items():
    ok = [r for r in rs if not r.get("error") and r.get("objective") is not None]
    out[key] = {"mean": float(np.mean([r["objective"] for r in ok])) if ok else None,
                "feasible": all(r.get("feasible") for r in ok), "errors": len(rs) - len(ok)}
  return out


def markdown_pivots(rows: Sequence[Mapping[str, Any]]) -> str:
  """Per (objective, graph): objective (mean over seeds) by topology x method, best in bold."""
  stats = _mean_objectives(rows)
  blocks = []
  for obj, graph in dict.fromkeys((k[0], k[1]) for k in stats):
    topos = list(dict.fromkeys(k[2] for k in stats if k[:2] == (obj, graph)))
    meths = list(dict.fromkeys(k[3] for k in stats if k[:2] == (obj, graph)))
    lines = [f"### {graph}: {obj} (mean over seeds; lower is better; OOM = infeasible)", "",
             "| topology | " + " | ".join(meths) + " |", "|---|" + "---|" * len(meths)]
    for topo in topos:
      cells = [stats.get((obj, graph, topo, m)) for m in meths]
      means = [c["mean"] for c in cells if c and c["mean"] is not None]
      best = min(means) if means else None
      texts = []
      for c in cells:
        if c is None:
          texts.append("")
          continue
        text = "error" if c["mean"] is None else _fmt_value(c["mean"], obj)
        if c["mean"] is not None and not c["feasible"]:
          text += " (OOM)"
        if c["mean"] is not None and c["mean"] == best:
          text = f"**{text}**"
        texts.append(text)
      lines.append(f"| {topo} | " + " | ".join(texts) + " |")
    blocks.append("\n".join(lines))
  return "\n\n".join(blocks)


def markdown(rows: Sequence[Mapping[str, Any]]) -> str:
  """The whole report: the leaderboard, the row table, then the per-graph pivots."""
  return ("## Summary\n\n" + leaderboard.markdown_leaderboard(rows) + "\n\n## Results\n\n" +
          markdown_table(rows) + "\n\n## Objective by method\n\n" + markdown_pivots(rows) + "\n")


def plot_comparisons(rows: Sequence[Mapping[str, Any]], plot_dir: str) -> List[str]:
  """One bar chart per (objective, graph, topology): mean objective by method."""
  stats = _mean_objectives(rows)
  paths = []
  for obj, graph, topo in dict.fromkeys(k[:3] for k in stats):
    entries = [(k[3], v["mean"]) for k, v in stats.items()
               if k[:3] == (obj, graph, topo) and v["mean"] is not None]
    if not entries:
      continue
    name = "__".join(re.sub(r"[^A-Za-z0-9_.=-]+", "_", p) for p in (graph, topo, obj))
    paths.append(plotting.plot_bars(
        [e[0] for e in entries], [e[1] for e in entries],
        os.path.join(plot_dir, f"compare__{name}.png"), title=f"{graph} on {topo}",
        ylabel=f"{obj} ({'bytes' if obj == 'peak_memory' else 's'})"))
  return paths


def summarize(rows: Iterable[Mapping[str, Any]]) -> Dict[str, int]:
  """Counts of rows, errors, infeasible rows and re-simulation disagreements."""
  rows = list(rows)
  return {"rows": len(rows), "errors": sum(bool(r.get("error")) for r in rows),
          "infeasible": sum(not r.get("feasible") and not r.get("error") for r in rows),
          "disagreements": sum(not r.get("agrees") and not r.get("error") for r in rows)}
