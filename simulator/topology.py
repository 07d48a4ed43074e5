"""Device topologies: a pytree of arrays (so it can be vmapped) plus named presets.

A topology says how fast each device runs ops relative to the reference device that graph costs
are measured on, what each op launch costs, how much memory each device has, and the bandwidth
and latency of every device pair. Presets cite where their figures come from.

Links can also be given as groups (`grouped_links`): "8 GPUs per host on NVLink, hosts on
InfiniBand" is a list of levels, innermost first, and a pair of devices talks at the figures of
the first level that puts both in one group. The multi-host presets are built that way, and so
are topology files that use the group form (`Topology.from_json`, schema in docs/topology.md).

Topology specs ("nvlink4", "my.json@mem=0.6x", or a `Topology` object) are parsed by
`simulator.topology_spec` (`parse_topology`, `make_topology`, `load_topology`); those names are
also available from this module.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Optional, Sequence, Tuple

import flax
import numpy as np

from simulator.graph import MAX_VALUE

GB = 1e9
GiB = 2.0**30
US = 1e-6

# Names defined in simulator.topology_spec, importable from here too (loaded on first use: that
# module needs the simulator, which this one must not import).
_SPEC_NAMES = ("TopologySpec", "TOPOLOGY_OPTIONS", "parse_topology", "make_topology",
               "load_topology", "single_device_footprint")


def __getattr__(name: str):
  if name in _SPEC_NAMES:
    from simulator import topology_spec  # pylint: disable=g-import-not-at-top
    return getattr(topology_spec, name)
  raise AttributeError(f"module 'simulator.topology' has no attribute {name!r}")


@flax.struct.dataclass
class Topology:
  """D devices. Arrays are float; the simulator casts them to its working dtype.

  Build with `Topology.create` (validates) or `preset(name)`; the raw constructor does not
  validate so that it also works on traced arrays inside jit / vmap.
  """
  speed: np.ndarray  # (D,) relative speed; duration = cost / speed + overhead
  overhead: np.ndarray  # (D,) seconds added to every op's duration (launch overhead)
  mem_capacity: np.ndarray  # (D,) bytes; inf = unbounded
  bandwidth: np.ndarray  # (D, D) bytes/s from row device to column device (diagonal unused)
  latency: np.ndarray  # (D, D) seconds per transfer (diagonal unused)

  @property
  def num_devices(self) -> int:
    return int(np.shape(self.speed)[0])

  @classmethod
  def create(cls, speed, overhead, mem_capacity, bandwidth, latency) -> "Topology":
    """Validated constructor; raises ValueError naming the field and device(s) at fault."""
    speed = np.asarray(speed, np.float64)
    if speed.ndim != 1 or speed.shape[0] == 0:
      raise ValueError(f"Topology: speed must be a non-empty 1-D array, got shape {speed.shape}")
    d = speed.shape[0]
    vecs = {"speed": speed, "overhead": np.asarray(overhead, np.float64),
            "mem_capacity": np.asarray(mem_capacity, np.float64)}
    mats = {"bandwidth": np.asarray(bandwidth, np.float64),
            "latency": np.asarray(latency, np.float64)}
    for k, v in vecs.items():
      if v.shape != (d,):
        raise ValueError(f"Topology: {k} has shape {v.shape}, expected ({d},)")
    for k, v in mats.items():
      if v.shape != (d, d):
        raise ValueError(f"Topology: {k} has shape {v.shape}, expected ({d}, {d})")
    off = ~np.eye(d, dtype=bool)

    def fail(field, mask, what):
      idx = np.argwhere(mask)[0]
      where = f"device {idx[0]}" if len(idx) == 1 else f"devices {idx[0]}->{idx[1]}"
      raise ValueError(f"Topology: {field} of {where} {what}")

    checks = [
        ("speed", speed, ~(np.isfinite(speed) & (speed > 0)), "must be finite and > 0"),
        ("overhead", vecs["overhead"], ~(np.isfinite(vecs["overhead"]) &
                                         (vecs["overhead"] >= 0)), "must be finite and >= 0"),
        ("mem_capacity", vecs["mem_capacity"], np.isnan(vecs["mem_capacity"]) |
         (vecs["mem_capacity"] < 0), "must be >= 0 (inf for unbounded)"),
        ("bandwidth", mats["bandwidth"], off & (np.isnan(mats["bandwidth"]) |
                                                (mats["bandwidth"] <= 0)),
         "must be > 0 (inf for free transfers)"),
        ("latency", mats["latency"], off & ~(np.isfinite(mats["latency"]) &
                                             (mats["latency"] >= 0)), "must be finite and >= 0"),
    ]
    for field, _, mask, what in checks:
      if np.any(mask):
        fail(field, mask, what)
    # Finite values beyond the simulator's float32 range (graph.MAX_VALUE), and speeds or
    # bandwidths so small that a cost or a transfer time divided by them would overflow.
    for field, arr, mask in (
        [(k, v, np.isfinite(v) & (v > MAX_VALUE)) for k, v in vecs.items()] +
        [(k, v, off & np.isfinite(v) & (v > MAX_VALUE)) for k, v in mats.items()]):
      if np.any(mask):
        fail(field, mask, f"is above {MAX_VALUE:g} (the simulator's float32 range; use inf "
             "for unbounded, or check the units)")
    for field, arr, mask in (("speed", speed, speed < 1 / MAX_VALUE),
                             ("bandwidth", mats["bandwidth"], off & (mats["bandwidth"] <
                                                                     1 / MAX_VALUE))):
      if np.any(mask):
        fail(field, mask, f"is below {1 / MAX_VALUE:g} (times divided by it would overflow "
             "the simulator's float32 range)")
    bw = np.where(off, mats["bandwidth"], np.inf)
    lat = np.where(off, mats["latency"], 0.0)
    return cls(speed=speed, overhead=vecs["overhead"], mem_capacity=vecs["mem_capacity"],
               bandwidth=bw, latency=lat)

  @classmethod
  def uniform(cls, num_devices: int, *, bandwidth: float, latency: float = 0.0,
              mem_capacity: float = np.inf, speed: float = 1.0,
              overhead: float = 0.0) -> "Topology":
    """Identical devices, every pair linked with the same bandwidth and latency."""
    if (isinstance(num_devices, bool) or not isinstance(num_devices, (int, np.integer))
        or num_devices < 1):
      raise ValueError(f"Topology.uniform: num_devices must be an integer >= 1, got "
                       f"{num_devices!r}")
    d = num_devices
    return cls.create(np.full(d, speed), np.full(d, overhead), np.full(d, mem_capacity),
                      np.full((d, d), bandwidth), np.full((d, d), latency))

  def with_memory(self, mem_capacity) -> "Topology":
    """The same topology with another per-device memory capacity (scalar or (D,))."""
    mem = np.asarray(mem_capacity, np.float64)
    if mem.ndim > 1 or (mem.ndim == 1 and mem.shape != (self.num_devices,)):
      raise ValueError(f"Topology.with_memory: mem_capacity must be a scalar or one value per "
                       f"device ({self.num_devices}), got shape {mem.shape}")
    return Topology.create(self.speed, self.overhead, np.broadcast_to(mem, (self.num_devices,)),
                           self.bandwidth, self.latency)

  def link_tables(self):
    """(latency (D, D) s, seconds per byte (D, D)) as float64 numpy, zero on the diagonal.

    A transfer u -> e from device d takes latency[d, e] + bytes * per_byte[d, e] (rule 3); a
    device never sends to itself. Shared by the host-side heuristics and bounds.
    """
    off = ~np.eye(self.num_devices, dtype=bool)
    latency = np.where(off, np.asarray(self.latency, np.float64), 0.0)
    per_byte = np.where(off, 1.0 / np.asarray(self.bandwidth, np.float64), 0.0)
    return latency, per_byte

  def transfer_time(self, src: int, dst: int, nbytes: float) -> float:
    return float(self.latency[src, dst] + nbytes / self.bandwidth[src, dst])

  # ---------------------------------------------------------------- files
  def to_json(self, path: Optional[str] = None, *, name: Optional[str] = None,
              description: Optional[str] = None,
              device_names: Optional[Sequence[str]] = None) -> dict:
    """This topology as a topology-file dict (schema version 1, matrix form); with `path`,
    also written there atomically. `Topology.from_json` of the result equals this topology."""
    from simulator import topology_file  # pylint: disable=g-import-not-at-top
    return topology_file.to_json(self, path, name=name, description=description,
                                 device_names=device_names)

  @classmethod
  def from_json(cls, path_or_dict) -> "Topology":
    """Reads a topology file (a path) or its parsed content (a dict); see docs/topology.md.

    Raises ValueError naming the file and the field at fault.
    """
    from simulator import topology_file  # pylint: disable=g-import-not-at-top
    return topology_file.from_json(path_or_dict)


# ------------------------------------------------------------------ grouped links
@dataclasses.dataclass(frozen=True)
class LinkLevel:
  """One level of a grouped interconnect: devices in one of `groups` talk at these figures.

  Attributes:
    groups: disjoint tuples of device ids (a device is in at most one group of a level).
    bandwidth: bytes/s between two devices of one group (> 0, inf allowed).
    latency: seconds per transfer between them (finite, >= 0).
    name: what the level is (e.g. "nvlink", "host"), for messages and files.
  """
  groups: Tuple[Tuple[int, ...], ...]
  bandwidth: float
  latency: float
  name: str = ""


def blocks(num_devices: int, size: int) -> Tuple[Tuple[int, ...], ...]:
  """Consecutive groups of `size` devices: blocks(16, 8) = ((0..7), (8..15))."""
  if size < 1 or num_devices % size:
    raise ValueError(f"group size must be >= 1 and divide the {num_devices} devices, got {size}")
  return tuple(tuple(range(s, s + size)) for s in range(0, num_devices, size))


def grouped_links(num_devices: int, levels: Sequence[LinkLevel],
                  default: Optional[Tuple[float, float]] = None, *, field: str = "levels",
                  names: Optional[Sequence[str]] = None) -> Tuple[np.ndarray, np.ndarray]:
  """(bandwidth (D, D), latency (D, D)) of a grouped interconnect.

  Levels are listed innermost first: a pair of devices gets the bandwidth and latency of the
  first level that has both in one group, else `default` (bandwidth, latency). Groups need not
  nest (the DGX-1V's double-NVLink pairs {i, i+4} cross its quads). The diagonal is inf / 0.
  Raises ValueError naming `field` (e.g. "links.groups" in a file) for a device id out of range,
  a device in two groups of one level, or a pair in no common group without a default.
  """
  d = num_devices
  label = (lambda i: f"{i} ({names[i]!r})") if names is not None else str
  level_of = np.full((d, d), -1, np.int64)
  for li, level in enumerate(levels):
    owner = {}
    for gi, group in enumerate(level.groups):
      members = [int(m) for m in group]
      for m in members:
        if not 0 <= m < d:
          raise ValueError(f"{field}[{li}].members[{gi}]: device {m} out of range [0, {d})")
        if m in owner:
          where = ("twice in that group" if owner[m] == gi
                   else f"also in {field}[{li}].members[{owner[m]}]")
          raise ValueError(f"{field}[{li}].members[{gi}]: device {label(m)} is {where}; a "
                           "device belongs to at most one group per level")
        owner[m] = gi
      idx = np.asarray(members, np.int64)
      block = level_of[np.ix_(idx, idx)]
      level_of[np.ix_(idx, idx)] = np.where(block < 0, li, block)
  off = ~np.eye(d, dtype=bool)
  if default is None and np.any(off & (level_of < 0)):
    i, j = np.argwhere(off & (level_of < 0))[0]
    raise ValueError(f"{field}: devices {label(int(i))} and {label(int(j))} share no group, and "
                     "no default link is given")
  bw_of = np.array([lv.bandwidth for lv in levels] + [np.nan if default is None else default[0]],
                   np.float64)
  lat_of = np.array([lv.latency for lv in levels] + [np.nan if default is None else default[1]],
                    np.float64)
  bandwidth = np.where(off, bw_of[level_of], np.inf)  # level -1 picks the default (last)
  latency = np.where(off, lat_of[level_of], 0.0)
  return bandwidth, latency


# ------------------------------------------------------------------ presets
_PRESETS: Dict[str, Callable[[], Topology]] = {}
_DESCRIPTIONS: Dict[str, str] = {}


def register_preset(name: str, description: str):
  def wrap(fn):
    _PRESETS[name] = fn
    _DESCRIPTIONS[name] = description
    return fn
  return wrap


def preset(name: str, mem_capacity=None) -> Topology:
  """A named preset; `mem_capacity` (bytes, scalar or (D,)) overrides its memory."""
  if name not in _PRESETS:
    raise ValueError(f"unknown topology preset '{name}'; available: {sorted(_PRESETS)}")
  topo = _PRESETS[name]()
  return topo if mem_capacity is None else topo.with_memory(mem_capacity)


def available_presets() -> Dict[str, str]:
  return dict(_DESCRIPTIONS)


# V100-SXM2-32GB (NVIDIA Tesla V100 datasheet: 32 GB HBM2, NVLink 2.0 with 25 GB/s per link per
# direction). DGX-1V wiring (NVIDIA "DGX-1 with Tesla V100 System Architecture" white paper, 2017):
# a hybrid cube-mesh of two fully connected quads {0..3}, {4..7} plus links i <-> i+4; pairs with
# a double link get 50 GB/s. Simplification: intra-quad pairs 25 GB/s (1 link), cross pairs i<->i+4
# 50 GB/s (2 links), cross pairs without a direct link go through PCIe 3.0 x16 host bridges at
# about 10 GB/s measured (NCCL tests report 9-11 GB/s host-routed P2P). Latency 10 us: one
# cudaMemcpyPeerAsync plus synchronisation, as measured in TensorFlow's executor (Placeto, Baechi
# use 10-20 us). Op launch overhead 5 us (CUDA kernel launch plus framework dispatch).
_V100_MEM = 32 * GB
_NVLINK = 25 * GB


def _dgx1v(n: int) -> Topology:
  bw = np.full((8, 8), 10 * GB)
  for q in (range(0, 4), range(4, 8)):
    for i in q:
      for j in q:
        bw[i, j] = _NVLINK
  for i in range(4):
    bw[i, i + 4] = bw[i + 4, i] = 2 * _NVLINK
  bw = bw[:n, :n]
  return Topology.create(np.ones(n), np.full(n, 5 * US), np.full(n, _V100_MEM), bw,
                         np.full((n, n), 10 * US))


for _n in (2, 4, 8):
  register_preset(f"nvlink{_n}",
                  f"{_n}x V100-SXM2-32GB, DGX-1V NVLink 2.0 hybrid cube-mesh (25/50 GB/s)")(
                      lambda _n=_n: _dgx1v(_n))
# One device of the same kind: the single-device fusion task and the 1-device rows of tables.
register_preset("nvlink1", "1x V100-SXM2-32GB (one device of the DGX-1V presets, no links)")(
    lambda: _dgx1v(1))


# V100-PCIe-16GB on PCIe 3.0 x16 (15.75 GB/s theoretical; about 12 GB/s measured peer-to-peer
# under one PCIe switch, about 8 GB/s across CPU sockets through QPI/UPI, per NVIDIA's
# p2pBandwidthLatencyTest figures commonly reported for dual-socket servers). 8 GPUs = two
# switches of 4, one per socket. Latency 15 us (PCIe P2P round trip plus framework overhead).
def _pcie(n: int) -> Topology:
  socket = np.arange(n) // 4
  bw = np.where(socket[:, None] == socket[None, :], 12 * GB, 8 * GB)
  return Topology.create(np.ones(n), np.full(n, 5 * US), np.full(n, 16 * GB), bw,
                         np.full((n, n), 15 * US))


for _n in (4, 8):
  register_preset(f"pcie{_n}", f"{_n}x V100-PCIe-16GB on PCIe 3.0 (12 GB/s same socket, "
                  "8 GB/s across)")(lambda _n=_n: _pcie(_n))


# TPU-like 2x2 torus of 4 chips (TPU v3: 32 GiB HBM per chip; Jouppi et al., "A Domain-Specific
# Supercomputer for Training Deep Neural Networks", CACM 2020: ICI links of 656 Gbit/s = 82 GB/s
# per direction). In a 2x2 torus each chip links directly to its two neighbours (the wrap-around
# link doubles the pair's bandwidth to 164 GB/s); the diagonal chip is two hops away: store and
# forward through a neighbour halves throughput to 82 GB/s and doubles latency. Latency 5 us per
# hop; op overhead 2 us (XLA-fused kernels, no framework dispatch).
@register_preset("tpu2x2", "TPU v3-like 2x2 torus, 164 GB/s neighbours, 82 GB/s diagonal")
def _tpu2x2() -> Topology:
  xy = np.array([(0, 0), (0, 1), (1, 0), (1, 1)])
  hops = np.abs(xy[:, None, :] - xy[None, :, :]).sum(-1)
  bw = np.where(hops == 1, 164 * GB, 82 * GB)
  return Topology.create(np.ones(4), np.full(4, 2 * US), np.full(4, 32 * GiB), bw,
                         hops * 5 * US)


# Placeto's setting (Addanki et al., NeurIPS 2019, section 5: a machine with two Tesla K80 GPU
# dies). K80: 2x GK210 with 12 GB GDDR5 each (NVIDIA K80 datasheet); the dies talk through the
# board's PCIe 3.0 switch, about 10 GB/s peer-to-peer measured. K80 is about 0.5x the V100-era
# reference throughput is NOT applied: speed 1.0 because Placeto's costs were profiled on the K80
# itself. Latency 20 us, op overhead 10 us (TensorFlow 1.x executor dispatch on K80).
@register_preset("k80x2", "Placeto's 2x K80 (12 GB each, PCIe 3.0 ~10 GB/s)")
def _k80x2() -> Topology:
  return Topology.create(np.ones(2), np.full(2, 10 * US), np.full(2, 12 * GB),
                         np.full((2, 2), 10 * GB), np.full((2, 2), 20 * US))


# ------------------------------------------------------------------ multi-host presets
# Several DGX-1V hosts (8x V100-SXM2-32GB each, wired inside a host exactly as `nvlink8`: pairs
# i <-> i+4 on a double NVLink 50 GB/s, the rest of a quad 25 GB/s, other pairs of the host through
# PCIe host bridges 10 GB/s; 10 us per transfer, 5 us per op), hosts linked by a network. Built
# from link levels, innermost first: the double-NVLink pairs, the quads, the host, then the
# network as the default for pairs on two hosts. The simulator has no network contention (only
# one transfer at a time leaves each device, rule 3), so the per-pair network figure is the NIC's
# full rate: optimistic when several GPUs of a host send at once. The host-routed pairs inside a
# host (10 GB/s, through the CPUs' interconnect) are thus slower than EDR but cost less latency.
#
# InfiniBand EDR: 100 Gb/s per port = 12.5 GB/s per direction (InfiniBand Trade Association
# roadmap; Mellanox ConnectX-4 EDR adapters), one NIC per host; GPU memory is read directly by
# the NIC (GPUDirect RDMA), so no host copy. Latency 15 us: the 10 us per-transfer framework cost
# of the single-host presets plus about 5 us for the network path (NIC + one switch + the
# communication library's proxy thread; `ib_send_lat` alone reports 1-2 us on EDR).
# Ethernet: 25GbE = 25 Gb/s = 3.125 GB/s per direction (IEEE 802.3by), TCP through the kernel
# with a host-memory bounce; small-message TCP latency on 10/25GbE is about 20-50 us, so 40 us in
# all with the 10 us framework cost.
_IB_EDR = 100 * GB / 8
_IB_LATENCY = 15 * US
_ETH_25G = 25 * GB / 8
_ETH_LATENCY = 40 * US


def dgx1v_levels(hosts: int) -> Tuple[LinkLevel, ...]:
  """The intra-host link levels of `hosts` DGX-1V hosts (devices 8h..8h+7 on host h)."""
  pairs = tuple((8 * h + i, 8 * h + i + 4) for h in range(hosts) for i in range(4))
  return (LinkLevel(pairs, 2 * _NVLINK, 10 * US, "nvlink_x2"),
          LinkLevel(blocks(8 * hosts, 4), _NVLINK, 10 * US, "nvlink_quad"),
          LinkLevel(blocks(8 * hosts, 8), 10 * GB, 10 * US, "host_pcie"))


def _dgx1v_hosts(hosts: int, network_bandwidth: float, network_latency: float) -> Topology:
  n = 8 * hosts
  bw, lat = grouped_links(n, dgx1v_levels(hosts), (network_bandwidth, network_latency))
  return Topology.create(np.ones(n), np.full(n, 5 * US), np.full(n, _V100_MEM), bw, lat)


for _h in (2, 4):
  register_preset(f"dgx1v_{_h}x8_ib",
                  f"{_h} DGX-1V hosts x 8 V100-SXM2-32GB (NVLink inside), EDR InfiniBand "
                  "12.5 GB/s between hosts")(lambda _h=_h: _dgx1v_hosts(_h, _IB_EDR, _IB_LATENCY))

def _v100_hosts(hosts: int, per_host: int, network_bandwidth: float,
                network_latency: float) -> Topology:
  """`hosts` hosts of `per_host` V100s, all-to-all NVLink inside a host, a network between."""
  n = hosts * per_host
  bw, lat = grouped_links(n, (LinkLevel(blocks(n, per_host), _NVLINK, 10 * US, "nvlink"),),
                          (network_bandwidth, network_latency))
  return Topology.create(np.ones(n), np.full(n, 5 * US), np.full(n, _V100_MEM), bw, lat)


# A multi-host cluster within a learned policy's 8 devices (the GO policies serve at most 8).
register_preset("v100_2x4_ib", "2 hosts x 4 V100-SXM2-32GB (NVLink 25 GB/s inside), EDR "
                "InfiniBand 12.5 GB/s between hosts")(
                    lambda: _v100_hosts(2, 4, _IB_EDR, _IB_LATENCY))

register_preset("dgx1v_2x8_eth", "2 DGX-1V hosts x 8 V100-SXM2-32GB (NVLink inside), 25GbE "
                "3.125 GB/s between hosts")(lambda: _dgx1v_hosts(2, _ETH_25G, _ETH_LATENCY))
