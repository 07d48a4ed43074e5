"""Operator partitioning (docs/design.md section 4.2): spaces, expansion, searches, methods."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from go_jax import methods
from go_jax.methods import partition_search as search
from go_jax.methods import partitioning
from simulator import CompGraph, Topology
from simulator import partition as pt
from simulator.partition import P, R, OpSpace, Option, StrategySpace, generic_space, programs, split
from simulator.reference import reference_simulate
from simulator.sources import load_graph

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py


def _three_ops():
  """The worked example of design.md 4.2: a -> b -> c, k = 2."""
  g = CompGraph(cost=[2.0, 4.0, 1.0], senders=[0, 1], receivers=[1, 2],
                out_bytes=[64.0, 64.0, 64.0], param_bytes=[0.0, 32.0, 0.0],
                flops=[8.0, 16.0, 4.0], node_names=["a", "b", "c"])
  ops = (
      OpSpace((), (), (), (4, 4), (Option(R, (), ()), Option(split(0), (), ()))),
      OpSpace((0,), (64.0,), (32.0,), (4, 4), (
          Option(R, (R,), (R,)), Option(split(0), (split(0),), (R,)),
          Option(split(1), (R,), (split(1),)), Option(P, (split(1),), (split(0),))), "dot"),
      OpSpace((1,), (64.0,), (), (4, 4), (
          Option(R, (R,), ()), Option(split(0), (split(0),), ()),
          Option(split(1), (split(1),), ()))),
  )
  return g, StrategySpace(2, ops, (0, 0, 0), np.array([64.0, 64.0, 64.0]))


def test_worked_example_of_the_design_doc():
  g, space = _three_ops()
  strategy = [1, 3, 1]  # a split on dim 0; b contracts over dim 1 (partial); c split on dim 0
  assert pt.comm_bytes(space, strategy) == 96.0  # all-to-all 32 + reduce-scatter 64
  e = pt.expand(g, space, strategy)
  assert e.graph.num_nodes == 12 and e.comm_bytes == 96.0
  assert list(e.graph.cost[:6]) == [1.0, 1.0, 2.0, 2.0, 0.5, 0.5]
  assert e.graph.param_bytes.sum() == 32.0  # b's weight split in two
  topo = Topology.uniform(2, bandwidth=16.0, latency=0.0)
  place = e.placement()
  ref = reference_simulate(e.graph, topo, place, np.zeros(e.graph.num_nodes))
  assert ref.makespan == pytest.approx(6.5)
  best = search.brute_force(g, space)
  assert best.comm_bytes == 0.0  # everything split on dim 0 moves nothing
  assert search.dp(g, space).comm_bytes == 0.0


def test_degree_one_is_the_identity():
  g, space = _three_ops()
  one = StrategySpace(1, space.ops, space.batch_dims, space.out_bytes)
  e = pt.expand(g, one, [0, 0, 0])
  assert e.graph is g and e.comm_bytes == 0.0 and not e.placement().any()


def _mlp_program():
  def step(w1, w2, x, y):
    def loss(w1, w2):
      return jnp.mean((jnp.tanh(x @ w1) @ w2 - y) ** 2)
    g1, g2 = jax.grad(loss, (0, 1))(w1, w2)
    return w1 - 0.1 * g1, w2 - 0.1 * g2
  f32 = jnp.float32
  args = (jax.ShapeDtypeStruct((16, 32), f32), jax.ShapeDtypeStruct((32, 8), f32),
          jax.ShapeDtypeStruct((8, 16), f32), jax.ShapeDtypeStruct((8, 8), f32))
  return programs.program_graph(step, *args, name="mlp", batch_parameters=2)


def test_expansion_adds_up_on_a_jax_training_step():
  g = _mlp_program()
  space = programs.space_for(g, 4)
  assert any(o.kind == "dot" and len(o.options) == 4 for o in space.ops)
  rng = np.random.default_rng(0)
  for _ in range(3):
    s = rng.integers(0, space.num_options())
    e = pt.expand(g, space, s)  # a CompGraph: validated acyclic
    assert e.comm_bytes == pytest.approx(pt.comm_bytes(space, s))
    shards = e.role == pt.SHARD
    per_op = np.bincount(e.origin[shards], weights=e.graph.flops[shards], minlength=g.num_nodes)
    split_ = np.array([space.ops[v].options[s[v]].split for v in range(g.num_nodes)])
    np.testing.assert_allclose(per_op, np.where(split_, 1, 4) * g.flops)
    out = np.bincount(e.origin[shards], weights=e.graph.out_bytes[shards],
                      minlength=g.num_nodes)
    lay = np.array([space.ops[v].options[s[v]].out for v in range(g.num_nodes)])
    np.testing.assert_allclose(out, np.where(lay >= 2, 1, 4) * g.out_bytes)
    assert (e.graph.colocation == e.worker).all()
  with pytest.raises(ValueError, match="option"):
    pt.expand(g, space, np.full(g.num_nodes, 99))


def _forward_program():
  def f(x, w1, w2):
    return jnp.sum(jnp.tanh(x @ w1) @ w2)
  f32 = jnp.float32
  return programs.program_graph(f, jax.ShapeDtypeStruct((8, 16), f32),
                                jax.ShapeDtypeStruct((16, 8), f32),
                                jax.ShapeDtypeStruct((8, 4), f32), batch_parameters=0)


def test_tofu_dp_matches_brute_force_on_a_tiny_program():
  g = _forward_program()
  assert g.num_nodes <= 12
  space = programs.space_for(g, 2)
  allowed = partitioning.tofu_allowed(space)
  best = search.brute_force(g, space, allowed)
  got = search.dp(g, space, allowed)
  assert got.exact and got.comm_bytes <= 1.05 * best.comm_bytes
  assert got.comm_bytes == pytest.approx(pt.comm_bytes(space, got.strategy))


def test_dp_state_holds_only_the_live_ops():
  # A state is the live tensors' layouts, not a row of all N ops: on a chain one op is live at
  # a time, so megatron / tofu on a graph of tens of thousands of ops do not copy (beam, N)
  # arrays per op (O(N^2): 61 s at 5,000 layered ops). The answer is the brute force's.
  g = load_graph("chain:n=400,seed=0")
  space = generic_space(g, 2)
  got = search.dp(g, space)
  assert got.width == 1 and got.exact
  assert got.comm_bytes == pytest.approx(pt.comm_bytes(space, got.strategy))
  small = load_graph("layered:n=9,width=3,seed=0")
  space = generic_space(small, 2)
  got, best = search.dp(small, space), search.brute_force(small, space)
  assert 1 < got.width < small.num_nodes
  assert got.comm_bytes == pytest.approx(best.comm_bytes)


def test_partition_methods_solve_on_the_expanded_graph():
  g = _mlp_program()
  topo = Topology.uniform(2, bandwidth=1e10, latency=1e-6)  # one simulator for every test
  for name in ("data_parallel", "megatron", "tofu"):
    sol = methods.solve(name, g, topo)
    assert sol.graph is not g and sol.graph.num_nodes >= 2 * g.num_nodes
    assert sol.placement.shape == (sol.graph.num_nodes,) and sol.feasible
    assert sol.info["comm_bytes"] >= 0 and sol.info["degree"] == 2
  dp_ = methods.solve("data_parallel", g, topo).info
  assert dp_["partial"] >= 2  # the two weight-gradient dots contract the batch
  plain = methods.solve("round_robin", g, topo)
  assert plain.graph is g
  generic = methods.solve("tofu", CompGraph(cost=[1.0, 1.0], senders=[0], receivers=[1]),
                          topo, degree=2)
  assert generic.info["shapes"] is False and generic.graph.num_nodes == 4


def test_place_lists_partition_rows_and_the_optimality_table():
  from go_jax import partition_table, place
  g = _forward_program()
  assert place.partition_methods(["all", "tofu"]) == list(place.PARTITION_ALL)
  res = place.place(g, Topology.uniform(2, bandwidth=1e10, latency=1e-6), method=None, baselines=["round_robin"], partition=["tofu"])
  assert {r.key: r.kind for r in res.rows} == {"round_robin": "baseline", "tofu": "partition"}
  assert res.best.key == "round_robin" and "partitioning:" in place.verdict(res)
  assert res.row("tofu").placement.shape[0] > g.num_nodes  # on its expanded graph
  with pytest.raises(ValueError, match="partition method"):
    place.partition_methods(["heft"])
  rows = partition_table.optimality(degrees=(2,))
  assert all(r["ratio"] <= 1.05 and r["exact"] for r in rows)
  assert "tofu / brute" in partition_table.optimality_text(rows)


def test_partition_table_rows_resume(monkeypatch):
  """`model_rows` reruns only the rows it is not given (the launcher's resume), saving each new
  one through `on_row`; with every row given it does not even build the graph."""
  from go_jax import partition_table
  saved = {}
  args = ("gpt2_small", "tiny", (2,), 0.6, "v100", ("heft",), ("data_parallel",))
  rows = partition_table.model_rows(*args, on_row=saved.__setitem__, batch=4)
  assert [r["method"] for r in rows] == ["heft", "data_parallel"]
  assert list(saved) == [partition_table.cell_key("gpt2_small", 2, m)
                         for m in ("heft", "data_parallel")]
  monkeypatch.setattr(programs, "zoo_graph", lambda *a, **k: pytest.fail("graph rebuilt"))
  again = []
  assert partition_table.model_rows(*args, done=saved, on_row=lambda *a: again.append(a),
                                    batch=4) == rows and not again
  monkeypatch.undo()
  partial = {k: v for k, v in saved.items() if k.endswith("heft")}
  rerun = partition_table.model_rows(*args, done=partial, on_row=lambda *a: again.append(a),
                                     batch=4)
  assert rerun[0] is partial[partition_table.cell_key("gpt2_small", 2, "heft")]
  assert [k for k, _ in again] == [partition_table.cell_key("gpt2_small", 2, "data_parallel")]
  assert rerun[1]["makespan"] == rows[1]["makespan"]


def test_partition_table_launcher_refuses_bad_lists():
  from go_jax import partition_table as launcher  # the launcher's list checks (flag-free)
  ok = (["gpt2_small"], [2, 4], ["heft"], ["tofu"], 8)
  launcher.check_lists(*ok)
  for i, value, want in (
      (0, [], "--models: empty"), (2, [], None), (1, [2, 2], "--devices: given twice: 2"),
      (2, ["heft", "heft"], "--placers: given twice: heft"),
      (3, ["tofu", "tofu"], "--partitioners: given twice: tofu"),
      (1, [1, 2], "--devices: 1 is below 2"),
      (4, 3, r"--batch=3 does not divide --devices count\(s\) \[2, 4\]"),
      (4, 6, r"--batch=6 does not divide --devices count\(s\) \[4\]")):
    args = list(ok)
    args[i] = value
    if want is None:  # placers empty alone is fine; both empty is not
      launcher.check_lists(*args)
      args[3] = []
      want = "--placers and --partitioners: both empty"
    with pytest.raises(ValueError, match=want):
      launcher.check_lists(*args)
  launcher.check_lists(["gpt2_small"], [2], ["heft"], [], 0)  # 0: the size's own batch
  launcher.check_lists(["gpt2_small"], [2, 4], ["heft"], [], 0, "default")  # batch 8
  with pytest.raises(ValueError, match=r"--batch=0: wavenet_2x18's own batch at --size=tiny "
                     r"is 1, which does not divide --devices count\(s\) \[2\]"):
    launcher.check_lists(["gpt2_small", "wavenet_2x18"], [2], ["heft"], [], 0, "tiny")
  with pytest.raises(ValueError, match="unknown zoo model 'nope'"):
    launcher.check_lists(["nope"], [2], ["heft"], [], 0, "tiny")


def test_partition_table_cells_are_checked_on_load_and_ratios_stay_short():
  from go_jax import partition_table
  good = {"model": "m", "method": "tofu", "kind": "partition", "devices": 2, "nodes": 5,
          "footprint": 1e9, "capacity": 1e-291, "makespan": 0.01, "feasible": False,
          "peak_memory": 1e9, "comm_bytes": 3e6}
  partition_table.check_cells({"m D=2 tofu": good, "optimality": []}, "f.json")
  for cell, want in (("text", "cell 'k' is not an object"),
                     ({k: v for k, v in good.items() if k != "feasible"},
                      "cell 'k' has no field 'feasible'"),
                     (dict(good, makespan=float("nan")), "field 'makespan' is not a number"),
                     (dict(good, feasible="yes"), "field 'feasible' is not true/false"),
                     (dict(good, comm_bytes="3"), "field 'comm_bytes'")):
    with pytest.raises(ValueError, match="f.json: .*" + want):
      partition_table.check_cells({"k": cell}, "f.json")
  with pytest.raises(ValueError, match="f.json: cell 'optimality' row 0 has no field 'k'"):
    partition_table.check_cells({"optimality": [{"program": "mlp"}]}, "f.json")
  text = partition_table.table_text([good], ["tofu"])
  assert "| 1e-300 |" in text and "OOM (1e+300x cap)" in text
  assert max(len(c) for c in text.split("|")) < 40


def test_partition_table_launcher_checks_batch_before_any_row(tmp_path):
  import os, subprocess, sys  # pylint: disable=g-import-not-at-top,multiple-imports
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

  def launch(*args):
    return subprocess.run([sys.executable, "-m", "experiments.partition_table",
                           "--models=gpt2_small", "--devices=2", "--size=tiny",
                           "--placers=heft", "--nooptimality", f"--out={tmp_path}", *args],
                          cwd=repo, capture_output=True, text=True, timeout=300, check=False)

  proc = launch("--batch=3", "--partitioners=data_parallel")
  assert proc.returncode == 1 and "Traceback" not in proc.stderr
  assert "--batch=3 does not divide --devices count(s) [2]" in proc.stderr
  assert not os.path.exists(tmp_path / "partition_table.json")
  (tmp_path / "partition_table.json").write_text(
      '{"launcher": "partition_table", "settings": {"size": "tiny", "batch": 2, '
      '"device": "v100", "mem_factor": 0.5}, "cells": {"gpt2_small D=2 heft": {"model": 1}}}')
  proc = launch("--batch=2", "--partitioners=")
  assert proc.returncode == 1 and "Traceback" not in proc.stderr
  assert "cell 'gpt2_small D=2 heft' has no field" in proc.stderr


def test_piper_mode_takes_the_profiles_tensor_parallel_options():
  from simulator.sources.piper import load_piper
  g = programs.piper_graph("bert32a100", degrees=(2,))
  tp = load_piper("bert32a100", tensor_parallel=2)
  sol = methods.solve("tofu", g, Topology.uniform(2, bandwidth=1e10, latency=1e-6))
  split_ = np.flatnonzero(sol.info["strategy"] == 1)
  assert split_.size > 0 and sol.info["comm_bytes"] > 0
  first = {}
  for node, name in enumerate(sol.graph.node_names):  # "<layer>#0": worker 0's shard
    first.setdefault(name.rsplit("#", 1)[0], node)
  for v in split_.tolist():
    node = first[g.node_names[v]]
    assert sol.graph.cost[node] == tp.cost[v] and sol.graph.param_bytes[node] == tp.param_bytes[v]
  with pytest.raises(ValueError, match="degrees"):
    programs.space_for(g, 4)


def _four_workers():
  """The worked 4-worker example of design.md 4.2.1: a -> b = a @ w -> c, k = 2 per level."""
  g = CompGraph(cost=[2.0, 4.0, 1.0], senders=[0, 1], receivers=[1, 2],
                out_bytes=[64.0, 64.0, 64.0], param_bytes=[0.0, 64.0, 0.0],
                flops=[8.0, 16.0, 4.0], node_names=["a", "b", "c"])
  ops = (
      OpSpace((), (), (), (4, 4), (Option(R, (), ()), Option(split(0), (), ()),
                                   Option(split(1), (), ()))),
      OpSpace((0,), (64.0,), (64.0,), (4, 4), (
          Option(R, (R,), (R,)), Option(split(0), (split(0),), (R,)),
          Option(split(1), (R,), (split(1),)), Option(P, (split(1),), (split(0),))), "dot",
          leaf_shapes=((4, 4),)),
      OpSpace((1,), (64.0,), (), (4, 4), (
          Option(R, (R,), ()), Option(split(0), (split(0),), ()),
          Option(split(1), (split(1),), ()))),
  )
  return g, StrategySpace(2, ops, (0, 0, 0), np.array([64.0, 64.0, 64.0]))


def test_worked_four_worker_example_of_the_design_doc():
  from simulator.partition import levels
  g, space = _four_workers()
  # a: rows then columns (a 2 x 2 grid); b: rows at level 0, contracting at level 1 (partial);
  # c: rows at both levels (quarters of the rows).
  strategy = np.array([[1, 2], [1, 3], [1, 1]])
  assert levels.comm_bytes(space, strategy) == 64.0  # b's level-1 reduce-scatter, 4 x 16 B
  assert levels.level_objective(space, strategy) == 64.0  # 2 x (k=2 P -> S0 of 32 B)
  e = pt.expand(g, space, strategy)
  assert e.k == 4 and e.graph.num_nodes == 20 and e.comm_bytes == 64.0
  assert list(e.graph.cost[:12]) == [0.5] * 4 + [1.0] * 4 + [0.25] * 4
  # w: replicated at level 0, halved at level 1: 32 B on each worker
  assert e.graph.param_bytes.sum() == 128.0 and e.graph.out_bytes[4:8].tolist() == [32.0] * 4
  ref = reference_simulate(e.graph, Topology.uniform(4, bandwidth=16.0, latency=0.0),
                           e.placement(), np.zeros(e.graph.num_nodes))
  assert ref.makespan == pytest.approx(2.75)  # 0.5 + 1 + one 16 B transfer (1 s) + 0.25
  with pytest.raises(ValueError, match="divisible"):
    pt.expand(g, space, np.array([[1, 1], [1, 1], [1, 1]]).repeat(2, 1))  # 4 levels of rows


def _fan_out(readers: int):
  """A (16, 16) producer read by `readers` ops, each of which may need it R, S0 or S1 (k = 2)."""
  n = readers + 1
  g = CompGraph(cost=np.ones(n), senders=[0] * readers, receivers=range(1, n),
                out_bytes=np.full(n, 64.0))
  take = (Option(R, (R,), ()), Option(split(0), (split(0),), ()),
          Option(split(1), (split(1),), ()))
  ops = (OpSpace((), (), (), (16, 16), (Option(R, (), ()), Option(split(0), (), ()))),
         ) + tuple(OpSpace((0,), (64.0,), (), (16, 16), take) for _ in range(readers))
  return g, StrategySpace(2, ops, (0,) * n, np.full(n, 64.0))


def test_level_tables_give_every_distinct_earlier_need_its_own_offset():
  """A producer's readers share a delivery only with the same earlier levels' needs. With more
  distinct needs than fit in 64 bits (here 27 after three levels, 16 groups of 4 layout bits
  to a word) the rest shared one offset, so the DP's estimate let them share; now each need
  has its own group of bits, in a further word of the mask."""
  from simulator.partition import levels  # pylint: disable=g-import-not-at-top
  g, space = _fan_out(27)
  prefix = np.zeros((g.num_nodes, 3), np.int64)
  prefix[1:] = [[(i // 9) % 3, (i // 3) % 3, i % 3] for i in range(27)]  # every need once
  allow = levels.level_allowed(space, prefix, partition=False)
  _, groups = search._level_tables(space, prefix, allow, 4)
  offsets = [groups[(v, 0)] for v in range(1, g.num_nodes)]
  assert len(set(offsets)) == 27
  assert all(o % 64 + 4 <= 64 for o in offsets) and max(offsets) >= 64  # a second word


def test_dp_readers_share_a_delivery_within_an_offset_of_any_word():
  """`dp`'s delivered masks span as many words as the offsets need: two readers needing the
  same layout share it within one offset, in the first word or a later one, and not across
  offsets (an offset past bit 63 was shifted out of the one int64 word)."""
  g, space = _fan_out(2)
  allowed = [np.array([1]), np.array([0]), np.array([0])]  # S0 produced, R needed twice
  once = search.dp(g, space, allowed).comm_bytes
  assert once > 0
  for a, b, paid in ((0, 0, once), (64, 64, once), (64 + 4, 64 + 4, once), (0, 64, 2 * once),
                     (64, 68, 2 * once)):
    got = search.dp(g, space, allowed, groups={(1, 0): a, (2, 0): b}).comm_bytes
    assert got == pytest.approx(paid), (a, b)


def test_multi_level_expansion_adds_up_and_recursive_tofu():
  from simulator.partition import levels
  g = _mlp_program()
  space = programs.space_for(g, 2)
  rng = np.random.default_rng(1)
  for m in (2, 3):
    for _ in range(6):
      s = np.zeros((g.num_nodes, 0), np.int64)
      for _ in range(m):
        allow = levels.level_allowed(space, s, partition=False)
        s = np.column_stack([s, [rng.choice(a) for a in allow]])
      e = pt.expand(g, space, s)  # a CompGraph: validated acyclic
      assert e.comm_bytes == pytest.approx(levels.comm_bytes(space, s))
      shards = e.role == pt.SHARD
      per_op = np.bincount(e.origin[shards], weights=e.graph.flops[shards],
                           minlength=g.num_nodes)
      splits = np.array([sum(space.ops[v].options[o].split for o in s[v])
                         for v in range(g.num_nodes)])
      np.testing.assert_allclose(per_op, 2.0**(m - splits) * g.flops)
  # Recursive tofu through the method (k = 4, no simulation) and against brute force.
  topo = Topology.uniform(4, bandwidth=1e10, latency=1e-6)
  spec = methods.get("tofu")
  prob = methods.Problem(g, topo, "makespan", 0, None, None)
  rec = spec.fn(prob, dict(spec.defaults))
  one = spec.fn(prob, dict(spec.defaults, recursive=False))
  assert rec.info["recursive"] and rec.info["strategy"].shape == (g.num_nodes, 2)
  assert rec.graph.num_nodes >= 4 * g.num_nodes and rec.info["degree"] == 4
  assert rec.info["comm_bytes"] == pytest.approx(levels.comm_bytes(space, rec.info["strategy"]))
  assert one.info["strategy"].shape == (g.num_nodes,) and not one.info["recursive"]
  lifted = levels.lift(programs.space_for(g, 4), space, one.info["strategy"], 2)
  assert levels.comm_bytes(space, lifted) == pytest.approx(one.info["comm_bytes"])
  assert rec.info["comm_bytes"] <= one.info["comm_bytes"] + 1e-6
  assert search.coarsen_ties(space)  # tanh and the elementwise chains join their producers
  from go_jax import partition_table
  fn, args = partition_table._programs()["grid"]
  grid = programs.program_graph(fn, *args, name="grid")
  best = search.brute_force_levels(grid, programs.space_for(grid, 2), 2)
  got = search.recursive_dp(grid, programs.space_for(grid, 2), 2)
  flat = search.dp(grid, programs.space_for(grid, 4),
                   partitioning.tofu_allowed(programs.space_for(grid, 4)))
  assert got.comm_bytes <= 1.05 * best.comm_bytes and got.comm_bytes < flat.comm_bytes
