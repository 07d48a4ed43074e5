"""CostReference: the roofline device that costed a graph, carried by the graph (design.md 4.1).

Why: fusing ops changes their cost, and the fused cost is a roofline over the group's summed
flops and bytes (docs/design.md section 4.1). That needs the figures the cost model used when
it turned flops and bytes into `cost`: the reference device's peak FLOP/s, memory bandwidth and
launch overhead, and the per-op-class efficiencies (calibrated or default). The cost model
attaches them to every graph it costs (`simulator.costmodel.apply_cost_model`), so fusion on a
`jax:` or zoo graph needs nothing else; a graph costed some other way (profiles, synthetic
families) has none, and fusion on it raises a ValueError.

This module depends on numpy only, so that `simulator.graph` can hold a CostReference without
importing the cost model.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, Optional, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class CostReference:
  """Roofline figures of the device that costed a graph.

  Attributes:
    name: the device's registry name (e.g. "v100", "local").
    peak_flops: FLOP/s (the f32 peak; fused groups are costed at it).
    mem_bandwidth: bytes/s.
    launch_overhead: seconds per launched kernel before the per-class ratio.
    classes: op class names, in the order of the three tables below.
    flops_eff: (C,) fraction of `peak_flops` each class reaches.
    bytes_eff: (C,) fraction of `mem_bandwidth` each class reaches.
    overhead_ratio: (C,) each class's launch overhead / `launch_overhead`.
    memory_only: (C,) bool: classes whose time is their memory traffic alone (flops ignored).
  """
  name: str
  peak_flops: float
  mem_bandwidth: float
  launch_overhead: float
  classes: Sequence[str]
  flops_eff: Sequence[float]
  bytes_eff: Sequence[float]
  overhead_ratio: Sequence[float]
  memory_only: Sequence[bool]

  def __post_init__(self):
    set_ = lambda k, v: object.__setattr__(self, k, v)
    set_("classes", tuple(str(c) for c in self.classes))
    c = len(self.classes)
    if c == 0 or len(set(self.classes)) != c:
      raise ValueError(f"CostReference '{self.name}': classes must be distinct and non-empty, "
                       f"got {self.classes}")
    for f in ("peak_flops", "mem_bandwidth"):
      v = float(getattr(self, f))
      if not (math.isfinite(v) and v > 0):
        raise ValueError(f"CostReference '{self.name}': {f} must be finite and > 0, got {v!r}")
      set_(f, v)
    v = float(self.launch_overhead)
    if not (math.isfinite(v) and v >= 0):
      raise ValueError(f"CostReference '{self.name}': launch_overhead must be finite and >= 0, "
                       f"got {v!r}")
    set_("launch_overhead", v)
    for f, positive in (("flops_eff", True), ("bytes_eff", True), ("overhead_ratio", False)):
      arr = np.asarray(getattr(self, f), np.float64)
      if arr.shape != (c,):
        raise ValueError(f"CostReference '{self.name}': {f} has shape {arr.shape}, expected "
                         f"({c},) (one entry per class)")
      ok = np.isfinite(arr) & ((arr > 0) if positive else (arr >= 0))
      if not ok.all():
        k = int(np.flatnonzero(~ok)[0])
        raise ValueError(f"CostReference '{self.name}': {f}[{self.classes[k]!r}] must be "
                         f"finite and {'> 0' if positive else '>= 0'}, got {arr[k]!r}")
      set_(f, tuple(arr.tolist()))
    mem = tuple(bool(x) for x in self.memory_only)
    if len(mem) != c:
      raise ValueError(f"CostReference '{self.name}': memory_only has {len(mem)} entries, "
                       f"expected {c}")
    set_("memory_only", mem)

  def class_id(self, cls: str) -> int:
    try:
      return self.classes.index(cls)
    except ValueError:
      raise ValueError(f"CostReference '{self.name}': unknown op class {cls!r} (classes: "
                       f"{', '.join(self.classes)})") from None

  # ---------------------------------------------------------------- .npz round trip
  def to_arrays(self, prefix: str = "ref_") -> Dict[str, np.ndarray]:
    """Plain numeric / string arrays for `CompGraph.save` (no pickles)."""
    return {
        f"{prefix}name": np.asarray(self.name),
        f"{prefix}scalars": np.asarray([self.peak_flops, self.mem_bandwidth,
                                        self.launch_overhead], np.float64),
        f"{prefix}classes": np.asarray(self.classes, dtype=str),
        f"{prefix}tables": np.asarray([self.flops_eff, self.bytes_eff, self.overhead_ratio,
                                       np.asarray(self.memory_only, np.float64)], np.float64),
    }

  @classmethod
  def from_arrays(cls, data, prefix: str = "ref_") -> Optional["CostReference"]:
    """Inverse of `to_arrays`; None when `data` holds no reference."""
    if f"{prefix}scalars" not in data:
      return None
    get = lambda k: np.asarray(data[f"{prefix}{k}"])
    name, scalars, classes, tables = get("name"), get("scalars"), get("classes"), get("tables")
    # (kinds checked here: a 2-D name or numeric classes were read as their str())
    if name.ndim != 0 or name.dtype.kind != "U":
      raise ValueError(f"cost reference '{prefix}name' must be one string, got shape "
                       f"{name.shape}, dtype {name.dtype}")
    if scalars.shape != (3,) or scalars.dtype.kind not in "iuf":
      raise ValueError(f"cost reference '{prefix}scalars' must be 3 numbers (peak FLOP/s, "
                       f"bandwidth, launch overhead), got shape {scalars.shape}, dtype "
                       f"{scalars.dtype}")
    if classes.ndim != 1 or classes.dtype.kind != "U":
      raise ValueError(f"cost reference '{prefix}classes' must be a 1-D string array, got "
                       f"shape {classes.shape}, dtype {classes.dtype}")
    if tables.ndim != 2 or tables.shape[0] != 4 or tables.dtype.kind not in "iuf":
      raise ValueError(f"cost reference tables have shape {tables.shape}, dtype "
                       f"{tables.dtype}, expected (4, C) numbers")
    tables = tables.astype(np.float64)
    if not np.all((tables[3] == 0) | (tables[3] == 1)):
      raise ValueError(f"cost reference '{prefix}tables' row 3 (memory_only) must be 0 or 1, "
                       f"got {tables[3].tolist()}")
    peak, bw, over = (float(x) for x in scalars)
    return cls(name=str(name), peak_flops=peak, mem_bandwidth=bw, launch_overhead=over,
               classes=[str(c) for c in classes], flops_eff=tables[0], bytes_eff=tables[1],
               overhead_ratio=tables[2], memory_only=tables[3] > 0)
