"""The contract between graph features, policy networks and training (GO/GDP, design.md 7).

Features are built on the host (numpy) from a CompGraph and padded to a size bucket, so every
graph of a bucket reuses one compiled policy; a batch of graphs is these structs stacked on a
leading axis G and the policy is vmapped over it. Every decision for the whole graph comes from
ONE forward pass (not autoregressive).
"""

from __future__ import annotations

from typing import Optional

import flax
import jax.numpy as jnp


@flax.struct.dataclass
class GraphFeatures:
  """A padded graph as the policy sees it (float32 / int32 / bool; padding rows are zero)."""
  node_feats: jnp.ndarray    # (Np, F) float32 per-node numeric features (see features.py)
  op_type: jnp.ndarray       # (Np,) int32 id in simulator.ops (0 on padding)
  node_mask: jnp.ndarray     # (Np,) bool, True on real nodes
  senders: jnp.ndarray       # (Ep,) int32 edge u->v producer (0 on padding)
  receivers: jnp.ndarray     # (Ep,) int32 edge consumer (0 on padding)
  edge_mask: jnp.ndarray     # (Ep,) bool, True on real edges
  topo_order: jnp.ndarray    # (Np,) int32 node id at each topological position; padding last
  topo_position: jnp.ndarray  # (Np,) int32 position of each node in topo_order
  device_mask: jnp.ndarray   # (Dmax,) bool, True for the topology's real devices
  device_feats: jnp.ndarray  # (Dmax, Fd) float32 per-device features (speed, memory, links)
  # (Np,) int32 device of each op in a hint placement (a fast baseline's), -1 on padding; None
  # when the policy takes no hint (see GOPolicy.use_hint and go_jax/training/hints.py)
  hint: Optional[jnp.ndarray] = None
  # (Np, 4) float32 what each op commits to its device, as shares (policies/load.py NODE_LOAD):
  # [param_bytes, out_bytes, temp_bytes] / the graph's total param + output bytes, and cost /
  # the graph's total cost; 0 on padding. The policy's load state adds them up.
  node_load: Optional[jnp.ndarray] = None
  # (Np,) int32 topological position of each op's last consumer (the last real position when
  # none consumes it); 0 on padding
  node_end: Optional[jnp.ndarray] = None
  # (Np,) int32 topological position of each op's colocation leader: the first op of its
  # colocation group in topological order (its own position when ungrouped, and on padding).
  # Rule 1 puts a group on one device, so the load state counts every member where its leader
  # goes (policies/load.py); None: every op counts where its own logits point
  node_leader: Optional[jnp.ndarray] = None
  # (Dmax,) float32 each device's memory capacity over the graph's total param + output bytes
  # (clipped at features.MEM_RATIO_CAP; infinite memory gives the cap), 0 on padding devices
  device_capacity: Optional[jnp.ndarray] = None


@flax.struct.dataclass
class PolicyOutput:
  """One forward pass: a distribution per node for each head, and the state value."""
  placement_logits: jnp.ndarray  # (Np, Dmax) float32; -inf-masked (large negative) off devices
  priority_logits: jnp.ndarray   # (Np, L) float32 over L priority levels
  value: jnp.ndarray             # () float32 predicted return of the graph
  # (Np, Dmax) float32 placement logits of the greedy decode (load state from the most likely
  # devices of the earlier blocks, policies/load.py); None: the greedy action is the argmax of
  # placement_logits
  greedy_placement_logits: Optional[jnp.ndarray] = None
  # (Np,) float32 Bernoulli logit of each op's fuse request (design.md 4.1); None: the policy
  # has no fusion head
  fusion_logits: Optional[jnp.ndarray] = None
