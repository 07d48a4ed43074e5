"""Received copies in estimated time: the greedy decode's check of the copies a device holds.

The load state (load_state.py) counts time in decode positions. A received copy is live in the
schedule (rule 7) from its sender's end until its last consumer on the receiving device has run;
when that device's consumers queue behind one another, their inputs arrive long before they
run and wait there together, and the positions between a sender and its consumer say nothing
of that wait (docs/design.md section 7, "What the estimate is not"; BENCHMARKS.md measured 0.994x
of a device's capacity in such copies where the state saw 0.556x in all).

With the time term (load_time.py) the greedy decode knows every decided node's estimated finish
F_s and, for the node i it is placing, its estimated finish EFT_i(d) on each device. This module
keeps, per device, the copies' bytes over K time bins of the serial compute time (the time
term's unit; times past the horizon fall in the last bin): the copy of s's output on d is live
from bin(F_s) through bin(EFT_r(d)) of its latest consumer r on d so far. Each copy is counted
once per (sender, device): a later consumer extends it. The greedy barrier of node i on d then
adds, for each input s of i on another device, the copy's new bins, and compares the device's
parameters plus the highest bin with the capacity. Own outputs stay with the block profile.

Written by hand (no library keeps an interval profile inside a jitted scan): a difference array
over the bins per device, summed with a cumulative sum.
"""

from __future__ import annotations

import flax
import jax.numpy as jnp

BINS = 512  # time bins over the horizon
HORIZON = 1.0  # in shares of the serial compute time: a schedule past it is a serial one


@flax.struct.dataclass
class CopyState:
  """The copies counted so far (greedy decode only)."""
  prof: jnp.ndarray  # (BINS, Dmax) float32 copy bytes (shares of T) live per time bin on d
  end: jnp.ndarray  # (n_blk * S, Dmax) int32 first bin past s's copy on d (0: none yet)


def init_copies(n_pos: int, dmax: int) -> CopyState:
  return CopyState(prof=jnp.zeros((BINS, dmax), jnp.float32),
                   end=jnp.zeros((n_pos, dmax), jnp.int32))


def time_bin(t):
  """The bin of time t (shares of the serial compute time), clipped to [0, BINS - 1]."""
  return jnp.clip(jnp.floor(t * (BINS / HORIZON)), 0, BINS - 1).astype(jnp.int32)


def new_copies(cs: CopyState, e_src, e_dst, e_out, cur, finish, probs, eft):
  """(BINS, Dmax) what node `cur` (a topological position) would add to each device's copy
  profile if placed there: for each edge s -> cur (e_src / e_dst (Ep,) positions, e_out (Ep,)
  the sender's output share, 0 on padding and inside a group), the copy of s on d from
  max(bin(F_s), where s's copy on d ends so far) through bin(EFT_cur(d)), weighted by the
  probability 1 - p_s(d) that s is elsewhere. finish (n_pos,) F per position, probs (n_pos,
  Dmax) the decided placements, eft (Dmax,) the node's finish on each device."""
  dmax = eft.shape[0]
  into = (e_dst == cur) & (e_out > 0)
  away = (1.0 - probs[e_src]) * jnp.where(into, e_out, 0.0)[:, None]  # (Ep, Dmax)
  stop = time_bin(eft) + 1  # (Dmax,) exclusive
  begin = jnp.maximum(time_bin(finish[e_src])[:, None], cs.end[e_src])  # (Ep, Dmax)
  amount = jnp.where(begin < stop[None, :], away, 0.0)
  cols = jnp.broadcast_to(jnp.arange(dmax)[None, :], begin.shape)
  diff = jnp.zeros((BINS + 1, dmax), jnp.float32).at[begin, cols].add(amount)
  diff = diff.at[stop, jnp.arange(dmax)].add(-amount.sum(0))
  return jnp.cumsum(diff, 0)[:BINS]


def commit(cs: CopyState, e_src, e_dst, e_out, cur, add, pick, eft) -> CopyState:
  """Node `cur` placed on the one-hot `pick` (Dmax,): its column of `add` (new_copies) joins
  the profile and its inputs' copies on that device now end past bin(EFT_cur)."""
  into = (e_dst == cur) & (e_out > 0)
  stop = jnp.sum(pick * (time_bin(eft) + 1)).astype(jnp.int32)
  ext = jnp.where(into[:, None] & (pick[None, :] > 0), stop, 0)  # (Ep, Dmax)
  return CopyState(prof=cs.prof + add * pick[None, :],
                   end=cs.end.at[e_src].max(ext))


def peak(cs: CopyState, add):
  """(Dmax,) the highest copy bin on each device with `add` (BINS, Dmax) counted."""
  return jnp.max(cs.prof + add, axis=0)
