"""Files users hand to go-jax (CostGraphDef text, .npz graphs, PipeDream and Piper profiles of
their own under $GO_JAX_DATA): each malformed case a fuzz pass found is a ValueError naming the
file and field, never another exception or a silently changed graph (docs/design.md section 8,
"Errors")."""

import numpy as np
import pytest

from simulator.graph import CompGraph
from simulator.sources import check_spec, costgraph, load_graph


# ------------------------------------------------------------------ CostGraphDef text
@pytest.mark.parametrize("text, match", [
    ("node { name: 'a' compute_cost: 1" + "0" * 400 + " }", "expects an int64"),
    ("node { name: 'a' output_info { size: 100000000000000000000000 } }", "expects an int64"),
    ("node { name: 'a' " + "x { " * 1000 + "}" * 1000 + " }", "nested deeper than 100"),
    ("node { name: 'a' compute_time: -7 }", "compute_time' is negative"),
    (r"node { name: 'a\777' }", "not a byte"),
    (r"node { name: 'a\377' }", "is not UTF-8"),
])
def test_costgraph_refuses(text, match):
  with pytest.raises(ValueError, match=match):
    costgraph.costgraph_from_text(text, "g.pbtxt")


def test_costgraph_reads_escaped_utf8_and_names_with_node_in_them(tmp_path):
  """TF's writer escapes each byte of a non-ASCII name; a graph named 'node 7' still gets the
  self-loop message (the line lookup once read "node 7" in the name as a node index)."""
  assert costgraph.costgraph_from_text(r"node { name: 'caf\303\251' }").node_names == ("café",)
  path = tmp_path / "node 7.pbtxt"
  path.write_text("node { name: 'a' id: 1 input_info { preceding_node: 1 } }\n")
  with pytest.raises(ValueError, match="self loop"):
    load_graph(f"costgraph:{path}")
  big = CompGraph(cost=[1.0, 1.0], senders=[0], receivers=[1], out_bytes=[1e30, 1.0])
  with pytest.raises(ValueError, match="out_bytes of node 0 .* int64"):
    costgraph.costgraph_text(big)


# ------------------------------------------------------------------ .npz graphs
@pytest.mark.parametrize("arrays, match", [
    (dict(cost=np.ones(2), senders=np.array(["0"]), receivers=np.array(["1"])),
     "'senders' must hold real numbers"),
    (dict(cost=np.array([1 + 5j, 2]), senders=np.array([0]), receivers=np.array([1])),
     "'cost' must hold real numbers"),
    (dict(cost=np.ones(2), senders=np.array([0]), receivers=np.array([1]),
          out_byte=np.array([5e9, 5e9])), r"unknown arrays \['out_byte'\]"),
    (dict(cost=np.ones(2), senders=np.array([0]), receivers=np.array([1]),
          name=np.array(["a", "b"])), "'name' must be one string"),
    (dict(cost=np.ones(2), senders=np.array([0]), receivers=np.array([1]),
          node_names=np.array([b"a", b"b"])), "'node_names' must be a 1-D string array"),
])
def test_npz_refuses(tmp_path, arrays, match):
  path = str(tmp_path / "g.npz")
  np.savez(path, **arrays)
  with pytest.raises(ValueError, match=match):
    load_graph(path)


def test_npz_save_refuses_names_it_cannot_keep(tmp_path):
  g = CompGraph(cost=[1.0, 1.0], senders=[0], receivers=[1], node_names=["a\x00", "b"])
  with pytest.raises(ValueError, match="NUL character"):
    g.save(str(tmp_path / "g.npz"))


# ------------------------------------------------------------------ profiles of one's own
def _pipedream(root, model, line):
  folder = root / "pipedream" / "profiler" / "x" / "profiles" / model
  folder.mkdir(parents=True)
  (folder / "graph.txt").write_bytes(line if isinstance(line, bytes) else line.encode())


_FIELDS = "backward_compute_time=2, activation_size=3, parameter_size=4"


@pytest.mark.parametrize("line, match", [
    ("node1 -- Linear -- forward_compute_time=1, backward_compute_time=2, "
     "activation_size=[-5; 10], parameter_size=4\n", "activation_size' must be finite and >= 0"),
    (f"node1 -- Linear -- forward_compute_time=1, forward_compute_time=9, {_FIELDS}\n",
     "forward_compute_time' given twice"),
    (b"node1 -- Lin\xff -- forward_compute_time=1, " + _FIELDS.encode() + b"\n",
     "cannot read PipeDream profile"),
])
def test_pipedream_profile_refuses(tmp_path, monkeypatch, line, match):
  monkeypatch.setenv("GO_JAX_DATA", str(tmp_path))
  _pipedream(tmp_path, "mine", line)
  with pytest.raises(ValueError, match=match):
    load_graph("pipedream:mine,training=false")


def _tmpc(time="1", extra=""):
  return ('{"id": "vanilla", "timePerSample": %s, "parameterSize": 0, "memoryUsageA": 0, '
          '"memoryUsageB": 0%s}' % (time, extra))


@pytest.mark.parametrize("text, match", [
    ('{"nodes": [{"id": 0, "TMPCs": {"1": [%s]}}], "edges": []}'
     % _tmpc(extra=', "timePerSample": 99'), "'timePerSample' is given twice"),
    ('{"nodes": [{"id": 0, "TMPCs": {"1": [%s]}}], "edges": []}' % _tmpc("1" + "0" * 400),
     "'timePerSample' must be a finite number"),
    ('{"nodes": [{"id": 0, "TMPCs": {"1": null}}], "edges": []}', "must be a list of TMPCs"),
    ('{"nodes": [{"id": 0, "TMPCs": {"1": [%s, %s]}}], "edges": []}' % (_tmpc(), _tmpc()),
     "two TMPCs with one id"),
    ("[" * 100000 + "]" * 100000, "nested too deeply"),
    (b'{"nodes": [{"id": 0, "name": "\xff"}], "edges": []}', "cannot read Piper input"),
])
def test_piper_input_refuses(tmp_path, monkeypatch, text, match):
  monkeypatch.setenv("GO_JAX_DATA", str(tmp_path))
  folder = tmp_path / "piper" / "inputs"
  folder.mkdir(parents=True)
  (folder / "mine.json").write_bytes(text if isinstance(text, bytes) else text.encode())
  for fn in (load_graph, check_spec):  # a sweep refuses it at launch, as a cell would
    with pytest.raises(ValueError, match=match):
      fn("piper:mine")


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_check_spec_refuses_what_load_graph_refuses(value):
  spec = f"pipedream:resnet50,optimizer_state_factor={value}"
  for fn in (load_graph, check_spec):
    with pytest.raises(ValueError, match="optimizer_state_factor must be finite and >= 0"):
      fn(spec)
  assert check_spec("pipedream:resnet50")  # a valid one still passes
