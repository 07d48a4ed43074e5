"""`Calibration`: the fitted roofline parameters of one machine, and their JSON file.

What a calibration holds (all measured / fitted by `simulator.costmodel.calibrate`):
  * the machine's roofline peaks: best matmul FLOP/s per dtype, best streaming bandwidth, memory
    capacity -> the "local" `DeviceSpec` (`devices.local_spec`);
  * per op class: efficiencies (fractions of those peaks) and the launch overhead (seconds);
    `fitted` says which numbers the data determined (the others keep the documented defaults,
    or the nearest values to them that fit the microbenchmarks as well);
  * the transcendental weight (plain flops per exp / tanh / ...), XLA:CPU's parallel efficiency
    (speed-up per extra partition of a split loop fusion), the per-program dispatch overhead
    (one jitted call; reported, not part of any op), the page-fault cost per byte of a buffer
    the host allocator maps afresh on every call (`first_touch`);
  * provenance: backend, device kind, date, host, the load during the measurement, the fit's
    quality and every microbenchmark's measured and fitted time.

Files are JSON with a `version` field, written atomically; `Calibration.load` refuses a file
with a missing or malformed field with a ValueError that names the field.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, List, Mapping

from simulator import fileio
from simulator.costmodel import roofline
from simulator.costmodel.devices import DTYPES, finite_number
from simulator.costmodel.opclass import OP_CLASSES

VERSION = 1
CLASS_FIELDS = ("flops_eff", "bytes_eff", "overhead")
# The fit's bounds (`calibrate` fits within them), which a file read back must respect too: a
# hand-edited efficiency of 1e300 silently drops an op's compute or memory term.
EFF_BOUNDS = (1e-4, 20.0)         # efficiencies (fractions of the measured peaks)
OVERHEAD_BOUNDS = (0.0, 1e-2)     # seconds per op
# `launch_overhead` is the median of the class overheads above 1 ns (or 0 when every class
# overhead is 0): a smaller positive one would turn the class overheads, charged as ratios to it,
# into ratios of up to 1e300 (a spec's own launch overhead times those is no cost at all).
LAUNCH_FLOOR = 1e-9               # seconds
FIRST_TOUCH_BOUNDS = (0.0, 100e-3 / 2**20)  # seconds per byte (the fit: up to 100 ms per MiB)
DISPATCH_BOUNDS = (0.0, 1e-2)     # seconds per jitted call
TW_BOUNDS = (1.0, 200.0)          # flops per transcendental element op
CONTENTION_BOUNDS = (1.0, 3.0)   # time factor of thread-pool ops in concurrent programs
# Plausible machine peaks (a phone to a pod slice), to refuse typos by orders of magnitude.
PEAK_BOUNDS = (1e6, 1e18)         # FLOP/s
BANDWIDTH_BOUNDS = (1e6, 1e15)    # bytes/s
MEMORY_BOUNDS = (1e6, 1e18)       # bytes


@dataclasses.dataclass(frozen=True)
class Calibration:
  """Fitted roofline parameters of the machine the microbenchmarks ran on (see module doc)."""
  backend: str
  device_kind: str
  date: str
  peak_flops: Mapping[str, float]  # FLOP/s per dtype ("f32" required)
  mem_bandwidth: float  # bytes/s
  mem_capacity: float  # bytes
  launch_overhead: float  # seconds: the median of the per-class overheads (above 1 ns)
  dispatch_overhead: float  # seconds per jitted call (not charged to ops)
  transcendental_weight: float  # >= 1
  parallel_efficiency: float  # in [0, 1]
  classes: Mapping[str, Mapping[str, float]]  # class -> {flops_eff, bytes_eff, overhead}
  fitted: Mapping[str, Mapping[str, bool]] = dataclasses.field(default_factory=dict)
  host: str = ""
  conditions: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  fit: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  measurements: List[Mapping[str, Any]] = dataclasses.field(default_factory=list)
  first_touch: float = 0.0  # seconds per byte of a buffer the allocator maps afresh per call
  contention: float = 1.0  # op-time factor of programs with independent ops (roofline.concurrent)
  version: int = VERSION

  def __post_init__(self):
    _check(self)

  def roofline_params(self) -> roofline.RooflineParams:
    """The class efficiencies and knobs for `roofline.durations` (overheads as ratios)."""
    base = self.launch_overhead if self.launch_overhead > 0 else 1.0
    return roofline.RooflineParams(
        flops_eff={c: v["flops_eff"] for c, v in self.classes.items()},
        bytes_eff={c: v["bytes_eff"] for c, v in self.classes.items()},
        overhead_ratio={c: v["overhead"] / base for c, v in self.classes.items()},
        transcendental_weight=self.transcendental_weight,
        parallel_efficiency=self.parallel_efficiency, first_touch=self.first_touch,
        contention=self.contention)

  # ---------------------------------------------------------------- I/O
  def to_dict(self) -> Dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(self)))

  def save(self, path: str) -> str:
    """Writes JSON atomically (temporary file + rename), creating the folder."""
    return fileio.write_json(path, self.to_dict())

  @classmethod
  def from_dict(cls, data: Any, source: str = "calibration") -> "Calibration":
    if not isinstance(data, dict):
      raise ValueError(f"{source}: expected a JSON object, got {type(data).__name__}")
    if "version" not in data:
      raise ValueError(f"{source}: field 'version' is missing")
    if isinstance(data["version"], bool) or data["version"] != VERSION:
      raise ValueError(f"{source}: field 'version' is {data['version']!r}; this code reads "
                       f"version {VERSION}")
    names = {f.name for f in dataclasses.fields(cls)}
    required = {f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    missing = sorted(required - set(data))
    if missing:
      raise ValueError(f"{source}: field '{missing[0]}' is missing")
    unknown = sorted(set(data) - names)
    if unknown:
      raise ValueError(f"{source}: unknown field '{unknown[0]}'")
    try:
      return cls(**data)
    except (TypeError, ValueError) as e:
      raise ValueError(f"{source}: {e}") from e

  @classmethod
  def load(cls, path: str) -> "Calibration":
    """Reads a file written by `save`; a malformed file raises ValueError naming the field."""
    try:
      with open(path, encoding="utf-8") as fh:
        data = json.load(fh, object_pairs_hook=fileio.unique_keys)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError,
            fileio.RepeatedKey) as e:
      what = "JSON nested too deeply" if isinstance(e, RecursionError) else (
          f"{type(e).__name__}: {e}")
      raise ValueError(f"cannot read calibration file '{path}': {what}") from None
    return cls.from_dict(data, f"calibration file '{path}'")

  def table(self) -> str:
    """The fitted per-class table as aligned text (an unfitted number is marked '*')."""
    rows = [f"{'class':14s} {'flops_eff':>10s} {'bytes_eff':>10s} {'overhead_us':>12s}"]
    for c in OP_CLASSES:
      if c not in self.classes:
        continue
      v, fit = self.classes[c], self.fitted.get(c, {})
      mark = lambda k: " " if fit.get(k, False) else "*"
      rows.append(f"{c:14s} {v['flops_eff']:10.3g}{mark('flops_eff')}"
                  f"{v['bytes_eff']:10.3g}{mark('bytes_eff')}"
                  f"{v['overhead'] * 1e6:12.3g}{mark('overhead')}")
    peaks = ", ".join(f"{k} {v / 1e9:.1f} GFLOP/s" for k, v in self.peak_flops.items())
    rows.append(f"peaks: {peaks}; bandwidth {self.mem_bandwidth / 1e9:.1f} GB/s; launch "
                f"{self.launch_overhead * 1e6:.2f} us; dispatch {self.dispatch_overhead * 1e6:.1f}"
                f" us; transcendental weight {self.transcendental_weight:.2f}; parallel "
                f"efficiency {self.parallel_efficiency:.2f}; first touch "
                f"{self.first_touch * 2**20 * 1e3:.2f} ms/MiB; contention {self.contention:.2f}"
                f"   (* = not fitted: the default, or the value nearest it that fits the "
                f"programs as well)")
    return "\n".join(rows)


def _within(name: str, v: float, bounds) -> float:
  lo, hi = bounds
  if not lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9):  # (a fit at its bound, after exp(log(.)))
    raise ValueError(f"field '{name}' must be in [{lo:g}, {hi:g}] (the fit's bounds), got {v!r}")
  return v


def _positive(name: str, v, allow_zero: bool = False) -> float:
  if not finite_number(v) or (v < 0 if allow_zero else v <= 0):
    raise ValueError(f"field '{name}' must be a finite number {'>= 0' if allow_zero else '> 0'}"
                     f", got {v!r}")
  return float(v)


def _check(c: Calibration):
  for name in ("backend", "device_kind", "date", "host"):
    if not isinstance(getattr(c, name), str):
      raise ValueError(f"field '{name}' must be a string, got {getattr(c, name)!r}")
  if not isinstance(c.peak_flops, Mapping) or "f32" not in c.peak_flops:
    raise ValueError(f"field 'peak_flops' must map dtypes to FLOP/s with an 'f32' entry, got "
                     f"{c.peak_flops!r}")
  for k, v in c.peak_flops.items():
    if k not in DTYPES:
      raise ValueError(f"field 'peak_flops' has unknown dtype {k!r} (valid: {DTYPES})")
    _within(f"peak_flops.{k}", _positive(f"peak_flops.{k}", v), PEAK_BOUNDS)
  _within("mem_bandwidth", _positive("mem_bandwidth", c.mem_bandwidth), BANDWIDTH_BOUNDS)
  _within("mem_capacity", _positive("mem_capacity", c.mem_capacity), MEMORY_BOUNDS)
  for name in ("launch_overhead", "dispatch_overhead", "first_touch"):
    _positive(name, getattr(c, name), allow_zero=True)
  _within("launch_overhead", c.launch_overhead, OVERHEAD_BOUNDS)
  if 0 < c.launch_overhead < LAUNCH_FLOOR:
    raise ValueError(f"field 'launch_overhead' must be 0 or at least {LAUNCH_FLOOR:g} s (the "
                     f"median of the class overheads above 1 ns), got {c.launch_overhead!r}")
  _within("first_touch", c.first_touch, FIRST_TOUCH_BOUNDS)
  _within("dispatch_overhead", c.dispatch_overhead, DISPATCH_BOUNDS)
  _within("transcendental_weight", _positive("transcendental_weight", c.transcendental_weight),
          TW_BOUNDS)
  _within("contention", _positive("contention", c.contention), CONTENTION_BOUNDS)
  pe = _positive("parallel_efficiency", c.parallel_efficiency, allow_zero=True)
  if pe > 1:
    raise ValueError(f"field 'parallel_efficiency' must be in [0, 1], got {pe}")
  if not isinstance(c.classes, Mapping) or not c.classes:
    raise ValueError(f"field 'classes' must map op classes to their numbers, got {c.classes!r}")
  for cls, v in c.classes.items():
    if cls not in OP_CLASSES:
      raise ValueError(f"field 'classes' has unknown op class {cls!r} (valid: {OP_CLASSES})")
    if not isinstance(v, Mapping) or set(v) != set(CLASS_FIELDS):
      raise ValueError(f"field 'classes.{cls}' must have exactly the keys {CLASS_FIELDS}, "
                       f"got {v!r}")
    for k in CLASS_FIELDS:
      _within(f"classes.{cls}.{k}", _positive(f"classes.{cls}.{k}", v[k],
                                              allow_zero=k == "overhead"),
              OVERHEAD_BOUNDS if k == "overhead" else EFF_BOUNDS)
  if c.launch_overhead == 0 and any(v["overhead"] > 0 for v in c.classes.values()):
    # The class overheads are charged as ratios to it (`roofline_params`), times a device's own
    # launch overhead: 0 here would drop every one of them.
    raise ValueError("field 'launch_overhead' is 0 while classes have overheads: it must be "
                     "> 0 (the median of the per-class overheads)")
  if not isinstance(c.fitted, Mapping) or not all(
      k in OP_CLASSES and isinstance(v, Mapping) and set(v) <= set(CLASS_FIELDS)
      and all(isinstance(b, bool) for b in v.values()) for k, v in c.fitted.items()):
    raise ValueError(f"field 'fitted' must map op classes to {{field: true/false}} over the "
                     f"fields {CLASS_FIELDS}, got {c.fitted!r}")
  for name in ("conditions", "fit"):
    if not isinstance(getattr(c, name), Mapping):
      raise ValueError(f"field '{name}' must be an object, got {getattr(c, name)!r}")
  if not isinstance(c.measurements, list) or not all(
      isinstance(m, Mapping) for m in c.measurements):
    raise ValueError(f"field 'measurements' must be a list of objects, got {c.measurements!r}")
  for name in ("conditions", "fit", "measurements"):
    # `save` writes strict JSON: a NaN or an object JSON cannot hold would be accepted here and
    # fail only when the calibration is written (after the whole measurement).
    try:
      json.dumps(getattr(c, name), allow_nan=False)
    except (TypeError, ValueError, OverflowError, RecursionError) as e:
      raise ValueError(f"field '{name}' must hold JSON values with finite numbers: "
                       f"{type(e).__name__}: {e}") from None
  if isinstance(c.version, bool) or not isinstance(c.version, int) or c.version != VERSION:
    raise ValueError(f"field 'version' must be {VERSION}, got {c.version!r}")
