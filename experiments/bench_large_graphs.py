r"""Benchmark: GO end to end on the largest graphs (issue 16, part 4), and `simulate` on them.

For each graph (default: GNMT-8's training step before XLA's optimization at its default size,
61,415 ops, and the same model at 66 tokens per side, 80,855 ops) one fresh worker process:
  * builds the instance: the graph (from the zoo's disk cache; its build time is reported
    apart) and the topology, whose per-device memory is a factor of the graph's single-device
    footprint (one simulation of the original graph per device);
  * runs `methods.solve(--method, ...)` on the ORIGINAL graph: the learned method coarsens it
    to --coarse_nodes, runs zero-shot and fine-tunes for --finetune_seconds on the coarse
    graph, expands every stage to the original ops and re-simulates them there
    (`go_jax.methods.learned`), and `methods.solve` re-simulates the best one once more;
  * the phases' seconds: coarsen, memory (the coarse and original footprints that scale
    the memory of the coarse problem), load (checkpoint), setup (features, hint, reward
    reference), compile, search (zero-shot + fine-tuning, compile excluded), expand, verify
    (the stages on the original graph, one batched call) and resolve (methods.solve's own
    re-simulation and bounds); "total" is topology + solve, the end-to-end time;
  * --baselines (HEFT, m-SCT) on the same original graph and topology, for context.
Then one worker times `simulate` on the full uncoarsened largest graph at --batch random
actions: compile seconds, median seconds per call, the process's peak RSS.

Prints a Markdown table and writes JSON (atomically, after every cell) with the machine, each
cell's load average and the exact command. A rerun with the same --out and settings resumes:
the cells already in the file are kept, the others run (a failed cell stops the run, so it
has no entry and runs again).

  python -m experiments.bench_large_graphs
  python -m experiments.bench_large_graphs --graphs='layered:n=80000,width=256,seed=0' \
      --finetune_seconds=30 --simulate_graph=layered:n=80000,width=256,seed=0
"""

import math
import multiprocessing
import os
import sys
import time

from absl import app, flags, logging

from experiments import cli, cli_tables
from simulator import fileio

FLAGS = flags.FLAGS
LAUNCHER = "bench_large_graphs"
DEFAULT_GRAPHS = ("zoo:gnmt8,stage=pre", "zoo:gnmt8,seq=66,stage=pre")
flags.DEFINE_string("graphs", ";".join(DEFAULT_GRAPHS), "graph specs (simulator.sources) "
                    "to place, separated by ';' (a spec has commas)")
flags.DEFINE_string("topology", "nvlink8@mem=0.6x", cli.topology_help(
    "Topology; the default's 8 V100s hold 0.6x the graph's single-device footprint each, so "
    "no device holds the model and placement decides feasibility (the policies serve <= 8 "
    "devices)."))
flags.DEFINE_string("method", "go_hint", "registered learned method (go_hint, go, gdp)")
flags.DEFINE_float("finetune_seconds", 60.0, "fine-tuning budget on the coarse graph "
                   "(0: zero-shot only)", lower_bound=0.0)
flags.DEFINE_integer("samples", None, "K samples per update (None: the checkpoint's)",
                     lower_bound=1)
flags.DEFINE_integer("max_nodes", 4096, "graphs above this many ops are coarsened",
                     lower_bound=2)
flags.DEFINE_integer("coarse_nodes", 512, "ops of the coarse graph the policy places",
                     lower_bound=2)
flags.DEFINE_list("baselines", ["heft", "m_sct"], "methods run on the original graph for "
                  "context")
flags.DEFINE_string("simulate_graph", DEFAULT_GRAPHS[-1], "graph of the simulate timing "
                    "('' to skip it)")
flags.DEFINE_integer("batch", 64, "actions per simulate call", lower_bound=1)
flags.DEFINE_integer("repeats", 2, "timed simulate calls (the median is reported)",
                     lower_bound=1)
flags.DEFINE_integer("seed", 0, "seed of GO and of the random actions",
                     lower_bound=0)
flags.DEFINE_string("out", "results/bench_large_graphs.json", "JSON output path")


def _solve_cell(spec, cfg):
  """One graph end to end (module docstring); runs in a fresh process."""
  import numpy as np
  from go_jax import methods
  from simulator import benchmark, sources, topology_spec
  t0 = time.perf_counter()
  graph = sources.load_graph(spec)
  load_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  topo, footprint = topology_spec.make_topology(cfg["topology"], graph)
  topo_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  sol = methods.solve(cfg["method"], graph, topo, seed=cfg["seed"],
                      finetune_seconds=cfg["finetune_seconds"], samples=cfg["samples"],
                      max_nodes=cfg["max_nodes"], coarse_nodes=cfg["coarse_nodes"])
  solve_s = time.perf_counter() - t0
  phases = dict(sol.info.get("phases", {}))
  phases["resolve"] = solve_s - sol.search_seconds
  out = {
      "graph": spec, "name": graph.name, "nodes": graph.num_nodes, "edges": graph.num_edges,
      "graph_load_s": load_s, "topology_s": topo_s, "footprint_bytes": footprint,
      "mem_capacity_bytes": float(np.min(topo.mem_capacity)), "solve_s": solve_s,
      "total_s": topo_s + solve_s, "phases": phases, "objective": sol.objective,
      "makespan": sol.makespan, "feasible": sol.feasible, "stage": sol.info.get("stage"),
      "updates": sol.info.get("updates"), "coarsened": sol.info.get("coarsened"),
      "stages": [{k: s[k] for k in ("stage", "objective", "feasible", "coarse_objective",
                                    "coarse_feasible", "seconds") if k in s}
                 for s in sol.info["stages"]],
      "lower_bound": sol.lower_bound, "peak_rss_bytes": benchmark.peak_rss_bytes()}
  out["baselines"] = {}
  for name in cfg["baselines"]:
    t0 = time.perf_counter()
    b = methods.solve(name, graph, topo, seed=cfg["seed"])
    out["baselines"][name] = {"objective": b.objective, "makespan": b.makespan,
                              "feasible": b.feasible, "search_s": b.search_seconds,
                              "wall_s": time.perf_counter() - t0}
  out["peak_rss_bytes"] = benchmark.peak_rss_bytes()
  return out


def _simulate_cell(spec, cfg):
  """`simulate` on the full graph at cfg["batch"] random actions; in a fresh process."""
  from simulator import benchmark, sources, topology_spec
  graph = sources.load_graph(spec)
  topo = topology_spec.load_topology(cfg["topology"].split("@")[0])  # memory plays no part
  out = benchmark.time_simulate(graph, topo, cfg["batch"], cfg["repeats"], cfg["seed"])
  out.pop("makespans")
  out.update(graph=spec, nodes=graph.num_nodes, edges=graph.num_edges,
             peak_rss_bytes=benchmark.peak_rss_bytes())
  return out


def _worker(fn, spec, cfg, queue):
  try:
    queue.put(fn(spec, cfg))
  except Exception as e:  # reported by the parent with the cell's name
    queue.put({"error": f"{type(e).__name__}: {e}"})


def run_cell(fn, spec, cfg):
  ctx = multiprocessing.get_context("spawn")
  queue = ctx.Queue()
  proc = ctx.Process(target=_worker, args=(fn, spec, cfg, queue))
  proc.start()
  out = cli_tables.worker_result(proc, queue)  # a dead worker is an error, Ctrl-C ends it
  if "error" in out:  # one line from the launcher (a ValueError)
    raise ValueError(f"{fn.__name__.strip('_')} on {spec} failed: {out['error']}")
  return out


# The options the solve cell passes to --method: a learned method (MethodSpec.learned) taking
# them all (go_jax.methods.learned's) is what this benchmark measures.
COARSENING_OPTIONS = ("finetune_seconds", "samples", "max_nodes", "coarse_nodes")
PHASE_COLUMNS = ("coarsen", "memory", "load", "setup", "compile", "search", "expand", "verify",
                 "resolve")


def format_table(rows, baselines, sim):
  """Markdown: one row per graph (phases, total, objective vs the baselines), then simulate."""
  ms = lambda v: f"{v * 1e3:,.1f} ms"
  head = (["graph", "ops", "topology s"] + [f"{p} s" for p in PHASE_COLUMNS]
          + ["total s", "GO makespan"] + list(baselines) + ["feasible"])
  lines = [" | ".join(head), " | ".join("---" for _ in head)]
  for r in rows:
    cells = [r["graph"], f"{r['nodes']:,}", f"{r['topology_s']:.1f}"]
    cells += [f"{v:.1f}" if isinstance(v, (int, float)) and math.isfinite(v) else "-"
              for v in (r["phases"].get(p) for p in PHASE_COLUMNS)]  # "-": no such phase
    cells += [f"**{r['total_s']:.1f}**", ms(r["makespan"])]
    cells += [ms(r["baselines"][b]["makespan"]) + ("" if r["baselines"][b]["feasible"]
                                                  else " (OOM)") for b in baselines]
    cells.append("yes" if r["feasible"] else "no (OOM)")
    lines.append(" | ".join(cells))
  if sim:
    lines += ["", "simulate, full graph | ops | B | compile s | s / call | placements/s | "
              "peak RSS", "--- | --- | --- | --- | --- | --- | ---",
              f"{sim['graph']} | {sim['nodes']:,} | {sim['batch']} | {sim['compile_s']:.1f} | "
              f"{sim['run_s']:.2f} | {sim['placements_per_s']:.1f} | "
              f"{sim['peak_rss_bytes'] / 2**30:.2f} GiB"]
  return "\n".join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  cli.check_out(FLAGS.out, is_file=True)
  from go_jax import harness, methods  # pylint: disable=g-import-not-at-top
  from simulator import topology_spec  # pylint: disable=g-import-not-at-top
  specs = [g.strip() for g in FLAGS.graphs.split(";") if g.strip()]
  cli_tables.refuse_repeats("graphs", specs, sep=";")
  if not specs and not FLAGS.simulate_graph:
    raise app.UsageError("--graphs and --simulate_graph are both empty: nothing to measure")
  if FLAGS.coarse_nodes > FLAGS.max_nodes:
    raise app.UsageError(f"--coarse_nodes={FLAGS.coarse_nodes} must be <= --max_nodes="
                         f"{FLAGS.max_nodes}")
  try:  # every name and spec before the first (minutes-long) cell
    if specs:
      try:
        spec = methods.get(FLAGS.method)
      except ValueError as e:
        raise ValueError(f"--method: {e}") from None
      if not spec.learned or not set(COARSENING_OPTIONS) <= set(spec.defaults):
        meant = [m for m in methods.learned_methods()  # the phases are a coarsening learned
                 if set(COARSENING_OPTIONS) <= set(methods.get(m).defaults)]  # method's
        raise ValueError(f"--method={FLAGS.method}: not a learned method that coarsens large "
                         f"graphs; use one of {', '.join(meant)}")
      methods.usable(FLAGS.baselines, "--baselines")
    for flag, spec in [("graphs", s) for s in specs] + (
        [("simulate_graph", FLAGS.simulate_graph)] if FLAGS.simulate_graph else []):
      harness.check_graph(spec, f"--{flag}")
    topology_spec.parse_topology(FLAGS.topology)
  except ValueError as e:
    raise app.UsageError(cli.one_line(e)) from None
  cfg = {"topology": FLAGS.topology, "method": FLAGS.method, "seed": FLAGS.seed,
         "finetune_seconds": FLAGS.finetune_seconds, "samples": FLAGS.samples,
         "max_nodes": FLAGS.max_nodes, "coarse_nodes": FLAGS.coarse_nodes,
         "baselines": list(FLAGS.baselines), "batch": FLAGS.batch, "repeats": FLAGS.repeats}
  import jax  # pylint: disable=g-import-not-at-top
  try:
    store = cli.load_resumable(FLAGS.out, LAUNCHER, cfg)
  except ValueError as e:
    raise app.UsageError(cli.one_line(e)) from None
  cells = dict(store.get("cells", {}))
  payload = lambda: {
      "launcher": LAUNCHER, "settings": cfg, "command": " ".join(sys.argv),
      "machine": dict(cli.machine_info(), device_kind=jax.devices()[0].device_kind),
      "config": cfg, "cells": cells,
      "rows": [cells[f"solve {s}"] for s in specs if f"solve {s}" in cells],
      "simulate": cells.get(f"simulate {FLAGS.simulate_graph}")}
  todo = [("solve", _solve_cell, s) for s in specs] + (
      [("simulate", _simulate_cell, FLAGS.simulate_graph)] if FLAGS.simulate_graph else [])
  for what, fn, spec in todo:
    key = f"{what} {spec}"
    if key in cells:
      logging.info("%s: resumed from %s", key, FLAGS.out)
      continue
    r = run_cell(fn, spec, cfg)
    r["load_average"] = list(os.getloadavg())  # after the cell: the load it ran under
    cells[key] = r
    fileio.write_json(FLAGS.out, payload(), indent=1)  # after every cell: a rerun resumes
    if fn is _solve_cell:
      logging.info("%s (%d ops): %.1f s end to end, %s makespan %.4g s (%s), phases %s",
                   spec, r["nodes"], r["total_s"], FLAGS.method, r["makespan"],
                   "feasible" if r["feasible"] else "OOM",
                   {k: round(v, 1) for k, v in r["phases"].items()})
  result = payload()
  print()
  print(format_table(result["rows"], cfg["baselines"], result["simulate"]))
  fileio.write_json(FLAGS.out, result, indent=1)
  print(f"\nwrote {FLAGS.out}")


def run():
  """Entry point (`python -m experiments.bench_large_graphs`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
