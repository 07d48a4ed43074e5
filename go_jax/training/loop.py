"""The host loop around the jitted PPO updates: resume, log, checkpoint, report.

  result = train(config, workdir)     # trains config.updates updates; resumes from workdir

`train` builds the instances of the config (graph specs x topology specs, `build_instances`),
makes the trainer (`ppo.make_train`) and calls its jitted `update_chunk` until `config.updates`
updates are done. Between calls it only moves the chunk's metrics to the host and writes them
(`logging`), reports speed and ETA, and checkpoints every `checkpoint_every` updates
(`checkpoint`). A workdir that already holds a checkpoint is resumed from its newest step, with
the same config (only fields in `RESUMABLE_CHANGES` may differ, e.g. a larger `updates`; fewer
`updates` than the checkpoint's step is refused, `check_not_past`, so that config.json never
disagrees with the run's summary.json).

At the end `<workdir>/summary.json` reports, per instance, the best action found (re-simulated
on the host with `simulator.simulate`, so no number comes only from the training loop) and the
final greedy action, against the reference method's objective and the lower bound;
`<workdir>/params.msgpack` holds the final policy parameters (the file that fine-tuning,
`go_jax/training/tuning.py`, starts from). `score_action`, `best_action`, `scalar_metrics`
and `config_dict` are shared with it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import jax
import numpy as np
from absl import logging

from go_jax import distributed, harness, methods
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


def _graph_identity(spec: str):
  """`sources.spec_identity` of a graph spec; a data spec (or a spec `load_specs` will refuse
  with its own message) as its text."""
  if str(spec).partition(":")[0] in store.DATA_KINDS:
    return spec
  try:
    return sources.spec_identity(spec)
  except ValueError:
    return spec


def build_instances(config) -> Tuple[List[CompGraph], List[Topology], List[str]]:
  """(graphs, topologies, names) of every (graph, topology spec) pair of the config; an entry
  of config.graphs is a graph spec or a dataset split's data spec (`load_specs`)."""
  graph_specs, topo_specs = list(config.graphs), list(config.topologies)
  if not graph_specs or not topo_specs:
    raise ValueError("config.graphs and config.topologies must be non-empty tuples of specs")
  for field, specs in (("graphs", graph_specs), ("topologies", topo_specs)):
    repeats = [x for i, x in enumerate(specs) if x in specs[:i]]
    if repeats:  # trained as two instances and reported twice
      raise ValueError(f"config.{field} gives {repeats[0]!r} twice")
  parsed = [topology_spec.parse_topology(t) for t in topo_specs]
  # The same instance in other words ('nvlink2@mem=2e9' and 'nvlink2@mem=2000000000', graph
  # keys in another order) is refused too; a data spec is compared by its text.
  harness.same_instances(topo_specs, [harness.topology_identity(t) for t in parsed],
                         "topologies", "config")
  harness.same_instances(graph_specs, [_graph_identity(g) for g in graph_specs], "graphs",
                         "config")
  graphs, topos, names = [], [], []
  for spec in graph_specs:
    for name, graph in load_specs(spec):
      for tspec in parsed:
        graphs.append(graph)
        topos.append(topology_spec.make_topology(tspec, graph)[0])
        names.append(f"{name} @ {tspec.spec}")
  return graphs, topos, names


def config_dict(config) -> Dict[str, Any]:
  return json.loads(config.to_json()) if hasattr(config, "to_json") else dict(config)


def check_resume(workdir: str, config) -> None:
  """ValueError when the workdir's run used another config (beyond RESUMABLE_CHANGES)."""
  path = os.path.join(workdir, CONFIG_NAME)
  if not os.path.exists(path):
    return
  try:
    with open(path, encoding="utf-8") as fh:
      old = json.load(fh)
  except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
    raise ValueError(f"{path}: the run's saved config is not readable JSON ({e}); move the "
                     "workdir away to start afresh") from None
  if not isinstance(old, dict):
    raise ValueError(f"{path}: the run's saved config must be a JSON object, got "
                     f"{type(old).__name__}")
  new = config_dict(config)
  for cfg in (old, new):  # cloning settings a resumed cloning may change (imitation.py)
    if isinstance(cfg.get("imitation"), dict):
      cfg["imitation"] = imitation.resume_fields(cfg["imitation"])
  differ = sorted(k for k in set(old) | set(new)
                  if k not in RESUMABLE_CHANGES and old.get(k) != new.get(k))
  if differ:
    raise ValueError(f"workdir {workdir} holds a run with another config (fields {differ} "
                     "differ); use a new --workdir or the same config")


def check_not_past(workdir: str, step: Optional[int], total: int) -> None:
  """ValueError when the run's checkpoint (`step`) is past the config's `updates` (`total`):
  such a rerun trains nothing, and its config.json would then disagree with the run's
  summary.json and checkpoints, so it is refused before any file is written."""
  if step is not None and step > total:
    raise ValueError(f"{os.path.join(workdir, CKPT_DIR)}: the run is at update {step}, past "
                     f"the config's updates ({total}); rerun with updates >= {step} (a "
                     "finished run: the same updates) or use a new workdir")


def check_checkpoint_dir(workdir: str) -> None:
  """ValueError naming `<workdir>/checkpoints` when it exists and is not a folder (orbax would
  fail only in its save threads, after the training it should have kept)."""
  path = os.path.join(workdir, CKPT_DIR)
  if os.path.lexists(path) and not os.path.isdir(path):
    raise ValueError(f"{path}: the checkpoint folder exists and is not a folder; move it away "
                     "or use another workdir")


def check_cloned(workdir: str, config) -> None:
  """ValueError unless the cloning files in `workdir` (imitation.msgpack, the cloned parameters
  a rerun reuses, and imitation_partial.msgpack, an interrupted cloning's carry) were made with
  `config`: the workdir's config.json must exist and pass `check_resume`. `train` writes
  config.json before it clones, so a workdir of its own always has one."""
  found = [name for name in (imitation.PARAMS_NAME, imitation.PARTIAL_NAME)
           if os.path.exists(os.path.join(workdir, name))]
  if not found:
    return
  files = " and ".join(os.path.join(workdir, name) for name in found)
  if not os.path.isfile(os.path.join(workdir, CONFIG_NAME)):
    raise ValueError(f"{files}: cloning files without the run's {CONFIG_NAME}, so the config "
                     "that made them is unknown; delete them to clone afresh or use a new "
                     "--workdir")
  try:
    check_resume(workdir, config)
  except ValueError as e:
    raise ValueError(f"{files} not reused: {e}") from None


def close_outputs(logger, checkpointer) -> None:
  """Closes a run's metrics logger and checkpointer (either may be None); the checkpointer
  whatever the logger's close raised: an open orbax manager's threads hang the exit."""
  try:
    if logger is not None:
      logger.close()
  finally:
    if checkpointer is not None:
      checkpointer.close()


@dataclasses.dataclass
class TrainResult:
  trainer: ppo.Trainer
  state: ppo.TrainState
  summary: List[Dict[str, Any]]  # one row per instance, see `summarize`
  resumed_from: int  # checkpoint step the run started from (0: fresh)
  speed: Dict[str, float]  # steady-state figures of the last call


def score_action(problems, i: int, place, prio, fuse=None) -> Dict[str, Any]:
  """Instance i's action (padded arrays; fuse None for tasks that do not fuse) re-simulated on
  the host with simulator.simulate."""
  g, t = problems.graphs[i], problems.topologies[i]
  n = g.num_nodes
  place = np.asarray(place)[:n].astype(np.int64)
  prio = np.asarray(prio)[:n].astype(np.float64)
  fuse = None if fuse is None else np.asarray(fuse)[:n].astype(bool)
  scored = methods.evaluate(g, t, place, prio, problems.objective, fuse=fuse)
  return dict(scored, placement=place, priority=prio, fuse=fuse)


def best_action(state, i: int):
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
    greedy = score_action(probs, i, greedy_place[i], greedy_prio[i],
                          None if greedy_fuse is None else greedy_fuse[i])
    row.update(greedy_objective=greedy["objective"], greedy_ratio=greedy["objective"] / ref,
               greedy_feasible=greedy["feasible"])
    if np.isfinite(best_obj[i]):  # the instance was visited at least once
      best = score_action(probs, i, *best_action(state, i))
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


def scalar_metrics(metrics, u: int) -> Dict[str, float]:
  return {k: float(v[u]) for k, v in metrics.items()}


def open_checkpoints(workdir: str, config, state, keep: int):
  """(checkpointer, state, resumed step or None) of a run in `workdir`: the newest checkpoint
  restored into `state` after `check_resume`. In a multi-process run (`go_jax.distributed`)
  process 0 alone holds a checkpointer (None on the others) and reads the checkpoint, and
  every process continues from its state (broadcast): process 0 writes, all resume alike."""
  checkpointer = (ckpt_lib.Checkpointer(os.path.join(workdir, CKPT_DIR), keep=keep)
                  if distributed.is_primary() else None)

  restored = {}

  def latest() -> Optional[int]:  # process 0: the newest checkpoint that restores
    if checkpointer.latest_step() is None:
      return None
    check_resume(workdir, config)
    step, restored["state"] = checkpointer.restore_latest(state)
    return step
  try:
    step = distributed.from_primary(latest)
    if step is not None:
      state = distributed.tree_from_primary(lambda: restored["state"], state)
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
        row = scalar_metrics(metrics, u)
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
  imitation_cfg = config.get("imitation", None)
  cloning = imitation_cfg is not None and bool(imitation_cfg.get("enabled", False))
  if workdir is not None:  # before anything is built
    distributed.from_primary(lambda: check_checkpoint_dir(workdir))
    if cloning:  # the cloning files' config must match
      distributed.from_primary(lambda: check_cloned(workdir, config))
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
      check_not_past(workdir, latest, total)
      start = 0 if latest is None else int(state.step)
    init_params = config.get("init_params", None)
    if init_params and latest is None:
      if os.path.isdir(init_params):
        init_params = os.path.join(init_params, PARAMS_NAME)
      state = trainer.init(int(config.get("seed", 0)),
                           params=ckpt_lib.load_params(init_params, state.params))
    if files is not None:  # before cloning: its files are reused only under this config
      fileio.write_json(os.path.join(workdir, CONFIG_NAME), config_dict(config))
    if cloning and latest is None:
      # behaviour cloning of the best baselines first (go_jax/training/imitation.py); a
      # resumed run reloads the cloned parameters from the workdir (check_cloned)
      params = imitation.warm_start(trainer, state.params, imitation_cfg, workdir,
                                    progress=progress)
      state = trainer.init(int(config.get("seed", 0)), params=params)
    if files is not None:
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
    close_outputs(logger, checkpointer)
  rows = summarize(trainer, state)
  _log_summary(rows)
  if files is not None:
    speed_json = {k: (v if np.isfinite(v) else None) for k, v in speed.items()}
    fileio.write_json(os.path.join(workdir, SUMMARY_NAME),
                      {"updates": int(state.step), "resumed_from": start, "speed": speed_json,
                       "instances": rows})
    ckpt_lib.save_params(os.path.join(workdir, PARAMS_NAME), state.params)
  return TrainResult(trainer, state, rows, start, speed)


def load_pretrained(workdir: str, template) -> Any:
  """The final policy parameters of a training run (`<workdir>/params.msgpack`)."""
  return ckpt_lib.load_params(os.path.join(workdir, PARAMS_NAME), template)


__all__: Sequence[str] = ("train", "summarize", "build_instances", "load_specs",
                          "check_cloned", "check_checkpoint_dir", "check_not_past",
                          "close_outputs", "load_pretrained", "TrainResult", "score_action", "best_action",
                          "scalar_metrics", "config_dict")
