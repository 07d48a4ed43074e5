"""CompGraph: validation (one test per rule), canonical edges, accessors, I/O, jraph export."""

import os

import jraph
import numpy as np
import pytest

from simulator import CompGraph
from simulator.graph import FLOAT_FIELDS


def chain(n=4, **kw):
  """0 -> 1 -> ... -> n-1 with unit costs."""
  return CompGraph(cost=np.ones(n), senders=np.arange(n - 1), receivers=np.arange(1, n), **kw)


def full_graph():
  """A small DAG with every field set, names and colocation groups."""
  return CompGraph(
      cost=[1.0, 2.5, 0.0, 4.0, 0.5], senders=[3, 0, 0, 1, 2, 0], receivers=[4, 1, 2, 3, 3, 4],
      out_bytes=[10, 20, 30, 40, 50], param_bytes=[1, 0, 2, 0, 3], temp_bytes=[0, 5, 0, 5, 0],
      flops=[1e9, 2e9, 0, 3e9, 4e9], bytes_accessed=[7, 8, 9, 10, 11],
      op_type=[1, 2, 3, 2, 1], colocation=[-1, 4, 7, 4, -1], name="full",
      node_names=["in", "mm", "add", "relu", "out"])


# ------------------------------------------------------------------ validation
def test_empty_graph():
  with pytest.raises(ValueError, match=r"'empty_g'.*empty graph"):
    CompGraph(cost=[], senders=[], receivers=[], name="empty_g")


def test_cycle_names_a_node_on_the_cycle():
  # 0 -> 1 -> 2 -> {3 -> 4 -> 5 -> 3} -> 6, plus 5 -> 7; the cycle is {3, 4, 5}.
  names = [f"op{i}" for i in range(8)]
  s = [0, 1, 2, 3, 4, 5, 5, 5]
  r = [1, 2, 3, 4, 5, 3, 6, 7]
  with pytest.raises(ValueError, match="cycle") as info:
    CompGraph(cost=np.ones(8), senders=s, receivers=r, node_names=names, name="cyc")
  msg = str(info.value)
  on_cycle = [i for i in (3, 4, 5) if f"{i} ('op{i}')" in msg]
  assert on_cycle, msg
  assert not any(f"'op{i}'" in msg for i in (0, 1, 2, 6, 7)), msg


def test_two_cycle_without_names():
  with pytest.raises(ValueError, match=r"cycle through node [12]\b"):
    CompGraph(cost=np.ones(3), senders=[0, 1, 2], receivers=[1, 2, 1])


def test_self_loop():
  with pytest.raises(ValueError, match=r"edge 1 is a self loop on node 2 \('c'\)"):
    CompGraph(cost=np.ones(3), senders=[0, 2], receivers=[1, 2], node_names=["a", "b", "c"])


@pytest.mark.parametrize("field,s,r", [
    ("sender", [0, -1], [1, 2]),
    ("sender", [0, 3], [1, 2]),
    ("receiver", [0, 1], [1, -2]),
    ("receiver", [0, 1], [1, 7]),
])
def test_edge_index_out_of_range(field, s, r):
  bad = (s if field == "sender" else r)[1]
  with pytest.raises(ValueError, match=rf"edge 1 \(.*\) has {field} index {bad} out of range "
                     r"\[0, 3\)"):
    CompGraph(cost=np.ones(3), senders=s, receivers=r)


@pytest.mark.parametrize("field", FLOAT_FIELDS)
@pytest.mark.parametrize("value,what", [(-1.0, "negative"), (np.nan, "not finite"),
                                        (np.inf, "not finite"), (-np.inf, "not finite"),
                                        (1e39, "1e\\+39, above 1e\\+30")])
def test_bad_float_values(field, value, what):
  vals = np.ones(3)
  vals[1] = value
  kw = {"cost": np.ones(3), field: vals}
  with pytest.raises(ValueError, match=rf"field '{field}' of node 1 \('b'\) is {what}"):
    CompGraph(senders=[0], receivers=[1], node_names=["a", "b", "c"], **kw)


@pytest.mark.parametrize("field", FLOAT_FIELDS[1:] + ("op_type", "colocation"))
@pytest.mark.parametrize("length", [2, 4])
def test_mismatched_length(field, length):
  with pytest.raises(ValueError, match=rf"field '{field}' has length {length}, expected 3"):
    CompGraph(cost=np.ones(3), senders=[], receivers=[], **{field: np.zeros(length)})


@pytest.mark.parametrize("field", FLOAT_FIELDS + ("op_type", "colocation", "senders"))
def test_field_must_be_1d(field):
  kw = {"cost": np.ones(2), "senders": [0], "receivers": [1]}
  kw[field] = np.zeros((2, 1), int)
  with pytest.raises(ValueError, match=rf"field '{field}' must be 1-D"):
    CompGraph(**kw)


def test_senders_receivers_length_mismatch():
  with pytest.raises(ValueError, match="senders has 2 entries but receivers has 1"):
    CompGraph(cost=np.ones(3), senders=[0, 1], receivers=[2])


@pytest.mark.parametrize("field,value", [("op_type", [0, 1.5, 2]), ("op_type", [0, np.nan, 1]),
                                         ("colocation", [0, 0.5, -1]),
                                         ("senders", [0.5]), ("receivers", [1.25])])
def test_non_integer_int_fields(field, value):
  kw = {"cost": np.ones(3), "senders": [0], "receivers": [1], field: value}
  with pytest.raises(ValueError, match=rf"field '{field}' must hold integers"):
    CompGraph(**kw)


def test_integral_floats_accepted_for_int_fields():
  g = CompGraph(cost=np.ones(3), senders=[0.0], receivers=[2.0], op_type=[1.0, 2.0, 3.0])
  np.testing.assert_array_equal(g.op_type, [1, 2, 3])
  assert g.op_type.dtype == np.int32


def test_negative_op_type():
  with pytest.raises(ValueError, match=r"op_type of node 2 \('z'\) is negative"):
    CompGraph(cost=np.ones(3), senders=[], receivers=[], op_type=[0, 1, -3],
              node_names=["x", "y", "z"])


def test_colocation_below_minus_one():
  with pytest.raises(ValueError, match=r"colocation of node 1 is -2"):
    CompGraph(cost=np.ones(3), senders=[], receivers=[], colocation=[-1, -2, 0])


@pytest.mark.parametrize("names", [["a", "b"], ["a", "b", "c", "d"]])
def test_node_names_wrong_length(names):
  with pytest.raises(ValueError, match=rf"node_names has {len(names)} entries, expected 3"):
    CompGraph(cost=np.ones(3), senders=[], receivers=[], node_names=names)


# ------------------------------------------------------------------ canonical form
def test_duplicate_edges_merged_and_sorted():
  g = CompGraph(cost=np.ones(4), senders=[2, 0, 1, 0, 2, 0, 1], receivers=[3, 2, 3, 1, 3, 1, 2])
  np.testing.assert_array_equal(g.senders, [0, 0, 1, 1, 2])
  np.testing.assert_array_equal(g.receivers, [1, 2, 2, 3, 3])
  assert g.num_edges == 5
  assert g.senders.dtype == np.int32 and g.receivers.dtype == np.int32


def test_defaults():
  g = CompGraph(cost=[1, 2, 3], senders=[], receivers=[])
  for f in FLOAT_FIELDS[1:]:
    np.testing.assert_array_equal(getattr(g, f), np.zeros(3))
    assert getattr(g, f).dtype == np.float64
  np.testing.assert_array_equal(g.op_type, [0, 0, 0])
  np.testing.assert_array_equal(g.colocation, [-1, -1, -1])
  assert g.cost.dtype == np.float64
  assert g.name == "graph" and g.node_names is None
  assert g.num_nodes == 3 and g.num_edges == 0


def test_arrays_are_read_only():
  g = full_graph()
  for f in FLOAT_FIELDS + ("op_type", "colocation", "senders", "receivers"):
    arr = getattr(g, f)
    assert not arr.flags.writeable, f
    with pytest.raises(ValueError):
      arr[0] = 1
  assert not g.topological_order().flags.writeable


def test_input_arrays_are_copied():
  cost = np.ones(3)
  g = CompGraph(cost=cost, senders=[0], receivers=[1])
  cost[0] = 99.0
  assert g.cost[0] == 1.0
  assert cost.flags.writeable


# ------------------------------------------------------------------ accessors
def random_dag(seed, n=30):
  rng = np.random.default_rng(seed)
  perm = rng.permutation(n)  # ids not in topological order
  s, r = [], []
  for v in range(1, n):
    for u in rng.choice(v, size=min(v, int(rng.integers(0, 4))), replace=False):
      s.append(perm[u])
      r.append(perm[v])
  return CompGraph(cost=rng.uniform(0, 1, n), senders=s, receivers=r)


@pytest.mark.parametrize("seed", range(3))
def test_topological_order(seed):
  g = random_dag(seed)
  order = g.topological_order()
  assert sorted(order.tolist()) == list(range(g.num_nodes))
  pos = np.empty(g.num_nodes, int)
  pos[order] = np.arange(g.num_nodes)
  assert np.all(pos[g.senders] < pos[g.receivers])


def test_topological_order_smallest_ready_first():
  g = CompGraph(cost=np.ones(5), senders=[4, 3, 0], receivers=[0, 1, 2])
  np.testing.assert_array_equal(g.topological_order(), [3, 1, 4, 0, 2])


@pytest.mark.parametrize("seed", range(3))
def test_csr_agrees_with_edges(seed):
  g = random_dag(seed)
  edges = set(zip(g.senders.tolist(), g.receivers.tolist()))
  ptr, succ = g.successor_csr()
  assert ptr.shape == (g.num_nodes + 1,) and ptr[0] == 0 and ptr[-1] == g.num_edges
  got = set()
  for u in range(g.num_nodes):
    row = succ[ptr[u]:ptr[u + 1]].tolist()
    assert row == sorted(row)
    got |= {(u, v) for v in row}
  assert got == edges
  ptr, pred = g.predecessor_csr()
  assert ptr.shape == (g.num_nodes + 1,) and ptr[0] == 0 and ptr[-1] == g.num_edges
  got = set()
  for v in range(g.num_nodes):
    row = pred[ptr[v]:ptr[v + 1]].tolist()
    assert row == sorted(row)
    got |= {(u, v) for u in row}
  assert got == edges
  np.testing.assert_array_equal(g.in_degree(), np.diff(ptr))
  np.testing.assert_array_equal(g.out_degree(), np.diff(g.successor_csr()[0]))


def test_colocation_root():
  g = CompGraph(cost=np.ones(7), senders=[], receivers=[],
                colocation=[5, -1, 2, 5, 2, -1, 9])
  np.testing.assert_array_equal(g.colocation_root(), [0, 1, 2, 0, 2, 5, 6])
  np.testing.assert_array_equal(chain(3).colocation_root(), [0, 1, 2])


def test_replace_revalidates():
  g = chain(3)
  assert g.replace(name="other").name == "other"
  with pytest.raises(ValueError, match="negative"):
    g.replace(cost=[1.0, -1.0, 1.0])


# ------------------------------------------------------------------ I/O
def assert_same_graph(a, b):
  for f in FLOAT_FIELDS + ("op_type", "colocation", "senders", "receivers"):
    np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
    assert getattr(a, f).dtype == getattr(b, f).dtype, f
  assert a.name == b.name
  assert a.node_names == b.node_names


def test_save_load_round_trip(tmp_path):
  g = full_graph()
  path = str(tmp_path / "g.npz")
  g.save(path)
  assert os.listdir(tmp_path) == ["g.npz"]  # atomic: no temporary file left behind
  h = CompGraph.load(path)
  assert_same_graph(g, h)
  assert h.node_names == ("in", "mm", "add", "relu", "out") and h.name == "full"


def test_save_load_without_names(tmp_path):
  g = chain(3, name="c3")
  path = str(tmp_path / "c.npz")
  g.save(path)
  g.save(path)  # overwriting works
  assert os.listdir(tmp_path) == ["c.npz"]
  assert_same_graph(g, CompGraph.load(path))


def test_save_into_missing_folder_raises(tmp_path):
  with pytest.raises(OSError):
    chain(3).save(str(tmp_path / "missing" / "g.npz"))
  assert os.listdir(tmp_path) == []


def test_load_missing_field(tmp_path):
  path = str(tmp_path / "nofield.npz")
  np.savez(path, cost=np.ones(2), senders=np.array([0]))
  with pytest.raises(ValueError, match=r"nofield\.npz.*lacks field.*receivers"):
    CompGraph.load(path)


def test_load_invalid_content_names_file(tmp_path):
  path = str(tmp_path / "neg.npz")
  np.savez(path, cost=np.array([1.0, -1.0]), senders=np.array([0]), receivers=np.array([1]))
  with pytest.raises(ValueError, match=r"neg\.npz.*negative"):
    CompGraph.load(path)


def test_load_name_defaults_to_file_name(tmp_path):
  path = str(tmp_path / "anon.npz")
  np.savez(path, cost=np.ones(2), senders=np.array([0]), receivers=np.array([1]))
  assert CompGraph.load(path).name == "anon.npz"


def test_load_garbage_file(tmp_path):
  path = tmp_path / "garbage.npz"
  path.write_bytes(b"this is not an npz file" * 4)
  with pytest.raises(ValueError, match=r"garbage\.npz"):
    CompGraph.load(str(path))


def test_load_missing_file(tmp_path):
  with pytest.raises(ValueError, match=r"absent\.npz"):
    CompGraph.load(str(tmp_path / "absent.npz"))


def _corrupt(tmp_path, kind):
  good = tmp_path / "good.npz"
  full_graph().save(str(good))
  raw = bytearray(good.read_bytes())
  if kind == "truncated":
    raw = raw[:len(raw) // 2]
  elif kind == "empty":
    raw = bytearray()
  else:  # flipped bytes inside the first compressed member
    for i in range(60, 100):
      raw[i] ^= 0xFF
  path = tmp_path / f"{kind}.npz"
  path.write_bytes(bytes(raw))
  return str(path)


@pytest.mark.parametrize("kind", ["truncated", "empty", "flipped"])
def test_load_corrupt_npz(tmp_path, kind):
  path = _corrupt(tmp_path, kind)
  with pytest.raises(ValueError, match=rf"{kind}\.npz"):
    CompGraph.load(path)


# ------------------------------------------------------------------ jraph
def test_to_graphs_tuple():
  g = full_graph()
  gt = g.to_graphs_tuple()
  assert isinstance(gt, jraph.GraphsTuple)
  np.testing.assert_array_equal(gt.n_node, [5])
  np.testing.assert_array_equal(gt.n_edge, [6])
  np.testing.assert_array_equal(gt.senders, g.senders)
  np.testing.assert_array_equal(gt.receivers, g.receivers)
  assert gt.senders.dtype == np.int32 and gt.receivers.dtype == np.int32
  assert set(gt.nodes) == set(FLOAT_FIELDS) | {"op_type", "colocation"}
  for k, v in gt.nodes.items():
    assert v.shape == (5,), k
  for f in FLOAT_FIELDS:
    assert gt.nodes[f].dtype == np.float32
    np.testing.assert_allclose(gt.nodes[f], getattr(g, f), rtol=1e-6)
  np.testing.assert_array_equal(gt.nodes["op_type"], g.op_type)
  np.testing.assert_array_equal(gt.nodes["colocation"], g.colocation)
  assert gt.edges["bytes"].shape == (6,)
  np.testing.assert_array_equal(gt.edges["bytes"], g.out_bytes[g.senders])


def test_to_graphs_tuple_no_edges():
  gt = CompGraph(cost=[1.0, 2.0], senders=[], receivers=[]).to_graphs_tuple()
  np.testing.assert_array_equal(gt.n_edge, [0])
  assert gt.senders.shape == (0,) and gt.edges["bytes"].shape == (0,)
  assert gt.nodes["cost"].shape == (2,)


def test_op_type_out_of_int32_range_rejected():
  with pytest.raises(ValueError, match="op_type"):
    CompGraph(cost=np.ones(2), senders=[], receivers=[], op_type=np.array([1, 2**32]))
