"""HDP's two networks (Mirhoseini et al., ICLR 2018): the grouper and the placer, one Flax module.

  model = HDPModel(groups=G, num_devices=D, hidden=64)
  logits = model.apply(params, feats, method=model.group_logits)       # (Np, G)
  logits, devices = model.apply(params, feats, groups, noise, forced, method=model.place)

* **Grouper** (`group_logits`): a feed-forward network applied to every op independently, as in
  the paper: the op's numeric features (go_jax/policies/features.py: log cost, log output /
  parameter / scratch bytes, degrees, depth, topological position, ...) through a Dense layer
  plus a learned op-type embedding, two ReLU layers, then G logits: a softmax over the groups.
  Why per op and without message passing: that is HDP's grouper; what it knows of the graph's
  structure is what the features (degrees, depth, position) say.
* **Group embedding** (`group_embedding`): what the placer sees of group g, as the paper's
  concatenation of type counts, output sizes and adjacency: the mean learned op-type embedding
  of g's members (a linear map of their type counts), the mean of their numeric features, the
  group's shares of the graph's parameter / output / scratch bytes and cost (x G: 1 is a fair
  share), its size (x G / N) and its rows of the group adjacency matrix, both directions
  (log1p(edges g -> h x G^2 / E)). Empty groups embed as zeros but for the type term's bias.
* **Placer** (`place`): a sequence-to-sequence LSTM over the G group embeddings in group order:
  a bidirectional LSTM encoder, then an LSTM decoder that emits one device per group,
  autoregressively (the previous group's device embedding is an input of the next step), with
  content-based (Bahdanau) attention over the encoder outputs. One code path serves sampling,
  greedy decoding and teacher forcing: step t's device is `forced[t]` where that is >= 0, else
  argmax(logits + noise[t]), so Gumbel noise samples, zero noise decodes greedily and forced
  devices replay an action (the decoder then sees exactly what it saw when sampling). The
  output layer starts at zero, so at first every group's device is uniform: the search starts
  from random placements rather than from whatever device a random network favours.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from go_jax.policies.types import GraphFeatures
from simulator.ops import NUM_OP_TYPES


class _DecodeStep(nn.Module):
  """One decoder step (scanned over the groups by `nn.scan`, parameters shared)."""
  hidden: int
  num_devices: int

  @nn.compact
  def __call__(self, carry, x, noise, forced, att_keys, att_values):
    """carry = (LSTM carry, () int32 previous device, D = start); x (2H,) the group's encoder
    output; noise (D,); forced () int32; att_keys (G, H), att_values (G, 2H).
    Returns (carry, (logits (D,), device () int32))."""
    lstm, prev = carry
    prev_emb = nn.Embed(self.num_devices + 1, self.hidden, name="device_embed")(prev)
    lstm, h = nn.OptimizedLSTMCell(self.hidden, name="lstm")(
        lstm, jnp.concatenate([x, prev_emb]))
    query = nn.Dense(self.hidden, use_bias=False, name="att_query")(h)
    score = nn.Dense(1, name="att_score")(jnp.tanh(att_keys + query))[:, 0]  # (G,)
    context = jax.nn.softmax(score) @ att_values  # (2H,)
    out = jnp.tanh(nn.Dense(self.hidden, name="out_hidden")(jnp.concatenate([h, context])))
    logits = nn.Dense(self.num_devices, name="out", kernel_init=nn.initializers.zeros)(out)
    device = jnp.where(forced >= 0, forced, jnp.argmax(logits + noise)).astype(jnp.int32)
    return (lstm, device), (logits, device)


class HDPModel(nn.Module):
  """The grouper and the placer of one graph on a D-device topology (module docstring)."""
  groups: int  # G
  num_devices: int  # D
  hidden: int = 64  # width of the grouper's layers, the embeddings and the LSTMs

  def setup(self):
    h = self.hidden
    self.grouper_in = nn.Dense(h)
    self.grouper_op_type = nn.Embed(NUM_OP_TYPES, h)
    self.grouper_hidden = nn.Dense(h)
    self.grouper_out = nn.Dense(self.groups)
    self.group_op_type = nn.Embed(NUM_OP_TYPES, h)
    self.group_in = nn.Dense(h)
    self.encoder = nn.Bidirectional(nn.RNN(nn.OptimizedLSTMCell(h)),
                                    nn.RNN(nn.OptimizedLSTMCell(h)))
    self.decoder_init = nn.Dense(2 * h)
    self.att_keys = nn.Dense(h, use_bias=False)
    self.decoder = nn.scan(_DecodeStep, variable_broadcast="params",
                           split_rngs={"params": False},
                           in_axes=(0, 0, 0, nn.broadcast, nn.broadcast))(h, self.num_devices)

  def group_logits(self, feats: GraphFeatures):
    """(Np, G) float32 logits of each op's group (rows of padding ops are meaningless)."""
    x = self.grouper_in(feats.node_feats) + self.grouper_op_type(feats.op_type)
    x = nn.relu(x)
    x = nn.relu(self.grouper_hidden(x))
    return self.grouper_out(x)

  def group_embedding(self, feats: GraphFeatures, groups):
    """(G, H) float32 embedding of each group given the ops' groups (Np,) int32."""
    g = self.groups
    mask = feats.node_mask.astype(jnp.float32)
    member = jax.nn.one_hot(groups, g) * mask[:, None]  # (Np, G)
    size = jnp.sum(member, 0)  # (G,)
    n = jnp.maximum(jnp.sum(mask), 1.0)
    per_member = 1.0 / jnp.maximum(size, 1.0)[:, None]
    mean_feats = (member.T @ feats.node_feats) * per_member  # (G, F)
    shares = (member.T @ feats.node_load) * g  # (G, 4)
    src = member[feats.senders] * feats.edge_mask[:, None]  # (Ep, G)
    dst = member[feats.receivers]  # (Ep, G)
    e = jnp.maximum(jnp.sum(feats.edge_mask), 1.0)
    adj = jnp.log1p((src.T @ dst) * (g * g) / e)  # (G, G)
    numeric = jnp.concatenate([mean_feats, shares, (size * g / n)[:, None], adj, adj.T], -1)
    types = (member.T @ self.group_op_type(feats.op_type)) * per_member  # (G, H)
    return nn.relu(self.group_in(numeric) + types)

  def place(self, feats: GraphFeatures, groups, noise, forced):
    """Decodes one device per group.

    Args:
      feats: the graph's features.
      groups: (Np,) int32 group of each op.
      noise: (G, D) float32 added to the logits before the argmax (Gumbel: a sample; 0: greedy).
      forced: (G,) int32 device to take at each step where >= 0 (teacher forcing), else -1.

    Returns:
      (logits (G, D) float32 of every step, devices (G,) int32).
    """
    emb = self.group_embedding(feats, groups)
    enc = self.encoder(emb[None])[0]  # (G, 2H)
    init = jnp.tanh(self.decoder_init(jnp.mean(enc, 0)))
    carry = ((init[:self.hidden], init[self.hidden:]), jnp.int32(self.num_devices))
    _, (logits, devices) = self.decoder(carry, enc, noise, forced, self.att_keys(enc), enc)
    return logits, devices

  def __call__(self, feats: GraphFeatures, groups, noise, forced):
    """Both networks (used to initialise the parameters): (group logits, (logits, devices))."""
    return self.group_logits(feats), self.place(feats, groups, noise, forced)
