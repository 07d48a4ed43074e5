"""Topology: validated constructor (one test per rule), helpers, grouped links, presets (single-
and multi-host), pytree behaviour."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simulator import Topology, available_presets, preset
from simulator.topology import GB, GiB, US, LinkLevel, blocks, grouped_links

EXPECTED_DEVICES = {"nvlink2": 2, "nvlink4": 4, "nvlink8": 8, "pcie4": 4, "pcie8": 8,
                    "tpu2x2": 4, "k80x2": 2, "dgx1v_2x8_ib": 16, "dgx1v_4x8_ib": 32,
                    "dgx1v_2x8_eth": 16, "v100_2x4_ib": 8}


def args(d=3, **changes):
  """Valid `Topology.create` keyword arguments for d devices, with `changes` applied."""
  kw = dict(speed=np.ones(d), overhead=np.zeros(d), mem_capacity=np.full(d, 10.0),
            bandwidth=np.full((d, d), 2.0), latency=np.full((d, d), 0.5))
  kw.update(changes)
  return kw


def with_entry(field, index, value, d=3):
  """Valid arguments with one entry of `field` replaced."""
  kw = args(d)
  arr = np.array(kw[field], float)
  arr[index] = value
  kw[field] = arr
  return kw


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize("speed", [np.ones((2, 2)), np.ones(0), 1.0])
def test_speed_shape(speed):
  with pytest.raises(ValueError, match=r"speed must be a non-empty 1-D array"):
    Topology.create(**args(speed=speed))


@pytest.mark.parametrize("field", ["overhead", "mem_capacity"])
@pytest.mark.parametrize("shape", [(2,), (4,), (3, 1)])
def test_vector_shape(field, shape):
  with pytest.raises(ValueError, match=rf"{field} has shape \(.*\), expected \(3,\)"):
    Topology.create(**args(**{field: np.ones(shape)}))


@pytest.mark.parametrize("field", ["bandwidth", "latency"])
@pytest.mark.parametrize("shape", [(3,), (2, 2), (3, 4), (3, 3, 1)])
def test_matrix_shape(field, shape):
  with pytest.raises(ValueError, match=rf"{field} has shape \(.*\), expected \(3, 3\)"):
    Topology.create(**args(**{field: np.ones(shape)}))


@pytest.mark.parametrize("value", [0.0, -1.0, np.inf, np.nan])
def test_bad_speed(value):
  with pytest.raises(ValueError, match=r"speed of device 1 must be finite and > 0"):
    Topology.create(**with_entry("speed", 1, value))


@pytest.mark.parametrize("value", [-1e-6, np.inf, np.nan])
def test_bad_overhead(value):
  with pytest.raises(ValueError, match=r"overhead of device 2 must be finite and >= 0"):
    Topology.create(**with_entry("overhead", 2, value))


@pytest.mark.parametrize("value", [-1.0, np.nan, -np.inf])
def test_bad_mem_capacity(value):
  with pytest.raises(ValueError, match=r"mem_capacity of device 0 must be >= 0"):
    Topology.create(**with_entry("mem_capacity", 0, value))


@pytest.mark.parametrize("field,index,value,what", [
    ("mem_capacity", 1, 1e35, "mem_capacity of device 1 is above 1e\\+30"),
    ("speed", 0, 1e31, "speed of device 0 is above 1e\\+30"),
    ("speed", 2, 1e-31, "speed of device 2 is below 1e-30"),
    ("overhead", 1, 1e33, "overhead of device 1 is above")])
def test_values_beyond_float32_range(field, index, value, what):
  """Finite values the float32 simulator cannot hold (or divide by) are refused, not run."""
  with pytest.raises(ValueError, match=what):
    Topology.create(**with_entry(field, index, value))


def test_inf_and_zero_memory_allowed():
  t = Topology.create(**args(mem_capacity=[np.inf, 0.0, 5.0]))
  np.testing.assert_array_equal(t.mem_capacity, [np.inf, 0.0, 5.0])


@pytest.mark.parametrize("value", [0.0, -2.0, np.nan])
def test_bad_bandwidth_off_diagonal(value):
  with pytest.raises(ValueError, match=r"bandwidth of devices 2->0 must be > 0"):
    Topology.create(**with_entry("bandwidth", (2, 0), value))


def test_inf_bandwidth_off_diagonal_allowed():
  t = Topology.create(**with_entry("bandwidth", (0, 1), np.inf))
  assert t.bandwidth[0, 1] == np.inf and t.bandwidth[1, 0] == 2.0


@pytest.mark.parametrize("value", [-1.0, np.inf, np.nan])
def test_bad_latency_off_diagonal(value):
  with pytest.raises(ValueError, match=r"latency of devices 0->2 must be finite and >= 0"):
    Topology.create(**with_entry("latency", (0, 2), value))


def test_diagonal_ignored():
  kw = args()
  kw["bandwidth"] = np.array(kw["bandwidth"])
  kw["latency"] = np.array(kw["latency"])
  np.fill_diagonal(kw["bandwidth"], [0.0, -1.0, np.nan])
  np.fill_diagonal(kw["latency"], [np.inf, -1.0, np.nan])
  t = Topology.create(**kw)
  np.testing.assert_array_equal(np.diag(t.bandwidth), np.full(3, np.inf))
  np.testing.assert_array_equal(np.diag(t.latency), np.zeros(3))
  off = ~np.eye(3, dtype=bool)
  assert np.all(t.bandwidth[off] == 2.0) and np.all(t.latency[off] == 0.5)


def test_create_values_and_dtype():
  t = Topology.create(speed=[1, 2], overhead=[0, 1e-6], mem_capacity=[1, 2],
                      bandwidth=[[1, 3], [4, 1]], latency=[[0, 1], [2, 0]])
  assert t.num_devices == 2
  for leaf in jax.tree_util.tree_leaves(t):
    assert leaf.dtype == np.float64
  np.testing.assert_array_equal(t.speed, [1, 2])
  assert t.bandwidth[0, 1] == 3 and t.bandwidth[1, 0] == 4
  assert t.transfer_time(1, 0, 8.0) == 2.0 + 8.0 / 4


# ------------------------------------------------------------------ helpers
def test_uniform():
  t = Topology.uniform(3, bandwidth=5.0, latency=1.0, mem_capacity=7.0, speed=2.0, overhead=0.1)
  assert t.num_devices == 3
  np.testing.assert_array_equal(t.speed, [2, 2, 2])
  np.testing.assert_array_equal(t.overhead, [0.1] * 3)
  np.testing.assert_array_equal(t.mem_capacity, [7, 7, 7])
  off = ~np.eye(3, dtype=bool)
  assert np.all(t.bandwidth[off] == 5.0) and np.all(np.diag(t.bandwidth) == np.inf)
  assert np.all(t.latency[off] == 1.0) and np.all(np.diag(t.latency) == 0.0)


def test_uniform_defaults_and_errors():
  t = Topology.uniform(1, bandwidth=1.0)
  assert t.num_devices == 1
  assert t.mem_capacity[0] == np.inf and t.speed[0] == 1.0 and t.overhead[0] == 0.0
  with pytest.raises(ValueError, match="num_devices must be an integer >= 1"):
    Topology.uniform(0, bandwidth=1.0)
  with pytest.raises(ValueError, match="bandwidth of devices 0->1"):
    Topology.uniform(2, bandwidth=0.0)


def test_with_memory():
  t = Topology.uniform(3, bandwidth=5.0, latency=1.0, speed=2.0)
  m = t.with_memory(4.0)
  np.testing.assert_array_equal(m.mem_capacity, [4, 4, 4])
  m = t.with_memory([1.0, 2.0, np.inf])
  np.testing.assert_array_equal(m.mem_capacity, [1, 2, np.inf])
  for f in ("speed", "overhead", "bandwidth", "latency"):
    np.testing.assert_array_equal(getattr(m, f), getattr(t, f))
  assert np.all(t.mem_capacity == np.inf)  # the original is unchanged
  with pytest.raises(ValueError, match="mem_capacity of device 1"):
    t.with_memory([1.0, -1.0, 1.0])


# ------------------------------------------------------------------ presets
def test_preset_list():
  presets = available_presets()
  assert set(EXPECTED_DEVICES) <= set(presets)
  assert all(isinstance(v, str) and v for v in presets.values())


@pytest.mark.parametrize("name", sorted(available_presets()))
def test_preset_builds_and_is_sane(name):
  t = preset(name)
  d = t.num_devices
  if name in EXPECTED_DEVICES:
    assert d == EXPECTED_DEVICES[name]
  off = ~np.eye(d, dtype=bool)
  np.testing.assert_array_equal(t.bandwidth, t.bandwidth.T)
  np.testing.assert_array_equal(t.latency, t.latency.T)
  assert np.all(np.isfinite(t.bandwidth[off])) and np.all(t.bandwidth[off] > 0)
  assert np.all(np.isfinite(t.latency[off])) and np.all(t.latency[off] >= 0)
  assert np.all(np.diag(t.bandwidth) == np.inf) and np.all(np.diag(t.latency) == 0)
  assert np.all(t.speed > 0) and np.all(t.mem_capacity > 0) and np.all(t.overhead >= 0)


def test_nvlink8_figures():
  t = preset("nvlink8")
  for i in range(4):
    assert t.bandwidth[i, i + 4] == 50 * GB
  for q in (range(4), range(4, 8)):
    for i in q:
      for j in q:
        if i != j:
          assert t.bandwidth[i, j] == 25 * GB
  assert t.bandwidth[0, 5] == 10 * GB and t.bandwidth[3, 4] == 10 * GB
  assert np.all(t.mem_capacity == 32 * GB)
  assert t.latency[0, 1] == 10 * US and t.overhead[0] == 5 * US


@pytest.mark.parametrize("n", [2, 4])
def test_small_nvlink_is_one_quad(n):
  t = preset(f"nvlink{n}")
  off = ~np.eye(n, dtype=bool)
  assert np.all(t.bandwidth[off] == 25 * GB)


def test_pcie_figures():
  t = preset("pcie8")
  assert t.bandwidth[0, 3] == 12 * GB and t.bandwidth[4, 7] == 12 * GB
  assert t.bandwidth[0, 4] == 8 * GB and t.bandwidth[3, 5] == 8 * GB
  assert np.all(t.mem_capacity == 16 * GB)
  t4 = preset("pcie4")
  assert np.all(t4.bandwidth[~np.eye(4, dtype=bool)] == 12 * GB)


def test_tpu2x2_figures():
  t = preset("tpu2x2")
  # chips (0,0), (0,1), (1,0), (1,1): 0-3 and 1-2 are diagonal (two hops)
  for i, j in ((0, 1), (0, 2), (1, 3), (2, 3)):
    assert t.bandwidth[i, j] == 164 * GB
    assert t.latency[i, j] == 5 * US
  for i, j in ((0, 3), (1, 2)):
    assert t.bandwidth[i, j] == t.bandwidth[0, 1] / 2 == 82 * GB
    assert t.latency[i, j] == 2 * t.latency[0, 1]
  assert np.all(t.mem_capacity == 32 * GiB)


def test_k80x2_figures():
  t = preset("k80x2")
  assert t.bandwidth[0, 1] == 10 * GB and np.all(t.mem_capacity == 12 * GB)
  assert t.latency[0, 1] == 20 * US and np.all(t.overhead == 10 * US)


@pytest.mark.parametrize("name, hosts, network_bw, network_lat", [
    ("dgx1v_2x8_ib", 2, 12.5 * GB, 15 * US),
    ("dgx1v_4x8_ib", 4, 12.5 * GB, 15 * US),
    ("dgx1v_2x8_eth", 2, 3.125 * GB, 40 * US),
])
def test_multi_host_presets(name, hosts, network_bw, network_lat):
  t = preset(name)
  assert t.num_devices == 8 * hosts
  host = np.arange(t.num_devices) // 8
  same = host[:, None] == host[None, :]
  one = preset("nvlink8")
  for h in range(hosts):  # every host is wired exactly like the single-host nvlink8
    block = slice(8 * h, 8 * h + 8)
    np.testing.assert_array_equal(t.bandwidth[block, block], one.bandwidth)
    np.testing.assert_array_equal(t.latency[block, block], one.latency)
  assert np.all(t.bandwidth[~same] == network_bw) and np.all(t.latency[~same] == network_lat)
  # NVLink inside a host beats the network; the network costs more latency than any local link
  assert t.bandwidth[0, 1] == 25 * GB > network_bw and t.bandwidth[8, 12] == 50 * GB
  assert network_lat > t.latency[same & ~np.eye(t.num_devices, dtype=bool)].max()
  assert np.all(t.mem_capacity == 32 * GB) and np.all(t.overhead == 5 * US)
  assert np.all(t.speed == 1.0)


def test_v100_2x4_ib_is_a_multi_host_cluster_of_8():
  t, ib = preset("v100_2x4_ib"), preset("dgx1v_2x8_ib")
  host = np.arange(8) // 4
  same, off = host[:, None] == host[None, :], ~np.eye(8, dtype=bool)
  assert np.all(t.bandwidth[same & off] == 25 * GB) and np.all(t.latency[same & off] == 10 * US)
  assert ib.bandwidth[0, 8] == 12.5 * GB and ib.latency[0, 8] == 15 * US
  assert np.all(t.bandwidth[~same] == ib.bandwidth[0, 8])
  assert np.all(t.latency[~same] == ib.latency[0, 8])
  assert np.all(t.mem_capacity == 32 * GB) and np.all(t.overhead == 5 * US)


def test_ethernet_is_slower_than_infiniband():
  ib, eth = preset("dgx1v_2x8_ib"), preset("dgx1v_2x8_eth")
  assert eth.transfer_time(0, 8, 1e8) > ib.transfer_time(0, 8, 1e8)
  assert eth.transfer_time(0, 1, 1e8) == ib.transfer_time(0, 1, 1e8)


# ------------------------------------------------------------------ grouped links
def test_grouped_links_innermost_level_decides():
  levels = [LinkLevel(((0, 1), (2, 3)), 100.0, 1.0, "pair"),
            LinkLevel(((0, 1, 2, 3),), 10.0, 2.0, "host")]
  bw, lat = grouped_links(6, levels, default=(1.0, 5.0))
  expected_bw = np.array([[np.inf, 100, 10, 10, 1, 1],
                          [100, np.inf, 10, 10, 1, 1],
                          [10, 10, np.inf, 100, 1, 1],
                          [10, 10, 100, np.inf, 1, 1],
                          [1, 1, 1, 1, np.inf, 1],
                          [1, 1, 1, 1, 1, np.inf]])
  np.testing.assert_array_equal(bw, expected_bw)
  np.testing.assert_array_equal(lat, np.where(expected_bw == 100, 1.0, np.where(
      expected_bw == 10, 2.0, np.where(np.isinf(expected_bw), 0.0, 5.0))))


def test_grouped_links_groups_need_not_nest():
  """The first level listing both devices decides, even if a later level splits them."""
  bw, _ = grouped_links(4, [LinkLevel(((0, 2),), 50.0, 0.0), LinkLevel(blocks(4, 2), 25.0, 0.0)],
                        default=(5.0, 0.0))
  assert bw[0, 2] == 50 and bw[0, 1] == 25 and bw[2, 3] == 25 and bw[1, 2] == 5


def test_grouped_links_errors():
  with pytest.raises(ValueError, match=r"levels\[0\].members\[1\]: device 1 is also in "
                     r"levels\[0\].members\[0\]"):
    grouped_links(3, [LinkLevel(((0, 1), (1, 2)), 1.0, 0.0)], (1.0, 0.0))
  with pytest.raises(ValueError, match=r"device 3 out of range \[0, 3\)"):
    grouped_links(3, [LinkLevel(((0, 3),), 1.0, 0.0)], (1.0, 0.0))
  with pytest.raises(ValueError, match="devices 0 and 2 share no group, and no default"):
    grouped_links(3, [LinkLevel(((0, 1),), 1.0, 0.0)])
  with pytest.raises(ValueError, match="must be >= 1 and divide"):
    blocks(6, 4)
  bw, _ = grouped_links(2, [LinkLevel(((0, 1),), 3.0, 0.0)])  # all pairs covered: no default
  assert bw[0, 1] == 3.0


def test_unknown_preset_lists_available():
  with pytest.raises(ValueError, match=r"unknown topology preset 'nvlink3'.*nvlink2.*nvlink8"):
    preset("nvlink3")


def test_preset_mem_override():
  t = preset("nvlink4", mem_capacity=1e9)
  np.testing.assert_array_equal(t.mem_capacity, np.full(4, 1e9))
  t = preset("k80x2", mem_capacity=[1.0, np.inf])
  np.testing.assert_array_equal(t.mem_capacity, [1.0, np.inf])
  np.testing.assert_array_equal(t.bandwidth, preset("k80x2").bandwidth)
  with pytest.raises(ValueError, match="mem_capacity"):
    preset("k80x2", mem_capacity=-1.0)


def test_presets_are_fresh_objects():
  a = preset("nvlink2")
  b = preset("nvlink2", mem_capacity=1.0)
  assert np.all(a.mem_capacity == 32 * GB) and np.all(b.mem_capacity == 1.0)


# ------------------------------------------------------------------ pytree
def test_topology_is_a_pytree():
  t = preset("nvlink4")
  leaves = jax.tree_util.tree_leaves(t)
  assert len(leaves) == 5
  assert all(isinstance(x, np.ndarray) for x in leaves)
  t2 = jax.tree_util.tree_map(lambda x: x, t)
  assert isinstance(t2, Topology)


def test_vmap_over_stacked_topologies():
  a = Topology.uniform(3, bandwidth=2.0, speed=1.0, mem_capacity=5.0)
  b = Topology.uniform(3, bandwidth=4.0, speed=2.0, mem_capacity=7.0)
  stacked = jax.tree_util.tree_map(lambda x, y: jnp.stack([x, y]), a, b)
  assert stacked.speed.shape == (2, 3) and stacked.bandwidth.shape == (2, 3, 3)

  def f(t):
    return t.speed.sum() + t.bandwidth[0, 1] + t.mem_capacity[2] + t.num_devices

  out = jax.vmap(f)(stacked)
  np.testing.assert_allclose(np.asarray(out), [3 + 2 + 5 + 3, 6 + 4 + 7 + 3])
  out = jax.jit(jax.vmap(f))(stacked)
  np.testing.assert_allclose(np.asarray(out), [13, 20])


def test_link_tables_match_transfer_time():
  topo = preset("pcie8")
  lat, per_byte = topo.link_tables()
  assert np.all(np.diag(lat) == 0) and np.all(np.diag(per_byte) == 0)
  for src, dst in ((0, 1), (0, 5), (6, 2)):
    assert lat[src, dst] + 1e6 * per_byte[src, dst] == topo.transfer_time(src, dst, 1e6)
