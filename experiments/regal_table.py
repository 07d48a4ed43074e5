r"""REGAL's table (issue 12, part 4): % improvement over BRKGA 5K, % gap from the best method
and mean running time of every method, per dataset and device count.

  python -m experiments.regal_table --config=experiments/configs/regal_table.py \
      --out=results/regal_table
  python -m experiments.regal_table --config=experiments/configs/regal_table.py \
      --out=results/regal_table_makespan --config.objective=makespan
  python -m experiments.regal_table --config=experiments/configs/regal_table.py \
      --out=results/regal_table --executor=ray --ray_address=auto   # cells as Ray tasks

The experiment (cells, resuming, the table, the plot) is experiments/regal_comparison.py; this
launcher holds its flags. Writes <out>/regal_table.json (atomically), <out>/regal_table.md and
<out>/improvement.png; an existing regal_table.json in --out is resumed. Bad input (unknown
method, missing dataset, bad field) is a one-line error, exit 1.
"""

from __future__ import annotations

from typing import Sequence

from absl import app, flags

from experiments import cli
from experiments.regal_comparison import DEFAULT_CONFIG, JSON_NAME, MD_NAME, run_table

FLAGS = flags.FLAGS
_CONFIG = cli.define_config_file(
    "config", default=DEFAULT_CONFIG,
    help_string="Table config file (experiments/configs/regal_table.py); fields can be "
    "overridden with --config.FIELD=VALUE.")
flags.DEFINE_string("out", "results/regal_table", "Folder for regal_table.json/.md and "
                    "improvement.png; an existing regal_table.json there is resumed.")
cli.define_executor_flags(__name__)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  out = cli.check_out(FLAGS.out)
  executor = cli.executor_from_flags()  # --executor=ray without Ray: stop before any work
  cli.run_resumable_table(run_table, _CONFIG.value, FLAGS["config"].config_filename, out,
                          JSON_NAME, MD_NAME, executor=executor)


def run():
  """Entry point (`python -m experiments.regal_table`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
