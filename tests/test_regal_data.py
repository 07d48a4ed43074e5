"""REGAL dataset builders (go_jax/datasets, docs/regal_data.md): hash, filter, build, resume."""

import json
import os
import types

import numpy as np
import pytest

from go_jax import datasets
from go_jax.datasets import regal, store, xla_set
from simulator.graph import CompGraph
from simulator.sources import regal_dag

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py


def _permuted(g: CompGraph, seed: int) -> CompGraph:
  perm = np.random.default_rng(seed).permutation(g.num_nodes)  # old id -> new id
  inv = np.argsort(perm)
  return CompGraph(cost=g.cost[inv], senders=perm[g.senders], receivers=perm[g.receivers],
                   out_bytes=g.out_bytes[inv] + 1.0)


def test_topology_hash_is_invariant_to_relabelling_only():
  g = regal_dag(40, seed=1)
  assert store.topology_hash(g) == store.topology_hash(_permuted(g, 0))  # costs ignored too
  assert store.topology_hash(g) != store.topology_hash(regal_dag(40, seed=2))
  # same degree sequence, different structure: two chains vs a longer chain and a pair
  a = CompGraph(cost=np.ones(4), senders=[0, 2], receivers=[1, 3])
  b = CompGraph(cost=np.ones(4), senders=[0, 1], receivers=[1, 2])
  assert store.topology_hash(a) != store.topology_hash(b)


def _fake_solve(rules):
  """A stand-in for methods.solve: (low, high) results from `rules(graph)`; counts calls."""
  calls = []

  def solve(name, graph, topology, *, objective, budget, seed):
    assert name == "brkga" and objective == "makespan"
    calls.append((graph.num_nodes, budget))
    low, high = rules(graph)
    feasible, makespan = low if budget <= 100 else high
    return types.SimpleNamespace(makespan=makespan, feasible=feasible, search_seconds=0.0)
  solve.calls = calls
  return solve


@pytest.mark.parametrize("low,high,rule,keep", [
    ((False, 10.0), (True, 9.5), "fits_only_high", True),
    ((True, 10.0), (True, 7.9), "faster_high", True),
    ((True, 10.0), (True, 8.5), "no_room", False),
    ((False, 10.0), (False, 5.0), "high_oom", False),
])
def test_filter_rule(low, high, rule, keep):
  fig = regal.room_for_improvement(regal_dag(10, seed=0), "nvlink2@mem=1e9", low_budget=100,
                                   high_budget=1000, solve=_fake_solve(lambda g: (low, high)))
  assert fig["rule"] == rule and fig["keep"] is keep
  assert fig["capacity"] == 1e9
  with pytest.raises(ValueError, match="low_budget < high_budget"):
    regal.room_for_improvement(regal_dag(10, seed=0), low_budget=100, high_budget=100)


def _keep_even(g):  # keeps graphs with an even number of ops: deterministic, about half
  return ((False, 2.0), (True, 1.0)) if g.num_nodes % 2 == 0 else ((True, 1.0), (True, 1.0))


# "nvlink2" (no relative memory): no footprint simulation, so no compile in these tests.
TINY = dict(train=6, valid=2, test=2, min_nodes=8, max_nodes=14, save_seconds=0.0,
            log=None, low_budget=100, high_budget=1000, topology="nvlink2")


def test_tiny_build_resumes_after_interruption(tmp_path):
  out = str(tmp_path / "regal")
  reference = regal.build_regal_dataset(str(tmp_path / "ref"), solve=_fake_solve(_keep_even),
                                        **TINY)
  assert store.acceptance(reference)["kept"] == 10
  solve = _fake_solve(_keep_even)

  def interrupted(*args, **kwargs):
    if len(solve.calls) >= 12:
      raise KeyboardInterrupt  # a Ctrl-C in the middle of candidate 6
    return solve(*args, **kwargs)
  with pytest.raises(KeyboardInterrupt):
    regal.build_regal_dataset(out, solve=interrupted, **TINY)
  first = store.read_manifest(out)
  assert first["candidates"] == 6 and 0 < len(first["graphs"]) < 10
  mtimes = {g["file"]: os.stat(os.path.join(out, g["file"])).st_mtime_ns
            for g in first["graphs"]}
  again = _fake_solve(_keep_even)
  manifest = regal.build_regal_dataset(out, solve=again, **TINY)
  # finished candidates were not examined again (2 solves per new, non-duplicate candidate)
  assert len(again.calls) == 2 * (manifest["candidates"] - 6 - sum(
      r["reason"] == "duplicate" and r["candidate"] >= 6 for r in manifest["rejected"]))
  assert all(os.stat(os.path.join(out, f)).st_mtime_ns == t for f, t in mtimes.items())
  # the same dataset as an uninterrupted build
  strip = lambda m: [{k: v for k, v in g.items() if "seconds" not in k} for g in m["graphs"]]
  assert strip(manifest) == strip(reference)
  counts = {s: sum(g["split"] == s for g in manifest["graphs"]) for s in store.SPLITS}
  assert counts == {"train": 6, "valid": 2, "test": 2}
  assert len({g["hash"] for g in manifest["graphs"]}) == 10
  # files are CostGraphDefs named by hash, and a split loads back as graphs
  names, graphs = datasets.load_split(f"regal_data:train,dir={out},limit=4")
  assert len(graphs) == 4 and all(n.startswith("graph_") for n in names)
  entry = manifest["graphs"][0]
  assert graphs[0].num_nodes == entry["nodes"] and graphs[0].num_edges == entry["edges"]
  assert store.topology_hash(graphs[0]) == entry["hash"]
  names, graphs = datasets.load_split("test", out)
  assert len(graphs) == 2
  # growing the sample keeps what is there; other recipe options are refused
  more = regal.build_regal_dataset(out, solve=_fake_solve(_keep_even), **dict(TINY, train=7))
  assert strip(more)[:10] == strip(manifest)
  with pytest.raises(ValueError, match=r"other settings \(differing: \['max_nodes'\]\)"):
    regal.build_regal_dataset(out, solve=solve, **dict(TINY, max_nodes=20))
  # a bad filter option stops before the folder exists, so the corrected rerun can start
  fresh = str(tmp_path / "fresh")
  for bad, match in (({"objective": "nope"}, "unknown objective"),
                     ({"low_budget": 50, "high_budget": 10}, "low_budget < high_budget"),
                     ({"min_improvement": float("nan")}, "min_improvement must be in")):
    with pytest.raises(ValueError, match=match):
      regal.build_regal_dataset(fresh, solve=solve, **dict(TINY, **bad))
    assert not os.path.exists(fresh)


def test_a_training_config_takes_a_split(tmp_path):
  """config.graphs may name a built split: every graph of it becomes an instance."""
  from go_jax.training import loop  # pylint: disable=g-import-not-at-top
  out = str(tmp_path / "regal")
  regal.build_regal_dataset(out, solve=_fake_solve(_keep_even), **TINY)
  names, split = datasets.load_split("train", out)
  config = types.SimpleNamespace(graphs=(f"regal_data:train,dir={out},limit=3", "regal:n=20"),
                                 topologies=("nvlink2", "nvlink4"))
  graphs, topos, labels = loop.build_instances(config)
  assert len(graphs) == 2 * 4 and [t.num_devices for t in topos[:2]] == [2, 4]
  assert labels[0] == f"regal_data:train,dir={out},limit=3/{names[0]} @ nvlink2"
  assert all(a.num_nodes == b.num_nodes for a, b in zip(graphs[::2], split[:3]))
  assert labels[-1] == "regal:n=20 @ nvlink4"
  for bad, match in ((f"regal_data:train,dir={tmp_path}/none", "regal_data:train"),
                     (f"regal_data:train,dir={out},size=2", "bad item")):
    with pytest.raises(ValueError, match=r"config\.graphs: .*" + match):
      loop.build_instances(types.SimpleNamespace(graphs=(bad,), topologies=("nvlink2",)))


def test_heldout_comparison_on_a_split(tmp_path, capsys):
  """go_jax.regal.heldout validates on a built split (--graphs takes a data spec)."""
  from go_jax.regal import heldout  # pylint: disable=g-import-not-at-top
  out = str(tmp_path / "regal")
  regal.build_regal_dataset(out, solve=_fake_solve(_keep_even), **TINY)
  result_file = str(tmp_path / "valid.json")
  heldout.main(["--methods=gp_dfs", f"--graphs=regal_data:valid,dir={out}", "--budget=100",
                "--topology=nvlink2", f"--out={result_file}"])
  result = json.load(open(result_file))
  names, _ = datasets.load_split("valid", out)
  assert [r["graph"] for r in result["rows"]] == [f"regal_data:valid,dir={out}/{n}"
                                                  for n in names]
  for row in result["rows"]:  # improvement over BRKGA of the same budget and seed
    assert row["gp_dfs_improvement"] == pytest.approx(
        (row["brkga"] - row["gp_dfs"]) / row["brkga"])
  assert result["summary"]["gp_dfs"]["wins"] + result["summary"]["gp_dfs"]["losses"] <= 2
  capsys.readouterr()
  with pytest.raises(SystemExit):
    heldout.main(["--methods=gp_dfs", f"--graphs=regal_data:valid,dir={tmp_path}/none"])
  assert "go_jax.regal.heldout: " in capsys.readouterr().err


def test_duplicate_topology_is_rejected(tmp_path, monkeypatch):
  base = regal_dag(10, seed=5)
  make = lambda index, **kw: base if index % 2 == 0 else _permuted(base, index)
  monkeypatch.setattr(regal, "candidate_graph", make)
  keep_all = _fake_solve(lambda g: ((False, 2.0), (True, 1.0)))
  manifest = regal.build_regal_dataset(str(tmp_path / "d"), solve=keep_all,
                                       **dict(TINY, train=1, valid=0, test=0,
                                              max_candidates=4))
  assert len(manifest["graphs"]) == 1 and manifest["candidates"] == 1
  manifest = regal.build_regal_dataset(str(tmp_path / "d"), solve=keep_all,
                                       **dict(TINY, train=2, valid=0, test=0,
                                              max_candidates=4))
  assert len(manifest["graphs"]) == 1  # every later candidate is the same topology
  assert [r["reason"] for r in manifest["rejected"]] == ["duplicate"] * 3
  assert len(keep_all.calls) == 2  # duplicates never reach the filter


def test_data_spec_errors(tmp_path):
  assert store.parse_data_spec(f"regal_data:valid,dir={tmp_path},limit=3") == (
      str(tmp_path), "valid", 3)
  assert store.parse_data_spec("xla_data:test")[0].endswith("regal_xla")
  for spec, match in [("regal_data:dev", "unknown split 'dev'"), ("regal:train", "expected"),
                      ("regal_data:train,limit=0", "bad item 'limit=0'"),
                      ("regal_data:train,bogus=1", "bad item")]:
    with pytest.raises(ValueError, match=match):
      store.parse_data_spec(spec)
  with pytest.raises(ValueError, match="no dataset manifest"):
    datasets.load_split(f"regal_data:train,dir={tmp_path}")
  (tmp_path / "manifest.json").write_text("{not json")
  with pytest.raises(ValueError, match="manifest.json: not a readable manifest"):
    datasets.load_split("train", str(tmp_path))


def test_model_families_of_the_zoo():
  assert xla_set.model_family("gnmt8") == "gnmt"
  assert xla_set.model_family("bert_base") == "transformer"
  assert xla_set.model_family("transformer_xl2") == "transformer_xl"
  with pytest.raises(ValueError, match="unknown zoo model"):
    xla_set.model_family("nope")
  variants = xla_set.zoo_variants(sizes=("tiny",), coarsen=256)
  families = {f for f, _ in variants}
  assert {"gnmt", "resnet", "inception", "transformer_xl", "wavenet"} <= families
  assert all(s.endswith(",coarsen=256") and ",stage=post," in s for _, s in variants)


def test_xla_set_split_by_family(tmp_path):
  variants = [("fam_a", "chain:n=6"), ("fam_a", "chain:n=7"), ("fam_b", "chain:n=8"),
              ("fam_c", "series_parallel:n=9,seed=1"), ("fam_c", "chain:n=6"),
              ("fam_d", "chain:n=0")]
  from simulator.sources import load_graph
  manifest = xla_set.build_xla_dataset(str(tmp_path / "x"), variants=variants, load=load_graph,
                                       valid_families=("fam_b",), test_families=("fam_c",),
                                       save_seconds=0.0, log=None)
  split_families = {}
  for g in manifest["graphs"]:
    split_families.setdefault(g["split"], set()).add(g["family"])
  assert split_families == {"train": {"fam_a"}, "valid": {"fam_b"},
                            "test": {"fam_c"}}
  reasons = sorted(r["reason"] for r in manifest["rejected"])
  assert reasons == ["build_failed", "duplicate"]  # chain:n=6 twice; n=0 is invalid
  assert json.loads(json.dumps(manifest)) == store.read_manifest(str(tmp_path / "x"))
  with pytest.raises(ValueError, match="both a valid and a test family"):
    xla_set.build_xla_dataset(str(tmp_path / "y"), variants=variants, valid_families=("fam_a",),
                              test_families=("fam_a",), log=None)


def test_heldout_passes_the_search_options(monkeypatch, capsys):
  """--population / --elite_frac / --mutant_frac reach the methods (a trained workdir can then
  be scored with the search the shipped checkpoint uses); unset ones are not passed."""
  from go_jax.regal import heldout  # pylint: disable=g-import-not-at-top
  seen = {}

  def fake_compare(methods, specs, topology, objective, budget, seeds, progress, **overrides):
    seen.update(overrides)
    return {"summary": {}}
  monkeypatch.setattr(heldout, "compare", fake_compare)
  heldout.main(["--methods=regal_hint", "--graphs=regal:n=20", "--checkpoint=/w",
                "--population=160", "--mutant_frac=0"])
  assert seen == {"checkpoint": "/w", "population": 160, "mutant_frac": 0.0}
  capsys.readouterr()
  with pytest.raises(SystemExit):
    heldout.main(["--methods=regal_hint", "--graphs=regal:n=20", "--cpu_devices=-1"])
  assert "--cpu_devices=-1: must be >= 0" in capsys.readouterr().err


def test_xla_options_are_checked_before_the_folder(tmp_path):
  """A bad size, coarsen or family is the caller's mistake, not a variant that fails to
  build: a ValueError naming the option and the value, and no folder."""
  fresh = str(tmp_path / "x")
  for kwargs, match in (
      (dict(sizes=("tiny", "huge")), r"sizes: unknown zoo size\(s\) \['huge'\]"),
      (dict(sizes=()), "must not be empty"),
      (dict(coarsen=0), "coarsen must be a positive number of ops.*got 0"),
      (dict(coarsen=-3), "coarsen must be a positive number of ops.*got -3"),
      (dict(valid_families=("wavnet",)),
       r"valid_families: unknown model family\(ies\) \['wavnet'\]; known: amoebanet, "),
      (dict(test_families=("nope",)), r"test_families: unknown model family\(ies\) \['nope'\]")):
    with pytest.raises(ValueError, match=match):
      xla_set.build_xla_dataset(fresh, models=("resnet50",), log=None, **kwargs)
  assert not os.path.exists(fresh)
  # with given variants, their own families are known besides the zoo's
  xla_set.check_families(("fam_b",), ("inception",), [("fam_b", "chain:n=6")])
  with pytest.raises(ValueError, match=r"unknown model family\(ies\) \['fam_c'\]"):
    xla_set.check_families(("fam_b",), ("fam_c",), [("fam_b", "chain:n=6")])


def test_low_budget_below_one_generation_writes_nothing(tmp_path):
  """BRKGA refuses a budget below one generation (population - elites = 80): the check says
  so before the folder exists, for both sets, so the corrected rerun is not refused."""
  from go_jax.methods import evolution  # pylint: disable=g-import-not-at-top
  assert evolution.generation_evaluations() == 80
  fresh = str(tmp_path / "fresh")
  with pytest.raises(ValueError, match=r"low_budget=79 is below one BRKGA generation \(80"):
    regal.build_regal_dataset(fresh, solve=_fake_solve(_keep_even),
                              **dict(TINY, low_budget=79))
  with pytest.raises(ValueError, match=r"low_budget=50 is below one BRKGA generation"):
    xla_set.build_xla_dataset(fresh, variants=[("f", "chain:n=6")], filter=True,
                              low_budget=50, log=None)
  with pytest.raises(ValueError, match=r"max_candidates must be >= 1"):
    regal.build_regal_dataset(fresh, solve=_fake_solve(_keep_even),
                              **dict(TINY, max_candidates=0))
  assert not os.path.exists(fresh)
  regal.check_filter_options("makespan", 80, 81, 0.2)  # exactly one generation is fine


def test_a_run_failing_at_its_first_candidate_leaves_no_manifest(tmp_path):
  """A fresh folder gets its manifest with its first recorded candidate: an error found only
  when the first candidate is solved does not pin the settings, and the rerun starts."""
  out = str(tmp_path / "d")

  def broken(*args, **kwargs):
    raise ValueError("solver says no")
  with pytest.raises(ValueError, match="solver says no"):
    regal.build_regal_dataset(out, solve=broken, **TINY)
  assert not os.path.exists(os.path.join(out, store.MANIFEST))
  manifest = regal.build_regal_dataset(out, solve=_fake_solve(_keep_even),
                                       **dict(TINY, max_nodes=20))
  assert len(manifest["graphs"]) == 10


def _run_launcher(tmp_path, *args):
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
  proc = subprocess.run([sys.executable, "-m", "experiments.build_regal_data",
                         f"--out={tmp_path}/out", *args], cwd=repo, env=env,
                        capture_output=True, text=True, timeout=240)
  lines = [l for l in proc.stderr.splitlines() if l.strip()]
  return proc.returncode, lines


@pytest.mark.parametrize("args,want", [
    (["--low_budget=50"], "low_budget=50 is below one BRKGA generation (80"),
    (["--max_candidates=-1"], "--max_candidates=-1: -1 is not a positive integer"),
    (["--set=xla", "--train=5"], "--train does not apply to --set=xla"),
    (["--set=xla", "--low_budget=90"], "--low_budget is a filter option"),
    (["--set=xla", "--sizes=tiny,huge"], "sizes: unknown zoo size(s) ['huge']"),
])
def test_launcher_bad_options_are_one_line_and_write_nothing(tmp_path, args, want):
  rc, lines = _run_launcher(tmp_path, *args)
  assert rc == 1 and len(lines) == 1 and want in lines[0], lines
  assert not os.path.exists(tmp_path / "out")


def _tiny_folder(tmp_path, name="regal"):
  out = str(tmp_path / name)
  regal.build_regal_dataset(out, solve=_fake_solve(_keep_even), **TINY)
  return out


def _edit_manifest(out, edit):
  path = os.path.join(out, store.MANIFEST)
  manifest = json.load(open(path))
  edit(manifest)
  json.dump(manifest, open(path, "w"))


def test_bad_manifest_entries_name_file_entry_and_field(tmp_path):
  out = _tiny_folder(tmp_path)
  good = json.load(open(os.path.join(out, store.MANIFEST)))
  first = good["graphs"][0]["file"]
  for edit, match in (
      (lambda m: m["graphs"][0].pop("split"), rf"graphs\[0\] \({first}\): field 'split' is "
                                              r"missing"),
      (lambda m: m["graphs"][1].update(split="dev"), r"graphs\[1\] .*field 'split' must be one "
                                                     r"of \['train', 'valid', 'test'\], got 'dev'"),
      (lambda m: m["graphs"][0].update(nodes="7"), r"field 'nodes' must be an integer >= 1"),
      (lambda m: m.update(candidates="x"), r"manifest field 'candidates' must be a number "
                                           r">= 0 \(an integer\), got 'x'"),
      (lambda m: m.update(graphs={}), r"manifest field 'graphs' must be a list"),
      (lambda m: m["rejected"].append(3), r"rejected\[\d+\] must be an object")):
    _edit_manifest(out, lambda m: (m.clear(), m.update(json.loads(json.dumps(good)))))
    _edit_manifest(out, edit)
    for call in (lambda: datasets.load_split("train", out),
                 lambda: regal.build_regal_dataset(out, solve=_fake_solve(_keep_even),
                                                   **TINY)):
      with pytest.raises(ValueError, match=r"manifest\.json: .*" + match):
        call()


def test_damaged_folder_is_named_on_resume_and_load(tmp_path):
  """Listed graph files that are gone or truncated: resuming and loading say the folder is
  damaged, name the file and how to recover, instead of building on a broken folder."""
  out = _tiny_folder(tmp_path)
  manifest = store.read_manifest(out)
  entry = next(g for g in manifest["graphs"] if g["split"] == "train")
  path = os.path.join(out, entry["file"])
  text = open(path).read()
  resume = lambda: regal.build_regal_dataset(out, solve=_fake_solve(_keep_even), **TINY)
  load = lambda: datasets.load_split("train", out)
  os.remove(path)
  for call in (resume, load):
    with pytest.raises(ValueError, match=rf"dataset folder {out} is damaged: {entry['file']} "
                                         r"\(listed in manifest\.json\) is missing; restore "
                                         r"the file, or delete the folder and build it again"):
      call()
  open(path, "w").write(text[:len(text) // 2])
  for call in (resume, load):
    with pytest.raises(ValueError, match=rf"{entry['file']} .* has \d+ bytes, the manifest "
                                         r"says \d+ \(truncated or changed\)"):
      call()
  # an older manifest without sizes: loading parses and compares the node and edge counts
  _edit_manifest(out, lambda m: [g.pop("bytes") for g in m["graphs"]])
  with pytest.raises(ValueError, match=r"is damaged: .* (does not parse|holds \d+ nodes)"):
    load()
  open(path, "w").write(text)
  assert len(load()[1]) == 6 and resume()["candidates"] == manifest["candidates"]


def test_load_split_limit_kind_and_repeated_keys(tmp_path):
  out = _tiny_folder(tmp_path)
  assert len(datasets.load_split("train", out)[1]) == 6
  assert len(datasets.load_split("train", out, limit=5)[1]) == 5
  for limit in (0, -1, True, 2.0):
    with pytest.raises(ValueError, match=r"limit must be an integer >= 1 \(None: every graph\)"):
      datasets.load_split("train", out, limit=limit)
  with pytest.raises(ValueError, match=r"key 'limit' given twice"):
    datasets.load_split(f"xla_data:train,dir={out},limit=2,limit=3")
  with pytest.raises(ValueError, match=r"key 'dir' given twice"):
    store.parse_data_spec(f"regal_data:train,dir={out},dir=x")
  with pytest.raises(ValueError, match=rf"{out} holds a dataset of kind 'regal' \(manifest"
                                       rf"\.json\), not 'xla'; use regal_data:train,dir={out}"):
    datasets.load_split(f"xla_data:train,dir={out}")
  from simulator.sources import load_graph  # pylint: disable=g-import-not-at-top
  xla = str(tmp_path / "x")
  xla_set.build_xla_dataset(xla, variants=[("fam_a", "chain:n=6")], load=load_graph,
                            save_seconds=0.0, log=None)
  assert len(datasets.load_split(f"xla_data:train,dir={xla}")[1]) == 1
  with pytest.raises(ValueError, match=r"kind 'xla' .*not 'regal'; use xla_data:train"):
    datasets.load_split(f"regal_data:train,dir={xla}")
