"""Tests of the GO / GDP policy network: features, GraphSAGE, segment attention, the full module."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from go_jax.policies import (VARIANTS, batch_features, default_config, graph_features,
                             make_policy, variant_config)
from go_jax.policies import attention as att
from go_jax.policies import sage
from go_jax.policies.features import DEVICE_FEATURES, NODE_FEATURES, node_depth
from go_jax.policies.types import GraphFeatures
from simulator import CompGraph, Topology, preset
from simulator.sources import layered_dag

pytestmark = pytest.mark.fast_compile  # compile time dominates (tests/conftest.py)

SMALL = dict(hidden=16, gnn_layers=1, attention_layers=1, heads=2, segment_len=16,
             priority_levels=4)  # small and shallow: XLA compiles dominate this file's time


def small_config(variant="go", **overrides):
  c = variant_config(variant)
  c.update(SMALL)
  c.update(overrides)
  return c


def col(name):
  return NODE_FEATURES.index(name)


def host_params(module, *args, seed=0):
  """Random parameters of the right shapes without compiling `init` (XLA compiles of the
  initialisers dominate this file's run time; the real init is tested once, in `go_policy`)."""
  shapes = jax.eval_shape(module.init, jax.random.PRNGKey(0), *args)
  rng = np.random.default_rng(seed)
  return jax.tree_util.tree_map(
      lambda s: jnp.asarray(rng.normal(size=s.shape) * 0.3, s.dtype), shapes)


@pytest.fixture(scope="module")
def graphs():
  return [layered_dag(40, 5, seed=0), layered_dag(50, 7, seed=1), layered_dag(23, 3, seed=2)]


@pytest.fixture(scope="module")
def topo4():
  return preset("nvlink4")


def feats64(graph, topology):
  """Features in the bucket that batch_features gives `graphs` (64 nodes, 128 edges)."""
  return graph_features(graph, topology, num_nodes=64, num_edges=128)


@pytest.fixture(scope="module")
def go_policy(graphs, topo4):
  """(policy, params from the real init, jitted apply that may trace only once)."""
  policy = make_policy(small_config())
  # The "rbg" key compiles the initialisers about twice as fast as the default threefry.
  params = jax.jit(policy.init)(jax.random.key(0, impl="rbg"), feats64(graphs[0], topo4))

  @jax.jit
  @chex.assert_max_traces(n=1)
  def apply(p, f):
    return policy.apply(p, f)

  return policy, params, apply


# ------------------------------------------------------------------ features
def test_features_of_a_hand_made_graph():
  # 0 -> 1 -> 3, 0 -> 2 -> 3, 1 -> 4 (a diamond with a side branch); 5 isolated.
  g = CompGraph(cost=[1, 2, 3, 1, 2, 3], senders=[0, 0, 1, 2, 1], receivers=[1, 2, 3, 3, 4],
                out_bytes=[10, 10, 10, 10, 10, 50], param_bytes=[0, 4, 0, 0, 0, 0],
                colocation=[-1, 0, 0, -1, -1, -1])
  topo = Topology.uniform(2, bandwidth=10.0, latency=0.5, mem_capacity=1000.0)
  f = graph_features(g, topo, max_devices=4)
  assert f.node_feats.shape == (8, len(NODE_FEATURES)) and f.senders.shape == (8,)
  np.testing.assert_array_equal(node_depth(g), [0, 1, 1, 2, 2, 0])
  x = f.node_feats
  np.testing.assert_allclose(x[:6, col("depth")], [0, 0.5, 0.5, 1, 1, 0])
  np.testing.assert_allclose(x[:6, col("log_in_degree")], np.log1p([0, 1, 1, 2, 1, 0]), 1e-6)
  np.testing.assert_allclose(x[:6, col("log_out_degree")], np.log1p([2, 2, 1, 0, 0, 0]), 1e-6)
  np.testing.assert_allclose(x[:6, col("log_cost")], np.log1p(np.array([1, 2, 3, 1, 2, 3]) / 2),
                             1e-6)
  np.testing.assert_allclose(x[:6, col("colocated")], [0, 1, 1, 0, 0, 0])
  # Memory relative to the 1000-byte devices, times N = 6 ("fair share").
  np.testing.assert_allclose(x[:6, col("log_param_bytes")], np.log1p([0, 0.024, 0, 0, 0, 0]),
                             1e-6)
  # Time to send 10 bytes at 10 B/s is 1 s = half the mean cost of 2 s.
  np.testing.assert_allclose(x[0, col("log_send_time")], np.log1p(0.5), 1e-6)
  assert np.all(x[6:] == 0) and not f.node_mask[6:].any() and f.node_mask[:6].all()
  order = list(g.topological_order())
  np.testing.assert_array_equal(f.topo_order, order + [6, 7])
  np.testing.assert_array_equal(f.topo_order[f.topo_position], np.arange(8))
  np.testing.assert_allclose(x[:6, col("position")], np.argsort(order) / 6)
  np.testing.assert_array_equal(f.edge_mask, np.arange(8) < 5)
  np.testing.assert_array_equal(f.device_mask, [True, True, False, False])
  d = f.device_feats
  np.testing.assert_allclose(d[:2, DEVICE_FEATURES.index("speed")], 1.0)
  np.testing.assert_allclose(d[:2, DEVICE_FEATURES.index("log_memory")], np.log1p(1000 / 104),
                             1e-6)
  np.testing.assert_allclose(d[:2, DEVICE_FEATURES.index("log_latency")], np.log1p(0.25), 1e-6)
  assert np.all(d[2:] == 0)


def test_features_reject_bad_sizes(graphs):
  with pytest.raises(ValueError, match="max_devices=4"):
    graph_features(graphs[0], preset("nvlink8"), max_devices=4)
  with pytest.raises(ValueError, match="does not fit"):
    graph_features(graphs[0], preset("nvlink4"), num_nodes=16)
  with pytest.raises(ValueError, match="topologies"):
    batch_features(graphs, [preset("nvlink2"), preset("nvlink4")])


def test_batch_features_share_one_bucket(graphs, topo4):
  b = batch_features(graphs, [topo4])
  assert b.node_feats.shape == (3, 64, len(NODE_FEATURES))
  assert b.senders.shape[0] == 3 and b.device_feats.shape == (3, 8, len(DEVICE_FEATURES))
  np.testing.assert_array_equal(b.node_mask.sum(1), [40, 50, 23])


# ------------------------------------------------------------------ GraphSAGE
def test_max_pool_ignores_masked_edges_and_zeroes_empty_nodes():
  msgs = jnp.array([[1.0, 5.0], [3.0, 2.0], [7.0, 7.0], [9.0, 0.0]])
  ids = jnp.array([0, 0, 1, 2])
  mask = jnp.array([True, True, False, True])
  np.testing.assert_array_equal(sage.max_pool(msgs, ids, mask, 4),
                                [[3, 5], [0, 0], [9, 0], [0, 0]])


# ------------------------------------------------------------------ attention
def test_rel_shift_matches_explicit_distances():
  s, k = 4, 10  # 6 memory keys, then the segment
  enc = np.arange(k + s - 1)[None, :] + 100 * np.arange(s)[:, None]  # column c: distance k-1-c
  shifted = np.asarray(att.rel_shift(jnp.asarray(enc), k))
  for i in range(s):
    for j in range(k):
      dist = i - (j - (k - s))
      assert shifted[i, j] == 100 * i + (k - 1 - dist)
  idx = att.distance_index(s, k, max_segment=5)  # the table starts at distance -4
  assert idx[0, k - 1] == -(s - 1) + 4 and idx[s - 1, 0] == (s - 1) + (k - s) + 4


def _att_inputs(n=48, width=16, seed=0):
  rng = np.random.default_rng(seed)
  h = jnp.asarray(rng.normal(size=(n, width)), jnp.float32)
  order = jnp.asarray(rng.permutation(n), jnp.int32)
  pos = jnp.argsort(order).astype(jnp.int32)
  mask = jnp.arange(n) < n - 5
  return h, order, pos, mask


def test_scan_and_parallel_attention_agree():
  h, order, pos, mask = _att_inputs()
  film = 1.0 + 0.1 * jax.random.normal(jax.random.PRNGKey(3), (2, 2, 16))
  kw = dict(layers=2, width=16, heads=2, segment_len=8)
  scan = att.SegmentAttention(impl="scan", **kw)
  par = att.SegmentAttention(impl="parallel", **kw)
  params = host_params(scan, h, order, pos, mask, film)

  @jax.jit
  def run(params):
    return [jax.value_and_grad(lambda p, m=m: jnp.sum(jnp.tanh(
        m.apply(p, h, order, pos, mask, film))))(params) for m in (scan, par)]

  (va, ga), (vb, gb) = run(params)
  np.testing.assert_allclose(va, vb, rtol=1e-5)
  chex.assert_trees_all_close(ga, gb, atol=1e-4, rtol=1e-4)


def test_recurrence_reaches_exactly_the_next_segment():
  n, s = 32, 8
  h, _, _, mask = _att_inputs(n)
  order = pos = jnp.arange(n, dtype=jnp.int32)
  h2 = h.at[2].add(jax.random.normal(jax.random.PRNGKey(5), (16,)))  # a node of segment 0
  cases = ((True, 1), (False, 1), (True, 2))
  mods = [att.SegmentAttention(layers, 16, 2, s, recurrence, relative=rel)
          for (recurrence, layers), rel in zip(cases, ("xl", "xl", "bias"))]
  params = [host_params(m, h, order, pos, mask) for m in mods]

  @jax.jit
  def diffs(params):
    return [jnp.abs(m.apply(p, h2, order, pos, mask) - m.apply(p, h, order, pos, mask)).max(1)
            for m, p in zip(mods, params)]

  for (recurrence, layers), d in zip(cases, diffs(params)):
    seg = (np.asarray(d) > 1e-4).reshape(-1, s).any(1)
    # Each layer carries information one segment further down the order, never back.
    expect = [True] + [recurrence and k <= layers for k in range(1, n // s)]
    np.testing.assert_array_equal(seg, expect, err_msg=f"recurrence={recurrence}, "
                                  f"layers={layers}")


# ------------------------------------------------------------------ the policy
def test_output_shapes_and_dtypes(go_policy, graphs, topo4):
  _, params, apply = go_policy
  out = apply(params, feats64(graphs[0], topo4))
  assert out.placement_logits.shape == (64, 8) and out.placement_logits.dtype == jnp.float32
  assert out.priority_logits.shape == (64, 4) and out.priority_logits.dtype == jnp.float32
  assert out.value.shape == () and out.value.dtype == jnp.float32
  assert np.all(np.isfinite(out.placement_logits)) and np.isfinite(out.value)


def test_padding_changes_nothing_real(go_policy, graphs, topo4):
  policy, params, apply = go_policy
  g = graphs[0]
  n, e = g.num_nodes, g.num_edges
  f = feats64(g, topo4)
  rng = np.random.default_rng(0)
  ep = f.senders.shape[0]
  assert e < ep
  junk = f.replace(
      node_feats=np.where(f.node_mask[:, None], f.node_feats,
                          rng.normal(size=f.node_feats.shape) * 100).astype(np.float32),
      op_type=np.where(f.node_mask, f.op_type, rng.integers(0, 100, 64)).astype(np.int32),
      senders=np.where(f.edge_mask, f.senders, rng.integers(0, 64, ep)).astype(np.int32),
      receivers=np.where(f.edge_mask, f.receivers, rng.integers(0, 64, ep)).astype(np.int32),
      device_feats=np.where(f.device_mask[:, None], f.device_feats,
                            rng.normal(size=f.device_feats.shape)).astype(np.float32))
  a, b = apply(params, f), apply(params, junk)
  np.testing.assert_array_equal(a.placement_logits[:n], b.placement_logits[:n])
  np.testing.assert_array_equal(a.priority_logits[:n], b.priority_logits[:n])
  assert a.value == b.value
  # Absent devices get (numerically) zero probability.
  probs = jax.nn.softmax(a.placement_logits, axis=-1)
  assert float(probs[:, 4:].max()) == 0.0
  np.testing.assert_allclose(probs[:, :4].sum(-1), 1.0, rtol=1e-6)
  # A larger bucket gives the same real outputs too.
  big = jax.jit(policy.apply)(params, graph_features(g, topo4, num_nodes=128, num_edges=256))
  np.testing.assert_allclose(big.placement_logits[:n], a.placement_logits[:n], atol=1e-5)
  np.testing.assert_allclose(big.value, a.value, atol=1e-5)


def test_vmap_and_gradients(go_policy, graphs, topo4):
  """vmap over graphs equals per-graph calls (no retrace for graphs of one bucket), and the
  gradient of a PPO-like loss over the batch reaches every parameter."""
  policy, params, apply = go_policy
  topos = [topo4, preset("nvlink2"), preset("nvlink8")]
  batch = batch_features(graphs, topos)
  w = jax.random.normal(jax.random.PRNGKey(1), (3, 64, 4))

  def loss(p):
    o = jax.vmap(policy.apply, in_axes=(None, 0))(p, batch)
    logp = jax.nn.log_softmax(o.placement_logits)[..., :2]
    real = batch.node_mask[..., None]
    return jnp.sum(logp * real) + jnp.sum(o.priority_logits * w) + o.value.sum(), o

  (_, out), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
  for i, (g, t) in enumerate(zip(graphs, topos)):
    o = apply(params, feats64(g, t))  # another graph of the bucket: no retrace
    np.testing.assert_allclose(out.placement_logits[i], o.placement_logits, atol=1e-5)
    np.testing.assert_allclose(out.priority_logits[i], o.priority_logits, atol=1e-5)
    np.testing.assert_allclose(out.value[i], o.value, atol=1e-5)
  flat = jax.tree_util.tree_flatten_with_path(grads)[0]
  dead = [jax.tree_util.keystr(k) for k, g in flat if not np.any(np.asarray(g) != 0)]
  # the load state's memory barrier acts only where a device's estimated peak overflows, and
  # these topologies' memory dwarfs the graphs (tests/test_load_state.py covers it)
  dead = [k for k in dead if "guard_scale" not in k]
  assert not dead, f"no gradient reaches {dead}"
  assert all(np.all(np.isfinite(g)) for _, g in flat)


TINY = dict(hidden=8, gnn_layers=1, attention_layers=1, heads=2, segment_len=16)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_builds_and_runs(variant, graphs):
  hint = np.arange(graphs[2].num_nodes) % 2 if VARIANTS[variant].get("hint") else None
  f = graph_features(graphs[2], preset("nvlink2"), hint_placement=hint)
  policy = make_policy(small_config(variant, **TINY))
  params = host_params(policy, f)
  out = jax.jit(policy.apply)(params, f)
  assert out.placement_logits.shape == (32, 8) and out.priority_logits.shape == (32, 4)
  assert np.all(np.isfinite(out.placement_logits)) and np.isfinite(out.value)
  if variant == "gdp":
    assert not np.any(out.priority_logits) and "film_out" not in params["params"]
  if variant == "no_attention":
    assert "attention" not in params["params"]
  if variant == "no_gnn":
    assert "gnn" not in params["params"]


def test_config_errors(graphs, topo4):
  with pytest.raises(ValueError, match="unknown policy variant"):
    variant_config("nope")
  with pytest.raises(ValueError, match="unknown field"):
    make_policy(dict(default_config(), hiden=3))
  with pytest.raises(ValueError, match="multiple of heads"):
    make_policy(small_config(hidden=18, heads=4))
  with pytest.raises(ValueError, match="attention_impl"):
    make_policy(small_config(attention_impl="fast"))
  policy = make_policy(small_config(max_devices=2))
  with pytest.raises(ValueError, match="max_devices=2"):
    jax.eval_shape(policy.init, jax.random.PRNGKey(0), graph_features(graphs[0], topo4))
  with pytest.raises(ValueError, match="ONE graph"):
    jax.eval_shape(policy.init, jax.random.PRNGKey(0),
                   batch_features(graphs, [preset("nvlink2")], 2))


@pytest.mark.parametrize("n,bucket", [(5000, 8192),
                                      pytest.param(20000, 32768, marks=pytest.mark.full)])
@pytest.mark.usefixtures("optimized")  # it runs more than it compiles
def test_a_large_graph_runs_on_cpu(n, bucket):
  g = layered_dag(n, 64, seed=0)
  f = graph_features(g, preset("nvlink8"))
  assert f.node_feats.shape[0] == bucket and isinstance(f, GraphFeatures)
  policy = make_policy(small_config(**dict(TINY, segment_len=64)))
  out = jax.jit(policy.apply)(host_params(policy, f), f)
  assert np.all(np.isfinite(out.placement_logits[:n])) and np.isfinite(out.value)


def test_hint_sets_the_greedy_action_at_init(graphs):
  """With a hint, the fresh policy's most likely device is the hint's on every real op, its
  most likely level is the middle one, and a policy built for a hint rejects features without
  one (and features reject a hint of the wrong shape or device range)."""
  g = graphs[2]
  hint = (np.arange(g.num_nodes) * 7) % 4
  f = graph_features(g, preset("nvlink4"), hint_placement=hint)
  assert np.all(f.hint[:g.num_nodes] == hint) and np.all(f.hint[g.num_nodes:] == -1)
  policy = make_policy(small_config("go_hint", **TINY))
  params = jax.jit(policy.init)(jax.random.PRNGKey(0), f)
  out = jax.jit(policy.apply)(params, f)
  n = g.num_nodes
  assert np.array_equal(np.argmax(out.placement_logits[:n], -1), hint)
  levels = out.priority_logits.shape[-1]
  assert np.all(np.argmax(out.priority_logits[:n], -1) == levels // 2)
  assert float(params["params"]["hint_scale"]) == 5.0
  with pytest.raises(ValueError, match="needs GraphFeatures.hint"):
    policy.apply(params, graph_features(g, preset("nvlink4")))
  with pytest.raises(ValueError, match="hint_placement"):
    graph_features(g, preset("nvlink4"), hint_placement=hint[:-1])
  with pytest.raises(ValueError, match="hint_placement"):
    graph_features(g, preset("nvlink2"), hint_placement=hint)
