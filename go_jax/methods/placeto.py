"""Placeto (Addanki et al., NeurIPS 2019) as a registered method: a pretrained policy that
places op groups one at a time, zero-shot or fine-tuned on the instance.

  sol = methods.solve("placeto", graph, topology)                        # zero-shot
  sol = methods.solve("placeto", graph, topology, finetune_seconds=60)   # + REINFORCE for 60 s
  sol.info["stages"]  # [{"stage": "zero-shot greedy", "placement", "seconds", "objective", ...}]
  sol.info["curve"]   # [{"seconds", "best_objective"}]: the best so far over wall time

Kind "placement": the priority is the critical path (`simulator.graph.upward_rank`), the one
the episodes simulate with. The graph is grouped by `simulator.coarsen` into at most `groups`
groups (the checkpoint's unless overridden), the policy runs its greedy episode (the most
likely device at every step, from the all-on-device-0 or random start of the checkpoint's
`init`): that is the zero-shot stage. With `finetune_seconds > 0` (or `max_updates`), the
REINFORCE update of go_jax/placeto/trainer.py then runs on this instance from the checkpoint's
parameters, K = `samples` episodes per update, for that wall-clock budget (loading, grouping
and compilation included; an update starts only if it is expected to end in time, the first
one too, by one greedy episode's seconds: every step of an episode simulates the whole graph,
so on a large graph one update takes minutes); the fine-tuned stage is the best placement
simulated on the way.
Every stage is re-simulated with `methods.evaluate`; the answer is the best stage (the earliest
on ties). A problem `budget` caps the simulated placements (every state of every episode
counts, the greedy episodes included).

Options: `checkpoint` (a shipped name, a training workdir or export folder, or "none": fresh
parameters, which only fine-tuning uses), `finetune_seconds`, `samples` (K >= 2; None: the
checkpoint's), `learning_rate`, `max_updates` (a cap on fine-tuning updates; given alone it
fine-tunes for that many updates), `groups` (None: the checkpoint's). A bad option is a
ValueError naming it; a topology with more devices than the policy's `max_devices` is a
ValueError; memory the instance cannot fit is not an error: the episodes see the objective's
out-of-memory penalty, and the registry reports the answer infeasible with its reason.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Tuple

import numpy as np

from go_jax.methods import Problem, Proposal, Refused, anytime_curve, evaluate, register

NO_CHECKPOINT = "none"
DEFAULT_LEARNING_RATE = 1e-3
STAGE_GREEDY, STAGE_TUNED = "zero-shot greedy", "fine-tuned"
_CACHE: Dict[Tuple[str, float], Tuple[Any, Any, Any]] = {}  # (params file, mtime) -> loaded


def _is_count(x, minimum: int = 1) -> bool:
  return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= minimum


def load_checkpoint(checkpoint: str):
  """(training config, policy module, params) of a Placeto checkpoint; ValueError naming what
  is wrong (unknown name, missing files, another algorithm, parameters that do not fit)."""
  from go_jax import pretrained  # pylint: disable=g-import-not-at-top
  from go_jax.placeto import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  from go_jax.training import checkpoint as ckpt_lib  # pylint: disable=g-import-not-at-top
  try:
    config = pretrained.load_config(checkpoint)
    folder = pretrained._folder(checkpoint)  # pylint: disable=protected-access
  except ValueError as e:
    raise ValueError(f"placeto: option checkpoint: {e}") from e
  if config.get("algorithm", "ppo") != "placeto":
    raise ValueError(f"placeto: option checkpoint: {checkpoint!r} is not a Placeto run (its "
                     f"config.json has algorithm {config.get('algorithm', 'ppo')!r}; train one "
                     "with experiments/configs/pretrain_placeto.py)")
  path = os.path.join(folder, pretrained.PARAMS_NAME)
  if not os.path.isfile(path):
    raise ValueError(f"placeto: option checkpoint: {checkpoint!r} has no "
                     f"{pretrained.PARAMS_NAME}")
  cache_key = (os.path.realpath(path), os.path.getmtime(path))
  if cache_key not in _CACHE:
    try:
      module, shapes = trainer_lib.template_params(config.policy)
    except ValueError as e:
      raise ValueError(f"placeto: option checkpoint: {checkpoint!r}: {e}") from e
    try:
      params = ckpt_lib.load_params(path, shapes)
    except ValueError as e:
      raise ValueError(f"placeto: {e}") from e
    _CACHE[cache_key] = (config, module, params)
  return _CACHE[cache_key]


def _check_options(config: Dict[str, Any]) -> None:
  """ValueError naming the first bad option."""
  ckpt = config["checkpoint"]
  if not isinstance(ckpt, str) or not ckpt:
    raise ValueError(f"placeto: option checkpoint must be a shipped name, a folder or "
                     f"'{NO_CHECKPOINT}', got {ckpt!r}")
  sec = config["finetune_seconds"]
  if isinstance(sec, bool) or not isinstance(sec, (int, float)) or not 0 <= sec < float("inf"):
    # inf: without max_updates the fine-tuning loop would never end
    raise ValueError(f"placeto: option finetune_seconds must be a finite number >= 0 (bound "
                     f"the updates with max_updates), got {sec!r}")
  if config["samples"] is not None and not _is_count(config["samples"], 2):
    raise ValueError(f"placeto: option samples must be an integer >= 2 (the baseline averages "
                     f"the other episodes) or None, got {config['samples']!r}")
  lr = config["learning_rate"]
  if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
    raise ValueError(f"placeto: option learning_rate must be a number > 0, got {lr!r}")
  if config["max_updates"] is not None and not _is_count(config["max_updates"]):
    raise ValueError(f"placeto: option max_updates must be an integer >= 1 or None, got "
                     f"{config['max_updates']!r}")
  if config["groups"] is not None and not _is_count(config["groups"]):
    raise ValueError(f"placeto: option groups must be an integer >= 1 or None, got "
                     f"{config['groups']!r}")


def _stage(problem: Problem, name: str, placement, seconds: float) -> Dict[str, Any]:
  """A stage's placement, re-simulated with the critical-path priority."""
  from simulator.graph import upward_rank  # pylint: disable=g-import-not-at-top
  place = np.asarray(placement, np.int64)
  prio = upward_rank(problem.graph)
  scored = evaluate(problem.graph, problem.topology, place, prio, problem.objective)
  return {"stage": name, "placement": place, "priority": prio, "seconds": float(seconds),
          "objective": scored["objective"], "feasible": scored["feasible"]}


@register("placeto", "placement", "Placeto: a pretrained policy moves op groups (coarsened) "
          "to devices one at a time, from graph embeddings of the current placement; "
          "zero-shot greedy episode or REINFORCE fine-tuning for finetune_seconds",
          learned=True, checkpoint="placeto", finetune_seconds=0.0, samples=None,
          learning_rate=DEFAULT_LEARNING_RATE, max_updates=None, groups=None)
def placeto(problem: Problem, config) -> Proposal:
  """The registered method (module docstring)."""
  from go_jax.placeto import search as search_lib  # pylint: disable=g-import-not-at-top
  from go_jax.placeto import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  _check_options(config)
  t0 = time.perf_counter()
  seconds, max_updates = float(config["finetune_seconds"]), config["max_updates"]
  tune = seconds > 0 or max_updates is not None
  if config["checkpoint"] == NO_CHECKPOINT:
    if not tune:
      raise Refused(f"placeto: option checkpoint='{NO_CHECKPOINT}' starts from fresh "
                       "parameters, which only fine-tuning uses: give finetune_seconds > 0 "
                       "or max_updates")
    train_config, params, label = trainer_lib.default_config(), None, "none (fresh parameters)"
    dmax = int(train_config.policy.max_devices)
  else:
    train_config, module, params = load_checkpoint(config["checkpoint"])
    label, dmax = config["checkpoint"], module.max_devices
  d = problem.topology.num_devices
  if d > dmax:
    raise Refused(f"placeto: the policy serves at most {dmax} devices, the topology has "
                     f"{d}; train one with config.policy.max_devices >= {d}")
  load_seconds = time.perf_counter() - t0
  cfg = search_lib.tune_config(train_config, samples=config["samples"],
                               learning_rate=float(config["learning_rate"]),
                               groups=config["groups"])
  cfg.objective = problem.objective
  try:
    trainer_lib.check_config(cfg)
  except ValueError as e:
    raise ValueError(f"placeto: {e}") from e
  left = max(seconds - load_seconds, 1e-6) if seconds > 0 else None
  res = search_lib.search(cfg, problem.graph, problem.topology, params, tune=tune,
                          max_seconds=left, max_updates=max_updates, budget=problem.budget,
                          seed=problem.seed, name=f"placeto on {problem.graph.name}",
                          progress=tune)
  stages = []
  if params is not None:
    stages.append(_stage(problem, STAGE_GREEDY, res.zero_shot_placement,
                         load_seconds + res.zero_shot_seconds))
  if tune:
    stages.append(_stage(problem, STAGE_TUNED, res.placement, load_seconds + res.seconds))
  best = min(stages, key=lambda s: s["objective"])  # the earliest of equal ones
  info = {"checkpoint": label, "samples": int(cfg.samples), "groups": res.groups,
          "steps": res.steps, "updates": res.updates, "load_seconds": load_seconds,
          "setup_seconds": res.setup_seconds, "compile_seconds": res.compile_seconds,
          "stages": stages, "stage": best["stage"],
          "curve": anytime_curve(stages + [dict(h, seconds=h["seconds"] + load_seconds)
                                           for h in res.history])}
  if tune:
    info.update(finetune_seconds=res.seconds, learning_rate=float(cfg.learning_rate))
  return Proposal(best["placement"], None, evaluations=res.evaluations, info=info)
