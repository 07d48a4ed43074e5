r"""The partitioning table (issue 15): Tofu, data parallelism and Megatron against placement.

For every zoo model (training step before XLA's passes, costed on --device, with its HLO
strategy space; --batch overrides the batch knob, or 0 keeps each model's own at --size;
either way the batch must divide every device count, else the launcher refuses) and device
count D >= 2 (the `nvlink<D>` preset) with every device's memory --mem_factor times the step's
single-device footprint: the placement methods (--placers; the best by makespan,
feasible first) and the partitioning methods (--partitioners, k = D workers; docs/design.md
section 4.2), each re-simulated: makespan (or OOM and peak / capacity), the placements that fit,
and each strategy's communication bytes. Then Tofu's DP against brute force on programs small
enough to enumerate. Prints both tables, writes <out>/partition_table.json (`go_jax.partition_table`)
after every row: a rerun with the same --size, --batch, --device and --mem_factor resumes, running
only the rows (model, D, method) and the optimality check it does not have yet; other models,
device counts or methods add rows.

  python -m experiments.partition_table --out=results/partition_table
  python -m experiments.partition_table --models=gpt2_small --devices=4 --size=tiny --batch=8
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Sequence

from absl import app, flags

from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["gpt2_small", "bert_base", "transformer_nmt", "wavenet_2x18",
                             "resnet50"], "Zoo models.")
flags.DEFINE_enum("size", "small", ["default", "small", "tiny"], "Zoo size setting.")
flags.DEFINE_integer("batch", 8, "Batch knob of every model (0: each model's own at --size); "
                     "the batch must divide every --devices count (data parallelism splits it).",
                     lower_bound=0)
flags.DEFINE_string("device", "v100", "Cost model device of the graphs (simulator.costmodel).")
flags.DEFINE_list("devices", ["4", "8"], "Device counts (the nvlink<D> preset), at least 2.")
flags.DEFINE_float("mem_factor", 0.5, "Device memory as a multiple of the single-device "
                   "footprint (> 0).", lower_bound=0.0)
flags.DEFINE_list("placers", ["heft", "m_etf", "m_sct", "metis", "expert"],
                  "Placement methods.")
flags.DEFINE_list("partitioners", ["tofu", "data_parallel", "megatron"],
                  "Partitioning methods.")
flags.DEFINE_bool("optimality", True, "Also check Tofu's DP against brute force.")
flags.DEFINE_string("out", "results/partition_table", "Folder for partition_table.json.")

LAUNCHER = "partition_table"
OPTIMALITY = "optimality"  # the cell of Tofu's DP against brute force


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  cli.check_out(FLAGS.out)
  from go_jax import methods, partition_table
  from simulator import fileio
  if not FLAGS.models:
    raise app.UsageError("--models: empty; give at least one zoo model")
  cli.check_zoo_models(FLAGS.models)
  try:
    methods.usable(FLAGS.placers, "--placers")  # a typo stops here; metis without pymetis is
  except ValueError as e:                       # skipped by model_rows
    raise app.UsageError(str(e)) from e
  bad = [m for m in FLAGS.placers if m in methods.METHODS
         and methods.get(m).kind not in ("placement", "joint")]
  if bad:
    raise app.UsageError(f"--placers: not placement methods: {bad} (a partitioner goes in "
                         "--partitioners)")
  if not FLAGS.mem_factor > 0:
    raise app.UsageError(f"--mem_factor={FLAGS.mem_factor:g}: must be > 0 (a multiple of the "
                         "single-device footprint)")
  bad = [m for m in FLAGS.partitioners if m not in methods.available(("partition",))]
  if bad:
    raise app.UsageError(f"--partitioners: not partition methods: {bad}; choose from "
                         f"{sorted(methods.available(('partition',)))}")
  counts = cli.nvlink_counts(FLAGS.devices)
  try:
    partition_table.check_lists(FLAGS.models, counts, FLAGS.placers, FLAGS.partitioners,
                                FLAGS.batch, FLAGS.size)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  os.makedirs(FLAGS.out, exist_ok=True)
  path = os.path.join(FLAGS.out, "partition_table.json")
  settings = {k: FLAGS[k].value for k in ("size", "batch", "device", "mem_factor")}
  try:
    cells = dict(cli.load_resumable(path, LAUNCHER, settings).get("cells", {}))
    partition_table.check_cells(cells, path, OPTIMALITY)
  except ValueError as e:
    raise app.UsageError(cli.one_line(e)) from None
  t0 = time.perf_counter()
  rows, computed = [], []

  def save(opt=None):
    payload = {"launcher": LAUNCHER, "settings": settings, "command": " ".join(sys.argv),
               "flags": {k: FLAGS[k].value for k in (
                   "models", "size", "batch", "device", "devices", "mem_factor", "placers",
                   "partitioners")},
               "cells": cells, "rows": rows, "optimality": opt,
               "seconds": time.perf_counter() - t0}
    with fileio.atomic_open(path, "w") as fh:  # rows may hold numpy scalars and inf ratios
      json.dump(payload, fh, indent=1, default=float)

  def on_row(key, row):
    cells[key] = row
    computed.append(key)
    save()

  for model in FLAGS.models:
    knobs = {"batch": FLAGS.batch} if FLAGS.batch else {}
    try:
      rows += partition_table.model_rows(model, FLAGS.size, counts, FLAGS.mem_factor,
                                         FLAGS.device, FLAGS.placers, FLAGS.partitioners,
                                         done=cells, on_row=on_row, **knobs)
    except ValueError as e:
      raise app.UsageError(f"{model}: {e}") from e
    print(f"{model}: done ({time.perf_counter() - t0:.0f} s)", flush=True)
  print(partition_table.table_text(rows, FLAGS.partitioners))
  opt = []
  if FLAGS.optimality:
    if OPTIMALITY not in cells:
      cells[OPTIMALITY] = partition_table.optimality()
      computed.append(OPTIMALITY)
    opt = cells[OPTIMALITY]
  if opt:
    print()
    print(partition_table.optimality_text(opt))
  save(opt)
  print(f"\nwrote {path} ({len(computed)} cells run, "
        f"{len(rows) + bool(opt) - len(computed)} resumed)")


def run():
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
