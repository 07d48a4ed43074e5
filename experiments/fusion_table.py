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

GO's learned fusion and the joint task are columns of this table once they exist (not yet).
Prints the table, writes <out>/fusion_table.json atomically after every model (an interrupted
run resumes: finished models are not redone).

  python -m experiments.fusion_table --size=small --out=results/fusion_table
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Sequence

from absl import app, flags

from experiments import cli
from experiments.fusion_validation import cells_table, model_rows

FLAGS = flags.FLAGS
flags.DEFINE_list("models", [], "Zoo models (default: all of simulator.zoo).")
flags.DEFINE_enum("size", "small", ["default", "small", "tiny"], "Zoo size setting.")
flags.DEFINE_string("device", "v100", "Cost model device of the graphs (simulator.costmodel).")
flags.DEFINE_list("devices", ["1", "4", "8"], "Device counts (D > 1: the nvlink<D> preset).")
flags.DEFINE_list("placers", ["heft", "m_etf", "m_sct"], "Placement methods; the best one "
                  "(unfused makespan) is the placement of the sequential pipeline.")
flags.DEFINE_string("out", "results/fusion_table", "Folder for fusion_table.json.")

def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  cli.check_out(FLAGS.out)
  from simulator import fileio, zoo
  names = FLAGS.models or sorted(zoo.available())
  unknown = sorted(set(names) - set(zoo.available()))
  if unknown:
    raise app.UsageError(f"--models: unknown zoo model(s) {unknown}; available: "
                         f"{', '.join(sorted(zoo.available()))}")
  try:
    counts = [int(d) for d in FLAGS.devices]
  except ValueError as e:
    raise app.UsageError(f"--devices: {e}") from e
  if any(d < 1 for d in counts):
    raise app.UsageError(f"--devices: counts must be >= 1, got {counts}")
  path = os.path.join(FLAGS.out, "fusion_table.json")
  done = {}
  if os.path.exists(path):
    try:
      with open(path) as fh:
        done = {r["model"]: r for r in json.load(fh).get("rows", [])}
    except (OSError, ValueError, KeyError, TypeError) as e:
      raise app.UsageError(f"cannot resume from {path}: {e}") from e
  rows, start = [], time.time()
  for k, name in enumerate(names):
    key = f"{name}/{FLAGS.size}"
    if key in done and [c["devices"] for c in done[key]["cells"]] == counts:
      rows.append(done[key])
      continue
    t0 = time.time()
    try:
      rows.append(model_rows(name, FLAGS.size, FLAGS.device, counts, FLAGS.placers))
    except ValueError as e:
      raise app.UsageError(f"{name}: {e}") from e
    fileio.write_json(path, {"size": FLAGS.size, "device": FLAGS.device, "devices": counts,
                             "placers": list(FLAGS.placers), "rows": rows})
    rate = (time.time() - start) / (k + 1)
    print(f"[{time.time() - start:7.1f}s] {k + 1}/{len(names)} {key} in {time.time() - t0:.1f}s"
          f", ETA {rate * (len(names) - k - 1):.0f}s", file=sys.stderr, flush=True)
  fileio.write_json(path, {"size": FLAGS.size, "device": FLAGS.device, "devices": counts,
                           "placers": list(FLAGS.placers), "rows": rows})
  print(cells_table(rows))
  print(f"wrote {os.path.abspath(path)}")


if __name__ == "__main__":
  cli.run(main, __doc__)
