"""GNMT-style LSTM NMT training steps for the zoo (`gnmt2`, `gnmt4`, `gnmt8`).

Why: Google's NMT model (Wu et al. 2016) is the recurrent benchmark of the device-placement
papers (ColocRL, HDP, GDP, Placeto, GO): its 2/4/8-layer versions, with the LSTMs unrolled in
time, are the large graphs (tens of thousands of ops) that learned placers are measured on.

What: source and target embeddings; an encoder whose first layer is bidirectional (forward and
backward LSTMs, outputs concatenated) followed by unidirectional layers; a decoder whose bottom
LSTM feeds additive (Bahdanau) attention over the encoder outputs, the new context being
concatenated to the input of every higher decoder layer (GNMT's "new attention" wiring); residual
connections around the LSTM layers from layer 3 on, on both sides; a softmax projection over the
vocabulary of the top decoder layer; teacher-forced token cross-entropy.

The LSTMs are UNROLLED with a Python loop over time steps (never lax.scan / nn.scan), as in the
TensorFlow graphs the placement papers optimized: every time step of every layer is its own ops,
so the graph grows linearly with `layers` and `seq`. Each cell is TensorFlow's basic LSTM: one
matmul of [x, h] against a fused (in + H, 4H) kernel, gates i, g, f, o, forget bias 1.

Knobs: batch, seq (source and target length), hidden (LSTM units = embedding width), layers
(per side), vocab (source and target vocabularies, each this size).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from simulator.zoo import register
from simulator.zoo.common import make_train_step, sequence_loss
from simulator.zoo.transformer import check_knobs

RESIDUAL_FROM = 3  # 1-based index of the first layer with a residual connection (GNMT)


class LSTMCell(nn.Module):
  """Basic LSTM cell: (c, h), x -> (c', h'); one fused [x, h] @ W matmul per step."""
  hidden: int

  @nn.compact
  def __call__(self, carry, x):
    c, h = carry                                                          # (B, H) each
    gates = nn.Dense(4 * self.hidden, name="kernel")(jnp.concatenate([x, h], axis=-1))
    i, g, f, o = jnp.split(gates, 4, axis=-1)                             # (B, H) each
    c = jax.nn.sigmoid(f + 1.0) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    h = jax.nn.sigmoid(o) * jnp.tanh(c)
    return c, h


def _zeros(batch: int, hidden: int):
  z = jnp.zeros((batch, hidden), jnp.float32)
  return z, z


def _run(cell: LSTMCell, inputs, reverse: bool = False):
  """Unrolls `cell` over a list of (B, in) inputs in Python; returns the (B, H) outputs in order."""
  carry = _zeros(inputs[0].shape[0], cell.hidden)
  order = range(len(inputs) - 1, -1, -1) if reverse else range(len(inputs))
  outs = [None] * len(inputs)
  for t in order:
    carry = cell(carry, inputs[t])
    outs[t] = carry[1]
  return outs


class Encoder(nn.Module):
  """Bidirectional first layer, then `layers - 1` unidirectional layers (residual from 3)."""
  hidden: int
  layers: int

  @nn.compact
  def __call__(self, emb):  # (B, S, H) -> list of S (B, H) outputs of the top layer
    xs = [emb[:, t] for t in range(emb.shape[1])]
    fwd = _run(LSTMCell(self.hidden, name="layer_1_fw"), xs)
    bwd = _run(LSTMCell(self.hidden, name="layer_1_bw"), xs, reverse=True)
    xs = [jnp.concatenate([f, b], axis=-1) for f, b in zip(fwd, bwd)]     # (B, 2H) each
    for layer in range(2, self.layers + 1):
      ys = _run(LSTMCell(self.hidden, name=f"layer_{layer}"), xs)
      xs = [y + x for y, x in zip(ys, xs)] if layer >= RESIDUAL_FROM else ys
    return xs


class Attention(nn.Module):
  """Additive attention; `keys` are the encoder outputs projected once per sequence."""
  hidden: int

  @nn.compact
  def __call__(self, query, keys, values):  # (B, H), (B, S, H), (B, S, Hv) -> (B, Hv)
    q = nn.Dense(self.hidden, use_bias=False, name="query")(query)
    v = self.param("v", nn.initializers.normal(1.0 / self.hidden ** 0.5), (self.hidden,))
    scores = jnp.tanh(keys + q[:, None, :]) @ v                           # (B, S)
    weights = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bs,bsh->bh", weights, values)


class GNMT(nn.Module):
  """Encoder-decoder with attention: batch -> logits (B, T, V)."""
  hidden: int
  layers: int
  vocab: int

  @nn.compact
  def __call__(self, batch):
    h = self.hidden
    src = nn.Embed(self.vocab, h, name="src_embed")(batch["source"])     # (B, S, H)
    tgt = nn.Embed(self.vocab, h, name="tgt_embed")(batch["target_in"])  # (B, T, H)
    enc = jnp.stack(Encoder(h, self.layers, name="encoder")(src), axis=1)  # (B, S, H')
    keys = nn.Dense(h, use_bias=False, name="attn_keys")(enc)             # (B, S, H)
    attend = Attention(h, name="attention")
    cells = [LSTMCell(h, name=f"dec_layer_{i}") for i in range(1, self.layers + 1)]
    batch_size = tgt.shape[0]
    carries = [_zeros(batch_size, h) for _ in cells]
    context = jnp.zeros((batch_size, enc.shape[-1]), jnp.float32)
    tops = []
    for t in range(tgt.shape[1]):
      carries[0] = cells[0](carries[0], jnp.concatenate([tgt[:, t], context], axis=-1))
      x = carries[0][1]
      context = attend(x, keys, enc)
      for i in range(1, self.layers):
        carries[i] = cells[i](carries[i], jnp.concatenate([x, context], axis=-1))
        x = carries[i][1] + x if i + 1 >= RESIDUAL_FROM else carries[i][1]
      tops.append(x)
    return nn.Dense(self.vocab, name="softmax")(jnp.stack(tops, axis=1))


def _batch(batch, seq, vocab):
  def make(key):
    k1, k2 = jax.random.split(key)
    target = jax.random.randint(k2, (batch, seq), 0, vocab, jnp.int32)
    return {"source": jax.random.randint(k1, (batch, seq), 0, vocab, jnp.int32),  # (B, S)
            "target_in": jnp.concatenate([jnp.zeros((batch, 1), jnp.int32),
                                          target[:, :-1]], axis=1),              # (B, T)
            "target": target}                                                    # (B, T)
  return make


def build_gnmt(batch, seq, hidden, layers, vocab, model: str = "gnmt"):
  """(step, init) of one GNMT training step (Adam) at the given sizes."""
  check_knobs(model, batch=batch, seq=seq, hidden=hidden, layers=layers, vocab=vocab)
  return make_train_step(GNMT(hidden, layers, vocab), _batch(batch, seq, vocab), sequence_loss)


def _register(layers: int):
  register(
      f"gnmt{layers}",
      description=f"GNMT LSTM NMT, {layers}+{layers} layers, unrolled in time, attention",
      default=dict(batch=128, seq=50, hidden=1024, layers=layers, vocab=32000),
      small=dict(batch=16, seq=10, hidden=128, layers=layers, vocab=2000),
      tiny=dict(batch=2, seq=2, hidden=16, layers=layers, vocab=32),
      paper="Wu et al. 2016; placed by HDP, GDP, Placeto, GO",
  )(functools.partial(build_gnmt, model=f"gnmt{layers}"))


for _layers in (2, 4, 8):
  _register(_layers)
