"""Which ops hold a schedule's memory peak: the draw of the hill climb's peak-directed moves.

A climb for peak memory that draws the op to move uniformly spends most of its evaluations on
ops that hold nothing at the peak: a relocation or a priority swap of such an op cannot lower
it. `peak_holders` weighs each op by the bytes it holds, at the peak instant, on the device with
the highest peak; `local_search`'s climb (`climb.hill_climb`, option `peak_prob`) draws a
share of its moves' ops from these weights instead (docs/regal_baselines.md, "Peak-directed
moves").

The weights only steer which moves are proposed; every proposal is still scored by the exact
simulator, so they may approximate rule 7 of docs/design.md section 4, and they do, in three
ways that make them cheap (one sort of the 6 Np interval ends, no transfer times recomputed):
  - an output's transfers are taken to arrive by its consumers' starts on other devices (the
    true arrival is no later than that start); an output without consumers is kept until the
    makespan, as in rule 7;
  - a received copy is taken to be allocated when its producer finishes (the true transfer
    start is no earlier);
  - the peak instant is the first instant of largest total of these intervals (parameter bytes
    are resident throughout, so they do not move the instant and weigh nothing here).
Held bytes: an op's own output and scratch bytes where live at that instant; a received copy's
bytes go to each of its consumers on the peak device (moving them away is what frees the copy).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from simulator.padding import PaddedGraph

NEG_INF = -jnp.inf


def peak_holders(pg: PaddedGraph, place, start, finish, peak):
  """(Np,) float32 bytes each op holds at the peak of the device with the highest `peak`.

  pg: the padded graph; place (Np,) int device of every op (colocation applied); start,
  finish (Np,) the schedule's times; peak (D,) its peak memory per device. All zero where
  nothing is live at the instant found (e.g. a graph without bytes).
  """
  np_ = pg.cost.shape[-1]
  real = pg.node_mask
  dstar = jnp.argmax(peak)
  on = real & (place == dstar)
  send, recv, em = pg.senders, pg.receivers, pg.edge_mask
  recv_on = em & on[recv]  # edges whose consumer runs on the peak device
  s = jnp.where(real, start, 0.0).astype(jnp.float32)
  f = jnp.where(real, finish, 0.0).astype(jnp.float32)
  # own output on the peak device: until its last consumer there finishes, or its transfers
  # arrive (by its consumers' starts elsewhere), at least its own finish
  cons_t = jnp.where(recv_on, f[recv], jnp.where(em, s[recv], NEG_INF))
  out_end = jnp.maximum(f, jnp.full(np_, NEG_INF).at[send].max(cons_t))
  sink = jnp.zeros(np_, jnp.int32).at[send].add(em.astype(jnp.int32)) == 0
  out_end = jnp.where(sink, jnp.max(f), out_end)  # no consumers: kept until the makespan
  # a copy on the peak device of an output made elsewhere: from the producer's finish to the
  # last finish of its consumers there
  last_on = jnp.full(np_, NEG_INF).at[send].max(jnp.where(recv_on, f[recv], NEG_INF))
  copy = real & ~on & (last_on > NEG_INF)
  out_b = pg.out_bytes.astype(jnp.float32)
  tmp_b = pg.temp_bytes.astype(jnp.float32)
  t0 = jnp.concatenate([s, s, f])
  t1 = jnp.concatenate([out_end, f, last_on])
  w = jnp.concatenate([jnp.where(on, out_b, 0.0), jnp.where(on, tmp_b, 0.0),
                       jnp.where(copy, out_b, 0.0)])
  w = jnp.where(t1 > t0, w, 0.0)  # half-open [t0, t1): empty intervals hold nothing
  # The live total over time: allocs +w at t0, frees -w at t1; at one instant the frees come
  # first (half-open), so the running sum after an alloc is the total live at its instant.
  times = jnp.concatenate([t0, jnp.where(w > 0, t1, NEG_INF)])
  delta = jnp.concatenate([w, -w])
  is_alloc = jnp.concatenate([jnp.ones_like(w, jnp.int32), jnp.zeros_like(w, jnp.int32)])
  order = jnp.lexsort((is_alloc, times))
  running = jnp.cumsum(delta[order])
  tstar = times[order][jnp.argmax(jnp.where(is_alloc[order] == 1, running, NEG_INF))]
  held = jnp.where((t0 <= tstar) & (tstar < t1), w, 0.0)
  own = held[:np_] + held[np_:2 * np_]
  to_cons = jnp.where(recv_on, held[2 * np_:][send], 0.0)  # a copy's bytes to its consumers
  return own + jax.ops.segment_sum(to_cons, recv, num_segments=np_)


def draw(weights, u, fallback):
  """Index drawn with probability proportional to `weights` (Np,) by the uniform `u` (...,),
  or `fallback` (same shape as u) where every weight is zero."""
  cw = jnp.cumsum(weights)
  total = cw[-1]
  idx = jnp.searchsorted(cw, u * total, side="right").astype(jnp.int32)
  idx = jnp.minimum(idx, weights.shape[0] - 1)
  return jnp.where(total > 0, idx, fallback)
