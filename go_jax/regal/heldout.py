"""REGAL / GAS vs BRKGA on held-out graphs: improvement and running-time ratio, same seeds.

  python -m go_jax.regal.heldout --methods=regal,gas --budget=5000 \
      --config=experiments/configs/regal.py --out=runs/regal_heldout.json
  python -m go_jax.regal.heldout --methods=regal_hint --checkpoint=runs/regal_hint \
      --graphs="regal_data:valid,dir=data/regal,limit=300"   # validation on a built split

For every held-out graph (the config's `held_out` specs, never trained on, or --graphs; a data
spec such as 'regal_data:valid,dir=...' stands for every graph of that split) and seed, solves
"brkga" and each method with the same objective, seed and budget (every objective is the
registry's re-simulation). improvement = (brkga - method) / brkga, per instance; time ratio =
method search seconds / brkga search seconds, both measured after a warm-up (compilation
excluded: one warm-up call per padded graph shape and method; the method's seconds include the
cached checkpoint's look-up, the policy forward pass and the guided search).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from typing import Dict, List, Sequence

import numpy as np

from go_jax import methods
from go_jax.training import loop
from simulator import fileio, runtime, topology_spec
from simulator.padding import bucket
from simulator.simulate import padded


def compare(method_names: Sequence[str], graph_specs: Sequence[str], topology: str,
            objective: str = "peak_memory", budget: int = 5000, seeds: Sequence[int] = (0,),
            progress: bool = False, **overrides) -> Dict[str, object]:
  """Rows per (graph, seed) and the mean improvement / time ratio per method (with `progress`,
  a line with the rate and ETA every 10 s)."""
  if not graph_specs or not method_names:
    raise ValueError("compare needs at least one graph spec and one method")
  tspec = topology_spec.parse_topology(topology)
  named = [pair for spec in graph_specs for pair in loop.load_specs(spec)]
  graph_specs, graphs = [n for n, _ in named], [g for _, g in named]
  topos = [topology_spec.make_topology(tspec, g)[0] for g in graphs]
  warmed = set()
  for g, t in zip(graphs, topos):  # warm-up per padded shape: compile outside the timings
    shape = (bucket(g.num_nodes), bucket(g.num_edges), padded(g).chunk, t.num_devices)
    if shape in warmed:
      continue
    warmed.add(shape)
    for name in ("brkga",) + tuple(method_names):
      methods.solve(name, g, t, objective=objective, budget=budget, seed=seeds[0],
                    **(overrides if name != "brkga" else {}))
  rows: List[Dict[str, object]] = []
  total, t0, shown = len(graphs) * len(seeds), time.perf_counter(), 0.0
  for spec, g, t in zip(graph_specs, graphs, topos):
    now = time.perf_counter() - t0
    if progress and rows and now - shown >= 10.0:  # a line every 10 s: rate and ETA
      shown = now
      print(f"[heldout] {len(rows)}/{total} instances, {len(rows) / now:.2f}/s, "
            f"ETA {(total - len(rows)) * now / len(rows) / 60:.1f} min", flush=True)
    for seed in seeds:
      base = methods.solve("brkga", g, t, objective=objective, budget=budget, seed=seed)
      row = {"graph": spec, "seed": int(seed), "brkga": base.objective,
             "brkga_seconds": base.search_seconds}
      for name in method_names:
        sol = methods.solve(name, g, t, objective=objective, budget=budget, seed=seed,
                            **overrides)
        row[name] = sol.objective
        row[f"{name}_seconds"] = sol.search_seconds
        row[f"{name}_improvement"] = (base.objective - sol.objective) / base.objective
      rows.append(row)
  summary = {}
  for name in method_names:
    imp = np.asarray([r[f"{name}_improvement"] for r in rows])
    ratio = (np.sum([r[f"{name}_seconds"] for r in rows]) /
             np.sum([r["brkga_seconds"] for r in rows]))
    per = np.asarray([r[f"{name}_seconds"] / r["brkga_seconds"] for r in rows])
    summary[name] = {"mean_improvement": float(imp.mean()),
                     "median_time_ratio": float(np.median(per)),
                     "median_improvement": float(np.median(imp)),
                     "wins": int(np.sum(imp > 0)), "losses": int(np.sum(imp < 0)),
                     "time_ratio_to_brkga": float(ratio)}
  return {"objective": objective, "budget": budget, "topology": topology,
          "instances": len(rows), "summary": summary, "rows": rows}


# Flags passed to the methods as options when given (unset: each method's default).
METHOD_FLAGS = ("decode", "checkpoint", "population", "elite_frac", "mutant_frac", "polish",
                "polish_peak", "hint_partitions", "hint_seeds", "hint_consensus")


def _config(path: str):
  spec = importlib.util.spec_from_file_location("regal_config", path.split(":")[0])
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(*path.split(":")[1:])


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--methods", default="regal,gas")
  parser.add_argument("--config", default="experiments/configs/regal.py",
                      help="a regal config whose held_out, topologies and objective are used")
  parser.add_argument("--graphs", default=None,
                      help="';'-separated graph or data specs instead of the config's held_out")
  parser.add_argument("--topology", default=None,
                      help="a topology spec instead of the config's first")
  parser.add_argument("--budget", type=int, default=5000)
  parser.add_argument("--seeds", default="0")
  parser.add_argument("--decode", default=None,
                      help="the methods' decode option (unset: their default, 'mode')")
  parser.add_argument("--checkpoint", default=None,
                      help="the methods' checkpoint option (unset: their default, 'auto': the "
                           "shipped one), a shipped name or a training workdir")
  parser.add_argument("--population", type=int, default=None,
                      help="the guided search's population (unset: the checkpoint's; "
                           "methods/regal.py SEARCH_PARAMS for a shipped one)")
  parser.add_argument("--elite_frac", type=float, default=None, help="... its elite fraction")
  parser.add_argument("--mutant_frac", type=float, default=None,
                      help="... its mutant fraction")
  parser.add_argument("--polish", type=float, default=None,
                      help="... the share of the budget it ends with a hill climb (0: none)")
  parser.add_argument("--polish_peak", type=float, default=None,
                      help="... the share of the climb's moves aimed at the memory peak")
  parser.add_argument("--hint_partitions", type=int, default=None,
                      help="regal_hint: the GP partitions its hint is the best of")
  parser.add_argument("--hint_seeds", type=int, default=None,
                      help="regal_hint: how many of them seed the first generation")
  parser.add_argument("--hint_consensus", type=int, default=None,
                      help="regal_hint: the affinity strength follows how many of the best "
                           "this many partitions agree (0: off)")
  parser.add_argument("--out", default=None, help="JSON file for the rows and summary")
  parser.add_argument("--cpu_devices", type=int, default=1,
                      help="CPU cores exposed as devices, so that each batch of simulations "
                           "(BRKGA's generations, the polish's climb steps) is split across "
                           "them (1: no split, as the earlier measurements; 0: one per core)")
  args = parser.parse_args(argv)
  if args.cpu_devices < 0:
    print(f"go_jax.regal.heldout: --cpu_devices={args.cpu_devices}: must be >= 0",
          file=sys.stderr)
    raise SystemExit(1)
  runtime.configure_cpu_devices(args.cpu_devices or None)  # before anything starts JAX
  try:
    config = _config(args.config)
    specs = ([s for s in args.graphs.split(";") if s.strip()] if args.graphs
             else list(config.held_out))
    result = compare([m for m in args.methods.split(",") if m], specs,
                     args.topology or config.topologies[0], config.objective, args.budget,
                     [int(s) for s in args.seeds.split(",")], progress=True,
                     **{k: getattr(args, k) for k in METHOD_FLAGS
                        if getattr(args, k) is not None})
  except (ValueError, OSError) as e:  # bad input: one line, exit 1 (no traceback)
    print(f"go_jax.regal.heldout: {e}", file=sys.stderr)
    raise SystemExit(1) from None
  print(json.dumps(result["summary"], indent=1))
  if args.out:
    fileio.write_json(args.out, result)


if __name__ == "__main__":
  main()
