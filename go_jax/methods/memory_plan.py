"""Memory models of the list schedulers (go_jax/methods/list_scheduling.py): how HEFT, m-TOPO,
m-ETF and m-SCT decide whether an op fits a device while they plan.

Memory models (option `memory_model`, shared by all four; `mem_fraction` scales the capacities
the methods plan with):

  "auto" (the default of HEFT, m-ETF and m-SCT): "live", unless the live plan overflows a
    device by its own estimate, then "static" (see `_plan`). On PipeDream's layer-level
    training graphs (VGG-16, Inception-v3 at 0.6x memory) the live greedy fills the first
    device with forward activations that stay live until the backward pass and then finds no
    device for later ops; the static count spreads ops from the start and fits.
  "live" (an option of all four; see m_topo for why it is not m-TOPO's default): each
    device's planned memory over time, by the live intervals of docs/design.md section 4 rule 7
    applied to the method's own schedule: `param_bytes` for the whole step; an op's output
    from its planned start until its last consumer on that device finishes and its transfers
    arrive (held open, i.e. to the end of the step, while some consumer is not yet placed,
    and for good when it has none); a received copy from the producer's finish (when the
    transfer starts without contention) until the last consumer on the receiver finishes;
    `temp_bytes` while the op runs. Op u fits device d at its planned start s when that
    profile plus what u adds (its output from s on, its scratch during [s, finish), copies of
    its remote inputs not yet on d from their producers' finish on, its colocation group's
    parameters for the whole step) stays within capacity at every instant. A device is
    refused only when the op would really overflow it at the time it would run there; list
    schedulers (m-ETF, m-SCT) keep such an op waiting for that device until memory there is
    released or the device's queue moves past the overflow. The estimate matches the
    simulator wherever the simulated schedule follows the planned one (always, on 200 small
    random instances with free transfers); it differs where send-channel contention delays
    transfers (a transfer's copy then lives shorter, the sender's output longer) or where the
    simulator's order differs from the plan: on 300 small random instances with slow links,
    3, 2 and 8 of ~160 placements that m-ETF, m-SCT and HEFT estimated to fit simulated out
    of memory; on the 21 memory-constrained instances of bench_memory_baselines.py, none.
  "static" (the previous model, kept for comparison): a device must hold, for every op placed
    on it, `param_bytes + out_bytes + temp_bytes`, plus one received copy of every remote input
    (once per (tensor, device)) for the whole step. That bounds the simulated peak from above
    (a placement whose estimate fits is never out of memory) but refuses devices that would
    really fit, so under tight memory it ends far behind (bench_memory_baselines.py).

A colocation group reserves the parameters (static: all bytes) of all its ops when its first op
is placed, and every later op of the group follows it. When an op fits on no allowed device it
goes to the one with the most free memory at the time it would run there and `info["reason"]`
says so; the methods never raise on infeasible memory.
"""

from __future__ import annotations

import math
from typing import Dict, List, Sequence, Tuple

import numpy as np

from go_jax.methods import Problem, Proposal

MEMORY_MODELS = ("auto", "live", "static")
_INF = math.inf


def _check_config(name: str, config) -> float:
  frac = float(config.get("mem_fraction", 1.0))
  if not (np.isfinite(frac) and frac > 0):
    raise ValueError(f"{name}: mem_fraction must be a finite number > 0, got {frac}")
  model = config.get("memory_model", "auto")
  if model not in MEMORY_MODELS:
    raise ValueError(f"{name}: memory_model must be one of {list(MEMORY_MODELS)}, got "
                     f"{model!r}")
  return frac


def _memory(name: str, graph, topology, config):
  """The memory model of `config` for method `name` (see the module docstring); "auto" is
  resolved by `_plan`, which calls this with "live" or "static"."""
  frac = _check_config(name, config)
  if config.get("memory_model", "auto") == "static":
    return _StaticMemory(graph, topology, frac)
  return _LiveMemory(graph, topology, frac)


def _plan(name: str, problem: Problem, config, run) -> Proposal:
  """Runs `run(mem) -> (placement, priority, info)` under the config's memory model.

  "auto" (the default of HEFT, m-ETF and m-SCT): the live model's plan, unless that plan cannot
  fit (its own estimated peak overflows some device's scaled capacity: the greedy filled a
  device early, e.g. with forward activations that live until the backward pass, and later
  ops fit nowhere); then the static count's plan, which spreads ops from the start. Both plans
  are the method's own; the simulator is not consulted.
  """
  g, topo = problem.graph, problem.topology
  model = config.get("memory_model", "auto")
  if model != "auto":
    _check_config(name, config)
    place, prio, info = run(_memory(name, g, topo, config))
    return Proposal(place, prio, info=dict(info, memory_model=model))
  place, prio, info = run(_memory(name, g, topo, dict(config, memory_model="live")))
  cap = np.asarray(topo.mem_capacity, np.float64) * float(config.get("mem_fraction", 1.0))
  peak = np.asarray(info["estimated_bytes"], np.float64)
  if not np.any(peak > cap * (1 + 1e-9)):
    return Proposal(place, prio, info=dict(info, memory_model="live"))
  over = np.flatnonzero(peak > cap * (1 + 1e-9)).tolist()
  place, prio, info = run(_memory(name, g, topo, dict(config, memory_model="static")))
  return Proposal(place, prio, info=dict(
      info, memory_model="static", live_plan=f"overflowed device(s) {over} by its own "
      "estimate; the static count's plan is used"))


class _MemoryBase:
  """What both memory models share: capacities, colocation binding and fallback reasons."""

  releases = False  # whether committing an op can free memory planned before

  def __init__(self, graph, topology, mem_fraction: float):
    n = graph.num_nodes
    self.graph = graph
    self.capacity = np.asarray(topology.mem_capacity, np.float64) * mem_fraction  # (D,)
    self.unbounded = bool(np.all(np.isinf(self.capacity)))
    self.place = np.full(n, -1, np.int64)  # (N,)
    self.root = graph.colocation_root()  # (N,)
    self.group_device = np.full(n, -1, np.int64)  # (N,) indexed by root
    ptr, pred = graph.predecessor_csr()
    self.preds = [pred[ptr[v]:ptr[v + 1]].tolist() for v in range(n)]
    self.out = graph.out_bytes.tolist()
    self.reasons: List[str] = []

  def _group_bytes(self, static) -> np.ndarray:
    total = np.zeros(self.graph.num_nodes)
    np.add.at(total, self.root, static)
    return total

  def bound_device(self, j: int) -> int:
    """The device j's colocation group is already on, or -1."""
    return int(self.group_device[self.root[j]])

  def peak_with(self, j: int, d: int, start: float, finish: float) -> float:
    """Estimated peak bytes of d, over the times placing j on d at [start, finish) touches."""
    raise NotImplementedError

  def fits(self, j: int, d: int, start: float = 0.0, finish: float = 0.0) -> bool:
    if self.unbounded:
      return True
    return self.peak_with(j, d, start, finish) <= self.capacity[d]

  def most_free(self, j: int, devices: Sequence[int], slots) -> int:
    """The device of `devices` with the most free bytes after placing j at its slot
    (`slots[d]` = (start, finish)); ties: lowest id."""
    return max(devices, key=lambda d: (self.capacity[d] - self.peak_with(j, d, *slots[d]), -d))

  def choose_fallback(self, j: int, devices: Sequence[int], slots) -> int:
    """Most-free device for an op that fits nowhere; records the reason (5 shown)."""
    d = self.most_free(j, devices, slots)
    if len(self.reasons) < 5:
      self.reasons.append(
          f"op {self.graph.node_label(j)} fits on no device (would need "
          f"{self.peak_with(j, d, *slots[d]):.4g} bytes on device {d} at its planned start "
          f"{slots[d][0]:.4g} s, capacity {self.capacity[d]:.4g}); placed on the device with "
          f"the most free memory")
    else:
      self.reasons.append("")
    return d

  def _bind(self, j: int, d: int) -> bool:
    """Records j on d; True when j is the first op of its colocation group."""
    r = self.root[j]
    first = self.group_device[r] < 0
    if first:
      self.group_device[r] = d
    self.place[j] = d
    return bool(first)

  def commit(self, j: int, d: int, start: float = 0.0, finish: float = 0.0) -> Sequence[int]:
    """Places j on d at [start, finish); returns the devices whose planned memory shrank."""
    raise NotImplementedError

  def estimated_peak(self) -> np.ndarray:
    raise NotImplementedError

  def info(self) -> Dict:
    out = {"estimated_bytes": self.estimated_peak().tolist()}
    if self.reasons:
      shown = [r for r in self.reasons if r]
      more = len(self.reasons) - len(shown)
      out["reason"] = "memory: " + "; ".join(shown) + (f"; and {more} more op(s)" if more
                                                          else "")
    return out


class _StaticMemory(_MemoryBase):
  """memory_model="static": every byte a device could ever hold (module docstring)."""

  def __init__(self, graph, topology, mem_fraction: float):
    super().__init__(graph, topology, mem_fraction)
    n, d = graph.num_nodes, topology.num_devices
    self.used = np.zeros(d)  # (D,) bytes
    self.copied = np.zeros((n, d), bool)  # (N, D) tensor i already has a copy on device d
    self.group_static = self._group_bytes(graph.param_bytes + graph.out_bytes +
                                          graph.temp_bytes)  # (N,) indexed by root

  def need(self, j: int, d: int) -> float:
    """Bytes that placing j on d adds to d (its group's static bytes if first, remote inputs)."""
    add = self.group_static[self.root[j]] if self.group_device[self.root[j]] < 0 else 0.0
    for i in self.preds[j]:
      e = self.place[i]
      if e >= 0 and e != d and not self.copied[i, d]:
        add += self.out[i]
    return add

  def peak_with(self, j, d, start=0.0, finish=0.0):
    return self.used[d] + self.need(j, d)

  def commit(self, j, d, start=0.0, finish=0.0):
    self.used[d] += self.need(j, d)
    for i in self.preds[j]:
      if self.place[i] != d:
        self.copied[i, d] = True
    self._bind(j, d)
    return ()

  def estimated_peak(self):
    return self.used.copy()


class _Profile:
  """One device's planned bytes over time: level `vals[k]` on [times[k], times[k + 1]), the
  last level to the end of the step. Half-open intervals, as in the simulator's rule 7.
  `times` and `vals` are views of the first K entries of buffers with spare room, so a split
  shifts the tail in place instead of copying both arrays (np.insert made m_sct's splits
  quadratic in time on long profiles); the buffers double when full."""

  __slots__ = ("times", "vals", "_tbuf", "_vbuf")

  def __init__(self):
    self._tbuf = np.zeros(64)
    self._vbuf = np.zeros(64)
    self.times = self._tbuf[:1]  # (K,) ascending, times[0] = 0
    self.vals = self._vbuf[:1]  # (K,) bytes

  def _cut(self, t: float) -> int:
    """Index of the piece starting at t (split there if needed); t >= 0."""
    k = int(np.searchsorted(self.times, t))
    size = self.times.size
    if k < size and self.times[k] == t:
      return k
    if size == self._tbuf.size:
      self._tbuf = np.concatenate([self._tbuf, np.zeros(size)])
      self._vbuf = np.concatenate([self._vbuf, np.zeros(size)])
    tb, vb = self._tbuf, self._vbuf
    tb[k + 1:size + 1] = tb[k:size]  # overlapping copies: numpy buffers them
    vb[k + 1:size + 1] = vb[k:size]
    tb[k] = t
    vb[k] = vb[k - 1]
    self.times, self.vals = tb[:size + 1], vb[:size + 1]
    return k

  def add(self, t0: float, t1: float, nbytes: float):
    """Adds nbytes on [t0, t1) (t1 may be inf); empty intervals and 0 bytes change nothing."""
    if not t1 > t0 or nbytes == 0:
      return
    k0 = self._cut(t0)
    if t1 == _INF:
      self.vals[k0:] += nbytes
    else:
      k1 = self._cut(t1)
      self.vals[k0:k1] += nbytes

  def window(self, t0: float, t1: float) -> Tuple[int, int]:
    """Index range of the pieces meeting [t0, t1) (t1 > t0)."""
    times = self.times  # the array's own searchsorted: np.searchsorted's wrapper cost as much
    k0 = int(times.searchsorted(t0, side="right")) - 1
    k1 = times.size if t1 == _INF else int(times.searchsorted(t1))
    return max(k0, 0), max(k1, k0 + 1)


class _LiveMemory(_MemoryBase):
  """memory_model="live": live intervals of the planned schedule (module docstring)."""

  releases = True

  def __init__(self, graph, topology, mem_fraction: float):
    super().__init__(graph, topology, mem_fraction)
    n, d = graph.num_nodes, topology.num_devices
    self.profiles = [_Profile() for _ in range(d)]
    self.base = np.zeros(d)  # (D,) parameter bytes (live for the whole step)
    self.group_param = self._group_bytes(graph.param_bytes)  # (N,) indexed by root
    self.temp = graph.temp_bytes.tolist()
    self.remaining = graph.out_degree().tolist()  # consumers of each op not yet placed
    self.last_use: List[Dict[int, float]] = [dict() for _ in range(n)]  # device -> last finish
    self.start = [0.0] * n
    self.finish = [0.0] * n
    lat, inv_bw = topology.link_tables()
    self.lat, self.inv_bw = lat.tolist(), inv_bw.tolist()
    self.released = [0.0] * d  # bytes released from each device's last level so far
    self.freed: Dict[int, List[Tuple[float, float]]] = {}  # last commit: d -> (from, bytes)

  def _steps(self, j: int, d: int, start: float, finish: float):
    """What j on d at [start, finish) adds over time: sorted (time, delta bytes) steps."""
    steps = []
    for i in self.preds[j]:
      e = self.place[i]
      if e >= 0 and e != d and d not in self.last_use[i]:
        steps.append((self.finish[i], self.out[i]))
    steps.append((start, self.out[j] + (self.temp[j] if finish > start else 0.0)))
    if finish > start and self.temp[j]:
      steps.append((finish, -self.temp[j]))
    steps.sort()
    return steps

  def check(self, j: int, d: int, start: float, finish: float) -> Tuple[float, float, float]:
    """(estimated peak bytes on d over the times j touches, the time after which the overflow
    found would be over, inf where it is open-ended: see `_list_schedule`, and the bytes by
    which d overflows just before that time, -inf where j fits). Until memory on d is released
    before that time, that overflow stays: what d gains only adds to it (`_list_schedule`)."""
    prof = self.profiles[d]
    const = self.group_param[self.root[j]] if self.group_device[self.root[j]] < 0 else 0.0
    base = self.base[d] + const
    cap = self.capacity[d]
    steps = self._steps(j, d, start, finish)
    segments = []
    if const > 0 and steps[0][0] > 0:
      segments.append((0.0, steps[0][0], 0.0))
    level = 0.0
    for k, (t, delta) in enumerate(steps):
      level += delta
      t_next = steps[k + 1][0] if k + 1 < len(steps) else _INF
      if t_next > t and (level > 0 or const > 0):
        segments.append((t, t_next, level))
    peak, t_ok, excess = base, -_INF, -_INF
    for t0, t1, level in segments:
      k0, k1 = prof.window(t0, t1)
      piece = prof.vals[k0:k1]
      top = float(piece.max()) + level + base
      peak = max(peak, top)
      if top > cap:
        last = k0 + int((piece + (level + base) > cap).nonzero()[0][-1])
        end = min(float(prof.times[last + 1]) if last + 1 < prof.times.size else _INF, t1)
        over = float(prof.vals[last]) + (level + base) - cap
        if end > t_ok or (end == t_ok and over < excess):
          t_ok, excess = end, over
    return peak, t_ok, excess

  def lasting_parts(self, j: int, d: int) -> Tuple[float, float]:
    """(what j on d would leave there to the end of the step besides its group's parameters:
    its output and copies of its remote inputs not yet on d, those parameters or 0 where the
    group is placed) for `lasting_excess`. Changes only when a copy of an input of j reaches d
    (`list_memory.RetryIndex` caches it until then)."""
    const = self.group_param[self.root[j]] if self.group_device[self.root[j]] < 0 else 0.0
    level = self.out[j]
    for i in self.preds[j]:
      e = self.place[i]
      if e >= 0 and e != d and d not in self.last_use[i]:
        level += self.out[i]
    return level, const

  def lasting_excess(self, d: int, level: np.ndarray, const: np.ndarray) -> np.ndarray:
    """Bytes by which each op (its `lasting_parts` on d: arrays `level`, `const`) would
    overflow d for good, at any start: d's last level plus what the op leaves there minus
    capacity; -inf where it leaves nothing. Above a small margin (`lasting_margin`), `check`
    would find the overflow open-ended (t_ok inf). Until d's memory is released again it only
    grows: what d gains is d's level, and a copy that another consumer brings to d moves from
    the op's part to d's level."""
    excess = float(self.profiles[d].vals[-1]) + level + self.base[d] + const - self.capacity[d]
    return np.where((level > 0) | (const > 0), excess, -_INF)

  def adds_before(self, j: int, d: int, t: float, start: float) -> bool:
    """Whether j on d, started at or after `start` (and before t when t > start), adds bytes
    to d just before t: its group's parameters, its output (t > start), or else copies of its
    remote inputs that reach d before t and are not on d yet. While this holds and d has not
    released memory before t, an overflow of d found just before t (`check`) stays."""
    if self.group_device[self.root[j]] < 0 and self.group_param[self.root[j]] > 0:
      return True
    if t > start:
      return self.out[j] > 0
    return any(self.place[i] != d and d not in self.last_use[i] and self.finish[i] < t and
               self.out[i] > 0 for i in self.preds[j])

  def lasting_margin(self, d: int) -> float:
    """Rounding margin of `lasting_excess` on d: a near tie is left to `check`."""
    return 1e-6 * (self.capacity[d] + self.base[d] + abs(float(self.profiles[d].vals[-1])) +
                   self.released[d])

  def peak_with(self, j, d, start=0.0, finish=0.0):
    return self.check(j, d, start, finish)[0]

  def commit(self, j, d, start=0.0, finish=0.0):
    self.freed = {}
    if self._bind(j, d):
      self.base[d] += self.group_param[self.root[j]]
    prof = self.profiles[d]
    released = []
    for i in self.preds[j]:
      uses = self.last_use[i]
      e = self.place[i]
      if e != d and d not in uses:
        prof.add(self.finish[i], _INF, self.out[i])  # the received copy, open until closed
      uses[d] = max(uses.get(d, -_INF), finish)
      self.remaining[i] -= 1
      if self.remaining[i] == 0:
        released += self._close(i)
    prof.add(start, _INF, self.out[j])  # open until its last consumer is placed
    prof.add(start, finish, self.temp[j])
    self.start[j], self.finish[j] = start, finish
    return released

  def _close(self, i: int) -> List[int]:
    """Every consumer of i is placed: its output and copies end (rule 7). Returns devices."""
    e, f, nbytes = int(self.place[i]), self.finish[i], self.out[i]
    if nbytes == 0:
      return []
    uses = self.last_use[i]
    end = max(f, uses.get(e, -_INF))
    for x, last in uses.items():
      if x != e:
        end = max(end, f + self.lat[e][x] + nbytes * self.inv_bw[e][x])
        self.profiles[x].add(last, _INF, -nbytes)
        self.released[x] += nbytes
        self.freed.setdefault(x, []).append((last, nbytes))
    self.profiles[e].add(end, _INF, -nbytes)
    self.released[e] += nbytes
    self.freed.setdefault(e, []).append((end, nbytes))
    return list(set(uses) | {e})

  def estimated_peak(self):
    return self.base + np.array([p.vals.max() for p in self.profiles])
