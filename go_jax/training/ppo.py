"""PPO for GO-style policies: many updates per call, all under ONE jit (docs/design.md section 8).

  trainer = make_train(config, graphs, topologies)        # host setup (padding, references)
  state = trainer.init(seed)                              # TrainState
  state, metrics = trainer.update_chunk(state)            # config.updates_per_call updates

`update_chunk` is one jitted `lax.scan` over `updates_per_call` PPO updates; the host only logs,
checkpoints and shows progress between calls (`go_jax.training.loop`). Everything an update
needs is in its arguments (the TrainState, the stacked instances) and its static
hyper-parameters, so the executable is compiled once per (config, instance bucket) and a
restored state continues bit-exactly. One update:

1. picks G instances (all of them when G equals their number, else G distinct ones at random);
2. runs the policy ONCE per graph (vmapped over G) and samples K actions per graph from that one
   pass, plus the greedy (most likely) action, which is scored but not trained on;
3. simulates all G x (K + 1) actions inside the same jit: one `simulate_padded` call per graph,
   batched over its K + 1 actions (`rollout.per_graph`; split over every device of the run,
   `simulator.sharding`, as is each minibatch's slice of K in step 5: XLA sums the devices'
   parts of the loss); objective per docs/design.md section 5;
   reward = -sqrt(objective / reference) per graph;
4. advantage = reward minus a baseline (`config.advantage`, `rollout.ADVANTAGES`; default
   "leave_one_out": the mean of the graph's other K - 1 samples, which needs no learned value),
   then normalised over the batch;
5. `epochs` passes over the K samples in `minibatches` random slices (each slice keeps all G
   graphs and re-runs their forward pass): PPO's clipped surrogate on the ratio of the SUMMED
   per-node probabilities of the heads the task uses, minus `entropy_coef` x summed entropy,
   plus `value_coef` x squared error of the value head against the rewards; gradients clipped
   to `max_grad_norm` (global norm), Adam with a learning-rate schedule (`state.SCHEDULES`);
6. keeps, per instance, the best action ever simulated (TrainState.best_*).

Self-imitation (`self_imitation_coef` > 0; Oh et al., ICML 2018, the "earlier PPO samples" of
DOPPLER's imitation): each minibatch's loss also has `self_imitation_coef` x the per-decision
cross-entropy of each picked instance's best action so far (TrainState.best_*, where it is
memory-feasible), so the policy's most likely action follows the best it has found instead of
only its samples' average. The samples' best is well ahead of the greedy action on the training
set (BENCHMARKS.md: 1.02-1.05x HEFT against 1.19x), and the zero-shot answer is the greedy one.

Exploration floor (`explore` = e > 0): the placement distribution every update samples from,
scores and trains is (1 - e) x the policy's + e x uniform over the graph's devices, so no
decision's probability falls below e / D however sure the network becomes. An entropy bonus
cannot do this: once PPO has saturated the logits its gradient vanishes (BENCHMARKS.md, "An
exploration floor for `gdp`'s fine-tuning": a hinge bonus below 0.1 nats per decision still let
the entropy fall to 0 within 10 updates). The greedy action is unchanged (the mixture keeps
each node's most likely device).

Randomness comes from the PRNG key in the state (config.prng_impl, default "rbg": XLA's
RngBitGenerator, which compiles much faster than threefry inside large loops; see
go_jax/methods/evolution.py). The key is stored as raw key data so checkpoints hold plain
uint32 arrays.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Dict, Optional, Sequence, Tuple

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from go_jax.training import rollout
from go_jax.training.problems import FeatureFn, Problems, TrainData, build_problems
from go_jax.training.state import (HParams, TrainState, check_hparams, hparams_from_config,
                                   learning_rate_schedule, make_optimizer)
from simulator import sharding as sharding_lib
from simulator.graph import CompGraph
from simulator.topology import Topology

# Python-level trace counts of the jitted functions, for no-retrace tests.
TRACES: Dict[str, int] = {"update_chunk": 0, "sample_chunk": 0, "greedy": 0}


# ------------------------------------------------------------------ one PPO update
def _apply(module: nn.Module, params, feats, explore: float = 0.0):
  """Forward pass of every graph of a batch (feats fields (G, ...)); with `explore` > 0 the
  placement distribution is mixed with the uniform one over each graph's devices (module
  docstring: exploration floor)."""
  out = jax.vmap(module.apply, in_axes=(None, 0))(params, feats)
  if explore > 0:
    mask = jnp.asarray(feats.device_mask, bool)[:, None, :]  # (G, 1, Dmax)
    logp = jax.nn.log_softmax(out.placement_logits, axis=-1)
    count = jnp.sum(mask, axis=-1, keepdims=True).astype(jnp.float32)
    mixed = jnp.logaddexp(jnp.log1p(-explore) + logp, jnp.log(explore) - jnp.log(count))
    out = out.replace(placement_logits=jnp.where(mask, mixed, out.placement_logits))
  return out


@flax.struct.dataclass
class _Batch:
  """The K samples of G graphs that PPO trains on (one slice of K per minibatch)."""
  actions: rollout.Actions  # (G, K, Np) fields
  logp: jnp.ndarray  # (G, K) log-probability under the sampling parameters
  advantage: jnp.ndarray  # (G, K)
  reward: jnp.ndarray  # (G, K)


@flax.struct.dataclass
class _Imitate:
  """Self-imitation targets of the G picked instances (module docstring)."""
  actions: rollout.Actions  # (G, 1, Np) fields: each instance's best action so far
  weight: jnp.ndarray  # (G,) float32 1 where that action exists and fits memory, else 0


def _imitation_targets(state: TrainState, idx, data: TrainData, levels: int) -> _Imitate:
  """The best action so far of each picked instance, as the heads' decisions: the level is the
  simulated priority less the instance's tie-break (rollout.to_simulator adds it)."""
  level = jnp.clip(jnp.round(state.best_priority[idx] - data.tiebreak), 0, levels - 1)
  fuse = None if state.best_fuse is None else state.best_fuse[idx][:, None]
  best = state.best_objective[idx]
  return _Imitate(
      actions=rollout.Actions(placement=state.best_placement[idx][:, None],
                              level=level.astype(jnp.int32)[:, None], fuse=fuse),
      weight=(jnp.isfinite(best) & (best <= data.upper_bound)).astype(jnp.float32))


def _loss(params, module, hp: HParams, task, data: TrainData, batch: _Batch,
          imitate: Optional[_Imitate] = None):
  out = _apply(module, params, data.feats, hp.explore)
  logp = rollout.log_prob(task, data, out, batch.actions)
  ratio = jnp.exp(logp - batch.logp)
  adv = batch.advantage
  surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - hp.clip_eps, 1 + hp.clip_eps) * adv)
  pg_loss = -jnp.mean(surrogate)
  ent, decisions = rollout.entropy(task, data, out)
  value_loss = jnp.mean(jnp.square(out.value[:, None] - batch.reward))
  loss = pg_loss - hp.entropy_coef * jnp.mean(ent) + hp.value_coef * value_loss
  aux = {"pg_loss": pg_loss, "value_loss": value_loss,
         "entropy_per_decision": jnp.sum(ent) / jnp.maximum(jnp.sum(decisions), 1.0),
         "approx_kl": jnp.mean(batch.logp - logp),
         "clip_fraction": jnp.mean((jnp.abs(ratio - 1.0) > hp.clip_eps).astype(jnp.float32))}
  if imitate is not None:  # per-decision cross-entropy of the best actions, feasible ones only
    nll = -rollout.log_prob(task, data, out, imitate.actions)[:, 0] / jnp.maximum(decisions, 1.0)
    sil_loss = jnp.sum(imitate.weight * nll) / jnp.maximum(jnp.sum(imitate.weight), 1.0)
    loss = loss + hp.self_imitation_coef * sil_loss
    aux["self_imitation_loss"] = sil_loss
  return loss, aux


@flax.struct.dataclass
class _OptCarry:
  """Carry of the epoch / minibatch scans."""
  params: Any  # policy parameters
  opt_state: Any  # optax state


def _optimise(state: TrainState, key, module, hp: HParams, task, data: TrainData,
              batch: _Batch, imitate: Optional[_Imitate] = None):
  """`epochs` x `minibatches` gradient steps; returns (params, opt_state, mean metrics)."""
  opt = make_optimizer(hp)
  m = hp.minibatches
  size = hp.samples // m
  grad_fn = jax.value_and_grad(_loss, has_aux=True)

  # the minibatch's samples split across devices (axis 1 of (G, size, ...)): XLA sums the
  # per-device parts of the loss's means, so the gradient is the one device's up to float32
  # reduction order
  sharding = sharding_lib.batch_sharding(size)

  def minibatch(carry: _OptCarry, idx):
    part = sharding_lib.split(jax.tree_util.tree_map(lambda x: x[:, idx], batch), sharding,
                              axis=1)
    (loss, aux), grads = grad_fn(carry.params, module, hp, task, data, part, imitate)
    updates, opt_state = opt.update(grads, carry.opt_state, carry.params)
    aux = dict(aux, loss=loss, grad_norm=optax.tree.norm(grads))
    return _OptCarry(optax.apply_updates(carry.params, updates), opt_state), aux

  def epoch(carry: _OptCarry, ekey):
    slices = jax.random.permutation(ekey, hp.samples).reshape(m, size)
    return jax.lax.scan(minibatch, carry, slices)

  carry, aux = jax.lax.scan(epoch, _OptCarry(state.params, state.opt_state),
                            jax.random.split(key, hp.epochs))
  return carry.params, carry.opt_state, jax.tree_util.tree_map(jnp.mean, aux)


def _pick_instances(key, hp: HParams, num_instances: int):
  if hp.graphs_per_update == num_instances:
    return jnp.arange(num_instances)
  return jax.random.choice(key, num_instances, (hp.graphs_per_update,), replace=False)


def _running_mean(state: TrainState, idx, reward, decay: float):
  """Bias-corrected exponential running mean of each visited instance's mean reward."""
  weight = state.reward_ema_weight[idx]
  new_weight = 1.0 - decay * (1.0 - weight)
  new = (decay * state.reward_ema[idx] * weight + (1.0 - decay) * jnp.mean(reward, 1))
  return {"reward_ema": state.reward_ema.at[idx].set(new / new_weight),
          "reward_ema_weight": state.reward_ema_weight.at[idx].set(new_weight)}


def _track_best(state: TrainState, idx, res: rollout.Outcome):
  """The best-so-far fields with this update's best action of each of its instances."""
  i_best = jnp.argmin(res.objective, axis=1)
  rows = jnp.arange(idx.shape[0])
  old = state.best_objective[idx]
  better = res.objective[rows, i_best] < old
  keep = lambda new, prev: jnp.where(better.reshape((-1,) + (1,) * (new.ndim - 1)), new, prev)
  best = {"best_objective": state.best_objective.at[idx].set(
              keep(res.objective[rows, i_best], old)),
          "best_placement": state.best_placement.at[idx].set(
              keep(res.placement[rows, i_best], state.best_placement[idx])),
          "best_priority": state.best_priority.at[idx].set(
              keep(res.priority[rows, i_best], state.best_priority[idx]))}
  if res.fuse is not None:
    best["best_fuse"] = state.best_fuse.at[idx].set(
        keep(res.fuse[rows, i_best], state.best_fuse[idx]))
  return best


@flax.struct.dataclass
class _Rollout:
  """The sampling half of an update: what `ppo_update` learns from."""
  key: Any  # typed PRNG key after this update's splits
  k_opt: Any  # typed PRNG key of the optimisation epochs
  idx: jnp.ndarray  # (G,) int32 instances of this update
  data: TrainData  # the G instances' data (leading axis G)
  out: Any  # the policy's output on them (no gradient)
  sampled: rollout.Actions  # (G, K, Np) fields
  res: rollout.Outcome  # (G, K + 1): the K samples, then the greedy action


def _rollout(state: TrainState, all_data: TrainData, module, hp: HParams) -> _Rollout:
  """Pick the instances, sample K actions and the greedy one, simulate them."""
  task = rollout.get_task(hp.task)
  num_instances = all_data.upper_bound.shape[0]
  key = jax.random.wrap_key_data(state.key, impl=hp.prng_impl)
  key, k_pick, k_sample, k_opt = jax.random.split(key, 4)
  idx = _pick_instances(k_pick, hp, num_instances)
  data = jax.tree_util.tree_map(lambda x: x[idx], all_data)
  out = jax.lax.stop_gradient(_apply(module, state.params, data.feats, hp.explore))
  sampled = rollout.sample(k_sample, out, hp.samples)
  both = jax.tree_util.tree_map(lambda s, g: jnp.concatenate([s, g], 1), sampled,
                                rollout.greedy(out))
  res = rollout.simulate_actions(hp.objective, task, data, both)
  return _Rollout(key=key, k_opt=k_opt, idx=idx, data=data, out=out, sampled=sampled, res=res)


def _sample_metrics(state: TrainState, all_data: TrainData, hp: HParams, r: _Rollout, best):
  """The metrics of an update that need no gradient (float32 scalars)."""
  ratio = r.res.objective / r.data.reference[:, None]
  seen = jnp.isfinite(best["best_objective"])
  return dict(
      reward_mean=jnp.mean(r.res.reward[:, :hp.samples]), value_mean=jnp.mean(r.out.value),
      ratio_mean=jnp.mean(ratio[:, :hp.samples]),
      ratio_best_sample=jnp.mean(jnp.min(ratio[:, :hp.samples], 1)),
      ratio_greedy=jnp.mean(ratio[:, hp.samples]),
      feasible_fraction=1.0 - jnp.mean(r.res.oom[:, :hp.samples].astype(jnp.float32)),
      ratio_best_so_far=jnp.sum(jnp.where(seen, best["best_objective"] / all_data.reference,
                                          0.0)) / jnp.maximum(jnp.sum(seen), 1),
      learning_rate=learning_rate_schedule(hp)(state.step * hp.epochs * hp.minibatches))


def ppo_update(state: TrainState, all_data: TrainData, module, hp: HParams):
  """One PPO update (see the module docstring); returns (state, metrics of scalars)."""
  task = rollout.get_task(hp.task)
  r = _rollout(state, all_data, module, hp)
  key, k_opt, idx, data, out, sampled, res = (r.key, r.k_opt, r.idx, r.data, r.out, r.sampled,
                                              r.res)
  reward = res.reward[:, :hp.samples]
  ema = state.reward_ema[idx]
  adv = rollout.get_advantage(hp.advantage)(reward, out.value, ema)
  if hp.normalize_advantages:
    adv = (adv - jnp.mean(adv)) / (jnp.std(adv) + 1e-8)
  batch = _Batch(actions=sampled, logp=rollout.log_prob(task, data, out, sampled),
                 advantage=adv, reward=reward)
  imitate = (_imitation_targets(state, idx, data, out.priority_logits.shape[-1])
             if hp.self_imitation_coef > 0 else None)
  params, opt_state, aux = _optimise(state, k_opt, module, hp, task, data, batch, imitate)

  ema_state = _running_mean(state, idx, reward, hp.ema_decay)
  best = _track_best(state, idx, res)
  metrics = dict(aux, **_sample_metrics(state, all_data, hp, r, best))
  new_state = state.replace(params=params, opt_state=opt_state, key=jax.random.key_data(key),
                            step=state.step + 1, **ema_state, **best)
  return new_state, jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), metrics)


@functools.partial(jax.jit, static_argnames=("module", "hp"))
def update_chunk(state: TrainState, data: TrainData, *, module, hp: HParams):
  """`hp.updates_per_call` PPO updates in one scan; metrics are stacked, shape (U,) each."""
  TRACES["update_chunk"] += 1
  return jax.lax.scan(lambda s, _: ppo_update(s, data, module, hp), state, None,
                      length=hp.updates_per_call)


@functools.partial(jax.jit, static_argnames=("module", "hp"))
def sample_chunk(state: TrainState, data: TrainData, *, module, hp: HParams):
  """The sampling half of `update_chunk`'s first update alone: the same K samples and greedy
  action from `state.params` (the same keys), simulated and kept as the best so far, with no
  gradient and no step of the parameters. Zero-shot best of K without compiling the backward
  pass (go_jax/training/tuning.py, `finetune(..., sample_only=True)`); metrics (1,) each."""
  TRACES["sample_chunk"] += 1
  r = _rollout(state, data, module, hp)
  best = _track_best(state, r.idx, r.res)
  metrics = _sample_metrics(state, data, hp, r, best)
  new_state = state.replace(key=jax.random.key_data(r.key), step=state.step + 1, **best)
  return new_state, jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32)[None], metrics)


@functools.partial(jax.jit, static_argnames=("module", "hp"))
def greedy_actions(params, data: TrainData, *, module, hp: HParams):
  """The most likely action of every instance, as the simulator takes it: (placement (I, Np)
  int32, priority (I, Np) float32, fuse (I, Np) bool or None for a task that does not fuse).
  Scored on the host (`loop.summarize`), so this compiles only the policy, not another
  simulator."""
  TRACES["greedy"] += 1
  return _greedy(_apply(module, params, data.feats), data, hp)


def _greedy(out, data: TrainData, hp: HParams):
  task = rollout.get_task(hp.task)
  actions = rollout.greedy(out)
  place, prio = rollout.to_simulator(task, data, actions)
  fuse = rollout.to_fuse(task, data, actions)
  return place[:, 0], prio[:, 0], None if fuse is None else fuse[:, 0]


@functools.partial(jax.jit, static_argnames=("module", "hp"))
def greedy_and_entropy(params, data: TrainData, *, module, hp: HParams):
  """`greedy_actions` and (I,) the policy's own placement entropy per decision (nats; no
  exploration floor): fine-tuning reads it to decide whether to apply the floor
  (go_jax/training/tuning.py), from the one forward pass it needs anyway."""
  TRACES["greedy"] += 1
  out = _apply(module, params, data.feats)
  return _greedy(out, data, hp) + (rollout.placement_entropy(data, out),)


# ------------------------------------------------------------------ setup
@functools.partial(jax.jit, static_argnames=("module",))
def _init_params(module, key, feats):
  """module.init under jit: eager init dispatches every op of a large policy one by one."""
  return module.init(key, feats)


@dataclasses.dataclass(frozen=True)
class Policy:
  """A policy network and the host function that builds its inputs."""
  module: nn.Module  # init(key, feats) / apply(params, feats) -> PolicyOutput, ONE graph
  features: FeatureFn  # (graph, topology, num_nodes, num_edges) -> GraphFeatures
  max_devices: int  # Dmax of the features' device axis
  hint: str = ""  # go_jax.training.hints name whose placement the features carry ("": none)


def policy_from_config(policy_config) -> Policy:
  """The registered GO policy (go_jax.policies) described by `config.policy`."""
  from go_jax import policies  # pylint: disable=g-import-not-at-top
  dmax = int(policy_config["max_devices"])
  order = str(policy_config.get("decode_order", "topological"))  # absent in older checkpoints

  def features(graph, topology, num_nodes, num_edges, hint_placement=None):
    return policies.features.graph_features(graph, topology, num_nodes=num_nodes,
                                            num_edges=num_edges, max_devices=dmax,
                                            hint_placement=hint_placement, order=order)
  return Policy(policies.make_policy(policy_config), features, dmax,
                str(policy_config.get("hint", "") or ""))


@dataclasses.dataclass(frozen=True)
class Trainer:
  """What `make_train` returns: the problems, the policy and the jitted functions."""
  hp: HParams
  policy: Policy
  problems: Problems

  @property
  def data(self) -> TrainData:
    return self.problems.data

  def init(self, seed: int = 0, params=None) -> TrainState:
    """A fresh state: new (or given, e.g. pretrained) params, optimizer and PRNG key."""
    key = jax.random.key(int(seed), impl=self.hp.prng_impl)
    key, k_init = jax.random.split(key)
    if params is None:
      feats = jax.tree_util.tree_map(lambda x: x[0], self.data.feats)
      params = _init_params(self.policy.module, k_init, feats)
    n, np_ = self.problems.num_instances, self.problems.num_nodes_padded
    return sharding_lib.put_replicated(TrainState(  # on every device: simulator.sharding
        params=params, opt_state=make_optimizer(self.hp).init(params),
        key=jax.random.key_data(key), step=jnp.int32(0),
        reward_ema=jnp.zeros(n, jnp.float32), reward_ema_weight=jnp.zeros(n, jnp.float32),
        best_objective=jnp.full(n, jnp.inf, jnp.float32),
        best_placement=jnp.zeros((n, np_), jnp.int32),
        best_priority=jnp.zeros((n, np_), jnp.float32),
        best_fuse=(jnp.zeros((n, np_), bool) if rollout.get_task(self.hp.task).learns_fusion
                   else None)))

  def update_chunk(self, state: TrainState) -> Tuple[TrainState, Dict[str, jnp.ndarray]]:
    return update_chunk(state, self.data, module=self.policy.module, hp=self.hp)

  def sample_chunk(self, state: TrainState) -> Tuple[TrainState, Dict[str, jnp.ndarray]]:
    return sample_chunk(state, self.data, module=self.policy.module, hp=self.hp)

  @property
  def _greedy_hp(self) -> HParams:
    """The one field of `hp` the greedy forward pass reads (its task), the others at their
    defaults: a run of another learning rate or loss weight reuses the compiled greedy pass."""
    return HParams(task=self.hp.task)

  def greedy(self, params):
    """Greedy action of every instance: (placement (I, Np) int32, priority (I, Np) float32,
    fuse (I, Np) bool or None)."""
    return greedy_actions(params, self.data, module=self.policy.module, hp=self._greedy_hp)

  def greedy_and_entropy(self, params):
    """`greedy` and (I,) float32 the placement entropy per decision (ppo.greedy_and_entropy)."""
    return greedy_and_entropy(params, self.data, module=self.policy.module,
                              hp=self._greedy_hp)

  @property
  def placements_per_update(self) -> int:
    """Simulated actions per update (K sampled + 1 greedy per graph)."""
    return self.hp.graphs_per_update * (self.hp.samples + 1)


def make_train(config, graphs: Sequence[CompGraph], topologies: Sequence[Topology],
               policy: Optional[Policy] = None, names: Optional[Sequence[str]] = None,
               fixed_placements: Optional[Sequence] = None,
               fixed_priorities: Optional[Sequence] = None) -> Trainer:
  """Host setup of PPO on instances (graphs[i], topologies[i]); see the module docstring.

  `config`: an ml_collections ConfigDict or mapping with the HParams fields (`updates` sets
  `total_updates`), `reference` and `fixed_placement` (method names) and `policy` (the
  go_jax.policies config; ignored when `policy` is given, e.g. a small stand-in for tests).
  `fixed_placements` / `fixed_priorities`: explicit per-instance fixed actions of the tasks
  that do not learn them (`problems.build_problems`), e.g. the schedule a fusion method fuses.
  """
  hp = hparams_from_config(config)
  task = rollout.get_task(hp.task)
  check_hparams(hp, len(graphs))
  if policy is None:
    policy = policy_from_config(config["policy"])
  fixed = str(config.get("fixed_placement", "heft")) if task.needs_fixed_placement else None
  problems = build_problems(graphs, topologies, features=policy.features,
                            max_devices=policy.max_devices, objective=hp.objective,
                            reference=str(config.get("reference", "heft")),
                            fixed_placement=fixed, names=names, hint=policy.hint,
                            fusion=task.learns_fusion, fixed_placements=fixed_placements,
                            fixed_priorities=fixed_priorities)
  return Trainer(hp=hp, policy=policy, problems=problems)
