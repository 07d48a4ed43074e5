"""The load state's time: when each device is free and when each placed node ends.

The memory state (`load_state`) tells the decoder where memory runs out; it does not tell it
when a device is busy or when a node's inputs arrive, the two things a list scheduler places
by (HEFT puts each node, in a topological order, where it finishes first). This module carries
that along the decoder's topological order, in the same modes as the memory state (expected,
greedy, forced: `load.MODES`), so that the placement logits can see each node's earliest
finish time on every device from the decisions already made, inside the one forward pass.

All times are shares of the graph's serial compute time (its total cost on a speed-1 device),
read from the features the policy already has (policies/features.py):
  duration  dur_i(d) = cost_i / speed_d + overhead_d (0 on padding): node_load's cost share,
            the device's relative speed and its per-op overhead (expm1(log_overhead) / N);
  copy      c_e(d) = send_s + latency_d for an edge s -> r between colocation groups (0 inside
            a group): the sender's send time (expm1(log_send_time) / N) and the receiving
            device's mean link latency (expm1(log_latency) / N).
The state before block b, for every device d and earlier topological position j:
  A_d       the (expected) time at which d's last placed node ends;
  F_j       the (expected) finish time of node j.
Node i of block b, on device d:
  ready_i(d) = max over its inputs s of F_s + c_e(d) x (1 - p_s(d))  (0 without inputs)
  EFT_i(d)   = max(A_d, ready_i(d)) + dur_i(d)
with p_s the state's distribution of s (one-hot in the greedy and forced modes). The block's
scores see the inputs from earlier blocks; the commit (and the greedy decode's node-by-node
picks) takes the block's nodes one at a time in topological order and also sees their inputs
from the block's earlier nodes:
  F_i = sum_d p_i(d) EFT_i(d),   A_d <- A_d + p_i(d) (EFT_i(d) - A_d).
With one-hot placements this is a list schedule in the topological order without insertion
(each device runs its nodes in that order, a node starts when its device is free and its
inputs have arrived): HEFT's estimate with the topological order as the priority. In the
expected mode it is its mean field (A_d moves to EFT_i(d) with probability p_i(d)).
The simulator runs the priorities, not the topological order, so this is an estimate, as the
memory state's is. The decoder's time term (load.py) lowers node i's logit of device d by
  w_i x log1p(N x (EFT_i(d) - min_e EFT_i(e))),
N the number of real nodes (so the difference is read in mean op costs), w_i >= 0 learned per
node. The state is context, not a path for gradients (the decoder stops them at the placement
it counts): only w_i learns through the term. docs/design.md section 7, "The time term", has
a worked example.
"""

from __future__ import annotations

import flax
import jax
import jax.numpy as jnp

from go_jax.policies.load_state import Layout


@flax.struct.dataclass
class TimeState:
  """What the decoder knows of time before a block (shares of the serial compute time)."""
  finish: jnp.ndarray  # (n_blk * S,) float32 F_j per topological position (0 until placed)
  avail: jnp.ndarray  # (Dmax,) float32 A_d


@flax.struct.dataclass
class TimeLayout:
  """The graph's durations and copy times in the decoder's blocks."""
  dur: jnp.ndarray  # (n_blk, S, Dmax) float32 dur_i(d) per slot (0 on padding slots)
  e_send: jnp.ndarray  # (Ep,) float32 sender's send time; 0 on padding and inside a group
  e_on: jnp.ndarray  # (Ep,) float32 1 for a real edge between colocation groups, else 0
  # (n_blk, S, S) float32 in_send[b, j, k]: the send time of block b's slot k to its slot j
  # (k feeds j) and in_on[b, j, k] 1 where such an edge crosses groups; in_edge 1 for any edge
  in_send: jnp.ndarray
  in_on: jnp.ndarray
  in_edge: jnp.ndarray
  latency: jnp.ndarray  # (Dmax,) float32 mean latency of a copy into d
  device_mask: jnp.ndarray  # (Dmax,) bool
  scale: jnp.ndarray  # () float32 N, the number of real nodes (1 / mean op cost)


def time_layout(lay: Layout, node_load, node_send, node_mask, topo_order, senders,
                edge_mask, speed, overhead, latency, device_mask) -> TimeLayout:
  """The time inputs in blocks. node_load (Np, 4) (its cost column is the cost share),
  node_send (Np,) send-time shares, speed / overhead / latency (Dmax,) (module docstring)."""
  n_blk, s = lay.free_blk.shape
  n = node_load.shape[0]
  dev_mask = jnp.asarray(device_mask, bool)
  real = jnp.asarray(node_mask, bool)
  speed = jnp.where(dev_mask, jnp.maximum(speed, 1e-6), 1.0)
  dur = jnp.where(real[:, None], node_load[:, 3:4] / speed[None, :] + overhead[None, :], 0.0)
  dur = jnp.pad(dur[topo_order], ((0, n_blk * s - n), (0, 0))).reshape(n_blk, s, -1)
  emask = jnp.asarray(edge_mask, bool)
  e_on = (emask & (lay.lead[lay.e_src] != lay.lead[lay.e_dst])).astype(jnp.float32)
  e_send = e_on * node_send[senders]
  same = emask & (lay.e_src // s == lay.e_blk)  # both ends in the receiver's block
  blk = jnp.where(same, lay.e_blk, n_blk)  # out-of-range rows are dropped by the scatters
  j, k = lay.e_dst % s, lay.e_src % s
  zeros = jnp.zeros((n_blk, s, s), jnp.float32)
  return TimeLayout(
      dur=dur, e_send=e_send, e_on=e_on,
      in_send=zeros.at[blk, j, k].max(e_send, mode="drop"),
      in_on=zeros.at[blk, j, k].max(e_on, mode="drop"),
      in_edge=zeros.at[blk, j, k].max(same.astype(jnp.float32), mode="drop"),
      latency=jnp.where(dev_mask, latency, 0.0), device_mask=dev_mask,
      scale=jnp.maximum(jnp.sum(real), 1).astype(jnp.float32))


def init_time(n_blk: int, block: int, dmax: int) -> TimeState:
  """Nothing placed: every device free at time 0."""
  return TimeState(finish=jnp.zeros(n_blk * block, jnp.float32),
                   avail=jnp.zeros(dmax, jnp.float32))


def ready_known(ts: TimeState, tl: TimeLayout, lay: Layout, probs, b):
  """(S, Dmax) ready_i(d) of block b's nodes over their inputs from earlier blocks, with
  probs (n_blk * S, Dmax) the state's placement distribution per position."""
  s = lay.free_blk.shape[1]
  known = (lay.e_blk == b) & (lay.e_src < b * s)
  arrive = (ts.finish[lay.e_src][:, None] + (tl.e_send[:, None] + tl.latency[None, :])
            * tl.e_on[:, None] * (1.0 - probs[lay.e_src]))
  dst = jnp.clip(lay.e_dst - b * s, 0, s - 1)
  return jnp.zeros((s, probs.shape[1]), jnp.float32).at[dst].max(
      jnp.where(known[:, None], arrive, 0.0))


def eft_slot(tl: TimeLayout, b, j, avail, finish_blk, p_blk, ready_j):
  """(Dmax,) EFT of block b's slot j on every device, given the devices' avail (Dmax,), the
  block's earlier slots' finish times finish_blk (S,) and distributions p_blk (S, Dmax) (only
  the slots that feed j are read), and ready_j (Dmax,) from earlier blocks (`ready_known`)."""
  on, edge = tl.in_on[b, j][:, None], tl.in_edge[b, j][:, None]
  arrive = finish_blk[:, None] + (tl.in_send[b, j][:, None] + tl.latency[None, :]) * on * (
      1.0 - p_blk)
  ready = jnp.maximum(ready_j, jnp.where(edge > 0, arrive, 0.0).max(0))
  return jnp.maximum(avail, ready) + tl.dur[b, j]


def block_eft(ts: TimeState, tl: TimeLayout, b, ready):
  """(S, Dmax) EFT of block b's nodes from the state at the block's start (inputs from the
  block itself not yet known: the scores' view)."""
  return jnp.maximum(ts.avail[None, :], ready) + tl.dur[b]


def term(eft, tl: TimeLayout):
  """(S, Dmax) log1p(N x (EFT - the node's smallest EFT over the real devices)) >= 0."""
  low = jnp.where(tl.device_mask[None, :], eft, jnp.inf).min(-1, keepdims=True)
  return jnp.where(tl.device_mask[None, :], jnp.log1p(tl.scale * jnp.maximum(eft - low, 0.0)),
                   0.0)


def step_slot(avail, finish_blk, j, eft, p_j):
  """One node committed: F_j = sum_d p_j(d) EFT(d), A_d moves to EFT(d) with probability
  p_j(d). Returns (avail, finish_blk)."""
  return avail + p_j * (eft - avail), finish_blk.at[j].set(jnp.sum(p_j * eft))


def commit_time(ts: TimeState, tl: TimeLayout, b, p, ready) -> TimeState:
  """Block b placed with distribution p (S, Dmax) (members already following their leaders),
  its nodes taken one by one in topological order; ready (S, Dmax) from `ready_known`."""
  s = p.shape[0]

  def one(carry, j):
    avail, fin = carry
    eft = eft_slot(tl, b, j, avail, fin, p, ready[j])
    return step_slot(avail, fin, j, eft, p[j]), None

  (avail, fin), _ = jax.lax.scan(one, (ts.avail, jnp.zeros(s, jnp.float32)), jnp.arange(s))
  return with_block(ts, b, avail, fin)


def with_block(ts: TimeState, b, avail, finish_blk) -> TimeState:
  """The state after block b: the devices' ends avail (Dmax,) and the block's finish times
  finish_blk (S,) written at its positions."""
  s = finish_blk.shape[0]
  return TimeState(finish=jax.lax.dynamic_update_slice(ts.finish, finish_blk, (b * s,)),
                   avail=avail)
