"""Tests of go-jax-place's tasks (go_jax/place_tasks.py): fusion and joint3, and --task.

test_fusion_task runs GO's go_fusion zero-shot from the shipped checkpoint "go_fusion" (its one
XLA compilation is most of this file's time); the other tests run no GO (method None or
--method=none), so they need no checkpoint. The launcher subprocess, started by a module fixture
when the first test needs it, runs on the second core while the in-process tests run.
"""

import csv
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from go_jax import methods, place_tasks, results
from go_jax import place as place_lib
from go_jax.methods import fusion as fusion_methods
from simulator import fusion, preset, sources

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = "zoo:gpt2_small,size=tiny,stage=pre"  # 795 ops, costed (a cost reference)
CHECKPOINT = None  # GO's starting policy: None, the shipped go_fusion checkpoint
HELPER = textwrap.dedent('''
    """JAX programs for xla_decisions_for_spec's jax: specs (test helper)."""
    import jax.numpy as jnp
    from simulator.sources import synthetic

    def program():
      def step(w, x):
        return jnp.tanh(x @ w).sum()
      return step, (jnp.ones((8, 8)), jnp.ones((4, 8)))

    def graph():
      return synthetic.chain(6, name="helper_chain")
''')


def _env():
  return dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _launch(*args):
  return subprocess.Popen([sys.executable, "-m", "experiments.place", *args], cwd=REPO,
                          env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


@pytest.fixture(scope="module")
def zoo_graph():
  return place_lib.load_graph_arg(SPEC)


@pytest.fixture(scope="module")
def launcher_run(tmp_path_factory):
  """go-jax-place --task=fusion in a subprocess: the task's default baselines (XLA's decisions
  rebuilt from the zoo program), no GO."""
  out = str(tmp_path_factory.mktemp("launcher") / "out")
  proc = _launch("--task=fusion", f"--graph={SPEC}", "--topology=nvlink1", "--method=none",
                 f"--out={out}")
  yield proc, out
  if proc.poll() is None:
    proc.kill()
    proc.communicate()


def _check_rows(result):
  """Every row re-simulates (with its fuse mask) to its numbers; groups are its fused graph's."""
  graph, topo = result.graph, result.topology
  for r in result.rows:
    again = methods.evaluate(graph, topo, r.placement, r.priority, "makespan", fuse=r.fuse)
    assert r.objective == again["objective"] and r.makespan == again["makespan"], r.method
    assert r.feasible == again["feasible"], r.method
    np.testing.assert_array_equal(r.peak_memory, again["peak_memory"])
    if r.fuse is None:
      assert r.groups is None, r.method
    else:
      assert r.fuse.shape == (graph.num_nodes,) and r.fuse.dtype == bool
      assert r.groups == fusion.fuse_graph(graph, r.placement, r.fuse).graph.num_nodes
  assert result.best.objective == min(r.objective for r in result.rows)


# ------------------------------------------------------------------ fusion
def test_fusion_task(zoo_graph, launcher_run, tmp_path):
  """GO's go_fusion (shipped checkpoint) and two fusion baselines fuse heft's schedule."""
  del launcher_run  # started now, so that it runs while GO compiles here
  result = place_lib.place(zoo_graph, "nvlink1", task="fusion", graph_spec=SPEC,
                           checkpoint=CHECKPOINT, finetune_seconds=0, samples=4,
                           baselines=["no_fusion", "fuse_all"])
  s = result.settings
  assert s["task"] == "fusion" and s["method"] == "go_fusion"
  assert not s["go_skipped"], s["go_skipped"]  # needs the shipped go_fusion checkpoint
  assert s["placement_from"] == "heft"
  assert [r.key for r in result.rows] == ["go_zero_shot_greedy", "go_zero_shot_best",
                                          "no_fusion", "fuse_all"]
  assert [r.kind for r in result.rows] == ["go", "go", "baseline", "baseline"]
  heft = methods.solve("heft", zoo_graph, preset("nvlink1"))
  assert not heft.placement.any()  # one device
  for r in result.rows:  # one schedule, fused by every method
    np.testing.assert_array_equal(r.placement, heft.placement)
    np.testing.assert_array_equal(r.priority, heft.priority)
    assert r.data["placement_from"] == "heft"
  none, every = result.row("no_fusion"), result.row("fuse_all")
  assert every.makespan < none.makespan and none.objective == heft.objective
  assert none.groups == zoo_graph.num_nodes and every.groups < none.groups
  assert s["schedule"]["objective"] == heft.objective
  _check_rows(result)
  text = place_lib.header(result)
  assert "task: fusion of heft's placement and priority" in text
  assert f"| groups ({zoo_graph.num_nodes} ops) |" in place_lib.markdown_table(result)

  files = place_lib.write_outputs(result, str(tmp_path), plots=False)
  saved = np.load(files["placement"])
  np.testing.assert_array_equal(saved["fuse"], result.best.fuse)
  np.testing.assert_array_equal(saved["go_fuse"], result.go_row.fuse)
  data = json.loads(open(files["results"]).read())
  assert [r["groups"] for r in data["rows"]] == [r.groups for r in result.rows]
  with open(files["csv"]) as fh:
    rows = list(csv.DictReader(fh))
  assert [int(r["groups"]) for r in rows] == [r.groups for r in result.rows]


def test_joint3_pipelines(zoo_graph):
  """The best baseline's placement and priority, then xla_fusion and fuse_all; without the
  graph spec XLA's decisions cannot be had and that pipeline is skipped with its reason."""
  result = place_lib.place(zoo_graph, "nvlink4", task="joint3", method=None,
                           baselines=["heft"], graph_spec=SPEC)
  assert [r.key for r in result.rows] == ["heft", "heft+xla_fusion", "heft+fuse_all"]
  assert [r.method for r in result.rows] == ["heft", "heft + xla_fusion", "heft + fuse_all"]
  assert [r.kind for r in result.rows] == ["baseline", "pipeline", "pipeline"]
  heft = result.rows[0]
  for r in result.rows[1:]:
    np.testing.assert_array_equal(r.placement, heft.placement)
    np.testing.assert_array_equal(r.priority, heft.priority)
    assert r.data["placement_from"] == "heft" and r.groups < zoo_graph.num_nodes
  assert result.row("heft+fuse_all").objective < heft.objective
  assert result.settings["pipeline_from"] == "heft"
  assert result.best_baseline is result.best  # pipelines count as baselines in the verdict
  _check_rows(result)
  assert "pipelines: heft's placement and priority" in place_lib.header(result)

  no_spec = place_lib.place(zoo_graph, "nvlink4", task="joint3", method=None,
                            baselines=["heft"])
  assert [r.key for r in no_spec.rows] == ["heft", "heft+fuse_all"]
  assert "heft + xla_fusion skipped: ValueError: no graph spec" in place_lib.header(no_spec)


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("kwargs, message", [
    (dict(task="bogus"), "unknown task 'bogus'"),
    (dict(task="fusion", method="go_hint"),
     "method 'go_hint' (kind joint) does not fit task 'fusion'"),
    (dict(task="joint", method="go_fusion"), "method 'go_fusion' (kind fusion) does not fit"),
    (dict(task="joint3", method="go_fusion"), "does not fit task 'joint3'"),
    (dict(task="fusion", baselines=["heft"]), "baselines ['heft'] are not fusion methods"),
    (dict(baselines=["fuse_all"]), "(fusion methods: task 'fusion')"),
    (dict(task="fusion", placement_from="no_such_method"),
     "placement_from: unknown method 'no_such_method'; available: ["),
    (dict(baselines=["heft", "no_such_method"]),
     "baselines: unknown method(s) ['no_such_method']; available: ["),
    (dict(baselines=["heft", "heft"]), "baselines ['heft', 'heft']: a method is given twice"),
    (dict(task="fusion", placement_from="critical_path"),
     "placement_from 'critical_path' (kind schedule) must be a placement or joint method"),
    (dict(task="fusion"), "has no cost reference"),
    (dict(task="joint3", baselines=["heft"]), "has no cost reference"),
])
def test_task_errors(kwargs, message):
  with pytest.raises(ValueError) as e:
    place_lib.place(sources.load_graph("chain:n=4"), "nvlink2", **dict(dict(method=None),
                                                                       **kwargs))
  assert message in str(e.value)


def test_fusion_task_does_not_coarsen(zoo_graph):
  with pytest.raises(ValueError, match="task 'fusion' does not coarsen.*max_nodes=100"):
    place_lib.place(zoo_graph, "nvlink1", task="fusion", method=None, max_nodes=100)


def test_xla_decisions_for_spec(tmp_path, monkeypatch):
  (tmp_path / "tasks_test_helper.py").write_text(HELPER)
  monkeypatch.syspath_prepend(str(tmp_path))
  spec = "tasks_test_helper:program"
  graph = place_lib.load_graph_arg(spec)
  decisions = fusion_methods.xla_decisions_for_spec(spec, graph)
  assert decisions.shape == (graph.num_nodes,) and decisions.dtype == bool
  sol = methods.solve("xla_fusion", graph, preset("nvlink1"),
                      placement=np.zeros(graph.num_nodes, np.int64), decisions=decisions)
  np.testing.assert_array_equal(sol.fuse, decisions)
  for bad, message in [
      ("layered:n=8,width=2", "is not a zoo: or jax: pre-optimisation program"),
      ("zoo:gpt2_small,size=tiny,stage=post", "is not a pre-optimisation program (stage=post)"),
      (f"{SPEC},coarsen=100", "is coarsened"),
      ("tasks_test_helper:graph", "returns a CompGraph, not a JAX program"),
  ]:
    with pytest.raises(ValueError) as e:
      fusion_methods.xla_decisions_for_spec(bad)
    assert message in str(e.value), bad
  with pytest.raises(ValueError, match=r"\(3 ops\) is not graph 'chain.*\(4 ops\)"):
    fusion_methods.xla_decisions_for_spec(spec, sources.load_graph("chain:n=4"))
  sys.modules.pop("tasks_test_helper", None)


# ------------------------------------------------------------------ launcher
def test_launcher_fusion_task(launcher_run):
  proc, out = launcher_run
  stdout, stderr = proc.communicate(timeout=600)
  assert proc.returncode == 0, stderr[-3000:]
  data = json.loads(open(os.path.join(out, "results.json")).read())
  assert data["settings"]["task"] == "fusion" and data["settings"]["method"] is None
  assert [r["key"] for r in data["rows"]] == list(place_tasks.FUSION_BASELINES)
  rows = {r["key"]: r for r in data["rows"]}
  assert rows["no_fusion"]["groups"] == 795
  assert rows["fuse_all"]["groups"] < rows["xla_fusion"]["groups"] < 795
  best = min(data["rows"], key=lambda r: r["objective"])
  assert sorted(os.listdir(out)) == sorted([
      "results.json", "results.csv", "results.md", "placement.npz", "objective_bars.png",
      f"gantt_{best['key']}.png"])
  saved = np.load(os.path.join(out, "placement.npz"))
  graph = sources.load_graph(SPEC)
  again = methods.evaluate(graph, preset("nvlink1"), saved["placement"], saved["priority"],
                           "makespan", fuse=saved["fuse"])
  assert again["objective"] == best["objective"] and str(saved["method"]) == best["name"]
  assert "task: fusion of heft's placement and priority" in stdout
  assert "| groups (795 ops) |" in stdout and "| xla_fusion |" in stdout
  with open(os.path.join(out, "results.csv")) as fh:
    assert fh.readline().strip().split(",") == list(results.COLUMNS) + ["groups"]


def test_launcher_task_method_mismatch_is_one_line(tmp_path):
  """A --method of the wrong kind for --task (the other ValueErrors of place, e.g. no cost
  reference, take the same path to one line)."""
  proc = _launch("--task=fusion", "--method=go_hint", "--graph=chain:n=4",
                 f"--out={tmp_path / 'out'}")
  _, err = proc.communicate(timeout=300)
  lines = [l for l in err.splitlines() if l.strip()]
  assert proc.returncode != 0 and "Traceback" not in err, err[-3000:]
  assert len(lines) == 1, lines
  assert "method 'go_hint' (kind joint) does not fit task 'fusion'" in lines[0], lines
