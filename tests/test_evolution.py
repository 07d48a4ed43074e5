"""Tests of the population searches in go_jax.methods.evolution (BRKGA, seeded BRKGA, SA).

Budgets are tiny (a few hundred evaluations, population 20 / 16 chains) and the graphs are
chosen so that tests share compiled executables (compile time dominates here): the toy, the
1-op graph and the infeasible one pad to one bucket, the random DAG's tests share another, and
every call of a method uses the same population and budget.
"""

import jax.numpy as jnp
import numpy as np
import pytest

import go_jax.methods.evolution as evolution
from go_jax.methods import evaluate, solve
from simulator import CompGraph, Topology
from simulator.sources import load_graph

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

BRKGA = dict(population=20)  # 4 elites, 2 mutants, 16 evaluations per generation
BRKGA_BUDGET = 480  # 30 generations
SA = dict(chains=16)
SA_BUDGET = 320  # 20 steps


def toy(num_ops=4):
  """`num_ops` independent unit-cost ops: on as many identical devices the optimum is 1 s."""
  return CompGraph(cost=np.ones(num_ops), senders=[], receivers=[], name=f"indep{num_ops}")


TOPO4 = Topology.uniform(4, bandwidth=1e9, latency=1e-5)


@pytest.fixture(scope="module")
def dag():
  """A small random layered DAG (20 ops, 4 devices: random search rarely hits the best)."""
  return load_graph("layered:n=20,width=5,seed=3")


def test_brkga_best_never_worsens_and_is_consistent(dag):
  sol = solve("brkga", dag, TOPO4, seed=0, budget=BRKGA_BUDGET, **BRKGA)
  best = np.asarray(sol.info["best_per_generation"])
  assert sol.info["generations"] == BRKGA_BUDGET // 16 == best.size
  assert np.all(np.diff(best) <= 0), best
  assert sol.evaluations == 30 * 16 <= BRKGA_BUDGET
  # The registry re-simulates the proposal: the same value the search saw, and evaluate's.
  np.testing.assert_allclose(sol.objective, best[-1], rtol=1e-5)
  again = evaluate(dag, TOPO4, sol.placement, sol.priority, "makespan")
  assert again["objective"] == sol.objective
  assert sol.feasible and sol.placement.shape == (dag.num_nodes,)


def test_brkga_deterministic_per_seed(dag):
  a = solve("brkga", dag, TOPO4, seed=1, budget=BRKGA_BUDGET, **BRKGA)
  b = solve("brkga", dag, TOPO4, seed=1, budget=BRKGA_BUDGET, **BRKGA)
  c = solve("brkga", dag, TOPO4, seed=2, budget=BRKGA_BUDGET, **BRKGA)
  np.testing.assert_array_equal(a.placement, b.placement)
  np.testing.assert_array_equal(a.priority, b.priority)
  assert a.info["best_per_generation"] == b.info["best_per_generation"]
  assert not (np.array_equal(a.placement, c.placement) and
              np.array_equal(a.priority, c.priority))


def test_brkga_beats_or_equals_random(dag):
  rand = solve("random", dag, TOPO4, seed=0, budget=BRKGA_BUDGET)
  ga = solve("brkga", dag, TOPO4, seed=0, budget=BRKGA_BUDGET, **BRKGA)
  assert ga.objective <= rand.objective * (1 + 1e-6), (ga.objective, rand.objective)


@pytest.mark.parametrize("method, options, budget",
                         [("brkga", BRKGA, BRKGA_BUDGET), ("sa", SA, SA_BUDGET)])
def test_reaches_toy_optimum_without_retrace(method, options, budget):
  sol = solve(method, toy(), TOPO4, seed=0, budget=budget, **options)
  assert sol.makespan == pytest.approx(1.0, abs=1e-6)
  assert sorted(sol.placement.tolist()) == [0, 1, 2, 3]
  assert sol.gap == pytest.approx(0.0, abs=1e-6)
  # Another graph of the same bucket, another seed: the compiled search is reused.
  traces = evolution.TRACES[method]
  one = solve(method, toy(1), TOPO4, seed=5, budget=budget, **options)
  assert evolution.TRACES[method] == traces
  assert one.makespan == pytest.approx(1.0) and one.placement.shape == (1,)


@pytest.mark.parametrize("method, options, budget",
                         [("brkga", BRKGA, BRKGA_BUDGET), ("sa", SA, SA_BUDGET)])
def test_one_device_one_op(method, options, budget):
  one_dev = Topology.uniform(1, bandwidth=1e9)
  sol = solve(method, toy(1), one_dev, seed=0, budget=budget, **options)
  assert sol.placement.tolist() == [0] and sol.makespan == pytest.approx(1.0)
  sol = solve(method, toy(3), one_dev, seed=0, budget=budget, **options)
  assert sol.makespan == pytest.approx(3.0) and sol.feasible


@pytest.mark.parametrize("method, options, budget",
                         [("brkga", BRKGA, BRKGA_BUDGET), ("sa", SA, SA_BUDGET)])
def test_infeasible_memory_reports_not_raises(method, options, budget):
  g = toy().replace(param_bytes=np.full(4, 10.0))
  topo = TOPO4.with_memory(1.0)  # every placement is over capacity
  sol = solve(method, g, topo, seed=0, budget=budget, **options)
  assert not sol.feasible
  assert "out of memory" in sol.reason
  assert sol.objective > evolution.objectives.makespan_upper_bound(g, topo)


def test_sa_deterministic_and_consistent():
  a = solve("sa", toy(), TOPO4, seed=3, budget=SA_BUDGET, **SA)
  b = solve("sa", toy(), TOPO4, seed=3, budget=SA_BUDGET, **SA)
  np.testing.assert_array_equal(a.placement, b.placement)
  np.testing.assert_array_equal(a.priority, b.priority)
  best = np.asarray(a.info["best_per_step"])
  assert best.size == a.info["steps"] == SA_BUDGET // 16 and np.all(np.diff(best) <= 0)
  assert a.evaluations == SA_BUDGET
  np.testing.assert_allclose(a.objective, best[-1], rtol=1e-5)


@pytest.mark.parametrize("method, options", [
    ("brkga", dict(population=10, elite_frac=0.5, mutant_frac=0.5)),
    ("brkga", dict(elite_bias=1.5)),
    ("brkga", dict(population=20, evaluations=5)),
    ("sa", dict(chains=0)),
    ("sa", dict(t_start=0.0)),
    ("sa", dict(chains=16, evaluations=8)),
])
def test_bad_options_raise(method, options):
  with pytest.raises(ValueError):
    solve(method, toy(), TOPO4, **options)


# ------------------------------------------------------------------ seeded BRKGA
SEEDS = ("heft", "m_etf", "m_sct")


@pytest.fixture(scope="module")
def tight(dag):
  """The random DAG on 4 devices with 40% of its bytes each: memory matters."""
  total = float((dag.param_bytes + dag.out_bytes + dag.temp_bytes).sum())
  return TOPO4.with_memory(0.4 * total)


def test_encoded_seeds_decode_to_the_seeds_objective(dag, tight):
  np_ = 32
  for name in SEEDS:
    seed = solve(name, dag, tight)
    keys = evolution.encode_action(seed.placement, seed.priority, 4, np_)
    assert keys.shape == (np_, 5) and np.all((keys >= 0) & (keys < 1))
    place, prio = evolution._decode(jnp.asarray(keys)[None], 4)
    place, prio = np.asarray(place)[0, :dag.num_nodes], np.asarray(prio)[0, :dag.num_nodes]
    np.testing.assert_array_equal(place, seed.placement)
    again = evaluate(dag, tight, place, prio)
    assert again["objective"] == seed.objective, name
  # Order and ties of the priorities are kept exactly.
  keys = evolution.encode_action([0, 1, 0, 1], [5.0, -2.0, 5.0, 1e9], 2, 4)
  assert keys[0, 2] == keys[2, 2] and keys[1, 2] < keys[0, 2] < keys[3, 2]
  with pytest.raises(ValueError, match="device ids"):
    evolution.encode_action([0, 2], [0.0, 0.0], 2, 4)


def test_brkga_seeded_never_worse_than_its_best_seed(dag, tight):
  best_seed = min(solve(name, dag, tight).objective for name in SEEDS)
  sol = solve("brkga_seeded", dag, tight, seed=0, budget=BRKGA_BUDGET, **BRKGA)
  assert sol.objective <= best_seed * (1 + 1e-6), (sol.objective, best_seed)
  assert sol.info["seeds"] == list(SEEDS)
  assert sol.evaluations == 30 * 16
  best = np.asarray(sol.info["best_per_generation"])
  assert best[0] <= best_seed * (1 + 1e-6) and np.all(np.diff(best) <= 0)
  np.testing.assert_allclose(sol.objective, best[-1], rtol=1e-5)


@pytest.mark.parametrize("options", [dict(seed_methods="nosuch"), dict(seed_methods=""),
                                     dict(seed_methods="brkga"), dict(population=20,
                                                                      evaluations=5)])
def test_brkga_seeded_bad_options(options):
  with pytest.raises(ValueError, match="seed|budget"):
    solve("brkga_seeded", toy(), TOPO4, **options)
