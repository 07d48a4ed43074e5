"""Calibrates the roofline on the local JAX backend: microbenchmarks -> fitted `Calibration`.

Procedure (`calibrate`):
  1. Build and compile the microbenchmark programs (`microbench`), time them (median of
     interleaved rounds after warm-up, block_until_ready), and turn each executable's
     post-optimisation HLO into roofline leaves (`features.hlo_features`), so that the fit sees
     the ops exactly as the cost model will (fusions, XLA:CPU partitions, extra transposes).
  2. Peaks: the best f32 (and bf16) FLOP/s of the single-dot programs, the best streaming rate
     (bytes_accessed / time) of the elementwise programs. These define the "local" DeviceSpec;
     efficiencies are fractions of them.
  3. Fit: a program's predicted time is the dispatch overhead of one jitted call plus the sum of
     the roofline durations of its leaves (ops run one after the other on one device). Free
     parameters: per op class present in the programs, log flops_eff, log bytes_eff and the
     overhead; globally the two dispatch overheads, the transcendental weight (>= 1) and the
     parallel efficiency (in [0, 1]). Robust non-linear least squares
     (`scipy.optimize.least_squares`, trust-region reflective with bounds, soft-L1 loss with a
     10% scale) on the residuals log(predicted) - log(measured): errors are relative, the
     sizes span six decades, and a program disturbed by the machine's load weighs like an
     outlier, not a square. The max of the roofline has no gradient through the bound that
     does not bind, so the fit starts from the documented defaults with max(a, b) smoothed to
     (a^p + b^p)^(1/p), p = 2 (plain least squares) then 8, and ends with the hard max
     (continuation; each stage starts where the previous ended), from two starting per-op
     overheads (0.5 and 5 us); the lower final cost wins. The dispatch overhead has two
     values: XLA:CPU runs a program of under 1000 flops inline in the calling thread and any
     other on its worker thread (PjRt's "cheap computation" rule), a thread hand-off per call;
     a call whose program has an op that runs on the intra-op thread pool (library dots and
     convs, split loop fusions) also wakes the pool once, a third value. These are per call,
     not per op: a training step pays them once, so they are not part of any op's cost.
     Programs of many independent tiny ops are deliberately absent: XLA:CPU's executor fans
     independent ops out to its thread pool, a per-op cost that depends on the machine's
     load and that a sequential single-device schedule does not represent.
     A program whose temp buffer or an output is >= 32 MiB pays, per call, the page faults of
     that freshly mapped memory: a fitted cost per byte (`first_touch`, from the
     `fresh_output` programs), outside the op durations. In a program with independent ops
     (`roofline.concurrent`: the synthetic training steps of `step_programs`, and a few
     microbenchmarks such as a conv's two gradients) the thread-pool ops take one more
     parameter, the `contention` factor (in [1, 3]). A weak prior (`OVERHEAD_PRIOR`) keeps
     the per-op overheads of classes seen in few programs from growing to hundreds of us.
     Every program reads cold operands (`microbench.cold_copies`).
  4. A parameter counts as fitted when the data move it (its Jacobian column is not ~0: e.g. a
     class that is never compute bound in the programs leaves flops_eff undetermined); the
     others are set to `roofline.DEFAULT_FLOPS_EFF` / `DEFAULT_BYTES_EFF` (or, where the default
     would change a program's predicted time, to the value nearest it that changes none) and
     are flagged in `Calibration.fitted`. `launch_overhead` is the median of the fitted class overheads above 1 ns.
"""

from __future__ import annotations

import datetime
import os
import platform
from typing import Callable, Dict, List, Optional

import numpy as np

from simulator.costmodel import opclass as feat
from simulator.costmodel import microbench, roofline
from simulator.costmodel.calibration import (CONTENTION_BOUNDS, DISPATCH_BOUNDS, EFF_BOUNDS,
                                              FIRST_TOUCH_BOUNDS, OVERHEAD_BOUNDS, TW_BOUNDS,
                                              Calibration)

US = 1e-6
# Dots and convs stream their operands at no less than half the measured bandwidth: without this
# floor the fit would use their memory term as a size-dependent overhead.
COMPUTE_BYTES_EFF_MIN = 0.5
# A weak prior on the per-op overheads: a residual of OVERHEAD_PRIOR x overhead / OVERHEAD_SCALE
# per class. Without it a class present in few programs can take a fixed cost of hundreds of us
# to absorb one badly fitted program (conv_filter did: 190 us per op, so AmoebaNet's 29 filter
# gradients were predicted at 7 ms instead of 0.35), a cost every op of that class then pays.
OVERHEAD_PRIOR = 0.1
OVERHEAD_SCALE = 50e-6
SOFT_L1_SCALE = 0.1               # residuals (log ratio) beyond ~10% count linearly, not squared
IDENTIFIED = 1e-3                 # |d residual / d log param| summed over programs
INLINE_FLOPS = 1000               # XLA:CPU runs programs under this many flops inline
# Ops that run on XLA:CPU's thread pool (library dots / convs; split loop fusions): a call that
# has one wakes the pool once.
POOL_CLASSES = roofline.POOL_CLASSES
COMPUTE_CLASSES = POOL_CLASSES + ("dot_small",)
# Classes that share one fitted per-op overhead (each class its own: tying them, e.g. all library
# kernels to one value, was tried and fits the grouped convolutions' large fixed cost badly).
OVERHEAD_GROUPS = {c: c for c in feat.OP_CLASSES}
# Fit stages: (soft-max exponent, loss); None = the roofline's hard max.
STAGES = ((2.0, "linear"), (8.0, "soft_l1"), (None, "soft_l1"))
START_OVERHEADS = (0.5e-6, 5e-6)  # initial per-op overheads of the starts
X_SCALE = 1.0
MAX_NFEV = 300                    # function evaluations per stage and start (the fit takes ~1 min)


def _device(backend: Optional[str]):
  import jax
  try:
    return jax.devices(backend)[0]
  except RuntimeError as e:
    raise ValueError(f"JAX backend {backend!r} is not available: {e}") from e


def _mem_capacity(device) -> float:
  stats = device.memory_stats() if hasattr(device, "memory_stats") else None
  if stats and stats.get("bytes_limit"):
    return float(stats["bytes_limit"])
  return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _peaks(compiled, leaves, times):
  """Best single-op FLOP/s per dtype among the dot programs, and the best streaming bytes/s."""
  best: Dict[str, float] = {}
  bw = 0.0
  for c, lv, t in zip(compiled, leaves, times):
    work = lv.weight > 0
    cls = {feat.OP_CLASSES[k] for k in lv.op_class[work]} - {"free"}
    if cls == {"dot"}:
      for d in np.unique(lv.dtype):
        name = feat.NODE_DTYPES[d]
        name = "f32" if name == "other" else name
        best[name] = max(best.get(name, 0.0), float((lv.flops * lv.weight).sum() / t))
    if cls == {"elementwise"} and c.program.target == "elementwise":
      bw = max(bw, float((lv.bytes * lv.weight).sum() / t))
  if "f32" not in best or bw <= 0:
    raise ValueError("calibration needs at least one f32 matmul program and one elementwise "
                     "program (e.g. sizes with 'matmul' and 'axpy')")
  return best, bw


class _Model:
  """Parameter vector <-> roofline tables, and the predicted time of every program."""

  def __init__(self, leaves: feat.OpLeaves, program_of: np.ndarray, num_programs: int,
               peak: np.ndarray, bandwidth: float, fresh: np.ndarray, concurrent: np.ndarray):
    self.leaves, self.program_of, self.num = leaves, program_of, num_programs
    self.fresh = np.asarray(fresh, np.float64)  # (P,) bytes mapped afresh per call
    concurrent = np.asarray(concurrent, bool)  # (P,) the program has independent ops
    # (M,) thread-pool leaves of concurrent programs: their durations take the contention factor
    self.contended = roofline.pooled(leaves) & concurrent[program_of]
    self.has_concurrent = bool(self.contended.any())
    flops = np.bincount(program_of, weights=leaves.flops * leaves.weight, minlength=num_programs)
    self.inline = flops < INLINE_FLOPS
    self.pool = np.bincount(program_of, weights=roofline.pooled(leaves).astype(float),
                            minlength=num_programs) > 0
    self.peak, self.bandwidth = peak, bandwidth
    present = np.unique(leaves.op_class[leaves.weight > 0])
    self.classes = [c for c in present if feat.OP_CLASSES[c] != "free"]
    self.groups = sorted({OVERHEAD_GROUPS[feat.OP_CLASSES[c]] for c in self.classes})
    self.has_trans = bool(np.any(leaves.transcendentals > 0))
    self.has_parts = bool(np.any(leaves.partitions > 1))

  def x0_bounds(self, overhead0: float):
    """Efficiencies in log space; overheads linear, in microseconds (a log overhead near 0
    has no gradient and would stick there). Layout: per class (log flops_eff, log bytes_eff),
    per overhead group the overhead, then the contention factor, the first-touch cost (ms per
    MiB), the three dispatch overheads, the transcendental weight and the parallel
    efficiency."""
    x0, lo, hi = [], [], []
    for c in self.classes:
      name = feat.OP_CLASSES[c]
      floor = COMPUTE_BYTES_EFF_MIN if name in COMPUTE_CLASSES else EFF_BOUNDS[0]
      x0 += [np.log(roofline.DEFAULT_FLOPS_EFF[name]),
             np.log(max(roofline.DEFAULT_BYTES_EFF[name], floor))]
      lo += [np.log(EFF_BOUNDS[0]), np.log(floor)]
      hi += [np.log(EFF_BOUNDS[1])] * 2
    x0 += [overhead0 / US] * len(self.groups)
    lo += [OVERHEAD_BOUNDS[0] / US] * len(self.groups)
    hi += [OVERHEAD_BOUNDS[1] / US] * len(self.groups)
    x0 += [1.2, 0.3, 10.0, 20.0, 50.0, 2.0, 0.5]
    lo += [CONTENTION_BOUNDS[0], 0.0] + [DISPATCH_BOUNDS[0] / US] * 3 + [TW_BOUNDS[0], 0.0]
    hi += [CONTENTION_BOUNDS[1], FIRST_TOUCH_BOUNDS[1] * 2**20 / 1e-3] + [
        DISPATCH_BOUNDS[1] / US] * 3 + [TW_BOUNDS[1], 1.0]
    return np.array(x0), (np.array(lo), np.array(hi))

  def tables(self, x):
    C, k = len(feat.OP_CLASSES), 2 * len(self.classes)
    f_eff = np.array([roofline.DEFAULT_FLOPS_EFF[c] for c in feat.OP_CLASSES])
    b_eff = np.array([roofline.DEFAULT_BYTES_EFF[c] for c in feat.OP_CLASSES])
    over = np.zeros(C)
    for j, c in enumerate(self.classes):
      f_eff[c], b_eff[c] = np.exp(x[2 * j:2 * j + 2])
      over[c] = x[k + self.groups.index(OVERHEAD_GROUPS[feat.OP_CLASSES[c]])] * US
    dispatch = np.where(self.inline, x[-5], np.where(self.pool, x[-3], x[-4])) * US
    return f_eff, b_eff, over, dispatch, x[-2], x[-1]

  def first_touch(self, x) -> float:
    """Seconds per byte of a freshly mapped buffer (the parameter is in ms per MiB)."""
    return x[-6] * 1e-3 / 2**20

  def prior(self, x) -> np.ndarray:
    """Residuals of the weak prior on the per-op overheads (one per overhead group)."""
    k = 2 * len(self.classes)
    return OVERHEAD_PRIOR * x[k:k + len(self.groups)] / (OVERHEAD_SCALE / US)

  def contention(self, x) -> float:
    return float(x[-7]) if self.has_concurrent else 1.0

  def predict(self, x, smooth=None) -> np.ndarray:
    f_eff, b_eff, over, dispatch, tw, par = self.tables(x)
    t = roofline.leaf_durations(self.leaves, self.peak, self.bandwidth, over, f_eff, b_eff,
                                tw, par, smooth)
    t = np.where(self.contended, t * self.contention(x), t)
    ops = np.bincount(self.program_of, weights=t * self.leaves.weight, minlength=self.num)
    return dispatch + self.fresh * self.first_touch(x) + ops


UNCHANGED = 1e-6  # relative change of every program's predicted time that counts as none


def _undetermined_to_defaults(model: "_Model", x: np.ndarray, jac_norm: np.ndarray,
                              bounds) -> np.ndarray:
  """`x` with each efficiency the data do not determine (Jacobian column ~0) moved to its
  documented default, or as near it as leaves every program's predicted time unchanged
  (within UNCHANGED; bisection in log space): such a number sits wherever the smoothed stages
  left it (an elementwise flops_eff of 0.04 where the default is 0.25), which is no
  measurement, while `Calibration.fitted` marks it as the default. A bound that does not bind
  on these programs can still bind on others (e.g. a compute-heavy elementwise op)."""
  x = np.array(x, np.float64)
  ref = model.predict(x)
  lo, hi = bounds

  def same(y):
    return bool(np.all(np.abs(model.predict(y) / ref - 1.0) <= UNCHANGED))

  for j, c in enumerate(model.classes):
    name = feat.OP_CLASSES[c]
    for k, default in ((2 * j, roofline.DEFAULT_FLOPS_EFF[name]),
                       (2 * j + 1, roofline.DEFAULT_BYTES_EFF[name])):
      if jac_norm[k] > IDENTIFIED:
        continue
      def at(v, k=k):
        y = x.copy()
        y[k] = v
        return y

      ok, bad = x[k], float(np.clip(np.log(default), lo[k], hi[k]))
      if same(at(bad)):
        ok = bad
      else:  # ok fits the programs as the fit does, bad does not: bisect between them
        while abs(bad - ok) > 1e-4:
          mid = 0.5 * (ok + bad)
          ok, bad = (mid, bad) if same(at(mid)) else (ok, mid)
      x[k] = ok
  return x


def fit(leaves: List[feat.OpLeaves], times: np.ndarray, peak_flops: Dict[str, float],
        bandwidth: float, fresh: Optional[np.ndarray] = None,
        concurrent: Optional[np.ndarray] = None):
  """Fits the roofline parameters to measured program times (see the module docstring).

  Returns (model tables dict, per-parameter identified flags, predicted times (P,)).
  """
  from scipy import optimize
  if len(leaves) != len(times) or not len(times):
    raise ValueError(f"fit needs one time per program, got {len(leaves)} programs and "
                     f"{len(times)} times")
  if np.any(~np.isfinite(times)) or np.any(np.asarray(times) <= 0):
    raise ValueError("fit: measured times must be finite and > 0")
  flat, graph_of = feat.OpLeaves.concat(leaves)
  program_of = graph_of  # one graph per program
  peak = roofline.peaks_by_dtype(peak_flops)
  fresh = np.zeros(len(times)) if fresh is None else np.asarray(fresh, np.float64)
  concurrent = (np.zeros(len(times), bool) if concurrent is None
                else np.asarray(concurrent, bool))
  model = _Model(flat, program_of, len(times), peak, bandwidth, fresh, concurrent)
  _, bounds = model.x0_bounds(overhead0=0.0)
  log_t = np.log(np.asarray(times, np.float64))
  best = None
  for overhead0 in START_OVERHEADS:  # a few starts; the best final cost wins
    x, _ = model.x0_bounds(overhead0=overhead0)
    for smooth, loss in STAGES:  # continuation: soft maxima first, the roofline's hard max last
      res = optimize.least_squares(lambda x, p=smooth: np.concatenate(
                                       [np.log(model.predict(x, p)) - log_t, model.prior(x)]), x,
                                   bounds=bounds, loss=loss, f_scale=SOFT_L1_SCALE,
                                   method="trf", x_scale=X_SCALE, max_nfev=MAX_NFEV,
                                   ftol=1e-10, xtol=1e-10, gtol=1e-10)
      x = res.x
    if best is None or res.cost < best.cost:
      best = res
  res = best
  jac_norm = np.abs(res.jac).sum(axis=0)
  x = _undetermined_to_defaults(model, res.x, jac_norm, bounds)
  f_eff, b_eff, over, dispatch, tw, par = model.tables(x)
  classes, fitted = {}, {}
  k = 2 * len(model.classes)
  for j, c in enumerate(model.classes):
    name = feat.OP_CLASSES[c]
    g = k + model.groups.index(OVERHEAD_GROUPS[name])
    classes[name] = {"flops_eff": float(f_eff[c]), "bytes_eff": float(b_eff[c]),
                     "overhead": float(over[c])}
    fitted[name] = {"flops_eff": bool(jac_norm[2 * j] > IDENTIFIED),
                    "bytes_eff": bool(jac_norm[2 * j + 1] > IDENTIFIED),
                    "overhead": bool(jac_norm[g] > IDENTIFIED)}
  globals_fitted = {"inline_dispatch_overhead": bool(jac_norm[-5] > IDENTIFIED),
                    "dispatch_overhead": bool(jac_norm[-4] > IDENTIFIED),
                    "pool_dispatch_overhead": bool(jac_norm[-3] > IDENTIFIED),
                    "transcendental_weight": model.has_trans and bool(jac_norm[-2] > IDENTIFIED),
                    "parallel_efficiency": model.has_parts and bool(jac_norm[-1] > IDENTIFIED),
                    "first_touch": bool(np.any(fresh > 0)) and bool(jac_norm[-6] > IDENTIFIED),
                    "contention": model.has_concurrent and bool(jac_norm[-7] > IDENTIFIED)}
  fitted_overheads = [v["overhead"] for k, v in classes.items()
                      if fitted[k]["overhead"] and v["overhead"] > 0]
  tables = {
      "classes": classes, "fitted": fitted, "globals_fitted": globals_fitted,
      "dispatch_overhead": float(x[-4] * US),
      "inline_dispatch_overhead": float(x[-5] * US),
      "pool_dispatch_overhead": float(x[-3] * US),
      "transcendental_weight": float(tw) if model.has_trans else 1.0,
      "parallel_efficiency": float(par) if model.has_parts else 0.0,
      # (of those above 1 ns: overheads fitted to their bound 0 would drag it to 0, and the
      # class overheads are charged as ratios to it: `Calibration.roofline_params`)
      "launch_overhead": (float(np.median([o for o in fitted_overheads if o > 1e-9]))
                          if any(o > 1e-9 for o in fitted_overheads) else 1e-6),
      "first_touch": float(model.first_touch(x)) if np.any(fresh > 0) else 0.0,
      "contention": model.contention(x),
      "status": res.message, "nfev": int(res.nfev),
  }
  return tables, model.predict(x)


def prepare(sizes="full", device=None, progress: Optional[Callable[[str], None]] = None):
  """Compiles the microbenchmarks of `sizes` on `device`: (compiled programs, their leaves)."""
  say = progress or (lambda msg: None)
  progs = microbench.programs(sizes)
  compiled, leaves = [], []
  for k, p in enumerate(progs):
    say(f"compile {k + 1}/{len(progs)} {p.name}")
    c = microbench.compile_program(p, device)
    compiled.append(c)
    leaves.append(feat.hlo_features(feat.hlo_graph(c.hlo_text, p.name)))
  return compiled, leaves


def fit_calibration(device, compiled, leaves, times, conditions: Dict) -> Calibration:
  """The Calibration of measured microbenchmark times (see the module docstring)."""
  times = np.asarray(times, np.float64)
  peak_flops, bandwidth = _peaks(compiled, leaves, times)
  concurrent = np.array([roofline.concurrent(feat.hlo_graph(c.hlo_text, c.program.name), lv)
                         for c, lv in zip(compiled, leaves)], bool)
  tables, predicted = fit(leaves, times, peak_flops, bandwidth,
                          np.array([c.fresh_bytes for c in compiled]), concurrent)
  rel = predicted / times - 1.0
  measurements = [{"name": c.program.name, "target": c.program.target,
                   "measured_s": float(t), "predicted_s": float(q)}
                  for c, t, q in zip(compiled, times, predicted)]
  return Calibration(
      backend=device.platform, device_kind=str(device.device_kind),
      date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      peak_flops=peak_flops, mem_bandwidth=bandwidth, mem_capacity=_mem_capacity(device),
      launch_overhead=tables["launch_overhead"], dispatch_overhead=tables["dispatch_overhead"],
      transcendental_weight=tables["transcendental_weight"],
      parallel_efficiency=tables["parallel_efficiency"], classes=tables["classes"],
      first_touch=tables["first_touch"], contention=tables["contention"],
      fitted=tables["fitted"], host=platform.node(),
      conditions=dict(conditions, cpu_count=os.cpu_count(),
                      xla_flags=os.environ.get("XLA_FLAGS", ""), programs=len(compiled)),
      fit={"method": "scipy.optimize.least_squares(trf, soft_l1, f_scale="
                     f"{SOFT_L1_SCALE}) on log(predicted / measured)",
           "status": tables["status"], "nfev": tables["nfev"],
           "globals_fitted": tables["globals_fitted"],
           "inline_dispatch_overhead": tables["inline_dispatch_overhead"],
           "pool_dispatch_overhead": tables["pool_dispatch_overhead"],
           "mape_percent": float(100 * np.mean(np.abs(rel))),
           "median_abs_error_percent": float(100 * np.median(np.abs(rel)))},
      measurements=measurements)


def calibrate(backend: Optional[str] = None, sizes="full", repeats: int = 15,
              min_sample_s: float = microbench.MIN_SAMPLE_S,
              progress: Optional[Callable[[str], None]] = None) -> Calibration:
  """Times the microbenchmarks on `backend` (None: JAX's default) and fits a Calibration.

  Args:
    backend: "cpu", "gpu", ... (jax.devices(backend)[0] runs everything).
    sizes: a `microbench.SIZE_PRESETS` name ("full", "quick") or {benchmark: sizes}.
    repeats: interleaved timing rounds (the median is taken).
    min_sample_s: each timing sample repeats a program until it lasts this long.
    progress: called with a short message at each stage / round (e.g. print).
  """
  say = progress or (lambda msg: None)
  microbench.check_timing(repeats, min_sample_s)
  microbench.resolve_sizes(sizes)
  device = _device(backend)
  compiled, leaves = prepare(sizes, device, say)
  load_before = os.getloadavg()
  times = microbench.time_calls([c.call for c in compiled], repeats, min_sample_s,
                                lambda r, n: say(f"timing round {r}/{n}"))
  load_after = os.getloadavg()
  say("fitting")
  return fit_calibration(device, compiled, leaves, times, {
      "loadavg_before": list(load_before), "loadavg_after": list(load_after),
      "repeats": repeats, "min_sample_s": min_sample_s,
      "sizes": sizes if isinstance(sizes, str) else "custom"})
