"""GO's transfer evaluation: pretrained policies on held-out graphs against the fast baselines.

  rows = transfer.run(config, out="results/transfer")   # experiments/transfer.py

For every held-out (graph, topology) instance it runs the non-learned baselines (HEFT, m-ETF,
m-SCT, METIS, expert split, BRKGA with 5K evaluations) and, for every learned row (GO with the
hint, the paper's GO and GDP, the ablations; `config.rows`), the pretrained policy zero-shot
(greedy, and best of K samples from one forward pass) and after fine-tuning for a wall-clock
budget. Every objective is re-simulated on the host (`methods.evaluate`). A learned row whose
checkpoint does not exist yet is pretrained first (`config.pretrain_missing`) with its config
of experiments/configs/pretrain.py (passed in by the launcher), so one command sweeps GO, GDP
and the ablations.

Outputs in `out/`: results.json (every row; written atomically after each cell and resumed
from: a cell already there is skipped), results.md (`markdown`: per instance the best baseline
and each learned row's ratio to it; per learned row the summary counts the issue asks for).
Search seconds are wall time on this machine and include compilation.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from go_jax import harness, methods, objectives, place, pretrained, training
from simulator import fileio, sources

JSON_NAME, MD_NAME = "results.json", "results.md"
HINT = "best_list"
# Learned row -> (policy variant of go_jax.policies, hint, task). "go_hint" is GO with the best
# list scheduler's placement as a hint (go_jax/policies/go.py), "go" and "gdp" the papers'
# systems, the rest ablations of go_hint. experiments/configs/pretrain.py builds their configs.
ROWS: Dict[str, Tuple[str, str, str]] = {
    "go_hint": ("go", HINT, "joint"),
    "go": ("go", "", "joint"),
    "gdp": ("gdp", "", "placement"),
    "no_gnn": ("no_gnn", HINT, "joint"),
    "no_attention": ("no_attention", HINT, "joint"),
    "no_recurrence": ("no_recurrence", HINT, "joint"),
    "no_superposition": ("no_superposition", HINT, "joint"),
}
KEY = ("row", "stage", "graph", "topology")


def _key(row: Mapping[str, Any]) -> Tuple:
  return tuple(row[k] for k in KEY)


def checkpoint_of(row: str, cfg: Mapping[str, Any]) -> str:
  """Where a learned row's pretrained policy lives: the shipped checkpoint of that name if
  there is one (and `use_shipped`), else `<pretrain_dir>/<row>`."""
  if cfg.get("use_shipped", True) and row in pretrained.available():
    return pretrained.available()[row]
  return os.path.join(cfg["pretrain_dir"], row)


def ensure_pretrained(row: str, cfg: Mapping[str, Any],
                      pretrain_config: Optional[Callable[[str], Any]] = None) -> str:
  """The row's checkpoint folder, pretraining it first (with `pretrain_config(row)`) when it is
  missing and that is allowed."""
  folder = checkpoint_of(row, cfg)
  if os.path.isfile(os.path.join(folder, pretrained.PARAMS_NAME)):
    return folder
  if not cfg.get("pretrain_missing", True) or pretrain_config is None:
    raise ValueError(f"row {row!r}: no pretrained policy at {folder} (run go-jax-train with "
                     f"experiments/configs/pretrain.py:{row}, or allow pretrain_missing)")
  logging.info("row %s: pretraining into %s", row, folder)
  training.train(pretrain_config(row), folder)
  return folder


def _row(kind, row, stage, graph, topo_spec, g, t, *, objective, seconds, place, prio,
         reference_bound, **extra) -> Dict[str, Any]:
  scored = methods.evaluate(g, t, np.asarray(place), np.asarray(prio), objective)
  peak = np.asarray(scored["peak_memory"], np.float64)
  return dict(kind=kind, row=row, stage=stage, graph=graph, topology=topo_spec,
              nodes=g.num_nodes, devices=t.num_devices, objective=scored["objective"],
              makespan=scored["makespan"], feasible=scored["feasible"],
              peak_memory=float(peak.max()), lower_bound=reference_bound,
              gap=scored["objective"] / reference_bound - 1.0 if reference_bound > 0 else None,
              search_seconds=float(seconds), **extra)


def _baseline_cells(cfg, graph_spec, topo_spec, g, t, bound):
  for name in cfg["baselines"]:
    if name not in methods.available():
      logging.warning("transfer: baseline %s is not available; skipped", name)
      continue
    budget = cfg["brkga_budget"] if name == "brkga" else None
    yield (name, "search"), lambda name=name, budget=budget: _solve(
        cfg, name, graph_spec, topo_spec, g, t, bound, budget)


def _solve(cfg, name, graph_spec, topo_spec, g, t, bound, budget):
  sol = methods.solve(name, g, t, objective=cfg["objective"], seed=cfg["seed"], budget=budget)
  return [_row("baseline", name, "search", graph_spec, topo_spec, g, t,
               objective=cfg["objective"], seconds=sol.search_seconds, place=sol.placement,
               prio=sol.priority, reference_bound=bound)]


def _learned(cfg, row, graph_spec, topo_spec, g, t, bound, pretrain_config):
  folder = ensure_pretrained(row, cfg, pretrain_config)
  config, params = pretrained.load(folder)
  budget = float(cfg["finetune_seconds"].get(row, cfg["finetune_seconds"]["default"]))
  # The same one-graph fine-tuning setup as go-jax-place (one update per call, constant lr).
  tune_cfg = place.go_config(config, objective=cfg["objective"],
                             learning_rate=cfg["finetune_lr"], samples=cfg["samples"])
  name = f"{graph_spec} @ {topo_spec}"
  common = dict(objective=cfg["objective"], reference_bound=bound)
  # One fine-tuning run gives all three stages: its greedy action before any update, the best
  # of its first update's K samples (drawn from the pretrained parameters: zero-shot), and the
  # best action of the whole budget. One compile serves them all (updates_per_call = 1).
  tuned = training.finetune(tune_cfg, g, t, params, max_seconds=max(budget, 1e-3),
                            seed=cfg["seed"], name=name)
  out = [_row("learned", row, "zero-shot greedy", graph_spec, topo_spec, g, t,
              seconds=tuned.zero_shot_seconds, place=tuned.zero_shot_placement,
              prio=tuned.zero_shot_priority, **common),
         _row("learned", row, f"zero-shot best of {cfg['samples']}", graph_spec, topo_spec, g,
              t, seconds=tuned.zero_shot_best["seconds"],
              place=tuned.zero_shot_best["placement"],
              prio=tuned.zero_shot_best["priority"], **common)]
  if budget > 0:
    out.append(_row("learned", row, "fine-tuned", graph_spec, topo_spec, g, t,
                    seconds=tuned.seconds, place=tuned.placement, prio=tuned.priority,
                    updates=tuned.updates, budget_seconds=budget, **common))
  return out


def load_rows(out: str) -> List[Dict[str, Any]]:
  """Rows of `<out>/results.json` ([] where there is none yet): the harness's file format."""
  return list(harness.load_rows(out))


def settings(config) -> Dict[str, Any]:
  cfg = config.to_dict() if hasattr(config, "to_dict") else dict(config)
  required = ("graphs", "topologies", "baselines", "rows", "objective", "seed", "samples",
              "finetune_seconds", "finetune_lr", "brkga_budget", "pretrain_dir")
  missing = [k for k in required if k not in cfg]
  if missing:
    raise ValueError(f"transfer config: missing field(s) {missing}")
  if "default" not in cfg["finetune_seconds"]:
    raise ValueError("transfer config: finetune_seconds needs a 'default' entry")
  for spec in cfg["topologies"]:
    harness.parse_topology(spec)
  unknown = [r for r in cfg["rows"] if r not in ROWS]
  if unknown:
    raise ValueError(f"transfer config: unknown row(s) {unknown}; rows: {list(ROWS)}")
  return cfg


def run(config, out: str, pretrain_config: Optional[Callable[[str], Any]] = None
        ) -> List[Dict[str, Any]]:
  """Runs (or resumes) every cell of the config; returns all rows (see the module docstring).
  `pretrain_config(row)` gives the training config of a row to pretrain when missing."""
  cfg = settings(config)
  rows = load_rows(out)
  done = {(r["row"], r["graph"], r["topology"]) for r in rows}
  t_start, cells_run = time.perf_counter(), 0
  instances = [(gs, ts) for gs in cfg["graphs"] for ts in cfg["topologies"]]
  for i, (graph_spec, topo_spec) in enumerate(instances):
    g = sources.load_graph(graph_spec)
    t = harness.make_topology(harness.parse_topology(topo_spec), g)[0]
    bound = float(objectives.get_objective(cfg["objective"]).lower_bound(g, t)["bound"])
    cells = list(_baseline_cells(cfg, graph_spec, topo_spec, g, t, bound))
    cells += [((r, "learned"), lambda r=r: _learned(cfg, r, graph_spec, topo_spec, g, t, bound,
                                                     pretrain_config))
              for r in cfg["rows"]]
    for (name, _), fn in cells:
      if (name, graph_spec, topo_spec) in done:
        continue
      t0 = time.perf_counter()
      new = fn()
      rows.extend(new)
      done.add((name, graph_spec, topo_spec))
      cells_run += 1
      fileio.write_json(os.path.join(out, JSON_NAME), {"settings": cfg, "rows": rows})
      logging.info("instance %d/%d %s @ %s: %s done in %.1f s (%s); %.0f s elapsed", i + 1,
                   len(instances), graph_spec, topo_spec, name, time.perf_counter() - t0,
                   ", ".join(f"{r['stage']} {r['objective']:.5g}" for r in new),
                   time.perf_counter() - t_start)
  with fileio.atomic_open(os.path.join(out, MD_NAME), "w", make_dirs=True) as fh:
    fh.write(markdown(rows, cfg))
  return rows


def _geo(xs: Sequence[float]) -> float:
  xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
  return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def compare(rows: Sequence[Mapping[str, Any]]) -> Dict[Tuple[str, str], Dict[str, Any]]:
  """Per instance: the best baseline (method, objective) and every learned stage's ratio."""
  out: Dict[Tuple[str, str], Dict[str, Any]] = {}
  for r in rows:
    inst = out.setdefault((r["graph"], r["topology"]), {"best": None, "learned": {}})
    if r["kind"] == "baseline":
      if inst["best"] is None or r["objective"] < inst["best"]["objective"]:
        inst["best"] = r
  for r in rows:
    if r["kind"] == "learned":
      inst = out[(r["graph"], r["topology"])]
      stage = "zero-shot best" if r["stage"].startswith("zero-shot best") else r["stage"]
      ratio = r["objective"] / inst["best"]["objective"] if inst["best"] else None
      inst["learned"][(r["row"], stage)] = dict(r, ratio=ratio)
  return out


def summary(rows: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
  """Per learned row: instances, geo-mean ratios to the best baseline, and the counts of
  fine-tuned within 5% / strictly ahead, zero-shot (greedy) within 15%."""
  comp = compare(rows)
  names = list(dict.fromkeys(r["row"] for r in rows if r["kind"] == "learned"))
  out = []
  for name in names:
    get = lambda st: [v["learned"][(name, st)]["ratio"] for v in comp.values()
                      if (name, st) in v["learned"]]
    tuned, greedy, best_k = get("fine-tuned"), get("zero-shot greedy"), get("zero-shot best")
    secs = [v["learned"][(name, "fine-tuned")]["search_seconds"] for v in comp.values()
            if (name, "fine-tuned") in v["learned"]]
    out.append(dict(row=name, instances=len(greedy), tuned_geo=_geo(tuned),
                    tuned_within_5=sum(r <= 1.05 for r in tuned),
                    tuned_ahead=sum(r < 1.0 - 1e-9 for r in tuned), tuned_n=len(tuned),
                    greedy_geo=_geo(greedy), greedy_within_15=sum(r <= 1.15 for r in greedy),
                    best_k_geo=_geo(best_k), tuned_seconds_max=max(secs) if secs else None))
  return out


def _ms(x: float) -> str:
  return f"{x * 1e3:.2f} ms" if x < 1 else f"{x:.3f} s"


def markdown(rows: Sequence[Mapping[str, Any]], cfg: Optional[Mapping[str, Any]] = None) -> str:
  comp = compare(rows)
  names = list(dict.fromkeys(r["row"] for r in rows if r["kind"] == "learned"))
  lines = ["| graph | topology | best baseline | objective | " + " | ".join(
      f"{n} zero-shot / best of K / fine-tuned (s)" for n in names) + " |",
           "|---|---|---|---:|" + "---:|" * len(names)]
  for (graph, topo), inst in comp.items():
    best = inst["best"]
    cells = []
    for n in names:
      lr = inst["learned"]
      if (n, "zero-shot greedy") not in lr:
        cells.append("")
        continue
      parts = [f"{lr[(n, 'zero-shot greedy')]['ratio']:.3f}",
               f"{lr[(n, 'zero-shot best')]['ratio']:.3f}"]
      if (n, "fine-tuned") in lr:
        ft = lr[(n, "fine-tuned")]
        parts.append(f"**{ft['ratio']:.3f}** ({ft['search_seconds']:.0f} s)")
      cells.append(" / ".join(parts))
    lines.append(f"| {graph} | {topo} | {best['row'] if best else '-'} | "
                 f"{_ms(best['objective']) if best else '-'} | " + " | ".join(cells) + " |")
  lines += ["", "Ratios are objective / best baseline's objective (lower is better; < 1: ahead).",
            "", "| row | instances | fine-tuned: geo-mean ratio | within 5% | ahead | "
            "zero-shot greedy: geo-mean | within 15% | best of K: geo-mean | max fine-tune s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for s in summary(rows):
    lines.append(f"| {s['row']} | {s['instances']} | {s['tuned_geo']:.3f} | "
                 f"{s['tuned_within_5']}/{s['tuned_n']} | {s['tuned_ahead']}/{s['tuned_n']} | "
                 f"{s['greedy_geo']:.3f} | {s['greedy_within_15']}/{s['instances']} | "
                 f"{s['best_k_geo']:.3f} | {s['tuned_seconds_max'] or 0:.0f} |")
  base = ["", "Baselines (objective, search seconds):", "",
          "| graph | topology | " + " | ".join(cfg["baselines"] if cfg else []) + " |",
          "|---|---|" + "---:|" * len(cfg["baselines"] if cfg else [])]
  if cfg:
    for (graph, topo) in comp:
      cells = []
      for m in cfg["baselines"]:
        r = [x for x in rows if x["row"] == m and x["graph"] == graph and x["topology"] == topo]
        cells.append(f"{_ms(r[0]['objective'])}{'' if r[0]['feasible'] else ' (OOM)'} "
                     f"({r[0]['search_seconds']:.2f} s)" if r else "")
      base.append(f"| {graph} | {topo} | " + " | ".join(cells) + " |")
    lines += base
  return "\n".join(lines) + "\n"
