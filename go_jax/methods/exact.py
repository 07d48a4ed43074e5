"""Exact (constraint programming) baselines with OR-Tools CP-SAT, for small graphs.

* "cpsat" (joint): placement and schedule together, minimising the makespan of a RELAXATION of
  the simulator (DESIGN section 4). Per op: a start, one optional interval per device with that
  device's duration (rule 2), exactly one device, colocation groups on one device, NoOverlap per
  device; per edge u->v: start_v >= end_u, plus the transfer time latency + bytes / bandwidth
  when u and v sit on different devices. The model ignores the queueing of transfers on send
  channels (rule 3) and the list-scheduling rule (5), so every schedule the simulator can
  produce is feasible for it: its optimum, and any proven bound, is a LOWER BOUND on the
  makespan of every placement and priority (as long as the optional memory constraint is off or
  not binding, see below). Its solution is re-simulated by `solve`, which may report a larger
  makespan.
* "cpsat_memory" (schedule): the topological order of the ops of ONE device that minimises that
  device's peak memory (DESIGN rule 7), as a permutation model. Exact for single-device
  placements; see `cpsat_memory` for what it does on multi-device ones.

Time is integer in CP-SAT: seconds are divided by `time_unit` and rounded DOWN (with a 1e-6 unit
tolerance against float noise), so the scaled model stays a relaxation and its objective times
`time_unit` is still a lower bound. Both methods refuse graphs above `max_ops` with a
ValueError, and fall back to a heuristic (with `info["reason"]`) when the solver finds nothing.
"""

from __future__ import annotations

from typing import Dict, List

import numpy as np
from ortools.sat.python import cp_model

from go_jax import objectives, placements
from go_jax.methods import Problem, Proposal, evaluate, register
from go_jax.methods import simple

_TOL = 1e-6  # tolerance (in units) of the floor rounding of times


def _check_common(name: str, n: int, config) -> None:
  if n > int(config["max_ops"]):
    raise ValueError(f"{name}: {n} ops exceed max_ops={config['max_ops']}; the exact model is "
                     f"meant for small graphs (raise max_ops to try anyway)")
  if float(config["time_limit_s"]) <= 0:
    raise ValueError(f"{name}: time_limit_s must be > 0, got {config['time_limit_s']}")
  if int(config["num_workers"]) < 1:
    raise ValueError(f"{name}: num_workers must be >= 1, got {config['num_workers']}")


def _solver(config, seed: int) -> cp_model.CpSolver:
  solver = cp_model.CpSolver()
  solver.parameters.max_time_in_seconds = float(config["time_limit_s"])
  solver.parameters.num_workers = int(config["num_workers"])
  solver.parameters.random_seed = int(seed) % (2**31)
  return solver


# ------------------------------------------------------------------ joint placement + schedule
def _transfer_seconds(graph, topology) -> np.ndarray:
  """(E, D, D) seconds to move each edge's tensor between each device pair (0 on the diagonal)."""
  lat, per_byte = topology.link_tables()
  return lat[None] + graph.out_bytes[graph.senders][:, None, None] * per_byte[None]


def time_unit_for(dur: np.ndarray, trans: np.ndarray, config) -> float:
  """Seconds per CP-SAT time step: config `time_unit`, else the smallest positive duration or
  transfer time divided by `resolution`, coarsened so the horizon stays below 1e9 steps."""
  if config.get("time_unit") is not None:
    unit = float(config["time_unit"])
    if not unit > 0:
      raise ValueError(f"cpsat: time_unit must be > 0 seconds, got {unit}")
    return unit
  times = np.concatenate([dur.ravel(), trans.ravel()])
  pos = times[times > 0]
  if pos.size == 0:
    return 1.0
  unit = float(pos.min()) / float(config["resolution"])
  horizon = float(dur.max(axis=1).sum() + (trans.reshape(trans.shape[0], -1).max(axis=1).sum()
                                           if trans.size else 0.0))
  return max(unit, horizon / 1e9)


def _units(seconds: np.ndarray, unit: float) -> np.ndarray:
  """Floor of seconds / unit (a tolerance of 1e-6 unit absorbs float noise like 0.3 / 0.1)."""
  return np.floor(np.asarray(seconds) / unit + _TOL).astype(np.int64)


def _fastest_device(graph, topology) -> int:
  return int(np.argmin(objectives.durations(graph, topology).sum(axis=0)))


def _fallback_joint(problem: Problem, reason: str, info: Dict) -> Proposal:
  """Every op on the fastest device in critical-path order."""
  g = problem.graph
  dev = _fastest_device(g, problem.topology)
  info = dict(info, reason=reason, fallback=f"critical path on device {dev}")
  return Proposal(np.full(g.num_nodes, dev, np.int64), placements.upward_rank(g), info=info)


def _byte_unit(total: float) -> float:
  """Bytes per integer memory step: 1 when totals fit comfortably, coarser otherwise."""
  return max(1.0, float(total) / 2.0**40)


def _build_joint(graph, topology, dur_u, trans_u, use_memory: bool):
  """The CP-SAT model; returns (model, start vars, device literals (N, D), makespan var)."""
  n, d = dur_u.shape
  root = graph.colocation_root()
  horizon = int(dur_u.max(axis=1).sum() + (trans_u.reshape(len(trans_u), -1).max(axis=1).sum()
                                           if len(trans_u) else 0))
  m = cp_model.CpModel()
  start = [m.NewIntVar(0, horizon, f"s{i}") for i in range(n)]
  end = [m.NewIntVar(0, horizon, f"e{i}") for i in range(n)]
  lits: List[List] = [None] * n
  for i in range(n):
    if root[i] != i:  # colocated: reuse the group leader's literals (rule 1)
      lits[i] = lits[root[i]]
      continue
    lits[i] = [m.NewBoolVar(f"x{i}_{k}") for k in range(d)]
    m.AddExactlyOne(lits[i])
  per_device = [[] for _ in range(d)]
  for i in range(n):
    m.Add(end[i] == start[i] + sum(int(dur_u[i, k]) * lits[i][k] for k in range(d)))
    for k in range(d):
      per_device[k].append(m.NewOptionalFixedSizeIntervalVar(
          start[i], int(dur_u[i, k]), lits[i][k], f"iv{i}_{k}"))
  for k in range(d):
    if len(per_device[k]) > 1:
      m.AddNoOverlap(per_device[k])
  for e, (u, v) in enumerate(zip(graph.senders.tolist(), graph.receivers.tolist())):
    m.Add(start[v] >= end[u])
    if root[u] == root[v]:
      continue
    for a in range(d):
      for b in range(d):
        if a != b and trans_u[e, a, b] > 0:  # both device literals true -> pay the transfer
          m.Add(start[v] >= end[u] + int(trans_u[e, a, b])).OnlyEnforceIf(
              [lits[u][a], lits[v][b]])
  if use_memory:
    _add_memory(m, graph, topology, lits)
  makespan = m.NewIntVar(0, horizon, "makespan")
  m.AddMaxEquality(makespan, end)
  m.Minimize(makespan)
  return m, start, lits, makespan


def _add_memory(m, graph, topology, lits) -> None:
  """Conservative (sufficient) memory: on each device of finite capacity, the params, outputs
  and scratch of its ops plus one received copy of every tensor it consumes from elsewhere, all
  counted as if live at once, must fit. Any placement meeting it is OOM-free in the simulator,
  but it can exclude feasible placements, so with it the model is no longer a relaxation."""
  n, d = graph.num_nodes, topology.num_devices
  own = graph.param_bytes + graph.out_bytes + graph.temp_bytes
  unit = _byte_unit(own.sum() + graph.out_bytes.sum() * d)
  own_u = np.ceil(own / unit).astype(np.int64)
  out_u = np.ceil(graph.out_bytes / unit).astype(np.int64)
  ptr, succ = graph.successor_csr()
  for k in range(d):
    cap = topology.mem_capacity[k]
    if not np.isfinite(cap):
      continue
    terms = [int(own_u[i]) * lits[i][k] for i in range(n) if own_u[i]]
    for i in range(n):
      cons = succ[ptr[i]:ptr[i + 1]].tolist()
      if not cons or not out_u[i]:
        continue
      copy = m.NewBoolVar(f"copy{i}_{k}")  # i's output received on k
      for v in cons:
        m.Add(copy >= lits[v][k] - lits[i][k])
      terms.append(int(out_u[i]) * copy)
    m.Add(sum(terms) <= int(np.floor(cap / unit)))


@register("cpsat", "joint",
          "CP-SAT joint placement + schedule of a relaxed simulator (small graphs); lower bound",
          time_limit_s=10.0, num_workers=2, max_ops=40, time_unit=None, resolution=10,
          memory=True)
def cpsat(problem: Problem, config) -> Proposal:
  """Optimal (within the time limit) placement and start times of the relaxed model.

  Config: time_limit_s, num_workers, max_ops (ValueError above it), time_unit (seconds per
  integer step; None: smallest positive duration or transfer time / `resolution`), memory
  (add the conservative memory constraint on devices of finite capacity; if that makes the
  model infeasible it is solved again without it, so the search can take up to twice
  time_limit_s). Priority = -start (earlier start first). The model always minimises the
  makespan; `problem.objective` only decides whether the model's action or the serial schedule
  on the fastest device (the hint and fallback) is returned, whichever simulates better.
  info: status, model_objective and model_bound in seconds (the bound is a lower bound on
  every action's makespan when lower_bound_valid; model_objective only when status is
  OPTIMAL), time_unit, memory_constraint, simulated_model_action, returned.
  """
  g, topo = problem.graph, problem.topology
  _check_common("cpsat", g.num_nodes, config)
  dur = objectives.durations(g, topo)
  trans = _transfer_seconds(g, topo)
  unit = time_unit_for(dur, trans, config)
  dur_u, trans_u = _units(dur, unit), _units(trans, unit)
  finite = bool(np.isfinite(topo.mem_capacity).any())
  use_memory = bool(config["memory"]) and finite
  info = {"time_unit": unit, "memory_constraint": "on" if use_memory else "off"}
  solver = _solver(config, problem.seed)
  while True:
    m, start, lits, makespan = _build_joint(g, topo, dur_u, trans_u, use_memory)
    _hint_single_device(m, g, topo, dur_u, start, lits)
    status = solver.Solve(m)
    if status == cp_model.INFEASIBLE and use_memory:
      use_memory = False
      info["memory_constraint"] = "dropped: the conservative memory model is infeasible"
      continue
    break
  info.update(status=solver.StatusName(status), wall_s=solver.WallTime(),
              lower_bound_valid=not use_memory)
  if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
    return _fallback_joint(problem, f"CP-SAT found no solution ({info['status']})", info)
  info.update(model_objective=solver.ObjectiveValue() * unit,
              model_bound=solver.BestObjectiveBound() * unit)
  place = np.array([int(np.argmax([solver.Value(x) for x in lits[i]]))
                    for i in range(g.num_nodes)], np.int64)
  starts = np.array([solver.Value(s) for s in start], np.float64) * unit
  return _best_simulated(problem, place, -starts, info)


def _best_simulated(problem: Problem, place: np.ndarray, prio: np.ndarray, info) -> Proposal:
  """The model's action, or the serial schedule on the fastest device when the simulator
  scores that better (the relaxation can misjudge queued transfers). Two single-action calls,
  which reuse the executable `solve` compiles for its own check."""
  g = problem.graph
  dev = _fastest_device(g, problem.topology)
  places = np.stack([place, np.full(g.num_nodes, dev, np.int64)])
  prios = np.stack([prio, placements.upward_rank(g)])
  value = [evaluate(g, problem.topology, places[k], prios[k], problem.objective)["objective"]
           for k in range(2)]
  info = dict(info, simulated_model_action=float(value[0]))
  if value[1] < value[0]:
    info["returned"] = f"serial on device {dev} (simulates better than the model's action)"
    return Proposal(places[1], prios[1], evaluations=2, info=info)
  info["returned"] = "model action"
  return Proposal(place, prio, evaluations=2, info=info)


def _hint_single_device(m, graph, topology, dur_u, start, lits) -> None:
  """Hints the serial schedule on the fastest device (topological order): always feasible
  for the relaxation, so the solver starts from a solution."""
  dev = _fastest_device(graph, topology)
  t = 0
  for i in graph.topological_order().tolist():
    m.AddHint(start[i], t)
    t += int(dur_u[i, dev])
  for i in range(graph.num_nodes):
    for k, x in enumerate(lits[i]):
      m.AddHint(x, int(k == dev))


# ------------------------------------------------------------------ minimum peak memory order
def _descendants(graph) -> List[int]:
  """Per op, the bitmask (Python int) of every op reachable from it."""
  ptr, succ = graph.successor_csr()
  desc = [0] * graph.num_nodes
  for u in reversed(graph.topological_order().tolist()):
    mask = 0
    for v in succ[ptr[u]:ptr[u + 1]].tolist():
      mask |= (1 << v) | desc[v]
    desc[u] = mask
  return desc


class _DeviceMemory:
  """The ops of one device and the memory model of `cpsat_memory` over their order.

  Position k is the k-th op run on the device. Op i's output is live at positions
  pos_i..max(pos of its local consumers); with no consumer at all, until the end (rule 7
  keeps it to the makespan); with consumers only on other devices, at pos_i only (transfer
  times are not modelled). Scratch is live at pos_i only; params of the device's ops always.
  With positive durations and one device this is exactly the simulator's peak.
  """

  def __init__(self, graph, ops: np.ndarray):
    self.ops = ops
    n = len(ops)
    local = {int(op): k for k, op in enumerate(ops.tolist())}
    desc = _descendants(graph)
    self.before = [[local[v] for v in ops.tolist() if (desc[int(u)] >> v) & 1]
                   for u in ops.tolist()]  # local ops that must come after local op i
    ptr, succ = graph.successor_csr()
    self.consumers, self.sink = [], []
    for u in ops.tolist():
      cons = succ[ptr[u]:ptr[u + 1]].tolist()
      self.consumers.append([local[v] for v in cons if v in local])
      self.sink.append(not cons)
    self.out = graph.out_bytes[ops]
    self.temp = graph.temp_bytes[ops]
    self.params = float(graph.param_bytes[ops].sum())
    self.n = n

  def peak(self, order: List[int]) -> float:
    """Model peak bytes of a local order (list of local indices)."""
    pos = np.empty(self.n, np.int64)
    pos[np.asarray(order, np.int64)] = np.arange(self.n)
    live = np.full(self.n + 1, 0.0)  # difference array over positions
    for i in range(self.n):
      last = (self.n - 1 if self.sink[i] else
              max([pos[v] for v in self.consumers[i]], default=pos[i]))
      live[pos[i]] += self.out[i]
      live[last + 1] -= self.out[i]
    usage = np.cumsum(live)[:self.n] + self.temp[np.asarray(order, np.int64)]
    return float(self.params + (usage.max() if self.n else 0.0))

  def list_order(self, priority: np.ndarray) -> List[int]:
    """The order a single device runs with this (global, (N,)) priority: highest available
    first, ties lowest id, an op available once its local ancestors have run."""
    indeg = [0] * self.n
    for i in range(self.n):
      for j in self.before[i]:
        indeg[j] += 1
    prio = priority[self.ops]
    order, done = [], [False] * self.n
    for _ in range(self.n):
      cands = [i for i in range(self.n) if not done[i] and indeg[i] == 0]
      i = max(cands, key=lambda c: (prio[c], -self.ops[c]))
      done[i] = True
      order.append(i)
      for j in self.before[i]:
        indeg[j] -= 1
    return order


def _heuristic_orders(problem: Problem, dm: _DeviceMemory) -> Dict[str, List[int]]:
  out = {}
  for name, fn in (("memory_greedy", simple.memory_greedy), ("dfs", simple.dfs),
                   ("critical_path", simple.critical_path)):
    out[name] = dm.list_order(np.asarray(fn(problem, {}).priority, np.float64))
  return out


def _memory_model(dm: _DeviceMemory, hint: List[int]):
  """Permutation model: at[i][k] = op i at position k; returns (model, at, peak var, unit)."""
  n = dm.n
  hint_pos = None
  if hint is not None:
    hint_pos = [0] * n
    for k, i in enumerate(hint):
      hint_pos[i] = k
  unit = _byte_unit(dm.params + dm.out.sum() + dm.temp.max(initial=0.0))
  exact = all(float(x).is_integer() for x in np.concatenate([dm.out, dm.temp])) and unit == 1
  out_u = (dm.out if exact else np.round(dm.out / unit)).astype(np.int64)
  temp_u = (dm.temp if exact else np.round(dm.temp / unit)).astype(np.int64)
  m = cp_model.CpModel()
  at = [[m.NewBoolVar(f"a{i}_{k}") for k in range(n)] for i in range(n)]
  for i in range(n):
    m.AddExactlyOne(at[i])
  for k in range(n):
    m.AddExactlyOne([at[i][k] for i in range(n)])
  pos = [m.NewIntVar(0, n - 1, f"p{i}") for i in range(n)]
  for i in range(n):
    m.Add(pos[i] == sum(k * at[i][k] for k in range(1, n)))
    for j in dm.before[i]:
      m.Add(pos[j] >= pos[i] + 1)
  m.AddAllDifferent(pos)
  le = [[None] * n for _ in range(n)]  # le[i][k] = (pos_i <= k), a linear expression
  for i in range(n):
    acc = 0
    for k in range(n):
      acc = acc + at[i][k]
      le[i][k] = acc
  live = [[None] * n for _ in range(n)]
  for i in range(n):
    if not out_u[i]:
      continue
    for k in range(n):
      if dm.sink[i]:
        live[i][k] = le[i][k]
      elif not dm.consumers[i]:
        live[i][k] = at[i][k]
      else:
        var = m.NewBoolVar(f"l{i}_{k}")
        m.Add(var >= at[i][k])
        if k:
          for v in dm.consumers[i]:
            m.Add(var >= le[i][k] - le[v][k - 1])
        live[i][k] = var
        if hint_pos is not None:
          last = max(hint_pos[v] for v in dm.consumers[i])
          m.AddHint(var, int(hint_pos[i] <= k <= last))
  # Redundant bounds: while op i runs, its output, scratch and local inputs are live; at the
  # last position every sink's output is.
  floor_ = max(int(out_u[i] + temp_u[i] + sum(out_u[j] for j in range(n) if i in dm.consumers[j]))
               for i in range(n))
  floor_ = max(floor_, int(sum(out_u[i] for i in range(n) if dm.sink[i])))
  peak = m.NewIntVar(floor_, max(floor_, int(out_u.sum() + temp_u.max(initial=0))), "peak")
  for k in range(n):
    terms = [int(out_u[i]) * live[i][k] for i in range(n) if out_u[i]]
    terms += [int(temp_u[i]) * at[i][k] for i in range(n) if temp_u[i]]
    m.Add(peak >= sum(terms))
  m.Minimize(peak)
  if hint_pos is not None:  # a complete hint, so the solver starts from a solution
    for i in range(n):
      m.AddHint(pos[i], hint_pos[i])
      for k in range(n):
        m.AddHint(at[i][k], int(hint_pos[i] == k))
    usage = [sum(int(out_u[i]) for i in range(n) if out_u[i] and _hinted_live(dm, hint_pos, i, k))
             + int(temp_u[hint[k]]) for k in range(n)]
    m.AddHint(peak, max(usage))
  return m, at, peak, unit


def _hinted_live(dm: "_DeviceMemory", pos: List[int], i: int, k: int) -> bool:
  """Whether op i's output is live at position k under positions `pos` (the model's rule)."""
  if dm.sink[i]:
    return pos[i] <= k
  last = max((pos[v] for v in dm.consumers[i]), default=pos[i])
  return pos[i] <= k <= last


@register("cpsat_memory", "schedule",
          "CP-SAT minimum-peak-memory order of the ops of one device (small graphs)",
          time_limit_s=15.0, num_workers=2, max_ops=60, device=None)
def cpsat_memory(problem: Problem, config) -> Proposal:
  """Minimum-peak-memory topological order of the ops placed on device `device` (default
  None: the placement's only device when it uses one, else device 0).

  With every op on that device (the case it is meant for) the simulator runs exactly this
  order and the model's peak is the simulator's peak (positive durations; zero-duration ops
  free earlier in the simulator). On a multi-device placement only device `device` is ordered,
  with precedence through other devices kept (reachability) but transfer times and received
  copies ignored; the other devices keep critical-path priorities. Priority = -position.
  The solver is hinted with the best of the memory_greedy, DFS and critical-path orders, and
  that order is returned whenever the solver finds nothing better (info["reason"]).
  info: status, model_objective and model_bound (bytes, params included), heuristic_peak.
  """
  g = problem.graph
  place = np.asarray(problem.placement, np.int64)[g.colocation_root()]  # rule 1
  used = np.unique(place)
  device = (int(used[0]) if len(used) == 1 else 0) if config["device"] is None else int(
      config["device"])
  if not 0 <= device < problem.topology.num_devices:
    raise ValueError(f"cpsat_memory: device {device} is not in [0, "
                     f"{problem.topology.num_devices})")
  ops = np.flatnonzero(place == device)
  _check_common("cpsat_memory", len(ops), config)
  prio = placements.upward_rank(g)
  if ops.size == 0:
    return Proposal(problem.placement, prio,
                    info={"status": "EMPTY", "reason": f"no op on device {device}"})
  dm = _DeviceMemory(g, ops)
  heur = _heuristic_orders(problem, dm)
  peaks = {k: dm.peak(v) for k, v in heur.items()}
  best_name = min(peaks, key=peaks.get)
  order = heur[best_name]
  info = {"device": device, "heuristic_peak": peaks[best_name], "heuristic": best_name}
  m, at, peak, unit = _memory_model(dm, order)
  solver = _solver(config, problem.seed)
  status = solver.Solve(m)
  info.update(status=solver.StatusName(status), wall_s=solver.WallTime(), byte_unit=unit)
  if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
    info.update(model_objective=dm.params + solver.ObjectiveValue() * unit,
                model_bound=dm.params + solver.BestObjectiveBound() * unit)
    found = [0] * dm.n
    for i in range(dm.n):
      found[[solver.Value(x) for x in at[i]].index(1)] = i
    if dm.peak(found) <= peaks[best_name]:
      order = found
    else:
      info["reason"] = f"solver order worse than {best_name}'s; kept {best_name}"
  else:
    info["reason"] = f"CP-SAT found no order ({info['status']}); used {best_name}"
  info["peak"] = dm.peak(order)
  prio = prio.copy()
  prio[ops[np.asarray(order, np.int64)]] = -np.arange(dm.n, dtype=np.float64)
  return Proposal(problem.placement, prio, info=info)
