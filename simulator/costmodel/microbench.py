"""Microbenchmark programs for calibrating the roofline.

Each benchmark is a small jitted JAX program that exercises one op class (a matmul, a
convolution, an elementwise chain, a reduction, a transpose, a gather, a scatter, a loop, ...) at
a problem size, or a whole synthetic training step (`step_programs`). `programs(sizes)` builds
them; `compile_program` and `time_calls` (from `simulator.costmodel.timing`, re-exported here)
compile and time them.

Sizes: the problem sizes below are the calibration's own (single ops, 1e3 - 1e9 flops, and the
synthetic training steps of `step_programs`, target "step"); none is a model of the zoo, whose
training steps are the validation set.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Mapping, Tuple

import numpy as np

from simulator.costmodel import step_programs
# How programs are compiled and timed (re-exported: microbench.time_calls etc. are public).
from simulator.costmodel.timing import (COLD_BYTES, MAX_COPIES, MAX_INNER, MIN_SAMPLE_S,
                                        MMAP_THRESHOLD, Compiled, check_timing, cold_copies,
                                        compile_program, executable_platform, fresh_bytes,
                                        time_calls)

__all__ = ["Program", "SIZE_PRESETS", "BENCHMARKS", "resolve_sizes", "programs",
           # re-exported from simulator.costmodel.timing
           "COLD_BYTES", "MAX_COPIES", "MAX_INNER", "MIN_SAMPLE_S", "MMAP_THRESHOLD", "Compiled",
           "check_timing", "cold_copies", "compile_program", "executable_platform", "fresh_bytes",
           "time_calls"]

# Size presets: benchmark name -> problem sizes (each benchmark's own knob; see BENCHMARKS).
SIZE_PRESETS: Dict[str, Dict[str, Tuple]] = {
    "full": {
        "matmul": (24, 64, 160, 400, 900), "matmul_tall": (128, 1024, 8192),
        "batched_matmul": (16, 48, 128, 256), "dot_chain": (4, 24, 96),
        "matmul_bf16": (96, 384),
        "conv2d": ((2, 8, 8), (8, 28, 24), (8, 14, 56), (4, 7, 120), (16, 32, 32)),
        "conv2d_1x1": (16, 64, 160), "conv1d_dilated": (200, 1200, 4800),
        "conv_input_grad": ((4, 10, 16), (8, 20, 40)),
        "conv_grouped": ((2, 8, 8, 3), (8, 20, 24, 3), (8, 10, 56, 3), (16, 28, 32, 3),
                         (4, 16, 16, 5), (4, 8, 32, 7)),
        "conv_grouped_grad": ((4, 16, 8, 5), (4, 8, 32, 3)),
        "conv_filter": ((2, 8, 8, 3), (8, 20, 24, 3), (8, 10, 56, 3), (16, 28, 32, 3),
                        (4, 16, 4, 5), (4, 8, 16, 5)),
        "matmul_skinny": (128, 384, 1024), "transpose_minor": (1000, 10000),
        "matmul_chain": (96, 256), "mlp_chain": (128, 512), "conv1d_chain": (256, 2048),
        "conv2d_chain": ((16, 16), (8, 64)), "norm_chain": (16, 256, 2048),
        "strided_conv": ((2, 8, 8), (8, 16, 32)), "conv1d_filter": (300, 3000),
        "axpy": (1000, 30000, 300000, 3000000), "transcendental": (300, 3000, 100000, 1000000),
        "polynomial": (3000, 100000, 1000000), "fresh_output": (8500000, 12000000),
        "adam_update": (2000, 50000, 700000), "reduce_rows": (2000, 50000, 500000, 2000000),
        "reduce_cols": (20000, 200000, 2000000), "softmax": (5000, 100000, 1000000),
        "pool": (6, 16, 40), "pool_grad": (6, 16, 40), "transpose": (40, 300, 1000, 1600),
        "concat": (3000, 100000, 1000000), "pad": (30, 200, 800),
        "broadcast": (5000, 200000, 3000000), "embedding": (100, 1000, 8000),
        "dynamic_slice": (3000, 80000, 800000), "scatter_add": (100, 1000, 8000),
        "dynamic_update_slice": (3000, 80000, 800000), "fori_loop": (4, 16, 64),
        "scan": (8, 32, 128), "sort": (500, 20000, 50000),
        # whole training steps (step_programs): contention between concurrent ops
        "train_mlp": ((96, 384, 6), (48, 1024, 3), (256, 160, 4)),
        "train_cnn": ((12, 40, 24), (6, 56, 48), (16, 24, 16)),
        "train_encoder": ((6, 96, 96, 3), (3, 160, 192, 2), (12, 48, 64, 2)),
        "train_lstm": ((24, 192, 12), (48, 96, 24), (8, 320, 6)),
        "train_conv1d": ((3, 1500, 48, 10), (2, 3000, 24, 20), (8, 400, 64, 6)),
    },
    "quick": {
        "matmul": (48, 320), "dot_chain": (12,), "conv2d": ((4, 12, 20),),
        "conv_grouped": ((4, 12, 16, 3),), "conv_filter": ((4, 12, 16, 3),),
        "axpy": (2000, 400000),
        "transcendental": (50000,), "reduce_rows": (100000,), "transpose": (500,),
        "embedding": (1500,), "scatter_add": (1500,), "fori_loop": (8,),
        "train_mlp": ((32, 128, 2),),
    },
}


@dataclasses.dataclass(frozen=True)
class Program:
  name: str           # "<benchmark>/<size>"
  target: str         # the op class the benchmark is meant to exercise
  fn: Callable
  args: Tuple


def _rng(*shape, dtype=None):
  import jax.numpy as jnp
  x = np.random.default_rng(sum(shape) + len(shape)).standard_normal(shape).astype(np.float32)
  return jnp.asarray(x, dtype or jnp.float32)


def _conv(x, w, groups=1, dilation=1):
  from jax import lax
  nd = x.ndim - 2
  dn = ("NHWC", "HWIO", "NHWC") if nd == 2 else ("NWC", "WIO", "NWC")
  return lax.conv_general_dilated(x, w, (1,) * nd, "SAME", rhs_dilation=(dilation,) * nd,
                                  dimension_numbers=dn, feature_group_count=groups)


# ------------------------------------------------------------------ builders: size -> (fn, args)
def _matmul(n):
  return (lambda a, b: a @ b), (_rng(n, n), _rng(n, n))


def _matmul_tall(m):
  return (lambda a, b: a @ b), (_rng(m, 192), _rng(192, 320))


def _matmul_skinny(k):
  """A small batch through a weight matrix (an LSTM / small-batch layer): weight-stream bound."""
  return (lambda a, b: a @ b), (_rng(16, k), _rng(k, 2 * k))


def _batched_matmul(t):
  import jax.numpy as jnp
  return (lambda q, k: jnp.einsum("bqd,bkd->bqk", q, k)), (_rng(24, t, 40), _rng(24, t, 40))


def _dot_chain(k):
  def f(x, ws):
    for i in range(k):
      x = x @ ws[i]
    return x
  return f, (_rng(8, 8), [_rng(8, 8) * 0.3 for _ in range(k)])


def _matmul_bf16(n):
  import jax.numpy as jnp
  return (lambda a, b: a @ b), (_rng(n, n, dtype=jnp.bfloat16), _rng(n, n, dtype=jnp.bfloat16))


def _conv2d(bhc):
  b, h, c = bhc
  return (lambda x, w: _conv(x, w)), (_rng(b, h, h, c), _rng(3, 3, c, c) * 0.1)


def _conv2d_1x1(c):
  return (lambda x, w: _conv(x, w)), (_rng(8, 20, 20, c), _rng(1, 1, c, c) * 0.1)


def _conv1d_dilated(length):
  return (lambda x, w: _conv(x, w, dilation=4)), (_rng(4, length, 24), _rng(2, 24, 48) * 0.1)


def _conv_input_grad(bhc):
  import jax
  b, h, c = bhc
  def f(dy, w):
    return jax.vjp(lambda x: _conv(x, w), dy)[1](dy)[0]
  return f, (_rng(b, h, h, c), _rng(3, 3, c, c) * 0.1)


def _strided_conv(bhc):
  """Forward, input gradient (lhs-dilated) and filter gradient of a stride-2 3x3 conv."""
  import jax
  from jax import lax
  b, h, c = bhc
  conv = lambda x, w: lax.conv_general_dilated(x, w, (2, 2), "SAME",
                                               dimension_numbers=("NHWC", "HWIO", "NHWC"))
  def f(x, w):
    y, back = jax.vjp(conv, x, w)
    return back(y)
  return f, (_rng(b, h, h, c), _rng(3, 3, c, 2 * c) * 0.1)


def _conv1d_filter(length):
  import jax
  def f(x, dy):
    return jax.vjp(lambda w: _conv(x, w, dilation=4), _rng(2, 24, 48))[1](dy)[0]
  return f, (_rng(2, length, 24), _rng(2, length, 48))


def _conv1d_chain(length):
  """Four dependent dilated 1-D convs: the steady-state per-op cost (thread pool awake), as in a
  training step, rather than the first op of a call."""
  def f(x, ws):
    for i, w in enumerate(ws):
      x = _conv(x, w, dilation=2 ** i)
    return x
  return f, (_rng(4, length, 32), [_rng(2, 32, 32) * 0.2 for _ in range(4)])


def _conv2d_chain(hc):
  h, c = hc
  def f(x, ws):
    for w in ws:
      x = _conv(x, w)
    return x
  return f, (_rng(8, h, h, c), [_rng(3, 3, c, c) * 0.05 for _ in range(3)])


def _matmul_chain(n):
  def f(x, ws):
    for w in ws:
      x = x @ w
    return x
  return f, (_rng(n, n), [_rng(n, n) * (0.5 / n ** 0.5) for _ in range(4)])


def _mlp_chain(k):
  """A small batch through four tanh layers (an unrolled RNN's steady state)."""
  import jax.numpy as jnp
  def f(x, ws):
    for w in ws:
      x = jnp.tanh(x @ w)
    return x
  return f, (_rng(16, k), [_rng(k, k) * (1.0 / k ** 0.5) for _ in range(4)])


def _conv_grouped(bhck):
  b, h, c, k = bhck
  return (lambda x, w: _conv(x, w, groups=c)), (_rng(b, h, h, c), _rng(k, k, 1, c) * 0.1)


def _conv_grouped_grad(bhck):
  """Both gradients of a stride-2 depthwise conv (lhs-dilated grouped conv + filter grad)."""
  import jax
  from jax import lax
  b, h, c, k = bhck
  conv = lambda x, w: lax.conv_general_dilated(x, w, (2, 2), "SAME", feature_group_count=c,
                                               dimension_numbers=("NHWC", "HWIO", "NHWC"))
  def f(x, w):
    y, back = jax.vjp(conv, x, w)
    return back(y)
  return f, (_rng(b, h, h, c), _rng(k, k, 1, c) * 0.1)


def _conv_filter(bhck):
  import jax
  b, h, c, k = bhck
  def f(x, dy):
    return jax.vjp(lambda w: _conv(x, w), _rng(k, k, c, c))[1](dy)[0]
  return f, (_rng(b, h, h, c), _rng(b, h, h, c))


def _axpy(n):
  return (lambda x, y: 1.5 * x + y), (_rng(n), _rng(n))


def _transcendental(n):
  import jax.numpy as jnp
  import jax
  # the transcendentals of DL steps: tanh (LSTM, GELU), logistic, exp (softmax), rsqrt (norms)
  return (lambda x: jnp.tanh(x) * jax.nn.sigmoid(x) + jnp.exp(-x * x) * lax_rsqrt(x * x + 1.0)), (
      _rng(n),)


def lax_rsqrt(x):
  from jax import lax
  return lax.rsqrt(x)


def _polynomial(n):
  def f(x):  # Horner, degree 16: 32 flops per element, no transcendental
    y = x
    for k in range(16):
      y = y * x + (0.1 + 0.01 * k)
    return y
  return f, (_rng(n),)


def _fresh_output(n):
  """An elementwise op whose output (>= 32 MiB) the allocator maps afresh on every call."""
  return (lambda x: x * 1.5 + 0.5), (_rng(n),)


def _adam_update(n):
  import jax.numpy as jnp
  def f(p, g, m, v):
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    return p - 1e-3 * m / (jnp.sqrt(v) + 1e-8), m, v
  return f, (_rng(n), _rng(n), _rng(n), _rng(n))


def _reduce_rows(n):
  return (lambda x: x.sum(-1)), (_rng(max(n // 250, 1), 250),)


def _reduce_cols(n):
  return (lambda x: x.sum(0)), (_rng(max(n // 300, 1), 300),)


def _softmax(n):
  import jax
  return (lambda x: jax.nn.softmax(x, -1)), (_rng(max(n // 100, 1), 100),)


def _norm_chain(rows):
  """Four normalisations in a row (layer / batch norm statistics): one reduction fusion per
  step, with the elementwise work fused around it."""
  def f(x):
    for _ in range(4):
      mu = x.mean(-1, keepdims=True)
      var = ((x - mu) ** 2).mean(-1, keepdims=True)
      x = (x - mu) * lax_rsqrt(var + 1e-5)
    return x
  return f, (_rng(rows, 256),)


def _pool(h):
  import flax.linen as nn
  return (lambda x: nn.max_pool(x, (2, 2), (2, 2)) + nn.avg_pool(x, (3, 3), (2, 2), "SAME")), (
      _rng(8, h, h, 24),)


def _pool_grad(h):
  import flax.linen as nn
  import jax
  return jax.grad(lambda x: nn.max_pool(x, (3, 3), (2, 2), "SAME").sum()), (_rng(8, h, h, 24),)


def _transpose(n):
  return (lambda x: x.T), (_rng(n, n // 2 + 1),)


def _transpose_minor(n):
  """A transpose whose output's minor dimension is tiny (strided writes)."""
  return (lambda x: jnp_transpose(x, (2, 1, 0))), (_rng(2, n, 48),)


def jnp_transpose(x, axes):
  import jax.numpy as jnp
  return jnp.transpose(x, axes)


def _concat(n):
  import jax.numpy as jnp
  return (lambda a, b, c: jnp.concatenate([a, b, c], 0)), (_rng(n), _rng(n // 2), _rng(n))


def _pad(n):
  import jax.numpy as jnp
  return (lambda x: jnp.pad(x, ((3, 5), (7, 1)))), (_rng(n, n),)


def _broadcast(n):
  import jax.numpy as jnp
  return (lambda x: jnp.broadcast_to(x[None, :], (n // 100, 100))), (_rng(100),)


def _embedding(n):
  import jax.numpy as jnp
  idx = jnp.asarray(np.random.default_rng(n).integers(0, 4000, n), jnp.int32)
  return (lambda t, i: t[i]), (_rng(4000, 96), idx)


def _dynamic_slice(n):
  from jax import lax
  return (lambda buf, i: lax.dynamic_slice_in_dim(buf, i, n // 64, 0)), (
      _rng(n // 16, 64), np.int32(3))


def _scatter_add(n):
  import jax.numpy as jnp
  idx = jnp.asarray(np.random.default_rng(n).integers(0, 3000, n), jnp.int32)
  return (lambda u, i: jnp.zeros((3000, 96), jnp.float32).at[i].add(u)), (_rng(n, 96), idx)


def _dynamic_update_slice(n):
  import jax.numpy as jnp
  from jax import lax
  def f(u, i):
    buf = jnp.zeros((n // 16, 64), jnp.float32)
    return lax.dynamic_update_slice_in_dim(buf, u, i, 0)
  return f, (_rng(n // 64, 64), np.int32(5))


def _fori_loop(t):
  import jax.numpy as jnp
  from jax import lax
  def f(x, w):
    return lax.fori_loop(0, t, lambda i, h: jnp.tanh(h @ w), x)
  return f, (_rng(16, 64), _rng(64, 64) * 0.2)


def _scan(t):
  import jax.numpy as jnp
  from jax import lax
  def f(xs, w):
    def body(h, x):
      h = jnp.tanh(h @ w + x)
      return h, h
    return lax.scan(body, jnp.zeros((16, 64)), xs)
  return f, (_rng(t, 16, 64), _rng(64, 64) * 0.2)


def _sort(n):
  import jax.numpy as jnp
  return (lambda x: jnp.sort(x)), (_rng(n),)


# name -> (target op class, builder)
BENCHMARKS: Dict[str, Tuple[str, Callable]] = {
    "matmul": ("dot", _matmul), "matmul_tall": ("dot", _matmul_tall),
    "matmul_skinny": ("dot", _matmul_skinny), "matmul_chain": ("dot", _matmul_chain),
    "mlp_chain": ("dot", _mlp_chain), "conv1d_chain": ("conv_eigen", _conv1d_chain),
    "conv2d_chain": ("conv", _conv2d_chain),
    "conv_grouped_grad": ("conv_grouped", _conv_grouped_grad),
    "transpose_minor": ("data_movement", _transpose_minor),
    "batched_matmul": ("dot", _batched_matmul), "dot_chain": ("dot", _dot_chain),
    "matmul_bf16": ("dot", _matmul_bf16), "conv2d": ("conv", _conv2d),
    "conv2d_1x1": ("conv", _conv2d_1x1), "conv1d_dilated": ("conv_eigen", _conv1d_dilated),
    "conv_input_grad": ("conv", _conv_input_grad), "conv_grouped": ("conv_grouped", _conv_grouped),
    "conv_filter": ("conv_filter", _conv_filter), "axpy": ("elementwise", _axpy),
    "transcendental": ("elementwise", _transcendental),
    "polynomial": ("elementwise", _polynomial), "fresh_output": ("elementwise", _fresh_output),
    "strided_conv": ("conv", _strided_conv),
    "conv1d_filter": ("conv_eigen", _conv1d_filter),
    "adam_update": ("elementwise", _adam_update), "reduce_rows": ("reduce", _reduce_rows),
    "reduce_cols": ("reduce", _reduce_cols), "softmax": ("reduce", _softmax),
    "norm_chain": ("reduce", _norm_chain), "pool": ("pool", _pool),
    "pool_grad": ("pool", _pool_grad), "transpose": ("transpose", _transpose),
    "concat": ("data_movement", _concat), "pad": ("data_movement", _pad),
    "broadcast": ("data_movement", _broadcast), "embedding": ("gather", _embedding),
    "dynamic_slice": ("gather", _dynamic_slice), "scatter_add": ("scatter", _scatter_add),
    "dynamic_update_slice": ("scatter", _dynamic_update_slice),
    "fori_loop": ("control", _fori_loop), "scan": ("control", _scan), "sort": ("other", _sort),
    **{name: ("step", builder) for name, builder in step_programs.STEPS.items()},
}
assert all(set(p) <= set(BENCHMARKS) for p in SIZE_PRESETS.values())


def resolve_sizes(sizes) -> Dict[str, Tuple]:
  """A preset name ("full" / "quick") or a {benchmark: sizes} mapping, checked."""
  if isinstance(sizes, str):
    if sizes not in SIZE_PRESETS:
      raise ValueError(f"unknown size preset {sizes!r}; valid: {', '.join(SIZE_PRESETS)}")
    return dict(SIZE_PRESETS[sizes])
  if not isinstance(sizes, Mapping) or not sizes:
    raise ValueError(f"sizes must be a preset name or a non-empty {{benchmark: sizes}} mapping, "
                     f"got {sizes!r}")
  bad = sorted(set(sizes) - set(BENCHMARKS))
  if bad:
    raise ValueError(f"unknown benchmark(s) {bad}; valid: {', '.join(BENCHMARKS)}")
  for k, v in sizes.items():
    if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)) or not v:
      raise ValueError(f"sizes[{k!r}] must be a non-empty list of problem sizes (e.g. "
                       f"{SIZE_PRESETS['full'].get(k, ())[:2]!r}), got {v!r}")
  return {k: tuple(v) for k, v in sizes.items()}


def programs(sizes="full") -> List[Program]:
  """The microbenchmark programs of a size preset (or mapping), in a fixed order."""
  out = []
  for name, ladder in resolve_sizes(sizes).items():
    target, builder = BENCHMARKS[name]
    for size in ladder:
      fn, args = builder(size)
      label = "x".join(map(str, size)) if isinstance(size, tuple) else str(size)
      out.append(Program(f"{name}/{label}", target, fn, args))
  return out
