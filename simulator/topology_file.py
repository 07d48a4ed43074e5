"""Topology files: the user's own cluster as JSON (schema version 1, normative in
docs/topology.md).

  {"version": 1, "name": "two_hosts",
   "devices": [{"name": "gpu", "count": 4, "speed": 1.0, "memory": "32GB", "overhead": 5e-6}, ...],
   "links": {"groups": [{"name": "nvlink", "size": 4, "bandwidth": "25GB/s", "latency": "10us"}],
             "default": {"bandwidth": "100Gb/s", "latency": "15us"}}}

Devices give `speed` (relative to the reference device graph costs are measured on) or
`peak_flops` (divided by `reference_peak_flops`, default `V100_PEAK_FLOPS`), `memory` and an
optional per-op `overhead`; links are either `bandwidth` / `latency` matrices or link levels
(`simulator.topology.grouped_links`). Numbers may be strings with units ("32GB", "16GiB",
"100Gb/s", "10us") or "inf" where infinity is allowed; keys that start with "_" are comments.
Everything else is checked: a bad file raises ValueError naming the file and the field, e.g.
"my.json: links.groups[1].bandwidth must be > 0, got -1".
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from simulator import fileio
from simulator.topology import LinkLevel, Topology, blocks, grouped_links

VERSION = 1
# The reference device: graph costs are seconds on a device of speed 1.0. The project's costs
# are V100-era measurements, so the default reference is one Tesla V100-SXM2: 15.7 TFLOP/s f32
# peak (NVIDIA Tesla V100 datasheet; also `simulator.costmodel.devices` "v100").
V100_PEAK_FLOPS = 15.7e12
# Shipped example files (simulator/data/topologies/*.json).
EXAMPLES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "topologies")

# The most devices a file may expand to: the (D, D) link matrices and the simulator's
# per-device state grow with D squared (4096 devices: a 4-op graph simulates in 2.2 s with its
# compile, 1.1 GB resident, on the 2-core CPU), and a typo such as "count": 100000 must be an
# error naming the field, not a MemoryError deep inside numpy.
MAX_DEVICES = 4096

_TOP_KEYS = ("version", "name", "description", "reference_peak_flops", "devices", "links")
_DEVICE_KEYS = ("name", "count", "speed", "peak_flops", "memory", "overhead")
_MATRIX_KEYS = ("bandwidth", "latency")
_GROUP_FORM_KEYS = ("groups", "default")
_LEVEL_KEYS = ("name", "members", "size", "bandwidth", "latency")
_LINK_KEYS = ("bandwidth", "latency")

# Unit suffixes per kind of quantity: value in the file * factor = SI value (bits: / 8 after).
_UNITS: Dict[str, Dict[str, float]] = {
    "bytes": {"B": 1.0, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
              "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40},
    "bytes/s": {"B/s": 1.0, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12,
                "KiB/s": 2.0**10, "MiB/s": 2.0**20, "GiB/s": 2.0**30,
                "Kb/s": 1e3, "Mb/s": 1e6, "Gb/s": 1e9, "Tb/s": 1e12,
                "Kbit/s": 1e3, "Mbit/s": 1e6, "Gbit/s": 1e9, "Tbit/s": 1e12},
    "seconds": {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9},
    "FLOP/s": {"FLOP/s": 1.0, "GFLOP/s": 1e9, "TFLOP/s": 1e12, "PFLOP/s": 1e15,
               "FLOPS": 1.0, "GFLOPS": 1e9, "TFLOPS": 1e12, "PFLOPS": 1e15},
}
_NUMBER_WITH_UNIT = re.compile(
    r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/]*)\s*$")


class _Reader:
  """Checks one file's content; every error names the source (file) and the field."""

  def __init__(self, source: str):
    self.source = source

  def fail(self, field: str, what: str):
    raise ValueError(f"{self.source}: {field} {what}" if field else f"{self.source}: {what}")

  def obj(self, value, field: str, keys: Sequence[str], required: Sequence[str] = ()) -> Dict:
    """A JSON object with only `keys` (plus "_" comments) and every key of `required`."""
    if not isinstance(value, Mapping):
      self.fail(field, f"must be an object, got {type(value).__name__}" if field else
                f"must hold one JSON object, got {type(value).__name__}")
    unknown = [k for k in value if k not in keys and not str(k).startswith("_")]
    if unknown:
      self.fail(f"{field}.{unknown[0]}" if field else unknown[0],
                f"is not a known key; valid keys: {', '.join(keys)}")
    for k in required:
      if k not in value:
        self.fail(f"{field}.{k}" if field else k, "is missing (required)")
    return {k: v for k, v in value.items() if k in keys}

  def number(self, value, field: str, kind: str, *, positive: bool = False,
             allow_inf: bool = False) -> float:
    """A finite (or, with allow_inf, infinite) number >= 0 (> 0 with positive); a string may
    carry a unit of `kind` or be "inf"."""
    if isinstance(value, str):
      text = value.strip()
      if text.lower() in ("inf", "infinity", "+inf"):
        x = math.inf
      else:
        m = _NUMBER_WITH_UNIT.match(text)
        units = _UNITS.get(kind, {})
        if not m or (m.group(2) and m.group(2) not in units):
          valid = f"; units: {', '.join(units)}" if units else ""
          self.fail(field, f"must be a number ({kind}){' or inf' if allow_inf else ''}, got "
                    f"{value!r}{valid}")
        x = float(m.group(1)) * units.get(m.group(2), 1.0) if m.group(2) else float(m.group(1))
        if m.group(2) and ("b/s" in m.group(2) or "bit/s" in m.group(2)):
          x = x / 8  # bits per second
        if math.isinf(x):
          self.fail(field, f"{value!r} is beyond the range of a float; write \"inf\" for "
                    "unbounded")
    elif isinstance(value, _Overflowed):
      self.fail(field, f"{value.text} is beyond the range of a float; write \"inf\" for "
                "unbounded")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
      try:
        x = float(value)
      except OverflowError:
        self.fail(field, f"an integer of {len(str(value))} digits is beyond the range of a "
                  "float")
    else:
      self.fail(field, f"must be a number ({kind}), got {value!r}")
    if math.isnan(x):
      self.fail(field, "must be a number, got NaN")
    if math.isinf(x) and not (allow_inf and x > 0):
      self.fail(field, f"must be finite, got {value!r}")
    if positive and not x > 0:
      self.fail(field, f"must be > 0, got {_show(value)}")
    if not x >= 0:
      self.fail(field, f"must be >= 0, got {_show(value)}")
    return x

  def integer(self, value, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
      self.fail(field, f"must be an integer, got {value!r}")
    if value < minimum:
      self.fail(field, f"must be >= {minimum}, got {value}")
    return int(value)

  def text(self, value, field: str) -> str:
    if not isinstance(value, str) or not value:
      self.fail(field, f"must be a non-empty string, got {value!r}")
    return value

  def items(self, value, field: str, *, nonempty: bool = True) -> List:
    if not isinstance(value, list):
      self.fail(field, f"must be a list, got {type(value).__name__}")
    if nonempty and not value:
      self.fail(field, "must not be empty")
    return value


def _show(value) -> str:
  """A value as the user wrote it: strings as is, numbers without a trailing '.0'."""
  if isinstance(value, float):
    return f"{value:g}"
  return str(value)


def _devices(r: _Reader, entries, reference: float):
  """(names, speed, overhead, memory) of the expanded device list."""
  names, speed, overhead, memory = [], [], [], []
  first_of: Dict[str, str] = {}
  for i, raw in enumerate(r.items(entries, "devices")):
    f = f"devices[{i}]"
    dev = r.obj(raw, f, _DEVICE_KEYS, required=("memory",))
    if ("speed" in dev) == ("peak_flops" in dev):
      r.fail(f, "must give exactly one of 'speed' (relative to the reference device) or "
             "'peak_flops' (FLOP/s)")
    if "speed" in dev:
      s = r.number(dev["speed"], f"{f}.speed", "relative", positive=True)
    else:
      s = r.number(dev["peak_flops"], f"{f}.peak_flops", "FLOP/s", positive=True) / reference
    mem = r.number(dev["memory"], f"{f}.memory", "bytes", allow_inf=True)
    over = r.number(dev.get("overhead", 0.0), f"{f}.overhead", "seconds")
    count = r.integer(dev["count"], f"{f}.count", 1) if "count" in dev else None
    base = r.text(dev["name"], f"{f}.name") if "name" in dev else None
    if len(names) + (count or 1) > MAX_DEVICES:
      r.fail(f"{f}.count" if count else f, f"makes {len(names) + (count or 1)} devices, more "
             f"than the {MAX_DEVICES} a topology may have (the simulator's memory grows with "
             "the device count squared)")
    for k in range(count or 1):
      if base is None:
        name = f"d{len(names)}"
      else:
        name = base if count is None else f"{base}{k}"
      if name in first_of:
        r.fail(f"{f}.name", f"gives device name {name!r} again (first in {first_of[name]})")
      first_of[name] = f
      names.append(name)
      speed.append(s)
      overhead.append(over)
      memory.append(mem)
  return names, np.array(speed), np.array(overhead), np.array(memory)


def _matrix(r: _Reader, value, field: str, d: int, kind: str, positive: bool,
            allow_inf: bool) -> np.ndarray:
  """A (d, d) matrix, or one number for every pair; the diagonal is ignored (may be null)."""
  if not isinstance(value, list):
    x = r.number(value, field, kind, positive=positive, allow_inf=allow_inf)
    return np.full((d, d), x)
  if len(value) != d:
    r.fail(field, f"must be a {d}x{d} matrix (one row per device) or one number, got "
           f"{len(value)} rows")
  for i, row in enumerate(value):
    if not isinstance(row, list) or len(row) != d:
      got = f"{len(row)} entries" if isinstance(row, list) else repr(row)
      r.fail(f"{field}[{i}]", f"must be a row of {d} entries (one per device), got {got}")
  out = np.zeros((d, d))
  for i, row in enumerate(value):
    for j, x in enumerate(row):
      if i == j:
        continue  # a device never sends to itself
      out[i, j] = r.number(x, f"{field}[{i}][{j}]", kind, positive=positive, allow_inf=allow_inf)
  return out


def _link(r: _Reader, raw, field: str, keys: Sequence[str]) -> Tuple[Dict, float, float]:
  obj = r.obj(raw, field, keys, required=_LINK_KEYS)
  bw = r.number(obj["bandwidth"], f"{field}.bandwidth", "bytes/s", positive=True, allow_inf=True)
  lat = r.number(obj["latency"], f"{field}.latency", "seconds")
  return obj, bw, lat


def _levels(r: _Reader, entries, names: List[str]) -> List[LinkLevel]:
  d = len(names)
  index = {n: i for i, n in enumerate(names)}
  levels = []
  for li, raw in enumerate(r.items(entries, "links.groups")):
    f = f"links.groups[{li}]"
    obj, bw, lat = _link(r, raw, f, _LEVEL_KEYS)
    if ("members" in obj) == ("size" in obj):
      r.fail(f, "must give exactly one of 'members' (lists of device names or indices) or "
             "'size' (consecutive blocks of that many devices)")
    if "size" in obj:
      size = r.integer(obj["size"], f"{f}.size", 1)
      if d % size:
        r.fail(f"{f}.size", f"must divide the number of devices ({d}), got {size}")
      groups = blocks(d, size)
    else:
      groups = []
      for gi, group in enumerate(r.items(obj["members"], f"{f}.members")):
        ids = []
        for mi, m in enumerate(r.items(group, f"{f}.members[{gi}]")):
          fm = f"{f}.members[{gi}][{mi}]"
          if isinstance(m, str):
            if m not in index:
              r.fail(fm, f"names no device: {m!r} (devices: {_sample(names)})")
            ids.append(index[m])
          elif isinstance(m, int) and not isinstance(m, bool):
            if not 0 <= m < d:
              r.fail(fm, f"device index {m} out of range [0, {d})")
            ids.append(m)
          else:
            r.fail(fm, f"must be a device name or index, got {m!r}")
        groups.append(tuple(ids))
      groups = tuple(groups)
    levels.append(LinkLevel(groups, bw, lat, str(obj.get("name", ""))))
  return levels


def _sample(names: Sequence[str], k: int = 6) -> str:
  shown = ", ".join(repr(n) for n in names[:k])
  return shown + (f", ... ({len(names)} in all)" if len(names) > k else "")


def _links(r: _Reader, raw, names: List[str]) -> Tuple[np.ndarray, np.ndarray]:
  d = len(names)
  if raw is None:
    if d > 1:
      r.fail("links", "is missing (required with more than one device)")
    return np.full((1, 1), np.inf), np.zeros((1, 1))
  obj = r.obj(raw, "links", _MATRIX_KEYS + _GROUP_FORM_KEYS)
  matrix = [k for k in _MATRIX_KEYS if k in obj]
  grouped = [k for k in _GROUP_FORM_KEYS if k in obj]
  if matrix and grouped:
    r.fail("links", f"mixes the matrix form ({', '.join(matrix)}) with the group form "
           f"({', '.join(grouped)}); give one")
  if matrix:
    for k in _MATRIX_KEYS:
      if k not in obj:
        r.fail(f"links.{k}", "is missing (the matrix form needs bandwidth and latency)")
    return (_matrix(r, obj["bandwidth"], "links.bandwidth", d, "bytes/s", True, True),
            _matrix(r, obj["latency"], "links.latency", d, "seconds", False, False))
  if not grouped:
    r.fail("links", "must give 'bandwidth' and 'latency' (matrices) or 'groups' (link levels, "
           "innermost first) with an optional 'default'")
  levels = _levels(r, obj["groups"], names) if "groups" in obj else []
  default = None
  if "default" in obj:
    _, bw, lat = _link(r, obj["default"], "links.default", _LINK_KEYS)
    default = (bw, lat)
  try:
    return grouped_links(d, levels, default, field="links.groups", names=names)
  except ValueError as e:
    raise ValueError(f"{r.source}: {e}") from None


def parse(content: Any, source: str = "topology") -> Topology:
  """The Topology that parsed JSON `content` describes; `source` names it in errors."""
  r = _Reader(source)
  top = r.obj(content, "", _TOP_KEYS, required=("devices",))
  if "version" in top and (isinstance(top["version"], bool) or top["version"] != VERSION):
    r.fail("version", f"must be {VERSION} (the only schema version), got {top['version']!r}")
  for k in ("name", "description"):
    if k in top and not isinstance(top[k], str):
      r.fail(k, f"must be a string, got {top[k]!r}")
  reference = V100_PEAK_FLOPS
  if "reference_peak_flops" in top:
    reference = r.number(top["reference_peak_flops"], "reference_peak_flops", "FLOP/s",
                         positive=True)
  names, speed, overhead, memory = _devices(r, top["devices"], reference)
  bandwidth, latency = _links(r, top.get("links"), names)
  try:
    return Topology.create(speed, overhead, memory, bandwidth, latency)
  except ValueError as e:  # not expected after the checks above; still name the file
    raise ValueError(f"{source}: {e}") from None


class _Overflowed(float):
  """A JSON number beyond float's range (it reads as inf): refused by `_Reader.number`."""

  def __new__(cls, text: str):
    out = super().__new__(cls, math.inf)
    out.text = text
    return out


def _parse_float(text: str) -> float:
  x = float(text)
  return _Overflowed(text) if math.isinf(x) else x


def read(path: Union[str, os.PathLike]) -> Any:
  """The parsed JSON of a file; ValueError naming the file if missing or not JSON."""
  path = os.fspath(path)
  if not os.path.isfile(path):
    raise ValueError(f"{path}: topology file does not exist" if not os.path.exists(path) else
                     f"{path}: not a file")
  try:
    with open(path, encoding="utf-8") as fh:
      # NaN / Infinity tokens (not JSON, but Python writes them) become floats so that the
      # field checks reject NaN by name and accept Infinity where inf is allowed; a number
      # beyond float's range (1e400) is kept apart, so that it is not read as infinity.
      return json.load(fh, parse_constant=float, parse_float=_parse_float,
                       object_pairs_hook=fileio.unique_keys)
  except fileio.RepeatedKey as e:
    raise ValueError(f"{path}: {e}") from None
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: not valid JSON: {e}") from None
  except RecursionError:
    raise ValueError(f"{path}: not a topology file: JSON nested too deeply") from None
  except (OSError, UnicodeDecodeError) as e:
    raise ValueError(f"{path}: cannot read topology file: {e}") from None


def from_json(path_or_dict) -> Topology:
  """`Topology.from_json`: a path to a topology file, or its parsed content (a mapping)."""
  if isinstance(path_or_dict, Mapping):
    return parse(path_or_dict, "topology")
  if isinstance(path_or_dict, (str, os.PathLike)):
    return parse(read(path_or_dict), os.fspath(path_or_dict))
  raise ValueError(f"Topology.from_json takes a file path or a dict, got "
                   f"{type(path_or_dict).__name__}")


# ------------------------------------------------------------------ writing
def _value(x: float) -> Union[float, str]:
  return "inf" if x == math.inf else float(x)


def to_json(topology: Topology, path: Optional[str] = None, *, name: Optional[str] = None,
            description: Optional[str] = None,
            device_names: Optional[Sequence[str]] = None) -> Dict[str, Any]:
  """`Topology.to_json`: the matrix form (diagonals null), exact (floats round-trip)."""
  d = topology.num_devices
  names = list(device_names) if device_names is not None else [f"d{i}" for i in range(d)]
  if len(names) != d or len(set(names)) != d:
    raise ValueError(f"Topology.to_json: device_names must be {d} distinct names, got {names}")
  speed, over, mem = (np.asarray(a, np.float64) for a in (topology.speed, topology.overhead,
                                                          topology.mem_capacity))
  out: Dict[str, Any] = {"version": VERSION}
  if name is not None:
    out["name"] = name
  if description is not None:
    out["description"] = description
  out["devices"] = [{"name": names[i], "speed": float(speed[i]), "memory": _value(mem[i]),
                     "overhead": float(over[i])} for i in range(d)]
  mats = {k: np.asarray(getattr(topology, k), np.float64) for k in _MATRIX_KEYS}
  out["links"] = {k: [[None if i == j else _value(m[i, j]) for j in range(d)] for i in range(d)]
                  for k, m in mats.items()}
  if path is not None:
    with fileio.atomic_open(os.fspath(path), "w", make_dirs=True) as fh:
      fh.write(dumps(out))
  return out


def dumps(obj: Any, indent: int = 2) -> str:
  """Strict JSON with one line per matrix row / list of scalars (readable for 64 devices)."""
  def fmt(x, level: int) -> str:
    pad, inner = " " * (indent * level), " " * (indent * (level + 1))
    if isinstance(x, Mapping) and x:
      body = ",\n".join(f"{inner}{json.dumps(str(k))}: {fmt(v, level + 1)}" for k, v in x.items())
      return "{\n" + body + "\n" + pad + "}"
    if isinstance(x, list) and x and any(isinstance(v, (list, Mapping)) for v in x):
      return "[\n" + ",\n".join(inner + fmt(v, level + 1) for v in x) + "\n" + pad + "]"
    return json.dumps(x, allow_nan=False)
  return fmt(obj, 0) + "\n"
