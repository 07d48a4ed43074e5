"""A one-table summary of an evaluation: how each method fares against the best per setting.

For every (objective, graph, topology) with at least one feasible method, the best mean
objective over seeds is the reference; each method gets its wins (equal to the best), the
geometric mean of its ratio to the best over the settings where it is feasible, and how often it
is infeasible. Lower ratio is better; 1.00 means always the best.

A row whose objective is not finite (NaN, inf: a corrupted or hand-edited result) is left out
and counted in the method's `non_finite` (the Markdown table names them below it): a NaN must
never be the best, nor an inf a ratio. A ratio needs a positive best: where the best mean
objective is 0 or negative, a method equal to it still wins (ratio 1), any other gets no ratio
there, counted in `no_ratio` (not a silent 1.0).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Sequence

from go_jax import results


def leaderboard(rows: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
  """Per (objective kind, method): settings, wins, geometric-mean ratio to best, infeasible."""
  groups: Dict[tuple, Dict[str, List[Mapping]]] = {}
  non_finite: Dict[tuple, int] = {}
  for r in rows:
    if r.get("error") or r.get("objective") is None:
      continue
    if not is_finite(r["objective"]):
      key = (r["objective_kind"], results.row_name(r))
      non_finite[key] = non_finite.get(key, 0) + 1
      continue
    key = (r["objective_kind"], r["graph"], r["topology"])
    groups.setdefault(key, {}).setdefault(results.row_name(r), []).append(r)
  stats: Dict[tuple, Dict[str, Any]] = {}
  for (kind, _, _), by_method in groups.items():
    mean = {m: sum(x["objective"] for x in rs) / len(rs) for m, rs in by_method.items()}
    feasible = {m: all(x.get("feasible") for x in rs) for m, rs in by_method.items()}
    ok = [mean[m] for m in mean if feasible[m]]
    best = min(ok) if ok else None
    for m in by_method:
      s = stats.setdefault((kind, m), {"objective": kind, "method": m, "settings": 0,
                                       "wins": 0, "infeasible": 0, "ratios": [],
                                       "no_feasible_method": 0, "no_ratio": 0,
                                       "non_finite": 0})
      s["settings"] += 1
      if best is None:
        s["no_feasible_method"] += 1
      elif not feasible[m]:
        s["infeasible"] += 1
      else:
        s["wins"] += mean[m] == best
        if best > 0:
          s["ratios"].append(mean[m] / best)
        elif mean[m] == best:
          s["ratios"].append(1.0)
        else:  # a ratio to a best of 0 (or below) means nothing
          s["no_ratio"] += 1
  for (kind, m), n in non_finite.items():
    stats.setdefault((kind, m), {"objective": kind, "method": m, "settings": 0, "wins": 0,
                                 "infeasible": 0, "ratios": [], "no_feasible_method": 0,
                                 "no_ratio": 0, "non_finite": 0})["non_finite"] = n
  # Imported here: scipy.stats takes about a second to import, and every launcher imports this
  # module (through go_jax.harness) whether or not it prints a leaderboard.
  from scipy import stats as scipy_stats  # pylint: disable=g-import-not-at-top
  out = []
  for s in stats.values():
    ratios = s.pop("ratios")
    s["ratio_to_best"] = float(scipy_stats.gmean(ratios)) if ratios else None
    out.append(s)
  out.sort(key=lambda s: (s["objective"], s["ratio_to_best"] is None,
                          s["ratio_to_best"] or 0.0))
  return out


def markdown_leaderboard(rows: Sequence[Mapping[str, Any]]) -> str:
  """The leaderboard as a Markdown table."""
  board = leaderboard(rows)
  # results.markdown_table: a '|' in a method's label split its row into one more column.
  lines = [results.markdown_table(
      ("objective", "method", "settings", "wins", "ratio to best (geo. mean, feasible)",
       "infeasible", "no method feasible"),
      [(s["objective"], s["method"], s["settings"], s["wins"],
        "-" if s["ratio_to_best"] is None else f"{s['ratio_to_best']:.3f}", s["infeasible"],
        s["no_feasible_method"]) for s in board])]
  notes = [f"{s['method']} ({s['objective']}): {s['non_finite']} row(s) with a non-finite "
           "objective left out" for s in board if s["non_finite"]]
  notes += [f"{s['method']} ({s['objective']}): no ratio on {s['no_ratio']} setting(s) whose "
            "best objective is 0 or below" for s in board if s["no_ratio"]]
  return "\n".join(lines) + "".join(f"\n\n{n}" if i == 0 else f"\n{n}"
                                    for i, n in enumerate(notes))


def is_finite(x) -> bool:
  """Whether `x` is a finite number (False for NaN, inf and what is no number: a string such as
  "1.5" in a hand-edited row is none, though float() reads it; summing it was a TypeError)."""
  if isinstance(x, (str, bytes, bool)):
    return False
  try:
    return math.isfinite(float(x))
  except (TypeError, ValueError):
    return False
