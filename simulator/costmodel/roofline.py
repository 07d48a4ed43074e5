"""Roofline op durations and `apply_cost_model` (docs/design.md section 6, "Costs").

    duration = max(flops' / (eff_flops[c] * peak[dtype]), bytes / (eff_bytes[c] * bandwidth))
               / speedup(partitions) + overhead[c]

(flops' = 0 for the memory-only classes: transposes, data movement, gathers and scatters)

per work item ("leaf", see `features`), where c is the op class, flops' = flops + (w - 1) x
transcendentals (a transcendental element op costs w plain flops; w = 1 uncalibrated),
speedup(p) = 1 + parallel_efficiency x (p - 1) for an op XLA:CPU split into p partitions, and
overhead[c] = the device's launch overhead x a per-class ratio. A node's duration is the
weighted sum of its leaves (one leaf for a plain op; a while loop's body leaves times the trip
count), plus, where the caller says how many bytes the host allocator maps afresh per step,
the calibrated page-fault cost of first touching them (`first_touch_costs`). "free" ops
(bitcasts, reshapes known only by op type, ops with no flops and no bytes) cost exactly 0, with
no launch overhead: XLA emits no kernel for them.

Efficiencies come from a `Calibration` (fitted on the machine it was measured on) or, without
one, from `DEFAULT_FLOPS_EFF` / `DEFAULT_BYTES_EFF`. Those defaults are assumptions, typical of
tuned accelerator kernels rather than measured here: library GEMMs reach 60-90% of peak, convs a
little less (im2col / layout overheads), elementwise and reduction kernels are memory bound at
60-80% of peak bandwidth, while gathers / scatters stream at a fraction of it (irregular access).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Mapping, Optional

import numpy as np

from simulator.costmodel import opclass as feat
from simulator.costmodel.devices import DeviceSpec, peak_of
from simulator.costref import CostReference
from simulator.graph import CompGraph

OP_CLASSES = feat.OP_CLASSES

# Uncalibrated defaults (fractions of peak FLOP/s and of peak bandwidth); see the docstring.
DEFAULT_FLOPS_EFF: Dict[str, float] = {
    "dot": 0.7, "dot_small": 0.3, "conv": 0.5, "conv_grouped": 0.1, "conv_filter": 0.4,
    "conv_eigen": 0.4, "elementwise": 0.25, "reduce": 0.15, "pool": 0.15, "transpose": 0.25,
    "data_movement": 0.25, "gather": 0.1, "scatter": 0.1, "custom_call": 0.5, "control": 0.25,
    "other": 0.1, "free": 1.0}
DEFAULT_BYTES_EFF: Dict[str, float] = {
    "dot": 0.7, "dot_small": 0.5, "conv": 0.6, "conv_grouped": 0.5, "conv_filter": 0.6,
    "conv_eigen": 0.6, "elementwise": 0.7, "reduce": 0.6, "pool": 0.5, "transpose": 0.3,
    "data_movement": 0.6, "gather": 0.3, "scatter": 0.2, "custom_call": 0.5, "control": 0.5,
    "other": 0.3, "free": 1.0}


@dataclasses.dataclass(frozen=True)
class RooflineParams:
  """Per-class efficiencies and the device-independent knobs of the duration formula."""
  flops_eff: Mapping[str, float]
  bytes_eff: Mapping[str, float]
  overhead_ratio: Mapping[str, float]  # per-class launch overhead / the device's launch overhead
  transcendental_weight: float = 1.0
  parallel_efficiency: float = 0.0
  first_touch: float = 0.0  # seconds per byte of a freshly mapped buffer (page faults)
  contention: float = 1.0  # time factor of thread-pool ops in programs with concurrent ops

  def __post_init__(self):
    for name in ("flops_eff", "bytes_eff", "overhead_ratio"):
      table = getattr(self, name)
      bad = [c for c in table if c not in OP_CLASSES]
      if bad:
        raise ValueError(f"RooflineParams.{name}: unknown op class(es) {bad}; valid: "
                         f"{', '.join(OP_CLASSES)}")
      for c, v in table.items():
        ok = np.isfinite(v) and (v >= 0 if name == "overhead_ratio" else v > 0)
        if not ok:
          raise ValueError(f"RooflineParams.{name}[{c!r}] must be finite and "
                           f"{'>= 0' if name == 'overhead_ratio' else '> 0'}, got {v!r}")
    if not (np.isfinite(self.transcendental_weight) and self.transcendental_weight >= 1):
      raise ValueError(f"RooflineParams.transcendental_weight must be >= 1, got "
                       f"{self.transcendental_weight!r}")
    if not (np.isfinite(self.first_touch) and self.first_touch >= 0):
      raise ValueError(f"RooflineParams.first_touch must be finite and >= 0, got "
                       f"{self.first_touch!r}")
    if not (np.isfinite(self.contention) and self.contention >= 1):
      raise ValueError(f"RooflineParams.contention must be >= 1, got {self.contention!r}")
    if not 0 <= self.parallel_efficiency <= 1:
      raise ValueError(f"RooflineParams.parallel_efficiency must be in [0, 1], got "
                       f"{self.parallel_efficiency!r}")

  def arrays(self):
    """(flops_eff, bytes_eff, overhead_ratio), each (C,) in OP_CLASSES order (defaults filled)."""
    def col(table, default):
      return np.array([table.get(c, default.get(c, 1.0)) for c in OP_CLASSES], np.float64)
    return (col(self.flops_eff, DEFAULT_FLOPS_EFF), col(self.bytes_eff, DEFAULT_BYTES_EFF),
            col(self.overhead_ratio, {}))


# Classes whose time is their memory traffic alone: the arithmetic XLA fuses into a transpose, a
# copy, a gather or a scatter hides behind its strided / indexed accesses.
MEMORY_ONLY_CLASSES = ("transpose", "data_movement", "gather", "scatter")
MEMORY_ONLY = np.array([c in MEMORY_ONLY_CLASSES for c in OP_CLASSES])

DEFAULT_PARAMS = RooflineParams(DEFAULT_FLOPS_EFF, DEFAULT_BYTES_EFF,
                                {c: 1.0 for c in OP_CLASSES})


def leaf_durations(leaves: feat.OpLeaves, peak: np.ndarray, bandwidth: float,
                   overhead: np.ndarray, flops_eff: np.ndarray, bytes_eff: np.ndarray,
                   transcendental_weight: float, parallel_efficiency: float,
                   smooth: Optional[float] = None) -> np.ndarray:
  """(M,) seconds per execution of each leaf.

  Args: peak (len(NODE_DTYPES),) FLOP/s per node dtype; overhead, flops_eff, bytes_eff (C,) per
  class; `smooth` = p replaces max(a, b) by (a^p + b^p)^(1/p) (only the calibration fit uses it,
  so that the bound that does not bind still has a gradient). Vectorized numpy.
  """
  c = leaves.op_class
  flops = leaves.flops + (transcendental_weight - 1.0) * leaves.transcendentals
  flops = np.where(MEMORY_ONLY[c], 0.0, flops)
  t_compute = flops / (flops_eff[c] * peak[leaves.dtype])
  t_memory = leaves.bytes / (bytes_eff[c] * bandwidth)
  speedup = 1.0 + parallel_efficiency * (np.maximum(leaves.partitions, 1.0) - 1.0)
  if smooth is None:
    bound = np.maximum(t_compute, t_memory)
  else:
    top = np.maximum(np.maximum(t_compute, t_memory), 1e-30)
    bound = top * ((t_compute / top) ** smooth + (t_memory / top) ** smooth) ** (1.0 / smooth)
  t = bound / speedup + overhead[c]
  free = (c == feat.CLASS_IDS["free"]) | ((leaves.flops == 0) & (leaves.bytes == 0)
                                         & (c != feat.CLASS_IDS["control"]))
  return np.where(free, 0.0, t)


def peak_by_dtype(spec: DeviceSpec) -> np.ndarray:
  """(len(NODE_DTYPES),) the spec's peak FLOP/s for each node dtype ("other" -> f32)."""
  return peaks_by_dtype(spec.peak_flops)


def peaks_by_dtype(peak_flops: Mapping[str, float]) -> np.ndarray:
  """`peak_by_dtype` of a {dtype: FLOP/s} map (a spec's or a calibration fit's)."""
  return np.array([peak_of(peak_flops, d if d != "other" else "f32") for d in feat.NODE_DTYPES])


def _params(calibration) -> RooflineParams:
  if calibration is None:
    return DEFAULT_PARAMS
  if isinstance(calibration, RooflineParams):
    return calibration
  if not callable(getattr(calibration, "roofline_params", None)):  # (an AttributeError before)
    raise ValueError(f"calibration must be a Calibration (Calibration.load(path) reads a file), "
                     f"a RooflineParams or None, got {type(calibration).__name__}")
  return calibration.roofline_params()


def concurrent(graph, leaves: Optional[feat.OpLeaves] = None) -> bool:
  """Whether the program has two ops that do work and neither depends on the other.

  XLA:CPU's executor runs such ops at the same time on its worker threads, where they contend
  for the cores, the caches and the thread pool (a split loop fusion or a library kernel waits
  for workers another op holds). Profiles of the zoo's training steps (experiments/
  cost_model_validation.py) show what that costs: summed op times exceed the time covered by
  any op by 20-30%, and an op that is split over the pool runs up to several times longer
  than alone (a matmul of BERT's step 1.5-2.3x, a split transpose of WaveNet's over 10x),
  while for ops run inline on one thread a fitted factor came out at 1.0. A program of one op, or a
  chain of dependent ops (most microbenchmarks), has none of it. See `contended`.
  """
  base = graph.graph if isinstance(graph, feat.HloGraph) else graph
  leaves = feat.features(graph) if leaves is None else leaves
  n = base.num_nodes
  work = np.zeros(n, bool)
  busy = (leaves.op_class != feat.CLASS_IDS["free"]) & (leaves.weight > 0)
  work[leaves.owner[busy]] = True
  if work.sum() < 2:
    return False
  depth = np.zeros(n, np.int64)  # most working ops on a path ending at each node
  ptr, pred = base.predecessor_csr()
  for v in base.topological_order():
    before = pred[ptr[v]:ptr[v + 1]]
    depth[v] = int(work[v]) + (int(depth[before].max()) if before.size else 0)
  return int(depth.max()) < int(work.sum())


# Ops that run on XLA:CPU's intra-op thread pool: library dots and convolutions (and loop
# fusions XLA split into partitions, `OpLeaves.partitions` > 1).
POOL_CLASSES = ("dot", "conv", "conv_grouped", "conv_filter", "conv_eigen")


def pooled(leaves: feat.OpLeaves) -> np.ndarray:
  """(M,) whether each leaf runs on the intra-op thread pool."""
  return (np.isin(leaves.op_class, [feat.CLASS_IDS[c] for c in POOL_CLASSES])
          | (leaves.partitions > 1))


def contended(graph, leaves: feat.OpLeaves, t: np.ndarray, contention: float) -> np.ndarray:
  """(M,) leaf durations `t` with the thread-pool leaves of a concurrent program (`concurrent`)
  scaled by `contention`: such an op waits for workers that other ops hold. Fitted on the
  synthetic training steps of `step_programs` (a single factor for every class)."""
  if contention == 1.0 or not concurrent(graph, leaves):
    return t
  return np.where(pooled(leaves), t * contention, t)


def first_touch_costs(graph, seconds: float) -> np.ndarray:
  """(N,) `seconds` of page faulting spread over the nodes in proportion to their output bytes
  (the ops whose writes first touch a freshly mapped buffer)."""
  base = graph.graph if isinstance(graph, feat.HloGraph) else graph
  out = np.asarray(base.out_bytes, np.float64)
  total = out.sum()
  if seconds <= 0 or total <= 0:
    return np.zeros(base.num_nodes)
  return seconds * out / total


def durations(graph, spec: DeviceSpec, calibration=None, fresh_bytes: float = 0.0) -> np.ndarray:
  """(N,) seconds of each node of `graph` on `spec`.

  Args:
    graph: a CompGraph (classes from op types) or an HloGraph (classes from its HLO text; more
      accurate for post-optimisation graphs, whose ops are mostly fusions).
    spec: the device (`device_spec(name)`; "local" needs the calibration).
    calibration: a `Calibration` (or `RooflineParams`); None = the documented defaults.
    fresh_bytes: bytes of the step's buffers that the host allocator maps afresh on every call
      (on XLA:CPU with glibc, the temp buffer and any output of >= 32 MiB); each costs the
      calibration's `first_touch` seconds per byte of page faulting, spread over the nodes by
      output bytes. 0 (the default) for devices with a caching allocator.
  """
  if not isinstance(spec, DeviceSpec):
    raise ValueError(f"spec must be a DeviceSpec, got {type(spec).__name__}")
  if not (np.isfinite(fresh_bytes) and fresh_bytes >= 0):
    raise ValueError(f"fresh_bytes must be finite and >= 0, got {fresh_bytes!r}")
  leaves = feat.features(graph)
  p = _params(calibration)
  flops_eff, bytes_eff, ratio = p.arrays()
  t = leaf_durations(leaves, peak_by_dtype(spec), spec.mem_bandwidth,
                     ratio * spec.launch_overhead, flops_eff, bytes_eff,
                     p.transcendental_weight, p.parallel_efficiency)
  t = contended(graph, leaves, t, p.contention)
  per_node = np.bincount(leaves.owner, weights=leaves.weight * t, minlength=leaves.num_nodes)
  return per_node + first_touch_costs(graph, fresh_bytes * p.first_touch)


def cost_reference(spec: DeviceSpec, calibration=None) -> CostReference:
  """The figures fusion needs to cost a fused group as this model would (design.md 4.1)."""
  flops_eff, bytes_eff, ratio = _params(calibration).arrays()
  return CostReference(name=spec.name, peak_flops=spec.peak("f32"),
                       mem_bandwidth=spec.mem_bandwidth, launch_overhead=spec.launch_overhead,
                       classes=OP_CLASSES, flops_eff=flops_eff, bytes_eff=bytes_eff,
                       overhead_ratio=ratio, memory_only=MEMORY_ONLY)


def apply_cost_model(graph, spec: DeviceSpec, calibration=None,
                     fresh_bytes: float = 0.0) -> CompGraph:
  """A copy of the graph (an HloGraph's `.graph`) with `cost` = `durations(...)` in seconds.

  Everything but `cost` and `reference` is kept; `reference` records the device and
  efficiencies used (`cost_reference`), so that fused groups can be costed alike. The copy is
  built with `dataclasses.replace`, so it is validated again like any new CompGraph.
  """
  base = graph.graph if isinstance(graph, feat.HloGraph) else graph
  return dataclasses.replace(base, cost=durations(graph, spec, calibration, fresh_bytes),
                             reference=cost_reference(spec, calibration))


def class_breakdown(graph, spec: DeviceSpec, calibration=None) -> Dict[str, float]:
  """Seconds per op class summed over the graph (where a step's predicted time goes)."""
  leaves = feat.features(graph)
  p = _params(calibration)
  flops_eff, bytes_eff, ratio = p.arrays()
  t = leaf_durations(leaves, peak_by_dtype(spec), spec.mem_bandwidth,
                     ratio * spec.launch_overhead, flops_eff, bytes_eff,
                     p.transcendental_weight, p.parallel_efficiency) * leaves.weight
  t = contended(graph, leaves, t, p.contention)
  tot = np.bincount(leaves.op_class, weights=t, minlength=len(OP_CLASSES))
  return {c: float(tot[i]) for i, c in enumerate(OP_CLASSES) if tot[i] > 0}
