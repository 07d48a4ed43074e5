"""Host-side padding: buckets, padded arrays and masks, loop trip counts, stacking, tree shape."""

import jax
import numpy as np
import pytest

from simulator import CompGraph, Topology, reference_simulate
from simulator.padding import (CHUNKS, MIN_BUCKET, PaddedGraph, bucket, choose_chunk,
                               loop_iterations, pad_graph, pad_graphs, tree_shape)
from simulator.simulate import simulate_padded


def small_graph():
  """6 ops, 7 edges, one colocation group {1, 4}."""
  return CompGraph(cost=[1, 2, 3, 4, 5, 6], senders=[0, 0, 0, 1, 2, 3, 4],
                   receivers=[1, 2, 3, 4, 4, 5, 5], out_bytes=[1, 2, 3, 4, 5, 6],
                   param_bytes=[6, 5, 4, 3, 2, 1], temp_bytes=[1, 1, 2, 2, 3, 3],
                   colocation=[-1, 3, -1, -1, 3, -1], name="small")


def random_dag(seed, n):
  """A random DAG with integer costs and sizes, some colocation."""
  rng = np.random.default_rng(seed)
  s, r = [], []
  for v in range(1, n):
    for u in rng.choice(v, size=min(v, int(rng.integers(0, 4))), replace=False):
      s.append(int(u))
      r.append(v)
  coloc = np.where(rng.random(n) < 0.2, rng.integers(0, 2, n), -1)
  return CompGraph(cost=2.0 * rng.integers(0, 5, n), senders=s, receivers=r,
                   out_bytes=rng.integers(0, 4, n), param_bytes=rng.integers(0, 3, n),
                   temp_bytes=rng.integers(0, 3, n), colocation=coloc, name=f"rand{seed}")


# ------------------------------------------------------------------ buckets
@pytest.mark.parametrize("n,expected", [(0, 8), (1, 8), (7, 8), (8, 8), (9, 16), (16, 16),
                                        (17, 32), (1000, 1024), (1024, 1024), (1025, 2048)])
def test_bucket(n, expected):
  assert bucket(n) == expected
  assert MIN_BUCKET == 8


@pytest.mark.parametrize("n,minimum,expected", [(0, 1, 1), (1, 1, 1), (3, 1, 4), (5, 2, 8),
                                                (3, 64, 64)])
def test_bucket_minimum(n, minimum, expected):
  assert bucket(n, minimum) == expected


def test_bucket_is_smallest_power_of_two():
  for n in range(1, 300):
    b = bucket(n)
    assert b & (b - 1) == 0 and b >= max(n, 8)
    assert b == 8 or b // 2 < n


# ------------------------------------------------------------------ pad_graph
def test_pad_graph_shapes_and_values():
  g = small_graph()
  pg = pad_graph(g)
  assert isinstance(pg, PaddedGraph)
  n, e, np_, ep = 6, 7, 8, 8
  assert pg.num_nodes_padded == np_
  for f in ("cost", "out_bytes", "param_bytes", "temp_bytes", "coloc_root", "node_mask",
            "num_preds"):
    assert getattr(pg, f).shape == (np_,), f
  assert pg.succ_ptr.shape == (np_ + 1,)
  for f in ("senders", "receivers", "edge_mask"):
    assert getattr(pg, f).shape == (ep,), f
  assert pg.num_iters.shape == ()
  np.testing.assert_array_equal(pg.node_mask, np.arange(np_) < n)
  np.testing.assert_array_equal(pg.edge_mask, np.arange(ep) < e)
  for f in ("cost", "out_bytes", "param_bytes", "temp_bytes"):
    np.testing.assert_array_equal(np.asarray(getattr(pg, f))[:n], getattr(g, f))
    np.testing.assert_array_equal(np.asarray(getattr(pg, f))[n:], 0)
  np.testing.assert_array_equal(pg.coloc_root, [0, 1, 2, 3, 1, 5, 6, 7])
  np.testing.assert_array_equal(pg.num_preds, [0, 1, 1, 1, 2, 2, 0, 0])
  np.testing.assert_array_equal(np.asarray(pg.senders)[:e], g.senders)
  np.testing.assert_array_equal(np.asarray(pg.receivers)[:e], g.receivers)
  np.testing.assert_array_equal(np.asarray(pg.senders)[e:], 0)
  np.testing.assert_array_equal(np.asarray(pg.receivers)[e:], 0)
  assert pg.coloc_root.dtype == np.int32 and pg.succ_ptr.dtype == np.int32
  assert pg.chunk in CHUNKS
  assert int(pg.num_iters) == loop_iterations(g.out_degree(), pg.chunk)


def test_succ_ptr_csr():
  g = small_graph()
  pg = pad_graph(g, 16, 32, chunk=2)
  ptr = np.asarray(pg.succ_ptr)
  succ = np.asarray(pg.receivers)
  assert ptr.shape == (17,)
  for u in range(g.num_nodes):
    expected = sorted(v for s, v in zip(g.senders, g.receivers) if s == u)
    assert succ[ptr[u]:ptr[u + 1]].tolist() == expected
    assert np.all(np.asarray(pg.senders)[ptr[u]:ptr[u + 1]] == u)
  np.testing.assert_array_equal(ptr[g.num_nodes:], g.num_edges)  # padded ops: no successors
  assert pg.chunk == 2


def test_padded_nodes_are_own_colocation_root():
  g = CompGraph(cost=np.ones(3), senders=[], receivers=[], colocation=[0, 0, 0])
  pg = pad_graph(g, 8, 8)
  np.testing.assert_array_equal(pg.coloc_root, [0, 0, 0, 3, 4, 5, 6, 7])
  np.testing.assert_array_equal(pg.succ_ptr, np.zeros(9))


def test_pad_graph_explicit_sizes():
  g = small_graph()
  pg = pad_graph(g, 6, 7, chunk=1)  # exact fit is allowed
  assert pg.num_nodes_padded == 6 and pg.senders.shape == (7,)
  assert bool(np.all(pg.node_mask)) and bool(np.all(pg.edge_mask))
  pg = pad_graph(g, 32, 64)
  assert pg.cost.shape == (32,) and pg.edge_mask.shape == (64,)


@pytest.mark.parametrize("nodes,edges", [(5, 8), (8, 6), (2, 2)])
def test_pad_graph_too_small_raises(nodes, edges):
  with pytest.raises(ValueError, match=r"'small' \(6 nodes, 7 edges\) does not fit"):
    pad_graph(small_graph(), nodes, edges)


def test_pad_graph_bad_chunk():
  with pytest.raises(ValueError, match="chunk must be >= 1"):
    pad_graph(small_graph(), chunk=0)


# ------------------------------------------------------------------ loop trip count, chunk
def test_loop_iterations_hand_example():
  outdeg = np.array([0, 1, 5, 8, 3, 4])
  # chunk 4: max(1, ceil(d / 4)) = 1, 1, 2, 2, 1, 1
  assert loop_iterations(outdeg, 4) == 8
  assert loop_iterations(outdeg, 1) == 1 + 1 + 5 + 8 + 3 + 4
  assert loop_iterations(outdeg, 2) == 1 + 1 + 3 + 4 + 2 + 2
  assert loop_iterations(outdeg, 16) == 6  # every op holds the loop at least once
  for k in (1, 2, 3, 4, 8, 16):
    assert loop_iterations(outdeg, k) == sum(max(1, -(-d // k)) for d in outdeg.tolist())


def test_choose_chunk():
  assert choose_chunk(np.ones(50, int)) == 1  # a chain: one edge per op
  assert choose_chunk(np.zeros(10, int)) == 1
  assert choose_chunk(np.array([1000, 0])) == 16  # one wide fan-out dominates
  rng = np.random.default_rng(0)
  for _ in range(5):
    outdeg = rng.integers(0, 20, 30)
    k = choose_chunk(outdeg)
    assert k in CHUNKS
    costs = {c: loop_iterations(outdeg, c) * (6.0 + c) for c in CHUNKS}
    assert costs[k] == min(costs.values())


# ------------------------------------------------------------------ several graphs
def test_pad_graphs_stacks_into_one_bucket():
  graphs = [small_graph(), random_dag(1, 11), random_dag(2, 3)]
  stacked = pad_graphs(graphs)
  np_ = bucket(11)
  ep = bucket(max(g.num_edges for g in graphs))
  assert stacked.cost.shape == (3, np_)
  assert stacked.succ_ptr.shape == (3, np_ + 1)
  assert stacked.senders.shape == (3, ep) and stacked.edge_mask.shape == (3, ep)
  assert stacked.num_iters.shape == (3,)
  assert isinstance(stacked.chunk, int) and stacked.chunk in CHUNKS
  for i, g in enumerate(graphs):
    single = pad_graph(g, np_, ep, stacked.chunk)
    for a, b in zip(jax.tree_util.tree_leaves(single), jax.tree_util.tree_leaves(stacked)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[i])
    assert int(stacked.num_iters[i]) == loop_iterations(g.out_degree(), stacked.chunk)
    np.testing.assert_array_equal(np.asarray(stacked.node_mask[i]).sum(), g.num_nodes)


def test_pad_graphs_empty_raises():
  with pytest.raises(ValueError, match="at least one graph"):
    pad_graphs([])


# ------------------------------------------------------------------ tree shape
@pytest.mark.parametrize("np_", [1, 2, 8, 16, 64, 100, 1 << 10, 1 << 14, 1 << 15, 1 << 17,
                                 3000])
def test_tree_shape(np_):
  levels, arity = tree_shape(np_)
  assert arity ** levels >= np_
  assert arity >= 2 and arity & (arity - 1) == 0
  assert levels == (2 if np_ <= 1 << 14 else 3)
  # few, wide levels: one level fewer, or half the arity, would not cover Np
  assert arity == 2 or (arity // 2) ** levels < np_


# ------------------------------------------------------------------ end to end
_vmapped = jax.jit(jax.vmap(simulate_padded, in_axes=(0, None, 0, 0)))


def test_vmapped_simulate_over_graphs_matches_reference():
  graphs = [random_dag(10, 12), random_dag(11, 9), random_dag(12, 5)]
  topo = Topology.create(speed=[1.0, 2.0, 1.0], overhead=[0.0, 1.0, 0.0],
                         mem_capacity=[8.0, 6.0, 10.0],
                         bandwidth=[[1, 2, 1], [2, 1, 1], [1, 1, 2]],
                         latency=[[0, 1, 0], [1, 0, 2], [0, 2, 0]])
  stacked = pad_graphs(graphs)
  np_ = stacked.cost.shape[-1]
  b = 3
  rng = np.random.default_rng(0)
  place = np.zeros((len(graphs), b, np_), np.int32)
  prio = np.zeros((len(graphs), b, np_), np.float32)
  for i, g in enumerate(graphs):
    place[i, :, :g.num_nodes] = rng.integers(0, 3, (b, g.num_nodes))
    prio[i, :, :g.num_nodes] = rng.integers(0, 3, (b, g.num_nodes))
  res = jax.tree_util.tree_map(np.asarray, _vmapped(stacked, topo, place, prio))
  assert res.start.shape == (len(graphs), b, np_)
  assert res.makespan.shape == (len(graphs), b)
  assert res.peak_memory.shape == (len(graphs), b, 3)
  for i, g in enumerate(graphs):
    n = g.num_nodes
    for k in range(b):
      ref = reference_simulate(g, topo, place[i, k, :n], prio[i, k, :n])
      np.testing.assert_array_equal(res.start[i, k, :n], ref.start)
      np.testing.assert_array_equal(res.finish[i, k, :n], ref.finish)
      assert res.makespan[i, k] == ref.makespan
      np.testing.assert_array_equal(res.peak_memory[i, k], ref.peak_memory)
      assert bool(res.oom[i, k]) == ref.oom


def test_batch_bucket():
  from simulator.padding import batch_bucket
  assert [batch_bucket(b) for b in (1, 3, 1000, 1024)] == [1, 4, 1024, 1024]
  assert batch_bucket(1025) == 2048 and batch_bucket(5000) == 5120


def test_pad_to_shares_one_compilation_and_changes_no_result():
  """`simulate` pads a graph given to `pad_to` to those sizes: two graphs of different buckets
  then run one compiled simulator, with the reference's results; too small a size is refused."""
  from simulator import simulate  # pylint: disable=g-import-not-at-top
  sim = __import__("sys").modules["simulator.simulate"]
  topo = Topology.uniform(3, bandwidth=1.0, latency=0.5)
  small, large = random_dag(20, 7), random_dag(21, 20)  # node buckets 8 and 32
  assert sim.padded(small).num_nodes_padded != sim.padded(large).num_nodes_padded
  rng = np.random.default_rng(1)
  before = None
  for g in (small, large):
    assert sim.pad_to(g, 32, 64, chunk=1) is g
    assert sim.padded(g).num_nodes_padded == 32 and sim.padded(g).cost.shape == (32,)
    place = rng.integers(0, 3, (2, g.num_nodes))
    prio = rng.integers(0, 4, (2, g.num_nodes)).astype(float)
    res = simulate(g, topo, place, prio)
    if before is None:
      before = sim._simulate_jit._cache_size()  # pylint: disable=protected-access
    for k in range(2):
      ref = reference_simulate(g, topo, place[k], prio[k])
      np.testing.assert_array_equal(np.asarray(res.start[k]), ref.start)
      np.testing.assert_array_equal(np.asarray(res.peak_memory[k]), ref.peak_memory)
      assert float(res.makespan[k]) == ref.makespan
  assert sim._simulate_jit._cache_size() == before  # pylint: disable=protected-access
  with pytest.raises(ValueError, match="rand21.*does not fit the padded size"):
    sim.pad_to(large, 16, 64)
  assert sim.padded(large).num_nodes_padded == 32  # a refused size leaves the graph as it was
