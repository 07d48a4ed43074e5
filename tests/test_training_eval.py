"""Learning curves (go_jax/training/evaluation.py, go-jax-train --curves): per-instance greedy and
best-of-K ratios in one jit, family aggregation, and the curve of a run's checkpoints.

The curve of a toy run's checkpoints is tests/test_imitation.py::test_checkpoint_curve_of_a_run:
it evaluates that file's toy run (imitation and PPO with two checkpoints) instead of training a
second one.
"""

import pytest

from go_jax.training import evaluation, ppo
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


def test_no_checkpoint_is_a_clear_error(tmp_path):
  graphs = [test_imitation.tight_chain(12, 0)]
  trainer = ppo.make_train(dict(test_imitation.toy_config(), graphs_per_update=1), graphs,
                           [test_imitation.tight_topology(graphs[0])])
  with pytest.raises(ValueError, match="no checkpoint"):
    evaluation.checkpoint_curve(str(tmp_path), trainer, progress=False)


def test_ppo_report_of_an_instance_no_update_drew():
  """A run shorter than its instance list leaves an instance without a best: the report said
  'best None = None x heft'."""
  import types  # pylint: disable=g-import-not-at-top
  from go_jax.training import trainers  # pylint: disable=g-import-not-at-top
  rows = [dict(instance="a", best_objective=None, best_ratio=None, reference_method="heft",
               greedy_objective=2.0),
          dict(instance="b", best_objective=1.5, best_ratio=1.25, reference_method="heft",
               greedy_objective=1.6)]
  lines = trainers.get({}).report(types.SimpleNamespace(summary=rows))
  assert lines == ["a: best not drawn yet, greedy 2.0", "b: best 1.5 = 1.25 x heft, greedy 1.6"]
