"""Differential tests: jitted `simulate` vs `reference_simulate` vs a literal O(N^2) oracle."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import CompGraph, Topology, preset, reference_simulate, simulate
from simulator.padding import pad_graph
from simulator.simulate import simulate_padded
from simulator.sources import load_graph

# Compile time dominates this module (one program per device count and test; the random
# examples themselves take well under a second), so XLA compiles it with most optimisations off
# (tests/conftest.py's _fast_compile). The HLO passes are the same; the differential checks of the
# fully optimised simulator against the reference run unmarked in tests/test_padding.py
# (vmapped over graphs) and tests/test_fusion.py.
pytestmark = pytest.mark.fast_compile

NP, EP = 64, 256  # one bucket for every random graph: one compile per device count


def literal_simulate(graph, topo, placement, priority):
  """Section 4 rules 1-6 word for word, O(N^2 * D): checks the heap-based reference."""
  n, d = graph.num_nodes, topo.num_devices
  place = np.asarray(placement)[graph.colocation_root()]
  preds = [[] for _ in range(n)]
  succs = [[] for _ in range(n)]
  for u, v in zip(graph.senders, graph.receivers):
    preds[v].append(u)
    succs[u].append(v)
  committed = np.zeros(n, bool)
  start, finish = np.zeros(n), np.zeros(n)
  avail = {}
  free, chan = np.zeros(d), np.zeros(d)
  for _ in range(n):
    best = None
    for dev in range(d):
      known = [j for j in range(n) if not committed[j] and place[j] == dev and
               all(committed[i] for i in preds[j])]
      if not known:
        continue
      r = {j: max([avail[(i, dev)] for i in preds[j]], default=0.0) for j in known}
      s = max(free[dev], min(r.values()))
      cands = [j for j in known if r[j] <= s]
      cand = min(cands, key=lambda j: (-priority[j], j))
      if best is None or s < best[0]:
        best = (s, dev, cand)
    s, dev, op = best
    committed[op] = True
    start[op] = s
    finish[op] = s + (graph.cost[op] / topo.speed[dev] + topo.overhead[dev])
    free[dev] = finish[op]
    avail[(op, dev)] = finish[op]
    for e in sorted({place[v] for v in succs[op]} - {dev}):
      t0 = max(finish[op], chan[dev])
      avail[(op, e)] = chan[dev] = t0 + (topo.latency[dev, e] +
                                         graph.out_bytes[op] / topo.bandwidth[dev, e])
  return start, finish


def random_instance(seed, n, d, integer=True, tie_levels=2, zero_frac=0.2, coloc_frac=0.2):
  """A random DAG, topology and batch of 4 actions; integer times where `integer`."""
  rng = np.random.default_rng(seed)
  s, r = [], []
  for v in range(1, n):
    k = int(rng.integers(0, 4))
    for u in rng.choice(v, size=min(v, k), replace=False):
      s.append(int(u))
      r.append(v)
  if integer:
    speed = rng.choice([1.0, 2.0], d)
    cost = 2.0 * rng.integers(0, 6, n)  # even: cost / speed stays an integer
    out_bytes = 2.0 * rng.integers(0, 4, n)
    bw = rng.choice([1.0, 2.0], (d, d))
    lat = rng.integers(0, 3, (d, d)).astype(float)
    over = rng.integers(0, 2, d).astype(float)
  else:
    speed = rng.uniform(0.5, 2.0, d)
    cost = rng.uniform(0, 1e-3, n)
    out_bytes = rng.uniform(0, 1e6, n)
    bw = rng.uniform(1e8, 1e9, (d, d))
    lat = rng.uniform(0, 1e-5, (d, d))
    over = rng.uniform(0, 1e-5, d)
  cost[rng.random(n) < zero_frac] = 0.0
  coloc = np.where(rng.random(n) < coloc_frac, rng.integers(0, 3, n), -1)
  g = CompGraph(cost=cost, senders=s, receivers=r, out_bytes=out_bytes,
                param_bytes=rng.integers(0, 3, n), temp_bytes=rng.integers(0, 3, n),
                colocation=coloc)
  mem = rng.integers(2, 12, d).astype(float)
  topo = Topology.create(speed, over, mem, bw, lat)
  place = rng.integers(0, d, (4, n))
  prio = rng.integers(0, tie_levels, (4, n)).astype(float)
  return g, topo, place, prio


_jit_padded = jax.jit(simulate_padded)


def run_padded(g, topo, place, prio, chunk=2):
  pg = pad_graph(g, NP, EP, chunk=chunk)
  n = g.num_nodes
  pl = np.zeros((place.shape[0], NP), np.int32)
  pr = np.zeros((place.shape[0], NP))
  pl[:, :n], pr[:, :n] = place, prio
  res = _jit_padded(pg, topo, pl, pr)
  return jax.tree_util.tree_map(np.asarray, res)


def assert_same(res, b, ref, n, exact=True):
  check = np.testing.assert_array_equal if exact else (
      lambda a, c: np.testing.assert_allclose(a, c, rtol=1e-9, atol=0))
  check(res.start[b, :n], ref.start)
  check(res.finish[b, :n], ref.finish)
  check(res.makespan[b], ref.makespan)
  check(res.peak_memory[b], ref.peak_memory)
  assert bool(res.oom[b]) == ref.oom


def test_worked_example(diamond):
  g, topo, place, prio = diamond
  ref = reference_simulate(g, topo, place, prio)
  np.testing.assert_array_equal(ref.start, [0, 1, 2.5, 7])
  assert ref.makespan == 8
  np.testing.assert_array_equal(ref.peak_memory, [3, 2])
  res = simulate(g, topo, place, prio)
  np.testing.assert_array_equal(np.asarray(res.start[0]), [0, 1, 2.5, 7])
  np.testing.assert_array_equal(np.asarray(res.makespan), [8])
  np.testing.assert_array_equal(np.asarray(res.peak_memory[0]), [3, 2])
  assert not bool(res.oom[0])


@settings(max_examples=320, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 60), d=st.integers(1, 8),
       ties=st.sampled_from([1, 2, 5]), zero_frac=st.sampled_from([0.0, 0.3, 1.0]),
       coloc_frac=st.sampled_from([0.0, 0.3]))
def test_simulate_equals_reference_exactly(seed, n, d, ties, zero_frac, coloc_frac):
  g, topo, place, prio = random_instance(seed, n, d, True, ties, zero_frac, coloc_frac)
  res = run_padded(g, topo, place, prio)
  for b in range(place.shape[0]):
    assert_same(res, b, reference_simulate(g, topo, place[b], prio[b]), n)


_jit_segments = jax.jit(functools.partial(simulate_padded, peak_method="segments"))


@settings(max_examples=30, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 60), d=st.integers(1, 8),
       ties=st.sampled_from([1, 2, 5]), coloc_frac=st.sampled_from([0.0, 0.3]))
def test_peak_memory_by_segments_equals_reference_exactly(seed, n, d, ties, coloc_frac):
  """The accelerators' default peak pass (sort by device and time, cumulative sums), forced on
  the CPU: integer bytes sum exactly in any order, so peaks equal the reference's."""
  g, topo, place, prio = random_instance(seed, n, d, True, ties, 0.3, coloc_frac)
  pg = pad_graph(g, NP, EP, chunk=2)
  pl = np.zeros((place.shape[0], NP), np.int32)
  pr = np.zeros((place.shape[0], NP))
  pl[:, :n], pr[:, :n] = place, prio
  res = jax.tree_util.tree_map(np.asarray, _jit_segments(pg, topo, pl, pr))
  for b in range(place.shape[0]):
    assert_same(res, b, reference_simulate(g, topo, place[b], prio[b]), n)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 25), d=st.integers(1, 4),
       ties=st.sampled_from([1, 3]))
def test_reference_equals_literal_rules(seed, n, d, ties):
  for integer in (True, False):
    g, topo, place, prio = random_instance(seed, n, d, integer, ties)
    for b in range(2):
      ref = reference_simulate(g, topo, place[b], prio[b])
      start, finish = literal_simulate(g, topo, place[b], prio[b])
      np.testing.assert_array_equal(ref.start, start)
      np.testing.assert_array_equal(ref.finish, finish)


@pytest.mark.parametrize("chunk", [1, 3, 16])
def test_edge_chunk_does_not_change_results(chunk):
  for seed in range(3):
    g, topo, place, prio = random_instance(seed, 50, 3)
    res = run_padded(g, topo, place, prio, chunk=chunk)
    for b in range(4):
      assert_same(res, b, reference_simulate(g, topo, place[b], prio[b]), 50)


@pytest.mark.parametrize("d", [17, 40])
def test_many_devices_equal_reference_exactly(d):
  """Above events.UNROLL_DEVICES a send channel's back-to-back transfers are one lax.scan over
  the destinations (the unrolled additions made XLA's compile grow with D: 512 devices took
  228 s); the additions and their order are the same, so integer times stay exact."""
  from simulator import events
  assert d > events.UNROLL_DEVICES
  for seed in range(3):
    g, topo, place, prio = random_instance(seed, 40, d)
    res = run_padded(g, topo, place, prio)
    for b in range(4):
      assert_same(res, b, reference_simulate(g, topo, place[b], prio[b]), 40)


def test_scanned_transfers_equal_unrolled_bit_for_bit(monkeypatch):
  from simulator import events
  rng = np.random.default_rng(0)
  base = jnp.asarray(rng.uniform(0, 5, (3, 7)), jnp.float32)
  times = jnp.asarray(rng.uniform(0, 1, (3, 7, 30)), jnp.float32)
  mask = jnp.asarray(rng.random((3, 7, 30)) < 0.5)
  monkeypatch.setattr(events, "UNROLL_DEVICES", 64)
  unrolled = events.sequential_transfers(base, times, mask)
  monkeypatch.setattr(events, "UNROLL_DEVICES", 0)
  scanned = events.sequential_transfers(base, times, mask)
  for u, s in zip(unrolled, scanned):
    np.testing.assert_array_equal(np.asarray(u), np.asarray(s))


def test_x64_float_times_agree_to_1e9():
  with jax.enable_x64(True):
    for seed in range(40):
      n = 5 + seed
      g, topo, place, prio = random_instance(seed, n, 1 + seed % 6, integer=False)
      prio = prio + np.random.default_rng(seed).uniform(0, 1, prio.shape)
      res = run_padded(g, topo, place, prio)
      assert res.start.dtype == np.float64
      for b in range(4):
        assert_same(res, b, reference_simulate(g, topo, place[b], prio[b]), n, exact=False)


def test_float32_float_times_close():
  g, topo, place, prio = random_instance(7, 60, 4, integer=False)
  res = run_padded(g, topo, place, prio)
  for b in range(4):
    ref = reference_simulate(g, topo, place[b], prio[b])
    np.testing.assert_allclose(res.makespan[b], ref.makespan, rtol=1e-5)


def test_jit_equals_no_jit():
  g, topo, place, prio = random_instance(3, 7, 3)
  pg = pad_graph(g, 8, 16, chunk=2)
  pl = np.zeros((4, 8), np.int32)
  pr = np.zeros((4, 8))
  pl[:, :7], pr[:, :7] = place, prio
  jitted = jax.tree_util.tree_map(np.asarray, jax.jit(simulate_padded)(pg, topo, pl, pr))
  with jax.disable_jit():
    eager = jax.tree_util.tree_map(np.asarray, simulate_padded(pg, topo, pl, pr))
  for a, b in zip(jax.tree_util.tree_leaves(jitted), jax.tree_util.tree_leaves(eager)):
    np.testing.assert_array_equal(a, b)


def test_no_retrace_within_a_bucket():
  traced = chex.assert_max_traces(simulate_padded, n=1)
  fn = jax.jit(traced)
  for seed in range(4):  # different graphs, topologies and actions; same bucket and D
    g, topo, place, prio = random_instance(seed, 20 + seed, 3)
    pg = pad_graph(g, NP, EP, chunk=2)
    pl = np.zeros((4, NP), np.int32)
    pl[:, :g.num_nodes] = place
    pr = np.zeros((4, NP), np.float32)
    pr[:, :g.num_nodes] = prio
    fn(pg, topo, pl, pr).makespan.block_until_ready()
  chex.clear_trace_counter()


def test_public_simulate_reuses_its_compilation():
  g1, topo, place, prio = random_instance(11, 40, 3)
  # Another graph of the same bucket: other costs, sizes and a node less.
  g2 = CompGraph(cost=g1.cost[:39] + 1, senders=g1.senders[g1.receivers < 39],
                 receivers=g1.receivers[g1.receivers < 39], out_bytes=g1.out_bytes[:39] * 2)
  place2, prio2 = place[:, :39], prio[:, :39] + 1
  sim = __import__("sys").modules["simulator.simulate"]
  assert sim.padded(g1).chunk == sim.padded(g2).chunk
  simulate(g1, topo, place, prio)
  before = sim._simulate_jit._cache_size()
  simulate(g2, topo, place2, prio2)
  simulate(g2, topo, place2[:3], prio2[:3])  # B=3 pads to the same batch bucket of 4
  assert sim._simulate_jit._cache_size() == before


def test_a_near_tie_of_edge_chunks_reuses_the_bucket_compilation(monkeypatch):
  # two graphs of one bucket whose best edge chunks (4 and 2) cost within 2% of each other:
  # the second compiled every program of the bucket again (simulator, searches, policies)
  from simulator import padding  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(padding, "_BUCKET_CHUNKS", {}, raising=False)
  sim = __import__("sys").modules["simulator.simulate"]
  g0, g1 = (load_graph(f"layered:n=60,width=8,seed={s}") for s in (0, 1))
  assert [padding.choose_chunk(g.out_degree()) for g in (g0, g1)] == [4, 2]
  topo = preset("nvlink4")
  place = np.random.default_rng(0).integers(0, 4, (4, 60))
  prio = np.random.default_rng(1).random((4, 60))
  simulate(g0, topo, place, prio)
  before = sim._simulate_jit._cache_size()
  got = simulate(g1, topo, place, prio)
  assert sim.padded(g1).chunk == 4 and sim._simulate_jit._cache_size() == before
  own = sim.pad_to(load_graph("layered:n=60,width=8,seed=1"), chunk=2)  # its own best chunk
  np.testing.assert_array_equal(np.asarray(got.makespan),
                                np.asarray(simulate(own, topo, place, prio).makespan))
  # out-degrees for which chunk 4 costs far more (43%) than the best (1) get the best
  assert padding.choose_chunk(np.ones(50, int), sizes=(64, 128)) == 1
  assert padding._BUCKET_CHUNKS == {(64, 128): [4, 1]}


def test_commit_first_order_is_bit_identical():
  """The loop iteration's two orders (`commit_first`, the accelerators' default, and the CPU's
  edges first) give every field bit for bit, on float times with ties, plain (an edge chunk of
  1: ops with several consumers hold the loop for several iterations) and fused: the CPU
  order is the one the differential tests check against the reference."""
  from tests.test_fusion import random_fusion_instance  # pylint: disable=g-import-not-at-top
  sim_jit = jax.jit(simulate_padded, static_argnames=("commit_first", "block"))
  cases = []
  for seed in range(3):
    g, topo, place, prio = random_instance(seed, 50 + 20 * seed, 2 + seed, integer=False)
    cases.append((g, topo, place, np.round(prio, 1), None))  # rounded: priority ties
  fg, ftopo, fplace, fprio, fuse = random_fusion_instance(5, 30, 3)
  cases.append((fg, ftopo, fplace, fprio, fuse))
  for graph, t, pl_, pr_, fu in cases:
    pg = pad_graph(graph, chunk=1 if fu is None else None, fusion=fu is not None)
    np_, b = pg.num_nodes_padded, pl_.shape[0]
    pl = np.zeros((b, np_), np.int32)
    pr = np.zeros((b, np_), np.float32)
    pl[:, :graph.num_nodes], pr[:, :graph.num_nodes] = pl_, pr_
    extra = () if fu is None else (np.pad(fu, ((0, 0), (0, np_ - fu.shape[1]))),)
    out = [jax.tree_util.tree_map(np.asarray, sim_jit(pg, t, pl, pr, *extra, block=0,
                                                      commit_first=first))
           for first in (False, True)]
    for name in ("makespan", "start", "finish", "peak_memory", "oom"):
      np.testing.assert_array_equal(getattr(out[1], name), getattr(out[0], name),
                                    err_msg=name)


def test_small_batches_run_on_the_host_beside_an_accelerator(monkeypatch):
  """With an accelerator as the default backend (faked here), `simulate` runs a batch of at
  most HOST_BATCH actions on the host CPU with the CPU's loop settings (sub-batches, the
  sequential peak pass): the same results as a CPU run, returned uncommitted. Larger batches
  stay on the default backend. tests/test_runtime.py checks the split over several CPUs."""
  from simulator import sharding  # pylint: disable=g-import-not-at-top
  sim = __import__("sys").modules["simulator.simulate"]
  g, topo, place, prio = random_instance(4, 60, 3)
  plain = simulate(g, topo, place, prio, fuse=None)
  calls = []
  jitted = sim._simulate_jit
  monkeypatch.setattr(sim, "_simulate_jit", lambda *a, **k: calls.append(k) or jitted(*a, **k))
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  routed = simulate(g, topo, place, prio)
  assert calls == [{"platform": "cpu"}]
  for name in ("makespan", "start", "finish", "peak_memory", "oom"):
    np.testing.assert_array_equal(np.asarray(getattr(routed, name)),
                                  np.asarray(getattr(plain, name)), err_msg=name)
  assert not routed.makespan.committed
  assert sharding.host_devices(sharding.HOST_BATCH) == jax.local_devices(backend="cpu")
  assert sharding.host_devices(sharding.HOST_BATCH + 1) is None
  assert sharding.host_devices(1, backend="cpu") is None


def test_sub_batches_are_bit_identical():
  """simulate_padded(block=k): the batch in sequential sub-batches of at most k (padded with
  copies of row 0), each with its own memory peaks, gives every field bit for bit as one batch
  does, plain and fused (float32 times, large byte counts: any change in the order of the float
  sums would show)."""
  from tests.test_fusion import random_fusion_instance  # pylint: disable=g-import-not-at-top
  from simulator.simulate import block_size  # pylint: disable=g-import-not-at-top
  g = load_graph("layered:n=120,width=11,seed=3")
  topo = preset("nvlink4")
  rng = np.random.default_rng(0)
  place, prio = rng.integers(0, 4, (10, g.num_nodes)), rng.random((10, g.num_nodes))
  fg, ftopo, fplace, fprio, fuse = random_fusion_instance(7, 30, 3)
  fuse = np.concatenate([fuse, fuse, fuse[:2]])
  fplace, fprio = np.concatenate([fplace] * 2 + [fplace[:2]]), np.concatenate(
      [fprio] * 2 + [fprio[:2]])
  for graph, t, pl_, pr_, fu in ((g, topo, place, prio, None),
                                 (fg, ftopo, fplace, fprio, fuse)):
    pg = pad_graph(graph, fusion=fu is not None)
    np_ = pg.num_nodes_padded
    pl = np.zeros((10, np_), np.int32)
    pr = np.zeros((10, np_), np.float32)
    pl[:, :graph.num_nodes], pr[:, :graph.num_nodes] = pl_, pr_
    fu = None if fu is None else np.pad(fu, ((0, 0), (0, np_ - fu.shape[1])))
    args = (pg, t, pl, pr) + (() if fu is None else (fu,))
    sim_jit = jax.jit(simulate_padded, static_argnames=("block",))
    whole = jax.tree_util.tree_map(np.asarray, sim_jit(*args, block=0))
    for block in (3, 4):  # 4 x 3 rows (2 padded); 3 x 4 (2 padded)
      assert block_size(block, 10) == block
      part = jax.tree_util.tree_map(np.asarray, sim_jit(*args, block=block))
      for name in ("makespan", "start", "finish", "peak_memory", "oom"):
        np.testing.assert_array_equal(getattr(part, name), getattr(whole, name), err_msg=name)
  assert block_size(None, 1024, 1024, 8) == 64 or jax.default_backend() != "cpu"
  assert block_size(64, 100) == 50 and block_size(0, 100) == 0 and block_size(200, 100) == 0
  with pytest.raises(ValueError, match="block must be >= 0"):
    block_size(-1, 10)


def test_vmap_over_topologies():
  g, topo, place, prio = random_instance(5, 30, 3)
  topo2 = Topology.create(topo.speed * 2, topo.overhead, topo.mem_capacity, topo.bandwidth,
                          topo.latency)
  stacked = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), topo, topo2)
  pg = pad_graph(g, 32, 128, chunk=2)
  pl = np.zeros((4, 32), np.int32)
  pl[:, :30] = place
  pr = np.zeros((4, 32))
  pr[:, :30] = prio
  res = jax.vmap(simulate_padded, in_axes=(None, 0, None, None))(pg, stacked, pl, pr)
  for t, tp in enumerate((topo, topo2)):
    for b in range(4):
      ref = reference_simulate(g, tp, place[b], prio[b])
      np.testing.assert_array_equal(np.asarray(res.makespan[t, b]), ref.makespan)
      np.testing.assert_array_equal(np.asarray(res.peak_memory[t, b]), ref.peak_memory)


def test_single_op_and_single_device():
  g = CompGraph(cost=[3.0], senders=[], receivers=[], out_bytes=[5.0], temp_bytes=[2.0],
                param_bytes=[1.0])
  topo = Topology.uniform(1, bandwidth=1.0, overhead=1.0)
  res = simulate(g, topo, [0], [0.0])
  assert float(res.makespan[0]) == 4.0
  # param 1 + output kept until makespan 5 + temp 2
  np.testing.assert_array_equal(np.asarray(res.peak_memory[0]), [8.0])


def test_oom_flag():
  # Two independent ops whose outputs live until the makespan: 20 bytes on one device.
  g = CompGraph(cost=[1.0, 1.0], senders=[], receivers=[], out_bytes=[10.0, 10.0])
  topo = Topology.uniform(2, bandwidth=1e9, mem_capacity=15.0)
  res = simulate(g, topo, [[0, 0], [0, 1]], [[0, 0], [0, 0]])
  np.testing.assert_array_equal(np.asarray(res.oom), [True, False])


@pytest.mark.parametrize("method", ["scan", "segments"])
def test_peak_sums_do_not_drift_in_float32(method):
  """A 2**26-byte output live all step, then 100 outputs of 4 bytes each: in a float32 running
  sum every + 4 rounds away (ulp 8 at 2**26, ties to even), so the peak read 2**26 and a
  2**26 + 200 capacity fit where the exact peak, 2**26 + 400, does not. The sums are float64."""
  n = 101
  g = CompGraph(cost=np.ones(n), senders=[], receivers=[],
                out_bytes=np.r_[2.0 ** 26, np.full(n - 1, 4.0)])
  topo = Topology.uniform(1, bandwidth=1e9, mem_capacity=2.0 ** 26 + 200)
  ref = reference_simulate(g, topo, np.zeros(n, int), -np.arange(n, dtype=float))
  assert ref.peak_memory[0] == 2.0 ** 26 + 400 and ref.oom
  pg = pad_graph(g)
  np_ = pg.num_nodes_padded
  pl, pr = np.zeros((2, np_), np.int32), np.zeros((2, np_))
  pr[:, :n] = -np.arange(n)
  res = jax.jit(functools.partial(simulate_padded, peak_method=method))(pg, topo, pl, pr)
  assert float(res.peak_memory[0, 0]) == 2.0 ** 26 + 400 and bool(res.oom[0])


def test_oom_verdicts_agree_within_float32_rounding():
  """A 1e8 + 1 byte peak on a 1e8 byte device: float32 cannot tell the two apart (ulp 8), so
  both simulators say it fits (design.md section 4, Precision); the reference's own peak stays
  exact. A capacity one float32 step lower is OOM in both."""
  g = CompGraph(cost=[1.0], senders=[], receivers=[], out_bytes=[1e8 + 1])
  for cap, oom in ((1e8, False), (1e8 - 8, True)):
    topo = Topology.uniform(1, bandwidth=1e9, mem_capacity=cap)
    ref = reference_simulate(g, topo, [0], [0.0])
    assert ref.peak_memory[0] == 1e8 + 1
    assert ref.oom == oom and bool(simulate(g, topo, [0], [0.0]).oom[0]) == oom


@pytest.mark.parametrize("placement,priority,match", [
    ([0, 0, 2, 0], [0, 0, 0, 0], "not a device id"),
    ([0, 0, -1, 0], [0, 0, 0, 0], "not a device id"),
    ([0, 0, 1], [0, 0, 0], "must both have shape"),
    ([0, 0, 1, 0], [0, 0, 0], "must both have shape"),
    ([0, 0, 1, 0], [0, np.nan, 0, 0], "NaN"),
    ([0, 0.5, 1, 0], [0, 0, 0, 0], r"placement\[1\] = 0.5 is not an integer device id"),
    ([0, 0, np.nan, 0], [0, 0, 0, 0], r"placement\[2\] = nan is not an integer"),
    ([0, 0, 1, 0], [1e39, 2e39, 0, 0], r"priority\[0\] = 1e\+39 is beyond float32's range"),
    ([0, 0, 1, 0], [0, 0, -1e39, 0], r"priority\[2\] = -1e\+39"),
])
def test_bad_actions_raise(diamond, placement, priority, match):
  g, topo, _, _ = diamond
  with pytest.raises(ValueError, match=match):
    simulate(g, topo, placement, priority)
  with pytest.raises(ValueError, match=match):
    reference_simulate(g, topo, placement, priority)


@pytest.mark.parametrize("x64", [False, True])
def test_rank_order_is_a_stable_sort_with_tie_keys(x64):
  from simulator.simulate import rank_order
  rng = np.random.default_rng(0)
  x = rng.choice([-np.inf, -2.5, -1e-30, -0.0, 0.0, 1e-30, 3.0, 3.0000002, np.inf], (5, 300))
  with jax.enable_x64(x64):
    dtype = np.float64 if x64 else np.float32
    xs = jnp.asarray(x.astype(dtype))
    order, key = jax.jit(rank_order)(xs)
    order, key = np.asarray(order), np.asarray(key)
  expect = np.argsort(x.astype(dtype) + 0.0, axis=-1, kind="stable")
  np.testing.assert_array_equal(order, expect)
  vals = np.take_along_axis(x.astype(dtype) + 0.0, order, -1)
  # Neighbouring keys are equal exactly where the sorted values are equal (-0.0 == 0.0).
  np.testing.assert_array_equal(key[:, 1:] == key[:, :-1], vals[:, 1:] == vals[:, :-1])


def test_infinite_priorities_are_ranked_alike_by_both_simulators(diamond):
  """+-inf is a priority in float32 and float64 alike (only finite values beyond float32's
  range are refused): both simulators run the +inf op first and the -inf op last."""
  g, topo, _, _ = diamond
  placement, priority = [0, 0, 0, 0], [0.0, -np.inf, np.inf, 0.0]
  res = simulate(g, topo, placement, priority)
  ref = reference_simulate(g, topo, placement, priority)
  np.testing.assert_allclose(np.asarray(res.start[0]), ref.start)
  assert ref.start[2] < ref.start[1]


def test_signed_zero_priorities_tie():
  """-0.0 and 0.0 are the same priority: the lowest op id runs first (rule 5)."""
  g = CompGraph(cost=[1.0, 1.0, 1.0], senders=[], receivers=[])
  topo = Topology.uniform(1, bandwidth=1.0)
  prio = np.array([-0.0, 0.0, -0.0])
  ref = reference_simulate(g, topo, [0, 0, 0], prio)
  res = simulate(g, topo, [0, 0, 0], prio)
  np.testing.assert_array_equal(ref.start, [0, 1, 2])
  np.testing.assert_array_equal(np.asarray(res.start[0]), ref.start)
