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
from simulator import CompGraph, Topology, preset, sources
from simulator.sources import synthetic

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

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
  assert sol.info["memory_constraint"] == "off" and sol.info["returned"] == "model action"


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


def test_cpsat_default_gives_one_answer_per_seed():
  """One worker by default (several run the interleaved search, below): in CP-SAT's default
  portfolio parallel workers race, and on this graph two of three solves with 2 workers proved
  different optima of the relaxation, which simulate to different makespans."""
  from go_jax import methods  # pylint: disable=g-import-not-at-top
  assert methods.get("cpsat").defaults["num_workers"] == 1
  assert methods.get("cpsat_memory").defaults["num_workers"] == 1
  g = synthetic.layered_dag(40, 6, seed=0)
  sols = [solve("cpsat", g, preset("nvlink4"), seed=1) for _ in range(3)]
  assert {s.info["status"] for s in sols} == {"OPTIMAL"}
  for s in sols[1:]:
    assert np.array_equal(s.placement, sols[0].placement) and s.objective == sols[0].objective


def test_cpsat_workers_interleave_and_deterministic_time_is_passed_on():
  """Several workers run CP-SAT's interleaved search, whose answer does not depend on which
  thread finishes first; deterministic_time is CP-SAT's max_deterministic_time, and
  time_limit_s=None sets no wall-clock limit."""
  solver = exact.make_solver({"time_limit_s": None, "deterministic_time": 3.0,
                              "num_workers": 2}, seed=5)
  assert solver.parameters.interleave_search and solver.parameters.num_workers == 2
  assert solver.parameters.max_deterministic_time == 3.0
  assert solver.parameters.max_time_in_seconds == float("inf")
  assert not exact.make_solver({"time_limit_s": 1.0, "deterministic_time": None,
                                "num_workers": 1}, seed=5).parameters.interleave_search


def test_cpsat_deterministic_time_gives_one_answer_where_the_limit_stops_it():
  """Stopped by a wall-clock limit (1 s), this graph gave another placement run to run with 1
  or 2 workers (the search reached another point); a deterministic-time limit stops it at the
  same point on every run, with 2 workers too."""
  g = sources.load_graph("regal:n=80,seed=1")
  opts = {"time_limit_s": None, "deterministic_time": 0.05, "num_workers": 2, "max_ops": 80}
  sols = [solve("cpsat", g, preset("nvlink2"), seed=1, **opts) for _ in range(2)]
  assert sols[0].info["status"] == "FEASIBLE"  # the limit stopped it, not a proof
  assert sols[0].info["model_objective"] == sols[1].info["model_objective"]
  assert np.array_equal(sols[0].placement, sols[1].placement)
  assert np.array_equal(sols[0].priority, sols[1].priority)


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
  # One device would take 2 s, but both params (10 B each) do not fit in 15 B: the necessary
  # memory conditions split them, and the optimum 1 + 6 + 1 stays a lower bound.
  g = CompGraph(cost=[1, 1], senders=[0], receivers=[1], out_bytes=[1, 1],
                param_bytes=[10, 10])
  topo = Topology.uniform(2, bandwidth=1.0, latency=5.0, mem_capacity=15.0)
  sol = solve("cpsat", g, topo, **FAST)
  assert sol.info["memory_constraint"] == "necessary conditions"
  assert sol.info["model_objective"] == pytest.approx(8.0)
  assert sol.placement[0] != sol.placement[1]
  assert sol.feasible and sol.makespan == pytest.approx(8.0)


def test_cpsat_conservative_memory_model_when_the_relaxation_runs_out():
  # Sinks a, b (6 B outputs, held until the makespan) and c (3 s), 10 B per device. The
  # relaxation pairs a with b (makespan 3), which the simulator finds 12 B > 10 B; the
  # conservative model keeps a and b apart (makespan 4) and its action is returned.
  g = CompGraph(cost=[1, 1, 3], senders=[], receivers=[], out_bytes=[6, 6, 0])
  topo = Topology.uniform(2, bandwidth=1.0, mem_capacity=10.0)
  sol = solve("cpsat", g, topo, **FAST)
  assert sol.info["status"] == "OPTIMAL" and sol.info["model_bound"] == pytest.approx(3.0)
  assert sol.info["simulated_model_makespan"] == pytest.approx(3.0)
  assert sol.info["conservative_status"] == "OPTIMAL"
  assert sol.info["returned"] == "conservative-memory model action"
  assert "returned conservative-memory model action" in sol.reason
  assert sol.feasible and sol.makespan == pytest.approx(4.0)
  assert sol.placement[0] != sol.placement[1]
  # Without the second model the relaxation's (out of memory) action is all there is.
  sol = solve("cpsat", g, topo, memory=False, **FAST)
  assert "conservative_status" not in sol.info and not sol.feasible


def test_cpsat_colocation_groups_give_a_valid_model():
  # Regression (issue 10): colocated ops share their leader's device literals, and the serial
  # hint named those literals once per op; CP-SAT rejects a hint with duplicate variables, so
  # every graph with a colocation group came back MODEL_INVALID (and silently serial).
  g = CompGraph(cost=[1, 2, 2, 1], senders=[0, 0, 1, 2], receivers=[1, 2, 3, 3],
                out_bytes=[1, 1, 1, 1], colocation=[0, -1, 0, -1])
  topo = Topology.create([1.0, 2.0], [0.0, 0.0], [np.inf] * 2, [[1, 4], [1, 1]],
                         [[0, 0.1], [0.2, 0]])
  dur = objectives.durations(g, topo)
  trans = exact._transfer_seconds(g, topo)
  unit = exact.time_unit_for(dur, trans, {"time_unit": None, "resolution": 10})
  joint = exact._Joint(g, exact._units(dur, unit), exact._units(trans, unit), 1.0)
  joint.hint_serial(1, exact._units(dur, unit))
  assert joint.model.Validate() == ""
  sol = solve("cpsat", g, topo, **FAST)
  assert sol.info["status"] == "OPTIMAL" and sol.placement[0] == sol.placement[2]
  assert sol.info["model_objective"] <= sol.makespan + TOL


def test_cpsat_huge_finite_memory_and_bytes_stay_in_range():
  # A capacity no sum can reach adds no constraint (it used to overflow the model); totals
  # above 2**40 bytes are counted in coarser byte units.
  g = CompGraph(cost=[1, 2], senders=[0], receivers=[1], out_bytes=[1e15, 1],
                param_bytes=[1e14, 0])
  sol = solve("cpsat", g, Topology.uniform(2, bandwidth=1e9, mem_capacity=1e30), **FAST)
  assert sol.info["status"] == "OPTIMAL" and sol.info["memory_constraint"] == "off"
  assert sol.makespan == pytest.approx(3.0)
  # Independent: the 1e15 B output and the 1e14 B params exceed 1.05e15 B together.
  g = g.replace(senders=[], receivers=[], param_bytes=[0, 1e14])
  sol = solve("cpsat", g, Topology.uniform(2, bandwidth=1e9, mem_capacity=1.05e15), **FAST)
  assert sol.info["status"] == "OPTIMAL"
  assert sol.info["memory_constraint"] == "necessary conditions"
  assert sol.placement[0] != sol.placement[1] and sol.feasible
  assert sol.makespan == pytest.approx(2.0)


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


def test_cpsat_time_unit_keeps_the_horizon_in_range():
  # 1e-12 s next to 1e8 s: the unit coarsens so the horizon is MAX_TIME_STEPS steps.
  dur = np.array([[1e-12, 1e-12], [1e8, 2e8]])
  trans = np.full((1, 2, 2), 1.0)
  cfg = {"time_unit": None, "resolution": 10}
  unit = exact.time_unit_for(dur, trans, cfg)
  assert unit == pytest.approx((2e8 + 1e-12 + 1.0) / exact.MAX_TIME_STEPS)
  assert exact._units(dur, unit).max() <= exact.MAX_TIME_STEPS
  with pytest.raises(ValueError, match="MAX_TIME_STEPS"):
    exact.time_unit_for(dur, trans, {"time_unit": 1e-9, "resolution": 10})
  with pytest.raises(ValueError, match="not finite"):
    exact.time_unit_for(dur, np.full((1, 2, 2), np.inf), cfg)
  with pytest.raises(ValueError, match="resolution"):
    exact.time_unit_for(dur, trans, {"time_unit": None, "resolution": 0})


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


@pytest.mark.parametrize("name,option", [
    ("cpsat", {"time_limit_s": float("nan")}), ("cpsat_memory", {"time_limit_s": float("nan")}),
    ("cpsat", {"time_limit_s": 0.0}), ("cpsat", {"deterministic_time": float("nan")}),
    ("cpsat_memory", {"deterministic_time": -1.0}), ("cpsat_memory", {"device": 1.5}),
    ("cpsat_memory", {"device": True}), ("cpsat_memory", {"device": "0"})])
def test_cpsat_bad_options_are_value_errors(name, option):
  """A NaN time limit passed the `<= 0` check and CP-SAT rejected the model (reported as a bug
  of the model, with the fallback returned); a fractional, bool or string device was truncated
  by int() (or read as device 1) instead of refused."""
  g, topo = diamond()
  place = np.zeros(4, int) if name == "cpsat_memory" else None
  with pytest.raises(ValueError, match=f"{name}: {next(iter(option))} must be"):
    solve(name, g, topo, placement=place, **option)
  with pytest.raises(ValueError, match=f"{name}: time_limit_s and deterministic_time are both"):
    solve(name, g, topo, placement=place, time_limit_s=None)  # no limit at all


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
  if name == "cpsat":  # proved: the bound then covers every action
    assert sol.info["memory_constraint"].startswith("dropped: no action fits")
    assert sol.info["model_bound"] <= sol.makespan + TOL


def test_without_a_solution_methods_fall_back():
  g = synthetic.layered_dag(12, 4, seed=2, integer_costs=True)
  topo = Topology.uniform(3, bandwidth=1.0, latency=1.0)
  sol = solve("cpsat", g, topo, time_limit_s=1e-6, num_workers=1)
  assert sol.placement.shape == (12,) and np.isfinite(sol.makespan)
  if sol.info["status"] not in ("OPTIMAL", "FEASIBLE"):  # the usual case with 1 us
    assert sol.reason.startswith("cpsat: CP-SAT found no solution within time_limit_s=1e-06")
    assert "returned the fallback: every op on device" in sol.reason
    assert len(set(sol.placement.tolist())) == 1
  place = np.zeros(12, np.int64)
  sol = solve("cpsat_memory", g, topo, placement=place, time_limit_s=1e-6, num_workers=1)
  assert sol.feasible and np.all(np.isfinite(sol.priority))
  if sol.info["status"] not in ("OPTIMAL", "FEASIBLE"):
    assert "returned the fallback: the" in sol.reason
    assert sol.info["peak"] == pytest.approx(sol.peak_memory[0])
