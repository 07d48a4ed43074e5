r"""The fidelity study: predicted vs measured step time of placed programs on the local devices.

For each zoo model (--size, default small) and each device count (--devices, default 2,4): the
placements of --methods on the measured local topology (random with --random_seeds seeds) are run
for real with `go_jax.execute.place_program` and timed (interleaved rounds, median), and
predicted by the simulator with the calibrated local cost model and XLA's fusion decisions
(experiments/placement_fidelity.py says exactly how). Prints per (model, D) Spearman and MAPE and
writes to --out: results.json (every placement; resumable: finished models are skipped),
results.md, fidelity.png (scatter), calibration.json and topology_<D>.json (what predicted;
measured as `go-jax-calibrate --topology` does unless the file is already there).

On a CPU-only machine --cpu_devices (default: the largest --devices) virtual CPU devices are
made before JAX starts; they share the host's cores. --backends=gpu,cpu places over the devices
of several backends, in that order (one GPU plus --cpu_devices virtual CPU devices: D=2 is the
GPU and one CPU device); the cost model is calibrated on the first device's backend.

  python -m experiments.validate_placements                                # 6 models, 2 and 4
  python -m experiments.validate_placements --models=gnmt2 --size=tiny --devices=2 --out=/tmp/v
  python -m experiments.validate_placements --calibration=cal.json --repeats=9
  python -m experiments.validate_placements --backends=gpu,cpu --cpu_devices=3 --devices=2,4
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from typing import Sequence

from absl import app, flags

from experiments import cli

LAUNCHER = "validate_placements"
DEFAULT_MODELS = ("bert_base", "gnmt2", "gpt2_small", "resnet50", "transformer_xl2",
                  "wavenet_2x18")
DEFAULT_METHODS = ("single", "random", "round_robin", "heft", "m_etf", "m_sct", "metis",
                   "expert", "brkga", "go_hint")

FLAGS = flags.FLAGS
flags.DEFINE_list("models", list(DEFAULT_MODELS), "Zoo models.")
flags.DEFINE_enum("size", "small", ["default", "small", "tiny"], "Zoo size setting.")
flags.DEFINE_list("devices", ["2", "4"], "Device counts to place over.")
flags.DEFINE_list("methods", list(DEFAULT_METHODS), "Methods whose placements are run "
                  "('random' gives --random_seeds placements).")
flags.DEFINE_integer("random_seeds", 3, "Random placements per model and device count.",
                     lower_bound=0)
flags.DEFINE_integer("brkga_budget", 2000, "Simulator evaluations of brkga.", lower_bound=1)
flags.DEFINE_float("go_finetune_seconds", 0.0, "Fine-tuning of go_hint (0: zero-shot).",
                   lower_bound=0.0)
flags.DEFINE_integer("repeats", 7, "Timed rounds (median).", lower_bound=3)
flags.DEFINE_integer("cpu_devices", None, "Virtual CPU devices to expose (default: the largest "
                     "--devices).", lower_bound=1,
                     upper_bound=1024)  # = simulator.runtime.MAX_CPU_DEVICES
flags.DEFINE_list("backends", [], "JAX backends whose devices are placed over, in this order "
                  "(e.g. gpu,cpu); default: the devices of JAX's default backend.")
flags.DEFINE_string("calibration", None, "Cost-model calibration JSON (go-jax-calibrate); "
                    "default: <out>/calibration.json, calibrated now (quick set) if missing.")
flags.DEFINE_integer("seed", 0, "Seed of the methods.",
                     lower_bound=0)
flags.DEFINE_string("out", "results/placement_fidelity", "Output folder.")
flags.DEFINE_bool("progress", True, "Print progress to stderr.")


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  try:
    counts = sorted({int(d) for d in FLAGS.devices})
  except ValueError as e:
    raise app.UsageError(f"--devices: integers expected, got {FLAGS.devices}") from e
  if not counts or counts[0] < 1:
    raise app.UsageError(f"--devices: positive counts expected, got {FLAGS.devices}")
  cli.check_out(FLAGS.out)
  from simulator import runtime
  runtime.configure_cpu_devices(FLAGS.cpu_devices or counts[-1])
  import jax
  from experiments import cost_model_validation as validation
  from experiments import placement_fidelity as fidelity
  from go_jax import methods
  from simulator import costmodel, fileio, topology_file
  from simulator.costmodel import topology_calibration
  start = time.time()

  def progress(msg: str) -> None:
    if FLAGS.progress:
      print(f"[{time.time() - start:7.1f}s] {msg}", file=sys.stderr, flush=True)

  devices = local_devices(jax, FLAGS.backends)
  if len(devices) < counts[-1]:
    raise app.UsageError(f"--devices={counts[-1]} but JAX has {len(devices)} device(s) "
                         f"({', '.join(sorted({d.platform for d in devices}))}); raise "
                         f"--cpu_devices")
  cli.check_zoo_models(FLAGS.models)
  bad = sorted(set(FLAGS.methods) - set(methods.available()))
  if bad:
    raise app.UsageError(f"--methods: unknown or unavailable {bad}")
  if len(set(FLAGS.methods)) != len(FLAGS.methods):
    raise app.UsageError(f"--methods={','.join(FLAGS.methods)}: a method is given twice")
  if not [m for m in FLAGS.methods if m != "random"] and not FLAGS.random_seeds:
    raise app.UsageError(f"--methods={','.join(FLAGS.methods)} with --random_seeds=0 gives no "
                         "placement to run")
  settings = {"size": FLAGS.size, "devices": counts, "methods": list(FLAGS.methods),
              "random_seeds": FLAGS.random_seeds, "brkga_budget": FLAGS.brkga_budget,
              "go_finetune_seconds": FLAGS.go_finetune_seconds, "repeats": FLAGS.repeats,
              "seed": FLAGS.seed, "platform": devices[0].platform}
  if FLAGS.backends:  # only then: result files of earlier runs stay resumable
    settings["backends"] = list(FLAGS.backends)
    settings["device_names"] = [f"{d.platform}{d.id}" for d in devices[:counts[-1]]]
  json_path = os.path.join(FLAGS.out, "results.json")
  try:
    store = cli.load_resumable(json_path, LAUNCHER, settings)
  except ValueError as e:
    raise app.UsageError(cli.one_line(e)) from e
  cells = dict(store.get("cells", {}))

  cal_path = FLAGS.calibration or os.path.join(FLAGS.out, "calibration.json")
  if os.path.exists(cal_path):
    try:
      cal = costmodel.Calibration.load(cal_path)
      validation.check_calibration_device(cal, devices[0])  # predicts what devices[0] runs
    except ValueError as e:
      raise app.UsageError(f"--calibration={cal_path}: {cli.one_line(e)}") from e
  else:
    progress(f"no calibration at {cal_path}: calibrating the cost model now (quick set)")
    cal = costmodel.calibrate(backend=devices[0].platform, sizes="quick", progress=progress)
    cal.save(cal_path)
  # Every prediction depends on the calibration: cells made under another one are not reused.
  with open(cal_path, "rb") as fh:
    settings["calibration_sha256"] = hashlib.sha256(fh.read()).hexdigest()
  made_with = store.get("settings", {}).get("calibration_sha256")
  if cells and made_with != settings["calibration_sha256"]:
    raise app.UsageError(
        f"{json_path}: its cells were made with "
        + ("another calibration" if made_with else "a calibration it did not record")
        + f" than {cal_path}; use another --out or the calibration they were made with")
  topologies = {}
  for d in counts:  # measured once per output folder, so a resumed run predicts alike
    path = os.path.join(FLAGS.out, f"topology_{d}.json")
    if not os.path.exists(path):
      progress(f"measuring the topology of {d} local device(s)")
      topo, _ = topology_calibration.measure_topology(devices[:d])  # go-jax-calibrate's
      topology_file.to_json(topo, path, name=f"local{d}",
                            description=f"measured by {LAUNCHER} on {d} device(s)")
    topologies[d] = topology_file.from_json(path)

  options = {"brkga": {"evaluations": FLAGS.brkga_budget},
             "go_hint": {"finetune_seconds": FLAGS.go_finetune_seconds}}
  todo = [m for m in FLAGS.models if f"{m}/{FLAGS.size}" not in cells]
  for k, name in enumerate(todo):
    t0 = time.time()
    progress(f"model {k + 1}/{len(todo)} {name}/{FLAGS.size}: building, costing, tracing")
    case = fidelity.model_case(name, FLAGS.size, cal)
    rows = fidelity.run_model(case, topologies, FLAGS.methods, FLAGS.random_seeds,
                              FLAGS.repeats, devices, FLAGS.seed, options, progress)
    cells[case.name] = rows
    fileio.write_json(json_path, {"launcher": LAUNCHER, "settings": settings, "cells": cells,
                                  "machine": cli.machine_info()})
    done = time.time() - t0
    progress(f"{case.name} done in {done:.0f} s; ETA "
             f"{cli.duration_text(done * (len(todo) - k - 1))}")
  rows = [r for m in FLAGS.models for r in cells.get(f"{m}/{FLAGS.size}", [])]
  summary = fidelity.summarize(rows)
  md = (fidelity.table(summary) + "\n\n" + fidelity.rows_table(rows) + "\n")
  with fileio.atomic_open(os.path.join(FLAGS.out, "results.md"), "w", make_dirs=True) as fh:
    fh.write(md)
  plot = fidelity.scatter_plot(rows, summary, os.path.join(FLAGS.out, "fidelity.png"))
  fileio.write_json(json_path, {"launcher": LAUNCHER, "settings": settings, "cells": cells,
                                "summary": summary, "machine": cli.machine_info()})
  print(fidelity.table(summary))
  print(f"wrote {json_path}, {os.path.join(FLAGS.out, 'results.md')}, {plot}")


def local_devices(jax, backends: Sequence[str]) -> list:
  """The devices to place over: those of each of `backends` in turn (e.g. ["gpu", "cpu"]),
  or, when empty, those of JAX's default backend.

  Raises:
    app.UsageError: a backend named twice or not available.
  """
  if not backends:
    return list(jax.devices())
  names = [b.strip().lower() for b in backends]
  if len(set(names)) != len(names):
    raise app.UsageError(f"--backends: each backend once, got {list(backends)}")
  devices = []
  for b in names:
    try:
      devices += list(jax.devices(b))
    except RuntimeError as e:
      raise app.UsageError(f"--backends: backend {b!r} is not available: "
                           f"{cli.one_line(e)}") from e
  return devices


def run():
  """Entry point (`python -m experiments.validate_placements`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
