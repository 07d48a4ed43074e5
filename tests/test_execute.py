"""Placed execution (go_jax.execute, docs/design.md section 9): plans of hand-made programs, the
placed program's outputs against `jax.jit`'s on every zoo model's tiny step over 2-4 devices, and
the errors."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from go_jax import execute
from simulator.frontends import from_jax

pytestmark = pytest.mark.fast_compile
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _toy(x, w):
  return jnp.tanh(x @ w) + x


def _toy_args():
  return jnp.arange(16.0).reshape(4, 4) / 16, jnp.eye(4) * 0.5


def _segments(plan):
  return [(s.device, s.eqns) for s in plan.segments]


def test_worked_example_plans():
  """design.md 9's worked example: three equations, three nodes, two plans."""
  traced = execute.trace_program(_toy, *_toy_args())
  assert [str(e.primitive) for e in traced.eqns] == ["dot_general", "tanh", "add"]
  assert traced.graph.opcodes == ("dot", "tanh", "add")
  assert list(traced.node_eqn) == [0, 1, 2]
  plan = execute.make_plan(traced, np.array([0, 1, 1]), 2)
  assert _segments(plan) == [(0, (0,)), (1, (1, 2))]
  a, b = plan.segments
  x, w = traced.closed.jaxpr.invars
  assert a.in_vars == (x, w) and b.in_vars == (a.out_vars[0], x)
  assert b.out_vars == tuple(traced.closed.jaxpr.outvars)
  plan = execute.make_plan(traced, np.array([0, 1, 0]), 2)
  assert _segments(plan) == [(0, (0,)), (1, (1,)), (0, (2,))]
  assert list(plan.node_placement) == [0, 1, 0] and plan.split_equations == 0


def test_same_graph_as_the_front_end():
  """The placement indexes the nodes of from_jax(fn, *args, stage="pre")."""
  args = _toy_args()
  traced = execute.trace_program(_toy, *args)
  g = from_jax(_toy, *args, stage="pre")
  assert traced.num_nodes == g.num_nodes
  assert list(traced.graph.graph.node_names[0].split()[:1]) == g.node_names[0].split()[:1]


def _mlp(params, x):
  h = x
  for w, b in params:
    h = jax.nn.relu(h @ w + b)
  return jnp.sum(h ** 2), h


def _mlp_args(seed=0):
  rng = np.random.default_rng(seed)
  params = [(jnp.asarray(rng.normal(size=(8, 8)), jnp.float32),
             jnp.asarray(rng.normal(size=8), jnp.float32)) for _ in range(4)]
  return params, jnp.asarray(rng.normal(size=(3, 8)), jnp.float32)


def test_placed_program_equals_jit_on_one_device_twice():
  """Two device indices on the same CPU device: the program is really split and re-joined."""
  args = _mlp_args()
  ref = jax.jit(_mlp)(*args)
  traced = execute.trace_program(_mlp, *args)
  rng = np.random.default_rng(1)
  dev = jax.devices()[0]
  for _ in range(3):
    placement = rng.integers(0, 2, traced.num_nodes)
    placed = execute.place_program(_mlp, args, placement, devices=(dev, dev), traced=traced)
    assert placed.num_segments >= 2
    out = placed(*args)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5),
                           out, ref)
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(ref)
  assert placed.measure(repeats=2, warmup=1) > 0


def test_arrays_the_program_closes_over():
  """Consts of the jaxpr (closed-over arrays) are copied to their first reader's device once."""
  w = jnp.arange(16.0).reshape(4, 4)

  def f(x):
    return jnp.tanh(x @ w) + w.sum()

  x = jnp.ones((4, 4))
  traced = execute.trace_program(f, x)
  assert len(traced.closed.consts) >= 1
  dev = jax.devices()[0]
  for placement in (np.zeros(traced.num_nodes, np.int64), np.arange(traced.num_nodes) % 2):
    placed = execute.place_program(f, (x,), placement, devices=(dev, dev), traced=traced)
    for _ in range(2):  # the second call reuses the kept copies
      np.testing.assert_allclose(placed(x), jax.jit(f)(x), rtol=1e-6)


def test_literal_outputs_are_arrays_as_jit_returns_them():
  """A constant the program returns (a literal of the jaxpr) comes back as jax.jit returns it:
  an array of its dtype and weak type (it came back as the bare Python scalar)."""
  def f(x):
    return x + 1, 7, 2.5, True

  x = jnp.ones(3)
  traced = execute.trace_program(f, x)
  placed = execute.place_program(f, (x,), np.zeros(traced.num_nodes, np.int64), traced=traced)
  for got, ref in zip(placed(x), jax.jit(f)(x)):
    assert isinstance(got, jax.Array) and (got.dtype, got.weak_type) == (ref.dtype,
                                                                        ref.weak_type)
    np.testing.assert_array_equal(got, ref)


def test_host_arguments_returned_as_is_are_arrays_as_jit_returns_them():
  """Arguments the program returns unchanged (a numpy float64 array, Python scalars) come back as
  jax.jit returns them: arrays of the canonical dtype (it returned the host values)."""
  def f(x, s, b, y):
    return x, s, b, y * 2

  args = (np.arange(3.0), 2.5, True, jnp.ones(2))
  traced = execute.trace_program(f, *args)
  placed = execute.place_program(f, args, np.zeros(traced.num_nodes, np.int64), traced=traced)
  for got, ref in zip(placed(*args), jax.jit(f)(*args)):
    assert isinstance(got, jax.Array) and (got.dtype, got.weak_type) == (ref.dtype,
                                                                        ref.weak_type)
    np.testing.assert_array_equal(got, ref)


def test_weak_typed_arguments_keep_their_outputs_weak_as_jit():
  """A Python scalar argument is weakly typed; the segments are compiled for that type, so what
  it computes stays weak as under jax.jit (it came back strong, which promotes differently:
  strong f32 * bf16 is f32, weak f32 * bf16 is bf16)."""
  def f(a, s, x):
    return a * s, x * s

  args = (3, 2.5, jnp.ones(2, jnp.bfloat16))
  traced = execute.trace_program(f, *args)
  dev = jax.devices()[0]
  placed = execute.place_program(f, args, np.arange(traced.num_nodes) % 2, devices=(dev, dev),
                                 traced=traced)
  got, ref = placed(*args), jax.jit(f)(*args)
  assert [(x.dtype, x.weak_type) for x in got] == [(x.dtype, x.weak_type) for x in ref]
  assert (got[0] * ref[1]).dtype == jnp.bfloat16


def test_sub_byte_values_cross_devices():
  """int4 weights (a quantized layer) copied to a segment's device: JAX's ahead-of-time call
  refused the copy ('compiled for input layouts that disagree'), jit runs it."""
  def f(q, x):
    r = q + jnp.int4(1)
    return r.astype(jnp.float32) * x, r, (r.astype(jnp.int8) * 2).astype(jnp.int4)

  args = (jnp.arange(-4, 4, dtype=jnp.int4), jnp.ones(8))
  traced = execute.trace_program(f, *args)
  dev = jax.devices()[0]
  for placement in (np.arange(traced.num_nodes) % 2, np.ones(traced.num_nodes, np.int64)):
    placed = execute.place_program(f, args, placement, devices=(dev, dev), traced=traced)
    for got, ref in zip(placed(*args), jax.jit(f)(*args)):
      assert got.dtype == ref.dtype
      np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(ref, np.float32))
  assert placed.measure(repeats=1, warmup=0) > 0


def test_an_already_jitted_function_is_placed_by_its_body():
  """The front end lowers a jitted function as it is (its body's ops are the nodes); the trace
  ties those nodes to its body's equations (it refused: one `jit` equation, one `call` node)."""
  @jax.jit
  def f(x, y):
    return jnp.sin(x) * y, x.sum(), y

  args = (jnp.arange(3.0), jnp.ones(3))
  traced = execute.trace_program(f, *args)
  assert traced.num_nodes == from_jax(f, *args, stage="pre").num_nodes == 3
  assert [str(e.primitive) for e in traced.eqns] == ["sin", "mul", "reduce_sum"]
  dev = jax.devices()[0]
  placed = execute.place_program(f, args, np.array([0, 1, 0]), devices=(dev, dev),
                                 traced=traced)
  assert placed.num_segments == 3
  for got, ref in zip(placed(*args), f(*args)):
    np.testing.assert_allclose(got, ref, rtol=1e-6)
  # Static arguments are bound by the function's own jit, which a placed program cannot keep:
  # refused by name (JAX said 'Non-hashable static arguments' of the traced argument).
  with pytest.raises(ValueError, match="jitted function with static arguments"):
    execute.trace_program(jax.jit(lambda x, n: x * n, static_argnums=1), args[0], 3)
  # So are its shardings, which pin values to devices and lower to nodes of their own (it said
  # only that its re-traced equations lower to fewer nodes).
  pinned = jax.jit(jnp.sin, out_shardings=jax.sharding.SingleDeviceSharding(jax.devices()[0]))
  with pytest.raises(ValueError, match="jitted with shardings"):
    execute.trace_program(pinned, args[0])


def test_priority_sets_the_dispatch_order():
  """Two independent chains: the higher priority one is dispatched first; the order is always
  topological."""
  def two_chains(x, y):
    return jnp.sin(jnp.cos(x)), jnp.exp(jnp.tanh(y))
  args = (jnp.ones(3), jnp.ones(3))
  traced = execute.trace_program(two_chains, *args)
  names = [str(e.primitive) for e in traced.eqns]
  n = traced.num_nodes
  prio = np.zeros(n)
  for k, i in enumerate(traced.node_eqn):
    prio[k] = 10.0 if names[i] in ("tanh", "exp") else 0.0
  plan = execute.make_plan(traced, np.zeros(n, np.int64), 1, priority=prio)
  ordered = [names[i] for i in plan.order]
  assert ordered[:2] == ["tanh", "exp"] and ordered.index("cos") < ordered.index("sin")
  assert len(plan.segments) == 1  # one device: one segment


def test_errors():
  args = _toy_args()
  traced = execute.trace_program(_toy, *args)
  with pytest.raises(ValueError, match=r"shape \(3,\)"):
    execute.make_plan(traced, np.zeros(2, np.int64), 2)
  with pytest.raises(ValueError, match=r"node 1 .* device 2, outside \[0, 2\)"):
    execute.make_plan(traced, np.array([0, 2, 0]), 2)
  with pytest.raises(ValueError, match="priority must be 3 finite"):
    execute.make_plan(traced, np.zeros(3, np.int64), 2, priority=[0, np.nan, 0])
  with pytest.raises(ValueError, match="args must be a tuple"):
    execute.place_program(_toy, list(args), np.zeros(3, np.int64))

  def noisy(x):
    jax.debug.print("{}", x)
    return x + 1
  with pytest.raises(ValueError, match="side effects"):
    execute.trace_program(noisy, jnp.ones(2))
  with pytest.raises(ValueError, match="cannot trace"):
    execute.trace_program(lambda x: x @ x, jnp.ones((2, 3)))
  abstract = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args)
  placed = execute.place_program(_toy, abstract, np.zeros(3, np.int64), traced=traced)
  with pytest.raises(ValueError, match="abstract arguments"):
    placed.measure()
  with pytest.raises(ValueError, match="arguments of structure"):
    placed(args[0])
  np.testing.assert_allclose(placed(*args), jax.jit(_toy)(*args), rtol=1e-6)


# Sharding annotations that only say where a value lives run as the identity in a placed
# segment (JAX refused a segment on another device: "Received incompatible devices for jitted
# computation"), here with a second CPU device the annotations name, at the top level and inside
# a nested jit; the outputs equal jax.jit's exactly.
_PINNED_SCRIPT = textwrap.dedent("""
    from simulator.runtime import configure_cpu_devices
    configure_cpu_devices(2)
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding
    from go_jax import execute
    on_1 = SingleDeviceSharding(jax.devices()[1])
    pin = jax.lax.with_sharding_constraint

    def f(x, w):
      inner = jax.jit(lambda a: pin(jnp.sin(a), on_1) * 2)
      return inner(jax.device_put(pin(jnp.tanh(x @ w), on_1), on_1)) + x, pin(x, on_1)

    mesh = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    def g(x):
      return jnp.cos(pin(x * 2, NamedSharding(mesh, PartitionSpec("x"))))

    x, w = jnp.arange(16.0).reshape(4, 4) / 16, jnp.eye(4) * 0.5
    for fn, args in ((f, (x, w)), (g, (x,))):
      n = execute.trace_program(fn, *args).num_nodes
      for placement in (np.zeros(n, int), np.arange(n) % 2):
        placed = execute.place_program(fn, args, placement)
        got, ref = placed(*args), jax.jit(fn)(*args)
        assert all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(got),
                                                        jax.tree_util.tree_leaves(ref)))
        assert placed.num_segments == 1 if placement.max() == 0 else placed.num_segments >= 2
    print("ok")
""")


def test_value_placing_annotations_run_as_the_identity():
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", _PINNED_SCRIPT], capture_output=True, text=True,
                        cwd=REPO, env=env, timeout=300, check=False)
  assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


def test_programs_that_pin_devices_are_refused_by_primitive_and_line():
  """What a segment cannot run on its one device is refused up front, naming the primitive and
  the user's line (JAX failed deep inside a segment's jit)."""
  mesh = jax.make_mesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
  spec = jax.sharding.PartitionSpec("x")

  def per_device(x):
    return jax.shard_map(lambda a: jax.lax.psum(a, "x"), mesh=mesh, in_specs=spec,
                         out_specs=jax.sharding.PartitionSpec())(x)
  with pytest.raises(ValueError, match=r"'per_device': shard_map at .*test_execute.py:\d+"):
    execute.trace_program(per_device, jnp.ones(4))
  dev = jax.sharding.SingleDeviceSharding(jax.devices()[0])

  def nested(x):
    return jax.jit(jnp.sin, out_shardings=dev)(x) + 1
  with pytest.raises(ValueError, match=r"jit at .*test_execute.py:\d+.*'out_shardings'"):
    execute.trace_program(nested, jnp.ones(4))
  explicit = jax.make_mesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,))
  with jax.sharding.set_mesh(explicit), pytest.raises(ValueError, match="explicit mesh axis"):
    execute.trace_program(lambda x: jax.sharding.reshard(x * 2, spec), jnp.ones(4))


# Every zoo model's tiny training step, run placed over several CPU devices in a subprocess
# (the devices must exist before JAX starts). Float64 makes the comparison exact up to rounding:
# in float32 the zoo's steps are ill-conditioned (batch norm over 2 samples, Adam on gradients
# that are mathematically zero), and jax.jit's own output moves by up to 1e4 (InceptionV3) when
# XLA merely fuses the ops differently, as op-by-op execution shows.
_SCRIPT = textwrap.dedent("""
    import json, sys
    from simulator.runtime import configure_cpu_devices
    configure_cpu_devices(4)
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_enable_x64", True)
    from go_jax import execute
    from simulator import zoo
    out = {}
    for k, spec in enumerate(sys.argv[1].split(",")):
      name, kind = spec.split(":")
      z = zoo.build(name, "tiny")
      args = jax.tree_util.tree_map(
          lambda x: x.astype(jnp.float64) if jnp.issubdtype(x.dtype, jnp.floating) else x,
          z.concrete_args())
      traced = execute.trace_program(z.step, *args)
      n, d = traced.num_nodes, 2 + (k + len(name)) % 3
      rng = np.random.default_rng(k)
      if kind == "nodes":  # every node on a random device: the most segments
        placement, priority = rng.integers(0, d, n), None
      else:  # 8 blocks of the graph's (topological) order, each on a random device
        placement = np.repeat(rng.integers(0, d, 8), -(-n // 8))[:n]
        priority = -np.arange(n, dtype=float)
      placed = execute.place_program(z.step, args, placement, jax.devices()[:d],
                                     priority=priority, traced=traced)
      got, ref = placed(*args), jax.jit(z.step)(*args)
      leaves = lambda t: [np.asarray(x) for x in jax.tree_util.tree_leaves(t)]
      err = max(float(np.max(np.abs(a - b), initial=0) / (1e-6 + np.max(np.abs(b), initial=0)))
                for a, b in zip(leaves(got), leaves(ref)))
      used = sorted({s.device for s in placed.plan.segments})
      out[spec] = {"err": err, "devices": d, "used": used, "segments": placed.num_segments,
                   "same_tree": jax.tree_util.tree_structure(got) ==
                                jax.tree_util.tree_structure(ref)}
    print(json.dumps(out))
""")
# By default a CNN with branches, a recurrent model and a transformer with every node on its own
# random device (the most segments); GO_JAX_FULL_TESTS=1 adds the rest of the zoo (about 2 CPU
# minutes more).
_GROUPS = [
    "amoebanet:blocks,gnmt2:blocks",
    "gpt2_small:nodes",
    pytest.param("wavenet_2x18:blocks,inception_v3:blocks", marks=pytest.mark.full),
    pytest.param("bert_base:blocks,gnmt4:blocks,gpt2_small:blocks", marks=pytest.mark.full),
    pytest.param("gnmt8:blocks,resnet50:blocks,transformer_nmt:blocks", marks=pytest.mark.full),
    pytest.param("transformer_xl2:blocks,transformer_xl4:blocks,transformer_xl8:blocks,"
                 "wavenet_4x36:blocks", marks=pytest.mark.full),
    pytest.param("bert_base:nodes", marks=pytest.mark.full),
]


@pytest.mark.parametrize("group", _GROUPS)
def test_zoo_steps_placed_over_cpu_devices_equal_jit(group):
  # The run's environment as it is (tests/conftest.py: the classic CPU emitters in XLA_FLAGS,
  # and this fast_compile module's JAX_DISABLE_MOST_OPTIMIZATIONS); the script asks for its 4
  # CPU devices itself.
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", _SCRIPT, group], capture_output=True, text=True,
                        cwd=REPO, env=env, timeout=900, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads(proc.stdout.strip().splitlines()[-1])
  assert sorted(results) == sorted(group.split(","))
  for spec, r in results.items():
    assert r["same_tree"], spec
    assert r["err"] < 1e-6, (spec, r)
    assert len(r["used"]) >= 2, (spec, r)  # really split across devices
    assert r["segments"] >= 2, (spec, r)
