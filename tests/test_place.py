"""Tests of go-jax-place: graph arguments, `place` end to end, and the launcher in a subprocess.

GO's cost in these tests is XLA compilation of the PPO update (about half a minute per program
on a 2-core CPU, whatever the graph size), so the file compiles each GO program once: the
in-process test fine-tunes for one update from a tiny checkpoint (one program) while the launcher
subprocess, started by a module fixture as soon as the first test needs it, runs zero-shot
transfer from the same checkpoint (the other program) on the second core. The other tests run
without GO (method=None) or see it refuse the instance, which costs no compilation.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from experiments.configs import train_test
from go_jax import harness, methods, objectives, plotting, pretrained, results
from go_jax import place as place_lib
from go_jax.training import checkpoint as ckpt_lib
from simulator import CompGraph, Topology, fileio, preset, sources

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPH = "layered:n=20,width=4,seed=0"
HELPER = textwrap.dedent('''
    """Graph functions for go-jax-place's 'package.module:function' argument (test helper)."""
    import jax.numpy as jnp
    from simulator.sources import synthetic

    def tiny_graph():
      return synthetic.chain(6, name="helper_chain")

    def tiny_program():
      def step(w, x):
        return jnp.tanh(x @ w).sum()
      return step, (jnp.ones((8, 8)), jnp.ones((4, 8)))

    def not_a_graph():
      return 42

    def broken():
      raise RuntimeError("boom")

    NOT_CALLABLE = 3
''')


@pytest.fixture
def helper_module(tmp_path, monkeypatch):
  """A module `place_test_helper` on sys.path holding the functions above."""
  (tmp_path / "place_test_helper.py").write_text(HELPER)
  monkeypatch.syspath_prepend(str(tmp_path))
  yield "place_test_helper"
  sys.modules.pop("place_test_helper", None)


def tiny_config():
  """The CI training config, cut further: GO's cost here is compiling the PPO update, and
  attention, segment recurrence and a second minibatch each add to it (the policy variants
  are tested in test_policies.py; here only the plumbing around them is)."""
  config = train_test.get_config()
  config.minibatches = 1
  config.policy.use_attention = False
  config.policy.recurrence = False
  return config


def _same_graph(a: CompGraph, b: CompGraph):
  assert a.num_nodes == b.num_nodes and a.num_edges == b.num_edges
  np.testing.assert_array_equal(a.cost, b.cost)
  np.testing.assert_array_equal(a.senders, b.senders)
  np.testing.assert_array_equal(a.receivers, b.receivers)


# ------------------------------------------------------------------ load_graph_arg
def test_load_graph_arg_source_spec():
  _same_graph(place_lib.load_graph_arg(f"  {GRAPH} "), sources.load_graph(GRAPH))


def test_load_graph_arg_npz(tmp_path):
  g = sources.load_graph(GRAPH)
  path = str(tmp_path / "g.npz")
  g.save(path)
  _same_graph(place_lib.load_graph_arg(path), g)


def test_load_graph_arg_bare_pipedream_name(shared_data):
  del shared_data  # the package data (simulator/data)
  _same_graph(place_lib.load_graph_arg("alexnet"), sources.load_graph("pipedream:alexnet"))


def test_bare_name_prefers_pipedream_then_zoo(monkeypatch):
  """Dispatch only (building zoo models at their default size is slow)."""
  monkeypatch.setattr(sources, "available_graphs", lambda: {
      "pipedream": ["both", "pd_only"], "zoo": ["both", "zoo_only"]})
  asked = []
  monkeypatch.setattr(sources, "load_graph", lambda spec: asked.append(spec) or spec)
  for name in ("both", "pd_only", "zoo_only"):
    place_lib.load_graph_arg(name)
  # a zoo model is costed on device_spec (default v100); a PipeDream profile has no device
  assert asked == ["pipedream:both", "pipedream:pd_only", "zoo:zoo_only,device=v100"]


def test_load_graph_arg_function_returning_graph(helper_module):
  g = place_lib.load_graph_arg(f"{helper_module}:tiny_graph")
  assert g.name == "helper_chain" and g.num_nodes == 6


def test_load_graph_arg_jax_program(helper_module):
  g = place_lib.load_graph_arg(f"{helper_module}:tiny_program")
  assert g.num_nodes >= 3 and g.num_edges >= 2
  assert g.cost.sum() > 0  # costed by the v100 roofline
  a100 = place_lib.load_graph_arg(f"{helper_module}:tiny_program", device_spec="a100")
  assert a100.num_nodes == g.num_nodes and not np.array_equal(a100.cost, g.cost)


@pytest.mark.parametrize("arg, message", [
    ("", "non-empty"),
    ("no_such_model", "model-zoo model (amoebanet"),
    ("missing_file.npz", "does not exist"),
    ("layered:n=20,bogus=1", "unknown key 'bogus'"),
    ("no_such_module_xyz:fn", "neither a graph source kind"),
    ("not a module!:fn", "is not 'package.module:function'"),
    ("HELPER:missing", "has no function 'missing'"),
    ("HELPER:NOT_CALLABLE", "has no function 'NOT_CALLABLE'"),
    ("HELPER:not_a_graph", "must return a CompGraph or a JAX program"),
    ("HELPER:broken", "RuntimeError: boom"),
])
def test_load_graph_arg_errors(helper_module, arg, message):
  with pytest.raises(ValueError) as e:
    place_lib.load_graph_arg(arg.replace("HELPER", helper_module))
  assert message in str(e.value)


def test_unknown_device_spec_is_a_value_error(helper_module):
  with pytest.raises(ValueError, match="unknown device spec"):
    place_lib.load_graph_arg(f"{helper_module}:tiny_program", device_spec="no_such_gpu")


# ------------------------------------------------------------------ launcher (started early)
def _write_checkpoint(folder: str):
  """A checkpoint folder as pretrained.load reads it: the tiny config, fresh parameters."""
  config = tiny_config()
  fileio.write_json(os.path.join(folder, pretrained.CONFIG_NAME), json.loads(config.to_json()))
  ckpt_lib.save_params(os.path.join(folder, pretrained.PARAMS_NAME),
                       pretrained.template(config.policy))


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
  folder = str(tmp_path_factory.mktemp("ckpt") / "tiny")
  _write_checkpoint(folder)
  return folder


@pytest.fixture(scope="module")
def launcher_run(tmp_path_factory, tiny_checkpoint):
  """go-jax-place in a subprocess (own absl flags): zero-shot from a tiny checkpoint, K=4."""
  out = str(tmp_path_factory.mktemp("launcher") / "out")
  cmd = [sys.executable, "-m", "experiments.place", f"--graph={GRAPH}", "--topology=nvlink2",
         f"--checkpoint={tiny_checkpoint}", "--finetune_seconds=0", "--samples=4",
         "--baselines=heft,m_etf", f"--out={out}"]
  env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  yield proc, out
  if proc.poll() is None:
    proc.kill()
    proc.communicate()


# ------------------------------------------------------------------ place
def _check_rows(result, objective):
  """Every row's numbers are what the simulator gives for its action."""
  graph, topo = result.graph, result.topology
  lb = objectives.get_objective(objective).lower_bound(graph, topo)["bound"]
  assert result.lower_bound == lb
  for r in result.rows:
    again = methods.evaluate(graph, topo, r.placement, r.priority, objective)
    assert r.objective == again["objective"], r.method
    assert r.makespan == again["makespan"], r.method
    assert r.feasible == again["feasible"], r.method
    np.testing.assert_array_equal(r.peak_memory, again["peak_memory"])
    gap = r.objective / lb - 1.0  # a float32 objective a rounding below the bound is at it
    assert r.gap == (0.0 if -methods.GAP_ROUNDING < gap < 0 else pytest.approx(gap))
    assert r.placement.shape == (graph.num_nodes,)
    assert r.placement.min() >= 0 and r.placement.max() < topo.num_devices
    # one row format: the harness's, whichever launcher wrote it
    assert set(r.data) == set(results.COLUMNS) and r.data["objective"] == r.objective
    assert results.row_name(r.data) == r.method
  assert result.best.objective == min(r.objective for r in result.rows)


def test_place_end_to_end(tmp_path, launcher_run, tiny_checkpoint):
  del launcher_run  # started now, so that it runs while this test fine-tunes
  graph = sources.load_graph(GRAPH)
  result = place_lib.place(graph, "nvlink2@mem=0.8x", checkpoint=tiny_checkpoint,
                           finetune_seconds=0, finetune_updates=1, samples=4,
                           baselines=["heft", "m_etf"], graph_spec=GRAPH)
  assert [r.key for r in result.rows] == ["go_zero_shot_greedy", "go_zero_shot_best",
                                          "go_finetuned", "heft", "m_etf"]
  assert [r.kind for r in result.rows] == ["go"] * 3 + ["baseline"] * 2
  assert [r.method for r in result.rows[:3]] == [
      "go zero-shot (greedy)", "go zero-shot (best of 4)", "go fine-tuned (1 update)"]
  assert result.rows[2].info["updates"] == 1
  assert result.settings["checkpoint"] == tiny_checkpoint and not result.settings["go_skipped"]
  assert not result.settings["coarsened"] and result.coarsened is None
  cap = float(np.min(result.topology.mem_capacity))
  assert np.isfinite(cap) and result.settings["mem_capacity"] == cap
  _check_rows(result, "makespan")
  heft = methods.solve("heft", graph, result.topology, objective="makespan", seed=0)
  assert result.row("heft").objective == heft.objective
  np.testing.assert_array_equal(result.row("heft").placement, heft.placement)

  files = place_lib.write_outputs(result, str(tmp_path / "out"))
  names = sorted(os.listdir(tmp_path / "out"))
  assert names == sorted(["results.json", "results.csv", "results.md", "placement.npz",
                          "objective_bars.png", "gantt_go_finetuned.png",
                          f"gantt_{result.best_baseline.key}.png"])
  for key in ("bars", "gantt_go_finetuned"):
    with open(files[key], "rb") as fh:
      assert fh.read(4) == b"\x89PNG"
  data = json.loads((tmp_path / "out" / "results.json").read_text())
  assert data["launcher"] == "place"
  assert [results.row_name(r) for r in data["rows"]] == [r.method for r in result.rows]
  for row, r in zip(data["rows"], result.rows):
    assert row["objective"] == r.objective and row["feasible"] == r.feasible
    assert row["peak_memory"] == np.max(r.peak_memory)
  assert data["best"] == result.best.method and data["settings"]["graph"] == GRAPH
  saved = np.load(files["placement"])
  np.testing.assert_array_equal(saved["placement"], result.best.placement)
  # A rerun into the folder without plots removes the plots the first run listed, and only
  # those: a file of the user's stays.
  (tmp_path / "out" / "notes.txt").write_text("mine")
  place_lib.write_outputs(result, str(tmp_path / "out"), plots=False)
  assert sorted(os.listdir(tmp_path / "out")) == sorted(
      ["results.json", "results.csv", "results.md", "placement.npz", "notes.txt"])
  go = result.go_row
  assert go.key == "go_finetuned"
  np.testing.assert_array_equal(saved["go_placement"], go.placement)
  np.testing.assert_array_equal(saved["go_priority"], go.priority)
  assert str(saved["method"]) == result.best.method and "mapping" not in saved
  table = (tmp_path / "out" / "results.md").read_text()
  for r in result.rows:
    assert f"| {r.method} |" in table
  assert place_lib.verdict(result) in table
  # another launcher pointed at this folder stops, naming the folder and go-jax-place
  with pytest.raises(ValueError, match=r"holds results of go-jax-place.*go-jax-evaluate"):
    harness.run({"methods": ["single"], "graphs": ["chain:n=4"]}, str(tmp_path / "out"),
                progress=False)


def test_place_coarsens_big_graphs(tmp_path):
  graph = sources.load_graph("layered:n=40,width=6,seed=1")
  result = place_lib.place(graph, "nvlink2", checkpoint="none", finetune_seconds=0,
                           baselines=["heft", "m_etf"], max_nodes=15)
  assert result.original is graph and result.graph.num_nodes <= 15
  assert result.settings["coarsened"] and result.settings["solved_nodes"] <= 15
  assert result.go_row is None  # fresh parameters and no fine-tuning: baselines only
  assert "fresh parameters" in result.settings["go_skipped"]
  assert "GO skipped: go_hint: checkpoint='none'" in place_lib.header(result)
  _check_rows(result, "makespan")
  files = place_lib.write_outputs(result, str(tmp_path), plots=False)
  saved = np.load(files["placement"])
  expanded = result.coarsened.expand(result.best.placement)
  assert saved["placement"].shape == (40,)
  np.testing.assert_array_equal(saved["placement"], expanded)
  np.testing.assert_array_equal(saved["coarse_placement"], result.best.placement)
  np.testing.assert_array_equal(saved["mapping"], result.coarsened.mapping)
  assert "go_placement" not in saved
  on_original = methods.evaluate(graph, result.topology, expanded,
                                 result.coarsened.expand(result.best.priority), "makespan")
  score = result.original_scores[result.best.key]
  assert score["objective"] == on_original["objective"]
  assert score["feasible"] == on_original["feasible"]
  assert sorted(result.original_scores) == ["heft", "m_etf"]
  # Capacities come from the graph given, not the coarse one.
  assert result.settings["mem_capacity"] == float(np.min(preset("nvlink2").mem_capacity))
  topo, footprint = harness.make_topology(harness.parse_topology("nvlink2@mem=0.7x"), graph)
  scaled = place_lib.place(graph, "nvlink2@mem=0.7x", method=None, baselines=["heft"],
                           max_nodes=15)
  assert scaled.settings["mem_reference"] == footprint
  np.testing.assert_array_equal(scaled.topology.mem_capacity, topo.mem_capacity)
  data = json.loads(open(files["results"]).read())
  assert data["original_graph"]["heft"]["objective"] == result.original_scores["heft"][
      "objective"]
  assert "coarsened to" in place_lib.header(result)
  assert not any(n.endswith(".png") for n in os.listdir(tmp_path))


def test_place_skips_unavailable_baselines_and_ranks_peak_memory(monkeypatch):
  """A built-in whose optional dependency is missing is skipped; a typo stops the run."""
  methods.available()  # the built-ins loaded, so that the entry below stays
  monkeypatch.setitem(methods._UNAVAILABLE, "optional_one", "it needs fakepkg")  # pylint: disable=protected-access
  graph = sources.load_graph("chain:n=8")
  with pytest.raises(ValueError, match=r"baselines: unknown method\(s\) \['no_such_method'\]"):
    place_lib.place(graph, "nvlink2", method=None, baselines=["no_such_method", "heft"])
  result = place_lib.place(graph, "nvlink2", objective="peak_memory", method=None,
                           baselines=["optional_one", "heft", "single"])
  assert [r.key for r in result.rows] == ["heft", "single"]
  assert result.settings["skipped_baselines"] == ["optional_one"]
  _check_rows(result, "peak_memory")
  table = place_lib.markdown_table(result)  # peak memory in bytes, not seconds
  assert f"| {plotting.format_bytes(result.rows[1].objective)} |" in table


@pytest.mark.parametrize("spec", ["nvlink2@mem=1", "nvlink2@mem=0x"])
def test_place_when_no_method_is_feasible(tmp_path, spec):
  """No winner, no penalty shown as seconds: what the least demanding answer needs."""
  graph = sources.load_graph("chain:n=8")
  result = place_lib.place(graph, spec, method=None, baselines=["heft", "m_etf", "single"])
  assert not any(r.feasible for r in result.rows) and result.winner is None
  verdict = place_lib.verdict(result)
  assert verdict.startswith("No method found a feasible placement") and "no winner" in verdict
  least = min(float(np.max(r.peak_memory)) for r in result.rows)
  assert plotting.format_bytes(least) in verdict and "won" not in verdict
  table = place_lib.markdown_table(result)
  assert "**" not in table and table.count("infeasible (needs") == len(result.rows)
  penalty = plotting.format_seconds(result.rows[0].objective)
  assert penalty not in table and penalty not in verdict
  files = place_lib.write_outputs(result, str(tmp_path))
  assert "bars" not in files  # nothing feasible to draw
  assert json.loads(open(files["results"]).read())["best"] is None


def test_place_header_shows_every_capacity_and_skips_go_beyond_its_devices():
  graph = sources.load_graph("chain:n=8")
  mixed = preset("nvlink4").with_memory(np.array([32e9, 32e9, 16e9, 16e9]))
  result = place_lib.place(graph, mixed, method=None, baselines=["heft"])
  assert "memory 2 x 32 GB, 2 x 16 GB" in place_lib.header(result)
  big = Topology.uniform(16, bandwidth=1e10, mem_capacity=1e12)
  result = place_lib.place(graph, big, baselines=["heft", "m_etf"])  # shipped go_hint: 8 max
  assert [r.kind for r in result.rows] == ["baseline", "baseline"]
  reason = result.settings["go_skipped"]
  assert "at most" in reason and "16" in reason
  assert f"GO skipped: {reason}" in place_lib.header(result)
  assert "GO skipped" in place_lib.verdict(result)


def test_a_zero_reference_objective_skips_go_and_the_baselines_answer():
  """A graph of zero-byte tensors has a peak memory of 0 under HEFT, which GO's rewards cannot
  be normalised by: GO is skipped with the reason and the baselines' 0 answers (the job stopped
  with one line)."""
  graph = CompGraph(cost=[1.0, 2.0, 1.0], senders=[0, 1], receivers=[1, 2],
                    out_bytes=[0.0, 0.0, 0.0], name="zero_bytes")
  result = place_lib.place(graph, "nvlink2", objective="peak_memory", finetune_seconds=0,
                           baselines=["heft", "single"])
  assert [r.kind for r in result.rows] == ["baseline", "baseline"]
  assert "reference objective of 'heft' is 0.0" in result.settings["go_skipped"]
  assert all(r.objective == 0.0 for r in result.rows)


@pytest.mark.parametrize("kwargs, message", [
    (dict(objective="latency"), "unknown objective"),
    (dict(finetune_seconds=-1), "finetune_seconds must be >= 0"),
    (dict(max_nodes=1), "max_nodes must be an integer >= 2"),
    (dict(topology_spec="nvlink3"), "unknown preset"),
    (dict(baselines=["critical_path"]), "only schedule a fixed placement"),
    (dict(baselines=[]), "nothing to compare"),
    (dict(samples=0, baselines=["heft"]), "samples must be >= 1"),
    (dict(method="no_such_go"), "unknown method 'no_such_go'"),
])
def test_place_errors(kwargs, message):
  args = dict(topology_spec="nvlink2", checkpoint="none", finetune_seconds=0)
  args.update(kwargs)
  with pytest.raises(ValueError) as e:
    place_lib.place(sources.load_graph("chain:n=4"), args.pop("topology_spec"), **args)
  assert message in str(e.value)


def test_load_policy(tmp_path, monkeypatch):
  with pytest.raises(ValueError, match="no pretrained checkpoint 'no_such_ckpt'"):
    place_lib.load_policy("no_such_ckpt")
  config, params, label = place_lib.load_policy("none")
  assert params is None and label.startswith("none") and config.samples >= 1
  assert config.policy.to_dict() == pretrained.load_config().policy.to_dict()
  monkeypatch.chdir(tmp_path)
  _write_checkpoint(str(tmp_path / "ckpt"))
  config, params, label = place_lib.load_policy(str(tmp_path / "ckpt"))
  assert label == str(tmp_path / "ckpt") and config.policy.hidden == tiny_config().policy.hidden
  assert params is not None


# ------------------------------------------------------------------ launcher
def test_launcher_end_to_end(launcher_run):
  proc, out = launcher_run
  stdout, stderr = proc.communicate(timeout=600)
  assert proc.returncode == 0, stderr[-3000:]
  data = json.loads(open(os.path.join(out, "results.json")).read())
  assert data["launcher"] == "place"
  assert [r["name"] for r in data["rows"]] == [
      "go zero-shot (greedy)", "go zero-shot (best of 4)", "heft", "m_etf"]
  assert [r["stage"] for r in data["rows"]] == [
      "zero-shot greedy", "zero-shot best of 4", None, None]
  assert data["settings"]["skipped_baselines"] == []
  rows = {r["key"]: r for r in data["rows"]}
  assert rows["go_zero_shot_best"]["objective"] <= rows["go_zero_shot_greedy"]["objective"]
  best = min(data["rows"], key=lambda r: (r["objective"], r["kind"] == "go"))
  assert data["best"] == best["name"]
  baseline = min(rows["heft"], rows["m_etf"], key=lambda r: r["objective"])
  assert sorted(os.listdir(out)) == sorted([
      "results.json", "results.csv", "results.md", "placement.npz", "objective_bars.png",
      "gantt_go_zero_shot_best.png", f"gantt_{baseline['key']}.png"])

  graph = sources.load_graph(GRAPH)
  saved = np.load(os.path.join(out, "placement.npz"))
  for prefix, key in (("", best["key"]), ("go_", "go_zero_shot_best")):
    again = methods.evaluate(graph, preset("nvlink2"), saved[prefix + "placement"],
                             saved[prefix + "priority"], "makespan")
    assert again["objective"] == rows[key]["objective"]
    assert again["feasible"] == rows[key]["feasible"]
  assert str(saved["go_method"]) == "go zero-shot (best of 4)"
  assert data["verdict"] in stdout and "| go zero-shot (greedy) |" in stdout


def test_launcher_rejects_bad_graph():
  env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  proc = subprocess.run([sys.executable, "-m", "experiments.place", "--graph=no_such_model"],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0
  assert "--graph=no_such_model: unknown graph name" in proc.stderr


def test_launcher_method_none_runs_only_the_baselines(tmp_path):
  """--method=none: the baselines alone (no policy is loaded or compiled)."""
  env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = str(tmp_path / "out")
  proc = subprocess.run([sys.executable, "-m", "experiments.place", f"--graph={GRAPH}",
                         "--topology=nvlink2", "--method=none", "--baselines=heft,m_sct",
                         "--noplots", f"--out={out}"],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "| heft |" in proc.stdout and "| m_sct |" in proc.stdout
  assert "| go " not in proc.stdout
  with open(os.path.join(out, "results.json")) as fh:
    data = json.load(fh)
  assert data["rows"] and all(not r["label"].startswith("go") for r in data["rows"])


def test_a_bad_go_option_stops_go_jax_place_instead_of_skipping_go():
  """Only an instance GO cannot serve (devices, fresh parameters without fine-tuning) runs the
  baselines alone; a bad option value is an error (the launcher: one line, status 1)."""
  graph = sources.load_graph("chain:n=8")
  for opts, match in ((dict(learning_rate=0.0, finetune_seconds=1.0), "learning_rate"),
                      (dict(finetune_seconds=float("inf"), finetune_updates=1),
                       "finetune_seconds must be a finite number")):
    with pytest.raises(ValueError, match=match):
      place_lib.place(graph, "nvlink2", method="go", baselines=["heft"], **opts)


def test_a_brkga_budget_below_one_generation_is_an_error_not_a_skipped_row():
  graph = sources.load_graph("chain:n=8")
  with pytest.raises(ValueError, match=r"brkga_budget=50 is below one generation of brkga "
                                       r"\(80 evaluations"):
    place_lib.place(graph, "nvlink2", method=None, baselines=["heft", "brkga"], brkga_budget=50)
  # without a BRKGA baseline the budget is not used, so not checked
  assert place_lib.place(graph, "nvlink2", method=None, baselines=["heft"],
                         brkga_budget=50).best.method == "heft"


def test_place_launcher_refuses_a_seed_that_the_generators_would_truncate():
  """--seed above methods.MAX_SEED (JAX's keys keep 32 bits: 2**32 was seed 0 again) is one
  line from the flag parser, before any work. In a subprocess: importing the launcher here would
  define its flags (--graph, --seed, ...) a second time beside other launchers' tests."""
  env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  proc = subprocess.run([sys.executable, "-m", "experiments.place", f"--seed={2**32}",
                         "--method=none", "--baselines=heft", "--noplots"],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0
  assert str(methods.MAX_SEED) in proc.stderr and "Traceback" not in proc.stderr
  assert "| heft |" not in proc.stdout  # refused before any work
