"""Learned fusion (design.md 4.1): GO's fusion head, the tasks "fusion" and "joint3" in PPO.

The toy: chains of elementwise ops with an unfusible custom call in the middle, on one device of
a roofline whose launch overhead dominates: every legal fuse request pays, so the optimum is
`fuse_all`'s. A small GO policy with a fusion head learns it from scratch in a CI-sized run.
"""

import jax
import numpy as np
import pytest

from go_jax import methods, policies
from go_jax.training import loop, ppo, rollout
from simulator import CompGraph, Topology, ops
from simulator.costmodel import apply_cost_model, device_spec

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py


def toy_chain(n=12, name="chain"):
  types = [ops.op_type_id("elementwise")] * n
  types[n // 2] = ops.op_type_id("custom_call")
  g = CompGraph(cost=np.zeros(n), senders=range(n - 1), receivers=range(1, n),
                out_bytes=np.full(n, 4e3), flops=np.full(n, 1e3),
                bytes_accessed=np.full(n, 8e3), op_type=types, name=name)
  return apply_cost_model(g, device_spec("v100"))


TOPO = Topology.uniform(1, bandwidth=1e10)
POLICY = dict(policies.variant_config("go_fusion").to_dict(), hidden=16, gnn_layers=1,
              attention_layers=0, heads=2, load_state=False, max_devices=2)
CONFIG = dict(task="fusion", objective="makespan", reference="single",
              fixed_placement="single", samples=16, graphs_per_update=2, updates=60,
              updates_per_call=20, epochs=2, minibatches=1, learning_rate=1e-2,
              entropy_coef=0.01, lr_schedule="constant", advantage="leave_one_out",
              policy=POLICY)


@pytest.fixture(scope="module")
def trained():
  graphs = [toy_chain(12, "a"), toy_chain(9, "b")]
  trainer = ppo.make_train(CONFIG, graphs, [TOPO, TOPO])
  state = trainer.init(0)
  first = None
  for _ in range(CONFIG["updates"] // CONFIG["updates_per_call"]):
    state, metrics = trainer.update_chunk(state)
    first = metrics if first is None else first
  return trainer, state, first, metrics


def test_fusion_task_learns_the_toy_optimum(trained):
  trainer, state, first, last = trained
  assert rollout.get_task("fusion").learns_fusion and state.best_fuse is not None
  rows = loop.summarize(trainer, state)
  for row, g in zip(rows, trainer.problems.graphs):
    place = np.zeros(g.num_nodes, int)
    best = methods.solve("fuse_all", g, TOPO, placement=place).objective
    none = methods.solve("no_fusion", g, TOPO, placement=place).objective
    assert best < 0.5 * none  # the toy rewards fusion: launches dominate
    assert row["greedy_objective"] == pytest.approx(best, rel=1e-6)
    assert row["best_objective"] == pytest.approx(best, rel=1e-6) and row["best_agrees"]
    assert len(row["best_fuse"]) == g.num_nodes
  assert float(last["ratio_mean"][-1]) < float(first["ratio_mean"][0])


def test_joint3_samples_placement_priority_and_fusion():
  """One update of the joint task on two devices: every head is sampled, the fused simulation
  runs inside the jitted update, and the greedy action re-simulates on the host."""
  cfg = dict(CONFIG, task="joint3", updates=1, updates_per_call=1, graphs_per_update=1,
             samples=2, epochs=1)
  g = toy_chain(6)
  trainer = ppo.make_train(cfg, [g], [Topology.uniform(2, bandwidth=1e10)])
  state, _ = trainer.update_chunk(trainer.init(1))
  place, prio, fuse = jax.device_get(trainer.greedy(state.params))
  assert fuse.shape == place.shape and fuse.dtype == bool
  row = loop.summarize(trainer, state)[0]
  assert np.isfinite(row["greedy_objective"]) and row["best_agrees"]


def test_fusion_task_needs_a_fusion_head_and_a_costed_graph():
  cfg = dict(CONFIG, policy=dict(POLICY, fusion_head=False), updates=1, updates_per_call=1,
             graphs_per_update=1)
  trainer = ppo.make_train(cfg, [toy_chain(6)], [TOPO])
  with pytest.raises(ValueError, match="fusion head"):
    trainer.update_chunk(trainer.init(0))
  bare = toy_chain(6).replace(reference=None)
  with pytest.raises(ValueError, match="no cost reference"):
    ppo.make_train(dict(CONFIG, graphs_per_update=1), [bare], [TOPO])


def test_fusion_log_prob_counts_only_requests_that_can_be_legal(trained):
  """The fusion task's log-probability is the Bernoulli terms of the ops whose request can ever
  be legal (one consumer, both fusible); the custom call and the ops around it, and the sink,
  do not count."""
  import jax.numpy as jnp
  from go_jax.policies.types import PolicyOutput
  trainer, _, _, _ = trained
  data = jax.tree_util.tree_map(lambda x: x[:1], trainer.data)
  task = rollout.get_task("fusion")
  np_ = data.feats.node_mask.shape[-1]
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(1, np_)).astype(np.float32)
  out = PolicyOutput(placement_logits=jnp.zeros((1, np_, 2)),
                     priority_logits=jnp.zeros((1, np_, 4)), value=jnp.zeros(1),
                     fusion_logits=jnp.asarray(logits))
  fuse = rng.random((1, 3, np_)) < 0.5
  actions = rollout.Actions(placement=jnp.zeros((1, 3, np_), jnp.int32),
                            level=jnp.zeros((1, 3, np_), jnp.int32), fuse=jnp.asarray(fuse))
  mask = np.asarray(data.fusible[0])
  n = trainer.problems.graphs[0].num_nodes  # 12: ops 5 and 6 touch the custom call, 11 sinks
  assert mask[:n].tolist() == [k not in (5, 6, 11) for k in range(n)] and not mask[n:].any()
  lp = np.where(fuse[0], -np.log1p(np.exp(-logits)), -np.log1p(np.exp(logits)))
  expected = (lp * mask).sum(-1)
  np.testing.assert_allclose(rollout.log_prob(task, data, out, actions)[0], expected,
                             rtol=1e-5)
  ent, count = rollout.entropy(task, data, out)
  assert float(count[0]) == mask.sum()
  p = 1 / (1 + np.exp(-logits[0]))
  want = -(p * np.log(p) + (1 - p) * np.log(1 - p))
  np.testing.assert_allclose(float(ent[0]), (want * mask).sum(), rtol=1e-5)


def test_explicit_fixed_schedule_and_fusion_reference():
  """A fusion method's schedule is passed in: build_problems keeps the given placement and
  priority, normalises rewards by the unfused schedule ("no_fusion" on that schedule), and
  checks the arrays."""
  from go_jax.training import problems
  g = toy_chain(8, "c")
  topo = Topology.uniform(2, bandwidth=1e10)
  policy = ppo.policy_from_config(dict(POLICY))
  place = np.array([0, 0, 0, 1, 1, 1, 0, 0])
  prio = np.arange(8, 0, -1, dtype=np.float64)
  p = problems.build_problems([g], [topo], features=policy.features, max_devices=2,
                              reference="no_fusion", fusion=True, fixed_placements=[place],
                              fixed_priorities=[prio])
  assert np.array_equal(np.asarray(p.data.fixed_placement[0, :8]), place)
  assert np.array_equal(np.asarray(p.data.fixed_priority[0, :8]), prio)
  unfused = methods.evaluate(g, topo, place, prio)["objective"]
  assert p.reference[0] == pytest.approx(unfused)
  kw = dict(features=policy.features, max_devices=2, fusion=True, reference="no_fusion")
  with pytest.raises(ValueError, match="fixed_placements has shape"):
    problems.build_problems([g], [topo], fixed_placements=[place[:3]], **kw)
  with pytest.raises(ValueError, match="name device 2"):
    problems.build_problems([g], [topo], fixed_placements=[place * 2], **kw)
  with pytest.raises(ValueError, match="1 arrays for 2 instances"):
    problems.build_problems([g, g], [topo, topo], fixed_priorities=[prio], **kw)
  with pytest.raises(ValueError, match="does not place"):
    problems.build_problems([g], [topo], fixed_placement="fuse_all", **kw)
