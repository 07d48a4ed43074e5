"""Actions from one policy forward pass, their log-probabilities, and their simulated rewards.

GO decides every node of a graph from ONE forward pass: per node, a device ~ Categorical(
placement_logits) and a priority level ~ Categorical(priority_logits), all independent given
the pass, so an action's log-probability is the SUM of its per-node log-probabilities. Only
decisions that reach the simulator are counted:

* a task (`TASKS`) says which heads it samples; the other half of the action is fixed per
  instance (`problems.TrainData`): placement tasks keep the critical-path priority, scheduling
  tasks keep a baseline's placement;
* placement terms are summed over real colocation roots only (rule 1: the other members of a
  group follow their root, so their sampled devices would only add noise to the gradient);
* priority terms are summed over real nodes; level l becomes priority l + tiebreak (see
  `problems`), higher runs first;
* fuse terms (the fusion tasks: a Bernoulli request per op, design.md 4.1) are summed over the
  ops whose request can ever be legal (`TrainData.fusible`: one consumer, both fusible); the
  simulator ignores the others' requests, so they would only add noise.

Rewards are GO's per-graph normalisation, -sqrt(objective / reference), with infeasible actions
scored above every feasible one by the objective itself (docs/design.md section 5).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Optional

import flax
import jax
import jax.numpy as jnp

from go_jax import objectives
from go_jax.policies.types import PolicyOutput
from go_jax.training.problems import TrainData
from simulator import sharding as sharding_lib
from simulator.simulate import simulate_padded


@dataclasses.dataclass(frozen=True)
class Task:
  """Which policy heads a task samples; the rest of the action comes from the instance."""
  description: str
  learns_placement: bool
  learns_priority: bool
  needs_fixed_placement: bool  # placement from `config.fixed_placement` (a baseline's)
  learns_fusion: bool = False  # a fuse request per op (needs a policy with a fusion head)


TASKS: Dict[str, Task] = {
    "placement": Task("device per op; priority = critical path (upward rank)", True, False,
                      False),
    "scheduling": Task("priority level per op; placement fixed to a baseline's", False, True,
                       True),
    "joint": Task("device and priority level per op", True, True, False),
    "fusion": Task("fuse request per op; placement fixed to a baseline's, critical-path "
                   "priority", False, False, True, learns_fusion=True),
    "joint3": Task("device, priority level and fuse request per op", True, True, False,
                   learns_fusion=True),
}


def get_task(name: str) -> Task:
  if name not in TASKS:
    raise ValueError(f"unknown task '{name}'; available: {sorted(TASKS)}")
  return TASKS[name]


@flax.struct.dataclass
class Actions:
  """Sampled decisions of K actions on each of G graphs."""
  placement: jnp.ndarray  # (G, K, Np) int32 device per op (head output; may be unused)
  level: jnp.ndarray  # (G, K, Np) int32 priority level per op (head output; may be unused)
  fuse: Optional[jnp.ndarray] = None  # (G, K, Np) bool fuse requests; None: no fusion head


@flax.struct.dataclass
class Outcome:
  """What the simulator made of G x K actions."""
  objective: jnp.ndarray  # (G, K) objective (lower is better; infeasible > upper bound)
  reward: jnp.ndarray  # (G, K) -sqrt(objective / reference)
  oom: jnp.ndarray  # (G, K) bool over some device's memory capacity
  placement: jnp.ndarray  # (G, K, Np) int32 the placement simulated
  priority: jnp.ndarray  # (G, K, Np) float32 the priority simulated
  fuse: Optional[jnp.ndarray] = None  # (G, K, Np) bool the fuse requests simulated (fusion)


def sample(key, out: PolicyOutput, k: int) -> Actions:
  """K actions per graph from a batch of G forward passes (fields (G, Np, ...))."""
  kp, kl = jax.random.split(key)
  g, np_ = out.placement_logits.shape[:2]
  place = jax.random.categorical(kp, out.placement_logits[:, None], axis=-1, shape=(g, k, np_))
  level = jax.random.categorical(kl, out.priority_logits[:, None], axis=-1, shape=(g, k, np_))
  fuse = None
  if out.fusion_logits is not None:  # its own stream: the other heads' samples are unchanged
    fuse = jax.random.bernoulli(jax.random.fold_in(key, 2),
                                jax.nn.sigmoid(out.fusion_logits[:, None]), (g, k, np_))
  return Actions(placement=place.astype(jnp.int32), level=level.astype(jnp.int32), fuse=fuse)


def greedy(out: PolicyOutput) -> Actions:
  """The greedy action of each graph, as a batch of K = 1: per node the most likely device (of
  the greedy decode's logits where the policy has them: policies/load.py) and level."""
  logits = (out.placement_logits if out.greedy_placement_logits is None
            else out.greedy_placement_logits)
  place = jnp.argmax(logits, axis=-1).astype(jnp.int32)[:, None]
  level = jnp.argmax(out.priority_logits, axis=-1).astype(jnp.int32)[:, None]
  fuse = None if out.fusion_logits is None else (out.fusion_logits > 0)[:, None]
  return Actions(placement=place, level=level, fuse=fuse)


def _masks(task: Task, data: TrainData):
  """(place_mask, level_mask), each (G, 1, Np) float32: which per-node terms count."""
  real = data.feats.node_mask
  place = (data.decides_place & real) if task.learns_placement else jnp.zeros_like(real)
  level = real if task.learns_priority else jnp.zeros_like(real)
  return place[:, None].astype(jnp.float32), level[:, None].astype(jnp.float32)


def _fuse_mask(task: Task, data: TrainData, out: PolicyOutput):
  """(G, 1, Np) float32 which fuse terms count, or None for a task that does not fuse."""
  if not task.learns_fusion:
    return None
  if out.fusion_logits is None or data.fusible is None:
    raise ValueError("a fusion task needs a policy with a fusion head (policy config "
                     "fusion_head=True, e.g. the 'go_fusion' variant) and problems built "
                     "with fusion tables (graphs costed by the cost model)")
  return (data.fusible & data.feats.node_mask)[:, None].astype(jnp.float32)


def log_prob(task: Task, data: TrainData, out: PolicyOutput, actions: Actions):
  """(G, K) summed log-probability of each action under `out` (see the module docstring)."""
  place_mask, level_mask = _masks(task, data)
  lp_place = jax.nn.log_softmax(out.placement_logits, axis=-1)[:, None]  # (G, 1, Np, D)
  lp_level = jax.nn.log_softmax(out.priority_logits, axis=-1)[:, None]  # (G, 1, Np, L)
  lp = (jnp.take_along_axis(lp_place, actions.placement[..., None], -1)[..., 0] * place_mask +
        jnp.take_along_axis(lp_level, actions.level[..., None], -1)[..., 0] * level_mask)
  fuse_mask = _fuse_mask(task, data, out)
  if fuse_mask is not None:
    logit = out.fusion_logits[:, None]  # (G, 1, Np)
    lp = lp + jnp.where(actions.fuse, jax.nn.log_sigmoid(logit),
                        jax.nn.log_sigmoid(-logit)) * fuse_mask
  return jnp.sum(lp, axis=-1)


def _entropy(logits):
  logp = jax.nn.log_softmax(logits, axis=-1)
  p = jnp.exp(logp)
  return -jnp.sum(jnp.where(p > 0, p * logp, 0.0), axis=-1)


def placement_entropy(data: TrainData, out: PolicyOutput):
  """(G,) the placement head's entropy per placement decision (nats), over the nodes whose
  placement the policy decides: how sure the policy is of where ops go."""
  decides = (data.decides_place & data.feats.node_mask).astype(jnp.float32)  # (G, Np)
  ent = jnp.sum(_entropy(out.placement_logits) * decides, axis=-1)
  return ent / jnp.maximum(jnp.sum(decides, axis=-1), 1.0)


def entropy(task: Task, data: TrainData, out: PolicyOutput):
  """((G,) summed entropy of the action distribution, (G,) number of decisions summed)."""
  place_mask, level_mask = _masks(task, data)
  ent = (_entropy(out.placement_logits) * place_mask[:, 0] +
         _entropy(out.priority_logits) * level_mask[:, 0])
  count = place_mask[:, 0] + level_mask[:, 0]
  fuse_mask = _fuse_mask(task, data, out)
  if fuse_mask is not None:
    two = jnp.stack([out.fusion_logits, jnp.zeros_like(out.fusion_logits)], -1)
    ent = ent + _entropy(two) * fuse_mask[:, 0]  # Bernoulli: softmax over (logit, 0)
    count = count + fuse_mask[:, 0]
  return jnp.sum(ent, -1), jnp.sum(count, -1)


def to_simulator(task: Task, data: TrainData, actions: Actions):
  """(placement (G, K, Np) int32, priority (G, K, Np) float32) the simulator runs."""
  real = data.feats.node_mask[:, None]
  place = actions.placement if task.learns_placement else jnp.broadcast_to(
      data.fixed_placement[:, None], actions.placement.shape)
  prio = (actions.level.astype(jnp.float32) + data.tiebreak[:, None] if task.learns_priority
          else jnp.broadcast_to(data.fixed_priority[:, None], actions.level.shape))
  return jnp.where(real, place, 0), jnp.where(real, prio, 0.0)


def to_fuse(task: Task, data: TrainData, actions: Actions):
  """(G, K, Np) bool fuse requests the simulator runs (False on padding), or None for a task
  that does not fuse."""
  if not task.learns_fusion:
    return None
  if actions.fuse is None:
    raise ValueError("a fusion task needs a policy with a fusion head (fusion_head=True)")
  return actions.fuse & data.feats.node_mask[:, None]


def per_graph(fn: Callable, *args):
  """fn over the leading (graph) axis of its arguments: a direct call when there is one graph,
  else `lax.map` (one graph after the other, each batched over its K actions).

  Not vmap: vmapping the simulator over graphs batches every gather from the graph's arrays
  and runs every graph's loop for the longest trip count; measured at N = 1000, K = 65 on
  the 2-core CPU, vmap took 1.7 s for G = 2 against 0.41 s with lax.map, and for G = 1 the
  direct call is faster again (0.06-0.08 s against about 1 s vmapped).
  """
  g = jax.tree_util.tree_leaves(args)[0].shape[0]
  if g == 1:
    out = fn(*jax.tree_util.tree_map(lambda x: x[0], args))
    return jax.tree_util.tree_map(lambda x: x[None], out)
  return jax.lax.map(lambda xs: fn(*xs), args)


def simulate_actions(objective: str, task: Task, data: TrainData, actions: Actions,
                     simulate_fn: Callable = simulate_padded, shard: bool = True) -> Outcome:
  """Simulates all G x K actions within one jitted computation (`per_graph`).

  With `shard` and several devices, each graph's K actions are split across all of them and
  each device simulates its part (`simulator.sharding.map_batch`; K is padded to a multiple of
  the device count with copies of the first action, sliced off after); the actions themselves
  are drawn replicated, so the outcome is the one device's."""
  value_fn = objectives.get_objective(objective).value
  place, prio = to_simulator(task, data, actions)
  fuse = to_fuse(task, data, actions)
  k = place.shape[1]
  sharding = sharding_lib.batch_sharding() if shard else None
  width = sharding_lib.padded_batch(k, sharding)

  def one_graph(pg, topo, ub, *batch):
    batch = tuple(sharding_lib.pad_rows(x, width) for x in batch)
    res = sharding_lib.map_batch(simulate_fn, sharding, (pg, topo), batch)
    obj = value_fn(res.makespan, res.peak_memory, res.oom, topo.mem_capacity, ub)
    return obj.astype(jnp.float32)[:k], res.oom[:k]

  extra = () if fuse is None else (fuse,)
  obj, oom = per_graph(one_graph, data.graph, data.topology, data.upper_bound, place, prio,
                       *extra)
  reward = -jnp.sqrt(obj / data.reference[:, None])
  return Outcome(objective=obj, reward=reward, oom=oom, placement=place, priority=prio,
                 fuse=fuse)


# ------------------------------------------------------------------ advantages
def _leave_one_out(reward, value, ema):
  """r - mean of the graph's OTHER K - 1 samples (unbiased; RLOO)."""
  del value, ema
  k = reward.shape[1]
  return reward - (jnp.sum(reward, 1, keepdims=True) - reward) / max(k - 1, 1)


def _sample_mean(reward, value, ema):
  """r - mean of the graph's K samples."""
  del value, ema
  return reward - jnp.mean(reward, 1, keepdims=True)


def _value_baseline(reward, value, ema):
  """r - the value head's prediction for the graph (PPO's learned baseline)."""
  del ema
  return reward - value[:, None]


def _running_mean(reward, value, ema):
  """r - the running mean reward of the instance (TrainState.reward_ema)."""
  del value
  return reward - ema[:, None]


# name -> fn(reward (G, K), value (G,), ema (G,)) -> advantage (G, K)
ADVANTAGES: Dict[str, Callable] = {
    "leave_one_out": _leave_one_out,
    "sample_mean": _sample_mean,
    "value": _value_baseline,
    "running_mean": _running_mean,
}


def get_advantage(name: str) -> Callable:
  if name not in ADVANTAGES:
    raise ValueError(f"unknown advantage '{name}'; available: {sorted(ADVANTAGES)}")
  return ADVANTAGES[name]
