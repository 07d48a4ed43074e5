"""HDP (Mirhoseini et al., "A Hierarchical Model for Device Placement", ICLR 2018) as a method.

  sol = methods.solve("hdp", graph, topology, seconds=60)        # 60 s of search, then stop
  sol = methods.solve("hdp", graph, topology, budget=8000)       # 8,000 simulated placements
  sol.info["curve"]   # [{"seconds", "updates", "best_objective", "objective_mean"}, ...]

Kind "placement": HDP places only; the registry gives the answer the critical-path priority,
the one the search simulates with. A grouper (a feed-forward network over per-op features)
assigns every op to one of G groups, a sequence-to-sequence LSTM placer with attention assigns
a device to every group; both are trained jointly from scratch on this graph with REINFORCE
(go_jax/hdp/trainer.py: K placements per update from one forward pass, all simulated in one
batched call inside the jitted update; reward -sqrt(objective / lower bound); a moving-average
baseline). The answer is the best placement sampled during training.

Options:
  groups          G, the grouper's number of groups (capped at the graph's op count)
  samples         K, placements sampled (and simulated) per update
  learning_rate   Adam's step size (gradients clipped to global norm max_grad_norm)
  entropy_coef    weight of the entropy bonus (grouper per op + placer per group)
  baseline_decay  decay of the moving-average reward baseline, in [0, 1)
  hidden          width of the grouper's layers, the embeddings and the LSTMs
  updates         maximum number of updates (None: no cap but `seconds` / `budget`;
                  DEFAULT_UPDATES when neither is given)
  seconds         wall-clock budget of the search, compilation included (None: none), checked
                  between jitted calls
  max_grad_norm   gradient clipping
`budget` (simulator evaluations) caps the updates at budget // K (K shrinks to the budget when
it is smaller). info: updates, groups, samples, best_objective (as the jitted search scored
it), found_at (its update), groups_used (non-empty groups of the answer), compile_seconds,
curve, final (the last update's mean reward, objective, feasible share and entropies) and,
when no sampled placement fits in memory, a reason (the registry adds the devices over).
Without a `seconds` budget the answer depends only on the seed; with one, on the wall clock too.
"""

from __future__ import annotations

import numbers
from typing import Any, Dict

import numpy as np

from go_jax.methods import Problem, Proposal, register

DEFAULT_UPDATES = 300  # updates when neither `updates`, `seconds` nor `budget` bounds the search


def _int_option(config: Dict[str, Any], name: str, minimum: int, allow_none: bool = False):
  value = config[name]
  if value is None and allow_none:
    return None
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
    raise ValueError(f"hdp: {name} must be an integer >= {minimum}"
                     f"{' or None' if allow_none else ''}, got {value!r}")
  return int(value)


def _float_option(config: Dict[str, Any], name: str, low: float, high: float = np.inf,
                  low_open: bool = True, high_open: bool = True, allow_none: bool = False):
  value = config[name]
  if value is None and allow_none:
    return None
  ok = (not isinstance(value, bool) and isinstance(value, numbers.Real) and np.isfinite(value)
        and (value > low if low_open else value >= low)
        and (value < high if high_open else value <= high))
  if not ok:
    lo, hi = ("(" if low_open else "["), (")" if high_open else "]")
    raise ValueError(f"hdp: {name} must be a number in {lo}{low}, {high}{hi}"
                     f"{' or None' if allow_none else ''}, got {value!r}")
  return float(value)


@register("hdp", "placement",
          "HDP (hierarchical device placement): a feed-forward grouper and a seq2seq LSTM "
          "placer trained jointly on the graph with REINFORCE; best sampled placement",
          learned=True, groups=32, samples=16, learning_rate=0.01, entropy_coef=0.01,
          baseline_decay=0.9, hidden=64, updates=None, seconds=None, max_grad_norm=1.0)
def hdp(problem: Problem, config) -> Proposal:
  """See the module docstring."""
  from go_jax.hdp import trainer  # pylint: disable=g-import-not-at-top
  groups = _int_option(config, "groups", 1)
  samples = _int_option(config, "samples", 1)
  hidden = _int_option(config, "hidden", 1)
  updates = _int_option(config, "updates", 1, allow_none=True)
  lr = _float_option(config, "learning_rate", 0.0)
  entropy_coef = _float_option(config, "entropy_coef", 0.0, low_open=False)
  decay = _float_option(config, "baseline_decay", 0.0, 1.0, low_open=False)
  seconds = _float_option(config, "seconds", 0.0, allow_none=True)
  max_grad_norm = _float_option(config, "max_grad_norm", 0.0)
  if problem.budget is not None:
    if isinstance(problem.budget, bool) or int(problem.budget) < 1:
      raise ValueError(f"hdp: budget (simulator evaluations) must be >= 1, got "
                       f"{problem.budget!r}")
    samples = min(samples, int(problem.budget))
    cap = int(problem.budget) // samples
    updates = cap if updates is None else min(updates, cap)
  if updates is None and seconds is None:
    updates = DEFAULT_UPDATES
  g = problem.graph
  hp = trainer.Hyper(objective=problem.objective, groups=min(groups, max(g.num_nodes, 1)),
                     samples=samples, num_devices=problem.topology.num_devices, hidden=hidden,
                     learning_rate=lr, entropy_coef=entropy_coef, baseline_decay=decay,
                     max_grad_norm=max_grad_norm)
  res = trainer.train(g, problem.topology, hp, problem.seed, updates, seconds)
  info: Dict[str, Any] = {
      "updates": res.updates, "groups": hp.groups, "samples": hp.samples,
      "best_objective": res.objective, "found_at": res.found_at,
      "groups_used": int(np.unique(res.groups).size), "compile_seconds": res.compile_seconds,
      "curve": res.curve, "final": res.final}
  if not res.feasible:
    info["reason"] = (f"hdp: none of the {res.evaluations} sampled placements fits in memory "
                      "(the answer is the one that overflows least)")
  return Proposal(placement=res.placement, priority=None, evaluations=res.evaluations,
                  info=info)
