"""An AmoebaNet-like NAS-cell network (after Real et al., 2019) for the model zoo.

Why: the evolved cells of AmoebaNet are the branchiest graphs the placement papers optimized
(GDP, GO): each cell is five small nodes, each summing two ops (separable convs, pools,
identity) applied to earlier states, so the training step is thousands of small ops with many
parallel paths, which is what makes placement and scheduling hard.

What: a cell reads the outputs of the two previous cells (states 0 and 1), brings both to
`channels` with ReLU -> 1x1 conv -> batch norm (a factorised stride-2 reduction when the older one
is twice the size), then computes states 2..6 from the genotype below and concatenates the
states no node reads. A reduction cell applies its ops to states 0 and 1 with stride 2. The
network: 3x3/2 conv stem, two reduction cells (filters/4, filters/2; the ImageNet stem), then
`stages` stages of `cells_per_stage` normal cells with `filters * 2**s` channels, a reduction
cell before each stage after the first, ReLU, global average pool, dense classifier. No
auxiliary head and no drop-path.

The genotype is data (`NORMAL_CELL`, `REDUCTION_CELL`): a tuple of (op, input state) pairs, two
per node; it is modelled on AmoebaNet-A's cells with the ops named in `OPS` (separable 3x3 / 5x5,
3x3 max / average pool, identity), not a verbatim copy of the published genotype.
"""

from __future__ import annotations

import functools
from typing import Callable, Dict, List, Tuple

import flax.linen as nn
import jax.numpy as jnp

from simulator.zoo import register
from simulator.zoo.common import classification_loss, make_stateful_train_step
from simulator.zoo.resnet import batch_norm, check_knobs, fast_init, image_batch, memoized

Genotype = Tuple[Tuple[str, int], ...]

# Consecutive pairs make one node: state[2 + k] = op(state[in]) + op'(state[in']).
NORMAL_CELL: Genotype = (
    ("avg_pool", 0), ("max_pool", 0),   # state 2
    ("sep3", 0), ("identity", 1),       # state 3
    ("identity", 1), ("avg_pool", 0),   # state 4
    ("sep5", 2), ("sep3", 1),           # state 5
    ("avg_pool", 1), ("sep3", 3),       # state 6
)
REDUCTION_CELL: Genotype = (
    ("sep3", 0), ("avg_pool", 1),       # state 2
    ("max_pool", 0), ("sep5", 1),       # state 3
    ("max_pool", 1), ("sep3", 2),       # state 4
    ("avg_pool", 0), ("identity", 3),   # state 5
    ("sep5", 2), ("max_pool", 4),       # state 6
)


class SepConv(nn.Module):
  """(ReLU -> depthwise kxk -> pointwise 1x1 -> batch norm) twice; the stride is on the first."""
  channels: int
  kernel: int
  strides: int

  @nn.compact
  def __call__(self, x):
    for i in range(2):
      x = nn.relu(x)
      x = nn.Conv(x.shape[-1], (self.kernel, self.kernel), strides=self.strides if i == 0 else 1,
                  padding="SAME", feature_group_count=x.shape[-1], use_bias=False)(x)
      x = batch_norm()(nn.Conv(self.channels, (1, 1), use_bias=False)(x))
    return x


class FactorizedReduce(nn.Module):
  """Halves height and width: ReLU, two stride-2 1x1 convs on pixel grids offset by one, concat."""
  channels: int

  @nn.compact
  def __call__(self, x):
    x = nn.relu(x)
    half = self.channels // 2
    a = nn.Conv(max(half, 1), (1, 1), strides=2, use_bias=False)(x)
    shifted = jnp.pad(x, ((0, 0), (0, 1), (0, 1), (0, 0)))[:, 1:, 1:, :]
    b = nn.Conv(max(self.channels - half, 1), (1, 1), strides=2, use_bias=False)(shifted)
    return batch_norm()(jnp.concatenate([a, b], axis=-1))


def _pool(kind: str, channels: int, strides: int) -> Callable:
  fn = nn.max_pool if kind == "max" else nn.avg_pool
  return functools.partial(fn, window_shape=(3, 3), strides=(strides, strides), padding="SAME")


def _identity(channels: int, strides: int) -> Callable:
  return (lambda x: x) if strides == 1 else FactorizedReduce(channels)


# op name -> (channels, strides) -> callable on an NHWC tensor; called inside a compact method.
OPS: Dict[str, Callable[[int, int], Callable]] = {
    "sep3": lambda c, s: SepConv(c, 3, s),
    "sep5": lambda c, s: SepConv(c, 5, s),
    "max_pool": functools.partial(_pool, "max"),
    "avg_pool": functools.partial(_pool, "avg"),
    "identity": _identity,
}


def check_genotype(name: str, genotype: Genotype) -> None:
  """Raises ValueError unless `genotype` is pairs of (op in OPS, input of an earlier state)."""
  if not genotype or len(genotype) % 2:
    raise ValueError(f"genotype {name}: needs a non-empty, even number of (op, input) pairs, "
                     f"got {len(genotype)}")
  for j, (op, src) in enumerate(genotype):
    state = 2 + j // 2
    if op not in OPS:
      raise ValueError(f"genotype {name}, entry {j}: unknown op {op!r}; valid: {', '.join(OPS)}")
    if not 0 <= src < state:
      raise ValueError(f"genotype {name}, entry {j}: input {src} is not an earlier state "
                       f"(0..{state - 1}) of state {state}")


def loose_ends(genotype: Genotype) -> Tuple[int, ...]:
  """States no node reads: the ones a cell concatenates as its output."""
  used = {src for _, src in genotype}
  return tuple(s for s in range(2 + len(genotype) // 2) if s not in used)


class Cell(nn.Module):
  genotype: Genotype
  channels: int
  reduction: bool

  @nn.compact
  def __call__(self, prev_prev, prev):
    c = self.channels
    if prev_prev.shape[1] != prev.shape[1]:
      prev_prev = FactorizedReduce(c)(prev_prev)
    else:
      prev_prev = batch_norm()(nn.Conv(c, (1, 1), use_bias=False)(nn.relu(prev_prev)))
    prev = batch_norm()(nn.Conv(c, (1, 1), use_bias=False)(nn.relu(prev)))
    states = [prev_prev, prev]
    for k in range(0, len(self.genotype), 2):
      total = 0
      for op, src in self.genotype[k:k + 2]:
        strides = 2 if self.reduction and src < 2 else 1
        total = total + OPS[op](c, strides)(states[src])
      states.append(total)
    return jnp.concatenate([states[s] for s in loose_ends(self.genotype)], axis=-1)


class AmoebaNet(nn.Module):
  filters: int
  cells_per_stage: int
  stages: int
  classes: int
  normal: Genotype = NORMAL_CELL
  reduce: Genotype = REDUCTION_CELL

  @nn.compact
  def __call__(self, batch):
    f = self.filters
    x = nn.Conv(max(f // 4, 1), (3, 3), strides=2, padding="SAME", use_bias=False)(
        batch["image"])
    x = batch_norm()(x)
    prev_prev, prev = x, x
    plan: List[Tuple[int, bool]] = [(max(f // 4, 1), True), (max(f // 2, 1), True)]
    for s in range(self.stages):
      if s > 0:
        plan.append((f * 2 ** s, True))
      plan.extend([(f * 2 ** s, False)] * self.cells_per_stage)
    for channels, reduction in plan:
      cell = Cell(self.reduce if reduction else self.normal, channels, reduction)
      prev_prev, prev = prev, cell(prev_prev, prev)
    x = jnp.mean(nn.relu(prev), axis=(1, 2))
    return nn.Dense(self.classes)(x)


check_genotype("NORMAL_CELL", NORMAL_CELL)
check_genotype("REDUCTION_CELL", REDUCTION_CELL)


@register("amoebanet", description="AmoebaNet-like NAS cells (sep-conv/pool/identity genotype)",
          default=dict(batch=32, image=299, filters=190, cells_per_stage=6, stages=3,
                       classes=1000),
          small=dict(batch=4, image=64, filters=16, cells_per_stage=1, stages=2, classes=100),
          tiny=dict(batch=2, image=32, filters=8, cells_per_stage=1, stages=1, classes=10),
          paper="GDP, GO")
@memoized
def build_amoebanet(batch, image, filters, cells_per_stage, stages, classes):
  check_knobs("amoebanet", batch=batch, image=image, filters=filters,
              cells_per_stage=cells_per_stage, stages=stages, classes=classes)
  module = AmoebaNet(int(filters), int(cells_per_stage), int(stages), int(classes))
  step, init = make_stateful_train_step(module, image_batch(batch, image, classes), classification_loss)
  return step, fast_init(init)
