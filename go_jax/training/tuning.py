"""GO's fine-tuning and zero-shot transfer on one graph, from given (pretrained) parameters.

  tuned = finetune(config, graph, topology, params, max_updates=200, max_seconds=60)
  first = zero_shot(config, graph, topology, params)   # greedy and best of K, no update

`finetune` is PPO (`ppo.make_train` on the one instance) with an update and / or wall-clock
budget (setup and compilation count inside it; a call starts only when it is likely to end
within it), tracking the best action and logging progress; it also reports the zero-shot
greedy objective of the parameters it started from, and the setup, compile and search seconds
apart (`compile_clock`: this process's compile seconds, from jax.monitoring). Split from
`loop` (the training run), whose action scoring it shares.

Gated exploration floor: with `config.explore` > 0 and `config.explore_below` set, the floor
(go_jax/training/ppo.py) applies only when the starting policy's placement entropy per decision
on the instance is below `explore_below` nats, i.e. when it is already nearly sure of every op
and PPO would collapse it within a few updates; an unsure policy (e.g. near-uniform on a family
it learned little of) fine-tunes without it, since there the floor's random devices keep the
samples from sharpening at all (BENCHMARKS.md, "An exploration floor for `gdp`'s fine-tuning").
The entropy comes from the zero-shot greedy pass, so deciding costs no extra forward pass.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Dict, List, Optional, Sequence

import jax
import numpy as np
import tqdm
from absl import logging

from go_jax import distributed
from go_jax.training import ppo
from go_jax.training.loop import best_action, config_dict, scalar_metrics, score_action
from simulator.graph import CompGraph
from simulator.topology import Topology


@dataclasses.dataclass
class FinetuneResult:
  placement: np.ndarray  # (N,) int best placement found
  priority: np.ndarray  # (N,) float its priority
  objective: float  # re-simulated with simulator.simulate on the host
  feasible: bool
  loop_objective: float  # what the training loop recorded for it (float32)
  reference: float  # the reference method's objective
  zero_shot_objective: float  # greedy action of the starting parameters
  zero_shot_placement: np.ndarray  # (N,) int that greedy action
  zero_shot_priority: np.ndarray  # (N,) float
  # Best of the first update's K samples and greedy action, i.e. drawn from the starting
  # parameters before any gradient step: GO's zero-shot "best of K" (re-simulated, with
  # "seconds" from the call's start; None unless updates_per_call == 1, when the first call is
  # exactly that one update)
  zero_shot_best: Optional[Dict[str, Any]]
  zero_shot_seconds: float  # wall time to the zero-shot greedy action (setup, compile, forward)
  updates: int
  seconds: float  # wall time of the whole call: setup + compile + search
  setup_seconds: float  # the instance: features, hint, reference objective, initial state
  compile_seconds: float  # tracing + XLA compilation during the call (policy, update, and the
  #                         simulator of the setup's baselines; 0 when all were cached)
  search_seconds: float  # the rest: greedy forward, updates, re-simulation on the host
  # per-update metrics; the last update of each call also has "seconds" (since the call's
  # start) and "best_objective" (the best the loop has scored so far): the anytime curve
  history: List[Dict[str, float]]
  state: ppo.TrainState
  fuse: Optional[np.ndarray] = None  # (N,) bool the best action's fuse requests (fusion tasks)
  zero_shot_fuse: Optional[np.ndarray] = None  # (N,) bool the zero-shot greedy action's
  # the starting policy's placement entropy per decision (nats) and the exploration floor the
  # updates used (0: none; module docstring)
  start_entropy: float = math.nan
  explore: float = 0.0


# Seconds between two progress lines of `finetune` (the first and last update always log).
FINETUNE_PROGRESS_SECONDS = 10.0
# JAX's compile-time events (jax.monitoring): tracing, lowering to MLIR and XLA compilation.
_LOWERING_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"  # one per jit cache miss
_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", _LOWERING_EVENT,
                   "/jax/core/compile/backend_compile_duration")


class CompileClock:
  """Seconds this process has spent compiling JAX functions (tracing, lowering, XLA) since
  its first reading, from jax.monitoring's compile events; the difference of two readings
  times the compilation between them. The executables stay in jit's cache, so a later
  fine-tuning of the same shapes and hyper-parameters compiles nothing and reads 0.
  `lowerings` counts the programs lowered since the first reading (one per jit cache miss,
  the persistent compilation cache's hits included): a test's way to check that a second
  graph of a warmed shape compiles nothing."""

  def __init__(self):
    self.seconds = 0.0
    self.lowerings = 0
    self._listening = False

  def _on_duration(self, event: str, duration: float, **kwargs) -> None:
    del kwargs
    if event in _COMPILE_EVENTS:
      self.seconds += duration
    if event == _LOWERING_EVENT:
      self.lowerings += 1

  def __call__(self) -> float:
    if not self._listening:
      jax.monitoring.register_event_duration_secs_listener(self._on_duration)
      self._listening = True
    return self.seconds


compile_clock = CompileClock()


def _finetune_progress(name: str, updates: int, max_updates: Optional[int], elapsed: float,
                       rate: float, best: float, reference: float, reference_method: str,
                       left: Optional[float]) -> str:
  """One progress line of `finetune` in tqdm's meter format: updates (of the update budget
  when that ends the run), seconds spent in updates, updates/s, best objective, time left."""
  postfix = f"best {best:.6g} (x{best / reference:.4f} of {reference_method})"
  if left is not None:
    postfix += f", {max(left, 0.0):.0f} s left"
  return tqdm.tqdm.format_meter(updates, max_updates, elapsed, prefix=f"fine-tune {name}",
                                unit="update", rate=rate if rate > 0 else None,
                                postfix=postfix, ncols=0)


def finetune(config, graph: CompGraph, topology: Topology, params=None, *,
             max_updates: Optional[int] = None, max_seconds: Optional[float] = None,
             seed: int = 0, policy: Optional[ppo.Policy] = None,
             name: Optional[str] = None, progress: bool = True,
             progress_seconds: float = FINETUNE_PROGRESS_SECONDS,
             fixed_placement=None, fixed_priority=None,
             sample_only: bool = False) -> FinetuneResult:
  """PPO on one graph from `params` (None: fresh) within the budgets (see module docstring).

  The update budget defaults to `config.updates` and is rounded up to whole calls of
  `config.updates_per_call`. The wall-clock budget `max_seconds` counts everything from this
  call's start: instance setup (features, hint, reference), compilation (timed apart with
  jax.monitoring: `compile_seconds`) and the search. The first call always runs (with one update
  per call it yields the zero-shot best of K); a later call starts only when the time per call
  measured so far (compilation excluded) says it ends within the budget. `progress` logs a line
  (absl INFO) every `progress_seconds` with the updates, the best objective so far, updates/s
  and the time left. `fixed_placement` / `fixed_priority` ((N,) arrays) fix the placement /
  priority of a task that does not learn them (e.g. the schedule the fusion task fuses).
  `sample_only`: zero-shot alone. The one call samples exactly what the first update would
  (`ppo.sample_chunk`) and takes no gradient step, so the backward pass is never compiled
  (`updates` is then 0).
  """
  t0, compiled_before = time.perf_counter(), compile_clock()
  per_call = 1 if sample_only else int(config["updates_per_call"])
  budget = int(config["updates"] if max_updates is None else max_updates)
  if budget < 1:
    raise ValueError(f"max_updates must be >= 1, got {budget}")
  if sample_only:
    budget = 1
  if max_seconds is not None and not max_seconds > 0:
    raise ValueError(f"max_seconds must be > 0, got {max_seconds}")
  total = -(-budget // per_call) * per_call
  cfg = dict(config_dict(config), graphs_per_update=1, updates=total)
  if cfg.get("lr_schedule") == "constant" and not cfg.get("warmup_updates"):
    # The schedule's length changes nothing then; keeping it fixed keeps the hyper-parameters
    # (a static argument of the jitted update) equal across budgets: one compile serves all.
    cfg["total_updates"] = int(config["updates"])
  if policy is None:
    cfg["policy"] = config["policy"]
  label = name or graph.name
  trainer = ppo.make_train(
      cfg, [graph], [topology], policy=policy, names=[label],
      fixed_placements=None if fixed_placement is None else [fixed_placement],
      fixed_priorities=None if fixed_priority is None else [fixed_priority])
  state = trainer.init(seed, params=params)
  probs = trainer.problems
  setup_seconds = time.perf_counter() - t0 - (compile_clock() - compiled_before)
  deadline = None if max_seconds is None else t0 + float(max_seconds)
  zero_place, zero_prio, zero_fuse, start_entropy = jax.device_get(  # compiles the policy
      trainer.greedy_and_entropy(state.params))
  start_entropy = float(start_entropy[0])
  below = cfg.get("explore_below")
  if trainer.hp.explore > 0 and below is not None and not start_entropy < float(below):
    # the update is not compiled yet: a changed static hyper-parameter costs nothing
    trainer = dataclasses.replace(trainer, hp=dataclasses.replace(trainer.hp, explore=0.0))
  zero_scored = score_action(probs, 0, zero_place[0], zero_prio[0],
                             None if zero_fuse is None else zero_fuse[0])
  zero_seconds = time.perf_counter() - t0
  history: List[Dict[str, float]] = []
  zero_best = None
  call_seconds: List[float] = []  # wall time of each call, compilation excluded
  last_log = -math.inf
  while int(state.step) < total:
    now = time.perf_counter()
    if deadline is not None and distributed.agree(  # process 0's clock decides for all
        bool(call_seconds) and now + np.mean(call_seconds[-8:]) > deadline):
      break  # the next call would likely end past the budget
    compiling = compile_clock()
    state, metrics = (trainer.sample_chunk(state) if sample_only  # the first call compiles
                      else trainer.update_chunk(state))  # (unless cached)
    metrics = jax.device_get(metrics)
    step = int(state.step)
    call_seconds.append(time.perf_counter() - now - (compile_clock() - compiling))
    if len(call_seconds) == 1 and progress:
      left = None if deadline is None else deadline - time.perf_counter()
      logging.info("fine-tune %s: setup %.1f s, compile %.1f s, first update %.2f s; %s", label,
                   setup_seconds, compile_clock() - compiled_before, call_seconds[0],
                   f"then up to {total} updates" if left is None else
                   f"then updates for {left:.1f} s more" if left > 0 else
                   "the time budget is spent: no more updates")
    for u in range(per_call):
      history.append(dict(scalar_metrics(metrics, u), step=step - per_call + 1 + u))
    # The anytime curve (methods' info["curve"]): the best objective the loop has scored so far
    # and the wall time since the call's start, at the end of each call.
    history[-1].update(seconds=time.perf_counter() - t0,
                       best_objective=float(jax.device_get(state.best_objective)[0]))
    if zero_best is None and per_call == 1:  # the first update samples from `params`
      zero_best = score_action(probs, 0, *best_action(state, 0))
      zero_best["seconds"] = time.perf_counter() - t0
    now = time.perf_counter()
    if progress and (now - last_log >= progress_seconds or step >= total):
      last_log = now
      logging.info("%s", _finetune_progress(
          label, step, total if deadline is None else None, sum(call_seconds),
          step / max(sum(call_seconds), 1e-9), float(jax.device_get(state.best_objective)[0]),
          float(probs.reference[0]), probs.reference_method,
          None if deadline is None else deadline - now))
  loop_obj = float(jax.device_get(state.best_objective)[0])
  scored = score_action(probs, 0, *best_action(state, 0))
  seconds = time.perf_counter() - t0
  compile_seconds = compile_clock() - compiled_before
  if progress:
    logging.info("fine-tune %s: %d updates in %.1f s (setup %.1f s, compile %.1f s, search "
                 "%.1f s%s): best %.6g, zero-shot greedy %.6g", label, int(state.step), seconds,
                 setup_seconds, compile_seconds, seconds - setup_seconds - compile_seconds,
                 "" if max_seconds is None else f"; budget {float(max_seconds):g} s",
                 scored["objective"], zero_scored["objective"])
  return FinetuneResult(placement=scored["placement"], priority=scored["priority"],
                        fuse=scored["fuse"], zero_shot_fuse=zero_scored["fuse"],
                        objective=scored["objective"],
                        feasible=scored["feasible"], loop_objective=loop_obj,
                        reference=float(probs.reference[0]),
                        zero_shot_objective=zero_scored["objective"], zero_shot_best=zero_best,
                        zero_shot_placement=zero_scored["placement"],
                        zero_shot_priority=zero_scored["priority"],
                        zero_shot_seconds=zero_seconds,
                        updates=0 if sample_only else int(state.step),
                        seconds=seconds, setup_seconds=setup_seconds,
                        compile_seconds=compile_seconds,
                        search_seconds=seconds - setup_seconds - compile_seconds,
                        history=history, state=state, start_entropy=start_entropy,
                        explore=float(trainer.hp.explore))


@dataclasses.dataclass
class ZeroShotResult:
  greedy_objective: float  # the most likely action, re-simulated on the host
  greedy_placement: np.ndarray  # (N,) int
  greedy_priority: np.ndarray  # (N,) float
  best_objective: float  # best of the K sampled actions and the greedy one, re-simulated
  best_placement: np.ndarray  # (N,) int
  best_priority: np.ndarray  # (N,) float
  samples: int  # K
  seconds: float  # wall time (instance setup incl. the hint, compile, forward, simulation)
  greedy_fuse: Optional[np.ndarray] = None  # (N,) bool fuse requests (fusion tasks only)
  best_fuse: Optional[np.ndarray] = None  # (N,) bool


def zero_shot(config, graph: CompGraph, topology: Topology, params, *, seed: int = 0,
              samples: Optional[int] = None, policy: Optional[ppo.Policy] = None,
              name: Optional[str] = None) -> ZeroShotResult:
  """GO's zero-shot transfer on one graph: the greedy action and the best of K actions sampled
  from ONE forward pass of `params`: the actions the first update would sample, with no
  gradient taken (`ppo.sample_chunk`)."""
  t0 = time.perf_counter()
  k = int(config["samples"] if samples is None else samples)
  cfg = dict(config_dict(config), graphs_per_update=1, updates=1, updates_per_call=1,
             samples=k, minibatches=1, epochs=1)
  if policy is None:
    cfg["policy"] = config["policy"]
  trainer = ppo.make_train(cfg, [graph], [topology], policy=policy, names=[name or graph.name])
  state = trainer.init(seed, params=params)
  state, _ = trainer.sample_chunk(state)  # K samples + greedy from `params`, no gradient
  greedy_place, greedy_prio, greedy_fuse = jax.device_get(trainer.greedy(params))
  greedy = score_action(trainer.problems, 0, greedy_place[0], greedy_prio[0],
                        None if greedy_fuse is None else greedy_fuse[0])
  best = score_action(trainer.problems, 0, *best_action(state, 0))
  if greedy["objective"] < best["objective"]:
    best = greedy
  return ZeroShotResult(
      greedy_objective=greedy["objective"], greedy_placement=greedy["placement"],
      greedy_priority=greedy["priority"], best_objective=best["objective"],
      best_placement=best["placement"], best_priority=best["priority"], samples=k,
      greedy_fuse=greedy["fuse"], best_fuse=best["fuse"],
      seconds=time.perf_counter() - t0)


__all__: Sequence[str] = ("finetune", "zero_shot", "FinetuneResult", "ZeroShotResult",
                          "compile_clock", "FINETUNE_PROGRESS_SECONDS")
