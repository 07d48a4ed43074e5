"""PPO state and static hyper-parameters: TrainState, HParams, learning-rate schedules.

`TrainState` is everything a run carries from update to update (a checkpoint saves all of it);
`HParams` are the static settings of the jitted update (hashable: a jit static argument, so one
executable serves every state of a run). `SCHEDULES` maps a name to a learning-rate schedule
over optimizer steps (epochs x minibatches per update); `make_optimizer` is global-norm gradient
clipping followed by Adam on that schedule.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional

import flax
import jax.numpy as jnp
import optax

from go_jax.training import rollout


@flax.struct.dataclass
class TrainState:
  """Everything a PPO run carries from update to update (a checkpoint saves all of it)."""
  params: Any  # policy parameters (pytree of float32 arrays)
  opt_state: Any  # optax state of `params` (clip + Adam + schedule count)
  key: jnp.ndarray  # (Kd,) uint32 raw PRNG key data (impl: HParams.prng_impl)
  step: jnp.ndarray  # () int32 PPO updates done
  reward_ema: jnp.ndarray  # (I,) float32 bias-corrected running mean of the sampled reward
  reward_ema_weight: jnp.ndarray  # (I,) float32 1 - decay**visits (0: never visited)
  best_objective: jnp.ndarray  # (I,) float32 best objective simulated so far (inf: none)
  best_placement: jnp.ndarray  # (I, Np) int32 the placement that reached it
  best_priority: jnp.ndarray  # (I, Np) float32 the priority that reached it
  best_fuse: Optional[jnp.ndarray] = None  # (I, Np) bool its fuse requests (fusion tasks only)


@dataclasses.dataclass(frozen=True)
class HParams:
  """The static hyper-parameters of the jitted update (hashable: a jit static argument)."""
  task: str = "joint"
  objective: str = "makespan"
  samples: int = 64  # K actions per graph per update
  graphs_per_update: int = 1  # G
  updates_per_call: int = 10
  total_updates: int = 1000  # length of the learning-rate schedule
  epochs: int = 2
  minibatches: int = 1
  clip_eps: float = 0.2
  entropy_coef: float = 0.05
  value_coef: float = 0.5
  max_grad_norm: float = 1.0
  learning_rate: float = 3e-4
  lr_schedule: str = "cosine"
  warmup_updates: int = 0
  advantage: str = "leave_one_out"
  normalize_advantages: bool = True
  ema_decay: float = 0.9
  prng_impl: str = "rbg"
  self_imitation_coef: float = 0.0  # weight of the best-so-far cross-entropy (ppo.py)
  explore: float = 0.0  # weight of the uniform device choice mixed into the placement (ppo.py)

  @property
  def optimizer_steps(self) -> int:
    return self.total_updates * self.epochs * self.minibatches


def _constant(lr, steps, warmup):
  del steps
  return optax.linear_schedule(0.0, lr, warmup) if warmup else optax.constant_schedule(lr)


def _cosine(lr, steps, warmup):
  if not warmup:
    return optax.cosine_decay_schedule(lr, max(steps, 1), alpha=0.1)
  return optax.warmup_cosine_decay_schedule(0.0, lr, warmup, max(steps, warmup + 1),
                                            end_value=0.1 * lr)


def _linear(lr, steps, warmup):
  decay = optax.linear_schedule(lr, 0.1 * lr, max(steps - warmup, 1))
  if not warmup:
    return decay
  return optax.join_schedules([optax.linear_schedule(0.0, lr, warmup), decay], [warmup])


# name -> fn(peak learning rate, optimizer steps, warmup steps) -> optax schedule
SCHEDULES: Dict[str, Callable] = {"constant": _constant, "cosine": _cosine, "linear": _linear}


def learning_rate_schedule(hp: HParams):
  if hp.lr_schedule not in SCHEDULES:
    raise ValueError(f"unknown lr_schedule '{hp.lr_schedule}'; available: {sorted(SCHEDULES)}")
  per_update = hp.epochs * hp.minibatches
  return SCHEDULES[hp.lr_schedule](hp.learning_rate, hp.optimizer_steps,
                                   hp.warmup_updates * per_update)


def make_optimizer(hp: HParams) -> optax.GradientTransformation:
  return optax.chain(optax.clip_by_global_norm(hp.max_grad_norm),
                     optax.adam(learning_rate_schedule(hp)))


def check_hparams(hp: HParams, num_instances: int) -> None:
  """ValueError naming the first bad field."""
  rollout.get_task(hp.task)
  rollout.get_advantage(hp.advantage)
  if hp.lr_schedule not in SCHEDULES:
    raise ValueError(f"unknown lr_schedule '{hp.lr_schedule}'; available: {sorted(SCHEDULES)}")
  positive = {"samples": hp.samples, "graphs_per_update": hp.graphs_per_update,
              "updates_per_call": hp.updates_per_call, "total_updates": hp.total_updates,
              "epochs": hp.epochs, "minibatches": hp.minibatches}
  for name, value in positive.items():
    if value < 1:
      raise ValueError(f"{name} must be >= 1, got {value}")
  if hp.samples < 2 and hp.advantage in ("leave_one_out", "sample_mean"):
    raise ValueError(f"advantage '{hp.advantage}' compares samples: samples must be >= 2")
  if hp.samples % hp.minibatches:
    raise ValueError(f"samples ({hp.samples}) must be a multiple of minibatches "
                     f"({hp.minibatches})")
  if hp.graphs_per_update > num_instances:
    raise ValueError(f"graphs_per_update ({hp.graphs_per_update}) exceeds the number of "
                     f"(graph, topology) instances ({num_instances})")
  if not (hp.clip_eps > 0 and hp.learning_rate > 0 and hp.max_grad_norm > 0):
    raise ValueError("clip_eps, learning_rate and max_grad_norm must be > 0")
  if not 0.0 <= hp.ema_decay < 1.0:
    raise ValueError(f"ema_decay must be in [0, 1), got {hp.ema_decay}")
  if hp.warmup_updates < 0:
    raise ValueError(f"warmup_updates must be >= 0, got {hp.warmup_updates}")
  for name in ("entropy_coef", "value_coef"):  # a negative one inverts that loss term
    if not 0 <= getattr(hp, name) < float("inf"):
      raise ValueError(f"{name} must be finite and >= 0, got {getattr(hp, name)}")
  if not hp.self_imitation_coef >= 0:
    raise ValueError(f"self_imitation_coef must be >= 0, got {hp.self_imitation_coef}")
  if not 0.0 <= hp.explore < 1.0:
    raise ValueError(f"explore must be in [0, 1), got {hp.explore}")
  if hp.prng_impl not in ("rbg", "threefry2x32", "unsafe_rbg"):
    raise ValueError(f"prng_impl must be rbg, unsafe_rbg or threefry2x32, got {hp.prng_impl!r}")


def hparams_from_config(config) -> HParams:
  """HParams from the config fields of the same names (unknown names are ignored)."""
  fields = {f.name for f in dataclasses.fields(HParams)}
  given = {k: v for k, v in config.items() if k in fields}
  if "updates" in config:
    given.setdefault("total_updates", int(config["updates"]))
  types = {f.name: type(f.default) for f in dataclasses.fields(HParams)}
  return HParams(**{k: types[k](v) for k, v in given.items()})
