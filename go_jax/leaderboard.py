"""A one-table summary of an evaluation: how each method fares against the best per setting.

For every (objective, graph, topology) with at least one feasible method, the best mean
objective over seeds is the reference; each method gets its wins (equal to the best), the
geometric mean of its ratio to the best over the settings where it is feasible, and how often it
is infeasible. Lower ratio is better; 1.00 means always the best.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence

from go_jax import results


def leaderboard(rows: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
  """Per (objective kind, method): settings, wins, geometric-mean ratio to best, infeasible."""
  groups: Dict[tuple, Dict[str, List[Mapping]]] = {}
  for r in rows:
    if r.get("error") or r.get("objective") is None:
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
                                       "no_feasible_method": 0})
      s["settings"] += 1
      if best is None:
        s["no_feasible_method"] += 1
      elif not feasible[m]:
        s["infeasible"] += 1
      else:
        s["wins"] += mean[m] == best
        s["ratios"].append(mean[m] / best if best > 0 else 1.0)
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
  lines = ["| objective | method | settings | wins | ratio to best (geo. mean, feasible) | "
           "infeasible | no method feasible |", "|---|---|---|---|---|---|---|"]
  for s in leaderboard(rows):
    ratio = "-" if s["ratio_to_best"] is None else f"{s['ratio_to_best']:.3f}"
    lines.append(f"| {s['objective']} | {s['method']} | {s['settings']} | {s['wins']} | "
                 f"{ratio} | {s['infeasible']} | {s['no_feasible_method']} |")
  return "\n".join(lines)
