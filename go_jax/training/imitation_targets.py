"""The targets of the imitation warm start (go_jax/training/imitation.py), built on the host.

For every training instance the teachers solve it; the target is the best solution by the
objective (an infeasible one ranks last) or, with `prefer`, the preferred teacher's wherever it
is memory-feasible. Its devices are relabelled canonically where the topology allows it and its
priority is cut into the policy's levels (imitation.py's module docstring, steps 1-3).
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Sequence, Tuple

import flax
import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from go_jax import methods
from go_jax.training import hints, rollout
from go_jax.training.problems import Problems, TrainData
from simulator.topology import Topology


def canonical_devices(placement: np.ndarray, order: np.ndarray,
                      topology: Topology) -> np.ndarray:
  """`placement` with devices renamed in the order of first use along `order`, if that
  renaming maps the topology onto itself (else `placement` unchanged)."""
  d = topology.num_devices
  first = []
  for dev in np.asarray(placement)[order].tolist():
    if dev not in first:
      first.append(dev)
      if len(first) == d:
        break
  old = np.asarray(first + [x for x in range(d) if x not in first], np.int64)  # new -> old
  same = (np.array_equal(np.asarray(topology.speed)[old], np.asarray(topology.speed)) and
          np.array_equal(np.asarray(topology.overhead)[old], np.asarray(topology.overhead)) and
          np.array_equal(np.asarray(topology.mem_capacity)[old],
                         np.asarray(topology.mem_capacity)) and
          np.array_equal(np.asarray(topology.bandwidth)[np.ix_(old, old)],
                         np.asarray(topology.bandwidth)) and
          np.array_equal(np.asarray(topology.latency)[np.ix_(old, old)],
                         np.asarray(topology.latency)))
  if not same:
    return np.asarray(placement, np.int64)
  new = np.empty(d, np.int64)
  new[old] = np.arange(d)
  return new[np.asarray(placement, np.int64)]


def priority_levels(priority: np.ndarray, levels: int) -> np.ndarray:
  """(N,) level in [0, levels) of each op: its priority's rank (ties share the lowest rank)
  cut into `levels` equal parts, so the highest priorities get the highest level."""
  priority = np.asarray(priority, np.float64)
  n = priority.size
  if n == 0:
    return np.zeros(0, np.int64)
  order = np.argsort(priority, kind="stable")
  rank = np.empty(n, np.int64)
  rank[order] = np.arange(n)
  # equal priorities: the lowest rank of their group, so ties never split across levels
  _, inv = np.unique(priority, return_inverse=True)
  low = np.full(inv.max() + 1, n, np.int64)
  np.minimum.at(low, inv, rank)
  return np.minimum(low[inv] * levels // n, levels - 1)


@flax.struct.dataclass
class Targets:
  """What the policy clones, stacked like TrainData (leading instance axis I)."""
  placement: jnp.ndarray  # (I, Np) int32 target device per op (0 on padding)
  level: jnp.ndarray  # (I, Np) int32 target priority level per op (0 on padding)
  weight: jnp.ndarray  # (I,) float32 1 where the target is memory-feasible, else 0 (the policy
  #                      is not taught an out-of-memory solution)


def choose_target(solutions: Sequence[methods.Solution], prefer: str = "") -> methods.Solution:
  """The target among one instance's teacher solutions: the preferred teacher's where it is
  memory-feasible, else the best by the objective (an infeasible solution ranks last)."""
  if prefer:
    for s in solutions:
      if s.method == prefer and s.feasible:
        return s
  return min(solutions, key=lambda s: s.objective)


def build_targets(problems: Problems, data: TrainData, teachers: Sequence[str], levels: int,
                  task: rollout.Task, progress: bool = True, prefer: str = ""
                  ) -> Tuple[Targets, List[Dict[str, Any]]]:
  """Targets of every instance and a report row per instance (see the module docstring);
  `prefer`: see `choose_target`."""
  from go_jax.methods import learned  # pylint: disable=g-import-not-at-top  (registry cycle)
  for m in teachers:
    spec = methods.get(m)
    if m in learned.METHOD_NAMES:
      raise ValueError(f"imitation.teachers: '{m}' is a learned policy; teachers are baselines")
    if spec.kind == "schedule":
      raise ValueError(f"imitation.teachers: '{m}' only schedules; name placement or joint "
                       "methods (e.g. 'heft', 'metis')")
  np_ = problems.num_nodes_padded
  tiebreak = np.asarray(jax.device_get(data.tiebreak))
  fixed_prio = np.asarray(jax.device_get(data.fixed_priority))
  places, lvls, weights, rows = [], [], [], []
  t0 = time.perf_counter()
  for i, (name, g, t) in enumerate(zip(problems.names, problems.graphs, problems.topologies)):
    solved: Dict[str, methods.Solution] = {}
    sols = [hints.solve_once(m, g, t, problems.objective, solved) for m in teachers]
    best = choose_target(sols, prefer)
    place = canonical_devices(best.placement, g.topological_order(), t)
    level = priority_levels(best.priority, levels)
    n = g.num_nodes
    if task.learns_priority:
      prio = level + tiebreak[i, :n]
    else:
      prio = fixed_prio[i, :n]
    if task.learns_placement:
      target = methods.evaluate(g, t, place, prio, problems.objective)
    else:
      target = methods.evaluate(g, t, np.asarray(jax.device_get(data.fixed_placement[i]))[:n],
                                prio, problems.objective)
    rows.append({"instance": name, "teacher": best.method, "teacher_objective": best.objective,
                 "teacher_feasible": best.feasible, "target_objective": target["objective"],
                 "target_feasible": target["feasible"],
                 "reference": float(problems.reference[i]),
                 "target_ratio": target["objective"] / float(problems.reference[i])})
    p = np.zeros(np_, np.int32)
    p[:n] = place
    lv = np.zeros(np_, np.int32)
    lv[:n] = level
    places.append(p)
    lvls.append(lv)
    weights.append(1.0 if target["feasible"] else 0.0)
    if progress and (i + 1 == len(problems.names) or (i + 1) % 10 == 0):
      logging.info("imitation targets: %d/%d instances (%.1f s)", i + 1, len(problems.names),
                   time.perf_counter() - t0)
  if not any(weights):
    raise ValueError("imitation: no teacher found a memory-feasible solution on any training "
                     f"instance (teachers {list(teachers)}); loosen the memory or add teachers")
  return Targets(placement=jnp.asarray(np.stack(places)), level=jnp.asarray(np.stack(lvls)),
                 weight=jnp.asarray(weights, jnp.float32)), rows
