"""Inception-v3 (Szegedy et al., 2016) for the model zoo.

Why: Inception-v3 is the convolutional benchmark of the learned placers (HDP, GDP, GO, Placeto):
unlike ResNet's chain, every block is four parallel branches of different depth joined by a
concatenation, so there is real parallelism for a placement to exploit.

What: stem (five conv + batch norm + ReLU layers, two 3x3/2 max pools), 3x Inception-A (1x1,
5x5, double 3x3 and pool branches), reduction-A, 4x Inception-B (factorised 1x7/7x1 convs),
reduction-B, 2x Inception-C (1x3 and 3x1 convs on split branches), global average pool and a
dense classifier; no auxiliary head. Every channel count is the paper's times `width`. Defaults
(299x299, 1000 classes) give 23,834,568 trainable parameters (conv weights, batch-norm scale and
offset, classifier), the published ~23.8M. The unpadded ("VALID") stem and reductions need
`image >= 75`.
"""

from __future__ import annotations

import numbers
from typing import Sequence, Tuple

import flax.linen as nn
import jax.numpy as jnp

from simulator.zoo import register
from simulator.zoo.common import classification_loss, make_stateful_train_step
from simulator.zoo.resnet import batch_norm, check_knobs, fast_init, image_batch, memoized

MIN_IMAGE = 75  # smallest input the VALID-padded stem and reductions leave a 1x1 map for


class ConvBN(nn.Module):
  """Conv (no bias) -> batch norm -> ReLU; `channels` is the paper's count, scaled by `width`."""
  channels: int
  kernel: Tuple[int, int]
  width: float
  strides: int = 1
  padding: str = "SAME"

  @nn.compact
  def __call__(self, x):
    c = max(1, int(round(self.channels * self.width)))
    x = nn.Conv(c, self.kernel, strides=self.strides, padding=self.padding, use_bias=False)(x)
    return nn.relu(batch_norm()(x))


def _avg_pool(x):
  return nn.avg_pool(x, (3, 3), strides=(1, 1), padding="SAME")


def _max_pool_reduce(x):
  return nn.max_pool(x, (3, 3), strides=(2, 2), padding="VALID")


class InceptionA(nn.Module):
  pool_channels: int
  width: float

  @nn.compact
  def __call__(self, x):
    w = self.width
    b1 = ConvBN(64, (1, 1), w)(x)
    b5 = ConvBN(64, (5, 5), w)(ConvBN(48, (1, 1), w)(x))
    b3 = ConvBN(96, (3, 3), w)(ConvBN(96, (3, 3), w)(ConvBN(64, (1, 1), w)(x)))
    bp = ConvBN(self.pool_channels, (1, 1), w)(_avg_pool(x))
    return jnp.concatenate([b1, b5, b3, bp], axis=-1)


class ReductionA(nn.Module):
  width: float

  @nn.compact
  def __call__(self, x):
    w = self.width
    b3 = ConvBN(384, (3, 3), w, strides=2, padding="VALID")(x)
    bd = ConvBN(96, (3, 3), w)(ConvBN(64, (1, 1), w)(x))
    bd = ConvBN(96, (3, 3), w, strides=2, padding="VALID")(bd)
    return jnp.concatenate([b3, bd, _max_pool_reduce(x)], axis=-1)


class InceptionB(nn.Module):
  """Factorised 7x7: a 1x7 -> 7x1 branch and a (7x1 -> 1x7) x2 branch with `c7` channels."""
  c7: int
  width: float

  @nn.compact
  def __call__(self, x):
    w, c7 = self.width, self.c7
    b1 = ConvBN(192, (1, 1), w)(x)
    b7 = ConvBN(c7, (1, 1), w)(x)
    b7 = ConvBN(192, (7, 1), w)(ConvBN(c7, (1, 7), w)(b7))
    bd = ConvBN(c7, (1, 1), w)(x)
    for c, k in ((c7, (7, 1)), (c7, (1, 7)), (c7, (7, 1)), (192, (1, 7))):
      bd = ConvBN(c, k, w)(bd)
    bp = ConvBN(192, (1, 1), w)(_avg_pool(x))
    return jnp.concatenate([b1, b7, bd, bp], axis=-1)


class ReductionB(nn.Module):
  width: float

  @nn.compact
  def __call__(self, x):
    w = self.width
    b3 = ConvBN(320, (3, 3), w, strides=2, padding="VALID")(ConvBN(192, (1, 1), w)(x))
    b7 = ConvBN(192, (1, 1), w)(x)
    b7 = ConvBN(192, (7, 1), w)(ConvBN(192, (1, 7), w)(b7))
    b7 = ConvBN(192, (3, 3), w, strides=2, padding="VALID")(b7)
    return jnp.concatenate([b3, b7, _max_pool_reduce(x)], axis=-1)


class InceptionC(nn.Module):
  width: float

  @nn.compact
  def __call__(self, x):
    w = self.width
    b1 = ConvBN(320, (1, 1), w)(x)
    b3 = ConvBN(384, (1, 1), w)(x)
    b3 = jnp.concatenate([ConvBN(384, (1, 3), w)(b3), ConvBN(384, (3, 1), w)(b3)], axis=-1)
    bd = ConvBN(384, (3, 3), w)(ConvBN(448, (1, 1), w)(x))
    bd = jnp.concatenate([ConvBN(384, (1, 3), w)(bd), ConvBN(384, (3, 1), w)(bd)], axis=-1)
    bp = ConvBN(192, (1, 1), w)(_avg_pool(x))
    return jnp.concatenate([b1, b3, bd, bp], axis=-1)


class InceptionV3(nn.Module):
  width: float
  classes: int
  a_pool: Sequence[int] = (32, 64, 64)      # pool-branch channels of the three A blocks
  b_c7: Sequence[int] = (128, 160, 160, 192)  # inner channels of the four B blocks

  @nn.compact
  def __call__(self, batch):
    w = self.width
    x = ConvBN(32, (3, 3), w, strides=2, padding="VALID")(batch["image"])
    x = ConvBN(32, (3, 3), w, padding="VALID")(x)
    x = ConvBN(64, (3, 3), w)(x)
    x = _max_pool_reduce(x)
    x = ConvBN(80, (1, 1), w, padding="VALID")(x)
    x = ConvBN(192, (3, 3), w, padding="VALID")(x)
    x = _max_pool_reduce(x)
    for pool in self.a_pool:
      x = InceptionA(pool, w)(x)
    x = ReductionA(w)(x)
    for c7 in self.b_c7:
      x = InceptionB(c7, w)(x)
    x = ReductionB(w)(x)
    for _ in range(2):
      x = InceptionC(w)(x)
    x = jnp.mean(x, axis=(1, 2))
    return nn.Dense(self.classes)(x)


@register("inception_v3", description="Inception-v3 (batch norm, no auxiliary head), 299x299",
          default=dict(batch=32, image=299, width=1.0, classes=1000),
          small=dict(batch=8, image=75, width=0.25, classes=100),
          tiny=dict(batch=2, image=75, width=0.0625, classes=10),
          paper="HDP, GDP, GO, Placeto")
@memoized
def build_inception(batch, image, width, classes):
  check_knobs("inception_v3", batch=batch, image=image, classes=classes)
  if isinstance(width, bool) or not isinstance(width, numbers.Real) or not width > 0:
    raise ValueError(f"zoo model 'inception_v3': knob 'width' (channel multiplier) must be a "
                     f"positive number, got {width!r}")
  if image < MIN_IMAGE:
    raise ValueError(f"zoo model 'inception_v3': knob 'image' must be >= {MIN_IMAGE} (the "
                     f"unpadded stem and reductions need it), got {image}")
  module = InceptionV3(float(width), int(classes))
  step, init = make_stateful_train_step(module, image_batch(batch, image, classes), classification_loss)
  return step, fast_init(init)
