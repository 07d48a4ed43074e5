"""WaveNet (van den Oord et al., 2016) for the model zoo, as `wavenet_2x18` and `wavenet_4x36`.

Why: GDP and GO place WaveNets of 2 stacks x 18 layers and 4 x 36: a deep stack of identical
gated layers where every layer also feeds a long-range skip sum, so the graph is a chain with
one fan-in edge per layer to the output head.

What: mu-law samples (integers in [0, classes)) are one-hot encoded and fed to a causal conv
(kernel 2); then `stacks` x `layers` residual layers, layer l of a stack with dilation 2**l
(doubling per layer, restarting at 1 each stack). A layer computes a causal dilated conv for the
filter and one for the gate (kernel 2, left padding only, so output t never reads input > t),
z = tanh(filter) * sigmoid(gate), a 1x1 conv to `skip_channels` (summed over all layers) and a
1x1 conv back to `channels` added to the layer's input (the last layer's residual output is
unused and omitted). Head: ReLU -> 1x1 conv -> ReLU -> 1x1 conv to `classes` logits, softmax
cross-entropy against the next sample. A dilation at or past the sequence length T reads only
the zero padding for its older tap, so it is applied as dilation T (the same function; it keeps
XLA's padded shapes small: 4 x 36 would otherwise pad by 2**35 samples).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from simulator.zoo import register
from simulator.zoo.common import make_train_step, sequence_loss
from simulator.zoo.resnet import check_knobs, fast_init, memoized


def causal_conv(channels: int, dilation: int, name: Optional[str] = None) -> nn.Conv:
  """Kernel-2 causal conv: output t reads inputs t and t - dilation (zero before the start)."""
  return nn.Conv(channels, (2,), kernel_dilation=(dilation,), padding=((dilation, 0),),
                 name=name)


class GatedLayer(nn.Module):
  """Gated dilated causal conv with residual and skip 1x1 projections."""
  channels: int
  skip_channels: int
  dilation: int
  last: bool = False

  @nn.compact
  def __call__(self, x):
    d = min(self.dilation, x.shape[1])  # (B, T, C): taps before t = 0 are zeros either way
    f = jnp.tanh(causal_conv(self.channels, d, name="filter")(x))
    g = jax.nn.sigmoid(causal_conv(self.channels, d, name="gate")(x))
    z = f * g
    skip = nn.Conv(self.skip_channels, (1,), name="skip")(z)
    if self.last:
      return x, skip
    return x + nn.Conv(self.channels, (1,), name="residual")(z), skip


class WaveNet(nn.Module):
  channels: int
  skip_channels: int
  stacks: int
  layers: int
  classes: int

  @nn.compact
  def __call__(self, batch):
    x = jax.nn.one_hot(batch["audio"], self.classes, dtype=jnp.float32)  # (B, T, classes)
    x = causal_conv(self.channels, 1, name="input")(x)
    skips = 0
    for s in range(self.stacks):
      for l in range(self.layers):
        last = s == self.stacks - 1 and l == self.layers - 1
        x, skip = GatedLayer(self.channels, self.skip_channels, 2 ** l, last,
                             name=f"stack{s}_layer{l}")(x)
        skips = skips + skip
    y = nn.Conv(self.skip_channels, (1,), name="head")(nn.relu(skips))
    return nn.Conv(self.classes, (1,), name="logits")(nn.relu(y))


def audio_batch(batch: int, length: int, classes: int):
  """make_batch(key) -> {'audio': (batch, length) int32, 'target': (batch, length) int32}.

  `target` is `audio` shifted by one sample (the next-sample prediction task).
  """
  def make(key) -> Dict[str, Any]:
    samples = jax.random.randint(key, (batch, length + 1), 0, classes, jnp.int32)
    return {"audio": samples[:, :-1], "target": samples[:, 1:]}
  return make


def _build(name, batch, length, channels, skip_channels, stacks, layers, classes):
  check_knobs(name, batch=batch, length=length, channels=channels, skip_channels=skip_channels,
              stacks=stacks, layers=layers, classes=classes)
  module = WaveNet(int(channels), int(skip_channels), int(stacks), int(layers), int(classes))
  step, init = make_train_step(module, audio_batch(batch, length, classes), sequence_loss)
  return step, fast_init(init)


_SIZES = dict(default=dict(batch=4, length=16384, channels=64, skip_channels=256, classes=256),
              small=dict(batch=2, length=1024, channels=32, skip_channels=64, classes=256),
              tiny=dict(batch=1, length=64, channels=8, skip_channels=8, classes=16))


@register("wavenet_2x18", description="WaveNet, 2 stacks x 18 gated dilated causal conv layers",
          default=dict(_SIZES["default"], stacks=2, layers=18),
          small=dict(_SIZES["small"], stacks=2, layers=8),
          tiny=dict(_SIZES["tiny"], stacks=2, layers=3), paper="GDP, GO")
@memoized
def build_wavenet_2x18(**knobs):
  return _build("wavenet_2x18", **knobs)


@register("wavenet_4x36", description="WaveNet, 4 stacks x 36 gated dilated causal conv layers",
          default=dict(_SIZES["default"], stacks=4, layers=36),
          small=dict(_SIZES["small"], stacks=4, layers=8),
          tiny=dict(_SIZES["tiny"], stacks=4, layers=3), paper="GDP, GO")
@memoized
def build_wavenet_4x36(**knobs):
  return _build("wavenet_4x36", **knobs)
