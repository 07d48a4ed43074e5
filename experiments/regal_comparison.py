r"""The REGAL table experiment (issue 12, part 4): % improvement over BRKGA 5K, % gap from the
best method and mean running time of every method, per dataset and device count.

An experiment, not library code; its launcher is experiments/regal_table.py (which holds the
flags, so that tests import this module without defining any).

For every dataset of the config (a split of a built REGAL / XLA dataset folder, or graph specs),
every device count, every graph and seed, every method is solved with `methods.solve` (so every
objective is the simulator's re-simulation; each cell also re-simulates its stored action once
more and records whether it agrees). Per (dataset, device count) and method:

  % improvement over the reference = mean over graphs of (ref - method) / ref * 100
  % gap from best                  = mean over graphs of (method - best) / best * 100, best =
                                     the lowest objective of any method on that graph and seed
  mean time (s)                    = mean search seconds, compilation excluded: each method is
                                     run once untimed per padded graph shape first (config
                                     `warmup`), as go_jax/regal/heldout.py does

Writes `<out>/regal_table.json` (atomically; every cell with its objective, time, placement and
priority, the table, the per-graph figures, the settings and the machine), `<out>/regal_table.md`
(the table as printed) and `<out>/improvement.png` (per-graph improvement over the reference, one
box per method, one panel per dataset and device count). Resumable: a later run with the same
--out skips every cell already in the JSON (cells that recorded an error are run again); a JSON
made with another objective, budget, topology, reference, schedule placement or method options
is refused, and so is a cell the table could not read (not an object, no finite `objective`
or `seconds`), naming the file, cell and field. Bad input (unknown method, a fusion or partition
method, a budget below one generation of a BRKGA method, missing dataset, bad field: the config's
checks are experiments/regal_comparison_config.py) is a one-line error, exit 1, before any
cell; a run whose reference errors on every cell writes its files and then fails
(ReferenceFailed, exit 1): the table would have no improvement to show.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from experiments import cli
# The config checks, re-exported: callers use regal_comparison.as_settings.
from experiments.regal_comparison_config import as_settings, topology_spec_for

DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs",
                              "regal_table.py")
LAUNCHER = "regal_table"
JSON_NAME = "regal_table.json"
MD_NAME = "regal_table.md"
PLOT_NAME = "improvement.png"
# Fields that must be equal for a run to resume another's cells (they change every number).
SETTINGS = ("objective", "budget", "topology", "reference", "method_options",
            "schedule_placement")

# ------------------------------------------------------------------ datasets
def load_dataset(name: str, spec: str):
  """(graph names, graphs) of one dataset: a data spec (a split of a dataset folder) or graph
  specs separated by ';'. ValueError naming the dataset when it is missing or empty."""
  from go_jax import datasets  # pylint: disable=g-import-not-at-top
  from go_jax.datasets import store  # pylint: disable=g-import-not-at-top
  from simulator import sources  # pylint: disable=g-import-not-at-top
  spec = str(spec).strip()
  try:
    if spec.split(":", 1)[0] in store.DATA_KINDS:
      names, graphs = datasets.load_split(spec)
    else:
      names = [s.strip() for s in spec.split(";") if s.strip()]
      graphs = [sources.load_graph(s) for s in names]
  except (ValueError, OSError) as e:
    raise ValueError(f"dataset {name!r} ({spec}): {cli.one_line(e)}") from None
  if not graphs:
    raise ValueError(f"dataset {name!r} ({spec}): no graphs")
  if len(set(names)) != len(names):
    raise ValueError(f"dataset {name!r} ({spec}): two graphs share a name")
  return names, graphs


# ------------------------------------------------------------------ cells
def cell_key(dataset: str, devices: int, graph: str, seed: int, method: str) -> str:
  return f"{dataset}|{devices}|{graph}|{seed}|{method}"


def padded_shape(graph, devices: int) -> Tuple[int, int, int, int]:
  """(ops bucket, edges bucket, edge chunk, devices): what one compile of a search serves."""
  from simulator.padding import bucket  # pylint: disable=g-import-not-at-top
  from simulator.simulate import padded  # pylint: disable=g-import-not-at-top
  return (bucket(graph.num_nodes), bucket(graph.num_edges), padded(graph).chunk, devices)


def solve_cell(cfg, method: str, graph, topo, seed: int) -> Dict[str, Any]:
  """One method on one graph: its objective (re-simulated by `methods.solve`), search seconds
  (a schedule method's include its placement's), action, and whether re-simulating the stored
  action once more gives the same objective."""
  from go_jax import methods  # pylint: disable=g-import-not-at-top
  options = dict(cfg["method_options"].get(method, {}))
  seconds, placement = 0.0, None
  if methods.get(method).kind == "schedule":
    base = methods.solve(cfg["schedule_placement"], graph, topo, objective=cfg["objective"],
                         budget=cfg["budget"], seed=seed,
                         **cfg["method_options"].get(cfg["schedule_placement"], {}))
    seconds, placement = base.search_seconds, base.placement
  sol = methods.solve(method, graph, topo, objective=cfg["objective"], budget=cfg["budget"],
                      seed=seed, placement=placement, **options)
  again = methods.evaluate(graph, topo, sol.placement, sol.priority, cfg["objective"])
  return {"objective": float(sol.objective), "feasible": bool(sol.feasible),
          "seconds": float(seconds + sol.search_seconds), "evaluations": int(sol.evaluations),
          "makespan": float(sol.makespan),
          "peak_memory": [float(x) for x in np.asarray(sol.peak_memory)],
          "agrees": bool(again["objective"] == sol.objective),
          "reason": sol.reason,
          "placement": [int(x) for x in sol.placement],
          "priority": [float(x) for x in sol.priority]}


# ------------------------------------------------------------------ the table
class ResultsFileError(ValueError):
  """A results file's cell that cannot be read: the file's fault, not the config's (the
  launcher does not put the config file before its message)."""
  names_the_file = True


def check_cells(cells: Mapping[str, Any], path: str) -> None:
  """ResultsFileError naming `path`, the cell and the field for a cell an earlier run could
  not have written (hand-edited or corrupted): not an object, an error that is not text, or
  an answer without a finite number `objective` and `seconds` or a true/false `feasible`."""
  for key, cell in cells.items():
    if not isinstance(cell, Mapping):
      raise ResultsFileError(f"{path}: cell {key!r} is not an object")
    if "error" in cell:
      if not isinstance(cell["error"], str):
        raise ResultsFileError(f"{path}: cell {key!r} field 'error' is not text")
      continue
    for f in ("objective", "seconds"):
      x = cell.get(f)
      if isinstance(x, bool) or not isinstance(x, (int, float)) or not np.isfinite(x):
        raise ResultsFileError(f"{path}: cell {key!r} field {f!r} is "
                               + ("missing" if f not in cell else f"not a finite number: {x!r}"))
    if not isinstance(cell.get("feasible", True), bool):
      raise ResultsFileError(f"{path}: cell {key!r} field 'feasible' is not true/false")


def _mean(xs: Sequence[float]) -> Optional[float]:
  return float(np.mean(xs)) if len(xs) else None


def summarize(cfg, cells: Mapping[str, Mapping], graph_names: Mapping[str, Sequence[str]]
              ) -> Dict[str, Any]:
  """table[dataset][devices] = {"instances": per (graph, seed): best, improvement and gap per
  method; "methods": per method: mean / median improvement (%), mean gap (%), mean seconds,
  graphs, wins / losses against the reference, errors and the first error}."""
  ref, names = cfg["reference"], list(cfg["methods"])
  table: Dict[str, Any] = {}
  for ds, graphs in graph_names.items():
    table[ds] = {}
    for devices in cfg["device_counts"]:
      instances = []
      for graph in graphs:
        for seed in cfg["seeds"]:
          rows = {m: cells.get(cell_key(ds, devices, graph, seed, m)) for m in names}
          ok = {m: r for m, r in rows.items() if r is not None and "error" not in r}
          if not ok:
            continue
          best = min(r["objective"] for r in ok.values())
          inst = {"graph": graph, "seed": int(seed), "best": best,
                  "best_methods": sorted(m for m, r in ok.items() if r["objective"] == best),
                  "objective": {m: r["objective"] for m, r in ok.items()},
                  "seconds": {m: r["seconds"] for m, r in ok.items()},
                  "gap": {m: (100.0 * (r["objective"] - best) / best if best > 0 else 0.0)
                          for m, r in ok.items()},
                  "improvement": {}}
          if ref in ok and ok[ref]["objective"] > 0:
            base = ok[ref]["objective"]
            inst["improvement"] = {m: 100.0 * (base - r["objective"]) / base
                                   for m, r in ok.items()}
          instances.append(inst)
      summary = {}
      for m in names:
        imp = [i["improvement"][m] for i in instances if m in i["improvement"]]
        gap = [i["gap"][m] for i in instances if m in i["gap"]]
        secs = [i["seconds"][m] for i in instances if m in i["seconds"]]
        errors = [cells[k]["error"] for k in (cell_key(ds, devices, g, s, m)
                                              for g in graphs for s in cfg["seeds"])
                  if k in cells and "error" in cells[k]]
        infeasible = sum(1 for g in graphs for s in cfg["seeds"]
                         if not cells.get(cell_key(ds, devices, g, s, m), {}).get("feasible",
                                                                                   True))
        summary[m] = {"mean_improvement": _mean(imp),
                      "median_improvement": float(np.median(imp)) if imp else None,
                      "mean_gap": _mean(gap), "mean_seconds": _mean(secs),
                      "graphs": len(gap), "improvement_graphs": len(imp),
                      "wins": int(sum(x > 0 for x in imp)),
                      "losses": int(sum(x < 0 for x in imp)),
                      "infeasible": int(infeasible), "errors": len(errors),
                      "error": errors[0] if errors else ""}
      table[ds][str(devices)] = {"topology": topology_spec_for(cfg, devices),
                                 "graphs": len(graphs) * len(cfg["seeds"]),
                                 "instances": instances, "methods": summary}
  return table


def _num(x: Optional[float], fmt: str) -> str:
  return "" if x is None else format(x, fmt)


def markdown(cfg, table: Mapping[str, Any]) -> str:
  """One table per device count, REGAL's layout: a row per method, per dataset the mean %
  improvement over the reference, the mean % gap from the best and the mean running time."""
  ref, lines = cfg["reference"], []
  datasets = list(table)
  for devices in cfg["device_counts"]:
    first = table[datasets[0]][str(devices)]
    lines.append(f"#### {devices} devices ({first['topology']}), {cfg['objective']}, budget "
                 f"{cfg['budget']}")
    lines.append("")
    head = "| method |"
    rule = "|---|"
    for ds in datasets:
      n = table[ds][str(devices)]["graphs"]
      head += (f" {ds} ({n}): % improvement over {ref} | % gap from best | mean time (s) |")
      rule += "---:|---:|---:|"
    lines += [head, rule]
    notes = []
    for m in cfg["methods"]:
      line = f"| {m} |"
      for ds in datasets:
        block = table[ds][str(devices)]
        s, n = block["methods"][m], block["graphs"]
        if s["graphs"] == 0:
          line += " n/a | n/a | n/a |"
          if s["error"]:
            notes.append(f"{m} on {ds}: {s['error']}")
          continue
        partial = f" ({s['improvement_graphs']}/{n})" if s["improvement_graphs"] < n else ""
        line += (f" {_num(s['mean_improvement'], '+.2f')}{partial} | "
                 f"{_num(s['mean_gap'], '.2f')} | {_num(s['mean_seconds'], '.2f')} |")
        if s["errors"]:
          notes.append(f"{m} on {ds}: {s['errors']} error(s), e.g. {s['error']}")
        if s["infeasible"]:
          notes.append(f"{m} on {ds}: {s['infeasible']} answer(s) out of memory")
      lines.append(line)
    lines.append("")
    for note in notes:
      lines.append(f"- {note}")
    if notes:
      lines.append("")
  return "\n".join(lines).rstrip() + "\n"


def plot(cfg, table: Mapping[str, Any], path: str) -> str:
  """Box plots of the per-graph % improvement over the reference: one box per method, one
  panel per (dataset, device count); a dashed line at 0 (the reference)."""
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  from go_jax import plotting  # pylint: disable=g-import-not-at-top
  datasets, counts = list(table), list(cfg["device_counts"])
  others = [m for m in cfg["methods"] if m != cfg["reference"]] or list(cfg["methods"])
  fig = Figure(figsize=(max(4.0, 0.55 * len(others) + 1.5) * len(counts),
                        3.4 * len(datasets)), dpi=110)
  for r, ds in enumerate(datasets):
    for c, devices in enumerate(counts):
      ax = fig.add_subplot(len(datasets), len(counts), r * len(counts) + c + 1)
      block = table[ds][str(devices)]
      data = [[i["improvement"][m] for i in block["instances"] if m in i["improvement"]]
              for m in others]
      pos = [k for k, d in enumerate(data) if d]
      if pos:
        ax.boxplot([data[k] for k in pos], positions=pos, widths=0.6, showmeans=True,
                   flierprops={"markersize": 3})
      for k, d in enumerate(data):
        if not d:
          ax.text(k, 0.0, "n/a", ha="center", va="bottom", fontsize=7, color="0.4")
      ax.axhline(0.0, color="0.3", ls="--", lw=0.8)
      values = [x for d in data for x in d]
      if values and max(abs(x) for x in values) > 20.0:  # a far-off method: keep +-1% readable
        ax.set_yscale("symlog", linthresh=1.0)
      ax.set_xticks(range(len(others)))
      ax.set_xticklabels(others, rotation=35, ha="right", fontsize=8)
      ax.set_xlim(-0.6, len(others) - 0.4)
      ax.set_title(f"{ds}, {block['topology']} ({block['graphs']} instances: graphs x seeds)",
                   fontsize=9)
      if c == 0:
        ax.set_ylabel(f"% improvement over {cfg['reference']}", fontsize=8)
      ax.grid(axis="y", color="0.9", lw=0.5)
      ax.set_axisbelow(True)
  fig.suptitle(f"{cfg['objective']}: per-graph improvement over {cfg['reference']} "
               f"(higher is better; box: quartiles, triangle: mean; symlog axis beyond +-1% where "
               f"a method is off by more than 20%)", fontsize=10)
  fig.tight_layout()
  return plotting.save_figure(fig, path)


# ------------------------------------------------------------------ the run
class CellTask:
  """One cell (dataset, devices, graph index, seed, method) -> its row, as an executor's task
  (`go_jax.executors`): the graphs, topologies and warmed-up shapes are kept per process, so
  that a Ray worker loads a dataset and compiles a shape once for all the cells it runs. Sent to
  a worker it travels as the config alone."""

  def __init__(self, cfg, data=None):
    self.cfg = cfg
    self._cache = {"data": dict(data or {}), "topos": {}, "warmed": set()}

  def __getstate__(self):
    return {"cfg": self.cfg}

  def __setstate__(self, state):
    from go_jax import executors  # pylint: disable=g-import-not-at-top
    self.cfg = state["cfg"]
    self._cache = executors.process_cache(LAUNCHER, self.cfg,
                                          lambda: {"data": {}, "topos": {}, "warmed": set()})

  def __call__(self, item) -> Dict[str, Any]:
    from simulator import runtime, topology_spec  # pylint: disable=g-import-not-at-top
    cfg, cache = self.cfg, self._cache
    ds, devices, gi, seed, m = item
    if ds not in cache["data"]:
      cache["data"][ds] = load_dataset(ds, cfg["datasets"][ds])
    graph = cache["data"][ds][1][gi]
    if (ds, devices, gi) not in cache["topos"]:
      tspec = topology_spec.parse_topology(topology_spec_for(cfg, devices))
      cache["topos"][(ds, devices, gi)] = topology_spec.make_topology(tspec, graph)[0]
    topo = cache["topos"][(ds, devices, gi)]
    shape = (runtime.releases(), m) + padded_shape(graph, topo.num_devices)  # compiled since the
    # executor last dropped JAX's caches (go_jax.executors.release_compiled_code)
    if cfg["warmup"] and m not in cfg["no_warmup"] and shape not in cache["warmed"]:
      cache["warmed"].add(shape)
      try:
        solve_cell(cfg, m, graph, topo, seed)
      except Exception:  # pylint: disable=broad-except
        pass  # the timed call below meets the same error and records it
    return solve_cell(cfg, m, graph, topo, seed)


def run_table(config, out: str, log: Callable[[str], None] = print,
              executor=None) -> Dict[str, Any]:
  """Makes (or resumes) the table in folder `out`; returns the JSON written (module docstring)
  plus "computed" and "skipped" cell counts of this run. executor (`go_jax.executors`; None:
  this process) runs the cells; this process merges their rows and writes the JSON, as the
  folder's one writer (`results.sole_writer`: a second run there meanwhile is refused, where
  each would have rewritten the JSON with only its own cells)."""
  from go_jax import results  # pylint: disable=g-import-not-at-top
  cfg = as_settings(config)  # a bad config is reported before the folder is touched
  with results.sole_writer(out, LAUNCHER):
    return _run_table(cfg, out, log, executor)


def _run_table(cfg, out, log, executor) -> Dict[str, Any]:
  """`run_table`'s work, on the config `as_settings` checked."""
  from go_jax import executors  # pylint: disable=g-import-not-at-top
  from simulator import fileio  # pylint: disable=g-import-not-at-top
  settings = {k: cfg[k] for k in SETTINGS}
  path = os.path.join(out, JSON_NAME)
  old = cli.load_resumable(path, LAUNCHER, settings)
  check_cells(old.get("cells", {}), path)
  data = {name: load_dataset(name, spec) for name, spec in cfg["datasets"].items()}
  cells: Dict[str, Any] = dict(old.get("cells", {}))
  machine = cli.machine_info()
  result = {"launcher": LAUNCHER, "settings": settings, "config": cfg, "machine": machine,
            "command": " ".join(sys.argv), "cells": cells,
            "seconds": float(old.get("seconds", 0.0))}

  plan = []  # (dataset, devices, graph index, seed, method)
  for ds, (names, _) in data.items():
    for devices in cfg["device_counts"]:
      for gi in range(len(names)):
        for seed in cfg["seeds"]:
          order = [cfg["reference"]] + [m for m in cfg["methods"] if m != cfg["reference"]]
          plan += [(ds, devices, gi, int(seed), m) for m in order]
  def pending(p):  # not in the JSON yet, or recorded an error (run again)
    row = cells.get(cell_key(p[0], p[1], data[p[0]][0][p[2]], p[3], p[4]))
    return row is None or "error" in row

  todo = [p for p in plan if pending(p)]
  log(f"[{LAUNCHER}] {len(plan)} cells: {len(plan) - len(todo)} already in {path}, "
      f"{len(todo)} to run; {', '.join(f'{k}: {len(v[0])} graphs' for k, v in data.items())}; "
      f"devices {list(cfg['device_counts'])}; load average {machine['load_average']}")

  t0 = time.perf_counter()
  state = {"done": 0, "last_save": t0}

  def save():
    result["seconds"] = float(old.get("seconds", 0.0)) + time.perf_counter() - t0
    fileio.write_json(path, result)

  def on_done(item, row, exc):
    ds, devices, gi, seed, m = item
    if exc is not None:
      if cfg["fail_fast"]:
        raise exc
      row = {"error": cli.one_line(exc)}
    gname = data[ds][0][gi]
    row.update(dataset=ds, devices=int(devices), graph=gname, seed=int(seed), method=m)
    cells[cell_key(ds, devices, gname, seed, m)] = row
    state["done"] += 1
    done = state["done"]
    elapsed = time.perf_counter() - t0
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = (len(todo) - done) / rate if rate > 0 else float("inf")
    what = (f"error: {row['error']}" if "error" in row else
            f"{row['objective']:.6g} in {row['seconds']:.2f} s")
    log(f"[{done}/{len(todo)}] {ds} D={devices} {gname} seed {seed} {m}: {what} | "
        f"{60 * rate:.1f} cells/min, elapsed {cli.duration_text(elapsed)}, "
        f"ETA {cli.duration_text(eta)}")
    if time.perf_counter() - state["last_save"] >= float(cfg["save_seconds"]):
      save()
      state["last_save"] = time.perf_counter()

  executor = executor if executor is not None else executors.make("local")
  try:
    executor.run(CellTask(cfg, data), todo, on_done)
  finally:
    save()  # also on an interruption: the cells so far are kept
  done = state["done"]

  names_by_ds = {ds: names for ds, (names, _) in data.items()}
  result["table"] = summarize(cfg, cells, names_by_ds)
  result["markdown"] = markdown(cfg, result["table"])
  if cfg["plots"]:
    result["plot"] = plot(cfg, result["table"], os.path.join(out, PLOT_NAME))
  save()
  with fileio.atomic_open(os.path.join(out, MD_NAME), "w", make_dirs=True) as fh:
    fh.write(result["markdown"])
  ref_rows = [cells.get(cell_key(p[0], p[1], data[p[0]][0][p[2]], p[3], p[4])) for p in plan
              if p[4] == cfg["reference"]]
  if ref_rows and all(r is None or "error" in r for r in ref_rows):
    first = next((r["error"] for r in ref_rows if r), "no cell ran")
    raise ReferenceFailed(f"config.reference={cfg['reference']!r} has no answer on any of its "
                          f"{len(ref_rows)} cells (the table has no improvement to show; "
                          f"written to {path}); the first error: {first}")
  return dict(result, computed=done, skipped=len(plan) - len(todo))


class ReferenceFailed(ValueError):
  """The reference method errored on every cell: the table is written but shows nothing."""
