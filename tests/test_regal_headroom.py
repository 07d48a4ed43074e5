"""The headroom experiment (experiments/headroom.py, experiments/regal_headroom.py): its
numbers against the cells, the resume, and bad input as one line."""

import os
import subprocess
import sys

import numpy as np
import pytest

from go_jax import methods
from experiments import headroom
from simulator import preset, sources

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPECS = ["regal:n=24,seed=1", "regal:n=28,seed=2", "regal:n=32,seed=3"]  # one padded shape
ROWS = [("brkga", 100), ("brkga", 400), ("gp_dfs", 100)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("headroom"))
  graphs = [sources.load_graph(s) for s in SPECS]
  lines = []
  result = headroom.run(graphs, SPECS, "nvlink2", ROWS, out, log=lines.append)
  return out, graphs, result, lines


def test_numbers_match_the_cells(run):
  out, graphs, result, lines = run
  assert any("ETA" in line for line in lines)
  summary = result["summary"]
  assert summary["instances"] == 3 and summary["reference"] == "brkga@100"
  cells = result["cells"]
  obj = {lab: np.asarray([cells[headroom.cell_key(s, 0, lab)]["objective"] for s in SPECS])
         for lab in ("brkga@100", "brkga@400", "gp_dfs@100")}
  ref = obj["brkga@100"]
  best = np.minimum(np.minimum(ref, obj["brkga@400"]), obj["gp_dfs@100"])
  assert summary["best_known_improvement"] == pytest.approx(np.mean(100 * (ref - best) / ref))
  for lab, v in obj.items():
    row = summary["rows"][lab]
    imp = 100 * (ref - v) / ref
    assert row["mean_improvement"] == pytest.approx(imp.mean())
    assert row["better"] == int(np.sum(v < ref)) and row["worse"] == int(np.sum(v > ref))
    assert row["best_known_on"] == int(np.sum(v == best))
    lo, hi = row["interval"]
    assert lo <= row["mean_improvement"] + 1e-9 and row["mean_improvement"] <= hi + 1e-9
  assert summary["rows"]["brkga@100"]["mean_improvement"] == 0.0
  assert summary["rows"]["brkga@100"]["time_ratio"] == pytest.approx(1.0)
  # More evaluations, same seed and population: BRKGA keeps its elites, so never worse here.
  assert np.all(obj["brkga@400"] <= ref)
  # Every stored answer re-simulates to its objective.
  for s, g in zip(SPECS, graphs):
    cell = cells[headroom.cell_key(s, 0, "brkga@400")]
    again = methods.evaluate(g, preset("nvlink2"), cell["placement"], cell["priority"],
                             "peak_memory")
    assert again["objective"] == cell["objective"]
  with open(os.path.join(out, headroom.MD_NAME), encoding="utf-8") as fh:
    text = fh.read()
  assert "brkga@400" in text and "Best known per graph" in text


def test_resume_runs_nothing_and_other_settings_are_refused(run):
  out, graphs, result, _ = run
  lines = []
  again = headroom.run(graphs, SPECS, "nvlink2", ROWS, out, log=lines.append)
  assert "0 to run" in lines[0] and again["summary"] == result["summary"]
  with pytest.raises(ValueError, match="rows"):
    headroom.run(graphs, SPECS, "nvlink2", ROWS[:2], out, log=lines.append)


def test_a_run_that_finishes_no_cell_leaves_no_file(run, tmp_path):
  """A failing first cell (a budget below one BRKGA generation) writes nothing, so the
  corrected rerun is not refused as one 'made with other settings'; seeds are checked."""
  _, graphs, *_ = run
  out = str(tmp_path / "h")
  with pytest.raises(ValueError, match="below one generation"):
    headroom.run(graphs[:1], SPECS[:1], "nvlink2", [("brkga", 5), ("brkga", 100)], out,
                 log=lambda s: None)
  assert not os.path.exists(os.path.join(out, headroom.JSON_NAME))
  for seeds in ((0, 0), (), (-1,)):
    with pytest.raises(ValueError, match="seeds must be distinct integers >= 0"):
      headroom.run(graphs[:1], SPECS[:1], "nvlink2", ROWS, out, seeds=seeds)


def test_parse_rows():
  assert headroom.parse_rows("brkga@5000, regal_hint@5000") == [("brkga", 5000),
                                                                ("regal_hint", 5000)]
  for bad, what in (("brkga", "METHOD@BUDGET"), ("brkga@0", "METHOD@BUDGET"),
                    ("nope@10", "nope"), ("brkga@100,brkga@100", "twice"), ("", "no rows"),
                    ("brkga@100,xla_memory@100", "'xla_memory@100'.*fixed placement"),
                    ("brkga@100,tofu@100", "'tofu@100'.*expanded graph"),
                    ("go_fusion@100", "fusion method"),
                    ("brkga@100,brkga@50", "'brkga@50': budget 50 is below one generation")):
    with pytest.raises(ValueError, match=what):
      headroom.parse_rows(bad)


def test_check_seeds_refuses_non_integers():
  assert headroom.check_seeds(["0", "2"]) == [0, 2]
  with pytest.raises(ValueError, match="integers.*abc"):
    headroom.check_seeds(["0", "abc"])


def test_launcher_bad_rows_and_seeds_name_the_flag(tmp_path):
  for flag, want in (("--rows=brkga@100,xla_memory@100", "--rows: row 'xla_memory@100'"),
                     ("--seeds=0,abc", "--seeds: seeds must be integers")):
    proc = subprocess.run([sys.executable, "-m", "experiments.regal_headroom",
                           "--data=regal:n=20,seed=1", flag, f"--out={tmp_path}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 1, proc.stderr
    assert want in proc.stderr and "Traceback" not in proc.stderr
    assert not os.path.exists(os.path.join(tmp_path, headroom.JSON_NAME))


def test_launcher_bad_input_is_one_line(tmp_path):
  proc = subprocess.run([sys.executable, "-m", "experiments.regal_headroom",
                         "--rows=brkga@5000,nope@5", f"--out={tmp_path}"],
                        cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode == 1
  assert "nope" in proc.stderr and "Traceback" not in proc.stderr
  assert not os.path.exists(os.path.join(tmp_path, headroom.JSON_NAME))
