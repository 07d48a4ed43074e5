"""Cost model: device specs, roofline by hand, op classes from HLO, calibration, and the
validation experiment (experiments/cost_model_validation.py) and its launcher.

Timings are never asserted (design.md section 8): the calibration test only checks that a tiny fit
gives finite positive numbers, and the launcher test that the files are written.
"""

import dataclasses
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from simulator import CompGraph, ops
from simulator.costmodel import (DEFAULT_BYTES_EFF, DEFAULT_FLOPS_EFF, DEVICES, Calibration,
                                 DeviceSpec, RooflineParams, apply_cost_model, calibrate,
                                 device_spec, durations, features, hlo_graph)
from simulator.costmodel import calibration as calibration_mod
from simulator.costmodel.opclass import OP_CLASSES
from simulator.frontends.hlo import lower_hlo_text

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
US = 1e-6


# ------------------------------------------------------------------ device specs
def test_registry_has_the_papers_devices_with_valid_figures():
  for name in ("k80", "v100", "a100", "h100", "h200", "tpu_v3", "tpu_v4"):
    spec = device_spec(name)
    assert spec is DEVICES[name] and spec.name == name
    assert spec.peak("f32") > 1e12 and spec.mem_bandwidth > 1e11 and spec.mem_capacity > 1e9
    assert spec.peak("bf16") >= spec.peak("f32")  # bf16 falls back to the f32 peak
    assert 0 < spec.launch_overhead < 1e-4
  assert device_spec("h200").mem_bandwidth > device_spec("h100").mem_bandwidth
  assert device_spec("a100").peak("bf16") == 16 * device_spec("a100").peak("f32")


def test_bad_specs_and_names_raise():
  with pytest.raises(ValueError, match="f32"):
    DeviceSpec("x", {"bf16": 1e12}, 1e11, 0.0, 1e9)
  with pytest.raises(ValueError, match="mem_bandwidth"):
    DeviceSpec("x", {"f32": 1e12}, -1.0, 0.0, 1e9)
  with pytest.raises(ValueError, match="unknown dtype"):
    DeviceSpec("x", {"f32": 1e12, "int8": 1e12}, 1e11, 0.0, 1e9)
  # a TypeError from math.isfinite before, or accepted (True as 1 FLOP/s)
  for args, field in ((({"f32": 1e12}, "1e11", 0.0, 1e9), "mem_bandwidth"),
                      (({"f32": True}, 1e11, 0.0, 1e9), "peak_flops"),
                      (({"f32": 1e12}, 1e11, None, 1e9), "launch_overhead"),
                      (({"f32": 1e12}, 1e11, 0.0, 10**400), "mem_capacity")):
    with pytest.raises(ValueError, match=field):
      DeviceSpec("x", *args)
  with pytest.raises(ValueError, match="unknown device spec"):
    device_spec("p100")
  with pytest.raises(ValueError, match="needs a Calibration"):
    device_spec("local")


# ------------------------------------------------------------------ roofline by hand
SPEC = DeviceSpec("toy", {"f32": 1e12}, 1e11, 2 * US, 1e9)


def _toy_graph():
  """dot (compute bound), elementwise (memory bound), reshape (free), empty fusion (free)."""
  names = ("dot", "elementwise", "reshape", "fusion")
  return CompGraph(cost=np.zeros(4), senders=[0, 1, 2], receivers=[1, 2, 3],
                   out_bytes=[4e3, 4e3, 4e3, 4e3], param_bytes=[8e3, 0, 0, 0],
                   flops=[2e9, 1e6, 0, 0], bytes_accessed=[1e6, 4e9, 8e3, 0],
                   op_type=[ops.op_type_id(n) for n in names], name="toy",
                   node_names=["mm", "add", "rs", "empty"])


def test_roofline_by_hand_default_efficiencies():
  t = durations(_toy_graph(), SPEC)
  mm = max(2e9 / (DEFAULT_FLOPS_EFF["dot"] * 1e12), 1e6 / (DEFAULT_BYTES_EFF["dot"] * 1e11))
  add = max(1e6 / (DEFAULT_FLOPS_EFF["elementwise"] * 1e12),
            4e9 / (DEFAULT_BYTES_EFF["elementwise"] * 1e11))
  np.testing.assert_allclose(t, [mm + 2 * US, add + 2 * US, 0.0, 0.0], rtol=1e-12)
  assert mm == 2e9 / (0.7 * 1e12) and add == 4e9 / (0.7 * 1e11)  # compute / memory bound


def test_roofline_with_explicit_params_and_overhead_ratio():
  p = RooflineParams({"dot": 0.5}, {"elementwise": 0.25}, {"dot": 3.0, "elementwise": 0.0})
  t = durations(_toy_graph(), SPEC, p)
  np.testing.assert_allclose(t[:2], [2e9 / 0.5e12 + 6 * US, 4e9 / 0.25e11], rtol=1e-12)
  with pytest.raises(ValueError, match="unknown op class"):
    RooflineParams({"matmul": 0.5}, {}, {})


def test_apply_cost_model_keeps_everything_but_cost():
  g = _toy_graph()
  out = apply_cost_model(g, SPEC)
  np.testing.assert_array_equal(out.cost, durations(g, SPEC))
  assert out.cost[0] > 0 and np.all(g.cost == 0)  # the input is untouched
  # The reference records the device and efficiencies that made the costs (for fusion).
  ref = out.reference
  assert g.reference is None and ref.name == SPEC.name
  assert (ref.peak_flops, ref.mem_bandwidth, ref.launch_overhead) == (
      SPEC.peak("f32"), SPEC.mem_bandwidth, SPEC.launch_overhead)
  assert ref.classes == tuple(OP_CLASSES)
  for f in dataclasses.fields(CompGraph):
    if f.name not in ("cost", "reference"):
      a, b = getattr(g, f.name), getattr(out, f.name)
      assert (np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b), f.name


# ------------------------------------------------------------------ op classes from HLO
def _classes(h):
  lv = features(h)
  return [OP_CLASSES[c] for c in lv.op_class]


def test_post_optimisation_classes_and_apply_on_hlo_graph():
  def f(x, w):
    return jnp.tanh(x @ w).max(0) + 1.0
  h = hlo_graph(lower_hlo_text(f, jnp.ones((128, 96)), jnp.ones((96, 128)), stage="post"))
  assert _classes(h)[0] == "dot", _classes(h)  # YNN fuses the dot, tanh and max together
  red = hlo_graph(lower_hlo_text(lambda x: jnp.exp(x).sum(1), jnp.ones((64, 48)), stage="post"))
  assert "reduce" in _classes(red) and "pool" not in _classes(red)  # tiling windows: a reduce
  pool = lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
  assert "pool" in _classes(hlo_graph(lower_hlo_text(pool, jnp.ones((2, 8, 8, 4)), stage="post")))
  small = hlo_graph(lower_hlo_text(f, jnp.ones((8, 96)), jnp.ones((96, 128)), stage="post"))
  assert "dot_small" in _classes(small)  # M = 8 rows: a small GEMM
  g = apply_cost_model(h, SPEC)
  assert g.num_nodes == h.graph.num_nodes and np.all(g.cost > 0)
  np.testing.assert_array_equal(g.flops, h.graph.flops)


def test_conv_forms_and_while_trip_count():
  x, w = jnp.ones((2, 8, 8, 4)), jnp.ones((3, 3, 1, 4))
  dn = ("NHWC", "HWIO", "NHWC")
  grouped = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn,
                                                  feature_group_count=4)
  assert "conv_grouped" in _classes(hlo_graph(lower_hlo_text(grouped, x, w, stage="post")))

  def loop(x, w):
    return lax.fori_loop(0, 7, lambda i, h: jnp.tanh(h @ w), x)
  h = hlo_graph(lower_hlo_text(loop, jnp.ones((4, 16)), jnp.ones((16, 16)), stage="post"))
  lv = features(h)
  dots = lv.op_class == OP_CLASSES.index("dot_small")  # 4 x 16 @ 16 x 16
  assert dots.any() and np.all(lv.weight[dots] == 7)  # the body runs known_trip_count times
  owners = set(lv.owner[dots].tolist())
  assert [_classes(h)[i] for i in owners] == ["control"]


def test_features_reject_other_inputs():
  with pytest.raises(ValueError, match="CompGraph or an HloGraph"):
    features("not a graph")


# ------------------------------------------------------------------ calibration
def _calibration(**over):
  base = dict(backend="cpu", device_kind="cpu", date="2025-01-01T00:00:00+00:00",
              peak_flops={"f32": 5e10}, mem_bandwidth=2e10, mem_capacity=2e10,
              launch_overhead=1e-6, dispatch_overhead=1e-5, transcendental_weight=3.0,
              parallel_efficiency=0.5,
              classes={c: {"flops_eff": 0.5, "bytes_eff": 0.5, "overhead": 1e-6}
                       for c in OP_CLASSES if c != "free"})
  base.update(over)
  return Calibration(**base)


def test_calibration_json_round_trip(tmp_path):
  cal = _calibration()
  path = str(tmp_path / "sub" / "cal.json")
  cal.save(path)
  assert Calibration.load(path) == cal
  assert os.listdir(tmp_path / "sub") == ["cal.json"]  # atomic: no temporary left behind
  spec = device_spec("local", cal)
  assert spec.peak("f32") == 5e10 and spec.launch_overhead == 1e-6
  np.testing.assert_allclose(durations(_toy_graph(), spec, cal)[0], 2e9 / 2.5e10 + 1e-6)


@pytest.mark.parametrize("edit,field", [
    (lambda d: d.pop("peak_flops"), "peak_flops"),
    (lambda d: d.update(mem_bandwidth=-3.0), "mem_bandwidth"),
    (lambda d: d.update(version=99), "version"),
    (lambda d: d["classes"]["dot"].pop("bytes_eff"), "classes.dot"),
    (lambda d: d.update(parallel_efficiency=2.0), "parallel_efficiency"),
    (lambda d: d.update(bogus=1), "bogus"),
    # beyond the fit's bounds (a hand edit would silently drop a roofline term)
    (lambda d: d["classes"]["elementwise"].update(bytes_eff=1e300), "classes.elementwise"),
    (lambda d: d["classes"]["dot"].update(overhead=1e6), "classes.dot.overhead"),
    (lambda d: d.update(contention=1e6), "contention"),
    (lambda d: d.update(transcendental_weight=1e300), "transcendental_weight"),
    (lambda d: d.update(peak_flops={"f32": 1e300}), "peak_flops.f32"),
    (lambda d: d.update(mem_bandwidth=1e-300), "mem_bandwidth"),
    (lambda d: d.update(launch_overhead=0.0), "launch_overhead"),  # would drop every overhead
    (lambda d: d.update(version=True), "version"),
    (lambda d: d.update(fitted={"dot": 5}), "fitted"),
    (lambda d: d.update(fitted={"matmul": {"flops_eff": True}}), "fitted"),
    (lambda d: d.update(fitted={"dot": {"speed": True}}), "fitted"),
    # an int beyond any float: an OverflowError before, not a ValueError naming the field
    (lambda d: d.update(peak_flops={"f32": 10**400}), "peak_flops.f32"),
    (lambda d: d.update(mem_capacity=10**400), "mem_capacity"),
    (lambda d: d.update(mem_capacity=1e-300), "mem_capacity"),  # a device with no memory
    (lambda d: d.update(first_touch=1e300), "first_touch"),  # unbounded: costs of 1e300 s
    # under 1 ns: the class overheads, ratios to it, became 1e294 x another spec's overhead
    (lambda d: d.update(launch_overhead=1e-300), "launch_overhead"),
    (lambda d: d.update(measurements=[1]), "measurements"),
    # loaded, but then `save` (strict JSON) failed: the round trip lost the file
    (lambda d: d.update(fit={"mape_percent": float("nan")}), "'fit' must hold"),
    (lambda d: d.update(conditions={"load": [float("inf")]}), "'conditions' must hold"),
])
def test_malformed_calibration_file_names_the_field(tmp_path, edit, field):
  data = _calibration().to_dict()
  edit(data)
  path = tmp_path / "bad.json"
  path.write_text(json.dumps(data))
  with pytest.raises(ValueError, match=field.replace(".", r"\.")):
    Calibration.load(str(path))
  for text in ("{not json", "[" * 100_000, '{"version": 1, "version": 1}'):
    path.write_text(text)
    with pytest.raises(ValueError, match="cannot read calibration file"):
      Calibration.load(str(path))
  path.write_bytes(b"\xff\xfe")
  with pytest.raises(ValueError, match="cannot read calibration file"):
    Calibration.load(str(path))
  with pytest.raises(ValueError, match="calibration must be a Calibration"):
    device_spec("local", str(path))
  with pytest.raises(ValueError, match="calibration must be a Calibration"):
    durations(_toy_graph(), SPEC, str(path))  # an AttributeError before


def test_quick_calibration_fits_finite_positive_numbers():
  cal = calibrate(sizes={"matmul": (48, 160), "axpy": (3000, 200000), "transpose": (300,)},
                  repeats=2)
  assert cal.backend == jax.devices()[0].platform and cal.version == calibration_mod.VERSION
  assert {"dot", "elementwise", "transpose"} <= set(cal.classes)
  for v in cal.classes.values():
    assert all(np.isfinite(x) and x > 0 for x in (v["flops_eff"], v["bytes_eff"]))
    assert np.isfinite(v["overhead"]) and v["overhead"] >= 0
  assert cal.peak_flops["f32"] > 0 and cal.mem_bandwidth > 0
  assert len(cal.measurements) == 5 and "loadavg_before" in cal.conditions
  with pytest.raises(ValueError, match="unknown benchmark"):
    calibrate(sizes={"fft": (8,)})


def test_fit_leaves_undetermined_efficiencies_at_their_defaults():
  """Memory-bound elementwise programs do not determine elementwise flops_eff: it is the default
  (it was wherever the smoothed stages left it, 0.04 here, flagged as the default). The dots'
  bytes_eff is not determined either, but its default would make the smallest dot memory bound:
  it is the value nearest the default that changes no prediction."""
  from simulator.costmodel import opclass as feat
  fit = sys.modules["simulator.costmodel.calibrate"].fit

  def program(cls, flops, nbytes):
    return feat._leaves([(0, 1.0, cls, flops, 0.0, nbytes, "f32", 1.0)], 1)
  bw, peak, sizes, sides = 1e10, 1e11, (1e4, 1e5, 1e6, 1e7, 3e7), (64, 256, 512)
  leaves = ([program("elementwise", b / 100, b) for b in sizes]
            + [program("dot", 2 * n ** 3, 12 * n * n) for n in sides])
  times = np.array([32e-6 + b / (0.6 * bw) for b in sizes]
                   + [31e-6 + 2 * n ** 3 / (0.8 * peak) for n in sides])
  tables, predicted = fit(leaves, times, {"f32": peak}, bw)
  ew, dot = tables["classes"]["elementwise"], tables["classes"]["dot"]
  assert not tables["fitted"]["elementwise"]["flops_eff"]
  assert ew["flops_eff"] == pytest.approx(DEFAULT_FLOPS_EFF["elementwise"])
  assert ew["bytes_eff"] == pytest.approx(0.6) and dot["flops_eff"] == pytest.approx(0.8)
  assert not tables["fitted"]["dot"]["bytes_eff"]
  # the 64-dot's memory term (49 kB) reaches its compute term (6.55 us) at bytes_eff 0.75
  assert dot["bytes_eff"] == pytest.approx(12 * 64 ** 2 / bw / (2 * 64 ** 3 / 0.8 / peak),
                                           rel=1e-3)
  np.testing.assert_allclose(predicted, times, rtol=1e-5)


def test_calibrate_refuses_bad_arguments_before_compiling(monkeypatch):
  calibrate_mod = sys.modules["simulator.costmodel.calibrate"]  # (the function hides it)
  monkeypatch.setattr(calibrate_mod, "prepare", lambda *a, **k: pytest.fail("compiled"))
  for kw, match in ((dict(repeats=0), "repeats"), (dict(repeats=2.5), "repeats"),
                    (dict(min_sample_s=float("nan")), "min_sample_s"),
                    (dict(min_sample_s=float("inf")), "min_sample_s"),
                    (dict(sizes={"matmul": 48}), r"sizes\['matmul'\]"),
                    (dict(sizes={"matmul": ()}), r"sizes\['matmul'\]")):
    with pytest.raises(ValueError, match=match):
      calibrate(**{"sizes": {"matmul": (8,)}, "repeats": 1, **kw})


def test_measure_topology_refuses_bad_arguments():
  from simulator.costmodel import topology_calibration as tc
  with pytest.raises(ValueError, match="matmul_n"):
    tc.measure_topology(matmul_n=0)  # was a speed of 0 / 0
  with pytest.raises(ValueError, match="sizes"):
    tc.measure_topology(sizes=(4096, 4096))
  with pytest.raises(ValueError, match="sizes"):
    tc.measure_topology(sizes=(0, 4096))


# ------------------------------------------------------------------ validation experiment
def test_validation_experiment_predicts_a_step_with_the_local_spec():
  """The experiment (experiments/cost_model_validation.py, not library code): a step's
  prediction is the sum of its costed ops on the calibrated local device."""
  from experiments import cost_model_validation as validation

  def step(w, x):
    return jnp.tanh(x @ w).sum()

  case = validation.function_case("tiny", step, jnp.ones((16, 16)), jnp.ones((8, 16)))
  assert float(jnp.asarray(case.call())) == pytest.approx(8 * 16 * np.tanh(16.0))
  cal = _calibration()
  p = validation.predict(case, cal)
  g = apply_cost_model(hlo_graph(case.hlo_text, "tiny"), device_spec("local", cal), cal)
  assert p["nodes"] == g.num_nodes and p["predicted_s"] == pytest.approx(g.cost.sum())
  assert p["predicted_s"] > 0 and sum(p["class_seconds"].values()) == pytest.approx(
      p["predicted_s"])
  assert validation.spearman([1, 2, 3], [2, 4, 9]) == pytest.approx(1.0)
  assert validation.spearman([1], [1]) is None and validation.fmt_spearman(None) == "n/a"
  assert not os.path.exists(os.path.join(REPO, "simulator", "costmodel", "validate.py"))


def test_validation_refuses_another_device_and_degenerate_times(monkeypatch):
  """A calibration of another backend is not compared with this one's times, and a measured
  time of 0 is an error naming the step, not an infinite error in the report."""
  from experiments import cost_model_validation as validation
  from simulator.costmodel import microbench
  case = validation.function_case("tiny", lambda x: jnp.tanh(x).sum(), jnp.ones((8, 16)))
  with pytest.raises(ValueError, match="measured on gpu"):
    validation.validate([case], _calibration(backend="gpu"), repeats=5)
  cal = _calibration(backend=jax.devices()[0].platform,
                     device_kind=str(jax.devices()[0].device_kind))
  monkeypatch.setattr(microbench, "time_calls", lambda calls, *a, **k: np.zeros(len(calls)))
  with pytest.raises(ValueError, match="tiny: measured time 0.0"):
    validation.validate([case], cal, repeats=5)
  assert validation.error_percent(3.0, 2.0, "x") == pytest.approx(50.0)
  with pytest.raises(ValueError, match="x: measured time nan"):
    validation.error_percent(1.0, float("nan"), "x")


def test_validation_launcher_end_to_end(tmp_path):
  cal_path = str(tmp_path / "cal.json")
  _calibration().save(cal_path)
  out = tmp_path / "val"
  cmd = [sys.executable, "-m", "experiments.validate_cost_model", "--models=gpt2_small,gnmt2",
         "--size=tiny", f"--calibration={cal_path}", f"--out={out}", "--repeats=5",
         "--noprogress"]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  report = json.loads((out / "validation.json").read_text())
  assert [r["model"] for r in report["rows"]] == ["gpt2_small/tiny", "gnmt2/tiny"]
  for r in report["rows"]:
    assert r["measured_s"] > 0 and r["predicted_s"] > 0 and np.isfinite(r["error_percent"])
  assert np.isfinite(report["mape_percent"]) and -1 <= report["spearman"] <= 1
  assert (out / "validation.png").read_bytes()[:4] == b"\x89PNG"
  assert "MAPE" in proc.stdout and "Spearman" in proc.stdout
  assert sorted(os.listdir(out)) == ["validation.json", "validation.png"]


@pytest.mark.parametrize("case", ["other_backend", "unwritable", "quick_with_existing"])
def test_validation_launcher_refuses_a_calibration_at_once(tmp_path, case):
  """Before any step is compiled: a calibration of another backend, a --calibration path
  to write a new calibration to that cannot be written (it failed after the calibration), and
  --quick_calibration with an existing --calibration file (it was silently ignored)."""
  cal_path = str(tmp_path / "cal.json")
  quick = []
  if case == "other_backend":
    _calibration(backend="gpu", device_kind="NVIDIA H100").save(cal_path)
  elif case == "quick_with_existing":
    _calibration().save(cal_path)
    quick = ["--quick_calibration"]
  else:
    (tmp_path / "file").write_text("")
    cal_path = str(tmp_path / "file" / "cal.json")
  cmd = [sys.executable, "-m", "experiments.validate_cost_model", "--models=gnmt2",
         "--size=tiny", f"--calibration={cal_path}", f"--out={tmp_path / 'val'}",
         "--noprogress", *quick]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  assert f"--calibration={cal_path}" in proc.stderr
  assert {"other_backend": "measured on gpu", "unwritable": "cannot write",
          "quick_with_existing": "--quick_calibration applies only"}[case] in proc.stderr


def test_scatter_plot_draws_zero_predictions_at_the_floor(tmp_path):
  """A log axis cannot show 0: matplotlib dropped such a point with only a warning. It is drawn
  at the axis floor and counted in the legend, without a warning."""
  import warnings
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from experiments import cost_model_validation as validation
  rows = [{"model": f"m{i}/tiny", "measured_s": t, "predicted_s": p}
          for i, (t, p) in enumerate([(1e-3, 0.0), (2e-3, 1.5e-3), (4e-3, 5e-3)])]
  report = {"rows": rows, "mape_percent": 50.0, "spearman": 1.0}
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    validation.scatter_plot(report, str(tmp_path / "v.png"))
    fig, ax = plt.subplots()
    validation.scatter_panel(ax, np.array([1.0, 2.0, 4.0]), np.array([0.0, 1.5, 5.0]),
                             ["a", "b", "c"], 0.25, "x", "y")
  assert (tmp_path / "v.png").read_bytes()[:4] == b"\x89PNG"
  labels = ax.get_legend_handles_labels()[1]
  assert "1 point at 0 (drawn at the axis floor)" in labels
  lo = ax.get_ylim()[0]
  assert lo == pytest.approx(1.0 / 1.5)  # from the positive values
  (floor,) = [c for c in ax.collections if c.get_label().startswith("1 point")]
  assert floor.get_offsets().tolist() == [[1.0, lo]]
  plt.close(fig)


def test_dot_peak_per_compute_dtype():
  """Complex dots run at their real precision's peak (c64 f32, c128 f64) on 4x the flops, 8-bit
  integer dots at the device's int8 peak where it has one (else f32), other types at f32."""
  from simulator.costmodel import opclass, roofline

  def dot_leaf(text):
    lv = features(hlo_graph(text))
    (k,) = [i for i, c in enumerate(lv.op_class) if OP_CLASSES[c] == "dot"]
    return opclass.NODE_DTYPES[lv.dtype[k]], lv.flops[k]

  def text(dt, out=None):
    return lower_hlo_text(lambda x, y: lax.dot(x, y, preferred_element_type=out),
                          jnp.ones((64, 64), dt), jnp.ones((64, 64), dt), stage="pre")

  real = 2 * 64 ** 3
  c64 = text(jnp.complex64)
  assert dot_leaf(text(jnp.float32)) == ("f32", real)
  assert dot_leaf(c64) == ("f32", 4 * real)
  assert dot_leaf(c64.replace("c64", "c128")) == ("f64", 4 * real)
  assert dot_leaf(text(jnp.int8, jnp.int32)) == ("s8", real)
  assert dot_leaf(text(jnp.uint8, jnp.uint32)) == ("s8", real)
  assert dot_leaf(text(jnp.int16, jnp.int32))[0] == "other"
  s8 = opclass.DTYPE_IDS["s8"]
  assert roofline.peak_by_dtype(device_spec("a100"))[s8] == 624e12
  assert roofline.peak_by_dtype(device_spec("h100"))[s8] == 1979e12
  v100 = device_spec("v100")  # no int8 entry: the f32 peak
  assert roofline.peak_by_dtype(v100)[s8] == v100.peak("f32")
  assert roofline.peak_by_dtype(v100)[opclass.DTYPE_IDS["f64"]] == 7.8e12


def test_float8_dots_and_convs_use_the_f8_peak_else_the_16_bit_one():
  """An f8 dot or conv (pre-optimisation HLO keeps it; XLA:CPU upcasts it after) runs at the
  spec's fp8 peak (H100/H200 1979 TFLOPS dense), else at its f16 or bf16 peak (XLA:GPU converts
  f8 operands to f16 where there are no fp8 units), else f32; the 8-bit floats no fp8 unit runs
  (fnuz, e3m4, ...) at the f16 peak; f8e8m0fnu (a scale type) at f32."""
  from simulator.costmodel import opclass, roofline

  def leaf(text, cls):
    lv = features(hlo_graph(text))
    (k,) = [i for i, c in enumerate(lv.op_class) if OP_CLASSES[c] == cls]
    return opclass.NODE_DTYPES[lv.dtype[k]], lv.flops[k]

  f8 = jax.ShapeDtypeStruct((4096, 4096), jnp.float8_e4m3fn)
  dot = lower_hlo_text(lambda x, y: lax.dot(x, y, preferred_element_type=jnp.float32), f8, f8,
                       stage="pre")
  assert "f8e4m3fn[4096,4096]{1,0} parameter(0)" in dot  # f8 operands
  flops = 2 * 4096 ** 3
  assert leaf(dot, "dot") == ("f8", flops)
  assert leaf(dot.replace("f8e4m3fn", "f8e5m2"), "dot") == ("f8", flops)
  for other in ("f8e4m3fnuz", "f8e5m2fnuz", "f8e4m3b11fnuz", "f8e3m4"):  # no fp8 unit runs them
    assert leaf(dot.replace("f8e4m3fn", other), "dot") == ("f16", flops)  # XLA:GPU: to f16
  assert leaf(dot.replace("f8e4m3fn", "f8e8m0fnu"), "dot")[0] == "other"
  conv = lower_hlo_text(lambda x, k: lax.conv_general_dilated(x, k, (1, 1), "SAME"),
                        jnp.ones((1, 3, 8, 8), jnp.float8_e5m2),
                        jnp.ones((4, 3, 3, 3), jnp.float8_e5m2), stage="pre")
  assert leaf(conv, "conv_eigen")[0] == "f8"
  # the dot is compute bound on both (its 96 MB at 0.7 x bandwidth take under half the time)
  for name, peak in (("h100", 1979e12), ("h200", 1979e12), ("a100", 312e12)):
    spec = device_spec(name)
    assert roofline.peak_by_dtype(spec)[opclass.DTYPE_IDS["f8"]] == peak
    assert durations(hlo_graph(dot), spec).max() == pytest.approx(
        flops / (DEFAULT_FLOPS_EFF["dot"] * peak) + spec.launch_overhead, rel=1e-12)
  f8_peak = {n: roofline.peak_by_dtype(device_spec(n))[opclass.DTYPE_IDS["f8"]]
             for n in ("v100", "tpu_v4", "k80")}
  assert f8_peak == {"v100": 125e12, "tpu_v4": 275e12, "k80": device_spec("k80").peak("f32")}
