"""Reports of an evaluation sweep (`go_jax.harness`): the row table, the per-graph pivots of
mean objective by topology x method, the whole Markdown report and comparison bar charts.

Kept apart from the harness's planning and running: these read finished rows only (the
format of `go_jax.results`), so the launchers and the tables of other sweeps can use them on
any results file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from typing import Any, Dict, Iterable, List, Mapping, Sequence, Tuple

import numpy as np

from absl import logging

from go_jax import leaderboard, methods, objectives, plotting, results

# A plot file name's parts (graph spec, topology spec, method, ...): each is kept as it is when
# it is already a clean name of at most PART_CHARS characters, else sanitised and cut.
PART_CHARS = 32
_CLEAN_PART = re.compile(r"[A-Za-z0-9.=-]+(_[A-Za-z0-9.=-]+)*")


def plot_file_name(*parts: Any) -> str:
  """A bounded, readable file name (no extension) for the plot of `parts`, distinct for
  distinct parts: the parts joined by "__", each a clean name (letters, digits, ".=-" and
  single "_" inside) of at most PART_CHARS characters; where some part is not (a path, a long
  spec, a stage with spaces), each such part is sanitised and cut and "+" and 12 hex digits of
  the sha256 of all the parts as given are appended ("a/b.npz" and "a_b.npz" differ). Clean
  names never hold "+" and split back into their parts, so two cells never share a file."""
  texts = [str(p) for p in parts]
  clean = [len(t) <= PART_CHARS and _CLEAN_PART.fullmatch(t) is not None for t in texts]
  shown = [t if ok else (re.sub(r"[^A-Za-z0-9.=-]+", "_", t).strip("_")[-PART_CHARS:].strip("_")
                         or "x") for t, ok in zip(texts, clean)]
  name = "__".join(shown)
  if all(clean):
    return name
  digest = hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:12]
  return f"{name}+{digest}"


def try_plot(what: str, plot, *args, **kwargs) -> str:
  """plot(*args, **kwargs), which writes a file: "" when it did, else the one line of why
  not, also logged as a warning naming `what` (a failed plot never discards a result)."""
  try:
    plot(*args, **kwargs)
  except Exception as e:  # pylint: disable=broad-except
    text = f"{type(e).__name__}: {' '.join(str(e).split())}"
    logging.warning("plot of %s not written: %s", what, text)
    return text
  return ""


def _fmt(value, kind: str) -> str:
  """A value in the unit of objective `kind`."""
  return objectives.get_objective(kind).format(value)


def gap_text(gap: float, feasible: bool = True, mark: str = "") -> str:
  """A row's "gap to LB" cell: "+3.8%"; "0.0%" within rounding of the bound
  (|gap| < methods.GAP_ROUNDING: never "-0.0%"); below the bound beyond that, the gap with
  enough digits to show it and "BELOW LB" (a wrong bound, not a result); "-" for an infeasible
  row or a gap that is not finite. `mark` (go-jax-place's
  `place_report.BOUND_MARKS`) names the bound."""
  if not feasible or gap is None or not math.isfinite(gap):
    return "-"
  if abs(gap) < methods.GAP_ROUNDING:
    text = "0.0%"
  elif gap < 0:
    pct = 100.0 * gap
    text = (f"{pct:+.1f}%" if pct <= -0.05 else f"{pct:+.2g}%") + " BELOW LB"
  else:
    text = f"{gap:+.1%}"
  return f"{text} {mark}" if mark else text


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
  """One Markdown line per row (an infeasible row shows what it needs, never its penalty)."""
  head = ("method", "graph", "N", "topology", "D", "seed", "objective", "makespan",
          "peak mem", "feasible", "gap", "search", "evals", "agrees", "note")
  body = []
  for r in rows:
    note = r.get("error") or r.get("reason") or ""
    feasible = bool(r.get("feasible"))
    body.append((
        results.row_name(r), r.get("graph_name") or r["graph"], r.get("nodes"), r["topology"],
        r.get("devices"), r["seed"], f"{r['objective_kind']} {results.value_text(r)}",
        _fmt(r.get("makespan"), "makespan"), _fmt(r.get("peak_memory"), "peak_memory"),
        "error" if r.get("error") else ("yes" if feasible else "NO"),
        gap_text(r.get("gap"), feasible and not r.get("error")),
        "-" if r.get("search_seconds") is None else f"{r['search_seconds']:.3g} s",
        r.get("evaluations"), "yes" if r.get("agrees") else "NO", str(note)[:100]))
  return results.markdown_table(head, body)


def _mean_objectives(rows) -> Dict[Tuple, Dict[str, Any]]:
  """(objective, graph, topology, row name) -> mean objective over seeds, all feasible,
  errors, rows with a non-finite objective, the row of least objective (for what an
  infeasible one needs). A NaN or inf objective is left out of the mean, as the leaderboard
  does (`leaderboard`): it made the pivot's cell NaN ('-') or bolded a -inf the leaderboard
  ignores, and kept the whole setting's bar chart from being drawn."""
  groups: Dict[Tuple, List] = {}
  for r in rows:
    groups.setdefault((r["objective_kind"], r["graph"], r["topology"], results.row_name(r)),
                      []).append(r)
  out = {}
  for key, rs in groups.items():
    ok = [r for r in rs if not r.get("error") and r.get("objective") is not None]
    finite = [r for r in ok if leaderboard.is_finite(r["objective"])]
    out[key] = {"mean": float(np.mean([r["objective"] for r in finite])) if finite else None,
                "feasible": all(r.get("feasible") for r in finite), "errors": len(rs) - len(ok),
                "non_finite": len(ok) - len(finite),
                "best_row": min(finite, key=lambda r: r["objective"]) if finite else None}
  return out


def markdown_pivots(rows: Sequence[Mapping[str, Any]]) -> str:
  """Per (objective, graph): objective (mean over seeds) by topology x method, the best
  feasible one in bold; a topology where no method is feasible says so."""
  stats = _mean_objectives(rows)
  blocks = []
  for obj, graph in dict.fromkeys((k[0], k[1]) for k in stats):
    topos = list(dict.fromkeys(k[2] for k in stats if k[:2] == (obj, graph)))
    meths = list(dict.fromkeys(k[3] for k in stats if k[:2] == (obj, graph)))
    body, notes = [], []
    for topo in topos:
      cells = [stats.get((obj, graph, topo, m)) for m in meths]
      means = [c["mean"] for c in cells if c and c["mean"] is not None and c["feasible"]]
      best = min(means) if means else None
      texts = []
      for c in cells:
        if c is None:
          texts.append("")
          continue
        if c["mean"] is None:
          text = "non-finite" if c["non_finite"] else "error"
        elif not c["feasible"]:
          text = results.infeasible_text(c["best_row"])
        else:
          text = _fmt(c["mean"], obj)
        if c["mean"] is not None and c["feasible"] and c["mean"] == best:
          text = f"**{text}**"
        if c["mean"] is not None and c["non_finite"]:
          text += f" ({c['non_finite']} non-finite left out)"
        texts.append(text)
      body.append([topo] + texts)
      none = results.no_feasible_text([r for r in rows if (r["objective_kind"], r["graph"],
                                                           r["topology"]) == (obj, graph, topo)])
      if none:
        notes.append(f"{topo}: {none}.")
    blocks.append(f"### {graph}: {obj} (mean over seeds; lower is better)\n\n" +
                  results.markdown_table(["topology"] + meths, body) +
                  "".join(f"\n\n{n}" for n in notes))
  return "\n\n".join(blocks)


def markdown(rows: Sequence[Mapping[str, Any]]) -> str:
  """The whole report: the leaderboard, the row table, then the per-graph pivots."""
  return ("## Summary\n\n" + leaderboard.markdown_leaderboard(rows) + "\n\n## Results\n\n" +
          markdown_table(rows) + "\n\n## Objective by method\n\n" + markdown_pivots(rows) + "\n")


def plot_comparisons(rows: Sequence[Mapping[str, Any]], plot_dir: str) -> List[str]:
  """One bar chart per (objective, graph, topology): mean objective by method (file names:
  `plot_file_name`); returns the paths written. A chart that cannot be written is a warning
  (`try_plot`), not an error: the rows are already stored."""
  stats = _mean_objectives(rows)
  paths = []
  for obj, graph, topo in dict.fromkeys(k[:3] for k in stats):
    entries = [(k[3], v["mean"]) for k, v in stats.items()
               if k[:3] == (obj, graph, topo) and v["mean"] is not None and v["feasible"]]
    if not entries:
      continue
    path = os.path.join(plot_dir, f"compare__{plot_file_name(graph, topo, obj)}.png")
    if not try_plot(f"{obj} on {graph} / {topo}", plotting.plot_bars,
                    [e[0] for e in entries], [e[1] for e in entries], path,
                    title=f"{graph} on {topo}",
                    ylabel=f"{obj} ({objectives.get_objective(obj).unit}; feasible methods)"):
      paths.append(path)
  return paths


def summarize(rows: Iterable[Mapping[str, Any]]) -> Dict[str, int]:
  """Counts of rows, errors, infeasible rows and re-simulation disagreements."""
  rows = list(rows)
  return {"rows": len(rows), "errors": sum(bool(r.get("error")) for r in rows),
          "infeasible": sum(not r.get("feasible") and not r.get("error") for r in rows),
          "disagreements": sum(not r.get("agrees") and not r.get("error") for r in rows)}
