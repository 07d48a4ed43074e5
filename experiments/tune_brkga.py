r"""Tunes BRKGA's hyper-parameters with optuna for `brkga_tuned` (REGAL's "Tuned BRKGA").

Runs `go_jax.methods.tuned.tune` on the training graphs: each trial runs the registered `brkga`
with the trial's population, elite_frac, mutant_frac and elite_bias at a fixed --budget of
simulator evaluations on every graph and seed, scored by the geometric mean of its objective over
default BRKGA's (below 1 is better; trial 1 is the defaults). Prints one line per trial and writes
--out (atomically): {"params": the best values, "metadata": the command, training set, budget,
scores and timing, "trials": every trial}. `methods.solve("brkga_tuned", ...,
params_file=OUT)` reads it; the package ships one at go_jax/methods/data/brkga_tuned.json.
Needs optuna (pip install optuna, or the "tune" extra).

  python -m experiments.tune_brkga --trials=30 --out=/tmp/brkga_tuned.json
  python -m experiments.tune_brkga --graphs=regal:n=50,seed=1,regal:n=60,seed=2 \
      --topology=nvlink2 --objective=makespan --trials=10 --out=/tmp/tuned_makespan.json
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys
import time

from absl import app, flags

from experiments import cli
from go_jax import objectives
from go_jax.methods import tuned
from simulator import fileio

FLAGS = flags.FLAGS
flags.DEFINE_multi_string(
    "graphs", [f"regal:n={n},seed={s}" for n, s in ((40, 1001), (44, 1002), (48, 1003),
                                                    (52, 1004), (56, 1005), (60, 1006),
                                                    (62, 1007), (64, 1008))],
    "training graph specs (repeat the flag, or separate specs by ';', since specs hold commas)")
flags.DEFINE_string("topology", "nvlink2", cli.topology_help("topology spec."))
flags.DEFINE_enum("objective", "peak_memory", sorted(objectives.OBJECTIVES), "objective")
flags.DEFINE_integer("trials", 30, "optuna trials (the first is BRKGA's defaults)")
flags.DEFINE_integer("budget", tuned.TUNE_BUDGET, "simulator evaluations per BRKGA run")
flags.DEFINE_list("seeds", ["0"], "search seeds per graph")
flags.DEFINE_integer("sampler_seed", 0, "seed of optuna's TPE sampler")
flags.DEFINE_string("out", "results/brkga_tuned.json", "JSON output path")


def graph_specs(values):
  """Graph specs from --graphs: each value may hold several specs separated by ';'."""
  out = [s.strip() for v in values for s in v.split(";") if s.strip()]
  if not out:
    raise app.UsageError("--graphs names no graph")
  return out


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  out = cli.check_out(FLAGS.out, is_file=True)
  if FLAGS.trials < 1:
    raise app.UsageError(f"--trials must be >= 1, got {FLAGS.trials}")
  try:
    seeds = [int(s) for s in FLAGS.seeds]
  except ValueError as e:
    raise app.UsageError(f"--seeds must be integers, got {FLAGS.seeds}") from e
  specs = graph_specs(FLAGS.graphs)
  t0 = time.time()
  instances = tuned.instances_from_specs(specs, FLAGS.topology)
  for spec, g, _ in instances:
    print(f"graph {spec}: {g.num_nodes} ops, {g.num_edges} edges", flush=True)
  result = tuned.tune(instances, objective=FLAGS.objective, trials=FLAGS.trials,
                      budget=FLAGS.budget, seeds=seeds, sampler_seed=FLAGS.sampler_seed,
                      progress=lambda line: print(line, flush=True))
  wall = time.time() - t0
  command = "python -m experiments.tune_brkga " + " ".join(shlex.quote(a) for a in sys.argv[1:])
  doc = {
      "params": result["params"],
      "metadata": {
          "what": ("BRKGA hyper-parameters tuned with optuna TPE: geometric mean over the "
                   "training graphs and seeds of objective / default BRKGA's objective at the "
                   "same budget and seed (lower is better)"),
          "command": command, "graphs": specs, "topology": FLAGS.topology,
          "objective": FLAGS.objective, "budget": FLAGS.budget, "seeds": seeds,
          "trials": FLAGS.trials, "sampler_seed": FLAGS.sampler_seed,
          "gmean_ratio_to_default": result["gmean_ratio"], "best_trial": result["best_trial"],
          "default_params": result["default_params"],
          "default_objectives": result["default_objectives"],
          "tuned_objectives": result["tuned_objectives"],
          "search_space": {k: list(v[1:]) for k, v in tuned.SEARCH_SPACE.items()},
          "optuna_version": result["optuna_version"], "wall_seconds": round(wall, 1),
          "date": datetime.date.today().isoformat(), "host": platform.node(),
          "cpus": os.cpu_count(), "load_average": list(os.getloadavg())},
      "trials": result["trials"],
  }
  fileio.write_json(out, doc)
  print(f"best {result['params']}: gmean ratio to default BRKGA "
        f"{result['gmean_ratio']:.4f} (trial {result['best_trial'] + 1}); {wall:.0f} s; "
        f"wrote {out}", flush=True)


def run():
  """Entry point: `python -m experiments.tune_brkga`."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
