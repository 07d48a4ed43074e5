r"""Benchmark: PPO placements/s and BRKGA evaluations/s on 1 device, on every local device, and
over several processes (`simulator.sharding`, `go_jax.distributed`).

Each setting runs in fresh worker processes: "1 device" (one CPU device), "N devices" (one
process, `configure_cpu_devices(N)`), and "P processes" (P processes on localhost joined by
`go_jax.distributed.initialize`, one CPU device each: the multi-host path, with gloo
collectives). A worker times, after a compiling call, BRKGA (`methods.solve("brkga")`,
--population, --generations) and PPO updates (the GO policy at --hidden, K = --samples, one
graph per update, `update_chunk` of --updates_per_call updates) on a layered DAG of --nodes
ops, and checks that its answers equal the 1-device ones (BRKGA placement, PPO best objective).
Prints a Markdown table (with the 1-minute load average) and writes JSON.

  python -m experiments.bench_sharding          # N = 1000: 1 vs 2 devices vs 2 processes
  python -m experiments.bench_sharding --settings=1,2 --samples=32 --generations=4
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import platform
import socket
import time
from typing import Any, Dict, List, Sequence

import numpy as np
from absl import app, flags

from simulator import fileio
from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_integer("nodes", 1000, "Ops of the layered DAG (layered:n=NODES,width=32,seed=0).")
flags.DEFINE_string("topology", "nvlink8", cli.topology_help("Topology preset."))
flags.DEFINE_list("settings", ["1", "2", "2p"], "Settings: 'N' = one process with N CPU "
                  "devices, 'Pp' = P processes on localhost with one CPU device each.")
flags.DEFINE_integer("population", 100, "BRKGA population (80 evaluations per generation "
                     "with the default elite fraction 0.2).")
flags.DEFINE_integer("generations", 3, "BRKGA generations per timed search.")
flags.DEFINE_integer("samples", 16, "PPO K (an update simulates K + 1 placements).")
flags.DEFINE_integer("hidden", 32, "GO policy width.")
flags.DEFINE_integer("updates_per_call", 2, "PPO updates per jitted call.")
flags.DEFINE_integer("repeats", 2, "Timed calls per measurement (after the compiling one); "
                     "the median is reported.")
flags.DEFINE_string("out", "results/bench_sharding.json", "JSON output path.")


def _median_seconds(fn, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return sorted(times)[len(times) // 2]


def _measure(cfg: Dict[str, Any]) -> Dict[str, Any]:
  """One worker's figures (after runtime / distributed setup)."""
  import jax  # pylint: disable=g-import-not-at-top
  from go_jax import methods, policies
  from go_jax.training import ppo
  from simulator import preset, sources
  graph = sources.load_graph(f"layered:n={cfg['nodes']},width=32,seed=0")
  topo = preset(cfg["topology"])
  per_gen = cfg["population"] - int(round(0.2 * cfg["population"]))
  budget = per_gen * cfg["generations"]

  def brkga():
    return methods.solve("brkga", graph, topo, seed=0, budget=budget,
                         population=cfg["population"])
  t0 = time.perf_counter()
  sol = brkga()
  brkga_first = time.perf_counter() - t0
  brkga_s = _median_seconds(brkga, cfg["repeats"])

  policy = policies.variant_config("go")
  policy.hidden = cfg["hidden"]
  trainer = ppo.make_train(
      dict(task="joint", objective="makespan", reference="heft", fixed_placement="heft",
           samples=cfg["samples"], graphs_per_update=1, updates=1000,
           updates_per_call=cfg["updates_per_call"], epochs=1, minibatches=1,
           learning_rate=3e-4, entropy_coef=0.05, lr_schedule="constant", policy=policy),
      [graph], [topo])
  state = [trainer.init(0)]

  def update():
    state[0], _ = trainer.update_chunk(state[0])
    jax.block_until_ready(state[0])
  t0 = time.perf_counter()
  update()
  ppo_first = time.perf_counter() - t0
  ppo_s = _median_seconds(update, cfg["repeats"])
  placements = trainer.placements_per_update * cfg["updates_per_call"]
  return {"devices": jax.device_count(), "processes": jax.process_count(),
          "brkga_evaluations_per_s": budget / brkga_s, "brkga_first_call_s": brkga_first,
          "brkga_objective": sol.objective, "brkga_placement_hash": hashlib.sha1(
              np.asarray(sol.placement, np.int64).tobytes()).hexdigest(),
          "ppo_placements_per_s": placements / ppo_s, "ppo_first_call_s": ppo_first,
          "ppo_best_objective": float(jax.device_get(state[0].best_objective)[0])}


def _worker(cfg, devices, process, port, queue):
  try:
    if port:
      from go_jax import distributed  # pylint: disable=g-import-not-at-top
      distributed.initialize(f"localhost:{port}", cfg["processes"], process)
    else:
      from simulator import runtime  # pylint: disable=g-import-not-at-top
      runtime.configure_cpu_devices(devices)
    queue.put(dict(_measure(cfg), process=process))
  except Exception as e:  # reported by the parent with the setting's name
    queue.put({"error": f"{type(e).__name__}: {e}", "process": process})


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def run_setting(setting: str) -> Dict[str, Any]:
  """The figures of one setting ('2' or '2p'); several processes report process 0's."""
  multi = setting.endswith("p")
  count = int(setting[:-1] if multi else setting)
  if count < 1:
    raise ValueError(f"--settings: {setting!r} needs a count >= 1")
  cfg = {k: getattr(FLAGS, k) for k in ("nodes", "topology", "population", "generations",
                                        "samples", "hidden", "updates_per_call", "repeats")}
  cfg["processes"] = count if multi else 1
  ctx = multiprocessing.get_context("spawn")
  queue = ctx.Queue()
  port = _free_port() if multi else 0
  procs = [ctx.Process(target=_worker, args=(cfg, 1 if multi else count, i, port, queue))
           for i in range(cfg["processes"])]
  t0 = time.perf_counter()
  for p in procs:
    p.start()
  outs = sorted((queue.get() for _ in procs), key=lambda r: r["process"])
  for p in procs:
    p.join()
  errors = [r["error"] for r in outs if "error" in r]
  if errors:
    raise RuntimeError(f"setting {setting} failed: {errors[0]}")
  if len({(r["brkga_placement_hash"], r["ppo_best_objective"]) for r in outs}) != 1:
    raise RuntimeError(f"setting {setting}: the processes' answers differ")
  load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
  return dict(outs[0], setting=setting, wall_s=time.perf_counter() - t0, load_average=load)


def format_table(rows: Sequence[Dict[str, Any]]) -> str:
  base = rows[0]
  head = ("setting", "devices", "processes", "BRKGA evals/s", "x", "PPO placements/s", "x",
          "same answers", "load")
  lines = [" | ".join(head), " | ".join("---" for _ in head)]
  for r in rows:
    same = (r["brkga_placement_hash"] == base["brkga_placement_hash"] and
            r["ppo_best_objective"] == base["ppo_best_objective"])
    lines.append(" | ".join([
        r["setting"], str(r["devices"]), str(r["processes"]),
        f"{r['brkga_evaluations_per_s']:.1f}",
        f"{r['brkga_evaluations_per_s'] / base['brkga_evaluations_per_s']:.2f}",
        f"{r['ppo_placements_per_s']:.1f}",
        f"{r['ppo_placements_per_s'] / base['ppo_placements_per_s']:.2f}",
        "yes" if same else "NO", f"{r['load_average']:.1f}"]))
  return "\n".join(lines)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  cli.check_out(FLAGS.out, is_file=True)
  rows: List[Dict[str, Any]] = [run_setting(s) for s in FLAGS.settings]
  print(format_table(rows))
  fileio.write_json(FLAGS.out, {"machine": platform.platform(), "cpus": os.cpu_count(),
                                "nodes": FLAGS.nodes, "topology": FLAGS.topology,
                                "population": FLAGS.population,
                                "generations": FLAGS.generations, "samples": FLAGS.samples,
                                "hidden": FLAGS.hidden, "rows": rows})
  print(f"wrote {FLAGS.out}")


def run():
  """Entry point (`python -m experiments.bench_sharding`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
