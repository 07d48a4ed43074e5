"""simulate: the jit-compiled, batched event-driven simulator of docs/design.md section 4.

One `lax.while_loop` over commits, vmapped over B (placement, priority) pairs. The per-commit
work is what decides the speed (design.md section 4, implementation notes), so no step touches all
N ops:

* Each device keeps a shallow, wide min-tree (A-ary, L levels, A**L >= Np) over the ops sorted by
  priority (descending, ties by id). A leaf holds r_j while op j is known, uncommitted and placed
  on that device, else +inf. The root is min r_j, so s_d = max(free_d, root_d) for all devices
  costs O(D); the candidate, the highest-priority op with r_j <= s_d, is the leftmost leaf <= s_d,
  found by an L-step descent; removing it rewrites the L + 1 nodes on that path, whose siblings
  the descent already read.
* Successor updates are processed `chunk` edges per iteration from a CSR list; an op with many
  consumers holds the loop for ceil(outdeg / chunk) iterations before the next commit. The total
  trip count is the same for every action (every op commits once), so it is computed on the host
  and the vmapped loop wastes no iterations.
* Newly known ops are inserted with scatter-min on their leaf-to-root path (commutative, so
  several insertions into one tree in one iteration cannot conflict).
* Memory peaks are computed after the loop from alloc/free events, sampled after all events of
  an instant (with half-open intervals that is the peak, whatever the order of events within the
  instant), in one of two equivalent ways chosen by backend (`_peak_memory`): on a CPU, one
  packed integer sort by time (`rank_order`) and one sequential pass with a running sum per
  device; on an accelerator, where that pass of M tiny steps is launch-bound, one packed sort by
  (device, time) and a cumulative sum per device segment.

Times are float32 (float64 when jax_enable_x64 is on). `simulate` is the host API (validation,
padding, caching); `simulate_padded` is the pure function to call inside other jitted code.
"""

from __future__ import annotations

import weakref
from typing import Optional

import flax
import jax
import jax.numpy as jnp
import numpy as np

from simulator.graph import CompGraph
from simulator import sharding as sharding_lib
from simulator import fusion, padding
from simulator.padding import PaddedGraph, pad_graph, tree_shape
from simulator.reference import check_actions
from simulator.topology import Topology

INF = float("inf")
# Smallest batch the host API pads to. On XLA:CPU the loop compiled for a batch of one runs
# O(N) work per iteration (layered:n=40000,width=64 on nvlink8: B = 1 took 6.9-10 s where
# B = 2 took 0.47 s; N = 10,000: 226 vs 74 ms; N = 300: 1.2 ms both), so one action is
# simulated as two (the copy is discarded).
MIN_BATCH = 2


@flax.struct.dataclass
class SimResult:
  """Outcome of B actions; times in seconds, memory in bytes."""
  makespan: jnp.ndarray  # (B,)
  start: jnp.ndarray  # (B, N)
  finish: jnp.ndarray  # (B, N)
  peak_memory: jnp.ndarray  # (B, D)
  oom: jnp.ndarray  # (B,) bool


@flax.struct.dataclass
class _Carry:
  """Loop state of one action (the loop is vmapped over B)."""
  it: jnp.ndarray  # () int32 iteration
  levels: tuple  # L + 1 arrays (D * A**l,): per-device min-trees, device-major; 0 = roots
  free: jnp.ndarray  # (D,) time each device becomes free
  chan: jnp.ndarray  # (D,) time each device's send channel becomes free
  ready: jnp.ndarray  # (Np,) running max over committed preds of avail(pred, device(op))
  pending: jnp.ndarray  # (Np,) int32 uncommitted predecessors
  start: jnp.ndarray  # (Np,)
  finish: jnp.ndarray  # (Np,)
  send_start: jnp.ndarray  # (Np, D) start of the op's transfer to each device (where it sends)
  send_end: jnp.ndarray  # (Np,) arrival of the op's last transfer; -inf if it sends none
  cur: jnp.ndarray  # () int32 op whose successor edges are being processed
  ptr: jnp.ndarray  # () int32 next edge of `cur` to process
  end: jnp.ndarray  # () int32 one past the last edge of `cur`
  cur_avail: jnp.ndarray  # (D,) avail(cur, e): finish on its device, arrival elsewhere


def _dtype():
  return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32


def _sequential_transfers(base, times, mask):
  """Back-to-back transfers on one send channel in ascending destination order.

  Returns (start, arrival) of each destination, shape (..., D). Accumulated one destination at
  a time (not cumsum) so float rounding matches the reference's sequential additions exactly.
  """
  starts, arrivals = [], []
  a = base
  for e in range(times.shape[-1]):
    starts.append(a)
    a = a + jnp.where(mask[..., e], times[..., e], 0.0)
    arrivals.append(a)
  return jnp.stack(starts, -1), jnp.stack(arrivals, -1)


def _first_true(mask):
  """Index of the first True of a 1-D mask, 0 if none (as argmax). One int32 min-reduce: XLA's
  CPU backend runs it much faster than argmax's (value, index) variadic reduce."""
  n = mask.shape[-1]
  idx = jnp.min(jnp.where(mask, jnp.arange(n, dtype=jnp.int32), n))
  return jnp.where(idx == n, 0, idx)


def _simulate_one(pg: PaddedGraph, topo: Topology, placement, pos2op, fuse=None):
  """Simulates one action; vmapped over the batch by `simulate_padded`."""
  dt = _dtype()
  place = placement.astype(jnp.int32)[pg.coloc_root]  # rule 1
  place = jnp.where(pg.node_mask, place, 0)
  root = None
  if fuse is not None:  # section 4.1: absorbed members stop being nodes, roots carry groups
    pg, root = fusion.apply_padded(pg, place, fuse, dt)
  np_ = pg.cost.shape[0]
  d = topo.speed.shape[0]
  levels_n, arity = tree_shape(np_)
  shift = arity.bit_length() - 1
  k = pg.chunk
  speed, overhead = jnp.asarray(topo.speed, dt), jnp.asarray(topo.overhead, dt)
  bw, lat = jnp.asarray(topo.bandwidth, dt), jnp.asarray(topo.latency, dt)
  cost, out_bytes = pg.cost.astype(dt), pg.out_bytes.astype(dt)
  dev_ids = jnp.arange(d)

  # Leaf position of each op: its rank by (priority descending, id ascending).
  pos = jnp.zeros(np_, jnp.int32).at[pos2op].set(jnp.arange(np_, dtype=jnp.int32))
  # cons[u, e]: u has a consumer on device e (one transfer per consumer device, rule 3).
  recv_dev = place[pg.receivers]
  cons = jnp.zeros((np_, d), bool).at[pg.senders, recv_dev].max(pg.edge_mask)
  n_leaves = arity ** levels_n
  roots0 = (pg.num_preds == 0) & pg.node_mask
  leaves = jnp.full((d, n_leaves), INF, dt).at[place, pos].min(
      jnp.where(roots0, 0.0, INF).astype(dt))
  levels = [leaves]
  for _ in range(levels_n):
    levels.append(levels[-1].reshape(d, -1, arity).min(-1))
  levels = tuple(reversed(levels))  # level 0 = roots (D, 1)
  # Carried flat, (D * A**l,): under vmap a scatter then indexes (batch, i), not (batch, d, i).
  levels = tuple(lv.reshape(-1) for lv in levels)
  sizes = [arity ** l for l in range(levels_n + 1)]

  zeros = jnp.zeros(np_, dt)
  carry = _Carry(
      it=jnp.int32(0), levels=levels, free=jnp.zeros(d, dt), chan=jnp.zeros(d, dt),
      ready=zeros, pending=pg.num_preds.astype(jnp.int32), start=zeros, finish=zeros,
      send_start=jnp.zeros((np_, d), dt), send_end=zeros, cur=jnp.int32(0),
      ptr=jnp.int32(0), end=jnp.int32(0),
      cur_avail=jnp.zeros(d, dt))

  def body(c: _Carry) -> _Carry:
    # --- successor edges of the op committed last: readiness (rule 4) ---------------------
    e = c.ptr + jnp.arange(k, dtype=jnp.int32)
    valid = e < c.end
    j = pg.receivers[jnp.where(valid, e, 0)]
    dj = place[j]
    ready = c.ready.at[j].max(jnp.where(valid, c.cur_avail[dj], -INF))
    pending = c.pending.at[j].add(-valid.astype(jnp.int32))
    newly = valid & (pending[j] == 0)
    val = jnp.where(newly, ready[j], INF)
    lj = pos[j]
    levels = tuple(lv.at[dj * sizes[l] + (lj >> (shift * (levels_n - l)))].min(val)
                   for l, lv in enumerate(c.levels))
    ptr = c.ptr + k

    # --- commit (rule 5) once the previous op's edges are all processed --------------------
    s_all = jnp.maximum(c.free, levels[0])
    s = jnp.min(s_all)
    dstar = _first_true(s_all == s)  # first minimum: ties -> lowest device id
    do = (ptr >= c.end) & (s < INF)
    node = jnp.int32(0)
    path, kids, picks = [node], [], []
    for l in range(1, levels_n + 1):
      ch = jax.lax.dynamic_slice(levels[l], (dstar * sizes[l] + node * arity,), (arity,))
      idx = _first_true(ch <= s)  # leftmost = highest priority, lowest id
      node = node * arity + idx
      path.append(node)
      kids.append(ch)
      picks.append(idx)
    op = pos2op[node]
    new_vals = [jnp.asarray(INF, dt)]  # leaf value after removal, then parents bottom-up
    for l in range(levels_n, 0, -1):
      new_vals.append(jnp.min(jnp.where(jnp.arange(arity) == picks[l - 1], new_vals[-1],
                                        kids[l - 1])))  # a select, not a one-element scatter
    new_vals = new_vals[::-1]  # aligned with `path` (level 0 .. L)
    levels = tuple(lv.at[jnp.where(do, dstar * sizes[l] + path[l], lv.shape[0])].set(
        new_vals[l], mode="drop") for l, lv in enumerate(levels))  # dropped unless `do`

    fin = s + (cost[op] / speed[dstar] + overhead[dstar])  # rule 2
    mask = cons[op] & (dev_ids != dstar)  # rule 3
    times = lat[dstar] + out_bytes[op] / bw[dstar]
    t0 = jnp.maximum(fin, c.chan[dstar])
    starts, arrival = _sequential_transfers(t0, times, mask)
    chan_new = jnp.where(mask.any(), arrival[-1], c.chan[dstar])
    on_d = do & (dev_ids == dstar)
    drop_op = jnp.where(do, op, np_)
    return _Carry(
        it=c.it + 1, levels=levels,
        free=jnp.where(on_d, fin, c.free), chan=jnp.where(on_d, chan_new, c.chan),
        ready=ready, pending=pending,
        start=c.start.at[drop_op].set(s, mode="drop"),
        finish=c.finish.at[drop_op].set(fin, mode="drop"),
        send_start=c.send_start.at[drop_op].set(starts, mode="drop"),
        send_end=c.send_end.at[drop_op].set(jnp.where(mask.any(), arrival[-1], -INF),
                                            mode="drop"),
        cur=jnp.where(do, op, c.cur),
        ptr=jnp.where(do, pg.succ_ptr[op], ptr),
        end=jnp.where(do, pg.succ_ptr[op + 1], c.end),
        cur_avail=jnp.where(do, jnp.where(dev_ids == dstar, fin, arrival), c.cur_avail))

  c = jax.lax.while_loop(lambda c: c.it < pg.num_iters, body, carry)
  makespan, start, finish, events = _schedule_events(pg, topo, place, cons, c.start, c.finish,
                                                     c.send_start, c.send_end, dt)
  if root is not None:  # members report their group's times
    start, finish = start[root], finish[root]
  return makespan, start, finish, events


def _schedule_events(pg, topo, place, cons, start, finish, tstart, send_end, dt):
  """Makespan (rule 6) and the memory events of rule 7 from the committed schedule."""
  np_ = pg.cost.shape[0]
  d = topo.speed.shape[0]
  dev_ids = jnp.arange(d)
  makespan = jnp.max(jnp.where(pg.node_mask, finish, -INF))
  out_b = pg.out_bytes.astype(dt)
  tmp_b = pg.temp_bytes.astype(dt)

  # Transfers of every op as the loop made them: tstart[u, e] where u sends to e, and the
  # arrival of u's last transfer (its latest: one channel, back to back) in send_end.
  tmask = cons & (dev_ids[None, :] != place[:, None])  # (Np, D)
  # last_use[u, e]: latest finish of u's consumers on device e.
  recv_dev = place[pg.receivers]
  last_use = jnp.full((np_, d), -INF, dt).at[pg.senders, recv_dev].max(
      jnp.where(pg.edge_mask, finish[pg.receivers], -INF))
  has_cons = cons.any(-1)
  own_last = jnp.take_along_axis(last_use, place[:, None], 1)[:, 0]
  out_end = jnp.maximum(jnp.maximum(finish, own_last), send_end)
  out_end = jnp.where(has_cons, out_end, makespan)

  def sized(nbytes, t0, t1, valid):  # half-open [t0, t1): empty intervals weigh nothing
    return jnp.where(valid & (t1 > t0), nbytes, 0.0)

  real = pg.node_mask
  own_out = sized(out_b, start, out_end, real)
  own_tmp = sized(tmp_b, start, finish, real)
  # One received copy per (op, device): edge k represents it if it is the first such edge.
  ek = jnp.arange(pg.senders.shape[0], dtype=jnp.int32)
  first = jnp.full((np_, d), ek.shape[0], jnp.int32).at[pg.senders, recv_dev].min(
      jnp.where(pg.edge_mask, ek, ek.shape[0]))
  rep = pg.edge_mask & (first[pg.senders, recv_dev] == ek) & tmask[pg.senders, recv_dev]
  c_t0 = tstart[pg.senders, recv_dev]
  c_t1 = last_use[pg.senders, recv_dev]
  copy_b = sized(out_b[pg.senders], c_t0, c_t1, rep)

  # Memory events (+bytes at alloc, -bytes at free); peaks are taken in `_peak_memory`.
  ev_dev = jnp.concatenate([place, place, recv_dev, place, recv_dev])
  ev_time = jnp.concatenate([out_end, finish, c_t1, start, c_t0])
  ev_delta = jnp.concatenate([-own_out, -own_tmp, -copy_b, own_out + own_tmp, copy_b])
  ev_time = jnp.where(ev_delta != 0, ev_time, 0.0)  # weightless events: keep times finite
  base = jax.ops.segment_sum(jnp.where(real, pg.param_bytes.astype(dt), 0.0), place,
                             num_segments=d)
  return makespan, start, finish, _Events(time=ev_time, dev=ev_dev, delta=ev_delta, base=base)


@flax.struct.dataclass
class _Events:
  """Memory alloc/free events of a batch of schedules (rule 7)."""
  time: jnp.ndarray  # (B, M) seconds, >= 0
  dev: jnp.ndarray  # (B, M) int32 device
  delta: jnp.ndarray  # (B, M) bytes: + alloc, - free; 0 for empty intervals and padding
  base: jnp.ndarray  # (B, D) parameter bytes resident for the whole step


def _sortable_bits(x):
  """Unsigned integers that order like the floats `x` (-0.0 == 0.0): uint32, or uint64."""
  itype, utype = ((jnp.int64, jnp.uint64) if x.dtype == jnp.float64 else
                  (jnp.int32, jnp.uint32))
  # -0.0 -> 0.0 by a select: XLA's simplifier drops `x + 0.0`.
  bits = jax.lax.bitcast_convert_type(jnp.where(x == 0, jnp.zeros_like(x), x), itype)
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
  bits = _sortable_bits(x)
  with jax.enable_x64(True):
    idx = jnp.arange(m, dtype=jnp.uint64)
    if bits.dtype == jnp.uint64:  # float64: exact ranks fit in idx_bits
      ranks = jax.vmap(lambda s, q: jnp.searchsorted(s, q, side="left", method="scan"))(
          jax.lax.sort(bits, dimension=-1), bits)
      bits = ranks.astype(jnp.uint32)
    key = jax.lax.sort((bits.astype(jnp.uint64) << idx_bits) | idx, dimension=-1)
    order = (key & ((1 << idx_bits) - 1)).astype(jnp.int32)
    return order, (key >> idx_bits).astype(jnp.uint32)  # float32 bits or a rank: 32 bits


def _peak_memory(ev: _Events, method: Optional[str] = None):
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
    raise ValueError(f"_peak_memory: method must be 'scan' or 'segments', got {method!r}")
  if method == "segments" and _segment_key_bits(ev) <= 64:
    return _peak_memory_segments(ev)
  order, key = rank_order(ev.time)
  dev = jnp.take_along_axis(ev.dev, order, -1)
  delta = jnp.take_along_axis(ev.delta, order, -1)
  last = jnp.concatenate([key[:, 1:] != key[:, :-1], jnp.ones_like(key[:, :1], bool)], -1)
  d = ev.base.shape[-1]
  dev_ids = jnp.arange(d)

  def step(carry, x):
    running, peak = carry
    dv, dl, end = x
    running = running + jnp.where(dv[:, None] == dev_ids, dl[:, None], 0.0)
    peak = jnp.where(end[:, None], jnp.maximum(peak, running), peak)
    return (running, peak), None

  zero = jnp.zeros_like(ev.base)
  (_, peak), _ = jax.lax.scan(step, (zero, zero), (dev.T, delta.T, last.T))
  return ev.base + peak


def _segment_key_bits(ev: _Events) -> int:
  """Bits of the packed (device, float32 time, index) key; float64 times do not fit (> 64)."""
  m, d = ev.time.shape[-1], ev.base.shape[-1]
  time_bits = 32 if ev.time.dtype == jnp.float32 else 64
  return max(1, (d - 1).bit_length()) + time_bits + max(1, (m - 1).bit_length())


def _peak_memory_segments(ev: _Events):
  """`_peak_memory` without a sequential pass: on a GPU the scan's M steps of (B, D) work each
  cost a kernel launch (N = 1000, B = 1024 on an H200: 59 ms against 2 ms for this).

  One packed uint64 sort by (device, time, index) makes each device's events a contiguous
  segment in time order; a cumulative sum minus its value before the segment is the device's
  running sum; sampled at the last event of each (device, instant) and maxed per device.
  """
  m, d = ev.time.shape[-1], ev.base.shape[-1]
  idx_bits = max(1, (m - 1).bit_length())
  with jax.enable_x64(True):
    key = ((ev.dev.astype(jnp.uint64) << (32 + idx_bits))
           | (_sortable_bits(ev.time).astype(jnp.uint64) << idx_bits)
           | jnp.arange(m, dtype=jnp.uint64))
    key = jax.lax.sort(key, dimension=-1)
    order = (key & ((1 << idx_bits) - 1)).astype(jnp.int32)
    instant = key >> idx_bits  # (device, time): equal within an instant
    dev = (key >> (32 + idx_bits)).astype(jnp.int32)
    last = jnp.concatenate([instant[:, 1:] != instant[:, :-1],
                            jnp.ones_like(instant[:, :1], bool)], -1)
  delta = jnp.take_along_axis(ev.delta, order, -1)
  total = jnp.cumsum(delta, -1)
  first = jnp.concatenate([jnp.ones_like(dev[:, :1], bool), dev[:, 1:] != dev[:, :-1]], -1)
  # The cumulative sum just before each event's segment began (its start index, carried along).
  start = jax.lax.cummax(jnp.where(first, jnp.arange(m, dtype=jnp.int32), 0), axis=1)
  before = jnp.take_along_axis(total - delta, start, -1)
  sampled = jnp.where(last, total - before, 0.0)
  peak = jax.vmap(lambda v, g: jax.ops.segment_max(v, g, num_segments=d))(sampled, dev)
  return ev.base + jnp.maximum(peak, 0.0)  # devices without events: the scan's zero start


def simulate_padded(pg: PaddedGraph, topology: Topology, placement, priority,
                    fuse=None, peak_method: Optional[str] = None) -> SimResult:
  """Pure, traceable simulator: placement (B, Np) int, priority (B, Np) float.

  Results keep the padded node axis. Padded nodes must carry a valid device id (e.g. 0); their
  values are ignored. vmap it over graphs (a stacked PaddedGraph) or topologies as needed.
  `fuse` (B, Np) bool applies design.md section 4.1 (the graph must be padded with
  `fusion=True`; padded entries must be False); a fused member reports its group's times.
  `peak_method` ("scan" or "segments"; None: by backend) picks how memory peaks are summed
  (`_peak_memory`); a static argument under jit.
  """
  if fuse is not None and pg.fusion is None:
    raise ValueError("simulate_padded(fuse=...) needs a graph padded with fusion tables "
                     "(pad_graph(graph, fusion=True))")
  # Ops by priority descending, ties by lowest id; padding last.
  key = jnp.where(pg.node_mask, -jnp.asarray(priority, _dtype()), INF)
  pos2op, _ = rank_order(key)
  makespan, start, finish, events = jax.vmap(
      _simulate_one, in_axes=(None, None, 0, 0, None if fuse is None else 0))(
          pg, topology, placement, pos2op, fuse)
  peak = _peak_memory(events, peak_method)
  oom = jnp.any(peak > jnp.asarray(topology.mem_capacity, peak.dtype), -1)
  return SimResult(makespan=makespan, start=start, finish=finish, peak_memory=peak, oom=oom)


_simulate_jit = jax.jit(simulate_padded, static_argnames=("peak_method",))
_PAD_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def padded(graph: CompGraph, fusion: bool = False) -> PaddedGraph:
  """The graph padded to its bucket (with its fusion tables where asked), cached per graph
  object, dtype mode and `fusion`."""
  per_graph = _PAD_CACHE.setdefault(graph, {})
  mode = (bool(jax.config.jax_enable_x64), bool(fusion))
  if mode not in per_graph:
    per_graph[mode] = pad_graph(graph, fusion=fusion)
  return per_graph[mode]


def batch_sharding(devices=None):
  """A sharding that splits the batch axis across `devices` (default: this process's local
  devices, where `prepare_batch` puts host arrays), or None where there is only one. See
  `simulator.runtime.configure_cpu_devices` for CPU cores and `simulator.sharding`."""
  return sharding_lib.batch_sharding(
      devices=jax.local_devices() if devices is None else list(devices))


def prepare_batch(graph: CompGraph, placement, priority, batch_bucket: Optional[int] = None,
                  shard: bool = True, fuse=None):
  """(padded graph, placement (Bb, Np), priority (Bb, Np)[, fuse (Bb, Np)]) ready for
  `simulate_padded`; the fuse mask is returned only when given.

  Actions must already be validated (`check_actions`, `check_fuse`). The batch is padded to
  `padding.batch_bucket(B)` (or `batch_bucket`) by repeating its first row, so that varying B
  does not recompile for every size (at least `MIN_BATCH` rows); with `shard` and several
  local devices it is split across them (when each gets at least one real row).
  """
  b, n = placement.shape
  pg = padded(graph, fusion=fuse is not None)
  sharding = batch_sharding() if shard else None
  if sharding is not None and b < sharding.mesh.size:
    sharding = None
  parts = 1 if sharding is None else sharding.mesh.size
  bb = (max(padding.batch_bucket(b), MIN_BATCH) if batch_bucket is None
        else int(batch_bucket))
  bb = -(-bb // parts) * parts
  if bb < b:
    raise ValueError(f"batch_bucket {bb} is smaller than the batch {b}")
  pl = np.zeros((bb, pg.num_nodes_padded), np.int32)
  pr = np.zeros((bb, pg.num_nodes_padded), np.float64)
  pl[:b, :n], pr[:b, :n] = placement, priority
  pl[b:], pr[b:] = pl[0], pr[0]
  if sharding is not None:
    pl, pr = jax.device_put(pl, sharding), jax.device_put(pr, sharding)
  if fuse is None:
    return pg, pl, pr
  fu = np.zeros((bb, pg.num_nodes_padded), bool)
  fu[:b, :n] = fuse
  fu[b:] = fu[0]
  if sharding is not None:
    fu = jax.device_put(fu, sharding)
  return pg, pl, pr, fu


def check_fuse(graph: CompGraph, fuse, shape) -> np.ndarray:
  """Validates a fuse mask of `shape` (the placement's) for `graph`; returns it as bool."""
  fusion.check_fusable(graph)
  arr = np.asarray(fuse)
  if arr.shape != tuple(shape):
    raise ValueError(f"fuse has shape {arr.shape}, expected {tuple(shape)} (the placement's) "
                     f"for graph '{graph.name}'")
  if arr.size and arr.dtype != bool:
    if not np.all((arr == 0) | (arr == 1)):
      raise ValueError("fuse must hold booleans (or 0/1)")
  return arr.astype(bool)


def simulate(graph: CompGraph, topology: Topology, placement, priority,
             batch_bucket: Optional[int] = None, shard: bool = True, fuse=None) -> SimResult:
  """Simulates B actions of one graph: placement (B, N) int, priority (B, N) float, and
  optionally fuse (B, N) bool (design.md section 4.1: fused members report their group's
  times; the graph needs a cost reference).

  A single action of shape (N,) is accepted and treated as B = 1. See `prepare_batch` for the
  padding of the batch and its split across devices.
  """
  placement, priority = check_actions(graph, topology, placement, priority)
  if fuse is not None:
    fuse = np.atleast_2d(check_fuse(graph, fuse, placement.shape))
  placement, priority = np.atleast_2d(placement), np.atleast_2d(priority)
  b, n = placement.shape
  if fuse is None:
    pg, pl, pr = prepare_batch(graph, placement, priority, batch_bucket, shard)
    res = _simulate_jit(pg, topology, pl, pr)
  else:
    pg, pl, pr, fu = prepare_batch(graph, placement, priority, batch_bucket, shard, fuse)
    res = _simulate_jit(pg, topology, pl, pr, fu)
  return SimResult(makespan=res.makespan[:b], start=res.start[:b, :n],
                   finish=res.finish[:b, :n], peak_memory=res.peak_memory[:b], oom=res.oom[:b])
