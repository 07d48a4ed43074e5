"""Exact (constraint programming) baselines with OR-Tools CP-SAT, for small graphs.

* "cpsat" (joint): placement and schedule together, minimising the makespan of a RELAXATION of
  the simulator (docs/design.md section 4). Per op: a start, one optional interval per device
  with that device's duration (rule 2), exactly one device, colocation groups on one device
  (rule 1), NoOverlap per device; per edge u->v: start_v >= end_u, plus the transfer time
  latency + bytes / bandwidth when u and v sit on different devices (rule 3). On devices of finite
  memory it adds conditions that every out-of-memory-free action meets (rule 7: the params of
  a device's ops are live all the time; while op i runs, its output, its scratch and one copy
  of each of its inputs are live too). The model ignores the queueing of transfers on send
  channels (rule 3) and the list-scheduling rule (5), so the schedule the simulator produces
  for any placement and priority is feasible for it: its optimum, and any bound CP-SAT proves,
  is a LOWER BOUND on the makespan of every action that fits in memory (of every action, when
  no action fits: see `cpsat`), up to the float32 rounding of the jitted simulator. Its own
  action is re-simulated by `solve`, which may report a larger makespan (queued transfers,
  list scheduling) or run out of memory (the conditions are necessary, not sufficient).
* "cpsat_memory" (schedule, in `exact_memory.py`, which shares this module's solver setup,
  scaling and fallback reporting): the topological order of the ops of ONE device that
  minimises that device's peak memory (rule 7), as a permutation model. Exact for
  single-device placements; see `cpsat_memory` for what it does on multi-device ones.

Integer scaling (CP-SAT is integer only). Time: seconds are divided by `time_unit` and rounded
DOWN (with a 1e-6 unit tolerance against float noise like 0.3 / 0.1), so the scaled model stays
a relaxation and its objective and bound times `time_unit` are still lower bounds; the rounding
loses at most one `time_unit` per op and per transfer on a path, which is the documented
resolution (`info["time_unit"]`). `time_unit` defaults to the smallest positive duration or
transfer time over `resolution`, coarsened so that the horizon (every op on its slowest device
plus every transfer on its slowest link) is at most MAX_TIME_STEPS = 2**30 steps. Bytes: at
most MAX_BYTE_STEPS = 2**40 steps per constraint (1 byte per step unless a device's totals are
larger), rounded in the direction that keeps each memory condition necessary (floor) or
sufficient (ceil). Every variable's domain and every constraint's sum of |coefficient| x bound
then stays below 2**42, far inside the int64 range that CP-SAT's model validator requires.

Both methods refuse graphs above `max_ops` with a ValueError. When the solver finds nothing
(time limit, or a model CP-SAT rejects, which is a bug), they say so in `info["reason"]` (so in
the Solution's reason), name the fallback they return, and keep the solver status in
`info["status"]`.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Dict, List, Tuple

import numpy as np

from go_jax import objectives
from go_jax.methods import Problem, Proposal, evaluate, register
from simulator.graph import upward_rank

_TOL = 1e-6  # tolerance (in units) of the floor rounding of times
MAX_TIME_STEPS = 2**30  # largest horizon, in time units, of the joint model
MAX_BYTE_STEPS = 2**40  # largest left-hand side, in byte units, of a memory constraint

# CP-SAT is imported where a model is built or solved (`cp_model_module`), not with this module:
# importing it takes about half a second (it imports pandas), and every process that uses the
# method registry imports this module. Whether it is installed is still checked here, so that
# without ortools only the CP-SAT methods are missing (go_jax.methods.OPTIONAL_DEPENDENCIES).
if importlib.util.find_spec("ortools.sat.python.cp_model") is None:
  raise ModuleNotFoundError("No module named 'ortools.sat.python.cp_model'", name="ortools")
if TYPE_CHECKING:
  from ortools.sat.python import cp_model  # pylint: disable=g-import-not-at-top


def cp_model_module():
  """ortools.sat.python.cp_model, imported on first use."""
  from ortools.sat.python import cp_model  # pylint: disable=g-import-not-at-top,redefined-outer-name
  return cp_model


def check_common(name: str, n: int, config) -> None:
  """ValueError for more than `max_ops` ops, a time limit (time_limit_s, deterministic_time)
  that is neither None nor > 0 (NaN included: CP-SAT rejects such a model as invalid, which
  would read as a bug of the model), neither limit given, and fewer than one worker."""
  if n > int(config["max_ops"]):
    raise ValueError(f"{name}: {n} ops exceed max_ops={config['max_ops']}; the exact model is "
                     f"meant for small graphs (raise max_ops to try anyway)")
  for key in ("time_limit_s", "deterministic_time"):
    if config[key] is not None and not float(config[key]) > 0:
      raise ValueError(f"{name}: {key} must be > 0 or None, got {config[key]}")
  if config["time_limit_s"] is None and config["deterministic_time"] is None:
    raise ValueError(f"{name}: time_limit_s and deterministic_time are both None; give at "
                     f"least one limit")
  if int(config["num_workers"]) < 1:
    raise ValueError(f"{name}: num_workers must be >= 1, got {config['num_workers']}")


def make_solver(config, seed: int) -> cp_model.CpSolver:
  """A CpSolver whose answer depends only on the model, the seed and the config, unless the
  wall-clock limit `time_limit_s` stops it first (see `cpsat`, "Reproducibility").

  With more than one worker it runs CP-SAT's interleaved search (`interleave_search`): the
  workers' tasks run in batches and share what they found only between batches, so the result
  does not depend on which thread finishes first (CP-SAT's default parallel portfolio lets
  them race: the same seed gave different optima from run to run). `deterministic_time` is
  CP-SAT's `max_deterministic_time`, a budget of counted work (about one second of search on
  the machine CP-SAT's counters were fitted on) that ends the search at the same point on
  every run, whatever the machine's speed or load."""
  solver = cp_model_module().CpSolver()
  if config["time_limit_s"] is not None:
    solver.parameters.max_time_in_seconds = float(config["time_limit_s"])
  if config["deterministic_time"] is not None:
    solver.parameters.max_deterministic_time = float(config["deterministic_time"])
  solver.parameters.num_workers = int(config["num_workers"])
  solver.parameters.interleave_search = int(config["num_workers"]) > 1
  solver.parameters.random_seed = int(seed) % (2**31)
  return solver


def no_solution(name: str, solver: cp_model.CpSolver, status, model: cp_model.CpModel,
                config) -> str:
  """Why CP-SAT returned no solution, in words (with the validator's message if invalid)."""
  cp_model = cp_model_module()  # pylint: disable=redefined-outer-name
  status_name = solver.StatusName(status)
  if status == cp_model.MODEL_INVALID:
    return (f"{name}: CP-SAT rejected the model (MODEL_INVALID: {model.Validate()!r}; a bug, "
            f"please report it)")
  if status == cp_model.UNKNOWN:
    limits = " / ".join(f"{k}={config[k]}" for k in ("time_limit_s", "deterministic_time")
                        if config[k] is not None)
    return f"{name}: CP-SAT found no solution within {limits} (UNKNOWN)"
  return f"{name}: CP-SAT found no solution ({status_name})"


# ------------------------------------------------------------------ joint placement + schedule
def _transfer_seconds(graph, topology) -> np.ndarray:
  """(E, D, D) seconds to move each edge's tensor between each device pair (0 on the diagonal)."""
  lat, per_byte = topology.link_tables()
  with np.errstate(over="ignore"):  # an infinite time is refused by `time_unit_for`
    return lat[None] + graph.out_bytes[graph.senders][:, None, None] * per_byte[None]


def _horizon_seconds(dur: np.ndarray, trans: np.ndarray) -> float:
  """Every op on its slowest device plus every transfer on its slowest link, in seconds."""
  links = trans.reshape(len(trans), -1).max(axis=1).sum() if len(trans) else 0.0
  return float(dur.max(axis=1).sum() + links)


def time_unit_for(dur: np.ndarray, trans: np.ndarray, config) -> float:
  """Seconds per CP-SAT time step.

  Config `time_unit` when given (ValueError when the horizon would exceed MAX_TIME_STEPS steps
  of it); else the smallest positive duration or transfer time divided by `resolution`,
  coarsened to horizon / MAX_TIME_STEPS when that is larger (1.0 when every time is 0).
  """
  times = np.concatenate([dur.ravel(), trans.ravel()])
  if not np.all(np.isfinite(times)):
    raise ValueError("cpsat: a duration or transfer time is not finite (cost / speed or "
                     "out_bytes / bandwidth overflows float64); rescale the graph's units")
  horizon = _horizon_seconds(dur, trans)
  if config.get("time_unit") is not None:
    unit = float(config["time_unit"])
    if not (np.isfinite(unit) and unit > 0):
      raise ValueError(f"cpsat: time_unit must be a finite number > 0 of seconds, got {unit}")
    if horizon / unit > MAX_TIME_STEPS:
      raise ValueError(f"cpsat: time_unit={unit} s makes the horizon {horizon:.6g} s "
                       f"{horizon / unit:.3g} steps, above MAX_TIME_STEPS={MAX_TIME_STEPS}; use "
                       f"a time_unit of at least {horizon / MAX_TIME_STEPS:.6g} s")
    return unit
  resolution = float(config["resolution"])
  if not (np.isfinite(resolution) and resolution > 0):
    raise ValueError(f"cpsat: resolution must be a finite number > 0, got {resolution}")
  pos = times[times > 0]
  if pos.size == 0:
    return 1.0
  return max(float(pos.min()) / resolution, horizon / MAX_TIME_STEPS)


def _units(seconds: np.ndarray, unit: float) -> np.ndarray:
  """Floor of seconds / unit (a tolerance of 1e-6 unit absorbs float noise like 0.3 / 0.1)."""
  return np.floor(np.asarray(seconds) / unit + _TOL).astype(np.int64)


def _fastest_device(graph, topology) -> int:
  return int(np.argmin(objectives.durations(graph, topology).sum(axis=0)))


def _serial(graph, topology) -> Tuple[np.ndarray, np.ndarray, str]:
  """Every op on the fastest device in critical-path order: (placement, priority, name)."""
  dev = _fastest_device(graph, topology)
  return (np.full(graph.num_nodes, dev, np.int64), upward_rank(graph),
          f"every op on device {dev} (the fastest) in critical-path order")


def byte_unit(total: float) -> float:
  """Bytes per integer memory step: 1 when `total` fits in MAX_BYTE_STEPS steps, else coarser."""
  return max(1.0, float(total) / MAX_BYTE_STEPS)


class _Joint:
  """The joint CP-SAT model: start and end per op, device literals per colocation group."""

  def __init__(self, graph, dur_u: np.ndarray, trans_u: np.ndarray, horizon_s: float):
    n, d = dur_u.shape
    self.graph, self.n, self.d, self.horizon_s = graph, n, d, horizon_s
    self.root = graph.colocation_root()
    self.horizon = int(dur_u.max(axis=1).sum() + (
        trans_u.reshape(len(trans_u), -1).max(axis=1).sum() if len(trans_u) else 0))
    m = self.model = cp_model_module().CpModel()
    self.start = [m.NewIntVar(0, self.horizon, f"s{i}") for i in range(n)]
    self.end = [m.NewIntVar(0, self.horizon, f"e{i}") for i in range(n)]
    self.lits: List[List] = [None] * n
    for i in range(n):
      if self.root[i] != i:  # colocated: reuse the group leader's literals (rule 1)
        self.lits[i] = self.lits[self.root[i]]
        continue
      self.lits[i] = [m.NewBoolVar(f"x{i}_{k}") for k in range(d)]
      m.AddExactlyOne(self.lits[i])
    per_device = [[] for _ in range(d)]
    for i in range(n):
      m.Add(self.end[i] == self.start[i] + sum(int(dur_u[i, k]) * self.lits[i][k]
                                               for k in range(d)))
      for k in range(d):
        per_device[k].append(m.NewOptionalFixedSizeIntervalVar(
            self.start[i], int(dur_u[i, k]), self.lits[i][k], f"iv{i}_{k}"))
    for k in range(d):
      if len(per_device[k]) > 1:
        m.AddNoOverlap(per_device[k])
    for e, (u, v) in enumerate(zip(graph.senders.tolist(), graph.receivers.tolist())):
      m.Add(self.start[v] >= self.end[u])
      if self.root[u] == self.root[v]:
        continue
      for a in range(d):
        for b in range(d):
          if a != b and trans_u[e, a, b] > 0:  # both device literals true -> pay the transfer
            m.Add(self.start[v] >= self.end[u] + int(trans_u[e, a, b])).OnlyEnforceIf(
                [self.lits[u][a], self.lits[v][b]])
    self.makespan = m.NewIntVar(0, self.horizon, "makespan")
    m.AddMaxEquality(self.makespan, self.end)
    m.Minimize(self.makespan)

  def add_necessary_memory(self, topology, dur: np.ndarray) -> int:
    """Conditions every OOM-free action meets (rule 7), on devices of finite capacity.

    On device k: the params of its ops (live all the time); and for each op i that takes
    visibly long on k, those params plus i's output and scratch and one copy (local output or
    received copy) of each input of i, which are all live while i runs. "Visibly long" means
    at least `objectives.VISIBLE_DURATION` (1e-6) of the horizon: the jitted simulator adds
    times in float32, where a shorter op can start and finish at the same instant and so hold
    no memory. Bytes round down and capacities up, so the scaled conditions stay necessary.
    Returns the number of constraints added (a device whose capacity exceeds every possible
    left-hand side gets none).
    """
    g = self.graph
    pptr, pred = g.predecessor_csr()
    during = np.array([g.out_bytes[i] + g.temp_bytes[i] + g.out_bytes[pred[pptr[i]:pptr[i + 1]]]
                       .sum() for i in range(self.n)])
    most = float(g.param_bytes.sum() + during.max(initial=0.0))
    unit = byte_unit(most)
    param_u = np.floor(g.param_bytes / unit).astype(np.int64)
    during_u = np.floor(during / unit).astype(np.int64)
    long_ = dur >= objectives.VISIBLE_DURATION * self.horizon_s
    added = 0
    for k in range(self.d):
      cap = float(topology.mem_capacity[k])
      if most <= cap:
        continue  # cannot bind (this also skips infinite capacities)
      cap_u = int(np.ceil(cap / unit))
      params = sum(int(param_u[i]) * self.lits[i][k] for i in range(self.n) if param_u[i])
      self.model.Add(params <= cap_u)
      added += 1
      for i in range(self.n):
        if during_u[i] and long_[i, k]:
          self.model.Add(params + int(during_u[i]) * self.lits[i][k] <= cap_u)
          added += 1
    return added

  def add_sufficient_memory(self, topology) -> int:
    """Conservative memory: on each device of finite capacity, the params, outputs and scratch
    of its ops plus one received copy of every tensor it consumes from elsewhere, all counted
    as if live at once, must fit. Any placement meeting it is OOM-free in the simulator, but it
    can exclude feasible placements (the model is then no longer a relaxation). Bytes round up,
    capacities down. Returns the number of constraints added."""
    g, n = self.graph, self.n
    own = g.param_bytes + g.out_bytes + g.temp_bytes
    total = own.sum() + g.out_bytes.sum()
    unit = byte_unit(total)
    own_u = np.ceil(own / unit).astype(np.int64)
    out_u = np.ceil(g.out_bytes / unit).astype(np.int64)
    ptr, succ = g.successor_csr()
    added = 0
    for k in range(self.d):
      cap = float(topology.mem_capacity[k])
      if total <= cap:
        continue  # cannot bind
      terms = [int(own_u[i]) * self.lits[i][k] for i in range(n) if own_u[i]]
      for i in range(n):
        cons = succ[ptr[i]:ptr[i + 1]].tolist()
        if not cons or not out_u[i]:
          continue
        copy = self.model.NewBoolVar(f"copy{i}_{k}")  # i's output received on k
        for v in cons:
          self.model.Add(copy >= self.lits[v][k] - self.lits[i][k])
        terms.append(int(out_u[i]) * copy)
      self.model.Add(sum(terms) <= int(np.floor(cap / unit)))
      added += 1
    return added

  def hint_serial(self, device: int, dur_u: np.ndarray) -> None:
    """Hints the serial schedule on `device` in topological order (feasible for the time
    model). Each variable is hinted once: colocated ops share their leader's literals, and
    CP-SAT rejects a hint naming a variable twice (MODEL_INVALID)."""
    t = 0
    for i in self.graph.topological_order().tolist():
      self.model.AddHint(self.start[i], t)
      t += int(dur_u[i, device])
    for i in np.flatnonzero(self.root == np.arange(self.n)).tolist():
      for k, x in enumerate(self.lits[i]):
        self.model.AddHint(x, int(k == device))

  def action(self, solver: cp_model.CpSolver, unit: float) -> Tuple[np.ndarray, np.ndarray]:
    """(placement, priority = -start in seconds) of the solver's solution."""
    place = np.array([int(np.argmax([solver.Value(x) for x in self.lits[i]]))
                      for i in range(self.n)], np.int64)
    starts = np.array([solver.Value(s) for s in self.start], np.float64) * unit
    return place, -starts


@register("cpsat", "joint",
          "CP-SAT joint placement + schedule of a relaxed simulator (small graphs); lower bound",
          time_limit_s=10.0, deterministic_time=None, num_workers=1, max_ops=40,
          time_unit=None, resolution=10, memory=True)
def cpsat(problem: Problem, config) -> Proposal:
  """Optimal (within the time limit) placement and start times of the relaxed model.

  Config: time_limit_s (wall-clock seconds, None: none), deterministic_time (CP-SAT's
  deterministic-time budget, None: none; at least one of the two), num_workers (default 1;
  more run CP-SAT's interleaved parallel search, `make_solver`), max_ops (ValueError above
  it), time_unit (seconds per
  integer step; None: smallest positive duration or transfer time / `resolution`, coarsened to
  keep the horizon within MAX_TIME_STEPS), memory (when the relaxation's action runs out of
  memory in the simulator, solve a second model with a conservative memory constraint, which
  only admits OOM-free placements, and keep its action if it simulates better; so the search
  can take up to twice time_limit_s).

  Reproducibility: the same graph, topology, seed and config (num_workers included: another
  count batches the interleaved search differently) give the same answer on every run of one
  install, when the search ends by itself (a proven optimum or infeasibility) or at
  `deterministic_time`; OR-Tools promises nothing across machines or versions. A wall-clock
  `time_limit_s` that is reached first can never be reproducible: where the search stands after
  that many seconds depends on the machine's speed and load (on 2 shared cores, one worker and
  1 s gave three different makespans in three runs). For a reproducible table give
  deterministic_time and time_limit_s=None (experiments/configs/regal_table.py does). The
  interleaved search costs time: 2 workers proved one 40-op optimum in about 3 s, against
  0.2 s racing.

  On devices of finite memory the relaxation holds conditions every OOM-free action meets;
  when CP-SAT proves them infeasible (no action fits), it is solved again without them and
  the bound then covers every action. Priority = -start (earlier start first). The model
  always minimises the makespan; `problem.objective` decides which candidate action is
  returned: the relaxation's, the conservative model's, or the serial schedule on the fastest
  device (the hint), whichever simulates best (info["returned"]; the reason says when it is not
  the relaxation's). Without any solution the serial schedule is returned, and the reason says
  why and names it.

  info: status (of the relaxation), time_unit (the resolution, seconds), model_objective (the
  relaxation's makespan in seconds for its solution; a lower bound on every OOM-free action's
  makespan when status is OPTIMAL), model_bound (CP-SAT's proven lower bound, seconds; always a
  lower bound on every OOM-free action's makespan), memory_constraint, conservative_status
  (when that model was solved), simulated_model_action and simulated_model_makespan (the
  relaxation's action as the simulator scores it), returned, wall_s.
  """
  cp_model = cp_model_module()  # pylint: disable=redefined-outer-name
  g, topo = problem.graph, problem.topology
  check_common("cpsat", g.num_nodes, config)
  dur = objectives.durations(g, topo)
  trans = _transfer_seconds(g, topo)
  unit = time_unit_for(dur, trans, config)
  dur_u, trans_u = _units(dur, unit), _units(trans, unit)
  horizon_s = _horizon_seconds(dur, trans)
  serial_place, serial_prio, serial_name = _serial(g, topo)
  info: Dict = {"time_unit": unit}
  solver = make_solver(config, problem.seed)
  use_memory = True
  while True:
    joint = _Joint(g, dur_u, trans_u, horizon_s)
    added = joint.add_necessary_memory(topo, dur) if use_memory else 0
    info.setdefault("memory_constraint", "necessary conditions" if added else "off")
    joint.hint_serial(int(serial_place[0]), dur_u)
    status = solver.Solve(joint.model)
    if status == cp_model.INFEASIBLE and added:
      use_memory = False
      info["memory_constraint"] = ("dropped: no action fits in memory (CP-SAT proved the "
                                   "necessary conditions infeasible)")
      continue
    break
  info.update(status=solver.StatusName(status), wall_s=solver.WallTime())
  if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
    reason = no_solution("cpsat", solver, status, joint.model, config)
    info.update(reason=f"{reason}; returned the fallback: {serial_name}", returned=serial_name)
    return Proposal(serial_place, serial_prio, info=info)
  info.update(model_objective=solver.ObjectiveValue() * unit,
              model_bound=solver.BestObjectiveBound() * unit)
  place, prio = joint.action(solver, unit)
  model_eval = evaluate(g, topo, place, prio, problem.objective)
  info.update(simulated_model_action=model_eval["objective"],
              simulated_model_makespan=model_eval["makespan"])
  candidates = [("model action", place, prio, model_eval["objective"]),
                (serial_name, serial_place, serial_prio, None)]
  evaluations = 2
  if bool(config["memory"]) and not model_eval["feasible"] and use_memory:
    safe = _Joint(g, dur_u, trans_u, horizon_s)
    safe.add_sufficient_memory(topo)
    safe.hint_serial(int(serial_place[0]), dur_u)
    safe_solver = make_solver(config, problem.seed)
    safe_status = safe_solver.Solve(safe.model)
    info["conservative_status"] = safe_solver.StatusName(safe_status)
    wall = info["wall_s"] + safe_solver.WallTime()
    info["wall_s"] = wall
    if safe_status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
      safe_place, safe_prio = safe.action(safe_solver, unit)
      candidates.insert(1, ("conservative-memory model action", safe_place, safe_prio, None))
      evaluations += 1
  return _best_simulated(problem, candidates, evaluations, info)


def _best_simulated(problem: Problem, candidates, evaluations: int, info) -> Proposal:
  """The candidate action (label, placement, priority, objective or None) that simulates best;
  the first wins ties."""
  best, best_value = None, np.inf
  for label, place, prio, value in candidates:
    if value is None:
      value = evaluate(problem.graph, problem.topology, place, prio,
                       problem.objective)["objective"]
    if value < best_value:
      best, best_value = (label, place, prio), value
  label, place, prio = best
  info = dict(info, returned=label)
  if label != "model action":
    info["reason"] = (f"returned {label}: it simulates better ({problem.objective} "
                      f"{best_value:.6g}) than the relaxation's action "
                      f"({info['simulated_model_action']:.6g})")
  return Proposal(place, prio, evaluations=evaluations, info=info)
