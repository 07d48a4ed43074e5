r"""The report of the learned-placer comparison (experiments/placer_comparison.py): reading a
cell's anytime curve, the claims of the Placeto and GO papers, the summary tables, the markdown
and the convergence plot. Pure functions of the cells (dicts as learned_placers.json holds them)
and the checked config, so that a results file can be re-reported without running anything.

A cell's objective after t seconds is the best of its curve at t (none if its first answer came
later); a classic method, run once to completion, counts at every t from its own time on.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

PLACETO_CLAIM = 1.10  # Placeto: zero-shot within 10% of the placement trained on the graph


def cell_key(graph: str, topology: str, method: str) -> str:
  return f"{graph} | {topology} | {method}"


# ------------------------------------------------------------------ reading a cell
def feasible_value(row: Optional[Mapping[str, Any]], value: Optional[float]) -> bool:
  """Whether an objective of this cell fits in memory (the objectives put every out-of-memory
  action above the instance's upper bound)."""
  return value is not None and row is not None and value < float(row["upper_bound"])


def value_at(row: Optional[Mapping[str, Any]], t: float) -> Optional[float]:
  """The best objective the method had after `t` seconds (None: no answer yet, not run that
  long, or an error)."""
  if row is None or "error" in row:
    return None
  budget = row.get("budget_seconds")
  if budget is not None and t > budget * (1 + 1e-9):
    return None  # a learned method run with less time than t
  if budget is None:  # a classic method: its answer from its own time on
    return float(row["objective"]) if row["seconds"] <= t else None
  best = [v for s, v in row["curve"] if s <= t]
  return min(best) if best else None


def time_to(row: Optional[Mapping[str, Any]], target: float) -> Optional[float]:
  """Seconds until the method's best objective was at or below `target` (None: never)."""
  if row is None or "error" in row:
    return None
  if row.get("budget_seconds") is None:
    return float(row["seconds"]) if row["objective"] <= target else None
  return next((float(s) for s, v in row["curve"] if v <= target), None)


def within_seconds(row: Optional[Mapping[str, Any]], within: float) -> Optional[float]:
  """Seconds until the method came within `within` of its own final objective."""
  if row is None or "error" in row:
    return None
  return time_to(row, float(row["objective"]) * (1 + within))


# ------------------------------------------------------------------ the summary
def _gmean(xs: Sequence[float]) -> Optional[float]:
  return float(np.exp(np.mean(np.log(xs)))) if xs else None


def _feasible_objective(row: Optional[Mapping[str, Any]]) -> Optional[float]:
  """A finished cell's final objective if it fits in memory, else None."""
  if row is None or "error" in row or not feasible_value(row, row["objective"]):
    return None
  return float(row["objective"])


def best_classic(cells: Mapping[str, Mapping], cfg: Mapping[str, Any], graph: str,
                 topology: str) -> Tuple[Optional[float], Optional[str]]:
  """The lowest feasible final objective of the classic methods on an instance and the
  method's name ((None, None) if none fits)."""
  found = [(v, m) for m in cfg["classic"]
           if (v := _feasible_objective(cells.get(cell_key(graph, topology, m)))) is not None]
  return min(found, key=lambda x: x[0]) if found else (None, None)


def scale(cells: Mapping[str, Mapping], cfg: Mapping[str, Any], graph: str,
          topology: str) -> Tuple[Optional[float], str]:
  """What an instance's objectives are divided by in the tables and the plot, and its name:
  the reference method's objective, or, where the reference is out of memory (its objective
  is then a penalty, not a time), the best feasible classic method's; (None, reference) if
  neither exists."""
  ref = _feasible_objective(cells.get(cell_key(graph, topology, cfg["reference"])))
  if ref is not None:
    return ref, cfg["reference"]
  value, name = best_classic(cells, cfg, graph, topology)
  return (value, name) if value is not None else (None, cfg["reference"])


def compare(cells: Mapping[str, Mapping], cfg: Mapping[str, Any], a: str, b: str,
            t: float) -> Dict[str, Any]:
  """Method `a` against `b` after `t` seconds on every instance where both ran: per instance
  the ratio a / b (both feasible), who is ahead (an answer beats none, a feasible one beats
  an out-of-memory one, then the lower objective), and per family the geometric mean ratio."""
  per, fam = [], {}
  for g in cfg["graphs"]:
    for topo in cfg["topologies"]:
      ra, rb = cells.get(cell_key(g, topo, a)), cells.get(cell_key(g, topo, b))
      if ra is None or rb is None or "error" in ra or "error" in rb:
        continue
      va, vb = value_at(ra, t), value_at(rb, t)
      if va is None and vb is None:
        continue
      fa, fb = feasible_value(ra, va), feasible_value(rb, vb)
      ratio = va / vb if fa and fb else None
      ahead = (a if vb is None else b if va is None else
               a if fa and not fb else b if fb and not fa else
               a if va < vb else b if vb < va else "tie")
      family = cfg["families"].get(g, "other")
      per.append({"graph": g, "topology": topo, "family": family, "a": va, "b": vb,
                  "ratio": ratio, "ahead": ahead})
      fam.setdefault(family, []).append(per[-1])
  def agg(rows):
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    return {"instances": len(rows), "a_ahead": sum(r["ahead"] == a for r in rows),
            "b_ahead": sum(r["ahead"] == b for r in rows), "gmean_ratio": _gmean(ratios),
            "ratios": len(ratios)}
  return {"a": a, "b": b, "seconds": t, "per_instance": per, "all": agg(per),
          "families": {f: agg(rows) for f, rows in sorted(fam.items())}}


def placeto_claim(cells: Mapping[str, Mapping], cfg: Mapping[str, Any]) -> Dict[str, Any]:
  """Placeto's zero-shot objective over its fine-tuned one (the whole time budget) on every
  instance whose graph Placeto did not train on; the claim holds where it is <= 1.10."""
  name, seen = cfg["placeto"], set(cfg["seen"].get(cfg["placeto"], ()))
  per = []
  for g in cfg["graphs"]:
    for topo in cfg["topologies"]:
      row = cells.get(cell_key(g, topo, name))
      if g in seen or row is None or "error" in row or row.get("zero_shot") is None:
        continue
      zs, final = float(row["zero_shot"]), float(row["objective"])
      ok = feasible_value(row, zs) and feasible_value(row, final)
      ratio = zs / final if ok else None
      per.append({"graph": g, "topology": topo, "zero_shot": zs, "tuned": final,
                  "ratio": ratio, "holds": ratio is not None and ratio <= PLACETO_CLAIM})
  return {"per_instance": per, "holds": sum(r["holds"] for r in per), "instances": len(per),
          "gmean_ratio": _gmean([r["ratio"] for r in per if r["ratio"] is not None])}


def convergence_claim(cells: Mapping[str, Mapping], cfg: Mapping[str, Any]) -> Dict[str, Any]:
  """GO's "15x faster convergence" against HDP: per instance, the seconds HDP takes to reach
  its final objective over the seconds GO takes to reach that objective (None: GO never
  did within its budget, or GO was there at 0 s while HDP took longer: a ratio without
  bound, which strict JSON cannot hold; such an instance counts as reached and at least 15x,
  not in the geometric mean; both at 0 s: 1)."""
  go, hdp = cfg["go"], cfg["hdp"]
  per = []
  for g in cfg["graphs"]:
    for topo in cfg["topologies"]:
      rg, rh = cells.get(cell_key(g, topo, go)), cells.get(cell_key(g, topo, hdp))
      if rg is None or rh is None or "error" in rg or "error" in rh:
        continue
      target = float(rh["objective"])
      t_hdp, t_go = time_to(rh, target), time_to(rg, target)
      reached = t_go is not None and t_hdp is not None
      speedup = None
      if reached and t_go > 0:
        speedup = t_hdp / t_go
      elif reached and t_hdp == 0:
        speedup = 1.0
      per.append({"graph": g, "topology": topo, "hdp_final": target, "hdp_seconds": t_hdp,
                  "go_seconds": t_go, "reached": reached, "speedup": speedup})
  speedups = [r["speedup"] for r in per if r["speedup"] is not None]
  unbounded = sum(r["reached"] and r["speedup"] is None for r in per)
  return {"per_instance": per, "instances": len(per), "reached": sum(r["reached"] for r in per),
          "gmean_speedup": _gmean(speedups),
          "at_least_15x": sum(s >= 15 for s in speedups) + unbounded}


def overview(cells: Mapping[str, Mapping], cfg: Mapping[str, Any], t: float
             ) -> Dict[str, Dict[str, Any]]:
  """Per method after `t` seconds, over the instances where every classic method ran and the
  method and at least one classic method had a feasible answer: the geometric mean of
  objective / the best classic method's and on how many instances it beat that; the geometric
  mean of objective / the reference's over those of them where the reference fits in memory
  (`reference_oom` counts the others)."""
  out = {}
  for m in list(cfg["classic"]) + list(cfg["learned"]):
    to_ref, to_best, ahead, missing, ref_oom = [], [], 0, 0, 0
    for g in cfg["graphs"]:
      for topo in cfg["topologies"]:
        classic = [cells.get(cell_key(g, topo, c)) for c in cfg["classic"]]
        if any(r is None or "error" in r for r in classic):
          continue
        row = cells.get(cell_key(g, topo, m))
        v = value_at(row, t)
        best, _ = best_classic(cells, cfg, g, topo)
        if not feasible_value(row, v) or best is None:
          missing += 1
          continue
        to_best.append(v / best)
        ahead += v < best
        ref = _feasible_objective(cells.get(cell_key(g, topo, cfg["reference"])))
        if ref is not None:
          to_ref.append(v / ref)
        else:
          ref_oom += 1
    out[m] = {"gmean_to_reference": _gmean(to_ref), "gmean_to_best_classic": _gmean(to_best),
              "ahead_of_best_classic": ahead, "instances": len(to_best), "missing": missing,
              "reference_oom": ref_oom}
  return out


def summarize(cfg: Mapping[str, Any], cells: Mapping[str, Mapping]) -> Dict[str, Any]:
  """The tables and claims of the module docstring, as plain data."""
  names = list(cfg["classic"]) + list(cfg["learned"])
  instances = [(g, t) for g in cfg["graphs"] for t in cfg["topologies"]]
  at: Dict[str, Dict[str, Dict[str, Optional[float]]]] = {}
  scales = {(g, topo): scale(cells, cfg, g, topo) for g, topo in instances}
  for secs in cfg["seconds"]:
    table = {}
    for g, topo in instances:
      table[cell_key(g, topo, "")] = {
          m: _ratio_text(cells.get(cell_key(g, topo, m)), secs, scales[(g, topo)][0])
          for m in names}
    at[f"{secs:g}"] = table
  # instances whose ratios are to another method than the reference (it is out of memory)
  scaled_by = {cell_key(g, topo, ""): name for (g, topo), (_, name) in scales.items()
               if name != cfg["reference"]}
  final = {cell_key(g, topo, ""): {m: _final_text(cells.get(cell_key(g, topo, m)),
                                                  float(cfg["within"])) for m in names}
           for g, topo in instances}
  claims: Dict[str, Any] = {}
  learned = set(cfg["learned"])
  if cfg["placeto"] in learned:
    claims["placeto_zero_shot"] = placeto_claim(cells, cfg)
  pairs = [(cfg["placeto"], cfg["hdp"], t) for t in cfg["seconds"]]
  pairs += [(cfg["go"], other, cfg["compare_at"]) for other in (cfg["placeto"], cfg["hdp"])]
  claims["pairs"] = [compare(cells, cfg, a, b, t) for a, b, t in pairs
                     if a in learned and b in learned]
  if cfg["go"] in learned and cfg["hdp"] in learned:
    claims["go_vs_hdp_convergence"] = convergence_claim(cells, cfg)
  return {"at": at, "scaled_by": scaled_by, "final": final, "claims": claims,
          "overview": {f"{t:g}": overview(cells, cfg, t) for t in cfg["seconds"]}}


def _ratio_text(row, secs: float, ref: Optional[float]) -> str:
  if row is None:
    return "not run"
  if "error" in row:
    return "error"
  v = value_at(row, secs)
  if v is None:
    return "-"
  if not feasible_value(row, v):
    return "OOM"
  return f"x{v / ref:.3f}" if ref else f"{v:.4g}"


def _final_text(row, within: float) -> str:
  if row is None:
    return "not run"
  if "error" in row:
    return "error"
  v = float(row["objective"])
  t = within_seconds(row, within)
  value = "OOM" if not feasible_value(row, v) else f"{v:.4g}"
  return f"{value} ({'?' if t is None else f'{t:.0f}'} s)"


# ------------------------------------------------------------------ the report
def _num(x: Optional[float], fmt: str = "{:.3f}") -> str:
  return "-" if x is None else fmt.format(x)


def markdown(cfg: Mapping[str, Any], table: Mapping[str, Any]) -> str:
  """The report as printed and written to learned_placers.md."""
  names = list(cfg["classic"]) + list(cfg["learned"])
  seen = {m: set(v) for m, v in cfg["seen"].items()}
  head = ["graph", "topology"] + names
  lines = []
  scaled_by = table.get("scaled_by", {})
  def grid(rows: Mapping[str, Mapping[str, str]], ratios: bool = False):
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * 2 + "---:|" * len(names))
    for key, vals in rows.items():
      g, topo, _ = key.split(" | ")
      cells = [vals[m] + ("*" if g in seen.get(m, ()) else "") for m in names]
      note = f" (/ {scaled_by[key]}'s)" if ratios and key in scaled_by else ""
      lines.append(f"| {g} | {topo}{note} | " + " | ".join(cells) + " |")
  for secs, rows in table["at"].items():
    lines.append(f"\n**After {secs} s of search** (objective / {cfg['reference']}'s, or / the "
                 f"best classic method's where {cfg['reference']} is out of memory; '-': no "
                 "answer yet; OOM: out of memory; *: the method trained on the graph)\n")
    grid(rows, ratios=True)
  lines.append(f"\n**Geometric means over instances** (objective / {cfg['reference']}'s, / the "
               "best classic method's; instances where the method was ahead of every classic "
               "one; over those where it had a feasible answer, the first mean over those "
               f"where {cfg['reference']} fits in memory too)\n")
  lines.append("| method | " + " | ".join(f"after {t} s" for t in table["overview"]) + " |")
  lines.append("|---|" + "---:|" * len(table["overview"]))
  for m in names:
    vals = []
    for per in table["overview"].values():
      o = per[m]
      vals.append(f"{_num(o['gmean_to_reference'])} / {_num(o['gmean_to_best_classic'])} "
                  f"({o['ahead_of_best_classic']}/{o['instances']} ahead"
                  + (f", {o['missing']} without" if o["missing"] else "")
                  + (f"; {cfg['reference']} OOM on {o['reference_oom']}"
                     if o.get("reference_oom") else "") + ")")
    lines.append(f"| {m} | " + " | ".join(vals) + " |")
  lines.append(f"\n**Final objective (seconds to within {100 * cfg['within']:g}% of it)**\n")
  grid(table["final"])
  claims = table["claims"]
  if "placeto_zero_shot" in claims:
    c = claims["placeto_zero_shot"]
    lines.append(f"\nPlaceto zero-shot / fine-tuned ({max(cfg['seconds']):g} s) on graphs it "
                 f"did not train on: within {100 * (PLACETO_CLAIM - 1):.0f}% on {c['holds']} of "
                 f"{c['instances']}; geometric mean {_num(c['gmean_ratio'])}")
  for p in claims.get("pairs", []):
    a = p["all"]
    fams = "; ".join(f"{f} {_num(v['gmean_ratio'])} ({v['a_ahead']}/{v['instances']} ahead)"
                     for f, v in p["families"].items())
    lines.append(f"\n{p['a']} vs {p['b']} after {p['seconds']:g} s: {p['a']} ahead on "
                 f"{a['a_ahead']} of {a['instances']}, behind on {a['b_ahead']}; geometric "
                 f"mean {p['a']} / {p['b']} {_num(a['gmean_ratio'])} over {a['ratios']} "
                 f"feasible pairs; per family: {fams or '-'}")
  if "go_vs_hdp_convergence" in claims:
    c = claims["go_vs_hdp_convergence"]
    lines.append(f"\n{cfg['go']} reached {cfg['hdp']}'s final objective on {c['reached']} of "
                 f"{c['instances']} instances; time ratio (HDP's time / GO's) geometric mean "
                 f"{_num(c['gmean_speedup'], '{:.2f}x')}, at least 15x on "
                 f"{c['at_least_15x']}")
  return "\n".join(lines).lstrip("\n") + "\n"


def plot(cfg: Mapping[str, Any], cells: Mapping[str, Mapping], path: str) -> str:
  """convergence.png: one panel per instance, best objective / reference over wall time (log
  scale; / the best classic method where the reference is out of memory, as in the tables);
  out-of-memory stretches of a curve are not drawn."""
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  from go_jax import plotting  # pylint: disable=g-import-not-at-top
  instances = [(g, t) for g in cfg["graphs"] for t in cfg["topologies"]]
  cols = len(cfg["topologies"])
  rows = -(-len(instances) // cols)
  fig = Figure(figsize=(4.2 * cols, 3.0 * rows))
  markers = "osD^v<>"
  for k, (g, topo) in enumerate(instances):
    ax = fig.add_subplot(rows, cols, k + 1)
    value, by = scale(cells, cfg, g, topo)
    value = value or 1.0
    for m in cfg["learned"]:
      row = cells.get(cell_key(g, topo, m))
      if row is None or "error" in row:
        continue
      pts = [(s, v / value if feasible_value(row, v) else np.nan) for s, v in row["curve"]]
      if not pts:  # no answer recorded (a budget too short for one): nothing to draw
        continue
      end = max(float(row["budget_seconds"] or 0.0), pts[-1][0])
      xs = [s for s, _ in pts] + [end]
      ys = [v for _, v in pts] + [pts[-1][1]]
      ax.step(xs, ys, where="post", label=m)
    for i, m in enumerate(cfg["classic"]):
      row = cells.get(cell_key(g, topo, m))
      if _feasible_objective(row) is None:
        continue
      ax.plot([max(row["seconds"], 1e-2)], [row["objective"] / value],
              markers[i % len(markers)], color="k", fillstyle="none", label=m)
    ax.set_xscale("log")
    ax.set_title(f"{g}\n{topo}", fontsize=8)
    ax.set_xlabel("search seconds", fontsize=8)
    ax.set_ylabel(f"objective / {by}", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    if k == 0:
      ax.legend(fontsize=6)
  fig.tight_layout()
  return plotting.save_figure(fig, path)
