"""Imitation warm start: behaviour cloning of the best baseline solution before PPO.

A hint-free GO starts from random parameters; PPO alone, in a CPU-sized budget, leaves it out of
memory on held-out graphs (BENCHMARKS.md, 2026-11-21: zero-shot 6-30x the best baseline). The
recipe of DOPPLER (Yao et al., ICLR 2026) is to clone good solutions first and then improve on
them with RL. Here, for every training instance:

1. the teachers (`config.imitation.teachers`, registered placement / joint methods: by default
   the list schedulers, METIS and the expert split) solve it and the best by the objective
   (infeasible ranks last) is the target; with `prefer`, the preferred teacher's solution is
   the target wherever it is memory-feasible (imitation_targets.py);
2. the target placement is relabelled canonically where the topology allows it: devices in the
   order of their first use along the topological order, but only when that permutation maps
   the topology onto itself (same speeds, capacities, overheads and links), so the simulated
   result is unchanged and identical devices do not teach the policy arbitrary labels;
   An instance whose best target is out of memory is not cloned (weight 0);
3. the target's priority becomes a priority level per op: its rank among the op priorities,
   cut into the policy's L levels (higher level runs first, within a level the critical path:
   the tie-break of `problems`);
4. `steps` Adam steps of cross-entropy between the policy's heads and the targets, counted over
   the decisions `rollout.log_prob` counts (placement over real colocation roots, levels over
   real nodes), on `graphs_per_step` instances drawn at random per step, all under one jit
   (`lax.scan` over `steps_per_call` steps per call). Where the policy has a load state
   (policies/load.py), its placement logits are decoded against the load of the target
   placement (teacher forcing, mode "forced"): what its greedy decode sees when it follows the
   teacher. Label smoothing keeps the cloned policy sampling around the target (PPO needs that
   spread) and curbs memorising.

The resulting parameters start PPO (`loop.train`); they are written to
`<workdir>/imitation.msgpack` (atomically) and a resumed run reloads them instead of cloning
again, so a resumed run continues bit-exactly. Cloning itself is resumable: every
`checkpoint_every` steps, and when interrupted (Ctrl-C), the cloning carry (parameters, Adam
state, PRNG key, step), the targets and the history so far are written atomically to
`<workdir>/imitation_partial.msgpack`; a rerun continues from there (bit-exactly: the targets
are read back, not rebuilt) and deletes the file once the cloned parameters are saved. A
partial file of other cloning settings or other instances is refused with a ValueError, and
`loop.train` reuses either file only under the workdir's own config (`loop.check_cloned`).
`<workdir>/imitation.json` records per instance the teacher, its objective and the objective of
the target action as the policy expresses it (quantised levels), and the final cross-entropies
and accuracies.
"""

from __future__ import annotations

import functools
import json
import os
import time
from typing import Any, Dict, List, Optional, Tuple

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import logging
from flax import serialization

from go_jax import distributed
from go_jax.training import checkpoint as ckpt_lib
from go_jax.training import rollout
# the targets (host side) live in imitation_targets.py; re-exported here
from go_jax.training.imitation_targets import (Targets, build_targets,  # noqa: F401
                                               canonical_devices, choose_target,
                                               priority_levels)
from go_jax.training.problems import TrainData
from simulator import fileio

PARAMS_NAME, SUMMARY_NAME = "imitation.msgpack", "imitation.json"
PARTIAL_NAME = "imitation_partial.msgpack"  # the cloning carry of an unfinished run
# imitation config fields a resumed cloning may change (the rest must match the partial file)
RESUMABLE_CHANGES = ("max_seconds", "checkpoint_every")
# imitation config fields added after runs were saved without them, each with the default that
# means what those runs did: at that value the field is left out of the resume checks
ADDED_DEFAULTS = {"on_policy": 0.0, "prefer": ""}
DEFAULT_TEACHERS = ("heft", "m_etf", "m_sct", "metis", "expert")
TRACES: Dict[str, int] = {"bc_chunk": 0}


def default_config() -> ml_collections.ConfigDict:
  """`config.imitation` of a training run (off unless `enabled`)."""
  c = ml_collections.ConfigDict()
  c.enabled = False
  c.teachers = DEFAULT_TEACHERS  # placement / joint methods of the registry
  # a teacher whose memory-feasible solution is the target wherever it has one (elsewhere the
  # best of all teachers); "" (default): the best teacher on every instance. One teacher's rule
  # clones better than the per-instance winner of several (BENCHMARKS.md, 2026-12-07)
  c.prefer = ""
  c.steps = 400  # Adam steps (a multiple of steps_per_call)
  c.steps_per_call = 20
  c.graphs_per_step = 8  # instances per step (capped at the number of instances)
  c.learning_rate = 1e-3
  c.priority_weight = 1.0  # weight of the level cross-entropy (joint task)
  # share of each target spread uniformly over the choices: keeps the cloned policy from
  # collapsing onto one action, so PPO still samples around it, and curbs memorising
  c.label_smoothing = 0.1
  # share of each step's instances whose load state is the policy's own greedy decode rather
  # than the target's (DAgger's states, Ross et al. 2011; labels stay the teachers'): teacher
  # forcing alone never shows the policy the loads its own mistakes lead to
  c.on_policy = 0.0
  c.max_seconds = ml_collections.config_dict.placeholder(float)  # wall budget of the cloning
  c.checkpoint_every = 200  # steps between writes of the cloning carry (resumable cloning)
  c.seed = 0
  return c


# ------------------------------------------------------------------ cloning (one jit)
@flax.struct.dataclass
class CloneState:
  """Behaviour cloning's carry."""
  params: Any  # policy parameters
  opt_state: Any  # optax Adam state
  key: jnp.ndarray  # (Kd,) uint32 raw PRNG key data
  step: jnp.ndarray  # () int32 steps done


def _losses(params, module, task: rollout.Task, data: TrainData, targets: Targets,
            smoothing: float = 0.0, state_placement: Optional[jnp.ndarray] = None):
  """(placement cross-entropy, level cross-entropy, placement accuracy, level accuracy), each
  a mean over the decisions the task counts; the cross-entropies with label smoothing (a
  `smoothing` share of the target spread uniformly over the real devices / the levels).
  `state_placement` (G, Np): the placement whose load the load state counts (default: the
  target's, teacher forcing)."""
  if getattr(module, "load_state", False):  # teacher forcing: the load of the target placement
    state_pl = targets.placement if state_placement is None else state_placement
    out = jax.vmap(lambda f, pl: module.apply(params, f, placement=pl))(data.feats, state_pl)
  else:
    out = jax.vmap(module.apply, in_axes=(None, 0))(params, data.feats)
  real = data.feats.node_mask
  w = targets.weight[:, None]
  place_mask = (data.decides_place & real).astype(jnp.float32) * w
  level_mask = real.astype(jnp.float32) * w
  lp = jax.nn.log_softmax(out.placement_logits, -1)
  ll = jax.nn.log_softmax(out.priority_logits, -1)
  dev = data.feats.device_mask[:, None, :].astype(jnp.float32)  # (G, 1, Dmax)
  uniform_p = -jnp.sum(jnp.where(dev > 0, lp, 0.0), -1) / jnp.maximum(jnp.sum(dev, -1), 1.0)
  ce_p = ((1.0 - smoothing) * -jnp.take_along_axis(lp, targets.placement[..., None], -1)[..., 0]
          + smoothing * uniform_p)
  ce_l = ((1.0 - smoothing) * -jnp.take_along_axis(ll, targets.level[..., None], -1)[..., 0]
          + smoothing * -jnp.mean(ll, -1))
  acc_p = (jnp.argmax(lp, -1) == targets.placement).astype(jnp.float32)
  acc_l = (jnp.argmax(ll, -1) == targets.level).astype(jnp.float32)

  def mean(x, m):
    return jnp.sum(x * m) / jnp.maximum(jnp.sum(m), 1.0)

  return (mean(ce_p, place_mask), mean(ce_l, level_mask), mean(acc_p, place_mask),
          mean(acc_l, level_mask))


@functools.partial(jax.jit, static_argnames=("module", "task_name", "graphs", "steps", "lr",
                                             "priority_weight", "smoothing", "prng_impl",
                                             "total", "on_policy"))
def bc_chunk(state: CloneState, data: TrainData, targets: Targets, *, module, task_name: str,
             graphs: int, steps: int, lr: float, priority_weight: float, smoothing: float,
             prng_impl: str, total: int, on_policy: float = 0.0):
  """`steps` cloning steps in one lax.scan; metrics stacked, shape (steps,) each. With
  `on_policy` > 0 each picked instance is, with a probability that ramps from 0 to `on_policy`
  over the first half of the `total` steps, decoded against the load of the policy's own greedy
  placement (no gradient through it) instead of the target's."""
  TRACES["bc_chunk"] += 1
  task = rollout.get_task(task_name)
  opt = _optimizer(lr, total)
  num = data.upper_bound.shape[0]
  w_p = 1.0 if task.learns_placement else 0.0
  w_l = priority_weight if task.learns_priority else 0.0

  def loss_fn(params, d, tg, state_pl):
    ce_p, ce_l, acc_p, acc_l = _losses(params, module, task, d, tg, smoothing, state_pl)
    return w_p * ce_p + w_l * ce_l, {"ce_placement": ce_p, "ce_level": ce_l,
                                     "acc_placement": acc_p, "acc_level": acc_l}

  def step(s: CloneState, _):
    key = jax.random.wrap_key_data(s.key, impl=prng_impl)
    key, k_pick = jax.random.split(key)
    idx = (jnp.arange(num) if graphs == num else
           jax.random.choice(k_pick, num, (graphs,), replace=False))
    d = jax.tree_util.tree_map(lambda x: x[idx], data)
    tg = jax.tree_util.tree_map(lambda x: x[idx], targets)
    state_pl = None
    if on_policy > 0 and getattr(module, "load_state", False):
      own = jax.vmap(module.apply, in_axes=(None, 0))(jax.lax.stop_gradient(s.params), d.feats)
      own = jnp.argmax(own.greedy_placement_logits, -1).astype(jnp.int32)  # (G, Np)
      # fold_in, not split: with on_policy = 0 the key stream is the one of plain cloning
      # the share ramps up from 0 over the first half of the steps (scheduled sampling, Bengio et
      # al. 2015): early on the policy's own decode is noise, and its loads would teach nothing
      share = on_policy * jnp.minimum(1.0, 2.0 * s.step.astype(jnp.float32) / max(total, 1))
      pick = jax.random.bernoulli(jax.random.fold_in(k_pick, 1), share, (idx.shape[0],))
      state_pl = jnp.where(pick[:, None], own, tg.placement)
    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(s.params, d, tg, state_pl)
    updates, opt_state = opt.update(grads, s.opt_state, s.params)
    new = CloneState(params=optax.apply_updates(s.params, updates), opt_state=opt_state,
                     key=jax.random.key_data(key), step=s.step + 1)
    return new, dict(aux, loss=loss)

  return jax.lax.scan(step, state, None, length=steps)


def _optimizer(lr: float, total: int) -> optax.GradientTransformation:
  return optax.chain(optax.clip_by_global_norm(1.0),
                     optax.adam(optax.cosine_decay_schedule(lr, max(total, 1), alpha=0.1)))


def check_config(cfg) -> None:
  """ValueError naming the first bad `config.imitation` field."""
  if int(cfg.steps) < 1 or int(cfg.steps_per_call) < 1 or int(cfg.steps) % int(
      cfg.steps_per_call):
    raise ValueError(f"imitation.steps ({cfg.steps}) must be a positive multiple of "
                     f"imitation.steps_per_call ({cfg.steps_per_call})")
  if int(cfg.graphs_per_step) < 1:
    raise ValueError(f"imitation.graphs_per_step must be >= 1, got {cfg.graphs_per_step}")
  if not float(cfg.learning_rate) > 0:
    raise ValueError(f"imitation.learning_rate must be > 0, got {cfg.learning_rate}")
  if not 0.0 <= float(cfg.get("label_smoothing", 0.0)) < 1.0:
    raise ValueError(f"imitation.label_smoothing must be in [0, 1), got {cfg.label_smoothing}")
  if not 0.0 <= float(cfg.get("on_policy", 0.0)) <= 1.0:
    raise ValueError(f"imitation.on_policy must be in [0, 1], got {cfg.on_policy}")
  if not list(cfg.teachers):
    raise ValueError("imitation.teachers must name at least one placement or joint method")
  prefer = cfg.get("prefer", "")
  if prefer and prefer not in tuple(cfg.teachers):
    raise ValueError(f"imitation.prefer must be one of imitation.teachers {list(cfg.teachers)} "
                     f"or '', got {prefer!r}")
  if cfg.get("max_seconds", None) is not None and not float(cfg.max_seconds) > 0:
    raise ValueError(f"imitation.max_seconds must be > 0, got {cfg.max_seconds}")
  if int(cfg.get("checkpoint_every", 1)) < 1:
    raise ValueError(f"imitation.checkpoint_every must be >= 1, got {cfg.checkpoint_every}")


def resume_fields(cfg) -> Dict[str, Any]:
  """The imitation settings (a mapping) a resumed run must match: all but RESUMABLE_CHANGES
  and the ADDED_DEFAULTS fields at their defaults (a run saved before they existed)."""
  return {k: v for k, v in cfg.items() if k not in RESUMABLE_CHANGES and not (
      k in ADDED_DEFAULTS and v == ADDED_DEFAULTS[k])}


def _fingerprint(trainer, cfg) -> str:
  """What a partial cloning file must match to be resumed: the imitation settings (less
  RESUMABLE_CHANGES), the instances and their padded size, as sorted JSON."""
  fields = {f"imitation.{k}": (list(v) if isinstance(v, (list, tuple)) else v)
            for k, v in resume_fields(cfg).items()}
  return json.dumps(dict(fields, instances=list(trainer.problems.names),
                         nodes_padded=int(trainer.problems.num_nodes_padded),
                         task=trainer.hp.task, prng_impl=trainer.hp.prng_impl),
                    sort_keys=True, default=str)


def _save_partial(path: str, state: CloneState, targets: Targets, *, fingerprint: str,
                  rows, history, target_seconds: float, clone_seconds: float) -> None:
  """The cloning carry, targets and history so far, atomically (flax msgpack)."""
  blob = {"state": serialization.to_state_dict(jax.device_get(state)),
          "targets": serialization.to_state_dict(jax.device_get(targets)),
          "meta": json.dumps({"fingerprint": fingerprint, "rows": rows, "history": history,
                              "target_seconds": target_seconds,
                              "clone_seconds": clone_seconds})}
  with fileio.atomic_open(path, "wb", make_dirs=True) as fh:
    fh.write(serialization.msgpack_serialize(blob))


def _load_partial(path: str, state: CloneState, targets: Targets, fingerprint: str):
  """(state, targets, meta) of a partial cloning file shaped like the templates; ValueError
  naming the file when it is unreadable or was written for other settings / instances."""
  try:
    with open(path, "rb") as fh:
      blob = serialization.msgpack_restore(fh.read())
    meta = json.loads(blob["meta"])
    saved = json.loads(meta["fingerprint"])
  except Exception as e:  # pylint: disable=broad-except  (any corruption: one clear message)
    raise ValueError(f"{path}: not a readable partial cloning file ({e}); delete it to clone "
                     "from the start") from e
  want = json.loads(fingerprint)
  for key in want:
    if saved.get(key) != want[key]:
      raise ValueError(f"{path}: written for another '{key}' ({saved.get(key)!r}, now "
                       f"{want[key]!r}); delete it to clone from the start")

  def restore(template, sd, what):
    out = serialization.from_state_dict(template, sd)
    for a, b in zip(jax.tree_util.tree_leaves(template), jax.tree_util.tree_leaves(out)):
      if np.shape(a) != np.shape(b):
        raise ValueError(f"{path}: {what} has a leaf of shape {np.shape(b)}, expected "
                         f"{np.shape(a)}; delete it to clone from the start")
    return jax.tree_util.tree_map(jnp.asarray, out)

  return (restore(state, blob["state"], "the cloning state"),
          restore(targets, blob["targets"], "the targets"), meta)


def clone(trainer, params, cfg, *, progress: bool = True, partial_path: Optional[str] = None
          ) -> Tuple[Any, Dict[str, Any]]:
  """Behaviour cloning of the teachers' best solutions from `params`; returns (params, report).

  `trainer` is a `ppo.Trainer` (its problems, policy and task); `cfg` the `imitation` config.
  `partial_path`: where the cloning carry is kept (module docstring; None: not kept); when the
  file exists, cloning continues from it.
  """
  check_config(cfg)
  task = rollout.get_task(trainer.hp.task)
  module = trainer.policy.module
  levels = int(getattr(module, "priority_levels", 8))
  steps, per_call = int(cfg.steps), int(cfg.steps_per_call)
  every = int(cfg.get("checkpoint_every", 200))
  graphs = min(int(cfg.graphs_per_step), trainer.problems.num_instances)
  lr = float(cfg.learning_rate)
  impl = trainer.hp.prng_impl
  key = jax.random.key(int(cfg.get("seed", 0)), impl=impl)
  state = CloneState(params=params, opt_state=_optimizer(lr, steps).init(params),
                     key=jax.random.key_data(key), step=jnp.int32(0))
  fingerprint = _fingerprint(trainer, cfg)
  t0 = time.perf_counter()
  spent = 0.0  # seconds of earlier (interrupted) runs of this cloning
  history: List[Dict[str, float]] = []
  # Multi-process runs: process 0 keeps the file; its contents reach every process.
  writer = partial_path if partial_path is not None and distributed.is_primary() else None
  if partial_path is not None and distributed.from_primary(
      lambda: os.path.exists(partial_path)):
    n, np_ = trainer.problems.num_instances, trainer.problems.num_nodes_padded
    blank = Targets(placement=jnp.zeros((n, np_), jnp.int32),
                    level=jnp.zeros((n, np_), jnp.int32), weight=jnp.zeros(n, jnp.float32))
    read = functools.lru_cache(None)(lambda: _load_partial(partial_path, state, blank,
                                                           fingerprint))  # read once
    loaded = distributed.from_primary(lambda: read()[2])
    state, targets = distributed.tree_from_primary(lambda: read()[:2], (state, blank))
    rows, history = loaded["rows"], loaded["history"]
    target_seconds = loaded["target_seconds"]
    spent = loaded["target_seconds"] + loaded["clone_seconds"]
    logging.info("imitation: resuming the cloning of %s at step %d/%d", partial_path,
                 int(state.step), steps)
  else:
    targets, rows = build_targets(trainer.problems, trainer.data, tuple(cfg.teachers), levels,
                                  task, progress, prefer=cfg.get("prefer", ""))
    target_seconds = time.perf_counter() - t0
  clone_before = spent - target_seconds  # cloning seconds of earlier runs
  max_seconds = cfg.get("max_seconds", None)
  deadline = None if max_seconds is None else t0 + float(max_seconds) - spent
  t_clone = time.perf_counter()
  saved = first = int(state.step)

  def save(s):
    nonlocal saved
    if writer is not None and int(s.step) != saved:
      _save_partial(writer, s, targets, fingerprint=fingerprint, rows=rows, history=history,
                    target_seconds=target_seconds,
                    clone_seconds=clone_before + time.perf_counter() - t_clone)
      saved = int(s.step)

  try:
    while int(state.step) < steps:
      state, metrics = bc_chunk(state, trainer.data, targets, module=module,
                                task_name=trainer.hp.task, graphs=graphs, steps=per_call,
                                lr=lr, priority_weight=float(cfg.get("priority_weight", 1.0)),
                                smoothing=float(cfg.get("label_smoothing", 0.0)),
                                prng_impl=impl, total=steps,
                                on_policy=float(cfg.get("on_policy", 0.0)))
      metrics = jax.device_get(metrics)
      done = int(state.step)
      last = {k: float(v[-1]) for k, v in metrics.items()}
      elapsed = time.perf_counter() - t_clone
      history.append(dict(last, step=done, seconds=clone_before + elapsed))
      if progress:
        rate = (done - first) / max(elapsed, 1e-9)  # this run's steps only
        logging.info("imitation: step %d/%d (%.2f steps/s, ETA %.0f s): ce placement %.3f "
                     "(acc %.3f), ce level %.3f (acc %.3f)", done, steps, rate,
                     (steps - done) / max(rate, 1e-9), last["ce_placement"],
                     last["acc_placement"], last["ce_level"], last["acc_level"])
      if done < steps and done - saved >= every:
        save(state)
      if deadline is not None and distributed.agree(time.perf_counter() >= deadline):
        logging.info("imitation: wall-clock budget of %.0f s spent after %d steps",
                     float(max_seconds), done)
        break
  except KeyboardInterrupt:
    save(state)  # the newest finished chunk: a rerun continues from it
    if writer is not None:
      logging.warning("interrupted: cloning saved at step %d in %s; rerun the command to "
                      "resume", int(state.step), writer)
    raise
  report = {"teachers": list(cfg.teachers), "steps": int(state.step),
            "target_seconds": target_seconds,
            "clone_seconds": clone_before + time.perf_counter() - t_clone, "instances": rows,
            "history": history}
  return state.params, report


def warm_start(trainer, params, cfg, workdir: Optional[str], *, progress: bool = True):
  """The cloned parameters of a run: read from `<workdir>/imitation.msgpack` when an earlier
  (interrupted) run of this workdir finished cloning, else cloned now (continuing from
  `<workdir>/imitation_partial.msgpack` where an interrupted cloning left one) and saved."""
  path = None if workdir is None else os.path.join(workdir, PARAMS_NAME)
  # Multi-process runs (go_jax.distributed): process 0's file decides and is read by process 0.
  if path is not None and distributed.from_primary(lambda: os.path.exists(path)):
    logging.info("imitation: loading the cloned parameters of %s", path)
    return distributed.tree_from_primary(lambda: ckpt_lib.load_params(path, params), params)
  partial = None if workdir is None else os.path.join(workdir, PARTIAL_NAME)
  params, report = clone(trainer, params, cfg, progress=progress, partial_path=partial)
  if workdir is not None and distributed.is_primary():  # process 0 writes
    fileio.write_json(os.path.join(workdir, SUMMARY_NAME), report)
    ckpt_lib.save_params(path, params)
    if os.path.exists(partial):  # the cloned parameters are saved: the carry is done with
      os.remove(partial)
  return params


__all__ = ["default_config", "clone", "warm_start", "build_targets", "canonical_devices",
           "choose_target", "priority_levels", "Targets", "CloneState", "PARAMS_NAME",
           "SUMMARY_NAME", "PARTIAL_NAME", "resume_fields"]
