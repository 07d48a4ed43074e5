"""The local machine as a topology (issue 17, part 2): per-device speed and memory, and the
latency and bandwidth of every device-to-device copy, measured on the JAX devices at hand.

  topo, report = measure_topology()               # every local device of JAX's default backend
  topology_file.to_json(topo, "local.json", device_names=report["device_names"])

What is measured, per the simulator's section-4 semantics (docs/topology.md, "The local machine
as a topology"):
- `speed`: a jitted float32 matmul's FLOP/s on each device (its fastest of at least 5 rounds,
  the devices timed round-robin), relative to the first device. Graph costs from the local
  calibration (`go-jax-calibrate`) are seconds on that backend's devices, so the first device
  runs them at speed 1 and a slower or faster device proportionally.
- `overhead`: 0. The calibrated cost model already puts each op's launch overhead in its cost;
  a topology overhead would count it twice. (The measured dispatch time of a tiny op is in the
  report, for a user whose graph costs come from elsewhere.)
- `mem_capacity`: the device's `bytes_limit` from `memory_stats()` where the backend reports
  it; CPU devices do not, so the host's physical memory divided by the local CPU devices that
  share it.
- `latency`, `bandwidth` per ordered pair (i, j): `jax.device_put` of a device-i array to device
  j, timed at several sizes (the sizes sampled round-robin, each size's fastest of `repeats`
  rounds; measured again with twice the rounds, up to LINK_ATTEMPTS times, when the times do
  not grow with the size, as a busy shared machine can make them), then the line time =
  latency + bytes / bandwidth through the smallest copy's time with the least-squares slope
  (`fit_link`).
  Written by hand: a one-parameter least-squares slope. The report keeps each size's
  relative error: copies between CPU devices are far from one line (cache-sized arrays copy at
  tens of GB/s, fresh arrays of tens of MB at about 2 GB/s here), which the simulator's
  single latency + bandwidth per link cannot express.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from simulator.topology import Topology

DEFAULT_SIZES = (1 << 12, 1 << 16, 1 << 20, 1 << 22, 1 << 24)  # bytes per copy: 4 KiB .. 16 MiB
QUICK_SIZES = (1 << 12, 1 << 18, 1 << 21)
MATMUL_N = 512


def fit_link(sizes: Sequence[float], seconds: Sequence[float]) -> Tuple[float, float]:
  """(latency s, bandwidth bytes/s) of the line seconds = latency + bytes / bandwidth that
  passes through the smallest copy's time (what a tiny copy costs is the latency) and whose
  slope is the least-squares one over the other sizes in absolute seconds (so the large copies,
  which dominate a step's transfer time, weigh most); latency clamped at 0.

  Raises:
    ValueError: fewer than two distinct sizes, a size that is not finite and >= 0, a time
      that is not finite and > 0, or times that do not grow with the size (no positive
      bandwidth fits them).
  """
  x, y = np.asarray(sizes, np.float64), np.asarray(seconds, np.float64)
  if x.shape != y.shape or len(np.unique(x)) < 2:
    raise ValueError(f"fit_link: give times at two or more distinct sizes, got sizes {list(x)}")
  if not np.all(np.isfinite(x)) or np.any(x < 0):
    raise ValueError(f"fit_link: sizes must be finite numbers of bytes >= 0, got {list(x)}")
  if not np.all((y > 0) & np.isfinite(y)):  # (an infinite time fitted a bandwidth of 0)
    raise ValueError(f"fit_link: copy times must be finite and > 0, got {list(y)}")
  k = int(np.argmin(x))
  dx, dy = x - x[k], y - y[k]
  per_byte = float(dx @ dy / (dx @ dx))
  if not per_byte > 0:
    raise ValueError(f"fit_link: copy times {list(y)} do not grow with the size {list(x)}: "
                     "no positive bandwidth fits them (a noisy machine? more repeats)")
  return max(0.0, float(y[k] - x[k] * per_byte)), 1.0 / per_byte


LINK_ATTEMPTS = 3  # a link whose times no line fits is measured again with twice the rounds
MIN_SAMPLE_S = 0.01  # a sample repeats the call until it lasts this long (timer resolution)
MAX_INNER = 1000


def _calls_per_sample(fn: Callable[[], Any]) -> int:
  """Warms `fn` up (compilation, allocation), then how many calls last MIN_SAMPLE_S."""
  fn()
  t0 = time.perf_counter()
  fn()
  once = time.perf_counter() - t0
  return int(min(MAX_INNER, max(1, np.ceil(MIN_SAMPLE_S / max(once, 1e-9)))))


def _interleaved_times(fns: Sequence[Callable[[], Any]], repeats: int) -> List[List[float]]:
  """Seconds per call of each of `fns`, `repeats` samples each, taken round-robin (one sample
  of every fn per round) so that a slow spell of the machine (another process, the clock
  ramping up) touches every fn alike; a sample repeats its call for MIN_SAMPLE_S."""
  inner = [_calls_per_sample(f) for f in fns]
  out: List[List[float]] = [[] for _ in fns]
  for _ in range(repeats):
    for k, f in enumerate(fns):
      t0 = time.perf_counter()
      for _ in range(inner[k]):
        f()
      out[k].append((time.perf_counter() - t0) / inner[k])
  return out


def _time(fn: Callable[[], Any], repeats: int) -> float:
  """Median seconds per call of `fn` (`_interleaved_times` of one)."""
  return float(np.median(_interleaved_times([fn], repeats)[0]))


def _host_memory_bytes() -> float:
  try:
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
  except (ValueError, OSError, AttributeError):
    return float("inf")


def _memory(device, sharing: int) -> Tuple[float, str]:
  """The device's memory in bytes and where the number comes from."""
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
  memory sources, and per pair the sizes, fastest seconds and fitted latency / bandwidth.

  Raises:
    ValueError: no devices, repeats < 1, matmul_n < 1, fewer than two distinct sizes (or one
      under 4 bytes), or a pair whose copy times no bandwidth fits.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  devs = list(jax.devices() if devices is None else devices)
  if not devs:
    raise ValueError("measure_topology: no devices to measure")
  if repeats < 1:
    raise ValueError(f"measure_topology: repeats must be >= 1, got {repeats}")
  if isinstance(matmul_n, bool) or not isinstance(matmul_n, int) or matmul_n < 1:
    raise ValueError(f"measure_topology: matmul_n must be an integer >= 1 (the side of the "
                     f"timed matmul), got {matmul_n!r}")
  if (len({int(n) for n in sizes}) < 2 or any(int(n) != n or n < 4 for n in sizes)):
    raise ValueError(f"measure_topology: sizes must be two or more distinct whole numbers of "
                     f"bytes >= 4 (one float32 at least), got {list(sizes)}")
  say = progress or (lambda s: None)
  d = len(devs)
  names = [f"{dev.platform}{dev.id}" for dev in devs]
  matmul = jax.jit(lambda a, b: a @ b)
  tiny = jax.jit(lambda a: a + 1.0)
  flops, dispatch, memory, memory_source = [], [], [], []
  same_platform = {p: len(jax.devices(p)) for p in {dev.platform for dev in devs}}
  mats = [jax.device_put(jnp.ones((matmul_n, matmul_n), jnp.float32), dev) for dev in devs]
  # each device's fastest round: its speed, not what else ran then (interference only slows)
  matmul_times = _interleaved_times(
      [lambda a=a: matmul(a, a).block_until_ready() for a in mats], max(repeats, 5))
  for i, dev in enumerate(devs):
    s = jax.device_put(jnp.ones((), jnp.float32), dev)
    flops.append(2.0 * matmul_n ** 3 / min(matmul_times[i]))
    dispatch.append(_time(lambda: tiny(s).block_until_ready(), repeats))
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
      copies = [lambda x=on_i[n], dst=devs[j]: jax.device_put(x, dst).block_until_ready()
                for n in sizes]
      for attempt in range(LINK_ATTEMPTS):
        # every size sampled in each round, each size's fastest round kept: a slow spell of a
        # shared machine touches all sizes alike and only ever slows a copy down
        secs = [min(t) for t in _interleaved_times(copies, repeats << attempt)]
        try:
          latency[i, j], bandwidth[i, j] = fit_link(sizes, secs)
          break
        except ValueError as e:
          if attempt + 1 == LINK_ATTEMPTS:
            raise ValueError(f"measure_topology: link {names[i]} -> {names[j]}: {e}") from e
          say(f"link {names[i]} -> {names[j]}: times {secs} do not grow with the size; "
              f"measuring again with {repeats << (attempt + 1)} rounds")
      fitted = latency[i, j] + np.asarray(sizes, np.float64) / bandwidth[i, j]
      rel = (fitted - np.asarray(secs)) / np.asarray(secs)
      pairs.append({"src": names[i], "dst": names[j], "bytes": list(map(int, sizes)),
                    "seconds": secs, "latency": latency[i, j], "bandwidth": bandwidth[i, j],
                    "fit_relative_error": rel.tolist()})
      say(f"link {names[i]} -> {names[j]}: latency {latency[i, j] * 1e6:.1f} us, bandwidth "
          f"{bandwidth[i, j] / 1e9:.2f} GB/s (fit within {100 * np.abs(rel).max():.0f}% of "
          f"the {len(sizes)} sizes)")
  speed = np.asarray(flops) / flops[0]
  topo = Topology.create(speed, np.zeros(d), np.asarray(memory), bandwidth, latency)
  report = {"device_names": names, "flops_per_second": flops, "dispatch_seconds": dispatch,
            "memory_source": memory_source, "links": pairs, "repeats": repeats,
            "matmul_n": matmul_n, "backend": devs[0].platform}
  return topo, report
