"""Topology files (simulator.topology_file) and topology specs (simulator.topology_spec).

Round trips of every preset, the group form, units, every kind of bad file (the message names
the file and the field), the shipped examples, and specs with .json paths, @mem options and
Topology objects.
"""

import copy
import json
import os
import re

import numpy as np
import pytest

from simulator import CompGraph, Topology, available_presets, preset, reference_simulate
from simulator import topology_file, topology_spec
from simulator.graph import upward_rank
from simulator.topology import GB, US
from simulator.topology_spec import (TopologySpec, load_topology, make_topology, parse_topology,
                                     single_device_footprint)

FIELDS = ("speed", "overhead", "mem_capacity", "bandwidth", "latency")


def assert_same(a: Topology, b: Topology):
  """Every array of the two topologies equal, bit for bit."""
  for f in FIELDS:
    x, y = np.asarray(getattr(a, f)), np.asarray(getattr(b, f))
    assert x.dtype == y.dtype and np.array_equal(x, y), f


def write(tmp_path, content, name="my.json") -> str:
  path = str(tmp_path / name)
  with open(path, "w") as fh:
    fh.write(content if isinstance(content, str) else json.dumps(content))
  return path


def two_hosts():
  """The worked example of docs/topology.md: 2 hosts x 2 GPUs."""
  return {
      "version": 1,
      "name": "two_hosts",
      "devices": [{"name": "a", "speed": 1.0, "memory": "16GB", "overhead": "5us"},
                  {"name": "b", "speed": 1.0, "memory": "16GB", "overhead": "5us"},
                  {"name": "c", "count": 2, "peak_flops": "7.85TFLOP/s", "memory": "inf"}],
      "links": {"groups": [{"name": "nvlink", "members": [["a", "b"], ["c0", "c1"]],
                            "bandwidth": "25GB/s", "latency": "10us"},
                           {"name": "pcie", "members": [[0, 1, 2]], "bandwidth": 1.2e10,
                            "latency": 1.5e-5}],
                "default": {"bandwidth": "100Gb/s", "latency": "15us"}},
  }


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("name", sorted(available_presets()))
def test_every_preset_round_trips(name, tmp_path):
  t = preset(name)
  as_dict = t.to_json()
  assert_same(Topology.from_json(as_dict), t)
  path = str(tmp_path / "sub" / f"{name}.json")
  assert t.to_json(path, name=name) == dict(as_dict, name=name)
  with open(path) as fh:  # strict JSON: no NaN / Infinity tokens
    json.load(fh, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
  assert_same(Topology.from_json(path), t)
  assert not [f for f in os.listdir(tmp_path / "sub") if f.startswith(".tmp")]


def test_to_json_content():
  t = Topology.create([1.0, 2.0], [0.0, 1e-6], [np.inf, 5.0], [[1, np.inf], [3, 1]],
                      [[0, 0.5], [0.25, 0]])
  out = t.to_json(description="x", device_names=["p", "q"])
  assert out["version"] == 1 and out["description"] == "x"
  assert out["devices"] == [{"name": "p", "speed": 1.0, "memory": "inf", "overhead": 0.0},
                            {"name": "q", "speed": 2.0, "memory": 5.0, "overhead": 1e-6}]
  assert out["links"] == {"bandwidth": [[None, "inf"], [3.0, None]],
                          "latency": [[None, 0.5], [0.25, None]]}
  with pytest.raises(ValueError, match="device_names must be 2 distinct names"):
    t.to_json(device_names=["p", "p"])


# ------------------------------------------------------------------ group form, units
def test_group_form_gives_the_expected_matrix():
  t = Topology.from_json(two_hosts())
  nv, pcie, ib = 25 * GB, 12 * GB, 12.5 * GB
  np.testing.assert_array_equal(t.bandwidth, [[np.inf, nv, pcie, ib],
                                              [nv, np.inf, pcie, ib],
                                              [pcie, pcie, np.inf, nv],
                                              [ib, ib, nv, np.inf]])
  np.testing.assert_allclose(t.latency * 1e6, [[0, 10, 15, 15], [10, 0, 15, 15],
                                               [15, 15, 0, 10], [15, 15, 10, 0]], rtol=1e-12)
  np.testing.assert_array_equal(t.speed, [1.0, 1.0, 0.5, 0.5])  # 7.85 / 15.7 TFLOP/s (V100)
  np.testing.assert_array_equal(t.mem_capacity, [16e9, 16e9, np.inf, np.inf])
  np.testing.assert_array_equal(t.overhead, [5 * US, 5 * US, 0.0, 0.0])
  # the doc's hand computation: 100 MB from a to d = 15 us + 1e8 / 12.5e9 s = 8.015 ms
  assert t.transfer_time(0, 3, 1e8) == pytest.approx(8.015e-3, rel=1e-12)


def test_worked_example_of_the_doc_is_the_tested_one():
  doc = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                     "topology.md")
  with open(doc) as fh:
    block = re.search(r"```json\n(.*?)```", fh.read(), re.DOTALL).group(1)
  assert json.loads(block) == two_hosts()


def test_units_reference_flops_and_scalars():
  t = Topology.from_json({
      "reference_peak_flops": "1TFLOPS",
      "devices": [{"peak_flops": 2e12, "memory": "16GiB", "overhead": "0.5ms"},
                  {"speed": "0.25", "memory": "1.5KB"}],
      "links": {"bandwidth": "8Mbit/s", "latency": "100ns"}})
  np.testing.assert_array_equal(t.speed, [2.0, 0.25])
  np.testing.assert_array_equal(t.mem_capacity, [16 * 2.0**30, 1500.0])
  np.testing.assert_array_equal(t.overhead, [0.5e-3, 0.0])
  assert t.bandwidth[0, 1] == 1e6 and t.latency[1, 0] == 100 * 1e-9


def test_count_names_and_comments():
  t = Topology.from_json({"_note": "ignored", "devices": [
      {"name": "gpu", "count": 3, "speed": 1, "memory": 1, "_why": "ignored"}],
      "links": {"groups": [{"members": [["gpu0", 2]], "bandwidth": 5, "latency": 0}],
                "default": {"bandwidth": 1, "latency": 0}}})
  assert t.num_devices == 3 and t.bandwidth[0, 2] == 5 and t.bandwidth[0, 1] == 1
  one = Topology.from_json({"devices": [{"speed": 1, "memory": "inf"}]})  # no links needed
  assert one.num_devices == 1


# ------------------------------------------------------------------ bad files
def _set(content, path, value):
  """content with the entry at `path` (keys / indices) set to value, or removed (value=DEL)."""
  out = copy.deepcopy(content)
  node = out
  for k in path[:-1]:
    node = node[k]
  if value is DEL:
    del node[path[-1]]
  else:
    node[path[-1]] = value
  return out


DEL = object()
MATRIX = {"devices": [{"name": n, "speed": 1, "memory": 1e9} for n in "xyz"],
          "links": {"bandwidth": [[None, 1e9, 1e9], [1e9, None, 1e9], [1e9, 1e9, None]],
                    "latency": 1e-5}}


@pytest.mark.parametrize("content, field, what", [
    (_set(two_hosts(), ["devices", 0, "memory"], DEL), "devices[0].memory", "is missing"),
    (_set(two_hosts(), ["devices"], DEL), "devices", "is missing"),
    (_set(two_hosts(), ["devices"], []), "devices", "must not be empty"),
    (_set(two_hosts(), ["links"], DEL), "links", "is missing"),
    (_set(two_hosts(), ["links", "default", "latency"], DEL), "links.default.latency",
     "is missing"),
    (_set(two_hosts(), ["devices", 1, "sped"], 1), "devices[1].sped", "is not a known key"),
    (_set(two_hosts(), ["link"], {}), "link", "is not a known key"),
    (_set(two_hosts(), ["links", "groups", 0, "bw"], 1), "links.groups[0].bw",
     "is not a known key"),
    (_set(two_hosts(), ["links", "groups", 1, "bandwidth"], -1), "links.groups[1].bandwidth",
     "must be > 0, got -1"),
    (_set(two_hosts(), ["links", "default", "bandwidth"], 0), "links.default.bandwidth",
     "must be > 0, got 0"),
    (_set(two_hosts(), ["links", "groups", 0, "latency"], "-3us"), "links.groups[0].latency",
     "must be >= 0, got -3us"),
    (_set(two_hosts(), ["devices", 2, "peak_flops"], "nan"), "devices[2].peak_flops",
     "must be a number (FLOP/s), got 'nan'"),
    (_set(two_hosts(), ["devices", 0, "memory"], "32GX"), "devices[0].memory",
     "must be a number (bytes) or inf, got '32GX'; units: B, KB"),
    (_set(two_hosts(), ["devices", 0, "overhead"], "inf"), "devices[0].overhead",
     "must be finite"),
    (_set(two_hosts(), ["devices", 0, "speed"], True), "devices[0].speed", "must be a number"),
    (_set(two_hosts(), ["devices", 0, "peak_flops"], 1e12), "devices[0]",
     "must give exactly one of 'speed'"),
    (_set(two_hosts(), ["devices", 2, "count"], 0), "devices[2].count", "must be >= 1"),
    (_set(two_hosts(), ["devices", 1, "name"], "a"), "devices[1].name",
     "gives device name 'a' again (first in devices[0])"),
    (_set(two_hosts(), ["version"], 2), "version", "must be 1"),
    (_set(two_hosts(), ["links", "groups", 0, "members", 1], ["c0", "b"]),
     "links.groups[0].members[1]", "device 1 ('b') is also in links.groups[0].members[0]"),
    (_set(two_hosts(), ["links", "groups", 0, "members", 1], ["c0", "nope"]),
     "links.groups[0].members[1][1]", "names no device: 'nope'"),
    (_set(two_hosts(), ["links", "groups", 1, "members", 0], [0, 4]),
     "links.groups[1].members[0][1]", "device index 4 out of range [0, 4)"),
    (_set(two_hosts(), ["links", "default"], DEL), "links.groups",
     "devices 0 ('a') and 3 ('c1') share no group, and no default"),
    (_set(_set(two_hosts(), ["links", "groups", 0, "members"], DEL),
          ["links", "groups", 0, "size"], 3), "links.groups[0].size",
     "must divide the number of devices (4), got 3"),
    (_set(two_hosts(), ["links", "groups", 0, "size"], 2), "links.groups[0]",
     "must give exactly one of 'members'"),
    (_set(two_hosts(), ["links", "bandwidth"], 1.0), "links", "mixes the matrix form"),
    (_set(MATRIX, ["links", "bandwidth", 0, 1], -1), "links.bandwidth[0][1]",
     "must be > 0, got -1"),
    (_set(MATRIX, ["links", "bandwidth", 2], [1, 2]), "links.bandwidth[2]",
     "must be a row of 3 entries (one per device), got 2 entries"),
    (_set(MATRIX, ["links", "bandwidth"], [[1, 1, 1]]), "links.bandwidth",
     "must be a 3x3 matrix (one row per device) or one number, got 1 rows"),
    (_set(MATRIX, ["links", "latency"], DEL), "links.latency", "is missing"),
    (_set(MATRIX, ["links", "latency"], "Infinity"), "links.latency", "must be finite"),
    ([1, 2], "", "must hold one JSON object, got list"),
    (_set(two_hosts(), ["devices", 0, "count"], 100000), "devices[0].count",
     "more than the 4096 a topology may have"),
    (_set(two_hosts(), ["devices", 0, "count"], 4097), "devices[0].count",
     "more than the 4096 a topology may have"),
])
def test_bad_file_names_file_and_field(tmp_path, content, field, what):
  path = write(tmp_path, content)
  with pytest.raises(ValueError) as err:
    Topology.from_json(path)
  msg = str(err.value)
  assert msg.startswith(f"{path}: {field}"), msg
  assert what in msg, msg
  if isinstance(content, dict):
    with pytest.raises(ValueError, match=f"^topology: {re.escape(field)}"):  # dicts: "topology"
      Topology.from_json(content)


def test_nan_token_and_diagonal(tmp_path):
  text = json.dumps(MATRIX).replace("1e-05", "NaN")
  with pytest.raises(ValueError, match=r"my.json: links.latency must be a number, got NaN"):
    Topology.from_json(write(tmp_path, text))
  text = json.dumps(MATRIX).replace('"latency": 1e-05', '"latency": [[NaN, 0, 0], [0, 0, 0], '
                                    '[0, 0, "junk"]]')
  t = Topology.from_json(write(tmp_path, text))  # diagonal entries are ignored
  assert np.all(np.diag(t.latency) == 0) and t.latency[0, 1] == 0


@pytest.mark.parametrize("text, what", [
    ("{\"devices\": [}", "not valid JSON: Expecting value: line 1 column 14"),
    ("devices: 1", "not valid JSON"),
    ("", "not valid JSON"),
    ("[" * 100000 + "]" * 100000, "not a topology file: JSON nested too deeply"),
])
def test_non_json_text(tmp_path, text, what):
  path = write(tmp_path, text)
  with pytest.raises(ValueError, match=f"^{path}: {what}"):
    Topology.from_json(path)


def test_missing_file_and_wrong_type(tmp_path):
  with pytest.raises(ValueError, match="nope.json: topology file does not exist"):
    Topology.from_json(str(tmp_path / "nope.json"))
  with pytest.raises(ValueError, match="not a file"):
    Topology.from_json(str(tmp_path))
  with pytest.raises(ValueError, match="takes a file path or a dict, got int"):
    Topology.from_json(3)


# ------------------------------------------------------------------ shipped examples
def test_example_files_load():
  names = sorted(f for f in os.listdir(topology_file.EXAMPLES_DIR) if f.endswith(".json"))
  assert {"dgx1v_2x8_ib.json", "mixed_4gpu.json"} <= set(names)
  for name in names:
    assert Topology.from_json(os.path.join(topology_file.EXAMPLES_DIR, name)).num_devices >= 1


def test_example_file_equals_multi_host_preset():
  path = os.path.join(topology_file.EXAMPLES_DIR, "dgx1v_2x8_ib.json")
  assert_same(Topology.from_json(path), preset("dgx1v_2x8_ib"))


def test_mixed_memory_example():
  t = Topology.from_json(os.path.join(topology_file.EXAMPLES_DIR, "mixed_4gpu.json"))
  np.testing.assert_array_equal(t.mem_capacity, [32e9, 32e9, 16e9, 16e9])
  assert t.speed[0] == 1.0 and t.speed[2] == pytest.approx(8.1 / 15.7)
  assert t.bandwidth[0, 1] == 25 * GB and t.bandwidth[0, 2] == t.bandwidth[2, 3] == 12 * GB


# ------------------------------------------------------------------ specs
@pytest.fixture(scope="module")
def chain():
  return CompGraph(cost=[1.0, 2.0, 1.0], senders=[0, 1], receivers=[1, 2],
                   out_bytes=[4.0, 8.0, 2.0], param_bytes=[16.0, 0.0, 32.0], name="chain")


def test_spec_with_json_path_and_mem(tmp_path, chain):
  path = str(tmp_path / "nv2.json")
  preset("nvlink2").to_json(path)
  spec = parse_topology(f" {path}@mem=0.6x ")
  assert (spec.spec, spec.preset, spec.mem_factor, spec.mem_bytes) == (
      f"{path}@mem=0.6x", path, 0.6, None)
  assert spec.is_file and not parse_topology("nvlink2").is_file
  topo, footprint = make_topology(spec, chain)
  want, want_footprint = make_topology("nvlink2@mem=0.6x", chain)  # same devices: bit-identical
  assert footprint == want_footprint > 0
  assert_same(topo, want)
  topo, ref = make_topology(f"{path}@mem=2e9", chain)
  assert ref is None and np.all(topo.mem_capacity == 2e9)
  assert_same(load_topology(path), preset("nvlink2"))
  upper = str(tmp_path / "NV2.JSON")
  os.rename(path, upper)
  assert_same(load_topology(upper), preset("nvlink2"))  # ".JSON" names a file too


def test_spec_path_may_contain_at_sign(tmp_path):
  folder = tmp_path / "me@host"
  folder.mkdir()
  path = str(folder / "t.json")
  preset("k80x2").to_json(path)
  spec = parse_topology(path + "@mem=inf")
  assert spec.preset == path and spec.mem_bytes == np.inf


def test_spec_missing_or_bad_file_fails_at_parse(tmp_path):
  with pytest.raises(ValueError, match="gone.json: topology file does not exist"):
    parse_topology(str(tmp_path / "gone.json") + "@mem=0.6x")
  path = write(tmp_path, {"devices": [{"speed": -1, "memory": 1}]})
  with pytest.raises(ValueError, match=r"my.json: devices\[0\].speed must be > 0, got -1"):
    parse_topology(path)


def test_topology_object_is_a_spec(chain):
  t = Topology.uniform(3, bandwidth=1e9, mem_capacity=5.0)
  spec = parse_topology(t)
  assert spec.spec == "custom3" and spec.preset == "custom" and spec.topology is t
  assert load_topology(t) is t
  assert make_topology(t, chain) == (t, None)
  spec = TopologySpec("custom3@mem=0.5x", "custom", mem_factor=0.5, topology=t)
  topo, footprint = make_topology(spec, chain)
  assert topo.mem_capacity[0] == 0.5 * footprint
  with pytest.raises(ValueError, match="give the graph"):
    load_topology("nvlink2@mem=0.5x")
  assert parse_topology(spec) is spec


@pytest.mark.parametrize("spec, match", [  # the messages every launcher shows
    ("nope", "unknown preset 'nope'"),
    ("nvlink2@mem=abc", "'nvlink2@mem=abc'"),
    ("nvlink2@mem=-1x", "'nvlink2@mem=-1x'"),
    ("nvlink2@mem=1e400", "got '1e400'"),  # overflows to inf: not a request for unbounded
    ("nvlink2@size=1", "bad option 'size=1'"),
    ("nvlink2@mem=1@mem=2", "given twice"),
    ("", "non-empty"),
    (None, "non-empty"),
])
def test_bad_specs(spec, match):
  with pytest.raises(ValueError, match=match):
    parse_topology(spec)


def test_footprint_matches_reference_simulator(chain):
  t = Topology.create([1.0, 2.0], [0.0, 0.0], [1.0, 1.0], np.full((2, 2), 1.0),
                      np.zeros((2, 2)))
  free = t.with_memory(np.inf)
  want = min(reference_simulate(chain, free, np.full(3, d), upward_rank(chain)).peak_memory.max()
             for d in range(2))
  assert single_device_footprint(chain, t) == want > 0


def test_spec_names_importable_from_topology_module():
  from simulator import topology  # pylint: disable=g-import-not-at-top
  from simulator.topology import parse_topology as p  # pylint: disable=g-import-not-at-top
  assert p is topology_spec.parse_topology
  assert topology.load_topology is load_topology and topology.TOPOLOGY_OPTIONS["mem"]
  with pytest.raises(AttributeError, match="no attribute 'nope'"):
    getattr(topology, "nope")
