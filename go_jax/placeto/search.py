"""Placeto on one instance: the zero-shot greedy episode of a (pretrained) policy, then
fine-tuning on that graph for a wall-clock and / or evaluation budget (paper, section 4.2).

  result = search(train_config, graph, topology, params, max_seconds=30, seed=0)
  result.zero_shot_placement, result.placement    # (N,) op placements (expanded groups)

Fine-tuning is the training update of go_jax/placeto/trainer.py on the one instance (G = 1,
K episodes, one update per jitted call so that the budget is checked often), from the given
parameters; the update compiles once per padded size, K and hyper-parameters, so fine-tuning
several graphs of one bucket compiles once. The answer is the best placement simulated along
the way: every state of every sampled episode, and the greedy episode of the tuned policy.
The wall-clock budget counts everything from the call's start (grouping, padding, compilation);
the first update always runs, a later one only when the time per update measured so far says
it ends within the budget.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Dict, List, Optional

import jax
import ml_collections
import numpy as np
from absl import logging

from go_jax import distributed
from go_jax.placeto import trainer as trainer_lib
from go_jax.training import tuning
from simulator.graph import CompGraph
from simulator.topology import Topology

MAX_UPDATES = 1_000_000  # "unbounded": the wall-clock budget ends fine-tuning
PROGRESS_SECONDS = 10.0


@dataclasses.dataclass
class SearchResult:
  """Zero-shot and fine-tuned placements of one instance (objectives as simulated in the loop,
  on the whole graph with the critical-path priority)."""
  zero_shot_placement: np.ndarray  # (N,) int the greedy episode's final placement
  zero_shot_objective: float
  zero_shot_seconds: float  # from the call's start to the greedy episode's end
  placement: np.ndarray  # (N,) int the best placement found (zero-shot included)
  objective: float
  updates: int
  seconds: float  # the whole call
  setup_seconds: float  # grouping, padding, initial state (compilation excluded)
  compile_seconds: float  # tracing and XLA compilation during the call (0 when cached)
  steps: int  # T, steps of an episode (padded group count)
  groups: int  # M, the groups of the grouping
  evaluations: int  # simulated placements
  # per-update metrics, with "seconds" (since the call's start) and "best_objective" (the best
  # so far, the zero-shot episode's included): the anytime curve
  history: List[Dict[str, float]]


def tune_config(config, *, samples: Optional[int] = None,
                learning_rate: Optional[float] = None,
                groups: Optional[int] = None) -> ml_collections.ConfigDict:
  """A copy of a training config set up to fine-tune one instance: one instance and one update
  per call, a constant learning rate, and the given K / learning rate / group count."""
  cfg = ml_collections.ConfigDict(config.to_dict() if hasattr(config, "to_dict")
                                  else dict(config))
  cfg.update(graphs_per_update=1, updates=MAX_UPDATES, updates_per_call=1,
             lr_schedule="constant", warmup_updates=0)
  if samples is not None:
    cfg.samples = samples
  if learning_rate is not None:
    cfg.learning_rate = learning_rate
  if groups is not None:
    cfg.groups = groups
  return cfg


def search(config, graph: CompGraph, topology: Topology, params: Any = None, *,
           tune: bool = False, max_seconds: Optional[float] = None,
           max_updates: Optional[int] = None, budget: Optional[int] = None, seed: int = 0,
           name: Optional[str] = None, progress: bool = True) -> SearchResult:
  """Zero-shot greedy episode, then with `tune` fine-tuning until `max_seconds` (None: no time
  limit) or `max_updates` (None: no cap) (module docstring). `config` is a fine-tuning config
  (`tune_config`); `params` None starts from fresh parameters. `budget` caps the simulated
  placements, the greedy episodes before and after fine-tuning included. ValueError when the
  budget is below one greedy episode."""
  clock = tuning.compile_clock  # compile seconds so far
  t0, compiled_before = time.perf_counter(), clock()
  label = name or graph.name
  trainer = trainer_lib.make_train(config, [graph], [topology], [label])
  inst = trainer.instances[0]
  per_episode = trainer.steps + 1
  per_update = trainer.placements_per_update
  cap = MAX_UPDATES if max_updates is None else int(max_updates)
  if budget is not None:
    if budget < per_episode:
      raise ValueError(f"placeto: budget {budget} is below one greedy episode ({per_episode} "
                       f"simulated placements: {trainer.steps} steps + the initial state)")
    cap = min(cap, (int(budget) - 2 * per_episode) // per_update)
  state = trainer.init(int(seed), params=params)
  setup = time.perf_counter() - t0 - (clock() - compiled_before)
  deadline = None if max_seconds is None else t0 + float(max_seconds)
  compiling, started = clock(), time.perf_counter()
  ep = jax.device_get(trainer.greedy(state.params, seed))
  # an update runs K such episodes: before any update is timed, one episode is the estimate
  # (a lower bound), so a deadline that zero-shot already (nearly) spent starts no update,
  # which on a large graph (every step simulates the whole graph) ran minutes past it
  episode_seconds = time.perf_counter() - started - (clock() - compiling)
  zero_group = np.asarray(ep.placements[0, 0, -1])
  zero_obj = float(ep.objectives[0, 0, -1])
  zero_seconds = time.perf_counter() - t0
  evaluations = per_episode
  history: List[Dict[str, float]] = []
  call_seconds: List[float] = []
  last_log = -math.inf
  while tune and int(state.step) < cap:
    now = time.perf_counter()
    estimate = np.mean(call_seconds[-8:]) if call_seconds else episode_seconds
    if deadline is not None and distributed.agree(  # process 0's clock decides for all
        now + estimate > deadline):
      break
    compiling = clock()
    state, metrics = trainer.update_chunk(state)
    metrics = jax.device_get(metrics)
    call_seconds.append(time.perf_counter() - now - (clock() - compiling))
    evaluations += per_update
    step = int(state.step)
    history.append(dict({k: float(v[0]) for k, v in metrics.items()}, step=step,
                        seconds=time.perf_counter() - t0,
                        best_objective=min(float(jax.device_get(state.best_objective)[0]),
                                           zero_obj)))
    now = time.perf_counter()
    if progress and now - last_log >= PROGRESS_SECONDS:
      last_log = now
      best = float(jax.device_get(state.best_objective)[0])
      logging.info("placeto fine-tune %s: update %d, %.2f updates/s, best %.6g (x%.4f of the "
                   "lower bound), zero-shot %.6g%s", label, step,
                   step / max(sum(call_seconds), 1e-9), min(best, zero_obj),
                   min(best, zero_obj) / inst.lower_bound, zero_obj,
                   "" if deadline is None else f", {max(deadline - now, 0.0):.0f} s left")
  best_group, best_obj = zero_group, zero_obj
  if int(state.step) > 0:
    found = float(jax.device_get(state.best_objective)[0])
    if found < best_obj:
      best_group, best_obj = np.asarray(jax.device_get(state.best_placement)[0]), found
    ep = jax.device_get(trainer.greedy(state.params, seed))
    evaluations += per_episode
    if float(ep.objectives[0, 0, -1]) < best_obj:
      best_group, best_obj = np.asarray(ep.placements[0, 0, -1]), float(ep.objectives[0, 0, -1])
  seconds = time.perf_counter() - t0
  compile_seconds = clock() - compiled_before
  if progress and int(state.step) > 0:
    logging.info("placeto fine-tune %s: %d updates in %.1f s (setup %.1f s, compile %.1f s): "
                 "best %.6g, zero-shot greedy %.6g", label, int(state.step), seconds, setup,
                 compile_seconds, best_obj, zero_obj)
  return SearchResult(zero_shot_placement=inst.expand(zero_group), zero_shot_objective=zero_obj,
                      zero_shot_seconds=zero_seconds, placement=inst.expand(best_group),
                      objective=best_obj, updates=int(state.step), seconds=seconds,
                      setup_seconds=setup, compile_seconds=compile_seconds,
                      steps=trainer.steps, groups=int(inst.coarse.graph.num_nodes),
                      evaluations=evaluations, history=history)
