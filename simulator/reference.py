"""reference_simulate: plain-Python, float64, heap-based simulator of docs/design.md section 4.

It is the oracle of the differential tests and the speed baseline of the benchmark, so it follows
the normative rules literally and is as efficient as a single-threaded event simulator should be:
O((N + E) log N + N * D) with one binary heap of ready times and one of priorities per device.
"""

from __future__ import annotations

import dataclasses
import heapq
from typing import List, Tuple

import numpy as np

from simulator.graph import CompGraph
from simulator.topology import Topology


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
  if placement.shape[-1:] != (n,) or priority.shape != placement.shape:
    raise ValueError(f"placement {placement.shape} and priority {priority.shape} must both "
                     f"have shape (..., {n}) for graph '{graph.name}' of {n} nodes")
  if placement.size and not np.issubdtype(placement.dtype, np.integer):
    if np.any(placement != np.round(placement)):
      raise ValueError("placement must hold integer device ids")
  bad = np.argwhere((placement < 0) | (placement >= d))
  if bad.size:
    idx = tuple(bad[0])
    raise ValueError(f"placement{list(idx)} = {placement[idx]} is not a device id in [0, {d})")
  bad = np.argwhere(np.isnan(priority))
  if bad.size:
    raise ValueError(f"priority{list(bad[0])} is NaN")
  return placement.astype(np.int64), priority.astype(np.float64)


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

  # consumer devices of each op, ascending; transfers go to the ones != own device (rule 3)
  cons_devs: List[List[int]] = []
  for u in range(n):
    cons_devs.append(sorted({place[v] for v in succ[sptr[u]:sptr[u + 1]]}))

  ready = [0.0] * n  # running max of avail(pred, device(j))  (rule 4)
  start = [0.0] * n
  finish = [0.0] * n
  free = [0.0] * d
  chan = [0.0] * d
  waiting: List[List[Tuple[float, int]]] = [[] for _ in range(d)]  # (r_j, j) by ready time
  eligible: List[List[Tuple[float, int]]] = [[] for _ in range(d)]  # (-prio, j): r_j <= t_now
  for j in range(n):
    if pending[j] == 0:
      heapq.heappush(waiting[place[j]], (0.0, j))
  transfers: List[Transfer] = []
  arrivals: List[dict] = [dict() for _ in range(n)]
  order: List[int] = []
  t_now = 0.0
  inf = float("inf")

  for _ in range(n):  # rule 5: one commit per step
    best_s, best_d = inf, -1
    for dev in range(d):
      # s_d = max(free_d, min r_j). Ops in `eligible` have r_j <= t_now <= s_d (commit times
      # never decrease), so while it is non-empty min r_j <= t_now and s_d = max(free_d, t_now).
      if eligible[dev]:
        s = max(free[dev], t_now)
      elif waiting[dev]:
        s = max(free[dev], waiting[dev][0][0])
      else:
        continue
      if s < best_s:  # strict: ties go to the lowest device id
        best_s, best_d = s, dev
    if best_d < 0:
      raise AssertionError("no known op although ops remain: the graph is not a DAG")
    dev, s = best_d, best_s
    wq, eq = waiting[dev], eligible[dev]
    while wq and wq[0][0] <= s:  # every op with r_j <= s_d is a candidate
      _, j = heapq.heappop(wq)
      heapq.heappush(eq, (-prio[j], j))  # highest priority, then lowest id
    _, op = heapq.heappop(eq)
    t_now = s
    fin = s + (cost[op] / speed[dev] + over[dev])  # rule 2
    start[op], finish[op] = s, fin
    free[dev] = fin
    order.append(op)
    avail = {dev: fin}
    for e in cons_devs[op]:  # rule 3: one transfer per consumer device, ascending ids
      if e == dev:
        continue
      t0 = max(fin, chan[dev])
      arr = t0 + (lat[dev][e] + out_bytes[op] / bw[dev][e])
      chan[dev] = arr
      avail[e] = arr
      arrivals[op][e] = (t0, arr)
      transfers.append(Transfer(op, dev, e, t0, arr))
    for v in succ[sptr[op]:sptr[op + 1]]:  # rule 4
      a = avail[place[v]]
      if a > ready[v]:
        ready[v] = a
      pending[v] -= 1
      if pending[v] == 0:
        heapq.heappush(waiting[place[v]], (ready[v], v))

  makespan = max(finish)
  peak, events = _memory(graph, topology, place, start, finish, arrivals, makespan, succ, sptr)
  cap = np.asarray(topology.mem_capacity, np.float64)
  return ReferenceResult(
      makespan=makespan, start=np.asarray(start), finish=np.asarray(finish),
      peak_memory=peak, oom=bool(np.any(peak > cap)), placement=np.asarray(place),
      order=np.asarray(order), transfers=tuple(transfers), memory_events=events)


def _fused(graph, topology, placement, priority, fuse) -> ReferenceResult:
  from simulator import fusion  # local: fusion imports the cost model lazily, keep this light
  fuse = np.asarray(fuse)
  if fuse.shape != placement.shape:
    raise ValueError(f"fuse has shape {fuse.shape}, expected {placement.shape} (the "
                     f"placement's) for graph '{graph.name}'")
  fg = fusion.fuse_graph(graph, placement, fuse.astype(bool))
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

  def interval(dev, t0, t1, nbytes):
    if t1 > t0 and nbytes > 0:
      ev[dev].append((t0, 1, nbytes))
      ev[dev].append((t1, 0, nbytes))

  out_b, tmp_b = graph.out_bytes.tolist(), graph.temp_bytes.tolist()
  for u in range(graph.num_nodes):
    du = place[u]
    consumers = succ[sptr[u]:sptr[u + 1]]
    last_use = {}
    for v in consumers:
      last_use[place[v]] = max(last_use.get(place[v], -np.inf), finish[v])
    if consumers:
      end = max([finish[u], last_use.get(du, -np.inf)] +
                [arr for (_, arr) in arrivals[u].values()])
    else:
      end = makespan
    interval(du, start[u], end, out_b[u])
    for e, (t0, _) in arrivals[u].items():
      interval(e, t0, last_use[e], out_b[u])
    interval(du, start[u], finish[u], tmp_b[u])
  peak = base.copy()
  events = []
  for dev in range(d):
    ev[dev].sort(key=lambda x: (x[0], x[1]))
    cur, trace = base[dev], [(0.0, base[dev])]
    for t, kind, b in ev[dev]:
      cur = cur + b if kind else cur - b
      peak[dev] = max(peak[dev], cur)
      trace.append((t, cur))
    events.append(np.asarray(trace))
  return peak, tuple(events)
