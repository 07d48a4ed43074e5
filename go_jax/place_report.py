"""go-jax-place's report of one `go_jax.place.PlaceResult`: the comparison table, the header, the
verdict, and the files of the output folder (results.json / results.csv / results.md,
placement.npz, the Gantt charts and the objective bars).

  print(place_report.header(result)); print(place_report.markdown_table(result))
  print(place_report.verdict(result)); place_report.write_outputs(result, "results/place")

Separate from `go_jax.place` because it is a different concern: `place` runs the methods on one
instance (coarsening, the harness cells, scoring every action) and returns a `PlaceResult`; this
module only reads a finished result and formats or writes it, and it never solves anything.
`go_jax.place` re-exports every public name here (`place.verdict(result)`,
`place.write_outputs(...)`, `place.LAUNCHER`, ...), so callers need not know of the split.
`go_jax.place_execute` (--execute) adds its "execution" entry through `write_results_json`.

An infeasible row never shows its penalty objective as a value: the table shows what it needs
against the capacity, and the verdict says that no method found a feasible placement (no
winner) when none did.

"gap to LB" is each row's objective against the lower bound its own answer is held to
(`methods.solve`, design.md section 5), and the header states every bound a row uses
(`bound_lines`): the solved graph's for an unfused action (unmarked rows), the fusion
relaxation's for one that fuses (marked [F]; `objectives.fusion_relaxation`: a fused answer can
beat the unfused graph's bound) and, for a partition row (marked [P]), the bound of the
expanded graph that partitioning answers on (design.md 4.2). A gap within float rounding of 0
(the simulator's float32 objective against a float64 bound, `methods.GAP_ROUNDING`) reads
0.0%; one further below the bound is printed with "BELOW LB", since it means a wrong bound
(`gap_text`, go_jax.harness_reports's: go-jax-evaluate's table prints gaps by the same rule).
"""

from __future__ import annotations

import math
import os
import re
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Set

import numpy as np

from go_jax import objectives, place_tasks, plotting, results
# The gap cell is go-jax-evaluate's too: one rule for both tables (re-exported here).
from go_jax.harness_reports import gap_text, try_plot
from simulator import fileio

if TYPE_CHECKING:  # annotations only: go_jax.place imports this module
  from go_jax.place import PlaceResult

LAUNCHER = "place"  # the launcher results.json records (another launcher's folder is refused)
JSON_NAME, CSV_NAME, MD_NAME = results.JSON_NAME, results.CSV_NAME, results.MD_NAME
NPZ_NAME, BARS_NAME = "placement.npz", "objective_bars.png"
EXECUTION_MD = "execution.md"  # written by go_jax.place_execute (its MD_NAME)


def _fmt(value: float, objective: str) -> str:
  return objectives.get_objective(objective).format(value)


# The lower bound a row's gap is taken against (`bound_kind`) -> the mark its gap carries in
# the table ("": none) and what the header says that bound is.
GRAPH_BOUND, FUSED_BOUND, PARTITION_BOUND = "graph", "fused", "partition"
BOUND_MARKS = {GRAPH_BOUND: "", FUSED_BOUND: "[F]", PARTITION_BOUND: "[P]"}


def bound_kind(row) -> str:
  """Which lower bound a row's gap is against, as `methods.solve` chose it: a partition row's
  expanded graph's, the fusion relaxation's for an action with a fuse mask, else the solved
  graph's."""
  if row.kind == "partition":
    return PARTITION_BOUND
  return FUSED_BOUND if row.fuse is not None else GRAPH_BOUND


def bound_lines(result: PlaceResult) -> List[str]:
  """The header's lines on the lower bounds the table's gaps are against: one line "objective:
  X (lower bound B)" when every row uses the solved graph's bound B, else the objective and one
  line per kind of bound a row uses (`bound_kind`), with its table mark and value (each row's
  where the rows of one kind differ: the partition rows' expanded graphs)."""
  obj, lb = result.settings["objective"], result.settings["lower_bound"]
  kinds: Dict[str, List[Any]] = {}
  for r in result.rows:
    kinds.setdefault(bound_kind(r), []).append(r)
  if set(kinds) <= {GRAPH_BOUND} and _values(kinds.get(GRAPH_BOUND, ()), lb) == [lb]:
    return [f"objective: {obj} (lower bound {_fmt(lb, obj)})"]
  lines = [f"objective: {obj}; each row's gap to LB is against its own answer's lower bound:"]
  what = {GRAPH_BOUND: "the graph's (unmarked rows: unfused actions)",
          FUSED_BOUND: ("the fusion relaxation's (rows that fuse; a fused answer can beat the "
                        f"unfused graph's {_fmt(lb, obj)})"),
          PARTITION_BOUND: ("the expanded graph's of each partition row (it answers on its own "
                            "expanded graph and does not compete with the placements)")}
  for kind in (GRAPH_BOUND, FUSED_BOUND, PARTITION_BOUND):
    rows = kinds.get(kind)
    if not rows:
      continue
    values = _values(rows, lb if kind == GRAPH_BOUND else None)
    if len(values) == 1:
      value = _bound_text(values[0], obj)
    else:
      value = "; ".join(f"{r.method} {_bound_text(r.data.get('lower_bound'), obj)}"
                        for r in rows)
    mark = BOUND_MARKS[kind]
    lines.append(f"  lower bound{' ' + mark if mark else ''}: {value}, {what[kind]}")
  return lines


def _values(rows: Sequence[Any], default: Optional[float]) -> List[Optional[float]]:
  """The distinct lower bounds of `rows` (their harness rows' "lower_bound"; `default` where a
  row has none), in order."""
  out: List[Optional[float]] = []
  for r in rows:
    value = r.data.get("lower_bound") if r.data else None
    value = default if value is None else value
    if value not in out:
      out.append(value)
  return out


def _bound_text(value: Optional[float], objective: str) -> str:
  return "-" if value is None or not math.isfinite(value) else _fmt(value, objective)


def markdown_table(result: PlaceResult) -> str:
  """The comparison table (Markdown), the winner's objective in bold; an infeasible row shows
  what it needs against the capacity, never its penalty objective."""
  obj = result.settings["objective"]
  caps = np.asarray(result.topology.mem_capacity, np.float64)
  head = ("method", f"objective ({obj})", "makespan", "peak memory / capacity", "feasible",
          "gap to LB", "search s")
  fused = any(r.groups is not None for r in result.rows)  # a column of fused graph sizes
  head += (f"groups ({result.graph.num_nodes} ops)",) if fused else ()
  body = []
  for r in result.rows:
    peak = float(np.max(r.peak_memory))
    cap = results.capacity_text(caps)
    mem = f"{plotting.format_bytes(peak)} / {cap}"
    if np.all(np.isfinite(caps) & (caps > 0)):  # the fullest device against its own capacity
      frac = float(np.max(r.peak_memory / caps))
      mem += f" ({frac:.0%})" if frac < 10 else f" ({frac:.3g} x)"
    value = results.value_text(r.data) if r.data else _fmt(r.objective, obj)
    body.append((r.method, f"**{value}**" if r is result.winner else value,
                 plotting.format_seconds(r.makespan), mem, "yes" if r.feasible else "NO",
                 gap_text(r.gap, r.feasible, BOUND_MARKS[bound_kind(r)]),
                 f"{r.search_seconds:.3g}")
                + ((str(r.groups) if r.groups is not None else "-",) if fused else ()))
  return results.markdown_table(head, body, ["l"] + ["r"] * (len(head) - 1))


def header(result: PlaceResult) -> str:
  """What was solved: graph, coarsening, topology (every device's capacity), objective, lower
  bound, GO's start or why GO was skipped."""
  s, g, obj = result.settings, result.original, result.settings["objective"]
  lines = [f"graph: {s['graph'] or g.name} ('{g.name}', {g.num_nodes} ops, "
           f"{g.num_edges} edges)"]
  if result.coarsened is not None:
    lines.append(f"coarsened to {result.graph.num_nodes} nodes (the graph has more than "
                 f"max_nodes={s['max_nodes']}): methods solved the coarse graph; placement.npz "
                 "also holds the placements expanded to the original nodes, which score there:")
    lines += [f"  {r.method}: {obj} "
              f"{_fmt(v['objective'], obj) if v['feasible'] else 'OUT OF MEMORY'}"
              for r in {id(r): r for r in (result.best, result.go_row) if r}.values()
              for v in [result.original_scores[r.key]]]
  lines.append(f"topology: {s['topology']} ({s['devices']} devices, memory "
               f"{results.capacity_text(result.topology)})")
  lines += bound_lines(result)
  lines += place_tasks.header_lines(s, lambda v: _fmt(v, obj))
  if s.get("go_skipped"):
    lines.append(f"GO skipped: {s['go_skipped']}")
  elif s.get("method"):
    lines.append(f"GO: {s['method']} from checkpoint {s['checkpoint']}; GO search seconds are "
                 "wall time including loading and XLA compilation")
  for name, error in (s.get("baseline_errors") or {}).items():
    lines.append(f"{name} skipped: {error}")
  return "\n".join(lines)


def verdict(result: PlaceResult) -> str:
  """One line: which method won and by how much against the best baseline, or that no method
  found a feasible placement."""
  part = [r for r in result.rows if r.kind == "partition"]
  text = _verdict(result)
  if part:
    best_p = min(part, key=lambda r: r.objective)
    text += (f"; partitioning: {best_p.method} best with "
             f"{_fmt(best_p.objective, result.settings['objective'])}" if best_p.feasible else
             "; partitioning: no feasible strategy")
  return text


def _verdict(result: PlaceResult) -> str:
  """`verdict` over the placement rows."""
  rows = [r for r in result.rows if r.kind != "partition"]
  none = results.no_feasible_text([r.data for r in rows])
  if none:
    return none[0].upper() + none[1:] + "; no winner"
  best, obj = result.best, result.settings["objective"]
  base = result.best_baseline
  fmt = lambda v: _fmt(v, obj)
  skipped = (f" (GO skipped: {result.settings['go_skipped']})"
             if result.settings.get("go_skipped") else " (GO not run)")
  if base is None:
    return f"{best.method} won with {fmt(best.objective)} (no baselines run)"
  if best.kind == "go":
    if not base.feasible:
      return (f"{best.method} won: {fmt(best.objective)}; no baseline found a feasible "
              f"placement (the best, {base.method}, is {results.infeasible_text(base.data)})")
    return (f"{best.method} won: {fmt(best.objective)}, "
            f"{_difference(best.objective, base.objective, obj)} the best baseline "
            f"{base.method} ({fmt(base.objective)})")
  go = min((r for r in result.rows if r.kind == "go"), key=lambda r: r.objective, default=None)
  if go is None:
    return f"{best.method} won with {fmt(best.objective)}{skipped}"
  if go.objective == best.objective:
    return f"{best.method} won with {fmt(best.objective)}, tied by {go.method}"
  if not go.feasible:
    return (f"{best.method} ({best.kind}) won: {fmt(best.objective)}; GO found no feasible "
            f"placement (its best, {go.method}, is {results.infeasible_text(go.data)})")
  return (f"{best.method} ({best.kind}) won: {fmt(best.objective)}; GO's best ({go.method}, "
          f"{fmt(go.objective)}) is {_difference(go.objective, best.objective, obj)} it")


def _difference(value: float, ref: float, objective: str) -> str:
  """'3.20% below' or '3.20% above': `value` against `ref` in percent of `ref`, or in the
  objective's unit where `ref` is 0 (a zero makespan or peak memory: the verdict divided by
  zero)."""
  word = "above" if value > ref else "below"
  if ref > 0:
    return f"{abs(value / ref - 1):.2%} {word}"
  return f"{_fmt(abs(value - ref), objective)} {word}"


def to_json(result: PlaceResult) -> Dict[str, Any]:
  """results.json's payload: the settings (as `config`), the rows in the harness's row format
  (plus the place row key and kind), the best method and the verdict."""
  rows = [dict(r.data, key=r.key, kind=r.kind, name=r.method,
                **({"groups": r.groups} if r.groups is not None else {})) for r in result.rows]
  out = {"config": result.settings, "settings": result.settings,
         "best": result.winner.method if result.winner else None,
         "verdict": verdict(result), "rows": rows}
  if result.coarsened is not None:
    out["original_graph"] = result.original_scores  # row key -> expanded action's scores
  return out


def _slug(key: str) -> str:
  return re.sub(r"[^A-Za-z0-9_.-]+", "_", key)


def write_outputs(result: PlaceResult, out: str, *, plots: bool = True) -> Dict[str, str]:
  """Writes results.json, results.csv, results.md, placement.npz and (with plots) the PNGs;
  returns their paths. ValueError if another launcher's results are in `out`. A plot that
  cannot be drawn is a warning (`try_plot`), not an error: it stopped the writing after
  placement.npz, beside the previous run's results.json and tables."""
  old = results.load(out, LAUNCHER)  # another launcher's folder: stop, never overwrite it
  os.makedirs(out, exist_ok=True)
  stale = _owned_files(out, (old or {}).get("files"))  # an earlier run's, removed at the end
  files = {}
  best, go = result.best, result.go_row
  arrays = {"placement": result.expand(best.placement),
            "priority": result.expand(best.priority), "method": np.array(best.method),
            "feasible": np.array(best.feasible)}
  if best.fuse is not None:  # the fusing tasks never coarsen
    arrays["fuse"] = best.fuse
  if go is not None:
    arrays.update(go_placement=result.expand(go.placement),
                  go_priority=result.expand(go.priority), go_method=np.array(go.method))
    if go.fuse is not None:
      arrays["go_fuse"] = go.fuse
  if result.coarsened is not None:
    arrays.update(mapping=result.coarsened.mapping, coarse_placement=best.placement,
                  coarse_priority=best.priority)
    if go is not None:
      arrays.update(coarse_go_placement=go.placement, coarse_go_priority=go.priority)
  files["placement"] = os.path.join(out, NPZ_NAME)
  with fileio.atomic_open(files["placement"], "wb") as fh:
    np.savez(fh, **arrays)
  obj = result.settings["objective"]
  if plots:
    for r in {id(r): r for r in (go, result.best_baseline) if r is not None}.values():
      path = os.path.join(out, f"gantt_{_slug(r.key)}.png")
      title = (f"{r.method} on {result.graph.name} / {result.settings['topology']}: {obj} "
               f"{results.value_text(r.data)}")
      if not try_plot(f"{r.method}'s Gantt chart", place_tasks.plot_gantt, result.graph,
                      result.topology, r, path, title):
        files[f"gantt_{r.key}"] = path
    feasible = [r for r in result.rows if r.feasible]
    path = os.path.join(out, BARS_NAME)
    if feasible and not try_plot(  # an infeasible row's objective is a penalty, not a value
        "the objective bars", plotting.plot_bars, [r.method for r in feasible],
        [r.objective for r in feasible], path, title=f"{result.graph.name} on "
        f"{result.settings['topology']} (feasible methods)",
        ylabel=f"{obj} ({objectives.get_objective(obj).unit})", reference=result.lower_bound):
      files["bars"] = path
  files["table"] = results.write_markdown(
      out, header(result) + "\n\n" + markdown_table(result) + "\n\n" + verdict(result))
  cols = results.COLUMNS + (("groups",) if any(r.fuse is not None for r in result.rows) else ())
  files["csv"] = results.write_csv(out, [dict(r.data, groups=r.groups) for r in result.rows], cols)
  files["results"] = write_results_json(result, out, files)
  written = {os.path.abspath(v) for v in files.values()}
  for path in stale - written:  # a plot or execution.md of an earlier run in this folder
    try:
      os.remove(path)
    except FileNotFoundError:
      pass
  return {k: os.path.abspath(v) for k, v in files.items()}


def _owned_files(out: str, listed) -> Set[str]:
  """The files an earlier go-jax-place run listed in `out`'s results.json that it owns (its
  plots and execution.md, directly in `out`); nothing else there is ever removed."""
  if not isinstance(listed, dict):
    return set()
  folder, owned = os.path.abspath(out), set()
  for path in listed.values():
    if not isinstance(path, str):
      continue
    path = os.path.abspath(path)
    name = os.path.basename(path)
    if os.path.dirname(path) == folder and (name in (BARS_NAME, EXECUTION_MD) or (
        name.startswith("gantt_") and name.endswith(".png"))):
      owned.add(path)
  return owned


def write_results_json(result: PlaceResult, out: str, files: Mapping[str, str],
                       extra: Optional[Mapping[str, Any]] = None) -> str:
  """Writes results.json (atomically): `to_json`, the `files` written beside it and `extra`
  top-level entries (--execute adds "execution", `go_jax.place_execute`); returns its path."""
  data = dict(to_json(result), **(extra or {}))
  data["files"] = {k: os.path.abspath(v) for k, v in sorted(files.items())}
  return results.write_json(out, LAUNCHER, data)


__all__ = ["markdown_table", "header", "verdict", "to_json", "write_outputs", "write_results_json",
           "bound_kind", "bound_lines", "gap_text", "BOUND_MARKS", "LAUNCHER", "JSON_NAME",
           "CSV_NAME", "MD_NAME", "NPZ_NAME", "BARS_NAME"]
