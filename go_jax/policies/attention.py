"""Segment-level recurrent attention over the nodes of a graph in topological order (GO / GDP).

The nodes are gathered in topological order and cut into segments of S nodes. In every layer a
segment attends to itself and to the memory: the previous segment at the same layer, held
without gradient, as in Transformer-XL (Dai et al., 2019). So a node sees up to 2S nodes around
it per layer and information travels S nodes further down the order with every layer, while the
attention scores take O(N * S) memory rather than O(N^2): graphs of tens of thousands of nodes fit.
The memory caches the previous segment's keys and values (Transformer-XL caches its hidden states
and projects them again: the same forward values for half the key/value work; the only gradient
lost is the one that would reach W_k, W_v through the memory copy).

Attention within a segment is bidirectional (a node sees the later nodes of its segment too; the
policy decides all nodes at once, there is nothing to hide). Positions are relative (registry
`RELATIVE`); for query i and key j at distance r = pos_i - pos_j, per head:

  "xl":   score(i, j) = [(q_i + u) . k_j + (q_i + v) . (W_r R_r)] / sqrt(d_head)
          Transformer-XL's decomposition, R_r a sinusoid of r, u and v learned.
  "bias": score(i, j) = [(q_i + u) . k_j] / sqrt(d_head) + b_r
          one learned scalar per head and distance (T5-like, no buckets): no position matmul.

Padded nodes sit at the end of the order and are masked out as keys (and their outputs zeroed),
so they never reach a real node.

Two equivalent implementations (same parameters, same outputs; tested):
  "scan":     `lax.scan` over segments, layers inside the step, memory in the carry: the
              forward pass holds one segment's scores at a time. The default: on CPU it was
              as fast as "parallel" or faster (up to ~30% in the forward pass).
  "parallel": layer by layer over all segments at once (the memory is the previous segment's
              row of the same array): larger matmuls, for accelerators; the scores of all
              segments are live at once (still O(N * S)).
`recurrence=False` drops the memory (segments attend only to themselves); `layers=0` makes the
module the identity (attention disabled). `film`, (layers, 2, width), scales and shifts every
layer's input (x * gamma + beta): GO's parameter superposition (see go.py).
"""

from __future__ import annotations

import math
from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

NEG_INF = -1e9  # added to scores of masked keys (finite: a fully masked row gives no NaN)


def layer_norm(x, scale, bias, eps: float = 1e-6):
  mean = x.mean(-1, keepdims=True)
  var = jnp.square(x - mean).mean(-1, keepdims=True)
  return (x - mean) * jax.lax.rsqrt(var + eps) * scale + bias


def relative_encoding(num_queries: int, num_keys: int, width: int) -> np.ndarray:
  """(num_keys + num_queries - 1, width) sinusoids of distances num_keys - 1 down to
  -(num_queries - 1): the distances `rel_shift` expects, in that (descending) order."""
  rel = np.arange(num_keys - 1, -num_queries, -1, dtype=np.float64)
  inv_freq = 1.0 / (10000.0 ** (np.arange(0, width, 2, dtype=np.float64) / width))
  angle = rel[:, None] * inv_freq[None, :]
  enc = np.concatenate([np.sin(angle), np.cos(angle)], axis=-1)[:, :width]
  return enc.astype(np.float32)


def rel_shift(scores: jnp.ndarray, num_keys: int) -> jnp.ndarray:
  """(..., S, K + S - 1) scores against descending distances -> (..., S, K) per key.

  Queries are positions 0..S-1, keys positions -(K - S)..S-1 (the memory, then the segment).
  Column c of the input is distance K - 1 - c, so key j of query i (distance i - j + K - S) is
  column S - 1 - i + j: row i shifted left by S - 1 - i, done with one reshape (Transformer-XL).
  """
  *lead, s, w = scores.shape
  flat = scores.reshape(*lead, s * w)[..., s - 1:s - 1 + s * (w - 1)]
  return flat.reshape(*lead, s, w - 1)[..., :num_keys]


def distance_index(num_queries: int, num_keys: int, max_segment: int) -> np.ndarray:
  """(S, K) int32 index of distance i - j + (K - S) into a table that starts at distance
  -(max_segment - 1): the lookup of the "bias" relative encoding."""
  i = np.arange(num_queries)[:, None]
  j = np.arange(num_keys)[None, :]
  return (i - j + (num_keys - num_queries) + max_segment - 1).astype(np.int32)


def _split_heads(t: jnp.ndarray, heads: int) -> jnp.ndarray:
  """(..., L, H) -> (..., heads, L, H / heads)."""
  *lead, length, h = t.shape
  return jnp.swapaxes(t.reshape(*lead, length, heads, h // heads), -2, -3)


def _xl_position(p, q, num_keys: int, max_segment: int):
  """(..., heads, S, K) Transformer-XL position scores (q + v) . W_r R_(i-j)."""
  heads, s, dh = q.shape[-3:]
  enc = jnp.asarray(relative_encoding(s, num_keys, heads * dh))
  r = _split_heads(enc @ p["w_r"], heads)  # (heads, K + S - 1, dh)
  return rel_shift(jnp.einsum("...hqd,hrd->...hqr", q + p["v"][:, None, :], r), num_keys)


def _bias_position(p, q, num_keys: int, max_segment: int):
  """(heads, S, K) learned bias per head and distance (broadcast over segments)."""
  s = q.shape[-2]
  return p["rel_bias"][:, distance_index(s, num_keys, max_segment)] * math.sqrt(q.shape[-1])


# name -> (position score function, extra parameter shapes given layers, width, heads, S).
RELATIVE = {
    "xl": (_xl_position, lambda n, h, k, s: {"w_r": (n, h, h), "v": (n, k, h // k)}),
    "bias": (_bias_position, lambda n, h, k, s: {"rel_bias": (n, k, 3 * s - 1)}),
}


def project(p, x):
  """(q (..., S, H), kv (..., S, 2H)) of layer inputs x; kv is also the next segment's memory."""
  xn = layer_norm(x, p["ln1_scale"], p["ln1_bias"])
  return xn @ p["w_q"] + p["b_q"], xn @ p["w_kv"] + p["b_kv"]


def attend(p, x, q, kv, key_mask, heads: int, relative: str, max_segment: int):
  """Relative attention of queries q over keys/values kv, then the feed-forward block.

  Args:
    p: this layer's parameters (dict of arrays, see `SegmentAttention`).
    x: (..., S, H) layer inputs (the residual stream); q (..., S, H) their queries.
    kv: (..., K, 2H) keys and values, the memory (if any) first; key_mask (..., K).
  Returns (..., S, H).
  """
  h = x.shape[-1]
  k_len = kv.shape[-2]
  qh = _split_heads(q, heads)  # (..., heads, S, dh)
  k, v = _split_heads(kv[..., :h], heads), _split_heads(kv[..., h:], heads)
  scale = 1.0 / math.sqrt(h // heads)
  scores = jnp.einsum("...hqd,...hkd->...hqk", qh + p["u"][:, None, :], k)
  scores = (scores + RELATIVE[relative][0](p, qh, k_len, max_segment)) * scale
  scores = jnp.where(key_mask[..., None, None, :], scores, NEG_INF)
  probs = jax.nn.softmax(scores, axis=-1)
  att = jnp.swapaxes(jnp.einsum("...hqk,...hkd->...hqd", probs, v), -2, -3).reshape(x.shape)
  y = x + att @ p["w_o"] + p["b_o"]
  ff = jax.nn.gelu(layer_norm(y, p["ln2_scale"], p["ln2_bias"]) @ p["w_1"] + p["b_1"])
  return y + ff @ p["w_2"] + p["b_2"]


def _modulate(x, film, layer: int):
  return x if film is None else x * film[layer, 0] + film[layer, 1]


def _layer_params(params, layer: int):
  return {k: v[layer] for k, v in params.items()}


def _run_scan(params, segs, masks, film, cfg):
  """lax.scan over segments; the carry holds every layer's keys/values of the previous one."""
  _, s, h = segs.shape

  def step(carry, seg):
    x, m = seg
    mems, mem_mask = carry
    kvs = []
    for l in range(cfg["layers"]):
      p = _layer_params(params, l)
      x = _modulate(x, film, l)
      q, kv = project(p, x)
      kvs.append(jax.lax.stop_gradient(kv))
      keys, key_mask = kv, m
      if cfg["recurrence"]:
        keys = jnp.concatenate([mems[l], kv], axis=0)
        key_mask = jnp.concatenate([mem_mask, m])
      x = attend(p, x, q, keys, key_mask, cfg["heads"], cfg["relative"], cfg["max_segment"])
    return (jnp.stack(kvs), m), x

  init = (jnp.zeros((cfg["layers"], s, 2 * h), segs.dtype), jnp.zeros((s,), bool))
  _, out = jax.lax.scan(step, init, (segs, masks))
  return out


def _run_parallel(params, segs, masks, film, cfg):
  """Layer by layer over all segments; the memory of segment t is row t - 1 of the keys."""
  x = segs
  for l in range(cfg["layers"]):
    p = _layer_params(params, l)
    x = _modulate(x, film, l)
    q, kv = project(p, x)
    keys, key_mask = kv, masks
    if cfg["recurrence"]:
      mem = jax.lax.stop_gradient(jnp.concatenate([jnp.zeros_like(kv[:1]), kv[:-1]]))
      keys = jnp.concatenate([mem, kv], axis=-2)
      mem_mask = jnp.concatenate([jnp.zeros_like(masks[:1]), masks[:-1]])
      key_mask = jnp.concatenate([mem_mask, masks], axis=-1)
    x = attend(p, x, q, keys, key_mask, cfg["heads"], cfg["relative"], cfg["max_segment"])
  return x


IMPLEMENTATIONS = {"scan": _run_scan, "parallel": _run_parallel}


class SegmentAttention(nn.Module):
  """`layers` segment-recurrent relative-attention layers (width H, `heads` heads).

  Call with h (Np, H) node states in node-id order, topo_order / topo_position (Np,) int32,
  node_mask (Np,) bool and optional film (layers, 2, H); returns (Np, H) in node-id order, zero
  on padded nodes. Parameters of all layers are stacked on a leading axis.
  """
  layers: int
  width: int
  heads: int
  segment_len: int
  recurrence: bool = True
  relative: str = "xl"  # key of RELATIVE
  ffn_width: Optional[int] = None  # default 2 * width
  impl: str = "scan"  # key of IMPLEMENTATIONS

  @nn.compact
  def __call__(self, h, topo_order, topo_position, node_mask, film=None):
    if self.layers == 0:
      return h
    hdim, heads, n_layers = self.width, self.heads, self.layers
    if heads < 1 or hdim % heads:
      raise ValueError(f"SegmentAttention: width {hdim} must be a multiple of heads={heads}")
    for what, key, table in (("impl", self.impl, IMPLEMENTATIONS),
                             ("relative", self.relative, RELATIVE)):
      if key not in table:
        raise ValueError(f"SegmentAttention: unknown {what} {key!r}; choose from "
                         f"{sorted(table)}")
    if self.segment_len < 1:
      raise ValueError(f"SegmentAttention: segment_len must be >= 1, got {self.segment_len}")
    if h.shape[-1] != hdim:
      raise ValueError(f"SegmentAttention: node states have width {h.shape[-1]}, expected "
                       f"{hdim}")
    if film is not None and film.shape != (n_layers, 2, hdim):
      raise ValueError(f"SegmentAttention: film has shape {film.shape}, expected "
                       f"({n_layers}, 2, {hdim})")
    ffn = self.ffn_width or 2 * hdim
    dense = nn.initializers.variance_scaling(1.0, "fan_in", "truncated_normal", in_axis=-2,
                                             out_axis=-1, batch_axis=(0,))
    zeros, ones = nn.initializers.zeros, nn.initializers.ones
    shapes = {
        "ln1_scale": ((n_layers, hdim), ones), "ln1_bias": ((n_layers, hdim), zeros),
        "w_q": ((n_layers, hdim, hdim), dense), "b_q": ((n_layers, hdim), zeros),
        "w_kv": ((n_layers, hdim, 2 * hdim), dense), "b_kv": ((n_layers, 2 * hdim), zeros),
        "u": ((n_layers, heads, hdim // heads), zeros),
        "w_o": ((n_layers, hdim, hdim), dense), "b_o": ((n_layers, hdim), zeros),
        "ln2_scale": ((n_layers, hdim), ones), "ln2_bias": ((n_layers, hdim), zeros),
        "w_1": ((n_layers, hdim, ffn), dense), "b_1": ((n_layers, ffn), zeros),
        "w_2": ((n_layers, ffn, hdim), dense), "b_2": ((n_layers, hdim), zeros),
    }
    extra = RELATIVE[self.relative][1](n_layers, hdim, heads, self.segment_len)
    shapes.update({k: (shape, dense if k.startswith("w_") else zeros)
                   for k, shape in extra.items()})
    params = {k: self.param(k, init, shape, jnp.float32) for k, (shape, init) in shapes.items()}
    out_scale = self.param("out_scale", ones, (hdim,), jnp.float32)
    out_bias = self.param("out_bias", zeros, (hdim,), jnp.float32)

    # Segments are always segment_len long (the last ones padded), so a graph's outputs do not
    # depend on the bucket it is padded to.
    n = h.shape[0]
    s = self.segment_len
    n_seg = -(-n // s)
    pad = n_seg * s - n
    x = jnp.pad(h[topo_order], ((0, pad), (0, 0))).reshape(n_seg, s, hdim)
    m = jnp.pad(jnp.asarray(node_mask, bool)[topo_order], (0, pad)).reshape(n_seg, s)
    cfg = {"layers": n_layers, "heads": heads, "recurrence": self.recurrence,
           "relative": self.relative, "max_segment": self.segment_len}
    y = IMPLEMENTATIONS[self.impl](params, x, m, film, cfg)
    y = layer_norm(y, out_scale, out_bias).reshape(n_seg * s, hdim)[:n]
    y = y[topo_position]  # back to node-id order
    return jnp.where(node_mask[:, None], y, 0.0)
