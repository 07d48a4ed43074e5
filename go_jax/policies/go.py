"""The GO / GDP policy network: every node's placement and priority from ONE forward pass.

  op-type embedding + node-feature projection
    -> GraphSAGE (predecessor and successor max-pools, sage.py)
    -> segment-recurrent relative attention over the topological order (attention.py),
       each layer's input modulated by parameter superposition
    -> heads: placement logits (Np, Dmax), priority logits (Np, L), value (), and with
       `fusion_head` a fuse-request logit per op (Np,) (design.md 4.1: each op's own state
       and its consumer's, since a request fuses the op into its one consumer)
       (with `load_state`, the placement logits are decoded block by block in topological
       order, each block seeing the memory and compute the blocks before committed: load.py;
       sampling uses the expected load, the greedy action `greedy_placement_logits` decoded
       against the load its own earlier blocks commit)

Placement scores each node against device embeddings built from the topology's device features
(plus a learned embedding per device slot, so identical devices can still be told apart), so one
network serves 2, 4 or 8 devices; logits of absent devices are a large negative number.

Parameter superposition (GO, Zhou et al. 2020): a graph embedding (masked mean of
the encoder output) goes through a small MLP that emits, for each attention layer and for the
heads' input, a per-channel scale and shift (FiLM: x * gamma + beta, gamma near 1 at init). One
set of weights thus behaves as a graph-conditioned family of networks, which is what lets GO
train on many graphs at once and transfer.

Hint (`use_hint`, off in GO's paper configuration): the features carry a fast baseline's
placement (`GraphFeatures.hint`, e.g. the best of HEFT / m-ETF / m-SCT, go_jax/training/hints.py);
its one-hot enters the node input, and a learned scale (initialised to `hint_init`) times the
one-hot is added to the placement logits, while a learned per-level bias (`hint_init` on the
middle level) concentrates the priority head. At initialisation the greedy action is then the
baseline's placement with its order (the tie-break, see go_jax/training/problems.py), and
sampling explores placements a few ops away from it; PPO learns where deviating pays. This is
how the 2026-11-21 checkpoint `go_hint` made a CPU-sized budget of PPO competitive with the list
schedulers. The paper's GO (no hint) is the `go` variant: it gets there with the load state and
an imitation warm start instead (go_jax/training/imitation.py), and `go_hint` stays a row.

The module takes ONE graph's GraphFeatures; callers vmap over graphs. Padding never changes a
real node's outputs: padded edges and nodes are masked in the encoder, masked as attention keys,
left out of every mean, and padded devices only touch their own (masked) logit column.
"""

from __future__ import annotations

from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from go_jax.policies.attention import SegmentAttention
from go_jax.policies.features import DEVICE_FEATURES, NODE_FEATURES
from go_jax.policies.load import LoadDecoder
from go_jax.policies.sage import GraphSAGE
from go_jax.policies.types import GraphFeatures, PolicyOutput
from simulator.ops import NUM_OP_TYPES

MASKED_LOGIT = -1e9  # placement logit of an absent device (softmax gives it exactly 0)
# the lowest placement logit of a real device: above MASKED_LOGIT, so that a padded device never
# wins the argmax nor is sampled, however far the memory barrier pushes (policies/load.py)
REAL_LOGIT_FLOOR = 0.5 * MASKED_LOGIT


def masked_mean(x: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
  """Mean of the rows of x (R, H) where mask (R,) is True; zeros when none is."""
  w = mask.astype(x.dtype)[:, None]
  return (x * w).sum(0) / jnp.maximum(w.sum(), 1.0)


def _check_features(feats: GraphFeatures, max_devices: int) -> None:
  """Static shape checks with clear messages (they run at trace time)."""
  if feats.node_feats.ndim != 2:
    raise ValueError(f"GOPolicy takes ONE graph's features (node_feats (Np, F)), got node_feats "
                     f"of shape {feats.node_feats.shape}; vmap over a batch of graphs")
  n = feats.node_feats.shape[0]
  for f in ("op_type", "node_mask", "topo_order", "topo_position"):
    if getattr(feats, f).shape != (n,):
      raise ValueError(f"GOPolicy: {f} has shape {getattr(feats, f).shape}, expected ({n},)")
  if feats.senders.shape != feats.receivers.shape or feats.senders.shape != \
      feats.edge_mask.shape or feats.senders.ndim != 1:
    raise ValueError(f"GOPolicy: senders {feats.senders.shape}, receivers "
                     f"{feats.receivers.shape} and edge_mask {feats.edge_mask.shape} must be "
                     "equal 1-D shapes")
  d = feats.device_feats.shape[0]
  if feats.device_feats.ndim != 2 or feats.device_mask.shape != (d,):
    raise ValueError(f"GOPolicy: device_feats {feats.device_feats.shape} / device_mask "
                     f"{feats.device_mask.shape} must be (Dmax, Fd) / (Dmax,)")
  if d > max_devices:
    raise ValueError(f"GOPolicy: features have {d} device slots but the policy was built for "
                     f"max_devices={max_devices}")


class GOPolicy(nn.Module):
  """GO's policy (GDP and the ablations are configurations of it; see `__init__.py`).

  `apply(params, feats)` is deterministic. With dropout > 0, training calls
  `apply(params, feats, deterministic=False, rngs={"dropout": key})`; dropout acts on the encoder
  and attention outputs.
  """
  hidden: int = 128
  gnn_layers: int = 3
  attention_layers: int = 2
  heads: int = 4
  segment_len: int = 128
  recurrence: bool = True
  superposition: bool = True
  superposition_stop_gradient: bool = False  # graph embedding -> FiLM MLP without gradient
  use_gnn: bool = True
  use_attention: bool = True
  priority_head: bool = True  # False: priority logits are zeros (a uniform distribution)
  priority_levels: int = 8
  max_devices: int = 8
  device_id_embedding: bool = True
  dropout: float = 0.0
  relative: str = "xl"  # relative positions: "xl" (Transformer-XL) or "bias" (attention.py)
  attention_impl: str = "scan"  # "scan" or "parallel": the same function (attention.py)
  use_hint: bool = False  # take GraphFeatures.hint (see the module docstring)
  hint_init: float = 5.0  # initial logit bonus of the hint's device and of the middle level
  load_state: bool = False  # placement conditioned on the committed device load (load.py)
  load_block: int = 8  # nodes per block of the load state's scan
  load_guard: bool = True  # the load state's memory barrier (load.py)
  load_margin: float = 0.1  # memory share the greedy decode keeps free (LoadDecoder)
  load_greedy_block: int = 0  # nodes per block of the greedy decode (0: load_block; load.py)
  # the exact load state (load.py): a colocation group decided and counted where its leader
  # goes (rule 1), every interval's future counted by the barrier, the greedy barrier node by
  # node; False: the estimate the checkpoints before 2026-11-26 were trained with
  load_exact: bool = True
  # the load state's copy term (load.py "Copy term"): each node's logit of a device drops with
  # the share of its input bytes known to be away from it, by a learned per-node weight
  load_comm: bool = False
  # copies into and out of colocation groups counted once both groups are decided (load.py)
  load_group_copies: bool = False
  # a copy counted live until its own receiver's block, not its sender's last consumer's
  load_copy_to_receiver: bool = False
  # the load state's time term (load_time.py): each node's logit of a device drops with how
  # much later it would finish there than on its best device, by a learned per-node weight
  load_time: bool = False
  # with load_time: the exact greedy decode also counts received copies over estimated time
  # (load_copies.py)
  load_time_copies: bool = False
  fusion_head: bool = False  # a Bernoulli fuse request per op (tasks "fusion" and "joint3")

  @nn.compact
  def __call__(self, feats: GraphFeatures, deterministic: bool = True,
               placement: Optional[jnp.ndarray] = None) -> PolicyOutput:
    """One forward pass. `placement` (Np,) int32, for a policy with the load state: decode the
    placement logits against the load of that placement (teacher forcing, load.py "forced";
    no greedy logits then)."""
    _check_features(feats, self.max_devices)
    hdim = self.hidden
    mask = jnp.asarray(feats.node_mask, bool)
    n_film = (self.attention_layers if self.use_attention else 0) + 1

    h = (nn.Dense(hdim, name="feat_proj")(jnp.asarray(feats.node_feats, jnp.float32)) +
         nn.Embed(NUM_OP_TYPES, hdim, name="op_embed")(feats.op_type))
    hint = None
    if self.use_hint:
      if feats.hint is None:
        raise ValueError("GOPolicy(use_hint=True) needs GraphFeatures.hint (graph_features("
                         "..., hint_placement=...)); set the policy config's `hint` method")
      d = feats.device_feats.shape[0]
      hint = (feats.hint[:, None] == jnp.arange(d)[None, :]).astype(jnp.float32)  # (Np, Dmax)
      h = h + nn.Dense(hdim, name="hint_proj")(hint)
    h = nn.LayerNorm(name="input_norm")(nn.gelu(h))
    h = jnp.where(mask[:, None], h, 0.0)
    if self.use_gnn:
      h = GraphSAGE(self.gnn_layers, hdim, name="gnn")(
          h, feats.senders, feats.receivers, jnp.asarray(feats.edge_mask, bool), mask)
    h = nn.Dropout(self.dropout)(h, deterministic=deterministic or self.dropout == 0)
    graph_emb = masked_mean(h, mask)  # (H,)

    film = None
    if self.superposition:
      ctx = jax.lax.stop_gradient(graph_emb) if self.superposition_stop_gradient else graph_emb
      z = nn.gelu(nn.Dense(hdim, name="film_hidden")(ctx))
      z = nn.Dense(n_film * 2 * hdim, name="film_out",
                   kernel_init=nn.initializers.normal(1e-2))(z)
      film = z.reshape(n_film, 2, hdim) + jnp.array([1.0, 0.0])[None, :, None]

    if self.use_attention:
      h = SegmentAttention(
          self.attention_layers, hdim, self.heads, self.segment_len, self.recurrence,
          relative=self.relative, impl=self.attention_impl, name="attention")(
              h, feats.topo_order, feats.topo_position, mask,
              None if film is None else film[:-1])
      h = nn.Dropout(self.dropout)(h, deterministic=deterministic or self.dropout == 0)
    if film is not None:
      h = jnp.where(mask[:, None], h * film[-1, 0] + film[-1, 1], 0.0)

    dev = self._device_embeddings(feats, graph_emb)  # (Dmax, H)
    dev_mask = jnp.asarray(feats.device_mask, bool)

    # Placement: bilinear node-device score plus a per-device bias.
    q = nn.Dense(hdim, name="place_query")(h)
    k = nn.Dense(hdim, name="place_key")(dev)
    bias = nn.Dense(1, name="place_bias")(dev)[:, 0]
    greedy_logits = None
    if self.load_state:
      if feats.node_load is None or feats.node_end is None or feats.device_capacity is None:
        raise ValueError("GOPolicy(load_state=True) needs GraphFeatures.node_load, node_end "
                         "and device_capacity (built by policies.graph_features)")
      decoder = LoadDecoder(hdim, self.load_block, MASKED_LOGIT, self.load_guard,
                            greedy_margin=self.load_margin,
                            greedy_block=self.load_greedy_block, comm=self.load_comm,
                            group_copies=self.load_group_copies,
                            copy_to_receiver=self.load_copy_to_receiver,
                            time=self.load_time, time_copies=self.load_time_copies,
                            name="load")
      args = (q, k, bias, jnp.asarray(feats.node_load, jnp.float32), feats.node_end,
              jnp.asarray(feats.device_capacity, jnp.float32), dev_mask, feats.topo_order,
              feats.topo_position, mask, feats.senders, feats.receivers,
              jnp.asarray(feats.edge_mask, bool))
      lead = feats.node_leader if self.load_exact else None
      timing = timing_inputs(feats, mask, dev_mask) if self.load_time else None
      if placement is not None:
        logits = decoder(*args, mode="forced", placement=placement, leader=lead, timing=timing)
      else:
        logits = decoder(*args, mode="expected", leader=lead, timing=timing)
        greedy_logits = decoder(*args, mode="greedy", leader=lead, timing=timing)
    else:
      logits = q @ k.T * (1.0 / jnp.sqrt(jnp.float32(hdim))) + bias[None, :]
    n = h.shape[0]
    if self.priority_head:
      prio = nn.Dense(self.priority_levels, name="priority")(nn.gelu(
          nn.Dense(hdim, name="priority_hidden")(h)))
    else:
      prio = jnp.zeros((n, self.priority_levels), jnp.float32)
    if hint is not None:
      scale = self.param("hint_scale", nn.initializers.constant(self.hint_init), ())
      logits = logits + scale * hint
      if greedy_logits is not None:
        greedy_logits = greedy_logits + scale * hint
      level = jax.nn.one_hot(self.priority_levels // 2, self.priority_levels) * self.hint_init
      prio = prio + self.param("hint_level_bias", lambda _: level)
    logits = jnp.where(dev_mask[None, :], jnp.maximum(logits, REAL_LOGIT_FLOOR), MASKED_LOGIT)

    fusion_logits = None
    if self.fusion_head:
      # The consumer of each op with one consumer (a request can only fuse those), else 0.
      cons = jax.ops.segment_max(jnp.where(feats.edge_mask, feats.receivers, -1),
                                 feats.senders, num_segments=n)
      h_cons = jnp.where((cons >= 0)[:, None], h[jnp.maximum(cons, 0)], 0.0)
      z = nn.gelu(nn.Dense(hdim, name="fusion_hidden")(jnp.concatenate([h, h_cons], -1)))
      fusion_logits = nn.Dense(1, name="fusion")(z)[:, 0].astype(jnp.float32)
    pooled = jnp.concatenate([masked_mean(h, mask), graph_emb, masked_mean(dev, dev_mask)])
    value = nn.Dense(1, name="value_out")(nn.gelu(nn.Dense(hdim, name="value_hidden")(pooled)))
    if greedy_logits is not None:
      greedy_logits = jnp.where(dev_mask[None, :], jnp.maximum(greedy_logits, REAL_LOGIT_FLOOR),
                                MASKED_LOGIT)
    return PolicyOutput(placement_logits=logits.astype(jnp.float32),
                        priority_logits=prio.astype(jnp.float32),
                        value=value[0].astype(jnp.float32),
                        greedy_placement_logits=greedy_logits, fusion_logits=fusion_logits)

  def _device_embeddings(self, feats: GraphFeatures, graph_emb: jnp.ndarray) -> jnp.ndarray:
    """(Dmax, H): MLP of device features + slot embedding + projection of the graph."""
    hdim = self.hidden
    d = feats.device_feats.shape[0]
    dev = nn.gelu(nn.Dense(hdim, name="dev_in")(jnp.asarray(feats.device_feats, jnp.float32)))
    dev = nn.Dense(hdim, name="dev_out")(dev) + nn.Dense(hdim, name="dev_graph")(graph_emb)
    if self.device_id_embedding:
      slots = self.param("device_slots", nn.initializers.normal(0.1),
                         (self.max_devices, hdim), jnp.float32)
      dev = dev + slots[:d]
    return nn.LayerNorm(name="dev_norm")(nn.gelu(dev))


def timing_inputs(feats: GraphFeatures, mask, dev_mask):
  """The time term's inputs (load_time.py), in shares of the graph's serial compute time, read
  back from the scale-free features: (node_send (Np,), speed, overhead, latency (Dmax,)).
  log_send_time, log_overhead and log_latency are log1p(x / mean op cost), and the mean op cost
  is 1 / N of the serial time; the latency is the device's mean over its links."""
  n = jnp.maximum(jnp.sum(mask), 1).astype(jnp.float32)
  node = jnp.asarray(feats.node_feats, jnp.float32)
  dev = jnp.asarray(feats.device_feats, jnp.float32)
  share = lambda x: jnp.expm1(x) / n
  send = jnp.where(mask, share(node[:, NODE_FEATURES.index("log_send_time")]), 0.0)
  col = lambda name: jnp.where(dev_mask, dev[:, DEVICE_FEATURES.index(name)], 0.0)
  return (send, col("speed"), share(col("log_overhead")), share(col("log_latency")))

