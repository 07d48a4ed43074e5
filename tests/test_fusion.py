"""Fusion (design.md section 4.1): rules F1-F4, the quotient graph, and jitted == reference."""

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import CompGraph, Topology, fusion, ops, reference_simulate, simulate
from simulator.costmodel import device_spec
from simulator.costmodel.roofline import cost_reference
from simulator.costref import CostReference
from simulator.padding import pad_graph
from simulator.simulate import simulate_padded

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

NP, EP = 64, 256  # one bucket for every random graph: one compile per device count
REF = cost_reference(device_spec("v100"))
T = {name: ops.op_type_id(name) for name in ("dot", "conv", "elementwise", "activation",
                                            "reduce", "custom_call", "while", "reshape",
                                            "transpose")}


def chain_graph(types, cost=None, flops=None, nbytes=None, out_bytes=None, **kw):
  """a0 -> a1 -> ... with the given op type names (a worked-example helper)."""
  n = len(types)
  one = np.ones(n)
  return CompGraph(cost=one if cost is None else cost, senders=range(n - 1),
                   receivers=range(1, n), out_bytes=one if out_bytes is None else out_bytes,
                   flops=one if flops is None else flops,
                   bytes_accessed=3 * one if nbytes is None else nbytes,
                   op_type=[T[t] for t in types], reference=REF, name="chain",
                   node_names=[f"n{i}" for i in range(n)], **kw)


def random_fusion_instance(seed, n, d):
  """A random DAG with integer flops / bytes / costs, fusible and unfusible op types, a
  topology, and 4 actions with random fuse masks (dense, so that many requests are legal)."""
  rng = np.random.default_rng(seed)
  s, r = [], []
  for v in range(1, n):
    k = int(rng.integers(0, 3))
    preds = set(rng.choice(v, size=min(v, k), replace=False).tolist())
    if rng.random() < 0.5:
      preds.add(v - 1)  # chains: single-consumer producers, so long groups
    for u in sorted(preds):
      s.append(int(u))
      r.append(v)
  kinds = list(T.values())
  weights = np.array([2, 1, 6, 4, 2, 1, 1, 1, 1], float)
  op_type = rng.choice(kinds, n, p=weights / weights.sum())
  back = rng.random(n) < 0.2
  op_type = np.where(back, op_type + ops.BACKWARD_OFFSET, op_type)
  cost = rng.integers(0, 6, n).astype(float)
  coloc = np.where(rng.random(n) < 0.1, rng.integers(0, 2, n), -1)
  g = CompGraph(cost=cost, senders=s, receivers=r, out_bytes=rng.integers(0, 5, n),
                param_bytes=rng.integers(0, 3, n), temp_bytes=rng.integers(0, 3, n),
                flops=rng.integers(0, 8, n) * 1e9, bytes_accessed=rng.integers(0, 20, n) * 1e6,
                op_type=op_type, colocation=coloc, reference=REF, name=f"rand{seed}")
  topo = Topology.create(rng.choice([1.0, 2.0], d), rng.integers(0, 2, d).astype(float),
                         rng.integers(4, 16, d).astype(float), rng.choice([1.0, 2.0], (d, d)),
                         rng.integers(0, 3, (d, d)).astype(float))
  place = rng.integers(0, d, (4, n))
  place[0] = 0  # one single-device action: the most fusion
  prio = rng.integers(0, 3, (4, n)).astype(float)
  fuse = rng.random((4, n)) < rng.choice([0.5, 0.9, 1.0])
  return g, topo, place, prio, fuse


_jit = jax.jit(simulate_padded)


def run_padded(g, topo, place, prio, fuse):
  pg = pad_graph(g, NP, EP, chunk=2, fusion=True)
  n, b = g.num_nodes, place.shape[0]
  pl = np.zeros((b, NP), np.int32)
  pr = np.zeros((b, NP))
  fu = np.zeros((b, NP), bool)
  pl[:, :n], pr[:, :n], fu[:, :n] = place, prio, fuse
  return jax.tree_util.tree_map(np.asarray, _jit(pg, topo, pl, pr, fu))


# ---------------------------------------------------------------- rules F1-F3
def test_worked_example_of_the_design_doc():
  """design.md 4.1: dot -> add -> relu -> reduce on one device of a toy roofline (4 FLOP/s,
  2 B/s, 1 s per launch, efficiencies 1), every op asking to fuse."""
  from simulator.costmodel.opclass import OP_CLASSES
  toy = CostReference(name="toy", peak_flops=4, mem_bandwidth=2, launch_overhead=1,
                      classes=OP_CLASSES, flops_eff=np.ones(len(OP_CLASSES)),
                      bytes_eff=np.ones(len(OP_CLASSES)),
                      overhead_ratio=np.ones(len(OP_CLASSES)),
                      memory_only=np.zeros(len(OP_CLASSES), bool))
  g = chain_graph(["dot", "elementwise", "activation", "reduce"], cost=[4, 4, 3, 2.5],
                  flops=[8, 2, 2, 2], nbytes=[6, 6, 4, 3], out_bytes=[2, 2, 2, 1])
  g = g.replace(reference=toy)
  topo = Topology.uniform(1, bandwidth=1.0)
  place, prio = np.zeros(4, int), np.zeros(4)
  plain = reference_simulate(g, topo, place, prio)
  assert plain.makespan == 13.5 and plain.peak_memory[0] == 4
  fg = fusion.fuse_graph(g, place, np.ones(4, bool))
  assert fg.legal.tolist() == [True, True, True, False]  # the sink has no consumer: root
  assert fg.root.tolist() == [3, 3, 3, 3]
  q = fg.graph
  assert q.num_nodes == 1 and q.node_names == ("n0+n1+n2+n3",)
  assert (q.flops[0], q.bytes_accessed[0]) == (14, 19 - 2 * 6)
  assert q.cost[0] == max(14 / 4, 7 / 2) + 1 == 4.5
  fused = reference_simulate(g, topo, place, prio, fuse=np.ones(4, bool))
  assert fused.makespan == 4.5 and fused.peak_memory[0] == 1
  assert fused.start.tolist() == [0] * 4 and fused.finish.tolist() == [4.5] * 4
  res = simulate(g, topo, place, prio, fuse=np.ones(4, bool))
  assert float(res.makespan[0]) == 4.5 and float(res.peak_memory[0, 0]) == 1


def test_heavy_limit_decided_in_topological_order():
  # dot -> relu -> dot -> add: the second dot cannot take the first one's group.
  g = chain_graph(["dot", "activation", "dot", "elementwise"])
  legal, root = fusion.fusion_groups(g, np.zeros(4, int), np.ones(4, bool))
  assert legal.tolist() == [True, False, True, False]
  assert root.tolist() == [1, 1, 3, 3]
  # Two dots feeding one add: the first in topological order fuses, the other does not.
  g2 = CompGraph(cost=np.ones(3), senders=[0, 1], receivers=[2, 2], flops=np.ones(3),
                 op_type=[T["dot"], T["dot"], T["elementwise"]], reference=REF)
  legal, _ = fusion.fusion_groups(g2, np.zeros(3, int), np.ones(3, bool))
  assert legal.tolist() == [True, False, False]


def test_illegal_requests_are_ignored():
  g = chain_graph(["elementwise", "custom_call", "elementwise", "elementwise"])
  legal, _ = fusion.fusion_groups(g, np.zeros(4, int), np.ones(4, bool))
  assert legal.tolist() == [False, False, True, False]  # into / out of the custom call: no
  legal, _ = fusion.fusion_groups(g, np.array([0, 0, 1, 0]), np.ones(4, bool))
  assert legal.tolist() == [False, False, False, False]  # across devices: no
  # An op with two consumers cannot fuse (diamond a -> b, a -> c, b -> d, c -> d).
  d = CompGraph(cost=np.ones(4), senders=[0, 0, 1, 2], receivers=[1, 2, 3, 3],
                flops=np.ones(4), op_type=[T["elementwise"]] * 4, reference=REF)
  legal, root = fusion.fusion_groups(d, np.zeros(4, int), np.ones(4, bool))
  assert legal.tolist() == [False, True, True, False] and root.tolist() == [0, 3, 3, 3]


def test_no_fusion_is_the_unfused_simulator_exactly():
  g, topo, place, prio, _ = random_fusion_instance(3, 30, 3)
  base = simulate(g, topo, place, prio)
  res = simulate(g, topo, place, prio, fuse=np.zeros(place.shape, bool))
  for f in ("makespan", "start", "finish", "peak_memory", "oom"):
    np.testing.assert_array_equal(np.asarray(getattr(res, f)), np.asarray(getattr(base, f)))


def test_fusion_lowers_memory_and_launches():
  g = chain_graph(["elementwise"] * 6, cost=np.full(6, 1e-3), flops=np.full(6, 1e6),
                  nbytes=np.full(6, 8e6), out_bytes=np.full(6, 4e6))
  topo = Topology.uniform(1, bandwidth=1e9)
  place, prio = np.zeros(6, int), np.zeros(6)
  plain = reference_simulate(g, topo, place, prio)
  fused = reference_simulate(g, topo, place, prio, fuse=np.ones(6, bool))
  assert fused.peak_memory[0] == 4e6 < plain.peak_memory[0]
  assert fused.makespan < plain.makespan
  assert np.all(fused.start == 0) and np.all(fused.finish == fused.makespan)


def test_bad_input_is_a_clear_value_error():
  g = chain_graph(["elementwise"] * 3)
  topo = Topology.uniform(1, bandwidth=1e9)
  bare = g.replace(reference=None)
  with pytest.raises(ValueError, match="no cost reference"):
    simulate(bare, topo, np.zeros(3, int), np.zeros(3), fuse=np.ones(3, bool))
  with pytest.raises(ValueError, match="no flops and no bytes"):
    simulate(g.replace(flops=np.zeros(3), bytes_accessed=np.zeros(3)), topo, np.zeros(3, int),
             np.zeros(3), fuse=np.ones(3, bool))
  with pytest.raises(ValueError, match="fuse has shape"):
    simulate(g, topo, np.zeros(3, int), np.zeros(3), fuse=np.ones(4, bool))
  with pytest.raises(ValueError, match="fuse has shape"):
    reference_simulate(g, topo, np.zeros(3, int), np.zeros(3), fuse=np.ones(2, bool))


def test_reference_survives_save_and_load(tmp_path):
  g = chain_graph(["dot", "elementwise"])
  path = str(tmp_path / "g.npz")
  g.save(path)
  back = CompGraph.load(path)
  assert back.reference == g.reference
  assert CompGraph(cost=[1.0], senders=[], receivers=[]).reference is None
  # malformed reference arrays name themselves (a 2-D name or numeric classes were read as
  # their str(), a memory_only of 0.5 as True, 2 scalars as "not enough values to unpack")
  with np.load(path) as data:
    arrays = dict(data)
  for key, bad, match in (("ref_name", np.array(["a", "b"]), "'ref_name' must be one string"),
                          ("ref_classes", np.arange(len(g.reference.classes)), "'ref_classes'"),
                          ("ref_scalars", np.array([1.0, 2.0]), "'ref_scalars' must be 3"),
                          ("ref_tables", np.vstack([arrays["ref_tables"][:3],
                                                    np.full(len(g.reference.classes), 0.5)]),
                           "memory_only")):
    np.savez(path, **dict(arrays, **{key: bad}))
    with pytest.raises(ValueError, match=match):
      CompGraph.load(path)


def test_one_compile_serves_every_fuse_mask():
  g, topo, place, prio, fuse = random_fusion_instance(5, 20, 2)
  simulate(g, topo, place, prio, fuse=fuse)
  from simulator.simulate import _simulate_jit
  size = _simulate_jit._cache_size()
  for seed in range(3):
    mask = np.random.default_rng(seed).random(place.shape) < 0.5
    simulate(g, topo, place, prio, fuse=mask)
  assert _simulate_jit._cache_size() == size


# ---------------------------------------------------------------- jitted == reference
@settings(max_examples=300, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 40), d=st.integers(1, 3))
def test_jitted_equals_reference_on_the_quotient_graph(seed, n, d):
  """At least 300 random DAGs x 4 actions: jitted fused simulation == the reference simulator
  run on the host-built quotient graph, exactly (x64: every sum here is exact)."""
  g, topo, place, prio, fuse = random_fusion_instance(seed, n, d)
  with jax.enable_x64(True):
    res = run_padded(g, topo, place, prio, fuse)
  for b in range(place.shape[0]):
    fg = fusion.fuse_graph(g, place[b], fuse[b])
    ref = reference_simulate(fg.graph, topo, fg.placement, prio[b][fg.roots])
    np.testing.assert_array_equal(res.start[b, :n], ref.start[fg.group])
    np.testing.assert_array_equal(res.finish[b, :n], ref.finish[fg.group])
    np.testing.assert_array_equal(res.makespan[b], ref.makespan)
    np.testing.assert_array_equal(res.peak_memory[b], ref.peak_memory)
    assert bool(res.oom[b]) == ref.oom


def test_float32_agrees_with_the_reference_closely():
  g, topo, place, prio, fuse = random_fusion_instance(11, 40, 3)
  res = simulate(g, topo, place, prio, fuse=fuse)
  for b in range(place.shape[0]):
    ref = reference_simulate(g, topo, place[b], prio[b], fuse=fuse[b])
    np.testing.assert_allclose(np.asarray(res.finish[b]), ref.finish, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(res.peak_memory[b]), ref.peak_memory, rtol=1e-6)


def test_anchor_is_the_first_class_in_xla_hero_order():
  """F4: a transpose-led group is priced by the transpose's class (memory only: its flops term
  is 0), a group holding a dot by the dot's, whichever member costs most."""
  t = fusion.node_tables(chain_graph(["transpose", "elementwise", "dot", "elementwise"]))
  ranks = t.anchor_rank.tolist()
  assert ranks[2] < ranks[0] < ranks[1]  # dot before transpose before elementwise
  assert np.isinf(t.rate_flops[0]) and np.isfinite(t.rate_flops[1])
  g = chain_graph(["transpose", "elementwise"], cost=[1e-6, 5e-6], flops=[0, 4e12],
                  nbytes=[3e6, 3e6], out_bytes=[1e6, 1e6])
  fg = fusion.fuse_graph(g, np.zeros(2, int), np.ones(2, bool))
  tt = fusion.node_tables(g)
  assert fg.graph.cost[0] == 4e6 / tt.rate_bytes[0] + tt.overhead[0]  # flops hidden


@pytest.mark.parametrize("seed", range(6))
def test_the_fusion_relaxation_bounds_every_fused_action(seed):
  """`objectives.fusion_relaxation`'s bounds hold for fused answers, which beat the unfused
  graph's bounds (a fused method's gap was negative), on random graphs and fuse masks."""
  from go_jax import objectives
  g, topo, place, prio, fuse = random_fusion_instance(seed, 30, 2)
  relaxed = objectives.fusion_relaxation(g, topo)
  bound = objectives.makespan_lower_bound(*relaxed)["bound"]
  memory = objectives.memory_lower_bound(*relaxed)["bound"]
  for b in range(place.shape[0]):
    for mask in (fuse[b], np.ones(g.num_nodes, bool), np.zeros(g.num_nodes, bool)):
      res = reference_simulate(g, topo, place[b], prio[b], fuse=mask)
      assert res.makespan >= bound * (1 - 1e-9), (b, res.makespan, bound)
      assert res.peak_memory.max() >= memory * (1 - 1e-9)
  assert bound > 0


def test_fused_groups_beyond_the_float32_range_are_refused():
  """A group's roofline can cost far more than its members (here 1 s each): the time-range
  check bounds a fused action with what its groups can cost (the jitted simulator returned an
  inf makespan and an op that never ran), and a graph whose groups could hold a value above
  MAX_VALUE cannot be fused by either simulator (the reference failed on its quotient)."""
  from simulator.costmodel.opclass import OP_CLASSES
  c = len(OP_CLASSES)
  toy = CostReference(name="toy", peak_flops=1, mem_bandwidth=1, launch_overhead=0,
                      classes=OP_CLASSES, flops_eff=np.ones(c), bytes_eff=np.ones(c),
                      overhead_ratio=np.ones(c), memory_only=np.zeros(c, bool))
  g = chain_graph(["elementwise"] * 3, cost=np.ones(3), flops=[1e29, 1e29, 0],
                  nbytes=np.ones(3)).replace(reference=toy)
  slow = Topology.uniform(2, bandwidth=1.0, speed=1e-10)
  place, prio, fuse = np.array([0, 0, 1]), np.zeros(3), np.array([True, False, False])
  assert reference_simulate(g, slow, place, prio, fuse=fuse).makespan == 2e39  # float64
  simulate(g, slow, place, prio)  # unfused: 3e10 s at most
  with pytest.raises(ValueError, match="event times can reach 2e"):
    simulate(g, slow, place, prio, fuse=fuse)
  big = g.replace(flops=np.array([1e30, 1e30, 0]))  # each op fine, a group of two 2e30 s
  topo = Topology.uniform(2, bandwidth=1.0)
  for run in (lambda: fusion.fuse_graph(big, place, fuse),
              lambda: reference_simulate(big, topo, place, prio, fuse=fuse),
              lambda: simulate(big, topo, place, prio, fuse=fuse)):
    with pytest.raises(ValueError, match="cannot be fused: a fused group's cost could reach"):
      run()
  assert reference_simulate(big, topo, place, prio).makespan == 4.0  # 1 s each, 1 s transfer
