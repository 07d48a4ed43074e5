r"""Validates the calibrated cost model against measured training-step time of the model zoo.

For every zoo model (at --size, default "small"): times the jitted training step on the local
device (warm-up, median of --repeats interleaved rounds, block_until_ready), predicts it with the
calibrated roofline of the "local" device simulated on one device in XLA's schedule (the
experiment's code: experiments/cost_model_validation.py), and reports measured / predicted /
error per model, the MAPE and Spearman's rank correlation. Prints a table; writes
<out>/validation.json and <out>/validation.png (predicted vs measured, log-log), atomically.

  python -m experiments.validate_cost_model --calibration=results/calibration_cpu.json
  python -m experiments.validate_cost_model --models=resnet50,gnmt2 --size=tiny --out=/tmp/v

With --fusion it also validates the fusion model (docs/design.md 4.1): each step's
pre-optimisation graph with XLA's own fusion decisions, fused by the simulator, against the
post-optimisation graph's prediction and the measured time (experiments/fusion_validation.py);
<out>/fusion.json and <out>/fusion.png.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Sequence

from absl import app, flags

from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_list("models", [], "Zoo models to validate (default: all of simulator.zoo).")
flags.DEFINE_enum("size", "small", ["default", "small", "tiny"], "Zoo size setting.")
flags.DEFINE_string("calibration", None, "Calibration JSON; when absent or missing, calibrate "
                    "now, timing the microbenchmarks in the same rounds as the steps (same "
                    "machine load), and save it there (or under --out).")
flags.DEFINE_bool("quick_calibration", False, "When calibrating on the fly, use the quick set "
                  "(refused with an existing --calibration file, which is used as it is).")
flags.DEFINE_string("out", "results/cost_model", "Folder for validation.json and validation.png.")
flags.DEFINE_integer("repeats", 9, "Timed rounds per model (median; >= 5).", lower_bound=5)
flags.DEFINE_bool("progress", True, "Print progress to stderr.")
flags.DEFINE_bool("save_hlo", False, "Also write each step's post-optimisation HLO text to "
                  "<out>/hlo/<model>.txt (for offline analysis of the predictions).")
flags.DEFINE_bool("fusion", False, "Also validate the fusion model: pre-optimisation graph + "
                  "XLA's fuse decisions vs the post graph and the measured time.")


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  cli.check_out(FLAGS.out, files=("validation.json", "validation.png", "fusion.json",
                                  "fusion.png"))
  from simulator import costmodel, fileio, zoo
  from experiments import cost_model_validation as validation
  start = time.time()

  def progress(msg: str) -> None:
    if FLAGS.progress:
      print(f"[{time.time() - start:6.1f}s] {msg}", file=sys.stderr, flush=True)

  names = FLAGS.models or sorted(zoo.available())
  cli.check_zoo_models(names)
  cal_path, cal = FLAGS.calibration, None
  if cal_path and os.path.exists(cal_path):
    if FLAGS.quick_calibration:  # it would be ignored: the file is used as it is
      raise app.UsageError(f"--quick_calibration applies only when calibrating now, but "
                           f"--calibration={cal_path} exists and would be used as it is: drop "
                           f"one of the two")
    import jax
    try:
      cal = costmodel.Calibration.load(cal_path)
      validation.check_calibration_device(cal, jax.devices()[0])
    except ValueError as e:
      raise app.UsageError(f"--calibration={cal_path}: {e}") from e
  elif cal_path:  # written after the calibration: refused now, not minutes on
    cli.check_out(cal_path, flag="calibration", is_file=True)
  cases = []
  for k, name in enumerate(names):
    progress(f"compile {k + 1}/{len(names)} {name}/{FLAGS.size}")
    try:
      cases.append(validation.zoo_case(name, FLAGS.size))
    except ValueError as e:
      raise app.UsageError(f"--models: {name}: {e}") from e
  if cal is None:
    progress("no calibration file: calibrating now, timed in the same rounds as the steps")
  report, fitted = validation.validate(
      cases, cal, repeats=FLAGS.repeats, progress=progress,
      calibration_sizes="quick" if FLAGS.quick_calibration else "full")
  if cal is None:
    cal_path = cal_path or os.path.join(FLAGS.out, f"calibration_{fitted.backend}.json")
    fitted.save(cal_path)
    print(fitted.table())
  cal = fitted
  report.update(calibration=os.path.abspath(cal_path), size=FLAGS.size,
                calibration_conditions=dict(cal.conditions), calibration_date=cal.date)
  fileio.write_json(os.path.join(FLAGS.out, "validation.json"), report)
  if FLAGS.save_hlo:
    for c in cases:
      path = os.path.join(FLAGS.out, "hlo", c.name.replace("/", "_") + ".txt")
      with fileio.atomic_open(path, "w", make_dirs=True) as fh:
        fh.write(c.hlo_text)
  validation.scatter_plot(report, os.path.join(FLAGS.out, "validation.png"),
                        f"{FLAGS.size} zoo steps on {cal.backend}: MAPE "
                        f"{report['mape_percent']:.1f}%, Spearman "
                        f"{validation.fmt_spearman(report['spearman'])}")
  print(validation.table(report))
  if FLAGS.fusion:
    from experiments import fusion_validation
    progress("fusion: predicting pre graphs with XLA's fusion decisions")
    report["fusion"] = fusion_validation.fusion_report(cases, report, cal)
    fileio.write_json(os.path.join(FLAGS.out, "fusion.json"), report)
    f = report["fusion"]
    fusion_validation.fusion_plot(
        report, os.path.join(FLAGS.out, "fusion.png"),
        f"{FLAGS.size} zoo steps on {cal.backend}: pre + XLA fusion vs post MAPE "
        f"{f['mape_xla_vs_post_percent']:.1f}%, vs measured "
        f"{f['mape_xla_vs_measured_percent']:.1f}%")
    print(fusion_validation.fusion_table(report))
  load = report["conditions"]
  print(f"load average {load['loadavg_before'][0]:.2f} -> {load['loadavg_after'][0]:.2f} "
        f"(calibration: {cal.conditions.get('loadavg_before', [0])[0]:.2f} -> "
        f"{cal.conditions.get('loadavg_after', [0])[0]:.2f}); wrote "
        f"{os.path.abspath(FLAGS.out)}/validation.json, validation.png")


def run():
  """Console-script entry point (`go-jax-validate-cost-model`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
