"""GO's transfer sweep (go_jax/transfer.py, experiments/transfer.py) on a CI-sized config."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from go_jax import harness, methods, pretrained, results, transfer
from simulator import sources

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPH, TOPO = "layered:n=24,width=4,seed=1", "nvlink2@mem=0.8x"
FINETUNE_LR = 1e-3


# A graph of GRAPH's padded shape (node and edge buckets, edge chunk) that the sweep does not
# evaluate: pretrained on it with fine-tuning's update settings below, the pretraining's update
# is the same XLA program as fine-tuning's on GRAPH, which then loads it from the test run's
# compilation cache (tests/conftest.py) instead of compiling it again (about 9 s on the CI machine).
PRETRAIN_GRAPH = "layered:n=24,width=4,seed=3"


def tiny_pretrain(row):
  """Two updates of a tiny policy of the row's variant, hint and task on PRETRAIN_GRAPH, with
  fine-tuning's update settings (one update per call, a constant learning rate equal to
  tiny_config's finetune_lr)."""
  from experiments.configs import pretrain, train_test  # pylint: disable=g-import-not-at-top
  config = train_test.get_config()
  small = dict(config.policy)
  config.policy = pretrain.small_policy(row)
  config.policy.update({k: small[k] for k in ("hidden", "gnn_layers", "attention_layers",
                                              "heads", "segment_len", "priority_levels")})
  config.task = transfer.ROWS[row][2]
  config.graphs = (PRETRAIN_GRAPH,)
  config.updates, config.updates_per_call, config.tensorboard = 2, 1, False
  config.graphs_per_update = 1
  config.lr_schedule, config.warmup_updates, config.learning_rate = "constant", 0, FINETUNE_LR
  return config


def tiny_config(tmp_path, rows=("go_hint",)):
  return dict(graphs=(GRAPH,), topologies=(TOPO,), baselines=("heft", "m_etf"),
              brkga_budget=100, rows=rows, objective="makespan", seed=0, samples=8,
              finetune_seconds={"default": 1.0}, finetune_lr=FINETUNE_LR,
              pretrain_dir=str(tmp_path / "pretrain"), pretrain_missing=True, use_shipped=False)


def test_sweep_pretrains_missing_rows_rechecks_and_resumes(tmp_path, monkeypatch):
  cfg, out = tiny_config(tmp_path), str(tmp_path / "out")
  rows = transfer.run(cfg, out, pretrain_config=tiny_pretrain, progress=False)
  assert os.path.isfile(tmp_path / "pretrain" / "go_hint" / "params.msgpack")
  stages = [(r["label"], r["stage"]) for r in rows]
  assert stages == [("heft", None), ("m_etf", None), ("go_hint", "zero-shot greedy"),
                    ("go_hint", "zero-shot best of 8"), ("go_hint", "fine-tuned")]
  assert {r["method"] for r in rows if r["stage"]} == {"go_hint"}  # the registered method
  assert all(set(r) == set(results.COLUMNS) and not r["error"] for r in rows)  # one format
  graph = sources.load_graph(GRAPH)
  topo = harness.make_topology(harness.parse_topology(TOPO), graph)[0]
  hint = min(r["objective"] for r in rows if not r["stage"])
  by_stage = {r["stage"]: r for r in rows if r["stage"]}
  # best of K includes the greedy action; fine-tuning keeps the best it ever simulated
  assert by_stage["zero-shot greedy"]["objective"] <= hint * 1.5
  assert by_stage["zero-shot best of 8"]["objective"] <= by_stage["zero-shot greedy"][
      "objective"] * (1 + 1e-6)
  assert by_stage["fine-tuned"]["objective"] <= by_stage["zero-shot best of 8"]["objective"] * (
      1 + 1e-6)
  assert by_stage["fine-tuned"]["updates"] >= 1
  assert results.row_name(by_stage["fine-tuned"]) == "go_hint fine-tuned (1s)"
  for r in rows:  # objectives of infeasible actions rank above every feasible one
    assert r["gap"] >= -1e-9 and r["search_seconds"] >= 0 and r["objective"] > 0
    assert r["agrees"]
  assert by_stage["fine-tuned"]["feasible"] or not any(r["feasible"] for r in rows)
  sol = methods.solve("heft", graph, topo)
  assert rows[0]["objective"] == sol.objective

  summary = transfer.summary(rows)
  ratio = by_stage["zero-shot greedy"]["objective"] / hint
  assert summary[0]["row"] == "go_hint" and summary[0]["greedy_geo"] == pytest.approx(ratio)
  assert summary[0]["greedy_within_15"] == int(ratio <= 1.15)
  text = open(os.path.join(out, transfer.MD_NAME)).read()
  assert "go_hint" in text and GRAPH in text
  assert sorted(os.listdir(out)) == ["plots", "results.csv", "results.json", "results.md"]
  assert sorted(os.listdir(os.path.join(out, "plots"))) == ["fine_tuned.png", "zero_shot.png"]

  calls = []
  monkeypatch.setattr(methods, "solve", lambda *a, **k: calls.append(a) or 1 / 0)
  again = transfer.run(cfg, out, pretrain_config=None, progress=False)  # nothing reruns
  data = json.load(open(os.path.join(out, transfer.JSON_NAME)))
  assert not calls and again == data["rows"] == rows and data["launcher"] == "transfer"
  # evaluate pointed at a transfer folder: a ValueError naming both, never a KeyError
  with pytest.raises(ValueError, match=r"holds results of go-jax-transfer.*go-jax-evaluate"):
    harness.run({"methods": ["single"], "graphs": ["chain:n=4"]}, out, progress=False)
  # the row's folder is reused only if it was pretrained with the config asked for now
  assert transfer.ensure_pretrained("go_hint", cfg, tiny_pretrain).endswith("go_hint")
  def longer(row):
    config = tiny_pretrain(row)
    config.learning_rate *= 2
    return config
  with pytest.raises(ValueError,
                     match=r"go_hint was not pretrained with 'go_hint'.*learning_rate"):
    transfer.ensure_pretrained("go_hint", cfg, longer)


def test_summary_geometric_means_by_hand():
  def row(label, stage, objective, graph="g1"):
    return results.empty_row(label=label, method=label, stage=stage, graph=graph,
                             topology="t", objective=objective, feasible=True, error="")
  rows = [row("heft", None, 2.0), row("go_hint", "zero-shot greedy", 4.0),
          row("go_hint", "zero-shot best of 4", 2.0), row("go_hint", "fine-tuned", 1.0),
          row("heft", None, 1.0, "g2"), row("go_hint", "zero-shot greedy", 1.1, "g2"),
          row("go_hint", "zero-shot best of 4", 1.0, "g2"),
          row("go_hint", "fine-tuned", 1.04, "g2")]
  (s,) = transfer.summary(rows)
  assert s["greedy_geo"] == pytest.approx((2.0 * 1.1) ** 0.5)
  assert s["tuned_geo"] == pytest.approx((0.5 * 1.04) ** 0.5)
  assert (s["tuned_within_5"], s["tuned_ahead"], s["greedy_within_15"]) == (2, 1, 1)
  assert s["greedy_feasible"] == 2 and s["greedy_worst"] == pytest.approx(2.0)


def test_seed_spread_by_hand():
  def row(label, stage, objective, feasible=True):
    return results.empty_row(label=label, method="go", stage=stage, graph="g", topology="t",
                             objective=objective, feasible=feasible, error="",
                             search_seconds=1.0)
  rows = [row("heft", None, 2.0)]
  for label, greedy, tuned in (("no_gnn", 3.0, 1.8), ("no_gnn_s1", 2.2, 2.1),
                               ("no_gnn_s2", 2.6, 1.9), ("go", 2.4, 1.9)):
    rows += [row(label, "zero-shot greedy", greedy, feasible=greedy < 2.9),
             row(label, "zero-shot best of 4", greedy), row(label, "fine-tuned", tuned)]
  (e,) = transfer.seed_spread(rows)  # "go" has one seed: no spread to report
  assert e["row"] == "no_gnn" and e["seeds"] == [0, 1, 2] and e["instances"] == 1
  assert e["greedy_geo"]["values"] == pytest.approx([1.5, 1.1, 1.3])
  assert (e["greedy_geo"]["min"], e["greedy_geo"]["max"]) == pytest.approx((1.1, 1.5))
  assert e["greedy_geo"]["mean"] == pytest.approx(1.3)
  assert e["tuned_ahead"]["values"] == [1, 0, 1] and e["greedy_feasible"]["values"] == [0, 1, 1]
  text = transfer.markdown(rows)
  assert "over its pretraining seeds" in text and "| no_gnn | 0, 1, 2 | 0.900-1.050" in text
  # a zero-shot-only run (ablation.py:zoo): no fine-tuned figures, shown as "-", never nan
  zs = [r for r in rows if r["stage"] != "fine-tuned"]
  (e,) = transfer.seed_spread(zs)
  assert e["tuned_ahead"]["values"] == [None] * 3 and e["tuned_geo"]["min"] is None
  text = transfer.markdown(zs)
  assert "nan" not in text and "| no_gnn | 0, 1, 2 | - | - | 1.100-1.500" in text
  assert "| no_gnn_s1 | 1 | - | - | - | 1.100 | 1/1 | 1.100 | - |" in text


def test_comparison_bars_by_hand(tmp_path):
  """One bar per row: a row with seeds at their mean with the lowest and highest seed as its
  error bar, a single-seed row without one; no fine-tuned plot for a zero-shot-only run."""
  def row(label, stage, objective):
    return results.empty_row(label=label, method="go", stage=stage, graph="g", topology="t",
                             objective=objective, feasible=True, error="", search_seconds=1.0)
  rows = [row("heft", None, 2.0)]
  for label, greedy, tuned in (("go", 2.4, 1.9), ("no_gnn", 3.0, 1.8), ("no_gnn_s1", 2.2, 2.1),
                               ("no_gnn_s2", 2.6, 1.9)):
    rows += [row(label, "zero-shot greedy", greedy), row(label, "fine-tuned", tuned)]
  greedy = transfer.bars(rows, "greedy_geo")
  assert [b[0] for b in greedy] == ["go", "no_gnn"]
  assert greedy[0][1:] == pytest.approx((1.2, 1.2, 1.2))
  assert greedy[1][1:] == pytest.approx((1.3, 1.1, 1.5))
  assert transfer.bars(rows, "tuned_geo")[1][1:] == pytest.approx((29 / 30, 0.9, 1.05))
  paths = transfer.plot_summary(rows, str(tmp_path))
  assert [os.path.basename(p) for p in paths] == ["zero_shot.png", "fine_tuned.png"]
  assert all(os.path.getsize(p) > 0 for p in paths)
  zero_shot_only = [r for r in rows if r["stage"] != "fine-tuned"]
  assert [os.path.basename(p) for p in transfer.plot_summary(zero_shot_only, str(tmp_path))] \
      == ["zero_shot.png"]
  assert transfer.plot_summary([rows[0]], str(tmp_path)) == []  # baselines only: no bars


def test_config_errors(tmp_path):
  with pytest.raises(ValueError, match="unknown learned row"):
    transfer.settings(tiny_config(tmp_path, rows=("go_hint", "nope")))
  bad = dict(tiny_config(tmp_path), finetune_seconds={"go": 3.0})
  with pytest.raises(ValueError, match="default"):
    transfer.settings(bad)
  for budget in (0, -3, 2.5):
    with pytest.raises(ValueError, match="brkga_budget .* must be an integer >= 1"):
      transfer.settings(dict(tiny_config(tmp_path), brkga_budget=budget))
  for seed in (-1, 1.5, True, 2**32):  # 2**32: seed 0's answer in every JAX search
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2147483647\]"):
      transfer.settings(dict(tiny_config(tmp_path), seed=seed))
  with pytest.raises(ValueError, match=r"finetune_seconds\['default'\] must be finite seconds"):
    transfer.settings(dict(tiny_config(tmp_path), finetune_seconds={"default": -1.0}))
  for bad, match in (  # each would fail every learned cell alike, or mislabel the table
      ({"graphs": (GRAPH, GRAPH)}, "graphs gives .* twice"),
      ({"rows": ("go_hint", "go_hint")}, "rows gives 'go_hint' twice"),
      ({"graphs": (GRAPH, "layered:seed=1, width=4,n=24")},  # one graph in other words
       r"transfer config: graphs\[0\] .* and graphs\[1\] .* are the same graph"),
      ({"topologies": (TOPO, " nvlink2@mem=0.80x")}, "are the same topology"),
      ({"baselines": (), "rows": ()}, "nothing to run"),
      ({"topologies": ()}, "topologies is empty"),
      ({"baselines": ("heft", "go_hint")}, "both a baseline and a learned row"),
      ({"baselines": ("data_parallel",)}, "baseline 'data_parallel' is a partition method"),
      ({"baselines": ("critical_path",)}, "baseline 'critical_path' is a schedule method"),
      ({"samples": 0}, "samples must be an integer >= 1"),
      ({"finetune_lr": -1.0}, "finetune_lr must be a finite learning rate > 0"),
      ({"finetune_polish": 5.0}, "finetune_polish must be a share"),
      ({"finetune_seconds": {"default": float("inf")}}, "must be finite seconds"),
      ({"finetune_seconds": {"default": 1.0, "gdpp": 2.0}}, r"names \['gdpp'\], not rows")):
    with pytest.raises(ValueError, match=match):
      transfer.settings(dict(tiny_config(tmp_path), **bad))
  with pytest.raises(ValueError, match="no pretrained policy"):
    transfer.ensure_pretrained("go", dict(tiny_config(tmp_path), pretrain_missing=False))
  # A typo in a baseline or a graph stops the sweep before any cell runs.
  with pytest.raises(ValueError, match=r"transfer config: baselines: unknown method\(s\) "
                     r"\['nope'\]"):
    transfer.plan(transfer.settings(dict(tiny_config(tmp_path), baselines=("heft", "nope"))))
  with pytest.raises(ValueError, match="transfer config: graphs: .*unknown PipeDream model"):
    transfer.settings(dict(tiny_config(tmp_path), graphs=("pipedream:no_such_model",)))


def test_learned_methods_are_refused_as_baselines(tmp_path):
  """A learned method given as a baseline is a ValueError naming it and pointing at rows (its
  stages would otherwise be read as a learned row without a baseline: a table of dashes)."""
  learned = methods.learned_methods()
  assert {"go", "go_hint", "gdp", "go_fusion", "go_joint3", "placeto", "hdp", "regal", "gas",
          "regal_hint"} <= set(learned)
  assert not {"heft", "m_etf", "metis", "brkga", "expert"} & set(learned)
  for name in learned:
    with pytest.raises(ValueError, match=rf"baseline '{name}' is a learned method; .*"
                       r"--config\.rows"):
      transfer.settings(dict(tiny_config(tmp_path), baselines=("heft", name), rows=()))
  with pytest.raises(ValueError, match=r"baseline 'go' is a learned method; .*give it in rows "
                     r"\(--config\.rows\), e\.g\. \['go', 'no_attention'"):
    transfer.settings(dict(tiny_config(tmp_path), baselines=("go",), rows=("go_hint",)))
  with pytest.raises(ValueError, match=r"baseline 'hdp' is a learned method; .*it runs no "
                     r"pretrained row of this sweep"):
    transfer.settings(dict(tiny_config(tmp_path), baselines=("hdp",)))


def test_rows_are_learned_by_label_not_by_stage():
  """`is_learned` reads the label: a baseline row with a stage (an old results file) is still
  a baseline, and a learned row counts against the best baseline."""
  def row(label, stage, objective):
    return results.empty_row(label=label, method=label, stage=stage, graph="g",
                             topology="t", objective=objective, feasible=True, error="")
  rows = [row("heft", None, 2.0), row("placeto", "zero-shot greedy", 1.0),
          row("go_hint", "zero-shot greedy", 3.0)]
  assert [transfer.is_learned(r) for r in rows] == [False, False, True]
  inst = transfer.compare(rows)[("g", "t")]
  assert inst["best"]["label"] == "placeto"
  assert inst["learned"][("go_hint", transfer.GREEDY)]["ratio"] == pytest.approx(3.0)


def test_launcher_refuses_a_learned_baseline_in_one_line(tmp_path):
  env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  cmd = [sys.executable, "-m", "experiments.transfer", f"--out={tmp_path / 'out'}",
         f"--config.graphs=('{GRAPH}',)", f"--config.topologies=('{TOPO}',)",
         "--config.baselines=('go',)", "--config.rows=()"]
  proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  lines = [l for l in proc.stderr.splitlines() if l.strip()]
  assert proc.returncode != 0 and len(lines) == 1, proc.stderr[-3000:]
  assert "baseline 'go' is a learned method" in lines[0] and "--config.rows" in lines[0]
  assert not os.path.exists(tmp_path / "out" / transfer.JSON_NAME)


def test_seeded_rows_and_step_budget_pretraining_args(tmp_path):
  from experiments.configs import ablation, pretrain  # pylint: disable=g-import-not-at-top
  assert transfer.parse_row("go") == ("go", 0)
  assert transfer.parse_row("no_gnn_s12") == ("no_gnn", 12)
  assert transfer.method_of("gdp_s1") == "gdp"
  assert transfer.is_row("go_s3") and not transfer.is_row(None) and not transfer.is_row("heft")
  for bad in ("go_s", "nope_s1", "go_sx"):
    with pytest.raises(ValueError, match="unknown learned row"):
      transfer.parse_row(bad)
  cfg = dict(tiny_config(tmp_path), pretrain_options="updates=40,imitation_steps=30")
  assert transfer.pretrain_arg("go_s2", cfg) == "go,seed=2,updates=40,imitation_steps=30"
  assert transfer.checkpoint_of("go_s2", cfg).endswith(os.path.join("pretrain", "go_s2"))
  # the step budget: no wall-clock caps, multiples of the per-call chunks, and the row
  # without imitation gets the cloning steps' time as PPO updates
  go = pretrain.get_config("go,seed=2,updates=40,imitation_steps=30")
  assert (go.seed, go.imitation.seed, go.updates, go.imitation.steps) == (2, 2, 40, 20)
  assert go.max_seconds is None and go.imitation.max_seconds is None
  no_im = pretrain.get_config("no_imitation,updates=40,imitation_steps=40")
  assert not no_im.imitation.enabled and no_im.updates == 60
  full = pretrain.get_config("go")
  assert full.max_seconds == 1080.0 and full.imitation.max_seconds == 420.0
  assert full.self_imitation_coef == 0.0
  assert pretrain.get_config("go,self_imitation=2.5").self_imitation_coef == 2.5
  assert not full.policy.load_comm and pretrain.get_config("go,comm=1").policy.load_comm
  with pytest.raises(ValueError, match="comm must be 0 or 1"):
    pretrain.get_config("go,comm=2")
  gc = pretrain.get_config("go,group_copies=1,greedy_block=2").policy
  assert gc.load_group_copies and gc.load_greedy_block == 2
  assert not full.policy.load_group_copies and full.policy.load_greedy_block == 0
  with pytest.raises(ValueError, match="group_copies must be 0 or 1"):
    pretrain.get_config("go,group_copies=3")
  assert pretrain.get_config("go,time=1").policy.load_time and not full.policy.load_time
  assert full.policy.decode_order == "topological"
  assert pretrain.get_config("go,rank=1").policy.decode_order == "rank"
  with pytest.raises(ValueError, match="rank must be 0 or 1"):
    pretrain.get_config("go,rank=2")
  assert full.imitation.on_policy == 0.0
  assert pretrain.get_config("go,on_policy=0.5").imitation.on_policy == 0.5
  with pytest.raises(ValueError, match="on_policy must be in"):
    pretrain.get_config("go,on_policy=1.5")
  # the single-teacher recipe's options; off, the shipped recipe is unchanged
  assert (full.policy.load_block, full.imitation.prefer, full.imitation.label_smoothing,
          full.policy.load_margin) == (8, "", 0.1, 0.1)
  one = pretrain.get_config("go,block=1,prefer_heft=1,smoothing=0,margin=0.2")
  assert (one.policy.load_block, one.imitation.prefer, one.imitation.label_smoothing,
          one.policy.load_margin) == (1, "heft", 0.0, 0.2)
  assert tuple(one.imitation.teachers) == ("heft", "m_etf", "m_sct")
  for bad, match in (("block=0", "block must be >= 1"), ("prefer_heft=2", "prefer_heft must"),
                     ("smoothing=1.0", "smoothing must be in"), ("margin=-0.1", "margin must")):
    with pytest.raises(ValueError, match=match):
      pretrain.get_config("go," + bad)
  with pytest.raises(ValueError, match="bad option"):
    pretrain.get_config("go,self_imitation=x")
  with pytest.raises(ValueError, match="bad option"):
    pretrain.get_config("go,epochs=2")
  with pytest.raises(ValueError, match="updates must be >= 1"):
    pretrain.get_config("go,updates=0")
  abl = ablation.get_config()
  # the ablation rows train the shipped `go`'s recipe (copy term on) at a quarter of its steps
  quarter = pretrain.get_config(transfer.pretrain_arg("go_s1", abl))
  assert quarter.policy.load_comm and quarter.seed == 1
  assert (quarter.updates, quarter.imitation.steps) == (870, 760)
  # the full budget: the shipped `go`'s step counts; row `go` is the shipped checkpoint,
  # which was trained with exactly that recipe and seed
  full_abl = ablation.get_config("full")
  full_s1 = pretrain.get_config(transfer.pretrain_arg("go_s1", full_abl))
  assert (full_s1.updates, full_s1.imitation.steps, full_s1.seed) == (3480, 3000, 1)
  assert transfer.checkpoint_of("go", full_abl) == pretrained.available()["go"]
  shipped = pretrained.load_config(pretrained.available()["go"])
  assert (shipped.updates, shipped.imitation.steps, shipped.seed) == (3480, 3000, 0)
  assert shipped.policy.load_comm and full_s1.policy.load_comm
  assert (list(shipped.graphs), list(shipped.topologies)) == (
      list(pretrain.TRAIN_GRAPHS), list(pretrain.TRAIN_TOPOLOGIES))
  assert transfer.checkpoint_of("no_gnn", full_abl).endswith(
      os.path.join("ablation_full", "no_gnn"))
  assert not transfer.checkpoint_of("go", abl).startswith(pretrained.available()["go"])
  zoo = transfer.settings(ablation.get_config("full,zoo"))  # zero-shot on the other family
  assert list(zoo["graphs"]) == list(pretrain.HELD_OUT_OTHER) and zoo["finetune_updates"] is None
  assert all(dict(c.options)["finetune_seconds"] == 0.0 and "max_updates" not in dict(c.options)
             for c in transfer.plan(zoo) if c.label == "no_gnn")
  # the validation family: neither trained on nor held out, zero-shot, the list schedulers
  valid = transfer.settings(ablation.get_config("full,valid"))
  assert list(valid["baselines"]) == list(pretrain.VALIDATION_BASELINES)
  assert valid["finetune_updates"] is None and len(pretrain.VALIDATION) == 10
  used = set(pretrain.TRAIN_GRAPHS) | set(pretrain.HELD_OUT) | set(pretrain.HELD_OUT_OTHER)
  assert not {g.split(",")[0] for g in valid["graphs"]} & {g.split(",")[0] for g in used}
  for bad in ("half", "full,quarter", "zoo,pipedream", "valid,zoo"):
    with pytest.raises(ValueError, match="ablation.py: bad argument"):
      ablation.get_config(bad)
  cells = [c for c in transfer.plan(transfer.settings(abl)) if c.label == "go_s1"]
  assert cells and all(dict(c.options)["max_updates"] == 100 and
                       dict(c.options)["finetune_seconds"] == 0.0 for c in cells)
  # fine-tuning's self-imitation weight: the methods' default unless the config sets one
  opts = [dict(c.options) for c in transfer.plan(transfer.settings(tiny_config(tmp_path)))
          if c.label == "go_hint"]
  assert opts and all("self_imitation" not in o for o in opts)
  opts = [dict(c.options) for c in transfer.plan(transfer.settings(dict(
      tiny_config(tmp_path), finetune_self_imitation=0.0))) if c.label == "go_hint"]
  assert opts and all(o["self_imitation"] == 0.0 for o in opts)
  assert all("polish" not in dict(c.options)  # the fine-tuning polish: likewise
             for c in transfer.plan(transfer.settings(tiny_config(tmp_path))))
  opts = [dict(c.options) for c in transfer.plan(transfer.settings(dict(
      tiny_config(tmp_path), finetune_polish=0.0))) if c.label == "go_hint"]
  assert opts and all(o["polish"] == 0.0 for o in opts)
  with pytest.raises(ValueError, match="finetune_updates"):
    transfer.settings(dict(tiny_config(tmp_path), finetune_updates=0))
  # every row of the ablation table is a valid (seeded) row
  assert {transfer.parse_row(r)[0] for r in abl.rows} == {
      r for r in transfer.ROWS if r not in ("gdp", "go_hint")}
  # ... and each is pretrained with the same three seeds (the spread of every row)
  seeds = {}
  for r in abl.rows:
    row, seed = transfer.parse_row(r)
    seeds.setdefault(row, set()).add(seed)
  assert all(s == {0, 1, 2} for s in seeds.values()) and len(abl.rows) == 3 * len(seeds)
  # the transfer slice experiments/bench_executor.py times: 4 graphs x (7 baselines + go, gdp),
  # the shipped checkpoints (never pretraining) and a fixed update count, not seconds
  from experiments.configs import bench_executor_transfer  # pylint: disable=g-import-not-at-top
  bench = transfer.settings(bench_executor_transfer.get_config())
  cells = transfer.plan(bench)
  assert len(cells) == 36 and not bench["pretrain_missing"]
  learned = [dict(c.options) for c in cells if transfer.is_row(c.label)]
  assert len(learned) == 8 and all(
      o["max_updates"] == 300 and o["finetune_seconds"] == 0.0 and
      os.path.isfile(os.path.join(o["checkpoint"], pretrained.PARAMS_NAME)) for o in learned)


def test_launcher_end_to_end_baselines_only(tmp_path):
  env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  cmd = [sys.executable, "-m", "experiments.transfer", f"--out={tmp_path}",
         f"--config.graphs=('{GRAPH}',)", f"--config.topologies=('{TOPO}',)",
         "--config.baselines=('heft','metis')", "--config.rows=()"]
  proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  rows = json.load(open(tmp_path / transfer.JSON_NAME))["rows"]
  assert [r["label"] for r in rows] == ["heft", "metis"]
  assert np.all([r["objective"] > 0 for r in rows]) and "wrote" in proc.stdout
