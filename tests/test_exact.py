"""Tests of the exact baselines (CP-SAT joint placement, CP-SAT memory order) and METIS.

Toy instances with hand-computed optima; CP-SAT's relaxed optimum is a lower bound on the
simulated makespan of every other method on small random DAGs; edge cases (one op, infeasible
memory, too many ops) never crash.
"""

import importlib

import numpy as np
import pytest

from go_jax import objectives
from go_jax.methods import available, solve
from go_jax.methods import exact
from simulator import CompGraph, Topology
from simulator.sources import synthetic

FAST = {"time_limit_s": 10.0, "num_workers": 2}
TOL = 1e-6


def diamond():
  g = CompGraph(cost=[1, 2, 3, 1], senders=[0, 0, 1, 2], receivers=[1, 2, 3, 3],
                out_bytes=[1, 1, 1, 1], name="diamond")
  return g, Topology.uniform(2, bandwidth=1.0, latency=0.5)


# ------------------------------------------------------------------ cpsat
def test_cpsat_two_independent_ops_run_in_parallel():
  g = CompGraph(cost=[1.0, 1.0], senders=[], receivers=[])
  sol = solve("cpsat", g, Topology.uniform(2, bandwidth=1.0), **FAST)
  assert sol.info["status"] == "OPTIMAL"
  assert sol.info["model_objective"] == pytest.approx(1.0)
  assert sol.makespan == pytest.approx(1.0)
  assert sorted(sol.placement.tolist()) == [0, 1]


def test_cpsat_chain_with_costly_transfers_stays_on_one_device():
  g = CompGraph(cost=[1, 1, 1, 1], senders=[0, 1, 2], receivers=[1, 2, 3],
                out_bytes=[100, 100, 100, 100])
  sol = solve("cpsat", g, Topology.uniform(2, bandwidth=1.0, latency=0.5), **FAST)
  assert sol.info["status"] == "OPTIMAL"
  assert sol.info["model_objective"] == pytest.approx(4.0)
  assert len(set(sol.placement.tolist())) == 1
  assert sol.makespan == pytest.approx(4.0)


def test_cpsat_diamond_optimum():
  # Best: a, b on one device, c and d on the other: c starts at 1 + 1.5 = 2.5, ends 5.5;
  # b's output arrives at 3 + 1.5 = 4.5, so d runs 5.5..6.5. One device takes 7; DESIGN's
  # placement (only c away) takes 8.
  g, topo = diamond()
  sol = solve("cpsat", g, topo, **FAST)
  assert sol.info["status"] == "OPTIMAL"
  assert sol.info["model_objective"] == pytest.approx(6.5)
  assert sol.info["model_bound"] == pytest.approx(6.5)
  assert sol.makespan == pytest.approx(6.5)
  assert sol.info["lower_bound_valid"]


def _methods_to_compare():
  names = ["round_robin", "expert", "random"]
  try:
    importlib.import_module("go_jax.methods.list_scheduling")
  except ImportError:
    return names
  return names + [m for m in ("heft", "m_etf") if m in available()]


# Sizes chosen to share one simulator compilation bucket (16 nodes, 16 edges).
RANDOM_CASES = [  # (nodes, width, seed, topology)
    (11, 4, 2, Topology.uniform(2, bandwidth=2.0, latency=0.5)),
    (10, 4, 1, Topology.create([1.0, 2.0], [0.0, 0.0], [np.inf] * 2,
                               np.full((2, 2), 4.0), np.full((2, 2), 0.5))),
    (12, 4, 2, Topology.uniform(3, bandwidth=1.0, latency=1.0)),
]


@pytest.mark.parametrize("n,width,seed,topo", RANDOM_CASES)
def test_cpsat_is_a_lower_bound_on_random_dags(n, width, seed, topo):
  g = synthetic.layered_dag(n, width, seed=seed, integer_costs=True)
  sol = solve("cpsat", g, topo, **FAST)
  assert sol.info["status"] == "OPTIMAL", sol.info
  model = sol.info["model_objective"]
  assert model <= sol.makespan + TOL
  # Integer costs over speeds 1 and 2: durations are exact multiples of the time unit.
  assert objectives.makespan_lower_bound(g, topo)["bound"] <= model + TOL
  for name in _methods_to_compare():
    extra = {"samples": 1} if name == "random" else {}  # batch of one: no new compilation
    other = solve(name, g, topo, seed=seed, **extra)
    assert model <= other.makespan + TOL, (name, model, other.makespan)


def test_cpsat_memory_constraint_forces_a_split():
  # One device would take 2 s, but both params (10 B each) do not fit in 15 B.
  g = CompGraph(cost=[1, 1], senders=[0], receivers=[1], out_bytes=[1, 1],
                param_bytes=[10, 10])
  topo = Topology.uniform(2, bandwidth=1.0, latency=5.0, mem_capacity=15.0)
  sol = solve("cpsat", g, topo, **FAST)
  assert sol.info["memory_constraint"] == "on" and not sol.info["lower_bound_valid"]
  assert sol.placement[0] != sol.placement[1]
  assert sol.feasible and sol.makespan == pytest.approx(8.0)


def test_cpsat_refuses_large_graphs():
  g = synthetic.chain(41, seed=0)
  with pytest.raises(ValueError, match="max_ops"):
    solve("cpsat", g, Topology.uniform(2, bandwidth=1.0))


def test_cpsat_time_unit_rounds_down():
  dur = np.array([[0.25, 0.3]])
  trans = np.zeros((0, 2, 2))
  unit = exact.time_unit_for(dur, trans, {"time_unit": None, "resolution": 10})
  assert unit == pytest.approx(0.025)
  assert exact._units(np.array([0.3, 0.31]), 0.1).tolist() == [3, 3]


# ------------------------------------------------------------------ cpsat_memory
def fork():
  """a -> b1 -> c1 -> d, a -> b2 -> c2 -> d; b's outputs are big (10 B), the rest 1 B."""
  return CompGraph(cost=[1] * 6, senders=[0, 0, 1, 2, 3, 4], receivers=[1, 3, 2, 5, 4, 5],
                   out_bytes=[1, 10, 1, 10, 1, 1], name="fork")


def test_cpsat_memory_fork_runs_one_branch_first():
  # Finishing one branch first peaks at 12 B (a + b1 + c1, then a + c1 + b2); starting both
  # big ops before either consumer holds 21 B.
  g = fork()
  topo = Topology.uniform(1, bandwidth=1.0)
  place = np.zeros(6, np.int64)
  sol = solve("cpsat_memory", g, topo, placement=place, objective="peak_memory", **FAST)
  assert sol.info["status"] == "OPTIMAL"
  assert sol.info["model_objective"] == pytest.approx(12.0)
  assert sol.peak_memory[0] == pytest.approx(12.0)
  bfs = solve("bfs", g, topo, placement=place, objective="peak_memory")
  assert bfs.peak_memory[0] == pytest.approx(21.0)


@pytest.mark.parametrize("n,seed", [(12, 2), (10, 1)])
def test_cpsat_memory_never_worse_than_memory_greedy(n, seed):
  g = synthetic.layered_dag(n, 4, seed=seed, integer_costs=True)
  topo = Topology.uniform(1, bandwidth=1.0)
  place = np.zeros(g.num_nodes, np.int64)
  sol = solve("cpsat_memory", g, topo, placement=place, objective="peak_memory", **FAST)
  greedy = solve("memory_greedy", g, topo, placement=place, objective="peak_memory")
  assert sol.info["status"] in ("OPTIMAL", "FEASIBLE")
  assert sol.peak_memory.max() <= greedy.peak_memory.max() + TOL
  assert sol.info["peak"] == pytest.approx(sol.peak_memory[0])  # exact on one device
  lb = objectives.memory_lower_bound(g, topo)["bound"]
  assert lb <= sol.peak_memory.max() + TOL


def test_cpsat_memory_multi_device_placement_keeps_other_devices():
  g = fork()
  topo = Topology.uniform(3, bandwidth=1.0)
  place = np.array([0, 0, 0, 2, 2, 0])
  sol = solve("cpsat_memory", g, topo, placement=place, **FAST)
  assert sol.placement.tolist() == place.tolist()
  assert np.all(np.isfinite(sol.priority))


# ------------------------------------------------------------------ metis
def two_cliques(k=4):
  pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
  pairs += [(k + i, k + j) for i, j in pairs] + [(k - 1, k)]
  s, r = zip(*pairs)
  return CompGraph(cost=np.ones(2 * k), senders=s, receivers=r, out_bytes=np.full(2 * k, 10.0))


def test_metis_cuts_the_bridge_of_two_cliques():
  g = two_cliques()
  sol = solve("metis", g, Topology.uniform(2, bandwidth=1.0))
  place = sol.placement
  assert len(set(place[:4].tolist())) == 1 and len(set(place[4:].tolist())) == 1
  assert place[0] != place[4]
  assert sol.info["edge_cut_bytes"] == pytest.approx(10.0)
  assert sol.info["part_weights"] == [4.0, 4.0]


def test_metis_one_device_and_fewer_ops_than_devices():
  g = fork()
  assert solve("metis", g, Topology.uniform(1, bandwidth=1.0)).placement.tolist() == [0] * 6
  g2 = CompGraph(cost=[1.0, 3.0], senders=[0], receivers=[1])
  topo = Topology.create([1.0, 4.0, 2.0], np.zeros(3), [np.inf] * 3,
                         np.ones((3, 3)), np.zeros((3, 3)))
  sol = solve("metis", g2, topo)
  assert sol.placement.tolist() == [2, 1]  # heavier op on the fastest device


def test_metis_respects_colocation_and_speeds():
  g = synthetic.layered_dag(12, 4, seed=2, integer_costs=True, colocation_groups=3,
                            colocation_size=3)
  topo = Topology.create([1.0, 3.0, 1.0], np.zeros(3), [np.inf] * 3, np.ones((3, 3)),
                         np.zeros((3, 3)))
  sol = solve("metis", g, topo, seed=1, ufactor=50)
  for grp in range(3):
    assert len(set(sol.placement[g.colocation == grp].tolist())) == 1
  weights = sol.info["part_weights"]
  assert weights[1] == max(weights)


# ------------------------------------------------------------------ edge cases
def test_one_op_everywhere():
  g = CompGraph(cost=[2.0], senders=[], receivers=[], out_bytes=[1.0])
  topo = Topology.create([1.0, 2.0], [0.0, 0.0], [np.inf] * 2, np.ones((2, 2)),
                         np.zeros((2, 2)))
  sol = solve("cpsat", g, topo, **FAST)
  assert sol.placement.tolist() == [1] and sol.makespan == pytest.approx(1.0)
  assert sol.info["status"] == "OPTIMAL"
  sol = solve("cpsat_memory", g, topo, placement=[0], **FAST)
  assert sol.info["model_objective"] == pytest.approx(1.0)
  assert solve("metis", g, topo).placement.tolist() == [1]


@pytest.mark.parametrize("name", ["cpsat", "cpsat_memory", "metis"])
def test_infeasible_memory_reports_instead_of_raising(name):
  g, _ = diamond()
  g = g.replace(param_bytes=np.full(4, 100.0))
  topo = Topology.uniform(2, bandwidth=1.0, latency=0.5, mem_capacity=50.0)
  kw = {"placement": np.zeros(4, np.int64)} if name == "cpsat_memory" else {}
  if name.startswith("cpsat"):
    kw.update(FAST)
  sol = solve(name, g, topo, **kw)
  assert not sol.feasible and "out of memory" in sol.reason
  if name == "cpsat":
    assert sol.info["memory_constraint"].startswith("dropped")


def test_without_a_solution_methods_fall_back():
  g = synthetic.layered_dag(12, 4, seed=2, integer_costs=True)
  topo = Topology.uniform(3, bandwidth=1.0, latency=1.0)
  sol = solve("cpsat", g, topo, time_limit_s=1e-6, num_workers=1)
  assert sol.placement.shape == (12,) and np.isfinite(sol.makespan)
  if sol.info["status"] not in ("OPTIMAL", "FEASIBLE"):  # the usual case with 1 us
    assert sol.reason.startswith("CP-SAT found no solution")
    assert len(set(sol.placement.tolist())) == 1
  place = np.zeros(12, np.int64)
  sol = solve("cpsat_memory", g, topo, placement=place, time_limit_s=1e-6, num_workers=1)
  assert sol.feasible and np.all(np.isfinite(sol.priority))
  if sol.info["status"] not in ("OPTIMAL", "FEASIBLE"):
    assert "reason" in sol.info and sol.info["peak"] == pytest.approx(sol.peak_memory[0])
