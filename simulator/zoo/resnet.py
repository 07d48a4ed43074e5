"""ResNet-50 (v1.5, bottleneck blocks, batch norm) for the model zoo, plus the image-model helpers.

Why: ResNet-50 is the standard convolutional placement benchmark (PipeDream, Piper, Baechi); a
long chain of identical blocks with one skip edge each, so placement is mostly about where to cut.

What: stem (7x7/2 conv, batch norm, ReLU, 3x3/2 max pool), then `len(blocks)` stages of
bottleneck blocks (1x1 -> 3x3 -> 1x1 x4 expansion; v1.5 puts the stride on the 3x3 conv; a 1x1
projection shortcut where the shape changes), global average pool and a dense classifier. Stage i
has `width * 2**i` bottleneck channels. Defaults (ImageNet, 1000 classes) give 25,557,032
trainable parameters, the published ResNet-50 figure.

The helpers `image_batch`, `batch_norm`, `memoized` and `fast_init` (and `check_knobs`, re-exported
from common) are shared with the other convolutional models of the zoo.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Dict, Sequence, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from simulator.zoo import register
from simulator.zoo.common import check_knobs, classification_loss, make_stateful_train_step

BN_MOMENTUM = 0.9
BN_EPSILON = 1e-5


# ------------------------------------------------------------------ shared image-model helpers
def memoized(builder):
  """Builder wrapper: equal knobs give the very same (step, init) functions.

  Why: jax caches compilations per function object, so a training step that is run
  (`jax.jit(zoo.build(...).step)`) and then lowered again for its graph
  (`zoo.graph(..., stage="post")`) is compiled once, not twice (XLA's CPU compile of a
  convolutional training step takes seconds even at tiny sizes).
  """
  @functools.lru_cache(maxsize=8)
  def cached(items):
    return builder(**dict(items))

  @functools.wraps(builder)
  def wrapper(**knobs):
    items = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in knobs.items()))
    try:
      hash(items)
    except TypeError:  # an unhashable knob value: build without the cache
      return builder(**knobs)
    return cached(items)
  return wrapper


def fast_init(init: Callable[[Any], Tuple]) -> Callable[[Any], Tuple]:
  """`jax.jit(init)` with every weight named 'kernel' redrawn from one normal draw.

  Why: Flax's initialisers draw each kernel separately (a key fold per parameter and a truncated
  normal), which compiles to thousands of HLO ops: XLA's CPU compile of a tiny ResNet-50's
  `init` took 16 s, far longer than its training step. Here one `normal` of all the kernels'
  elements is sliced, reshaped and scaled by 1/sqrt(fan_in) (fan_in = product of all but the
  last axis: LeCun normal, untruncated), so the Flax draws are dead code that XLA drops; biases,
  batch-norm scales and statistics keep their Flax values. The optimizer state `init` returns
  must not depend on the weights' values (true of the zoo's optimizers: zeros and a count).
  """
  def wrapped(key):
    k_weights, k_rest = jax.random.split(key)
    variables, opt_state, batch = init(k_rest)
    leaves = jax.tree_util.tree_flatten_with_path(variables)[0]
    kernels = [(path, x) for path, x in leaves if getattr(path[-1], "key", None) == "kernel"]
    flat = jax.random.normal(k_weights, (sum(x.size for _, x in kernels),), jnp.float32)
    fresh, offset = {}, 0
    for path, x in kernels:
      scale = 1.0 / math.sqrt(max(math.prod(x.shape[:-1]), 1))
      fresh[path] = flat[offset:offset + x.size].reshape(x.shape) * scale
      offset += x.size
    variables = jax.tree_util.tree_map_with_path(lambda p, x: fresh.get(p, x), variables)
    return variables, opt_state, batch
  return jax.jit(wrapped)


def image_batch(batch: int, image: int, classes: int) -> Callable[[Any], Dict[str, jnp.ndarray]]:
  """make_batch(key) -> {'image': (batch, image, image, 3) float32, 'label': (batch,) int32}."""
  def make(key):
    k_img, k_lab = jax.random.split(key)
    return {"image": jax.random.normal(k_img, (batch, image, image, 3), jnp.float32),
            "label": jax.random.randint(k_lab, (batch,), 0, classes, jnp.int32)}
  return make


def batch_norm() -> nn.BatchNorm:
  """Batch norm in training mode (batch statistics; running averages updated as a side output)."""
  return nn.BatchNorm(use_running_average=False, momentum=BN_MOMENTUM, epsilon=BN_EPSILON)


# ------------------------------------------------------------------ the network
class Bottleneck(nn.Module):
  """1x1 -> 3x3 (stride here: v1.5) -> 1x1 (4x) with a projection shortcut where shapes change."""
  channels: int
  strides: int

  @nn.compact
  def __call__(self, x):
    out = 4 * self.channels
    y = nn.relu(batch_norm()(nn.Conv(self.channels, (1, 1), use_bias=False)(x)))
    y = nn.Conv(self.channels, (3, 3), strides=self.strides, padding=((1, 1), (1, 1)),
                use_bias=False)(y)
    y = nn.relu(batch_norm()(y))
    y = batch_norm()(nn.Conv(out, (1, 1), use_bias=False)(y))
    if x.shape[-1] != out or self.strides != 1:
      x = batch_norm()(nn.Conv(out, (1, 1), strides=self.strides, use_bias=False)(x))
    return nn.relu(x + y)


class ResNet(nn.Module):
  width: int
  blocks: Sequence[int]
  classes: int

  @nn.compact
  def __call__(self, batch):
    x = nn.Conv(self.width, (7, 7), strides=2, padding=((3, 3), (3, 3)), use_bias=False)(
        batch["image"])
    x = nn.relu(batch_norm()(x))
    x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
    for stage, depth in enumerate(self.blocks):
      for b in range(depth):
        x = Bottleneck(self.width * 2 ** stage, strides=2 if stage > 0 and b == 0 else 1)(x)
    x = jnp.mean(x, axis=(1, 2))
    return nn.Dense(self.classes)(x)


@register("resnet50", description="ResNet-50 v1.5 (bottleneck, batch norm), ImageNet 224x224",
          default=dict(batch=32, image=224, width=64, blocks=(3, 4, 6, 3), classes=1000),
          small=dict(batch=16, image=64, width=16, blocks=(1, 1, 1, 1), classes=100),
          tiny=dict(batch=2, image=32, width=8, blocks=(1, 1, 1, 1), classes=10),
          paper="PipeDream, Piper, Baechi, Placeto")
@memoized
def build_resnet(batch, image, width, blocks, classes):
  check_knobs("resnet50", batch=batch, image=image, width=width, blocks=tuple(blocks),
              classes=classes)
  module = ResNet(int(width), tuple(int(b) for b in blocks), int(classes))
  step, init = make_stateful_train_step(module, image_batch(batch, image, classes), classification_loss)
  return step, fast_init(init)
