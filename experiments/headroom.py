"""How far below BRKGA 5K a graph's peak memory can go: the room REGAL's figure is measured in.

REGAL's headline is a mean improvement over BRKGA 5K at the same 5,000 evaluations (3.56% on
its TensorFlow set). What any 5K method can show on a graph is bounded by how far below BRKGA
5K's answer that graph's optimum lies. The objective's lower bound (go_jax/objectives.py) is
too loose to tell (it is 1.1-1.9x below BRKGA's answers on the synthetic set), so this module
measures the room from above: BRKGA with several times the evaluations (same population and
fractions, same seed), and any registered method at the reference budget beside it. Per graph,
the lowest objective any row found is the "best known"; a row's `room_share` is the share of
the best known's mean improvement that the row gets.

  result = headroom.run(graphs, names, topology, rows=[("brkga", 5000), ("brkga", 100000),
                        ("regal_hint", 5000)], out="results/regal_headroom")

Cells (graph, seed, row) are kept in <out>/regal_headroom.json, rewritten atomically as they
finish; a rerun with the same settings resumes. Times are search seconds after one untimed
warm-up per row and padded graph shape (compilation excluded, as in the REGAL table).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Sequence, Tuple

import numpy as np

from experiments import cli

LAUNCHER = "regal_headroom"
JSON_NAME = "regal_headroom.json"
MD_NAME = "regal_headroom.md"
CONFIDENCE = 0.95
RESAMPLES = 10_000


ROW_KINDS = ("placement", "joint")  # methods that place the graph themselves
BRKGA_FIELDS = ("population", "elite_frac", "mutant_frac", "elite_bias")


def row_label(method: str, budget: int) -> str:
  return f"{method}@{int(budget)}"


def parse_rows(text: str) -> List[Tuple[str, int]]:
  """"brkga@5000,brkga@100000,regal_hint@5000" -> [(method, budget), ...]; ValueError naming
  the bad entry (no budget, a budget below 1 or below one generation of a BRKGA method, an
  unknown method, a repeated row, or a method
  that does not place the graph itself: a schedule or fusion method needs a fixed placement,
  and a partition method's objective is on its own expanded graph, not comparable). Checked
  before any cell runs, so a bad row never leaves a results file behind."""
  from go_jax import methods  # pylint: disable=g-import-not-at-top
  rows = []
  for item in [s.strip() for s in str(text).split(",") if s.strip()]:
    name, sep, budget = item.partition("@")
    if not sep or not budget.isdigit() or int(budget) < 1:
      raise ValueError(f"row {item!r}: write METHOD@BUDGET with a budget >= 1 (e.g. "
                       "brkga@100000)")
    kind = methods.get(name).kind  # ValueError naming the unknown method, listing the known
    if kind not in ROW_KINDS:
      raise ValueError(f"row {item!r}: method {name!r} is a {kind} method (" +
                       ("it needs a fixed placement" if kind in ("schedule", "fusion") else
                        "its objective is on its own expanded graph") +
                       "); rows take placement or joint methods only")
    spec = methods.get(name)
    if all(spec.defaults.get(k) is not None for k in BRKGA_FIELDS):
      from go_jax.methods import evolution  # pylint: disable=g-import-not-at-top
      per_gen = evolution.generation_evaluations(spec.defaults, name)
      if int(budget) < per_gen:
        raise ValueError(f"row {item!r}: budget {budget} is below one generation of {name} "
                         f"({per_gen} evaluations)")
    rows.append((name, int(budget)))
  if not rows:
    raise ValueError("no rows given")
  if len(set(rows)) != len(rows):
    raise ValueError(f"a row is given twice: {text!r}")
  return rows


def check_seeds(seeds: Sequence[int]) -> List[int]:
  """The seeds as a list; ValueError unless they are distinct integers >= 0, at least one
  (a repeated seed would count its instances twice)."""
  try:
    seeds = [int(s) for s in seeds]
  except (TypeError, ValueError):
    raise ValueError(f"seeds must be integers, got {list(seeds)}") from None
  if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
    raise ValueError(f"seeds must be distinct integers >= 0 and at least one, got {seeds}")
  return seeds


def mean_interval(values: Sequence[float]) -> Tuple[float, float]:
  """The 95% bootstrap interval of the mean (scipy's BCa; the value itself for < 3 values or
  values that are all equal)."""
  x = np.asarray(values, np.float64)
  if x.size < 3 or np.all(x == x[0]):
    m = float(x.mean()) if x.size else float("nan")
    return m, m
  from scipy import stats  # pylint: disable=g-import-not-at-top
  res = stats.bootstrap((x,), np.mean, confidence_level=CONFIDENCE, n_resamples=RESAMPLES,
                        random_state=np.random.default_rng(0))
  return float(res.confidence_interval.low), float(res.confidence_interval.high)


def summarize(cells: Mapping[str, Mapping[str, Any]], names: Sequence[str],
              seeds: Sequence[int], rows: Sequence[Tuple[str, int]]) -> Dict[str, Any]:
  """Per row: mean / median % improvement over the reference row (the first), its 95%
  interval, better / worse counts, room share, mean and median seconds and the time ratio to
  the reference; plus the best known's mean improvement. Instances lacking a cell are left out."""
  labels = [row_label(*r) for r in rows]
  ref = labels[0]
  inst = []
  for name in names:
    for seed in seeds:
      got = {lab: cells.get(cell_key(name, seed, lab)) for lab in labels}
      if all(c is not None and "objective" in c for c in got.values()):
        inst.append(got)
  out: Dict[str, Any] = {"instances": len(inst), "reference": ref, "rows": {}}
  if not inst:
    return out
  refv = np.asarray([c[ref]["objective"] for c in inst])
  best = np.min([[c[lab]["objective"] for lab in labels] for c in inst], axis=1)
  best_imp = 100.0 * (refv - best) / refv
  out["best_known_improvement"] = float(best_imp.mean())
  out["best_known_interval"] = mean_interval(best_imp)
  ref_sec = np.asarray([c[ref]["seconds"] for c in inst])
  for lab in labels:
    v = np.asarray([c[lab]["objective"] for c in inst])
    sec = np.asarray([c[lab]["seconds"] for c in inst])
    imp = 100.0 * (refv - v) / refv
    out["rows"][lab] = {
        "mean_improvement": float(imp.mean()), "median_improvement": float(np.median(imp)),
        "interval": mean_interval(imp), "better": int(np.sum(v < refv)),
        "worse": int(np.sum(v > refv)), "best_known_on": int(np.sum(v == best)),
        "room_share": (float(imp.mean() / best_imp.mean()) if best_imp.mean() > 0 else None),
        "mean_seconds": float(sec.mean()), "median_seconds": float(np.median(sec)),
        "time_ratio": float(sec.sum() / ref_sec.sum()) if ref_sec.sum() > 0 else None,
        "evaluations": int(np.mean([c[lab]["evaluations"] for c in inst]))}
  return out


def markdown(summary: Mapping[str, Any]) -> str:
  from go_jax.results import markdown_table  # pylint: disable=g-import-not-at-top
  head = ["row", "mean % improvement over " + str(summary.get("reference")), "95% interval",
          "median %", "better / worse", "best known on", "share of the room",
          "mean s", "time / reference"]
  body = []
  for lab, r in summary.get("rows", {}).items():
    lo, hi = r["interval"]
    body.append([lab, f"{r['mean_improvement']:+.2f}", f"{lo:+.2f} to {hi:+.2f}",
                 f"{r['median_improvement']:+.2f}", f"{r['better']} / {r['worse']}",
                 str(r["best_known_on"]),
                 "-" if r["room_share"] is None else f"{100 * r['room_share']:.0f}%",
                 f"{r['mean_seconds']:.2f}",
                 "-" if r["time_ratio"] is None else f"{r['time_ratio']:.2f}x"])
  text = markdown_table(head, body)
  if "best_known_improvement" in summary:
    lo, hi = summary["best_known_interval"]
    text += (f"\n\nBest known per graph (lowest of all rows), {summary['instances']} instances: "
             f"{summary['best_known_improvement']:+.2f}% below {summary['reference']} "
             f"(95% interval {lo:+.2f} to {hi:+.2f}).\n")
  return text


def cell_key(graph: str, seed: int, label: str) -> str:
  return f"{graph}|{int(seed)}|{label}"


def run(graphs: Sequence[Any], names: Sequence[str], topology: str,
        rows: Sequence[Tuple[str, int]], out: str, *, objective: str = "peak_memory",
        seeds: Sequence[int] = (0,), log: Callable[[str], None] = print,
        save_seconds: float = 5.0) -> Dict[str, Any]:
  """Runs (or resumes) every (graph, seed, row) cell in folder `out`; returns the JSON written
  (settings, cells, summary, markdown). The first row is the reference (REGAL's BRKGA 5K)."""
  from experiments.regal_comparison import padded_shape  # pylint: disable=g-import-not-at-top
  from go_jax import methods  # pylint: disable=g-import-not-at-top
  from simulator import fileio, topology_spec  # pylint: disable=g-import-not-at-top
  if len(graphs) != len(names) or not graphs:
    raise ValueError(f"give one name per graph and at least one graph (got {len(graphs)} "
                     f"graphs, {len(names)} names)")
  if len(set(names)) != len(names):
    raise ValueError("two graphs share a name")
  seeds = check_seeds(seeds)
  settings = {"topology": topology, "objective": objective,
              "rows": [row_label(*r) for r in rows]}
  path = os.path.join(out, JSON_NAME)
  old = cli.load_resumable(path, LAUNCHER, settings)
  cells: Dict[str, Any] = dict(old.get("cells", {}))
  tspec = topology_spec.parse_topology(topology)
  result = {"launcher": LAUNCHER, "settings": settings, "machine": cli.machine_info(),
            "command": " ".join(sys.argv), "seeds": [int(s) for s in seeds], "cells": cells}
  todo = [(gi, int(s), r) for gi in range(len(graphs)) for s in seeds for r in rows
          if "objective" not in cells.get(cell_key(names[gi], s, row_label(*r)), {})]
  log(f"[{LAUNCHER}] {len(graphs) * len(seeds) * len(rows)} cells, {len(todo)} to run; "
      f"rows {settings['rows']}; load average {result['machine']['load_average']}")
  warmed, topos = set(), {}
  t0 = last = time.perf_counter()
  work_done = 0.0
  work_total = float(sum(r[2][1] for r in todo))  # evaluations: the ETA's unit of work
  try:
    for i, (gi, seed, (name, budget)) in enumerate(todo):
      g = graphs[gi]
      if gi not in topos:
        topos[gi] = topology_spec.make_topology(tspec, g)[0]
      t = topos[gi]
      shape = (name, budget) + padded_shape(g, t.num_devices)
      if shape not in warmed:  # compile outside the timed call
        warmed.add(shape)
        methods.solve(name, g, t, objective=objective, budget=budget, seed=seed)
      sol = methods.solve(name, g, t, objective=objective, budget=budget, seed=seed)
      cells[cell_key(names[gi], seed, row_label(name, budget))] = {
          "objective": float(sol.objective), "feasible": bool(sol.feasible),
          "seconds": float(sol.search_seconds), "evaluations": int(sol.evaluations),
          "placement": [int(x) for x in sol.placement],
          "priority": [float(x) for x in sol.priority]}
      work_done += budget
      elapsed = time.perf_counter() - t0
      eta = elapsed * (work_total - work_done) / work_done
      log(f"[{i + 1}/{len(todo)}] {names[gi]} seed {seed} {row_label(name, budget)}: "
          f"{sol.objective:.6g} in {sol.search_seconds:.2f} s | elapsed "
          f"{cli.duration_text(elapsed)}, ETA {cli.duration_text(eta)}")
      if time.perf_counter() - last >= save_seconds:
        fileio.write_json(path, result)
        last = time.perf_counter()
  finally:  # an interruption keeps the finished cells for the resume
    result["summary"] = summarize(cells, names, seeds, rows)
    result["markdown"] = markdown(result["summary"])
    if cells:  # none finished (the first cell's options failed): no file, whose settings
      fileio.write_json(path, result)  # would refuse the corrected rerun
      with fileio.atomic_open(os.path.join(out, MD_NAME), "w", make_dirs=True) as fh:
        fh.write(result["markdown"])
  return result
