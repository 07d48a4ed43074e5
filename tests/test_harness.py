"""End-to-end tests of the evaluation harness (go_jax.harness) and its launcher.

Tiny instances only (two graphs of about a dozen ops on 2-device topologies, the simple
methods, one seed) so that everything shares one or two compiled simulators.
"""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from go_jax import executors, harness, methods, plotting, results
from simulator import sources

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPHS = ["chain:n=12,seed=0", "series_parallel:n=14,seed=0"]
TOPOLOGIES = ["nvlink2", "k80x2"]
METHODS = ["round_robin", "expert", "single"]
TIMING = ("search_seconds",)  # fields that differ between two runs of the same cell


def tiny_config(**overrides):
  cfg = dict(methods=list(METHODS), graphs=list(GRAPHS), topologies=list(TOPOLOGIES),
             seeds=[0], objective="makespan", budget=None)
  cfg.update(overrides)
  return cfg


def stable(rows):
  """Rows without their timing fields, for comparing two runs."""
  return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


class CountingSolve:
  """Wraps methods.solve: counts calls and optionally raises on call number `fail_at`."""

  def __init__(self, fail_at=None):
    self.calls, self.fail_at, self.real = 0, fail_at, methods.solve

  def __call__(self, *args, **kwargs):
    self.calls += 1
    if self.fail_at is not None and self.calls == self.fail_at:
      raise RuntimeError("injected interruption")
    return self.real(*args, **kwargs)


def copy_results(out, folder):
  """A new results folder holding a copy of `out`'s results.json (to resume from)."""
  os.makedirs(folder)
  with open(os.path.join(out, "results.json")) as src, \
       open(os.path.join(folder, "results.json"), "w") as dst:
    dst.write(src.read())
  return str(folder)


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
  """(out folder, rows) of one uninterrupted run of the tiny config."""
  out = str(tmp_path_factory.mktemp("clean"))
  rows = harness.run(tiny_config(), out, progress=False)
  return out, rows


def test_writes_tables_and_every_row_agrees(clean_run):
  out, rows = clean_run
  assert len(rows) == len(GRAPHS) * len(TOPOLOGIES) * len(METHODS)
  assert sorted(os.listdir(out)) == ["results.csv", "results.json", "results.md"]
  for r in rows:
    assert set(r) == set(results.COLUMNS)  # the one row format of every launcher
    assert r["agrees"] and r["resimulated_objective"] == r["objective"], r
    assert not r["error"] and r["feasible"]
    assert r["objective"] >= r["lower_bound"] * (1 - 1e-6)
  assert {(r["method"], r["graph"], r["topology"]) for r in rows} == {
      (m, g, t) for m in METHODS for g in GRAPHS for t in TOPOLOGIES}
  data = json.loads(open(os.path.join(out, "results.json")).read())
  assert data["rows"] == rows and data["config"]["methods"] == METHODS
  with open(os.path.join(out, "results.csv")) as fh:
    table = list(csv.DictReader(fh))
  assert [r["method"] for r in table] == [r["method"] for r in rows]
  assert tuple(table[0]) == harness.COLUMNS
  md = open(os.path.join(out, "results.md")).read()
  for g in GRAPHS:
    assert f"### {g}: makespan" in md
  # one bold best per pivot row (ties aside)
  pivot_rows = [l for l in md.splitlines() if l.startswith(("| nvlink2 |", "| k80x2 |"))]
  assert len(pivot_rows) == len(GRAPHS) * len(TOPOLOGIES)
  assert all("**" in l for l in pivot_rows)


def test_resume_skips_finished_cells(clean_run, tmp_path, monkeypatch):
  out, rows = clean_run
  resumed = copy_results(out, tmp_path / "resumed")
  counter = CountingSolve()
  monkeypatch.setattr(methods, "solve", counter)
  again = harness.run(tiny_config(), resumed, progress=False)
  assert counter.calls == 0 and again == rows
  # a new seed runs only its own cells; the old rows stay in the file, out of the report
  more = harness.run(tiny_config(seeds=[0, 1], graphs=GRAPHS[:1], topologies=TOPOLOGIES[:1]),
                     resumed, progress=False)
  assert counter.calls == len(METHODS)
  assert len(more) == 2 * len(METHODS) and {r["seed"] for r in more} == {0, 1}
  assert all(r["agrees"] for r in more)
  stored = json.loads(open(os.path.join(resumed, "results.json")).read())
  assert len(stored["rows"]) == len(rows) + len(METHODS) and stored["config"]["seeds"] == [0, 1]
  with open(os.path.join(resumed, "results.csv")) as fh:
    assert len(list(csv.DictReader(fh))) == len(more)  # the report: this config's rows
  # and back to the first config: nothing runs, the report is that config's alone
  back = harness.run(tiny_config(), resumed, progress=False)
  assert counter.calls == len(METHODS) and back == rows


def test_resume_reruns_cells_whose_settings_changed(clean_run, tmp_path, monkeypatch):
  """A finished cell is reused only with the options and budget it was made with: a changed
  budget reruns every cell, a changed option only that method's cells."""
  out, rows = clean_run
  resumed = copy_results(out, tmp_path / "resumed")
  stored = json.loads(open(os.path.join(resumed, "results.json")).read())["cell_settings"]
  assert len(stored) == len(rows)
  counter = CountingSolve()
  monkeypatch.setattr(methods, "solve", counter)
  cfg = tiny_config(graphs=GRAPHS[:1], topologies=TOPOLOGIES[:1])
  harness.run(dict(cfg, budget=7), resumed, progress=False)
  assert counter.calls == len(METHODS)
  again = harness.run(dict(cfg, budget=7), resumed, progress=False)  # now the same: reused
  assert counter.calls == len(METHODS) and len(again) == len(METHODS)  # this config's rows
  cfg = dict(cfg, methods=["random", "round_robin"])
  harness.run(dict(cfg, method_options={"random": {"samples": 4}}), resumed, progress=False)
  assert counter.calls == len(METHODS) + 2  # random is new; round_robin's budget changed back
  harness.run(dict(cfg, method_options={"random": {"samples": 5}}), resumed, progress=False)
  assert counter.calls == len(METHODS) + 3  # only random's option changed
  data = json.loads(open(os.path.join(resumed, "results.json")).read())
  key = json.dumps(["random", GRAPHS[0], TOPOLOGIES[0], 0, "makespan"])
  assert data["cell_settings"][key] == {"budget": None, "options": {"samples": 5},
                                        "schedule_placement": None}


def test_a_checkpoint_retrained_in_place_is_another_cell(tmp_path):
  """The recorded settings of a cell with a checkpoint option hold its parameters' digest, so
  a policy retrained under the same path reruns the cell on resume."""
  folder = tmp_path / "ckpt"
  assert "checkpoint_sha256" not in results.cell_record({"checkpoint": str(folder)}, None, None)
  folder.mkdir()
  (folder / "params.msgpack").write_bytes(b"first")
  first = results.cell_record({"checkpoint": str(folder)}, None, None)
  (folder / "params.msgpack").write_bytes(b"second")
  second = results.cell_record({"checkpoint": str(folder)}, None, None)
  assert first["checkpoint_sha256"] != second["checkpoint_sha256"]
  assert first["options"] == second["options"] == {"checkpoint": str(folder)}
  shipped = results.cell_record({"checkpoint": "go"}, None, None)  # a shipped name
  assert len(shipped["checkpoint_sha256"]) == 64


def test_config_refuses_repeats_and_bad_option_values():
  assert harness.settings(tiny_config(objective="makespan, peak_memory"))["objective"] == [
      "makespan", "peak_memory"]  # a string-typed config field given a list on a command line
  for bad, match in (({"graphs": GRAPHS[:1] * 2}, "graphs gives 'chain:n=12,seed=0' twice"),
                     ({"seeds": [0, 0]}, "seeds gives 0 twice"),
                     ({"topologies": ["nvlink2", "nvlink2"]}, "topologies gives"),
                     ({"method_options": {"random": 5}}, r"method_options\['random'\] must be "
                      "a dict"),
                     ({"method_options": {"random": {"x": float("inf")}}}, "give a finite")):
    with pytest.raises(ValueError, match=match):
      harness.settings(tiny_config(**bad))


def test_interrupted_run_resumes_to_the_same_rows(clean_run, tmp_path, monkeypatch):
  _, rows = clean_run
  out = str(tmp_path / "interrupted")
  k = 5
  monkeypatch.setattr(methods, "solve", CountingSolve(fail_at=k + 1))
  with pytest.raises(RuntimeError, match="injected"):
    harness.run(tiny_config(fail_fast=True), out, progress=False)
  assert len(harness.load_rows(out)) == k
  counter = CountingSolve()
  monkeypatch.setattr(methods, "solve", counter)
  final = harness.run(tiny_config(), out, progress=False)
  assert counter.calls == len(rows) - k
  assert stable(final) == stable(rows)


def test_a_second_run_into_the_same_folder_is_refused_while_the_first_writes(tmp_path):
  """Two drivers on one --out (a command started twice, a re-queued job) each rewrote
  results.json with only their own rows: the second's rows were lost. It now stops at once."""
  cfg = harness.settings(tiny_config(graphs=GRAPHS[:1], topologies=["nvlink2"]))
  cells = harness.plan(cfg)
  out = str(tmp_path / "out")
  seen = []

  class SecondRunMeanwhile:  # starts another sweep into `out` while the first runs its cells
    def run(self, task, items, on_done, before=None):
      with pytest.raises(results.StoreError, match=f"--out={out}: another run of "
                         "go-jax-evaluate is writing its results there"):
        harness.execute(cells[1:], harness.Instances(cfg), out, launcher=harness.LAUNCHER,
                        config=cfg, progress=False)
      seen.append(1)
      executors.make("local").run(task, items, on_done, before)

  harness.execute(cells[:1], harness.Instances(cfg), out, launcher=harness.LAUNCHER, config=cfg,
                  progress=False, executor=SecondRunMeanwhile())
  assert seen and len(harness.load_rows(out)) == 1
  # once the first has ended the folder is free: a rerun adds the other cells to its rows
  rows = harness.execute(cells, harness.Instances(cfg), out, launcher=harness.LAUNCHER,
                         config=cfg, progress=False)
  assert len(rows) == len(cells) == len(harness.load_rows(out))


def test_failing_method_is_an_error_row(tmp_path, monkeypatch):
  def boom(problem, config):
    raise RuntimeError("method exploded")

  monkeypatch.setitem(methods.METHODS, "boom",
                      methods.MethodSpec(boom, "placement", "always raises", {}))
  cfg = tiny_config(methods=["boom", "round_robin"], graphs=GRAPHS[:1], topologies=["nvlink2"])
  rows = harness.run(cfg, str(tmp_path / "a"), progress=False)
  assert [r["method"] for r in rows] == ["boom", "round_robin"]
  assert rows[0]["error"] == "RuntimeError: method exploded" and rows[0]["objective"] is None
  assert not rows[1]["error"] and rows[1]["agrees"]
  assert "RuntimeError: method exploded" in open(tmp_path / "a" / "results.md").read()
  with pytest.raises(RuntimeError, match="exploded") as err:
    harness.run(dict(cfg, fail_fast=True), str(tmp_path / "b"), progress=False)
  # the launcher's one line names the cell it stopped at (it said only the error's text)
  assert harness.failed_cell(err.value) == f"boom on {GRAPHS[0]} / nvlink2 (seed 0)"
  assert harness.failed_cell(RuntimeError("not a cell's")) is None


def test_launcher_fail_fast_names_the_cell_in_its_one_line(tmp_path):
  garbage = tmp_path / "garbage.npz"  # passes the config check, fails when the cell builds it
  garbage.write_bytes(b"not a zip archive")
  proc = subprocess.run(
      [sys.executable, "-m", "experiments.evaluate", "--config=experiments/configs/"
       "evaluate_test.py", "--config.methods=('random', 'brkga')", f"--config.graphs=('{garbage}',)",
       "--config.topologies=('nvlink2',)", "--config.fail_fast=True", "--noprogress",
       f"--out={tmp_path / 'ev'}"], cwd=REPO, capture_output=True, text=True, timeout=300)
  lines = [l for l in proc.stderr.splitlines() if l.strip()]
  assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-2000:]
  assert lines[0].startswith(f"evaluate.py: error: a cell failed (config.fail_fast): random on "
                             f"{garbage} / nvlink2 (seed 0): ValueError: "), lines


def test_unavailable_methods_are_skipped_and_typos_stop_the_plan(tmp_path, monkeypatch):
  """A built-in whose optional dependency is missing is skipped (the config serves installs
  without the extra); an unknown name or a graph that does not exist stops before any cell."""
  methods.available()  # the built-ins loaded, so that the entry below stays
  monkeypatch.setitem(methods._UNAVAILABLE, "optional_one", "it needs fakepkg")  # pylint: disable=protected-access
  cfg = tiny_config(methods=["round_robin", "optional_one"], graphs=GRAPHS[:1],
                    topologies=["nvlink2"])
  rows = harness.run(cfg, str(tmp_path), progress=False)
  assert [r["method"] for r in rows] == ["round_robin"]
  with pytest.raises(ValueError, match="none of the methods"):
    harness.plan(harness.settings(tiny_config(methods=["optional_one"])))
  with pytest.raises(ValueError, match=r"methods: unknown method\(s\) \['no_such_method'\]"):
    harness.plan(harness.settings(tiny_config(methods=["round_robin", "no_such_method"])))
  with pytest.raises(ValueError, match=r"harness config: seeds\[1\]: seed must be an integer "
                                       r"in \[0, 2147483647\], got -1"):
    harness.settings(tiny_config(seeds=[0, -1]))
  with pytest.raises(ValueError, match=r"seeds\[1\]: .*in \[0, 2147483647\], got 4294967296"):
    harness.settings(tiny_config(seeds=[0, 2**32]))  # seed 0's answer again (methods.MAX_SEED)
  for budget in (0, -5, 2.5, True):
    with pytest.raises(ValueError, match="budget .* must be an integer >= 1 or None"):
      harness.settings(tiny_config(budget=budget))
  for graph, what in (("pipedream:no_such_model", "unknown PipeDream model"),
                      ("zoo:bert_base,size=huge", "unknown zoo size"),
                      ("no_such_module:fn", "nor an importable module")):
    with pytest.raises(ValueError, match=f"harness config: graphs: .*{what}"):
      harness.plan(harness.settings(tiny_config(graphs=[graph])))


def test_relative_memory_makes_single_device_infeasible():
  graph = sources.load_graph(GRAPHS[1])
  spec = harness.parse_topology("nvlink2@mem=0.6x")
  assert (spec.preset, spec.mem_factor, spec.mem_bytes) == ("nvlink2", 0.6, None)
  topo, footprint = harness.make_topology(spec, graph)
  np.testing.assert_allclose(topo.mem_capacity, 0.6 * footprint)
  free = harness.make_topology(harness.parse_topology("nvlink2"), graph)[0]
  assert methods.solve("single", graph, free).feasible
  sol = methods.solve("single", graph, topo)
  assert not sol.feasible and "out of memory" in sol.reason
  topo, ref = harness.make_topology(harness.parse_topology("k80x2@mem=2e9"), graph)
  assert ref is None and np.all(topo.mem_capacity == 2e9)


def test_harness_parses_topologies_with_the_simulators_parser():
  """The spec grammar and its errors live in simulator.topology_spec (tested in
  tests/test_topology_files.py); the harness uses that one parser."""
  from simulator import topology_spec  # pylint: disable=g-import-not-at-top
  assert harness.parse_topology is topology_spec.parse_topology
  with pytest.raises(ValueError, match="unknown preset 'nope'"):
    harness.parse_topology("nope")


def test_results_folders_of_other_launchers_and_older_formats(tmp_path):
  old = tmp_path / "old"
  old.mkdir()
  row = {"method": "single", "graph": "g", "topology": "t", "seed": 0,
         "objective_kind": "makespan", "objective": 1.0, "error": ""}
  (old / "results.json").write_text(json.dumps({"config": {}, "rows": [row]}))
  (upgraded,) = harness.load_rows(str(old))  # evaluate's rows from before stages: upgraded
  assert upgraded["label"] == "single" and upgraded["stage"] is None
  assert set(upgraded) == set(results.COLUMNS)
  (old / "results.json").write_text(json.dumps({"settings": {}, "rows": [{"row": "heft"}]}))
  with pytest.raises(ValueError, match=f"--out={old} holds results of go-jax-transfer"):
    harness.load_rows(str(old))
  with pytest.raises(ValueError, match="older or unknown format"):
    results.load(str(old), "transfer")
  (old / "results.json").write_text("{not json")
  with pytest.raises(ValueError, match="not a go-jax results file"):
    harness.load_rows(str(old))


def test_unknown_config_field():
  with pytest.raises(ValueError, match="unknown field"):
    harness.settings({"method": ["single"]})


def test_launcher_end_to_end(tmp_path):
  """The shipped CI config as it ships: every cell runs clean (no error row). In a subprocess:
  absl flags of several launchers cannot share one process."""
  out = tmp_path / "ev"
  cmd = [sys.executable, "-m", "experiments.evaluate",
         "--config=experiments/configs/evaluate_test.py", f"--out={out}", "--noprogress"]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "## Objective by method" in proc.stdout and "Traceback" not in proc.stderr
  data = json.loads((out / "results.json").read_text())
  rows = data["rows"]
  assert data["launcher"] == "evaluate"
  assert rows and not [r["error"] for r in rows if r["error"]]
  assert all(r["agrees"] for r in rows)
  assert {"single", "random", "round_robin", "expert"} <= {r["method"] for r in rows}
  assert sorted(os.listdir(out)) == ["results.csv", "results.json", "results.md"]
  # go-jax-place pointed at this folder: one line naming the folder and the launcher
  proc = subprocess.run([sys.executable, "-m", "experiments.place", f"--out={out}"], cwd=REPO,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0 and "Traceback" not in proc.stderr
  assert f"--out={out} holds results of go-jax-evaluate" in proc.stderr


def test_refusing_method_is_a_one_line_error_row(tmp_path, caplog):
  """A method refusing its budget (BRKGA below one generation): one line in its row."""
  cfg = tiny_config(methods=["brkga", "round_robin"], graphs=GRAPHS[:1],
                    topologies=["nvlink2"], budget=8)
  rows = harness.run(cfg, str(tmp_path), progress=False)
  assert rows[0]["error"].startswith("ValueError: brkga: budget 8 is below one generation")
  assert "\n" not in rows[0]["error"] and not rows[1]["error"]
  assert "Traceback" not in caplog.text  # the traceback only at --v=1 (debug)
  with pytest.raises(ValueError, match="no option"):
    harness.run(dict(cfg, method_options={"brkga": {"nosuch": 1}}), str(tmp_path / "b"),
                progress=False)


def test_staged_method_gives_one_row_per_stage(tmp_path, monkeypatch):
  """A method reporting stages (as the learned ones do) gives one row per stage, each
  re-simulated; the stage the solution is must agree with its objective."""
  def staged(problem, config):
    g, d = problem.graph, problem.topology.num_devices
    rr = np.arange(g.num_nodes) % d
    one = np.zeros(g.num_nodes, np.int64)
    prio = np.arange(g.num_nodes, 0, -1).astype(float)
    stages = [{"stage": "zero-shot greedy", "placement": one, "priority": prio, "seconds": 1.},
              {"stage": "zero-shot best of K", "placement": rr, "priority": prio,
               "seconds": 2.},
              {"stage": "fine-tuned", "placement": rr, "priority": prio, "seconds": 3.}]
    return methods.Proposal(rr, prio, evaluations=3, info=dict(
        stages=stages, stage="zero-shot best of K", samples=4, updates=2))

  monkeypatch.setitem(methods.METHODS, "staged", methods.MethodSpec(
      staged, "joint", "a fake learned method", {"finetune_seconds": 0.0}))
  cfg = tiny_config(methods=["staged", "round_robin"], graphs=GRAPHS[:1],
                    topologies=["nvlink2"], method_options={"staged": {"finetune_seconds": 5}})
  rows = harness.run(cfg, str(tmp_path), progress=False)
  assert [results.row_name(r) for r in rows] == [
      "staged zero-shot (greedy)", "staged zero-shot (best of 4)", "staged fine-tuned (5s)",
      "round_robin"]
  assert [r["search_seconds"] for r in rows[:3]] == [1.0, 2.0, 3.0]
  assert rows[2]["updates"] == 2 and all(r["agrees"] for r in rows)
  assert rows[1]["objective"] == rows[3]["objective"]  # round robin, either way
  md = open(tmp_path / "results.md").read()
  assert "| staged fine-tuned (5s) |" in md
  again = harness.run(cfg, str(tmp_path), progress=False)  # resumed: the same rows
  assert again == rows


def test_no_feasible_method_is_said_plainly(tmp_path):
  rows = harness.run(tiny_config(methods=["single", "round_robin"], graphs=GRAPHS[:1],
                                 topologies=["nvlink2@mem=1"]), str(tmp_path), progress=False)
  assert not any(r["feasible"] for r in rows)
  md = open(tmp_path / "results.md").read()
  assert "nvlink2@mem=1: no method found a feasible placement" in md
  assert "infeasible (needs" in md and "**" not in md.split("## Objective by method")[1]
  penalty = plotting.format_seconds(rows[0]["objective"])
  assert penalty not in md


def test_schedule_methods_and_plots(tmp_path):
  """A scheduling method orders the schedule_placement's placement; plots are PNGs."""
  cfg = tiny_config(methods=["expert", "bfs"], graphs=GRAPHS[1:], topologies=["nvlink2"],
                    plots=True)
  rows = harness.run(cfg, str(tmp_path), progress=False)
  expert, bfs = rows
  assert bfs["method_kind"] == "schedule" and bfs["placement_from"] == "expert"
  assert bfs["agrees"] and not bfs["error"]
  plots = sorted(os.listdir(tmp_path / "plots"))
  assert len(plots) == 3 and sum(p.startswith("compare__") for p in plots) == 1
  for p in plots:
    assert (tmp_path / "plots" / p).read_bytes()[:4] == b"\x89PNG"
  garbage = tmp_path / "garbage.npz"  # exists, so the config check passes; fails to build
  garbage.write_bytes(b"not a zip archive" * 4)
  bad = harness.run(tiny_config(methods=["expert"], graphs=[str(garbage)],
                                topologies=["nvlink2"]), str(tmp_path / "bad"), progress=False)
  assert bad[0]["error"].startswith("ValueError") and "garbage.npz" in bad[0]["error"]
  assert "| error |" in open(tmp_path / "bad" / "results.md").read()
  with pytest.raises(ValueError, match="graph spec 'chain:n=0': num_nodes must be >= 1"):
    harness.run(tiny_config(graphs=["chain:n=0"]), None, progress=False)  # before any cell


def test_schedule_placement_takes_its_own_options(tmp_path, monkeypatch):
  """method_options may name schedule_placement's method even when it is not a row; the
  placement is solved with them, and changing them reruns the scheduling cells on resume."""
  seen = []
  real = methods.solve

  def spy(name, *args, **kwargs):
    seen.append((name, {k: v for k, v in kwargs.items() if k == "samples"}))
    return real(name, *args, **kwargs)

  monkeypatch.setattr(methods, "solve", spy)
  cfg = tiny_config(methods=["bfs"], graphs=GRAPHS[1:], topologies=["nvlink2"],
                    schedule_placement="random", method_options={"random": {"samples": 3}})
  rows = harness.run(cfg, str(tmp_path), progress=False)
  assert rows[0]["placement_from"] == "random" and not rows[0]["error"]
  assert ("random", {"samples": 3}) in seen
  data = json.loads(open(tmp_path / "results.json").read())
  (record,) = data["cell_settings"].values()
  assert record["schedule_placement_options"] == {"samples": 3}
  seen.clear()
  harness.run(cfg, str(tmp_path), progress=False)
  assert not seen  # the same settings: reused
  harness.run(dict(cfg, method_options={"random": {"samples": 5}}), str(tmp_path),
              progress=False)
  assert ("random", {"samples": 5}) in seen and ("bfs", {}) in seen
  with pytest.raises(ValueError, match="nor schedule_placement 'random'"):
    harness.run(dict(cfg, method_options={"heft": {}}), None, progress=False)
  with pytest.raises(ValueError, match=r"method_options\['random'\]: no option"):
    harness.run(dict(cfg, method_options={"random": {"nosuch": 1}}), None, progress=False)


def test_a_damaged_stored_row_is_refused(clean_run, tmp_path):
  """A stored row without its result or key fields would pass for a finished cell (or break
  the report later): the resumed run stops with one message naming the file."""
  out, _ = clean_run
  for field in ("objective", "feasible", "seed", "graph"):
    folder = copy_results(out, tmp_path / field)
    path = os.path.join(folder, "results.json")
    data = json.loads(open(path).read())
    del data["rows"][0][field]
    open(path, "w").write(json.dumps(data))
    with pytest.raises(ValueError, match=rf"results.json: a row of 'round_robin' has no field"
                                         rf"\(s\) \['{field}'\]"):
      harness.run(tiny_config(), folder, progress=False)


def test_plot_file_names_are_bounded_and_distinct():
  """A cell's plot name stays readable, is bounded however long its specs (a deep path), and
  two cells never share one (a/b.npz and a_b.npz, parts that hold "__")."""
  plain = harness.plot_file_name("chain:n=3", "nvlink2", "single", "s0", "makespan")
  assert plain == "chain_n=3__nvlink2__single__s0__makespan+" + plain.split("+")[1]
  assert harness.plot_file_name("chain", "nvlink2", "single", "s0") == (
      "chain__nvlink2__single__s0")  # clean parts: as they are, no hash
  deep = "/tmp/" + "/".join(c * 60 for c in "abc")
  long = harness.plot_file_name(deep + "/g.npz", deep + "/t.json", "single", "s0", "makespan",
                                "zero-shot best of 8")
  assert len("compare__" + long + ".png") < 255 and "g.npz" in long and "t.json" in long
  names = [harness.plot_file_name(*p) for p in (
      ("/a/b.npz", "t"), ("/a_b.npz", "t"), ("a_b.npz", "t"), ("a__b", "t"), ("a", "b__t"),
      ("a", "b", "t"), ("a_", "_b"), ("a", "_b"), ("a_", "b"))]
  assert len(set(names)) == len(names)


def test_a_plot_that_fails_keeps_its_scored_row(tmp_path, monkeypatch, caplog):
  """A Gantt chart or bar chart that cannot be written is a warning and a note in the row;
  the row keeps its result (it is not an error row, and a resumed run does not redo it)."""
  def broken(*args, **kwargs):
    raise OSError(36, "File name too long")
  monkeypatch.setattr(plotting, "plot_schedule", broken)
  monkeypatch.setattr(plotting, "plot_bars", broken)
  cfg = tiny_config(methods=["single"], graphs=["chain:n=3"], topologies=["nvlink2"],
                    plots=True)
  (row,) = harness.run(cfg, str(tmp_path), progress=False)
  assert not row["error"] and row["feasible"] and row["objective"] > 0
  assert "plot not written: OSError: [Errno 36] File name too long" in row["reason"]
  assert "plot of single on chain:n=3 / nvlink2 (seed 0) not written" in caplog.text
  assert "plot of makespan on chain:n=3 / nvlink2 not written" in caplog.text
  (stored,) = harness.load_rows(str(tmp_path))
  assert stored["objective"] == row["objective"] and not stored["error"]


def test_a_gap_within_rounding_of_the_bound_is_stored_and_printed_as_0(monkeypatch):
  """A float32 objective a rounding below the float64 bound (gap -1e-8) is at the bound: the
  row stores gap 0, as methods.solve's Solution.gap, and the table prints "0.0%", never
  "-0.0%"; a gap further below stays and reads BELOW LB (a wrong bound)."""
  cfg = tiny_config(methods=["single"], graphs=["chain:n=3"], topologies=["nvlink2"])
  (row,) = harness.run(cfg, None, progress=False)
  lb = row["lower_bound"]
  for factor, stored, text in ((1 - 1e-8, 0.0, "| 0.0% |"), (1.0, 0.0, "| 0.0% |"),
                               (1.5, 0.5, "| +50.0% |"), (0.9, -0.1, "-10.0% BELOW LB")):
    scores = {"objective": lb * factor, "makespan": lb * factor, "peak_memory": [1.0],
              "feasible": True}
    topo = harness.make_topology(harness.parse_topology("nvlink2"),
                                 sources.load_graph("chain:n=3"))[0]
    again = harness._scored_row(dict(row), sources.load_graph("chain:n=3"), topo, 1.0, scores)
    assert again["gap"] == pytest.approx(stored, abs=1e-12)
    assert text in harness.markdown_table([again])
  assert "-0.0%" not in harness.markdown_table([dict(row, gap=-1.05e-8)])
  assert "| - |" in harness.markdown_table([dict(row, feasible=False)])


def test_a_graph_or_topology_given_twice_in_other_words_is_refused(tmp_path):
  """Repeats are found on what the specs name, not their text: ' nvlink2' is nvlink2, and a
  file by two paths is one file; the message names both entries."""
  for field, specs, match in (
      ("topologies", ["nvlink2", " nvlink2"],
       r"topologies\[0\] 'nvlink2' and topologies\[1\] ' nvlink2' are the same topology"),
      ("topologies", ["nvlink2@mem=2e9", "nvlink2@mem=2000000000"], "the same topology"),
      ("graphs", ["chain:n=3", " chain:n=3 "], r"graphs\[0\] 'chain:n=3' and graphs\[1\]"),
      # keys in another order, an alias, a default written out: one graph
      ("graphs", ["layered:n=8,width=2", "layered:width=2, num_nodes=8,seed=0"],
       r"graphs\[0\] 'layered:n=8,width=2' and graphs\[1\] 'layered:width=2, num_nodes=8"),
      ("graphs", ["chain:n=3,coarsen=2", "chain:coarsen=2,n=3"], "the same graph")):
    with pytest.raises(ValueError, match=match):
      harness.plan(harness.settings(tiny_config(methods=["single"], **{field: specs})))
  sub = tmp_path / "sub"
  sub.mkdir()
  graph = tmp_path / "g.npz"
  sources.load_graph("chain:n=3").save(str(graph))
  twice = [str(graph), os.path.join(str(sub), "..", "g.npz")]
  with pytest.raises(ValueError, match="are the same graph"):
    harness.plan(harness.settings(tiny_config(methods=["single"], graphs=twice)))
  cells = harness.plan(harness.settings(tiny_config(
      methods=["single"], graphs=twice[:1], topologies=["nvlink2", "nvlink2@mem=0.5x"])))
  assert len(cells) == 2  # another memory option is another topology
  cells = harness.plan(harness.settings(tiny_config(
      methods=["single"], graphs=["layered:n=8,width=2", "layered:n=8,width=2,seed=1",
                                  "chain:n=3", "chain:n=3,coarsen=2"])))
  assert len({c.graph for c in cells}) == 4  # another seed, another coarsening: other graphs


def test_a_stored_row_with_a_bad_number_is_named_by_file_row_and_field(clean_run, tmp_path):
  """A number field of a stored row holding text (an edit): one ValueError naming the file,
  the row (index and key) and the field; go-jax-evaluate prints it as it is (not as a fault
  of --config) and exits non-zero without a traceback."""
  out, _ = clean_run
  folder = copy_results(out, tmp_path / "bad")
  path = os.path.join(folder, "results.json")
  data = json.loads(open(path).read())
  data["rows"][1]["makespan"] = "abc"
  open(path, "w").write(json.dumps(data))
  row = data["rows"][1]
  want = (rf"{path}: row 1 \({row['label']} on '{row['graph']}' / '{row['topology']}', seed 0, "
          r"makespan\): field 'makespan' is 'abc', not a number")
  with pytest.raises(results.StoreError, match=want):
    harness.run(tiny_config(), folder, progress=False)
  data["rows"][1]["makespan"], data["rows"][0]["mem_capacities"] = 1.0, [1.0, "x"]
  open(path, "w").write(json.dumps(data))
  with pytest.raises(ValueError, match="row 0 .* field 'mem_capacities' is \\[1.0, 'x'\\]"):
    harness.load_rows(folder)
  data["rows"][0]["mem_capacities"], data["rows"][0]["seed"] = None, True
  open(path, "w").write(json.dumps(data))
  with pytest.raises(ValueError, match="row 0 .* field 'seed' is True, not a number"):
    harness.load_rows(folder)
  data["rows"][0]["seed"] = "abc"
  open(path, "w").write(json.dumps(data))
  proc = subprocess.run([sys.executable, "-m", "experiments.evaluate", f"--out={folder}",
                         "--noprogress"], cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  assert f"{path}: row 0 (" in proc.stderr and "field 'seed' is 'abc'" in proc.stderr
  assert "--config=" not in proc.stderr


def test_pivots_and_charts_leave_non_finite_objectives_out_as_the_leaderboard_does(tmp_path):
  """A NaN seed made a method's pivot cell NaN ('-') and kept the setting's chart from being
  drawn; a -inf was the bold best while the leaderboard (which leaves them out) named
  another method."""
  from go_jax import harness_reports
  def row(method, objective, seed=0):
    return {"method": method, "graph": "g", "topology": "t", "objective": objective,
            "objective_kind": "makespan", "feasible": True, "seed": seed, "error": ""}
  rows = [row("a", 1.0), row("a", float("nan"), seed=1), row("b", 2.0),
          row("c", float("-inf")), row("d", float("inf"))]
  cells = harness_reports.markdown_pivots(rows).splitlines()[-1].split(" | ")
  assert cells == ["| t", "**1 s** (1 non-finite left out)", "2 s", "non-finite",
                   "non-finite |"], cells
  assert len(harness_reports.plot_comparisons(rows, str(tmp_path))) == 1
