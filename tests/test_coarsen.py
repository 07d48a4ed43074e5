"""Coarsening (simulator.coarsen): contract / expand rules on hand examples, and `coarsen` keeps
totals, stays acyclic and reaches max_nodes on random and real graphs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simulator import CompGraph, Topology, from_jax, ops, reference_simulate, simulate
from simulator.coarsen import (STRATEGIES, acyclic_groups, coarsen, contract, expand,
                               scope_path, xla_fusion_graph)
from simulator.sources import synthetic


def _diamond(**kw):
  """a->b, a->c, b->d, c->d with distinct sizes."""
  fields = dict(cost=[1.0, 2.0, 3.0, 4.0], senders=[0, 0, 1, 2], receivers=[1, 2, 3, 3],
                out_bytes=[10.0, 20.0, 30.0, 40.0], param_bytes=[1.0, 2.0, 3.0, 4.0],
                temp_bytes=[5.0, 0.0, 7.0, 1.0], flops=[1.0, 1.0, 1.0, 1.0],
                bytes_accessed=[100.0, 200.0, 300.0, 400.0],
                op_type=[ops.op_type_id(t) for t in ("dot", "elementwise", "conv", "reduce")],
                node_names=["a", "b", "c", "d"], name="diamond")
  fields.update(kw)
  return CompGraph(**fields)


# ------------------------------------------------------------------ contract / expand
def test_contract_hand_example():
  g = _diamond()
  c = contract(g, [0, 0, 1, 1])  # {a, b} and {c, d}
  assert c.num_nodes == 2 and list(zip(c.senders, c.receivers)) == [(0, 1)]
  assert c.cost.tolist() == [3, 7] and c.param_bytes.tolist() == [3, 7]
  # a is read by c (outside) -> output; b only by d (outside) -> output; d is a sink -> output.
  assert c.out_bytes.tolist() == [10 + 20, 40]
  # temp: largest member temp + outputs read only inside ({c}: c's 30 B read only by d).
  assert c.temp_bytes.tolist() == [5 + 0, 7 + 30]
  assert c.bytes_accessed.tolist() == [300, 700]
  assert [ops.op_type_name(t) for t in c.op_type] == ["elementwise", "reduce"]  # heaviest
  assert c.node_names == ("a (+1)", "c (+1)")
  fused = contract(g, [0, 0, 1, 1], boundary_bytes=True)
  # {c, d} reads a (10 B) and b (20 B) from outside, its parameters (3 + 4 B), writes d (40 B).
  assert fused.bytes_accessed.tolist() == [10 + 20 + 3, 10 + 20 + 7 + 40]


def test_contract_rejects_cycles_and_bad_groups():
  g = _diamond()
  with pytest.raises(ValueError, match="acyclic_groups"):
    contract(g, [0, 1, 2, 0])  # {a, d} with b, c in between
  fixed = acyclic_groups(g, [0, 1, 2, 0])
  assert contract(g, fixed).num_nodes == 4
  with pytest.raises(ValueError, match="shape"):
    contract(g, [0, 0, 1])
  with pytest.raises(ValueError, match="integers"):
    contract(g, [0.5, 0, 1, 1])


def test_colocation_kept_consistent():
  g = _diamond(colocation=[7, -1, 7, -1])  # a and c colocated
  c = contract(g, [0, 1, 2, 2])  # a alone, b alone, {c, d}
  assert c.colocation[0] == c.colocation[2] >= 0 and c.colocation[1] == -1
  coarse = np.array([3, 1, 0])  # disagrees with the coarse colocation on purpose
  full = expand(coarse, np.array([0, 1, 2, 2]), c)
  assert full[0] == full[2]  # the coarse rule is applied first
  np.testing.assert_array_equal(expand(np.stack([coarse, coarse + 1]), [0, 1, 2, 2]),
                                [[3, 1, 0, 0], [4, 2, 1, 1]])
  with pytest.raises(ValueError, match="outside"):
    expand(coarse, [0, 1, 5, 2])


def test_acyclic_groups_peels_only_what_is_waited_on():
  # Two groups {0, 3} and {1, 2} on a chain 0 -> 1 -> 2 -> 3: a cycle between the groups.
  chain = CompGraph(cost=np.ones(4), senders=[0, 1, 2], receivers=[1, 2, 3])
  groups = acyclic_groups(chain, [0, 1, 1, 0])
  assert len(np.unique(groups)) == 3 and groups[1] == groups[2]
  contract(chain, groups)  # valid


# ------------------------------------------------------------------ coarsen
def _check(g, res, max_nodes):
  c = res.graph
  assert c.num_nodes <= max_nodes and res.mapping.shape == (g.num_nodes,)
  assert len(c.topological_order()) == c.num_nodes  # CompGraph validated: acyclic
  assert set(np.unique(res.mapping)) == set(range(c.num_nodes))
  for f in ("cost", "param_bytes", "flops"):
    np.testing.assert_allclose(getattr(c, f).sum(), getattr(g, f).sum(), rtol=1e-12)


@pytest.mark.parametrize("n,width,max_nodes", [(3000, 30, 300), (2000, 8, 50), (4000, 200, 1)])
def test_coarsen_random_layered(n, width, max_nodes):
  g = synthetic.layered_dag(n, width, seed=n, integer_costs=True, colocation_groups=10,
                            colocation_size=3)
  res = coarsen(g, max_nodes)
  _check(g, res, max_nodes)
  assert res.graph.cost.sum() == g.cost.sum()  # integer costs: exact
  assert res.graph.param_bytes.sum() == g.param_bytes.sum()
  assert [s for s, _ in res.steps] == list(STRATEGIES[:len(res.steps)])
  # expand a random coarse placement: colocation holds and the original graph simulates it.
  rng = np.random.default_rng(0)
  place = res.expand(rng.integers(0, 4, res.graph.num_nodes))
  for grp in np.unique(g.colocation[g.colocation >= 0]):
    assert len(set(place[g.colocation == grp].tolist())) == 1
  if n <= 2000:
    topo = Topology.uniform(4, bandwidth=1e9, latency=1e-6)
    prio = res.expand(-np.arange(res.graph.num_nodes, dtype=float))
    ref = reference_simulate(g, topo, place, prio)
    assert np.isfinite(ref.makespan) and ref.makespan >= g.cost.sum() / 4


def test_chain_merges_to_one_node():
  g = synthetic.chain(50, integer_costs=True)
  res = coarsen(g, 10)
  assert res.graph.num_nodes == 1 and res.steps[-1] == ("chains", 1)
  assert res.graph.cost[0] == g.cost.sum() and np.all(res.mapping == 0)


def test_already_small_graph_is_unchanged():
  g = _diamond()
  res = coarsen(g, 4)
  assert res.graph.num_nodes == 4 and res.steps == ()
  np.testing.assert_array_equal(res.mapping, np.arange(4))


def _forward_backward(n: int) -> CompGraph:
  """PipeDream's shape: F_0 -> .. -> F_{n-1} -> loss -> B_{n-1} -> .. -> B_0, F_i -> B_i, and
  F_i colocated with B_i (one placement unit per layer)."""
  fwd, loss, bwd = list(range(n)), n, [n + 1 + i for i in range(n)]
  edges = ([(fwd[i], fwd[i + 1]) for i in range(n - 1)] + [(fwd[-1], loss), (loss, bwd[-1])]
           + [(bwd[i], bwd[i - 1]) for i in range(n - 1, 0, -1)]
           + [(fwd[i], bwd[i]) for i in range(n)])
  colocation = -np.ones(2 * n + 1, np.int64)
  colocation[fwd] = colocation[bwd] = np.arange(n)
  return CompGraph(cost=np.ones(2 * n + 1), senders=[a for a, _ in edges],
                   receivers=[b for _, b in edges], out_bytes=np.ones(2 * n + 1),
                   colocation=colocation, name="forward_backward")


def _units(graph: CompGraph) -> int:
  return len(np.unique(graph.colocation_root()))


@pytest.mark.parametrize("strategies", [STRATEGIES, ("topological",)])
def test_coarsening_keeps_colocated_units(strategies):
  """Merging F_u with F_v unites two units unless B_u and B_v merge too: at 8 nodes of 8 layers
  the coarse graph keeps 4 units (each two layers' forward part and backward part), and an
  expanded placement keeps the colocation."""
  g = _forward_backward(8)
  res = coarsen(g, 8, strategies=strategies)
  assert res.graph.num_nodes <= 8 and _units(res.graph) == 4
  place = res.expand(np.random.default_rng(0).integers(0, 4, res.graph.num_nodes))
  for i in range(8):
    assert place[i] == place[9 + i]


@pytest.mark.parametrize("spec", ["pipedream:resnet50", "pipedream:inception_v3"])
@pytest.mark.parametrize("strategies", [STRATEGIES, ("topological",)])
def test_coarsened_pipedream_graphs_keep_half_their_nodes_as_units(spec, strategies):
  """Before units were kept, Inception-v3 at 16 nodes had 2 placement units (1 with
  "topological" alone) and ResNet-50 at 64 nodes 24 (6): neither fit 4 devices at 0.6x
  memory."""
  from simulator.sources import load_graph
  g = load_graph(spec)
  for m in (16, 64):
    res = coarsen(g, m, strategies=strategies)
    assert res.graph.num_nodes <= m and _units(res.graph) >= m // 2
    plain = coarsen(g, m, strategies=strategies, keep_units=False)  # as before, to compare
    assert plain.graph.num_nodes == m and _units(plain.graph) < m // 2


def test_topological_fallback_never_keeps_fewer_units_than_the_plain_one():
  """The unit cut's node count is not monotone in its run count (a 40-op DAG at 22 nodes:
  bisection alone chose 6 runs, 14 nodes and 7 units against the plain cut's 22 and 12), and
  where units cannot be kept apart it must not collapse the graph to one node."""
  cases = [(synthetic.layered_dag(40, width=4, seed=17, colocation_groups=10,
                                  colocation_size=2), 22),
           (synthetic.layered_dag(300, width=8, seed=3, colocation_groups=60,
                                  colocation_size=3), 16)]
  rng = np.random.default_rng(0)
  for seed in range(20):
    n = int(rng.integers(10, 120))
    cases.append((synthetic.regal_dag(n, seed=seed, colocation_groups=n // 6,
                                      colocation_size=3), int(rng.integers(2, n))))
  for g, m in cases:
    for strategies in (STRATEGIES, ("topological",)):
      kept = coarsen(g, m, strategies=strategies)
      plain = coarsen(g, m, strategies=strategies, keep_units=False)
      assert kept.graph.num_nodes <= m
      assert (_units(kept.graph), kept.graph.num_nodes) >= (_units(plain.graph),
                                                           plain.graph.num_nodes)
  g, m = cases[0]
  assert _units(coarsen(g, m, strategies=("topological",)).graph) >= 13


def test_spread_colocation_keeps_the_coarse_critical_path_short():
  """Colocated triples spread over the depth of a layered DAG: the unit cut of "topological"
  made its pieces serial slabs (800 ops, 60 triples, 128 nodes: coarse critical path 0.76 s,
  2.4x the 0.32 s of the same graph coarsened without colocation); the level cut keeps it
  within 1.6x while an expanded placement keeps the colocation."""
  from simulator.graph import upward_rank
  for seed in (0, 1):
    g = synthetic.layered_dag(800, 32, seed=seed, colocation_groups=60, colocation_size=3)
    free = coarsen(synthetic.layered_dag(800, 32, seed=seed), 128)
    res = coarsen(g, 128)
    assert res.graph.num_nodes <= 128
    assert upward_rank(res.graph).max() <= 1.6 * upward_rank(free.graph).max()
    place = res.expand(np.random.default_rng(0).integers(0, 8, res.graph.num_nodes))
    for k in range(60):
      assert len(np.unique(place[g.colocation == k])) == 1


def test_weightless_graph_is_cut_by_count():
  """No costs, flops or bytes: the fallback cuts by count (it once cut a weightless graph into
  one run, one node, for any max_nodes)."""
  none = np.zeros(0, np.int64)
  for colocation in (None, [0, 0, 1, 1, 2, 2, 3, 3, -1, -1]):
    g = CompGraph(cost=np.zeros(10), senders=none, receivers=none, colocation=colocation)
    for strategies in (STRATEGIES, ("topological",)):
      res = coarsen(g, 5, strategies=strategies)
      assert res.graph.num_nodes == 5, (colocation, strategies, res.steps)
      _check(g, res, 5)


def test_bad_arguments():
  g = _diamond()
  for bad in (0, -3, 2.5, True, "10"):
    with pytest.raises(ValueError, match="max_nodes"):
      coarsen(g, bad)
  with pytest.raises(ValueError, match="strateg"):
    coarsen(g, 2, strategies=("chains", "magic"))


def _mlp_step(params, x):
  def loss(p):
    h = x
    for k in range(3):
      h = jax.nn.relu(h @ p[f"w{k}"] + p[f"b{k}"])
    return jnp.mean(h ** 2)
  grads = jax.grad(loss)(params)
  return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)


def test_coarsen_real_jax_graph_and_xla_fusion_graph():
  params = {f"w{k}": jnp.ones((16, 16)) for k in range(3)}
  params.update({f"b{k}": jnp.ones((16,)) for k in range(3)})
  g = from_jax(_mlp_step, params, jnp.ones((8, 16)))
  assert g.cost.sum() == 0  # weights fall back to max(flops, 16 * bytes)
  for max_nodes in (40, 12, 3):
    res = coarsen(g, max_nodes)
    _check(g, res, max_nodes)
    assert res.graph.bytes_accessed.sum() == pytest.approx(g.bytes_accessed.sum())
  res = coarsen(g, 12, strategies=("scopes", "topological"))
  _check(g, res, 12)
  groups = acyclic_groups(g, np.arange(g.num_nodes) // 4)  # any grouping, made acyclic
  fused, summed = xla_fusion_graph(g, groups), contract(g, groups)
  assert fused.name.endswith("xla_fusion") and fused.num_nodes == summed.num_nodes
  assert np.all(fused.bytes_accessed <= summed.bytes_accessed)  # boundary only
  # a coarse placement expanded back simulates on the original graph (jitted simulator)
  topo = Topology.uniform(2, bandwidth=1e9)
  gc = g.replace(cost=g.flops * 1e-9 + 1e-6)
  place = res.expand(np.arange(res.graph.num_nodes) % 2)
  out = simulate(gc, topo, place[None], np.zeros((1, g.num_nodes)))
  assert np.isfinite(float(out.makespan[0]))


def test_scope_path():
  assert scope_path("add.3 [jit(step)/transpose(jvp(MLP))/Dense_0/add]") == (
      "step", "MLP", "Dense_0", "add")
  assert scope_path("layer1/conv") == ("layer1", "conv")


def test_scopes_group_layers():
  """Two 'layers' of 3 ops each, named by scope: the scopes strategy merges each layer."""
  names = [f"op{i} [jit(f)/layer{i // 3}/op{i % 3}]" for i in range(6)]
  g = CompGraph(cost=np.ones(6), senders=[0, 0, 1, 2, 3, 3, 4], receivers=[1, 2, 3, 3, 4, 5, 5],
                node_names=names)
  res = coarsen(g, 2, strategies=("scopes",))
  assert res.graph.num_nodes == 2
  np.testing.assert_array_equal(res.mapping, [0, 0, 0, 1, 1, 1])


# ------------------------------------------------------------------ options of the large-graph path
def _chain4():
  """a->b->c->d with outputs 10, 20, 30, 40 B and temps 5, 0, 7, 1 B."""
  return _diamond(senders=[0, 1, 2], receivers=[1, 2, 3], name="chain4")


def test_peak_temp_bound_counts_only_what_is_live():
  g = _chain4()
  # one group: internal outputs a, b, c. "sum": max temp 7 + 10 + 20 + 30.
  assert contract(g, [0, 0, 0, 0]).temp_bytes.tolist() == [67]
  # "peak", in topological order: a 10+5, b 10+20+0, c 20+30+7, d 30+1 -> 57.
  assert contract(g, [0, 0, 0, 0], temp_bound="peak").temp_bytes.tolist() == [57]
  # singletons hold nothing internal: their own temp either way
  assert contract(g, [0, 1, 2, 3], temp_bound="peak").temp_bytes.tolist() == [5, 0, 7, 1]
  with pytest.raises(ValueError, match="temp_bound"):
    contract(g, [0, 0, 0, 0], temp_bound="max")


def test_edge_out_bounds_send_what_one_consumer_group_reads():
  g = _diamond()
  # {a, b}: a (10 B) read by {c}, b (20 B) read by {d}; {c}: 30 B to {d}; {d}: a sink, 40 B.
  assert contract(g, [0, 0, 1, 2]).out_bytes.tolist() == [30, 30, 40]
  assert contract(g, [0, 0, 1, 2], out_bound="edge_max").out_bytes.tolist() == [20, 30, 40]
  assert contract(g, [0, 0, 1, 2], out_bound="edge_mean").out_bytes.tolist() == [15, 30, 40]
  with pytest.raises(ValueError, match="out_bound"):
    contract(g, [0, 0, 1, 2], out_bound="min")


def test_max_group_weight_splits_heavy_scopes():
  """Two 3-op layers of weight 3 each, cap 1.5: each layer is cut in its topological order
  into runs starting below the cap ({op0, op1}, {op2}); without a cap (the default) each
  layer is one group, as before."""
  names = [f"op{i} [jit(f)/layer{i // 3}/op{i % 3}]" for i in range(6)]
  g = CompGraph(cost=np.ones(6), senders=[0, 0, 1, 2, 3, 3, 4], receivers=[1, 2, 3, 3, 4, 5, 5],
                node_names=names)
  np.testing.assert_array_equal(coarsen(g, 2, strategies=("scopes",)).mapping,
                                [0, 0, 0, 1, 1, 1])
  res = coarsen(g, 2, strategies=("scopes",), max_group_weight=0.25)
  np.testing.assert_array_equal(res.mapping, [0, 0, 1, 2, 2, 3])
  res = coarsen(g, 2, max_group_weight=0.25)  # "topological" (uncapped) still reaches 2
  _check(g, res, 2)
  for bad in (0, 1.5, -0.1, True, "0.5"):
    with pytest.raises(ValueError, match="max_group_weight"):
      coarsen(g, 2, max_group_weight=bad)
  with pytest.raises(ValueError, match="temp_bound"):
    coarsen(g, 2, temp_bound="max")
