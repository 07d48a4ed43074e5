r"""The learned placers at equal search time (issue 14): GO, GDP, Placeto and HDP against the
best classic methods on held-out graphs; the objective after 30 / 120 / 600 s, the time to
within 5% of the final result, the claims of the Placeto and GO papers, convergence plots.

  python -m experiments.learned_placers --config=experiments/configs/learned_placers.py \
      --out=results/learned_placers
  python -m experiments.learned_placers --config=experiments/configs/learned_placers.py:quick \
      --out=results/learned_placers_quick --config.shard=1/2   # one of two processes
  python -m experiments.learned_placers --config=experiments/configs/learned_placers.py \
      --out=results/learned_placers --executor=ray --ray_address=auto   # cells as Ray tasks

The experiment (cells, resuming, sharding) is experiments/placer_comparison.py, its report (the
tables, the claims, the plot) experiments/placer_report.py; this launcher holds its flags.
Writes <out>/learned_placers.json (atomically), <out>/learned_placers.md and
<out>/convergence.png; an existing learned_placers.json in --out is resumed. Bad input (unknown
method, bad field) is a one-line error, exit 1.
"""

from __future__ import annotations

from typing import Sequence

from absl import app, flags

from experiments import cli
from experiments.placer_comparison import DEFAULT_CONFIG, JSON_NAME, MD_NAME, run_comparison

FLAGS = flags.FLAGS
_CONFIG = cli.define_config_file(
    "config", default=DEFAULT_CONFIG,
    help_string="Comparison config file (experiments/configs/learned_placers.py); fields can "
    "be overridden with --config.FIELD=VALUE.")
flags.DEFINE_string("out", "results/learned_placers", "Folder for learned_placers.json/.md and "
                    "convergence.png; an existing learned_placers.json there is resumed.")
cli.define_executor_flags(__name__)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  out = cli.check_out(FLAGS.out)
  executor = cli.executor_from_flags()  # --executor=ray without Ray: stop before any work
  cli.run_resumable_table(run_comparison, _CONFIG.value, FLAGS["config"].config_filename, out,
                          JSON_NAME, MD_NAME, executor=executor)


def run():
  """Entry point (`python -m experiments.learned_placers`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
