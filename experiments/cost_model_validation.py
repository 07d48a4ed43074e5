"""Experiment: the calibrated roofline against measured training-step time of the model zoo.

An experiment, not library code (it times programs on the local backend): the launcher is
experiments/validate_cost_model.py; the cost model it checks is `simulator.costmodel`.

For each model (`simulator.zoo`, at one size): compile its jitted training step once, time that
executable (warm-up, then the median of interleaved rounds, block_until_ready; see
`microbench.time_calls`), and predict it: the executable's post-optimisation HLO becomes an
HloGraph (the JAX/HLO front end), `apply_cost_model` fills its costs for the "local" device, and
`simulator.simulate` runs it on one device (`Topology.uniform(1)`, speed 1, overhead 0), every op
placed on device 0 with priority -arange(N), i.e. XLA's own schedule: the ENTRY computation of
a post-optimisation module is printed in execution order. On one device the makespan is the sum
of the op durations. Reported per model: measured and predicted seconds and the error; overall:
the mean absolute percentage error (MAPE) and Spearman's rank correlation.

Page faults: when a step's XLA temp buffer (or an output) is >= 32 MiB, glibc serves it with a
fresh mmap on every call and the step page-faults all of it (about 0.6 ms per MiB on the 2-core
VM this was developed on: WaveNet 4x36 "small" has a 55 MiB temp buffer, a third of its step).
The executable's memory analysis gives those bytes; their calibrated cost is spread over the
ops by output bytes (`roofline.first_touch_costs`).

What the model had to learn about XLA:CPU to get the zoo right (found by comparing per-op times
from `jax.profiler` traces of the steps with the predictions; each became a rule or a
calibration program, never a per-model factor):
  * Code paths, not op types, set the speed: a convolution fused into a YNNPACK fusion, one left
    to Eigen, a depthwise one (10-100x slower per flop) and a weight gradient differ by
    several-fold; a YNN dot with a side < 64 runs at about half the rate of a large one, an
    unfused (Eigen) dot does not (`opclass.REFINE`).
  * Per-call costs are not per-op costs: a call is run inline when it has < 1000 flops, else
    handed to a worker thread, and a call with library or split ops wakes the thread pool;
    single-op microbenchmarks pay these once, a step once, so the fit gives them their own
    terms (calibrate.py), and chains of ops pin the steady-state per-op overhead.
  * XLA's executor runs independent ops concurrently on the pool; programs of many
    independent tiny ops are left out of the calibration (their cost is load dependent, and the
    model is a sequential single-device schedule).
  * A step's ops are slower than the same ops alone (2026-11-25 profiles: BERT's 512x512x128
    matmuls at 145-450 us in the step, 196 us alone; WaveNet's split transposes over 10x), and
    summed op times exceed the time any op runs by 20-30%: independent ops run at once and
    contend for the cores and the thread pool, and operands come from memory, not the caches.
    Two calibrated terms answer it: microbenchmarks read cold operands
    (`microbench.cold_copies`), and the thread-pool ops of a program with independent ops take
    the `contention` factor (`roofline.concurrent` / `contended`), fitted on the synthetic
    training steps of `step_programs`. Before them every zoo model was under-predicted (MAPE
    25%, Spearman 0.965 in one run); with them the error has no common sign.
  * Machine load (other processes on the 2 cores) scales short and long programs differently:
    every timing sample lasts >= 50 ms and microbenchmarks and steps are timed in the same
    interleaved rounds, so the calibration and the validation see the same conditions.
Remaining outliers: the GNMT steps (LSTMs of thousands of tiny ops) vary by up to 40% from one
process to the next (gnmt8: 22.3-32.5 ms in four processes, same machine, same load), more than
the model's error; Transformer-XL and WaveNet stay slightly under-predicted (about -10%).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from simulator.costmodel import opclass as feat
from simulator.costmodel import microbench, roofline
from simulator.costmodel.devices import local_spec


@dataclasses.dataclass(frozen=True)
class StepCase:
  """A compiled training step ready to time and to predict."""
  name: str
  call: Callable     # () -> one step's outputs
  hlo_text: str      # post-optimisation HLO of the executable that `call` runs
  fresh_bytes: float = 0.0  # bytes the allocator maps afresh per call (microbench.fresh_bytes)
  pre_text: str = ""  # pre-optimisation HLO of the same program (with metadata), for fusion


def zoo_case(name: str, size: str = "small", device=None) -> StepCase:
  """Compiles zoo model `name`'s training step at `size` on concrete arguments."""
  import jax
  from simulator import zoo
  z = zoo.build(name, size)
  args = z.concrete_args()
  if device is not None:
    args = jax.device_put(args, device)
  lowered = jax.jit(z.step).lower(*args)
  exe = lowered.compile()
  text = exe.as_text()
  return StepCase(f"{name}/{size}", lambda: exe(*args), text, microbench.fresh_bytes(exe, text),
                  lowered.as_text(dialect="hlo", debug_info=True))


def function_case(name: str, fn, *args) -> StepCase:
  """Any jitted function on concrete arguments (e.g. a hand-written step for tests)."""
  import jax
  lowered = jax.jit(fn).lower(*args)
  exe = lowered.compile()
  text = exe.as_text()
  return StepCase(name, lambda: exe(*args), text, microbench.fresh_bytes(exe, text),
                  lowered.as_text(dialect="hlo", debug_info=True))


def predict(case: StepCase, calibration) -> Dict[str, object]:
  """Simulated single-device makespan of a step under the calibrated local roofline."""
  from simulator import Topology, simulate
  h = feat.hlo_graph(case.hlo_text, case.name)
  spec = local_spec(calibration)
  g = roofline.apply_cost_model(h, spec, calibration, fresh_bytes=case.fresh_bytes)
  n = g.num_nodes
  res = simulate(g, Topology.uniform(1, bandwidth=1.0), np.zeros((1, n), np.int32),
                 -np.arange(n, dtype=np.float64)[None])
  return {"predicted_s": float(res.makespan[0]), "nodes": n, "fresh_bytes": case.fresh_bytes,
          "sum_cost_s": float(g.cost.sum()),
          "class_seconds": roofline.class_breakdown(h, spec, calibration)}


def check_calibration_device(calibration, device) -> None:
  """ValueError unless `calibration` was measured on `device`'s backend and device kind: the
  validation compares its predictions with times measured on `device`, and a calibration of
  another machine kind (a GPU's on a CPU, an A100's on an H100) would be compared silently."""
  mine = (device.platform, str(device.device_kind))
  theirs = (calibration.backend, calibration.device_kind)
  if mine != theirs:
    raise ValueError(f"the calibration was measured on {theirs[0]} ({theirs[1]}), the steps run "
                     f"on {mine[0]} ({mine[1]}): calibrate this machine (go-jax-calibrate) or "
                     f"leave the calibration out to calibrate now")


def error_percent(predicted: float, measured: float, what: str) -> float:
  """100 (predicted - measured) / measured; ValueError naming `what` when the measured time is
  not a finite number > 0 (a degenerate measurement has no relative error)."""
  if not (np.isfinite(measured) and measured > 0):
    raise ValueError(f"{what}: measured time {measured!r} s is not a finite number > 0; "
                     f"cannot compare the prediction {predicted!r} s with it")
  return float(100.0 * (predicted - measured) / measured)


def spearman(x: Sequence[float], y: Sequence[float]) -> Optional[float]:
  """Spearman's rank correlation; None when undefined (fewer than 2 points, constant input)."""
  from scipy import stats
  if len(x) < 2:
    return None
  r = float(stats.spearmanr(x, y).statistic)
  return r if np.isfinite(r) else None


def fmt_spearman(r: Optional[float]) -> str:
  return "n/a" if r is None else f"{r:.3f}"


def validate(cases: List[StepCase], calibration=None, repeats: int = 9,
             calibration_sizes="full", min_sample_s: float = microbench.MIN_SAMPLE_S,
             progress: Optional[Callable[[str], None]] = None, device=None):
  """Measured vs predicted step time for each case, MAPE and Spearman.

  With `calibration=None` the microbenchmarks of `calibration_sizes` are compiled and timed in
  the same interleaved rounds as the steps (so both see the same machine load) and fitted first.

  Returns:
    (report, calibration): a JSON-ready dict and the Calibration used.
  """
  import jax
  from simulator.costmodel.calibrate import fit_calibration, prepare
  if repeats < 5:
    raise ValueError(f"repeats must be >= 5 for a step-time median, got {repeats}")
  if not cases:
    raise ValueError("validate needs at least one step to measure")
  microbench.check_timing(repeats, min_sample_s)
  say = progress or (lambda msg: None)
  micro, leaves = [], []
  device = device or jax.devices()[0]
  if calibration is None:
    micro, leaves = prepare(calibration_sizes, device, say)
  else:
    check_calibration_device(calibration, device)
  for c in cases:  # warm-up: two calls each
    for _ in range(2):
      jax.block_until_ready(c.call())
  load_before = os.getloadavg()
  times = microbench.time_calls([m.call for m in micro] + [c.call for c in cases], repeats,
                                min_sample_s, lambda r, n: say(f"timing round {r}/{n}"))
  load_after = os.getloadavg()
  conditions = {"loadavg_before": list(load_before), "loadavg_after": list(load_after),
                "repeats": repeats, "min_sample_s": min_sample_s, "cpu_count": os.cpu_count(),
                "xla_flags": os.environ.get("XLA_FLAGS", "")}
  if calibration is None:
    say("fitting the calibration")
    calibration = fit_calibration(
        device, micro, leaves, times[:len(micro)],
        dict(conditions, sizes=calibration_sizes if isinstance(calibration_sizes, str)
             else "custom", interleaved_with_validation=True))
  rows = []
  for c, t in zip(cases, times[len(micro):]):
    say(f"predict {c.name}")
    p = predict(c, calibration)
    rows.append({"model": c.name, "measured_s": float(t), "predicted_s": p["predicted_s"],
                 "error_percent": error_percent(p["predicted_s"], float(t), c.name),
                 "nodes": p["nodes"],
                 "class_seconds": p["class_seconds"]})
  meas = [r["measured_s"] for r in rows]
  pred = [r["predicted_s"] for r in rows]
  report = {"rows": rows,
            "mape_percent": float(np.mean([abs(r["error_percent"]) for r in rows])),
            "spearman": spearman(meas, pred), "conditions": conditions,
            "calibration_interleaved": bool(micro)}
  return report, calibration


def table(report: Dict[str, object]) -> str:
  """The per-model table plus MAPE and Spearman as aligned text."""
  lines = [f"{'model':28s} {'measured_ms':>12s} {'predicted_ms':>13s} {'error_%':>8s}"]
  for r in report["rows"]:
    lines.append(f"{r['model']:28s} {r['measured_s'] * 1e3:12.2f} {r['predicted_s'] * 1e3:13.2f}"
                 f" {r['error_percent']:8.1f}")
  lines.append(f"MAPE {report['mape_percent']:.1f}%   Spearman "
               f"{fmt_spearman(report['spearman'])}   "
               f"({len(report['rows'])} models)")
  return "\n".join(lines)


def log_axis(x, y):
  """(lo, hi, x, y, at_floor) for a log-log panel: limits from the positive values only, and
  values <= 0 (a zero prediction: an empty graph, a free op) clipped to the floor `lo`, with
  the mask of the points clipped. Why: a log axis cannot show 0, and matplotlib drops such a
  point with only a warning (and a 0 limit with another), so a plot would hide it."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  both = np.concatenate([x, y])
  pos = both[np.isfinite(both) & (both > 0)]
  lo, hi = (pos.min() / 1.5, pos.max() * 1.5) if pos.size else (1e-3, 1.0)
  at_floor = (x <= 0) | (y <= 0)
  return lo, hi, np.maximum(x, lo), np.maximum(y, lo), at_floor


def floor_label(count: int) -> str:
  """Legend entry of the points `log_axis` clipped to the floor."""
  return f"{count} point{'s' if count != 1 else ''} at 0 (drawn at the axis floor)"


def scatter_panel(ax, x, y, labels, band: float, xlabel: str, ylabel: str) -> None:
  """One log-log panel: points labelled by model family, the y = x line and a +-band area;
  points at 0 are drawn at the axis floor and counted in the legend (`log_axis`)."""
  lo, hi, x, y, at_floor = log_axis(x, y)
  ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="y = x")
  ax.fill_between([lo, hi], [lo * (1 - band), hi * (1 - band)],
                  [lo * (1 + band), hi * (1 + band)], color="0.9", label=f"+-{band:.0%}")
  ax.scatter(x[~at_floor], y[~at_floor], zorder=3)
  if at_floor.any():
    ax.scatter(x[at_floor], y[at_floor], marker="v", color="C3", zorder=4,
               label=floor_label(int(at_floor.sum())))
  for name, a, b in zip(labels, x, y):
    ax.annotate(name.split("/")[0], (a, b), textcoords="offset points", xytext=(4, 3),
                fontsize=7)
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlim(lo, hi)
  ax.set_ylim(lo, hi)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)


def scatter_plot(report: Dict[str, object], path: str, title: str = "") -> str:
  """Predicted vs measured (log-log, y = x line, labelled points) as a PNG, written atomically."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from simulator import fileio
  rows = report["rows"]
  if not rows:
    raise ValueError("scatter_plot: the report has no rows")
  meas = np.array([r["measured_s"] for r in rows]) * 1e3
  pred = np.array([r["predicted_s"] for r in rows]) * 1e3
  fig, ax = plt.subplots(figsize=(6.4, 6.0))
  scatter_panel(ax, meas, pred, [r["model"] for r in rows], 0.25, "measured step time (ms)",
                "predicted step time (ms)")
  ax.set_title(title or f"cost model: MAPE {report['mape_percent']:.1f}%, Spearman "
               f"{fmt_spearman(report['spearman'])}")
  ax.legend(loc="upper left")
  fig.tight_layout()
  with fileio.atomic_open(path, "wb", make_dirs=True) as fh:
    fig.savefig(fh, format="png", dpi=120)
  plt.close(fig)
  return path
