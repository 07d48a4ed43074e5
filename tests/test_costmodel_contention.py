"""Cost model, what single ops do not show: concurrent programs (`roofline.concurrent`), the
contention factor of thread-pool ops (`roofline.contended`, `Calibration.contention`, fitted by
`calibrate.fit`), cold operands in the microbenchmarks (`microbench.cold_copies`) and the
synthetic training steps of `step_programs`.

Timings are never asserted: the fit is checked on times made up from known parameters.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simulator.costmodel import Calibration, device_spec, durations, features, hlo_graph
from simulator.costmodel import microbench, roofline, step_programs
from simulator.costmodel.opclass import CLASS_IDS

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py


def _graph(fn, *args):
  text = jax.jit(fn).lower(*args).compile().as_text()
  return hlo_graph(text, "g")


def _calibration(contention=1.0):
  classes = {c: {"flops_eff": 0.5, "bytes_eff": 0.5, "overhead": 1e-6}
             for c in ("dot", "elementwise", "reduce", "transpose", "data_movement")}
  return Calibration(backend="cpu", device_kind="test", date="2026-01-01",
                     peak_flops={"f32": 1e11}, mem_bandwidth=5e10, mem_capacity=1e9,
                     launch_overhead=1e-6, dispatch_overhead=1e-5, transcendental_weight=1.0,
                     parallel_efficiency=0.0, classes=classes, contention=contention)


X = jnp.ones((64, 64), jnp.float32)


def test_concurrent_needs_two_independent_working_ops():
  single = _graph(lambda a, b: a @ b, X, X)
  chain = _graph(lambda a, b: jnp.tanh(a @ b) @ b, X, X)
  pair = _graph(lambda a, b: (a @ b, b @ a), X, X)
  assert not roofline.concurrent(single)
  assert not roofline.concurrent(chain)  # dependent ops never overlap
  assert roofline.concurrent(pair)


def test_contention_scales_only_pool_ops_of_concurrent_programs():
  pair = _graph(lambda a, b: (a @ b, jnp.tanh(b).sum()), X, X)
  chain = _graph(lambda a, b: jnp.tanh(a @ b) @ b, X, X)
  leaves = features(pair)
  is_pool = roofline.pooled(leaves)
  assert is_pool[leaves.op_class == CLASS_IDS["dot"]].all()
  assert not is_pool[leaves.op_class == CLASS_IDS["elementwise"]].any()
  for g, concurrent in ((pair, True), (chain, False)):
    spec = device_spec("local", _calibration())
    base = durations(g, spec, _calibration(1.0))
    slow = durations(g, spec, _calibration(1.5))
    lv = features(g)
    pool_nodes = np.zeros(g.graph.num_nodes, bool)
    pool_nodes[lv.owner[roofline.pooled(lv)]] = True
    expect = np.where(pool_nodes & concurrent, 1.5 * base, base)
    np.testing.assert_allclose(slow, expect, rtol=1e-12)


def test_contention_field_round_trips_and_is_checked(tmp_path):
  cal = _calibration(1.3)
  path = str(tmp_path / "cal.json")
  cal.save(path)
  assert Calibration.load(path).contention == 1.3
  assert cal.roofline_params().contention == 1.3
  data = cal.to_dict()
  data.pop("contention")  # files written before the field existed read as 1 (no contention)
  (tmp_path / "old.json").write_text(json.dumps(data))
  assert Calibration.load(str(tmp_path / "old.json")).contention == 1.0
  data["contention"] = 0.5
  (tmp_path / "bad.json").write_text(json.dumps(data))
  with pytest.raises(ValueError, match="contention"):
    Calibration.load(str(tmp_path / "bad.json"))
  with pytest.raises(ValueError, match="contention"):
    roofline.RooflineParams({}, {}, {}, contention=0.9)


def test_fit_recovers_a_known_contention():
  """Times made from known parameters (contention 1.4 on the pool ops of concurrent programs):
  the fit finds the factor again."""
  import importlib
  calibrate = importlib.import_module("simulator.costmodel.calibrate")
  graphs = []
  for n in (32, 64, 96, 128, 160):
    a = jnp.ones((n, n), jnp.float32)
    graphs.append((_graph(lambda x, y: x @ y, a, a), False))
    graphs.append((_graph(lambda x, y: jnp.tanh(x * 2.0 + y), a, a), False))
    graphs.append((_graph(lambda x, y: (x @ y, jnp.tanh(y).sum()), a, a), True))
  leaves = [features(g) for g, _ in graphs]
  concurrent = np.array([c for _, c in graphs])
  assert all(roofline.concurrent(g) == c for g, c in graphs)
  params = roofline.RooflineParams({"dot": 0.6, "elementwise": 0.3, "reduce": 0.3},
                                   {"dot": 0.8, "elementwise": 0.7, "reduce": 0.7},
                                   {c: 1.0 for c in ("dot", "elementwise", "reduce")},
                                   contention=1.4)
  spec = device_spec("local", _calibration())
  times = np.array([durations(g, spec, params).sum() for g, _ in graphs]) + 5e-6
  tables, predicted = calibrate.fit(leaves, times, {"f32": spec.peak("f32")},
                                    spec.mem_bandwidth, concurrent=concurrent)
  assert tables["contention"] == pytest.approx(1.4, rel=0.05)
  np.testing.assert_allclose(predicted, times, rtol=0.05)


def test_cold_copies_exceed_the_cache_and_rotate():
  small = (np.ones(1000, np.float32),)  # 4 KB: the most copies
  big = (np.ones(20 * 2**20, np.float32),)  # 80 MiB: already larger than the caches
  assert microbench.cold_copies(small) == microbench.MAX_COPIES
  assert microbench.cold_copies(big) == 1
  assert microbench.cold_copies((np.ones(2**20, np.float32),)) == 12  # 4 MiB x 12 >= 48 MiB
  p = microbench.Program("axpy/1000", "elementwise", lambda x, y: 1.5 * x + y,
                         (jnp.arange(1000.0), jnp.ones(1000)))
  c = microbench.compile_program(p)
  outs = [np.asarray(c.call()) for _ in range(3)]
  for o in outs:  # every copy holds the same operands
    np.testing.assert_allclose(o, 1.5 * np.arange(1000.0) + 1.0)


def test_step_programs_are_registered_and_train():
  names = set(step_programs.STEPS)
  assert names <= set(microbench.BENCHMARKS)
  assert all(microbench.BENCHMARKS[n][0] == "step" for n in names)
  assert names <= set(microbench.SIZE_PRESETS["full"])
  fn, args = step_programs.train_mlp((8, 16, 2))
  params, opt_state, loss = jax.jit(fn)(*args)
  assert np.isfinite(float(loss))
  assert jax.tree.structure(params) == jax.tree.structure(args[0])
  g = _graph(fn, *args)
  assert roofline.concurrent(g)  # a training step has independent ops
