"""The host loop around the jitted PPO updates: resume, log, checkpoint, report, fine-tune.

  result = train(config, workdir)     # trains config.updates updates; resumes from workdir
  tuned = finetune(config, graph, topology, params, max_updates=200, max_seconds=60)

`train` builds the instances of the config (graph specs x topology specs, `build_instances`),
makes the trainer (`ppo.make_train`) and calls its jitted `update_chunk` until `config.updates`
updates are done. Between calls it only moves the chunk's metrics to the host and writes them
(`logging`), reports speed and ETA, and checkpoints every `checkpoint_every` updates
(`checkpoint`). A workdir that already holds a checkpoint is resumed from its newest step, with
the same config (only fields in `RESUMABLE_CHANGES` may differ, e.g. a larger `updates`).

At the end `<workdir>/summary.json` reports, per instance, the best action found (re-simulated
on the host with `simulator.simulate`, so no number comes only from the training loop) and the
final greedy action, against the reference method's objective and the lower bound;
`<workdir>/params.msgpack` holds the final policy parameters (the file `finetune` starts from).

`finetune` is GO's fine-tuning on one held-out graph: PPO from given (pretrained) parameters,
with an update and / or wall-clock budget (setup and compilation count inside it; a call starts
only when it is likely to end within it), tracking the best action and logging progress; it
also reports the zero-shot greedy objective of the parameters it started from, and the setup,
compile and search seconds apart.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import jax
import numpy as np
import tqdm
from absl import logging

from go_jax import distributed, methods
from go_jax.datasets import store
from go_jax.training import checkpoint as ckpt_lib
from go_jax.training import imitation
from go_jax.training import logging as train_logging
from go_jax.training import ppo
from simulator import fileio, sources, topology_spec
from simulator.graph import CompGraph
from simulator.topology import Topology

CONFIG_NAME, SUMMARY_NAME, PARAMS_NAME, CKPT_DIR = (
    "config.json", "summary.json", "params.msgpack", "checkpoints")
# Config fields a resumed run may change (the rest must match the checkpointed run). A new
# `updates` also rescales a decaying learning-rate schedule from the resumed step on.
RESUMABLE_CHANGES = ("updates", "checkpoint_every", "keep_checkpoints", "tensorboard",
                     "max_seconds", "init_params")


def load_specs(spec: str) -> List[Tuple[str, CompGraph]]:
  """(name, graph) pairs of one entry of config.graphs: a graph spec of
  `simulator.sources.load_graph`, or a data spec of `go_jax.datasets`
  ('regal_data:train[,dir=FOLDER][,limit=N]', 'xla_data:...'), which stands for every graph of
  that split (named '<data spec>/graph_<hash>'), so a run can train on a built dataset."""
  try:
    if str(spec).partition(":")[0] in store.DATA_KINDS:
      names, graphs = store.load_split(spec)
      if not graphs:
        raise ValueError("the split has no graphs")
      return [(f"{spec}/{n}", g) for n, g in zip(names, graphs)]
    return [(spec, sources.load_graph(spec))]
  except ValueError as e:
    raise ValueError(f"config.graphs: {spec!r}: {e}") from e


def build_instances(config) -> Tuple[List[CompGraph], List[Topology], List[str]]:
  """(graphs, topologies, names) of every (graph, topology spec) pair of the config; an entry
  of config.graphs is a graph spec or a dataset split's data spec (`load_specs`)."""
  graph_specs, topo_specs = list(config.graphs), list(config.topologies)
  if not graph_specs or not topo_specs:
    raise ValueError("config.graphs and config.topologies must be non-empty tuples of specs")
  parsed = [topology_spec.parse_topology(t) for t in topo_specs]
  graphs, topos, names = [], [], []
  for spec in graph_specs:
    for name, graph in load_specs(spec):
      for tspec in parsed:
        graphs.append(graph)
        topos.append(topology_spec.make_topology(tspec, graph)[0])
        names.append(f"{name} @ {tspec.spec}")
  return graphs, topos, names


def _config_dict(config) -> Dict[str, Any]:
  return json.loads(config.to_json()) if hasattr(config, "to_json") else dict(config)


def _check_resume(workdir: str, config) -> None:
  """ValueError when the workdir's run used another config (beyond RESUMABLE_CHANGES)."""
  path = os.path.join(workdir, CONFIG_NAME)
  if not os.path.exists(path):
    return
  with open(path) as fh:
    old = json.load(fh)
  new = _config_dict(config)
  for cfg in (old, new):  # cloning settings a resumed cloning may change (imitation.py)
    if isinstance(cfg.get("imitation"), dict):
      cfg["imitation"] = {k: v for k, v in cfg["imitation"].items()
                          if k not in imitation.RESUMABLE_CHANGES}
  differ = sorted(k for k in set(old) | set(new)
                  if k not in RESUMABLE_CHANGES and old.get(k) != new.get(k))
  if differ:
    raise ValueError(f"workdir {workdir} holds a run with another config (fields {differ} "
                     "differ); use a new --workdir or the same config")


@dataclasses.dataclass
class TrainResult:
  trainer: ppo.Trainer
  state: ppo.TrainState
  summary: List[Dict[str, Any]]  # one row per instance, see `summarize`
  resumed_from: int  # checkpoint step the run started from (0: fresh)
  speed: Dict[str, float]  # steady-state figures of the last call


def _score(problems, i: int, place, prio, fuse=None) -> Dict[str, Any]:
  """Instance i's action (padded arrays; fuse None for tasks that do not fuse) re-simulated on
  the host with simulator.simulate."""
  g, t = problems.graphs[i], problems.topologies[i]
  n = g.num_nodes
  place = np.asarray(place)[:n].astype(np.int64)
  prio = np.asarray(prio)[:n].astype(np.float64)
  fuse = None if fuse is None else np.asarray(fuse)[:n].astype(bool)
  scored = methods.evaluate(g, t, place, prio, problems.objective, fuse=fuse)
  return dict(scored, placement=place, priority=prio, fuse=fuse)


def _best(state, i: int):
  """(placement, priority, fuse or None) of instance i's best action so far (host arrays)."""
  fuse = None if state.best_fuse is None else state.best_fuse[i]
  return jax.device_get((state.best_placement[i], state.best_priority[i], fuse))


def summarize(trainer: ppo.Trainer, state: ppo.TrainState) -> List[Dict[str, Any]]:
  """Per instance: the best and greedy actions re-simulated on the host, vs the reference.

  `best_agrees` says whether the host's objective equals what the training loop recorded
  (relative 1e-5: both are float32 simulations of the same action)."""
  probs = trainer.problems
  greedy_place, greedy_prio, greedy_fuse = jax.device_get(trainer.greedy(state.params))
  best_obj = np.asarray(jax.device_get(state.best_objective), np.float64)
  rows = []
  for i, (name, g, t) in enumerate(zip(probs.names, probs.graphs, probs.topologies)):
    ref = float(probs.reference[i])
    row = {"instance": name, "graph": g.name, "nodes": g.num_nodes, "edges": g.num_edges,
           "devices": t.num_devices, "objective_kind": probs.objective,
           "reference_method": probs.reference_method, "reference": ref,
           "lower_bound": float(probs.lower_bound[i]), "best_objective": None,
           "best_ratio": None}
    greedy = _score(probs, i, greedy_place[i], greedy_prio[i],
                    None if greedy_fuse is None else greedy_fuse[i])
    row.update(greedy_objective=greedy["objective"], greedy_ratio=greedy["objective"] / ref,
               greedy_feasible=greedy["feasible"])
    if np.isfinite(best_obj[i]):  # the instance was visited at least once
      best = _score(probs, i, *_best(state, i))
      row.update(best_objective=best["objective"], best_ratio=best["objective"] / ref,
                 best_feasible=best["feasible"], best_loop_objective=float(best_obj[i]),
                 best_agrees=bool(np.isclose(best["objective"], best_obj[i], rtol=1e-5,
                                             atol=0.0)),
                 best_placement=best["placement"].tolist(),
                 best_priority=best["priority"].tolist())
      if best["fuse"] is not None:
        row["best_fuse"] = best["fuse"].tolist()
    rows.append(row)
  return rows


def _log_summary(rows) -> None:
  for r in rows:
    logging.info("%s: best %s (x%.4f of %s), greedy %s, lower bound %.6g", r["instance"],
                 r.get("best_objective"), r.get("best_ratio") or float("nan"),
                 r["reference_method"], r.get("greedy_objective"), r["lower_bound"])


def _scalar_metrics(metrics, u: int) -> Dict[str, float]:
  return {k: float(v[u]) for k, v in metrics.items()}


def open_checkpoints(workdir: str, config, state, keep: int):
  """(checkpointer, state, resumed step or None) of a run in `workdir`: the newest checkpoint
  restored into `state` after `_check_resume`. In a multi-process run (`go_jax.distributed`)
  process 0 alone holds a checkpointer (None on the others) and reads the checkpoint, and
  every process continues from its state (broadcast): process 0 writes, all resume alike."""
  checkpointer = (ckpt_lib.Checkpointer(os.path.join(workdir, CKPT_DIR), keep=keep)
                  if distributed.is_primary() else None)

  def latest() -> Optional[int]:
    step = checkpointer.latest_step()
    if step is not None:
      _check_resume(workdir, config)
    return step
  try:
    step = distributed.from_primary(latest)
    if step is not None:
      state = distributed.tree_from_primary(lambda: checkpointer.restore(state, step), state)
      logging.info("resumed from %s at update %d", os.path.join(workdir, CKPT_DIR), step)
  except BaseException:
    if checkpointer is not None:
      checkpointer.close()
    raise
  return checkpointer, state, step


def _checkpoint_interrupted(checkpointer, state, saved: int) -> None:
  """Saves `state` when a run is interrupted after its last checkpoint (`saved`), unless a
  checkpoint of that step exists already (an interrupt during its own save)."""
  step = int(state.step)
  if checkpointer is None or step == saved or step in checkpointer.all_steps():
    return
  checkpointer.save(step, state)
  checkpointer.wait()
  logging.warning("interrupted: checkpointed update %d; rerun the command to resume", step)


def _run_chunks(trainer, state, *, total: int, logger=None, checkpointer=None,
                checkpoint_every: int = 0, progress=None, deadline: Optional[float] = None,
                history: Optional[list] = None,
                progress_metrics=("ratio_mean", "ratio_greedy", "ratio_best_so_far")):
  """Calls update_chunk until `total` updates or, after a call, past the deadline; returns
  (state, speed of the last call). Shared by the PPO and REGAL trainers (`progress_metrics`:
  the metrics the progress line shows)."""
  per_call = trainer.hp.updates_per_call
  speed: Dict[str, float] = {}
  saved = int(state.step)  # a fresh run's step 0 or the checkpoint it resumed from
  done = state  # the newest state whose metrics are logged: what an interrupt checkpoints
  try:
    while int(state.step) < total:
      state, metrics = trainer.update_chunk(state)
      metrics = jax.device_get(metrics)
      step = int(state.step)
      if progress is not None:
        speed = progress.update(step, {k: float(metrics[k][-1]) for k in progress_metrics})
      for u in range(per_call):
        row = _scalar_metrics(metrics, u)
        if u == per_call - 1:
          row.update(speed)
        if history is not None:
          history.append(dict(row, step=step - per_call + 1 + u))
        if logger is not None:
          logger.write(step - per_call + 1 + u, row)
      if logger is not None:
        logger.flush()
      done = state
      if checkpointer is not None and (step % checkpoint_every == 0 or step >= total):
        checkpointer.save(step, state)
        saved = step
      if deadline is not None and distributed.agree(time.perf_counter() >= deadline):
        break  # checked after each call, so at least one call runs (process 0's clock decides)
  except KeyboardInterrupt:
    # Ctrl-C or SIGTERM (the launchers turn it into KeyboardInterrupt, experiments/cli.py):
    # keep the updates done so far, so that rerunning the command resumes from here rather
    # than from the last periodic checkpoint.
    _checkpoint_interrupted(checkpointer, done, saved)
    raise
  if checkpointer is not None and saved != int(state.step):
    checkpointer.save(int(state.step), state)  # stopped by the deadline between checkpoints
  return state, speed


def train(config, workdir: Optional[str] = None, *, policy: Optional[ppo.Policy] = None,
          instances: Optional[Tuple[Sequence[CompGraph], Sequence[Topology],
                                    Sequence[str]]] = None,
          progress: bool = True) -> TrainResult:
  """Trains (or resumes) the run of `config` in `workdir` (None: in memory, no files).

  Optional config fields: `init_params`, a params.msgpack of an earlier run (or that run's
  workdir) to start from instead of fresh parameters (ignored when resuming a checkpoint):
  fine-tuning a pretrained policy on held-out graphs; `max_seconds`, a wall-clock budget
  checked between calls (the state reached is checkpointed). `instances` = (graphs,
  topologies, names) replaces the config's graph and topology specs (graphs built in code).
  """
  total, per_call = int(config.updates), int(config.updates_per_call)
  if total < 1 or per_call < 1 or total % per_call:
    raise ValueError(f"updates ({total}) must be a positive multiple of updates_per_call "
                     f"({per_call})")
  every = int(config.get("checkpoint_every", per_call))
  if every < per_call or every % per_call:
    raise ValueError(f"checkpoint_every ({every}) must be a positive multiple of "
                     f"updates_per_call ({per_call})")
  max_seconds = config.get("max_seconds", None)
  if max_seconds is not None and not max_seconds > 0:
    raise ValueError(f"max_seconds must be > 0, got {max_seconds}")
  graphs, topos, names = build_instances(config) if instances is None else instances
  trainer = ppo.make_train(config, graphs, topos, policy=policy, names=names)
  state = trainer.init(int(config.get("seed", 0)))
  checkpointer, logger, start, latest = None, None, 0, None
  files = workdir if distributed.is_primary() else None  # process 0 writes (go_jax.distributed)
  try:
    if workdir is not None:
      if files is not None:
        os.makedirs(workdir, exist_ok=True)
      checkpointer, state, latest = open_checkpoints(
          workdir, config, state, int(config.get("keep_checkpoints", 3)))
      start = 0 if latest is None else int(state.step)
    init_params = config.get("init_params", None)
    if init_params and latest is None:
      if os.path.isdir(init_params):
        init_params = os.path.join(init_params, PARAMS_NAME)
      state = trainer.init(int(config.get("seed", 0)),
                           params=ckpt_lib.load_params(init_params, state.params))
    imitation_cfg = config.get("imitation", None)
    if imitation_cfg is not None and imitation_cfg.get("enabled", False) and latest is None:
      # behaviour cloning of the best baselines first (go_jax/training/imitation.py); a
      # resumed run reloads the cloned parameters from the workdir
      params = imitation.warm_start(trainer, state.params, imitation_cfg, workdir,
                                    progress=progress)
      state = trainer.init(int(config.get("seed", 0)), params=params)
    if files is not None:
      fileio.write_json(os.path.join(workdir, CONFIG_NAME), _config_dict(config))
      logger = train_logging.MetricsLogger(workdir, resume_step=start,
                                           tensorboard=bool(config.get("tensorboard", True)))
    prog = train_logging.Progress(start, total, trainer.placements_per_update,
                                  enabled=progress)
    deadline = None if max_seconds is None else time.perf_counter() + float(max_seconds)
    state, speed = _run_chunks(trainer, state, total=total, logger=logger,
                               checkpointer=checkpointer, checkpoint_every=every,
                               progress=prog, deadline=deadline)
    if checkpointer is not None:
      checkpointer.wait()
  finally:
    if logger is not None:
      logger.close()
    if checkpointer is not None:
      checkpointer.close()
  rows = summarize(trainer, state)
  _log_summary(rows)
  if files is not None:
    speed_json = {k: (v if np.isfinite(v) else None) for k, v in speed.items()}
    fileio.write_json(os.path.join(workdir, SUMMARY_NAME),
                      {"updates": int(state.step), "resumed_from": start, "speed": speed_json,
                       "instances": rows})
    ckpt_lib.save_params(os.path.join(workdir, PARAMS_NAME), state.params)
  return TrainResult(trainer, state, rows, start, speed)


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


# Seconds between two progress lines of `finetune` (the first and last update always log).
FINETUNE_PROGRESS_SECONDS = 10.0
# JAX's compile-time events (jax.monitoring): tracing, lowering to MLIR and XLA compilation.
_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")


class _CompileClock:
  """Seconds this process has spent compiling JAX functions (tracing, lowering, XLA) since
  its first reading, from jax.monitoring's compile events; the difference of two readings
  times the compilation between them. The executables stay in jit's cache, so a later
  fine-tuning of the same shapes and hyper-parameters compiles nothing and reads 0."""

  def __init__(self):
    self.seconds = 0.0
    self._listening = False

  def _on_duration(self, event: str, duration: float, **kwargs) -> None:
    del kwargs
    if event in _COMPILE_EVENTS:
      self.seconds += duration

  def __call__(self) -> float:
    if not self._listening:
      jax.monitoring.register_event_duration_secs_listener(self._on_duration)
      self._listening = True
    return self.seconds


_compile_clock = _CompileClock()


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
             fixed_placement=None, fixed_priority=None) -> FinetuneResult:
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
  """
  t0, compiled_before = time.perf_counter(), _compile_clock()
  per_call = int(config["updates_per_call"])
  budget = int(config["updates"] if max_updates is None else max_updates)
  if budget < 1:
    raise ValueError(f"max_updates must be >= 1, got {budget}")
  if max_seconds is not None and not max_seconds > 0:
    raise ValueError(f"max_seconds must be > 0, got {max_seconds}")
  total = -(-budget // per_call) * per_call
  cfg = dict(_config_dict(config), graphs_per_update=1, updates=total)
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
  setup_seconds = time.perf_counter() - t0 - (_compile_clock() - compiled_before)
  deadline = None if max_seconds is None else t0 + float(max_seconds)
  zero_place, zero_prio, zero_fuse = jax.device_get(trainer.greedy(state.params))  # compiles
  zero_scored = _score(probs, 0, zero_place[0], zero_prio[0],
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
    compiling = _compile_clock()
    state, metrics = trainer.update_chunk(state)  # the first call compiles (unless cached)
    metrics = jax.device_get(metrics)
    step = int(state.step)
    call_seconds.append(time.perf_counter() - now - (_compile_clock() - compiling))
    if len(call_seconds) == 1 and progress:
      left = None if deadline is None else deadline - time.perf_counter()
      logging.info("fine-tune %s: setup %.1f s, compile %.1f s, first update %.2f s; %s", label,
                   setup_seconds, _compile_clock() - compiled_before, call_seconds[0],
                   f"then up to {total} updates" if left is None else
                   f"then updates for {left:.1f} s more" if left > 0 else
                   "the time budget is spent: no more updates")
    for u in range(per_call):
      history.append(dict(_scalar_metrics(metrics, u), step=step - per_call + 1 + u))
    # The anytime curve (methods' info["curve"]): the best objective the loop has scored so far
    # and the wall time since the call's start, at the end of each call.
    history[-1].update(seconds=time.perf_counter() - t0,
                       best_objective=float(jax.device_get(state.best_objective)[0]))
    if zero_best is None and per_call == 1:  # the first update samples from `params`
      zero_best = _score(probs, 0, *_best(state, 0))
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
  scored = _score(probs, 0, *_best(state, 0))
  seconds = time.perf_counter() - t0
  compile_seconds = _compile_clock() - compiled_before
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
                        zero_shot_seconds=zero_seconds, updates=int(state.step),
                        seconds=seconds, setup_seconds=setup_seconds,
                        compile_seconds=compile_seconds,
                        search_seconds=seconds - setup_seconds - compile_seconds,
                        history=history, state=state)


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
  from ONE forward pass of `params` (no update counts: the best is taken from the actions
  simulated before the first update's gradient step)."""
  t0 = time.perf_counter()
  k = int(config["samples"] if samples is None else samples)
  cfg = dict(_config_dict(config), graphs_per_update=1, updates=1, updates_per_call=1,
             samples=k, minibatches=1, epochs=1)
  if policy is None:
    cfg["policy"] = config["policy"]
  trainer = ppo.make_train(cfg, [graph], [topology], policy=policy, names=[name or graph.name])
  state = trainer.init(seed, params=params)
  state, _ = trainer.update_chunk(state)  # samples K + greedy from `params`, then steps
  greedy_place, greedy_prio, greedy_fuse = jax.device_get(trainer.greedy(params))
  greedy = _score(trainer.problems, 0, greedy_place[0], greedy_prio[0],
                  None if greedy_fuse is None else greedy_fuse[0])
  best = _score(trainer.problems, 0, *_best(state, 0))
  if greedy["objective"] < best["objective"]:
    best = greedy
  return ZeroShotResult(
      greedy_objective=greedy["objective"], greedy_placement=greedy["placement"],
      greedy_priority=greedy["priority"], best_objective=best["objective"],
      best_placement=best["placement"], best_priority=best["priority"], samples=k,
      greedy_fuse=greedy["fuse"], best_fuse=best["fuse"],
      seconds=time.perf_counter() - t0)


def load_pretrained(workdir: str, template) -> Any:
  """The final policy parameters of a training run (`<workdir>/params.msgpack`)."""
  return ckpt_lib.load_params(os.path.join(workdir, PARAMS_NAME), template)


__all__: Sequence[str] = ("train", "finetune", "zero_shot", "summarize", "build_instances",
                          "load_specs",
                          "load_pretrained", "TrainResult", "FinetuneResult", "ZeroShotResult")
