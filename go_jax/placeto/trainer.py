"""REINFORCE training of Placeto (`config.algorithm = "placeto"`, go-jax-train).

  go-jax-train --config=experiments/configs/pretrain_placeto.py --workdir=runs/placeto
  trainer = make_train(config, graphs, topologies)
  state, metrics = trainer.update_chunk(trainer.init(0))   # updates_per_call updates, one jit

One update, all of it under one jit (`updates_per_call` of them in a `lax.scan`, no host round
trip): G instances are drawn (all when graphs_per_update equals their number), K episodes run
on each (go_jax/placeto/env.py: a `lax.scan` over the steps, one batched simulator call per
step for all G x K episodes), then the policy gradient of the paper (section 3.3):
  * return of step t: G_t = sum_{s >= t} discount**(s - t) r_s, r_s the intermediate rewards;
  * baseline of step t: the average return at that step over the instance's other K - 1
    episodes (the paper's "average of the returns at time step t over episodes"; leaving the
    episode itself out keeps the gradient unbiased);
  * loss = -mean over steps that decide (G_t - b_t) log pi(a_t | s_t) - entropy_coef * entropy,
    advantages optionally divided by their root mean square over each instance's episodes
    (`normalize_advantages`: memory penalties make raw returns span orders of magnitude, and
    one instance's scale must not drown another's);
    global-norm clipping and Adam on the learning-rate schedule of go_jax.training.state.
The log-probabilities are recomputed from the stored states in one batched pass over all
G x K x T states (the episodes themselves run without gradients).

The state also keeps the best group placement simulated so far per instance (every state of
every episode counts: an intermediate placement is a placement like any other).

Files in the workdir (as the other trainers'): checkpoints/ (orbax, the whole PlacetoState:
bitwise resumable), metrics.jsonl (one line per update), config.json, params.msgpack (final
policy), summary.json, placeto_curve.png (objective / lower bound vs updates).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Dict, List, Optional, Sequence

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging

from go_jax.placeto import env
from go_jax.placeto import model as model_lib
from go_jax.placeto.config import FIELDS, Hyper, check_config, default_config  # noqa: F401
from go_jax.training import logging as train_logging
from go_jax.training import loop, runner
from go_jax.training import trainers
from go_jax.training.state import SCHEDULES

CURVE_NAME = "placeto_curve.png"
TRACES: Dict[str, int] = {"update_chunk": 0, "greedy": 0}
PROGRESS_METRICS = ("final_ratio", "best_ratio", "improvement")


@flax.struct.dataclass
class PlacetoState:
  """Everything a Placeto run carries from update to update (a checkpoint saves all of it)."""
  params: Any  # policy parameters (pytree of float32 arrays)
  opt_state: Any  # optax state (clip + Adam + schedule count)
  key: jnp.ndarray  # (Kd,) uint32 raw PRNG key data (impl: Hyper.prng_impl)
  step: jnp.ndarray  # () int32 updates done
  best_objective: jnp.ndarray  # (I,) float32 best objective simulated per instance (inf: none)
  best_placement: jnp.ndarray  # (I, Mp) int32 the group placement that reached it


def _optimizer(hp: Hyper):
  schedule = SCHEDULES[hp.lr_schedule](hp.learning_rate, hp.total_updates, hp.warmup_updates)
  return optax.chain(optax.clip_by_global_norm(hp.max_grad_norm), optax.adam(schedule))


def returns(rewards, discount: float):
  """(G, K, T) discounted returns-to-go of (G, K, T) rewards."""
  def back(acc, r):
    acc = r + discount * acc
    return acc, acc
  _, out = jax.lax.scan(back, jnp.zeros(rewards.shape[:2], rewards.dtype),
                        jnp.moveaxis(rewards, 2, 0), reverse=True)
  return jnp.moveaxis(out, 0, 2)


def step_logits(module, params, batch: env.Instances, placements):
  """(G, K, T, Dmax) logits of every stored state: placements (G, K, T, Mp) before each step,
  visited flags and current groups from the batch's visiting order."""
  g, k, t = placements.shape[:3]
  visited = env.visited_before(batch, jnp.arange(t))  # (G, T, Mp)
  visited = jnp.broadcast_to(visited[:, None], placements.shape)
  current = jnp.broadcast_to(batch.order[:, None, :t], (g, k, t))
  return jax.vmap(lambda net, p, vis, cur: model_lib.apply_states(module, params, net, p, vis,
                                                                   cur))(
      batch.net, placements, visited, current)


def _update(state: PlacetoState, data: env.Instances, module, hp: Hyper):
  """One REINFORCE update (module docstring); returns (state, metrics of scalars)."""
  n = data.scale.shape[0]
  g, k = hp.graphs_per_update, hp.samples
  key = jax.random.wrap_key_data(state.key, impl=hp.prng_impl)
  key, k_pick, k_ep = jax.random.split(key, 3)
  idx = (jnp.arange(g) if g == n else
         jax.random.choice(k_pick, n, (g,), replace=False))
  batch = jax.tree_util.tree_map(lambda x: x[idx], data)
  ep = env.run_episodes(module, state.params, batch, k_ep, samples=k, init=hp.init,
                        greedy=False, objective=hp.objective)
  t = ep.actions.shape[-1]
  ret = returns(ep.rewards, hp.discount)  # (G, K, T)
  base = (jnp.sum(ret, 1, keepdims=True) - ret) / (k - 1)
  mask = jnp.broadcast_to(batch.decides[:, None, :t], ret.shape).astype(jnp.float32)
  count = jnp.maximum(jnp.sum(mask), 1.0)
  adv = (ret - base) * mask
  if hp.normalize_advantages:  # per instance: one instance's scale must not drown another's
    per = jnp.maximum(jnp.sum(mask, (1, 2), keepdims=True), 1.0)
    adv = adv / (jnp.sqrt(jnp.sum(adv * adv, (1, 2), keepdims=True) / per) + 1e-8)
  adv = jax.lax.stop_gradient(adv)
  states = ep.placements[:, :, :t]

  def loss_fn(params):
    logits = step_logits(module, params, batch, states)
    logp_all = jax.nn.log_softmax(logits, -1)
    logp = jnp.take_along_axis(logp_all, ep.actions[..., None], -1)[..., 0]
    p = jnp.exp(logp_all)
    ent = -jnp.sum(jnp.where(p > 0, p * logp_all, 0.0), -1)
    ent = jnp.sum(ent * mask) / count
    return -jnp.sum(adv * logp) / count - hp.entropy_coef * ent, ent

  (loss, ent), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  updates, opt_state = _optimizer(hp).update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  flat = ep.objectives.reshape(g, -1)  # every state of every episode
  j = jnp.argmin(flat, 1)
  found = jnp.take_along_axis(flat, j[:, None], 1)[:, 0]
  found_place = jnp.take_along_axis(ep.placements.reshape(g, flat.shape[1], -1),
                                    j[:, None, None], 1)[:, 0]
  old = state.best_objective[idx]
  better = found < old
  best_obj = state.best_objective.at[idx].set(jnp.where(better, found, old))
  best_place = state.best_placement.at[idx].set(
      jnp.where(better[:, None], found_place, state.best_placement[idx]))
  scale = batch.scale[:, None]
  final = ep.objectives[..., -1]
  metrics = dict(
      loss=loss, entropy=ent, improvement=jnp.mean(jnp.sum(ep.rewards, -1)),
      final_ratio=jnp.mean(final / scale), initial_ratio=jnp.mean(ep.objectives[..., 0] / scale),
      best_ratio=jnp.mean(best_obj[idx] / batch.scale),
      final_oom=jnp.mean((final > batch.upper_bound[:, None]).astype(jnp.float32)),
      grad_norm=jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in
                             jax.tree_util.tree_leaves(grads))))
  new_state = state.replace(params=params, opt_state=opt_state, key=jax.random.key_data(key),
                            step=state.step + 1, best_objective=best_obj,
                            best_placement=best_place)
  return new_state, jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), metrics)


@functools.partial(jax.jit, static_argnames=("module", "hp"))
def update_chunk(state: PlacetoState, data: env.Instances, *, module, hp: Hyper):
  """`hp.updates_per_call` updates in one scan; metrics stacked, shape (U,) each."""
  TRACES["update_chunk"] += 1
  return jax.lax.scan(lambda s, _: _update(s, data, module, hp), state, None,
                      length=hp.updates_per_call)


@functools.partial(jax.jit, static_argnames=("module", "init", "objective"))
def greedy_episodes(params, data: env.Instances, key, *, module, init: str, objective: str):
  """One greedy episode per instance of `data` (the most likely device at every step)."""
  TRACES["greedy"] += 1
  return env.run_episodes(module, params, data, key, samples=1, init=init, greedy=True,
                          objective=objective)


@dataclasses.dataclass(frozen=True)
class Trainer:
  """A Placeto run's static parts: the module, settings, host and stacked instances."""
  module: model_lib.PlacetoPolicy
  hp: Hyper
  data: env.Instances
  instances: List[env.Instance]
  names: List[str]

  @property
  def steps(self) -> int:
    """T: steps of an episode (the padded group count)."""
    return int(self.data.order.shape[-1])

  @property
  def placements_per_update(self) -> int:
    """Simulated placements per update: every state of every episode."""
    return self.hp.graphs_per_update * self.hp.samples * (self.steps + 1)

  def init(self, seed: int, params=None) -> PlacetoState:
    key = jax.random.key(seed, impl=self.hp.prng_impl)
    key, k_init = jax.random.split(key)
    if params is None:
      params = init_params(self.module, self.data, k_init)
    n, mp = self.data.order.shape
    return PlacetoState(params=params, opt_state=_optimizer(self.hp).init(params),
                        key=jax.random.key_data(key), step=jnp.int32(0),
                        best_objective=jnp.full(n, jnp.inf, jnp.float32),
                        best_placement=jnp.zeros((n, mp), jnp.int32))

  def update_chunk(self, state: PlacetoState):
    return update_chunk(state, self.data, module=self.module, hp=self.hp)

  def greedy(self, params, seed: int = 0) -> env.Episodes:
    """One greedy episode per instance (fields (I, 1, ...))."""
    return greedy_episodes(params, self.data, jax.random.key(seed), module=self.module,
                           init=self.hp.init, objective=self.hp.objective)


@functools.partial(jax.jit, static_argnums=0)
def _init(module, key, net, placement, visited, current):
  return module.init(key, net, placement, visited, current)


def init_params(module, data: env.Instances, key):
  """Fresh parameters of `module` (shapes do not depend on the graph's size)."""
  net = jax.tree_util.tree_map(lambda x: x[0], data.net)
  mp = data.order.shape[-1]
  return _init(module, key, net, jnp.zeros(mp, jnp.int32), jnp.zeros(mp, bool), jnp.int32(0))


def template_params(policy_config):
  """The parameters' structure (ShapeDtypeStruct leaves) of a policy config, for loading."""
  from simulator import preset  # pylint: disable=g-import-not-at-top
  from simulator.graph import CompGraph  # pylint: disable=g-import-not-at-top
  module = model_lib.make_policy(policy_config)
  graph = CompGraph(cost=np.ones(2), senders=[0], receivers=[1], out_bytes=np.ones(2),
                    name="template")
  _, data = env.build([graph], [preset("nvlink2")], 2, "makespan", module.max_devices)
  net = jax.tree_util.tree_map(lambda x: x[0], data.net)
  mp = data.order.shape[-1]
  return module, jax.eval_shape(module.init, jax.random.key(0), net,
                                jnp.zeros(mp, jnp.int32), jnp.zeros(mp, bool), jnp.int32(0))


def make_train(config, graphs, topologies, names: Optional[Sequence[str]] = None,
               sizes=None) -> Trainer:
  """The trainer of a config on the given instances (ValueError on a bad config)."""
  hp = check_config(config)
  module = model_lib.make_policy(config.policy)
  if hp.graphs_per_update > len(graphs):
    raise ValueError(f"config.graphs_per_update ({hp.graphs_per_update}) exceeds the number "
                     f"of instances ({len(graphs)})")
  instances, data = env.build(graphs, topologies, hp.groups, hp.objective, module.max_devices,
                              names, sizes)
  return Trainer(module, hp, data, instances, [i.name for i in instances])


def plot_curve(workdir: str) -> str:
  """placeto_curve.png: the episodes' final objective and the best so far, over the lower
  bound, vs updates (from metrics.jsonl; moving average of 10)."""
  return train_logging.plot_metric_curves(
      workdir, (("final_ratio", "episode's final placement"),
                ("best_ratio", "best placement so far (batch)")),
      "objective / lower bound", os.path.join(workdir, CURVE_NAME))


@dataclasses.dataclass
class TrainResult:
  trainer: Trainer
  state: PlacetoState
  summary: List[Dict[str, Any]]  # one row per instance: greedy and best objective / bound
  resumed_from: int
  speed: Dict[str, float]


def summarize(trainer: Trainer, state: PlacetoState) -> List[Dict[str, Any]]:
  """Per instance: the greedy episode's final objective and the best found, over the bound.
  An instance no update has drawn yet (a run shorter than the instance list) has no best:
  None (null in summary.json, which is strict JSON), not the state's inf."""
  ep = jax.device_get(trainer.greedy(state.params))
  best = np.asarray(jax.device_get(state.best_objective))
  rows = []
  for i, inst in enumerate(trainer.instances):
    greedy = float(ep.objectives[i, 0, -1])
    found = float(best[i]) if np.isfinite(best[i]) else None
    rows.append({"instance": inst.name, "lower_bound": inst.lower_bound,
                 "greedy_objective": greedy, "greedy_ratio": greedy / inst.lower_bound,
                 "best_objective": found,
                 "best_ratio": None if found is None else found / inst.lower_bound})
  return rows


def train(config, workdir: Optional[str] = None, *, progress: bool = True,
          instances=None) -> TrainResult:
  """Trains (or resumes) the Placeto run of `config` in `workdir` (None: in memory, no files).
  `instances` = (graphs, topologies, names) replaces the config's specs."""
  hp = check_config(config)
  total, per_call = int(config.updates), hp.updates_per_call
  every = int(config.checkpoint_every)
  if total % per_call or every < per_call or every % per_call:
    raise ValueError(f"config.updates ({total}) and checkpoint_every ({every}) must be "
                     f"multiples of updates_per_call ({per_call})")
  graphs, topos, names = loop.build_instances(config) if instances is None else instances
  trainer = make_train(config, graphs, topos, names)
  logging.info("placeto: %d instances, %d groups (T = %d steps), %d ops padded, %d episodes "
               "x %d instances per update", len(trainer.names), hp.groups, trainer.steps,
               int(trainer.data.group_of.shape[-1]), hp.samples, hp.graphs_per_update)
  state, summary, start, speed = runner.run(
      trainer, trainer.init(int(config.seed)), config, workdir, total=total, every=every,
      progress=progress, progress_metrics=PROGRESS_METRICS,
      summarize=lambda state, history: summarize(trainer, state),
      instance_names=trainer.names, plot=plot_curve)
  return TrainResult(trainer, state, summary, start, speed)


def _report(result: TrainResult) -> List[str]:
  return [f"{row['instance']}: greedy episode x{row['greedy_ratio']:.4f} of the lower bound, "
          + ("not drawn yet" if row["best_ratio"] is None
             else f"best found x{row['best_ratio']:.4f}") for row in result.summary]


# The go-jax-train entry of `config.algorithm = "placeto"` (go_jax/training/trainers.py).
SPEC = trainers.TrainerSpec(train=lambda config, workdir, progress=True: train(
    config, workdir, progress=progress), report=_report,
    curves=trainers.logged_curves(plot_curve, CURVE_NAME))
