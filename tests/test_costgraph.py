"""CostGraphDef text import/export (simulator/sources/costgraph.py, docs/regal_data.md)."""

import numpy as np
import pytest

from simulator.graph import CompGraph
from simulator.sources import costgraph, load_graph, regal_dag
from simulator.sources.costgraph import load_costgraph, parse_text_format, write_costgraph

# Hand-written: comments, REGAL's _SOURCE, sparse ids out of file order, two output ports,
# a port-1 input, control inputs, `<>` delimiters, a list value, unknown fields (scalar and
# message), an escaped string, and fields given without ':' before a message.
SMALL = r"""
# a tiny CostGraphDef
node {
  name: "_SOURCE"          # TF's pseudo-node: dropped
}
node {
  name: "conv"
  id: 10
  device: "/gpu:0"
  control_input: 0
  output_info { size: 100 alias_input_port: -1 shape { dim { size: 5 } } dtype: DT_FLOAT }
  output_info < size: 20, alias_input_port: -1 >
  persistent_memory_size: 64
  temporary_memory_size: 8
  compute_cost: 250
  future_field { anything: "goes" nested { x: 1 } }
  is_final: true
}
node {
  name: "relu\"1"
  id: 3
  input_info { preceding_node: 10 preceding_port: 1 }
  output_info { size: 7 }
  compute_time: 40        # used since compute_cost is absent
  memory_time: 5
  unknown_scalar: 1.5e3
}
node {
  name: "sink"; id: 20;
  input_info: { preceding_node: 3 }
  control_input: [10, 0]
  compute_cost: 1
  inaccurate: false
}
cost { cost: 1.0 dimension: "ms" }
"""


def _write(tmp_path, text, name="g.pbtxt"):
  path = tmp_path / name
  path.write_text(text)
  return str(path)


def test_parse_hand_written_file(tmp_path):
  g = load_costgraph(_write(tmp_path, SMALL))
  # ordered by id: relu (3), conv (10), sink (20); _SOURCE dropped with its control edges
  assert g.node_names == ('relu"1', "conv", "sink") and g.name == "g"
  np.testing.assert_allclose(g.cost, [40e-6, 250e-6, 1e-6])
  np.testing.assert_array_equal(g.out_bytes, [7, 120, 0])       # two ports summed
  np.testing.assert_array_equal(g.param_bytes, [0, 64, 0])
  np.testing.assert_array_equal(g.temp_bytes, [0, 8, 0])
  # conv -> relu (data, port 1), relu -> sink (data), conv -> sink (control)
  assert sorted(zip(g.senders.tolist(), g.receivers.tolist())) == [(0, 2), (1, 0), (1, 2)]
  assert (g.op_type == 0).all() and (g.colocation == -1).all()


def test_graph_spec_and_name(tmp_path):
  path = _write(tmp_path, SMALL)
  g = load_graph(f"costgraph:{path}")
  assert g.num_nodes == 3 and g.name == "g"
  assert load_graph(f"costgraph:{path},name=mine").name == "mine"
  assert load_graph(f"costgraph:{path},coarsen=2").num_nodes <= 2
  with pytest.raises(ValueError, match="does not exist"):
    load_graph(f"costgraph:{tmp_path}/missing.pbtxt")
  with pytest.raises(ValueError, match="costgraph needs a CostGraphDef text file"):
    load_graph("costgraph:")


def test_text_format_generic_parse():
  fields = parse_text_format('a: 1 b { c: "x" "y" } d: [1, 2] e < > [ext.f]: 3 # c\n')
  assert [f.name for f in fields] == ["a", "b", "d", "d", "e", "[ext.f]"]
  assert fields[1].value[0].value.text == "xy"  # adjacent strings concatenate
  assert fields[4].value == []
  assert costgraph.costgraph_from_text("node { id: 010 compute_cost: 0x10 }").cost[0] == 16e-6


@pytest.mark.parametrize("seed,integer", [(0, False), (1, False), (2, True)])
def test_round_trip_random_regal_graphs(tmp_path, seed, integer):
  g = regal_dag(60 + 20 * seed, seed=seed, integer_costs=integer)
  for source_node in (True, False):
    path = write_costgraph(g, str(tmp_path / f"r{source_node}.pbtxt"), source_node=source_node)
    h = load_costgraph(path, name=g.name)
    np.testing.assert_array_equal(h.senders, g.senders)
    np.testing.assert_array_equal(h.receivers, g.receivers)
    np.testing.assert_allclose(h.cost, g.cost, rtol=1e-12)  # whole microseconds here
    for f in ("out_bytes", "param_bytes", "temp_bytes"):
      np.testing.assert_array_equal(getattr(h, f), getattr(g, f))
    assert h.node_names == tuple(f"node_{i}" for i in range(g.num_nodes))
    assert h.name == g.name


def test_writer_keeps_names_and_refuses_reserved_ones(tmp_path):
  g = CompGraph(cost=[1e-3, 2e-3, 1e-3], senders=[0, 1], receivers=[1, 2], out_bytes=[4, 8, 1],
                node_names=['a "quoted"\\name', "b\tc", "nul\x00 esc\x1b é\u2028"])
  h = load_costgraph(write_costgraph(g, str(tmp_path / "n.pbtxt")))
  assert h.node_names == g.node_names
  bad = CompGraph(cost=[1.0], senders=[], receivers=[], node_names=["_SOURCE"])
  with pytest.raises(ValueError, match="reserved"):
    write_costgraph(bad, str(tmp_path / "bad.pbtxt"))
  # A lone surrogate has no UTF-8 form: a ValueError naming the node, and no file written.
  bad = CompGraph(cost=[1.0, 1.0], senders=[], receivers=[], node_names=["ok", "x\ud800"])
  with pytest.raises(ValueError, match=r"name of node 1 .* not valid Unicode"):
    write_costgraph(bad, str(tmp_path / "surrogate.pbtxt"))
  assert not (tmp_path / "surrogate.pbtxt").exists()


@pytest.mark.parametrize("text,match", [
    ('node { name: "a" id: 1 compute_cost: 1abc }', r"g\.pbtxt:1: unexpected character '1'"),
    ('node {\n  name: "a"\n  compute_cost: "x"\n}',
     r"g\.pbtxt:3: field 'CostGraphDef.node.compute_cost' expects an integer"),
    ('node {\n  name: "a"\n', r"g\.pbtxt:3: expected a field name or '}'"),
    ('node {\n name: "a"\n id: 1\n id: 2\n}', r"g\.pbtxt:4: field 'CostGraphDef.node.id' is "
     r"not repeated"),
    ('node: 3', r"g\.pbtxt:1: field 'CostGraphDef.node' is a message"),
    ('node { input_info: 4 }', r"field 'CostGraphDef.node.input_info' is a message"),
    ('node { name: "a" output_info { size: -5 } }', r"g\.pbtxt:1: field 'node 'a': "
     r"output_info.size' is negative"),
    ('node {\n name: "a"\n id: 1\n}\nnode {\n name: "b"\n id: 2\n input_info {\n'
     '  preceding_node: 7\n }\n}', r"g\.pbtxt:8: node 'b' \(id 2\): field "
     r"'input_info.preceding_node' names node id 7.*dangling"),
    ('node { name: "a" id: 1 control_input: 9 }', r"'control_input' names node id 9"),
    ('node { name: "a" id: 1 }\nnode { name: "b" id: 1 }', r"g\.pbtxt:2: node 'b' has id 1, "
     r"already used by node 'a' \(line 1\)"),
    ('node { name: "_SOURCE" }', "no nodes"),
    ('node { name: "a" bad_escape: "\\q" }', r"bad escape"),
    ('node { name: "a" id: 09 }', r"field 'CostGraphDef.node.id' expects an integer, got '09'"),
])
def test_malformed_files_name_file_line_and_field(tmp_path, text, match):
  with pytest.raises(ValueError, match=match):
    load_costgraph(_write(tmp_path, text))


def test_cycle_names_a_node_and_its_line(tmp_path):
  text = ('node {\n name: "a"\n id: 1\n input_info { preceding_node: 3 }\n}\n'
          'node {\n name: "b"\n id: 2\n input_info { preceding_node: 1 }\n}\n'
          'node {\n name: "c"\n id: 3\n input_info { preceding_node: 2 }\n}\n')
  with pytest.raises(ValueError, match=r"g\.pbtxt:\d+: .*cycle through node \d \('[abc]'\)"):
    load_costgraph(_write(tmp_path, text))
  loop = 'node { name: "a" id: 1 control_input: 1 }'
  with pytest.raises(ValueError, match=r"g\.pbtxt:1: .*self loop on node 0 \('a'\)"):
    load_costgraph(_write(tmp_path, loop))


def test_regal_published_example_parses(tmp_path):
  """The example graph of deepmind-research/regal's README (ids from 0, proto3 defaults)."""
  text = ('node {\n  name: "_SOURCE"\n}\nnode {\n  name: "node_0"\n  id: 1\n  control_input: 0\n'
          '}\nnode {\n  name: "node_1"\n  id: 2\n  output_info {\n    size: 70\n'
          '    alias_input_port: -1\n  }\n  control_input: 0\n  compute_cost: 58\n}\n'
          'node {\n  name: "node_3"\n  id: 4\n  input_info {\n    preceding_node: 2\n  }\n'
          '  output_info {\n    size: 55\n    alias_input_port: -1\n  }\n  control_input: 0\n'
          '  compute_cost: 58\n}\n')
  g = costgraph.costgraph_from_text(text, "regal.pbtxt")
  assert g.node_names == ("node_0", "node_1", "node_3")
  np.testing.assert_allclose(g.cost, [0, 58e-6, 58e-6])
  assert g.senders.tolist() == [1] and g.receivers.tolist() == [2]
