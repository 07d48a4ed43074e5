"""HDP (go_jax/hdp, go_jax/methods/hdp.py): learns a toy placement to its known optimum, is honest
in the registry, compiles its update once, handles impossible memory and rejects bad options."""

import numpy as np
import pytest

from go_jax import methods
from go_jax import objectives
import go_jax.methods.hdp  # pylint: disable=unused-import  (registers "hdp")
from go_jax.hdp import trainer
from simulator import CompGraph, Topology
from simulator.graph import upward_rank

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

L = 8  # ops per chain
OPTIONS = dict(updates=120, entropy_coef=0.1)


def _toy(capacity=(90.0, 20.0)):
  """Two independent chains of L unit-cost ops on two equal devices (cheap links). Chain A's
  ops (type 5) hold 10 parameter bytes each, chain B's (type 9) 1 byte; device 0 holds 90
  bytes, device 1 only 20, so chain A fits on device 0 only. All on device 0 fits (88 bytes)
  but serialises the chains: makespan 2L. The optimum runs them side by side, A on device 0
  and B on device 1: makespan L, the lower bound (critical path = total work / 2 = L)."""
  senders = list(range(L - 1)) + [L + i for i in range(L - 1)]
  receivers = [i + 1 for i in range(L - 1)] + [L + i + 1 for i in range(L - 1)]
  g = CompGraph(cost=[1.0] * (2 * L), senders=senders, receivers=receivers,
                out_bytes=[0.0] * (2 * L), param_bytes=[10.0] * L + [1.0] * L,
                op_type=[5] * L + [9] * L, name="two_chains")
  topo = Topology.create(speed=[1.0, 1.0], overhead=[0.0, 0.0], mem_capacity=list(capacity),
                         bandwidth=np.full((2, 2), 1e3), latency=np.full((2, 2), 0.01))
  return g, topo


@pytest.fixture(scope="module")
def solved():
  g, topo = _toy()
  traces = trainer.TRACES["run_updates"]
  sol = methods.solve("hdp", g, topo, seed=0, **OPTIONS)
  return g, topo, sol, trainer.TRACES["run_updates"] - traces


def test_registered_as_a_placement_method():
  assert methods.get("hdp").kind == "placement"
  assert "hdp" in methods.available(kinds=("placement",))


def test_learns_the_split_to_its_optimum(solved):
  g, _, sol, _ = solved
  assert sol.feasible
  assert sol.objective == pytest.approx(L) and sol.gap == pytest.approx(0.0, abs=1e-6)
  np.testing.assert_array_equal(sol.placement, [0] * L + [1] * L)
  curve = sol.info["curve"]
  assert curve[-1]["objective_mean"] < curve[0]["objective_mean"]  # it learns, not only luck
  assert sol.evaluations == OPTIONS["updates"] * 16 == sol.info["updates"] * 16
  assert sol.info["groups"] == min(32, g.num_nodes)


def test_objective_is_the_simulators(solved):
  g, topo, sol, _ = solved
  again = methods.evaluate(g, topo, sol.placement, sol.priority, "makespan")
  assert sol.objective == again["objective"] and sol.feasible == again["feasible"]
  assert sol.info["best_objective"] == pytest.approx(sol.objective, rel=1e-6)
  np.testing.assert_array_equal(sol.priority, upward_rank(g))  # HDP places only


def test_update_compiles_once(solved):
  g, topo, sol, traces = solved
  assert traces == 1 and len(sol.info["curve"]) >= 3  # several jitted calls, one trace
  before = trainer.TRACES["run_updates"]
  other = methods.solve("hdp", g, topo, seed=1, budget=48, **dict(OPTIONS, updates=None))
  assert trainer.TRACES["run_updates"] == before  # same sizes and options: no retrace
  assert other.evaluations == 48 and other.info["updates"] == 3


def test_same_seed_same_answer(solved):
  g, topo, _, _ = solved
  a = methods.solve("hdp", g, topo, seed=3, **dict(OPTIONS, updates=5))
  b = methods.solve("hdp", g, topo, seed=3, **dict(OPTIONS, updates=5))
  np.testing.assert_array_equal(a.placement, b.placement)


def test_impossible_memory_is_reported_not_raised(solved):
  g, topo, _, _ = solved
  _, tiny = _toy(capacity=(5.0, 5.0))  # every op's 10 or 1 parameter bytes: 88 > 10 total
  sol = methods.solve("hdp", g, tiny, seed=0, **dict(OPTIONS, updates=4))
  assert not sol.feasible
  assert "none of the 64 sampled placements fits in memory" in sol.reason
  assert "out of memory on device(s)" in sol.reason
  assert np.isfinite(sol.objective) and sol.objective > objectives.makespan_upper_bound(g, tiny)


@pytest.mark.parametrize("option,value", [
    ("groups", 0), ("samples", 0), ("hidden", 0), ("updates", 0), ("groups", 2.5),
    ("samples", True), ("learning_rate", 0.0), ("entropy_coef", -0.1),
    ("baseline_decay", 1.0), ("seconds", 0.0), ("max_grad_norm", float("nan"))])
def test_bad_options_name_the_option(option, value):
  g, topo = _toy()
  # (a fraction for an integer option is refused by `methods.solve` itself, for every method)
  with pytest.raises(ValueError, match=f"hdp: {option} must be|'hdp': option {option}=\\S+ must"):
    methods.solve("hdp", g, topo, **{option: value})


def test_unknown_option_lists_the_valid_ones():
  g, topo = _toy()
  with pytest.raises(ValueError, match="has no option"):
    methods.solve("hdp", g, topo, group=4)
