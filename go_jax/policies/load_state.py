"""The device-load state's arithmetic: rule 7 of design.md section 4 along the topological order.

The placement decoder (`go_jax.policies.load.LoadDecoder`, whose docstring has the semantics)
keeps, block by block, what every device holds: the parameters placed on it, the profile of
its live outputs and copies over the blocks, and its placed cost. This module holds that
state, the graph's layout in blocks, the commit of a block's placement, the memory barrier's
terms (incoming copies, output and group intervals, outgoing copies to decided groups) and the
copy term's input shares: pure functions of arrays, so each decode mode and the estimate of a
fixed placement (`estimated_peak`) share one definition.
"""

from __future__ import annotations

from typing import Optional

import flax
import jax
import jax.numpy as jnp

LOAD_FEATURES = ("params", "live", "high", "peak", "log_peak", "work", "progress")
NODE_LOAD = ("param", "out", "temp", "cost")  # columns of GraphFeatures.node_load
FEATURE_CAP = 10.0  # memory features are clipped here (a device 10x over is simply "full")


def load_features(params, live, high, work, capacity, device_mask):
  """(Dmax, len(LOAD_FEATURES)) features of the load state (each (Dmax,))."""
  dev = device_mask.astype(jnp.float32)
  cap = jnp.where(device_mask, jnp.maximum(capacity, 1e-6), 1.0)
  peak = (params + jnp.maximum(high, live)) / cap
  num = jnp.maximum(jnp.sum(dev), 1.0)
  clip = lambda x: jnp.minimum(x, FEATURE_CAP)
  feats = jnp.stack([clip(params / cap), clip(live / cap), clip(high / cap), clip(peak),
                     jnp.log1p(peak), work * num,
                     jnp.broadcast_to(jnp.sum(work * dev), peak.shape)], axis=-1)
  return feats * dev[:, None]


@flax.struct.dataclass
class LoadState:
  """The per-device load carried from block to block (shares of T; see the module docstring)."""
  probs: jnp.ndarray  # (n_blk * S, Dmax) float32 placement distribution per topological position
  params: jnp.ndarray  # (Dmax,) P_d
  work: jnp.ndarray  # (Dmax,) W_d
  # (n_blk + 2, Dmax) difference array of the live-output profile: the live bytes of block b
  # on d are cumsum(diff)[b, d] (intervals known so far, including their future ends)
  diff: jnp.ndarray


@flax.struct.dataclass
class Layout:
  """The graph cut into blocks in topological order (padded), and its edges."""
  lead: jnp.ndarray  # (n_blk * S,) int32 topological position of each slot's colocation leader
  # (n_blk * S, n_blk + 2) difference array, per leader slot, of its colocation members' output
  # intervals over blocks (zero rows for the others; members' own output shares are then 0);
  # None without colocation leaders (the old, not exact, state)
  group: Optional[jnp.ndarray]
  shares: jnp.ndarray  # (n_blk, S, 4) node shares (NODE_LOAD) per block
  free_blk: jnp.ndarray  # (n_blk, S) int32 block at whose start a node's output is freed
  e_src: jnp.ndarray  # (Ep,) int32 topological position of each edge's sender
  e_dst: jnp.ndarray  # (Ep,) int32 ... and receiver
  e_blk: jnp.ndarray  # (Ep,) int32 receiver's block (-1 on padding)
  e_out: jnp.ndarray  # (Ep,) float32 sender's output share (0 on padding and within a group)
  e_free: jnp.ndarray  # (Ep,) int32 block at whose start the copy is freed
  # group copies (`group_copies`): an edge's copy is known, and committed, at the block where
  # the later of its two ends' colocation leaders is decided (-1 on padding); else e_blk
  e_dec: jnp.ndarray  # (Ep,) int32
  e_lsrc: jnp.ndarray  # (Ep,) int32 topological position of the sender's leader (else e_src)
  e_ldst: jnp.ndarray  # (Ep,) int32 ... and the receiver's (else e_dst)
  group_copies: bool = flax.struct.field(pytree_node=False, default=False)


def layout(node_load, node_end, topo_order, topo_position, node_mask, senders, receivers,
            edge_mask, block: int, leader=None, group_copies: bool = False,
            copy_to_receiver: bool = False) -> Layout:
  """The graph cut into blocks of `block` nodes in topological order: per-block node shares,
  free blocks and the edges' blocks and copy sizes. With `leader` (GraphFeatures.node_leader)
  each colocation group is counted at its leader (the exact decode); `group_copies` then
  decides each edge's copy at its later leader's block. `copy_to_receiver` frees each edge's
  copy after its own receiver's block, not after the sender's last consumer's."""
  n = node_load.shape[0]
  n_blk = -(-n // block)
  pad = n_blk * block - n
  share = jnp.where(jnp.asarray(node_mask, bool)[:, None], node_load, 0.0)
  emask = jnp.asarray(edge_mask, bool)
  e_out = jnp.where(emask, share[senders, 1], 0.0)  # copies move the sender's whole output
  slots = jnp.arange(n_blk * block, dtype=jnp.int32)
  free = jnp.pad(node_end[topo_order] // block + 1, (0, pad))  # (n_blk * S,) by slot
  lead = slots
  group = None
  if leader is not None:
    # A colocation group goes where its leader goes (rule 1), so the leader commits the whole
    # group: all its parameters (resident all step) and its members' output intervals (each
    # from the member's block to its last consumer's), which the leader's barrier then sees.
    lead = lead.at[:n].set(jnp.asarray(leader, jnp.int32)[topo_order])
    lead_node = topo_order[leader]
    share = share.at[:, 0].set(jnp.zeros(n, share.dtype).at[lead_node].add(share[:, 0]))
    member = lead != slots
    out = jnp.where(member, jnp.pad(share[topo_order, 1], (0, pad)), 0.0)
    group = (jnp.zeros((n_blk * block, n_blk + 2), jnp.float32)
             .at[lead, slots // block].add(out).at[lead, free].add(-out))
    share = share.at[:, 1].set(jnp.where(member[:n][topo_position], 0.0, share[:, 1]))
  e_src, e_dst = topo_position[senders], topo_position[receivers]
  e_blk = jnp.where(emask, e_dst // block, -1)
  e_lsrc, e_ldst, e_dec = e_src, e_dst, e_blk
  group_copies = bool(group_copies and leader is not None)
  if group_copies:
    e_lsrc, e_ldst = lead[e_src], lead[e_dst]
    e_dec = jnp.where(emask, jnp.maximum(e_lsrc, e_ldst) // block, -1)
  return Layout(
      lead=lead, group=group,
      shares=jnp.pad(share[topo_order], ((0, pad), (0, 0))).reshape(n_blk, block, 4),
      free_blk=free.reshape(n_blk, block),
      e_src=e_src, e_dst=e_dst, e_blk=e_blk,
      e_out=jnp.where(lead[e_src] == lead[e_dst], 0.0, e_out),  # a group shares one device
      e_free=(e_dst if copy_to_receiver else node_end[senders]) // block + 1,
      e_dec=e_dec, e_lsrc=e_lsrc, e_ldst=e_ldst, group_copies=group_copies)


def init_state(n_blk: int, block: int, dmax: int) -> LoadState:
  """The empty state: nothing placed on any of the dmax devices."""
  zeros = jnp.zeros(dmax, jnp.float32)
  return LoadState(probs=jnp.zeros((n_blk * block, dmax), jnp.float32), params=zeros,
                   work=zeros, diff=jnp.zeros((n_blk + 2, dmax), jnp.float32))


def profile(state: LoadState) -> jnp.ndarray:
  """(n_blk, Dmax) live-output bytes per block of the intervals known so far."""
  return jnp.cumsum(state.diff, axis=0)[:-2]


def commit(state: LoadState, lay: Layout, b, p) -> LoadState:
  """Block b placed with distribution p (S, Dmax): its parameters, cost, outputs (live from b
  to their last consumer's block) and the copies decided at it (its nodes' incoming copies; with
  group copies, every copy whose later leader is in block b), each live from the sender's block
  to the sender's last consumer's block (its receiver's with `copy_to_receiver`), added: rule 7
  with the topological order as the schedule."""
  sb, fb = lay.shares[b], lay.free_blk[b]
  s = sb.shape[0]
  probs = jax.lax.dynamic_update_slice(state.probs, p, (b * s, 0))
  own = p * sb[:, 1:2]  # (S, Dmax) expected output shares per device
  # the copies decided at this block: edges into it, or (group copies) edges whose later
  # leader is decided in it, each counted where the two leaders went
  into = (lay.e_dec == b).astype(jnp.float32)[:, None]  # (Ep, 1)
  copies = into * lay.e_out[:, None] * probs[lay.e_ldst] * (1.0 - probs[lay.e_lsrc])
  diff = (state.diff.at[b].add(own.sum(0)).at[fb].add(-own)
          .at[lay.e_src // s].add(copies).at[lay.e_free].add(-copies))
  if lay.group is not None:  # a leader commits its group's member intervals
    diff = diff + jax.lax.dynamic_slice_in_dim(lay.group, b * s, s).T @ p
  return LoadState(probs=probs, params=state.params + p.T @ sb[:, 0],
                   work=state.work + p.T @ sb[:, 3], diff=diff)


def barrier_terms(state: LoadState, lay: Layout, b, prof):
  """The memory barrier's estimate for each node i of block b on each device d (shares of T),
  given the state before block b and its live profile prof (n_blk, Dmax) (`profile`):
    peak[i, d] = P_d + param_i + max(now[i, d], ahead[i, :, d].max()),
  now (S, Dmax) = L_d(b) + out_i + temp_i + the copies i would receive (its inputs not
  (expected) on d; inputs from block b itself in full), ahead the live profile over the blocks
  ((1, n_blk, Dmax); its max is H_d). Exact (a layout with colocation leaders): ahead is
  (S, n_blk, Dmax) and also adds, from b on, i's output interval, its group's member output
  intervals (a leader) and its incoming copies' intervals (each from its sender's block), so
  that what overlaps a later, higher block is seen.
  Returns (now, ahead, recv_iv, out_iv): recv_iv (S, n_blk, Dmax) the incoming copies'
  intervals i brings to d if placed there (None without leaders), out_iv (S, n_blk, Dmax) the
  outgoing copies' intervals i's group sends to device e if i is NOT on e (group copies: to
  the members of groups decided earlier; None otherwise)."""
  s = lay.free_blk.shape[1]
  dmax = state.params.shape[0]
  sb = lay.shares[b]
  base = b * s
  in_blk = lambda pos: (pos >= base) & (pos < base + s)
  known = (lay.e_lsrc < base)[:, None]
  away = lay.e_out[:, None] * (1.0 - state.probs[lay.e_lsrc])  # (Ep, Dmax)
  # incoming copies: edges whose receiver (group copies: the receiver's leader) is in block b
  incoming = (lay.e_dec == b) & in_blk(lay.e_ldst)
  copy = incoming[:, None] * jnp.where(known, away, lay.e_out[:, None])
  dst = jnp.clip(lay.e_ldst - base, 0, s - 1)
  # `now` counts the copies of the block's own receivers (a member runs later: ahead only)
  here = in_blk(lay.e_dst)
  recv = jnp.zeros((s, dmax), jnp.float32).at[dst].add(copy * here[:, None])
  now = prof[b][None, :] + sb[:, 1:2] + sb[:, 2:3] + recv
  ahead = prof[None]
  riv = out_iv = None
  if lay.group is not None:
    riv = _copy_intervals(lay, dst, copy)
    ahead = ahead + intervals(lay, b)[:, :, None] + riv
  if lay.group_copies:
    # outgoing copies: the sender's leader is in block b, the receiver's decided before it
    out = ((lay.e_dec == b) & in_blk(lay.e_lsrc) & (lay.e_ldst < base))[:, None] * (
        lay.e_out[:, None] * state.probs[lay.e_ldst])
    out_iv = _copy_intervals(lay, jnp.clip(lay.e_lsrc - base, 0, s - 1), out)
  return now, ahead, riv, out_iv


def _copy_intervals(lay: Layout, row, amount):
  """(S, n_blk, Dmax) each edge's copy `amount` (Ep, Dmax) summed into its block row `row`
  (Ep,) over the blocks it is live: from its sender's block until `lay.e_free`."""
  s = lay.free_blk.shape[1]
  n_blk = lay.shares.shape[0]
  diff = (jnp.zeros((s, n_blk + 2, amount.shape[1]), jnp.float32)
          .at[row, lay.e_src // s].add(amount).at[row, lay.e_free].add(-amount))
  return jnp.cumsum(diff, axis=1)[:, :n_blk]


def spill(params, prof, out_iv, cap, limit):
  """(S, Dmax) the overflow that placing each of a block's nodes on device d causes on the
  OTHER devices through its group's outgoing copies (out_iv, barrier_terms): device e's
  overflow with the copies it then receives, less its overflow without them, summed over
  e != d. params (Dmax,) and prof (n_blk, Dmax) the load before the node."""
  over = lambda top: jnp.maximum((params + top) / cap - limit, 0.0)
  grow = over((prof[None] + out_iv).max(1)) - over(prof.max(0))[None, :]  # (S, Dmax)
  return grow.sum(1, keepdims=True) - grow


def intervals(lay: Layout, b):
  """(S, n_blk) the live bytes block b's nodes add over the blocks: each node's output from b
  through its last consumer's block, plus (a leader) its group members' output intervals."""
  s = lay.free_blk.shape[1]
  n_blk = lay.shares.shape[0]
  ahead = jnp.arange(n_blk)
  span = (ahead[None, :] >= b) & (ahead[None, :] < lay.free_blk[b][:, None])
  grp = jnp.cumsum(jax.lax.dynamic_slice_in_dim(lay.group, b * s, s), axis=1)[:, :n_blk]
  return grp + lay.shares[b][:, 1:2] * span


def copy_terms(state: LoadState, lay: Layout, b):
  """The copy term's inputs for block b, given the state before it:
    away (S, Dmax): for each node i of the block, the bytes of its inputs from earlier blocks
      that are not (expected) on device d, over all of i's input bytes (0 for a node without
      inputs; inputs from block b itself are not yet placed and count on no device);
    inner (S, S): inner[i, j] the share of i's input bytes that comes from block b's node j
      (the greedy decode adds those of its earlier picks).
  Edges inside a colocation group move nothing (e_out 0) and count nowhere."""
  s = lay.free_blk.shape[1]
  into = lay.e_blk == b
  dst = jnp.clip(lay.e_dst - b * s, 0, s - 1)
  total = jnp.zeros(s, jnp.float32).at[dst].add(jnp.where(into, lay.e_out, 0.0))
  norm = 1.0 / jnp.maximum(total, 1e-12)
  known = into & (lay.e_src < b * s)
  away = jnp.where(known[:, None], lay.e_out[:, None] * (1.0 - state.probs[lay.e_src]), 0.0)
  away = jnp.zeros((s, state.params.shape[0]), jnp.float32).at[dst].add(away)
  src = jnp.clip(lay.e_src - b * s, 0, s - 1)
  inner = jnp.zeros((s, s), jnp.float32).at[dst, src].add(
      jnp.where(into & ~known, lay.e_out, 0.0))
  return away * norm[:, None], inner * norm[:, None]


def follow_leaders(state: LoadState, lay: Layout, b, p):
  """Block b's distribution (S, Dmax) with every colocation member given its leader's (rule 1:
  the group runs where its root goes): from this block's rows where the leader is in block b,
  else from the state's record of the leader's block. Leaders precede their members in the
  topological order, so the leader's row is always known."""
  s = p.shape[0]
  lead = jax.lax.dynamic_slice(lay.lead, (b * s,), (s,))
  local = lead - b * s
  own = local == jnp.arange(s)
  here = p[jnp.clip(local, 0, s - 1)]
  earlier = state.probs[lead]
  return jnp.where(own[:, None], p, jnp.where((local >= 0)[:, None], here, earlier))


def estimated_peak(placement, node_load, node_end, topo_order, topo_position, node_mask,
                   senders, receivers, edge_mask, num_devices: int, block: int = 32,
                   leader=None, copy_to_receiver: bool = False):
  """(num_devices,) the load state's peak estimate P_d + max over blocks of the live outputs
  (shares of T) of a fixed placement (Np,): what the barrier compares with the capacity once
  every node is placed. With `leader` (GraphFeatures.node_leader) every op counts on its
  colocation leader's device, as the decoder counts it."""
  lay = layout(node_load, node_end, topo_order, topo_position, node_mask, senders, receivers,
                edge_mask, block, leader, copy_to_receiver=copy_to_receiver)
  n_blk = lay.shares.shape[0]
  onehot = jax.nn.one_hot(jnp.pad(placement[topo_order], (0, n_blk * block - placement.shape[0])),
                          num_devices).reshape(n_blk, block, num_devices)

  def step(state, xs):
    b, p = xs
    return commit(state, lay, b, follow_leaders(state, lay, b, p)), None

  state, _ = jax.lax.scan(step, init_state(n_blk, block, num_devices),
                          (jnp.arange(n_blk), onehot))
  return state.params + profile(state).max(0)
