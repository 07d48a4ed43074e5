"""End-to-end tests of the go-jax-simulate launcher (experiments/simulate.py) via main(argv)."""

import json
import os

import numpy as np
import pytest
from absl import app, flags

from simulator import CompGraph, reference_simulate, preset
from simulator.sources import synthetic
from experiments import simulate as launcher

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

FLAGS = flags.FLAGS
PROG = "go-jax-simulate"


@pytest.fixture(autouse=True)
def fresh_flags():
  """Each test parses its own command line from the flag defaults."""
  FLAGS.unparse_flags()
  yield
  FLAGS.unparse_flags()


def run_launcher(*args):
  argv = FLAGS([PROG, *args])
  launcher.main(argv)


@pytest.fixture
def graph_file(tmp_path):
  """A 60-op random layered DAG saved with CompGraph.save (the launcher's .npz input)."""
  g = synthetic.layered_dag(60, 6, seed=0, name="layered60")
  path = str(tmp_path / "g.npz")
  g.save(path)
  return path


def test_end_to_end(graph_file, tmp_path, capsys):
  out = tmp_path / "out"
  run_launcher(f"--graph={graph_file}", "--topology=nvlink4", "--placement=round_robin",
               "--priority=critical_path", f"--out={out}")
  summary = json.loads((out / "summary.json").read_text())
  png = out / "schedule.png"
  assert png.read_bytes()[:4] == b"\x89PNG"
  assert sorted(os.listdir(out)) == ["schedule.png", "summary.json"]  # no temporary files left

  g = CompGraph.load(graph_file)
  topo = preset("nvlink4")
  place = np.empty(g.num_nodes, int)
  place[g.topological_order()] = np.arange(g.num_nodes) % 4
  ref = reference_simulate(g, topo, place, launcher.placements.upward_rank(g))
  assert summary["makespan_s"] == pytest.approx(ref.makespan, rel=1e-12)
  assert summary["makespans_agree"]
  assert summary["graph"] == {"spec": graph_file, "name": "layered60", "nodes": 60,
                              "edges": g.num_edges, "total_cost_s": pytest.approx(g.cost.sum())}
  assert summary["transfers"] == len(ref.transfers) > 0
  assert summary["bytes_moved"] == pytest.approx(sum(g.out_bytes[t.op] for t in ref.transfers))
  devs = summary["devices"]
  assert [d["ops"] for d in devs] == [15, 15, 15, 15]
  assert sum(d["transfers_sent"] for d in devs) == summary["transfers"]
  assert all(0 < d["utilization"] <= 1 for d in devs)
  assert [d["peak_memory_bytes"] for d in devs] == pytest.approx(ref.peak_memory.tolist())
  assert summary["oom"] is False and devs[0]["mem_capacity_bytes"] == 32e9

  printed = capsys.readouterr().out
  for text in ("layered60", "nvlink4", "makespan", "agrees", "peak memory", "capacity", "OOM"):
    assert text in printed


def test_memory_override_random_placement_and_npy_priority(graph_file, tmp_path):
  prio = str(tmp_path / "prio.npy")
  np.save(prio, np.arange(60, dtype=float))
  out = tmp_path / "out"
  run_launcher(f"--graph={graph_file}", "--topology=nvlink4", "--placement=random", "--seed=3",
               f"--priority=npy:{prio}", "--mem_capacity=1e6", f"--out={out}")
  summary = json.loads((out / "summary.json").read_text())
  assert summary["oom"] is True
  assert summary["topology"]["mem_capacity_override"] == 1e6
  assert all(d["mem_capacity_bytes"] == 1e6 for d in summary["devices"])
  assert summary["seed"] == 3 and summary["priority"] == f"npy:{prio}"


def test_infinite_memory_is_null_in_json(graph_file, tmp_path):
  out = tmp_path / "out"
  run_launcher(f"--graph={graph_file}", "--placement=single", "--priority=uniform",
               "--mem_capacity=inf", f"--out={out}")
  summary = json.loads((out / "summary.json").read_text())
  assert summary["transfers"] == 0
  assert all(d["mem_capacity_bytes"] is None for d in summary["devices"])
  assert summary["topology"]["mem_capacity_override"] == "inf"
  assert [d["ops"] for d in summary["devices"]] == [60, 0, 0, 0]


def test_bad_flags_give_clear_errors(graph_file, tmp_path):
  with pytest.raises(flags.IllegalFlagValueError):
    FLAGS([PROG, "--mem_capacity=-1"])
  FLAGS.unparse_flags()
  out = f"--out={tmp_path / 'out'}"
  with pytest.raises(app.UsageError, match="--topology=bogus: .*unknown preset 'bogus'.*nvlink4"):
    run_launcher(f"--graph={graph_file}", "--topology=bogus", out)
  FLAGS.unparse_flags()
  with pytest.raises(app.UsageError, match="--placement=bogus: .*unknown placement"):
    run_launcher(f"--graph={graph_file}", "--placement=bogus", out)
  FLAGS.unparse_flags()
  with pytest.raises(app.UsageError, match="--graph=.*missing.npz.*does not exist"):
    run_launcher(f"--graph={tmp_path / 'missing.npz'}", out)
  FLAGS.unparse_flags()
  with pytest.raises(app.UsageError, match="--placement=.*does not exist"):
    run_launcher(f"--graph={graph_file}", f"--placement={tmp_path / 'nope.npy'}", out)
  FLAGS.unparse_flags()
  with pytest.raises(app.UsageError, match="unexpected positional"):
    run_launcher(f"--graph={graph_file}", "extra")
  FLAGS.unparse_flags()
  with pytest.raises(app.UsageError, match="--out=.*exists and is not a folder"):
    run_launcher(f"--graph={graph_file}", f"--out={graph_file}")


def test_topology_specs_and_graph_forms(tmp_path):
  """The spec forms of every launcher: PRESET@mem=0.6x, a topology .json file, bare names."""
  out = tmp_path / "out"
  run_launcher("--graph=chain:n=12,seed=0", "--topology=nvlink2@mem=0.6x", "--placement=single",
               f"--out={out}")
  summary = json.loads((out / "summary.json").read_text())
  footprint = summary["topology"]["footprint_bytes"]
  assert summary["topology"]["spec"] == "nvlink2@mem=0.6x"
  assert summary["topology"]["preset"] == "nvlink2"
  assert footprint > 0
  assert all(d["mem_capacity_bytes"] == pytest.approx(0.6 * footprint)
             for d in summary["devices"])
  assert summary["oom"] is True  # everything on one device needs the whole footprint

  topo_file = tmp_path / "two.json"
  preset("nvlink2").to_json(str(topo_file))
  FLAGS.unparse_flags()
  run_launcher("--graph=chain:n=12,seed=0", f"--topology={topo_file}@mem=2e9", f"--out={out}")
  summary = json.loads((out / "summary.json").read_text())
  assert summary["topology"]["preset"] == str(topo_file)
  assert [d["mem_capacity_bytes"] for d in summary["devices"]] == [2e9, 2e9]

  FLAGS.unparse_flags()
  run_launcher("--graph=alexnet", "--topology=nvlink2", f"--out={out}")  # a bare model name
  summary = json.loads((out / "summary.json").read_text())
  assert summary["graph"]["name"] == "pipedream_alexnet_train"


def test_default_flags(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # default --out is results/simulate, as results/place etc.
  run_launcher()
  out = tmp_path / "results" / "simulate"
  summary = json.loads((out / "summary.json").read_text())
  assert summary["graph"]["spec"] == launcher.DEFAULT_GRAPH
  assert summary["topology"]["preset"] == "nvlink4"
  assert summary["makespans_agree"]
  assert (out / "schedule.png").stat().st_size > 0
