"""Fusion baselines in the registry, XLA's decisions on a JAX program, the fused Gantt chart and
the fusion validation experiment (design.md 4.1; issue: op fusion)."""

import jax.numpy as jnp
import numpy as np
import pytest

from go_jax import methods, plotting
from go_jax.methods.fusion import xla_fusion_program
from simulator import CompGraph, Topology, fusion, ops, simulate
from simulator.costmodel import device_spec
from simulator.costmodel.roofline import cost_reference
from simulator.graph import upward_rank

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

REF = cost_reference(device_spec("v100"))


def mlp_step(w1, w2, x):
  h = jnp.tanh(x @ w1 + 1.0) * 2.0
  return jnp.sum((h @ w2 - 0.5) ** 2)


@pytest.fixture(scope="module")
def mlp():
  """(pre graph costed on v100, XLA's decisions, post graph) of a two-layer MLP loss."""
  return xla_fusion_program(mlp_step, jnp.ones((32, 64)), jnp.ones((64, 16)), jnp.ones((8, 32)))


def chain(n=5):
  ew = ops.op_type_id("elementwise")
  return CompGraph(cost=np.full(n, 1e-5), senders=range(n - 1), receivers=range(1, n),
                   out_bytes=np.full(n, 1e6), flops=np.full(n, 1e6),
                   bytes_accessed=np.full(n, 2e6), op_type=np.full(n, ew), reference=REF)


def test_xla_decisions_rebuild_xla_groups_on_the_pre_graph(mlp):
  pre, decisions, post = mlp
  assert pre.reference is not None and post.reference is not None
  assert decisions.shape == (pre.num_nodes,) and decisions.dtype == bool
  assert decisions.any()
  fg = fusion.fuse_graph(pre, np.zeros(pre.num_nodes, int), decisions)
  # XLA's fusions shrink the graph; the tree-shaped part of them is what section 4.1 expresses.
  assert post.num_nodes <= fg.graph.num_nodes < pre.num_nodes
  # Every requested fusion joins ops XLA fused together: same post group for op and consumer.
  ptr, succ = pre.successor_csr()
  for i in np.flatnonzero(decisions):
    assert ptr[i + 1] - ptr[i] == 1


def test_fusion_methods_are_registered_and_rescored(mlp):
  pre, decisions, _ = mlp
  assert {"no_fusion", "fuse_all", "xla_fusion"} <= set(methods.available(kinds=("fusion",)))
  topo = Topology.uniform(1, bandwidth=1e10)
  place = np.zeros(pre.num_nodes, int)
  prio = upward_rank(pre)
  sols = {m: methods.solve(m, pre, topo, placement=place, priority=prio,
                           **({"decisions": decisions} if m == "xla_fusion" else {}))
          for m in ("no_fusion", "fuse_all", "xla_fusion")}
  plain = simulate(pre, topo, place, prio)
  assert sols["no_fusion"].makespan == pytest.approx(float(plain.makespan[0]), rel=1e-6)
  assert not sols["no_fusion"].fuse.any() and sols["fuse_all"].fuse.all()
  np.testing.assert_array_equal(sols["xla_fusion"].fuse, decisions)
  # Fewer launches and no materialised inner tensors: fusion is faster on one device here.
  assert sols["xla_fusion"].makespan < sols["no_fusion"].makespan
  assert sols["fuse_all"].makespan <= sols["xla_fusion"].makespan
  for s in sols.values():  # the registry's objective is the fused re-simulation
    assert s.gap >= 0 and s.lower_bound > 0  # a bound that holds for fused answers
    again = simulate(pre, topo, place, prio, fuse=s.fuse)
    assert s.makespan == pytest.approx(float(again.makespan[0]), rel=1e-6)


def test_fusion_methods_reject_bad_input():
  g = chain()
  topo = Topology.uniform(1, bandwidth=1e10)
  with pytest.raises(ValueError, match="fixed placement"):
    methods.solve("fuse_all", g, topo)
  with pytest.raises(ValueError, match="needs XLA's decisions"):
    methods.solve("xla_fusion", g, topo, placement=np.zeros(5, int))
  with pytest.raises(ValueError, match="decisions: fuse has shape"):
    methods.solve("xla_fusion", g, topo, placement=np.zeros(5, int), decisions=np.ones(3))
  with pytest.raises(ValueError, match="no cost reference"):
    methods.solve("fuse_all", g.replace(reference=None), topo, placement=np.zeros(5, int))


def test_fused_gantt_chart_labels_groups_by_members(tmp_path):
  g = chain()
  topo = Topology.uniform(2, bandwidth=1e9)
  place = np.array([0, 0, 0, 1, 1])
  fg = fusion.fuse_graph(g, place, np.ones(5, bool))
  assert fg.graph.node_names == ("0+1+2", "3+4")  # the cross-device edge 2 -> 3 cannot fuse
  path = plotting.plot_fused_schedule(g, topo, place, np.zeros(5), np.ones(5, bool),
                                      str(tmp_path / "g.png"))
  assert open(path, "rb").read(4) == b"\x89PNG"


def test_fusion_validation_experiment_on_a_small_step(tmp_path):
  """experiments/fusion_validation.py on one compiled function: the three pre-graph
  predictions, their group counts, and the report / table / plot helpers."""
  from experiments import cost_model_validation as validation
  from experiments import fusion_validation as fv
  from simulator.costmodel import OP_CLASSES, Calibration
  case = validation.function_case("mlp", mlp_step, jnp.ones((32, 64)), jnp.ones((64, 16)),
                                  jnp.ones((8, 32)))
  assert case.pre_text
  cal = Calibration(
      backend="cpu", device_kind="cpu", date="2025-01-01T00:00:00+00:00",
      peak_flops={"f32": 5e10}, mem_bandwidth=2e10, mem_capacity=2e10, launch_overhead=1e-6,
      dispatch_overhead=1e-5, transcendental_weight=3.0, parallel_efficiency=0.5,
      classes={c: {"flops_eff": 0.5, "bytes_eff": 0.5, "overhead": 1e-6}
               for c in OP_CLASSES if c != "free"})
  p = fv.predict_fusion(case, cal)
  assert p["pre_none_groups"] == p["pre_nodes"] > p["pre_xla_groups"] >= p["pre_all_groups"]
  assert p["pre_none_s"] > p["pre_xla_s"] > 0
  report = {"rows": [{"model": "mlp", "measured_s": p["pre_xla_s"] * 1.1,
                      "predicted_s": p["pre_xla_s"] * 0.9}]}
  f = fv.fusion_report([case], report, cal)
  row = report["rows"][0]
  assert row["xla_vs_post_percent"] == pytest.approx(100 / 9)
  assert f["mape_xla_vs_post_percent"] == pytest.approx(100 / 9)
  report["fusion"] = f
  assert "MAPE" in fv.fusion_table(report)
  png = fv.fusion_plot(report, str(tmp_path / "fusion.png"))
  assert open(png, "rb").read(4) == b"\x89PNG"


def test_fusion_table_cells_and_launcher_errors(mlp):
  """experiments/fusion_table.py: one model's cells (1 and 2 devices), the table text, and a
  one-line error for an unknown model."""
  import subprocess
  import sys
  from experiments import fusion_comparison as fc
  pre, decisions, _ = mlp
  cells = fc.fusion_cells(pre, decisions, [1, 2], ["heft"])
  assert [c["devices"] for c in cells] == [1, 2]
  assert cells[0]["placement"] == "single" and cells[1]["placement"] == "heft"
  for c in cells:
    none, xla, all_ = c["no_fusion"], c["xla_fusion"], c["fuse_all"]
    assert none["groups"] == pre.num_nodes > xla["groups"] >= all_["groups"]
    assert xla["makespan"] < none["makespan"]
    assert fc.LEARNED_SINGLE not in c and fc.LEARNED_JOINT not in c
  text = fc.cells_table([{"model": "mlp", "cells": cells}])
  assert text.count("\n") == 2 and " - " in text  # no GO column without learned methods
  assert fc.figures([{"model": "mlp", "cells": cells}]) == {"single": None, "joint": {}}
  proc = subprocess.run([sys.executable, "-m", "experiments.fusion_table", "--models=nope",
                         "--out=/tmp/unused_fusion_table"], capture_output=True, text=True,
                        timeout=120)
  assert proc.returncode != 0 and "unknown zoo model" in proc.stderr
  assert "Traceback" not in proc.stderr


def test_fusion_table_resumes_and_keeps_rows_it_did_not_reach(tmp_path):
  """`fusion_comparison.run_models` (the launcher's loop): a model is rebuilt only when missing
  or made with other settings, and an interrupted run keeps every stored row, also of models
  it has not reached yet."""
  import json
  from experiments import fusion_comparison as fc
  import itertools
  path = str(tmp_path / "fusion_table.json")
  built, count = [], itertools.count(1)

  def build(name):
    built.append(name)
    if name == "stop":
      raise KeyboardInterrupt  # the run is interrupted at this model
    return {"model": f"{name}/tiny", "cells": [], "n": next(count)}

  settings = {"size": "tiny", "device": "v100", "devices": [1], "placers": ["heft"],
              "learned": None}
  rows, others = fc.run_models(["a", "b", "c"], "tiny", settings, path, build)
  assert built == ["a", "b", "c"] and others == [] and [r["n"] for r in rows] == [1, 2, 3]
  with pytest.raises(KeyboardInterrupt):  # a rerun of b only, with a new placer, stops at c
    fc.run_models(["b", "stop"], "tiny", dict(settings, placers=["m_sct"]), path, build)
  stored = {r["model"]: r for r in json.load(open(path))["rows"]}
  assert set(stored) == {"a/tiny", "b/tiny", "c/tiny"}  # nothing dropped
  assert stored["b/tiny"]["n"] == 4 and stored["b/tiny"]["settings"]["placers"] == ["m_sct"]
  built.clear()
  rows, others = fc.run_models(["a", "b"], "tiny", settings, path, build)
  assert built == ["b"]  # a resumed; b was made with another placer since
  assert [r["n"] for r in rows] == [1, 5] and [r["model"] for r in others] == ["c/tiny"]
  (tmp_path / "bad.json").write_text("[1, 2]")
  with pytest.raises(ValueError, match="cannot resume"):
    fc.run_models(["a"], "tiny", settings, str(tmp_path / "bad.json"), build)


def test_fusion_table_refuses_other_launchers_and_malformed_rows(tmp_path):
  """load_rows: another launcher's file, an untagged file without the fusion table's settings
  and a malformed row (no cells, a 0 makespan, a string cell) are one-line ValueErrors naming
  the file, row, cell and field; an older untagged fusion_table.json still resumes."""
  import json
  from experiments import fusion_comparison as fc
  path = tmp_path / "fusion_table.json"
  settings = {"size": "tiny", "device": "v100", "devices": [1], "placers": ["heft"],
              "learned": None}
  good = {"model": "a/tiny", "cells": [_cell(1, 2.0, 1.0, 1.5, 1.2)]}

  def load(obj):
    path.write_text(json.dumps(obj))
    return fc.load_rows(str(path))

  assert list(load(dict(settings, rows=[good]))) == ["a/tiny"]  # untagged, older file
  assert list(load(dict(settings, launcher="fusion_table", rows=[good]))) == ["a/tiny"]
  with pytest.raises(ValueError, match=r"not written by fusion_table \(launcher "
                     r"'partition_table'\); use another --out"):
    load({"launcher": "partition_table", "settings": {}, "cells": {}, "rows": [good]})
  with pytest.raises(ValueError, match="not written by fusion_table; use another --out"):
    load({"rows": [good]})
  bad_cell = _cell(1, 2.0, 1.0, 1.5, 1.2)
  bad_cell["no_fusion"]["makespan"] = 0
  for row, match in [
      ({"model": "a/tiny"}, r"row 0 \(a/tiny\): field 'cells' missing"),
      ({"model": "a/tiny", "cells": [bad_cell]},
       r"row 0 \(a/tiny\) cell 0 field 'no_fusion': field 'makespan' must be a positive"),
      ({"model": "a/tiny", "cells": ["x"]}, r"row 0 \(a/tiny\) cell 0: not an object"),
      ("x", "row 0: not an object")]:
    with pytest.raises(ValueError, match=match) as e:
      load(dict(settings, launcher="fusion_table", rows=[row]))
    assert str(path) in str(e.value)


def test_fusion_table_prints_a_dash_without_learned_columns():
  from experiments import fusion_comparison as fc
  cell = _cell(1, 2.0, 1.0, 1.5, 1.2)
  del cell["go_fusion"]
  line = fc.cells_table([{"model": "a/tiny", "cells": [cell]}]).splitlines()[1]
  assert "nan" not in line and line.split()[-1] == "-" and line.split()[-4] == "-"


@pytest.mark.parametrize("args,match", [
    (["--placers=", "--devices=2"], "--placers: give at least one"),
    (["--placers=tofu"], "--placers=tofu: a partition method, not a placement one"),
    (["--placers=xla_fusion"], "--placers=xla_fusion: a fusion method"),
    (["--placers=heft,go_joint3"], "--placers=go_joint3: a learned method; the placers make"),
    (["--devices=1,1"], "--devices=1,1: 1 given twice"),
    (["--seed=3"], "--seed: only used with --learned_seconds > 0"),
    (["--samples=2"], "--samples: only used with --learned_seconds > 0"),
    (["--learned_seconds=1", "--checkpoint=nosuch"], "--checkpoint=nosuch: "),
])
def test_fusion_table_refuses_bad_flags_before_any_model(tmp_path, args, match):
  import subprocess
  import sys
  proc = subprocess.run([sys.executable, "-m", "experiments.fusion_table", "--models=gnmt2",
                         "--size=tiny", f"--out={tmp_path / 'out'}"] + args,
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode != 0 and match in proc.stderr, proc.stderr
  assert "Traceback" not in proc.stderr and not (tmp_path / "out" / "fusion_table.json").exists()


def _cell(d, none, all_, xla, go, peak=1.0):
  entry = lambda m: {"makespan": m, "peak_memory": peak, "feasible": True, "groups": 1}
  key = "go_fusion" if d == 1 else "go_joint3"
  return {"devices": d, "placement": "x", "no_fusion": entry(none), "fuse_all": entry(all_),
          "xla_fusion": entry(xla), key: dict(entry(go), peak_memory=2 * peak)}


def test_fusion_figures_arithmetic():
  """The issue's figures from cells: share at or below XLA, mean and geometric means."""
  from experiments import fusion_comparison as fc
  rows = [{"model": "a", "cells": [_cell(1, 4, 1, 2, 1), _cell(4, 4, 1, 2, 1)]},
          {"model": "b", "cells": [_cell(1, 4, 1, 2, 4), _cell(4, 4, 1, 2, 4)]}]
  f = fc.figures(rows)
  assert f["single"]["models"] == 2 and f["single"]["at_or_below_xla_share"] == 0.5
  assert f["single"]["mean_relative_to_xla"] == pytest.approx(0.25)  # (0.5 + 2) / 2 - 1
  assert f["single"]["geomean_vs_xla"] == pytest.approx(1.0)
  assert f["single"]["geomean_vs_fuse_all"] == pytest.approx(2.0)
  j = f["joint"][4]
  assert j["models"] == 2 and j["ahead_share"] == 0.5 and j["feasible"] == 2
  assert j["geomean_vs_pipeline_xla"] == pytest.approx(1.0)
  assert j["mean_peak_vs_pipeline_xla"] == pytest.approx(2.0)
  assert "75%" in fc.figures_text(f) and "4 devices" in fc.figures_text(f)


def test_learned_fusing_methods_out_of_range_are_refused_before_they_start(monkeypatch):
  """Fused groups whose roofline could put event times beyond float32's range (a 1e29-flop op
  on a 1 FLOP/s reference at speed 1e-10) are refused before the checkpoint is even loaded,
  with the final simulation's message (go_fusion and go_joint3 trained first, for as long as
  finetune_seconds said, and only then were refused)."""
  from go_jax.methods import learned  # pylint: disable=g-import-not-at-top
  from simulator.costmodel.opclass import OP_CLASSES  # pylint: disable=g-import-not-at-top
  from simulator.costref import CostReference  # pylint: disable=g-import-not-at-top
  c = len(OP_CLASSES)
  toy = CostReference(name="toy", peak_flops=1, mem_bandwidth=1, launch_overhead=0,
                      classes=OP_CLASSES, flops_eff=np.ones(c), bytes_eff=np.ones(c),
                      overhead_ratio=np.ones(c), memory_only=np.zeros(c, bool))
  g = chain(3).replace(cost=np.ones(3), flops=np.array([1e29, 1e29, 0]), bytes_accessed=np.ones(3),
                       reference=toy)
  slow = Topology.uniform(2, bandwidth=1.0, speed=1e-10)
  place = np.array([0, 0, 1])
  methods.solve("heft", g, slow)  # unfused, in range
  with pytest.raises(ValueError, match="event times can reach 2e") as direct:
    simulate(g, slow, place, np.zeros(3), fuse=np.array([True, False, False]))

  def started(*args, **kwargs):
    raise AssertionError("the learned method started")
  monkeypatch.setattr(learned, "_load", started)
  for name, kw in (("go_fusion", {"placement": place, "priority": np.zeros(3)}),
                   ("go_joint3", {})):
    with pytest.raises(ValueError) as e:
      methods.solve(name, g, slow, finetune_seconds=600, **kw)
    assert str(e.value) == str(direct.value), name


def test_learned_fusion_methods_end_to_end(mlp):
  """go_fusion (the given schedule kept, fuse requests learned) and go_joint3 from the shipped
  checkpoint, one fine-tuning update each; every answer re-simulates to its objective."""
  from experiments import fusion_comparison as fc
  pre, decisions, _ = mlp
  cells = fc.fusion_cells(pre, decisions, [1, 2], ["heft"],
                          learned={"max_updates": 1, "samples": 4, "seed": 0})
  single, joint = cells[0][fc.LEARNED_SINGLE], cells[1][fc.LEARNED_JOINT]
  assert single["updates"] == 1 and joint["updates"] == 1
  assert single["zero_shot_objective"] is not None
  assert single["groups"] <= pre.num_nodes and joint["feasible"]
  topo = Topology.uniform(1, bandwidth=1.0)
  place, prio = np.zeros(pre.num_nodes, np.int64), upward_rank(pre)
  sol = methods.solve("go_fusion", pre, topo, placement=place, priority=prio, max_updates=1,
                      samples=4)
  assert np.array_equal(sol.placement, place) and np.array_equal(sol.priority, prio)
  assert sol.fuse is not None and sol.fuse.shape == (pre.num_nodes,)
  again = methods.evaluate(pre, topo, place, prio, fuse=sol.fuse)
  assert again["objective"] == sol.objective
  assert {s["stage"] for s in sol.info["stages"]} == {"zero-shot greedy",
                                                        "zero-shot best of K", "fine-tuned"}
  with pytest.raises(ValueError, match="fixed placement"):
    methods.solve("go_fusion", pre, topo)
