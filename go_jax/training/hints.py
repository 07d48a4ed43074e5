"""Hints: a fast baseline's solution that a GO policy with `use_hint` starts from.

  sol = hint_solution("best_list", graph, topology, objective="makespan")
  sol.placement  # (N,) what GraphFeatures.hint carries
  tiebreak = priority_tiebreak(sol.priority)  # (N,) in [0, 0.5]: keeps the baseline's order

A hint is a registered placement method of go_jax.methods, or a named group of them (`GROUPS`)
of which the best by the objective is taken (infeasible ranks last, as everywhere). The list
schedulers take milliseconds to a tenth of a second on graphs of a thousand ops, so the hint is
part of the policy's input, computed again for every instance (and counted in the search time
that go-jax-place reports).
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from go_jax import methods

# Group name -> the methods whose best solution is the hint.
GROUPS: Dict[str, Tuple[str, ...]] = {
    "best_list": ("heft", "m_etf", "m_sct"),
    "best_fast": ("heft", "m_etf", "m_sct", "metis", "expert"),
}


def available() -> Tuple[str, ...]:
  """Hint names: the groups and every placement method."""
  place = tuple(k for k, spec in methods.METHODS.items() if spec.kind != "schedule")
  return tuple(sorted(GROUPS)) + tuple(sorted(place))


def hint_solution(name: str, graph, topology, objective: str = "makespan") -> methods.Solution:
  """The best solution of the hint's methods on (graph, topology) (ValueError if unknown)."""
  methods.available()  # loads the built-in methods
  names = GROUPS.get(name, (name,))
  for m in names:
    if m not in methods.METHODS or methods.METHODS[m].kind == "schedule":
      raise ValueError(f"unknown hint {name!r}; available: {list(available())}")
  sols = [methods.solve(m, graph, topology, objective=objective) for m in names]
  return min(sols, key=lambda s: s.objective)


def priority_tiebreak(priority: np.ndarray) -> np.ndarray:
  """(N,) 0.5 x the dense rank of each priority scaled to [0, 1]: an order-preserving
  tie-break (equal priorities stay equal) that never crosses a priority level."""
  priority = np.asarray(priority, np.float64)
  if priority.size == 0:
    return priority
  _, rank = np.unique(priority, return_inverse=True)
  top = rank.max()
  return 0.5 * rank / top if top > 0 else np.zeros_like(priority)
