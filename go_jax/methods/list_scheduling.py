"""Memory-aware list-scheduling placements: HEFT and Baechi's m-TOPO, m-ETF and m-SCT.

Each method builds its own estimated schedule of the graph on the topology (durations from
rule 2 of DESIGN section 4, a transfer of `latency + out_bytes / bandwidth` between different
devices, no send-channel contention), keeps the placement and turns its order into a priority;
`solve` then re-simulates the proposal exactly, so only the placement and the priority matter.

  - heft: Topcuoglu et al., "Performance-effective and low-complexity task scheduling for
    heterogeneous computing", IEEE TPDS 2002. Ops in decreasing upward rank (mean duration over
    devices plus mean transfer time over device pairs), each on the device giving its earliest
    finish time, allowed to fill an idle gap between ops already scheduled there (insertion).
  - m_topo, m_etf, m_sct: Jeon et al., "Baechi: Fast Device Placement of Machine Learning
    Graphs", SoCC 2020: topological chunks, earliest-task-first and small-communication-time
    list scheduling, each refusing a device whose memory would overflow.

Memory model (shared by all four). A device must hold, for every op placed on it, the op's
`param_bytes + out_bytes + temp_bytes`, plus one received copy of every remote input (once per
(tensor, device)). That sum is every byte the simulator ever allocates on the device (DESIGN
section 4 rule 7), so it bounds the device's peak from above: a placement whose estimate fits is
never out of memory. It is conservative (outputs and scratch are transient), which is the price
of that guarantee. `mem_fraction` scales the capacities used by the methods. A colocation group
reserves the static bytes of all its ops when its first op is placed, and every later op of the
group follows it. When an op fits on no allowed device it goes to the one with the most free
memory and `info["reason"]` says so; the methods never raise on infeasible memory.
"""

from __future__ import annotations

import bisect
import heapq
from typing import Dict, List, Optional

import numpy as np

from go_jax import objectives, placements
from go_jax.methods import Problem, Proposal, register


# ------------------------------------------------------------------ shared helpers
def _mean_comm(graph, topology) -> np.ndarray:
  """(N,) mean transfer time of each op's output over ordered pairs of different devices."""
  d = topology.num_devices
  if d == 1:
    return np.zeros(graph.num_nodes)
  lat, inv_bw = topology.link_tables()
  pairs = d * (d - 1)
  return lat.sum() / pairs + graph.out_bytes * (inv_bw.sum() / pairs)


def _check_config(name: str, config) -> float:
  frac = float(config.get("mem_fraction", 1.0))
  if not (np.isfinite(frac) and frac > 0):
    raise ValueError(f"{name}: mem_fraction must be a finite number > 0, got {frac}")
  return frac


class _Memory:
  """Per-device byte estimate (see the module docstring) and colocation bookkeeping."""

  def __init__(self, graph, topology, mem_fraction: float):
    n, d = graph.num_nodes, topology.num_devices
    self.graph = graph
    self.capacity = np.asarray(topology.mem_capacity, np.float64) * mem_fraction  # (D,)
    self.used = np.zeros(d)  # (D,) bytes
    self.copied = np.zeros((n, d), bool)  # (N, D) tensor i already has a copy on device d
    self.place = np.full(n, -1, np.int64)  # (N,)
    static = graph.param_bytes + graph.out_bytes + graph.temp_bytes
    self.root = graph.colocation_root()  # (N,)
    self.group_static = np.zeros(n)  # (N,) indexed by root
    np.add.at(self.group_static, self.root, static)
    self.group_device = np.full(n, -1, np.int64)  # (N,) indexed by root
    ptr, pred = graph.predecessor_csr()
    self.preds = [pred[ptr[v]:ptr[v + 1]].tolist() for v in range(n)]
    self.out = graph.out_bytes.tolist()
    self.reasons: List[str] = []

  def bound_device(self, j: int) -> int:
    """The device j's colocation group is already on, or -1."""
    return int(self.group_device[self.root[j]])

  def need(self, j: int, d: int) -> float:
    """Bytes that placing j on d adds to d (its group's static bytes if first, remote inputs)."""
    add = self.group_static[self.root[j]] if self.group_device[self.root[j]] < 0 else 0.0
    for i in self.preds[j]:
      e = self.place[i]
      if e >= 0 and e != d and not self.copied[i, d]:
        add += self.out[i]
    return add

  def fits(self, j: int, d: int) -> bool:
    return self.used[d] + self.need(j, d) <= self.capacity[d]

  def most_free(self, j: int, devices) -> int:
    """The device of `devices` with the most free bytes after placing j (ties: lowest id)."""
    return max(devices, key=lambda d: (self.capacity[d] - self.used[d] - self.need(j, d), -d))

  def choose_fallback(self, j: int, devices) -> int:
    """Most-free device for an op that fits nowhere; records the reason once per op."""
    d = self.most_free(j, devices)
    if len(self.reasons) < 5:
      self.reasons.append(
          f"op {self.graph.node_label(j)} fits on no device (needs {self.need(j, d):.4g} bytes "
          f"on device {d}, {self.capacity[d] - self.used[d]:.4g} free); placed on the device "
          f"with the most free memory")
    else:
      self.reasons.append("")
    return d

  def commit(self, j: int, d: int):
    self.used[d] += self.need(j, d)
    for i in self.preds[j]:
      if self.place[i] != d:
        self.copied[i, d] = True
    r = self.root[j]
    if self.group_device[r] < 0:
      self.group_device[r] = d
    self.place[j] = d

  def info(self) -> Dict:
    out = {"estimated_bytes": self.used.tolist()}
    if self.reasons:
      shown = [r for r in self.reasons if r]
      more = len(self.reasons) - len(shown)
      out["reason"] = "memory: " + "; ".join(shown) + (f"; and {more} more op(s)" if more
                                                          else "")
    return out


def _ready_vector(j: int, preds, place, finish, out, lat, inv_bw, d: int) -> np.ndarray:
  """(D,) time all inputs of j are on each device (transfers start when producers finish)."""
  r = np.zeros(d)
  for i in preds:
    e = place[i]
    t = finish[i] + lat[e] + out[i] * inv_bw[e]
    t[e] = finish[i]
    np.maximum(r, t, out=r)
  return r


def _order_priority(order) -> np.ndarray:
  """(N,) priority from a scheduling order: the first op scheduled gets the highest value."""
  n = len(order)
  prio = np.empty(n)
  prio[np.asarray(order, np.int64)] = np.arange(n, 0, -1, dtype=np.float64)
  return prio


# ------------------------------------------------------------------ HEFT
def heft_rank(graph, topology) -> np.ndarray:
  """(N,) HEFT upward rank: mean duration plus the max over successors of (mean transfer time
  of the op's output + successor's rank). Never below a successor's, so decreasing rank (ties:
  topological position) is a topological order."""
  w = objectives.durations(graph, topology).mean(axis=1).tolist()
  c = _mean_comm(graph, topology).tolist()
  ptr, succ = graph.successor_csr()
  ptr, succ = ptr.tolist(), succ.tolist()
  rank = [0.0] * graph.num_nodes
  for u in reversed(graph.topological_order().tolist()):
    best = 0.0
    for v in succ[ptr[u]:ptr[u + 1]]:
      if rank[v] > best:
        best = rank[v]
    rank[u] = w[u] + (c[u] + best if ptr[u + 1] > ptr[u] else 0.0)
  return np.asarray(rank)


def _insert_start(starts, finishes, ready: float, dur: float):
  """Earliest start >= ready of an idle gap of length dur on a device, and its list index."""
  k = bisect.bisect_right(finishes, ready)
  t = ready
  while k < len(starts):
    if t + dur <= starts[k]:
      return t, k
    t = max(t, finishes[k])
    k += 1
  return t, k


@register("heft", "placement",
          "HEFT: upward-rank order, insertion-based earliest finish time, memory-aware",
          mem_fraction=1.0)
def heft(problem: Problem, config) -> Proposal:
  """HEFT with colocation and the memory model of the module docstring.

  Devices that would exceed their (scaled) capacity are skipped while any allowed device fits.
  The priority is the upward rank, so the simulator prefers ops in HEFT's order.
  """
  frac = _check_config("heft", config)
  g, topo = problem.graph, problem.topology
  n, d = g.num_nodes, topo.num_devices
  rank = heft_rank(g, topo)
  topo_pos = np.empty(n, np.int64)
  topo_pos[g.topological_order()] = np.arange(n)
  order = np.lexsort((topo_pos, -rank)).tolist()
  dur = objectives.durations(g, topo)
  lat, inv_bw = topo.link_tables()
  mem = _Memory(g, topo, frac)
  finish = np.zeros(n)
  starts: List[List[float]] = [[] for _ in range(d)]
  finishes: List[List[float]] = [[] for _ in range(d)]
  every = list(range(d))
  for j in order:
    ready = _ready_vector(j, mem.preds[j], mem.place, finish, mem.out, lat, inv_bw, d)
    bound = mem.bound_device(j)
    allowed = [bound] if bound >= 0 else every
    fitting = [e for e in allowed if mem.fits(j, e)] if bound < 0 else allowed
    if not fitting:
      fitting = [mem.choose_fallback(j, allowed)]
    best = None
    for e in fitting:
      t, k = _insert_start(starts[e], finishes[e], float(ready[e]), float(dur[j, e]))
      key = (t + dur[j, e], e)
      if best is None or key < best[0]:
        best = (key, t, k)
    (end, e), t, k = best
    starts[e].insert(k, t)
    finishes[e].insert(k, end)
    finish[j] = end
    mem.commit(j, e)
  info = dict(mem.info(), estimated_makespan=float(finish.max()))
  return Proposal(mem.place.copy(), rank, info=info)


# ------------------------------------------------------------------ m-TOPO
@register("m_topo", "placement",
          "Baechi m-TOPO: topological order cut into contiguous per-device chunks by memory",
          balance=True, mem_fraction=1.0)
def m_topo(problem: Problem, config) -> Proposal:
  """Baechi's m-TOPO: walk the ops in topological order and fill device 0, then 1, ...

  A device is left for the next one when the op would push its estimated bytes past its limit:
  with `balance=True` (Baechi) the limit is min(capacity, total static bytes / D), so the chunks
  spread over all devices; with `balance=False` it is the capacity itself (a device is filled
  completely before the next is used). The last device, and any op that no longer fits its
  chunk's device, falls back to any device that fits (most free first), else to the one with the
  most free memory. Priority: the upward rank (critical path first), since m-TOPO places but
  does not schedule; on layered:n=1000,width=32 on nvlink8 it gives a 14% lower makespan than
  running the ops in m-TOPO's topological order.
  """
  frac = _check_config("m_topo", config)
  g, topo = problem.graph, problem.topology
  d = topo.num_devices
  mem = _Memory(g, topo, frac)
  limit = mem.capacity.copy()
  if config.get("balance", True):
    static = float((g.param_bytes + g.out_bytes + g.temp_bytes).sum())
    limit = np.minimum(limit, static / d)
  order = g.topological_order().tolist()
  k = 0
  every = list(range(d))
  for j in order:
    bound = mem.bound_device(j)
    if bound >= 0:
      mem.commit(j, bound)
      continue
    while k < d - 1 and mem.used[k] + mem.need(j, k) > limit[k] and mem.used[k] > 0:
      k += 1
    e = k
    if not mem.fits(j, e):
      fitting = [x for x in every if mem.fits(j, x)]
      e = mem.most_free(j, fitting) if fitting else mem.choose_fallback(j, every)
    mem.commit(j, e)
  return Proposal(mem.place.copy(), placements.upward_rank(g), info=mem.info())


# ------------------------------------------------------------------ m-ETF / m-SCT engine
def _list_schedule(problem: Problem, frac: float, favourite_parent: Optional[np.ndarray]):
  """Earliest-task-first list scheduling with memory; returns (placement, order, info).

  Each step commits the (ready op, device) pair with the earliest start time (ties: higher
  static level = `placements.upward_rank`, then lower op id, then lower device id). Per device
  two heaps hold the ready ops: those whose inputs arrive after the device is free, keyed by
  arrival, and those already arrived, keyed by level, so a step costs O(D log N) amortised.
  With `favourite_parent` (m-SCT, the rule of Hanen and Munier's SCT that Baechi adopts): when
  an op's commit makes its favourite child ready, and the child's inputs are all on that device
  by the time the op finishes, and it fits there, the child is committed next on the same
  device, right after its parent; otherwise the child is scheduled like any other op.
  """
  g, topo = problem.graph, problem.topology
  n, d = g.num_nodes, topo.num_devices
  dur = objectives.durations(g, topo)
  lat, inv_bw = topo.link_tables()
  level = placements.upward_rank(g).tolist()
  mem = _Memory(g, topo, frac)
  ptr, succ = g.successor_csr()
  ptr, succ = ptr.tolist(), succ.tolist()
  indeg = g.in_degree().tolist()
  finish = np.zeros(n)
  free = [0.0] * d
  ready_at = np.zeros((n, d))
  dropped = np.zeros((n, d), bool)  # (j, e) would overflow e while j fits elsewhere
  only = np.full(n, -1, np.int64)  # the single device j is offered on (group, favourite, forced)
  forced = np.zeros(n, bool)  # j fits nowhere: `only` is its most-free fallback device
  done = np.zeros(n, bool)
  waiting = [[] for _ in range(d)]  # heaps of (ready time, -level, op)
  arrived = [[] for _ in range(d)]  # heaps of (-level, op)
  every = list(range(d))

  members: Dict[int, List[int]] = {}  # colocation root -> ops of its group (groups of 2+)
  for j, r in enumerate(mem.root.tolist()):
    if g.colocation[j] >= 0:
      members.setdefault(r, []).append(j)

  def valid(j, e):
    bound = mem.bound_device(j)
    if bound >= 0:  # colocation overrides memory and favourites
      return not done[j] and e == bound
    return not done[j] and not dropped[j, e] and only[j] in (-1, e)

  def offer(j, devices):
    for e in devices:
      if valid(j, e):
        heapq.heappush(waiting[e], (ready_at[j, e], -level[j], j))

  def make_ready(j, parent=-1):
    """Offers newly ready j; True when j is `parent`'s favourite child to run right after it."""
    ready_at[j] = _ready_vector(j, mem.preds[j], mem.place, finish, mem.out, lat, inv_bw, d)
    bound = mem.bound_device(j)
    urgent = False
    if bound >= 0:
      only[j] = bound
    elif favourite_parent is not None and favourite_parent[j] >= 0:
      e = int(mem.place[parent]) if parent >= 0 else -1
      if (favourite_parent[j] == parent and ready_at[j, e] <= finish[parent] and
          mem.fits(j, e)):
        only[j] = e
        urgent = True
    offer(j, every)
    return urgent

  def candidate(e):
    w, a = waiting[e], arrived[e]
    while w and (w[0][0] <= free[e] or not valid(w[0][2], e)):
      _, lv, j = heapq.heappop(w)
      if valid(j, e):
        heapq.heappush(a, (lv, j))
    while a and not valid(a[0][1], e):
      heapq.heappop(a)
    if a:
      return (free[e], a[0][0], a[0][1], e)
    if w:
      return (w[0][0], w[0][1], w[0][2], e)
    return None

  for j in range(n):
    if indeg[j] == 0:
      make_ready(j)
  order = []
  urgent = -1
  while len(order) < n:
    if urgent >= 0:
      j, e = urgent, int(only[urgent])
      start, urgent = max(free[e], float(ready_at[j, e])), -1
    else:
      cands = [c for c in (candidate(e) for e in every) if c is not None]
      start, _, j, e = min(cands)
    if mem.bound_device(j) < 0 and not forced[j] and not mem.fits(j, e):
      dropped[j, e] = True
      if only[j] == e:  # a favourite parent's device that filled up: offer j everywhere
        only[j] = -1
        offer(j, every)
      if not any(mem.fits(j, x) for x in every if not dropped[j, x]):
        only[j] = mem.choose_fallback(j, every)
        forced[j] = True
        dropped[j, only[j]] = False
        offer(j, [only[j]])
      continue
    first_of_group = mem.bound_device(j) < 0
    done[j] = True
    finish[j] = start + dur[j, e]
    free[e] = float(finish[j])
    mem.commit(j, e)
    order.append(j)
    if first_of_group:  # ready ops of j's group may have left e's heaps: offer them again
      for v in members.get(int(mem.root[j]), ()):
        if indeg[v] == 0 and not done[v]:
          heapq.heappush(waiting[e], (ready_at[v, e], -level[v], v))
    for v in succ[ptr[j]:ptr[j + 1]]:
      indeg[v] -= 1
      if indeg[v] == 0 and make_ready(v, j):
        urgent = v
  info = dict(mem.info(), estimated_makespan=float(finish.max()))
  return mem.place.copy(), order, info


@register("m_etf", "placement",
          "Baechi m-ETF: earliest-task-first list scheduling under device memory limits",
          mem_fraction=1.0)
def m_etf(problem: Problem, config) -> Proposal:
  """Baechi's m-ETF; priority = its scheduling order (first scheduled runs first)."""
  frac = _check_config("m_etf", config)
  place, order, info = _list_schedule(problem, frac, None)
  return Proposal(place, _order_priority(order), info=info)


# ------------------------------------------------------------------ m-SCT
def favourite_parents(graph, topology, time_limit: float = 60.0):
  """(N,) favourite parent of each op (-1: none) from Baechi's LP relaxation, and a status.

  Variables: start S_i >= 0 of each op, x_e in [0, 1] per edge e = (i, j) (0: j is i's
  favourite child, the transfer is free; 1: it is paid), makespan w. With p_i the mean duration
  and c_e the mean transfer time of i's output over device pairs:

    minimise    w + eps * sum_e c_e x_e
    subject to  S_i + p_i + c_e x_e <= S_j          for every edge e = (i, j)
                S_i + p_i <= w                       for every sink i
                sum_{e out of i} x_e >= outdeg(i) - 1   (at most one favourite child)
                sum_{e into j} x_e >= indeg(j) - 1      (at most one favourite parent)

  The small eps (1e-3 / E) breaks ties among optimal solutions toward free transfers. Rounding
  x_e < 0.5 to 0 keeps the two "at most one" constraints, so every op has at most one
  favourite child and at most one favourite parent. Solved by scipy's HiGHS.
  """
  n, m = graph.num_nodes, graph.num_edges
  fav = np.full(n, -1, np.int64)
  if m == 0 or topology.num_devices == 1:
    return fav, "no edges or one device: no favourites"
  try:
    from scipy import sparse
    from scipy.optimize import linprog
  except ImportError:  # scipy is an optional ("baselines") dependency
    return fav, "scipy not installed: no favourites (plain m-ETF)"
  p = objectives.durations(graph, topology).mean(axis=1)
  c = _mean_comm(graph, topology)[graph.senders]
  s, r = graph.senders.astype(np.int64), graph.receivers.astype(np.int64)
  nv = n + m + 1  # S (n), x (m), w
  xs = n + np.arange(m)
  rows, cols, vals, rhs = [], [], [], []
  e_ids = np.arange(m)
  rows += [e_ids, e_ids, e_ids]
  cols += [s, r, xs]
  vals += [np.ones(m), -np.ones(m), c]
  rhs.append(-p[s])
  row = m
  sinks = np.flatnonzero(graph.out_degree() == 0)
  k = np.arange(row, row + sinks.size)
  rows += [k, k]
  cols += [sinks, np.full(sinks.size, nv - 1)]
  vals += [np.ones(sinks.size), -np.ones(sinks.size)]
  rhs.append(-p[sinks])
  row += sinks.size
  for ends, deg in ((s, graph.out_degree()), (r, graph.in_degree())):
    nodes = np.flatnonzero(deg >= 2)
    idx = np.full(n, -1, np.int64)
    idx[nodes] = row + np.arange(nodes.size)
    use = idx[ends] >= 0
    rows.append(idx[ends][use])
    cols.append(xs[use])
    vals.append(-np.ones(int(use.sum())))
    rhs.append(-(deg[nodes] - 1.0))
    row += nodes.size
  a = sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                        shape=(row, nv))
  cost = np.zeros(nv)
  cost[-1] = 1.0
  cost[n:n + m] = 1e-3 / m * c
  bounds = [(0, None)] * n + [(0, 1)] * m + [(0, None)]
  res = linprog(cost, A_ub=a, b_ub=np.concatenate(rhs), bounds=bounds, method="highs",
                options={"time_limit": float(time_limit)})
  if res.x is None:
    return fav, f"LP not solved ({res.message}): no favourites (plain m-ETF)"
  x = res.x[n:n + m]
  for e in np.argsort(x, kind="stable").tolist():
    if x[e] >= 0.5:
      break
    if fav[r[e]] < 0:
      fav[r[e]] = s[e]
  return fav, f"LP {res.status}: {res.message}"


@register("m_sct", "placement",
          "Baechi m-SCT: LP favourite children co-located, ETF list scheduling, memory-aware",
          mem_fraction=1.0, lp_time_limit=60.0)
def m_sct(problem: Problem, config) -> Proposal:
  """Baechi's m-SCT: `favourite_parents` from the LP, then the m-ETF engine in which a
  favourite child ready when its parent finishes runs next on the parent's device (the edge the
  LP decided to keep local). Priority = the scheduling order.

  Tried and dropped: always restricting a child to its favourite parent's device (while it
  fits) serialised too much: 18% worse than m-ETF on layered:n=1000,width=32 on nvlink8, where
  this rule is 6% better.
  """
  frac = _check_config("m_sct", config)
  limit = float(config.get("lp_time_limit", 60.0))
  if not limit > 0:
    raise ValueError(f"m_sct: lp_time_limit must be > 0 seconds, got {limit}")
  fav, status = favourite_parents(problem.graph, problem.topology, limit)
  place, order, info = _list_schedule(problem, frac, fav)
  info = dict(info, lp=status, favourites=int((fav >= 0).sum()))
  return Proposal(place, _order_priority(order), info=info)
