"""REGAL's table launcher (experiments/regal_table.py): a tiny table end to end, its numbers, the
resume, the plot, and bad input as one line."""

import json
import os
import subprocess
import sys

import ml_collections
import pytest

from experiments import regal_comparison as regal_table
from experiments.configs import regal_table as table_config
from go_jax import methods
from simulator import sources, topology_spec

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPHS = "regal:n=24,seed=1;regal:n=28,seed=2;regal:n=32,seed=3"  # one padded shape: one compile


def tiny_config():
  config = table_config.get_config()
  config.methods = ("brkga", "gp_dfs", "xla_memory")
  config.datasets = ml_collections.ConfigDict({"tiny": GRAPHS})
  config.device_counts = (2,)
  config.budget = 50
  config.method_options = ml_collections.ConfigDict({"brkga": {"population": 16}})
  return config


@pytest.fixture(scope="module")
def table(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("regal_table"))
  lines = []
  result = regal_table.run_table(tiny_config(), out, log=lines.append)
  return out, result, lines


def test_shipped_config_is_valid():
  cfg = regal_table.as_settings(table_config.get_config())
  assert cfg["reference"] == "brkga" and cfg["budget"] == 5000
  assert cfg["objective"] == "peak_memory" and list(cfg["device_counts"]) == [2, 4, 8]
  assert set(cfg["methods"]) == {"brkga", "brkga_tuned", "gp_dfs", "local_search", "cpsat",
                                 "gas", "xla_memory", "regal", "regal_hint"}
  # reproducible CP-SAT: a deterministic-time budget, no wall-clock limit (which made the
  # answer depend on the machine's load), 2 workers in CP-SAT's interleaved search
  cpsat = cfg["method_options"]["cpsat"]
  assert cpsat["time_limit_s"] is None and cpsat["deterministic_time"] > 0


def test_config_refuses_mislabelled_and_repeated_instances():
  """A topology whose device count is not the table's D, a repeated count or seed, a seed that
  is not an integer in [0, methods.MAX_SEED]."""
  for field, value, match in (("topology", "nvlink4", "'nvlink4' has 4 devices, not the 2"),
                              ("topology", "nvlink", "unknown preset 'nvlink'"),
                              ("device_counts", (2, 2), "a count is given twice"),
                              ("seeds", (0, 0), "give distinct seeds"),
                              # before, only int(x) < 0 was refused: 2**32 ran as seed 0 again
                              ("seeds", (0, 2**32), r"seeds\[1\]: seed must be an integer"),
                              ("seeds", (1.5,), r"seeds\[0\]: seed must be an integer"),
                              ("seeds", (True,), r"seeds\[0\]: seed must be an integer")):
    config = tiny_config()
    setattr(config, field, value)
    with pytest.raises(ValueError, match=match):
      regal_table.as_settings(config)


def test_table_numbers(table):
  out, result, lines = table
  assert result["computed"] == 9 and result["skipped"] == 0
  assert any("ETA" in line and "cells/min" in line for line in lines)
  block = result["table"]["tiny"]["2"]
  assert block["graphs"] == 3 and len(block["instances"]) == 3
  summary = block["methods"]
  assert summary["brkga"]["mean_improvement"] == 0.0
  assert summary["brkga"]["wins"] == summary["brkga"]["losses"] == 0
  for inst in block["instances"]:
    assert inst["improvement"]["brkga"] == 0.0
    assert min(inst["gap"].values()) == 0.0
    assert all(g >= 0.0 for g in inst["gap"].values())
    for m in inst["best_methods"]:
      assert inst["gap"][m] == 0.0 and inst["objective"][m] == inst["best"]
  for m, s in summary.items():
    assert s["graphs"] == 3 and s["errors"] == 0, (m, s)
    assert s["mean_gap"] >= 0.0 and s["mean_seconds"] >= 0.0
  assert "% gap from best" in result["markdown"] and "| xla_memory |" in result["markdown"]
  with open(os.path.join(out, regal_table.MD_NAME)) as fh:
    assert fh.read() == result["markdown"]


def test_every_objective_resimulates(table):
  out, _, _ = table
  with open(os.path.join(out, regal_table.JSON_NAME)) as fh:
    saved = json.load(fh)
  graphs = {s: sources.load_graph(s) for s in GRAPHS.split(";")}
  assert len(saved["cells"]) == 9
  for row in saved["cells"].values():
    assert row["agrees"], row["method"]
    g = graphs[row["graph"]]
    topo = topology_spec.make_topology(topology_spec.parse_topology("nvlink2"), g)[0]
    again = methods.evaluate(g, topo, row["placement"], row["priority"], "peak_memory")
    assert again["objective"] == row["objective"], row["method"]


def test_plot_written(table):
  out, result, _ = table
  path = os.path.join(out, regal_table.PLOT_NAME)
  assert result["plot"] == path and os.path.getsize(path) > 1000


def test_resume_does_not_recompute(table, monkeypatch):
  out, first, _ = table

  def boom(*args, **kwargs):
    raise AssertionError("a finished cell was solved again")

  monkeypatch.setattr(methods, "solve", boom)
  again = regal_table.run_table(tiny_config(), out, log=lambda s: None)
  assert again["computed"] == 0 and again["skipped"] == 9
  assert again["table"]["tiny"]["2"]["methods"] == first["table"]["tiny"]["2"]["methods"]
  other = tiny_config()
  other.budget = 60  # another budget: the old cells would be wrong, so the folder is refused
  with pytest.raises(ValueError, match="other settings"):
    regal_table.run_table(other, out, log=lambda s: None)


def test_missing_dataset(tmp_path):
  config = tiny_config()
  config.datasets = ml_collections.ConfigDict(
      {"synthetic": f"regal_data:test,dir={tmp_path}/nowhere"})
  with pytest.raises(ValueError, match="dataset 'synthetic'.*no dataset manifest"):
    regal_table.run_table(config, str(tmp_path / "out"), log=lambda s: None)


def test_bad_input_is_one_line(tmp_path):
  bad = tmp_path / "bad.py"
  bad.write_text("from experiments.configs import regal_table\n"
                 "def get_config():\n"
                 "  c = regal_table.get_config()\n"
                 "  c.methods = ('brkga', 'no_such_method')\n"
                 "  return c\n")
  proc = subprocess.run([sys.executable, "-m", "experiments.regal_table", f"--config={bad}",
                         f"--out={tmp_path / 'out'}"], cwd=REPO, capture_output=True,
                        text=True, env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=120)
  assert proc.returncode != 0
  err = proc.stderr.strip().splitlines()
  assert len(err) == 1 and "Traceback" not in proc.stderr, proc.stderr
  assert "error:" in err[0] and "no_such_method" in err[0]


def test_config_refuses_other_kinds_and_a_budget_below_one_generation():
  for field, value, match in (
      ("methods", ("brkga", "tofu"), "config.methods: 'tofu' is a partition method"),
      ("methods", ("brkga", "go_fusion"), "config.methods: 'go_fusion' is a fusion method"),
      ("method_options", {}, r"config.budget=50 is below one generation of brkga \(80"),
      ("budget", None, None)):
    config = tiny_config()
    setattr(config, field, ml_collections.ConfigDict(value) if isinstance(value, dict)
            else value)
    if match is None:  # no budget: brkga's evaluations option must hold a generation
      config.method_options.brkga.evaluations = 10
      match = r"config.method_options.brkga.evaluations=10 is below one generation \(13"
    with pytest.raises(ValueError, match=match):
      regal_table.as_settings(config)
  regal_table.as_settings(tiny_config())  # population 16: 13 per generation, budget 50 holds


def _fake_cells(monkeypatch, fail):
  def solve(cfg, method, graph, topo, seed):
    if method in fail:
      raise ValueError(f"{method} failed")
    return {"objective": 2.0 + seed, "seconds": 0.01, "feasible": True, "evaluations": 1}
  monkeypatch.setattr(regal_table, "solve_cell", solve)
  config = tiny_config()
  config.methods = ("brkga", "gp_dfs")
  config.datasets = ml_collections.ConfigDict({"one": "regal:n=20,seed=1"})
  config.plots = False
  return config


def test_a_reference_with_no_answer_fails_the_run(monkeypatch, tmp_path):
  config = _fake_cells(monkeypatch, fail=("brkga",))
  with pytest.raises(regal_table.ReferenceFailed,
                     match="config.reference='brkga' has no answer on any of its 1 cells.*"
                           "brkga failed"):
    regal_table.run_table(config, str(tmp_path), log=lambda s: None)
  assert os.path.exists(tmp_path / regal_table.JSON_NAME)  # the cells are kept
  config = _fake_cells(monkeypatch, fail=())  # the resume reruns the reference's cell only
  result = regal_table.run_table(config, str(tmp_path), log=lambda s: None)
  assert result["computed"] == 1 and result["skipped"] == 1


def test_a_second_run_into_the_same_folder_is_refused_while_the_first_writes(monkeypatch,
                                                                            tmp_path):
  from go_jax import results  # pylint: disable=g-import-not-at-top
  config = _fake_cells(monkeypatch, fail=())
  with results.sole_writer(str(tmp_path), "another regal_table"):  # a run in progress there
    with pytest.raises(results.StoreError, match="another run of regal_table is writing"):
      regal_table.run_table(config, str(tmp_path), log=lambda s: None)
  assert not os.path.exists(tmp_path / regal_table.JSON_NAME)
  assert regal_table.run_table(config, str(tmp_path), log=lambda s: None)["computed"] == 2


def test_bad_cells_are_refused_on_load_naming_file_cell_and_field(monkeypatch, tmp_path):
  config = _fake_cells(monkeypatch, fail=())
  regal_table.run_table(config, str(tmp_path), log=lambda s: None)
  path = tmp_path / regal_table.JSON_NAME
  good = json.loads(path.read_text())
  key = next(iter(good["cells"]))
  for cell, want in (("text", "is not an object"), ({"seconds": 1.0}, "'objective' is missing"),
                     (dict(good["cells"][key], objective=float("nan")),
                      "'objective' is not a finite number: nan"),
                     (dict(good["cells"][key], feasible="yes"), "'feasible' is not true/false"),
                     ({"error": 3}, "'error' is not text")):
    path.write_text(json.dumps(dict(good, cells=dict(good["cells"], **{key: cell}))))
    with pytest.raises(regal_table.ResultsFileError,
                       match=f"{path}: cell '{key}' .*{want}"):
      regal_table.run_table(config, str(tmp_path), log=lambda s: None)
  from absl import app  # pylint: disable=g-import-not-at-top
  from experiments import cli  # pylint: disable=g-import-not-at-top

  def run_fn(*args, **kwargs):
    raise regal_table.ResultsFileError(f"{path}: cell 'k' field 'objective' is missing")
  with pytest.raises(app.UsageError) as e:  # not blamed on the config
    cli.run_resumable_table(run_fn, None, "cfg.py", str(tmp_path), "a.json", "a.md")
  assert "cfg.py" not in str(e.value) and str(e.value).startswith(str(path))
