"""The load state's time term (go_jax/policies/load_time.py): with only that term, the greedy
decode IS the list schedule in topological order that puts each node where it finishes first,
in every decode path; the term is invariant to padding."""

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from go_jax import policies
from go_jax.policies import features, go, load, load_state, load_time
from go_jax.training import ppo
from simulator import CompGraph, Topology

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

BANDWIDTH, LATENCY, OVERHEAD = 4.0, 0.05, 0.02


def random_dag(n=40, seed=0):
  """Each node feeds 1-2 later nodes; costs and sizes spread so that ties are unlikely."""
  rng = np.random.default_rng(seed)
  s, r = [], []
  for i in range(n - 1):
    for j in rng.choice(np.arange(i + 1, n), size=min(2, n - 1 - i), replace=False):
      if rng.random() < 0.7 or j == i + 1:
        s.append(i)
        r.append(int(j))
  return CompGraph(cost=rng.uniform(0.5, 2.0, n), senders=np.array(s), receivers=np.array(r),
                   out_bytes=rng.uniform(0.5, 8.0, n), param_bytes=rng.uniform(0, 1, n),
                   name="dag")


def list_schedule(g: CompGraph, topo: Topology, order=None) -> np.ndarray:
  """The reference: nodes in the graph's topological order (or `order`), each on the device where it
  finishes first (ties: the lower device), a device running its nodes in that order without
  insertion; a copy between devices takes the sender's output over the mean link bandwidth plus
  the latency, every time in shares of the graph's serial cost (load_time.py)."""
  d, total = topo.num_devices, g.cost.sum()
  lat, per_byte = topo.link_tables()
  send = g.out_bytes * per_byte.sum() / (d * (d - 1)) / total
  latency = (lat.sum(0) + lat.sum(1)) / (2 * (d - 1)) / total
  overhead = np.asarray(topo.overhead) / total
  speed = np.asarray(topo.speed) / np.max(topo.speed)
  ptr, pred = g.predecessor_csr()
  avail, finish = np.zeros(d), np.zeros(g.num_nodes)
  place = np.zeros(g.num_nodes, np.int64)
  for i in g.topological_order() if order is None else order:
    ready = np.zeros(d)
    for p in pred[ptr[i]:ptr[i + 1]]:
      ready = np.maximum(ready, finish[p] + np.where(np.arange(d) == place[p], 0.0,
                                                     send[p] + latency))
    eft = np.maximum(avail, ready) + g.cost[i] / total / speed + overhead
    place[i] = int(np.argmin(eft))
    finish[i] = avail[place[i]] = eft[place[i]]
  return place


def _decode(g, topo, block, exact, mode="greedy", placement=None, pad_nodes=None,
            order="topological"):
  """The decoder with zero node/device scores and load term and a large time weight: its
  placement logits, (Np, Dmax)."""
  f = features.graph_features(g, topo, max_devices=4, num_nodes=pad_nodes, order=order)
  dec = load.LoadDecoder(8, block, guard=exact, time=True, time_init=50.0)
  mask, dev_mask = jnp.asarray(f.node_mask), jnp.asarray(f.device_mask)
  np_ = f.node_mask.size
  args = (jnp.zeros((np_, 8)), jnp.zeros((4, 8)), jnp.zeros(4), f.node_load, f.node_end,
          f.device_capacity, dev_mask, f.topo_order, f.topo_position, mask, f.senders,
          f.receivers, jnp.asarray(f.edge_mask))
  kw = dict(leader=f.node_leader if exact else None, timing=go.timing_inputs(f, mask, dev_mask))
  params = dec.init(jax.random.PRNGKey(0), *args, **kw)["params"]
  # only the time term: the load MLP's output and the time weight's query part at zero
  params = flax.core.unfreeze(params)
  for name in ("w2", "w_bias", "time_w"):
    params[name] = jnp.zeros_like(params[name])
  if placement is not None:
    placement = jnp.asarray(np.pad(placement, (0, np_ - g.num_nodes)))
  out = dec.apply({"params": params}, *args, mode=mode, placement=placement, **kw)
  return np.asarray(out)[:g.num_nodes]


@pytest.mark.parametrize("block,exact", [(1, False), (4, True)])
def test_greedy_time_decode_is_the_topological_list_schedule(block, exact):
  """Block-level picks with one node per block, and the exact decode's node-by-node picks
  within blocks of 4 (memory unbounded: no barrier), give the reference's placement."""
  g = random_dag()
  topo = Topology.uniform(3, bandwidth=BANDWIDTH, latency=LATENCY, overhead=OVERHEAD)
  ref = list_schedule(g, topo)
  assert len(set(ref.tolist())) == 3  # the schedule uses every device: a real test
  got = _decode(g, topo, block, exact).argmax(-1)
  np.testing.assert_array_equal(got, ref)


def test_rank_decode_order_gives_the_list_schedule_in_heft_order():
  """With `decode_order` "rank" the decoder walks HEFT's upward-rank order, a topological order
  other than Kahn's here, and the time term's greedy decode is the list schedule in that order."""
  g = random_dag(seed=2)
  topo = Topology.uniform(3, bandwidth=BANDWIDTH, latency=LATENCY, overhead=OVERHEAD)
  order = features.decode_order(g, topo, "rank")
  pos = np.empty(g.num_nodes, np.int64)
  pos[order] = np.arange(g.num_nodes)
  assert np.all(pos[g.senders] < pos[g.receivers])  # a topological order
  assert not np.array_equal(order, g.topological_order())  # and not Kahn's: a real test
  ref = list_schedule(g, topo, order)
  assert not np.array_equal(ref, list_schedule(g, topo))  # the order changes the schedule
  np.testing.assert_array_equal(_decode(g, topo, 1, False, order="rank").argmax(-1), ref)
  f = features.graph_features(g, topo, max_devices=4, order="rank")
  np.testing.assert_array_equal(f.topo_order[:g.num_nodes], order)
  np.testing.assert_array_equal(f.node_feats[order, features.NODE_FEATURES.index("position")],
                                np.arange(g.num_nodes, dtype=np.float32) / g.num_nodes)
  with pytest.raises(ValueError, match="decode_order"):
    features.graph_features(g, topo, max_devices=4, order="random")
  cfg = policies.default_config()
  cfg.decode_order = "rank"  # a checkpoint's config builds its features in its order
  built = ppo.policy_from_config(cfg).features(g, topo, 64, 128)
  np.testing.assert_array_equal(built.topo_order[:g.num_nodes], order)
  cfg.decode_order = "bfs"
  with pytest.raises(ValueError, match="decode_order"):
    policies.make_policy(cfg)


def test_forcing_the_schedule_gives_the_same_logits_and_padding_changes_nothing():
  """Forced along the greedy schedule (imitation's view), the state and so the logits are the
  greedy decode's; a larger node bucket changes no real node's logits."""
  g = random_dag(seed=1)
  topo = Topology.uniform(3, bandwidth=BANDWIDTH, latency=LATENCY, overhead=OVERHEAD)
  greedy = _decode(g, topo, 1, False)
  forced = _decode(g, topo, 1, False, mode="forced", placement=greedy.argmax(-1))
  np.testing.assert_allclose(forced, greedy, rtol=1e-5, atol=1e-5)
  padded = _decode(g, topo, 1, False, pad_nodes=2 * features.bucket(g.num_nodes))
  np.testing.assert_allclose(padded, greedy, rtol=1e-5, atol=1e-5)


def test_expected_state_is_the_mean_field_of_the_schedule():
  """commit_time with a mixed distribution: each device's end moves to the node's EFT there
  with the node's probability, and the node's finish is the EFT's expectation."""
  g = CompGraph(cost=np.array([2.0, 1.0, 1.0]), senders=np.array([0, 0]),
                receivers=np.array([1, 2]), out_bytes=np.zeros(3), param_bytes=np.zeros(3),
                name="fork")
  topo = Topology.uniform(2, bandwidth=1.0)
  f = features.graph_features(g, topo, max_devices=2)
  lay = load_state.layout(f.node_load, f.node_end, f.topo_order, f.topo_position, f.node_mask,
                          f.senders, f.receivers, f.edge_mask, 4)
  mask, dev_mask = jnp.asarray(f.node_mask), jnp.asarray(f.device_mask)
  send, speed, overhead, latency = go.timing_inputs(f, mask, dev_mask)
  tl = load_time.time_layout(lay, f.node_load, send, f.node_mask, f.topo_order, f.senders,
                             f.edge_mask, speed, overhead, latency, f.device_mask)
  ts = load_time.init_time(1, 4, 2)
  p = jnp.array([[1.0, 0.0], [0.5, 0.5], [0.25, 0.75], [0.5, 0.5]])  # last row: padding
  ready = load_time.ready_known(ts, tl, lay, jnp.zeros((4, 2)), 0)
  ts = load_time.commit_time(ts, tl, 0, p, ready)
  # Shares of the serial cost 4. Op 0 ends at 0.5 on device 0: A = (0.5, 0). Op 1 (0.25) is
  # ready at 0.5 everywhere (no bytes to copy) and ends at 0.75 on either device: F = 0.75,
  # A = (0.5 + 0.5 x 0.25, 0.5 x 0.75) = (0.625, 0.375). Op 2 ends at 0.875 on device 0 and
  # 0.75 on device 1: F = 0.25 x 0.875 + 0.75 x 0.75, A = (0.625 + 0.25 x 0.25,
  # 0.375 + 0.75 x 0.375). The padding slot moves nothing.
  np.testing.assert_allclose(ts.finish[:3], [0.5, 0.75, 0.78125], rtol=1e-6)
  np.testing.assert_allclose(ts.avail, [0.6875, 0.65625], rtol=1e-6)


def test_policy_with_the_time_term_runs_and_needs_no_new_features():
  g = random_dag(n=20, seed=2)
  topo = Topology.uniform(2, bandwidth=BANDWIDTH, latency=LATENCY)
  cfg = policies.variant_config("go")
  cfg.update(hidden=16, gnn_layers=1, attention_layers=1, heads=2, segment_len=8, load_block=4,
             load_time=True)
  policy = policies.make_policy(cfg)
  feats = features.graph_features(g, topo, max_devices=8)
  # one compiled program (initialisation with its own forward pass), not op by op
  out, params = jax.jit(policy.init_with_output)(jax.random.PRNGKey(0), feats)
  assert "time_b" in params["params"]["load"]
  assert np.all(np.isfinite(np.asarray(out.placement_logits)[:20, :2]))
  assert np.all(np.isfinite(np.asarray(out.greedy_placement_logits)[:20, :2]))
