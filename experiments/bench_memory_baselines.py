r"""Benchmark: the memory-aware baselines under tight memory, before and after live intervals.

Runs the list schedulers (m-ETF, m-SCT, m-TOPO, HEFT) with both memory models ("static": every
byte a device could ever hold, the old estimate; "live": the live intervals of design.md section 4
rule 7 on the method's own schedule), METIS, the expert split, BRKGA and BRKGA seeded with the
list schedulers' answers on operator-level graphs from outside the training sets (zoo models
and synthetic DAGs, coarsened to at most --max_nodes ops) on memory-constrained topologies
(`PRESET@mem=0.6x`: 0.6 times the single-device footprint). Prints, per instance, each method's
objective divided by the best feasible objective on that instance ("!" marks a simulated
out-of-memory placement, "*" a method that itself reported that some op fitted nowhere), how
often a placement its method called feasible simulates out of memory, and the geometric means
of each method's objective over METIS's and over live HEFT's (on the instances where that
reference is feasible), so m-ETF and m-SCT before ([static]) and after ([live]) read side by
side. Writes every row as JSON to --out (checked writable before the work starts).

  python -m experiments.bench_memory_baselines
  python -m experiments.bench_memory_baselines --graphs=regal:n=500 --topologies=pcie8@mem=0.6x
"""

from __future__ import annotations

import os
import platform
import time
from typing import Dict, List

import numpy as np
from absl import app, flags, logging
from scipy import stats

from experiments import cli
from go_jax import methods
from simulator import fileio
from simulator.coarsen import coarsen
from simulator.sources import load_graph
from simulator.topology_spec import load_topology

FLAGS = flags.FLAGS
flags.DEFINE_list("graphs", ["zoo:resnet50,size=small", "zoo:gpt2_small,size=tiny",
                             "zoo:gnmt2,size=small", "zoo:transformer_nmt,size=tiny",
                             "zoo:inception_v3,size=tiny", "regal:n=500",
                             "layered:n=600,width=20"],
                  "graph specs (coarsened to at most --max_nodes ops)")
flags.DEFINE_list("topologies", ["nvlink4@mem=0.6x", "nvlink8@mem=0.6x", "pcie8@mem=0.6x"],
                  "topology specs")
flags.DEFINE_list("methods", ["m_etf", "m_sct", "m_topo", "heft", "metis", "expert", "brkga",
                              "brkga_seeded"],
                  "methods; the list schedulers also run as NAME[static]")
flags.DEFINE_integer("max_nodes", 800, "coarsen larger graphs to this many ops")
flags.DEFINE_integer("budget", 2000, "simulator evaluations of brkga / brkga_seeded")
flags.DEFINE_integer("seed", 0, "seed of the searches",
                     lower_bound=0)
flags.DEFINE_string("out", "results/bench_memory_baselines.json", "JSON output path")

LIST_SCHEDULERS = ("m_etf", "m_sct", "m_topo", "heft")
LIVE, STATIC = "[live]", "[static]"


def variants(names: List[str]) -> List[str]:
  """Row names: each list scheduler with the live model, then with the static one."""
  out = []
  for name in names:
    out += [name + LIVE, name + STATIC] if name in LIST_SCHEDULERS else [name]
  return out


def run_instance(graph, topology, names: List[str], budget: int, seed: int) -> Dict[str, Dict]:
  """One row per method variant on one instance."""
  rows = {}
  for name in variants(names):
    method = name.partition("[")[0]
    overrides = {}
    if method in LIST_SCHEDULERS:
      overrides["memory_model"] = "static" if name.endswith(STATIC) else "live"
    search_budget = budget if method.startswith("brkga") else None
    sol = methods.solve(method, graph, topology, seed=seed, budget=search_budget, **overrides)
    rows[name] = {
        "objective": sol.objective, "makespan": sol.makespan, "feasible": sol.feasible,
        "claims_fit": ("reason" not in sol.info) if method in LIST_SCHEDULERS else None,
        "search_seconds": sol.search_seconds, "evaluations": sol.evaluations, "reason": sol.reason,
        "peak_memory": np.asarray(sol.peak_memory).tolist(),
        "estimated_bytes": sol.info.get("estimated_bytes")}
  return rows


def ratios(rows: Dict[str, Dict]) -> Dict[str, float]:
  """Objective / best feasible objective of the instance (best objective if none is)."""
  feasible = [r["objective"] for r in rows.values() if r["feasible"]]
  best = min(feasible) if feasible else min(r["objective"] for r in rows.values())
  return {k: r["objective"] / best for k, r in rows.items()}


def table(results: List[Dict]) -> str:
  names = list(results[0]["rows"]) if results else []
  head = f"{'graph':<28} {'N':>4} {'topology':<17}" + "".join(f" {n:>14}" for n in names)
  lines = [head, "-" * len(head)]
  for res in results:
    rat = ratios(res["rows"])
    cells = []
    for n in names:
      r = res["rows"][n]
      mark = ("" if r["feasible"] else "!") + ("*" if r["claims_fit"] is False else "")
      cells.append(f" {rat[n]:>12.3f}{mark:<2}")
    lines.append(f"{res['graph'][:28]:<28} {res['nodes']:>4} {res['topology']:<17}" +
                 "".join(cells))
  return "\n".join(lines)


def summary(results: List[Dict]) -> Dict[str, Dict]:
  """Feasibility counts per method and before/after geometric-mean ratios to METIS and HEFT."""
  out = {}
  names = list(results[0]["rows"]) if results else []
  for n in names:
    rows = [res["rows"][n] for res in results]
    claimed = [r for r in rows if r["claims_fit"]]
    estimates = rows[0]["claims_fit"] is not None  # a list scheduler: it estimates memory
    out[n] = {
        "instances": len(rows),
        "feasible": sum(r["feasible"] for r in rows),
        "claimed_feasible": len(claimed) if estimates else None,
        "claimed_but_oom": sum(not r["feasible"] for r in claimed) if estimates else None,
        "gmean_ratio_to_best": float(stats.gmean([ratios(res["rows"])[n] for res in results])),
        "mean_search_seconds": float(np.mean([r["search_seconds"] for r in rows]))}
    for ref in ("metis", "heft" + LIVE):
      if ref in names:  # over the instances where the reference is feasible
        both = [res["rows"][n]["objective"] / res["rows"][ref]["objective"]
                for res in results if res["rows"][ref]["feasible"]]
        out[n][f"gmean_over_{ref.partition('[')[0]}"] = (float(stats.gmean(both)) if both
                                                         else float("nan"))
  return out


def summary_table(summ: Dict[str, Dict]) -> str:
  head = (f"{'method':<16} {'feasible':>9} {'claimed':>8} {'claim->OOM':>10} "
          f"{'gmean/best':>10} {'gmean/METIS':>11} {'gmean/HEFT':>10} {'mean s':>7}")
  lines = [head, "-" * len(head)]
  for n, s in summ.items():
    claimed = "-" if s["claimed_feasible"] is None else s["claimed_feasible"]
    wrong = "-" if s["claimed_but_oom"] is None else s["claimed_but_oom"]
    lines.append(f"{n:<16} {s['feasible']:>4}/{s['instances']:<4} {claimed:>8} "
                 f"{wrong:>10} {s['gmean_ratio_to_best']:>10.3f} "
                 f"{s.get('gmean_over_metis', float('nan')):>11.3f} "
                 f"{s.get('gmean_over_heft', float('nan')):>10.3f} "
                 f"{s['mean_search_seconds']:>7.2f}")
  return "\n".join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  cli.check_out(FLAGS.out, is_file=True)
  t_start = time.time()
  results = []
  for spec in FLAGS.graphs:
    graph = load_graph(spec)
    original = graph.num_nodes
    if graph.num_nodes > FLAGS.max_nodes:
      graph = coarsen(graph, FLAGS.max_nodes).graph
    for topo_spec in FLAGS.topologies:
      topology = load_topology(topo_spec, graph)
      t0 = time.time()
      rows = run_instance(graph, topology, FLAGS.methods, FLAGS.budget, FLAGS.seed)
      results.append({"graph": spec, "nodes": graph.num_nodes, "original_nodes": original,
                      "edges": graph.num_edges, "topology": topo_spec,
                      "mem_capacity": float(np.min(topology.mem_capacity)), "rows": rows})
      logging.info("%s on %s: %.1f s", spec, topo_spec, time.time() - t0)
  summ = summary(results)
  print("objective / best feasible objective per instance "
        "(! out of memory when simulated, * the method found some op fitting nowhere)")
  print(table(results))
  print()
  print(summary_table(summ))
  print(f"\n{time.time() - t_start:.0f} s wall; load average {os.getloadavg()}")
  fileio.write_json(FLAGS.out, {
      "flags": {k: FLAGS[k].value for k in ("graphs", "topologies", "methods", "max_nodes",
                                            "budget", "seed")},
      "host": platform.node(), "load_average": os.getloadavg(),
      "wall_seconds": time.time() - t_start, "instances": results, "summary": summ})
  print(f"wrote {FLAGS.out}")


def run():
  """Entry point: `python -m experiments.bench_memory_baselines`."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
