"""Tests of REGAL / GAS (go_jax/regal, go_jax/methods/regal.py): the guided BRKGA, the trainer
and the registered methods.

Every graph is a "pairs" toy of 12 producer -> consumer pairs (24 ops: one padded size), every
BRKGA has population 20 and budget 48 (3 generations), and the training runs share one config,
so the tests compile the guided search, the plain BRKGA and the training update once each.
"""

import json
import os
import shutil

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from go_jax import methods, pretrained
from go_jax.methods import Problem, evaluate, regal as regal_method
from go_jax.regal import guided, policy, trainer
from go_jax.training import checkpoint as ckpt_lib
from simulator import CompGraph, Topology
from simulator.simulate import padded

# XLA's optimisations off (tests/conftest.py): compile time dominates; the toy still learns
# (test_learns_the_toy_and_beats_plain_brkga) and the bit-exact checks compare programs compiled
# alike.
pytestmark = pytest.mark.fast_compile

BRKGA = dict(population=20, elite_frac=0.2, mutant_frac=0.1, elite_bias=0.7)
BUDGET = 48  # 3 generations of 16
TOPO = Topology.uniform(2, bandwidth=1e9, latency=1e-5)
PAIRS = 12


def pairs(seed: int) -> CompGraph:
  """12 independent pairs a_i -> b_i: a_i outputs a large tensor (50-150 bytes) that only b_i
  reads, b_i outputs 1 byte. For peak memory, the consumer b_i should run as soon as it can
  (high priority key: "b before any other a" is always right); random priorities start several
  a's first and hold their large outputs together."""
  rng = np.random.default_rng(seed)
  n = 2 * PAIRS
  out = np.ones(n)
  out[:PAIRS] = rng.integers(50, 150, PAIRS)
  return CompGraph(cost=np.ones(n), senders=np.arange(PAIRS),
                   receivers=np.arange(PAIRS, n), out_bytes=out, name=f"pairs{seed}")


def regal_graph():
  """A REGAL-style synthetic graph of 60 ops (METIS partitions it differently per seed)."""
  from simulator.sources import load_graph  # pylint: disable=g-import-not-at-top
  return load_graph("regal:n=60,seed=3")


def problem(graph, seed=0):
  return Problem(graph, TOPO, "peak_memory", seed, BUDGET, None)


def config(updates=40):
  c = ml_collections.ConfigDict()
  c.algorithm = "regal"
  c.graphs, c.topologies, c.objective = (), (), "peak_memory"
  c.samples, c.graphs_per_update = 4, 4
  c.updates, c.updates_per_call = updates, 10
  c.learning_rate, c.lr_schedule, c.warmup_updates, c.max_grad_norm = 0.03, "constant", 0, 1.0
  c.entropy_coef, c.baseline, c.ema_decay = 0.0, "leave_one_out", 0.9
  c.seed, c.prng_impl = 0, "rbg"
  c.checkpoint_every, c.keep_checkpoints, c.tensorboard = 10, 2, False
  c.max_seconds = ml_collections.config_dict.placeholder(float)
  c.brkga = ml_collections.ConfigDict(dict(BRKGA, evaluations=BUDGET))
  c.policy = policy.default_config()
  c.policy.hidden, c.policy.gnn_layers = 16, 1
  return c


TRAIN = [pairs(s) for s in range(8)]
HELD_OUT = [pairs(s) for s in range(100, 106)]


def instances():
  return TRAIN, [TOPO] * len(TRAIN), [g.name for g in TRAIN]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """A toy run of 40 updates in a workdir (its config.json + params.msgpack: a checkpoint)."""
  workdir = str(tmp_path_factory.mktemp("regal_toy"))
  result = trainer.train(config(), workdir, progress=False, instances=instances())
  return workdir, result


def test_uniform_guide_is_exactly_brkga():
  g = pairs(1)
  sol = methods.solve("brkga", g, TOPO, objective="peak_memory", seed=3, budget=BUDGET,
                      **BRKGA)
  np_ = padded(g).num_nodes_padded
  prop = guided.search(problem(g, 3), guided.uniform_guide(np_, 2, 0.7),
                       dict(BRKGA, evaluations=5000))
  np.testing.assert_array_equal(prop.placement, sol.placement)
  np.testing.assert_array_equal(prop.priority, sol.priority)
  assert prop.info["best_per_generation"] == sol.info["best_per_generation"]
  assert prop.evaluations == sol.evaluations


def test_seed_actions_enter_the_first_generation():
  # a seeded action is a chromosome of the first generation, so the answer is at least as good
  # as it; no seeds (and empty slots) is the guided search unchanged
  g = pairs(4)
  np_ = padded(g).num_nodes_padded
  guide = guided.uniform_guide(np_, 2, 0.7)
  cfg = dict(BRKGA, evaluations=BUDGET)
  plain = guided.search(problem(g, 2), guide, cfg)
  empty = guided.search(problem(g, 2), guide, cfg, seed_slots=5)
  np.testing.assert_array_equal(empty.placement, plain.placement)
  np.testing.assert_array_equal(empty.priority, plain.priority)
  assert plain.info["seeded"] == 0
  # the optimum of the toy: every consumer right after its producer (device 0)
  best_prio = np.concatenate([np.arange(PAIRS, 0, -1) * 2.0, np.arange(PAIRS, 0, -1) * 2.0 - 1])
  best = evaluate(g, TOPO, np.zeros(2 * PAIRS, np.int64), best_prio, "peak_memory")
  seeded = guided.search(problem(g, 2), guide, cfg,
                         seed_actions=[(np.zeros(2 * PAIRS, np.int64), best_prio)], seed_slots=5)
  assert seeded.info["seeded"] == 1
  assert seeded.info["best_per_generation"][0] <= best["objective"]
  assert seeded.info["best_objective"] <= min(plain.info["best_objective"], best["objective"])
  with pytest.raises(ValueError, match="seed actions for a first generation"):
    guided.search(problem(g, 2), guide, cfg, seed_slots=17)


def test_betas_favouring_device_0_place_on_device_0():
  g = pairs(2)
  np_ = padded(g).num_nodes_padded
  alpha, beta = np.ones((np_, 3)), np.ones((np_, 3))
  alpha[:, 0], beta[:, 1] = 12.0, 12.0  # affinity 0 high, affinity 1 low
  prop = guided.search(problem(g), guided.make_guide(alpha, beta, np.full(np_, 0.7)),
                       dict(BRKGA, evaluations=BUDGET))
  assert np.mean(prop.placement == 0) >= 0.9


def test_beta_quantile_closed_form_and_bisection():
  u = jax.random.uniform(jax.random.key(0), (20000,))
  np.testing.assert_array_equal(guided.beta_quantile(u, 1.0, 1.0), u)
  high = guided.beta_quantile(u, 4.0, 1.0)
  assert abs(float(high.mean()) - 0.8) < 0.01
  general = guided.beta_quantile(u, jnp.float32(2.0), jnp.float32(5.0), closed_form=False)
  assert abs(float(general.mean()) - 2 / 7) < 0.01
  assert abs(float(general.var()) - 10 / 392) < 0.003
  with pytest.raises(ValueError, match="alpha must be finite"):
    guided.make_guide(np.zeros((4, 3)), np.ones((4, 3)), np.full(4, 0.7))
  with pytest.raises(ValueError, match="bias must be in"):
    guided.make_guide(np.ones((4, 3)), np.ones((4, 3)), np.full(4, 1.5))


def test_learns_the_toy_and_beats_plain_brkga(trained):
  workdir, result = trained
  assert int(result.state.step) == 40
  for name in ("metrics.jsonl", "params.msgpack", "config.json", trainer.CURVE_NAME):
    assert os.path.isfile(os.path.join(workdir, name)), name
  wins = []
  for g in HELD_OUT:
    plain = methods.solve("brkga", g, TOPO, objective="peak_memory", seed=0, budget=BUDGET,
                          **BRKGA)
    ours = methods.solve("regal", g, TOPO, objective="peak_memory", seed=0, budget=BUDGET,
                         checkpoint=workdir)
    wins.append((plain.objective - ours.objective) / plain.objective)
  assert np.mean(wins) > 0.1 and min(wins) >= 0.0, wins


def test_training_resumes_bit_exactly(trained, tmp_path):
  _, straight = trained
  workdir = str(tmp_path / "resumed")
  cut = config()
  cut.max_seconds = 1e-9  # stops after the first call (10 updates), checkpointed
  first = trainer.train(cut, workdir, progress=False, instances=instances())
  assert int(first.state.step) == 10
  again = trainer.train(config(), workdir, progress=False, instances=instances())
  assert again.resumed_from == 10 and int(again.state.step) == 40
  # the summary's recent mean reward is read from metrics.jsonl (all 40 updates): the resumed
  # run's equals the uninterrupted one's (it once averaged the 30 updates of its own process)
  assert again.summary == straight.summary
  for a, b in zip(jax.tree_util.tree_leaves(straight.state),
                  jax.tree_util.tree_leaves(again.state)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_rerun_of_a_finished_run_reports_its_real_recent_reward(trained, tmp_path):
  """Rerunning a finished run trains nothing; its summary (and the launcher's line) once said
  a fake 0.00% from an empty in-process history and wrote reward_mean_recent null."""
  workdir, straight = trained
  rerun_dir = tmp_path / "rerun"
  shutil.copytree(workdir, rerun_dir)
  rerun = trainer.train(config(), str(rerun_dir), progress=False, instances=instances())
  assert rerun.resumed_from == 40 and int(rerun.state.step) == 40
  assert rerun.summary == straight.summary
  recent = straight.summary[0]["reward_mean_recent"]
  with open(os.path.join(workdir, "metrics.jsonl")) as fh:
    logged = [json.loads(line)["reward_mean"] for line in fh]
  assert len(logged) == 40 and recent == pytest.approx(np.mean(logged))  # < 50: all of them
  with open(rerun_dir / "summary.json") as fh:
    assert json.load(fh)["summary"][0]["reward_mean_recent"] == recent
  line, = trainer._report(rerun)  # pylint: disable=protected-access
  assert line.endswith(f"{100 * recent:.2f}%")
  # fewer updates than the run did: refused before config.json is rewritten to disagree with
  # summary.json
  before = (rerun_dir / "config.json").read_text(), (rerun_dir / "summary.json").read_text()
  with pytest.raises(ValueError, match=r"checkpoints: the run is at update 40, past the "
                     r"config's updates \(20\)"):
    trainer.train(config(updates=20), str(rerun_dir), progress=False, instances=instances())
  assert ((rerun_dir / "config.json").read_text(),
          (rerun_dir / "summary.json").read_text()) == before
  assert trainer.recent_reward_mean([], 40) is None
  assert trainer.recent_reward_mean([{"step": 1, "reward_mean": None}], 40) is None
  rows = [{"step": s, "reward_mean": float(s)} for s in range(1, 101)]
  assert trainer.recent_reward_mean(rows, 80) == pytest.approx(np.mean(np.arange(31, 81)))


def test_export_checks_a_regal_run_with_its_own_loader(trained, tmp_path):
  """export validates params.msgpack with the algorithm's loader: a REGAL run exports, and its
  params of another policy size are refused, naming the file."""
  workdir, _ = trained
  folder = pretrained.export(workdir, "toy", str(tmp_path / "pkg"))
  assert os.path.isfile(os.path.join(folder, pretrained.PARAMS_NAME))
  run = tmp_path / "mismatched"
  run.mkdir()
  shutil.copy(os.path.join(workdir, "config.json"), run / "config.json")
  (run / "params.msgpack").write_bytes(b"garbage")
  with pytest.raises(ValueError, match="params.msgpack"):
    pretrained.export(str(run), "bad", str(tmp_path / "pkg"))
  assert not (tmp_path / "pkg" / "bad").exists()


def test_solve_resimulates_exactly(trained):
  workdir, _ = trained
  g = HELD_OUT[0]
  sol = methods.solve("regal", g, TOPO, objective="peak_memory", seed=4, budget=BUDGET,
                      checkpoint=workdir)
  again = evaluate(g, TOPO, sol.placement, sol.priority, "peak_memory")
  assert again["objective"] == sol.objective
  np.testing.assert_allclose(sol.objective, sol.info["best_objective"], rtol=1e-5)
  assert sol.evaluations == BUDGET and sol.info["checkpoint"] == workdir
  assert 0.0 <= sol.info["uniform_share"] <= 1.0


def test_bad_checkpoint_and_config_raise_value_errors(trained, tmp_path):
  workdir, _ = trained
  g = HELD_OUT[0]
  with pytest.raises(ValueError, match="no pretrained checkpoint"):
    methods.solve("regal", g, TOPO, objective="peak_memory", checkpoint=str(tmp_path / "x"))
  with pytest.raises(ValueError, match="not a REGAL"):
    methods.solve("regal", g, TOPO, objective="peak_memory", checkpoint="go")
  with pytest.raises(ValueError, match="decode"):
    methods.solve("regal", g, TOPO, objective="peak_memory", checkpoint=workdir,
                  decode="greedy")
  with pytest.raises(ValueError, match="at most 2 devices"):
    methods.solve("regal", g, Topology.uniform(4, bandwidth=1e9), objective="peak_memory",
                  checkpoint=workdir)
  broken = tmp_path / "broken"
  broken.mkdir()
  (broken / "config.json").write_text(open(os.path.join(workdir, "config.json")).read())
  ckpt_lib.save_params(str(broken / "params.msgpack"), {"nothing": np.zeros(3)})
  with pytest.raises(ValueError, match="cannot be read into this policy"):
    regal_method.load_checkpoint("regal", str(broken))
  bad = config()
  bad.clip_eps = 0.2
  with pytest.raises(ValueError, match="clip_eps"):
    trainer.check_config(bad)
  bad = config()
  bad.samples = 1
  with pytest.raises(ValueError, match="samples must be >= 2"):
    trainer.check_config(bad)
  bad = config()
  bad.brkga.elite_frac = 0.95
  with pytest.raises(ValueError, match="population"):
    trainer.check_config(bad)
  bad = config()
  bad.policy.hiden = 3
  with pytest.raises(ValueError, match="hiden"):
    trainer.check_config(bad)


def test_shipped_checkpoints_load():
  for name, dmax in (("regal", 2), ("gas", 2), ("regal_d4", 4), ("gas_d4", 4), ("regal_d8", 8),
                     ("gas_d8", 8)):
    assert name in pretrained.available()
    cfg, module, _ = regal_method.load_checkpoint(name, name)
    assert cfg.objective == "peak_memory" and module.max_devices == dmax
    assert module.graph_aware == name.startswith("regal")
    assert list(cfg.topologies) == [f"nvlink{dmax}"]
  # "auto": the fewest device slots that serve the topology
  assert [regal_method.shipped_checkpoint("regal", d) for d in (1, 2, 3, 4, 5, 8)] == [
      "regal", "regal", "regal_d4", "regal_d4", "regal_d8", "regal_d8"]
  assert [regal_method.shipped_checkpoint("gas", d) for d in (2, 3, 4, 8)] == [
      "gas", "gas_d4", "gas_d4", "gas_d8"]
  with pytest.raises(methods.Refused,
                     match="no shipped checkpoint serves 9 devices.*gas,devices=9"):
    regal_method.shipped_checkpoint("gas", 9)
  with pytest.raises(ValueError, match="serves 9 devices .*regal_d8 \\(8\\)"):
    regal_method.shipped_checkpoint("regal", 9)
  # the shipped runs' settings are the config's defaults
  from experiments.configs import regal as regal_config  # pylint: disable=g-import-not-at-top
  for name, arg in (("gas_d4", "gas,devices=4"), ("regal_d8", "regal,devices=8"),
                    ("gas_d8", "gas,devices=8")):
    cfg = pretrained.load_config(name)
    want = regal_config.get_config(arg)
    assert (cfg.learning_rate, cfg.updates, cfg.max_seconds) == (
        want.learning_rate, want.updates, want.max_seconds)


def test_config_device_count_option():
  from experiments.configs import regal as regal_config  # pylint: disable=g-import-not-at-top
  c = regal_config.get_config("regal,devices=8")
  assert c.topologies == ("nvlink8",) and c.policy.max_devices == 8 and c.policy.graph_aware
  c = regal_config.get_config("gas")
  assert c.topologies == ("nvlink2",) and c.policy.max_devices == 2 and not c.policy.graph_aware
  assert not c.policy.hints
  c = regal_config.get_config("regal_hint,devices=4")
  assert c.policy.hints and c.policy.graph_aware and c.policy.max_devices == 4
  for arg in ("regal,devices=3", "regal,device=4", "placeto"):
    with pytest.raises(ValueError, match="regal.py"):
      regal_config.get_config(arg)
  # Every variant passes the trainer's own check, whatever fields the PPO base gains (a PPO
  # field left in once made go-jax-train refuse every REGAL config).
  for variant in regal_config.VARIANTS:
    for devices in (2, 4, 8):
      hyper = trainer.check_config(regal_config.get_config(f"{variant},devices={devices}"))
      assert hyper.objective == "peak_memory" and hyper.population == 100



# ------------------------------------------------------------------ regal_hint (hints.py)
def test_fifths_split_the_order_from_strongly_high_to_strongly_low():
  from go_jax.regal import hints  # pylint: disable=g-import-not-at-top
  assert hints.fifths(np.arange(10.0)).tolist() == [4, 4, 2, 2, 0, 0, 1, 1, 3, 3]
  assert hints.fifths(np.zeros(3)).tolist() == [3, 1, 2]  # ties: lower op id first
  # the choices are what their names say in BETA_CHOICES
  assert policy.BETA_CHOICES[hints.STRONG_HIGH] == (12.0, 1.0)
  assert policy.BETA_CHOICES[hints.MILD_LOW] == (1.0, 3.0)


def test_hint_choices_follow_gp_and_xla_memory():
  from go_jax.regal import hints  # pylint: disable=g-import-not-at-top
  g = HELD_OUT[0]
  np_ = padded(g).num_nodes_padded
  h = hints.hint_choices(g, TOPO, "peak_memory", 3, np_)
  assert h.shape == (np_, 4) and h.dtype == np.int32
  n = g.num_nodes
  gp = methods.solve("gp_dfs", g, TOPO, objective="peak_memory")
  assert np.array_equal(np.argmax(h[:n, :2] == hints.MILD_HIGH, -1), gp.placement)
  assert np.all(np.sum(h[:n, :3] == hints.MILD_HIGH, -1) == 1)  # one slot per op, slot 2 unused
  xm = methods.solve("xla_memory", g, TOPO, placement=gp.placement, objective="peak_memory")
  assert np.array_equal(h[:n, 3], hints.fifths(xm.priority))
  counts = np.bincount(h[:n, 3], minlength=5)
  assert counts.sum() == n and counts.max() - counts.min() <= 1  # fifths of the order
  assert not h[n:].any()  # padding: uniform
  # makespan: the critical-path order
  from simulator.graph import upward_rank  # pylint: disable=g-import-not-at-top
  hm = hints.hint_choices(g, TOPO, "makespan", 2, np_)
  assert np.array_equal(hm[:n, 2], hints.fifths(upward_rank(g)))
  with pytest.raises(ValueError, match="hint_choices"):
    hints.hint_choices(g, Topology.uniform(4, bandwidth=1e9), "peak_memory", 2, np_)


def test_hint_candidates_are_gp_partitions_best_first():
  from go_jax.regal import hints  # pylint: disable=g-import-not-at-top
  g = regal_graph()
  cands, evals = hints.hint_candidates(g, TOPO, "peak_memory", 6)
  assert evals == 18 and 1 <= len(cands) <= 6  # 3 XLA orders per partition, one batch
  values = [c[2] for c in cands]
  assert values == sorted(values)
  gp = methods.get("gp_dfs")
  seeds = [np.asarray(gp.fn(Problem(g, TOPO, "peak_memory", 0, None, None),
                            dict(gp.defaults, seed=s)).placement) for s in range(6)]
  distinct = {p.tobytes() for p in seeds}
  assert {c[0].tobytes() for c in cands} == distinct  # duplicates dropped, none lost
  for place, prio, value in cands:  # each with XLA's best order on it, exactly re-simulated
    xm = methods.solve("xla_memory", g, TOPO, placement=place, objective="peak_memory")
    assert value == xm.objective
    assert evaluate(g, TOPO, place, prio, "peak_memory")["objective"] == value
  # one partition: GP's placement (compute-balanced for makespan), not simulated
  one, none = hints.hint_candidates(g, TOPO, "makespan", 1)
  gp_cost = gp.fn(Problem(g, TOPO, "makespan", 0, None, None), dict(gp.defaults)).placement
  assert none == 0 and np.array_equal(one[0][0], gp_cost)
  with pytest.raises(ValueError, match="partitions must be >= 1"):
    hints.hint_candidates(g, TOPO, "peak_memory", 0)


def test_consensus_hint_strength_follows_the_partitions_agreement():
  from go_jax.regal import hints
  best = np.array([0, 0, 1, 1, 1])
  # the same partition with its labels swapped, and one that moves op 1: aligned to the best,
  # ops 0, 2, 3, 4 are agreed by all three, op 1 by two of three (< 3/4)
  np.testing.assert_array_equal(hints.aligned(1 - best, best, 2), best)
  # 3 devices: labels 2 -> 0 and 1 -> 1 (four ops agree), so 0 -> 2 (op 1 disagrees)
  np.testing.assert_array_equal(hints.aligned(np.array([2, 0, 1, 1, 2]),
                                              np.array([0, 1, 1, 1, 0]), 3), [0, 2, 1, 1, 0])
  prio = np.arange(5.0)
  cands = [(best, prio, 1.0), (1 - best, prio, 2.0), (np.array([0, 1, 1, 1, 1]), prio, 3.0)]
  out = hints.consensus_choices(cands, 3, 2, 4, 8)
  plain = hints.choices_of(best, prio, 4, 8)
  np.testing.assert_array_equal(out[:, 4], plain[:, 4])  # the priority slot: unchanged
  np.testing.assert_array_equal(out[np.arange(5), best],
                                [hints.STRONG_HIGH, 0, hints.STRONG_HIGH, hints.STRONG_HIGH,
                                 hints.STRONG_HIGH])
  assert np.all(out[np.arange(5), 1 - best] == 0) and np.all(out[5:] == 0)
  # top 2: every op agreed by both
  assert np.all(hints.consensus_choices(cands, 2, 2, 4, 8)[np.arange(5), best]
                == hints.STRONG_HIGH)
  # op 1 agreed by 3 of 4 (>= 3/4): mildly high
  four = cands + [(best, prio, 4.0)]
  assert hints.consensus_choices(four, 4, 2, 4, 8)[1, 0] == hints.MILD_HIGH


def test_hinted_policy_starts_at_the_hint_and_trains():
  """At initialisation the hinted policy's most likely guide IS the hint (and the default
  bias); a policy with hints refuses to run without them and one without refuses them; the
  trainer carries the hints through an update."""
  from go_jax.policies.features import graph_features  # pylint: disable=g-import-not-at-top
  from go_jax.regal import hints  # pylint: disable=g-import-not-at-top
  c = config(updates=1)
  c.updates_per_call = 1
  c.policy.hints = True
  t = trainer.make_train(c, *instances()[:2])
  assert t.data.hint.shape == (len(TRAIN), 32, 3)
  state = t.init(0)
  g = TRAIN[0]
  feats = graph_features(g, TOPO, 32, int(padded(g).senders.shape[0]), 2)
  h = hints.hint_choices(g, TOPO, "peak_memory", 2, 32)
  np.testing.assert_array_equal(np.asarray(t.data.hint[0]), h)
  kl, bl = jax.jit(t.module.apply)(state.params, feats, h)  # one compile, not op by op
  kc, bc = policy.mode(policy.used_logits(kl, 2), bl)
  assert np.array_equal(np.asarray(kc)[:g.num_nodes], h[:g.num_nodes])
  assert np.all(np.asarray(bc)[:g.num_nodes] == policy.DEFAULT_BIAS)
  with pytest.raises(ValueError, match="needs the hint choices"):
    t.module.apply(state.params, feats)
  with pytest.raises(ValueError, match=r"hint must be \(Np, Dmax \+ 1\)"):
    t.module.apply(state.params, feats, h[:, :2])
  state, metrics = t.update_chunk(state)
  assert int(state.step) == 1 and np.all(np.isfinite(np.asarray(metrics["loss"])))
  with pytest.raises(ValueError, match="hint_init"):
    policy.make_policy(dict(policy.default_config(), hints=True, hint_init=-1.0))


def test_a_new_graph_of_a_warmed_shape_compiles_nothing():
  # BRKGA 5K, SA, local search and regal_hint are timed against each other on graphs of few
  # padded shapes: a compile per graph (e.g. a jnp slice to its op count) would be timed as
  # search
  from go_jax.training import tuning  # pylint: disable=g-import-not-at-top
  from simulator.sources import load_graph  # pylint: disable=g-import-not-at-top
  first, second = regal_graph(), load_graph("regal:n=55,seed=3")  # both (64, 128) padded
  shape = lambda g: (padded(g).num_nodes_padded, padded(g).senders.shape[0], padded(g).chunk)
  assert shape(first) == shape(second)
  assert first.num_nodes != second.num_nodes
  for name in ("brkga", "sa", "local_search", "regal_hint"):
    methods.solve(name, first, TOPO, objective="peak_memory", seed=0, budget=368)
    tuning.compile_clock()  # listening from here
    before = tuning.compile_clock.lowerings
    sol = methods.solve(name, second, TOPO, objective="peak_memory", seed=0, budget=368)
    assert tuning.compile_clock.lowerings == before, name
    assert sol.objective > 0


def test_regal_hint_shipped_checkpoint_solves_and_resimulates():
  g = HELD_OUT[1]
  # the shipped checkpoint's tuned search (SEARCH_PARAMS): the hint is the best of 16 GP
  # partitions (3 * 16 = 48 simulations out of the budget of 368, leaving 320), population
  # 160, 32 elites, no mutants, so 128 evaluations per generation: 2 generations within
  # 320 - 32 (the polish keeps a tenth), then the polish from the best, which also takes what
  # the whole generations left: 320 - 256 = 64 evaluations, 4 climb steps of 16
  sol = methods.solve("regal_hint", g, TOPO, objective="peak_memory", seed=1, budget=368)
  assert sol.info["checkpoint"] == "regal_hint" and sol.evaluations == 48 + 256 + 64 == 368
  assert (sol.info["population"], sol.info["elites"], sol.info["mutants"]) == (160, 32, 0)
  assert sol.info["generations"] == 2 and sol.info["polish_evaluations"] == 64
  assert sol.info["hint_evaluations"] == 48 and 1 <= sol.info["hint_candidates"] <= 16
  assert sol.info["seeded"] == sol.info["hint_candidates"]
  assert sol.info["best_objective"] <= sol.info["brkga_objective"]
  again = evaluate(g, TOPO, sol.placement, sol.priority, "peak_memory")
  assert again["objective"] == sol.objective == sol.info["best_objective"]
  plain = methods.solve("regal_hint", g, TOPO, objective="peak_memory", seed=1, budget=259,
                        polish=0, hint_partitions=1, hint_seeds=0)
  assert plain.evaluations == 3 + 256 and "polish_evaluations" not in plain.info
  assert plain.info["seeded"] == 0 and plain.info["hint_evaluations"] == 3
  for bad, match in (({"polish": 1.0}, "polish must be a fraction"),
                     ({"polish_batch": 0}, "polish_batch must be >= 1"),
                     ({"polish_swap": 1.5}, "polish_swap must be in"),
                     ({"polish_peak": -0.1}, "polish_peak must be in"),
                     ({"hint_partitions": 0}, "hint_partitions must be >= 1"),
                     ({"hint_partitions": 1, "hint_seeds": 2},
                      r"hint_seeds must be in \[0, hint_partitions = 1\]"),
                     ({"hint_consensus": -1}, "hint_consensus must be >= 0")):
    with pytest.raises(ValueError, match=match):
      methods.solve("regal_hint", g, TOPO, objective="peak_memory", budget=368, **bad)
  # too little for one generation: the message quotes the budget given and what took the rest
  with pytest.raises(ValueError, match=r"regal_hint: budget 300 leaves 126 evaluations for the "
                     r"BRKGA after 48 for the hint and 126 for the polish \(polish=0.5\), below "
                     r"one generation \(128 = population - elites\)"):
    methods.solve("regal_hint", g, TOPO, objective="peak_memory", budget=300, polish=0.5)
  # the options override it: the checkpoint's training search (80 evaluations a generation)
  sol = methods.solve("regal_hint", g, TOPO, objective="peak_memory", seed=1, budget=208,
                      population=100, elite_frac=0.2, mutant_frac=0.1, polish=0)
  assert sol.evaluations == 48 + 160 and (sol.info["population"], sol.info["mutants"]) == (
      100, 10)
  cfg, module, _ = regal_method.load_checkpoint("regal_hint", "regal_hint")
  assert module.hints and module.graph_aware and cfg.objective == "peak_memory"
  assert [regal_method.shipped_checkpoint("regal_hint", d) for d in (2, 3, 4, 5, 8)] == [
      "regal_hint", "regal_hint_d4", "regal_hint_d4", "regal_hint_d8", "regal_hint_d8"]
  for name, slots in (("regal_hint_d4", 4), ("regal_hint_d8", 8)):
    _, module, _ = regal_method.load_checkpoint("regal_hint", name)
    assert module.hints and module.max_devices == slots
  with pytest.raises(methods.Refused, match="regal_hint: no shipped checkpoint serves 9 devices"):
    methods.solve("regal_hint", g, Topology.uniform(9, bandwidth=1e9), objective="peak_memory",
                  budget=160)
