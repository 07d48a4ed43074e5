"""REINFORCE training of REGAL / GAS policies (`config.algorithm = "regal"`, go-jax-train).

  result = train(config, workdir)        # resumes from workdir's newest checkpoint
  trainer = make_train(config, graphs, topologies)
  state, metrics = trainer.update_chunk(trainer.init(0))   # updates_per_call updates, one jit

One update (all of it, Adam included, under one jit; `updates_per_call` of them in a scan):
G instances are drawn (all when graphs_per_update = their number), the policy reads each graph
once and K actions are sampled per graph (policy.sample); each instance gets one BRKGA seed,
and K + 1 guided BRKGA runs share it (guided.batched_best): the K sampled guides and the
uniform guide, i.e. the plain BRKGA with the same seed and budget. Reward of sample k:
(obj_unguided - obj_k) / obj_unguided, the relative improvement over BRKGA. Baseline:
"leave_one_out" (the mean reward of the instance's other K - 1 samples: a per-instance baseline
on the same seed) or "ema" (a bias-corrected moving average of the instance's reward, for K = 1).
Loss = -mean(advantage * log p(action)) - entropy_coef * mean entropy per op; gradient clipping
and Adam on the learning-rate schedule of go_jax.training.state.

Files in the workdir (as the PPO trainer's): checkpoints/ (orbax, the whole RegalState: bitwise
resumable), metrics.jsonl (one line per update), config.json, params.msgpack (final policy),
summary.json (reward_mean_recent: the mean reward of the last RECENT_UPDATES updates, read from
metrics.jsonl, so a rerun of a finished run, a resumed run and an uninterrupted one report the
same), regal_curve.png (mean improvement over BRKGA vs updates).
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

from go_jax import distributed, objectives
from go_jax.methods import evolution
from go_jax.policies.features import graph_features
from go_jax.regal import guided
from go_jax.regal import hints as hint_lib
from go_jax.regal import policy as pol
from go_jax.training import logging as train_logging
from go_jax.training import loop, runner
from go_jax.training import trainers
from go_jax.training.state import SCHEDULES
from simulator import sharding as sharding_lib
from simulator.padding import bucket, choose_chunk, pad_graph

CURVE_NAME = "regal_curve.png"
BASELINES = ("leave_one_out", "ema")
TRACES: Dict[str, int] = {"update_chunk": 0}
# Config fields of the regal trainer (anything else is a ValueError: a PPO field would be
# silently ignored otherwise). "held_out" lists graphs never trained on (docs/regal.md).
FIELDS = ("algorithm", "graphs", "topologies", "held_out", "objective", "samples",
          "graphs_per_update", "updates", "updates_per_call", "learning_rate", "lr_schedule",
          "warmup_updates", "max_grad_norm", "entropy_coef", "baseline", "ema_decay", "seed",
          "prng_impl", "checkpoint_every", "keep_checkpoints", "tensorboard", "max_seconds",
          "brkga", "policy")
BRKGA_FIELDS = ("population", "elite_frac", "mutant_frac", "elite_bias", "evaluations")


@flax.struct.dataclass
class RegalState:
  """Everything a REGAL run carries from update to update (a checkpoint saves all of it)."""
  params: Any  # policy parameters (pytree of float32 arrays)
  opt_state: Any  # optax state (clip + Adam + schedule count)
  key: jnp.ndarray  # (Kd,) uint32 raw PRNG key data (impl: Hyper.prng_impl)
  step: jnp.ndarray  # () int32 updates done
  reward_ema: jnp.ndarray  # (I,) float32 moving average of the sampled reward per instance
  reward_ema_weight: jnp.ndarray  # (I,) float32 1 - decay**visits (bias correction; 0: none)


@flax.struct.dataclass
class RegalData:
  """The stacked training instances (leading axis I, one padded size, one device count)."""
  graph: Any  # PaddedGraph, fields (I, Np) / (I, Ep) / (I, Np + 1)
  topology: Any  # Topology, fields (I, D) / (I, D, D)
  feats: Any  # GraphFeatures, fields (I, Np, ...) / (I, Ep) / (I, Dmax, ...)
  upper_bound: jnp.ndarray  # (I,) float32 objective no feasible action exceeds
  # (I, Np, Dmax + 1) int32 hinted key choice per op and slot (hints.py); None without hints
  hint: Any = None


@dataclasses.dataclass(frozen=True)
class Hyper:
  """Static settings of the jitted update (hashable)."""
  objective: str
  samples: int  # K
  graphs_per_update: int  # G
  updates_per_call: int
  total_updates: int
  learning_rate: float
  lr_schedule: str
  warmup_updates: int
  max_grad_norm: float
  entropy_coef: float
  baseline: str
  ema_decay: float
  prng_impl: str
  population: int
  elites: int
  mutants: int
  elite_bias: float
  generations: int
  num_devices: int


def check_config(config) -> Hyper:
  """The static settings of a config; ValueError naming the first bad or unknown field."""
  unknown = sorted(set(config.keys()) - set(FIELDS))
  if unknown:
    raise ValueError(f"config field(s) {unknown} are not used by the regal trainer; its "
                     f"fields: {list(FIELDS)}")
  missing = sorted(set(FIELDS) - {"held_out", "max_seconds", "algorithm"} - set(config.keys()))
  if missing:
    raise ValueError(f"regal config lacks field(s) {missing}")
  objectives.get_objective(config.objective)
  b = dict(config.brkga)
  bad = sorted(set(b) ^ set(BRKGA_FIELDS))
  if bad:
    raise ValueError(f"config.brkga must hold exactly {list(BRKGA_FIELDS)}; differs in {bad}")
  p, e, mu, bias = evolution._brkga_counts(b, "config.brkga")  # pylint: disable=protected-access
  gens = int(b["evaluations"]) // (p - e)
  if gens < 1:
    raise ValueError(f"config.brkga.evaluations ({b['evaluations']}) is below one generation "
                     f"({p - e} evaluations)")
  for name in ("samples", "graphs_per_update", "updates", "updates_per_call"):
    if int(config[name]) < 1:
      raise ValueError(f"config.{name} must be >= 1, got {config[name]}")
  if config.baseline not in BASELINES:
    raise ValueError(f"config.baseline must be one of {list(BASELINES)}, got "
                     f"{config.baseline!r}")
  if config.baseline == "leave_one_out" and int(config.samples) < 2:
    raise ValueError("config.baseline 'leave_one_out' compares samples: samples must be >= 2")
  if config.lr_schedule not in SCHEDULES:
    raise ValueError(f"config.lr_schedule must be one of {sorted(SCHEDULES)}")
  if not (config.learning_rate > 0 and config.max_grad_norm > 0):
    raise ValueError("config.learning_rate and config.max_grad_norm must be > 0")
  if not 0.0 <= config.ema_decay < 1.0:
    raise ValueError(f"config.ema_decay must be in [0, 1), got {config.ema_decay}")
  if config.prng_impl not in ("rbg", "threefry2x32"):
    raise ValueError(f"config.prng_impl must be rbg or threefry2x32, got {config.prng_impl!r}")
  pol.make_policy(config.policy)
  return Hyper(objective=config.objective, samples=int(config.samples),
               graphs_per_update=int(config.graphs_per_update),
               updates_per_call=int(config.updates_per_call),
               total_updates=int(config.updates), learning_rate=float(config.learning_rate),
               lr_schedule=config.lr_schedule, warmup_updates=int(config.warmup_updates),
               max_grad_norm=float(config.max_grad_norm),
               entropy_coef=float(config.entropy_coef), baseline=config.baseline,
               ema_decay=float(config.ema_decay), prng_impl=config.prng_impl, population=p,
               elites=e, mutants=mu, elite_bias=bias, generations=gens, num_devices=0)


def build_data(graphs, topologies, max_devices: int, objective: str,
               hints: bool = False) -> RegalData:
  """Pads and stacks the instances (with their hint choices when `hints`); ValueError when
  device counts differ or exceed the policy's max_devices."""
  if not graphs or len(graphs) != len(topologies):
    raise ValueError(f"need matching, non-empty graphs and topologies, got {len(graphs)} and "
                     f"{len(topologies)}")
  ds = sorted({t.num_devices for t in topologies})
  if len(ds) != 1 or ds[0] > max_devices:
    raise ValueError(f"all topologies must have one device count <= policy.max_devices "
                     f"({max_devices}); got {ds}")
  np_ = bucket(max(g.num_nodes for g in graphs))
  ep = bucket(max(g.num_edges for g in graphs))
  chunk = choose_chunk(np.concatenate([g.out_degree() for g in graphs]), sizes=(np_, ep))
  stack = lambda xs: jax.tree_util.tree_map(lambda *a: jnp.stack([jnp.asarray(x) for x in a]),
                                            *xs)
  obj = objectives.get_objective(objective)
  return RegalData(graph=stack([pad_graph(g, np_, ep, chunk) for g in graphs]),
                   topology=stack(list(topologies)),
                   feats=stack([graph_features(g, t, np_, ep, max_devices)
                                for g, t in zip(graphs, topologies)]),
                   upper_bound=jnp.asarray([obj.upper_bound(g, t) for g, t in
                                            zip(graphs, topologies)], jnp.float32),
                   hint=None if not hints else jnp.asarray(np.stack([
                       hint_lib.hint_choices(g, t, objective, max_devices, np_)
                       for g, t in zip(graphs, topologies)])))


def _optimizer(hp: Hyper):
  schedule = SCHEDULES[hp.lr_schedule](hp.learning_rate, hp.total_updates, hp.warmup_updates)
  return optax.chain(optax.clip_by_global_norm(hp.max_grad_norm), optax.adam(schedule))


def _forward(module, params, feats, d: int, hint=None):
  keys, bias = jax.vmap(module.apply, (None, 0, 0))(params, feats, hint)  # hint None: no axis
  return pol.used_logits(keys, d), bias  # (G, Np, D + 1, C), (G, Np, NB)


def _update(state: RegalState, data: RegalData, module, hp: Hyper):
  """One REINFORCE update (module docstring); returns (state, metrics of scalars)."""
  num_instances = data.upper_bound.shape[0]
  g, k, d = hp.graphs_per_update, hp.samples, hp.num_devices
  key = jax.random.wrap_key_data(state.key, impl=hp.prng_impl)
  key, k_pick, k_sample, k_search = jax.random.split(key, 4)
  idx = (jnp.arange(g) if g == num_instances else
         jax.random.choice(k_pick, num_instances, (g,), replace=False))
  batch = jax.tree_util.tree_map(lambda x: x[idx], data)
  mask = batch.feats.node_mask  # (G, Np)
  key_logits, bias_logits = _forward(module, state.params, batch.feats, d, batch.hint)
  kc, bc = jax.vmap(lambda kk, a, b: pol.sample(kk, a, b, k))(
      jax.random.split(k_sample, g), key_logits, bias_logits)  # (G, K, Np, D + 1), (G, K, Np)
  sampled = pol.guide_of(kc, bc, mask[:, None])
  np_ = mask.shape[-1]
  plain = guided.uniform_guide(np_, d, hp.elite_bias)
  plain = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (g, 1) + x.shape), plain)
  guides = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b], 1), sampled, plain)
  best = guided.batched_best(batch.graph, batch.topology, jax.random.split(k_search, g),
                             batch.upper_bound, guides, kind=hp.objective,
                             population=hp.population, elites=hp.elites, mutants=hp.mutants,
                             elite_bias=hp.elite_bias, generations=hp.generations)
  obj, plain_obj = best[:, :k], best[:, k:]  # (G, K), (G, 1)
  reward = (plain_obj - obj) / plain_obj
  weight = state.reward_ema_weight[idx]
  ema = jnp.where(weight > 0, state.reward_ema[idx] / jnp.maximum(weight, 1e-12), 0.0)
  if hp.baseline == "leave_one_out":
    base = (jnp.sum(reward, 1, keepdims=True) - reward) / (k - 1)
  else:
    base = ema[:, None]
  adv = jax.lax.stop_gradient(reward - base)

  def loss_fn(params):
    kl, bl = _forward(module, params, batch.feats, d, batch.hint)
    logp = jax.vmap(pol.log_prob, (None, None, 1, 1, None), 1)(kl, bl, kc, bc, mask)  # (G, K)
    ent = jnp.mean(jax.vmap(pol.entropy)(kl, bl, mask))
    return -jnp.mean(adv * logp) - hp.entropy_coef * ent, ent

  (loss, ent), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  updates, opt_state = _optimizer(hp).update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  mean_r = jnp.mean(reward, 1)
  new_w = state.reward_ema_weight.at[idx].set(hp.ema_decay * weight + (1 - hp.ema_decay))
  new_ema = state.reward_ema.at[idx].set(hp.ema_decay * state.reward_ema[idx] +
                                         (1 - hp.ema_decay) * mean_r)
  p_key = jax.nn.softmax(key_logits)[..., pol.UNIFORM]
  metrics = dict(
      loss=loss, entropy=ent, reward_mean=jnp.mean(reward),
      reward_best_sample=jnp.mean(jnp.max(reward, 1)),
      guided_objective_ratio=jnp.mean(obj / plain_obj),
      p_uniform=jnp.sum(jnp.where(mask[..., None], p_key, 0.0)) / (
          jnp.sum(mask) * (d + 1)),
      grad_norm=jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in
                                  jax.tree_util.tree_leaves(grads))))
  new_state = state.replace(params=params, opt_state=opt_state, key=jax.random.key_data(key),
                            step=state.step + 1, reward_ema=new_ema, reward_ema_weight=new_w)
  return new_state, jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), metrics)


@functools.partial(jax.jit, static_argnames=("module", "hp"))
def update_chunk(state: RegalState, data: RegalData, *, module, hp: Hyper):
  """`hp.updates_per_call` updates in one scan; metrics stacked, shape (U,) each."""
  TRACES["update_chunk"] += 1
  return jax.lax.scan(lambda s, _: _update(s, data, module, hp), state, None,
                      length=hp.updates_per_call)


@dataclasses.dataclass(frozen=True)
class Trainer:
  """A REGAL run's static parts: the module, settings and stacked instances."""
  module: pol.RegalPolicy
  hp: Hyper
  data: RegalData
  names: List[str]

  @property
  def placements_per_update(self) -> int:
    return self.hp.graphs_per_update * (self.hp.samples + 1) * self.hp.generations * (
        self.hp.population - self.hp.elites)

  def init(self, seed: int, params=None) -> RegalState:
    key = jax.random.key(seed, impl=self.hp.prng_impl)
    key, k_init = jax.random.split(key)
    feats = jax.tree_util.tree_map(lambda x: x[0], self.data.feats)
    hint = None if self.data.hint is None else self.data.hint[0]
    if params is None:
      params = jax.jit(self.module.init)(k_init, feats, hint)
    n = int(self.data.upper_bound.shape[0])
    return sharding_lib.put_replicated(RegalState(  # on every device: simulator.sharding
        params=params, opt_state=_optimizer(self.hp).init(params),
        key=jax.random.key_data(key), step=jnp.int32(0), reward_ema=jnp.zeros(n, jnp.float32),
        reward_ema_weight=jnp.zeros(n, jnp.float32)))

  def update_chunk(self, state: RegalState):
    return update_chunk(state, self.data, module=self.module, hp=self.hp)


def make_train(config, graphs, topologies, names: Optional[Sequence[str]] = None) -> Trainer:
  """The trainer of a config on the given instances (ValueError on a bad config)."""
  hp = check_config(config)
  module = pol.make_policy(config.policy)
  if hp.graphs_per_update > len(graphs):
    raise ValueError(f"config.graphs_per_update ({hp.graphs_per_update}) exceeds the number "
                     f"of instances ({len(graphs)})")
  data = build_data(graphs, topologies, module.max_devices, hp.objective, module.hints)
  hp = dataclasses.replace(hp, num_devices=int(topologies[0].num_devices))
  names = list(names) if names is not None else [g.name for g in graphs]
  return Trainer(module, hp, data, names)


def plot_curve(workdir: str) -> str:
  """regal_curve.png: mean reward (improvement over BRKGA, same seed) of the sampled guides and
  of each update's best sample vs updates, from metrics.jsonl (moving average of 10)."""
  return train_logging.plot_metric_curves(
      workdir, (("reward_mean", "mean of K samples"), ("reward_best_sample", "best of K samples")),
      "improvement over BRKGA (same seed, budget) [%]", os.path.join(workdir, CURVE_NAME),
      scale=100.0, zero_line=True)


PROGRESS_METRICS = ("reward_mean", "reward_best_sample", "p_uniform")
# the summary's reward_mean_recent: the mean reward of this many last updates, read from
# metrics.jsonl (so a rerun of a finished run, a resumed run and an uninterrupted one agree)
RECENT_UPDATES = 50


@dataclasses.dataclass
class TrainResult:
  trainer: Trainer
  state: RegalState
  summary: List[Dict[str, Any]]  # one row per instance (mean reward of the last updates)
  resumed_from: int
  speed: Dict[str, float]


def recent_reward_mean(rows, step: int, window: int = RECENT_UPDATES) -> Optional[float]:
  """The mean `reward_mean` of the last `window` updates up to `step` among `rows` (metrics
  rows with a "step"; a step logged twice counts its last row), over the finite values; None
  when there is none."""
  by_step = {int(r["step"]): r for r in rows if int(r["step"]) <= step}
  values = [train_logging.number(by_step[s].get("reward_mean"))
            for s in sorted(by_step)[-window:]]
  values = [v for v in values if np.isfinite(v)]
  return float(np.mean(values)) if values else None


def train(config, workdir: Optional[str] = None, *, progress: bool = True,
          instances=None) -> TrainResult:
  """Trains (or resumes) the REGAL run of `config` in `workdir` (None: in memory, no files).
  `instances` = (graphs, topologies, names) replaces the config's specs."""
  hp = check_config(config)
  total, per_call = hp.total_updates, hp.updates_per_call
  every = int(config.checkpoint_every)
  if total % per_call or every < per_call or every % per_call:
    raise ValueError(f"config.updates ({total}) and checkpoint_every ({every}) must be "
                     f"multiples of updates_per_call ({per_call})")
  graphs, topos, names = loop.build_instances(config) if instances is None else instances
  trainer = make_train(config, graphs, topos, names)

  def summarize(state, history):
    step = int(state.step)
    if workdir is None:  # in memory: this run's updates are all there are
      recent = recent_reward_mean(history, step)
    else:  # every update of the run, also those of earlier (interrupted or finished) runs
      path = os.path.join(workdir, train_logging.JSONL_NAME)
      recent = distributed.from_primary(
          lambda: recent_reward_mean(train_logging.read_jsonl(path), step))
    return [{"instances": len(names), "updates": step, "reward_mean_recent": recent}]

  state, summary, start, speed = runner.run(
      trainer, trainer.init(int(config.seed)), config, workdir, total=total, every=every,
      progress=progress, progress_metrics=PROGRESS_METRICS, summarize=summarize,
      instance_names=names, plot=plot_curve)
  return TrainResult(trainer, state, summary, start, speed)


def _report(result: TrainResult) -> List[str]:
  row = result.summary[0]
  recent = row["reward_mean_recent"]
  return [f"{row['instances']} training instances, {row['updates']} updates: mean improvement "
          f"over BRKGA (same seed and budget) of the last updates' samples "
          + ("n/a (no update logged)" if recent is None else f"{100 * recent:.2f}%")]


# The go-jax-train entry of `config.algorithm = "regal"` (go_jax/training/trainers.py).
SPEC = trainers.TrainerSpec(train=lambda config, workdir, progress=True: train(
    config, workdir, progress=progress), report=_report,
    curves=trainers.logged_curves(plot_curve, CURVE_NAME))
