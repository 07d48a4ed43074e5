"""Topology specs: one string (or a `Topology`) names the devices every launcher and config uses.

  PRESET_OR_JSON_PATH[@mem=VALUE]

    nvlink4                 a preset (`simulator.topology.available_presets()`)
    cluster/my.json         a topology file (any path ending in .json; docs/topology.md)
    nvlink4@mem=2e9         every device gets 2e9 bytes ("inf": unbounded)
    my.json@mem=0.6x        every device gets 0.6x the graph's single-device footprint

The footprint is the smallest peak memory over devices of the placements that put every op on
one device (priority: critical path, `simulator.graph.upward_rank`; infinite memory), i.e. what a
single-device placement needs; any factor below 1 therefore makes every single-device placement
infeasible: the memory-constrained setting in which the model must be split. A `Topology` object
is accepted wherever a spec is (`load_topology(topo)` is `topo`).

  topo = load_topology("my.json@mem=0.6x", graph)
  topo, footprint = make_topology(parse_topology("nvlink4@mem=0.6x"), graph)
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Optional, Tuple, Union

import numpy as np

from simulator.graph import CompGraph, upward_rank
from simulator.simulate import simulate
from simulator.topology import Topology, available_presets, preset

FILE_SUFFIX = ".json"
# A file spec: the shortest prefix ending in ".json" that is followed by options or the end.
_FILE_SPEC = re.compile(r"^(.*?\.json)((?:@.*)?)$", re.IGNORECASE | re.DOTALL)


def _parse_mem(text: str, spec: str) -> Tuple[Optional[float], Optional[float]]:
  """'2e9' / 'inf' -> (bytes, None); '0.6x' -> (None, factor)."""
  relative = text.endswith("x")
  try:
    value = float(text[:-1] if relative else text)
  except ValueError:
    value = float("nan")
  number = text[:-1] if relative else text
  spelled_inf = number.strip().lower().lstrip("+") in ("inf", "infinity")
  if math.isinf(value) and not spelled_inf:  # '1e400': overflowed, not a request for inf
    value = float("nan")
  if not value >= 0 or (relative and not math.isfinite(value)):
    raise ValueError(f"topology spec {spec!r}: mem must be bytes >= 0 ('2e9', 'inf') or a "
                     f"finite factor of the single-device footprint ('0.6x'), got {text!r}")
  return (None, value) if relative else (value, None)


# Option key -> parser of its value: (bytes, factor of the single-device footprint).
TOPOLOGY_OPTIONS = {"mem": _parse_mem}


@dataclasses.dataclass(frozen=True)
class TopologySpec:
  """A parsed topology spec.

  Attributes:
    spec: the spec as given (stripped); for a `Topology` object, "custom<D>".
    preset: the preset name, or the path of the topology file, or "custom" for an object.
    mem_bytes: absolute per-device capacity that replaces the topology's.
    mem_factor: capacity = factor * single-device footprint of the graph.
    topology: the topology read from the file, or the object given; None for a preset (built
      fresh by `base()`). Not part of equality or hashing.
  """
  spec: str
  preset: str
  mem_bytes: Optional[float] = None
  mem_factor: Optional[float] = None
  topology: Optional[Topology] = dataclasses.field(default=None, compare=False, repr=False)

  @property
  def is_file(self) -> bool:
    return self.preset.lower().endswith(FILE_SUFFIX)

  def base(self) -> Topology:
    """The topology before the memory option: the preset, the file's or the object."""
    return self.topology if self.topology is not None else preset(self.preset)


SpecLike = Union[str, TopologySpec, Topology]


def parse_topology(spec: SpecLike) -> TopologySpec:
  """Parses 'PRESET_OR_JSON_PATH[@mem=VALUE]' (module docstring), reading a file at once so
  that a bad file fails before any work; a `TopologySpec` is returned as is and a `Topology`
  object wrapped. ValueError naming the spec, option or file (and field) if bad."""
  if isinstance(spec, TopologySpec):
    return spec
  if isinstance(spec, Topology):
    return TopologySpec(f"custom{spec.num_devices}", "custom", topology=spec)
  if not isinstance(spec, str) or not spec.strip():
    raise ValueError(f"topology spec must be a non-empty string, got {spec!r}")
  text = spec.strip()
  file_match = _FILE_SPEC.match(text)
  if file_match:
    name, rest = file_match.group(1).strip(), file_match.group(2)
    options = [s.strip() for s in rest.split("@")[1:]]
    topology = Topology.from_json(name)  # ValueError naming the file (and field)
  else:
    name, *options = [s.strip() for s in text.split("@")]
    topology = None
    if name not in available_presets():
      raise ValueError(f"topology spec {spec!r}: unknown preset {name!r}; available: "
                       f"{sorted(available_presets())}, or a topology file ending in "
                       f"{FILE_SUFFIX} (docs/topology.md)")
  parsed = {}
  for option in options:
    key, eq, value = option.partition("=")
    if not eq or key.strip() not in TOPOLOGY_OPTIONS:
      raise ValueError(f"topology spec {spec!r}: bad option {option!r}; expected one of "
                       f"{[k + '=VALUE' for k in TOPOLOGY_OPTIONS]}")
    if key.strip() in parsed:
      raise ValueError(f"topology spec {spec!r}: option {key.strip()!r} given twice")
    parsed[key.strip()] = TOPOLOGY_OPTIONS[key.strip()](value.strip(), spec)
  mem_bytes, mem_factor = parsed.get("mem", (None, None))
  return TopologySpec(text, name, mem_bytes, mem_factor, topology)


def single_device_footprint(graph: CompGraph, topology: Topology) -> float:
  """Smallest peak memory (bytes) over devices of 'every op on device d', memory unbounded."""
  d, n = topology.num_devices, graph.num_nodes
  free = topology.with_memory(np.inf)
  place = np.repeat(np.arange(d)[:, None], n, axis=1)
  prio = np.broadcast_to(upward_rank(graph), (d, n))
  res = simulate(graph, free, place, prio)
  return float(np.asarray(res.peak_memory).max(axis=1).min())


def make_topology(spec: SpecLike,
                  graph: Optional[CompGraph] = None) -> Tuple[Topology, Optional[float]]:
  """(topology of the spec for this graph, footprint it was scaled from or None).

  `graph` is needed only for a relative memory option ('@mem=0.6x').
  """
  spec = parse_topology(spec)
  topo = spec.base()
  if spec.mem_bytes is not None:
    return topo.with_memory(spec.mem_bytes), None
  if spec.mem_factor is not None:
    if graph is None:
      raise ValueError(f"topology spec {spec.spec!r}: mem={spec.mem_factor:g}x is a factor of a "
                       "graph's single-device footprint; give the graph")
    ref = single_device_footprint(graph, topo)
    return topo.with_memory(spec.mem_factor * ref), ref
  return topo, None


def load_topology(spec_or_topology: SpecLike, graph: Optional[CompGraph] = None) -> Topology:
  """The Topology of a spec string, parsed spec or `Topology` object (returned as is)."""
  if isinstance(spec_or_topology, Topology):
    return spec_or_topology
  return make_topology(spec_or_topology, graph)[0]
