"""Transformer training steps for the zoo: NMT encoder-decoder, BERT masked LM, GPT-2 causal LM.

Why: Transformers are the attention-based models the placement papers (GO, Placeto's successors,
HDP's follow-ups) partition across devices; the zoo needs them as real JAX training steps so the
HLO front end sees the actual forward, backward and optimizer ops.

What: one configurable implementation (`TransformerConfig`: pre- or post-LayerNorm residuals,
ReLU or GELU feed-forward, sinusoidal or learned positions, optional causal self-attention and
cross-attention), and three registered models built from it:
  * `transformer_nmt`: "Attention is all you need" base (6+6 layers, d_model 512, 8 heads, ff 2048,
    post-LN, sinusoidal positions, one vocabulary shared by source, target and the tied output
    projection), teacher-forced token cross-entropy.
  * `bert_base`: 12 layers, 768, 12 heads, ff 3072, post-LN, GELU, learned positions; the masked-LM
    head (dense + GELU + LayerNorm + tied decoder + bias) runs on the masked positions only (15% of
    the sequence, gathered), and the loss is the cross-entropy there.
  * `gpt2_small`: 12 layers, 768, 12 heads, pre-LN with a final LayerNorm, causal LM over the
    50257-token vocabulary, context length = the `seq` knob.
Layers are a Python loop (no nn.scan), so every layer is its own ops in the graph. No dropout: the
steps are deterministic functions of (params, opt_state, batch).

Knobs (every model): batch, seq, layers, d_model, heads, d_ff, vocab.
"""

from __future__ import annotations

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from simulator.zoo import register
from simulator.zoo import common
from simulator.zoo.common import make_train_step, sequence_loss

_NEG_INF = -1e9


def check_knobs(model: str, **knobs) -> None:
  """`common.check_knobs`, plus: `heads` must divide `d_model` (the sequence models' rule)."""
  common.check_knobs(model, **knobs)
  if "d_model" in knobs and "heads" in knobs and knobs["d_model"] % knobs["heads"]:
    raise ValueError(f"zoo model {model!r}: d_model={knobs['d_model']} is not divisible by "
                     f"heads={knobs['heads']}")


def sinusoid(positions: np.ndarray, dim: int) -> np.ndarray:
  """(len(positions), dim) sinusoidal encodings (sin on the first half, cos on the second)."""
  half = dim // 2
  inv = 1.0 / (10000.0 ** (np.arange(half, dtype=np.float64) / max(half, 1)))
  ang = np.asarray(positions, np.float64)[:, None] * inv[None, :]
  out = np.concatenate([np.sin(ang), np.cos(ang)], axis=1)
  if out.shape[1] < dim:  # odd width: one zero column
    out = np.pad(out, ((0, 0), (0, dim - out.shape[1])))
  return out.astype(np.float32)


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Sizes and variant switches of one Transformer stack (hashable: a Flax module attribute)."""
  vocab: int
  d_model: int
  heads: int
  d_ff: int
  max_len: int
  pre_ln: bool = False          # True: x + f(LN(x)) (GPT-2); False: LN(x + f(x)) (original)
  activation: str = "relu"      # key of ACTIVATIONS
  positions: str = "sinusoid"   # "sinusoid" | "learned"


ACTIVATIONS = {"relu": nn.relu, "gelu": nn.gelu}


class MultiHeadAttention(nn.Module):
  """Scaled dot-product attention of queries `x` (B, T, D) over keys/values `kv` (B, S, D)."""
  cfg: TransformerConfig

  @nn.compact
  def __call__(self, x, kv, causal: bool = False):
    heads, d_head = self.cfg.heads, self.cfg.d_model // self.cfg.heads
    proj = lambda name: nn.DenseGeneral((heads, d_head), name=name)
    q, k, v = proj("query")(x), proj("key")(kv), proj("value")(kv)      # (B, T|S, H, Dh)
    logits = jnp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(d_head)  # (B, H, T, S)
    if causal:
      mask = jnp.tril(jnp.ones((x.shape[1], kv.shape[1]), bool))
      logits = jnp.where(mask, logits, _NEG_INF)
    weights = jax.nn.softmax(logits, axis=-1)
    out = jnp.einsum("bhts,bshd->bthd", weights, v)                   # (B, T, H, Dh)
    return nn.DenseGeneral(self.cfg.d_model, axis=(-2, -1), name="out")(out)


class FeedForward(nn.Module):
  """Position-wise d_model -> d_ff -> d_model MLP."""
  d_model: int
  d_ff: int
  activation: str = "relu"

  @nn.compact
  def __call__(self, x):
    h = ACTIVATIONS[self.activation](nn.Dense(self.d_ff, name="wi")(x))
    return nn.Dense(self.d_model, name="wo")(h)


class Residual(nn.Module):
  """One residual sub-layer around `fn` with pre- or post-LayerNorm."""
  pre_ln: bool

  @nn.compact
  def __call__(self, fn, x):
    if self.pre_ln:
      return x + fn(nn.LayerNorm(name="ln")(x))
    return nn.LayerNorm(name="ln")(x + fn(x))


class Layer(nn.Module):
  """Self-attention (optionally causal), optional cross-attention over `memory`, feed-forward."""
  cfg: TransformerConfig
  causal: bool = False
  cross: bool = False

  @nn.compact
  def __call__(self, x, memory=None):
    cfg = self.cfg
    self_attn = MultiHeadAttention(cfg, name="self_attn")
    x = Residual(cfg.pre_ln, name="res_self")(lambda h: self_attn(h, h, self.causal), x)
    if self.cross:
      cross_attn = MultiHeadAttention(cfg, name="cross_attn")
      x = Residual(cfg.pre_ln, name="res_cross")(lambda h: cross_attn(h, memory), x)
    ff = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, name="ff")
    return Residual(cfg.pre_ln, name="res_ff")(ff, x)


class Stack(nn.Module):
  """`layers` Layers unrolled in Python, with a final LayerNorm in the pre-LN variant."""
  cfg: TransformerConfig
  layers: int
  causal: bool = False
  cross: bool = False

  @nn.compact
  def __call__(self, x, memory=None):
    for i in range(self.layers):
      x = Layer(self.cfg, self.causal, self.cross, name=f"layer_{i}")(x, memory)
    return nn.LayerNorm(name="final_ln")(x) if self.cfg.pre_ln else x


class Embedder(nn.Module):
  """Token embedding (scaled by sqrt(d_model) for sinusoidal positions) plus positions."""
  cfg: TransformerConfig

  def setup(self):
    self.tokens = nn.Embed(self.cfg.vocab, self.cfg.d_model,
                           embedding_init=nn.initializers.normal(0.02))
    if self.cfg.positions == "learned":
      self.pos = self.param("pos", nn.initializers.normal(0.02),
                            (self.cfg.max_len, self.cfg.d_model))

  def __call__(self, ids):  # (B, T) int -> (B, T, D)
    t = ids.shape[1]
    if self.cfg.positions == "learned":
      return self.tokens(ids) + self.pos[None, :t]
    table = jnp.asarray(sinusoid(np.arange(t), self.cfg.d_model))
    return self.tokens(ids) * math.sqrt(self.cfg.d_model) + table[None]

  def attend(self, x):  # tied output projection: (B, T, D) -> (B, T, V)
    return self.tokens.attend(x)


class EncoderDecoder(nn.Module):
  """Encoder-decoder NMT with one shared vocabulary: batch -> logits (B, T, V)."""
  cfg: TransformerConfig
  layers: int

  @nn.compact
  def __call__(self, batch):
    embed = Embedder(self.cfg, name="embed")
    memory = Stack(self.cfg, self.layers, name="encoder")(embed(batch["source"]))
    x = Stack(self.cfg, self.layers, causal=True, cross=True,
              name="decoder")(embed(batch["target_in"]), memory)
    return embed.attend(x)


class MaskedLM(nn.Module):
  """BERT encoder + masked-LM head on the gathered masked positions: logits (B, P, V)."""
  cfg: TransformerConfig
  layers: int

  @nn.compact
  def __call__(self, batch):
    embed = Embedder(self.cfg, name="embed")
    h = Stack(self.cfg, self.layers, name="encoder")(embed(batch["tokens"]))
    h = jnp.take_along_axis(h, batch["positions"][..., None], axis=1)  # (B, P, D)
    h = nn.LayerNorm(name="mlm_ln")(nn.gelu(nn.Dense(self.cfg.d_model, name="mlm_dense")(h)))
    bias = self.param("mlm_bias", nn.initializers.zeros, (self.cfg.vocab,))
    return embed.attend(h) + bias


class CausalLM(nn.Module):
  """GPT-style decoder-only LM: batch -> next-token logits (B, T, V)."""
  cfg: TransformerConfig
  layers: int

  @nn.compact
  def __call__(self, batch):
    embed = Embedder(self.cfg, name="embed")
    h = Stack(self.cfg, self.layers, causal=True, name="decoder")(embed(batch["tokens"]))
    return embed.attend(h)


# ------------------------------------------------------------------ batches
def _ids(key, batch, seq, vocab):
  return jax.random.randint(key, (batch, seq), 0, vocab, jnp.int32)


def mlm_predictions(seq: int) -> int:
  """Masked positions per sequence: 15% of the tokens, at least one."""
  return max(1, int(round(0.15 * seq)))


def _nmt_batch(batch, seq, vocab):
  def make(key):
    k1, k2 = jax.random.split(key)
    target = _ids(k2, batch, seq, vocab)
    target_in = jnp.concatenate([jnp.zeros((batch, 1), jnp.int32), target[:, :-1]], axis=1)
    return {"source": _ids(k1, batch, seq, vocab),  # (B, S)
            "target_in": target_in,                 # (B, T) shifted right, BOS = 0
            "target": target}                       # (B, T)
  return make


def _mlm_batch(batch, seq, vocab):
  preds = mlm_predictions(seq)

  def make(key):
    k1, k2 = jax.random.split(key)
    tokens = _ids(k1, batch, seq, vocab)
    positions = jnp.argsort(jax.random.uniform(k2, (batch, seq)), axis=1)[:, :preds]
    positions = positions.astype(jnp.int32)
    target = jnp.take_along_axis(tokens, positions, axis=1)
    masked = tokens.at[jnp.arange(batch)[:, None], positions].set(0)  # id 0 plays [MASK]
    return {"tokens": masked,         # (B, T) with masked positions replaced
            "positions": positions,   # (B, P) masked positions
            "target": target}         # (B, P) original tokens there
  return make


def _lm_batch(batch, seq, vocab):
  def make(key):
    ids = _ids(key, batch, seq + 1, vocab)
    return {"tokens": ids[:, :-1],  # (B, T)
            "target": ids[:, 1:]}   # (B, T) next tokens
  return make


def _builder(model: str, net_cls, make_batch, **variant):
  def build(batch, seq, layers, d_model, heads, d_ff, vocab):
    check_knobs(model, batch=batch, seq=seq, layers=layers, d_model=d_model, heads=heads,
                d_ff=d_ff, vocab=vocab)
    cfg = TransformerConfig(vocab=vocab, d_model=d_model, heads=heads, d_ff=d_ff, max_len=seq,
                            **variant)
    return make_train_step(net_cls(cfg, layers), make_batch(batch, seq, vocab), sequence_loss)
  return build


_TINY = dict(batch=2, seq=8, layers=1, d_model=16, heads=2, d_ff=32, vocab=64)

register(
    "transformer_nmt",
    description="Transformer base NMT (6+6 layers, d512, 8 heads), shared vocab, teacher forcing",
    default=dict(batch=64, seq=64, layers=6, d_model=512, heads=8, d_ff=2048, vocab=37000),
    small=dict(batch=8, seq=32, layers=2, d_model=128, heads=4, d_ff=512, vocab=4000),
    tiny=_TINY, paper="Vaswani et al. 2017; placed by GO (Zhou et al. 2020)",
)(_builder("transformer_nmt", EncoderDecoder, _nmt_batch, pre_ln=False, activation="relu",
           positions="sinusoid"))

register(
    "bert_base",
    description="BERT-base masked LM (12 layers, d768, 12 heads), loss on 15% masked positions",
    default=dict(batch=32, seq=128, layers=12, d_model=768, heads=12, d_ff=3072, vocab=30522),
    small=dict(batch=8, seq=64, layers=2, d_model=128, heads=4, d_ff=512, vocab=4000),
    tiny=_TINY, paper="Devlin et al. 2019; placed by Baechi / Piper",
)(_builder("bert_base", MaskedLM, _mlm_batch, pre_ln=False, activation="gelu",
           positions="learned"))

register(
    "gpt2_small",
    description="GPT-2 small causal LM (12 layers, d768, 12 heads, vocab 50257), pre-LN",
    default=dict(batch=8, seq=1024, layers=12, d_model=768, heads=12, d_ff=3072, vocab=50257),
    small=dict(batch=4, seq=64, layers=2, d_model=128, heads=4, d_ff=512, vocab=4000),
    tiny=_TINY, paper="Radford et al. 2019",
)(_builder("gpt2_small", CausalLM, _lm_batch, pre_ln=True, activation="gelu",
           positions="learned"))
