"""Transformer-XL language-model training steps for the zoo (`transformer_xl2/4/8`).

Why: GO (Zhou et al. 2020) places Transformer-XL with 2, 4 and 8 layers; its segment-level
recurrence makes a deep graph whose size grows with the number of segments in a step, unlike a
plain Transformer's.

What (Dai et al. 2019): a decoder-only LM over segments of `seq` tokens. Each layer attends over
[memory; current segment], where the memory is the previous segment's input to that layer (the
last `mem_len` positions, under `stop_gradient`). Positions are relative: with sinusoidal
encodings R of the distances K-1 .. 0 (K = mem_len + seq), the attention score of query i and
key j is
    (q_i + u) . k_j  +  (q_i + v) . (W_r R)_{i-j}          (u = r_w_bias, v = r_r_bias),
the second term computed for all (i, distance) pairs and aligned by the relative shift
(`rel_shift`). Causal masking lets query i see keys j <= i + mem_len. Post-LayerNorm residual
blocks, ReLU feed-forward, embedding tied with the softmax projection, no dropout.

A training step processes `segments` consecutive segments in a Python loop, carrying the memory
across them (the batch holds the memory left by the previous step, zeros at the start); the loss
is the mean token cross-entropy over all segments.

Knobs: batch, seq (segment length), mem_len, segments, layers, d_model, heads, d_ff, vocab.
"""

from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from simulator.zoo import register
from simulator.zoo.common import make_train_step, sequence_loss
from simulator.zoo.transformer import FeedForward, check_knobs, sinusoid

_NEG_INF = -1e30


def rel_shift(x):
  """Aligns scores computed per (query i, distance index c) to (query i, key j).

  x: (..., T, K) where column c holds distance K-1-c. Returns (..., T, K) whose [i, j] is
  x[i, j + T - 1 - i], i.e. the score of distance i + (K - T) - j, for every j <= i + K - T
  (the other entries are unused: the causal mask removes them).
  """
  *lead, t, k = x.shape
  x = jnp.pad(x, [(0, 0)] * len(lead) + [(0, 0), (1, 0)])        # (..., T, K + 1)
  x = x.reshape(*lead, k + 1, t)[..., 1:, :]                      # (..., K, T)
  return x.reshape(*lead, t, k)


class RelAttentionLayer(nn.Module):
  """Relative multi-head attention over [memory; h] and a feed-forward, post-LN residuals."""
  d_model: int
  heads: int
  d_ff: int

  @nn.compact
  def __call__(self, h, mem, pos, r_w_bias, r_r_bias):
    # h (B, T, D); mem (B, M, D); pos (K, D); biases (H, Dh)
    heads, d_head = self.heads, self.d_model // self.heads
    t, m = h.shape[1], mem.shape[1]
    proj = lambda name: nn.DenseGeneral((heads, d_head), use_bias=False, name=name)
    cat = jnp.concatenate([mem, h], axis=1)                            # (B, K, D)
    q, k, v = proj("query")(h), proj("key")(cat), proj("value")(cat)  # (B, T|K, H, Dh)
    r = proj("pos")(pos)                                               # (K, H, Dh)
    ac = jnp.einsum("bthd,bkhd->bhtk", q + r_w_bias, k)                # (B, H, T, K)
    bd = rel_shift(jnp.einsum("bthd,khd->bhtk", q + r_r_bias, r))     # (B, H, T, K)
    mask = np.arange(m + t)[None, :] <= np.arange(t)[:, None] + m     # (T, K)
    scores = jnp.where(mask, (ac + bd) / math.sqrt(d_head), _NEG_INF)
    vec = jnp.einsum("bhtk,bkhd->bthd", jax.nn.softmax(scores, axis=-1), v)
    out = nn.DenseGeneral(self.d_model, axis=(-2, -1), use_bias=False, name="out")(vec)
    h = nn.LayerNorm(name="ln_attn")(h + out)
    ff = FeedForward(self.d_model, self.d_ff, "relu", name="ff")
    return nn.LayerNorm(name="ln_ff")(h + ff(h))


class TransformerXL(nn.Module):
  """batch -> logits (B, segments * seq, V); memory carried across the segments."""
  vocab: int
  d_model: int
  heads: int
  d_ff: int
  layers: int
  seq: int
  mem_len: int
  segments: int

  @nn.compact
  def __call__(self, batch):
    d_head = self.d_model // self.heads
    embed = nn.Embed(self.vocab, self.d_model, embedding_init=nn.initializers.normal(0.02),
                     name="embed")
    r_w_bias = self.param("r_w_bias", nn.initializers.normal(0.02), (self.heads, d_head))
    r_r_bias = self.param("r_r_bias", nn.initializers.normal(0.02), (self.heads, d_head))
    blocks = [RelAttentionLayer(self.d_model, self.heads, self.d_ff, name=f"layer_{i}")
              for i in range(self.layers)]
    klen = self.mem_len + self.seq
    pos = jnp.asarray(sinusoid(np.arange(klen - 1, -1, -1), self.d_model))  # (K, D)
    mems = [batch["mems"][i] for i in range(self.layers)]                  # (B, M, D) each
    logits = []
    for s in range(self.segments):
      x = embed(batch["tokens"][:, s * self.seq:(s + 1) * self.seq]) * math.sqrt(self.d_model)
      inputs = []
      for i, block in enumerate(blocks):
        inputs.append(x)
        x = block(x, mems[i], pos, r_w_bias, r_r_bias)
      mems = [jax.lax.stop_gradient(jnp.concatenate([mem, h], axis=1)[:, self.seq:])
              if self.seq <= self.mem_len else
              jax.lax.stop_gradient(h[:, self.seq - self.mem_len:])
              for mem, h in zip(mems, inputs)]
      logits.append(embed.attend(x))                                       # (B, T, V)
    return jnp.concatenate(logits, axis=1)


def _batch(batch, seq, mem_len, segments, layers, d_model, vocab):
  def make(key):
    ids = jax.random.randint(key, (batch, segments * seq + 1), 0, vocab, jnp.int32)
    return {"tokens": ids[:, :-1],   # (B, segments * T)
            "target": ids[:, 1:],    # (B, segments * T) next tokens
            # (L, B, M, D) hidden states of the previous step's last segment (zeros at start)
            "mems": jnp.zeros((layers, batch, mem_len, d_model), jnp.float32)}
  return make


def build_transformer_xl(batch, seq, mem_len, segments, layers, d_model, heads, d_ff, vocab,
                         model: str = "transformer_xl"):
  """(step, init) of one Transformer-XL training step (Adam) over `segments` segments."""
  check_knobs(model, batch=batch, seq=seq, mem_len=mem_len, segments=segments, layers=layers,
              d_model=d_model, heads=heads, d_ff=d_ff, vocab=vocab)
  net = TransformerXL(vocab, d_model, heads, d_ff, layers, seq, mem_len, segments)
  return make_train_step(net, _batch(batch, seq, mem_len, segments, layers, d_model, vocab),
                         sequence_loss)


def _register(layers: int):
  register(
      f"transformer_xl{layers}",
      description=f"Transformer-XL LM, {layers} layers, relative positions, segment recurrence",
      default=dict(batch=16, seq=128, mem_len=128, segments=4, layers=layers, d_model=512,
                   heads=8, d_ff=2048, vocab=32000),
      small=dict(batch=4, seq=32, mem_len=32, segments=2, layers=layers, d_model=128, heads=4,
                 d_ff=512, vocab=2000),
      tiny=dict(batch=2, seq=4, mem_len=4, segments=2, layers=layers, d_model=16, heads=2,
                d_ff=32, vocab=32),
      paper="Dai et al. 2019; placed by GO (Zhou et al. 2020)",
  )(functools.partial(build_transformer_xl, model=f"transformer_xl{layers}"))


for _layers in (2, 4, 8):
  _register(_layers)
