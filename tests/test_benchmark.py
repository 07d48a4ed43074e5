"""The simulator benchmark: measurement helpers and the launcher end to end on tiny sizes."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from simulator import benchmark, preset
from simulator.sources import load_graph

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py


def test_measurements_are_consistent():
  g, topo = load_graph("layered:n=30,width=5,seed=1"), preset("nvlink4")
  ref = benchmark.time_reference(g, topo, samples=3)
  sim = benchmark.time_simulate(g, topo, batch=3, repeats=1)
  assert ref["samples"] == 3 and ref["placements_per_s"] > 0
  assert sim["batch"] == 3 and sim["compile_s"] > 0 and sim["placements_per_s"] > 0
  # Same seed, same actions: both simulators report the same makespans.
  np.testing.assert_allclose(sim["makespans"], ref["makespans"], rtol=1e-5)
  assert sim["padded_nodes"] == 32 and sim["loop_iterations"] >= 30


def test_profile_lists_xla_ops():
  g, topo = load_graph("chain:n=10"), preset("nvlink2")
  top = benchmark.profile_simulate(g, topo, batch=2, top=5)
  assert 0 < len(top) <= 5 and all(t["ms"] >= 0 and t["calls"] >= 1 for t in top)


def test_launcher_end_to_end(tmp_path):
  """Runs the launcher as a user would (its absl flags stay out of the test process)."""
  out = tmp_path / "bench.json"
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run(
      [sys.executable, "-m", "experiments.bench_simulator", "--sizes=20", "--batches=2",
       "--ref_samples=2", "--repeats=1", "--topology=nvlink2", f"--out={out}"],
      cwd=repo, capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  payload = json.loads(out.read_text())
  rows = payload["rows"]
  assert rows[0]["method"] == "reference"
  assert all(r["method"] == "simulate" and r["speedup"] > 0 for r in rows[1:])
  # --devices defaults to 1 and one CPU device per core, each cell in its own process.
  assert {r["devices"] for r in rows[1:]} == {1, os.cpu_count()}
  assert "placements/s" in proc.stdout


def test_launcher_pinned_to_one_core(tmp_path):
  """--pin_core runs the reference and simulate cells on that one core, devices 1."""
  out = tmp_path / "bench.json"
  core = min(os.sched_getaffinity(0))
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run(
      [sys.executable, "-m", "experiments.bench_simulator", "--sizes=20", "--batches=2",
       "--ref_samples=2", "--repeats=1", "--topology=nvlink2", f"--pin_core={core}",
       "--graph=layered:n=12,width=4,seed=0", f"--out={out}"], cwd=repo, capture_output=True,
      text=True, timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  payload = json.loads(out.read_text())
  assert {r["n"] for r in payload["rows"]} == {12}  # the graph's size, not --sizes
  assert payload["pin_core"] == core
  assert [r["method"] for r in payload["rows"]] == ["reference", "simulate"]
  assert all(r["cpus"] == [core] for r in payload["rows"])
  assert payload["rows"][1]["devices"] == 1
  assert "single-core ratio" in proc.stdout


def test_launcher_refuses_a_bad_graph_template(tmp_path):
  """A --graph without {n} for several sizes, or one that is no graph spec, stops with one
  line before any cell runs."""
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  for flag, words in (("--graph=layered:n=10,seed=0", "has no {n}"),
                      ("--graph=nosuch:n={n}", "unknown graph spec kind")):
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.bench_simulator", "--sizes=10,20", flag,
         f"--out={tmp_path / 'b.json'}"], cwd=repo, capture_output=True, text=True,
        timeout=120, check=False)
    assert proc.returncode != 0 and words in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not (tmp_path / "b.json").exists()


def _bench(args, tmp_path, timeout=120):
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  return subprocess.run([sys.executable, "-m", "experiments.bench_simulator", *args],
                        cwd=repo, capture_output=True, text=True, timeout=timeout, check=False)


def test_launcher_refuses_another_launchers_out_and_repeated_values(tmp_path):
  """--out holding another launcher's results (or any non-result file) is refused naming
  --out, before any cell, and the file is kept; a value given twice in --sizes or --batches
  (each cell would run twice) is refused naming the flag."""
  other = tmp_path / "zoo.json"
  other.write_text('{"launcher": "zoo_table", "cells": {"mlp/pre": {}}}')
  for path in (other, tmp_path / "notes.txt"):
    if path.suffix == ".txt":
      path.write_text("my notes")
    before = path.read_text()
    proc = _bench(["--sizes=10", "--batches=1", f"--out={path}"], tmp_path)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and f"--out={path}" in last, proc.stderr[-2000:]
    assert path.read_text() == before
  for flag, value in (("--sizes=10,10", "(10)"), ("--batches=1,2,1", "(1)")):
    proc = _bench([flag, f"--out={tmp_path / 'b.json'}"], tmp_path)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and f"{flag}: a value is given twice {value}" in last, last


def test_launcher_sigterm_ends_the_running_cell_at_once(tmp_path):
  """SIGTERM while a cell's worker runs: the worker is ended and the launcher exits 130
  promptly, instead of waiting for the cell."""
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.Popen(
      [sys.executable, "-m", "experiments.bench_simulator", "--sizes=4000", "--batches=1",
       "--devices=1", "--ref_samples=100000", f"--out={tmp_path / 'b.json'}"],
      cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  children = f"/proc/{proc.pid}/task/{proc.pid}/children"
  deadline = time.monotonic() + 120
  workers = []
  while time.monotonic() < deadline and proc.poll() is None:
    with open(children, encoding="utf-8") as fh:
      workers = [int(p) for p in fh.read().split()]
    if workers:  # the cell's worker (and spawn's resource tracker) started
      break
    time.sleep(0.2)
  assert workers and proc.poll() is None, proc.communicate()
  time.sleep(3)  # the worker is in its cell
  t0 = time.monotonic()
  proc.send_signal(signal.SIGTERM)
  _, err = proc.communicate(timeout=60)
  assert proc.returncode == 130 and "interrupted" in err, err[-2000:]
  assert time.monotonic() - t0 < 30
  time.sleep(1)
  for pid in workers:  # gone (or a zombie awaiting its reaper)
    try:
      with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
        assert fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
      pass
