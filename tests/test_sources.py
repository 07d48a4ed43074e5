"""Tests for the graph sources: op vocabulary, generators, PipeDream/Piper importers, specs."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import simulator
from simulator import ops, sources
from simulator.sources import (available_graphs, chain, data_root, layered_dag, load_graph,
                               load_pipedream, load_piper, regal_dag, series_parallel)
from simulator.sources.pipedream import parse_pipedream
from simulator.graph import CompGraph
from simulator.sources.costgraph import write_costgraph

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

# README table: model -> (forward nodes, forward edges).
PIPEDREAM_SIZES = {
    "alexnet": (23, 23), "densenet121": (429, 487), "inception_v3": (326, 362),
    "nasnetalarge": (1251, 1468), "nasnetamobile": (921, 1078), "resnet18": (71, 79),
    "resnet50": (177, 193), "resnet101": (347, 380), "resnext50": (177, 193),
    "resnext101": (347, 380), "squeezenet1_0": (68, 76), "vgg16": (41, 41),
    "gnmt": (48, 58), "gnmt_large": (96, 122)}
PIPER_SIZES = {"bert32a100": (37, 67), "gnmt": (78, 104), "resnet": (177, 193)}

# Node lines are long by format (one line per layer).
TOY_PROFILE = """\
node1 -- Input -- forward_compute_time=500.000, backward_compute_time=0.000, activation_size=100.0, parameter_size=0.000
node2 -- Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1)) -- forward_compute_time=2.0, backward_compute_time=4.0, activation_size=[30.0; 20.0], parameter_size=64.0
node3 -- ReLU(inplace) -- forward_compute_time=1.0, backward_compute_time=1.0, activation_size=50.0, parameter_size=0.0 -- stage_id=0

node4 -- Linear(in_features=8, out_features=2, bias=True) -- forward_compute_time=3.0, backward_compute_time=6.0, activation_size=8.0, parameter_size=80.0
\tnode1 -- node2
\tnode2 -- node3
\tnode3 -- node4
\tnode2 -- node4
\tnode2 -- node4
"""


def _write(tmp_path, text, name="graph.txt"):
  path = tmp_path / name
  path.write_text(text)
  return str(path)


def _edges(g):
  return set(zip(g.senders.tolist(), g.receivers.tolist()))


def _real_root():
  try:
    return data_root()
  except ValueError as e:
    pytest.skip(f"package data not found: {e}")


# ------------------------------------------------------------------ op vocabulary
def test_op_vocabulary():
  assert len(set(ops.OP_TYPES)) == len(ops.OP_TYPES) <= ops.BACKWARD_OFFSET
  assert ops.op_type_id("unknown") == 0
  assert ops.op_type_id("matmul") == ops.op_type_id("dot")
  conv_b = ops.op_type_id("conv", backward=True)
  assert ops.op_type_name(conv_b) == "conv/bwd" and ops.is_backward(conv_b)
  assert ops.forward_type(conv_b) == ops.op_type_id("conv")
  with pytest.raises(ValueError, match="unknown op type 'bogus'.*conv"):
    ops.op_type_id("bogus")
  with pytest.raises(ValueError, match="not in the vocabulary"):
    ops.op_type_name(ops.NUM_OP_TYPES + 1)


@pytest.mark.parametrize("module, expected", [
    ("Conv2d(64, 64, kernel_size=(3, 3))", "conv"), ("BatchNorm2d(64, eps=1e-05)", "norm"),
    ("ReLU(inplace)", "activation"), ("Linear(in_features=8)", "dot"), ("LSTM(1024, 1024)", "lstm"),
    ("MaxPool2d(kernel_size=2)", "pool"), ("Add(inplace)", "elementwise"), ("Input", "input"),
    ("Input2", "input"), ("Concat(2)", "concat"), ("Dropout(p=0.2)", "elementwise"),
    ("Embedding(32320, 1024)", "embedding"), ("View(-1)", "reshape"),
    ("__getitem__(0)", "slice"), ("RecurrentAttention(  (rnn): LSTM)", "attention"),
    ("SomethingNew(3)", "unknown"), ("", "unknown"), ("(((", "unknown")])
def test_torch_module_type(module, expected):
  assert ops.op_type_name(ops.torch_module_type(module)) == expected


# ------------------------------------------------------------------ generators
@pytest.mark.parametrize("make", [
    lambda seed: layered_dag(300, 16, seed=seed),
    lambda seed: layered_dag(300, 16, edge_prob=0.2, seed=seed),
    lambda seed: regal_dag(300, seed),
    lambda seed: chain(50, seed),
    lambda seed: series_parallel(300, seed)])
def test_generators_deterministic_and_complete(make):
  a, b, c = make(0), make(0), make(1)
  for f in ("cost", "out_bytes", "param_bytes", "temp_bytes", "op_type", "senders"):
    np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
  assert not np.array_equal(a.cost, c.cost)
  assert a.num_nodes in (50, 300)
  assert np.all(a.cost >= 1e-5) and np.all(a.cost <= 1e-2)
  assert np.all(a.out_bytes > 0) and np.any(a.param_bytes > 0)
  assert len(a.topological_order()) == a.num_nodes  # acyclic by construction and validation


def test_layered_dag_structure_and_degree():
  g = layered_dag(2000, 40, avg_degree=3.0, seed=0)
  assert g.num_nodes == 2000
  indeg = g.in_degree()
  assert np.all(indeg[:40] == 0) and np.all(indeg[40:] >= 1)
  assert abs(indeg[40:].mean() - 3.0) < 0.15
  assert np.all(g.senders < g.receivers)  # ids are in layer order
  g = layered_dag(2000, 40, edge_prob=0.1, skip_prob=0.0, seed=0)
  assert np.all(g.in_degree()[40:] >= 1)
  assert abs(g.in_degree()[40:].mean() - 4.0) < 0.3  # 40 candidates x 0.1
  assert layered_dag(7, 1, seed=0).num_nodes == 7


def test_generator_options_and_sizes():
  g = layered_dag(100, 10, integer_costs=True, seed=3, colocation_groups=5, colocation_size=3)
  for f in ("cost", "out_bytes", "param_bytes", "temp_bytes"):
    arr = getattr(g, f)
    np.testing.assert_array_equal(arr, np.round(arr))
  assert np.all(g.cost >= 1) and np.all(g.cost <= 10)
  groups, counts = np.unique(g.colocation[g.colocation >= 0], return_counts=True)
  assert groups.tolist() == list(range(5)) and np.all(counts == 3)
  r = regal_dag(200, 1, integer_costs=True)
  assert np.all((r.cost >= 1) & (r.cost <= 100)) and r.num_nodes == 200
  assert np.all(r.senders < r.receivers)
  assert 1.2 < r.num_edges / 199 < 2.0
  c = chain(1, 0)
  assert c.num_nodes == 1 and c.num_edges == 0
  s = series_parallel(1, 0)
  assert s.num_nodes == 1
  s = series_parallel(500, 2, parallel_prob=1.0, max_branches=3)
  assert s.num_nodes == 500 and np.all(s.senders < s.receivers)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 120), width=st.integers(1, 20), seed=st.integers(0, 2**16))
def test_layered_dag_property(n, width, seed):
  g = layered_dag(n, width, seed=seed)
  first = min(n, -(-n // (-(-n // width))))  # size of the first layer
  assert g.num_nodes == n
  assert np.all(g.in_degree()[first:] >= 1) and np.all(g.in_degree()[:first] == 0)


@pytest.mark.parametrize("call, match", [
    (lambda: layered_dag(0, 4), "num_nodes must be >= 1"),
    (lambda: layered_dag(10, 0), "width must be >= 1"),
    (lambda: layered_dag(10, 2.5), "width must be an integer"),
    (lambda: layered_dag(10, 2, avg_degree=0.5), "avg_degree must be in"),
    (lambda: layered_dag(10, 2, avg_degree=2, edge_prob=0.5), "at most one"),
    (lambda: layered_dag(10, 2, edge_prob=1.5), "edge_prob must be in"),
    (lambda: chain(4, colocation_groups=3), "exceeds the 4 nodes"),
    (lambda: regal_dag(10, max_inputs=0), "max_inputs must be >= 1"),
    (lambda: series_parallel(10, max_branches=1), "max_branches must be >= 2"),
    (lambda: series_parallel(10, parallel_prob=-0.1), "parallel_prob must be in")])
def test_generator_errors(call, match):
  with pytest.raises(ValueError, match=match):
    call()


# ------------------------------------------------------------------ PipeDream (toy files)
def test_pipedream_parse_and_forward_graph(tmp_path):
  path = _write(tmp_path, TOY_PROFILE)
  prof = parse_pipedream(path)
  assert [l.layer_id for l in prof.layers] == ["node1", "node2", "node3", "node4"]
  assert prof.layers[1].activation_bytes == 50.0  # list summed
  assert prof.layers[1].module.startswith("Conv2d(3, 8")
  assert len(prof.edges) == 4  # duplicate edge merged
  g = load_pipedream(path, training=False)
  np.testing.assert_allclose(g.cost, [0.0, 0.002, 0.001, 0.003])  # Input zeroed, ms -> s
  np.testing.assert_array_equal(g.out_bytes, [100, 50, 50, 8])
  np.testing.assert_array_equal(g.param_bytes, [0, 64, 0, 80])
  assert [ops.op_type_name(t) for t in g.op_type] == ["input", "conv", "activation", "dot"]
  assert g.node_names[1].startswith("node2/fwd Conv2d")
  assert np.all(g.colocation == -1)
  assert g.name == f"pipedream_{tmp_path.name}_fwd"  # graph.txt is named after its folder
  assert load_pipedream(path, training=False, zero_input_time=False).cost[0] == 0.5


def test_pipedream_training_graph(tmp_path):
  g = load_pipedream(_write(tmp_path, TOY_PROFILE), optimizer_state_factor=2.0)
  names = [s.split(" ")[0] for s in g.node_names]
  assert names == ["node1/fwd", "node2/fwd", "node3/fwd", "node4/fwd",
                   "node4/bwd", "node3/bwd", "node2/bwd"]  # Input has no backward op
  f1, f2, f3, f4, b4, b3, b2 = range(7)
  expected = {(f1, f2), (f2, f3), (f3, f4), (f2, f4),         # forward
              (b4, b3), (b3, b2), (b4, b2),                     # gradients, mirrored
              (f4, b4), (f3, b3), (f2, b2),                     # own activation held
              (f3, b4), (f2, b4), (f2, b3), (f1, b2)}           # consumers' input held
  assert _edges(g) == expected
  np.testing.assert_allclose(g.cost[4:], [0.006, 0.001, 0.004])
  np.testing.assert_array_equal(g.out_bytes[4:], [100, 50, 100])  # grads w.r.t. inputs
  np.testing.assert_array_equal(g.param_bytes, [0, 64, 0, 80, 240, 0, 192])
  assert g.colocation[f2] == g.colocation[b2] >= 0 and g.colocation[f4] == g.colocation[b4]
  assert g.colocation[f1] == -1 and len(set(g.colocation[[b2, b3, b4]])) == 3
  assert ops.op_type_name(g.op_type[b2]) == "conv/bwd"


def test_pipedream_gradient_through_ops_without_backward(tmp_path):
  # conv -> getitem (no backward work) -> sink getitem: conv's backward waits for the sink.
  text = ("a -- Conv2d(1) -- forward_compute_time=1, backward_compute_time=1, "
          "activation_size=4, parameter_size=4\n"
          "b -- __getitem__(0) -- forward_compute_time=0, backward_compute_time=0, "
          "activation_size=4, parameter_size=0\n"
          "c -- __getitem__(0) -- forward_compute_time=0, backward_compute_time=0, "
          "activation_size=4, parameter_size=0\n\ta -- b\n\tb -- c\n")
  g = load_pipedream(_write(tmp_path, text))
  assert g.num_nodes == 4 and _edges(g) == {(0, 1), (1, 2), (2, 3), (0, 3)}


@pytest.mark.parametrize("text, match", [
    ("node1 -- Input -- forward_compute_time=1.0, backward_compute_time=0.0\n",
     r"toy.txt:1: node line lacks field"),
    (TOY_PROFILE.replace("parameter_size=80.0", "parameter_size=abc"),
     r"toy.txt:5: field 'parameter_size' has a malformed value"),
    (TOY_PROFILE.replace("[30.0; 20.0]", "[30.0; 20.0"), r"toy.txt:2: .*unterminated"),
    (TOY_PROFILE.replace("forward_compute_time=1.0", "forward_compute_time=-1.0"),
     r"toy.txt:3: .*>= 0"),
    (TOY_PROFILE.replace("node3 -- ReLU(inplace) -- ", "node3 ReLU "),
     r"toy.txt:3: malformed node"),
    (TOY_PROFILE + "\tnode1 node2\n", r"toy.txt:11: malformed edge"),
    (TOY_PROFILE + "\tnode1 -- node9\n", r"toy.txt:11: .*undeclared layer 'node9'"),
    (TOY_PROFILE + "\tnode2 -- node2\n", r"toy.txt:11: .*self loop"),
    (TOY_PROFILE + "\tnode4 -- node1\n", r"toy.txt.*cycle"),
    (TOY_PROFILE.replace("node4 --", "node2 --", 1), r"toy.txt:5: duplicate layer id 'node2'"),
    ("\n\n", r"toy.txt: no layers")])
def test_pipedream_malformed(tmp_path, text, match):
  path = _write(tmp_path, text, "toy.txt")
  with pytest.raises(ValueError, match=match):
    load_pipedream(path)


def test_pipedream_bad_names(tmp_path):
  with pytest.raises(ValueError, match="does not exist"):
    load_pipedream(str(tmp_path / "missing.txt"))
  (tmp_path / "folder.txt").mkdir()
  with pytest.raises(ValueError, match="folder.txt' is a folder, not a file"):
    load_pipedream(str(tmp_path / "folder.txt"))
  with pytest.raises(ValueError, match="optimizer_state_factor"):
    load_pipedream(_write(tmp_path, TOY_PROFILE), optimizer_state_factor=-1)


# ------------------------------------------------------------------ Piper (toy files)
def _tmpc(tid, time, param, a, b):
  return {"id": tid, "timePerSample": time, "parameterSize": param, "memoryUsageA": a,
          "memoryUsageB": b, "syncTimeFw": {}, "syncTimeBw": {}}


def _toy_piper(tmp_path, **overrides):
  data = {"maxMemoryPerDevice": 1e10, "maxDevices": 4, "bandwidth": 1e9, "mbsInBatch": 8,
          "nodes": [
              {"id": 10, "name": "Embedding", "TMPCs": {
                  "1": [_tmpc("vanilla", 2.0, 100, 10, 200),
                        _tmpc("activation recomp", 3.0, 100, 1, 210)],
                  "2": [_tmpc("vanilla", 1.5, 50, 10, 100)]}},
              {"id": 11, "name": "ParallelTransformerLayer", "TMPCs": {
                  "1": [_tmpc("vanilla", 4.0, 300, 20, 600),
                        _tmpc("activation recomp", 5.0, 300, 2, 620)],
                  "2": [_tmpc("vanilla", 2.5, 150, 20, 300)]}},
              {"id": 12, "name": "Linear", "TMPCs": {
                  "1": [_tmpc("vanilla", 1.0, 0, 5, 0),
                        _tmpc("activation recomp", 1.0, 0, 5, 0)],
                  "2": [_tmpc("vanilla", 1.0, 0, 5, 0)]}}],
          "edges": [{"sourceId": 10, "destId": 11, "communicationCost": 64.0},
                    {"sourceId": 10, "destId": 12, "communicationCost": 32.0},
                    {"sourceId": 11, "destId": 12, "communicationCost": 16.0}]}
  data.update(overrides)
  path = tmp_path / "toy.json"
  path.write_text(json.dumps(data))
  return str(path)


def test_piper_conversion(tmp_path):
  path = _toy_piper(tmp_path)
  g = load_piper(path, time_unit="ms", microbatch=3)
  np.testing.assert_allclose(g.cost, [0.002, 0.004, 0.001])
  np.testing.assert_array_equal(g.out_bytes, [64, 16, 0])  # max over outgoing edges
  np.testing.assert_array_equal(g.param_bytes, [100, 300, 0])
  np.testing.assert_array_equal(g.temp_bytes, [30, 60, 15])  # memoryUsageA x microbatches
  assert _edges(g) == {(0, 1), (0, 2), (1, 2)}
  assert g.node_names == ("10:Embedding", "11:ParallelTransformerLayer", "12:Linear")
  assert [ops.op_type_name(t) for t in g.op_type] == ["embedding", "attention", "dot"]
  np.testing.assert_allclose(load_piper(path).cost, [2.0, 4.0, 1.0])  # auto: total 7 -> s
  g2 = load_piper(path, tensor_parallel=2, time_unit="s", include_model_state=True)
  np.testing.assert_allclose(g2.cost, [1.5, 2.5, 1.0])
  np.testing.assert_array_equal(g2.param_bytes, [100, 300, 0])
  g3 = load_piper(path, variant="recomp", time_unit="s")
  np.testing.assert_allclose(g3.cost, [3.0, 5.0, 1.0])
  assert g3.name == "piper_toy_t1_activation_recomp"


@pytest.mark.parametrize("kwargs, match", [
    (dict(tensor_parallel=4), "no TMPCs for tensor_parallel=4; available degrees: 1, 2"),
    (dict(tensor_parallel=2, variant="recomp"), r"no TMPC 'activation recomp'.*\['vanilla'\]"),
    (dict(tensor_parallel=0), "tensor_parallel must be an integer >= 1"),
    (dict(microbatch=0), "microbatch must be"),
    (dict(time_unit="us"), "time_unit must be one of")])
def test_piper_errors(tmp_path, kwargs, match):
  with pytest.raises(ValueError, match=match):
    load_piper(_toy_piper(tmp_path), **kwargs)


def test_piper_malformed(tmp_path):
  bad_edge = [{"sourceId": 10, "destId": 99, "communicationCost": 1.0}]
  with pytest.raises(ValueError, match=r"toy.json'.*edge #0 \(10 -> 99\).*unknown node 99"):
    load_piper(_toy_piper(tmp_path, edges=bad_edge))
  neg = [{"sourceId": 10, "destId": 11, "communicationCost": -1.0}]
  with pytest.raises(ValueError, match="communicationCost' must be a finite number >= 0"):
    load_piper(_toy_piper(tmp_path, edges=neg))
  (tmp_path / "broken.json").write_text("{nodes: ")
  with pytest.raises(ValueError, match="cannot read Piper input .*broken.json"):
    load_piper(str(tmp_path / "broken.json"))
  with pytest.raises(ValueError, match="lacks field 'nodes'"):
    load_piper(_write(tmp_path, "{}", "e.json"))


# ------------------------------------------------------------------ real data
def test_real_pipedream_models_load():
  _real_root()
  found = available_graphs()["pipedream"]
  assert sorted(found) == sorted(PIPEDREAM_SIZES)
  for model, (n, e) in PIPEDREAM_SIZES.items():
    fwd = load_pipedream(model, training=False)
    assert (fwd.num_nodes, fwd.num_edges) == (n, e), model
    assert np.all(fwd.cost < 0.1), model  # Input's data loading time zeroed
    train = load_pipedream(model)
    nb = train.num_nodes - n
    assert 0 < nb <= n
    fwd_ids, bwd_ids = np.arange(n), np.arange(n, n + nb)
    # Every backward op shares its group with exactly one forward op, its own.
    assert np.all(train.colocation[bwd_ids] >= 0)
    grouped = train.colocation[fwd_ids] >= 0
    assert grouped.sum() == nb
    assert set(train.colocation[fwd_ids][grouped]) == set(train.colocation[bwd_ids])
    assert np.all(ops.is_backward(train.op_type[bwd_ids]))
    assert train.cost[:n].sum() == pytest.approx(fwd.cost.sum())
    # Mirroring: each forward edge u->v between layers with backward ops has B_v -> B_u.
    bwd_of = {int(train.colocation[i]): i for i in bwd_ids}
    edges = _edges(train)
    for u, v in zip(fwd.senders.tolist(), fwd.receivers.tolist()):
      if train.colocation[u] >= 0 and train.colocation[v] >= 0:
        assert (bwd_of[train.colocation[v]], bwd_of[train.colocation[u]]) in edges


def test_real_piper_models_load():
  _real_root()
  assert sorted(available_graphs()["piper"]) == sorted(PIPER_SIZES)
  for model, (n, e) in PIPER_SIZES.items():
    g = load_piper(model)
    assert (g.num_nodes, g.num_edges) == (n, e), model
    assert 0.1 < g.cost.sum() < 5.0, model  # one microbatch, in seconds
  for t in (2, 4, 8):
    assert load_piper("bert32a100", tensor_parallel=t).num_nodes == 37
  with pytest.raises(ValueError, match="available degrees: 1$"):
    load_piper("gnmt", tensor_parallel=2)
  with pytest.raises(ValueError, match="unknown Piper model 'nope'; available: bert32a100"):
    load_piper("nope")


# ------------------------------------------------------------------ specs
def test_load_graph_specs(tmp_path):
  g = load_graph("layered:n=100,width=8,seed=2,avg_degree=2.5")
  assert g.num_nodes == 100 and g.name == "layered_n100_w8_d2.5_s2"
  assert np.array_equal(g.cost, layered_dag(100, 8, seed=2, avg_degree=2.5).cost)
  assert load_graph("regal:n=50,seed=3").num_nodes == 50
  assert load_graph(" chain:n=5,integer_costs=true ").cost.max() <= 10
  assert load_graph("series_parallel:num_nodes=30,seed=1").num_nodes == 30
  path = str(tmp_path / "g.npz")
  g.save(path)
  np.testing.assert_array_equal(load_graph(path).cost, g.cost)
  toy = _write(tmp_path, TOY_PROFILE)
  assert load_graph(f"pipedream:{toy},training=false").num_nodes == 4
  assert load_graph(f"pipedream:{toy},optimizer_state_factor=0").num_nodes == 7
  assert load_graph(f"piper:{_toy_piper(tmp_path)},microbatch=2").temp_bytes[0] == 20


@pytest.mark.parametrize("spec, match", [
    ("bogus:n=3", "unknown graph spec kind 'bogus'.*valid kinds: layered, regal"),
    ("layered:n=10,widht=2", "unknown key 'widht' for layered; valid keys: .*width"),
    ("chain:n=ten", "bad value for 'n'"),
    ("chain:n=3,integer_costs=maybe", "expected a boolean"),
    ("chain:n=3,n=4", "given twice"),
    ("chain:5", "unexpected argument '5'.*no unnamed arguments"),
    ("chain:n=3,,seed=1", "empty item"),
    ("chain:n=0", "num_nodes must be >= 1"),
    ("pipedream:", "pipedream needs a model name or path"),
    ("pipedream:a,b", "unexpected argument 'b'"),
    ("", "non-empty string")])
def test_load_graph_errors(spec, match):
  with pytest.raises(ValueError, match=match):
    load_graph(spec)


def test_data_root_env(tmp_path, monkeypatch):
  models = tmp_path / "pipedream" / "profiler" / "toy_task" / "profiles" / "toymodel"
  models.mkdir(parents=True)
  (models / "graph.txt").write_text(TOY_PROFILE)
  monkeypatch.setenv("GO_JAX_DATA", str(tmp_path))
  assert data_root() == str(tmp_path)
  assert available_graphs()["pipedream"] == ["toymodel"]
  assert available_graphs()["piper"] == []
  assert load_graph("pipedream:toymodel").name == "pipedream_toymodel_train"
  with pytest.raises(ValueError, match="unknown PipeDream model 'resnet50'; available: toymodel"):
    load_graph("pipedream:resnet50")
  monkeypatch.setenv("GO_JAX_DATA", str(tmp_path / "nowhere"))
  with pytest.raises(ValueError, match="GO_JAX_DATA=.*is not a folder"):
    data_root()
  assert available_graphs()["pipedream"] == []


def test_zoo_spec_builds_costed_graph_and_caches(tmp_path, monkeypatch):
  """`zoo:` specs: the HLO front end + roofline costs, cached on disk, knobs validated."""
  monkeypatch.setenv("GO_JAX_CACHE", str(tmp_path))
  spec = "zoo:transformer_xl2,size=tiny,stage=pre,device=v100"
  g = load_graph(spec)
  assert g.num_nodes > 50 and np.all(g.cost >= 0) and g.cost.sum() > 0
  assert g.flops.sum() > 0 and g.param_bytes.sum() > 0
  cached = list((tmp_path / "zoo").glob("*.npz"))
  assert len(cached) == 1
  again = load_graph(spec)  # from the cache: identical
  np.testing.assert_array_equal(again.cost, g.cost)
  np.testing.assert_array_equal(again.senders, g.senders)
  faster = load_graph(spec.replace("v100", "h100"))
  assert faster.cost.sum() < g.cost.sum()  # same graph, a faster device
  with pytest.raises(ValueError, match="unknown knob"):
    load_graph("zoo:transformer_xl2,size=tiny,bogus=3")
  with pytest.raises(ValueError, match="device"):
    load_graph("zoo:transformer_xl2,size=tiny,device=nope")
  with pytest.raises(ValueError, match="unknown zoo model"):
    load_graph("zoo:nope")


# ------------------------------------------------------------------ jax: programs and forms
PROGRAMS = textwrap.dedent('''
    """Graph functions of no arguments for the `jax:` source (test helper)."""
    import jax.numpy as jnp
    from simulator.sources import synthetic

    def step(w, x):
      return jnp.tanh(x @ w).sum()

    def args():
      return (jnp.ones((8, 8)), jnp.ones((4, 8)))

    def program():
      return step, args()

    def graph():
      return synthetic.chain(5, name="helper_chain")

    def as_list():
      return step, list(args())

    def not_a_graph():
      return 42

    def broken():
      raise RuntimeError("boom")

    NOT_CALLABLE = 3
''')


@pytest.fixture
def programs(tmp_path, monkeypatch):
  """A module of graph functions in a fresh folder that is the working directory (not on
  sys.path: the `jax:` source puts it there); yields its (unique) module name."""
  name = "jax_programs_helper"
  (tmp_path / f"{name}.py").write_text(PROGRAMS)
  (tmp_path / "fails_on_import.py").write_text("raise RuntimeError('import-time bug')\n")
  (tmp_path / "missing_dependency.py").write_text("import no_such_dependency_xyz\n")
  monkeypatch.chdir(tmp_path)
  before = list(sys.path)
  yield name
  assert sys.path == before  # the working directory was on the path only while loading
  for mod in (name, "fails_on_import", "missing_dependency"):
    sys.modules.pop(mod, None)


def _same_graph(a, b):
  assert (a.num_nodes, a.num_edges) == (b.num_nodes, b.num_edges)
  for field in ("cost", "senders", "receivers", "flops", "bytes_accessed", "out_bytes"):
    np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)


@pytest.mark.parametrize("stage", ["pre", "post"])
def test_jax_spec_is_from_jax_with_the_cost_model(programs, stage):
  """`jax:module:function,stage=...,device=a100` is `simulator.from_jax` on the program."""
  g = load_graph(f"jax:{programs}:program,stage={stage},device=a100")
  module = sys.modules[programs]  # imported by the source, from the working directory
  ref = simulator.from_jax(module.step, *module.args(), stage=stage, device_spec="a100")
  _same_graph(g, ref)
  assert g.cost.sum() > 0 and g.name == f"jax:{programs}:program/{stage}/a100"


def test_module_function_is_a_jax_spec_with_defaults(programs):
  """`module:function` reads as `jax:module:function` (stage pre, device v100); a CompGraph
  returned by the function is the graph as it is."""
  g = load_graph(f"{programs}:program")
  module = sys.modules[programs]
  _same_graph(g, simulator.from_jax(module.step, *module.args(), device_spec="v100"))
  assert load_graph(f" {programs}:graph ").name == "helper_chain"
  assert load_graph(f"jax:{programs}:graph,stage=post,device=h100").num_nodes == 5


def test_resolve_spec_forms(programs, tmp_path, monkeypatch):
  """The spec each form stands for; resolving twice changes nothing."""
  chain(4).save(str(tmp_path / "g.npz"))
  monkeypatch.setattr(sources, "available_graphs",
                      lambda: {"pipedream": ["both", "pd_only"], "zoo": ["both", "zoo_only"]})
  cases = {
      "both": "pipedream:both", "pd_only": "pipedream:pd_only", "zoo_only": "zoo:zoo_only",
      " chain:n=3 ": "chain:n=3", "chain": "chain:", "g.npz": "g.npz",
      "pkg.mod:fn": "jax:pkg.mod:fn", "mod:fn,stage=post": "jax:mod:fn,stage=post",
      "jax:mod:fn": "jax:mod:fn"}
  for text, spec in cases.items():
    assert sources.resolve_spec(text) == spec, text
    assert sources.resolve_spec(spec) == spec, spec
  # A default device fills in for JAX programs (zoo models included), never over one the spec
  # names; other sources have no device.
  assert sources.resolve_spec("mod:fn", device="a100") == "jax:mod:fn,device=a100"
  assert sources.resolve_spec("jax:mod:fn,device=h100", device="a100") == (
      "jax:mod:fn,device=h100")
  assert sources.resolve_spec("zoo_only", device="a100") == "zoo:zoo_only,device=a100"
  assert sources.resolve_spec("zoo:zoo_only,device=k80", device="a100") == (
      "zoo:zoo_only,device=k80")
  assert sources.resolve_spec("pd_only", device="a100") == "pipedream:pd_only"
  with pytest.raises(ValueError, match="unknown graph name 'nope': not a PipeDream model "
                     r"\(both, pd_only\) nor a model-zoo model \(both, zoo_only\)"):
    sources.resolve_spec("nope")


def test_bare_name_loads_the_pipedream_model(shared_data):
  del shared_data
  g = load_graph("alexnet")
  assert g.name == load_graph("pipedream:alexnet").name == "pipedream_alexnet_train"


@pytest.mark.parametrize("text, match", [
    ("jax:", "jax needs 'package.module:function' after 'jax:'"),
    ("jax:justamodule", "expected 'jax:package.module:function', got 'justamodule'"),
    ("jax:no_such_module_xyz:fn", "'no_such_module_xyz' is neither a graph source kind .* nor "
     "an importable module \\(No module named 'no_such_module_xyz'\\)"),
    ("no_such_module_xyz:fn", "'jax:no_such_module_xyz:fn'.*neither a graph source kind"),
    ("no_such_pkg_xyz.sub:fn", "'no_such_pkg_xyz.sub' is neither a graph source kind"),
    ("not a module!:fn", "unknown graph spec kind 'not a module!'.*is not "
     "'package.module:function'"),
    ("fails_on_import:fn", "importing module 'fails_on_import' failed: RuntimeError: "
     "import-time bug"),
    ("missing_dependency:fn", "importing module 'missing_dependency' failed: "
     "ModuleNotFoundError: No module named 'no_such_dependency_xyz'"),
    ("MOD:missing", "module 'MOD' has no function 'missing'"),
    ("MOD:NOT_CALLABLE", "module 'MOD' has no function 'NOT_CALLABLE'"),
    ("MOD:broken", "'jax:MOD:broken': calling broken\\(\\) failed: RuntimeError: boom"),
    ("MOD:not_a_graph", "not_a_graph\\(\\) must return a CompGraph or a JAX program \\(fn, "
     "args\\) with args a tuple, got int"),
    ("MOD:as_list", "with args a list"),
    ("jax:MOD:program,stage=mid", "stage must be one of pre, post, got 'mid'"),
    ("jax:MOD:program,device=no_gpu", "unknown device spec 'no_gpu'; available: a100"),
    ("jax:MOD:program,calibration=no_such_file.json", "no_such_file.json"),
    ("jax:MOD:program,bogus=1", "unknown key 'bogus' for jax; valid keys: calibration, "
     "device, stage"),
    ("jax:MOD:program,MOD:graph", "unexpected argument"),
    ("missing_file.npz", "cannot read graph file 'missing_file.npz': it does not exist"),
])
def test_graph_argument_errors(programs, text, match):
  """Every bad graph argument is a ValueError naming it (and the options, where there are)."""
  with pytest.raises(ValueError, match=match.replace("MOD", programs)):
    load_graph(text.replace("MOD", programs))


def test_module_function_from_its_own_folder_without_pythonpath(tmp_path):
  """`my_module:fn` works from the module's folder in a process whose import path lacks that
  folder (`python -I`, as a console script: no '' entry, PYTHONPATH ignored)."""
  (tmp_path / "my_graphs.py").write_text(PROGRAMS)
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  env["JAX_PLATFORMS"] = "cpu"
  plain = subprocess.run([sys.executable, "-I", "-c", "import my_graphs"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=60)
  assert plain.returncode != 0 and "No module named 'my_graphs'" in plain.stderr
  code = ("from simulator import sources\n"
          "g = sources.load_graph('my_graphs:program')\n"
          "print(g.num_nodes, g.cost.sum() > 0, sources.load_graph('my_graphs:graph').name)\n")
  proc = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  nodes, costed, name = proc.stdout.split()
  assert int(nodes) >= 2 and costed == "True" and name == "helper_chain"


def test_coarsen_option_works_for_every_form():
  from simulator import coarsen  # pylint: disable=g-import-not-at-top
  full = load_graph("series_parallel:n=60,seed=2")
  coarse = load_graph("series_parallel:n=60,seed=2,coarsen=20")
  assert coarse.num_nodes <= 20 and coarse.name.endswith("@coarse20")
  assert coarse.num_nodes == coarsen.coarsen(full, 20).graph.num_nodes
  np.testing.assert_allclose(coarse.cost.sum(), full.cost.sum())
  # a graph already within the limit comes back unchanged; bare names take it too
  assert load_graph("pipedream:alexnet,coarsen=512").num_nodes == 41
  assert load_graph("alexnet,coarsen=20").num_nodes <= 20


@pytest.mark.parametrize("spec,match", [
    ("chain:n=30,coarsen=0", "positive"), ("chain:n=30,coarsen=x", "positive"),
    ("chain:n=30,coarsen=5,coarsen=6", "twice")])
def test_bad_coarsen_option_is_refused(spec, match):
  with pytest.raises(ValueError, match=match):
    load_graph(spec)


def test_coarsen_option_after_the_kind_and_in_resolved_specs(tmp_path):
  coarse = load_graph("layered:coarsen=12,n=40,width=4,seed=1")
  assert coarse.num_nodes <= 12 and coarse.name.endswith("@coarse12")
  # resolve_spec keeps the option (last), for every form, and resolving twice changes nothing
  assert sources.resolve_spec("alexnet,coarsen=20") == "pipedream:alexnet,coarsen=20"
  assert sources.resolve_spec("mod:fn,coarsen=4", device="a100") == (
      "jax:mod:fn,device=a100,coarsen=4")
  spec = sources.resolve_spec("layered:coarsen=12,n=40")
  assert spec == "layered:n=40,coarsen=12" and sources.resolve_spec(spec) == spec
  path = str(tmp_path / "g.npz")
  load_graph("chain:n=30").save(path)
  assert load_graph(f"{path},coarsen=7").num_nodes <= 7
  with pytest.raises(ValueError, match="coarsen"):
    sources.resolve_spec("alexnet,coarsen=-3")


@pytest.mark.parametrize("text, match", [
    ("pipedream:no_such_model", "unknown PipeDream model 'no_such_model'; available: .*resnet50"),
    ("piper:no_such_model", "unknown Piper model 'no_such_model'"),
    ("zoo:no_such_model", "unknown zoo model 'no_such_model'; available: .*bert_base"),
    ("zoo:bert_base,size=huge", "unknown zoo size 'huge'"),
    ("zoo:bert_base,stage=mid", "stage must be 'pre' or 'post', got 'mid'"),
    ("zoo:bert_base,no_such_knob=1", "unknown knob\\(s\\) \\['no_such_knob'\\]"),
    ("zoo:bert_base,device=no_gpu", "unknown device spec 'no_gpu'"),
    ("costgraph:missing.pbtxt", "cannot read CostGraphDef file 'missing.pbtxt': it does not exist"),
    ("no_such_module_xyz:fn", "'jax:no_such_module_xyz:fn'.*neither a graph source kind"),
    ("MOD:missing", "module 'MOD' has no function 'missing'"),
    ("missing_file.npz", "cannot read graph file 'missing_file.npz': it does not exist"),
    ("zoo:gpt2_small,coarsen=0", "coarsen must be a positive number"),
])
def test_check_spec_refuses_what_load_graph_would(programs, text, match):
  """A sweep checks its graphs with `check_spec` before any cell: the same errors as
  `load_graph` for everything that does not need the graph built."""
  text, match = text.replace("MOD", programs), match.replace("MOD", programs)
  with pytest.raises(ValueError, match=match):
    sources.check_spec(text)
  with pytest.raises(ValueError, match=match):
    load_graph(text)


def test_a_folder_is_named_a_folder(tmp_path):
  """A folder where a graph file is expected is reported as a folder, not as missing."""
  for name, spec, match in (("g.npz", "{}", "cannot read graph file .*g.npz': it is a folder"),
                            ("g.pbtxt", "costgraph:{}", "CostGraphDef file .*g.pbtxt': it is a folder"),
                            ("p.json", "piper:{}", "p.json' is a folder, not a file")):
    (tmp_path / name).mkdir()
    for check in (sources.check_spec, load_graph):
      with pytest.raises(ValueError, match=match):
        check(spec.format(tmp_path / name))


def test_a_path_with_commas_and_equals_is_read_whole(tmp_path):
  """`costgraph:runs/lr=0.1,b.pbtxt` is one file, not the items 'runs/lr=0.1' and 'b.pbtxt';
  keys after it and a trailing coarsen still apply."""
  g = CompGraph(cost=[1e-3, 2e-3, 3e-3], senders=[0, 1], receivers=[1, 2], out_bytes=[4, 8, 2])
  path = write_costgraph(g, str(tmp_path / "lr=0.1,b.pbtxt"))
  assert sources.check_spec(f"costgraph:{path}") == f"costgraph:{path}"
  assert load_graph(f"costgraph:{path}").num_nodes == 3
  assert load_graph(f"costgraph:{path},coarsen=2").num_nodes <= 2
  with pytest.raises(ValueError, match="unknown key 'bogus'"):
    load_graph(f"costgraph:{path},bogus=1")
  with pytest.raises(ValueError, match=r"no file '.*lr=0.2,b.pbtxt' exists"):
    load_graph(f"costgraph:{tmp_path / 'lr=0.2,b.pbtxt'}")


def test_check_spec_resolves_without_building(programs):
  """Valid arguments give their source spec; nothing is built or called (`broken` raises when
  called, and a zoo model's step is not traced)."""
  assert sources.check_spec("resnet50") == "pipedream:resnet50"
  assert sources.check_spec("gpt2_small,coarsen=64") == "zoo:gpt2_small,coarsen=64"
  assert sources.check_spec("zoo:bert_base,size=small,batch=2") == "zoo:bert_base,size=small,batch=2"
  assert sources.check_spec(f"{programs}:broken") == f"jax:{programs}:broken"
  with pytest.raises(ValueError, match="calling broken"):
    load_graph(f"{programs}:broken")
