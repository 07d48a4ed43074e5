"""Tests of go_jax.placements: placement names resolve through the method registry, shapes and
ranges, hand-checked priorities, clear errors."""

import numpy as np
import pytest

from simulator import CompGraph, Topology, sources
from go_jax import placements

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py


def tiny():
  """0 -> 1 -> 3, 0 -> 2 -> 3, 4 isolated; costs 1, 5, 2, 1, 0.5."""
  return CompGraph(cost=[1.0, 5.0, 2.0, 1.0, 0.5], senders=[0, 0, 1, 2],
                   receivers=[1, 2, 3, 3], name="tiny")


def shuffled_chain():
  """A chain whose ids are not in topological order: 3 -> 0 -> 2 -> 1."""
  return CompGraph(cost=[1.0, 1.0, 1.0, 1.0], senders=[3, 0, 2], receivers=[0, 2, 1])


TOPO = Topology.uniform(3, bandwidth=1.0)


# Registered placement methods that are cheap on a 5-op graph (the learned and search methods
# compile or search; `test_every_placement_method_is_a_placement_name` covers the names).
CHEAP = ("single", "round_robin", "random", "expert", "heft", "m_etf", "m_sct", "m_topo")


@pytest.mark.parametrize("name", CHEAP)
def test_placement_shapes_and_ranges(name):
  g = tiny()
  p = placements.make_placement(name, g, TOPO, seed=1)
  assert p.shape == (g.num_nodes,)
  assert np.issubdtype(p.dtype, np.integer)
  assert p.min() >= 0 and p.max() < TOPO.num_devices


@pytest.mark.parametrize("name", sorted(placements.PRIORITIES))
def test_priority_shapes(name):
  g = tiny()
  q = placements.make_priority(name, g, TOPO, seed=1)
  assert q.shape == (g.num_nodes,) and q.dtype == np.float64
  assert np.all(np.isfinite(q))


def test_every_placement_method_is_a_placement_name():
  from go_jax import methods  # pylint: disable=g-import-not-at-top
  names = placements.placement_names()
  assert set(names) == set(methods.available(kinds=("placement", "joint")))
  assert {"single", "random", "round_robin", "heft", "go_hint"} <= set(names)
  assert not set(names) & set(methods.available(kinds=("schedule",)))
  assert placements.PLACEMENTS == names  # the older name is a view of the registry


def test_names_mean_the_registered_methods():
  """make_placement("heft") is methods.solve("heft") (go-jax-simulate --placement=heft), and
  "single" / "random" mean the registered methods: the fastest device that fits, the best of
  K random placements for the seed."""
  from go_jax import methods  # pylint: disable=g-import-not-at-top
  g = tiny()
  topo = Topology.create([1.0, 4.0, 2.0], [0.0] * 3, [np.inf] * 3, np.ones((3, 3)),
                         np.zeros((3, 3)))
  for name in ("heft", "single", "random"):
    np.testing.assert_array_equal(placements.make_placement(name, g, topo, seed=5),
                                  methods.solve(name, g, topo, seed=5).placement)
  np.testing.assert_array_equal(placements.make_placement("single", g, topo), 1)  # fastest


def test_simple_placements():
  g = shuffled_chain()
  np.testing.assert_array_equal(placements.make_placement("single", g, TOPO), 0)
  # topological order is 3, 0, 2, 1 -> devices 0, 1, 2, 0
  np.testing.assert_array_equal(placements.make_placement("round_robin", g, TOPO),
                                [1, 0, 2, 0])
  big = CompGraph(cost=np.ones(8), senders=[], receivers=[])  # padded like tiny(): 8 nodes
  a = placements.make_placement("random", big, TOPO, seed=7)
  np.testing.assert_array_equal(a, placements.make_placement("random", big, TOPO, seed=7))
  assert not np.array_equal(a, placements.make_placement("random", big, TOPO, seed=8))
  assert set(a.tolist()) == {0, 1, 2}


def test_critical_path_hand_checked():
  # rank 3 = 1; rank 1 = 5 + 1 = 6; rank 2 = 2 + 1 = 3; rank 0 = 1 + max(6, 3) = 7; rank 4 = 0.5
  q = placements.make_priority("critical_path", tiny(), TOPO)
  np.testing.assert_allclose(q, [7.0, 6.0, 3.0, 1.0, 0.5])


def test_topo_and_uniform():
  g = shuffled_chain()
  np.testing.assert_array_equal(placements.make_priority("topo", g, TOPO), [3, 1, 2, 4])
  np.testing.assert_array_equal(placements.make_priority("uniform", g, TOPO), 0)


def test_npy_specs(tmp_path):
  g = tiny()
  path = str(tmp_path / "p.npy")
  np.save(path, np.array([2, 1, 0, 1, 2]))
  for spec in ("npy:" + path, path):
    np.testing.assert_array_equal(placements.make_placement(spec, g, TOPO), [2, 1, 0, 1, 2])
  q = str(tmp_path / "q.npy")
  np.save(q, np.array([0.5, 1.0, -2.0, 3.0, 0.0]))
  np.testing.assert_array_equal(placements.make_priority("npy:" + q, g, TOPO),
                                [0.5, 1.0, -2.0, 3.0, 0.0])


def test_inline_specs():
  """One number per op, comma-separated, as typed on a command line."""
  g = tiny()
  placement = placements.make_placement(" 2, 1,0,1,2 ", g, TOPO)
  assert placement.dtype == np.int32
  np.testing.assert_array_equal(placement, [2, 1, 0, 1, 2])
  np.testing.assert_array_equal(placements.make_priority("0.5,1,-2,3e0,0", g, TOPO),
                                [0.5, 1.0, -2.0, 3.0, 0.0])
  for spec, match in (("0,1,x,0,0", r"inline placement '0,1,x,0,0': item 2 \('x'\) is not a "
                                    "number"),
                      ("0,1,0", r"inline placement '0,1,0': shape \(3,\), expected \(5,\)"),
                      ("0,1,3,0,0", r"op 2 has device 3, outside \[0, 3\)"),
                      ("0,0.5,0,0,0", "op 1 has device 0.5, not an integer"),
                      ("0,1,,0,0", "item 2 \\(''\\) is not a number")):
    with pytest.raises(ValueError, match=match):
      placements.make_placement(spec, g, TOPO)
  with pytest.raises(ValueError, match="inline priority '1,nan,1,1,1': op 1 has priority nan"):
    placements.make_priority("1,nan,1,1,1", g, TOPO)
  one = sources.chain(1)
  np.testing.assert_array_equal(placements.make_placement("1", one, TOPO), [1])


def test_errors(tmp_path):
  g = tiny()
  with pytest.raises(ValueError, match="unknown placement 'bogus'.*heft.*round_robin"):
    placements.make_placement("bogus", g, TOPO)
  with pytest.raises(ValueError, match="'bfs' only schedules"):
    placements.make_placement("bfs", g, TOPO)
  with pytest.raises(ValueError, match="unknown priority 'bogus'.*critical_path"):
    placements.make_priority("bogus", g, TOPO)
  with pytest.raises(ValueError, match="does not exist"):
    placements.make_placement("npy:" + str(tmp_path / "missing.npy"), g, TOPO)
  with pytest.raises(ValueError, match="empty path"):
    placements.make_priority("npy:", g, TOPO)
  wrong = str(tmp_path / "wrong.npy")
  np.save(wrong, np.zeros(3, int))
  with pytest.raises(ValueError, match=r"shape \(3,\), expected \(5,\)"):
    placements.make_placement(wrong, g, TOPO)
  out_of_range = str(tmp_path / "range.npy")
  np.save(out_of_range, np.array([0, 1, 3, 0, 0]))
  with pytest.raises(ValueError, match=r"op 2 has device 3, outside \[0, 3\)"):
    placements.make_placement(out_of_range, g, TOPO)
  frac = str(tmp_path / "frac.npy")
  np.save(frac, np.array([0, 0.5, 0, 0, 0]))
  with pytest.raises(ValueError, match="not an integer"):
    placements.make_placement(frac, g, TOPO)
  nan = str(tmp_path / "nan.npy")
  np.save(nan, np.array([0, np.nan, 0, 0, 0]))
  with pytest.raises(ValueError, match="not finite"):
    placements.make_priority(nan, g, TOPO)
  garbage = tmp_path / "garbage.npy"
  garbage.write_bytes(b"not numpy")
  with pytest.raises(ValueError, match="cannot read"):
    placements.make_placement(str(garbage), g, TOPO)


def test_is_valid_spec():
  assert placements.is_valid_spec("random", placements.PLACEMENTS)
  assert placements.is_valid_spec("npy:/x/y", placements.PLACEMENTS)
  assert placements.is_valid_spec("a.npy", placements.PRIORITIES)
  assert not placements.is_valid_spec("random", placements.PRIORITIES)
  assert not placements.is_valid_spec("npy:", placements.PLACEMENTS)
