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

from typing import Dict, Optional, Tuple

import numpy as np

from go_jax import methods

# Group name -> the methods whose best solution is the hint.
GROUPS: Dict[str, Tuple[str, ...]] = {
    "best_list": ("heft", "m_etf", "m_sct"),
    "best_fast": ("heft", "m_etf", "m_sct", "metis", "expert"),
}


def _hint_methods() -> Tuple[str, ...]:
  """Placement and joint methods that can serve as a hint: every one but the learned policies
  (a hint is a baseline's answer the policy starts from, not another policy's)."""
  from go_jax.methods import learned  # pylint: disable=g-import-not-at-top
  return tuple(m for m in methods.available(kinds=("placement", "joint"))
               if m not in learned.METHOD_NAMES)


def available() -> Tuple[str, ...]:
  """Hint names: the groups and every placement or joint method but the learned ones (loads
  the registry)."""
  return tuple(sorted(GROUPS)) + tuple(sorted(_hint_methods()))


def hint_methods(name: str) -> Tuple[str, ...]:
  """The methods whose best solution is hint `name` (ValueError if it is not a hint)."""
  names = GROUPS.get(name, (name,))
  place = _hint_methods()
  if any(m not in place for m in names):
    raise ValueError(f"unknown hint {name!r}; available: {list(available())}")
  return names


def hint_solution(name: str, graph, topology, objective: str = "makespan", *,
                  solved: Optional[Dict[str, methods.Solution]] = None) -> methods.Solution:
  """The best solution of the hint's methods on (graph, topology) (ValueError if unknown).

  `solved` (method name -> its `methods.solve(m, graph, topology, objective=objective)`
  Solution on this very instance) is read and filled in, so that a caller needing one of these
  solutions too (the training set's reference, e.g. HEFT) solves each method once.
  """
  solved = {} if solved is None else solved
  sols = [solve_once(m, graph, topology, objective, solved) for m in hint_methods(name)]
  return min(sols, key=lambda s: s.objective)


def solve_once(method: str, graph, topology, objective: str,
               solved: Dict[str, methods.Solution]) -> methods.Solution:
  """`methods.solve(method, graph, topology, objective=objective)`, computed once per
  instance: `solved` holds the instance's solutions by method name (read and filled in)."""
  if method not in solved:
    solved[method] = methods.solve(method, graph, topology, objective=objective)
  return solved[method]


def priority_tiebreak(priority: np.ndarray) -> np.ndarray:
  """(N,) 0.5 x the dense rank of each priority scaled to [0, 1]: an order-preserving
  tie-break (equal priorities stay equal) that never crosses a priority level."""
  priority = np.asarray(priority, np.float64)
  if priority.size == 0:
    return priority
  _, rank = np.unique(priority, return_inverse=True)
  top = rank.max()
  return 0.5 * rank / top if top > 0 else np.zeros_like(priority)
