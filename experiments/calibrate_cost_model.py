r"""Calibrates the roofline cost model on the local JAX backend (simulator.costmodel.calibrate).

Times the microbenchmark programs (matmuls, convolutions, elementwise chains, reductions,
transposes, gathers, scatters, loops, ...) on this machine, fits per-op-class efficiencies and
launch overheads, prints the fitted table and writes the Calibration JSON (atomically).

  python -m experiments.calibrate_cost_model                      # -> results/calibration_cpu.json
  python -m experiments.calibrate_cost_model --quick --out=/tmp/cal.json

With --topology=PATH it measures the local devices instead (simulator.costmodel.
topology_calibration): each device's speed and memory and every device-to-device copy's latency
and bandwidth, written as a topology file (docs/topology.md) that `--topology=PATH` of the
other launchers reads. On a CPU-only machine --cpu_devices=N first exposes N CPU devices:

  go-jax-calibrate --topology=local.json --cpu_devices=2
"""

from __future__ import annotations

import os
import sys
import time
from typing import Sequence

from absl import app, flags

from experiments import cli

FLAGS = flags.FLAGS
DEFAULT_OUT_DIR = "results"
flags.DEFINE_string("out", None, "Calibration JSON path (default: "
                    "results/calibration_<backend>.json).")
flags.DEFINE_bool("quick", False, "A dozen programs at one or two sizes, 3 rounds (seconds; "
                  "for tests and smoke runs, not for validation).")
flags.DEFINE_string("backend", None, "JAX backend (cpu, gpu, ...; default: JAX's default).")
flags.DEFINE_integer("repeats", None, "Interleaved timing rounds (median); default 15, 3 with "
                     "--quick.", lower_bound=1)
flags.DEFINE_bool("progress", True, "Print progress to stderr.")
flags.DEFINE_string("topology", None, "Measure the local devices and write this topology JSON "
                    "instead of calibrating the cost model.")
flags.DEFINE_integer("cpu_devices", None, "With --topology: expose this many CPU devices "
                     "first (JAX's default on a CPU is one).", lower_bound=1,
                     upper_bound=1024)  # = simulator.runtime.MAX_CPU_DEVICES


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  if FLAGS["out"].present and not FLAGS.out:
    raise app.UsageError("--out is empty: give a file path (or leave it out for the default)")
  if FLAGS["topology"].present and not FLAGS.topology:
    raise app.UsageError("--topology is empty: give the .json file to write")
  if FLAGS.topology and not FLAGS.topology.lower().endswith(".json"):
    raise app.UsageError(f"--topology={FLAGS.topology}: topology files end in .json (the "
                         "launchers read a topology spec ending in .json as a file)")
  if FLAGS.topology:
    _measure_topology()
    return
  if FLAGS.cpu_devices:
    raise app.UsageError("--cpu_devices is for --topology")
  from simulator import costmodel
  # checked now, not after minutes of timing (the default's name waits for the backend)
  cli.check_out(FLAGS.out or DEFAULT_OUT_DIR, is_file=bool(FLAGS.out))
  start = time.time()

  def progress(msg: str) -> None:
    if FLAGS.progress:
      print(f"[{time.time() - start:6.1f}s] {msg}", file=sys.stderr, flush=True)

  repeats = FLAGS.repeats or (3 if FLAGS.quick else 15)
  try:
    cal = costmodel.calibrate(FLAGS.backend, sizes="quick" if FLAGS.quick else "full",
                              repeats=repeats, progress=progress)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  out = FLAGS.out or os.path.join(DEFAULT_OUT_DIR, f"calibration_{cal.backend}.json")
  cal.save(out)
  print(cal.table())
  print(f"fit: {cal.fit['mape_percent']:.1f}% mean / {cal.fit['median_abs_error_percent']:.1f}% "
        f"median abs error over {len(cal.measurements)} programs; load "
        f"{cal.conditions['loadavg_before'][0]:.2f} -> {cal.conditions['loadavg_after'][0]:.2f}")
  print(f"wrote {out}")


def _measure_topology() -> None:
  """--topology: measure the local devices, print them, write the file (atomically)."""
  if FLAGS.out:
    raise app.UsageError("--out is for the cost-model calibration; --topology names the file")
  cli.check_out(FLAGS.topology, flag="topology", is_file=True)
  from simulator import runtime, topology_file  # pylint: disable=g-import-not-at-top
  if FLAGS.cpu_devices:
    runtime.configure_cpu_devices(FLAGS.cpu_devices)
  import jax  # pylint: disable=g-import-not-at-top
  from simulator.costmodel import topology_calibration as tc  # pylint: disable=g-import-not-at-top
  try:
    devices = jax.devices(FLAGS.backend) if FLAGS.backend else None
  except RuntimeError as e:  # an unknown or unavailable backend
    raise app.UsageError(f"--backend={FLAGS.backend}: {cli.one_line(e)}") from e
  start = time.time()
  say = (lambda m: print(f"[{time.time() - start:6.1f}s] {m}", file=sys.stderr, flush=True)
         ) if FLAGS.progress else None
  topo, report = tc.measure_topology(
      devices, sizes=tc.QUICK_SIZES if FLAGS.quick else tc.DEFAULT_SIZES,
      repeats=FLAGS.repeats or (3 if FLAGS.quick else 15), progress=say)
  topology_file.to_json(topo, FLAGS.topology, name="local",
                        description=f"measured by go-jax-calibrate --topology on "
                        f"{len(report['device_names'])} {report['backend']} device(s)",
                        device_names=report["device_names"])
  names = report["device_names"]
  print(f"{'device':<8} {'speed':>7} {'GFLOP/s':>8} {'memory GB':>10}")
  for i, n in enumerate(names):
    print(f"{n:<8} {topo.speed[i]:7.3f} {report['flops_per_second'][i] / 1e9:8.1f} "
          f"{topo.mem_capacity[i] / 1e9:10.1f}")
  for link in report["links"]:
    worst = max(abs(e) for e in link["fit_relative_error"])
    print(f"{link['src']} -> {link['dst']}: latency {link['latency'] * 1e6:.1f} us, "
          f"bandwidth {link['bandwidth'] / 1e9:.2f} GB/s (the fit is within {100 * worst:.0f}% "
          f"of each measured size, {link['bytes'][0]}-{link['bytes'][-1]} bytes)")
  print(f"wrote {FLAGS.topology}")


def run():
  """Console-script entry point (`go-jax-calibrate`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
