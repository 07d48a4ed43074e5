r"""The learned placers at equal search time (issue 14, part 3): GO, GDP, Placeto and HDP against
the best classic methods, on graphs the learned methods did not train on.

An experiment, not library code; its launcher is experiments/learned_placers.py (which holds the
flags, so that tests import this module without defining any).

A cell is one (graph, topology, method), solved once with `methods.solve` (so every final
objective is the registry's re-simulation). A learned method gets the largest search time of the
config's `seconds` through its time option (`finetune_seconds`; `seconds` for HDP): loading the
checkpoint, compiling and the zero-shot pass all count, and JAX's caches are cleared before every
cell (`cold_start`) so that no cell profits from an earlier one's compilation. Its anytime curve
(`info["curve"]`, `methods.anytime_curve`: the best objective found so far over wall time) gives
its objective after t seconds: the curve's best at t, or none if its first answer came later.
A classic method runs to completion once; its objective counts at every t from its own time on.

Per cell, `<out>/learned_placers.json` (atomically; resumable: cells already there are skipped,
cells that recorded an error or ran with less time than now asked are run again; several
processes may share one --out, each taking its `shard` of the cells) records the objective,
feasibility, seconds, curve, the zero-shot objective of a learned method, and the time to come
within `within` (5%) of the method's final objective. Then (`summarize`):

  per budget t: each method's objective / the reference method's (HEFT) per cell;
  per cell and method: the final objective and the time to within 5% of it;
  the claims: Placeto zero-shot against Placeto fine-tuned on graphs it did not train on
    (within 10%?), Placeto against HDP at each t, GO against Placeto and HDP at `compare_at`
    per family, and GO's "15x faster convergence": the time GO takes to reach HDP's final
    objective against the time HDP takes to reach it;
  `<out>/convergence.png`: one panel per (graph, topology), best objective / reference over
    wall time, one line per learned method, the classic methods as points.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from experiments import cli

DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs",
                              "learned_placers.py")
LAUNCHER = "learned_placers"
JSON_NAME = "learned_placers.json"
MD_NAME = "learned_placers.md"
PLOT_NAME = "convergence.png"
# Fields that must be equal for a run to resume another's cells (they change every number).
SETTINGS = ("objective", "seed", "samples", "budgets", "method_options")
# The time option of a learned method, by the option its registry entry has.
TIME_OPTIONS = ("finetune_seconds", "seconds")
PLACETO_CLAIM = 1.10  # Placeto: zero-shot within 10% of the placement trained on the graph


# ------------------------------------------------------------------ config
def as_settings(config) -> Dict[str, Any]:
  """The config as plain data, checked: ValueError naming the field for anything unusable."""
  from go_jax import methods, objectives  # pylint: disable=g-import-not-at-top
  cfg = cli.plain(config)
  missing = [k for k in ("graphs", "topologies", "classic", "learned", "reference", "seconds",
                         "objective", "seed") if k not in cfg]
  if missing:
    raise ValueError(f"the config has no field(s) {missing}")
  for key, value in (("families", {}), ("seen", {}), ("budgets", {}), ("method_options", {}),
                     ("samples", None), ("within", 0.05), ("compare_at", None),
                     ("shard", "0/1"), ("cold_start", True), ("plots", True),
                     ("fail_fast", False), ("go", "go"), ("placeto", "placeto"),
                     ("hdp", "hdp")):
    cfg.setdefault(key, value)
  classic, learned = [str(m) for m in cfg["classic"]], [str(m) for m in cfg["learned"]]
  names = classic + learned
  if not names or len(set(names)) != len(names):
    raise ValueError(f"config.classic + config.learned: give distinct method names, got {names}")
  for name in names:
    methods.get(name)  # ValueError: unknown method (the message lists the available ones)
  for name in learned:
    if time_option(name) is None:
      raise ValueError(f"config.learned: method {name!r} has no time option "
                       f"({' or '.join(TIME_OPTIONS)}); put it in config.classic")
  if cfg["reference"] not in classic:
    raise ValueError(f"config.reference={cfg['reference']!r} is not in config.classic {classic}")
  for field in ("budgets", "method_options", "seen", "families"):
    if not isinstance(cfg[field], Mapping):
      raise ValueError(f"config.{field} must be a mapping, got {cfg[field]!r}")
  for name, opts in cfg["method_options"].items():
    bad = sorted(set(opts) - set(methods.get(name).defaults))
    if bad:
      raise ValueError(f"config.method_options.{name}: no option(s) {bad}; options: "
                       f"{sorted(methods.get(name).defaults)}")
  for name in list(cfg["budgets"]) + list(cfg["seen"]):
    if name not in names:
      raise ValueError(f"config.budgets / config.seen: {name!r} is not a method of the config")
  objectives.get_objective(cfg["objective"])
  secs = cfg["seconds"]
  if not secs or not all(isinstance(t, (int, float)) and t > 0 for t in secs):
    raise ValueError(f"config.seconds: give search times > 0, got {secs}")
  cfg["seconds"] = sorted(float(t) for t in secs)
  if cfg["compare_at"] is None:
    cfg["compare_at"] = cfg["seconds"][min(1, len(cfg["seconds"]) - 1)]
  if not 0 <= float(cfg["within"]) < 1:
    raise ValueError(f"config.within must be in [0, 1), got {cfg['within']}")
  if not cfg["graphs"] or not cfg["topologies"]:
    raise ValueError("config.graphs and config.topologies must not be empty")
  shard_index(cfg["shard"])
  cfg["classic"], cfg["learned"] = classic, learned
  return cfg


def time_option(method: str) -> Optional[str]:
  """The option that sets a method's search time (None: it runs to completion)."""
  from go_jax import methods  # pylint: disable=g-import-not-at-top
  defaults = methods.get(method).defaults
  return next((o for o in TIME_OPTIONS if o in defaults), None)


def shard_index(text: str) -> Tuple[int, int]:
  """'i/n' -> (i, n): this process runs cells i, i + n, i + 2n, ... of the plan."""
  try:
    i, n = (int(x) for x in str(text).split("/"))
  except ValueError:
    i, n = -1, 0
  if not 0 <= i < n:
    raise ValueError(f"config.shard must be 'i/n' with 0 <= i < n, got {text!r}")
  return i, n


def cell_key(graph: str, topology: str, method: str) -> str:
  return f"{graph} | {topology} | {method}"


def plan(cfg: Mapping[str, Any]) -> List[Tuple[str, str, str]]:
  """Every (graph, topology, method): per instance the reference first, then the classic
  methods, then the learned ones."""
  order = [cfg["reference"]] + [m for m in cfg["classic"] if m != cfg["reference"]]
  return [(g, t, m) for g in cfg["graphs"] for t in cfg["topologies"]
          for m in order + list(cfg["learned"])]


# ------------------------------------------------------------------ one cell
def solve_cell(cfg: Mapping[str, Any], method: str, graph, topology) -> Dict[str, Any]:
  """One method on one instance: its final objective, curve and zero-shot stage (module
  docstring)."""
  import jax  # pylint: disable=g-import-not-at-top
  from go_jax import methods, objectives  # pylint: disable=g-import-not-at-top
  if cfg["cold_start"]:
    jax.clear_caches()
  opts = dict(cfg["method_options"].get(method, {}))
  option = time_option(method) if method in cfg["learned"] else None
  budget_seconds = None
  if option is not None:
    budget_seconds = max(cfg["seconds"])
    opts[option] = budget_seconds
    if cfg["samples"] is not None and "samples" in methods.get(method).defaults:
      opts["samples"] = int(cfg["samples"])
  t0 = time.perf_counter()
  sol = methods.solve(method, graph, topology, objective=cfg["objective"],
                      seed=int(cfg["seed"]), budget=cfg["budgets"].get(method), **opts)
  wall = time.perf_counter() - t0
  ub = objectives.get_objective(cfg["objective"]).upper_bound(graph, topology)
  curve = methods.anytime_curve(sol.info.get("curve", []) + sol.info.get("stages", []))
  if not curve or curve[-1]["best_objective"] > sol.objective:
    curve.append({"seconds": wall, "best_objective": sol.objective})
  zero = next((s for s in sol.info.get("stages", []) if s["stage"] == "zero-shot greedy"), None)
  return {"objective": sol.objective, "feasible": bool(sol.feasible), "reason": sol.reason,
          "makespan": sol.makespan, "seconds": wall, "search_seconds": sol.search_seconds,
          "budget_seconds": budget_seconds, "evaluations": sol.evaluations,
          "upper_bound": float(ub), "lower_bound": sol.lower_bound,
          "curve": [[p["seconds"], p["best_objective"]] for p in curve],
          "zero_shot": None if zero is None else float(zero["objective"]),
          "zero_shot_seconds": None if zero is None else float(zero["seconds"]),
          "updates": sol.info.get("updates"), "placement": sol.placement.tolist()}


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
  did within its budget)."""
  go, hdp = cfg["go"], cfg["hdp"]
  per = []
  for g in cfg["graphs"]:
    for topo in cfg["topologies"]:
      rg, rh = cells.get(cell_key(g, topo, go)), cells.get(cell_key(g, topo, hdp))
      if rg is None or rh is None or "error" in rg or "error" in rh:
        continue
      target = float(rh["objective"])
      t_hdp, t_go = time_to(rh, target), time_to(rg, target)
      per.append({"graph": g, "topology": topo, "hdp_final": target, "hdp_seconds": t_hdp,
                  "go_seconds": t_go, "speedup": (t_hdp / t_go if t_go and t_hdp else None)})
  speedups = [r["speedup"] for r in per if r["speedup"] is not None]
  return {"per_instance": per, "instances": len(per), "reached": len(speedups),
          "gmean_speedup": _gmean(speedups), "at_least_15x": sum(s >= 15 for s in speedups)}


def overview(cells: Mapping[str, Mapping], cfg: Mapping[str, Any], t: float
             ) -> Dict[str, Dict[str, Any]]:
  """Per method after `t` seconds, over the instances where it had a feasible answer and every
  classic method ran: the geometric mean of objective / reference and of objective / the best
  classic method's, and on how many instances it beat the best classic method."""
  out = {}
  for m in list(cfg["classic"]) + list(cfg["learned"]):
    to_ref, to_best, ahead, missing = [], [], 0, 0
    for g in cfg["graphs"]:
      for topo in cfg["topologies"]:
        classic = [cells.get(cell_key(g, topo, c)) for c in cfg["classic"]]
        if any(r is None or "error" in r for r in classic):
          continue
        row = cells.get(cell_key(g, topo, m))
        v = value_at(row, t)
        feasible = [float(r["objective"]) for r in classic if feasible_value(r, r["objective"])]
        ref = classic[list(cfg["classic"]).index(cfg["reference"])]
        if not feasible_value(row, v) or not feasible or not feasible_value(ref,
                                                                             ref["objective"]):
          missing += 1
          continue
        to_ref.append(v / float(ref["objective"]))
        to_best.append(v / min(feasible))
        ahead += v < min(feasible)
    out[m] = {"gmean_to_reference": _gmean(to_ref), "gmean_to_best_classic": _gmean(to_best),
              "ahead_of_best_classic": ahead, "instances": len(to_ref), "missing": missing}
  return out


def summarize(cfg: Mapping[str, Any], cells: Mapping[str, Mapping]) -> Dict[str, Any]:
  """The tables and claims of the module docstring, as plain data."""
  names = list(cfg["classic"]) + list(cfg["learned"])
  instances = [(g, t) for g in cfg["graphs"] for t in cfg["topologies"]]
  at: Dict[str, Dict[str, Dict[str, Optional[float]]]] = {}
  for secs in cfg["seconds"]:
    table = {}
    for g, topo in instances:
      ref = cells.get(cell_key(g, topo, cfg["reference"]))
      ref_value = None if ref is None or "error" in ref else float(ref["objective"])
      table[cell_key(g, topo, "")] = {
          m: _ratio_text(cells.get(cell_key(g, topo, m)), secs, ref_value) for m in names}
    at[f"{secs:g}"] = table
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
  return {"at": at, "final": final, "claims": claims,
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
  def grid(rows: Mapping[str, Mapping[str, str]]):
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * 2 + "---:|" * len(names))
    for key, vals in rows.items():
      g, topo, _ = key.split(" | ")
      cells = [vals[m] + ("*" if g in seen.get(m, ()) else "") for m in names]
      lines.append(f"| {g} | {topo} | " + " | ".join(cells) + " |")
  for secs, rows in table["at"].items():
    lines.append(f"\n**After {secs} s of search** (objective / {cfg['reference']}'s; "
                 "'-': no answer yet; OOM: out of memory; *: the method trained on the graph)\n")
    grid(rows)
  lines.append(f"\n**Geometric means over instances** (objective / {cfg['reference']}'s, / the "
               "best classic method's; instances where the method was ahead of every classic "
               "one; over those where it had a feasible answer)\n")
  lines.append("| method | " + " | ".join(f"after {t} s" for t in table["overview"]) + " |")
  lines.append("|---|" + "---:|" * len(table["overview"]))
  for m in names:
    vals = []
    for per in table["overview"].values():
      o = per[m]
      vals.append(f"{_num(o['gmean_to_reference'])} / {_num(o['gmean_to_best_classic'])} "
                  f"({o['ahead_of_best_classic']}/{o['instances']} ahead"
                  + (f", {o['missing']} without" if o["missing"] else "") + ")")
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
  scale); out-of-memory stretches of a curve are not drawn."""
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  from go_jax import plotting  # pylint: disable=g-import-not-at-top
  instances = [(g, t) for g in cfg["graphs"] for t in cfg["topologies"]]
  cols = len(cfg["topologies"])
  rows = -(-len(instances) // cols)
  fig = Figure(figsize=(4.2 * cols, 3.0 * rows))
  markers = "osD^v<>"
  for k, (g, topo) in enumerate(instances):
    ax = fig.add_subplot(rows, cols, k + 1)
    ref = cells.get(cell_key(g, topo, cfg["reference"]))
    scale = float(ref["objective"]) if ref and "error" not in ref else 1.0
    for m in cfg["learned"]:
      row = cells.get(cell_key(g, topo, m))
      if row is None or "error" in row:
        continue
      pts = [(s, v / scale if feasible_value(row, v) else np.nan) for s, v in row["curve"]]
      end = max(float(row["budget_seconds"] or 0.0), pts[-1][0])
      xs = [s for s, _ in pts] + [end]
      ys = [v for _, v in pts] + [pts[-1][1]]
      ax.step(xs, ys, where="post", label=m)
    for i, m in enumerate(cfg["classic"]):
      row = cells.get(cell_key(g, topo, m))
      if row is None or "error" in row or not feasible_value(row, row["objective"]):
        continue
      ax.plot([max(row["seconds"], 1e-2)], [row["objective"] / scale],
              markers[i % len(markers)], color="k", fillstyle="none", label=m)
    ax.set_xscale("log")
    ax.set_title(f"{g}\n{topo}", fontsize=8)
    ax.set_xlabel("search seconds", fontsize=8)
    ax.set_ylabel(f"objective / {cfg['reference']}", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    if k == 0:
      ax.legend(fontsize=6)
  fig.tight_layout()
  return plotting.save_figure(fig, path)


# ------------------------------------------------------------------ the run
def _locked_merge(path: str, result: Dict[str, Any], mine: Sequence[str]) -> Dict[str, Any]:
  """Writes `result` to `path` atomically under a lock, first taking every cell another
  process sharing the folder wrote since (its cells are kept; this process's `mine` win)."""
  from simulator import fileio  # pylint: disable=g-import-not-at-top
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  with open(path + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if os.path.isfile(path):
      with open(path, encoding="utf-8") as fh:
        disk = json.load(fh).get("cells", {})
      ours = set(mine)
      for key, row in disk.items():
        if key not in ours:
          result["cells"][key] = row
    fileio.write_json(path, result)
  return result


def _pending(cfg, row: Optional[Mapping[str, Any]], method: str) -> bool:
  """Not run yet, an error, or a learned method run with less time than now asked."""
  if row is None or "error" in row:
    return True
  return method in cfg["learned"] and (row.get("budget_seconds") or 0) < max(cfg["seconds"])


def run_comparison(config, out: str, log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Runs (or resumes) this process's shard of the comparison in folder `out`, then writes
  the report of every cell the folder holds; returns the JSON written plus "computed" and
  "skipped" cell counts of this run."""
  from simulator import sources, topology_spec  # pylint: disable=g-import-not-at-top
  cfg = as_settings(config)
  settings = {k: cfg[k] for k in SETTINGS}
  path = os.path.join(out, JSON_NAME)
  old = cli.load_resumable(path, LAUNCHER, settings)
  cells: Dict[str, Any] = dict(old.get("cells", {}))
  machine = cli.machine_info()
  result = {"launcher": LAUNCHER, "settings": settings, "config": cfg, "machine": machine,
            "command": " ".join(sys.argv), "cells": cells}
  i, n = shard_index(cfg["shard"])
  everything = plan(cfg)
  todo = [p for p in everything[i::n] if _pending(cfg, cells.get(cell_key(*p)), p[2])]
  log(f"[{LAUNCHER}] {len(everything)} cells, shard {i}/{n}: {len(todo)} to run; "
      f"{len(cfg['graphs'])} graphs x {len(cfg['topologies'])} topologies; learned methods "
      f"get {max(cfg['seconds']):g} s each; load average {machine['load_average']}")
  graphs: Dict[str, Any] = {}
  topos: Dict[Tuple[str, str], Any] = {}
  mine: List[str] = []
  t0 = time.perf_counter()
  planned = sum(max(cfg["seconds"]) if m in cfg["learned"] else 10.0 for _, _, m in todo)
  spent_planned = 0.0
  for g, topo_spec, m in todo:
    key = cell_key(g, topo_spec, m)
    try:
      if g not in graphs:
        graphs[g] = sources.load_graph(g)
      if (g, topo_spec) not in topos:
        topos[(g, topo_spec)] = topology_spec.make_topology(
            topology_spec.parse_topology(topo_spec), graphs[g])[0]
      row = solve_cell(cfg, m, graphs[g], topos[(g, topo_spec)])
    except Exception as e:  # pylint: disable=broad-except
      if cfg["fail_fast"]:
        raise
      row = {"error": cli.one_line(e)}
    row.update(graph=g, topology=topo_spec, method=m, family=cfg["families"].get(g, "other"),
               load_average=[round(x, 2) for x in os.getloadavg()])
    cells[key] = row
    mine.append(key)
    _locked_merge(path, result, mine)
    spent_planned += max(cfg["seconds"]) if m in cfg["learned"] else 10.0
    elapsed = time.perf_counter() - t0
    eta = elapsed / spent_planned * (planned - spent_planned) if spent_planned else math.inf
    what = (f"error: {row['error']}" if "error" in row else
            f"{row['objective']:.6g}{'' if row['feasible'] else ' (OOM)'} in "
            f"{row['seconds']:.1f} s")
    log(f"[{len(mine)}/{len(todo)}] {g} {topo_spec} {m}: {what} | elapsed "
        f"{cli.duration_text(elapsed)}, ETA {cli.duration_text(eta)}")
  result = _locked_merge(path, result, mine)
  result["table"] = summarize(cfg, result["cells"])
  result["markdown"] = markdown(cfg, result["table"])
  if cfg["plots"]:
    result["plot"] = plot(cfg, result["cells"], os.path.join(out, PLOT_NAME))
  result = _locked_merge(path, result, mine)
  from simulator import fileio  # pylint: disable=g-import-not-at-top
  with fileio.atomic_open(os.path.join(out, MD_NAME), "w", make_dirs=True) as fh:
    fh.write(result["markdown"])
  return dict(result, computed=len(mine), skipped=len(everything[i::n]) - len(todo))
