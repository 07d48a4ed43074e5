"""XLA's schedule and fusion groups as baselines (simulator.frontends.xla, go_jax.methods.xla).

The schedule: on one device, `simulate` with `xla_schedule_priority` starts the nodes in exactly
the order of the scheduled ENTRY computation, also where independent branches would allow
other orders. The fusion mapping: on small MLP / CNN training steps most pre-optimisation ops
are mapped, every group holds the ops of one XLA fusion, and contracting by the groups gives a
valid graph.
"""

import importlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from go_jax import methods
from simulator import Topology, reference_simulate, simulate
from simulator.coarsen import xla_fusion_graph
from simulator.frontends import (from_jax_full, match_fusions, xla_fusion_groups,
                                 xla_schedule_priority)

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py


def _x(*shape):
  return jnp.ones(shape, jnp.float32)


def _branches(x, w):
  return sum(jnp.tanh(x @ (w * i)).sum() for i in range(1, 5))


class _MLP(nn.Module):
  @nn.compact
  def __call__(self, x):
    for _ in range(2):
      x = nn.relu(nn.Dense(32)(x))
    return nn.Dense(10)(x)


class _CNN(nn.Module):
  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Conv(8, (3, 3))(x))
    x = nn.max_pool(x, (2, 2), (2, 2))
    return nn.Dense(10)(x.reshape(x.shape[0], -1))


def _train_step(model, xshape, tx):
  x, y = _x(*xshape), jnp.zeros((xshape[0],), jnp.int32)
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)  # shapes only: nothing runs

  def step(params, opt, x, y):
    def loss(p):
      return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, x), y).mean()
    value, grads = jax.value_and_grad(loss)(params)
    updates, opt = tx.update(grads, opt, params)
    return optax.apply_updates(params, updates), opt, value
  return step, (params, jax.eval_shape(tx.init, params), x, y)


_CACHE = {}


def _stages(name):
  """(pre, post) HloGraphs of a named program, built once per test session."""
  if name not in _CACHE:
    fn, args = {
        "branches": lambda: (_branches, (_x(8, 16), _x(16, 16))),
        "mlp": lambda: _train_step(_MLP(), (16, 20), optax.adam(1e-3)),
        "cnn": lambda: _train_step(_CNN(), (4, 8, 8, 3), optax.sgd(1e-2, momentum=0.9)),
    }[name]()
    _CACHE[name] = tuple(from_jax_full(fn, *args, stage=s) for s in ("pre", "post"))
  return _CACHE[name]


def _one_device_starts(graph, priority, jitted=False):
  """Start times on one device, costs distinct and positive (`simulate` or the reference)."""
  g = graph.replace(cost=np.arange(1, graph.num_nodes + 1) % 7 + 1.0)
  topo = Topology.uniform(1, bandwidth=1e9)
  place = np.zeros(g.num_nodes, np.int64)
  if jitted:
    return np.asarray(simulate(g, topo, place[None], np.asarray(priority)[None]).start[0])
  return reference_simulate(g, topo, place, np.asarray(priority)).start


# ------------------------------------------------------------------ schedule
@pytest.mark.parametrize("name", ["branches", "mlp", "cnn"])
def test_schedule_priority_reproduces_xla_order(name):
  _, post = _stages(name)
  prio = xla_schedule_priority(post)
  assert prio.shape == (post.graph.num_nodes,)
  for jitted in ((False, True) if name == "mlp" else (False,)):  # one jit compile suffices
    starts = _one_device_starts(post.graph, prio, jitted)
    in_schedule_order = starts[np.argsort(post.positions)]
    assert np.all(np.diff(in_schedule_order) > 0)


def test_schedule_matters_on_independent_branches():
  """The four dot/tanh branches are independent: another priority runs them in another order,
  so reproducing XLA's order is not automatic."""
  _, post = _stages("branches")
  prio = xla_schedule_priority(post)
  assert not np.array_equal(np.argsort(_one_device_starts(post.graph, prio)),
                            np.argsort(_one_device_starts(post.graph, -prio)))


def test_unscheduled_module_raises():
  pre, post = _stages("branches")
  with pytest.raises(ValueError, match="not scheduled"):
    xla_schedule_priority(pre)
  with pytest.raises(ValueError, match="HloGraph"):
    xla_schedule_priority(post.graph)


def test_xla_order_method():
  importlib.import_module("go_jax.methods.xla")  # registers xla_order (not yet a built-in)
  _, post = _stages("mlp")
  g = post.graph.replace(cost=np.ones(post.graph.num_nodes))
  topo = Topology.uniform(1, bandwidth=1e9)
  sol = methods.solve("xla_order", g, topo, placement=np.zeros(g.num_nodes, np.int64))
  np.testing.assert_array_equal(np.argsort(-sol.priority),
                                np.argsort(-xla_schedule_priority(post)))
  assert sol.makespan == g.num_nodes and sol.feasible
  assert "xla_order" in methods.available()


# ------------------------------------------------------------------ fusion groups
@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_fusion_groups_map_most_ops_consistently(name):
  pre, post = _stages(name)
  m = match_fusions(pre, post)
  n = pre.graph.num_nodes
  assert m.groups.shape == m.post_node.shape == m.level.shape == (n,)
  # measured: 0.81-0.88 by metadata, 0.97 with the structural level 4; 0-1 split groups
  assert m.fraction_by_metadata >= 0.75 and m.fraction_mapped >= 0.9
  assert m.split_groups <= 5
  assert set(np.unique(m.level)) <= {-1, 0, 1, 2, 3, 4}
  mapped = m.post_node >= 0
  for grp in np.unique(m.groups):  # a group never mixes two XLA fusions, or mapped/unmapped
    members = np.flatnonzero(m.groups == grp)
    assert len(set(m.post_node[members].tolist())) == 1
    if not mapped[members[0]]:
      assert members.size == 1
  # About one group per XLA fusion, and far fewer groups than ops.
  assert len(np.unique(m.groups[mapped])) <= 1.2 * post.graph.num_nodes
  assert len(np.unique(m.groups)) < 0.6 * n
  fused = xla_fusion_graph(pre.graph, m.groups)  # valid (acyclic) contraction
  assert fused.num_nodes == len(np.unique(m.groups))
  assert fused.flops.sum() == pytest.approx(pre.graph.flops.sum())
  np.testing.assert_array_equal(xla_fusion_groups(pre, post), m.groups)


def test_elementwise_chain_is_one_fusion():
  """tanh(x * y + 1) * 2 - y: XLA fuses every op into one loop fusion; so does the mapping."""
  def fn(x, y):
    return jnp.tanh(x * y + 1.0) * 2.0 - y
  pre = from_jax_full(fn, _x(16, 16), _x(16, 16), stage="pre")  # two call sites: the frames
  post = from_jax_full(fn, _x(16, 16), _x(16, 16), stage="post")  # outside fn are cut off
  assert all(s.startswith("test_elementwise_chain_is_one_fusion.<locals>.fn@")
             and "from_jax_full" not in s for s in pre.sources + post.sources if s)
  m = match_fusions(pre, post)
  named = np.array([bool(p) for p in pre.op_names])
  assert post.graph.num_nodes == 1 and m.fraction_mapped == 1.0
  assert len(np.unique(m.groups[named])) == 1


def test_same_source_line_in_a_loop_maps_by_rank():
  """A Python loop builds the same ops at one source line; the rank rule sends the k-th
  iteration's ops to the k-th XLA instruction of that key."""
  def fn(x, w):
    for _ in range(3):
      x = x @ w
    return x
  pre, post = (from_jax_full(fn, _x(8, 8), _x(8, 8), stage=s) for s in ("pre", "post"))
  m = match_fusions(pre, post)
  dots = [i for i, op in enumerate(pre.opcodes) if op == "dot"]
  assert len(dots) == 3 and m.fraction_mapped == 1.0
  assert len(set(m.post_node[dots].tolist())) == 3
  assert np.all(np.diff(post.positions[m.post_node[dots]]) > 0)  # in order


def test_match_of_two_different_programs_is_a_clear_error():
  """Post text of another program (other op_names, other source lines): nothing matches, which
  is a ValueError saying so, not an IndexError or an empty fusion."""
  def first(x, w):
    with jax.named_scope("first_program"):
      return jnp.tanh(x @ w)

  def second(x, w):
    with jax.named_scope("second_program"):
      return jnp.exp(x) @ w

  pre = from_jax_full(first, _x(8, 8), _x(8, 8), stage="pre")
  post = from_jax_full(second, _x(8, 8), _x(8, 8), stage="post")
  with pytest.raises(ValueError, match="no instruction of the post-optimisation HLO .*name "
                                       "other ops .*first_program.*second_program.*same program"):
    match_fusions(pre, post)


def test_match_rejects_plain_graphs():
  pre, post = _stages("branches")
  with pytest.raises(ValueError, match="HloGraph"):
    match_fusions(pre.graph, post)
