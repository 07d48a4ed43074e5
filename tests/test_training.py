"""PPO training (go_jax.training): learns a toy to its optimum, never retraces, resumes bitwise,
fine-tunes from hints and pretrained parameters. The launcher end to end (checkpoints, JSONL,
TensorBoard events, resume after SIGKILL) is tests/test_launchers.py's.

Most tests share one small stand-in policy (an MLP over per-node features, defined here) and
one config, so the jitted update compiles once for the whole file.
"""

import json
import os
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from go_jax import objectives
from go_jax.policies.types import GraphFeatures, PolicyOutput
from go_jax.training import checkpoint, loop, ppo, rollout, tuning
from simulator import CompGraph, Topology

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DMAX, LEVELS, OP_TYPES = 4, 4, 64


# ------------------------------------------------------------------ stand-in policy
class StandIn(nn.Module):
  """An MLP over node features + an op-type embedding, with the PolicyOutput contract."""
  hidden: int = 32

  @nn.compact
  def __call__(self, f: GraphFeatures) -> PolicyOutput:
    h = nn.Dense(self.hidden)(f.node_feats) + nn.Embed(OP_TYPES, self.hidden)(f.op_type)
    h = nn.relu(nn.Dense(self.hidden)(nn.relu(h)))
    place = jnp.where(f.device_mask[None], nn.Dense(DMAX)(h), -1e9)
    mask = f.node_mask[:, None].astype(jnp.float32)
    pooled = jnp.sum(h * mask, 0) / jnp.maximum(jnp.sum(mask), 1.0)
    return PolicyOutput(place, nn.Dense(LEVELS)(h), nn.Dense(1)(pooled)[0])


def standin_features(graph, topology, num_nodes, num_edges):
  """One-hot node id and log cost per node (a tabular policy in effect)."""
  n, e = graph.num_nodes, graph.num_edges
  feats = np.zeros((num_nodes, num_nodes + 1), np.float32)
  feats[np.arange(n), np.arange(n)] = 1.0
  feats[:n, -1] = np.log1p(graph.cost / graph.cost.mean())
  order = np.concatenate([graph.topological_order(), np.arange(n, num_nodes)]).astype(np.int32)
  position = np.empty(num_nodes, np.int32)
  position[order] = np.arange(num_nodes)

  def pad(x, size):
    out = np.zeros(size, np.int32)
    out[:len(x)] = x
    return out

  return GraphFeatures(
      node_feats=feats, op_type=pad(graph.op_type % OP_TYPES, num_nodes),
      node_mask=np.arange(num_nodes) < n, senders=pad(graph.senders, num_edges),
      receivers=pad(graph.receivers, num_edges), edge_mask=np.arange(num_edges) < e,
      topo_order=order, topo_position=position,
      device_mask=np.arange(DMAX) < topology.num_devices,
      device_feats=np.zeros((DMAX, 2), np.float32))


def standin() -> ppo.Policy:
  return ppo.Policy(StandIn(), standin_features, DMAX)


# ------------------------------------------------------------------ the toy
def four_chains(length: int = 4) -> CompGraph:
  """4 independent chains of unit-cost ops: on 2 devices the optimum puts 2 whole chains on
  each device, makespan 2 * length (= total work / 2, the work lower bound)."""
  senders = [c * length + j for c in range(4) for j in range(length - 1)]
  return CompGraph(cost=np.ones(4 * length), senders=senders,
                   receivers=[s + 1 for s in senders], out_bytes=np.ones(4 * length),
                   name="four_chains")


# A transfer takes 3 s (latency; bandwidth is infinite), so times stay integers: the optimum 8 is
# reached exactly (also by some placements that cut a chain where the wait can be hidden).
TOY_TOPOLOGY = Topology.uniform(2, bandwidth=float("inf"), latency=3.0)
# Reaches 8 within 30-150 updates on each of 8 seeds tried, and stays there up to 600.
TOY_CONFIG = dict(task="placement", objective="makespan", reference="single", samples=32,
                  graphs_per_update=1, updates=400, updates_per_call=20, epochs=2,
                  minibatches=2, learning_rate=3e-3, entropy_coef=0.2, lr_schedule="constant",
                  advantage="leave_one_out")


def toy_trainer(**overrides):
  return ppo.make_train(dict(TOY_CONFIG, **overrides), [four_chains()], [TOY_TOPOLOGY],
                        policy=standin())


def host_objective(trainer, place, prio):
  return loop.score_action(trainer.problems, 0, place, prio)["objective"]


@pytest.fixture(scope="module")
def trained():
  """The toy trained for 400 updates (20 jitted calls); trace counts around the calls."""
  trainer = toy_trainer()
  state = trainer.init(0)
  before = ppo.TRACES["update_chunk"]
  traces = []
  for _ in range(TOY_CONFIG["updates"] // TOY_CONFIG["updates_per_call"]):
    state, metrics = trainer.update_chunk(state)
    traces.append(ppo.TRACES["update_chunk"] - before)
  return trainer, state, metrics, traces


def test_learns_toy_placement_to_its_optimum(trained):
  trainer, state, metrics, _ = trained
  graph = four_chains()
  optimum = objectives.makespan_lower_bound(graph, TOY_TOPOLOGY)["work"]
  assert optimum == 8.0
  place, prio, fuse = jax.device_get(trainer.greedy(state.params))
  assert fuse is None  # the joint task does not fuse
  assert host_objective(trainer, place[0], prio[0]) == optimum
  assert float(state.best_objective[0]) == optimum
  assert float(metrics["ratio_mean"][-1]) < 0.6  # samples near 8 s vs 16 s on one device
  assert np.bincount(place[0, :16], minlength=2).tolist() == [8, 8]  # work split evenly
  assert int(state.step) == TOY_CONFIG["updates"]


def test_update_chunk_never_retraces(trained):
  *_, traces = trained
  assert traces[-1] == traces[0] <= 1  # 0 if another test compiled the same config first


def test_greedy_pass_is_shared_by_runs_of_other_optimiser_settings(trained):
  # the greedy forward pass reads only the task: another learning rate or loss weight (the
  # update's static hyper-parameters) recompiled it, seconds of a fine-tuning's budget
  trainer, state, *_ = trained
  want = jax.device_get(trainer.greedy_and_entropy(state.params))
  before = ppo.TRACES["greedy"]
  other = toy_trainer(learning_rate=TOY_CONFIG["learning_rate"] / 2, entropy_coef=0.0)
  assert other.hp != trainer.hp
  got = jax.device_get(other.greedy_and_entropy(state.params))
  assert ppo.TRACES["greedy"] == before
  for a, b in zip(jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(got)):
    np.testing.assert_array_equal(a, b)


def test_summary_rechecks_best_action_on_host(trained):
  trainer, state, *_ = trained
  (row,) = loop.summarize(trainer, state)
  assert row["best_agrees"] and row["best_objective"] == 8.0 and row["best_ratio"] == 0.5
  assert row["greedy_objective"] == 8.0 and row["lower_bound"] == 8.0


def test_resume_is_bitwise_exact(trained, tmp_path):
  """2 calls straight == 1 call, checkpoint, restore into NEW trainer/checkpointer, 1 call."""
  trainer, *_ = trained
  straight = trainer.init(7)
  for _ in range(2):
    straight, _ = trainer.update_chunk(straight)

  first = trainer.init(7)
  first, _ = trainer.update_chunk(first)
  with checkpoint.Checkpointer(str(tmp_path / "ckpt"), keep=2) as ckpt:
    ckpt.save(int(first.step), first)
  del first
  fresh = toy_trainer()  # new objects; the same static config reuses the compiled update
  with checkpoint.Checkpointer(str(tmp_path / "ckpt"), keep=2) as ckpt:
    assert ckpt.latest_step() == TOY_CONFIG["updates_per_call"]
    resumed = ckpt.restore(fresh.init(123))  # the template's values must not matter
  resumed, _ = fresh.update_chunk(resumed)

  leaves_a, tree_a = jax.tree_util.tree_flatten(jax.device_get(straight))
  leaves_b, tree_b = jax.tree_util.tree_flatten(jax.device_get(resumed))
  assert tree_a == tree_b
  for a, b in zip(leaves_a, leaves_b):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_damaged_newest_checkpoint_falls_back_to_an_older_one(trained, tmp_path):
  """restore_latest skips a newest checkpoint whose files are garbage (a full disk, a file
  overwritten) and restores the one before it; with every one damaged, one ValueError."""
  trainer, *_ = trained
  older = trainer.init(7)
  newer, _ = trainer.update_chunk(older)
  folder = tmp_path / "ckpt"
  with checkpoint.Checkpointer(str(folder), keep=3) as ckpt:
    ckpt.save(1, older)
    ckpt.save(2, newer)
  def damage(step):
    for root, _, files in os.walk(folder / str(step)):
      for name in files:
        with open(os.path.join(root, name), "wb") as fh:
          fh.write(b"garbage" * 3)
  damage(2)
  with checkpoint.Checkpointer(str(folder), keep=3) as ckpt:
    step, state = ckpt.restore_latest(trainer.init(123))
  assert step == 1
  for a, b in zip(jax.tree_util.tree_leaves(jax.device_get(state)),
                  jax.tree_util.tree_leaves(jax.device_get(older))):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  damage(1)
  with checkpoint.Checkpointer(str(folder), keep=3) as ckpt:
    with pytest.raises(ValueError, match="checkpoint 2 in .* nor any older"):
      ckpt.restore_latest(trainer.init(123))


def test_an_unreadable_saved_config_names_the_file(tmp_path):
  (tmp_path / "config.json").write_text("{bad")
  with pytest.raises(ValueError, match=r"config\.json: the run's saved config is not readable"):
    loop.check_resume(str(tmp_path), TOY_CONFIG)


def test_finetune_from_pretrained_params(trained, tmp_path):
  trainer, state, *_ = trained
  path = checkpoint.save_params(str(tmp_path / "params.msgpack"), state.params)
  params = checkpoint.load_params(path, trainer.init(1).params)
  result = tuning.finetune(TOY_CONFIG, four_chains(), TOY_TOPOLOGY, params,
                         max_updates=TOY_CONFIG["updates"], seed=3, policy=standin())
  assert result.zero_shot_objective == 8.0  # the pretrained greedy action is already optimal
  assert result.objective == result.loop_objective == 8.0 and result.feasible
  assert result.updates == TOY_CONFIG["updates"] and len(result.history) == result.updates
  assert result.placement.shape == (16,) and result.reference == 16.0


def test_finetune_gates_the_exploration_floor_by_the_starting_entropy(trained):
  """`explore_below` applies the floor only where the starting policy's placement entropy per
  decision is below it: the trained toy policy is sure (well under ln 2 = 0.69 nats) and a
  fresh one is not; without `explore_below` the floor always applies."""
  trainer, state, *_ = trained
  cfg = dict(TOY_CONFIG, explore=0.2, explore_below=0.3)
  sure = tuning.finetune(cfg, four_chains(), TOY_TOPOLOGY, state.params, max_updates=20,
                         policy=standin(), progress=False)
  unsure = tuning.finetune(cfg, four_chains(), TOY_TOPOLOGY, trainer.init(5).params,
                           max_updates=20, policy=standin(), progress=False)
  always = tuning.finetune(dict(cfg, explore_below=None), four_chains(), TOY_TOPOLOGY,
                           trainer.init(5).params, max_updates=20, policy=standin(),
                           progress=False)
  assert sure.start_entropy < 0.3 < unsure.start_entropy <= np.log(2) + 1e-5
  assert (sure.explore, unsure.explore, always.explore) == (0.2, 0.0, 0.2)
  # under the floor the samples' entropy stays at or above the mixture's 0.325 nats
  assert min(h["entropy_per_decision"] for h in sure.history) >= 0.325 - 1e-3


def test_finetune_counts_setup_and_compile_inside_its_budget(trained, caplog):
  """A budget spent before the first update still runs that one call (the zero-shot stages),
  then stops; setup, compile and search seconds add up to the whole; progress is logged and
  can be turned off."""
  import logging as py_logging  # pylint: disable=g-import-not-at-top
  trainer, state, *_ = trained
  caplog.set_level(py_logging.INFO, logger="absl")
  result = tuning.finetune(TOY_CONFIG, four_chains(), TOY_TOPOLOGY, state.params,
                         max_seconds=1e-6, seed=3, policy=standin())
  per_call = TOY_CONFIG["updates_per_call"]
  assert result.updates == per_call and len(result.history) == per_call
  assert result.setup_seconds + result.compile_seconds + result.search_seconds == \
      pytest.approx(result.seconds)
  assert min(result.setup_seconds, result.compile_seconds, result.search_seconds) >= 0
  lines = [r.getMessage() for r in caplog.records if "fine-tune four_chains" in r.getMessage()]
  assert any("best 8" in line and "update/s" in line for line in lines), lines
  caplog.clear()
  tuning.finetune(TOY_CONFIG, four_chains(), TOY_TOPOLOGY, state.params, max_updates=per_call,
                policy=standin(), progress=False)
  assert not [r for r in caplog.records if "fine-tune" in r.getMessage()]


def test_train_loop_from_pretrained_params_within_a_deadline(trained, tmp_path):
  """loop.train in process: init_params, a deadline that stops it after one call, files."""
  _, state, *_ = trained
  pretrained = checkpoint.save_params(str(tmp_path / "pre" / "params.msgpack"), state.params)
  config = ml_collections.ConfigDict(dict(
      TOY_CONFIG, seed=0, checkpoint_every=40, keep_checkpoints=2, tensorboard=False,
      max_seconds=1e-6, init_params=os.path.dirname(pretrained)))
  workdir = tmp_path / "run"
  result = loop.train(config, str(workdir), policy=standin(), progress=False,
                      instances=([four_chains()], [TOY_TOPOLOGY], ["toy"]))
  per_call = TOY_CONFIG["updates_per_call"]
  assert int(result.state.step) == per_call  # the deadline stopped it after one call
  assert os.listdir(workdir / "checkpoints") == [str(per_call)]  # saved where it stopped
  (row,) = result.summary
  assert row["greedy_objective"] == 8.0  # it started from the trained parameters
  rows = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
  assert [r["step"] for r in rows] == list(range(1, per_call + 1))
  summary = json.load(open(workdir / "summary.json"))
  assert summary["updates"] == per_call and summary["instances"][0]["best_objective"] == 8.0


@pytest.mark.parametrize("name", sorted(k for k, t in rollout.TASKS.items()
                                         if not t.learns_fusion))
def test_tasks_decide_which_heads_count(name):
  """Log-probabilities sum exactly the heads a task samples; the rest comes from the instance.
  (The fusion tasks need costed graphs and a fusion head: tests/test_fusion_training.py.)"""
  task = rollout.TASKS[name]
  data = toy_trainer(task=name, fixed_placement="heft").data
  rng = np.random.default_rng(0)
  out = PolicyOutput(placement_logits=jnp.asarray(rng.normal(size=(1, 16, DMAX)), jnp.float32),
                     priority_logits=jnp.asarray(rng.normal(size=(1, 16, LEVELS)), jnp.float32),
                     value=jnp.zeros(1))
  actions = rollout.Actions(placement=jnp.asarray(rng.integers(0, 2, (1, 3, 16)), jnp.int32),
                            level=jnp.asarray(rng.integers(0, LEVELS, (1, 3, 16)), jnp.int32))
  lp_place = jax.nn.log_softmax(out.placement_logits[0], -1)
  lp_level = jax.nn.log_softmax(out.priority_logits[0], -1)
  nodes = np.arange(16)
  expected = [task.learns_placement * lp_place[nodes, actions.placement[0, k]].sum() +
              task.learns_priority * lp_level[nodes, actions.level[0, k]].sum()
              for k in range(3)]
  np.testing.assert_allclose(rollout.log_prob(task, data, out, actions)[0], expected,
                             rtol=1e-5)
  place, prio = rollout.to_simulator(task, data, actions)
  want_place = actions.placement if task.learns_placement else np.broadcast_to(
      data.fixed_placement[:, None], (1, 3, 16))
  want_prio = (actions.level + data.tiebreak[:, None] if task.learns_priority else
               np.broadcast_to(data.fixed_priority[:, None], (1, 3, 16)))
  np.testing.assert_array_equal(place, want_place)
  np.testing.assert_allclose(prio, want_prio)
  if task.needs_fixed_placement:  # HEFT keeps each chain on one device
    chains = np.asarray(data.fixed_placement[0]).reshape(4, 4)
    assert (chains == chains[:, :1]).all()
  tie = np.asarray(data.tiebreak[0])
  assert tie.min() >= 0 and tie.max() <= 0.5  # never crosses a priority level


def test_self_imitation_targets_are_the_best_actions_decisions():
  """The targets are the decisions that reproduce the best action so far (placement, and the
  level under the instance's tie-break); an instance with no feasible best weighs nothing."""
  trainer = toy_trainer(task="joint")
  data, state = trainer.data, trainer.init(0)
  rng = np.random.default_rng(1)
  actions = rollout.Actions(placement=jnp.asarray(rng.integers(0, 2, (1, 1, 16)), jnp.int32),
                            level=jnp.asarray(rng.integers(0, LEVELS, (1, 1, 16)), jnp.int32))
  place, prio = rollout.to_simulator(rollout.TASKS["joint"], data, actions)
  idx = jnp.arange(1)
  assert float(ppo._imitation_targets(state, idx, data, LEVELS).weight[0]) == 0.0  # none yet
  state = state.replace(best_objective=jnp.asarray([9.0]), best_placement=place[:, 0],
                        best_priority=prio[:, 0])
  target = ppo._imitation_targets(state, idx, data, LEVELS)
  np.testing.assert_array_equal(target.actions.placement, actions.placement)
  np.testing.assert_array_equal(target.actions.level, actions.level)
  assert float(target.weight[0]) == 1.0
  over = state.replace(best_objective=data.upper_bound * 2)  # out of memory: not imitated
  assert float(ppo._imitation_targets(over, idx, data, LEVELS).weight[0]) == 0.0


def test_self_imitation_pulls_the_greedy_action_to_the_best_so_far():
  """With self-imitation dominating the loss, the greedy placement becomes the best action so
  far (here an arbitrary fixed one, marked best with an objective no sample beats)."""
  trainer = toy_trainer(self_imitation_coef=20.0, entropy_coef=0.0, updates=60)
  state = trainer.init(0)
  target = np.asarray([0, 1, 1, 0] * 4, np.int32)
  state = state.replace(best_objective=jnp.asarray([1.0]),  # below the optimum: never replaced
                        best_placement=jnp.asarray(target)[None],
                        best_priority=trainer.data.tiebreak)
  losses = []
  for _ in range(3):
    state, metrics = trainer.update_chunk(state)
    losses.append(np.asarray(metrics["self_imitation_loss"]))
  place, _, _ = jax.device_get(trainer.greedy(state.params))
  np.testing.assert_array_equal(place[0, :16], target)
  assert losses[0][0] > 0.5 > 0.1 > losses[-1][-1]  # from about ln 2 per decision to near 0


def test_exploration_floor_keeps_every_device_possible():
  """Without an entropy bonus the toy's policy collapses to near-certain decisions; with
  `explore` = 0.2 every device keeps probability >= 0.1 (of 2), so the entropy per decision
  stays >= that mixture's (0.325 nats), and the greedy action is the same function of the
  network's logits (the mixture keeps each node's most likely device)."""
  ent, place = {}, {}
  for explore in (0.0, 0.2):
    trainer = toy_trainer(entropy_coef=0.0, explore=explore, updates=100)
    state = trainer.init(0)
    for _ in range(5):
      state, metrics = trainer.update_chunk(state)
    ent[explore] = float(metrics["entropy_per_decision"][-1])
    out = ppo._apply(trainer.policy.module, state.params, trainer.data.feats, explore)
    probs = np.asarray(jax.nn.softmax(out.placement_logits[0, :16, :2], axis=-1))
    place[explore] = np.asarray(jax.device_get(trainer.greedy(state.params))[0][0, :16])
    np.testing.assert_array_equal(place[explore], probs.argmax(-1))
    if explore:
      assert probs.min() >= explore / 2 - 1e-6
      np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
  assert ent[0.0] < 0.1 < 0.325 - 1e-3 <= ent[0.2]


@pytest.mark.parametrize("field,value,match", [
    ("task", "fission", "unknown task"),
    ("advantage", "gae", "unknown advantage"),
    ("graphs_per_update", 2, "exceeds the number"),
    ("minibatches", 3, "multiple of minibatches"),
    ("reference", "nope", "unknown method"),
    ("self_imitation_coef", -1.0, "self_imitation_coef must be >= 0"),
    ("explore", 1.0, "explore must be in"),
])
def test_bad_config_raises_clear_errors(field, value, match):
  with pytest.raises(ValueError, match=match):
    toy_trainer(**{field: value})


def test_an_instance_given_twice_in_other_words_is_refused():
  """config.graphs / config.topologies naming one instance twice (keys in another order, a
  memory option written another way) would train it twice and report it twice: a ValueError
  naming both entries, before any graph is built."""
  for graphs, topos, match in (
      (("chain:n=4,seed=0", "chain:seed=0, n=4"), ("nvlink2",),
       r"config: graphs\[0\] 'chain:n=4,seed=0' and graphs\[1\] 'chain:seed=0, n=4' are the "
       "same graph"),
      (("chain:n=4",), ("nvlink2@mem=2e9", "nvlink2@mem=2000000000"), "are the same topology")):
    with pytest.raises(ValueError, match=match):
      loop.build_instances(ml_collections.ConfigDict(dict(graphs=graphs, topologies=topos)))
  graphs, _, _ = loop.build_instances(ml_collections.ConfigDict(dict(
      graphs=("chain:n=4", "chain:n=4,seed=1"), topologies=("nvlink2",))))
  assert len(graphs) == 2


def test_too_many_devices_for_the_policy():
  with pytest.raises(ValueError, match="max_devices"):
    ppo.make_train(TOY_CONFIG, [four_chains()], [Topology.uniform(8, bandwidth=1.0)],
                   policy=standin())


# ------------------------------------------------------------------ hints, zero-shot, pretrained
def tiny_hint_config(**overrides):
  from experiments.configs import train_test  # pylint: disable=g-import-not-at-top
  from go_jax import policies  # pylint: disable=g-import-not-at-top
  config = train_test.get_config()
  policy = policies.variant_config("go_hint")
  # the variant's own fields win: go_hint has no load state (policies.VARIANTS)
  policy.update(dict(config.policy), variant="go_hint", hint="best_list", load_state=False)
  config.policy = policy
  config.update(overrides)
  return config


def test_hint_zero_shot_reproduces_the_hint_and_finetune_keeps_it():
  """A fresh go_hint policy's greedy action IS the hint's solution (placement and order), so
  zero-shot starts at the best list scheduler; the best of K and fine-tuning never end above."""
  from go_jax import harness  # pylint: disable=g-import-not-at-top
  from go_jax.training import hints  # pylint: disable=g-import-not-at-top
  from simulator import sources  # pylint: disable=g-import-not-at-top
  graph = sources.load_graph("layered:n=40,width=6,seed=3")
  topo = harness.make_topology(harness.parse_topology("nvlink4@mem=0.6x"), graph)[0]
  sol = hints.hint_solution("best_list", graph, topo)
  assert sol.method in hints.GROUPS["best_list"]
  config = tiny_hint_config(samples=8, updates_per_call=1)
  trainer = ppo.make_train(dict(config, graphs_per_update=1), [graph], [topo])
  tie = np.asarray(trainer.data.tiebreak[0, :graph.num_nodes])
  assert np.allclose(tie, hints.priority_tiebreak(sol.priority), atol=1e-6)
  state = trainer.init(0)
  # One update per call: the first call's samples are the zero-shot best of K (one compile).
  tuned = tuning.finetune(config, graph, topo, state.params, max_updates=2)
  assert np.array_equal(tuned.zero_shot_placement, sol.placement)
  assert tuned.zero_shot_objective == pytest.approx(sol.objective, rel=1e-9)
  best_k = tuned.zero_shot_best["objective"]
  assert best_k <= tuned.zero_shot_objective and tuned.updates == 2
  assert tuned.objective <= best_k * (1 + 1e-6)


def test_hint_names_are_checked():
  from go_jax.training import hints  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match="unknown hint 'nope'"):
    hints.hint_solution("nope", four_chains(), TOY_TOPOLOGY)
  with pytest.raises(ValueError, match="unknown hint"):
    hints.hint_solution("critical_path", four_chains(), TOY_TOPOLOGY)  # only schedules
  assert np.array_equal(hints.priority_tiebreak([3.0, 1.0, 3.0, 2.0]), [0.5, 0.0, 0.5, 0.25])


def test_training_set_solves_each_baseline_once_per_instance(monkeypatch):
  """HEFT is both the reference and one of the best_list hint's methods: solved once."""
  from go_jax import methods  # pylint: disable=g-import-not-at-top
  calls = []
  real = methods.solve

  def counting(name, *args, **kwargs):
    calls.append(name)
    return real(name, *args, **kwargs)

  monkeypatch.setattr(methods, "solve", counting)
  config = tiny_hint_config(reference="heft")
  ppo.make_train(dict(config, graphs_per_update=1), [four_chains()], [TOY_TOPOLOGY])
  assert sorted(calls) == ["heft", "m_etf", "m_sct"]


def test_hint_names_load_the_registry_first():
  """hints.available() in a fresh interpreter, before anything loaded the methods."""
  script = ("from go_jax.training import hints; names = hints.available(); "
            "assert 'best_list' in names and 'heft' in names, names; "
            "assert 'go_hint' not in names and 'bfs' not in names, names; print('ok')")
  out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       cwd=REPO, env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=300)
  assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_pretrained_export_load_round_trip(tmp_path):
  from experiments.configs import train_test  # pylint: disable=g-import-not-at-top
  from go_jax import pretrained  # pylint: disable=g-import-not-at-top
  config = train_test.get_config()
  run = tmp_path / "run"  # what a finished training run leaves: its config and parameters
  params = jax.tree_util.tree_map(lambda x: x + 1.0, pretrained.template(config.policy))
  checkpoint.save_params(str(run / "params.msgpack"), params)
  (run / "config.json").write_text(config.to_json())
  folder = pretrained.export(str(run), "tiny", str(tmp_path / "pkg"))
  assert folder == str(tmp_path / "pkg" / "tiny")
  cfg, loaded = pretrained.load(folder)
  assert cfg.policy.hidden == config.policy.hidden
  same = jax.tree_util.tree_map(lambda a, b: bool(np.array_equal(a, b)), loaded,
                                jax.device_get(params))
  assert all(jax.tree_util.tree_leaves(same))
  with pytest.raises(ValueError, match="no pretrained checkpoint 'nope'"):
    pretrained.load("nope")
  with pytest.raises(ValueError, match="plain folder name"):
    pretrained.export(str(run), "../x", str(tmp_path / "pkg"))
  with pytest.raises(ValueError, match="has no config.json"):
    pretrained.export(str(tmp_path / "pkg"), "y", str(tmp_path / "pkg2"))


def test_pretrained_export_refuses_a_corrupt_or_mismatched_params_file(tmp_path):
  """export copied params.msgpack unchecked, so a corrupt file (or one of another policy)
  failed only when the exported checkpoint was loaded; now export refuses it, naming the file,
  and writes nothing."""
  from experiments.configs import train_test  # pylint: disable=g-import-not-at-top
  from go_jax import pretrained  # pylint: disable=g-import-not-at-top
  config = train_test.get_config()
  run = tmp_path / "run"
  run.mkdir()
  (run / "config.json").write_text(config.to_json())
  params = run / "params.msgpack"
  params.write_bytes(b"\x80\x04not msgpack at all")
  with pytest.raises(ValueError, match=rf"parameters in {params} cannot be read"):
    pretrained.export(str(run), "corrupt", str(tmp_path / "pkg"))
  other = config.policy.copy_and_resolve_references()
  other.hidden = 2 * int(config.policy.hidden)
  checkpoint.save_params(str(params), pretrained.template(other))
  with pytest.raises(ValueError, match=rf"parameters in {params} do not fit"):
    pretrained.export(str(run), "mismatched", str(tmp_path / "pkg"))
  assert not (tmp_path / "pkg").exists()


def test_pretrained_export_refuses_the_package_folder(tmp_path):
  from go_jax import pretrained  # pylint: disable=g-import-not-at-top
  run = tmp_path / "run"
  run.mkdir()
  (run / "config.json").write_text("{}")
  (run / "params.msgpack").write_bytes(b"")
  for inside in (pretrained.ROOT, os.path.dirname(pretrained.ROOT)):
    with pytest.raises(ValueError, match="inside the go_jax package"):
      pretrained.export(str(run), "refused", inside)
  assert not os.path.exists(os.path.join(pretrained.ROOT, "refused"))
  with pytest.raises(TypeError):
    pretrained.export(str(run), "refused")  # no default folder: the caller names one


def test_local_folder_does_not_shadow_a_shipped_checkpoint(tmp_path, monkeypatch):
  """A folder named like a shipped checkpoint in the working directory is used only when the
  argument is clearly a path ("./go_hint")."""
  from go_jax import pretrained  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(tmp_path)
  local = tmp_path / pretrained.DEFAULT
  local.mkdir()
  (local / "config.json").write_text('{"marker": 1}')
  (local / "params.msgpack").write_bytes(b"")
  assert "marker" not in pretrained.load_config(pretrained.DEFAULT)
  assert pretrained.load_config(pretrained.DEFAULT).policy.hint
  assert pretrained.load_config("./" + pretrained.DEFAULT).marker == 1
  assert pretrained.load_config(str(local)).marker == 1
  other = tmp_path / "mine"
  other.mkdir()
  (other / "config.json").write_text('{"marker": 2}')
  assert pretrained.load_config("mine").marker == 2  # not a shipped name: a folder


def test_shipped_checkpoint_loads_and_places_an_unseen_graph():
  """The checkpoint inside the package loads into its own policy config and places a graph it
  never saw (its greedy action, re-simulated on the host)."""
  from go_jax import harness, pretrained  # pylint: disable=g-import-not-at-top
  from simulator import sources  # pylint: disable=g-import-not-at-top
  assert pretrained.DEFAULT in pretrained.available()
  config, params = pretrained.load()
  graph = sources.load_graph("series_parallel:n=30,seed=5")
  topo = harness.make_topology(harness.parse_topology("nvlink4@mem=0.6x"), graph)[0]
  trainer = ppo.make_train(dict(config, graphs_per_update=1), [graph], [topo])
  place, prio, _ = jax.device_get(trainer.greedy(params))  # compiles the policy only
  scored = loop.score_action(trainer.problems, 0, place[0], prio[0])
  assert np.isfinite(scored["objective"]) and scored["placement"].shape == (30,)
  assert scored["placement"].max() < 4
  assert config.policy.hint and config.policy.hidden <= 128  # a small shipped policy


def test_load_params_names_the_leaf_whose_shape_differs(tmp_path):
  from go_jax.training import checkpoint as ckpt_lib  # pylint: disable=g-import-not-at-top
  path = str(tmp_path / "params.msgpack")
  ckpt_lib.save_params(path, {"dense": {"kernel": np.zeros((3, 4)), "bias": np.zeros(4)}})
  ok = ckpt_lib.load_params(path, {"dense": {"kernel": np.ones((3, 4)), "bias": np.ones(4)}})
  assert np.shape(ok["dense"]["kernel"]) == (3, 4)
  with pytest.raises(ValueError, match=r"shapes differ: \['dense'\]\['kernel'\] is \(3, 4\)"):
    ckpt_lib.load_params(path, {"dense": {"kernel": np.ones((5, 4)), "bias": np.ones(4)}})


def test_a_file_where_the_checkpoints_go_is_refused_up_front(tmp_path, monkeypatch):
  """<workdir>/checkpoints an existing file: orbax failed only in its save threads, after the
  training, and the launcher then hung at exit. Now the Checkpointer and train refuse it at
  once, naming the path; the launcher says so in one line and exits 1 (it ran the worktree's
  code: PYTHONPATH, cwd)."""
  ckpt = tmp_path / loop.CKPT_DIR
  ckpt.write_text("not a folder")
  with pytest.raises(ValueError, match=rf"{ckpt}: the checkpoint folder exists and is not a"):
    checkpoint.Checkpointer(str(ckpt))
  monkeypatch.setattr(loop, "build_instances",
                      lambda *a, **k: pytest.fail("refused before the instances are built"))
  with pytest.raises(ValueError, match=rf"{ckpt}: the checkpoint folder"):
    loop.train(ml_collections.ConfigDict(dict(TOY_CONFIG, updates=20)), str(tmp_path),
               progress=False)
  out = subprocess.run([sys.executable, "-m", "experiments.train", f"--workdir={tmp_path}",
                        "--curves=off"], capture_output=True, text=True, cwd=REPO,
                       env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO), timeout=120)
  lines = [l for l in out.stderr.splitlines() if l.strip()]
  assert out.returncode == 1 and len(lines) == 1, out.stderr[-3000:]
  assert f"--workdir={tmp_path}: {ckpt}: the checkpoint folder exists" in lines[0], lines


def test_checkpointer_close_closes_the_manager_when_a_save_failed(tmp_path):
  """A failed save's error comes out of close, after the orbax manager is closed (left open,
  its threads kept the launcher from exiting)."""
  ckpt = checkpoint.Checkpointer(str(tmp_path / "ckpt"))
  closed = []

  class Failing:
    def wait_until_finished(self):
      raise OSError("the save failed")

    def close(self):
      closed.append(True)

  real, ckpt._manager = ckpt._manager, Failing()  # pylint: disable=protected-access
  with pytest.raises(OSError, match="the save failed"):
    ckpt.close()
  assert closed == [True]
  real.close()


def test_corrupt_metrics_lines_are_skipped_not_a_traceback(tmp_path):
  """metrics.jsonl with lines that are not metrics rows ([1], a null or string step, garbage)
  and a torn last line (an interrupted write): reading, resuming (truncation), the curves and
  the seconds per step use the good rows and raise nothing."""
  from go_jax.training import evaluation  # pylint: disable=g-import-not-at-top
  from go_jax.training import logging as train_logging  # pylint: disable=g-import-not-at-top
  path = tmp_path / train_logging.JSONL_NAME
  good = [{"step": s, "time": 100.0 + s, "reward_mean": 0.1 * s} for s in (1, 2, 3, 4)]
  lines = [json.dumps(good[0]), "[1]", json.dumps({"step": None, "time": 1.0}),
           json.dumps(good[1]), json.dumps({"step": "3"}), json.dumps({"step": True}),
           "\x00garbage", json.dumps({"time": 5.0}), json.dumps(good[2]),
           json.dumps(dict(good[3], time=None, reward_mean="x")), '{"step": 5, "ti']
  path.write_text("\n".join(lines))  # no newline after the torn line
  rows = train_logging.read_jsonl(str(path))
  assert [r["step"] for r in rows] == [1, 2, 3, 4]
  seconds = evaluation._seconds_of_steps(str(tmp_path))  # pylint: disable=protected-access
  assert seconds == {0: 0.0, 1: 0.0, 2: 1.0, 3: 2.0}  # step 4's time is null: left out
  curve = train_logging.plot_metric_curves(str(tmp_path), (("reward_mean", "mean"),), "reward",
                                           str(tmp_path / "curve.png"))
  assert os.path.getsize(curve) > 1000
  logger = train_logging.MetricsLogger(str(tmp_path), tensorboard=False, resume_step=3)
  logger.write(4, {"reward_mean": 0.5})
  logger.close()
  assert [(r["step"], r["reward_mean"]) for r in train_logging.read_jsonl(str(path))] == [
      (1, 0.1), (2, 0.2), (3, 0.30000000000000004), (4, 0.5)]
  assert len(path.read_text().splitlines()) == 4  # the bad lines are gone with the rewrite


def test_launcher_names_the_workdir_for_a_checkpoint_that_does_not_restore(tmp_path):
  """go-jax-train over a workdir whose only checkpoint is damaged: the one line named the
  --config file, as if the config were wrong; it names --workdir and the checkpoint folder."""
  step = tmp_path / loop.CKPT_DIR / "10" / "state"
  step.mkdir(parents=True)
  (step / "data").write_bytes(b"garbage")
  out = subprocess.run([sys.executable, "-m", "experiments.train", f"--workdir={tmp_path}",
                        "--curves=off", "--noprogress"], capture_output=True, text=True,
                       cwd=REPO, env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO),
                       timeout=300)
  last = out.stderr.strip().splitlines()[-1]
  assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
  assert last.startswith(f"train.py: error: --workdir={tmp_path}: checkpoint 10 in "
                         f"{tmp_path / loop.CKPT_DIR}"), last
  assert "--config=" not in last


def test_a_rerun_with_fewer_updates_than_the_run_did_is_refused(tmp_path, monkeypatch):
  """A finished run of 40 updates rerun with updates=20 trained nothing and rewrote config.json
  (20) beside summary.json (40); now it is refused before any file is written."""
  def at_40(workdir, config, state, keep):
    del workdir, config, keep
    return None, state.replace(step=jnp.asarray(40, state.step.dtype)), 40
  monkeypatch.setattr(loop, "open_checkpoints", at_40)
  config = ml_collections.ConfigDict(dict(TOY_CONFIG, updates=20, tensorboard=False))
  with pytest.raises(ValueError, match=r"checkpoints: the run is at update 40, past the "
                     r"config's updates \(20\); rerun with updates >= 40"):
    loop.train(config, str(tmp_path), policy=standin(), progress=False,
               instances=([four_chains()], [TOY_TOPOLOGY], ["chains"]))
  assert not os.path.exists(tmp_path / loop.CONFIG_NAME)
