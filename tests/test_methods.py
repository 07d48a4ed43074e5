"""The method registry, objectives and bounds, and the simple methods."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from go_jax import methods, objectives
from simulator import CompGraph, Topology, preset, simulate
from simulator.sources import load_graph

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

SIMPLE = ("single", "random", "round_robin", "expert")
RULES = ("bfs", "dfs", "critical_path", "memory_greedy")


@pytest.fixture(scope="module")
def graph():
  return load_graph("layered:n=60,width=8,seed=3")


def test_registry_lists_simple_methods():
  names = methods.available()
  for m in SIMPLE + RULES:
    assert m in names and names[m]


@pytest.mark.parametrize("name", SIMPLE)
def test_solution_is_what_the_simulator_says(graph, name):
  topo = preset("nvlink4")
  sol = methods.solve(name, graph, topo, seed=1)
  again = methods.evaluate(graph, topo, sol.placement, sol.priority)
  assert sol.objective == again["objective"] and sol.feasible == again["feasible"]
  assert sol.makespan == again["makespan"]
  assert sol.lower_bound <= sol.objective + 1e-12
  assert sol.gap >= -1e-9 and sol.placement.shape == (graph.num_nodes,)


@pytest.mark.parametrize("name", RULES)
def test_scheduling_rules_keep_the_placement(graph, name):
  topo = preset("nvlink4")
  place = methods.solve("expert", graph, topo).placement
  sol = methods.solve(name, graph, topo, objective="peak_memory", placement=place)
  np.testing.assert_array_equal(sol.placement, place)
  assert sol.objective == methods.evaluate(graph, topo, place, sol.priority,
                                           "peak_memory")["objective"]
  assert sol.lower_bound <= sol.objective


def test_bounds_hold_on_random_actions():
  rng = np.random.default_rng(0)
  for seed in range(4):
    g = load_graph(f"regal:n=40,seed={seed}")
    topo = preset("pcie4")
    place = rng.integers(0, 4, (64, g.num_nodes))
    prio = rng.random((64, g.num_nodes))
    res = simulate(g, topo, place, prio)
    lo = objectives.makespan_lower_bound(g, topo)["bound"]
    hi = objectives.makespan_upper_bound(g, topo)
    assert np.all(np.asarray(res.makespan) >= lo * (1 - 1e-6))
    assert np.all(np.asarray(res.makespan) <= hi * (1 + 1e-6))
    mem_lo = objectives.memory_lower_bound(g, topo)["bound"]
    mem_hi = objectives.memory_upper_bound(g)
    peak = np.asarray(res.peak_memory).max(-1)
    assert np.all(peak >= mem_lo * (1 - 1e-6)) and np.all(peak <= mem_hi * (1 + 1e-6))


def test_memory_bound_skips_ops_too_short_for_float32():
  """A 1e-9 s op after a 1 s one starts and finishes at the same float32 instant, so its
  100-byte scratch is never live in `simulate`; the peak-memory bound counted it (100 B over a
  simulated peak of 0: a gap of -1)."""
  g = CompGraph(cost=[1.0, 1e-9], senders=[0], receivers=[1], temp_bytes=[0.0, 100.0])
  topo = Topology.uniform(1, bandwidth=1.0)
  assert objectives.memory_lower_bound(g, topo)["op"] == 0.0
  sol = methods.solve("single", g, topo, objective="peak_memory")
  assert sol.objective == 0.0 and sol.lower_bound <= sol.objective
  visible = CompGraph(cost=[1.0, 1e-5], senders=[0], receivers=[1], temp_bytes=[0.0, 100.0])
  assert objectives.memory_lower_bound(visible, topo)["op"] == 100.0


def test_lower_bounds_by_hand():
  # chain a->b->c of costs 1, 2, 3 on 2 devices of speed 1 and 2
  g = CompGraph(cost=[1.0, 2.0, 3.0], senders=[0, 1], receivers=[1, 2])
  topo = Topology.create([1.0, 2.0], [0.0, 0.0], [np.inf] * 2, np.ones((2, 2)), np.zeros((2, 2)))
  lb = objectives.makespan_lower_bound(g, topo)
  assert lb["critical_path"] == 3.0 and lb["work"] == 2.0 and lb["bound"] == 3.0


@pytest.mark.parametrize("objective", ["makespan", "peak_memory"])
def test_infeasible_ranks_below_feasible_when_the_bound_is_zero(objective):
  """Free ops on free links: the makespan bound is 0, and an infeasible action scored 0 (the
  penalty is a multiple of the bound), as good as a feasible one; `single` then answered the
  out-of-memory device 0."""
  g = CompGraph(cost=[0.0, 0.0], senders=[0], receivers=[1], out_bytes=[0.0, 0.0],
                param_bytes=[1.0, 1.0])
  topo = Topology.create(np.ones(2), np.zeros(2), [0.5, np.inf], np.full((2, 2), np.inf),
                         np.zeros((2, 2)))
  oom = methods.evaluate(g, topo, [0, 0], np.ones(2), objective=objective)
  fits = methods.evaluate(g, topo, [1, 1], np.ones(2), objective=objective)
  assert not oom["feasible"] and fits["feasible"]
  assert oom["objective"] > fits["objective"]
  sol = methods.solve("single", g, topo, objective=objective)
  assert sol.feasible and list(sol.placement) == [1, 1]


def test_infeasible_ranks_below_every_feasible():
  g = load_graph("layered:n=40,width=6,seed=1")
  topo = preset("nvlink4")
  one = simulate(g, topo, np.zeros(g.num_nodes, int), np.zeros(g.num_nodes))
  spread = simulate(g, topo, np.arange(g.num_nodes) % 4, np.zeros(g.num_nodes))
  lo, hi = float(np.max(spread.peak_memory)), float(np.max(one.peak_memory))
  assert lo < hi
  tight = topo.with_memory((lo + hi) / 2)  # round-robin fits, one device does not
  rng = np.random.default_rng(1)
  place = rng.integers(0, 4, (128, g.num_nodes))
  place[0] = 0  # everything on one device: out of memory
  place[1] = np.arange(g.num_nodes) % 4  # fits
  prio = np.zeros((128, g.num_nodes))
  res = simulate(g, tight, place, prio)
  ub = objectives.makespan_upper_bound(g, tight)
  value = np.asarray(objectives.objective_of("makespan", res, tight, ub))
  oom = np.asarray(res.oom)
  assert oom[0] and (~oom).any()
  assert value[oom].min() > value[~oom].max()
  # more overflow ranks worse
  sol = methods.solve("single", g, tight)
  assert not sol.feasible and "out of memory" in sol.reason


def test_single_picks_the_fastest_device_that_fits():
  g = CompGraph(cost=[4.0, 4.0], senders=[0], receivers=[1], out_bytes=[1.0, 1.0],
                param_bytes=[10.0, 10.0])
  topo = Topology.create([1.0, 2.0, 4.0], [0.0] * 3, [100.0, 100.0, 5.0], np.ones((3, 3)),
                         np.zeros((3, 3)))
  sol = methods.solve("single", g, topo)
  assert sol.feasible and set(sol.placement.tolist()) == {1} and sol.makespan == 4.0


def test_expert_split_is_contiguous_and_balanced():
  g = load_graph("chain:n=40")
  from go_jax.methods.simple import contiguous_split
  stage = contiguous_split(g, 4)
  order = g.topological_order()
  assert np.all(np.diff(stage[order]) >= 0) and set(stage.tolist()) == {0, 1, 2, 3}
  per = np.bincount(stage, weights=g.cost, minlength=4)
  assert per.max() <= per.sum() / 4 + g.cost.max()


def test_one_op_and_one_device():
  g = CompGraph(cost=[1.0], senders=[], receivers=[])
  for name in SIMPLE:
    for topo in (preset("nvlink2"), Topology.uniform(1, bandwidth=1.0)):
      sol = methods.solve(name, g, topo)
      assert sol.feasible and sol.makespan > 0


def test_solve_errors(graph):
  topo = preset("nvlink2")
  with pytest.raises(ValueError, match="unknown method"):
    methods.solve("nope", graph, topo)
  with pytest.raises(ValueError, match="no option"):
    methods.solve("random", graph, topo, bogus=1)
  with pytest.raises(ValueError, match="placement="):
    methods.solve("bfs", graph, topo)
  with pytest.raises(ValueError, match="unknown objective"):
    methods.solve("random", graph, topo, objective="latency")


def _all_methods():
  """Every method but the learned policies (tests/test_learned.py: each new instance shape
  compiles a policy, too slow for edge cases by the dozen) and the fusion methods (they need a
  graph with a cost reference: tests/test_fusion_methods.py)."""
  from go_jax.methods import learned  # pylint: disable=g-import-not-at-top
  return sorted(set(methods.available(kinds=("placement", "schedule", "joint")))
                - set(learned.METHOD_NAMES))


@pytest.mark.parametrize("name", _all_methods())
def test_every_method_handles_edge_cases(name):
  """One op, one device, and memory no placement can satisfy: a Solution, never a crash."""
  kind = methods.get(name).kind
  small = {"random": {"budget": 64}, "sa": {"budget": 64}, "brkga": {"budget": 160},
           "local_search": {"budget": 128}, "brkga_tuned": {"budget": 200},
           "hdp": {"updates": 4}}.get(name, {})
  one_op = CompGraph(cost=[1.0], senders=[], receivers=[], out_bytes=[8.0])
  g = CompGraph(cost=[1.0, 2.0, 1.0], senders=[0, 1], receivers=[1, 2],
                out_bytes=[8.0, 8.0, 8.0], param_bytes=[100.0, 100.0, 100.0])
  cases = [(one_op, preset("nvlink2")), (g, Topology.uniform(1, bandwidth=1e9)),
           (g, Topology.uniform(2, bandwidth=1e9, mem_capacity=50.0))]
  for graph, topo in cases:
    place = np.zeros(graph.num_nodes, int) if kind == "schedule" else None
    sol = methods.solve(name, graph, topo, placement=place, **small)
    assert sol.placement.shape == (graph.num_nodes,)
    assert sol.objective == methods.evaluate(graph, topo, sol.placement, sol.priority)[
        "objective"]
  assert not sol.feasible and "out of memory" in sol.reason  # the last case cannot fit


def test_get_returns_the_spec_and_lists_the_names_when_unknown():
  assert methods.get("heft").kind == "placement" and methods.get("bfs").kind == "schedule"
  with pytest.raises(ValueError, match=r"unknown method 'nope'; available: \[.*'heft'.*\]"):
    methods.get("nope")
  assert set(methods.available(kinds=("schedule",))) >= set(RULES)
  assert not set(methods.available(kinds=("schedule",))) & set(SIMPLE)
  with pytest.raises(ValueError, match="unknown method kind"):
    methods.available(kinds=("fission",))


def test_missing_optional_dependency_removes_only_its_methods():
  """pymetis and ortools made unimportable in a fresh interpreter (a meta-path finder that
  refuses them): metis / cpsat are gone and say what to install; the rest still solve."""
  script = textwrap.dedent("""
      import sys
      class Refuse:
        def find_spec(self, name, path=None, target=None):
          if name.partition(".")[0] in ("pymetis", "ortools"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
          return None
      sys.meta_path.insert(0, Refuse())
      from go_jax import methods
      from simulator import preset
      from simulator.sources import load_graph
      gone = methods.unavailable()
      assert set(gone) >= {"metis", "cpsat", "cpsat_memory", "go_jax.methods.partition",
                           "go_jax.methods.exact", "go_jax.methods.exact_memory"}, gone
      assert "pip install pymetis" in gone["metis"] and "pip install ortools" in gone["cpsat"]
      names = methods.available()
      assert "metis" not in names and "cpsat" not in names and "heft" in names, names
      for name, package in (("metis", "pymetis"), ("cpsat", "ortools")):
        try:
          methods.get(name)
        except ValueError as e:
          assert f"method '{name}' is not available" in str(e) and package in str(e), e
        else:
          raise AssertionError(name)
      g = load_graph("layered:n=12,width=3,seed=0")
      assert methods.solve("heft", g, preset("nvlink2")).feasible
      print("ok")
  """)
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300, env=env, cwd=os.path.dirname(os.path.dirname(
                           os.path.abspath(__file__))))
  assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_a_missing_project_module_is_a_bug_not_an_option(monkeypatch):
  """Only third-party packages are optional: an ImportError of the project's own modules
  propagates instead of silently dropping methods."""
  monkeypatch.setattr(methods, "_loaded", False)
  monkeypatch.setattr(methods, "BUILTIN_MODULES",
                      methods.BUILTIN_MODULES + ("go_jax.methods.no_such_module",))
  with pytest.raises(ImportError, match="no_such_module"):
    methods.available()


def test_metis_seed_offsets_near_the_largest_seed_wrap_instead_of_overflowing():
  """gp_dfs / regal_hint add their seeds' offsets to the problem seed: at methods.MAX_SEED the
  sum passed METIS' C int (pymetis read another seed, or raised TypeError at 2**63); it wraps
  to its last 31 bits."""
  pytest.importorskip("pymetis")
  from go_jax.methods import partition  # pylint: disable=g-import-not-at-top
  g = load_graph("layered:n=40,width=6,seed=0")
  topo = preset("nvlink4")
  (wrapped, _), (low, _) = partition.metis_placements(g, topo, [methods.MAX_SEED + 5, 4])
  np.testing.assert_array_equal(wrapped, low)
