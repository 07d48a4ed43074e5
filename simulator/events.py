"""From a committed schedule to its makespan and memory events (docs/design.md section 4,
rules 3, 6 and 7): the part of `simulator.simulate` that runs once per action after the commit
loop, and the back-to-back transfer arithmetic the loop shares with it (so that the times
recomputed here are bit-identical to the loop's)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from simulator.memory_peaks import Events

INF = float("inf")


# Up to this many destinations the additions are unrolled (fastest for the usual 2-16 devices);
# beyond, one `lax.scan` over the destinations: the unrolled form grew the program by a few ops
# per device and XLA's compile time with it (128 devices: 25 s for a 4-op graph, 512: 228 s).
UNROLL_DEVICES = 16


def sequential_transfers(base, times, mask):
  """Back-to-back transfers on one send channel in ascending destination order.

  Returns (start, arrival) of each destination, shape (..., D). Accumulated one destination at
  a time (not cumsum) so float rounding matches the reference's sequential additions exactly;
  unrolled up to UNROLL_DEVICES destinations, else scanned (the same additions in the same
  order)."""
  d = times.shape[-1]
  if d <= UNROLL_DEVICES:
    starts, arrivals = [], []
    a = base
    for e in range(d):
      starts.append(a)
      a = a + jnp.where(mask[..., e], times[..., e], 0.0)
      arrivals.append(a)
    return jnp.stack(starts, -1), jnp.stack(arrivals, -1)

  def step(a, te_me):
    te, me = te_me
    nxt = a + jnp.where(me, te, 0.0)
    return nxt, (a, nxt)

  a0 = jnp.broadcast_to(base, times.shape[:-1]).astype(times.dtype)
  _, (starts, arrivals) = jax.lax.scan(step, a0, (jnp.moveaxis(times, -1, 0),
                                                 jnp.moveaxis(mask, -1, 0)))
  return jnp.moveaxis(starts, 0, -1), jnp.moveaxis(arrivals, 0, -1)


def transfer_times(pg, topo, place, tmask, send_t0, dt):
  """(tstart (Np, D), send_end (Np,)) of every op as the loop made them: the start of u's
  transfer to each device e it sends to (tmask (Np, D): where it sends), and the arrival of its
  last transfer (-inf if it sends none). The same additions, in the same order, as the loop's
  `sequential_transfers` from the channel start it recorded, so the times are bit-identical
  to the loop's."""
  times = (jnp.asarray(topo.latency, dt)[place]
           + pg.out_bytes.astype(dt)[:, None] / jnp.asarray(topo.bandwidth, dt)[place])
  tstart, arrival = sequential_transfers(send_t0, times, tmask)
  return tstart, jnp.where(tmask.any(-1), arrival[:, -1], -INF)


def schedule_events(pg, topo, place, cons, start, finish, send_t0, dt):
  """Makespan (rule 6) and the memory events of rule 7 from the committed schedule."""
  np_ = pg.cost.shape[0]
  d = topo.speed.shape[0]
  dev_ids = jnp.arange(d)
  makespan = jnp.max(jnp.where(pg.node_mask, finish, -INF))
  out_b = pg.out_bytes.astype(dt)
  tmp_b = pg.temp_bytes.astype(dt)

  # Transfers of every op as the loop made them: tstart[u, e] where u sends to e, and the
  # arrival of u's last transfer (its latest: one channel, back to back) in send_end.
  tmask = cons & (dev_ids[None, :] != place[:, None])  # (Np, D)
  tstart, send_end = transfer_times(pg, topo, place, tmask, send_t0, dt)
  # last_use[u, e]: latest finish of u's consumers on device e.
  recv_dev = place[pg.receivers]
  last_use = jnp.full((np_, d), -INF, dt).at[pg.senders, recv_dev].max(
      jnp.where(pg.edge_mask, finish[pg.receivers], -INF))
  has_cons = cons.any(-1)
  own_last = jnp.take_along_axis(last_use, place[:, None], 1)[:, 0]
  out_end = jnp.maximum(jnp.maximum(finish, own_last), send_end)
  out_end = jnp.where(has_cons, out_end, makespan)

  def sized(nbytes, t0, t1, valid):  # half-open [t0, t1): empty intervals weigh nothing
    return jnp.where(valid & (t1 > t0), nbytes, 0.0)

  real = pg.node_mask
  own_out = sized(out_b, start, out_end, real)
  own_tmp = sized(tmp_b, start, finish, real)
  # One received copy per (op, device): edge k represents it if it is the first such edge.
  ek = jnp.arange(pg.senders.shape[0], dtype=jnp.int32)
  first = jnp.full((np_, d), ek.shape[0], jnp.int32).at[pg.senders, recv_dev].min(
      jnp.where(pg.edge_mask, ek, ek.shape[0]))
  rep = pg.edge_mask & (first[pg.senders, recv_dev] == ek) & tmask[pg.senders, recv_dev]
  c_t0 = tstart[pg.senders, recv_dev]
  c_t1 = last_use[pg.senders, recv_dev]
  copy_b = sized(out_b[pg.senders], c_t0, c_t1, rep)

  # Memory events (+bytes at alloc, -bytes at free); peaks are taken in `peak_memory`.
  ev_dev = jnp.concatenate([place, place, recv_dev, place, recv_dev])
  ev_time = jnp.concatenate([out_end, finish, c_t1, start, c_t0])
  ev_delta = jnp.concatenate([-own_out, -own_tmp, -copy_b, own_out + own_tmp, copy_b])
  ev_time = jnp.where(ev_delta != 0, ev_time, 0.0)  # weightless events: keep times finite
  # Resident parameter bytes per op, summed per device by `simulate_padded`
  # (`memory_peaks.resident_base`) outside this function: summed here, inside the vmapped
  # loop's program, XLA:CPU added them in another order in sub-batches than in one batch
  # (peaks differed in the last bits); there the sum is the same for every block size.
  resident = jnp.where(real, pg.param_bytes.astype(dt), 0.0)
  return makespan, start, finish, Events(time=ev_time, dev=ev_dev, delta=ev_delta,
                                          base=(resident, place))
