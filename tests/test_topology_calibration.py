"""The local machine as a topology (simulator/costmodel/topology_calibration.py, issue 17 part 2):
the link fit on known lines, and `go-jax-calibrate --topology` on two CPU devices writing a
file that the topology reader and a placement method accept."""

import os
import subprocess
import sys

import numpy as np
import pytest

from go_jax import methods
from simulator import sources, topology_file
from simulator.costmodel import topology_calibration as tc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _launch(*args, timeout=180):
  return subprocess.run([sys.executable, "-m", "experiments.calibrate_cost_model", *args],
                        cwd=REPO, capture_output=True, text=True, timeout=timeout,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"))


def test_fit_link_recovers_a_known_line():
  sizes = [4e3, 2.6e5, 2e6, 8e6]
  lat, bw = 20e-6, 5e9
  got = tc.fit_link(sizes, [lat + s / bw for s in sizes])
  assert got == pytest.approx((lat, bw), rel=1e-9)


def test_fit_link_passes_through_the_smallest_copy_and_fits_the_slope():
  sizes = [1e3, 1e6, 2e6]
  # the large copies are off the line through the small one: the slope follows them
  lat, bw = tc.fit_link(sizes, [10e-6, 10e-6 + 2e-3, 10e-6 + 4e-3])
  assert lat == pytest.approx(10e-6 - 1e3 / bw) and bw == pytest.approx(0.5e9, rel=1e-3)
  lat, bw = tc.fit_link(sizes, [1e-9, 1e-3, 2e-3])  # intercept below 0: clamped
  assert lat == 0.0 and bw == pytest.approx(1e9, rel=1e-3)
  with pytest.raises(ValueError, match="do not grow with the size"):
    tc.fit_link(sizes, [3e-3, 2e-3, 1e-3])
  with pytest.raises(ValueError, match="two or more distinct sizes"):
    tc.fit_link([1e3, 1e3], [1e-6, 2e-6])
  with pytest.raises(ValueError, match="must be finite and > 0"):
    tc.fit_link(sizes, [0.0, 1e-3, 2e-3])
  with pytest.raises(ValueError, match="must be finite and > 0"):
    tc.fit_link(sizes, [1e-6, 1e-3, np.inf])  # was a bandwidth of 0
  with pytest.raises(ValueError, match="sizes must be finite"):
    tc.fit_link([1e3, 1e6, np.nan], [1e-6, 1e-3, 2e-3])


def test_a_link_whose_times_do_not_grow_is_measured_again(monkeypatch):
  """A busy machine can make a small copy look slower than a large one: the link is timed
  again with twice the rounds, and only after LINK_ATTEMPTS such tries is it an error."""
  import jax
  real = tc._interleaved_times
  rounds = []

  def fake(fns, repeats, noisy_tries):
    if len(fns) == len(tc.QUICK_SIZES) and rounds.count("copy") < noisy_tries:
      rounds.append("copy")
      return [[3e-3] * repeats, [2e-3] * repeats, [1e-3] * repeats]  # shrinking with size
    if len(fns) == len(tc.QUICK_SIZES):
      rounds.append(repeats)
      return [[1e-5] * repeats, [2e-5] * repeats, [1e-4] * repeats]
    return real(fns, 1)

  dev = jax.devices()[0]
  monkeypatch.setattr(tc, "_interleaved_times", lambda f, r: fake(f, r, noisy_tries=1))
  topo, report = tc.measure_topology([dev, dev], sizes=tc.QUICK_SIZES, repeats=2)
  assert rounds[:2] == ["copy", 4]  # the second try doubled the rounds and fitted
  assert np.isfinite(topo.bandwidth[0, 1]) and len(report["links"]) == 2
  rounds.clear()
  monkeypatch.setattr(tc, "_interleaved_times", lambda f, r: fake(f, r, noisy_tries=99))
  with pytest.raises(ValueError, match="link cpu0 -> cpu0: fit_link: .* do not grow"):
    tc.measure_topology([dev, dev], sizes=tc.QUICK_SIZES, repeats=2)
  assert rounds == ["copy"] * tc.LINK_ATTEMPTS


def test_calibrate_topology_on_two_cpu_devices(tmp_path):
  path = tmp_path / "local.json"
  proc = _launch(f"--topology={path}", "--cpu_devices=2", "--quick", "--noprogress")
  assert proc.returncode == 0, proc.stderr
  assert f"wrote {path}" in proc.stdout and "cpu0 -> cpu1" in proc.stdout
  topo = topology_file.from_json(str(path))
  assert topo.num_devices == 2 and topo.speed[0] == 1.0 and topo.speed[1] > 0
  assert "the fit is within" in proc.stdout  # each link says how far its line is off
  assert np.all(topo.overhead == 0)  # the calibrated op costs carry the launch overhead
  assert np.all(np.isfinite(topo.mem_capacity)) and np.all(topo.mem_capacity > 0)
  off = ~np.eye(2, dtype=bool)
  assert np.all(np.isfinite(topo.bandwidth[off])) and np.all(topo.bandwidth[off] > 0)
  assert np.all(topo.latency[off] >= 0)
  # usable as any topology: a placement method runs on it and fits in its memory
  graph = sources.load_graph("layered:n=24,width=4,seed=0")
  sol = methods.solve("heft", graph, topo)
  assert sol.feasible and sol.placement.shape == (graph.num_nodes,)


def test_bad_flags_are_one_line(tmp_path):
  proc = _launch("--cpu_devices=2")
  assert proc.returncode != 0 and "--cpu_devices is for --topology" in proc.stderr
  assert "Traceback" not in proc.stderr
  proc = _launch(f"--topology={tmp_path / 't.json'}", f"--out={tmp_path / 'c.json'}")
  assert proc.returncode != 0 and "--topology names the file" in proc.stderr
  assert not os.path.exists(tmp_path / "t.json")
  proc = _launch(f"--topology={tmp_path / 't.json'}", "--backend=nosuchbackend")
  assert proc.returncode != 0 and "--backend=nosuchbackend" in proc.stderr
  assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
  # the cost-model calibration's default folder (results/ here) is a file: refused at once,
  # not after minutes of timing when the calibration is written
  (tmp_path / "results").write_text("")
  proc = subprocess.run([sys.executable, "-m", "experiments.calibrate_cost_model", "--quick"],
                        cwd=tmp_path, capture_output=True, text=True, timeout=120,
                        env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO))
  assert proc.returncode != 0 and "--out=" in proc.stderr and "not a folder" in proc.stderr
  assert "Traceback" not in proc.stderr and "compile" not in proc.stderr, proc.stderr[-2000:]
