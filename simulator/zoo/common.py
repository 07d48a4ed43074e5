"""Shared pieces of the zoo: the optax training step and synthetic batches.

Every zoo model is a Flax linen module plus a loss; `make_train_step` turns them into the pure
step `(params, opt_state, batch) -> (params, opt_state, loss)` and its `init(key)`, so each
model file only defines the network, its batch and its loss.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Dict

import jax
import jax.numpy as jnp
import optax


def check_knobs(model: str, **knobs) -> None:
  """Raises ValueError naming the knob unless each is a positive int (or a non-empty tuple of)."""
  for k, v in knobs.items():
    values = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if not values or any(isinstance(x, bool) or not isinstance(x, numbers.Integral) or x <= 0
                         for x in values):
      kind = "a non-empty tuple of positive integers" if isinstance(v, (tuple, list)) else (
          "a positive integer")
      raise ValueError(f"zoo model {model!r}: knob {k!r} must be {kind}, got {v!r}")


def make_train_step(module, make_batch: Callable[[Any], Dict[str, jnp.ndarray]],
                    loss_fn: Callable[[Any, Dict[str, jnp.ndarray]], jnp.ndarray],
                    learning_rate: float = 1e-3, optimizer: str = "adam"):
  """(step, init) for `module` trained with `loss_fn(outputs, batch)` under optax.

  `make_batch(key)` returns the synthetic batch dict; the module is called as
  `module.apply(params, batch, train=True)`-style through `loss_fn`'s first argument, which
  receives `module.apply(params, batch)`'s output. Models with mutable state (batch norm)
  should use `make_stateful_train_step`.
  """
  tx = _optimizer(optimizer, learning_rate)

  def loss(params, batch):
    return loss_fn(module.apply({"params": params}, batch), batch)

  def step(params, opt_state, batch):
    value, grads = jax.value_and_grad(loss)(params, batch)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value

  def init(key):
    k_param, k_batch = jax.random.split(key)
    batch = make_batch(k_batch)
    params = module.init(k_param, batch)["params"]
    return params, tx.init(params), batch

  return step, init


def make_stateful_train_step(module, make_batch, loss_fn, learning_rate: float = 1e-3,
                             optimizer: str = "sgd_momentum"):
  """Like `make_train_step` for modules with a `batch_stats` collection (batch norm).

  The step's first argument is the dict {"params", "batch_stats"}; batch statistics are
  updated in training mode, as a real training step does.
  """
  tx = _optimizer(optimizer, learning_rate)

  def loss(params, stats, batch):
    out, new_state = module.apply({"params": params, "batch_stats": stats}, batch,
                                  mutable=["batch_stats"])
    return loss_fn(out, batch), new_state["batch_stats"]

  def step(variables, opt_state, batch):
    (value, stats), grads = jax.value_and_grad(loss, has_aux=True)(
        variables["params"], variables["batch_stats"], batch)
    updates, opt_state = tx.update(grads, opt_state, variables["params"])
    params = optax.apply_updates(variables["params"], updates)
    return {"params": params, "batch_stats": stats}, opt_state, value

  def init(key):
    k_param, k_batch = jax.random.split(key)
    batch = make_batch(k_batch)
    variables = module.init(k_param, batch)
    variables = {"params": variables["params"], "batch_stats": variables.get("batch_stats", {})}
    return variables, tx.init(variables["params"]), batch

  return step, init


_OPTIMIZERS = {
    "adam": lambda lr: optax.adam(lr),
    "adamw": lambda lr: optax.adamw(lr),
    "sgd_momentum": lambda lr: optax.sgd(lr, momentum=0.9),
    "sgd": lambda lr: optax.sgd(lr),
}


def _optimizer(name: str, lr: float):
  if name not in _OPTIMIZERS:
    raise ValueError(f"unknown optimizer {name!r}; valid: {', '.join(_OPTIMIZERS)}")
  return _OPTIMIZERS[name](lr)


def classification_loss(logits, batch):
  """Mean softmax cross-entropy against integer `batch['label']`."""
  return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()


def sequence_loss(logits, batch):
  """Mean token cross-entropy of (B, T, V) logits against `batch['target']` (B, T)."""
  return optax.softmax_cross_entropy_with_integer_labels(logits, batch["target"]).mean()
