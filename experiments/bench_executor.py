r"""Times one evaluation sweep under each executor: local, then Ray with 1 and with 2 workers.

Each run is a fresh `python -m experiments.evaluate` process (cold JAX caches, its own Ray
instance of --ray_cpus CPUs; 1 CPU per cell, so N CPUs = N workers running cells at once) into
its own folder; the table gives the wall time (process start to exit, Ray's start included),
the cells per minute, the speed-up over the local executor and the load average around the run,
and checks that every run wrote the same rows (objective, makespan, memory, feasibility). Writes
--out (JSON: the runs, the machine, the command) and prints the Markdown table.

  python -m experiments.bench_executor --out=results/bench_executor.json
  python -m experiments.bench_executor --ray_cpus=1,2,4 --config.seeds='(0,1,2,3)'

--config (default: experiments/configs/bench_executor.py) is the sweep; --config.FIELD=VALUE
overrides are passed on to every run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Sequence

from absl import app, flags

from experiments import cli

FLAGS = flags.FLAGS
DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs",
                              "bench_executor.py")
_CONFIG = cli.define_config_file(
    "config", default=DEFAULT_CONFIG, help_string="The sweep (an experiments/evaluate.py "
    "config); --config.FIELD=VALUE overrides are passed on to every run.")
flags.DEFINE_string("out", "results/bench_executor.json", "JSON file for the runs.")
flags.DEFINE_list("ray_cpus", ["1", "2"], "CPUs (= concurrent 1-CPU workers) of the local Ray "
                  "instance of each Ray run.")
flags.DEFINE_bool("local", True, "Also time the local executor (the baseline).")
flags.DEFINE_integer("timeout", 3600, "Seconds one run may take.")

# Row fields that must agree between runs (timing fields may not).
SAME = ("label", "graph", "topology", "seed", "objective_kind", "stage", "objective",
        "makespan", "peak_memory", "feasible")


def run_sweep(executor_args: Sequence[str], config_args: Sequence[str], out: str,
              timeout: int) -> Dict[str, Any]:
  """One `python -m experiments.evaluate` run into `out`: wall seconds, cells, load averages
  before and after; RuntimeError with its stderr's tail if it fails."""
  cmd = [sys.executable, "-m", "experiments.evaluate", f"--out={out}", "--noprogress",
         *config_args, *executor_args]
  load_before = os.getloadavg()
  t0 = time.perf_counter()
  proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  wall = time.perf_counter() - t0
  if proc.returncode != 0:
    raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
  with open(os.path.join(out, "results.json"), encoding="utf-8") as fh:
    rows = json.load(fh)["rows"]
  cells = len({tuple(r[k] for k in SAME[:5]) for r in rows})
  return {"command": " ".join(cmd[1:]), "wall_seconds": round(wall, 2), "cells": cells,
          "cells_per_minute": round(60.0 * cells / wall, 2),
          "load_before": [round(x, 2) for x in load_before],
          "load_after": [round(x, 2) for x in os.getloadavg()],
          "rows": [{k: r.get(k) for k in SAME} for r in rows]}


def markdown(runs: Sequence[Dict[str, Any]]) -> str:
  base = next((r["wall_seconds"] for r in runs if r["executor"] == "local"), None)
  body = [[r["executor"], r["workers"], r["cells"], f"{r['wall_seconds']:.1f}",
           f"{r['cells_per_minute']:.1f}",
           f"{base / r['wall_seconds']:.2f}x" if base else "-",
           f"{r['load_before'][0]:.2f} / {r['load_after'][0]:.2f}"] for r in runs]
  from go_jax import results  # pylint: disable=g-import-not-at-top
  return results.markdown_table(
      ["executor", "workers", "cells", "wall s", "cells/min", "vs local", "load 1 min before / "
       "after"], body)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  out = cli.check_out(FLAGS.out, is_file=True)
  try:
    ray_cpus = [int(x) for x in FLAGS.ray_cpus]
  except ValueError as e:
    raise app.UsageError(f"--ray_cpus={','.join(FLAGS.ray_cpus)}: give CPU counts") from e
  if any(n < 1 for n in ray_cpus):
    raise app.UsageError(f"--ray_cpus={','.join(FLAGS.ray_cpus)}: counts must be >= 1")
  if ray_cpus:
    from go_jax import executors  # pylint: disable=g-import-not-at-top
    try:
      executors.import_ray()
    except ValueError as e:
      raise app.UsageError(str(e)) from e
  config_args = [f"--config={FLAGS['config'].config_filename}"] + [
      a for a in sys.argv[1:] if a.lstrip("-").startswith("config.")]
  plan: List[Dict[str, Any]] = ([{"executor": "local", "workers": 1, "args": []}]
                                if FLAGS.local else [])
  plan += [{"executor": "ray", "workers": n,
            "args": ["--executor=ray", f"--ray_num_cpus={n}", "--cpus_per_cell=1"]}
           for n in ray_cpus]
  runs = []
  with tempfile.TemporaryDirectory(prefix="bench_executor_") as tmp:
    for i, p in enumerate(plan):
      print(f"[{i + 1}/{len(plan)}] {p['executor']} ({p['workers']} worker(s)) ...",
            file=sys.stderr, flush=True)
      run = run_sweep(p["args"], config_args, os.path.join(tmp, str(i)), FLAGS.timeout)
      runs.append(dict(run, executor=p["executor"], workers=p["workers"]))
      print(f"    {run['wall_seconds']:.1f} s, {run['cells_per_minute']:.1f} cells/min",
            file=sys.stderr, flush=True)
  same = all(r["rows"] == runs[0]["rows"] for r in runs)
  table = markdown(runs)
  result = {"runs": [{k: v for k, v in r.items() if k != "rows"} for r in runs],
            "same_rows": same, "config": cli.plain(_CONFIG.value), "machine": cli.machine_info(),
            "command": " ".join(sys.argv), "markdown": table}
  from simulator import fileio  # pylint: disable=g-import-not-at-top
  fileio.write_json(out, result)
  print(table)
  print(f"\nrows identical across runs: {'yes' if same else 'NO'}; wrote {out}")
  if not same:
    raise ValueError("the executors wrote different rows (see the JSON's runs)")


def run():
  """Entry point (`python -m experiments.bench_executor`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
