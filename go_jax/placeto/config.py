"""Placeto's training config: its fields, defaults and validation (`check_config` -> `Hyper`,
the static settings of the jitted update). go_jax/placeto/trainer.py re-exports them.
"""

from __future__ import annotations

import dataclasses

import ml_collections
import numpy as np

from go_jax import objectives
from go_jax.placeto import env
from go_jax.placeto import model as model_lib
from go_jax.training.state import SCHEDULES

# Config fields of the Placeto trainer (anything else is a ValueError: a field of another
# trainer would be silently ignored otherwise). "held_out" lists graphs never trained on.
FIELDS = ("algorithm", "graphs", "topologies", "held_out", "objective", "groups", "init",
          "samples", "graphs_per_update", "updates", "updates_per_call", "learning_rate",
          "lr_schedule", "warmup_updates", "max_grad_norm", "entropy_coef", "discount",
          "normalize_advantages", "seed", "prng_impl", "checkpoint_every", "keep_checkpoints",
          "tensorboard", "max_seconds", "policy")
OPTIONAL = ("held_out", "max_seconds", "algorithm")


@dataclasses.dataclass(frozen=True)
class Hyper:
  """Static settings of the jitted update (hashable)."""
  objective: str
  groups: int
  init: str
  samples: int  # K episodes per instance per update
  graphs_per_update: int  # G
  updates_per_call: int
  total_updates: int  # the schedule's length (0: a constant schedule, any length)
  learning_rate: float
  lr_schedule: str
  warmup_updates: int
  max_grad_norm: float
  entropy_coef: float
  discount: float
  normalize_advantages: bool
  prng_impl: str


def default_config() -> ml_collections.ConfigDict:
  """The base config of a Placeto run (experiments/configs/pretrain_placeto.py builds on it;
  `checkpoint="none"` of the method fine-tunes fresh parameters with it). Fields:
    graphs, topologies, held_out: graph / topology specs (go-jax-train's, as in
      experiments/configs/train_base.py); held_out: graphs never trained on.
    objective: "makespan" or "peak_memory" (out-of-memory placements are penalised).
    groups: the grouping's size M (simulator.coarsen); an episode has bucket(M) steps.
    init: the episodes' first placement, "single" (device 0) or "random".
    samples: K episodes per instance per update (>= 2: the baseline averages the others).
    graphs_per_update: G instances per update (all when equal to their number).
    updates, updates_per_call, checkpoint_every, keep_checkpoints, max_seconds, seed,
      prng_impl, tensorboard: as in the other trainers.
    learning_rate, lr_schedule, warmup_updates, max_grad_norm, entropy_coef, discount,
      normalize_advantages: REINFORCE / Adam settings (module docstring).
    policy: go_jax.placeto.model.default_config().
  """
  c = ml_collections.ConfigDict()
  c.algorithm = "placeto"
  c.graphs, c.topologies, c.held_out = (), (), ()
  c.objective = "makespan"
  c.groups = 32
  c.init = "single"
  c.samples = 8
  c.graphs_per_update = 1
  c.updates = 100
  c.updates_per_call = 5
  c.learning_rate = 1e-3
  c.lr_schedule = "constant"
  c.warmup_updates = 0
  c.max_grad_norm = 1.0
  c.entropy_coef = 0.01
  c.discount = 1.0
  c.normalize_advantages = True
  c.seed = 0
  c.prng_impl = "rbg"
  c.checkpoint_every = 50
  c.keep_checkpoints = 2
  c.tensorboard = False
  c.max_seconds = ml_collections.config_dict.placeholder(float)
  c.policy = model_lib.default_config()
  return c


def _count(config, name: str, minimum: int = 1) -> int:
  value = config[name]
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
    raise ValueError(f"config.{name} must be an integer >= {minimum}, got {value!r}")
  return int(value)


def check_config(config) -> Hyper:
  """The static settings of a config; ValueError naming the first bad or unknown field."""
  unknown = sorted(set(config.keys()) - set(FIELDS))
  if unknown:
    raise ValueError(f"config field(s) {unknown} are not used by the placeto trainer; its "
                     f"fields: {list(FIELDS)}")
  missing = sorted(set(FIELDS) - set(OPTIONAL) - set(config.keys()))
  if missing:
    raise ValueError(f"placeto config lacks field(s) {missing}")
  objectives.get_objective(config.objective)
  for name in ("groups", "samples", "graphs_per_update", "updates", "updates_per_call"):
    _count(config, name)
  if int(config.samples) < 2:
    raise ValueError("config.samples must be >= 2: the baseline averages the returns of the "
                     "instance's other episodes")
  _count(config, "warmup_updates", 0)
  if config.init not in env.INITS:
    raise ValueError(f"config.init must be one of {list(env.INITS)}, got {config.init!r}")
  if config.lr_schedule not in SCHEDULES:
    raise ValueError(f"config.lr_schedule must be one of {sorted(SCHEDULES)}, got "
                     f"{config.lr_schedule!r}")
  for name in ("learning_rate", "max_grad_norm"):
    if not float(config[name]) > 0:
      raise ValueError(f"config.{name} must be > 0, got {config[name]!r}")
  if not float(config.entropy_coef) >= 0:
    raise ValueError(f"config.entropy_coef must be >= 0, got {config.entropy_coef!r}")
  if not 0.0 < float(config.discount) <= 1.0:
    raise ValueError(f"config.discount must be in (0, 1], got {config.discount!r}")
  if config.prng_impl not in ("rbg", "threefry2x32"):
    raise ValueError(f"config.prng_impl must be rbg or threefry2x32, got {config.prng_impl!r}")
  model_lib.check_config(config.policy)
  # A constant schedule without warmup does not depend on the run's length: leaving the length
  # out of the static settings lets runs of any length (fine-tuning budgets) share one compile.
  steady = config.lr_schedule == "constant" and not int(config.warmup_updates)
  return Hyper(objective=config.objective, groups=int(config.groups), init=config.init,
               samples=int(config.samples), graphs_per_update=int(config.graphs_per_update),
               updates_per_call=int(config.updates_per_call),
               total_updates=0 if steady else int(config.updates),
               learning_rate=float(config.learning_rate),
               lr_schedule=config.lr_schedule, warmup_updates=int(config.warmup_updates),
               max_grad_norm=float(config.max_grad_norm),
               entropy_coef=float(config.entropy_coef), discount=float(config.discount),
               normalize_advantages=bool(config.normalize_advantages),
               prng_impl=config.prng_impl)
