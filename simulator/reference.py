"""reference_simulate: plain-Python, float64, heap-based simulator of docs/design.md section 4.

It is the oracle of the differential tests and the speed baseline of the benchmark, so it follows
the normative rules literally and is as efficient as a single-threaded event simulator should be:
O((N + E) log N + N * D) with one binary heap of ready times and one of priorities per device.
"""

from __future__ import annotations

import dataclasses
import heapq
import operator
from typing import List, Tuple

import numpy as np

from simulator.graph import CompGraph
from simulator.topology import Topology

inf = float("inf")


@dataclasses.dataclass(frozen=True)
class Transfer:
  op: int
  src: int
  dst: int
  start: float
  arrival: float


@dataclasses.dataclass(frozen=True)
class ReferenceResult:
  """Outcome of one (placement, priority) pair; the first five fields are the public API."""
  makespan: float
  start: np.ndarray  # (N,) seconds
  finish: np.ndarray  # (N,) seconds
  peak_memory: np.ndarray  # (D,) bytes
  oom: bool
  placement: np.ndarray  # (N,) effective device of each op (after colocation)
  order: np.ndarray  # (N,) ops in commit order
  transfers: Tuple[Transfer, ...]
  memory_events: Tuple[np.ndarray, ...]  # per device: (K, 2) [time, bytes in use after event]


def check_actions(graph: CompGraph, topology: Topology, placement, priority):
  """Host-side validation of one or a batch of actions; returns (placement, priority) arrays."""
  placement = np.asarray(placement)
  priority = np.asarray(priority)
  n, d = graph.num_nodes, topology.num_devices
  for what, x in (("placement", placement), ("priority", priority)):
    if x.dtype.kind not in "biuf":  # objects, strings, complex numbers
      raise ValueError(f"{what} must hold real numbers, got dtype {x.dtype}")
  if (placement.shape[-1:] != (n,) or priority.shape != placement.shape
      or placement.ndim > 2):
    raise ValueError(f"placement {placement.shape} and priority {priority.shape} must both "
                     f"have shape (N,) or (B, N) with N = {n} for graph '{graph.name}'")
  if placement.size and not np.issubdtype(placement.dtype, np.integer):
    bad = np.argwhere(placement != np.round(placement))  # a fraction, NaN or inf
    if bad.size:
      idx = tuple(bad[0])
      raise ValueError(f"placement{_position(idx)} = {placement[idx]} is not an integer "
                       "device id")
  bad = np.argwhere((placement < 0) | (placement >= d))
  if bad.size:
    idx = tuple(bad[0])
    raise ValueError(f"placement{_position(idx)} = {placement[idx]} is not a device id in "
                     f"[0, {d})")
  bad = np.argwhere(np.isnan(priority))
  if bad.size:
    raise ValueError(f"priority{_position(bad[0])} is NaN")
  _check_priority_range(priority)
  return placement.astype(np.int64), priority.astype(np.float64)


def _position(idx) -> str:
  """An array position as users write it: [1] or [0, 3] (not numpy's [np.int64(1)])."""
  return str([int(i) for i in idx])


def _check_priority_range(priority: np.ndarray) -> None:
  """ValueError for a finite priority beyond float32's range (|p| > 3.4e38) where the jitted
  simulator works in float32: there it would become +-inf and tie with its neighbours, so the
  two simulators would order the ops differently. +-inf itself is the same in both."""
  import jax  # pylint: disable=g-import-not-at-top
  if jax.config.jax_enable_x64 or not priority.size or priority.dtype.itemsize <= 4:
    return
  big = np.isfinite(priority) & (np.abs(priority) > np.finfo(np.float32).max)
  bad = np.argwhere(big)
  if bad.size:
    idx = tuple(bad[0])
    raise ValueError(f"priority{_position(idx)} = {priority[idx]:g} is beyond float32's range "
                     f"(max {np.finfo(np.float32).max:.3g}) of the jitted simulator, where it "
                     "would become inf; rescale the priorities (only their order counts) or "
                     "enable JAX's x64 mode")


# Event times the float32 simulator may reach: float32's largest value is 3.4e38.
MAX_EVENT_TIME = 1e38


def check_time_range(graph: CompGraph, topology: Topology, cost=None) -> None:
  """ValueError when some event time of some action could leave float32's range: in float32
  an overflowed time is inf, and the jitted loop never commits an op whose start is inf (its
  makespan would come out too small). The bound is every op's slowest duration plus every
  transfer it could send, summed (float64): no schedule ends later. Each value is below 1e30
  (`graph.MAX_VALUE`), but a quotient cost / speed or bytes / bandwidth can still overflow.
  `cost` (N,): per-op costs to bound with instead of the graph's; a fused action passes
  `fusion.fused_cost_bound`, as a fused group can cost more than its members (design.md 4.1).
  With JAX's x64 mode on the simulator is float64 and there is nothing to check."""
  import jax  # pylint: disable=g-import-not-at-top
  if jax.config.jax_enable_x64 or graph.num_nodes == 0:
    return
  speed = np.asarray(topology.speed, np.float64)
  cost = graph.cost if cost is None else cost
  slowest = np.max(np.asarray(cost, np.float64)[:, None] / speed[None, :]
                   + np.asarray(topology.overhead, np.float64)[None, :], axis=1)
  total = float(np.sum(slowest))
  d = topology.num_devices
  if d > 1 and graph.num_edges:
    latency, per_byte = topology.link_tables()  # (bandwidths are >= 1e-30: finite per byte)
    total += (d - 1) * float(np.sum(np.asarray(graph.out_bytes, np.float64) * np.max(per_byte)
                                    + np.max(latency)))
  if not total <= MAX_EVENT_TIME:
    raise ValueError(f"graph '{graph.name}' on this topology: event times can reach {total:.3g} "
                     f"s (all durations and transfers in a row), beyond float32's range of the "
                     f"jitted simulator (max {MAX_EVENT_TIME:g}); scale costs, speeds, bytes or "
                     f"bandwidths, or enable JAX's x64 mode (docs/design.md section 4, "
                     f"Precision)")


def exceeds(peak, capacity) -> bool:
  """The OOM verdict of both simulators: some peak above its device's capacity, both rounded to
  the jitted simulator's working dtype (float32 unless JAX's x64 mode is on), so a capacity
  within float32's precision of a peak fits in both (docs/design.md section 4, Precision)."""
  import jax  # pylint: disable=g-import-not-at-top
  dt = np.float64 if jax.config.jax_enable_x64 else np.float32
  return bool(np.any(np.asarray(peak, dt) > np.asarray(capacity, dt)))


def reference_simulate(graph: CompGraph, topology: Topology, placement,
                       priority, fuse=None) -> ReferenceResult:
  """Simulates one action exactly by section 4 (float64).

  With `fuse` (N,) bool, section 4.1: the quotient graph (`simulator.fusion.fuse_graph`) is
  simulated and its results mapped back: each op reports its group's start and finish,
  `placement` is each op's effective device, `order` and `transfers` name group roots.
  """
  placement, priority = check_actions(graph, topology, placement, priority)
  if placement.ndim != 1:
    raise ValueError("reference_simulate takes one action: placement of shape (N,)")
  if fuse is not None:
    return _fused(graph, topology, placement, priority, fuse)
  n, d = graph.num_nodes, topology.num_devices
  place = placement[graph.colocation_root()].tolist()  # rule 1
  speed = topology.speed.tolist()
  over = topology.overhead.tolist()
  bw = np.asarray(topology.bandwidth, np.float64).tolist()
  lat = np.asarray(topology.latency, np.float64).tolist()
  cost = graph.cost.tolist()
  prio = priority.tolist()
  out_bytes = graph.out_bytes.tolist()
  sptr, succ = graph.successor_csr()
  sptr, succ = sptr.tolist(), succ.tolist()
  pending = graph.in_degree().tolist()
  heappush, heappop = heapq.heappush, heapq.heappop

  # consumer devices of each op other than its own, ascending: its transfers (rule 3)
  send_devs: List[List[int]] = []
  for u in range(n):
    pu = place[u]
    lo, hi = sptr[u], sptr[u + 1]
    if hi - lo == 1:
      pv = place[succ[lo]]
      send_devs.append([] if pv == pu else [pv])
    else:
      send_devs.append(sorted({place[v] for v in succ[lo:hi]} - {pu}))

  ready = [0.0] * n  # running max of avail(pred, device(j))  (rule 4)
  start = [0.0] * n
  finish = [0.0] * n
  free = [0.0] * d
  chan = [0.0] * d
  waiting: List[List[Tuple[float, int]]] = [[] for _ in range(d)]  # (r_j, j) by ready time
  eligible: List[List[Tuple[float, int]]] = [[] for _ in range(d)]  # (-prio, j): r_j <= t_now
  for j in range(n):
    if pending[j] == 0:
      heappush(waiting[place[j]], (0.0, j))
  transfers: List[Transfer] = []
  arrivals: List[List[Tuple[int, float, float]]] = [[] for _ in range(n)]  # (dst, start, arr)
  order: List[int] = []
  avail = [0.0] * d  # avail(op, e) of the op just committed, valid on its consumer devices
  t_now = 0.0
  inf = float("inf")
  devs = range(d)

  # key[d] = s_d where s_d > t_now, else <= t_now (then s_d = t_now): free_d while d has
  # candidates (their r_j <= t_now), else max(free_d, min r_j) over its known ops; inf if none.
  # Commit times never decrease (an op becomes known at its last predecessor's commit, with
  # r_j >= that finish), so s_d = max(key[d], t_now) for every device.
  key = [inf] * d
  for dev in devs:
    if waiting[dev]:
      key[dev] = waiting[dev][0][0]

  for _ in range(n):  # rule 5: one commit per step
    s = min(key)
    if s <= t_now:  # every device with key <= t_now starts at t_now: the lowest id wins
      s = t_now
      dev = 0
      while key[dev] > s:
        dev += 1
    elif s < inf:
      dev = key.index(s)  # ties go to the lowest device id
    else:
      raise AssertionError("no known op although ops remain: the graph is not a DAG")
    wq, eq = waiting[dev], eligible[dev]
    while wq and wq[0][0] <= s:  # every op with r_j <= s_d is a candidate
      j = heappop(wq)[1]
      heappush(eq, (-prio[j], j))  # highest priority, then lowest id
    op = heappop(eq)[1]
    t_now = s
    fin = s + (cost[op] / speed[dev] + over[dev])  # rule 2
    start[op] = s
    finish[op] = fin
    free[dev] = fin
    order.append(op)
    avail[dev] = fin
    sends = send_devs[op]
    if sends:
      arr_op = arrivals[op]
      lat_d, bw_d, ob = lat[dev], bw[dev], out_bytes[op]
      c = chan[dev]
      for e in sends:  # rule 3: one transfer per consumer device, ascending ids
        t0 = fin if fin > c else c
        c = t0 + (lat_d[e] + ob / bw_d[e])
        avail[e] = c
        arr_op.append((e, t0, c))
        transfers.append(Transfer(op, dev, e, t0, c))
      chan[dev] = c
    for v in succ[sptr[op]:sptr[op + 1]]:  # rule 4
      pv = place[v]
      a = avail[pv]
      if a > ready[v]:
        ready[v] = a
      k = pending[v] - 1
      pending[v] = k
      if k == 0:
        r = ready[v]
        heappush(waiting[pv], (r, v))
        if r < key[pv] and not eligible[pv]:  # min(key, max(free, r)) when no candidates
          f = free[pv]
          key[pv] = r if r > f else f
    # the committed device's key after its commit
    if eq:
      key[dev] = fin
    elif wq:
      r = wq[0][0]
      key[dev] = r if r > fin else fin
    else:
      key[dev] = inf

  makespan = max(finish)
  peak, events = _memory(graph, topology, place, start, finish, arrivals, makespan, succ, sptr)
  return ReferenceResult(
      makespan=makespan, start=np.asarray(start), finish=np.asarray(finish),
      peak_memory=peak, oom=exceeds(peak, topology.mem_capacity), placement=np.asarray(place),
      order=np.asarray(order), transfers=tuple(transfers), memory_events=events)


def _fused(graph, topology, placement, priority, fuse) -> ReferenceResult:
  from simulator import fusion  # local: fusion imports the cost model lazily, keep this light
  fg = fusion.fuse_graph(graph, placement, fusion.check_mask(fuse, placement.shape, graph.name))
  res = reference_simulate(fg.graph, topology, fg.placement, priority[fg.roots])
  return dataclasses.replace(
      res, start=res.start[fg.group], finish=res.finish[fg.group],
      placement=fusion.effective_placement(graph, placement), order=fg.roots[res.order],
      transfers=tuple(dataclasses.replace(t, op=int(fg.roots[t.op])) for t in res.transfers))


def _memory(graph, topology, place, start, finish, arrivals, makespan, succ, sptr):
  """Rule 7: half-open live intervals per device; frees sort before allocs at equal times."""
  d = topology.num_devices
  ev: List[List[Tuple[float, int, float]]] = [[] for _ in range(d)]  # (time, 0 free/1 alloc, b)
  base = np.zeros(d)
  np.add.at(base, np.asarray(place), graph.param_bytes)
  out_b, tmp_b = graph.out_bytes.tolist(), graph.temp_bytes.tolist()
  # Intervals [t0, t1) of nbytes > 0 with t1 > t0 become an alloc and a free event; the rest
  # weigh nothing and are skipped.
  for u in range(graph.num_nodes):
    du, su, fu = place[u], start[u], finish[u]
    ob = out_b[u]
    lo, hi = sptr[u], sptr[u + 1]
    if lo == hi:
      end = makespan
    else:
      end = fu
      arr_u = arrivals[u]
      if not arr_u:  # every consumer on du
        for v in succ[lo:hi]:
          if finish[v] > end:
            end = finish[v]
      else:
        last_use = {}  # latest finish of u's consumers per device
        for v in succ[lo:hi]:
          pv, fv = place[v], finish[v]
          if fv > last_use.get(pv, -inf):
            last_use[pv] = fv
        lu = last_use.get(du, -inf)
        if lu > end:
          end = lu
        for e, t0, arr in arr_u:
          if arr > end:
            end = arr
          t1 = last_use[e]
          if ob > 0 and t1 > t0:  # the copy received on e
            ev_e = ev[e]
            ev_e.append((t0, 1, ob))
            ev_e.append((t1, 0, ob))
    ev_d = ev[du]
    if ob > 0 and end > su:
      ev_d.append((su, 1, ob))
      ev_d.append((end, 0, ob))
    tb = tmp_b[u]
    if tb > 0 and fu > su:
      ev_d.append((su, 1, tb))
      ev_d.append((fu, 0, tb))
  peak = base.copy()
  events = []
  key = operator.itemgetter(0, 1)
  for dev in range(d):
    evd = ev[dev]
    evd.sort(key=key)
    cur = float(base[dev])
    top = cur
    trace = [(0.0, cur)]
    for t, kind, b in evd:
      if kind:
        cur = cur + b
        if cur > top:
          top = cur
      else:
        cur = cur - b
      trace.append((t, cur))
    peak[dev] = top
    events.append(np.asarray(trace))
  return peak, tuple(events)
