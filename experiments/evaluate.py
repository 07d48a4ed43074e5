r"""Evaluates placement / scheduling methods on graphs and topologies (go-jax-evaluate).

A thin launcher over `go_jax.harness`: the config (an ml_collections file, see
experiments/configs/evaluate_base.py) lists methods, graph specs, topology specs and seeds; every
cell is solved and re-simulated, and `<out>/results.{json,csv,md}` are written (resumable: rerun
the same command after an interruption and finished cells are skipped). Prints the Markdown
report.

  python -m experiments.evaluate                                    # tiny CI config
  python -m experiments.evaluate --config=experiments/configs/suite.py --out=results/suite
  python -m experiments.evaluate --config.seeds='(0, 1)' --config.budget=500 --plots
  python -m experiments.evaluate --config=experiments/configs/suite.py --executor=ray  # local Ray
  python -m experiments.evaluate --config=... --executor=ray --ray_address=auto   # a Ray cluster
  python -m experiments.evaluate --config=... --cpu_devices=1 \
      --coordinator_address=localhost:1234 --num_processes=2 --process_id=i  # i = 0, 1

With --coordinator_address (go_jax.distributed, docs/cluster.md) every cell's batches are split
over the processes; process 0 alone writes --out and its rows are what a resumed run skips.
"""

from __future__ import annotations

import os
from typing import Sequence

from absl import app, flags

from go_jax import distributed, harness, results
from simulator import runtime
from experiments import cli

FLAGS = flags.FLAGS
DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs",
                              "evaluate_test.py")

_CONFIG = cli.define_config_file(
    "config", default=DEFAULT_CONFIG,
    help_string="Harness config file (experiments/configs/evaluate_*.py, suite.py); fields can "
    "be overridden with --config.FIELD=VALUE.")
flags.DEFINE_string("out", "results/evaluate", "Folder for results.json/.csv/.md and plots/; an "
                    "existing results.json there is resumed.")
flags.DEFINE_bool("plots", None, "Write a Gantt/memory PNG per cell and a bar chart per graph "
                  "and topology (default: the config's `plots`).")
flags.DEFINE_bool("progress", True, "Show a progress bar.")
cli.define_executor_flags(__name__)
flags.DEFINE_integer("cpu_devices", 0, "CPU cores exposed as devices, so that each batch of "
                     "actions is split across them (0: one per core; 1: no split). See "
                     "simulator.runtime.configure_cpu_devices.", lower_bound=0,
                     upper_bound=1024)  # simulator.runtime.MAX_CPU_DEVICES
cli.define_distributed_flags()


def _check_out() -> None:
  """--out is a writable folder without another launcher's results (process 0's)."""
  cli.check_results_out(FLAGS.out, harness.LAUNCHER)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  if cli.multi_process() and FLAGS.executor != "local":
    raise app.UsageError(f"--executor={FLAGS.executor} with --coordinator_address: Ray spreads "
                         "the cells over machines, a multi-process run one cell's batches; "
                         "choose one")
  cli.initialize_distributed()  # before anything starts JAX's backends
  runtime.configure_cpu_devices(FLAGS.cpu_devices or None)
  out = distributed.output(FLAGS.out)  # process 0 writes; the others compute alike
  distributed.from_primary(_check_out)  # process 0's check stops every process
  executor = cli.executor_from_flags()  # --executor=ray without Ray: stop before any work
  try:
    with cli.started(executor):
      rows = harness.run(_CONFIG.value, out, plots=FLAGS.plots,
                         progress=FLAGS.progress and out is not None, executor=executor)
  except results.StoreError as e:  # the results file's fault, named in the message
    raise app.UsageError(str(e)) from e
  except Exception as e:  # pylint: disable=broad-except
    cell = harness.failed_cell(e)
    if cell is not None:  # fail_fast stopped at a cell's own error, of any type: one line
      # naming the cell (--v=1: the traceback)
      raise app.UsageError(f"a cell failed (config.fail_fast): {cell}: "
                           f"{harness.error_text(e)}") from e
    if isinstance(e, ValueError):
      raise app.UsageError(f"--config={FLAGS['config'].config_filename}: {e}") from e
    raise
  if out is None:
    return
  print(harness.markdown(rows))
  counts = harness.summarize(rows)
  print(f"{counts['rows']} rows ({counts['errors']} errors, {counts['infeasible']} infeasible, "
        f"{counts['disagreements']} re-simulation disagreements); wrote "
        f"{os.path.abspath(os.path.join(FLAGS.out, harness.MD_NAME))} (.csv, .json)")
  cli.fail_if_every_cell_failed(rows, os.path.abspath(FLAGS.out))


def run():
  """Console-script entry point (`go-jax-evaluate`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
