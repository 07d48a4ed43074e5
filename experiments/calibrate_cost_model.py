r"""Calibrates the roofline cost model on the local JAX backend (simulator.costmodel.calibrate).

Times the microbenchmark programs (matmuls, convolutions, elementwise chains, reductions,
transposes, gathers, scatters, loops, ...) on this machine, fits per-op-class efficiencies and
launch overheads, prints the fitted table and writes the Calibration JSON (atomically).

  python -m experiments.calibrate_cost_model                      # -> results/calibration_cpu.json
  python -m experiments.calibrate_cost_model --quick --out=/tmp/cal.json
"""

from __future__ import annotations

import sys
import time
from typing import Sequence

from absl import app, flags

from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "Calibration JSON path (default: "
                    "results/calibration_<backend>.json).")
flags.DEFINE_bool("quick", False, "A dozen programs at one or two sizes, 3 rounds (seconds; "
                  "for tests and smoke runs, not for validation).")
flags.DEFINE_string("backend", None, "JAX backend (cpu, gpu, ...; default: JAX's default).")
flags.DEFINE_integer("repeats", None, "Interleaved timing rounds (median); default 15, 3 with "
                     "--quick.", lower_bound=1)
flags.DEFINE_bool("progress", True, "Print progress to stderr.")


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  from simulator import costmodel
  if FLAGS.out:
    cli.check_out(FLAGS.out, is_file=True)
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
  out = FLAGS.out or f"results/calibration_{cal.backend}.json"
  cal.save(out)
  print(cal.table())
  print(f"fit: {cal.fit['mape_percent']:.1f}% mean / {cal.fit['median_abs_error_percent']:.1f}% "
        f"median abs error over {len(cal.measurements)} programs; load "
        f"{cal.conditions['loadavg_before'][0]:.2f} -> {cal.conditions['loadavg_after'][0]:.2f}")
  print(f"wrote {out}")


def run():
  """Console-script entry point (`go-jax-calibrate`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
