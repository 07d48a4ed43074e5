r"""How much lower than BRKGA 5K peak memory can go on a dataset: the room of REGAL's figure.

BRKGA at several budgets and any registered method at 5K, per graph and seed, against BRKGA 5K
(the first row): mean % improvement with its 95% bootstrap interval, better / worse counts, on
how many graphs each row found the best known answer, its share of the best known's mean
improvement ("the room") and running time. Library: experiments/headroom.py.

  python -m experiments.regal_headroom --data=regal_data:test,limit=100 \
      --rows=brkga@5000,brkga@20000,brkga@100000,regal_hint@5000 --out=results/regal_headroom
  python -m experiments.regal_headroom --data="regal:n=60,seed=1;regal:n=80,seed=2" \
      --rows=brkga@5000,brkga@50000 --topology=nvlink4 --out=/tmp/headroom

--data is a data spec of go_jax.datasets (a split of a folder made by
experiments/build_regal_data.py; its default folder is $GO_JAX_REGAL_DATA/regal) or graph specs
separated by ';'. Writes <out>/regal_headroom.json (atomically, resumed by a rerun with the same
topology, objective and rows) and <out>/regal_headroom.md. Bad input is a one-line error, exit 1.
"""

from __future__ import annotations

import sys
from typing import Sequence

from absl import app, flags

from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("data", "regal_data:test,limit=100", "data spec or graph specs "
                    "separated by ';'")
flags.DEFINE_string("rows", "brkga@5000,brkga@20000,brkga@100000,regal_hint@5000",
                    "METHOD@BUDGET rows, the first being the reference (REGAL's BRKGA 5K); "
                    "placement or joint methods only")
flags.DEFINE_string("topology", "nvlink2", cli.topology_help("topology spec (REGAL: 2 devices)."))
flags.DEFINE_string("objective", "peak_memory", "objective (peak_memory or makespan)")
flags.DEFINE_list("seeds", ["0"], "search seeds per graph")
flags.DEFINE_string("out", "results/regal_headroom", "folder for regal_headroom.json/.md; an "
                    "existing regal_headroom.json there is resumed")


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  from experiments import headroom  # pylint: disable=g-import-not-at-top
  from experiments.regal_comparison import load_dataset  # pylint: disable=g-import-not-at-top
  from go_jax import objectives  # pylint: disable=g-import-not-at-top
  out = cli.check_out(FLAGS.out)
  try:
    objectives.get_objective(FLAGS.objective)
    try:
      seeds = headroom.check_seeds(FLAGS.seeds)  # before the dataset is loaded
    except ValueError as e:
      raise ValueError(f"--seeds: {e}") from None
    try:
      rows = headroom.parse_rows(FLAGS.rows)
    except ValueError as e:
      raise ValueError(f"--rows: {e}") from None
    names, graphs = load_dataset("data", FLAGS.data)
  except ValueError as e:
    raise app.UsageError(cli.one_line(e)) from None
  try:
    result = headroom.run(graphs, names, FLAGS.topology, rows, out, objective=FLAGS.objective,
                          seeds=seeds, log=lambda s: print(s, file=sys.stderr, flush=True))
  except ValueError as e:
    raise app.UsageError(cli.one_line(e)) from None
  print(result["markdown"])
  print(f"wrote {out}/{headroom.JSON_NAME} and {headroom.MD_NAME}")


def run():
  """Entry point (`python -m experiments.regal_headroom`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
