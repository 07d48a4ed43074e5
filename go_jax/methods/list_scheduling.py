"""Memory-aware list-scheduling placements: HEFT and Baechi's m-TOPO, m-ETF and m-SCT.

Each method builds its own estimated schedule of the graph on the topology (durations from
rule 2 of design.md section 4, a transfer of `latency + out_bytes / bandwidth` between different
devices, no send-channel contention), keeps the placement and turns its order into a priority;
`solve` then re-simulates the proposal exactly, so only the placement and the priority matter.

  - heft: Topcuoglu et al., "Performance-effective and low-complexity task scheduling for
    heterogeneous computing", IEEE TPDS 2002. Ops in decreasing upward rank (mean duration over
    devices plus mean transfer time over device pairs), each on the device giving its earliest
    finish time, allowed to fill an idle gap between ops already scheduled there (insertion).
  - m_topo, m_etf, m_sct: Jeon et al., "Baechi: Fast Device Placement of Machine Learning
    Graphs", SoCC 2020: topological chunks, earliest-task-first and small-communication-time
    list scheduling, each refusing a device whose memory would overflow.

Memory models (option `memory_model`): see go_jax/methods/memory_plan.py.
"""

from __future__ import annotations

import bisect
import heapq
import math
from typing import Dict, List, Optional

import numpy as np

from go_jax import objectives, placements
from go_jax.methods import Problem, Proposal, register
from go_jax.methods.list_memory import RetryIndex

# The memory models; MEMORY_MODELS is re-exported for callers of this module.
from go_jax.methods.memory_plan import (MEMORY_MODELS, _check_config, _memory,  # noqa: F401
                                        _plan, _StaticMemory)

_INF = math.inf


# ------------------------------------------------------------------ shared helpers
def _mean_comm(graph, topology) -> np.ndarray:
  """(N,) mean transfer time of each op's output over ordered pairs of different devices."""
  d = topology.num_devices
  if d == 1:
    return np.zeros(graph.num_nodes)
  lat, inv_bw = topology.link_tables()
  pairs = d * (d - 1)
  return lat.sum() / pairs + graph.out_bytes * (inv_bw.sum() / pairs)


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
          mem_fraction=1.0, memory_model="auto")
def heft(problem: Problem, config) -> Proposal:
  """HEFT with colocation and the memory model of the module docstring.

  Devices that would exceed their (scaled) capacity at the op's slot are skipped while any
  allowed device fits; with the live model a device whose idle gap would overflow is tried
  once more after its last scheduled op. The priority is the upward rank, so the simulator
  prefers ops in HEFT's order.
  """
  g, topo = problem.graph, problem.topology
  n, d = g.num_nodes, topo.num_devices
  rank = heft_rank(g, topo)
  topo_pos = np.empty(n, np.int64)
  topo_pos[g.topological_order()] = np.arange(n)
  order = np.lexsort((topo_pos, -rank)).tolist()
  dur = objectives.durations(g, topo).tolist()
  lat, inv_bw = topo.link_tables()

  def run(mem):
    finish = np.zeros(n)
    starts: List[List[float]] = [[] for _ in range(d)]
    finishes: List[List[float]] = [[] for _ in range(d)]
    every = list(range(d))
    for j in order:
      ready = _ready_vector(j, mem.preds[j], mem.place, finish, mem.out, lat, inv_bw, d).tolist()
      bound = mem.bound_device(j)
      allowed = [bound] if bound >= 0 else every
      slots = {}  # device -> (start, list index) of the slots that fit
      first = {}  # device -> its insertion slot, for the fallback
      for e in allowed:
        w = dur[j][e]
        t, k = _insert_start(starts[e], finishes[e], ready[e], w)
        first[e] = (t, t + w)
        if bound >= 0 or mem.fits(j, e, t, t + w):
          slots[e] = (t, k)
        elif mem.releases and k < len(starts[e]):
          t = max(ready[e], finishes[e][-1])
          if mem.fits(j, e, t, t + w):
            slots[e] = (t, len(starts[e]))
      if not slots:
        e = mem.choose_fallback(j, allowed, first)
        slots[e] = _insert_start(starts[e], finishes[e], ready[e], dur[j][e])
      end, e = min((t + dur[j][e], e) for e, (t, _) in slots.items())
      t, k = slots[e]
      starts[e].insert(k, t)
      finishes[e].insert(k, end)
      finish[j] = end
      mem.commit(j, e, t, end)
    info = dict(mem.info(), estimated_makespan=float(finish.max()))
    return mem.place.copy(), rank, info

  return _plan("heft", problem, config, run)


# ------------------------------------------------------------------ m-TOPO
@register("m_topo", "placement",
          "Baechi m-TOPO: topological order cut into contiguous per-device chunks by memory",
          balance=True, mem_fraction=1.0, memory_model="static", priority="rank")
def m_topo(problem: Problem, config) -> Proposal:
  """Baechi's m-TOPO: walk the ops in topological order and fill device 0, then 1, ...

  A device is left for the next one when the op does not fit it by the memory model, or would push
  its byte count (the static model's count, with either model) past the total static bytes / D
  with `balance=True` (Baechi: the chunks spread over all devices; the static model also stops at
  its capacity); with `balance=False` a device is filled until nothing fits. The live model plans
  the ops' times as a list schedule in topological order (each op as soon as its inputs are there,
  in the first idle gap of its device, as HEFT does). The last device, and any op that no longer
  fits its chunk's device, falls back to any device that fits (most free first), else to the one
  with the most free memory. Priority (`priority`): "rank", the upward rank (critical path first),
  since m-TOPO places but does not schedule (on layered:n=1000,width=32 on nvlink8 a 14% lower
  makespan than running the ops in m-TOPO's topological order), or "plan", the order of the
  planned start times. Neither makes the simulator run the planned order everywhere, so m-TOPO's
  live estimate is looser than the list schedulers': on 200 small random instances with free
  transfers, 7 ("rank") and 3 ("plan") of its ~110 placements estimated to fit simulated out of
  memory, against none of HEFT's, m-ETF's and m-SCT's; and on the 21 memory-constrained instances
  of experiments/bench_memory_baselines.py it did worse than the static count (17 vs 18 feasible,
  geometric-mean objective 2.74 vs 2.24 times the best method's). So m-TOPO, which places without
  scheduling, keeps `memory_model="static"` by default; the live model is an option.
  """
  g, topo = problem.graph, problem.topology
  n, d = g.num_nodes, topo.num_devices
  mem = _memory("m_topo", g, topo, config)
  balance = bool(config.get("balance", True))
  static = g.param_bytes + g.out_bytes + g.temp_bytes
  dur = objectives.durations(g, topo).tolist()
  lat, inv_bw = topo.link_tables()
  finish = np.zeros(n)
  start = np.zeros(n)
  starts: List[List[float]] = [[] for _ in range(d)]
  finishes: List[List[float]] = [[] for _ in range(d)]
  # The chunks' byte count: the static model's (its own, or beside the live model's).
  tally = mem if not mem.releases else _StaticMemory(g, topo, 1.0)
  limit = mem.capacity.copy() if not mem.releases else np.full(d, _INF)
  if balance:
    limit = np.minimum(limit, float(static.sum()) / d)
  every = list(range(d))
  k = 0
  for j in g.topological_order().tolist():
    ready = _ready_vector(j, mem.preds[j], mem.place, finish, mem.out, lat, inv_bw, d)
    slots = {}
    for x in every:
      t, _ = _insert_start(starts[x], finishes[x], float(ready[x]), dur[j][x])
      slots[x] = (t, t + dur[j][x])
    e = mem.bound_device(j)
    if e < 0:
      while k < d - 1 and tally.used[k] > 0 and (
          tally.used[k] + tally.need(j, k) > limit[k] or not mem.fits(j, k, *slots[k])):
        k += 1
      e = k
      if not mem.fits(j, e, *slots[e]):
        fitting = [x for x in every if mem.fits(j, x, *slots[x])]
        e = (mem.most_free(j, fitting, slots) if fitting
             else mem.choose_fallback(j, every, slots))
    t, end = slots[e]
    i = bisect.bisect_right(starts[e], t)
    starts[e].insert(i, t)
    finishes[e].insert(i, end)
    mem.commit(j, e, t, end)
    if tally is not mem:
      tally.commit(j, e)
    start[j], finish[j] = t, end
  prio = placements.upward_rank(g)
  if config.get("priority", "rank") not in ("rank", "plan"):
    raise ValueError(f"m_topo: priority must be 'rank' or 'plan', got {config['priority']!r}")
  if config["priority"] == "plan":
    prio = _order_priority(np.lexsort((-prio, start)))
  return Proposal(mem.place.copy(), prio, info=mem.info())


# ------------------------------------------------------------------ m-ETF / m-SCT engine
def _list_schedule(problem: Problem, mem, favourite_parent: Optional[np.ndarray]):
  """Earliest-task-first list scheduling with memory; returns (placement, order, info).

  Each step commits the (ready op, device) pair with the earliest start time (ties: higher
  static level = `placements.upward_rank`, then lower op id, then lower device id). Per device
  two heaps hold the ready ops: those whose inputs arrive after the device is free, keyed by
  arrival, and those already arrived, keyed by level, so a step costs O(D log N) amortised.
  With `favourite_parent` (m-SCT, the rule of Hanen and Munier's SCT that Baechi adopts): when
  an op's commit makes its favourite child ready, and the child's inputs are all on that device
  by the time the op finishes, and it fits there, the child is committed next on the same
  device, right after its parent; otherwise the child is scheduled like any other op.

  Memory: a pair (j, e) whose op would overflow e at its start is set aside. With the static
  model it stays refused, and an op that fits on no remaining device goes to the device with the
  most free memory at once. With the live model the op waits for e (`list_memory.RetryIndex`):
  it is offered to e again when memory planned on e is released (a buffer's last consumer
  placed) or e's queue has moved past the overflow; only when every ready op waits does the one
  with the highest level go to the device with the most free memory at its start there.
  """
  g, topo = problem.graph, problem.topology
  n, d = g.num_nodes, topo.num_devices
  dur = objectives.durations(g, topo)
  lat, inv_bw = topo.link_tables()
  level = placements.upward_rank(g).tolist()
  ptr, succ = g.successor_csr()
  ptr, succ = ptr.tolist(), succ.tolist()
  indeg = g.in_degree().tolist()
  finish = np.zeros(n)
  free = [0.0] * d
  ready_at = np.zeros((n, d))
  dropped = np.zeros((n, d), bool)  # (j, e) would overflow e (set aside, see above)
  only = np.full(n, -1, np.int64)  # the single device j is offered on (group, favourite, forced)
  forced = np.zeros(n, bool)  # j fits nowhere: `only` is its most-free fallback device
  done = np.zeros(n, bool)
  waiting = [[] for _ in range(d)]  # heaps of (ready time, -level, op)
  arrived = [[] for _ in range(d)]  # heaps of (-level, op)
  waits = RetryIndex(g, mem, done, dropped, forced) if mem.releases else None
  pending = []  # heap of (-level, op) of the ready ops; committed ones are skipped lazily
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
    heapq.heappush(pending, (-level[j], j))
    bound = mem.bound_device(j)
    urgent = False
    if bound >= 0:
      only[j] = bound
    elif favourite_parent is not None and favourite_parent[j] >= 0:
      e = int(mem.place[parent]) if parent >= 0 else -1
      s = max(free[e], float(ready_at[j, e])) if e >= 0 else 0.0
      if (favourite_parent[j] == parent and ready_at[j, e] <= finish[parent] and
          mem.fits(j, e, s, s + dur[j, e])):
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

  def unblock(e, everything):  # offers e again to the ops waiting for its memory (RetryIndex)
    for j in waits.retry(e, everything, free[e]):
      offer(j, [e])

  def slot(j, e):
    s = max(free[e], float(ready_at[j, e]))
    return s, s + float(dur[j, e])

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
      if not cands:  # live model: every ready op waits for memory somewhere
        while done[pending[0][1]]:
          heapq.heappop(pending)
        j = pending[0][1]  # highest level, then lowest id
        slots = {x: slot(j, x) for x in every}
        e = mem.choose_fallback(j, every, slots)
        only[j], forced[j], dropped[j, e] = e, True, False
        cands = [(slots[e][0], -level[j], j, e)]
      start, _, j, e = min(cands)
    fin = start + float(dur[j, e])
    if mem.bound_device(j) < 0 and not forced[j]:
      if mem.releases:
        peak, t_ok, over = (mem.check(j, e, start, fin) if not mem.unbounded else
                            (0.0, 0.0, 0.0))
        fits = peak <= mem.capacity[e]
      else:
        fits = mem.fits(j, e)
      if not fits:
        dropped[j, e] = True
        if only[j] == e:  # a favourite parent's device that filled up: offer j everywhere
          only[j] = -1
          offer(j, every)
        if mem.releases:
          waits.block(j, e, t_ok, start, over)
        elif not any(mem.fits(j, x) for x in every if not dropped[j, x]):
          only[j] = mem.choose_fallback(j, every, {x: (0.0, 0.0) for x in every})
          forced[j] = True
          dropped[j, only[j]] = False
          offer(j, [only[j]])
        continue
    first_of_group = mem.bound_device(j) < 0
    if mem.releases:  # before `commit` records the copies of j's inputs on e
      waits.before_commit(j, e)
    done[j] = True
    finish[j] = fin
    free[e] = fin
    released = mem.commit(j, e, start, fin)
    order.append(j)
    if mem.releases:
      for x in set(released):
        unblock(x, True)
      unblock(e, False)
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
          mem_fraction=1.0, memory_model="auto")
def m_etf(problem: Problem, config) -> Proposal:
  """Baechi's m-ETF; priority = its scheduling order (first scheduled runs first)."""
  def run(mem):
    place, order, info = _list_schedule(problem, mem, None)
    return place, _order_priority(order), info
  return _plan("m_etf", problem, config, run)


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
          mem_fraction=1.0, memory_model="auto", lp_time_limit=60.0)
def m_sct(problem: Problem, config) -> Proposal:
  """Baechi's m-SCT: `favourite_parents` from the LP, then the m-ETF engine in which a
  favourite child ready when its parent finishes runs next on the parent's device (the edge the
  LP decided to keep local). Priority = the scheduling order.

  Tried and dropped: always restricting a child to its favourite parent's device (while it
  fits) serialised too much: 18% worse than m-ETF on layered:n=1000,width=32 on nvlink8, where
  this rule is 6% better.
  """
  _check_config("m_sct", config)
  limit = float(config.get("lp_time_limit", 60.0))
  if not limit > 0:
    raise ValueError(f"m_sct: lp_time_limit must be > 0 seconds, got {limit}")
  fav, status = favourite_parents(problem.graph, problem.topology, limit)

  def run(mem):
    place, order, info = _list_schedule(problem, mem, fav)
    return place, _order_priority(order), dict(info, lp=status, favourites=int((fav >= 0).sum()))
  return _plan("m_sct", problem, config, run)
