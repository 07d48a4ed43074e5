"""Received copies over estimated time (go_jax/policies/load_copies.py): the profile the greedy
decode keeps equals a direct count of every copy's bins, each (sender, device) copy counted once
from its sender's finish through its latest consumer's; the decoder's option changes nothing
where memory is ample and masks a device its queued inputs would overflow."""

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from go_jax.policies import features, go, load, load_copies as lc
from simulator import CompGraph, Topology

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py


def test_profile_counts_each_copy_once_from_sender_to_latest_consumer():
  rng = np.random.default_rng(0)
  n, d = 30, 3
  s, r = [], []
  for i in range(n - 1):
    for j in rng.choice(np.arange(i + 1, n), size=min(3, n - 1 - i), replace=False):
      s.append(i)
      r.append(int(j))
  s, r = np.array(s), np.array(r)
  out = rng.uniform(0.01, 0.1, n).astype(np.float32)
  place = rng.integers(0, d, n)
  # finish times along the order (each node after its inputs), within the horizon
  finish = np.sort(rng.uniform(0.0, 0.9 * lc.HORIZON, n)).astype(np.float32)
  probs = np.eye(d, dtype=np.float32)[place]
  e_out = jnp.asarray(out[s])
  cs = lc.init_copies(n, d)
  for cur in range(n):
    eft = jnp.full(d, finish[cur])
    add = lc.new_copies(cs, jnp.asarray(s), jnp.asarray(r), e_out, cur, jnp.asarray(finish),
                        jnp.asarray(probs), eft)
    cs = lc.commit(cs, jnp.asarray(s), jnp.asarray(r), e_out, cur, add,
                   jnp.asarray(probs[cur]), eft)
  bins = lambda t: int(np.clip(np.floor(t * lc.BINS / lc.HORIZON), 0, lc.BINS - 1))
  ref = np.zeros((lc.BINS, d), np.float32)
  for u in range(n):
    for dev in range(d):
      cons = r[(s == u) & (place[r] == dev)]
      if dev == place[u] or cons.size == 0:
        continue
      ref[bins(finish[u]):max(bins(finish[c]) for c in cons) + 1, dev] += out[u]
  assert ref.max() > 0  # copies exist: a real test
  np.testing.assert_allclose(np.asarray(cs.prof), ref, atol=1e-5)
  np.testing.assert_allclose(np.asarray(lc.peak(cs, jnp.zeros_like(cs.prof))), ref.max(0),
                             atol=1e-5)


def fan_in(k=6, size=1.0):
  """k sources feed one join: the join's device receives the other devices' outputs."""
  return CompGraph(cost=np.r_[np.linspace(1.0, 1.5, k), 1.0], senders=np.arange(k),
                   receivers=np.full(k, k), out_bytes=np.r_[np.full(k, size), 0.1],
                   param_bytes=np.zeros(k + 1), name="fan_in")


def _greedy(g, topo, copies):
  f = features.graph_features(g, topo, max_devices=4)
  dec = load.LoadDecoder(8, 1, time=True, time_init=50.0, time_copies=copies)
  mask, dev_mask = jnp.asarray(f.node_mask), jnp.asarray(f.device_mask)
  np_ = f.node_mask.size
  args = (jnp.zeros((np_, 8)), jnp.zeros((4, 8)), jnp.zeros(4), f.node_load, f.node_end,
          f.device_capacity, dev_mask, f.topo_order, f.topo_position, mask, f.senders,
          f.receivers, jnp.asarray(f.edge_mask))
  kw = dict(leader=f.node_leader, timing=go.timing_inputs(f, mask, dev_mask))
  params = flax.core.unfreeze(dec.init(jax.random.PRNGKey(0), *args, **kw)["params"])
  for name in ("w2", "w_bias", "time_w"):
    params[name] = jnp.zeros_like(params[name])
  out = dec.apply({"params": params}, *args, mode="greedy", **kw)
  return np.asarray(out)[:g.num_nodes], f


def test_decoder_option_is_neutral_with_room_and_masks_a_queue_that_overflows():
  g = fan_in()
  roomy = Topology.uniform(3, bandwidth=4.0, latency=0.05, mem_capacity=1e3)
  off, _ = _greedy(g, roomy, False)
  on, _ = _greedy(g, roomy, True)
  np.testing.assert_allclose(on, off, rtol=1e-6, atol=1e-6)  # nothing near the capacity
  # Capacity 2.5 bytes: the join's device holds the copies of the sources placed elsewhere
  # (each 1 byte) from their finish to the join's, plus its own sources' outputs.
  tight = Topology.uniform(3, bandwidth=4.0, latency=0.05, mem_capacity=2.5)
  off, f = _greedy(g, tight, False)
  on, _ = _greedy(g, tight, True)
  src = off[:-1].argmax(-1)
  assert len(set(src.tolist())) == 3  # the sources spread over the three devices
  np.testing.assert_array_equal(on[:-1].argmax(-1), src)  # the sources decide alike
  # Copies each device would receive if it ran the join: the sources elsewhere.
  copies = np.array([np.sum(src != dev) for dev in range(3)], np.float32)
  share = copies / float(g.out_bytes.sum() + g.param_bytes.sum())
  over = np.maximum(share / np.asarray(f.device_capacity)[:3] - 0.9, 0.0)
  assert over.min() > 0  # every device's queue overflows with the margin
  drop = off[-1, :3] - on[-1, :3]
  np.testing.assert_allclose(drop, load.GREEDY_BARRIER * over, rtol=1e-3)
