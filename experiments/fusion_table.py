r"""The fusion table: no fusion / every request / XLA's fusion per zoo model, alone and after
placement (design.md 4.1; the baselines the learned fusion and the joint task must beat).

For every zoo model (its training step, pre-optimisation graph, costed on --device): XLA's own
fusion decisions are read from the same program's post-optimisation module
(`go_jax.methods.fusion.xla_fusion_program`). Then, per device count:

  * 1 device: every op on it, critical-path priority; makespan and peak memory with no fusion,
    with every fuse request (`fuse_all`) and with XLA's (`xla_fusion`);
  * D > 1 (the `nvlink<D>` preset): the best of the placement methods (--placers, by unfused
    makespan) is the placement, then the same three fusions on it: "placement, then XLA's
    fusion" is the sequential pipeline that the joint task (placement + scheduling + fusion)
    has to beat.

With --learned_seconds > 0, GO's learned fusion (`go_fusion`, 1 device, on the same
placement and priority) and the joint task (`go_joint3`, D > 1) are fine-tuned for that many
seconds each (wall clock, loading and compilation included) from --checkpoint; the printed
figures are issue 13's (experiments/fusion_comparison.py `figures`). --models=heldout names
the families the shipped `go_fusion` checkpoint never saw (experiments/configs/pretrain_fusion.py).

Prints the table, writes <out>/fusion_table.json atomically after every model (an interrupted
run resumes: a finished model is not redone unless it was made with other --device,
--devices, --placers or learned settings, which recompute it). The file is tagged
`"launcher": "fusion_table"`; another launcher's file (or an untagged one without the fusion
table's settings) is refused, and so is a malformed stored row, naming the row, cell and field.
--placers are non-learned placement or joint methods; --checkpoint, --samples and --seed need
--learned_seconds > 0.

  python -m experiments.fusion_table --size=small --out=results/fusion_table
  python -m experiments.fusion_table --models=heldout --learned_seconds=120 \
      --out=results/fusion_table_go
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from absl import app, flags

from experiments import cli
from experiments.configs.pretrain_fusion import HELD_OUT
from experiments.fusion_comparison import (LAUNCHER, cells_table, figures, figures_text,
                                           model_rows, run_models)

FLAGS = flags.FLAGS
PLACER_KINDS = ("placement", "joint")  # the methods that answer a placement on their own
flags.DEFINE_list("models", [], "Zoo models (default: all of simulator.zoo; 'heldout': those "
                  "of families the shipped go_fusion checkpoint never saw).")
flags.DEFINE_enum("size", "small", ["default", "small", "tiny"], "Zoo size setting.")
flags.DEFINE_string("device", "v100", "Cost model device of the graphs (simulator.costmodel).")
flags.DEFINE_list("devices", ["1", "4", "8"], "Device counts (D > 1: the nvlink<D> preset).")
flags.DEFINE_list("placers", ["heft", "m_etf", "m_sct"], "Placement methods; the best one "
                  "(unfused makespan) is the placement of the sequential pipeline.")
flags.DEFINE_string("out", "results/fusion_table", "Folder for fusion_table.json.")
flags.DEFINE_float("learned_seconds", 0.0, "Fine-tuning budget of go_fusion / go_joint3 per "
                   "cell (0: no learned columns).", lower_bound=0.0)
flags.DEFINE_string("checkpoint", "go_fusion", "Checkpoint of the learned methods.")
flags.DEFINE_integer("samples", None, "K of the learned methods (default: the checkpoint's).",
                     lower_bound=1)
flags.DEFINE_integer("seed", 0, "Seed of the learned methods.",
                     lower_bound=0)

def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  cli.check_out(FLAGS.out)
  from simulator import fileio, zoo
  names = FLAGS.models or sorted(zoo.available())
  if names == ["heldout"]:
    names = list(HELD_OUT)
  cli.check_zoo_models(names)
  from go_jax import methods  # pylint: disable=g-import-not-at-top
  if not FLAGS.placers:
    raise app.UsageError("--placers: give at least one placement method")
  choices = ", ".join(sorted(n for n in methods.available(PLACER_KINDS)
                             if not methods.get(n).learned))
  for name in FLAGS.placers:  # before any model is built: unknown, unavailable or not a placer
    try:
      kind = methods.get(name).kind
    except ValueError as e:
      raise app.UsageError(f"--placers: {e}") from e
    if kind not in PLACER_KINDS:
      raise app.UsageError(
          f"--placers={name}: a {kind} method, not a placement one; choose from {choices}")
    if methods.get(name).learned:  # the pipeline is the baseline the learned columns must beat
      raise app.UsageError(
          f"--placers={name}: a learned method; the placers make the non-learned sequential "
          f"pipeline that the learned columns (--learned_seconds) are compared with; choose "
          f"from {choices}")
  for flag, values in (("placers", FLAGS.placers), ("devices", FLAGS.devices)):
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
      raise app.UsageError(f"--{flag}={','.join(values)}: {', '.join(twice)} given twice")
  counts = cli.nvlink_counts(FLAGS.devices)
  if len(set(counts)) != len(counts):  # 1 and 01
    raise app.UsageError(f"--devices={','.join(FLAGS.devices)}: a count is given twice")
  if FLAGS.learned_seconds == 0:
    given = [f"--{k}" for k in ("checkpoint", "samples", "seed") if FLAGS[k].present]
    if given:
      raise app.UsageError(f"{given[0]}: only used with --learned_seconds > 0 (the learned "
                           "columns); drop it or give --learned_seconds")
  else:
    from go_jax import pretrained  # pylint: disable=g-import-not-at-top
    from go_jax.methods.learned import NO_CHECKPOINT  # pylint: disable=g-import-not-at-top
    if FLAGS.checkpoint != NO_CHECKPOINT:
      try:  # before any model is built (was reported by the first learned cell)
        pretrained.load_config(FLAGS.checkpoint)
      except ValueError as e:
        raise app.UsageError(f"--checkpoint={FLAGS.checkpoint}: {cli.one_line(e)}") from e
  path = os.path.join(FLAGS.out, "fusion_table.json")
  learned = None
  if FLAGS.learned_seconds > 0:
    learned = {"finetune_seconds": FLAGS.learned_seconds, "checkpoint": FLAGS.checkpoint,
               "samples": FLAGS.samples, "seed": FLAGS.seed}
  # A model's row is reused only if it was made with these settings (recorded in the row):
  # another --device, --placers, --devices or learned setting recomputes it.
  settings = {"size": FLAGS.size, "device": FLAGS.device, "devices": counts,
              "placers": list(FLAGS.placers), "learned": learned}

  def build(name):
    try:
      return model_rows(name, FLAGS.size, FLAGS.device, counts, FLAGS.placers, learned)
    except ValueError as e:
      raise app.UsageError(f"{name}: {e}") from e

  try:
    rows, others = run_models(names, FLAGS.size, settings, path, build,
                              log=lambda s: print(s, file=sys.stderr, flush=True))
  except ValueError as e:  # an unreadable results file (build's errors are UsageErrors)
    raise app.UsageError(cli.one_line(e)) from e
  fig = figures(rows)
  fileio.write_json(path, dict(settings, launcher=LAUNCHER, rows=rows + others, figures=fig))
  print(cells_table(rows))
  if learned is not None:
    print(figures_text(fig))
  print(f"wrote {os.path.abspath(path)}")


if __name__ == "__main__":
  cli.run(main, __doc__)
