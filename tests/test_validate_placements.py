"""The fidelity study (experiments/validate_placements.py, experiments/placement_fidelity.py): a
tiny end-to-end run over 2 virtual CPU devices, its files and its resume, and the summary."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from experiments import placement_fidelity as fidelity
from simulator.costmodel import Calibration
from simulator.costmodel.opclass import OP_CLASSES

pytestmark = pytest.mark.fast_compile
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _calibration(path, backend="cpu", device_kind="cpu"):
  """A synthetic calibration (a real one takes a minute to measure): the study only needs one
  to cost the graph."""
  Calibration(backend=backend, device_kind=device_kind, date="2025-01-01T00:00:00+00:00",
              peak_flops={"f32": 5e10}, mem_bandwidth=2e10, mem_capacity=2e10,
              launch_overhead=1e-6, dispatch_overhead=1e-5, transcendental_weight=3.0,
              parallel_efficiency=0.5,
              classes={c: {"flops_eff": 0.5, "bytes_eff": 0.5, "overhead": 1e-6}
                       for c in OP_CLASSES if c != "free"}).save(str(path))


def _launch(*args):
  env = dict(os.environ, JAX_PLATFORMS="cpu", MPLBACKEND="Agg")
  return subprocess.run([sys.executable, "-m", "experiments.validate_placements", *args],
                        capture_output=True, text=True, cwd=REPO, env=env, timeout=600,
                        check=False)


def test_tiny_study_end_to_end_and_resume(tmp_path):
  cal = tmp_path / "cal.json"
  _calibration(cal)
  out = tmp_path / "out"
  # One random placement (three rows: one compiled, timed program each) and the fewest repeats
  # the launcher takes.
  args = ("--models=gpt2_small", "--size=tiny", "--devices=2", "--methods=single,heft,random",
          "--random_seeds=1", "--repeats=3", f"--calibration={cal}", f"--out={out}",
          "--noprogress")
  proc = _launch(*args)
  assert proc.returncode == 0, proc.stderr[-3000:]
  data = json.loads((out / "results.json").read_text())
  rows = data["cells"]["gpt2_small/tiny"]
  assert [r["placement"] for r in rows] == ["single", "heft", "random_0"]
  for r in rows:
    assert r["devices"] == 2 and r["measured_s"] > 0
    assert r["predicted_s"] > 0 and r["predicted_unfused_s"] > 0
    assert r["predicted_segments_s"] > 0 and r["dispatch_s"] > 0
  single = rows[0]
  assert single["segments"] == 1 and single["devices_used"] == 1
  assert rows[2]["segments"] > 1  # the random placement is split
  (summary,) = data["summary"]
  assert summary["placements"] == 3 and summary["model"] == "gpt2_small/tiny"
  assert "| gpt2_small/tiny | 2 | 3 |" in proc.stdout
  for name in ("results.md", "fidelity.png", "topology_2.json"):
    assert (out / name).is_file(), name
  again = _launch(*args)  # resumed: nothing is re-run, the same table
  assert again.returncode == 0, again.stderr[-3000:]
  assert json.loads((out / "results.json").read_text())["cells"] == data["cells"]
  other = _launch(*args[:-2], "--repeats=5", f"--out={out}", "--noprogress")
  assert other.returncode != 0 and "other settings" in other.stderr
  assert "Traceback" not in other.stderr
  # another calibration changes every prediction: its cells are not reused
  data = json.loads(cal.read_text())
  data["classes"]["dot"]["overhead"] = 2e-6
  cal.write_text(json.dumps(data))
  recal = _launch(*args)
  assert recal.returncode != 0 and "another calibration" in recal.stderr, recal.stderr[-2000:]
  assert "Traceback" not in recal.stderr


def test_bad_flags_are_one_line():
  proc = _launch("--devices=two", "--out=/tmp/unused_vp")
  assert proc.returncode != 0 and "--devices" in proc.stderr and "Traceback" not in proc.stderr
  proc = _launch("--models=nope", "--devices=1", "--out=/tmp/unused_vp2")
  assert proc.returncode != 0 and "unknown zoo model" in proc.stderr
  proc = _launch("--backends=cpu,gpu", "--devices=1", "--out=/tmp/unused_vp3")  # CPU-only here
  assert proc.returncode != 0 and "--backends: backend 'gpu' is not available" in proc.stderr
  assert "Traceback" not in proc.stderr
  proc = _launch("--backends=cpu,CPU", "--devices=1", "--out=/tmp/unused_vp4")
  assert proc.returncode != 0 and "--backends: each backend once" in proc.stderr
  proc = _launch("--backends=cpu", "--devices=3", "--cpu_devices=2", "--out=/tmp/unused_vp5")
  assert proc.returncode != 0 and "--devices=3 but JAX has 2 device(s) (cpu)" in proc.stderr


def test_calibration_of_another_device_is_refused(tmp_path):
  """Its predictions would be compared with times measured here, silently."""
  cal = tmp_path / "cal.json"
  _calibration(cal, backend="gpu", device_kind="NVIDIA H100")
  proc = _launch("--models=gpt2_small", "--devices=1", "--methods=single", "--random_seeds=0",
                 f"--calibration={cal}", f"--out={tmp_path / 'out'}", "--noprogress")
  assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  assert f"--calibration={cal}" in proc.stderr and "measured on gpu" in proc.stderr
  assert not (tmp_path / "out" / "topology_1.json").exists()


def test_summary_spearman_and_mape():
  rows = [{"model": "m", "devices": 2, "placement": f"p{i}", "measured_s": t,
           "predicted_s": p, "predicted_unfused_s": p * 2, "predicted_segments_s": 4 - p,
           "segments": 1, "error_percent": 100 * (p - t) / t,
           "error_unfused_percent": 100 * (2 * p - t) / t,
           "error_segments_percent": 100 * (4 - p - t) / t}
          for i, (t, p) in enumerate([(1.0, 1.1), (2.0, 1.8), (3.0, 3.3)])]
  (s,) = fidelity.summarize(rows)
  assert s["spearman"] == pytest.approx(1.0) and s["placements"] == 3
  assert s["mape_percent"] == pytest.approx(np.mean([10, 10, 10]))
  assert s["mape_unfused_percent"] == pytest.approx(np.mean([120, 80, 120]))
  assert s["spearman_segments"] == pytest.approx(-1.0)
  assert "| m | 2 | 3 | 1.000 | 10.0% |" in fidelity.table([s])
  assert "-1.000 (below)" in fidelity.table([s])


def test_scatter_plot_draws_zero_predictions_at_the_floor(tmp_path):
  """A zero prediction (dropped by matplotlib's log axis with a warning) is drawn at the floor
  and counted in the legend, without a warning."""
  import warnings
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  rows = [{"model": "m/tiny", "devices": 2, "placement": f"p{i}", "measured_s": t,
           "predicted_s": p, "predicted_segments_s": t}
          for i, (t, p) in enumerate([(1e-3, 0.0), (2e-3, 0.0), (3e-3, 2e-3)])]
  summary = [{"model": "m/tiny", "devices": 2, "spearman": 1.0, "spearman_segments": 1.0}]
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    fidelity.scatter_plot(rows, summary, str(tmp_path / "f.png"))
    fig, ax = plt.subplots()
    fidelity._panel(ax, rows, summary, "predicted_s", "spearman", "y")
  assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
  assert "2 points at 0 (drawn at the axis floor)" in ax.get_legend_handles_labels()[1]
  assert ax.get_ylim()[0] == pytest.approx(1.0 / 1.5)
  plt.close(fig)
