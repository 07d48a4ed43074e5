"""HDP's training: the grouper and the placer learned jointly on one graph with REINFORCE.

  hp = Hyper(objective="makespan", groups=32, samples=16, num_devices=4, ...)
  result = train(graph, topology, hp, seed=0, max_updates=None, seconds=60.0)
  result.placement, result.objective, result.updates, result.curve

One update (all of it, Adam included, under one jit; `run_updates` runs n of them in a
`lax.fori_loop`, n traced, so one compiled program serves every call):
  1. one forward pass of the grouper gives each op's softmax over G groups; K groupings are
     sampled from it (Gumbel-max), and for each the placer decodes one device per group
     (K decodes, vmapped); an op's device is its group's;
  2. the K placements are simulated in ONE batched `simulate_padded` call with the critical-path
     priority (`simulator.graph.upward_rank`: HDP places only) and scored by the objective
     (an out-of-memory placement scores `upper_bound * (1 + overflow)`, go_jax/objectives.py);
  3. reward r_k = -sqrt(objective_k / reference), the reference being the objective's lower
     bound on the instance (the upper bound where that is 0). HDP's reward is the negative
     square root of the run time; dividing by a per-instance constant makes it scale-free
     (microseconds or seconds read alike) without spending budget on a baseline method, and
     the square root compresses the large out-of-memory penalties so that they rank below every
     feasible placement without swamping the gradient;
  4. baseline b: an exponential moving average (decay `baseline_decay`, bias-corrected) of the
     mean reward of the updates so far, HDP's moving-average baseline (the first update uses
     its own batch mean); advantage A_k = (r_k - b) / (RMS + ADV_FLOOR), RMS the moving root
     mean square of r - b (same decay). The division is not in the paper: it makes
     `learning_rate` and `entropy_coef` mean the same whatever the spread of an instance's
     rewards;
  5. loss = -mean_k A_k (log p(grouping_k) + log p(placement_k | grouping_k))
     - entropy_coef (H(grouper) + H(placer)), each entropy summed over its decisions (the ops,
     the groups) as the log-probabilities are, so the bonus weighs every decision alike; the
     gradient comes from one `jax.vjp` of the sampling pass (no second forward pass), clipped
     by global norm, then Adam;
  6. the best placement of the run so far (lowest objective, first found on ties) is kept in
     the state: the search's answer.
No host round trip happens inside a call; the host loop (`train`) only sizes the calls so that
a wall-clock budget is checked every few seconds and logs progress.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Dict, List, Optional

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging

from go_jax import distributed, objectives
from go_jax.hdp.model import HDPModel
from go_jax.policies.features import graph_features
from go_jax.policies.types import GraphFeatures
from simulator.graph import CompGraph, upward_rank
from simulator.padding import PaddedGraph
from simulator import sharding as sharding_lib
from simulator.simulate import padded, simulate_padded
from simulator.topology import Topology

# Python-level trace count of the jitted updates, for no-retrace tests.
TRACES: Dict[str, int] = {"run_updates": 0}
CALL_SECONDS = 2.0  # target wall-clock seconds of one jitted call once the rate is known
LOG_SECONDS = 10.0  # at most one progress line per this many seconds
INIT_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0,
                         "xla_llvm_disable_expensive_passes": True}
_INIT_CACHE: Dict[Any, Any] = {}  # (model, feature shapes) -> compiled model.init
ADV_FLOOR = 1e-3  # added to the advantages' RMS (rewards are O(1): objective / reference)


@dataclasses.dataclass(frozen=True)
class Hyper:
  """Static settings of the jitted update (hashable: part of the compile key)."""
  objective: str  # a key of objectives.OBJECTIVES
  groups: int  # G
  samples: int  # K placements per update
  num_devices: int  # D
  hidden: int = 64
  learning_rate: float = 0.01
  entropy_coef: float = 0.01
  baseline_decay: float = 0.9
  max_grad_norm: float = 1.0


@flax.struct.dataclass
class HDPData:
  """The instance, padded (Np nodes, Ep edges) and featurised once on the host."""
  graph: PaddedGraph  # fields (Np,) / (Ep,) / (Np + 1,)
  topology: Topology  # fields (D,) / (D, D)
  feats: GraphFeatures  # fields (Np, ...) / (Ep,) / (Dmax, ...)
  priority: jnp.ndarray  # (Np,) float32 critical-path priority (upward rank), 0 on padding
  upper_bound: jnp.ndarray  # () float32 objective no feasible placement exceeds
  reference: jnp.ndarray  # () float32 reward scale (the objective's lower bound)


@flax.struct.dataclass
class HDPState:
  """Everything one update carries to the next."""
  params: Any  # HDPModel parameters (pytree of float32 arrays)
  opt_state: Any  # optax state (clip + Adam)
  key: jnp.ndarray  # (2,) uint32 raw threefry key data
  step: jnp.ndarray  # () int32 updates done
  baseline: jnp.ndarray  # () float32 moving average of the mean reward (not bias-corrected)
  spread: jnp.ndarray  # () float32 moving average of mean (reward - baseline)^2 (same decay)
  baseline_weight: jnp.ndarray  # () float32 1 - decay**updates (bias correction; 0: none yet)
  best_objective: jnp.ndarray  # () float32 lowest objective sampled so far (+inf before any)
  best_placement: jnp.ndarray  # (Np,) int32 device of each op in that placement (0 on padding)
  best_groups: jnp.ndarray  # (Np,) int32 group of each op in that placement
  best_step: jnp.ndarray  # () int32 update that found it
  best_feasible: jnp.ndarray  # () bool whether that placement fits in memory
  reward_mean: jnp.ndarray  # () float32 mean reward of the last update's K samples
  objective_mean: jnp.ndarray  # () float32 mean objective of the last update's K samples
  feasible_share: jnp.ndarray  # () float32 share of the last update's samples within memory
  entropy_group: jnp.ndarray  # () float32 last update's grouper entropy per op (nats)
  entropy_place: jnp.ndarray  # () float32 last update's placer entropy per group (nats)
  groups_used: jnp.ndarray  # () float32 mean number of non-empty groups of the last samples


def make_model(hp: Hyper) -> HDPModel:
  return HDPModel(groups=hp.groups, num_devices=hp.num_devices, hidden=hp.hidden)


def build_data(graph: CompGraph, topology: Topology, objective: str) -> HDPData:
  """Pads and featurises one instance (numpy; the jitted update takes it as an argument)."""
  pg = padded(graph)
  np_, n = pg.num_nodes_padded, graph.num_nodes
  feats = graph_features(graph, topology, np_, int(pg.senders.shape[0]),
                         max(topology.num_devices, 1))
  prio = np.zeros(np_, np.float32)
  prio[:n] = upward_rank(graph)
  obj = objectives.get_objective(objective)
  ub = float(obj.upper_bound(graph, topology))
  lb = float(obj.lower_bound(graph, topology)["bound"])
  ref = lb if np.isfinite(lb) and lb > 0 else (ub if np.isfinite(ub) and ub > 0 else 1.0)
  return jax.device_put(HDPData(graph=pg, topology=topology, feats=feats, priority=prio,
                                upper_bound=np.float32(ub), reference=np.float32(ref)))


def _optimizer(hp: Hyper):
  return optax.chain(optax.clip_by_global_norm(hp.max_grad_norm), optax.adam(hp.learning_rate))


def init_state(model: HDPModel, hp: Hyper, data: HDPData, seed: int) -> HDPState:
  """Fresh parameters and an empty search record (seeded)."""
  key, k_init = jax.random.split(jax.random.key(seed))
  np_ = data.feats.node_mask.shape[0]
  g, d = hp.groups, hp.num_devices
  args = (k_init, data.feats, jnp.zeros(np_, jnp.int32), jnp.zeros((g, d), jnp.float32),
          jnp.full(g, -1, jnp.int32))
  # Initialisation runs once per search: compiled without XLA's optimisations (seconds less
  # of the budget), and kept per model and shapes like jit's own cache.
  cache_key = (model, jax.tree_util.tree_structure(args[1]),
               tuple((np.shape(x), np.dtype(x.dtype)) for x in jax.tree_util.tree_leaves(args)[1:]))
  if cache_key not in _INIT_CACHE:
    _INIT_CACHE[cache_key] = jax.jit(model.init).lower(*args).compile(
        compiler_options=INIT_COMPILER_OPTIONS)
  params = _INIT_CACHE[cache_key](*args)
  zero = jnp.float32(0.0)
  return sharding_lib.put_replicated(HDPState(  # on every device: simulator.sharding
      params=params, opt_state=_optimizer(hp).init(params),
      key=jax.random.key_data(key), step=jnp.int32(0), baseline=zero,
      spread=zero, baseline_weight=zero, best_objective=jnp.float32(jnp.inf),
      best_placement=jnp.zeros(np_, jnp.int32),
      best_groups=jnp.zeros(np_, jnp.int32), best_step=jnp.int32(-1),
      best_feasible=jnp.bool_(False),
      reward_mean=zero, objective_mean=zero, feasible_share=zero,
      entropy_group=zero, entropy_place=zero, groups_used=zero))


def _entropy(logits):
  """(...,) entropy in nats of softmax(logits) over the last axis."""
  logp = jax.nn.log_softmax(logits)
  return -jnp.sum(jnp.exp(logp) * logp, -1)


def _update(state: HDPState, data: HDPData, model: HDPModel, hp: Hyper) -> HDPState:
  """One REINFORCE update (module docstring, steps 1-6)."""
  k, g, d = hp.samples, hp.groups, hp.num_devices
  mask = data.feats.node_mask  # (Np,)
  maskf = mask.astype(jnp.float32)
  np_ = mask.shape[0]
  key = jax.random.wrap_key_data(state.key)
  key, k_group, k_place = jax.random.split(key, 3)
  group_noise = jax.random.gumbel(k_group, (k, np_, g))
  place_noise = jax.random.gumbel(k_place, (k, g, d))
  free = jnp.full(g, -1, jnp.int32)

  def sample(params):
    """Log-probabilities (K,) and entropy of K sampled actions; aux: the actions."""
    logits = model.apply(params, data.feats, method=model.group_logits)  # (Np, G)
    groups = jnp.argmax(logits[None] + group_noise, -1).astype(jnp.int32)  # (K, Np)
    logp = jax.nn.log_softmax(logits)
    lp_group = jnp.sum(jnp.take_along_axis(logp[None], groups[..., None], -1)[..., 0] * maskf,
                       -1)  # (K,)
    ent_group = jnp.sum(_entropy(logits) * maskf)  # of the whole grouping
    place = lambda gr, nz: model.apply(params, data.feats, gr, nz, free, method=model.place)
    p_logits, devices = jax.vmap(place)(groups, place_noise)  # (K, G, D), (K, G)
    lp_place = jnp.sum(jnp.take_along_axis(jax.nn.log_softmax(p_logits), devices[..., None],
                                           -1)[..., 0], -1)  # (K,)
    ent_place = jnp.mean(jnp.sum(_entropy(p_logits), -1))  # of a whole decode, mean over K
    return (lp_group + lp_place, ent_group + ent_place), (groups, devices, ent_group,
                                                          ent_place)

  (logp, _), vjp_fn, (groups, devices, ent_group, ent_place) = jax.vjp(
      sample, state.params, has_aux=True)
  placement = jnp.where(mask[None], jnp.take_along_axis(devices, groups, -1), 0)  # (K, Np)
  prio = jnp.broadcast_to(data.priority, (k, np_))
  # the K placements split across every device of the run (padded to a multiple of their
  # count with copies of the first, sliced off): simulator.sharding
  sharding = sharding_lib.batch_sharding()
  width = sharding_lib.padded_batch(k, sharding)
  res = sharding_lib.map_batch(
      simulate_padded, sharding, (data.graph, data.topology),
      (sharding_lib.pad_rows(placement, width), sharding_lib.pad_rows(prio, width)))
  res = jax.tree_util.tree_map(lambda x: x[:k], res)
  obj = objectives.get_objective(hp.objective).value(
      res.makespan, res.peak_memory, res.oom, data.topology.mem_capacity,
      data.upper_bound).astype(jnp.float32)  # (K,)
  reward = -jnp.sqrt(obj / data.reference)
  mean_r = jnp.mean(reward)
  base = jnp.where(state.baseline_weight > 0,
                   state.baseline / jnp.maximum(state.baseline_weight, 1e-12), mean_r)
  dev = reward - base
  spread = jnp.where(state.baseline_weight > 0,
                     state.spread / jnp.maximum(state.baseline_weight, 1e-12),
                     jnp.mean(jnp.square(dev)))
  adv = dev / (jnp.sqrt(spread) + ADV_FLOOR)
  # loss = -mean(adv * logp) - entropy_coef * entropy: its cotangents on (logp, entropy).
  (grads,) = vjp_fn((-adv / k, jnp.float32(-hp.entropy_coef)))
  updates, opt_state = _optimizer(hp).update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  b = jnp.argmin(obj)  # first of the lowest
  better = obj[b] < state.best_objective
  used = jnp.sum(jnp.any(jax.nn.one_hot(groups, g, dtype=bool) & mask[None, :, None], 1), -1)
  decay = hp.baseline_decay
  return state.replace(
      params=params, opt_state=opt_state, key=jax.random.key_data(key), step=state.step + 1,
      baseline=decay * state.baseline + (1 - decay) * mean_r,
      baseline_weight=decay * state.baseline_weight + (1 - decay),
      spread=decay * state.spread + (1 - decay) * jnp.mean(jnp.square(dev)),
      best_objective=jnp.where(better, obj[b], state.best_objective),
      best_placement=jnp.where(better, placement[b], state.best_placement),
      best_groups=jnp.where(better, groups[b], state.best_groups),
      best_step=jnp.where(better, state.step, state.best_step),
      best_feasible=jnp.where(better, ~res.oom[b], state.best_feasible),
      reward_mean=mean_r, objective_mean=jnp.mean(obj),
      feasible_share=jnp.mean((~res.oom).astype(jnp.float32)),
      entropy_group=ent_group / jnp.maximum(jnp.sum(maskf), 1.0), entropy_place=ent_place / g,
      groups_used=jnp.mean(used.astype(jnp.float32)))


@functools.partial(jax.jit, static_argnames=("model", "hp"))
def run_updates(state: HDPState, data: HDPData, num_updates, *, model: HDPModel,
                hp: Hyper) -> HDPState:
  """`num_updates` (a traced int32: any count reuses the compiled program) updates."""
  TRACES["run_updates"] += 1
  return jax.lax.fori_loop(0, num_updates, lambda _, s: _update(s, data, model, hp), state)


@dataclasses.dataclass(frozen=True)
class TrainResult:
  """A finished HDP search on one instance."""
  placement: np.ndarray  # (N,) int device of each op in the best sampled placement
  groups: np.ndarray  # (N,) int group of each op in it
  objective: float  # its objective as the jitted simulator scored it (float32)
  found_at: int  # the update that sampled it
  feasible: bool  # whether it fits in memory
  updates: int  # updates done
  evaluations: int  # placements simulated (updates x K)
  seconds: float  # wall clock of the whole search, compilation included
  compile_seconds: float  # wall clock of the first call (compilation + one update)
  # after each call: seconds, updates, best objective, the last update's mean objective
  curve: List[Dict[str, float]]
  final: Dict[str, float]  # the last update's statistics (reward, entropies, ...)


def train(graph: CompGraph, topology: Topology, hp: Hyper, seed: int,
          max_updates: Optional[int], seconds: Optional[float],
          label: str = "hdp") -> TrainResult:
  """Trains HDP on one instance until `max_updates` updates or `seconds` of wall clock
  (checked between jitted calls; compilation counts), whichever comes first; at least one
  update. Logs a progress line (rate, best objective) every LOG_SECONDS."""
  if max_updates is None and seconds is None:
    raise ValueError(f"{label}: give max_updates or seconds")
  t0 = time.perf_counter()
  deadline = None if seconds is None else t0 + float(seconds)
  model = make_model(hp)
  data = build_data(graph, topology, hp.objective)
  state = init_state(model, hp, data, seed)
  done, n, rate, compile_seconds = 0, 1, None, 0.0
  curve: List[Dict[str, float]] = []
  last_log = t0
  while True:
    t = time.perf_counter()
    state = run_updates(state, data, jnp.int32(n), model=model, hp=hp)
    best = float(state.best_objective)  # blocks until the call is done
    now = time.perf_counter()
    if done == 0:
      compile_seconds = now - t
    elif now > t:
      rate = n / (now - t)
    done += n
    curve.append({"seconds": now - t0, "updates": done, "best_objective": best,
                  "objective_mean": float(state.objective_mean)})
    if now - last_log >= LOG_SECONDS:
      last_log = now
      logging.info("%s: update %d, %.1f updates/s (%.0f placements/s), best objective %.6g "
                   "(update %d), mean reward %.4f, feasible %.0f%%, entropy %.3f / %.3f",
                   label, done, rate or 0.0, (rate or 0.0) * hp.samples, best,
                   int(state.best_step), float(state.reward_mean),
                   100 * float(state.feasible_share), float(state.entropy_group),
                   float(state.entropy_place))
    left = None if max_updates is None else max_updates - done
    # Clock-driven choices come from process 0 in a multi-process run (go_jax.distributed).
    if distributed.agree(bool((left is not None and left <= 0) or
                              (deadline is not None and now >= deadline))):
      break
    span = CALL_SECONDS if deadline is None else min(CALL_SECONDS, deadline - now)
    n = 1 if rate is None else max(1, int(rate * span))
    if left is not None:
      n = min(n, left)
    n = distributed.agree(int(n))
  nreal = graph.num_nodes
  final = {f: float(getattr(state, f)) for f in (
      "reward_mean", "objective_mean", "feasible_share", "entropy_group", "entropy_place",
      "groups_used")}
  seconds_used = time.perf_counter() - t0
  logging.info("%s: done, %d updates in %.1f s (compile %.1f s), best objective %.6g",
               label, done, seconds_used, compile_seconds, float(state.best_objective))
  return TrainResult(placement=np.asarray(state.best_placement)[:nreal].astype(np.int64),
                     groups=np.asarray(state.best_groups)[:nreal].astype(np.int64),
                     objective=float(state.best_objective), found_at=int(state.best_step),
                     feasible=bool(state.best_feasible),
                     updates=done, evaluations=done * hp.samples, seconds=seconds_used,
                     compile_seconds=compile_seconds, curve=curve, final=final)
