"""Synthetic training steps for the calibration: what single-op microbenchmarks cannot show.

Why: a training step is not a sequence of isolated ops. Its independent ops (the two gradients
of a layer, parallel branches, the optimizer's per-parameter updates) run at the same time on
XLA:CPU's worker threads and contend for the cores, the caches and the thread pool. A cost
model calibrated only on programs of one op (or one chain of ops) under-predicts every step
(by 5-40% on the zoo, 4-55% on these programs). These steps let the fit measure that
contention (`roofline.concurrent`, `Calibration.contention`) on programs of the same kind as
the ones it predicts.

None of them is a model of the zoo (simulator.zoo), which stays the validation set: they are
generic Flax networks (an MLP with layer norm, a small CNN with batch norm and pooling, a
pre-norm attention encoder, an unrolled LSTM, a gated dilated 1-D conv stack) at their own
widths, depths and batch sizes, each trained by one Adam step on a cross-entropy loss.

Each builder takes its size tuple and returns (fn, args) like the builders of `microbench`.
"""

from __future__ import annotations

from typing import Callable, Tuple

import numpy as np


def _x(seed: int, *shape):
  import jax.numpy as jnp
  return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _train_step(model, x) -> Tuple[Callable, Tuple]:
  """(step, (params, opt_state, x, labels)): one Adam step of `model` on softmax cross-entropy."""
  import jax
  import jax.numpy as jnp
  import optax
  labels = jnp.asarray(np.arange(x.shape[0]) % 10, jnp.int32)
  params = model.init(jax.random.PRNGKey(0), x)
  tx = optax.adam(1e-3)

  def step(params, opt_state, x, labels):
    def loss(p):
      logits = model.apply(p, x)
      return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    value, grads = jax.value_and_grad(loss)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value

  return step, (params, tx.init(params), x, labels)


def _modules():
  """The Flax modules (built lazily: flax is imported only when a step program is built)."""
  import flax.linen as nn
  import jax
  import jax.numpy as jnp

  class MLP(nn.Module):
    width: int
    depth: int

    @nn.compact
    def __call__(self, x):
      for _ in range(self.depth):
        x = nn.gelu(nn.LayerNorm()(nn.Dense(self.width)(x)))
      return nn.Dense(10)(x)

  class CNN(nn.Module):
    channels: int

    @nn.compact
    def __call__(self, x):
      for c in (self.channels, 2 * self.channels, 4 * self.channels):
        x = nn.relu(nn.BatchNorm(use_running_average=True)(nn.Conv(c, (3, 3))(x)))
        x = nn.max_pool(x, (2, 2), (2, 2))
      return nn.Dense(10)(x.mean((1, 2)))

  class Encoder(nn.Module):
    dim: int
    layers: int

    @nn.compact
    def __call__(self, x):
      for _ in range(self.layers):
        x = x + nn.SelfAttention(num_heads=4, qkv_features=self.dim)(nn.LayerNorm()(x))
        x = x + nn.Dense(self.dim)(nn.relu(nn.Dense(3 * self.dim)(nn.LayerNorm()(x))))
      return nn.Dense(10)(x.mean(1))

  class LSTM(nn.Module):
    hidden: int
    steps: int

    @nn.compact
    def __call__(self, x):
      cell = nn.OptimizedLSTMCell(self.hidden)
      carry = cell.initialize_carry(jax.random.PRNGKey(0), x[:, 0].shape)
      y = x[:, 0]
      for t in range(self.steps):
        carry, y = cell(carry, x[:, t])
      return nn.Dense(10)(y)

  class GatedConv1D(nn.Module):
    channels: int
    layers: int

    @nn.compact
    def __call__(self, x):
      for i in range(self.layers):
        h = nn.Conv(2 * self.channels, (2,), kernel_dilation=(2 ** (i % 6),))(x)
        a, b = jnp.split(h, 2, -1)
        x = x + nn.Conv(self.channels, (1,))(jnp.tanh(a) * nn.sigmoid(b))
      return nn.Dense(10)(x.mean(1))

  return MLP, CNN, Encoder, LSTM, GatedConv1D


def train_mlp(size):
  """size = (batch, width, depth)."""
  b, width, depth = size
  return _train_step(_modules()[0](width, depth), _x(1, b, 200))


def train_cnn(size):
  """size = (batch, image side, channels of the first layer)."""
  b, side, channels = size
  return _train_step(_modules()[1](channels), _x(2, b, side, side, 3))


def train_encoder(size):
  """size = (batch, sequence, model width, layers)."""
  b, seq, dim, layers = size
  return _train_step(_modules()[2](dim, layers), _x(3, b, seq, dim))


def train_lstm(size):
  """size = (batch, hidden, unrolled steps)."""
  b, hidden, steps = size
  return _train_step(_modules()[3](hidden, steps), _x(4, b, steps, 48))


def train_conv1d(size):
  """size = (batch, length, channels, layers)."""
  b, length, channels, layers = size
  return _train_step(_modules()[4](channels, layers), _x(5, b, length, channels))


# name -> builder; microbench.BENCHMARKS registers them with target "step".
STEPS = {"train_mlp": train_mlp, "train_cnn": train_cnn, "train_encoder": train_encoder,
         "train_lstm": train_lstm, "train_conv1d": train_conv1d}
