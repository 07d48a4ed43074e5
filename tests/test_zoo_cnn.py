"""Model zoo, convolutional / audio / NAS models: resnet50, inception_v3, amoebanet, wavenets.

At size "tiny", each model's training step runs jitted (finite loss, parameters keep their
shapes) and its graph is built before and after XLA's passes (valid CompGraph with flops,
parameter bytes and convolution nodes). The builders are memoized, so the step run and the
"post" graph share one XLA compile.
"""

import jax
import numpy as np
import pytest

from simulator import ops, zoo
from simulator.zoo import amoebanet

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

MODELS = ("resnet50", "inception_v3", "amoebanet", "wavenet_2x18", "wavenet_4x36")
# A floor on the pre-optimisation node count at size "tiny" (forward + backward + update); the
# measured counts are about 1.6x these; after XLA's fusion ("post") a quarter to two fifths remain.
MIN_NODES = {"resnet50": 1000, "inception_v3": 5000, "amoebanet": 2000, "wavenet_2x18": 800,
             "wavenet_4x36": 1500}
CONV = ops.op_type_id("conv")


def _shapes(tree):
  return [x.shape for x in jax.tree_util.tree_leaves(tree)]


@pytest.mark.parametrize("name", MODELS)
def test_tiny_step_and_graphs(name):
  z = zoo.build(name, "tiny")
  params, opt_state, batch = z.concrete_args()
  new_params, new_opt, loss = jax.jit(z.step)(params, opt_state, batch)
  assert np.isfinite(float(loss)), name
  assert _shapes(new_params) == _shapes(params)
  assert _shapes(new_opt) == _shapes(opt_state)
  for stage in ("pre", "post"):
    g = zoo.graph(name, "tiny", stage)
    floor = MIN_NODES[name] if stage == "pre" else MIN_NODES[name] // 4
    assert g.num_nodes > floor, (name, stage, g.num_nodes)
    assert g.num_edges >= g.num_nodes - 1
    assert g.flops.sum() > 0 and g.param_bytes.sum() > 0, (name, stage)
    assert np.any(ops.forward_type(g.op_type) == CONV), (name, stage, "no convolution node")


def test_registered_with_three_sizes():
  names = zoo.available()
  for name in MODELS:
    assert name in names
    assert set(zoo.MODELS[name].settings) == set(zoo.SIZES)
  assert zoo.build("wavenet_4x36").sizes["stacks"] == 4
  assert zoo.build("wavenet_2x18").sizes["layers"] == 18


@pytest.mark.parametrize("name", MODELS)
def test_unknown_knob_raises(name):
  with pytest.raises(ValueError, match="unknown knob"):
    zoo.build(name, "tiny", no_such_knob=3)


@pytest.mark.parametrize("name,knobs,match", [
    ("resnet50", dict(blocks=(1, 0, 1, 1)), "blocks"),
    ("resnet50", dict(batch=0), "batch"),
    ("inception_v3", dict(image=64), "image"),
    ("inception_v3", dict(width=-1.0), "width"),
    ("amoebanet", dict(stages=0), "stages"),
    ("wavenet_2x18", dict(length=2.5), "length"),
])
def test_bad_knob_value_raises(name, knobs, match):
  with pytest.raises(ValueError, match=match):
    zoo.build(name, "tiny", **knobs)


def test_equal_knobs_share_the_step_function():
  a = zoo.build("resnet50", "tiny", blocks=[1, 1, 1, 1])
  b = zoo.build("resnet50", "tiny")
  assert a.step is b.step


def test_resnet50_default_has_published_parameter_count():
  variables = zoo.build("resnet50").abstract_args()[0]
  n = sum(int(np.prod(s)) for s in _shapes(variables["params"]))
  assert n == 25_557_032


def test_wavenet_is_causal():
  z = zoo.build("wavenet_2x18", "tiny")
  params, _, batch = z.concrete_args()
  module = zoo.wavenet.WaveNet(**{k: z.sizes[k] for k in ("channels", "skip_channels", "stacks",
                                                          "layers", "classes")})
  t = batch["audio"].shape[1] // 2
  changed = dict(batch, audio=batch["audio"].at[:, t].set((batch["audio"][:, t] + 1) % 16))
  a = module.apply({"params": params}, batch)
  b = module.apply({"params": params}, changed)
  np.testing.assert_array_equal(np.asarray(a[:, :t]), np.asarray(b[:, :t]))
  assert not np.allclose(np.asarray(a[:, t]), np.asarray(b[:, t]))


def test_genotype_checks():
  assert amoebanet.loose_ends(amoebanet.NORMAL_CELL) == (4, 5, 6)
  with pytest.raises(ValueError, match="not an earlier state"):
    amoebanet.check_genotype("bad", (("sep3", 0), ("sep3", 2)))
  with pytest.raises(ValueError, match="unknown op"):
    amoebanet.check_genotype("bad", (("conv9", 0), ("sep3", 1)))
