"""Model zoo: training steps of the models the device-placement papers optimized (design.md 6).

Each entry builds one *training step* (forward, backward, optax update) of a Flax model defined in
this package, with random initialisation and synthetic batches (nothing is downloaded). The step
is a pure function `step(params, opt_state, batch) -> (params, opt_state, loss)` ready for
`jax.jit`; its example arguments are produced by `init(key)`, so the front end can lower it on
abstract shapes (`jax.eval_shape(init, key)`) without allocating the weights of a large model,
and the cost-model validation can run it on real arrays.

Every model has size knobs (batch, sequence length, width, depth, ...) with three named settings:
  * "default": the sizes reported in BENCHMARKS.md (paper-like models),
  * "small":   a size that runs in well under a second per step on a CPU core (cost validation),
  * "tiny":    the smallest sensible instance, for CI.
Any knob can be overridden by keyword: `zoo.build("gnmt", "tiny", layers=4)`.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, Dict, Optional, Tuple

from simulator.graph import CompGraph

SIZES = ("default", "small", "tiny")


@dataclasses.dataclass(frozen=True)
class ZooStep:
  """A built training step: `step(*init(key))` runs one update; args are (params, opt, batch)."""
  name: str
  step: Callable[..., Any]            # (params, opt_state, batch) -> (params, opt_state, loss)
  init: Callable[[Any], Tuple]        # key -> (params, opt_state, batch)
  sizes: Dict[str, Any]               # the knobs it was built with

  def abstract_args(self, seed: int = 0) -> Tuple:
    """ShapeDtypeStructs of the step's arguments (no weights are allocated)."""
    import jax
    return jax.eval_shape(self.init, jax.random.PRNGKey(seed))

  def concrete_args(self, seed: int = 0) -> Tuple:
    import jax
    return self.init(jax.random.PRNGKey(seed))


@dataclasses.dataclass(frozen=True)
class ZooModel:
  """A registry entry. `builder(**sizes) -> (step, init)`."""
  name: str
  builder: Callable[..., Tuple[Callable, Callable]]
  settings: Dict[str, Dict[str, Any]]  # "default" / "small" / "tiny" -> knobs
  description: str
  paper: str = ""                      # which placement paper optimized this model


MODELS: Dict[str, ZooModel] = {}

# Modules that register models on import (each calls `register` at import time).
BUILTIN_MODULES = ("resnet", "inception", "amoebanet", "wavenet", "transformer", "gnmt",
                   "transformer_xl")


def register(name: str, *, description: str, default: Dict[str, Any], small: Dict[str, Any],
             tiny: Dict[str, Any], paper: str = ""):
  """Decorator registering `builder(**knobs) -> (step, init)` under `name`."""
  def wrap(builder):
    if name in MODELS:
      raise ValueError(f"zoo model {name!r} registered twice")
    for label, knobs in (("small", small), ("tiny", tiny)):
      extra = set(knobs) - set(default)
      if extra:
        raise ValueError(f"zoo model {name!r}: {label} setting has knobs {sorted(extra)} "
                         f"that the default setting lacks")
    MODELS[name] = ZooModel(name, builder, {"default": dict(default), "small": dict(small),
                                            "tiny": dict(tiny)}, description, paper)
    return builder
  return wrap


def _load():
  for mod in BUILTIN_MODULES:
    importlib.import_module(f"simulator.zoo.{mod}")


def available() -> Dict[str, str]:
  """Model name -> one-line description."""
  _load()
  return {k: m.description for k, m in sorted(MODELS.items())}


def build(name: str, size: str = "default", **overrides) -> ZooStep:
  """The training step of zoo model `name` at a named size with knob overrides.

  Raises:
    ValueError: unknown model, size or knob.
  """
  knobs = check(name, size, **overrides)
  step, init = MODELS[name].builder(**knobs)
  return ZooStep(name, step, init, knobs)


def check(name: str, size: str = "default", **overrides) -> Dict[str, object]:
  """The knobs `build` would build zoo model `name` with, without building it.

  Raises:
    ValueError: unknown model, size or knob.
  """
  _load()
  if name not in MODELS:
    raise ValueError(f"unknown zoo model {name!r}; available: {', '.join(sorted(MODELS))}")
  model = MODELS[name]
  if size not in SIZES:
    raise ValueError(f"unknown zoo size {size!r} for {name!r}; valid: {', '.join(SIZES)}")
  knobs = dict(model.settings["default"])
  knobs.update(model.settings[size])
  bad = set(overrides) - set(knobs)
  if bad:
    raise ValueError(f"zoo model {name!r}: unknown knob(s) {sorted(bad)}; valid knobs: "
                     f"{', '.join(sorted(knobs))}")
  # Integer knobs (sizes) are checked here as the model's build checks them; a float knob
  # (inception_v3's width multiplier) is left to the build.
  from simulator.zoo.common import check_knobs  # pylint: disable=g-import-not-at-top
  check_knobs(name, **{k: v for k, v in overrides.items() if not isinstance(knobs[k], float)})
  knobs.update(overrides)
  return knobs


def graph(name: str, size: str = "default", stage: str = "pre",
          graph_name: Optional[str] = None, **overrides) -> CompGraph:
  """CompGraph of zoo model `name`'s training step (cost 0: apply a cost model to fill it)."""
  from simulator.frontends import from_jax
  z = build(name, size, **overrides)
  return from_jax(z.step, *z.abstract_args(), stage=stage,
                  name=graph_name or f"zoo:{name}/{size}/{stage}")


__all__ = ["MODELS", "SIZES", "ZooModel", "ZooStep", "available", "build", "graph", "register"]
