"""The hint-free GO learns a memory-tight toy (imitation + PPO), and the imitation pieces.

The toy: chains whose parameters do not fit one device (each device holds 0.6x of the chain's
single-device footprint), so every feasible placement splits the chain; the real GO policy (at
a tiny size, with its load state) is cloned from the list schedulers and then trained with PPO
for a few updates, and must then place every training chain feasibly within 5% of the best list
scheduler and two chains of lengths it never saw feasibly within 10%, zero-shot.

The toy run (one module fixture: imitation, 20 PPO updates, two checkpoints) also serves an
interrupted cloning resumed from its partial file, and the learning curve of a run's
checkpoints (go_jax/training/evaluation.py; the rest of its tests are in
tests/test_training_eval.py): building a second toy run for it cost as much as this one.
"""

import json
import os
import types

import jax
import numpy as np
import pytest

from experiments.configs import train_base
from go_jax import methods
from go_jax.training import evaluation, imitation, loop, ppo, rollout
from simulator import CompGraph, Topology

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

TEACHERS = ("heft", "m_sct")


def tight_chain(n: int, seed: int) -> CompGraph:
  rng = np.random.default_rng(seed)
  s = np.arange(n - 1)
  return CompGraph(cost=rng.uniform(0.5, 1.5, n), senders=s, receivers=s + 1,
                   out_bytes=np.full(n, 0.1), param_bytes=rng.uniform(0.5, 1.5, n),
                   name=f"tight_chain{n}_{seed}")


def tight_topology(graph: CompGraph, devices: int = 2) -> Topology:
  """0.6x of the chain's single-device footprint (its parameters plus two outputs) per device."""
  footprint = graph.param_bytes.sum() + 2 * graph.out_bytes.max()
  return Topology.uniform(devices, bandwidth=10.0, latency=0.5, mem_capacity=0.6 * footprint)


def toy_config(updates=20, imitation_steps=100):
  # PPO at 1e-3: at 3e-3 the outcome on the 12-op chain flipped with the last bits of the
  # floats (1.04x the best teacher with XLA's optimisations, 1.16x without); at 1e-3 (and at
  # 2e-3, or with 32 samples, or no entropy bonus) every training chain ends at 1.00-1.04x
  # either way. Imitation alone leaves it at 1.08x: the PPO updates close the rest.
  cfg = train_base.get_config()
  cfg.update(task="joint", samples=16, graphs_per_update=4, updates=updates,
             updates_per_call=10, epochs=1, minibatches=1, warmup_updates=0,
             learning_rate=1e-3, lr_schedule="constant", entropy_coef=0.01,
             checkpoint_every=10, tensorboard=False)
  cfg.policy.update(hidden=16, gnn_layers=1, attention_layers=1, heads=2, segment_len=8,
                    priority_levels=4, load_block=4)
  cfg.imitation.update(enabled=True, steps=imitation_steps, steps_per_call=20,
                       teachers=TEACHERS, learning_rate=3e-3)
  return cfg


def best_teacher(graph, topology):
  return min(methods.solve(m, graph, topology).objective for m in TEACHERS)


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
  sizes = ((12, 0), (16, 1), (20, 2), (24, 3))
  graphs = [tight_chain(n, s) for n, s in sizes]
  topos = [tight_topology(g) for g in graphs]
  for g, t in zip(graphs, topos):  # the toy is what it claims: one device cannot hold it
    single = methods.solve("single", g, t)
    assert not single.feasible, g.name
  workdir = str(tmp_path_factory.mktemp("go_toy"))
  cfg = toy_config()
  # "<graph spec> @ <topology>" names: the learning curve groups them into the family "chain"
  names = [f"chain:n={n},seed={s} @ tight" for n, s in sizes]
  result = loop.train(cfg, workdir, instances=(graphs, topos, names), progress=False)
  return cfg, graphs, topos, workdir, result


def test_hint_free_go_learns_memory_tight_chains(toy_run):
  cfg, graphs, topos, _, result = toy_run
  for row, g, t in zip(result.summary, graphs, topos):
    assert row["greedy_feasible"], row["instance"]
    # within 5%: the greedy decode's barrier counts a block's earlier picks as live for their
    # whole block (policies/load.py, the exact decode), which on a chain over-counts a little
    assert row["greedy_objective"] <= 1.05 * best_teacher(g, t), row["instance"]
  # chains of lengths never trained on, zero-shot (greedy action of one forward pass)
  held = [tight_chain(18, 7), tight_chain(28, 8)]
  held_topos = [tight_topology(g) for g in held]
  trainer = ppo.make_train(dict(cfg, graphs_per_update=1), held, held_topos)
  rows = loop.summarize(trainer, trainer.init(0).replace(params=result.state.params))
  for row, g, t in zip(rows, held, held_topos):
    assert row["greedy_feasible"], row["instance"]
    assert row["greedy_objective"] <= 1.1 * best_teacher(g, t), row["instance"]


def test_imitation_writes_its_report_and_a_resumed_run_reloads_it(toy_run, monkeypatch):
  cfg, graphs, topos, workdir, result = toy_run
  with open(os.path.join(workdir, imitation.SUMMARY_NAME)) as fh:
    report = json.load(fh)
  assert report["steps"] == cfg.imitation.steps and len(report["instances"]) == len(graphs)
  for row in report["instances"]:
    assert row["teacher"] in TEACHERS and row["target_feasible"]
    # the target as the policy expresses it (levels + critical-path tie-break) stays close
    assert row["target_objective"] <= 1.05 * row["teacher_objective"]
  assert report["history"][-1]["acc_placement"] > report["history"][0]["acc_placement"] - 1e-6
  params_file = os.path.join(workdir, imitation.PARAMS_NAME)
  assert os.path.isfile(params_file)

  calls = []
  monkeypatch.setattr(imitation, "clone", lambda *a, **k: calls.append(1))
  trainer = result.trainer
  state = trainer.init(0)
  reloaded = imitation.warm_start(trainer, state.params, cfg.imitation, workdir)
  assert not calls  # the cloned parameters are read back, not cloned again
  jax.tree_util.tree_map(np.testing.assert_array_equal, reloaded,
                         loop.ckpt_lib.load_params(params_file, state.params))


def test_priority_levels_cut_the_rank_into_levels():
  prio = np.array([0.1, 5.0, 3.0, 3.0, 9.0, -1.0, 7.0, 2.0])
  levels = imitation.priority_levels(prio, 4)
  assert levels.tolist() == [0, 2, 1, 1, 3, 0, 3, 1]  # ties share a level; higher runs first
  assert imitation.priority_levels(np.zeros(0), 4).size == 0
  assert set(imitation.priority_levels(np.arange(100.0), 8).tolist()) == set(range(8))


def test_canonical_devices_only_where_the_topology_allows_it():
  g = tight_chain(8, 0)
  order = g.topological_order()
  place = np.array([2, 2, 0, 0, 3, 3, 1, 1])
  uniform = Topology.uniform(4, bandwidth=10.0, latency=0.5)
  canon = imitation.canonical_devices(place, order, uniform)
  assert canon.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
  prio = np.arange(8.0)[::-1].copy()
  assert np.isclose(methods.evaluate(g, uniform, canon, prio)["objective"],
                    methods.evaluate(g, uniform, place, prio)["objective"])
  mixed = Topology(speed=[1.0, 2.0, 1.0, 1.0], overhead=np.zeros(4),
                   mem_capacity=np.full(4, np.inf), bandwidth=np.full((4, 4), 10.0),
                   latency=np.full((4, 4), 0.5))
  assert imitation.canonical_devices(place, order, mixed).tolist() == place.tolist()


@pytest.mark.parametrize("field,value,match", [
    ("steps", 30, "multiple of"), ("graphs_per_step", 0, "graphs_per_step"),
    ("learning_rate", 0.0, "learning_rate"), ("label_smoothing", 1.0, "label_smoothing"),
    ("teachers", (), "teachers"), ("checkpoint_every", 0, "checkpoint_every"),
    ("on_policy", 1.5, "on_policy"), ("on_policy", -0.1, "on_policy"),
    ("prefer", "sa", "prefer must be one of imitation.teachers")])
def test_bad_imitation_config_raises_clear_errors(field, value, match):
  cfg = imitation.default_config()
  cfg[field] = value
  with pytest.raises(ValueError, match=match):
    imitation.check_config(cfg)


def test_the_preferred_teacher_is_the_target_wherever_it_fits():
  def sol(method, objective, feasible=True):
    return types.SimpleNamespace(method=method, objective=objective, feasible=feasible)
  fits = [sol("heft", 1.2), sol("m_etf", 1.0), sol("m_sct", 1.1)]
  assert imitation.choose_target(fits).method == "m_etf"  # no preference: the best
  assert imitation.choose_target(fits, "heft").method == "heft"  # preferred, though worse
  over = [sol("heft", 1e9, feasible=False), sol("m_etf", 1.3), sol("m_sct", 1.1)]
  assert imitation.choose_target(over, "heft").method == "m_sct"  # out of memory: the best
  none = [sol("heft", 2e9, feasible=False), sol("m_etf", 1e9, feasible=False)]
  assert imitation.choose_target(none, "heft").method == "m_etf"


def test_schedule_only_teachers_are_refused(toy_run):
  _, _, _, _, result = toy_run
  with pytest.raises(ValueError, match="only schedules"):
    imitation.build_targets(result.trainer.problems, result.trainer.data, ("critical_path",), 4,
                            rollout.get_task("joint"), progress=False)


def test_checkpoint_curve_of_a_run(toy_run):
  """The toy run with imitation and two checkpoints: eval.jsonl has a point after imitation and
  one per checkpoint for every family, the greedy ratio agrees with the host re-simulation, and
  the plot is written; evaluating leaves the run's state untouched."""
  _, _, _, workdir, result = toy_run
  rows = evaluation.checkpoint_curve(workdir, result.trainer, samples=4, progress=False)
  steps = sorted({r["step"] for r in rows})
  assert steps == [0, 10, 20]
  assert {r["family"] for r in rows} == {"chain", "all"}
  assert all(r["seconds"] is not None and r["seconds"] >= 0 for r in rows)
  with open(os.path.join(workdir, evaluation.EVAL_NAME)) as fh:
    assert len(fh.readlines()) == len(rows)
  assert os.path.getsize(os.path.join(workdir, evaluation.PLOT_NAME)) > 1000
  final = evaluation.evaluate(result.trainer, result.state.params, samples=4)
  for r, s in zip(final, result.summary):
    assert r["greedy_ratio"] == pytest.approx(s["greedy_ratio"], rel=1e-4)
    assert r["best_ratio"] <= r["greedy_ratio"] * (1 + 1e-6)
  last = [r for r in rows if r["step"] == 20 and r["family"] == "all"][0]
  assert last["greedy_ratio"] == pytest.approx(
      np.exp(np.mean(np.log([r["greedy_ratio"] for r in final]))), rel=1e-4)


@pytest.mark.parametrize("every", [40, 1000])  # saved periodically / saved by the interrupt
def test_interrupted_cloning_resumes_bit_exactly(toy_run, tmp_path, monkeypatch, every):
  cfg, _, _, workdir, result = toy_run
  trainer = result.trainer
  start = trainer.init(int(cfg.seed)).params  # what the toy run cloned from
  icfg = cfg.imitation.copy_and_resolve_references()
  icfg.checkpoint_every = every
  real, calls = imitation.bc_chunk, []

  def interrupted(*args, **kwargs):  # Ctrl-C before the third chunk (after step 40 of 100)
    calls.append(1)
    if len(calls) == 3:
      raise KeyboardInterrupt
    return real(*args, **kwargs)

  monkeypatch.setattr(imitation, "bc_chunk", interrupted)
  with pytest.raises(KeyboardInterrupt):
    imitation.warm_start(trainer, start, icfg, str(tmp_path))
  partial = tmp_path / imitation.PARTIAL_NAME
  assert partial.is_file() and not (tmp_path / imitation.PARAMS_NAME).exists()

  # other cloning settings are refused, naming the field
  other = icfg.copy_and_resolve_references()
  other.learning_rate = 1e-2
  with pytest.raises(ValueError, match="imitation.learning_rate"):
    imitation.clone(trainer, start, other, progress=False, partial_path=str(partial))

  monkeypatch.setattr(imitation, "bc_chunk", real)
  monkeypatch.setattr(imitation, "build_targets",
                      lambda *a, **k: pytest.fail("the targets are read back, not rebuilt"))
  params = imitation.warm_start(trainer, start, icfg, str(tmp_path), progress=False)
  assert not partial.exists()  # done with once the cloned parameters are saved
  reference = loop.ckpt_lib.load_params(os.path.join(workdir, imitation.PARAMS_NAME), start)
  jax.tree_util.tree_map(np.testing.assert_array_equal, params, reference)
  with open(tmp_path / imitation.SUMMARY_NAME) as fh:
    report = json.load(fh)
  assert [h["step"] for h in report["history"]] == [20, 40, 60, 80, 100]
  assert report["steps"] == 100 and len(report["instances"]) == len(result.summary)


def test_on_policy_cloning_decodes_against_the_policys_own_loads(toy_run):
  """imitation.on_policy: a picked instance's load state is the policy's own greedy placement
  (DAgger's states), the labels stay the teachers'; the share ramps from 0 at step 0 to
  `on_policy` from half the steps on, and at 0 cloning is plain teacher forcing."""
  cfg, _, _, _, result = toy_run
  trainer = result.trainer
  task = rollout.get_task("joint")
  module, data, params = trainer.policy.module, trainer.data, result.state.params
  targets, _ = imitation.build_targets(trainer.problems, data, TEACHERS, 4, task,
                                       progress=False)
  own = jax.vmap(module.apply, in_axes=(None, 0))(params, data.feats)
  own = np.argmax(np.asarray(own.greedy_placement_logits), -1).astype(np.int32)
  real = np.asarray(data.decides_place & data.feats.node_mask)
  assert (own != np.asarray(targets.placement))[real].any()  # else the test shows nothing
  forced = imitation._losses(params, module, task, data, targets, 0.1)
  on_own = imitation._losses(params, module, task, data, targets, 0.1, own)
  assert float(on_own[0]) != pytest.approx(float(forced[0]), rel=1e-3)
  total = 100

  def first_loss(on_policy, step):
    state = imitation.CloneState(
        params=params, opt_state=imitation._optimizer(1e-3, total).init(params),
        key=jax.random.key_data(jax.random.key(0, impl=trainer.hp.prng_impl)),
        step=np.int32(step))
    _, m = imitation.bc_chunk(state, data, targets, module=module, task_name="joint",
                              graphs=trainer.problems.num_instances, steps=1, lr=1e-3,
                              priority_weight=1.0, smoothing=0.1,
                              prng_impl=trainer.hp.prng_impl, total=total, on_policy=on_policy)
    return float(m["ce_placement"][0])

  assert first_loss(0.0, total) == pytest.approx(float(forced[0]), rel=1e-5)
  assert first_loss(1.0, 0) == pytest.approx(float(forced[0]), rel=1e-5)  # the ramp's start
  assert first_loss(1.0, total // 2) == pytest.approx(float(on_own[0]), rel=1e-5)


def test_partial_cloning_files_from_before_on_policy_still_resume(toy_run):
  """A partial cloning file's fingerprint leaves imitation.on_policy out at its default (0): a
  file written before the field existed matches a config with it off, and not one with it on."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  cfg, _, _, _, result = toy_run
  new = cfg.imitation.copy_and_resolve_references()
  old = ml_collections.ConfigDict({k: v for k, v in new.items() if k != "on_policy"})
  assert imitation._fingerprint(result.trainer, new) == imitation._fingerprint(result.trainer,
                                                                               old)
  new.on_policy = 0.5
  assert json.loads(imitation._fingerprint(result.trainer, new))["imitation.on_policy"] == 0.5


def test_resume_check_ignores_only_the_resumable_cloning_settings(tmp_path):
  cfg = toy_config()
  saved = json.loads(cfg.to_json())
  del saved["imitation"]["checkpoint_every"]  # a run written before the field existed
  del saved["imitation"]["on_policy"]  # ... and one before on_policy: it cloned with it off
  saved["imitation"]["max_seconds"] = 60.0
  (tmp_path / loop.CONFIG_NAME).write_text(json.dumps(saved))
  loop.check_resume(str(tmp_path), cfg)
  on = toy_config()
  on.imitation.on_policy = 0.5
  with pytest.raises(ValueError, match="imitation"):
    loop.check_resume(str(tmp_path), on)
  saved["imitation"]["steps"] = 40
  (tmp_path / loop.CONFIG_NAME).write_text(json.dumps(saved))
  with pytest.raises(ValueError, match="imitation"):
    loop.check_resume(str(tmp_path), cfg)


@pytest.mark.parametrize("name", [imitation.PARAMS_NAME, imitation.PARTIAL_NAME])
def test_cloning_files_of_another_config_are_refused_before_anything_is_built(
    tmp_path, monkeypatch, name):
  """A workdir whose imitation.msgpack (or partial cloning) was made with another policy: the
  cloned parameters were reloaded unchecked, as check_resume ran only where a checkpoint
  existed. Now train refuses at once, naming the file and the fields that differ."""
  saved = toy_config()
  (tmp_path / loop.CONFIG_NAME).write_text(json.dumps(loop.config_dict(saved)))
  (tmp_path / name).write_bytes(b"cloned elsewhere")
  monkeypatch.setattr(loop, "build_instances",
                      lambda *a, **k: pytest.fail("refused before the instances are built"))
  other = toy_config()
  other.policy.hidden = 32
  with pytest.raises(ValueError, match=rf"{name} not reused: .*\['policy'\] differ"):
    loop.train(other, str(tmp_path), progress=False)
  other = toy_config(updates=40)  # resumable changes are not a mismatch: the check passes
  loop.check_cloned(str(tmp_path), other)
  (tmp_path / loop.CONFIG_NAME).unlink()  # files of unknown origin are refused too
  with pytest.raises(ValueError, match=rf"{name}: cloning files without the run's config.json"):
    loop.check_cloned(str(tmp_path), saved)
  assert (tmp_path / name).read_bytes() == b"cloned elsewhere"  # left as found
