"""The policy's device-load state (go_jax/policies/load.py): its memory estimate follows rule 7,
its barrier steers placement off a full device, and padding changes nothing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from go_jax import methods, policies
from go_jax.policies import features, load
from simulator import CompGraph, Topology, simulate, sources

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py


def chain_graph(n=8, seed=0):
  rng = np.random.default_rng(seed)
  s = np.arange(n - 1)
  return CompGraph(cost=rng.uniform(1, 2, n), senders=s, receivers=s + 1,
                   out_bytes=rng.uniform(1, 3, n), param_bytes=rng.uniform(0, 4, n),
                   name="chain")


def estimate(graph, topo, placement, block):
  f = features.graph_features(graph, topo, max_devices=8)
  est = load.estimated_peak(jnp.asarray(np.pad(placement, (0, f.node_mask.size - len(
      placement)))), f.node_load, f.node_end, f.topo_order, f.topo_position, f.node_mask,
                            f.senders, f.receivers, f.edge_mask, topo.num_devices, block)
  total = graph.param_bytes.sum() + graph.out_bytes.sum()
  return np.asarray(est) * total


@pytest.mark.parametrize("block", [1, 3])
def test_estimate_equals_the_simulator_peak_where_order_is_the_schedule(block):
  """On a chain the topological order IS the schedule: with one node per block the estimate is
  rule 7's peak exactly; with larger blocks it can only overstate it (a block's outputs count
  together)."""
  g = chain_graph()
  topo = Topology.uniform(2, bandwidth=1.0, latency=0.0)
  place = np.array([0, 0, 0, 1, 1, 0, 1, 1])
  res = simulate(g, topo, place, -np.arange(8.0))
  peak = np.asarray(res.peak_memory[0])
  est = estimate(g, topo, place, block)
  if block == 1:
    np.testing.assert_allclose(est, peak, rtol=1e-5)
  else:
    assert np.all(est >= peak * (1 - 1e-5))


def test_estimate_matches_the_baselines_peaks_on_a_profiled_graph():
  g = sources.load_graph("pipedream:vgg16")
  topo = Topology.uniform(4, bandwidth=25e9, latency=1e-5, mem_capacity=np.inf)
  sol = methods.solve("heft", g, topo)
  est = estimate(g, topo, sol.placement, 1)
  np.testing.assert_allclose(est, sol.peak_memory, rtol=0.02)


def _policy_and_feats(graph, topo, hidden=16, **overrides):
  cfg = policies.variant_config("go")
  cfg.update(hidden=hidden, gnn_layers=1, attention_layers=1, heads=2, segment_len=8,
             load_block=2, **overrides)
  policy = policies.make_policy(cfg)
  feats = features.graph_features(graph, topo, max_devices=8)
  return policy, feats


def _params_chain():
  """A 12-op chain with parameters of 1 each on 2 devices holding 7, and the decoder's
  arguments with zero node/device scores and device biases favouring device 0 by 8 logits."""
  n = 12
  s = np.arange(n - 1)
  g = CompGraph(cost=np.ones(n), senders=s, receivers=s + 1, out_bytes=np.full(n, 1e-3),
                param_bytes=np.ones(n), name="params_chain")
  topo = Topology.uniform(2, bandwidth=1.0, latency=0.0, mem_capacity=7.0)
  f = features.graph_features(g, topo, max_devices=2)
  args = (jnp.zeros((f.node_mask.size, 4)), jnp.zeros((2, 4)), jnp.array([8.0, 0.0]),
          f.node_load, f.node_end, f.device_capacity, f.device_mask, f.topo_order,
          f.topo_position, f.node_mask, f.senders, f.receivers, f.edge_mask)
  return g, f, args


@pytest.mark.parametrize("guard", [True, False])
def test_barrier_moves_nodes_off_a_device_that_would_overflow(guard):
  """Parameters of 1 each on 2 devices that hold 7, and device biases favouring device 0 by 8
  logits: without the barrier the whole chain goes to device 0 (12 > 7); with it the expected
  parameters per device stay about within capacity."""
  g, f, args = _params_chain()
  n = g.num_nodes
  dec = load.LoadDecoder(hidden=4, block=1, guard=guard)
  params = dec.init(jax.random.PRNGKey(0), *args)
  probs = jax.nn.softmax(dec.apply(params, *args)[:n], -1)
  params_per_device = np.asarray(probs.sum(0)) * g.param_bytes[0]
  if guard:
    assert params_per_device.max() <= 7.0 * 1.1  # within the 8-logit preference / 100 per unit
    assert probs[0, 0] > 0.99 and probs[-1, 1] > 0.9  # head on device 0, tail moved off it
  else:
    assert params_per_device[0] > 11.9


def test_padding_and_the_bucket_change_nothing():
  g = sources.load_graph("series_parallel:n=40,seed=1")
  topo = Topology.uniform(4, bandwidth=1e9, latency=1e-6, mem_capacity=np.inf)
  policy, feats = _policy_and_feats(g, topo)
  # compiled, one program per bucket (op by op took longer): the initialisation's own forward
  # pass gives the logits at the natural bucket
  out, params = jax.jit(policy.init_with_output)(jax.random.PRNGKey(1), feats)
  big = features.graph_features(g, topo, num_nodes=128, num_edges=256, max_devices=8)
  a = out.placement_logits[:40]
  b = jax.jit(policy.apply)(params, big).placement_logits[:40]
  np.testing.assert_allclose(a, b, atol=1e-5)


def test_load_state_needs_its_features():
  g = chain_graph()
  topo = Topology.uniform(2, bandwidth=1.0, latency=0.0)
  policy, feats = _policy_and_feats(g, topo)
  # traced only (the check is the policy's Python code): nothing compiles or runs
  params = jax.eval_shape(policy.init, jax.random.PRNGKey(0), feats)
  with pytest.raises(ValueError, match="node_load"):
    jax.eval_shape(policy.apply, params, feats.replace(node_load=None))


def test_design_worked_example():
  """docs/design.md's example: a -> b -> c, parameters 2 and outputs 1 byte each, two devices
  of 5 bytes, a and b certainly on device 0: c's device-0 logit drops by 60 (overflow 0.6 at
  the initial scale 100) and device 1 gets no barrier."""
  g = CompGraph(cost=np.ones(3), senders=[0, 1], receivers=[1, 2], out_bytes=np.ones(3),
                param_bytes=np.full(3, 2.0), name="abc")
  topo = Topology.uniform(2, bandwidth=1.0, latency=0.0, mem_capacity=5.0)
  f = features.graph_features(g, topo, max_devices=2)
  dec = load.LoadDecoder(hidden=2, block=1)
  q = jnp.zeros((f.node_mask.size, 2)).at[0].set([300.0, 0.0]).at[1].set([300.0, 0.0])
  args = (q, jnp.eye(2), jnp.zeros(2), f.node_load, f.node_end, f.device_capacity,
          f.device_mask, f.topo_order, f.topo_position, f.node_mask, f.senders, f.receivers,
          f.edge_mask)
  params = dec.init(jax.random.PRNGKey(0), *args)
  params = {"params": dict(params["params"], w2=jnp.zeros((2, 2)), w_bias=jnp.zeros(2))}
  logits = dec.apply(params, *args)
  assert logits[0, 0] - logits[0, 1] > 100 and logits[1, 0] - logits[1, 1] > 100
  np.testing.assert_allclose(logits[2], [-60.0, 0.0], atol=1e-3)


def test_greedy_decode_packs_against_the_committed_load_and_forcing_reproduces_it():
  """The greedy mode's state counts each node on its argmax device: with parameters of 1 on
  devices holding 7 and a preference for device 0, the greedy decode fills device 0 up to its
  capacity and puts the rest on device 1 (the expected mode spreads every node). Teacher forcing
  with the greedy placement sees the same state."""
  g, f, args = _params_chain()
  n = g.num_nodes
  dec = load.LoadDecoder(hidden=4, block=1)
  params = dec.init(jax.random.PRNGKey(0), *args)
  greedy = dec.apply(params, *args, mode="greedy")
  place = np.asarray(jnp.argmax(greedy[:n], -1))
  # 6 parameters and the live outputs fit in 7, a 7th would overflow by 0.03%
  assert np.sum(place == 0) == 6 and np.all(place[:6] == 0)
  forced = dec.apply(params, *args, mode="forced", placement=jnp.asarray(
      np.pad(place, (0, f.node_mask.size - n))))
  # the same state, so the same logits until the barrier acts (the greedy decode's is steeper)
  np.testing.assert_allclose(forced[:6], greedy[:6], atol=1e-5)
  assert np.all(np.asarray(greedy[6:n, 0]) < np.asarray(forced[6:n, 0]))
  with pytest.raises(ValueError, match="forced"):
    dec.apply(params, *args, mode="forced")
  with pytest.raises(ValueError, match="unknown mode"):
    dec.apply(params, *args, mode="nope")


def test_greedy_block_commits_node_by_node_whatever_the_training_block():
  """With blocks of 12 the whole chain is one block: every node sees the empty start state, so
  the greedy decode piles all 12 parameters onto device 0 (capacity 7). `greedy_block=1`
  decodes the same parameters node by node and stops at 6, as block=1 does; the expected
  logits (sampling, PPO) keep the training block."""
  g, f, args = _params_chain()
  n = g.num_nodes
  wide = load.LoadDecoder(hidden=4, block=12)
  params = wide.init(jax.random.PRNGKey(0), *args)
  piled = np.asarray(jnp.argmax(wide.apply(params, *args, mode="greedy")[:n], -1))
  assert np.all(piled == 0)
  fixed = load.LoadDecoder(hidden=4, block=12, greedy_block=1)
  place = np.asarray(jnp.argmax(fixed.apply(params, *args, mode="greedy")[:n], -1))
  assert np.sum(place == 0) == 6 and np.all(place[:6] == 0)
  np.testing.assert_array_equal(
      fixed.apply(params, *args, mode="greedy"),
      load.LoadDecoder(hidden=4, block=1).apply(params, *args, mode="greedy"))
  np.testing.assert_array_equal(fixed.apply(params, *args), wide.apply(params, *args))
  with pytest.raises(ValueError, match="greedy_block"):
    load.LoadDecoder(hidden=4, greedy_block=-1).apply(params, *args, mode="greedy")


def _leader_args(args, f):
  return dict(leader=f.node_leader)


def test_exact_greedy_decode_goes_node_by_node_within_a_block():
  """The exact decode (colocation leaders given): the greedy block's scores come from the state
  at the block's start, but its barrier and commit go node by node, so the 12-op chain in ONE
  block of 12 stops at 6 parameters on device 0, as block=1 does; the expected (sampling)
  logits still see the block's start state."""
  g, f, args = _params_chain()
  n = g.num_nodes
  wide = load.LoadDecoder(hidden=4, block=12)
  params = wide.init(jax.random.PRNGKey(0), *args)
  place = np.asarray(jnp.argmax(wide.apply(params, *args, mode="greedy",
                                           leader=f.node_leader)[:n], -1))
  assert np.sum(place == 0) == 6 and np.all(place[:6] == 0)
  np.testing.assert_allclose(wide.apply(params, *args, leader=f.node_leader)[:n],
                             wide.apply(params, *args)[:n], atol=1e-5)


def _fwd_bwd_graph():
  """A 4-layer forward chain f0..f3 and its backward chain b3..b0, b_i colocated with f_i (as
  PipeDream's training graphs are): f_i's output lives until b_i consumes it."""
  n = 8  # f0..f3 = 0..3, b3..b0 = 4..7 (b_i = 7 - i)
  senders = [0, 1, 2, 3, 4, 5, 6, 0, 1, 2]
  receivers = [1, 2, 3, 4, 5, 6, 7, 7, 6, 5]
  coloc = np.array([0, 1, 2, 3, 3, 2, 1, 0])
  return CompGraph(cost=np.ones(n), senders=senders, receivers=receivers,
                   out_bytes=np.array([1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5]),
                   param_bytes=np.array([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]),
                   colocation=coloc, name="fwd_bwd")


def test_colocation_group_is_decided_and_counted_at_its_leader():
  """Every member takes its leader's logits (rule 1 puts the group where its root goes), in
  every mode; with a root-consistent placement the exact estimate counts the same bytes as the
  old one, and the exact greedy action is memory-feasible in the simulator."""
  g = _fwd_bwd_graph()
  topo = Topology.uniform(2, bandwidth=1.0, latency=0.0, mem_capacity=6.0)
  f = features.graph_features(g, topo, max_devices=2)
  np.testing.assert_array_equal(f.node_leader[:8], f.topo_position[[0, 1, 2, 3, 3, 2, 1, 0]])
  rng = np.random.default_rng(0)
  args = (jnp.asarray(rng.normal(size=(f.node_mask.size, 4)), jnp.float32), jnp.eye(2, 4),
          jnp.array([3.0, 0.0]), f.node_load, f.node_end, f.device_capacity, f.device_mask,
          f.topo_order, f.topo_position, f.node_mask, f.senders, f.receivers, f.edge_mask)
  dec = load.LoadDecoder(hidden=4, block=2)
  params = dec.init(jax.random.PRNGKey(0), *args)
  root = g.colocation_root()
  for mode in ("expected", "greedy"):
    logits = np.asarray(dec.apply(params, *args, mode=mode, leader=f.node_leader))[:8]
    np.testing.assert_allclose(logits, logits[root], atol=1e-6)
  place = np.argmax(np.asarray(dec.apply(params, *args, mode="greedy",
                                         leader=f.node_leader))[:8], -1)
  for p in (place, np.array([0, 0, 1, 1, 1, 1, 0, 0])):
    est = [load.estimated_peak(jnp.asarray(np.pad(p, (0, f.node_mask.size - 8))), f.node_load,
                               f.node_end, f.topo_order, f.topo_position, f.node_mask,
                               f.senders, f.receivers, f.edge_mask, 2, 1, leader=lead)
           for lead in (None, f.node_leader)]
    np.testing.assert_allclose(est[0], est[1], atol=1e-6)
  res = simulate(g, topo, place, -np.asarray(f.topo_position[:8], np.float64))
  assert not bool(res.oom)


def _comm_chain(n=12):
  """A chain on 2 devices with room for all of it, and decoder arguments where node 0 prefers
  device 0 by 5 logits and every node prefers device 1 by 0.5 (device bias)."""
  s = np.arange(n - 1)
  g = CompGraph(cost=np.ones(n), senders=s, receivers=s + 1, out_bytes=np.ones(n),
                param_bytes=np.ones(n), name="comm_chain")
  topo = Topology.uniform(2, bandwidth=1.0, latency=0.0, mem_capacity=1e9)
  f = features.graph_features(g, topo, max_devices=2)
  q = jnp.zeros((f.node_mask.size, 4)).at[0, 0].set(10.0)
  k = jnp.zeros((2, 4)).at[0, 0].set(1.0)
  args = (q, k, jnp.array([0.0, 0.5]), f.node_load, f.node_end, f.device_capacity,
          f.device_mask, f.topo_order, f.topo_position, f.node_mask, f.senders, f.receivers,
          f.edge_mask)
  return g, f, args


def test_copy_term_lowers_the_devices_away_from_a_nodes_inputs():
  """Forced decode with blocks of 2: a node whose input sits in an earlier block loses
  `comm_init` (w_i at zero queries) on every device but its input's; a node whose input is in
  its own block (not yet placed) loses nothing."""
  g, f, args = _comm_chain()
  n = g.num_nodes
  args = (jnp.zeros_like(args[0]),) + args[1:]
  place = jnp.asarray(np.pad([0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0, 0], (0, f.node_mask.size - n)))
  off = load.LoadDecoder(hidden=4, block=2, guard=False)
  on = load.LoadDecoder(hidden=4, block=2, guard=False, comm=True, comm_init=1.5)
  p_on = on.init(jax.random.PRNGKey(0), *args)
  p_off = {"params": {k: v for k, v in p_on["params"].items() if not k.startswith("comm")}}
  diff = np.asarray(on.apply(p_on, *args, mode="forced", placement=place)
                    - off.apply(p_off, *args, mode="forced", placement=place))[:n]
  want = np.zeros((n, 2))
  for i in range(2, n, 2):  # first node of each block: its input is the previous block's last
    want[i] = -1.5 * (1.0 - np.eye(2)[int(place[i - 1])])
  np.testing.assert_allclose(diff, want, atol=1e-5)


def test_greedy_copy_term_keeps_a_chain_with_its_input():
  """One block of 12: without the copy term the greedy chain follows the 0.5-logit device bias
  after node 0 (0 then 1, 1, ...); with it (weight 1 per input away) each pick sees the earlier
  pick it reads from and the chain stays on device 0. The expected logits of a single block
  see no placed input, so they equal the term-free ones."""
  g, f, args = _comm_chain()
  n = g.num_nodes
  off = load.LoadDecoder(hidden=4, block=12)
  on = load.LoadDecoder(hidden=4, block=12, comm=True, comm_init=1.0)
  p_on = on.init(jax.random.PRNGKey(0), *args)
  p_off = {"params": {k: v for k, v in p_on["params"].items() if not k.startswith("comm")}}
  greedy = lambda dec, p: np.asarray(jnp.argmax(dec.apply(
      p, *args, mode="greedy", leader=f.node_leader)[:n], -1))
  assert list(greedy(off, p_off)) == [0] + [1] * (n - 1)
  assert list(greedy(on, p_on)) == [0] * n
  np.testing.assert_allclose(on.apply(p_on, *args, leader=f.node_leader)[:n],
                             off.apply(p_off, *args, leader=f.node_leader)[:n], atol=1e-5)


def test_group_copies_charge_a_groups_outgoing_copy_to_the_decided_device():
  """Groups A = {a_f, a_b} and B = {b_f, b_b} in the order a_f, b_f, b_b, a_b, with b_b -> a_b
  the only edge between them that moves bytes. A is decided first (device 0). Placing B on
  device 1 sends b_b's output to device 0, where A's parameters already are. Without group
  copies the decoder counts that copy only when a_b's block comes, after B's decision, so B's
  logit of device 1 sees nothing of it. With them, B's greedy logit of device 1 drops by the
  greedy barrier times device 0's overflow, exactly what the final estimate of the placement
  (0, 1, 1, 0) shows; the forced (imitation) logits, whose barrier is the learned scale times
  the overflow beyond the capacity itself, drop by that."""
  g = CompGraph(cost=np.ones(4), senders=[0, 1, 2], receivers=[3, 2, 3],
                out_bytes=np.array([1.0, 0.01, 1.0, 0.1]),
                param_bytes=np.array([4.0, 0.0, 0.0, 0.0]),
                colocation=np.array([0, 1, 1, 0]), name="group_copies")
  topo = Topology.uniform(2, bandwidth=1.0, latency=0.0, mem_capacity=6.0)
  f = features.graph_features(g, topo, max_devices=2)
  q = jnp.zeros((f.node_mask.size, 4)).at[0, 0].set(10.0).at[1, 1].set(10.0)
  args = (q, jnp.eye(2, 4), jnp.zeros(2), f.node_load, f.node_end, f.device_capacity,
          f.device_mask, f.topo_order, f.topo_position, f.node_mask, f.senders, f.receivers,
          f.edge_mask)
  off = load.LoadDecoder(hidden=4, block=1)
  on = load.LoadDecoder(hidden=4, block=1, group_copies=True)
  params = off.init(jax.random.PRNGKey(0), *args)
  place = jnp.asarray(np.pad([0, 1, 1, 0], (0, f.node_mask.size - 4)))
  est = load.estimated_peak(place, f.node_load, f.node_end, f.topo_order, f.topo_position,
                            f.node_mask, f.senders, f.receivers, f.edge_mask, 2, 1,
                            leader=f.node_leader)
  over = float(est[0] / f.device_capacity[0]) - 0.9  # greedy margin 0.1
  assert over > 0.01  # the copy overflows device 0 (and A alone does not: 5.1 of 6)
  greedy = {name: np.asarray(dec.apply(params, *args, mode="greedy", leader=f.node_leader))
            for name, dec in (("off", off), ("on", on))}
  assert np.argmax(greedy["off"][0]) == 0 and np.argmax(greedy["off"][1]) == 1
  np.testing.assert_allclose(greedy["off"][0], greedy["on"][0], atol=1e-6)
  drop = greedy["off"][1] - greedy["on"][1]
  np.testing.assert_allclose(drop[1], load.GREEDY_BARRIER * over, rtol=1e-3)
  scale = float(jax.nn.softplus(params["params"]["guard_scale"]))
  forced = [np.asarray(dec.apply(params, *args, mode="forced", placement=place,
                                 leader=f.node_leader)) for dec in (off, on)]
  over_exp = float(est[0] / f.device_capacity[0]) - 1.0  # the forced logits' barrier limit
  np.testing.assert_allclose((forced[0] - forced[1])[1, 1],
                             scale * max(over_exp, 0.0), rtol=1e-3, atol=1e-4)


def test_copy_to_receiver_frees_a_copy_after_its_own_receiver():
  """a -> b, a -> c, b -> x, c -> x with a and c on device 0, b and x on device 1, order
  a, b, c, x, and c long enough that the topological order is the schedule. a's copy on
  device 1 is freed when b, its only consumer there, finishes (rule 7): 5 + 1 bytes at b. The
  default estimate keeps it until a's last consumer anywhere (c), so device 1 also holds it
  beside c's copy: 7. With `copy_to_receiver` the estimate is the simulator's peak."""
  g = CompGraph(cost=np.array([1.0, 1.0, 10.0, 1.0]), senders=[0, 0, 1, 2],
                receivers=[1, 2, 3, 3], out_bytes=np.array([5.0, 1.0, 1.0, 1.0]),
                param_bytes=np.zeros(4), name="copy_to_receiver")
  topo = Topology.uniform(2, bandwidth=1e3, latency=0.0)
  place = np.array([0, 1, 0, 1])
  sim = np.asarray(simulate(g, topo, place, -np.arange(4.0)).peak_memory[0])
  f = features.graph_features(g, topo, max_devices=2)
  total = g.param_bytes.sum() + g.out_bytes.sum()
  est = {r: np.asarray(load.estimated_peak(
      jnp.asarray(np.pad(place, (0, f.node_mask.size - 4))), f.node_load, f.node_end,
      f.topo_order, f.topo_position, f.node_mask, f.senders, f.receivers, f.edge_mask, 2, 1,
      copy_to_receiver=r)) * total for r in (False, True)}
  np.testing.assert_allclose(sim[1], 6.0, rtol=1e-5)
  np.testing.assert_allclose(est[True], sim, rtol=1e-5)
  np.testing.assert_allclose(est[False][1], 7.0, rtol=1e-5)


@pytest.mark.parametrize("exact", [False, True])
def test_padded_devices_stay_below_real_ones_however_full_memory_is(exact):
  """Two real devices of 1e-9 bytes padded to four: the barrier's overflow (1e5 per unit in the
  greedy decode, over a capacity floored at 1e-6 of the graph) once pushed the real devices'
  logits below the padding's -1e9, so the greedy argmax (and sampling) chose a padded device.
  Real logits now stop at half the padding's: every mode keeps the answer on a real device."""
  n = 12
  s = np.arange(n - 1)
  g = CompGraph(cost=np.ones(n), senders=s, receivers=s + 1, out_bytes=np.ones(n),
                param_bytes=np.ones(n), name="tiny_memory")
  topo = Topology.uniform(2, bandwidth=1.0, latency=0.0, mem_capacity=1e-9)
  f = features.graph_features(g, topo, max_devices=4)
  args = (jnp.zeros((f.node_mask.size, 4)), jnp.zeros((4, 4)), jnp.zeros(4), f.node_load,
          f.node_end, f.device_capacity, f.device_mask, f.topo_order, f.topo_position,
          f.node_mask, f.senders, f.receivers, f.edge_mask)
  extra = dict(leader=f.node_leader) if exact else {}
  dec = load.LoadDecoder(hidden=4, block=2)
  params = dec.init(jax.random.PRNGKey(0), *args, **extra)
  for mode in ("expected", "greedy"):
    logits = np.asarray(dec.apply(params, *args, mode=mode, **extra))[:n]
    assert np.all(np.isfinite(logits)), mode
    assert logits[:, 2:].max() < logits[:, :2].min(), mode  # padding below every real device
    assert np.all(np.argmax(logits, -1) < 2), mode
    draws = jax.random.categorical(jax.random.PRNGKey(1), jnp.asarray(logits), shape=(64, n))
    assert int(draws.max()) < 2, mode
