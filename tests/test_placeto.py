"""Tests of Placeto (go_jax/placeto, go_jax/methods/placeto.py): the MDP, the trainer, the
registered method and the shipped checkpoint.

The toy: two independent chains of four heavy ops (cost 10 each) on two devices with cheap
links. The optimum puts the chains on different devices: makespan 40, which is also the lower
bound (the critical path), so "optimal" is "ratio 1.0 to the bound". Grouping the toy into two
groups gives one group per chain.
"""

import json
import os

import jax
import numpy as np
import pytest

from experiments.configs import pretrain_placeto
from go_jax import methods, pretrained
from go_jax.methods import placeto as placeto_method
from go_jax.placeto import search, trainer
from go_jax.training import trainers
from simulator import CompGraph, Topology, preset
from simulator.graph import upward_rank
from simulator.sources import load_graph

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

TOPO = Topology.uniform(2, bandwidth=1e9, latency=0.0)
OPTIMUM = 40.0


def chains(cost=10.0, name="chains") -> CompGraph:
  """Two independent chains of 4 ops each (ops 0-3 and 4-7)."""
  s = [0, 1, 2, 4, 5, 6]
  return CompGraph(cost=np.full(8, cost), senders=s, receivers=[x + 1 for x in s],
                   out_bytes=np.ones(8), name=name)


# The method's fine-tuning settings that the toy run also uses: with them (and the default
# policy, one update per call) the method's fine-tuning of the toy, from the run's workdir or
# from fresh parameters, reuses the run's compiled update.
TUNE = dict(groups=2, samples=8, learning_rate=0.03)


def toy_config(updates=30):
  c = trainer.default_config()
  c.groups, c.samples, c.learning_rate = TUNE["groups"], TUNE["samples"], TUNE["learning_rate"]
  c.updates, c.updates_per_call, c.checkpoint_every = updates, 1, 10
  return c


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
  """Placeto trained from fresh parameters on the toy (30 updates) in a workdir."""
  workdir = str(tmp_path_factory.mktemp("placeto_toy"))
  before = trainer.TRACES["update_chunk"]
  result = trainer.train(toy_config(), workdir, progress=False,
                         instances=([chains()], [TOPO], ["toy"]))
  return workdir, result, trainer.TRACES["update_chunk"] - before


def test_learns_the_toy_optimum_from_fresh_parameters(toy_run):
  workdir, result, _ = toy_run
  row = result.summary[0]
  assert row["lower_bound"] == OPTIMUM
  assert row["greedy_objective"] == pytest.approx(OPTIMUM)  # the policy itself, not a search
  assert row["best_objective"] == pytest.approx(OPTIMUM)
  for name in ("config.json", "params.msgpack", "summary.json", "metrics.jsonl",
               trainer.CURVE_NAME):
    assert os.path.isfile(os.path.join(workdir, name)), name


def test_launcher_curves_redraw_the_plot_from_the_log(toy_run):
  """go-jax-train's `curves` step (trainers.logged_curves) redraws the curve from metrics.jsonl
  alone: no trained result, no config."""
  workdir = toy_run[0]
  path = os.path.join(workdir, trainer.CURVE_NAME)
  os.remove(path)
  spec = trainers.get(trainer.default_config())
  assert spec.curves(workdir, None, trained=None) == os.path.abspath(path)
  assert os.path.getsize(path) > 0


def test_update_compiles_once_across_calls(toy_run):
  _, result, traces = toy_run
  assert traces == 1  # the run's 30 calls traced the update once
  before = trainer.TRACES["update_chunk"]
  state, metrics = result.trainer.update_chunk(result.state)
  state, metrics = result.trainer.update_chunk(state)
  assert trainer.TRACES["update_chunk"] == before
  assert int(state.step) == int(result.state.step) + 2
  assert metrics["loss"].shape == (1,)


def test_method_from_a_trained_workdir_is_honest(toy_run):
  workdir = toy_run[0]
  sol = methods.solve("placeto", chains(), TOPO, checkpoint=workdir)
  assert sol.info["stage"] == "zero-shot greedy" and sol.info["updates"] == 0
  assert sol.objective == pytest.approx(OPTIMUM)
  assert sol.placement[0] != sol.placement[4]  # the chains are split
  again = methods.evaluate(chains(), TOPO, sol.placement, sol.priority)
  assert sol.objective == again["objective"]
  np.testing.assert_array_equal(sol.priority, upward_rank(chains()))


def test_run_that_never_drew_an_instance_writes_its_summary(tmp_path):
  # 1 update drawing 1 of 2 instances: the other has no best yet (inf in the state), which
  # summary.json (strict JSON) must hold as null, not fail the run after training.
  workdir = str(tmp_path / "run")
  result = trainer.train(toy_config(updates=1), workdir, progress=False,
                         instances=([chains(), chains(cost=5.0, name="half")], [TOPO, TOPO],
                                    ["toy", "half"]))
  with open(os.path.join(workdir, "summary.json")) as fh:
    rows = json.load(fh)["summary"]
  assert os.path.isfile(os.path.join(workdir, "params.msgpack"))
  unseen = [r for r in rows if r["best_objective"] is None]
  assert len(unseen) == 1 and unseen[0]["best_ratio"] is None
  assert all(np.isfinite(r["greedy_objective"]) for r in rows)
  assert sum("not drawn yet" in line for line in trainer.SPEC.report(result)) == 1


UNSEEN = "layered:n=60,width=6,seed=7"  # no training graph of the shipped checkpoint


def test_intermediate_rewards_sum_to_the_total_improvement():
  # The shipped policy's greedy episode on an unseen graph (the program the method's zero-shot
  # stage runs, so it compiles once for both tests).
  graph, topo = load_graph(UNSEEN), preset("nvlink4")
  config, _, params = placeto_method.load_checkpoint("placeto")
  run = trainer.make_train(search.tune_config(config), [graph], [topo])
  ep = jax.device_get(run.greedy(params))
  scale = float(run.data.scale[0])
  obj, rew = ep.objectives[0], ep.rewards[0]  # (1, T + 1), (1, T)
  np.testing.assert_allclose(rew, (obj[:, :-1] - obj[:, 1:]) / scale, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(rew.sum(-1), (obj[:, 0] - obj[:, -1]) / scale, rtol=1e-4,
                             atol=1e-5)
  assert np.abs(rew).sum() > 0  # the episode moved groups
  inst = run.instances[0]
  for t in (0, run.steps // 2, run.steps):  # the episode's objective is the simulator's
    place = inst.expand(ep.placements[0, 0, t])
    ref = methods.evaluate(graph, topo, place, upward_rank(graph))["objective"]
    assert obj[0, t] == pytest.approx(ref, rel=1e-5)


def test_finetuning_compiles_once_per_bucket_and_honours_the_budget(toy_run):
  workdir = toy_run[0]
  tune = dict(TUNE, checkpoint=workdir)
  before = trainer.TRACES["update_chunk"]
  a = methods.solve("placeto", chains(), TOPO, max_updates=3, **tune)
  b = methods.solve("placeto", chains(7.0, "other"), TOPO, max_updates=3, seed=1, **tune)
  assert trainer.TRACES["update_chunk"] == before  # the toy run's update, any graph of its size
  for sol, graph in ((a, chains()), (b, chains(7.0, "other"))):
    assert [s["stage"] for s in sol.info["stages"]] == ["zero-shot greedy", "fine-tuned"]
    assert sol.info["updates"] == 3
    assert sol.objective == methods.evaluate(graph, TOPO, sol.placement,
                                             sol.priority)["objective"]
    for stage in sol.info["stages"]:
      assert stage["objective"] == methods.evaluate(graph, TOPO, stage["placement"],
                                                    stage["priority"])["objective"]
    curve = sol.info["curve"]  # the best so far over wall time, zero-shot first
    assert curve[0]["seconds"] == pytest.approx(sol.info["stages"][0]["seconds"])
    assert all(p["seconds"] <= q["seconds"] and p["best_objective"] > q["best_objective"]
               for p, q in zip(curve, curve[1:]))
    assert curve[-1]["best_objective"] == pytest.approx(sol.objective, rel=1e-5)
  per_episode = a.info["steps"] + 1
  capped = methods.solve("placeto", chains(), TOPO, max_updates=50,
                         budget=2 * per_episode + 2 * 8 * per_episode, **tune)
  assert capped.info["updates"] == 2
  assert capped.evaluations == 2 * per_episode + 2 * 8 * per_episode
  # a budget the zero-shot episode already spent starts no update (on a large graph one update
  # of K whole-graph episodes ran minutes past it)
  late = methods.solve("placeto", chains(), TOPO, **dict(tune, finetune_seconds=1e-6))
  assert late.info["updates"] == 0 and late.info["stage"] == "zero-shot greedy"
  fresh = methods.solve("placeto", chains(), TOPO, max_updates=10, **dict(
      tune, checkpoint="none"))  # fresh parameters: fine-tuning only
  assert [s["stage"] for s in fresh.info["stages"]] == ["fine-tuned"]
  assert fresh.objective == pytest.approx(OPTIMUM)
  assert trainer.TRACES["update_chunk"] == before


def test_zero_shot_from_the_shipped_checkpoint_on_an_unseen_graph():
  assert "placeto" in pretrained.available()
  config = pretrained.load_config("placeto")
  graph = load_graph(UNSEEN)
  assert graph.name not in " ".join(config.graphs)
  sol = methods.solve("placeto", graph, preset("nvlink4"))
  assert sol.info["stage"] == "zero-shot greedy" and sol.info["checkpoint"] == "placeto"
  assert sol.feasible and np.isfinite(sol.objective)
  assert sol.objective == methods.evaluate(graph, preset("nvlink4"), sol.placement,
                                           sol.priority)["objective"]
  size = os.path.getsize(os.path.join(pretrained.available()["placeto"], "params.msgpack"))
  assert size < 1_000_000


def test_impossible_memory_is_reported_not_raised():
  graph = load_graph(UNSEEN)
  topo = preset("nvlink4", mem_capacity=1.0)
  sol = methods.solve("placeto", graph, topo)
  assert not sol.feasible
  assert "out of memory" in sol.reason


def test_devices_of_zero_bytes_give_finite_features():
  """A topology of 0-byte devices is valid (only a graph without bytes fits). The features
  divided the bytes by the smallest capacity: inf, and NaN for a group of 0 bytes, as the
  policy's inputs. A capacity now counts as at least 1 byte (host side only)."""
  from go_jax.placeto import env  # pylint: disable=g-import-not-at-top
  graph = chains().replace(out_bytes=np.r_[np.zeros(4), np.ones(4)])
  _, zero = env.build([graph], [TOPO.with_memory(0.0)], 2, "makespan")
  _, one = env.build([graph], [TOPO.with_memory(1.0)], 2, "makespan")
  for field in ("feats", "memory"):
    got = np.asarray(getattr(zero.net, field))
    assert np.all(np.isfinite(got)), field
    np.testing.assert_array_equal(got, np.asarray(getattr(one.net, field)))


@pytest.mark.parametrize("option,value", [
    ("samples", 1), ("finetune_seconds", -1.0), ("finetune_seconds", float("inf")),
    ("finetune_seconds", float("nan")), ("checkpoint", ""), ("groups", 0),
    ("learning_rate", 0.0), ("max_updates", 0), ("checkpoint", "go"),
    ("checkpoint", "no/such/folder")])
def test_bad_options_name_the_option(option, value):
  with pytest.raises(ValueError, match=option):
    methods.solve("placeto", chains(), TOPO, **{option: value})


def test_fresh_parameters_need_finetuning_and_unknown_options_are_refused():
  with pytest.raises(methods.Refused, match="finetune_seconds"):  # as GO's
    methods.solve("placeto", chains(), TOPO, checkpoint="none")
  with pytest.raises(ValueError, match="no option"):
    methods.solve("placeto", chains(), TOPO, epochs=2)
  with pytest.raises(methods.Refused, match="devices"):
    methods.solve("placeto", chains(), Topology.uniform(9, bandwidth=1e9))


def test_pretraining_config_is_a_placeto_run_with_held_out_graphs():
  config = pretrain_placeto.get_config()
  assert trainers.get(config) is trainer.SPEC
  trainer.check_config(config)
  assert not set(config.held_out) & set(config.graphs)
  tiny = pretrain_placeto.get_config("tiny")
  trainer.check_config(tiny)
  with pytest.raises(ValueError, match="bad option"):
    pretrain_placeto.get_config("epochs=3")
  bad = toy_config()
  bad.epochs = 2
  with pytest.raises(ValueError, match="epochs"):
    trainer.check_config(bad)
