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
--devices, --placers or learned settings, which recompute it).

  python -m experiments.fusion_table --size=small --out=results/fusion_table
  python -m experiments.fusion_table --models=heldout --learned_seconds=120 \
      --out=results/fusion_table_go
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Sequence

from absl import app, flags

from experiments import cli
from experiments.configs.pretrain_fusion import HELD_OUT
from experiments.fusion_comparison import cells_table, figures, figures_text, model_rows

FLAGS = flags.FLAGS
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
  for name in FLAGS.placers:  # before any model is built: unknown or unavailable here
    try:
      methods.get(name)
    except ValueError as e:
      raise app.UsageError(f"--placers: {e}") from e
  counts = cli.nvlink_counts(FLAGS.devices)
  path = os.path.join(FLAGS.out, "fusion_table.json")
  done = {}
  if os.path.exists(path):
    try:
      with open(path) as fh:
        done = {r["model"]: r for r in json.load(fh).get("rows", [])}
    except (OSError, ValueError, KeyError, TypeError) as e:
      raise app.UsageError(f"cannot resume from {path}: {e}") from e
  learned = None
  if FLAGS.learned_seconds > 0:
    learned = {"finetune_seconds": FLAGS.learned_seconds, "checkpoint": FLAGS.checkpoint,
               "samples": FLAGS.samples, "seed": FLAGS.seed}
  settings = {"size": FLAGS.size, "device": FLAGS.device, "devices": counts,
              "placers": list(FLAGS.placers), "learned": learned}
  # A model's row is reused only if it was made with these settings (recorded in the row):
  # another --device, --placers, --devices or learned setting recomputes it.
  made_with = json.loads(json.dumps(settings))
  # Rows of models this run does not ask for stay in the file (the table and figures are this
  # run's models).
  asked = {f"{name}/{FLAGS.size}" for name in names}
  others = [r for key, r in done.items() if key not in asked]
  rows, start = [], time.time()
  for k, name in enumerate(names):
    key = f"{name}/{FLAGS.size}"
    if key in done and done[key].get("settings") == made_with:
      rows.append(done[key])
      continue
    t0 = time.time()
    try:
      row = model_rows(name, FLAGS.size, FLAGS.device, counts, FLAGS.placers, learned)
    except ValueError as e:
      raise app.UsageError(f"{name}: {e}") from e
    rows.append(dict(row, settings=made_with))
    done[key] = rows[-1]  # every row the file held stays in it (also models not reached yet)
    fileio.write_json(path, dict(settings, rows=list(done.values())))
    rate = (time.time() - start) / (k + 1)
    print(f"[{time.time() - start:7.1f}s] {k + 1}/{len(names)} {key} in {time.time() - t0:.1f}s"
          f", ETA {rate * (len(names) - k - 1):.0f}s", file=sys.stderr, flush=True)
  fig = figures(rows)
  fileio.write_json(path, dict(settings, rows=rows + others, figures=fig))
  print(cells_table(rows))
  if learned is not None:
    print(figures_text(fig))
  print(f"wrote {os.path.abspath(path)}")


if __name__ == "__main__":
  cli.run(main, __doc__)
