"""The local machine as a topology (issue 17, part 2): per-device speed and memory, and the
latency and bandwidth of every device-to-device copy, measured on the JAX devices at hand.

  topo, report = measure_topology()               # every local device of JAX's default backend
  topology_file.to_json(topo, "local.json", device_names=report["device_names"])

What is measured, per the simulator's section-4 semantics (docs/topology.md, "The local machine
as a topology"):
- `speed`: a jitted float32 matmul's FLOP/s on each device, relative to the first device. Graph
  costs from the local calibration (`go-jax-calibrate`) are seconds on that backend's devices,
  so the first device runs them at speed 1 and a slower or faster device proportionally.
- `overhead`: 0. The calibrated cost model already puts each op's launch overhead in its cost;
  a topology overhead would count it twice. (The measured dispatch time of a tiny op is in the
  report, for a user whose graph costs come from elsewhere.)
- `mem_capacity`: the device's `bytes_limit` from `memory_stats()` where the backend reports
  it; CPU devices do not, so the host's physical memory divided by the local CPU devices that
  share it.
- `latency`, `bandwidth` per ordered pair (i, j): `jax.device_put` of a device-i array to device
  j, timed (median of `repeats`) at several sizes, then the least-squares line
  time = latency + bytes / bandwidth (latency clamped at >= 0). Written by hand: a two-parameter
  linear fit, numpy's lstsq does the work.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from simulator.topology import Topology

DEFAULT_SIZES = (1 << 12, 1 << 16, 1 << 20, 1 << 23)  # bytes per copy: 4 KiB .. 8 MiB
QUICK_SIZES = (1 << 12, 1 << 18, 1 << 21)
MATMUL_N = 512


def fit_link(sizes: Sequence[float], seconds: Sequence[float]) -> Tuple[float, float]:
  """(latency s, bandwidth bytes/s) of the line seconds = latency + bytes / bandwidth through
  the points, latency clamped at 0 (then the slope is refitted through the origin).

  Raises:
    ValueError: fewer than two distinct sizes, or times that do not grow with the size (no
      positive bandwidth fits them).
  """
  x, y = np.asarray(sizes, np.float64), np.asarray(seconds, np.float64)
  if x.shape != y.shape or len(np.unique(x)) < 2:
    raise ValueError(f"fit_link: give times at two or more distinct sizes, got sizes {list(x)}")
  a = np.stack([np.ones_like(x), x], axis=1)
  (lat, per_byte), *_ = np.linalg.lstsq(a, y, rcond=None)
  if lat < 0:
    lat, per_byte = 0.0, float(x @ y / (x @ x))
  if not per_byte > 0:
    raise ValueError(f"fit_link: copy times {list(y)} do not grow with the size {list(x)}: "
                     "no positive bandwidth fits them (a noisy machine? more repeats)")
  return float(lat), float(1.0 / per_byte)


MIN_SAMPLE_S = 0.01  # a sample repeats the call until it lasts this long (timer resolution)
MAX_INNER = 1000


def _median_time(fn: Callable[[], Any], repeats: int) -> float:
  """Median seconds per call over `repeats` samples, each of enough calls to last
  MIN_SAMPLE_S (after a warm-up call, compilation and allocation, and a timed one that sets
  the calls per sample)."""
  fn()
  t0 = time.perf_counter()
  fn()
  first = time.perf_counter() - t0
  inner = int(min(MAX_INNER, max(1, np.ceil(MIN_SAMPLE_S / max(first, 1e-9)))))
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    for _ in range(inner):
      fn()
    times.append((time.perf_counter() - t0) / inner)
  return float(np.median(times))


def _host_memory_bytes() -> float:
  try:
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
  except (ValueError, OSError, AttributeError):
    return float("inf")


def _memory(device, sharing: int) -> Tuple[float, str]:
  stats = None
  try:
    stats = device.memory_stats()
  except Exception:  # pylint: disable=broad-except  (backends without the call raise)
    stats = None
  if stats and stats.get("bytes_limit"):
    return float(stats["bytes_limit"]), "memory_stats bytes_limit"
  return _host_memory_bytes() / max(sharing, 1), f"host memory / {max(sharing, 1)} devices"


def measure_topology(devices: Optional[Sequence[Any]] = None, *,
                     sizes: Sequence[int] = DEFAULT_SIZES, repeats: int = 5,
                     matmul_n: int = MATMUL_N,
                     progress: Optional[Callable[[str], None]] = None
                     ) -> Tuple[Topology, Dict[str, Any]]:
  """Measures `devices` (default: every device of JAX's default backend) as a Topology (module
  docstring) and returns it with a report: device names, the raw FLOP/s, dispatch times,
  memory sources, and per pair the sizes, median seconds and fitted latency / bandwidth.

  Raises:
    ValueError: no devices, repeats < 1, or a pair whose copy times no bandwidth fits.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  devs = list(jax.devices() if devices is None else devices)
  if not devs:
    raise ValueError("measure_topology: no devices to measure")
  if repeats < 1:
    raise ValueError(f"measure_topology: repeats must be >= 1, got {repeats}")
  say = progress or (lambda s: None)
  d = len(devs)
  names = [f"{dev.platform}{dev.id}" for dev in devs]
  matmul = jax.jit(lambda a, b: a @ b)
  tiny = jax.jit(lambda a: a + 1.0)
  flops, dispatch, memory, memory_source = [], [], [], []
  same_platform = {p: sum(1 for x in jax.devices(p)) for p in {dev.platform for dev in devs}}
  for i, dev in enumerate(devs):
    a = jax.device_put(jnp.ones((matmul_n, matmul_n), jnp.float32), dev)
    s = jax.device_put(jnp.ones((), jnp.float32), dev)
    t = _median_time(lambda: matmul(a, a).block_until_ready(), repeats)
    flops.append(2.0 * matmul_n ** 3 / t)
    dispatch.append(_median_time(lambda: tiny(s).block_until_ready(), repeats))
    mem, source = _memory(dev, same_platform[dev.platform])
    memory.append(mem)
    memory_source.append(source)
    say(f"device {names[i]}: {flops[-1] / 1e9:.1f} GFLOP/s (f32 matmul n={matmul_n}), "
        f"dispatch {dispatch[-1] * 1e6:.0f} us, memory {mem / 1e9:.1f} GB ({source})")
  latency = np.zeros((d, d))
  bandwidth = np.full((d, d), np.inf)
  pairs: List[Dict[str, Any]] = []
  arrays = {n: jnp.ones((n // 4,), jnp.float32) for n in sizes}
  for i in range(d):
    on_i = {n: jax.device_put(x, devs[i]) for n, x in arrays.items()}
    for j in range(d):
      if i == j:
        continue
      secs = [_median_time(lambda x=on_i[n]: jax.device_put(x, devs[j]).block_until_ready(),
                           repeats) for n in sizes]
      try:
        latency[i, j], bandwidth[i, j] = fit_link(sizes, secs)
      except ValueError as e:
        raise ValueError(f"measure_topology: link {names[i]} -> {names[j]}: {e}") from e
      pairs.append({"src": names[i], "dst": names[j], "bytes": list(map(int, sizes)),
                    "seconds": secs, "latency": latency[i, j], "bandwidth": bandwidth[i, j]})
      say(f"link {names[i]} -> {names[j]}: latency {latency[i, j] * 1e6:.1f} us, bandwidth "
          f"{bandwidth[i, j] / 1e9:.2f} GB/s")
  speed = np.asarray(flops) / flops[0]
  topo = Topology.create(speed, np.zeros(d), np.asarray(memory), bandwidth, latency)
  report = {"device_names": names, "flops_per_second": flops, "dispatch_seconds": dispatch,
            "memory_source": memory_source, "links": pairs, "repeats": repeats,
            "matmul_n": matmul_n, "backend": devs[0].platform}
  return topo, report
