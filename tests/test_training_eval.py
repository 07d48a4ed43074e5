"""Learning curves (go_jax/training/evaluation.py, go-jax-train --curves): per-instance greedy and
best-of-K ratios in one jit, family aggregation, and the curve of a run's checkpoints."""

import json
import os

import numpy as np
import pytest

from go_jax.training import evaluation, loop, ppo
from tests import test_imitation


def test_family_of_reads_the_graph_source():
  assert evaluation.family_of("pipedream:resnet18 @ nvlink4@mem=0.6x") == "pipedream"
  assert evaluation.family_of("layered:n=300,width=16,seed=3 @ nvlink2") == "layered"
  assert evaluation.family_of("zoo:gnmt2,coarsen=512 @ v100_2x4_ib@mem=0.5x") == "zoo"
  assert evaluation.family_of("chain12@2dev") == "chain12@2dev"


def test_by_family_takes_geometric_means():
  rows = [dict(family="a", greedy_ratio=1.0, best_ratio=1.0, greedy_feasible=True,
               best_feasible=True),
          dict(family="a", greedy_ratio=4.0, best_ratio=1.0, greedy_feasible=False,
               best_feasible=True),
          dict(family="b", greedy_ratio=2.0, best_ratio=0.5, greedy_feasible=True,
               best_feasible=True)]
  fams = evaluation.by_family(rows)
  assert fams["a"]["greedy_ratio"] == pytest.approx(2.0)
  assert fams["a"]["greedy_feasible"] == 0.5 and fams["a"]["instances"] == 2
  assert fams["all"]["greedy_ratio"] == pytest.approx(2.0)  # (1 * 4 * 2) ** (1 / 3)
  assert fams["all"]["best_ratio"] == pytest.approx(0.5 ** (1 / 3))


def test_checkpoint_curve_of_a_run(tmp_path):
  """A toy run with imitation and two checkpoints: eval.jsonl has a point after imitation and one
  per checkpoint for every family, the greedy ratio agrees with the host re-simulation, and the
  plot is written; evaluating leaves the run's state untouched."""
  graphs = [test_imitation.tight_chain(n, s) for n, s in ((12, 0), (16, 1))]
  topos = [test_imitation.tight_topology(g) for g in graphs]
  names = [f"chain:n={g.num_nodes} @ tight" for g in graphs]
  cfg = test_imitation.toy_config(updates=20, imitation_steps=20)
  cfg.graphs_per_update = 2
  workdir = str(tmp_path / "run")
  result = loop.train(cfg, workdir, instances=(graphs, topos, names), progress=False)
  rows = evaluation.checkpoint_curve(workdir, result.trainer, samples=4, progress=False)
  steps = sorted({r["step"] for r in rows})
  assert steps == [0, 10, 20]
  assert {r["family"] for r in rows} == {"chain", "all"}
  assert all(r["seconds"] is not None and r["seconds"] >= 0 for r in rows)
  with open(os.path.join(workdir, evaluation.EVAL_NAME)) as fh:
    assert len(fh.readlines()) == len(rows)
  assert os.path.getsize(os.path.join(workdir, evaluation.PLOT_NAME)) > 1000
  final = evaluation.evaluate(result.trainer, result.state.params, samples=4)
  for r, s in zip(final, result.summary):
    assert r["greedy_ratio"] == pytest.approx(s["greedy_ratio"], rel=1e-4)
    assert r["best_ratio"] <= r["greedy_ratio"] * (1 + 1e-6)
  last = [r for r in rows if r["step"] == 20 and r["family"] == "all"][0]
  assert last["greedy_ratio"] == pytest.approx(
      np.exp(np.mean(np.log([r["greedy_ratio"] for r in final]))), rel=1e-4)


def test_no_checkpoint_is_a_clear_error(tmp_path):
  graphs = [test_imitation.tight_chain(12, 0)]
  trainer = ppo.make_train(dict(test_imitation.toy_config(), graphs_per_update=1), graphs,
                           [test_imitation.tight_topology(graphs[0])])
  with pytest.raises(ValueError, match="no checkpoint"):
    evaluation.checkpoint_curve(str(tmp_path), trainer, progress=False)
