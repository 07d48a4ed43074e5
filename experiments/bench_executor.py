r"""Times one sweep under each executor: local, then Ray with 1 and with 2 workers.

Each run is a fresh process of the sweep's launcher (--sweep: `evaluate` runs
`python -m experiments.evaluate`, `transfer` runs `python -m experiments.transfer`) with cold
JAX caches and its own Ray instance of --ray_cpus CPUs (--cpus_per_cell CPUs per cell, so N CPUs
= N / cpus_per_cell workers running cells at once), into its own folder. --compilation_cache=
fresh gives every run (the local one too) its own new, empty JAX persistent compilation cache
folder, which a run's Ray workers share (`go_jax.executors.worker_env`): every run starts cold,
and a program one worker compiled is read by the others; `none`: no persistent cache. The table
gives the wall time (process start to exit, Ray's start included), the cells per minute, the
speed-up over the local executor and the load average around the run, and checks that every run
wrote the same rows (objective, makespan, memory, feasibility, and for transfer the learned
rows' stages and update counts; timing fields excluded). Writes --out (JSON: the runs, the
machine, the command) and prints the Markdown table.

  python -m experiments.bench_executor --out=results/bench_executor.json
  python -m experiments.bench_executor --ray_cpus=1,2,4 --config.seeds='(0,1,2,3)'
  python -m experiments.bench_executor --sweep=transfer --out=results/bench_transfer.json
  python -m experiments.bench_executor --sweep=transfer --nolocal --ray_cpus=2 \
      --xla_multi_thread   # 1-CPU workers that keep XLA's multi-threaded CPU kernels

Ray runs its workers at nice 15 (--worker_niceness sets it): where other work shares the
machine they get less CPU than the local executor's nice-0 process. --max_load waits for a
quiet machine before each run.

--config (default: experiments/configs/bench_executor.py, or bench_executor_transfer.py with
--sweep=transfer) is the sweep; --config.FIELD=VALUE overrides are passed on to every run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import app, flags

from experiments import cli

FLAGS = flags.FLAGS
_CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")

# Row fields that must agree between runs (timing fields may not).
SAME = ("label", "graph", "topology", "seed", "objective_kind", "stage", "objective",
        "makespan", "peak_memory", "feasible")


@dataclasses.dataclass(frozen=True)
class Sweep:
  """A sweep kind: its launcher module, default config and the row fields runs must agree on
  (the first five identify a cell)."""
  module: str
  config: str
  same: Tuple[str, ...]


SWEEPS: Dict[str, Sweep] = {
    "evaluate": Sweep("experiments.evaluate", os.path.join(_CONFIGS, "bench_executor.py"), SAME),
    # + the method (a learned row's label is its row, its method go / gdp) and the evaluations /
    # PPO updates each cell spent (a fixed count: finetune_updates)
    "transfer": Sweep("experiments.transfer",
                      os.path.join(_CONFIGS, "bench_executor_transfer.py"),
                      SAME + ("method", "evaluations", "updates")),
}


def _sweep_in_argv(argv: Sequence[str]) -> str:
  """The --sweep named on the command line (before flags are parsed: it picks the default of
  --config, whose overrides are read against it), else "evaluate"."""
  for i, a in enumerate(argv[1:], 1):
    if a.startswith("--sweep="):
      return a.split("=", 1)[1]
    if a == "--sweep" and i + 1 < len(argv):
      return argv[i + 1]
  return "evaluate"


flags.DEFINE_enum("sweep", "evaluate", list(SWEEPS), "Which launcher's sweep to time: "
                  "experiments/evaluate.py or experiments/transfer.py.")
_CONFIG = cli.define_config_file(
    "config", default=SWEEPS.get(_sweep_in_argv(sys.argv), SWEEPS["evaluate"]).config,
    help_string="The sweep (a config of --sweep's launcher; default: experiments/configs/"
    "bench_executor.py, or bench_executor_transfer.py with --sweep=transfer); "
    "--config.FIELD=VALUE overrides are passed on to every run.")
flags.DEFINE_string("out", "results/bench_executor.json", "JSON file for the runs.")
flags.DEFINE_list("ray_cpus", ["1", "2"], "CPUs (= concurrent 1-CPU workers) of the local Ray "
                  "instance of each Ray run.")
flags.DEFINE_float("cpus_per_cell", 1.0, "CPUs each cell of a Ray run asks for (its worker "
                   "gets as many XLA CPU devices, and one XLA thread at 1 CPU).")
flags.DEFINE_bool("xla_multi_thread", False, "Ray workers of 1 CPU per cell keep XLA's "
                  "multi-threaded CPU kernels (--xla_cpu_multi_thread_eigen, which "
                  "go_jax.executors.worker_env turns off) and so oversubscribe the cores.")
flags.DEFINE_integer("worker_niceness", None, "Nice value of the Ray workers (RAY_worker_niceness; "
                     "None: Ray's default, 15, below every nice-0 process: on a machine other "
                     "work shares, the workers get less CPU than the local executor would).")
flags.DEFINE_enum("compilation_cache", "fresh", ["fresh", "none"], "JAX persistent "
                  "compilation cache of each run: fresh = a new empty folder per run (every run "
                  "cold; a Ray run's workers share it); none = no persistent cache.")
flags.DEFINE_float("max_load", 0.0, "Before each run, wait (up to --max_wait s) until the "
                   "1-minute load average is at most this (0: do not wait): timings need a quiet "
                   "machine, and the previous run's own load takes a minute to decay.")
flags.DEFINE_integer("max_wait", 600, "Seconds to wait for --max_load before a run (then it "
                     "runs anyway; the table shows the load).")
flags.DEFINE_bool("local", True, "Also time the local executor (the baseline).")
flags.DEFINE_integer("timeout", 3600, "Seconds one run may take.", lower_bound=1)


def run_sweep(executor_args: Sequence[str], config_args: Sequence[str], out: str,
              timeout: int, sweep: str = "evaluate",
              env: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
  """One run of the sweep's launcher (a fresh process, this environment updated with `env`)
  into `out`: wall seconds, cells, load averages before and after, the rows' fields that must
  agree; ValueError with its stderr's tail if it fails or runs past `timeout`."""
  kind = SWEEPS[sweep]
  cmd = [sys.executable, "-m", kind.module, f"--out={out}", *config_args, *executor_args]
  if sweep == "evaluate":
    cmd.insert(4, "--noprogress")
  load_before = os.getloadavg()
  t0 = time.perf_counter()
  try:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          env=dict(os.environ, **(env or {})))
  except subprocess.TimeoutExpired as e:
    raise ValueError(f"{' '.join(cmd)} took more than --timeout={timeout} s") from e
  wall = time.perf_counter() - t0
  if proc.returncode != 0:
    raise ValueError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
  with open(os.path.join(out, "results.json"), encoding="utf-8") as fh:
    rows = json.load(fh)["rows"]
  cells = len({tuple(r[k] for k in kind.same[:5]) for r in rows})
  return {"command": " ".join(cmd[1:]), "env": dict(env or {}), "wall_seconds": round(wall, 2), "cells": cells,
          "cells_per_minute": round(60.0 * cells / wall, 2),
          "load_before": [round(x, 2) for x in load_before],
          "load_after": [round(x, 2) for x in os.getloadavg()],
          # in one order whatever order the cells finished in
          "rows": sorted(({k: r.get(k) for k in kind.same} for r in rows),
                         key=lambda r: json.dumps(r, sort_keys=True, default=str))}


def wait_for_load(max_load: float, max_wait: float, poll: float = 10.0) -> float:
  """Sleeps until the 1-minute load average is at most `max_load` or `max_wait` seconds have
  passed; returns the seconds waited (0 where max_load <= 0)."""
  t0 = time.monotonic()
  while max_load > 0 and os.getloadavg()[0] > max_load and time.monotonic() - t0 < max_wait:
    time.sleep(poll)
  return time.monotonic() - t0


def markdown(runs: Sequence[Dict[str, Any]]) -> str:
  base = next((r["wall_seconds"] for r in runs if r["executor"] == "local"), None)
  body = [[r["executor"], r["workers"], r.get("variant", ""), r["cells"],
           f"{r['wall_seconds']:.1f}", f"{r['cells_per_minute']:.1f}",
           f"{base / r['wall_seconds']:.2f}x" if base else "-",
           f"{r['load_before'][0]:.2f} / {r['load_after'][0]:.2f}"] for r in runs]
  from go_jax import results  # pylint: disable=g-import-not-at-top
  return results.markdown_table(
      ["executor", "workers", "variant", "cells", "wall s", "cells/min", "vs local",
       "load 1 min before / after"], body)


def _variant(executor: str) -> str:
  """The run's settings in words (threads, CPUs per cell, compilation cache)."""
  cache = f"cache {FLAGS.compilation_cache}"
  if executor == "local":
    return f"XLA threads: all cores; {cache}"
  threads = ("all cores" if FLAGS.cpus_per_cell > 1 or FLAGS.xla_multi_thread else "1")
  nice = 15 if FLAGS.worker_niceness is None else FLAGS.worker_niceness
  return f"{FLAGS.cpus_per_cell:g} CPU/cell; XLA threads: {threads}; nice {nice}; {cache}"


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
  if FLAGS.cpus_per_cell <= 0 or any(n < FLAGS.cpus_per_cell for n in ray_cpus):
    raise app.UsageError(f"--cpus_per_cell={FLAGS.cpus_per_cell:g}: must be > 0 and at most "
                         f"each --ray_cpus count ({','.join(FLAGS.ray_cpus)})")
  if len(ray_cpus) + bool(FLAGS.local) < 1:
    raise app.UsageError("--ray_cpus is empty and --nolocal: no run to time")
  if ray_cpus:
    from go_jax import executors  # pylint: disable=g-import-not-at-top
    try:
      executors.import_ray()
    except ValueError as e:
      raise app.UsageError(str(e)) from e
  if _sweep_in_argv(sys.argv) != FLAGS.sweep:  # e.g. --sweep given twice
    raise app.UsageError(f"--sweep={FLAGS.sweep}: give --sweep once, as --sweep=NAME")
  config_args = [f"--config={FLAGS['config'].config_filename}"] + [
      a for a in sys.argv[1:] if a.lstrip("-").startswith("config.")]
  plan: List[Dict[str, Any]] = ([{"executor": "local", "workers": 1, "args": []}]
                                if FLAGS.local else [])
  plan += [{"executor": "ray", "workers": int(n // FLAGS.cpus_per_cell),
            "args": ["--executor=ray", f"--ray_num_cpus={n}",
                     f"--cpus_per_cell={FLAGS.cpus_per_cell:g}"]}
           for n in ray_cpus]
  runs = []
  with tempfile.TemporaryDirectory(prefix="bench_executor_") as tmp:
    for i, p in enumerate(plan):
      print(f"[{i + 1}/{len(plan)}] {p['executor']} ({p['workers']} worker(s)) ...",
            file=sys.stderr, flush=True)
      waited = wait_for_load(FLAGS.max_load, FLAGS.max_wait)
      if waited >= 1:
        print(f"    waited {waited:.0f} s for the load to fall to {FLAGS.max_load:g}",
              file=sys.stderr, flush=True)
      env = {}
      if FLAGS.compilation_cache == "fresh":  # new and empty: this run compiles cold
        env["JAX_COMPILATION_CACHE_DIR"] = os.path.join(tmp, f"{i}_jax_cache")
      if p["executor"] == "ray" and FLAGS.xla_multi_thread:
        env["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""),
                                     "--xla_cpu_multi_thread_eigen=true"]).strip()
      if p["executor"] == "ray" and FLAGS.worker_niceness is not None:
        env["RAY_worker_niceness"] = str(FLAGS.worker_niceness)
      run = run_sweep(p["args"], config_args, os.path.join(tmp, str(i)), FLAGS.timeout,
                      FLAGS.sweep, env)
      runs.append(dict(run, executor=p["executor"], workers=p["workers"],
                       variant=_variant(p["executor"])))
      print(f"    {run['wall_seconds']:.1f} s, {run['cells_per_minute']:.1f} cells/min",
            file=sys.stderr, flush=True)
  same = all(r["rows"] == runs[0]["rows"] for r in runs)
  table = markdown(runs)
  result = {"sweep": FLAGS.sweep,
            # rows_sha256: compares runs of separate invocations
            "runs": [dict({k: v for k, v in r.items() if k != "rows"}, rows_sha256=hashlib.sha256(
                json.dumps(r["rows"], sort_keys=True).encode()).hexdigest()) for r in runs],
            "same_rows": same, "config": cli.plain(_CONFIG.value), "machine": cli.machine_info(),
            "command": " ".join(sys.argv), "markdown": table}
  from simulator import fileio  # pylint: disable=g-import-not-at-top
  fileio.write_json(out, result)
  print(table)
  verdict = ("one run: nothing to compare" if len(runs) == 1 else
             f"rows identical across runs: {'yes' if same else 'NO'}")
  print(f"\n{verdict}; wrote {out}")
  if not same:
    raise ValueError("the executors wrote different rows (see the JSON's runs)")


def run():
  """Entry point (`python -m experiments.bench_executor`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
