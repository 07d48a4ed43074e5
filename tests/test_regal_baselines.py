"""REGAL's non-learned baselines: gp_dfs, local_search, xla_memory and brkga_tuned (with the
optuna tuner and its launcher), docs/regal_baselines.md."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from go_jax import methods
from go_jax.methods import climb, partition, regal_baselines, tuned
from go_jax.methods.simple import dfs
from simulator import CompGraph, Topology, preset
from simulator.sources import load_graph

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OBJECTIVES = ("peak_memory", "makespan")


@pytest.fixture(scope="module")
def graph():
  return load_graph("regal:n=24,seed=3,colocation_groups=3")


@pytest.fixture(scope="module")
def topo():
  return preset("nvlink2")


def _same_as_simulator(sol, graph, topo):
  again = methods.evaluate(graph, topo, sol.placement, sol.priority, sol.objective_kind)
  assert sol.objective == again["objective"] and sol.feasible == again["feasible"]


def test_registered_with_their_kinds():
  kinds = {n: methods.get(n).kind for n in ("gp_dfs", "local_search", "xla_memory",
                                             "brkga_tuned")}
  assert kinds == {"gp_dfs": "joint", "local_search": "joint", "xla_memory": "schedule",
                   "brkga_tuned": "joint"}


# ------------------------------------------------------------------ gp_dfs
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_gp_dfs_is_the_metis_partition_with_the_dfs_order(graph, topo, objective):
  sol = methods.solve("gp_dfs", graph, topo, objective=objective)
  _same_as_simulator(sol, graph, topo)
  weights = "bytes" if objective == "peak_memory" else "cost"
  assert sol.info["weights"] == weights
  g = graph.replace(cost=graph.param_bytes + graph.out_bytes + graph.temp_bytes) if (
      weights == "bytes") else graph
  sub = methods.Problem(g, topo, objective, 0, None, None)
  part = partition.metis(sub, {"seed": 0, "ufactor": 30, "speed_weights": weights == "cost"})
  np.testing.assert_array_equal(sol.placement, part.placement)
  root = graph.colocation_root()
  np.testing.assert_array_equal(sol.placement, sol.placement[root])  # groups on one device
  placed = methods.Problem(graph, topo, objective, 0, None, sol.placement)
  np.testing.assert_array_equal(sol.priority, dfs(placed, {}).priority)


def test_gp_dfs_rejects_bad_weights(graph, topo):
  with pytest.raises(ValueError, match="weights must be one of"):
    methods.solve("gp_dfs", graph, topo, weights="flops")


# ------------------------------------------------------------------ local_search
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_local_search_never_worse_than_its_start_and_within_budget(graph, topo, objective):
  start = methods.solve("gp_dfs", graph, topo, objective=objective)
  sol = methods.solve("local_search", graph, topo, objective=objective, budget=320, seed=1)
  _same_as_simulator(sol, graph, topo)
  assert sol.evaluations <= 320 and sol.info["steps"] == 5 and sol.info["batch"] == 64
  assert sol.info["start_objective"] == pytest.approx(start.objective, rel=1e-6)
  assert sol.objective <= start.objective
  np.testing.assert_array_equal(sol.placement, sol.placement[graph.colocation_root()])
  assert sol.info["best_objective"] == pytest.approx(sol.objective, rel=1e-6)
  again = methods.solve("local_search", graph, topo, objective=objective, budget=320, seed=1)
  np.testing.assert_array_equal(again.placement, sol.placement)  # deterministic per seed
  np.testing.assert_array_equal(again.priority, sol.priority)


def test_local_search_options(graph, topo):
  sol = methods.solve("local_search", graph, topo, objective="peak_memory", budget=5000,
                      patience=2)
  assert sol.info["steps"] < 5000 // 64 and sol.evaluations == sol.info["steps"] * 64
  with pytest.raises(ValueError, match="not a registered placement or joint method"):
    methods.solve("local_search", graph, topo, start="bfs")
  with pytest.raises(ValueError, match="swap_prob"):
    methods.solve("local_search", graph, topo, swap_prob=2.0)
  with pytest.raises(ValueError, match="budget"):
    methods.solve("local_search", graph, topo, budget=0)


@pytest.mark.parametrize("swap_prob", [0.0, 0.5])
def test_timed_climb_from_a_given_action(graph, topo, swap_prob):
  """The fine-tuning polish's climb: never worse than the given action, re-simulates to its
  best objective, groups kept together, the priority order kept when no swaps are drawn."""
  start = methods.solve("gp_dfs", graph, topo, objective="peak_memory")
  problem = methods.Problem(graph, topo, "peak_memory", 2, None, None)
  place, prio, info = climb.timed_climb(problem, start.placement, start.priority,
                                                  0.5, swap_prob=swap_prob, batch=8)
  assert info["start_objective"] == pytest.approx(start.objective, rel=1e-6)
  assert info["best_objective"] <= info["start_objective"] and info["steps"] >= 4
  again = methods.evaluate(graph, topo, place, prio, "peak_memory")
  assert again["objective"] == pytest.approx(info["best_objective"], rel=1e-6)
  np.testing.assert_array_equal(place, place[graph.colocation_root()])
  if swap_prob == 0.0:
    np.testing.assert_array_equal(np.argsort(prio, kind="stable"),
                                  np.argsort(start.priority, kind="stable"))
  with pytest.raises(ValueError, match="swap_prob"):
    climb.timed_climb(problem, place, prio, 0.1, swap_prob=1.5)


def test_timed_climb_with_kicks(graph, topo):
  """kick > 0: an iterated local search. It restarts from the best action, perturbed, at every
  local optimum, and returns the best action of all its calls (never worse than the start; it
  re-simulates to its objective)."""
  start = methods.solve("gp_dfs", graph, topo, objective="makespan")
  problem = methods.Problem(graph, topo, "makespan", 1, None, None)
  # one call of 4 steps: it compiles, so the timed run below is all climb
  climb.timed_climb(problem, start.placement, start.priority, 0.0, swap_prob=0.3,
                              batch=8)
  place, prio, info = climb.timed_climb(problem, start.placement, start.priority,
                                                  1.0, swap_prob=0.3, batch=8,
                                                  chunk_seconds=0.05, kick=0.5)
  assert info["calls"] >= 2 and info["kicks"] >= 1  # big kicks and short calls: some are stuck
  assert info["best_objective"] <= info["start_objective"]
  again = methods.evaluate(graph, topo, place, prio, "makespan")
  assert again["objective"] == pytest.approx(info["best_objective"], rel=1e-6)
  np.testing.assert_array_equal(place, place[graph.colocation_root()])
  with pytest.raises(ValueError, match="kick must be a share"):
    climb.timed_climb(problem, place, prio, 0.1, swap_prob=0.3, kick=2.0)


def test_climb_moves_along_edges(graph, topo):
  """edge_prob 1 (every relocation along an edge where its ends' devices differ): the climb
  still re-simulates to its objective and never gets worse."""
  start = methods.solve("gp_dfs", graph, topo, objective="makespan")
  problem = methods.Problem(graph, topo, "makespan", 4, None, None)
  place, prio, info = climb.timed_climb(problem, start.placement, start.priority,
                                                  0.3, swap_prob=0.3, batch=8, edge_prob=1.0)
  assert info["best_objective"] <= info["start_objective"]
  again = methods.evaluate(graph, topo, place, prio, "makespan")
  assert again["objective"] == pytest.approx(info["best_objective"], rel=1e-6)
  with pytest.raises(ValueError, match="edge_prob must be in"):
    climb.timed_climb(problem, place, prio, 0.1, swap_prob=0.3, edge_prob=1.5)


def test_climb_swaps_device_loads():
  """relabel_prob 1 (every move swaps two devices' loads): a chain split over a slow link moves
  whole onto a fast pair, the split itself unchanged."""
  chain = CompGraph(cost=[1.0] * 6, senders=[0, 1, 2, 3, 4], receivers=[1, 2, 3, 4, 5],
                    out_bytes=[1.0, 1.0, 100.0, 1.0, 1.0, 1.0], name="chain6")
  bandwidth = np.array([[1.0, 1.0, 1e4], [1.0, 1.0, 1e4], [1e4, 1e4, 1.0]])  # 0-1 slow
  topo3 = Topology.create(np.ones(3), np.zeros(3), np.full(3, np.inf), bandwidth,
                          np.zeros((3, 3)))
  problem = methods.Problem(chain, topo3, "makespan", 0, None, None)
  start = np.array([0, 0, 0, 1, 1, 1])
  prio = -np.arange(6.0)
  place, _, info = climb.timed_climb(problem, start, prio, 0.2, swap_prob=0.0,
                                               batch=8, relabel_prob=1.0)
  assert info["start_objective"] == pytest.approx(106.0) and info["best_objective"] < 7.0
  assert 2 in place and place[0] != place[5]  # one side now on device 2, the other kept
  np.testing.assert_array_equal(place[:3] == place[0], [True] * 3)
  np.testing.assert_array_equal(place[3:] == place[5], [True] * 3)
  with pytest.raises(ValueError, match="relabel_prob must be in"):
    climb.timed_climb(problem, start, prio, 0.1, swap_prob=0.0, relabel_prob=-1.0)


# ------------------------------------------------------------------ xla_memory
def _toy():
  """a -> b1 -> b2 -> d and a -> c1 -> c2 -> d; b1 and c1 output 100 bytes, the rest 1 byte.
  Ids interleave the branches, so the id (and BFS) order holds both 100-byte tensors at once
  (peak 201); finishing one branch first peaks at 102 (a, b1's output, b2's), the optimum."""
  return CompGraph(cost=[1.0] * 6, senders=[0, 0, 1, 2, 3, 4], receivers=[1, 2, 3, 4, 5, 5],
                   out_bytes=[1.0, 100.0, 100.0, 1.0, 1.0, 1.0], name="two_branches")


def test_xla_memory_finds_the_low_peak_order_of_a_toy_graph():
  g, topo = _toy(), Topology.uniform(1, bandwidth=1.0)
  place = np.zeros(6, int)
  sol = methods.solve("xla_memory", g, topo, objective="peak_memory", placement=place)
  bfs = methods.solve("bfs", g, topo, objective="peak_memory", placement=place)
  assert bfs.objective == 201.0 and sol.objective == 102.0 and sol.info["chosen"] == "list"
  assert regal_baselines.list_memory_order(g) == [0, 2, 4, 1, 3, 5]
  assert regal_baselines.post_order(g) == [0, 1, 3, 2, 4, 5]
  assert regal_baselines.dfs_memory_order(g) == [0, 1, 3, 2, 4, 5]


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_xla_memory_is_the_best_of_its_three_orders(graph, topo, objective):
  place = methods.solve("gp_dfs", graph, topo, objective=objective).placement
  sol = methods.solve("xla_memory", graph, topo, objective=objective, placement=place)
  _same_as_simulator(sol, graph, topo)
  np.testing.assert_array_equal(sol.placement, place)
  values = {}
  for name, fn in regal_baselines.XLA_ORDERS.items():
    order = np.asarray(fn(graph))
    assert sorted(order.tolist()) == list(range(graph.num_nodes))
    prio = np.empty(graph.num_nodes)
    prio[order] = -np.arange(graph.num_nodes, dtype=float)  # earlier = higher
    assert np.all(prio[graph.senders] > prio[graph.receivers]), name  # topological
    values[name] = methods.evaluate(graph, topo, place, prio, objective)["objective"]
  assert sol.objective == min(values.values())
  assert sol.info["objectives"] == pytest.approx(values, rel=1e-6)
  assert sol.evaluations == 3


# ------------------------------------------------------------------ brkga_tuned
def _write(path, obj):
  with open(path, "w") as fh:
    fh.write(obj if isinstance(obj, str) else json.dumps(obj))
  return str(path)


def test_brkga_tuned_runs_brkga_with_the_file_params(graph, topo, tmp_path):
  shipped = tuned.load_params()
  assert set(shipped) == set(tuned.PARAMS)
  params = {"population": 40, "elite_frac": 0.2, "mutant_frac": 0.1, "elite_bias": 0.6}
  path = _write(tmp_path / "p.json", {"params": params, "metadata": {"note": "test"}})
  sol = methods.solve("brkga_tuned", graph, topo, objective="peak_memory", budget=96,
                      params_file=path)
  ref = methods.solve("brkga", graph, topo, objective="peak_memory", budget=96, **params)
  assert sol.info["tuned_params"] == params and sol.info["population"] == 40
  assert sol.objective == ref.objective and sol.evaluations == ref.evaluations == 96
  np.testing.assert_array_equal(sol.placement, ref.placement)


@pytest.mark.parametrize("content,field", [
    ({"params": {"population": 40, "elite_frac": 0.2, "mutant_frac": 0.1}}, "elite_bias"),
    ({"params": {"population": "40", "elite_frac": 0.2, "mutant_frac": 0.1,
                 "elite_bias": 0.7}}, "population"),
    ({"params": {"population": 40, "elite_frac": 1.5, "mutant_frac": 0.1,
                 "elite_bias": 0.7}}, "elite_frac"),
    ({"params": {"population": 40, "elite_frac": 0.2, "mutant_frac": 0.1, "elite_bias": 0.7,
                 "generations": 3}}, "generations"),
    ({"population": 40}, "params"),
    ("{not json", "JSON"),
])
def test_brkga_tuned_rejects_a_malformed_params_file(graph, topo, tmp_path, content, field):
  path = _write(tmp_path / "bad.json", content)
  with pytest.raises(ValueError, match=field) as err:
    methods.solve("brkga_tuned", graph, topo, params_file=path)
  assert path in str(err.value)


def test_brkga_tuned_names_a_missing_file(graph, topo, tmp_path):
  with pytest.raises(ValueError, match="cannot read params_file"):
    methods.solve("brkga_tuned", graph, topo, params_file=str(tmp_path / "none.json"))


def test_tune_launcher_end_to_end(tmp_path):
  """Two tiny graphs (one padding bucket: one compile per trial), two trials (the defaults,
  then one TPE sample), a small budget."""
  pytest.importorskip("optuna")
  out = tmp_path / "tuned.json"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run(
      [sys.executable, "-m", "experiments.tune_brkga", "--graphs=regal:n=8,seed=1",
       "--graphs=regal:n=8,seed=2", "--trials=2", "--budget=200", f"--out={out}"],
      capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "trial 1/2" in proc.stdout and "trial 2/2" in proc.stdout
  doc = json.loads(out.read_text())
  assert tuned.load_params(str(out)) == doc["params"]
  meta = doc["metadata"]
  assert meta["graphs"] == ["regal:n=8,seed=1", "regal:n=8,seed=2"] and meta["budget"] == 200
  assert meta["command"].startswith("python -m experiments.tune_brkga")
  assert len(doc["trials"]) == 2 and doc["trials"][0]["gmean_ratio"] == 1.0
  assert meta["gmean_ratio_to_default"] <= 1.0


def test_tune_rejects_bad_arguments():
  pytest.importorskip("optuna")
  with pytest.raises(ValueError, match="no training instances"):
    tuned.tune([], trials=1)
  g = load_graph("regal:n=8,seed=1")
  with pytest.raises(ValueError, match="trials"):
    tuned.tune([("g", g, preset("nvlink2"))], trials=0)
