"""The learned-placer comparison (experiments/placer_comparison.py, issue 14 part 3): reading
anytime curves, the claims' arithmetic on hand-made cells, config checks, and a tiny end-to-end
run with Placeto and HDP that resumes and shares its folder between two shards."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from experiments import placer_comparison as pc
from experiments import placer_report as pr
from experiments.configs import learned_placers, pretrain
from go_jax import methods

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_anytime_curve_keeps_the_improvements_in_time_order():
  points = [{"seconds": 5.0, "best_objective": 3.0}, {"seconds": 1.0, "objective": 4.0},
            {"seconds": 2.0, "best_objective": 4.5}, {"seconds": 9.0, "best_objective": 3.0},
            {"seconds": 7.0, "best_objective": 2.5}, {"stage": "no time", "objective": 1.0}]
  assert methods.anytime_curve(points, offset=0.5) == [
      {"seconds": 1.5, "best_objective": 4.0}, {"seconds": 5.5, "best_objective": 3.0},
      {"seconds": 7.5, "best_objective": 2.5}]
  assert methods.anytime_curve([]) == []


def _learned(curve, objective, budget=10.0, zero_shot=None, ub=100.0):
  return {"curve": curve, "objective": objective, "budget_seconds": budget, "seconds": budget,
          "upper_bound": ub, "zero_shot": zero_shot}


def _classic(objective, seconds, ub=100.0):
  return {"curve": [[seconds, objective]], "objective": objective, "budget_seconds": None,
          "seconds": seconds, "upper_bound": ub}


def test_value_at_reads_the_curve_and_classic_times():
  row = _learned([[3.0, 9.0], [6.0, 5.0]], 5.0)
  assert pr.value_at(row, 2.0) is None  # no answer yet
  assert pr.value_at(row, 3.0) == 9.0 and pr.value_at(row, 7.0) == 5.0
  assert pr.value_at(row, 11.0) is None  # not run that long
  assert pr.time_to(row, 6.0) == 6.0 and pr.time_to(row, 4.0) is None
  assert pr.within_seconds(row, 0.05) == 6.0
  assert pr.within_seconds(_learned([[3.0, 5.2], [6.0, 5.0]], 5.0), 0.05) == 3.0
  heft = _classic(7.0, 2.5)
  assert pr.value_at(heft, 2.0) is None and pr.value_at(heft, 600.0) == 7.0
  assert pr.value_at({"error": "boom"}, 5.0) is None
  assert pr.feasible_value(row, 99.0) and not pr.feasible_value(row, 100.0)


def _cfg(**kw):
  cfg = {"graphs": ["g1", "g2"], "topologies": ["t"], "families": {"g1": "A", "g2": "B"},
         "seen": {"placeto": ["g2"]}, "go": "go", "placeto": "placeto", "hdp": "hdp",
         "classic": ["heft"], "learned": ["go", "placeto", "hdp"], "reference": "heft",
         "seconds": [5.0, 10.0], "compare_at": 10.0, "within": 0.05}
  cfg.update(kw)
  return cfg


def _cells():
  k = pc.cell_key
  return {
      k("g1", "t", "heft"): _classic(10.0, 1.0),
      k("g1", "t", "go"): _learned([[1.0, 12.0], [2.0, 8.0]], 8.0),
      k("g1", "t", "placeto"): _learned([[1.0, 8.5], [4.0, 8.0]], 8.0, zero_shot=8.5),
      k("g1", "t", "hdp"): _learned([[6.0, 9.0], [9.0, 8.4]], 8.4),
      k("g2", "t", "heft"): _classic(20.0, 1.0),
      k("g2", "t", "go"): _learned([[1.0, 150.0], [8.0, 30.0]], 30.0),  # OOM, then fits
      k("g2", "t", "placeto"): _learned([[1.0, 25.0]], 25.0, zero_shot=25.0),
      k("g2", "t", "hdp"): _learned([[2.0, 22.0]], 22.0),
  }


def test_claims_compare_at_equal_time_and_per_family():
  cfg, cells = _cfg(), _cells()
  early = pr.compare(cells, cfg, "placeto", "hdp", 5.0)
  # g1: HDP has no answer at 5 s, Placeto does; g2: both feasible, HDP lower
  assert [r["ahead"] for r in early["per_instance"]] == ["placeto", "hdp"]
  assert early["all"]["gmean_ratio"] == pytest.approx(25.0 / 22.0)
  go = pr.compare(cells, cfg, "go", "hdp", 10.0)
  assert go["families"]["A"]["gmean_ratio"] == pytest.approx(8.0 / 8.4)
  assert go["families"]["A"]["a_ahead"] == 1 and go["families"]["B"]["b_ahead"] == 1
  oom = pr.compare(cells, cfg, "go", "hdp", 5.0)  # GO out of memory on g2 at 5 s
  assert oom["per_instance"][1]["ahead"] == "hdp" and oom["per_instance"][1]["ratio"] is None
  claim = pr.placeto_claim(cells, cfg)  # g2 is a graph Placeto trained on: skipped
  assert claim["instances"] == 1 and claim["holds"] == 1
  assert claim["per_instance"][0]["ratio"] == pytest.approx(8.5 / 8.0)
  conv = pr.convergence_claim(cells, cfg)
  g1, g2 = conv["per_instance"]
  assert g1["hdp_seconds"] == 9.0 and g1["go_seconds"] == 2.0 and g1["speedup"] == 4.5
  assert g2["go_seconds"] is None and g2["speedup"] is None  # GO never reached 22
  assert conv["reached"] == 1 and conv["at_least_15x"] == 0
  table = pr.summarize(cfg, cells)
  assert table["at"]["5"][pc.cell_key("g1", "t", "")] == {
      "heft": "x1.000", "go": "x0.800", "placeto": "x0.800", "hdp": "-"}
  assert table["at"]["5"][pc.cell_key("g2", "t", "")]["go"] == "OOM"
  over = table["overview"]["10"]
  assert over["go"]["gmean_to_reference"] == pytest.approx((0.8 * 1.5) ** 0.5)
  assert over["go"]["ahead_of_best_classic"] == 1 and over["go"]["instances"] == 2
  over5 = table["overview"]["5"]["go"]  # out of memory on g2 at 5 s: not counted
  assert over5["instances"] == 1 and over5["missing"] == 1
  text = pr.markdown(cfg, table)
  assert "within 10% on 1 of 1" in text and "go vs hdp after 10 s" in text
  assert "x1.250*" in text  # Placeto trained on g2: starred


def test_ratios_fall_back_to_the_best_feasible_classic_where_the_reference_is_oom(tmp_path):
  cfg = _cfg(classic=["heft", "metis", "brkga"])
  cells = _cells()
  k = pc.cell_key
  cells[k("g1", "t", "heft")] = _classic(150.0, 1.0)  # over the upper bound 100: out of memory
  cells[k("g1", "t", "metis")] = _classic(16.0, 1.0)
  cells[k("g1", "t", "brkga")] = _classic(12.0, 3.0)
  cells[k("g2", "t", "metis")] = _classic(25.0, 1.0)
  cells[k("g2", "t", "brkga")] = {"error": "boom"}
  assert pr.scale(cells, cfg, "g1", "t") == (12.0, "brkga")
  assert pr.scale(cells, cfg, "g2", "t") == (20.0, "heft")
  table = pr.summarize(cfg, cells)
  g1 = table["at"]["10"][k("g1", "t", "")]
  assert g1["heft"] == "OOM" and g1["brkga"] == "x1.000" and g1["go"] == f"x{8 / 12:.3f}"
  assert table["scaled_by"] == {k("g1", "t", ""): "brkga"}
  # g1 counts against the best classic, not against HEFT; g2 (a classic cell failed) not at all
  over = table["overview"]["10"]["go"]
  assert over["instances"] == 1 and over["reference_oom"] == 1 and over["missing"] == 0
  assert over["gmean_to_best_classic"] == pytest.approx(8 / 12)
  assert over["gmean_to_reference"] is None and over["ahead_of_best_classic"] == 1
  text = pr.markdown(cfg, table)
  assert "| g1 | t (/ brkga's) |" in text and "| g2 | t |" in text
  assert "heft OOM on 1" in text
  # the plot divides by the same numbers (it is written; its axes are not read back here)
  assert os.path.isfile(pr.plot(cfg, cells, str(tmp_path / "c.png")))


@pytest.mark.parametrize("field,value,match", [
    ("learned", ("heft",), "distinct method names"),
    ("learned", ("brkga",), "no time option"),
    ("reference", "go", "not in config.classic"),
    ("shard", "2/2", "config.shard"),
    ("seconds", (0.0,), "search times > 0"),
    ("budgets", {"nope": 3}, "not a method of the config"),
    ("method_options", {"heft": {"nope": 1}}, r"method_options.heft: no option\(s\) \['nope'\]"),
    ("classic", ("heft", "nope"), r"config.classic: unknown method\(s\) \['nope'\]"),
    ("graphs", ("chain:n=6", "chain: n=6"), r"config: graphs\[0\] .* are the same graph"),
    ("topologies", ("nvlink2", "nvlink2@mem=1.0x", " nvlink2 "), "are the same topology"),
])
def test_bad_config_fields_are_named(field, value, match):
  cfg = learned_placers.get_config("tiny")
  cfg[field] = value
  with pytest.raises(ValueError, match=match):
    pc.as_settings(cfg)


@pytest.mark.parametrize("seed", [-1, 1.5, True, 2**32])
def test_a_bad_seed_is_refused_before_any_cell(seed):
  """The seed went to every cell's methods.solve as int(seed): 1.5 and True ran as seed 1, and
  2**32 failed every cell (it is above methods.MAX_SEED, where it would be seed 0's answer)."""
  cfg = dict(learned_placers.get_config("tiny").to_dict(), seed=seed)
  with pytest.raises(ValueError, match=r"config: seed must be an integer in \[0, 2147483647\]"):
    pc.as_settings(cfg)


def test_a_numpy_integer_seed_is_taken_as_the_int_it_is():
  """methods.solve takes NumPy integers; the sweep configs' one seed rule did not."""
  got = methods.check_seed(np.int64(3), "config")
  assert got == 3 and type(got) is int
  with pytest.raises(ValueError, match="config: seed must be an integer"):
    methods.check_seed(np.int64(2**32), "config")


def test_a_classic_method_missing_its_extra_is_skipped_unless_it_is_the_reference(
    monkeypatch, capsys):
  """As every sweep does (docs/design.md section 8): metis without pymetis is dropped with a
  warning, its options and budget kept aside; as the reference it stops the run."""
  from go_jax import methods  # pylint: disable=g-import-not-at-top
  real = methods.usable
  def without_metis(names, what="methods"):
    got, skipped = real([n for n in names if n != "metis"], what)
    return got, dict(skipped, **({"metis": "pip install pymetis"} if "metis" in names else {}))
  monkeypatch.setattr(methods, "usable", without_metis)
  cfg = learned_placers.get_config("tiny")
  cfg.classic = ("heft", "metis", "random")
  cfg.method_options = {"metis": {}}
  got = pc.as_settings(cfg)
  assert got["classic"] == ["heft", "random"] and "skipping method metis" in capsys.readouterr().err
  cfg.reference = "metis"
  with pytest.raises(ValueError, match="config.reference='metis' is not available here: pip"):
    pc.as_settings(cfg)


def test_configs_mark_the_graphs_each_checkpoint_trained_on():
  full = pc.as_settings(learned_placers.get_config())
  assert full["seconds"] == [30.0, 120.0, 600.0] and full["compare_at"] == 120.0
  assert set(full["learned"]) == {"go", "gdp", "placeto", "hdp"}
  assert full["seen"]["go"] == ["pipedream:gnmt_large"]
  assert set(full["seen"]["placeto"]) == {"pipedream:resnet50", "pipedream:inception_v3"}
  assert set(full["families"]) == set(full["graphs"])
  quick = pc.as_settings(learned_placers.get_config("quick"))
  assert len({quick["families"][g] for g in quick["graphs"]}) == len(quick["graphs"])
  heldout = pc.as_settings(learned_placers.get_config("heldout"))
  assert heldout["topologies"] == quick["topologies"] and heldout["seconds"] == quick["seconds"]
  assert not set(heldout["graphs"]) & set(quick["graphs"])
  # quick + heldout cover every held-out graph of the transfer benchmark, none seen in training
  assert set(pretrain.HELD_OUT) <= set(quick["graphs"]) | set(heldout["graphs"])
  assert not heldout["seen"]["go"] and heldout["seen"]["placeto"] == ["pipedream:resnet50"]
  with pytest.raises(ValueError, match="unknown argument"):
    learned_placers.get_config("huge")


def test_tiny_run_shards_resumes_and_reports(tmp_path):
  cfg = learned_placers.get_config("tiny")
  cfg.graphs = cfg.graphs[:1]
  logs = []
  first = pc.run_comparison(dict(cfg.to_dict(), shard="0/2"), str(tmp_path), log=logs.append)
  second = pc.run_comparison(dict(cfg.to_dict(), shard="1/2"), str(tmp_path), log=logs.append)
  assert first["computed"] == 2 and second["computed"] == 2  # heft, placeto | random, hdp
  with open(tmp_path / pc.JSON_NAME) as fh:
    data = json.load(fh)
  assert len(data["cells"]) == 4  # both shards' cells in the one file
  graph = cfg.graphs[0]
  for m in ("placeto", "hdp"):
    row = data["cells"][pc.cell_key(graph, "nvlink2", m)]
    assert row["budget_seconds"] == 4.0 and row["curve"]
    times = [s for s, _ in row["curve"]]
    values = [v for _, v in row["curve"]]
    assert times == sorted(times) and values == sorted(values, reverse=True)
    assert row["objective"] == pytest.approx(min(values), rel=1e-5)
  assert data["cells"][pc.cell_key(graph, "nvlink2", "placeto")]["zero_shot"] is not None
  assert os.path.isfile(tmp_path / pc.PLOT_NAME) and os.path.isfile(tmp_path / pc.MD_NAME)
  again = pc.run_comparison(cfg.to_dict(), str(tmp_path), log=logs.append)
  assert again["computed"] == 0 and again["skipped"] == 4
  assert "placeto vs hdp" in again["markdown"]
  other = dict(cfg.to_dict(), objective="peak_memory")
  with pytest.raises(ValueError, match="other settings"):
    pc.run_comparison(other, str(tmp_path), log=logs.append)


def test_launcher_bad_config_is_one_line(tmp_path):
  # One launcher run (a subprocess costs seconds); test_bad_config_fields_are_named covers the
  # fields themselves.
  proc = subprocess.run(
      [sys.executable, "-m", "experiments.learned_placers",
       "--config=experiments/configs/learned_placers.py:tiny", "--config.shard=2/2",
       f"--out={tmp_path / 'out'}"], cwd=REPO, capture_output=True, text=True,
      env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=120)
  assert proc.returncode != 0
  err = proc.stderr.strip().splitlines()
  assert len(err) == 1 and "Traceback" not in proc.stderr, proc.stderr
  assert "learned_placers.py" in err[0] and "config.shard" in err[0], err[0]
  assert not os.path.exists(tmp_path / "out" / pc.JSON_NAME)


def test_a_learned_cell_run_with_another_budget_runs_again():
  """A longer run's final answer is not the shorter budget's (its report was mislabelled)."""
  cfg = {"learned": ["placeto"], "seconds": [1.0, 3.0]}
  row = lambda budget: {"objective": 1.0, "budget_seconds": budget}
  assert pc._pending(cfg, row(4.0), "placeto") and pc._pending(cfg, row(2.0), "placeto")
  assert not pc._pending(cfg, row(3.0), "placeto")
  assert not pc._pending(cfg, row(None), "heft")  # classic methods run to completion once
  assert pc._pending(cfg, None, "heft") and pc._pending(cfg, {"error": "x"}, "heft")


def test_convergence_claim_counts_go_at_zero_seconds_and_plot_skips_an_empty_curve(tmp_path):
  """GO at HDP's final objective from its first answer at 0.0 s has reached it (the ratio has
  no bound: no speedup number, counted at least 15x); both at 0 s is a ratio of 1; a learned
  cell with an empty curve draws nothing (was an IndexError)."""
  cfg, cells = _cfg(), _cells()
  k = pc.cell_key
  cells[k("g1", "t", "go")] = _learned([[0.0, 8.0]], 8.0)
  cells[k("g2", "t", "go")] = _learned([[0.0, 22.0]], 22.0)
  cells[k("g2", "t", "hdp")] = _learned([[0.0, 22.0]], 22.0)
  conv = pr.convergence_claim(cells, cfg)
  g1, g2 = conv["per_instance"]
  assert g1["go_seconds"] == 0.0 and g1["reached"] and g1["speedup"] is None
  assert g2["reached"] and g2["speedup"] == 1.0
  assert conv["reached"] == 2 and conv["at_least_15x"] == 1 and conv["gmean_speedup"] == 1.0
  cells[k("g1", "t", "placeto")] = _learned([], 8.0)
  assert os.path.isfile(pr.plot(cfg, cells, str(tmp_path / "c.png")))


@pytest.mark.parametrize("damage, match", [
    (lambda c: "x", "is not an object"),
    (lambda c: dict(c, objective="x"), "field 'objective' is not a finite number"),
    (lambda c: {k: v for k, v in c.items() if k != "seconds"}, "field 'seconds' is missing"),
    (lambda c: dict(c, curve=None), "field 'curve' is not what an earlier run writes"),
    (lambda c: dict(c, curve=[[1.0, "a"]]), "field 'curve'"),
    (lambda c: dict(c, zero_shot="x"), "field 'zero_shot'"),
])
def test_a_damaged_cell_of_the_results_file_is_refused_naming_it(tmp_path, damage, match):
  """A hand-edited or damaged learned_placers.json stops the run before any cell with the
  file, cell and field (it was a traceback from the report: TypeError, KeyError)."""
  cfg = pc.as_settings(dict(learned_placers.get_config("tiny").to_dict(), learned=[]))
  good = {"objective": 1.0, "feasible": True, "seconds": 0.5, "upper_bound": 9.0,
          "budget_seconds": None, "zero_shot": None, "curve": [[0.5, 1.0]]}
  key = pc.cell_key(cfg["graphs"][0], cfg["topologies"][0], "heft")
  path = tmp_path / pc.JSON_NAME
  path.write_text(json.dumps({"launcher": pc.LAUNCHER, "cells": {key: damage(good)},
                              "settings": {k: cfg[k] for k in pc.SETTINGS}}))
  where = re.escape(f"{pc.JSON_NAME}: cell '{key}' ")
  with pytest.raises(pc.ResultsFileError, match=where + match):
    pc.run_comparison(cfg, str(tmp_path), log=lambda s: None)
  # a shard sharing the folder that finds it damaged mid-run says so too
  with pytest.raises(pc.ResultsFileError, match=match):
    pc._locked_merge(str(path), {"cells": {}}, [])
  path.write_text("{")
  with pytest.raises(pc.ResultsFileError, match="not a readable results JSON"):
    pc._locked_merge(str(path), {"cells": {}}, [])
