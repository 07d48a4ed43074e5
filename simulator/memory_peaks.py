"""Memory peaks of simulated schedules (docs/design.md section 4, rule 7), from alloc/free events.

`simulator.simulate`'s loop turns each committed schedule into events (+bytes when an output,
a temporary or a received copy is allocated, -bytes when it is freed; `Events`); this module
sums them per device in time order and takes the peak, sampled after all events of an instant
(with half-open intervals that is the peak, whatever the order of events within the instant),
in one of two equivalent ways chosen by backend (`peak_memory`): on a CPU, one packed integer
sort by time (`rank_order`) and one sequential pass with a running sum per device; on an
accelerator, where that pass of M tiny steps is launch-bound, one packed sort by (device, time)
and a cumulative sum per device segment.
"""

from __future__ import annotations

from typing import Optional

import flax
import jax
import jax.numpy as jnp

def resident_base(events: "Events", num_devices: int) -> "Events":
  """The events with `base` (B, D): each device's resident parameter bytes, from the per-op
  (resident bytes, device) pairs (B, Np) the loop's events carry."""
  resident, place = events.base
  with jax.enable_x64(True):  # float64 sums (`_wide`); `peak_memory` rounds the peaks back
    base = jax.vmap(lambda r, p: jax.ops.segment_sum(r, p, num_segments=num_devices))(
        _wide(resident), place)
  return events.replace(base=base)


def _wide(x):
  """x as float64 (call under `jax.enable_x64(True)`). Byte sums are taken in float64 and only
  the peaks rounded to the working dtype: a float32 running sum drifts, as each + or - rounds
  to the ulp of the running total (64 bytes at 1 GB), by up to 1e-3 relative over the events
  of a 60k-op graph (measured: docs/design.md section 4, Precision), where the exact sum of
  float32 byte counts is within 2**-24 of the peak."""
  return x.astype(jnp.float64)


@flax.struct.dataclass
class Events:
  """Memory alloc/free events of a batch of schedules (rule 7)."""
  time: jnp.ndarray  # (B, M) seconds, >= 0
  dev: jnp.ndarray  # (B, M) int32 device
  delta: jnp.ndarray  # (B, M) bytes: + alloc, - free; 0 for empty intervals and padding
  # (B, D) parameter bytes resident for the whole step (from the loop: the pair (resident
  # bytes, device) per op, (B, Np) each, until `resident_base` sums them)
  base: object


def sortable_bits(x):
  """Unsigned integers that order like the floats `x` (-0.0 == 0.0): uint32, or uint64."""
  itype, utype = ((jnp.int64, jnp.uint64) if x.dtype == jnp.float64 else
                  (jnp.int32, jnp.uint32))
  # -0.0 -> 0.0 on the bits (its pattern is the integer minimum): a float `x == 0` would also
  # take a subnormal for 0 where the CPU treats subnormals as zero, tying 1e-40 with 0.
  bits = jax.lax.bitcast_convert_type(x, itype)
  bits = jnp.where(bits == jnp.iinfo(itype).min, jnp.zeros_like(bits), bits)
  bits = jnp.where(bits < 0, bits ^ jnp.iinfo(itype).max, bits)  # negatives: reverse order
  return (bits ^ jnp.iinfo(itype).min).astype(utype)  # flip the sign bit: unsigned order


def rank_order(x):
  """Stable ascending order of each row of `x` (B, M), and a key of each sorted element.

  Returns (order, key): `x[b, order[b]]` is sorted with ties in index order, and key[b, k] is
  an integer equal for two sorted elements exactly when their values are equal. XLA's CPU sort
  is fast only for a single integer operand (about 8x faster than a sort with a payload or with
  float keys, measured here), so instead of sorting (value, index) pairs it sorts
  `value_bits << index_bits | index` packed into one uint64 (64-bit integers are enabled for
  this sort alone). float64 values leave no room for the index: they are first replaced by
  their exact rank (a sort of the bits and a binary search).
  """
  m = x.shape[-1]
  idx_bits = max(1, (m - 1).bit_length())
  bits = sortable_bits(x)
  with jax.enable_x64(True):
    idx = jnp.arange(m, dtype=jnp.uint64)
    if bits.dtype == jnp.uint64:  # float64: exact ranks fit in idx_bits
      ranks = jax.vmap(lambda s, q: jnp.searchsorted(s, q, side="left", method="scan"))(
          jax.lax.sort(bits, dimension=-1), bits)
      bits = ranks.astype(jnp.uint32)
    key = jax.lax.sort((bits.astype(jnp.uint64) << idx_bits) | idx, dimension=-1)
    order = (key & ((1 << idx_bits) - 1)).astype(jnp.int32)
    return order, (key >> idx_bits).astype(jnp.uint32)  # float32 bits or a rank: 32 bits


def peak_memory(ev: Events, method: Optional[str] = None):
  """(B, D) peak bytes: the running sum per device, sampled after all events of an instant.

  Half-open intervals make a free and an alloc at the same instant not overlap, so the live
  bytes that count at instant t are those after every event at t; the order of events within
  an instant is irrelevant. `method` "scan" (the default on a CPU) makes one sequential pass over
  the events in time order; "segments" (the default elsewhere) sorts by (device, time) and takes
  cumulative sums. Both give the same peaks up to float rounding (the order of the additions).
  """
  if method is None:
    method = "scan" if jax.default_backend() == "cpu" else "segments"
  if method not in ("scan", "segments"):
    raise ValueError(f"peak_memory: method must be 'scan' or 'segments', got {method!r}")
  if method == "segments" and segment_key_bits(ev) <= 64:
    return peak_memory_segments(ev)
  order, key = rank_order(ev.time)
  dev = jnp.take_along_axis(ev.dev, order, -1)
  last = jnp.concatenate([key[:, 1:] != key[:, :-1], jnp.ones_like(key[:, :1], bool)], -1)
  d = ev.base.shape[-1]
  dev_ids = jnp.arange(d)

  def step(carry, x):
    running, peak = carry
    dv, dl, end = x
    running = running + jnp.where(dv[:, None] == dev_ids, dl[:, None], 0.0)
    peak = jnp.where(end[:, None], jnp.maximum(peak, running), peak)
    return (running, peak), None

  with jax.enable_x64(True):  # the running sums in float64 (`_wide`)
    delta = jnp.take_along_axis(_wide(ev.delta), order, -1)
    base = _wide(ev.base)
    zero = jnp.zeros_like(base)
    (_, peak), _ = jax.lax.scan(step, (zero, zero), (dev.T, delta.T, last.T))
    return (base + peak).astype(ev.delta.dtype)


def segment_key_bits(ev: Events) -> int:
  """Bits of the packed (device, float32 time, index) key; float64 times do not fit (> 64)."""
  m, d = ev.time.shape[-1], ev.base.shape[-1]
  time_bits = 32 if ev.time.dtype == jnp.float32 else 64
  return max(1, (d - 1).bit_length()) + time_bits + max(1, (m - 1).bit_length())


def peak_memory_segments(ev: Events):
  """`peak_memory` without a sequential pass: on a GPU the scan's M steps of (B, D) work each
  cost a kernel launch (N = 1000, B = 1024 on an H200: 59 ms against 2 ms for this).

  One packed uint64 sort by (device, time, index) makes each device's events a contiguous
  segment in time order; a cumulative sum minus its value before the segment is the device's
  running sum; sampled at the last event of each (device, instant) and maxed per device.
  """
  m, d = ev.time.shape[-1], ev.base.shape[-1]
  idx_bits = max(1, (m - 1).bit_length())
  with jax.enable_x64(True):
    key = ((ev.dev.astype(jnp.uint64) << (32 + idx_bits))
           | (sortable_bits(ev.time).astype(jnp.uint64) << idx_bits)
           | jnp.arange(m, dtype=jnp.uint64))
    key = jax.lax.sort(key, dimension=-1)
    order = (key & ((1 << idx_bits) - 1)).astype(jnp.int32)
    instant = key >> idx_bits  # (device, time): equal within an instant
    dev = (key >> (32 + idx_bits)).astype(jnp.int32)
    last = jnp.concatenate([instant[:, 1:] != instant[:, :-1],
                            jnp.ones_like(instant[:, :1], bool)], -1)
    delta = jnp.take_along_axis(_wide(ev.delta), order, -1)  # float64 sums (`_wide`)
    total = jnp.cumsum(delta, -1)
    first = jnp.concatenate([jnp.ones_like(dev[:, :1], bool), dev[:, 1:] != dev[:, :-1]], -1)
    # The cumulative sum just before each event's segment began (its start index, carried along).
    start = jax.lax.cummax(jnp.where(first, jnp.arange(m, dtype=jnp.int32), 0), axis=1)
    before = jnp.take_along_axis(total - delta, start, -1)
    sampled = jnp.where(last, total - before, 0.0)
    peak = jax.vmap(lambda v, g: jax.ops.segment_max(v, g, num_segments=d))(sampled, dev)
    # devices without events: the scan's zero start
    return (_wide(ev.base) + jnp.maximum(peak, 0.0)).astype(ev.delta.dtype)
