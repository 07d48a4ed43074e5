r"""Benchmark: coarsening colocated graphs with and without keeping placement units.

For every graph, topology and coarse size M, coarsens the graph twice (`coarsen(graph, M)`,
which keeps placement units on a colocated graph, and `keep_units=False`, which ignores them),
solves each coarse graph with the list schedulers and METIS, expands every answer
(`Coarsened.expand`) and simulates it on the original graph. Prints per cell the coarse
nodes, the placement units left and the best expanded objective of either way ("OOM": no
method's expanded placement fits), then the geometric mean of kept / ignored over the cells
where both fit, and writes every row as JSON to --out (checked writable before the work
starts). Design: docs/design.md section 6, "Coarsening keeps placement units".

  python -m experiments.bench_coarsen_units
  python -m experiments.bench_coarsen_units --graphs=pipedream:resnet50 --sizes=8,32
"""

from __future__ import annotations

import time
from typing import Dict, List

import numpy as np
from absl import app, flags
from scipy import stats

from experiments import cli
from go_jax import methods
from simulator import fileio, simulate
from simulator.coarsen import coarsen
from simulator.sources import load_graph
from simulator.topology_spec import load_topology

FLAGS = flags.FLAGS
flags.DEFINE_list("graphs", ["pipedream:resnet50", "pipedream:inception_v3",
                             "pipedream:densenet121", "pipedream:nasnetamobile",
                             "pipedream:gnmt", "pipedream:vgg16"],
                  "graph specs (colocated graphs; others coarsen the same either way)")
flags.DEFINE_list("topologies", ["nvlink4@mem=0.6x", "nvlink8@mem=0.6x"],
                  "topology specs (memory relative to the original graph)")
flags.DEFINE_list("sizes", ["16", "64", "256"], "coarse sizes M (skipped where >= N)")
flags.DEFINE_list("methods", ["heft", "m_sct", "metis"], "methods run on each coarse graph")
flags.DEFINE_string("out", "results/bench_coarsen_units.json", "JSON output path")

WAYS = {"kept": True, "ignored": False}  # row label -> coarsen(keep_units=...)


def _units(graph) -> int:
  return len(np.unique(graph.colocation_root()))


def run_cell(graph, topology, m: int, names: List[str]) -> Dict[str, Dict]:
  """Both coarsenings of one (graph, topology, M): nodes, units, each method's expanded
  makespan on the original graph and whether it fits, and the best fitting one (None if no
  method's fits)."""
  out = {}
  for way, keep in WAYS.items():
    res = coarsen(graph, m, keep_units=keep)
    makespans, fits = {}, {}
    for name in names:
      sol = methods.solve(name, res.graph, topology, seed=0)
      sim = simulate(graph, topology, res.expand(sol.placement)[None],
                     res.expand(sol.priority)[None])
      makespans[name] = float(np.asarray(sim.makespan)[0])
      fits[name] = not bool(np.asarray(sim.oom)[0])
    fitting = [makespans[n] for n in names if fits[n]]
    out[way] = {"nodes": res.graph.num_nodes, "units": _units(res.graph),
                "makespans": makespans, "fits": fits,
                "best": min(fitting) if fitting else None}
  return out


def _fmt(x) -> str:
  return "OOM" if x is None else f"{x * 1e3:.1f} ms"


def table(cells: List[Dict]) -> str:
  head = (f"{'graph':<24} {'topology':<17} {'M':>4} {'nodes/units kept':>16} "
          f"{'ignored':>8} {'best kept':>10} {'ignored':>10} {'ratio':>6}")
  lines = [head, "-" * len(head)]
  for c in cells:
    k, i = c["kept"], c["ignored"]
    ratio = k["best"] / i["best"] if k["best"] is not None and i["best"] is not None else None
    lines.append(f"{c['graph'][:24]:<24} {c['topology']:<17} {c['m']:>4} "
                 f"{k['nodes']:>8}/{k['units']:<7} {i['nodes']:>4}/{i['units']:<3} "
                 f"{_fmt(k['best']):>10} {_fmt(i['best']):>10} "
                 f"{'-' if ratio is None else f'{ratio:.3f}':>6}")
  return "\n".join(lines)


def summary(cells: List[Dict]) -> Dict:
  both = [c["kept"]["best"] / c["ignored"]["best"] for c in cells
          if c["kept"]["best"] is not None and c["ignored"]["best"] is not None]
  return {"cells": len(cells),
          "fit_kept": sum(c["kept"]["best"] is not None for c in cells),
          "fit_ignored": sum(c["ignored"]["best"] is not None for c in cells),
          "gmean_kept_over_ignored": float(stats.gmean(both)) if both else float("nan"),
          "better": sum(r < 0.995 for r in both), "worse": sum(r > 1.005 for r in both)}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  cli.check_out(FLAGS.out, is_file=True)
  try:
    sizes = [int(s) for s in FLAGS.sizes]
  except ValueError:
    cli.fail(f"--sizes must be integers, got {FLAGS.sizes}")
  if any(s < 1 for s in sizes):
    cli.fail(f"--sizes must be positive, got {FLAGS.sizes}")
  for name in FLAGS.methods:
    methods.get(name)  # an unknown method fails here, before any work
  t_start = time.time()
  cells = []
  for spec in FLAGS.graphs:
    graph = load_graph(spec)
    for topo_spec in FLAGS.topologies:
      topology = load_topology(topo_spec, graph)
      for m in sizes:
        if m >= graph.num_nodes:
          continue
        cells.append({"graph": spec, "topology": topo_spec, "m": m,
                      "original_nodes": graph.num_nodes,
                      **run_cell(graph, topology, m, FLAGS.methods)})
        print(table(cells[-1:]).splitlines()[-1], flush=True)
  summ = summary(cells)
  print("\nbest expanded objective on the original graph, units kept vs ignored")
  print(table(cells))
  print(f"\nfit: kept {summ['fit_kept']}/{summ['cells']}, ignored {summ['fit_ignored']}/"
        f"{summ['cells']}; where both fit, kept / ignored geometric mean "
        f"{summ['gmean_kept_over_ignored']:.3f} ({summ['better']} better, {summ['worse']} "
        f"worse)")
  machine = cli.machine_info()  # platform, CPUs, jax, load average, date
  print(f"{time.time() - t_start:.0f} s wall; load average {machine['load_average']}")
  fileio.write_json(FLAGS.out, {
      "flags": {k: FLAGS[k].value for k in ("graphs", "topologies", "sizes", "methods")},
      "machine": machine, "wall_seconds": time.time() - t_start, "cells": cells,
      "summary": summ})
  print(f"wrote {FLAGS.out}")


def run():
  """Entry point: `python -m experiments.bench_coarsen_units`."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
