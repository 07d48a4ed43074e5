r"""GO transfer sweep: pretrained GO / GDP / ablations vs the fast baselines on held-out graphs.

A thin launcher over `go_jax.transfer` (see there for what a cell is and what is written).
Resumable: rerun the same command and finished cells are skipped.

  python -m experiments.transfer --config=experiments/configs/transfer.py --out=results/transfer
  python -m experiments.transfer --config.rows='("go_hint",)' --config.graphs='("pipedream:vgg16",)'
  python -m experiments.transfer --executor=ray --ray_address=auto   # cells as Ray tasks
"""

from __future__ import annotations

import os
from typing import Sequence

from absl import app, flags

from experiments.configs import pretrain
from go_jax import results, transfer
from experiments import cli

FLAGS = flags.FLAGS
DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs",
                              "transfer.py")
_CONFIG = cli.define_config_file(
    "config", default=DEFAULT_CONFIG, help_string="Transfer config (experiments/configs/"
    "transfer.py); fields can be overridden with --config.FIELD=VALUE.")
cli.define_executor_flags(__name__)
flags.DEFINE_string("out", "results/transfer", "Folder for results.json / results.md; an "
                    "existing results.json there is resumed.")


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  cli.check_out(FLAGS.out)
  try:
    results.load(FLAGS.out, transfer.LAUNCHER)  # another launcher's results: stop first
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  executor = cli.executor_from_flags()  # --executor=ray without Ray: stop before any work
  try:
    with cli.started(executor):
      rows = transfer.run(_CONFIG.value, FLAGS.out, pretrain_config=pretrain.get_config,
                          executor=executor)
  except results.StoreError as e:  # the results folder's fault, named in the message
    raise app.UsageError(str(e)) from e
  except ValueError as e:
    raise app.UsageError(f"--config={FLAGS['config'].config_filename}: {e}") from e
  print(transfer.markdown(rows, transfer.settings(_CONFIG.value)))
  print(f"wrote {os.path.abspath(os.path.join(FLAGS.out, transfer.MD_NAME))}")
  cli.fail_if_every_cell_failed(rows, os.path.abspath(FLAGS.out))


def run():
  """Console-script entry point (`go-jax-transfer`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
