"""Device specifications for the roofline cost model (docs/design.md section 6, "Costs").

A `DeviceSpec` holds the few numbers a roofline needs: peak arithmetic throughput per dtype,
memory bandwidth, a per-op launch overhead and the memory capacity. The registry covers the
accelerators the placement papers used plus current ones; every figure cites its source (vendor
datasheets, or the papers that describe the hardware). Peaks are dense (no structured
sparsity), at boost clocks where the vendor quotes those.

"local" is not a fixed entry: `local_spec(calibration)` builds the spec of the machine the
calibration ran on (CPU here, the GPU where there is one) from its measured figures: the best
matmul throughput per dtype and the best streaming (read + write) bandwidth; see
`simulator.costmodel.calibrate`.

Launch overheads are the per-op costs used when no calibration is given: they match the
topology presets (`simulator.topology`: 5 us per op on V100, 10 us on K80, 2 us on TPU).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Dict, Mapping

TFLOPS = 1e12
GBPS = 1e9
GB = 1e9
GiB = 2.0**30
US = 1e-6

# dtypes the roofline distinguishes ("s8": 8-bit integer dots, in ops/s; "f8": 8-bit float
# dots); a dtype without an entry uses the first of its PEAK_FALLBACK the spec has, else the
# "f32" peak, as does anything else (other ints, ...). Complex dots use their real precision's
# peak (c64 f32, c128 f64) on 4x the flops (`opclass.PEAK_DTYPE`).
DTYPES = ("f64", "f32", "bf16", "f16", "s8", "f8")
# A device without f8 units runs an f8 dot on its 16-bit ones: XLA:GPU's float normalization
# converts the f8 operands to f16 where the GPU has no f8 gemm (before Hopper / Ada), and
# e4m3 / e5m2 values are exact in f16 and bf16 (bf16: a TPU's MXU). s8 keeps the f32 peak.
PEAK_FALLBACK = {"f8": ("f16", "bf16")}


def finite_number(v) -> bool:
  """A finite real number (not a bool, a string or an int beyond any float)."""
  try:
    return not isinstance(v, bool) and isinstance(v, numbers.Real) and math.isfinite(v)
  except OverflowError:
    return False


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
  """Roofline figures of one device.

  Attributes:
    name: registry name.
    peak_flops: FLOP/s per dtype name ("f32" required; "bf16", "f16", "f64", "s8", "f8"
      optional).
    mem_bandwidth: bytes/s between the device's main memory and its compute units.
    launch_overhead: seconds added to every op that launches (a kernel, a thunk).
    mem_capacity: bytes of device memory.
    description: what the figures describe (which die, core or chip).
  """
  name: str
  peak_flops: Mapping[str, float]
  mem_bandwidth: float
  launch_overhead: float
  mem_capacity: float
  description: str = ""

  def __post_init__(self):
    flops = dict(self.peak_flops)
    if "f32" not in flops:
      raise ValueError(f"DeviceSpec '{self.name}': peak_flops needs an 'f32' entry, got "
                       f"{sorted(flops)}")
    for k, v in flops.items():
      if k not in DTYPES:
        raise ValueError(f"DeviceSpec '{self.name}': peak_flops has unknown dtype {k!r} "
                         f"(valid: {', '.join(DTYPES)})")
      if not (finite_number(v) and v > 0):
        raise ValueError(f"DeviceSpec '{self.name}': peak_flops[{k!r}] must be finite and > 0, "
                         f"got {v!r}")
    for field in ("mem_bandwidth", "mem_capacity"):
      v = getattr(self, field)
      if not (finite_number(v) and v > 0):
        raise ValueError(f"DeviceSpec '{self.name}': {field} must be finite and > 0, got {v!r}")
    if not (finite_number(self.launch_overhead) and self.launch_overhead >= 0):
      raise ValueError(f"DeviceSpec '{self.name}': launch_overhead must be finite and >= 0, "
                       f"got {self.launch_overhead!r}")
    object.__setattr__(self, "peak_flops", {k: float(v) for k, v in flops.items()})

  def peak(self, dtype: str = "f32") -> float:
    """Peak FLOP/s for `dtype`; a dtype without an entry uses its PEAK_FALLBACK, else f32."""
    return peak_of(self.peak_flops, dtype)


def peak_of(peak_flops: Mapping[str, float], dtype: str) -> float:
  """`peak_flops[dtype]`, else that of the first of its PEAK_FALLBACK present, else the f32."""
  for d in (dtype,) + PEAK_FALLBACK.get(dtype, ()):
    if d in peak_flops:
      return peak_flops[d]
  return peak_flops["f32"]


DEVICES: Dict[str, DeviceSpec] = {}


def register(spec: DeviceSpec) -> DeviceSpec:
  if spec.name in DEVICES or spec.name == "local":
    raise ValueError(f"device spec {spec.name!r} registered twice (or uses the reserved name "
                     f"'local')")
  DEVICES[spec.name] = spec
  return spec


# NVIDIA Tesla K80 datasheet (2014): board = 2x GK210, 8.73 TFLOPS f32 / 2.91 TFLOPS f64 with
# GPU Boost, 480 GB/s and 24 GB GDDR5 for the board. One die = half of each. No native f16/bf16
# arithmetic (those run at the f32 rate, so no entry).
register(DeviceSpec(
    "k80", {"f32": 4.365 * TFLOPS, "f64": 1.455 * TFLOPS}, 240 * GBPS, 10 * US, 12 * GB,
    "one GK210 die of a Tesla K80 board"))

# NVIDIA Tesla V100 datasheet (SXM2): 15.7 TFLOPS f32, 7.8 f64, 125 TFLOPS f16 tensor cores,
# 900 GB/s HBM2, 32 GB (the DGX-1V preset's GPU). No bf16 units (bf16 runs at the f32 rate).
register(DeviceSpec(
    "v100", {"f32": 15.7 * TFLOPS, "f64": 7.8 * TFLOPS, "f16": 125 * TFLOPS}, 900 * GBPS,
    5 * US, 32 * GB, "Tesla V100-SXM2-32GB"))

# NVIDIA A100 datasheet (SXM4 40GB): 19.5 TFLOPS f32 (156 TF32 tensor), 9.7 f64, 312 TFLOPS
# bf16/f16 tensor cores, 624 TOPS int8 tensor (dense), 1555 GB/s HBM2, 40 GB. No fp8 units
# (they came with Ada / Hopper): an f8 dot gets the f16 peak (PEAK_FALLBACK), as on the V100.
register(DeviceSpec(
    "a100", {"f32": 19.5 * TFLOPS, "f64": 9.7 * TFLOPS, "bf16": 312 * TFLOPS,
             "f16": 312 * TFLOPS, "s8": 624 * TFLOPS}, 1555 * GBPS, 5 * US, 40 * GB,
    "A100-SXM4-40GB"))

# NVIDIA H100 datasheet (SXM5): 67 TFLOPS f32, 34 f64, 989 TFLOPS bf16/f16 tensor, 1979 TOPS
# int8 and 1979 TFLOPS fp8 tensor (dense; twice that with sparsity), 3.35 TB/s HBM3, 80 GB.
register(DeviceSpec(
    "h100", {"f32": 67 * TFLOPS, "f64": 34 * TFLOPS, "bf16": 989 * TFLOPS, "f16": 989 * TFLOPS,
             "s8": 1979 * TFLOPS, "f8": 1979 * TFLOPS}, 3350 * GBPS, 5 * US, 80 * GB,
    "H100-SXM5-80GB"))

# NVIDIA H200 datasheet (SXM): the H100's compute (67 TFLOPS f32, 34 f64, 989 bf16/f16 dense,
# 1979 TOPS int8 and 1979 TFLOPS fp8 dense) with 4.8 TB/s HBM3e and 141 GB.
register(DeviceSpec(
    "h200", {"f32": 67 * TFLOPS, "f64": 34 * TFLOPS, "bf16": 989 * TFLOPS, "f16": 989 * TFLOPS,
             "s8": 1979 * TFLOPS, "f8": 1979 * TFLOPS}, 4800 * GBPS, 5 * US, 141 * GB,
    "H200-SXM-141GB"))

# TPU v3, ONE CORE (a chip has two TensorCores, each its own XLA device). Jouppi et al., "A
# Domain-Specific Supercomputer for Training Deep Neural Networks", CACM 2020: 123 TFLOPS bf16,
# 900 GB/s and 32 GiB HBM per chip -> half per core. f32 matmuls run on the bf16 MXUs (XLA's
# default precision: one bf16 pass), so f32 gets the bf16 peak; no f64 hardware.
register(DeviceSpec(
    "tpu_v3", {"f32": 61.5 * TFLOPS, "bf16": 61.5 * TFLOPS}, 450 * GBPS, 2 * US, 16 * GiB,
    "one TensorCore of a TPU v3 chip"))

# TPU v4, ONE CHIP (its two TensorCores form one "megacore" XLA device). Jouppi et al., "TPU v4:
# An Optically Reconfigurable Supercomputer for Machine Learning with Hardware Support for
# Embeddings", ISCA 2023: 275 TFLOPS bf16, 1200 GB/s and 32 GiB HBM2 per chip. f32 as for v3.
# int8 dots: 275 TOPS ("275 teraflops (bf16 or int8)", Cloud TPU v4 documentation).
register(DeviceSpec(
    "tpu_v4", {"f32": 275 * TFLOPS, "bf16": 275 * TFLOPS, "s8": 275 * TFLOPS}, 1200 * GBPS,
    2 * US, 32 * GiB,
    "one TPU v4 chip (megacore: both TensorCores as one device)"))


def local_spec(calibration) -> DeviceSpec:
  """The "local" device: the calibrated machine's measured peaks, bandwidth and overhead."""
  return DeviceSpec(
      "local", dict(calibration.peak_flops), calibration.mem_bandwidth,
      calibration.launch_overhead, calibration.mem_capacity,
      f"measured on {calibration.backend} ({calibration.device_kind}), {calibration.date}")


def available() -> Dict[str, str]:
  """Spec name -> description ("local" needs a calibration: see `device_spec`)."""
  out = {k: v.description for k, v in sorted(DEVICES.items())}
  out["local"] = "the machine a Calibration was measured on (device_spec('local', calibration))"
  return out


def device_spec(name: str, calibration=None) -> DeviceSpec:
  """A registered spec, or "local" built from `calibration`.

  Raises:
    ValueError: unknown name, or "local" without a calibration.
  """
  if calibration is not None and not hasattr(calibration, "roofline_params"):
    raise ValueError(f"device_spec: calibration must be a Calibration (Calibration.load(path) "
                     f"reads a file), got {type(calibration).__name__}")
  if name == "local":
    if calibration is None:
      raise ValueError("device spec 'local' needs a Calibration (simulator.costmodel.calibrate "
                       "or Calibration.load); run experiments/calibrate_cost_model.py first")
    return local_spec(calibration)
  if name not in DEVICES:
    raise ValueError(f"unknown device spec {name!r}; available: {', '.join(available())}")
  return DEVICES[name]
