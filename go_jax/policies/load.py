"""GO's device-load state: placement logits that see the memory and compute already committed.

The encoder (GraphSAGE + segment attention) gives every node a state without knowing where the
other nodes go, so a policy that places from those states alone cannot see where memory runs
out: the paper's GO, zero-shot, put too much on one device and was out of memory on every
held-out instance. GO's "state embedding" conditions each segment's placement on what the
segments before it committed; this module does that within ONE forward pass.

The nodes are taken in topological order in blocks of `block` nodes (a `lax.scan`). Before a
block, every device carries a load state; the block's placement logits are the encoder's
node-device scores plus a term of that state (an MLP of the per-device load features, added to
the device keys and biases) minus a memory barrier; the block's placement distribution then
updates the state. What the state counts is the decoder's `mode` (`MODES`):
  expected  the EXPECTATION under the policy's own distribution (mean field: every node counts
            on device d with its probability p_i(d)). The logits are then a deterministic
            function of the graph and the parameters: every node's decision is an independent
            categorical given the forward pass, K samples cost one pass, and PPO's
            log-probabilities keep their form. Sampling and training use these logits.
  greedy    every earlier node on its most likely device: the greedy action is decoded block by
            block against the load it actually commits (GO's state embedding), so its memory
            barrier sees the real devices' load, not a spread-out expectation (a policy that is
            0.5-0.6 sure of each node looks balanced in expectation and piles up in argmax).
  forced    a given placement (imitation's teacher forcing: the logits the greedy decode sees
            when it follows the teacher).
The exact decode (the decoder given `leader`, GraphFeatures.node_leader; GOPolicy.load_exact):
a colocation group is decided and counted where its leader (its first member in topological
order) goes, since rule 1 puts the group on one device: members take the leader's logits, the
leader commits the group's parameters and members' output intervals, and an edge inside a group
moves nothing. The barrier also looks ahead: the largest block from b on of the live profile
with the node's output, group and incoming-copy intervals added. The greedy decode picks a
block's nodes one by one, each barrier adding the block's earlier picks to an incremental live
profile (its scores still come from the block's start state), then commits the block.
docs/design.md section 7 has the rules and what they fixed.
GOPolicy returns the expected logits as `placement_logits` and the greedy ones as
`greedy_placement_logits` from one call (the encoder runs once; each mode is one cheap scan).

Copy term (`comm`, off in the checkpoints before 2026-11-26 afternoon): a placement that
spreads a model to fit memory pays in copies, which the memory state does not see. With it,
node i's logit of device d also drops by
  w_i x (bytes of i's inputs known to be away from d) / (all of i's input bytes),
w_i = softplus(v . q_i + c) >= 0 learned per node from its query (c initially giving
`comm_init`), so the policy can weigh a copy against the compute and memory balance per node.
"Known": the inputs from earlier blocks, counted with the state's distribution (expected,
greedy or forced, as the load); the block's own inputs count on no device, except in the greedy
decode, which adds those of the block's earlier picks. The share is 0 for a node without
inputs (its term is the same on every device: no effect).

Memory follows rule 7 of design.md section 4 with the topological order standing in for the
schedule (on the baselines' solutions of the PipeDream graphs this estimate equals the
simulator's peak; on random DAGs it is within ~30%). All sizes are shares of T, the graph's
total parameter + output bytes, and c_d is device d's capacity over T:
  params   P_d: parameter shares of the nodes placed on d so far (resident all step);
  live     L_d(b): the outputs live on d at block b. An output placed on d is live from its
           block to its last consumer's (an output nobody consumes lives to the end); an edge
           s -> r brings the copy out_s x p_r(d) x (1 - p_s(d)) to d when r is placed, live
           from s's block (the transfer starts when s ends) to s's last consumer's. The state
           keeps the whole profile over blocks (a difference array), so a copy placed late
           still counts where it was live;
  high     H_d: the largest L_d(b) over all blocks; the estimated peak is P_d + H_d;
  work     W_d: cost share placed on d (1 = the whole graph).
Load features of device d before a block (`LOAD_FEATURES`; clipped at FEATURE_CAP):
  params P_d / c_d, live L_d(b) / c_d, high H_d / c_d, peak (P_d + H_d) / c_d, its
  log1p, work W_d x D (1 = a fair share), progress sum_e W_e.

Memory barrier (`guard`): node i's logit of device d drops by
  softplus(a) x max(0, (P_d + param_i + max(H_d, L_d(b) + out_i + temp_i + in_i(d))) / c_d - 1),
with in_i(d) the copies i would receive on d (each input's output times the probability that
it is not on d; inputs from i's own block in full): the estimated overflow of d's peak with i
on it, times a learned scale (initially `guard_init`): an untrained or imitating policy is
steered away from devices where memory runs out, and training can weaken the barrier where the
estimate is loose. In the greedy decode the scale is at least GREEDY_BARRIER: the committed load
is known there, so a device the estimate says would overflow is all but masked.
"""

from __future__ import annotations

import math
from typing import Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

# What the state counts: "expected" (each node with its placement distribution: the logits of
# sampling and of PPO's log-probabilities), "greedy" (each node on its most likely device: the
# greedy action's logits) or "forced" (a given placement: imitation's teacher forcing).
MODES = ("expected", "greedy", "forced")
LOAD_FEATURES = ("params", "live", "high", "peak", "log_peak", "work", "progress")
NODE_LOAD = ("param", "out", "temp", "cost")  # columns of GraphFeatures.node_load
# Barrier scale of the greedy decode: there the state is the committed load, so a device the
# estimate says would overflow is all but masked (1 logit per 1e-5 of overflow); when every
# device would overflow, the least overflowing one wins.
GREEDY_BARRIER = 1e5
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
class _Layout:
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


def _layout(node_load, node_end, topo_order, topo_position, node_mask, senders, receivers,
            edge_mask, block: int, leader=None, group_copies: bool = False) -> _Layout:
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
  return _Layout(
      lead=lead, group=group,
      shares=jnp.pad(share[topo_order], ((0, pad), (0, 0))).reshape(n_blk, block, 4),
      free_blk=free.reshape(n_blk, block),
      e_src=e_src, e_dst=e_dst, e_blk=e_blk,
      e_out=jnp.where(lead[e_src] == lead[e_dst], 0.0, e_out),  # a group shares one device
      e_free=node_end[senders] // block + 1, e_dec=e_dec, e_lsrc=e_lsrc, e_ldst=e_ldst,
      group_copies=group_copies)


def _init_state(n_blk: int, block: int, dmax: int) -> LoadState:
  zeros = jnp.zeros(dmax, jnp.float32)
  return LoadState(probs=jnp.zeros((n_blk * block, dmax), jnp.float32), params=zeros,
                   work=zeros, diff=jnp.zeros((n_blk + 2, dmax), jnp.float32))


def _profile(state: LoadState) -> jnp.ndarray:
  """(n_blk, Dmax) live-output bytes per block of the intervals known so far."""
  return jnp.cumsum(state.diff, axis=0)[:-2]


def _commit(state: LoadState, lay: _Layout, b, p) -> LoadState:
  """Block b placed with distribution p (S, Dmax): its parameters, cost, outputs (live from b
  to their last consumer's block) and the copies its nodes receive (live from the sender's
  block to the sender's last consumer's block) added: rule 7 with the topological order as the
  schedule."""
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


def _barrier_terms(state: LoadState, lay: _Layout, b):
  """The memory barrier's estimate for each node i of block b on each device d (shares of T),
  given the state before block b:
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
  n_blk, dmax = lay.shares.shape[0], state.params.shape[0]
  sb = lay.shares[b]
  prof = _profile(state)
  base = b * s
  in_blk = lambda pos: (pos >= base) & (pos < base + s)
  known = (lay.e_lsrc < base)[:, None]
  away = lay.e_out[:, None] * (1.0 - state.probs[lay.e_lsrc])  # (Ep, Dmax)
  # incoming copies: edges whose receiver (group copies: the receiver's leader) is in block b
  incoming = (lay.e_dec == b) & in_blk(lay.e_ldst)
  copy = incoming[:, None] * jnp.where(known, away, lay.e_out[:, None])
  dst = jnp.clip(lay.e_ldst - base, 0, s - 1)
  # `now` counts the copies of the block's own receivers (a member runs later: ahead only)
  here = (lay.e_dst >= base) & (lay.e_dst < base + s)
  recv = jnp.zeros((s, dmax), jnp.float32).at[dst].add(copy * here[:, None])
  now = prof[b][None, :] + sb[:, 1:2] + sb[:, 2:3] + recv
  ahead = prof[None]
  riv = out_iv = None
  if lay.group is not None:
    riv = jnp.cumsum(jnp.zeros((s, n_blk + 2, dmax), jnp.float32)
                     .at[dst, lay.e_src // s].add(copy)
                     .at[dst, lay.e_free].add(-copy), axis=1)[:, :n_blk]  # (S, n_blk, Dmax)
    ahead = ahead + _intervals(lay, b)[:, :, None] + riv
  if lay.group_copies:
    # outgoing copies: the sender's leader is in block b, the receiver's decided before it
    out = ((lay.e_dec == b) & in_blk(lay.e_lsrc) & (lay.e_ldst < base))[:, None] * (
        lay.e_out[:, None] * state.probs[lay.e_ldst])
    src = jnp.clip(lay.e_lsrc - base, 0, s - 1)
    out_iv = jnp.cumsum(jnp.zeros((s, n_blk + 2, dmax), jnp.float32)
                        .at[src, lay.e_src // s].add(out)
                        .at[src, lay.e_free].add(-out), axis=1)[:, :n_blk]
  return now, ahead, riv, out_iv


def _spill(params, prof, out_iv, cap, limit):
  """(S, Dmax) the overflow that placing each of a block's nodes on device d causes on the
  OTHER devices through its group's outgoing copies (out_iv, _barrier_terms): device e's
  overflow with the copies it then receives, less its overflow without them, summed over
  e != d. params (Dmax,) and prof (n_blk, Dmax) the load before the node."""
  over = lambda top: jnp.maximum((params + top) / cap - limit, 0.0)
  grow = over((prof[None] + out_iv).max(1)) - over(prof.max(0))[None, :]  # (S, Dmax)
  return grow.sum(1, keepdims=True) - grow


def _intervals(lay: _Layout, b):
  """(S, n_blk) the live bytes block b's nodes add over the blocks: each node's output from b
  through its last consumer's block, plus (a leader) its group members' output intervals."""
  s = lay.free_blk.shape[1]
  n_blk = lay.shares.shape[0]
  ahead = jnp.arange(n_blk)
  span = (ahead[None, :] >= b) & (ahead[None, :] < lay.free_blk[b][:, None])
  grp = jnp.cumsum(jax.lax.dynamic_slice_in_dim(lay.group, b * s, s), axis=1)[:, :n_blk]
  return grp + lay.shares[b][:, 1:2] * span


def _copy_terms(state: LoadState, lay: _Layout, b):
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


def _follow_leaders(state: LoadState, lay: _Layout, b, p):
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
                   leader=None):
  """(num_devices,) the load state's peak estimate P_d + max over blocks of the live outputs
  (shares of T) of a fixed placement (Np,): what the barrier compares with the capacity once
  every node is placed. With `leader` (GraphFeatures.node_leader) every op counts on its
  colocation leader's device, as the decoder counts it."""
  lay = _layout(node_load, node_end, topo_order, topo_position, node_mask, senders, receivers,
                edge_mask, block, leader)
  n_blk = lay.shares.shape[0]
  onehot = jax.nn.one_hot(jnp.pad(placement[topo_order], (0, n_blk * block - placement.shape[0])),
                          num_devices).reshape(n_blk, block, num_devices)

  def step(state, xs):
    b, p = xs
    return _commit(state, lay, b, _follow_leaders(state, lay, b, p)), None

  state, _ = jax.lax.scan(step, _init_state(n_blk, block, num_devices),
                          (jnp.arange(n_blk), onehot))
  return state.params + _profile(state).max(0)


class LoadDecoder(nn.Module):
  """Placement logits (Np, Dmax) decoded block by block with the load state (module docstring).

  Call with q (Np, H) node queries, k (Dmax, H) device keys and bias (Dmax,) device biases (the
  load-free scores are q k^T / sqrt(H) + bias), node_load (Np, 4) shares (NODE_LOAD), node_end
  (Np,) int32 topological position of each node's last consumer (the last real position when
  nothing consumes it: such an output lives to the end, rule 7; features.load_inputs),
  device_capacity (Dmax,), device_mask (Dmax,) bool,
  topo_order / topo_position (Np,) int32, node_mask (Np,) bool, and the edges senders /
  receivers / edge_mask (Ep,). Logits of padded devices are `masked_logit`; padded nodes and
  edges add nothing to the state.
  """
  hidden: int
  block: int = 32
  masked_logit: float = -1e9
  guard: bool = True
  guard_init: float = 100.0  # initial barrier per unit of relative overflow (1% over: 1 logit)
  # share of each device's memory the greedy decode keeps free: the estimate follows the
  # topological order, the simulator the priorities, and their peaks can differ by ~10-20%
  greedy_margin: float = 0.1
  # nodes per block of the greedy decode (0: `block`). Within a block every node sees the state
  # of the block's start, so up to `block` nodes can pile onto one device unseen by the
  # barrier; 1 commits node by node (GO's state embedding exactly). The parameters do not
  # depend on the block size, so a policy trained with `block` decodes with any. Measured on
  # the shipped `go` (BENCHMARKS.md, issue 11): 1 is better on the training set as a whole but
  # worse on 4 of its 7 families, so the default stays the training block.
  greedy_block: int = 0
  # the copy term (`comm`): each node's logit of device d drops by w_i x the share of its input
  # bytes known to be away from d (module docstring, "Copy term"); w_i = softplus of a learned
  # function of the node's query, initially `comm_init`
  comm: bool = False
  comm_init: float = 1.0
  # group copies (module docstring): a copy into or out of a colocation group is counted when
  # both ends' groups are decided, not when its receiver's block comes (exact decode only)
  group_copies: bool = False

  @nn.compact
  def __call__(self, q, k, bias, node_load, node_end, device_capacity, device_mask, topo_order,
               topo_position, node_mask, senders, receivers, edge_mask, mode: str = "expected",
               placement=None, leader=None):
    if mode not in MODES:
      raise ValueError(f"LoadDecoder: unknown mode {mode!r}; choose from {MODES}")
    if (mode == "forced") != (placement is not None):
      raise ValueError("LoadDecoder: mode 'forced' takes a placement, the other modes none")
    if self.block < 1:
      raise ValueError(f"LoadDecoder: block must be >= 1, got {self.block}")
    if self.greedy_block < 0:
      raise ValueError(f"LoadDecoder: greedy_block must be >= 0, got {self.greedy_block}")
    h = self.hidden
    f = len(LOAD_FEATURES)
    w1 = self.param("w1", nn.initializers.lecun_normal(), (f, h), jnp.float32)
    b1 = self.param("b1", nn.initializers.zeros, (h,), jnp.float32)
    # The load term starts small (not zero, so that w1 gets a gradient at once).
    small = nn.initializers.normal(1e-2)
    w2 = self.param("w2", small, (h, h), jnp.float32)
    wb = self.param("w_bias", small, (h,), jnp.float32)
    guard = jnp.float32(0.0)
    if self.guard:
      raw = self.param("guard_scale", nn.initializers.constant(
          math.log(math.expm1(self.guard_init))), (), jnp.float32)
      guard = jax.nn.softplus(raw)

    comm_v = comm_c = None
    if self.comm:
      comm_v = self.param("comm_w", small, (h,), jnp.float32)
      comm_c = self.param("comm_b", nn.initializers.constant(
          math.log(math.expm1(self.comm_init))), (), jnp.float32)

    n, dmax = q.shape[0], k.shape[0]
    s = self.greedy_block if (mode == "greedy" and self.greedy_block) else self.block
    n_blk = -(-n // s)
    dev_mask = jnp.asarray(device_mask, bool)
    cap = jnp.where(dev_mask, jnp.maximum(device_capacity, 1e-6), 1.0)
    lay = _layout(node_load, node_end, topo_order, topo_position, node_mask, senders, receivers,
                  edge_mask, s, leader, self.group_copies)
    qs = jnp.pad(q[topo_order], ((0, n_blk * s - n), (0, 0))).reshape(n_blk, s, h)
    scale = 1.0 / jnp.sqrt(jnp.float32(h))

    forced = None
    if placement is not None:
      forced = jax.nn.one_hot(jnp.pad(placement[topo_order], (0, n_blk * s - n)), dmax,
                              dtype=jnp.float32).reshape(n_blk, s, dmax)
    else:
      forced = jnp.zeros((n_blk, 1, 1), jnp.float32)  # unused

    if mode == "greedy":
      scale_b, limit = jnp.maximum(guard, GREEDY_BARRIER), 1.0 - self.greedy_margin
    else:
      scale_b, limit = guard, 1.0

    def barrier(state, b):
      now, ahead, _, out_iv = _barrier_terms(state, lay, b)
      peak = (state.params[None, :] + lay.shares[b][:, :1]
              + jnp.maximum(now, ahead.max(1)))
      over = jnp.maximum(peak / cap[None, :] - limit, 0.0)
      if out_iv is not None:
        over = over + _spill(state.params, _profile(state), out_iv, cap, limit)
      return scale_b * over

    def step(state: LoadState, xs):
      b, qb, fb = xs
      prof = _profile(state)
      feats = load_features(state.params, prof[b], prof.max(0), state.work, cap, dev_mask)
      le = jax.nn.gelu(feats @ w1 + b1) @ w2  # (Dmax, H)
      logits = qb @ (k + le).T * scale + (bias + le @ wb)[None, :]
      logits = jnp.where(dev_mask[None, :], logits, self.masked_logit)
      if self.comm:
        away, inner = _copy_terms(state, lay, b)
        w = jax.nn.softplus(qb @ comm_v + comm_c)  # (S,) per-node weight of the copy term
        logits = logits - w[:, None] * away
      if lay.group is not None and self.guard and mode == "greedy":
        # The exact greedy decode: the block's scores come from the state at the block's start
        # (as in training), but its nodes are picked one by one, each node's barrier adding
        # what the block's earlier picks put on each device (parameters, and their output and
        # group intervals over the blocks), so that the nodes of one block cannot pile onto a
        # device unseen; the block is then committed at once.
        now, ahead, riv, out_iv = _barrier_terms(state, lay, b)
        adds = _intervals(lay, b)  # (S, n_blk): what each pick adds to its device's profile
        prof0 = _profile(state)
        sb = lay.shares[b]
        lead = jax.lax.dynamic_slice_in_dim(lay.lead, b * s, s)

        def one(carry, j):
          inc, extra, picks = carry  # (n_blk, Dmax) live, (Dmax,) params of earlier picks
          top = jnp.maximum(now[j] + inc[b], (ahead[j] + inc).max(0))
          peak = state.params + extra + sb[j, 0] + top
          over = jnp.maximum(peak / cap - limit, 0.0)
          if out_iv is not None:  # and the copies its group sends to decided groups
            over = over + _spill(state.params + extra, prof0 + inc, out_iv[j][None], cap,
                                 limit)[0]
          row = logits[j] - scale_b * over
          if self.comm:  # the block's earlier picks are known too: their copies count
            row = row - w[j] * (inner[j] * (jnp.arange(s) < j)) @ (1.0 - picks)
          row = jnp.where(dev_mask, row, self.masked_logit)
          pick = jax.nn.one_hot(jnp.argmax(row), dmax, dtype=jnp.float32)
          local = lead[j] - b * s
          follow = jnp.where(local >= 0, picks[jnp.clip(local, 0, s - 1)],
                             state.probs[lead[j]])  # members follow their leader
          pick = jnp.where(local == j, pick, follow)
          grow = adds[j][:, None] * pick[None, :]
          if out_iv is not None:  # the pick's copies: in on its device, out to the others
            grow = grow + riv[j] * pick[None, :] + out_iv[j] * (1.0 - pick)[None, :]
          return (inc + grow, extra + pick * sb[j, 0], picks.at[j].set(pick)), row

        init = (jnp.zeros((n_blk, dmax), jnp.float32), jnp.zeros(dmax, jnp.float32),
                jnp.zeros((s, dmax), jnp.float32))
        (_, _, picks), rows = jax.lax.scan(one, init, jnp.arange(s))
        return _commit(state, lay, b, picks), rows
      if self.guard:
        logits = logits - barrier(state, b)
        logits = jnp.where(dev_mask[None, :], logits, self.masked_logit)
      # the distribution the state counts (padded rows have zero shares: they add nothing)
      if mode == "expected":
        p = jax.nn.softmax(logits, axis=-1)
      elif mode == "greedy":
        p = jax.nn.one_hot(jnp.argmax(logits, axis=-1), dmax, dtype=jnp.float32)
      else:
        p = fb
      return _commit(state, lay, b, _follow_leaders(state, lay, b, p)), logits

    _, logits = jax.lax.scan(step, _init_state(n_blk, s, dmax),
                             (jnp.arange(n_blk), qs, forced))
    # every colocation member takes its leader's logits (the group's one decision, made where
    # the state counted it), then back to node-id order
    return logits.reshape(n_blk * s, dmax)[lay.lead][:n][topo_position]
