"""GO and GDP as registered methods (go_jax/methods/learned.py): stages, re-simulated solutions,
fine-tuning no worse than zero-shot, budgets and clear errors.

Every go_hint solve uses one small instance and K = 4, so that one compiled policy and update
serve the whole file (the errors are raised before anything compiles).
"""

import os

import numpy as np
import pytest

from go_jax import methods, pretrained
from go_jax.methods import learned
from simulator import Topology, coarsen, preset
from simulator.graph import upward_rank
from simulator.sources import load_graph

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

K = 4


@pytest.fixture(scope="module")
def instance():
  return load_graph("layered:n=16,width=4,seed=0"), preset("nvlink2")


ZERO_SHOT_TRACES = {}  # the zero-shot fixture's traces of ppo's update and sampling programs


@pytest.fixture(scope="module")
def zero_shot(instance):
  from go_jax.training import ppo  # pylint: disable=g-import-not-at-top
  graph, topo = instance
  before = dict(ppo.TRACES)
  sol = methods.solve("go_hint", graph, topo, samples=K, seed=3)
  ZERO_SHOT_TRACES.update({k: ppo.TRACES[k] - before[k] for k in before})
  return sol


def _check_stages(sol, graph, topo):
  for stage in sol.info["stages"]:
    again = methods.evaluate(graph, topo, stage["placement"], stage["priority"])
    assert stage["objective"] == again["objective"] and stage["seconds"] > 0
    assert stage["placement"].shape == (graph.num_nodes,)


def test_zero_shot_is_a_solution_with_its_stages(instance, zero_shot):
  graph, topo = instance
  sol = zero_shot
  assert [s["stage"] for s in sol.info["stages"]] == [learned.STAGE_GREEDY, learned.STAGE_BEST]
  _check_stages(sol, graph, topo)
  greedy, best_k = (s["objective"] for s in sol.info["stages"])
  assert best_k <= greedy and sol.objective == min(greedy, best_k)
  again = methods.evaluate(graph, topo, sol.placement, sol.priority)
  assert sol.objective == again["objective"] and sol.feasible == again["feasible"]
  assert sol.info["updates"] == 0 and sol.evaluations == K + 1
  assert sol.info["checkpoint"] == "go_hint" and sol.info["samples"] == K
  assert sol.info["compile_seconds"] >= 0
  # zero-shot alone compiles the update's sampling half, not its backward pass
  assert ZERO_SHOT_TRACES["update_chunk"] == 0 and ZERO_SHOT_TRACES["sample_chunk"] <= 1


def test_a_second_graph_of_a_warmed_bucket_traces_nothing(instance, zero_shot):
  # a repeated zero-shot solve on another graph of the same padded shape (and seed) traces
  # nothing: loading the checkpoint re-traced the policy's init for its parameters' shapes
  # on every call (pretrained._shapes), about half of a small solve's wall time
  import jax  # pylint: disable=g-import-not-at-top
  graph, topo = instance
  other = load_graph("layered:n=16,width=4,seed=1")
  assert (other.num_nodes, other.num_edges) == (graph.num_nodes, graph.num_edges)
  traces = []
  on = lambda event, duration, **kw: traces.append(event) if event.endswith(
      "/jaxpr_trace_duration") else None
  jax.monitoring.register_event_duration_secs_listener(on)
  try:
    sol = methods.solve("go_hint", other, topo, samples=K, seed=4)
  finally:
    jax.monitoring.unregister_event_duration_listener(on)
  assert traces == [] and sol.info["samples"] == K


def test_finetune_is_no_worse_than_zero_shot(instance, zero_shot):
  graph, topo = instance
  sol = methods.solve("go_hint", graph, topo, samples=K, seed=3, max_updates=2)
  stages = sol.info["stages"]
  assert [s["stage"] for s in stages] == [learned.STAGE_GREEDY, learned.STAGE_BEST,
                                          learned.STAGE_TUNED]
  _check_stages(sol, graph, topo)
  for a, b in zip(stages, zero_shot.info["stages"]):  # same seed: the same zero-shot stages
    np.testing.assert_array_equal(a["placement"], b["placement"])
  assert stages[2]["objective"] <= stages[1]["objective"] * (1 + 1e-6)
  assert sol.objective == min(s["objective"] for s in stages)
  assert sol.info["updates"] == 2 and sol.evaluations == 2 * (K + 1)
  curve = sol.info["curve"]  # the best so far over wall time: stages and the loop's calls
  assert curve[0]["seconds"] == pytest.approx(stages[0]["seconds"])
  assert all(a["seconds"] <= b["seconds"] and a["best_objective"] > b["best_objective"]
             for a, b in zip(curve, curve[1:]))
  assert curve[-1]["best_objective"] == pytest.approx(sol.objective, rel=1e-5)


def test_budget_caps_the_updates(instance):
  graph, topo = instance
  sol = methods.solve("go_hint", graph, topo, samples=K, budget=2 * (K + 1) + 1, max_updates=9)
  assert sol.info["updates"] == 2 and sol.evaluations <= 2 * (K + 1) + 1
  with pytest.raises(ValueError, match=r"go_hint: budget 4 is below one update"):
    methods.solve("go_hint", graph, topo, samples=K, budget=K)


def test_finetune_samples_default_applies_to_fine_tuning_only(instance, monkeypatch):
  """`samples=None` fine-tunes with the method's FINETUNE_SAMPLES (go, gdp: 256), not the
  checkpoint's K; under an evaluation budget it keeps the checkpoint's. Patched to K here so
  that the file's one compiled update serves it."""
  assert learned.FINETUNE_SAMPLES == {"go": 256, "gdp": 256}
  graph, topo = instance
  monkeypatch.setattr(learned, "FINETUNE_SAMPLES", {"go_hint": K})
  tuned = methods.solve("go_hint", graph, topo, max_updates=1, seed=3)
  assert tuned.info["samples"] == K and tuned.evaluations == K + 1
  checkpoint_k = int(pretrained.load_config("go_hint").samples)
  assert checkpoint_k != K
  monkeypatch.setattr(learned, "FINETUNE_SAMPLES", {"go_hint": checkpoint_k + 1})
  with pytest.raises(ValueError, match=f"budget {checkpoint_k} is below one update "
                     f"\\({checkpoint_k} samples"):
    methods.solve("go_hint", graph, topo, max_updates=1, budget=checkpoint_k)


class _Stop(Exception):
  pass


def test_explore_reaches_fine_tuning_only(instance, monkeypatch):
  """The `explore` option sets fine-tuning's exploration floor (go_jax/training/ppo.py);
  zero-shot samples the policy as trained. A spy stands in for fine-tuning (nothing compiles)."""
  from go_jax import training  # pylint: disable=g-import-not-at-top
  graph, topo = instance
  assert learned.FINETUNE_EXPLORE == {} and learned.EXPLORE_BELOW == 0.5
  seen = []

  def spy(cfg, *args, **kwargs):
    seen.append((cfg.get("explore"), cfg.get("explore_below")))
    raise _Stop

  monkeypatch.setattr(training, "finetune", spy)
  for options in (dict(max_updates=1, explore=0.25), dict(explore=0.25)):
    with pytest.raises(_Stop):
      methods.solve("go_hint", graph, topo, **options)
  assert seen[0] == (0.25, 0.5) and not seen[1][0]  # zero-shot: the checkpoint's own (none)


@pytest.mark.parametrize("name", ["go_hint", "gdp"])
def test_polish_climbs_from_the_best_stage(instance, name):
  """`polish`: after PPO, the hill climb from the best stage for the rest of finetune_seconds
  (here: one call of 4 steps, since one update already spends the budget). The fine-tuned stage
  is then no worse than any earlier one; a placement method keeps the critical-path priority."""
  graph, topo = instance
  sol = methods.solve(name, graph, topo, samples=K, seed=3, max_updates=1,
                      finetune_seconds=0.01, polish=0.5)
  _check_stages(sol, graph, topo)
  stages = sol.info["stages"]
  assert stages[-1]["stage"] == learned.STAGE_TUNED
  assert stages[-1]["objective"] <= min(s["objective"] for s in stages[:-1]) * (1 + 1e-6)
  assert sol.objective == stages[-1]["objective"]
  polish = sol.info["polish"]
  assert polish["steps"] >= 4 and polish["calls"] >= 1
  assert sol.evaluations == K + 1 + learned.POLISH_BATCH * polish["steps"]
  assert polish["start_stage"] in [s["stage"] for s in stages[:-1]]
  assert polish["best_objective"] == pytest.approx(sol.objective, rel=1e-5)
  np.testing.assert_array_equal(sol.placement, sol.placement[graph.colocation_root()])
  if name == "gdp":
    np.testing.assert_array_equal(stages[-1]["priority"], upward_rank(graph))
  # no time budget, or an evaluation budget: nothing to polish in
  for options in (dict(max_updates=1), dict(max_updates=1, finetune_seconds=0.01,
                                            budget=2 * (K + 1))):
    plain = methods.solve(name, graph, topo, samples=K, seed=3, polish=0.5, **options)
    assert "polish" not in plain.info


def test_more_devices_than_the_policy_serves(instance):
  graph, _ = instance
  with pytest.raises(ValueError, match="go_hint: the policy serves at most 8 devices, the "
                     "topology has 16; "):
    methods.solve("go_hint", graph, Topology.uniform(16, bandwidth=1e9))


@pytest.mark.parametrize("overrides,message", [
    (dict(bogus=1), "no option"),
    (dict(finetune_seconds=-1.0), "finetune_seconds must be a finite number >= 0"),
    (dict(finetune_seconds=float("inf"), max_updates=1), "finetune_seconds must be a finite"),
    (dict(samples=0), "samples must be an integer >= 1"),
    (dict(samples=1), "go_hint: advantage 'leave_one_out' compares samples: samples must be >= 2"),
    (dict(max_updates=1.5), "max_updates must be an integer >= 1"),
    (dict(learning_rate=0.0), "learning_rate must be a finite number > 0"),
    (dict(learning_rate=None, max_updates=1), "learning_rate must be a finite number > 0"),
    (dict(learning_rate="1e-3"), "learning_rate must be a finite number > 0"),
    (dict(learning_rate=float("inf")), "learning_rate must be a finite number > 0"),
    (dict(self_imitation=-1.0), "self_imitation must be a number >= 0 or None"),
    (dict(explore=1.0), r"explore must be a number in \[0, 1\) or None"),
    (dict(explore_below=0), "explore_below must be a number > 0 or None"),
    (dict(polish=1.0), r"polish must be a share of finetune_seconds in \[0, 1\)"),
    (dict(polish="half"), "polish must be a share"),
    (dict(polish_kick=1.5), r"polish_kick must be a share of the movable ops in \[0, 1\]"),
    (dict(polish_edge=-0.1), r"polish_edge must be a share of the relocations in \[0, 1\]"),
    (dict(polish_relabel=2), r"polish_relabel must be a share of the moves in \[0, 1\]"),
    (dict(checkpoint="no_such_checkpoint"), "no pretrained checkpoint 'no_such_checkpoint'"),
    (dict(checkpoint="none"), "only fine-tuning uses"),
    (dict(checkpoint="placeto"), "go_hint: checkpoint 'placeto' is not a GO \\(PPO\\) run .*"
     "algorithm 'placeto'"),
    (dict(max_nodes=1), "max_nodes must be an integer >= 2 or None"),
    (dict(max_nodes=8, coarse_nodes=16), r"coarse_nodes must be an integer in \[2, max_nodes=8\]"),
    (dict(coarse_max_group_weight=1.5), r"coarse_max_group_weight must be a fraction in \(0, 1\]"),
    (dict(coarse_temp_bound="max"), "coarse_temp_bound must be one of"),
    (dict(coarse_out_bound="min"), "coarse_out_bound must be one of"),
    (dict(coarse_memory_scale="none"), "coarse_memory_scale must be one of"),
    (dict(coarse_critical_order=2), "coarse_critical_order must be True or False"),
])
def test_bad_overrides(instance, overrides, message):
  graph, topo = instance
  with pytest.raises(ValueError, match=message):
    methods.solve("go_hint", graph, topo, **overrides)


def test_registered_kinds_and_defaults():
  for name in learned.METHOD_NAMES:
    spec = methods.get(name)
    assert spec.kind == {"gdp": "placement", "go_fusion": "fusion"}.get(name, "joint")
    shipped = learned.FUSION_CHECKPOINT if name == "go_joint3" else name
    assert spec.defaults["checkpoint"] == shipped and spec.defaults["finetune_seconds"] == 0
    assert spec.defaults["self_imitation"] == learned.FINETUNE_SELF_IMITATION.get(name)
    assert spec.defaults["explore"] == learned.FINETUNE_EXPLORE.get(name)
    assert spec.defaults["explore_below"] == learned.EXPLORE_BELOW
    assert spec.defaults["polish"] == learned.FINETUNE_POLISH.get(name, 0.0)
    assert spec.defaults["polish_kick"] == learned.POLISH_KICK
    assert spec.defaults["polish_edge"] == learned.FINETUNE_POLISH_EDGE.get(name, 0.0)
    assert spec.defaults["polish_relabel"] == learned.FINETUNE_POLISH_RELABEL.get(name, 0.0)
    assert set(spec.defaults) == {"checkpoint", "finetune_seconds", "samples", "learning_rate",
                                  "self_imitation", "explore", "explore_below",
                                  "polish", "polish_kick", "polish_edge", "polish_relabel",
                                  "max_updates",
                                  "max_nodes",
                                  "coarse_nodes", "coarse_max_group_weight", "coarse_temp_bound",
                                  "coarse_out_bound", "coarse_memory_scale",
                                  "coarse_critical_order"}
    assert spec.defaults["max_nodes"] == learned.LARGE_GRAPH_NODES


@pytest.mark.parametrize("name", ["go", "gdp"])
def test_shipped_paper_checkpoints(name):
  """The paper's GO and GDP: shipped without a hint, for the method's task."""
  if not os.path.isdir(os.path.join(pretrained.ROOT, name)):
    pytest.skip(f"checkpoint {name} is not shipped yet (go_jax/pretrained/{name} absent)")
  config = pretrained.load_config(name)
  assert not config.policy.hint
  assert config.task == ("placement" if name == "gdp" else "joint")


def test_gdp_keeps_the_critical_path_priority():
  if not os.path.isdir(os.path.join(pretrained.ROOT, "gdp")):
    pytest.skip("checkpoint gdp is not shipped yet (go_jax/pretrained/gdp absent)")
  graph, topo = load_graph("layered:n=12,width=3,seed=1"), preset("nvlink2")
  sol = methods.solve("gdp", graph, topo, samples=2)
  np.testing.assert_array_equal(sol.priority, upward_rank(graph))
  for stage in sol.info["stages"]:
    np.testing.assert_array_equal(stage["priority"], upward_rank(graph))
  assert sol.objective == methods.evaluate(graph, topo, sol.placement, sol.priority)["objective"]


def test_a_graph_above_max_nodes_is_solved_coarse_and_scored_on_the_original(instance):
  """2,000 ops coarsened to 16 nodes and 25 edges (this file's instance's buckets, so its compiled
  policy and update serve): the expanded stages are valid on the original graph and are
  re-simulated there."""
  _, topo = instance
  graph = load_graph("series_parallel:n=2000,seed=0")
  # a budget of one update and the 6 simulations scoring its stages on the original graph
  sol = methods.solve("go_hint", graph, topo, samples=K, seed=3, max_updates=1,
                      max_nodes=1000, coarse_nodes=16, budget=K + 1 + 6)
  assert sol.evaluations == K + 1 + 6
  info = sol.info
  assert info["coarsened"]["nodes"] == 2000 and info["coarsened"]["coarse_nodes"] <= 16
  assert set(info["phases"]) == set(learned.PHASES)
  assert all(v >= 0 for v in info["phases"].values())
  assert sol.placement.shape == (2000,) and sol.priority.shape == (2000,)
  assert sol.placement.min() >= 0 and sol.placement.max() < topo.num_devices
  np.testing.assert_array_equal(np.sort(sol.priority), np.arange(2000.0))  # a strict order
  roots = graph.colocation_root()
  np.testing.assert_array_equal(sol.placement, sol.placement[roots])
  _check_stages(sol, graph, topo)  # every stage's objective is the original graph's
  again = methods.evaluate(graph, topo, sol.placement, sol.priority)
  assert sol.objective == again["objective"] == min(s["objective"] for s in info["stages"])
  assert all("coarse_objective" in s for s in info["stages"])
  # each coarse stage is scored with its expanded order and with the critical-path order
  names = [s["stage"] for s in info["stages"]]
  assert names[len(names) // 2:] == [n + learned.CRITICAL_SUFFIX for n in names[:len(names) // 2]]
  assert info["coarsened"]["options"]["temp_bound"] == learned.COARSE_TEMP_BOUND
  assert 0 < info["coarsened"]["memory_scale"] < np.inf


@pytest.mark.parametrize("options,reserved", [(dict(max_updates=1), 6), ({}, 4)])
def test_a_budget_on_a_coarsened_graph_leaves_room_for_scoring_the_stages(instance, options,
                                                                         reserved):
  """The coarsened path scores every stage on the original graph twice (its own order and the
  critical-path one): 6 simulations after fine-tuning, 4 zero-shot. The budget set aside 3, so
  one more than that left one update of K + 1 and `Solution.evaluations` came out above the
  budget; now such a budget is refused naming the whole budget (before anything compiles:
  unbounded memory, no calibration)."""
  graph, topo = instance
  budget = K + reserved  # one short of an update plus the stages' simulations
  with pytest.raises(ValueError, match=f"go_hint: budget {budget} less the {reserved} "
                     f"simulations that score the coarse stages on the original graph "
                     rf"\({K}\) is below one update"):
    methods.solve("go_hint", graph, topo.with_memory(np.inf), samples=K, budget=budget,
                  max_nodes=8, coarse_nodes=4, **options)


def test_expand_priority_keeps_the_coarse_order_and_breaks_ties():
  graph = load_graph("layered:n=40,width=4,seed=2")
  coarse = coarsen.coarsen(graph, 8)
  prio = np.arange(coarse.graph.num_nodes, dtype=np.float64)[::-1]
  ranks = learned.expand_priority(coarse, prio, upward_rank(graph))
  group = prio[coarse.mapping]
  for a in range(graph.num_nodes):
    for b in range(graph.num_nodes):
      if group[a] > group[b]:
        assert ranks[a] > ranks[b]
  ties = coarse.mapping == coarse.mapping[0]
  critical = upward_rank(graph)[ties]
  assert np.all(np.diff(critical[np.argsort(ranks[ties])]) >= 0)


def test_every_stage_placement_is_the_effective_device():
  """A colocated graph: each stage's placement (zero-shot greedy and best of K) is each op's
  effective device (rule 1), as `Solution.placement` is; best of K's sampled placement was
  reported raw, so go-jax-place saved placements that split colocation groups."""
  graph = load_graph("layered:n=16,width=4,seed=0,colocation_groups=4,colocation_size=3")
  sol = methods.solve("go", graph, preset("nvlink4"), samples=8, finetune_seconds=0)
  root = graph.colocation_root()
  assert len(sol.info["stages"]) == 2
  for stage in sol.info["stages"]:
    np.testing.assert_array_equal(stage["placement"], stage["placement"][root])


@pytest.mark.parametrize("name", ["go", "gdp"])
def test_memory_far_too_small_is_an_infeasible_solution_with_its_reason(name):
  """Devices of 1 byte: the greedy decode's barrier once pushed every real device below the
  padding's logit and the decode answered a padded device ("placement[0] = 2 is not a device
  id"); now the answer is on real devices and infeasible with the registry's out-of-memory
  reason, as heft's is."""
  if not os.path.isdir(os.path.join(pretrained.ROOT, name)):
    pytest.skip(f"checkpoint {name} is not shipped yet (go_jax/pretrained/{name} absent)")
  graph, topo = load_graph("layered:n=12,width=3,seed=1"), preset("nvlink2", mem_capacity=1.0)
  sol = methods.solve(name, graph, topo, samples=2)
  assert not sol.feasible and "out of memory on device(s)" in sol.reason
  assert sol.placement.min() >= 0 and sol.placement.max() < topo.num_devices
  for stage in sol.info["stages"]:
    assert stage["placement"].max() < topo.num_devices and not stage["feasible"]
