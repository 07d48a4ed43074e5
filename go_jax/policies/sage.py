"""GraphSAGE with max-pool aggregation over a directed computation graph (GO / GDP encoder).

Each layer pools predecessors and successors SEPARATELY (what an op consumes and who consumes
it play different roles in placement and scheduling), then combines both pools with the node's
own state:

  m_pred(v) = max over edges u->v of relu(W_p h_u + b_p)
  m_succ(u) = max over edges u->v of relu(W_s h_v + b_s)
  h'(v)     = LayerNorm(h(v) + relu(W [h(v); m_pred(v); m_succ(v)] + b))   (residual)

An op with no predecessor (successor) gets a zero pool. Padded edges are routed to a dummy
segment past the last node and padded node states are zeroed after every layer, so padding never
reaches a real node. Aggregation is `jax.ops.segment_max` (no dense adjacency): O(E * width).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


def max_pool(messages: jnp.ndarray, segment_ids: jnp.ndarray, edge_mask: jnp.ndarray,
             num_segments: int) -> jnp.ndarray:
  """(num_segments, H) max of non-negative `messages` (Ep, H) per segment; 0 when empty.

  Masked edges go to an extra dummy segment that is dropped.
  """
  ids = jnp.where(edge_mask, segment_ids, num_segments)
  pooled = jax.ops.segment_max(messages, ids, num_segments=num_segments + 1)[:num_segments]
  return jnp.maximum(pooled, 0.0)  # empty segments are -inf; messages are >= 0


class SAGELayer(nn.Module):
  """One GraphSAGE layer: separate predecessor / successor max-pools, residual combine."""
  width: int

  @nn.compact
  def __call__(self, h, senders, receivers, edge_mask, node_mask):
    n = h.shape[0]
    to_succ = nn.relu(nn.Dense(self.width, name="pool_pred")(h))  # what a producer sends on
    to_pred = nn.relu(nn.Dense(self.width, name="pool_succ")(h))  # what a consumer sends back
    m_pred = max_pool(to_succ[senders], receivers, edge_mask, n)
    m_succ = max_pool(to_pred[receivers], senders, edge_mask, n)
    update = nn.relu(nn.Dense(self.width, name="combine")(
        jnp.concatenate([h, m_pred, m_succ], axis=-1)))
    out = nn.LayerNorm(name="norm")(h + update)
    return jnp.where(node_mask[:, None], out, 0.0)


class GraphSAGE(nn.Module):
  """`depth` SAGE layers of `width` units over a (padded) graph.

  Call with node states h (Np, width), senders / receivers / edge_mask (Ep,), node_mask (Np,);
  returns (Np, width) float32, zero on padded nodes.
  """
  depth: int
  width: int

  @nn.compact
  def __call__(self, h, senders, receivers, edge_mask, node_mask):
    if h.shape[-1] != self.width:
      raise ValueError(f"GraphSAGE: node states have width {h.shape[-1]}, expected "
                       f"{self.width}")
    h = jnp.where(node_mask[:, None], h, 0.0)
    for i in range(self.depth):
      h = SAGELayer(self.width, name=f"layer_{i}")(h, senders, receivers, edge_mask, node_mask)
    return h
