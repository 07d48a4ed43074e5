"""CP-SAT's minimum-peak-memory order of one device's ops: the "cpsat_memory" schedule method.

A permutation model over the ops placed on one device (position k is the k-th op that device
runs) that minimises its peak memory under docs/design.md section 4, rule 7; exact for
single-device placements, see `cpsat_memory` for multi-device ones. The solver setup, the
byte scaling and the fallback reporting are `exact.py`'s (its docstring has the integer
scaling), split from it so that each module holds one model.
"""

from __future__ import annotations

from typing import Dict, List

import numpy as np

from go_jax.methods import Problem, Proposal, integral, register, simple
# exact.py checks that ortools is installed (ModuleNotFoundError, so that only the CP-SAT
# methods are missing without it) and imports CP-SAT on first use.
from go_jax.methods.exact import byte_unit, check_common, cp_model_module, make_solver, \
    no_solution
from simulator.graph import upward_rank


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
  unit = byte_unit(dm.params + dm.out.sum() + dm.temp.max(initial=0.0))
  exact = all(float(x).is_integer() for x in np.concatenate([dm.out, dm.temp])) and unit == 1
  out_u = (dm.out if exact else np.round(dm.out / unit)).astype(np.int64)
  temp_u = (dm.temp if exact else np.round(dm.temp / unit)).astype(np.int64)
  m = cp_model_module().CpModel()
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
          time_limit_s=15.0, deterministic_time=None, num_workers=1, max_ops=60, device=None)
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
  time_limit_s, deterministic_time, num_workers: as `cpsat`, which says when the answer is
  reproducible (not where the wall-clock time_limit_s stops the search).
  """
  g = problem.graph
  place = np.asarray(problem.placement, np.int64)[g.colocation_root()]  # rule 1
  used = np.unique(place)
  if config["device"] is not None and not integral(config["device"]):  # int() would truncate
    raise ValueError(f"cpsat_memory: device must be an integer device id or None, got "
                     f"{config['device']!r}")
  device = (int(used[0]) if len(used) == 1 else 0) if config["device"] is None else int(
      config["device"])
  if not 0 <= device < problem.topology.num_devices:
    raise ValueError(f"cpsat_memory: device {device} is not in [0, "
                     f"{problem.topology.num_devices})")
  ops = np.flatnonzero(place == device)
  check_common("cpsat_memory", len(ops), config)
  prio = upward_rank(g)
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
  solver = make_solver(config, problem.seed)
  status = solver.Solve(m)
  info.update(status=solver.StatusName(status), wall_s=solver.WallTime(), byte_unit=unit)
  cp_model = cp_model_module()
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
    info["reason"] = (f"{no_solution('cpsat_memory', solver, status, m, config)}; returned the "
                      f"fallback: the {best_name} order")
  info["peak"] = dm.peak(order)
  prio = prio.copy()
  prio[ops[np.asarray(order, np.int64)]] = -np.arange(dm.n, dtype=np.float64)
  return Proposal(problem.placement, prio, info=info)
