r"""Runs one data-parallel training step for real with jax.sharding and prints measured vs
simulated step time (issue 15; `go_jax.partition_execute`).

The zoo model's step is costed with --calibration (this machine's, go-jax-calibrate) on the
"local" device and simulated on --topology (measured: go-jax-calibrate --topology); the same
step then runs with its batch split over --devices local devices (on a CPU, --devices virtual
devices made before JAX starts) and on one device. Prints a table, writes
<out>/partition_execute.json.

  python -m experiments.partition_execute --calibration=cal.json --topology=topology_4.json \
      --devices=4 --out=results/partition_execute
"""

from __future__ import annotations

import json
import os
from typing import Sequence

from absl import app, flags

from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "gpt2_small", "Zoo model.")
flags.DEFINE_enum("size", "small", ["default", "small", "tiny"], "Zoo size setting.")
flags.DEFINE_integer("batch", 8, "Batch knob (0: the size's own).", lower_bound=0)
flags.DEFINE_integer("devices", 4, "Devices of the data-parallel step.", lower_bound=1)
flags.DEFINE_string("calibration", None, "Calibration JSON of this machine (go-jax-calibrate).")
flags.DEFINE_string("topology", None, "Topology spec of the devices (measured).")
flags.DEFINE_integer("repeats", 10, "Timed steps (the median is reported).", lower_bound=1)
flags.DEFINE_string("out", "results/partition_execute", "Folder for partition_execute.json.")
flags.mark_flags_as_required(["calibration", "topology"])


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  cli.check_out(FLAGS.out)
  from simulator import fileio, runtime
  runtime.configure_cpu_devices(max(FLAGS.devices, 1))  # before JAX starts; no-op on a GPU
  from go_jax import partition_execute
  knobs = {"batch": FLAGS.batch} if FLAGS.batch else {}
  try:
    r = partition_execute.measure(FLAGS.model, FLAGS.size, FLAGS.devices, FLAGS.topology,
                                  FLAGS.calibration, FLAGS.repeats, **knobs)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  print("| step | measured | simulated | measured / simulated |")
  print("|---|---:|---:|---:|")
  for key, label in (("single", "one device"),
                     ("data_parallel", f"data parallel, {FLAGS.devices} devices")):
    m, s = r[f"measured_{key}"], r[f"simulated_{key}"]
    print(f"| {label} | {m * 1e3:.3g} ms | {s * 1e3:.3g} ms | {m / s:.2f} |")
  os.makedirs(FLAGS.out, exist_ok=True)
  path = os.path.join(FLAGS.out, "partition_execute.json")
  with fileio.atomic_open(path, "w") as fh:
    json.dump(r, fh, indent=1)
  print(f"\nwrote {path}")


def run():
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
