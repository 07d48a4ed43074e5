"""GO's transfer evaluation: pretrained policies on held-out graphs against the fast baselines.

  rows = transfer.run(config, out="results/transfer")   # experiments/transfer.py

A harness run (`go_jax.harness`: the same cells, row format and results files as
go-jax-evaluate and go-jax-place) over every held-out (graph, topology) instance: the
non-learned baselines (HEFT, m-ETF, m-SCT, METIS, expert split, BRKGA with 5K evaluations; a
method the registry marks learned, `methods.MethodSpec.learned`, is refused there) and,
for every learned row (GO with the hint, the paper's GO and GDP, the ablations; `config.rows`;
the rows, their checkpoints and their pretraining: `go_jax.transfer_rows`),
the registered learned method (`go_jax.methods.learned`) started from the row's pretrained
checkpoint, whose stages become rows: zero-shot (greedy, and best of K samples from one forward
pass) and fine-tuned for a wall-clock budget. Every objective is re-simulated on the host. A
learned row whose checkpoint does not exist yet is pretrained first (`config.pretrain_missing`)
with its config of experiments/configs/pretrain.py (passed in by the launcher), so one command
sweeps GO, GDP and the ablations.

Outputs in `out/`: results.json (every row; written atomically after each cell and resumed
from: a cell already there is skipped), results.csv, results.md (`markdown`: per instance the
best baseline and each learned row's ratio to it; per learned row the summary figures:
geometric-mean ratios, fine-tuned within 5% / ahead, zero-shot within 15%; and where a row was
pretrained with several seeds, "go", "go_s1", ..., the spread of those figures over its seeds:
`seed_spread`), plots/zero_shot.png and plots/fine_tuned.png (`plot_summary`: the rows'
geo-mean ratios as bars, with the seeds' spread). Search seconds are wall time on this machine
and include loading and compilation.
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging

from go_jax import harness, methods, objectives, results
from go_jax.place import BRKGA_METHODS
# The learned rows (names, seeds, methods, checkpoints, pretraining), re-exported: callers use
# transfer.ROWS, transfer.parse_row, ...
from go_jax.transfer_rows import (  # noqa: F401
    HINT, NO_IMITATION, ROWS, SEED_SUFFIX, checkpoint_of, ensure_pretrained, is_row, method_of,
    parse_row, pretrain_arg)
from simulator import sources, topology_spec

LAUNCHER = "transfer"
JSON_NAME, CSV_NAME, MD_NAME = results.JSON_NAME, results.CSV_NAME, results.MD_NAME
# Canonical stages of the summary (best of K is stored with its K: "zero-shot best of 64").
GREEDY, BEST_K, TUNED = "zero-shot greedy", "zero-shot best", "fine-tuned"


def load_rows(out: str) -> List[Dict[str, Any]]:
  """Rows of `<out>/results.json` ([] where there is none yet); ValueError if another
  launcher wrote it."""
  return harness.load_rows(out, LAUNCHER)


def settings(config) -> Dict[str, Any]:
  cfg = config.to_dict() if hasattr(config, "to_dict") else dict(config)
  required = ("graphs", "topologies", "baselines", "rows", "objective", "seed", "samples",
              "finetune_seconds", "finetune_lr", "brkga_budget", "pretrain_dir")
  missing = [k for k in required if k not in cfg]
  if missing:
    raise ValueError(f"transfer config: missing field(s) {missing}")
  updates = cfg.get("finetune_updates")
  if updates is not None and (isinstance(updates, bool) or not isinstance(updates, int)
                              or updates < 1):
    raise ValueError(f"transfer config: finetune_updates must be an integer >= 1 or None, "
                     f"got {updates!r}")
  if "default" not in cfg["finetune_seconds"]:
    raise ValueError("transfer config: finetune_seconds needs a 'default' entry")
  budget = cfg["brkga_budget"]
  if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
    raise ValueError(f"transfer config: brkga_budget (simulator evaluations of BRKGA) must be "
                     f"an integer >= 1, got {budget!r}")
  methods.check_seed(cfg["seed"], "transfer config")
  for row, secs in dict(cfg["finetune_seconds"]).items():
    if isinstance(secs, bool) or not isinstance(secs, (int, float)) or not 0 <= secs < math.inf:
      raise ValueError(f"transfer config: finetune_seconds[{row!r}] must be finite seconds "
                       f">= 0, got {secs!r}")
  _check_lists(cfg)
  _check_finetune_options(cfg)
  harness.same_instances(cfg["topologies"], [
      harness.topology_identity(topology_spec.parse_topology(t)) for t in cfg["topologies"]],
                         "topologies", "transfer config")
  harness.same_instances(cfg["graphs"], [
      sources.spec_identity(harness.check_graph(g, "transfer config: graphs"))
      for g in cfg["graphs"]], "graphs", "transfer config")
  objectives.get_objective(cfg["objective"])
  for r in cfg["rows"]:
    try:
      parse_row(r)
    except ValueError as e:
      raise ValueError(f"transfer config: {e}") from e
  typos = sorted(set(cfg["finetune_seconds"]) - {"default"} - set(cfg["rows"]))
  if typos:
    raise ValueError(f"transfer config: finetune_seconds names {typos}, not rows of this "
                     f"config ({list(cfg['rows'])})")
  return cfg


def _check_lists(cfg: Dict[str, Any]) -> None:
  """graphs, topologies, baselines and rows: lists (a lone string is one item) without
  repeats; graphs and topologies not empty, and something to run; baselines of a placing kind,
  not named like a learned row (two cells would share one label) and not learned methods
  (`methods.MethodSpec.learned`): a learned method is what the sweep measures, so as a
  baseline its stages would be read as a learned row's without a baseline to compare with."""
  for field in ("graphs", "topologies", "baselines", "rows"):
    value = cfg[field]
    cfg[field] = [value] if isinstance(value, str) else list(value or ())
    repeats = [x for i, x in enumerate(cfg[field]) if x in cfg[field][:i]]
    if repeats:
      raise ValueError(f"transfer config: {field} gives {repeats[0]!r} twice")
  for field in ("graphs", "topologies"):
    if not cfg[field]:
      raise ValueError(f"transfer config: {field} is empty")
  if not cfg["baselines"] and not cfg["rows"]:
    raise ValueError("transfer config: baselines and rows are both empty: nothing to run")
  clash = sorted(set(cfg["baselines"]) & set(cfg["rows"]))
  if clash:
    raise ValueError(f"transfer config: {clash} are both a baseline and a learned row; a "
                     "learned method is compared through its row")
  for name in cfg["baselines"]:
    if name in methods.available() and methods.get(name).learned:
      rows = sorted({r for r in ROWS if method_of(r) == name})
      where = (f"give it in rows (--config.rows), e.g. {rows}" if rows else
               f"it runs no pretrained row of this sweep; learned rows (--config.rows) are "
               f"{list(ROWS)}")
      raise ValueError(f"transfer config: baseline {name!r} is a learned method; baselines "
                       f"are the non-learned methods the learned rows are compared with: "
                       f"{where}")
    if name in methods.available() and methods.get(name).kind not in ("placement", "joint"):
      raise ValueError(f"transfer config: baseline {name!r} is a {methods.get(name).kind} "
                       "method; baselines place the graph as given (placement or joint)")


def _check_finetune_options(cfg: Mapping[str, Any]) -> None:
  """The learned rows' fine-tuning settings, before any cell (each cell would fail alike)."""
  fail = lambda field, want: ValueError(f"transfer config: {field} must be {want}, got "
                                        f"{cfg.get(field)!r}")
  samples = cfg["samples"]
  if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int)
                              or samples < 1):
    raise fail("samples", "an integer >= 1 or None")
  lr = cfg["finetune_lr"]
  if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < math.inf:
    raise fail("finetune_lr", "a finite learning rate > 0")
  imitation = cfg.get("finetune_self_imitation")
  if imitation is not None and not (isinstance(imitation, (int, float))
                                    and 0 <= imitation < math.inf):
    raise fail("finetune_self_imitation", "a finite number >= 0 or None")
  polish = cfg.get("finetune_polish")
  if polish is not None and not (isinstance(polish, (int, float)) and 0 <= polish < 1):
    raise fail("finetune_polish", "a share of the fine-tuning time in [0, 1) or None")


def plan(cfg: Mapping[str, Any]) -> List[harness.Cell]:
  """Per instance: the baselines' cells, then the learned rows' (labelled by row)."""
  baselines, skipped = methods.usable(cfg["baselines"], "transfer config: baselines")
  for name, why in skipped.items():
    logging.warning("transfer: baseline %s is not available: %s; skipped", name, why)
  cells = []
  for graph in cfg["graphs"]:
    for topo in cfg["topologies"]:
      common = (graph, topo, int(cfg["seed"]), cfg["objective"])
      for name in baselines:
        opts = ((("evaluations", int(cfg["brkga_budget"])),) if name in BRKGA_METHODS
                else ())
        cells.append(harness.Cell(name, *common, options=opts))
      for row in cfg["rows"]:
        budget = float(cfg["finetune_seconds"].get(row, cfg["finetune_seconds"]["default"]))
        opts = dict(checkpoint=checkpoint_of(row, cfg), finetune_seconds=budget,
                    learning_rate=float(cfg["finetune_lr"]))
        if cfg["samples"] is not None:  # None: the method's own K (learned.FINETUNE_SAMPLES)
          opts["samples"] = int(cfg["samples"])
        if cfg.get("finetune_self_imitation") is not None:
          opts["self_imitation"] = float(cfg["finetune_self_imitation"])
        if cfg.get("finetune_polish") is not None:  # None: learned.FINETUNE_POLISH
          opts["polish"] = float(cfg["finetune_polish"])
        if cfg.get("finetune_updates"):  # a fixed number of updates, not a wall-clock budget
          opts.update(finetune_seconds=0.0, max_updates=int(cfg["finetune_updates"]))
        cells.append(harness.Cell(method_of(row), *common, label=row,
                                  options=tuple(sorted(opts.items()))))
  return cells


def run(config, out: str, pretrain_config: Optional[Callable[[str], Any]] = None, *,
        progress: bool = True, executor=None) -> List[Dict[str, Any]]:
  """Runs (or resumes) every cell of the config; returns all rows (see the module docstring).
  `pretrain_config(row)` gives the training config of a row to pretrain when missing (in this
  process, before the cell is dispatched); executor (`go_jax.executors`; None: in this
  process) runs the cells."""
  cfg = settings(config)
  results.load(out, LAUNCHER)  # another launcher's folder: stop before any work
  cells = plan(cfg)

  def before(cell):
    if is_row(cell.label) and cell.label not in cfg["baselines"]:
      ensure_pretrained(cell.label, cfg, pretrain_config)

  rows = harness.execute(cells, harness.Instances({"budget": None, "schedule_placement": None}),
                         out, launcher=LAUNCHER, config=cfg, progress=progress,
                         before_cell=before, executor=executor)
  results.write_csv(out, rows)
  results.write_markdown(out, markdown(rows, cfg))
  plot_summary(rows, out)
  return rows


def is_learned(row: Mapping[str, Any]) -> bool:
  """Whether a result row is a learned row's (its label names a row of ROWS, `is_row`), not a
  baseline's. Decided by the label, not by the row having a stage: `_check_lists` keeps
  learned methods and learned rows' names out of the baselines."""
  return is_row(row.get("label"))


def _stage(row: Mapping[str, Any]) -> str:
  stage = str(row.get("stage") or "")
  return BEST_K if stage.startswith(BEST_K) else stage


def compare(rows: Sequence[Mapping[str, Any]]) -> Dict[Tuple[str, str], Dict[str, Any]]:
  """Per instance: the best baseline row and every learned (row, stage)'s ratio to it."""
  out: Dict[Tuple[str, str], Dict[str, Any]] = {}
  for r in rows:
    if r.get("error") or r.get("objective") is None:
      continue
    inst = out.setdefault((r["graph"], r["topology"]), {"best": None, "learned": {}})
    if not is_learned(r) and (inst["best"] is None or
                              r["objective"] < inst["best"]["objective"]):
      inst["best"] = r
  for r in rows:
    if is_learned(r) and not r.get("error") and r.get("objective") is not None:
      inst = out[(r["graph"], r["topology"])]
      ratio = r["objective"] / inst["best"]["objective"] if inst["best"] else None
      inst["learned"][(r["label"], _stage(r))] = dict(r, ratio=ratio)
  return out


def _gmean(xs: Sequence[Optional[float]]) -> float:
  from scipy import stats as scipy_stats  # pylint: disable=g-import-not-at-top  # ~1 s to import
  xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
  return float(scipy_stats.gmean(xs)) if xs else float("nan")


def summary(rows: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
  """Per learned row: instances, geo-mean ratios to the best baseline, and the counts of
  fine-tuned within 5% / strictly ahead, zero-shot (greedy) within 15%."""
  comp = compare(rows)
  names = list(dict.fromkeys(r["label"] for r in rows if is_learned(r)))
  out = []
  for name in names:
    get = lambda st: [v["learned"][(name, st)]["ratio"] for v in comp.values()
                      if (name, st) in v["learned"]]
    tuned, greedy, best_k = get(TUNED), get(GREEDY), get(BEST_K)
    feasible = [bool(v["learned"][(name, GREEDY)].get("feasible", True)) for v in comp.values()
                if (name, GREEDY) in v["learned"]]
    secs = [v["learned"][(name, TUNED)]["search_seconds"] for v in comp.values()
            if (name, TUNED) in v["learned"]]
    secs = [x for x in secs if x is not None]
    out.append(dict(row=name, instances=len(greedy), tuned_geo=_gmean(tuned),
                    tuned_within_5=sum(r <= 1.05 for r in tuned if r is not None),
                    # None, not 0, without a fine-tuned stage (a zero-shot-only run)
                    tuned_ahead=(sum(r < 1.0 - 1e-9 for r in tuned if r is not None)
                                 if tuned else None),
                    tuned_n=len(tuned), greedy_geo=_gmean(greedy),
                    greedy_within_15=sum(r <= 1.15 for r in greedy if r is not None),
                    greedy_feasible=sum(feasible),
                    greedy_worst=max((r for r in greedy if r is not None), default=None),
                    best_k_geo=_gmean(best_k), tuned_seconds_max=max(secs) if secs else None))
  return out


def bars(rows: Sequence[Mapping[str, Any]], key: str) -> List[Tuple[str, float, float, float]]:
  """(row, value, lowest, highest) per learned row with a finite `key` figure of `summary`
  ("greedy_geo", "tuned_geo", ...). A row pretrained with several seeds is one entry (its
  seeds' mean and spread, `seed_spread`); any other label is its own, lowest = highest."""
  spread = {e["row"]: e for e in seed_spread(rows)}
  out, seen = [], set()
  for s in summary(rows):
    try:
      base = parse_row(s["row"])[0]
    except ValueError:
      base = None
    if base in spread:
      if base in seen:
        continue
      seen.add(base)
      f = spread[base][key]
      if f["mean"] is not None:
        out.append((base, f["mean"], f["min"], f["max"]))
    elif s[key] is not None and math.isfinite(s[key]):
      out.append((s["row"], s[key], s[key], s[key]))
  return out


# The figures `plot_summary` draws: file name, figure of `summary`, its name in the title.
PLOTS = (("zero_shot.png", "greedy_geo", "zero-shot greedy"),
         ("fine_tuned.png", "tuned_geo", "fine-tuned"))


def plot_summary(rows: Sequence[Mapping[str, Any]], out: str) -> List[str]:
  """Comparison bars in out/plots/: each learned row's geometric-mean ratio to the best baseline
  (dashed line at 1), zero-shot greedy and, where rows were fine-tuned, fine-tuned; a row with
  several seeds is drawn at their mean with the lowest-highest seed as its error bar. Returns
  the files written (none without learned rows)."""
  from go_jax import plotting  # pylint: disable=g-import-not-at-top  # matplotlib: on use only
  paths = []
  for name, key, what in PLOTS:
    entries = bars(rows, key)
    if not entries:
      continue
    labels, values, low, high = (list(x) for x in zip(*entries))
    errors = [[max(0.0, v - lo) for v, lo in zip(values, low)],  # max: a mean's rounding
              [max(0.0, hi - v) for v, hi in zip(values, high)]]
    paths.append(plotting.plot_bars(
        labels, values, os.path.join(out, "plots", name), reference=1.0, errors=errors,
        title=f"{what}: geometric mean over the instances (error bars: lowest-highest seed)",
        ylabel="objective / best baseline's"))
  return paths


def _ratio(r: Mapping[str, Any]) -> str:
  if r.get("ratio") is None:
    return "-"
  return f"{r['ratio']:.3f}" + ("" if r.get("feasible") else " (OOM)")


def seed_spread(rows: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
  """Per learned row with two or more pretraining seeds ("go", "go_s1", "go_s2"; `parse_row`):
  the seeds, and each summary figure's per-seed values, lowest, mean and highest: the spread
  that an ablation's difference is read against (experiments/configs/ablation.py)."""
  groups: Dict[str, List[Dict[str, Any]]] = {}
  for s in summary(rows):
    try:
      base, seed = parse_row(s["row"])
    except ValueError:  # a label that is not a learned row (a custom one): no seed to group by
      continue
    groups.setdefault(base, []).append(dict(s, seed=seed))
  out = []
  for base, members in groups.items():
    if len(members) < 2:
      continue
    members.sort(key=lambda m: m["seed"])
    entry: Dict[str, Any] = dict(row=base, seeds=[m["seed"] for m in members])
    for key in ("tuned_geo", "greedy_geo", "greedy_worst", "best_k_geo", "tuned_ahead",
                "greedy_feasible"):
      values = [m[key] for m in members]
      finite = [v for v in values if v is not None and math.isfinite(v)]
      entry[key] = dict(values=values, min=min(finite) if finite else None,
                        mean=sum(finite) / len(finite) if finite else None,
                        max=max(finite) if finite else None)
    entry["instances"] = members[0]["instances"]
    out.append(entry)
  return out


def _spread_text(figure: Mapping[str, Any], digits: int = 3) -> str:
  """"lowest-highest (mean m)" of one seed_spread figure."""
  if figure["min"] is None:
    return "-"
  return (f"{figure['min']:.{digits}f}-{figure['max']:.{digits}f} "
          f"(mean {figure['mean']:.{digits}f})")


def _number(x: Optional[float], digits: int = 3) -> str:
  """x to `digits` places; "-" where there is none (a zero-shot-only run has no fine-tuned
  stage)."""
  return "-" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def _count(k: Optional[int], n: int) -> str:
  return f"{k}/{n}" if n else "-"


def markdown(rows: Sequence[Mapping[str, Any]], cfg: Optional[Mapping[str, Any]] = None) -> str:
  """Per instance the best baseline and each learned row's ratios; per learned row the
  summary; the baselines' objectives (formatted in the objective's unit)."""
  comp = compare(rows)
  names = list(dict.fromkeys(r["label"] for r in rows if is_learned(r)))
  body = []
  for (graph, topo), inst in comp.items():
    best = inst["best"]
    cells = []
    for n in names:
      lr = inst["learned"]
      parts = [_ratio(lr[(n, st)]) for st in (GREEDY, BEST_K) if (n, st) in lr]
      if (n, TUNED) in lr:
        ft = lr[(n, TUNED)]
        parts.append(f"**{_ratio(ft)}** ({ft['search_seconds']:.0f} s)")
      cells.append(" / ".join(parts))
    body.append([graph, topo, best["label"] if best else "-",
                 results.value_text(best) if best else "-"] + cells)
  lines = [results.markdown_table(
      ["graph", "topology", "best baseline", "objective"] +
      [f"{n} zero-shot / best of K / fine-tuned (s)" for n in names], body,
      ["l", "l", "l", "r"] + ["r"] * len(names))]
  lines += ["", "Ratios are objective / best baseline's objective (lower is better; < 1: ahead).",
            ""]
  lines.append(results.markdown_table(
      ["row", "instances", "fine-tuned: geo-mean ratio", "within 5%", "ahead",
       "zero-shot greedy: geo-mean", "within 15%", "best of K: geo-mean", "max fine-tune s"],
      [[s["row"], s["instances"], _number(s["tuned_geo"]),
        _count(s["tuned_within_5"], s["tuned_n"]), _count(s["tuned_ahead"], s["tuned_n"]),
        _number(s["greedy_geo"]), _count(s["greedy_within_15"], s["instances"]),
        _number(s["best_k_geo"]), _number(s["tuned_seconds_max"], 0)]
       for s in summary(rows)], ["l"] + ["r"] * 8))
  spread = seed_spread(rows)
  if spread:
    counts = lambda f: "/".join(str(v) for v in f["values"]) if f["max"] is not None else "-"
    lines += ["", "Per row over its pretraining seeds (lowest-highest, mean; counts per seed):",
              "", results.markdown_table(
                  ["row", "seeds", "fine-tuned: geo-mean", "ahead", "zero-shot greedy: geo-mean",
                   "zero-shot worst", "greedy feasible", "best of K: geo-mean"],
                  [[e["row"], ", ".join(map(str, e["seeds"])), _spread_text(e["tuned_geo"]),
                    counts(e["tuned_ahead"]), _spread_text(e["greedy_geo"]),
                    _spread_text(e["greedy_worst"]), counts(e["greedy_feasible"]),
                    _spread_text(e["best_k_geo"])] for e in spread],
                  ["l", "l"] + ["r"] * 6)]
  baselines = list(cfg["baselines"]) if cfg else list(dict.fromkeys(
      r["label"] for r in rows if not is_learned(r)))
  body = []
  for (graph, topo) in comp:
    cells = []
    for m in baselines:
      r = [x for x in rows if x["label"] == m and x["graph"] == graph and x["topology"] == topo
           and not is_learned(x)]
      cells.append(f"{results.value_text(r[0])} ({r[0]['search_seconds'] or 0:.2f} s)"
                   if r else "")
    body.append([graph, topo] + cells)
  lines += ["", "Baselines (objective, search seconds):", "",
            results.markdown_table(["graph", "topology"] + baselines, body)]
  for (graph, topo) in comp:
    none = results.no_feasible_text([r for r in rows if (r["graph"], r["topology"]) ==
                                     (graph, topo)])
    if none:
      lines += ["", f"{graph} @ {topo}: {none}."]
  return "\n".join(lines) + "\n"
