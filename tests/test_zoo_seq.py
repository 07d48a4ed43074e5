"""Zoo sequence models (Transformer NMT, BERT, GPT-2, GNMT, Transformer-XL) at their tiny sizes.

For every model: one jitted training step on real arrays gives a finite loss, and the pre- and
post-optimisation graphs of the HLO front end are valid CompGraphs with matmuls, flops and
parameter bytes. GNMT's unrolling is checked by its pre-optimisation node count growing with
layers and sequence length; Transformer-XL's relative shift against its definition.

Speed: XLA's CPU compile dominates this file. Each model's step is lowered once (the jit cache
serves the pre graph and the compile) and compiled once, at LLVM optimisation level 0: XLA's HLO
passes, hence the post-optimisation HLO text, do not depend on that level (checked: identical
text), and the same executable runs the concrete step. `zoo.graph` itself, with XLA's default
options, is exercised end to end on one model.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simulator import ops, zoo
from simulator.frontends import from_jax, hlo_to_graph
from simulator.zoo.transformer_xl import rel_shift

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

# Model -> minimum pre-optimisation node count at size "tiny": about 60% of the counts measured
# with jax 0.10.2 (forward + backward + Adam; GNMT at seq 2, Transformer-XL over 2 segments).
MIN_NODES = {
    "transformer_nmt": 900, "bert_base": 550, "gpt2_small": 480,
    "gnmt2": 700, "gnmt4": 1100, "gnmt8": 1900,
    "transformer_xl2": 1000, "transformer_xl4": 2000, "transformer_xl8": 3800,
}
DOT = ops.op_type_id("dot")
FAST_COMPILE = {"xla_backend_optimization_level": 0}  # LLVM -O0; HLO passes unchanged


def _check_graph(g, label):
  assert len(g.topological_order()) == g.num_nodes, label
  assert g.flops.sum() > 0 and g.param_bytes.sum() > 0, label
  assert np.any(ops.forward_type(g.op_type) == DOT), (label, "no dot node")


def test_models_registered():
  assert set(MIN_NODES) <= set(zoo.available())


@pytest.mark.parametrize("name", sorted(MIN_NODES))
def test_tiny_step_and_graphs(name):
  z = zoo.build(name, "tiny")
  abstract = z.abstract_args()
  pre = from_jax(z.step, *abstract, stage="pre", name=f"{name}/pre")
  compiled = jax.jit(z.step).lower(*abstract).compile(FAST_COMPILE)
  post = hlo_to_graph(compiled.as_text(), f"{name}/post").graph
  _, _, loss = compiled(*z.concrete_args())
  assert np.isfinite(float(loss)) and float(loss) > 0
  _check_graph(pre, "pre")
  _check_graph(post, "post")
  assert pre.num_nodes > MIN_NODES[name]
  assert post.num_nodes < pre.num_nodes  # XLA fused


def test_zoo_graph_entry_point():
  for stage in ("pre", "post"):
    g = zoo.graph("gpt2_small", "tiny", stage)
    assert g.name == f"zoo:gpt2_small/tiny/{stage}"
    _check_graph(g, stage)


def test_gnmt_is_unrolled():
  def nodes(seq, layers):
    return zoo.graph("gnmt2", "tiny", "pre", seq=seq, layers=layers).num_nodes
  base, longer, deeper = nodes(2, 2), nodes(3, 2), nodes(2, 3)
  assert longer > base * 1.2 and deeper > base * 1.2, (base, longer, deeper)


def test_rel_shift_aligns_relative_distances():
  t, m = 3, 4
  raw = np.arange(2 * t * (t + m), dtype=np.float32).reshape(2, t, t + m)
  shifted = np.asarray(rel_shift(jnp.asarray(raw)))
  for i in range(t):
    for j in range(i + m + 1):  # keys visible to query i
      assert shifted[1, i, j] == raw[1, i, j + t - 1 - i]  # column c holds distance K-1-c


@pytest.mark.parametrize("name,knobs,match", [
    ("gnmt2", {"units": 4}, "unknown knob"),
    ("transformer_xl2", {"memory": 4}, "unknown knob"),
    ("bert_base", {"dropout": 0.1}, "unknown knob"),
    ("gpt2_small", {"heads": 3}, "divisible"),
    ("transformer_nmt", {"layers": 0}, "layers"),
    ("transformer_xl4", {"mem_len": -1}, "mem_len"),
    ("gnmt8", {"seq": 2.5}, "seq"),
])
def test_bad_knobs_raise(name, knobs, match):
  with pytest.raises(ValueError, match=match):
    zoo.build(name, "tiny", **knobs)
