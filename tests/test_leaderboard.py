"""The evaluation leaderboard: wins, ratio to best and infeasibility, computed by hand."""

import pytest

from go_jax import objectives, results
from go_jax.leaderboard import leaderboard, markdown_leaderboard


def row(method, graph, topo, objective, feasible=True, seed=0, error=None):
  return {"method": method, "graph": graph, "topology": topo, "objective": objective,
          "objective_kind": "makespan", "feasible": feasible, "seed": seed, "error": error}


def test_leaderboard_by_hand():
  rows = [row("a", "g1", "t", 1.0), row("b", "g1", "t", 2.0),  # a best, b 2x
          row("a", "g2", "t", 4.0), row("b", "g2", "t", 2.0, seed=0),
          row("b", "g2", "t", 2.0, seed=1),  # b best (mean 2), a 2x
          row("a", "g3", "t", 9.0, feasible=False), row("b", "g3", "t", 3.0),  # a OOM
          row("a", "g4", "t", None, error="boom"), row("b", "g4", "t", 5.0, feasible=False)]
  board = {s["method"]: s for s in leaderboard(rows)}
  assert board["a"]["wins"] == 1 and board["b"]["wins"] == 2
  # a: ratios 1 (g1) and 2 (g2), g3 infeasible; b: ratios 2 (g1), 1 (g2), 1 (g3)
  assert board["a"]["ratio_to_best"] == pytest.approx(2.0 ** (1 / 2))
  assert board["b"]["ratio_to_best"] == pytest.approx(2.0 ** (1 / 3))
  assert board["a"]["infeasible"] == 1 and board["a"]["settings"] == 3  # error row skipped
  assert board["b"]["no_feasible_method"] == 1 and board["b"]["settings"] == 4
  text = markdown_leaderboard(rows)
  assert text.index("| b |") < text.index("| a |")  # sorted by ratio


def test_rows_of_stages_rank_separately_and_objectives_know_their_units():
  rows = [dict(row("go", "g1", "t", 2.0), stage="zero-shot greedy"),
          dict(row("go", "g1", "t", 1.0), stage="fine-tuned"), row("heft", "g1", "t", 1.5)]
  board = {s["method"]: s for s in leaderboard(rows)}
  assert set(board) == {"go zero-shot (greedy)", "go fine-tuned", "heft"}
  assert board["go fine-tuned"]["wins"] == 1
  assert board["go zero-shot (greedy)"]["ratio_to_best"] == pytest.approx(2.0)
  assert objectives.get_objective("makespan").unit == "s"
  assert objectives.get_objective("peak_memory").unit == "bytes"
  assert objectives.get_objective("makespan").format(0.0125) == "12.5 ms"
  assert objectives.get_objective("peak_memory").format(3.2e9) == "3.2 GB"
  assert results.capacity_text([32e9, 32e9, 16e9, 16e9]) == "2 x 32 GB, 2 x 16 GB"
  assert results.capacity_text([float("inf")] * 4) == "unbounded"
  assert results.finite(float("nan")) is None and results.finite(2) == 2.0


def test_non_finite_objectives_are_left_out_and_never_win():
  nan, inf = float("nan"), float("inf")
  rows = [row("a", "g1", "t", nan), row("b", "g1", "t", 2.0), row("c", "g1", "t", 4.0),
          row("d", "g1", "t", inf)]
  board = {s["method"]: s for s in leaderboard(rows)}
  assert board["b"]["wins"] == 1 and board["b"]["ratio_to_best"] == pytest.approx(1.0)
  assert board["c"]["ratio_to_best"] == pytest.approx(2.0) and board["c"]["wins"] == 0
  assert board["a"]["non_finite"] == 1 and board["a"]["ratio_to_best"] is None
  assert board["d"]["non_finite"] == 1 and board["d"]["ratio_to_best"] is None
  text = markdown_leaderboard(rows)
  assert "inf |" not in text and "nan" not in text.lower().replace("non-finite", "")
  assert "a (makespan): 1 row(s) with a non-finite objective left out" in text
  # A string (a hand-edited row) is no number, though float() reads it: summing it raised.
  board = {s["method"]: s for s in leaderboard(rows + [row("e", "g1", "t", "1.5")])}
  assert board["e"]["non_finite"] == 1 and board["b"]["wins"] == 1


def test_a_best_of_zero_gives_no_ratio_unless_equal():
  rows = [row("a", "g1", "t", 0.0), row("b", "g1", "t", 3.0), row("a", "g2", "t", 2.0),
          row("b", "g2", "t", 1.0), row("c", "g3", "t", -1.0), row("a", "g3", "t", 5.0)]
  board = {s["method"]: s for s in leaderboard(rows)}
  assert board["a"]["ratio_to_best"] == pytest.approx(2.0 ** 0.5)  # 1 (g1), 2 (g2); g3 none
  assert board["a"]["no_ratio"] == 1 and board["a"]["wins"] == 1
  assert board["b"]["ratio_to_best"] == pytest.approx(1.0) and board["b"]["no_ratio"] == 1
  assert board["c"]["ratio_to_best"] == pytest.approx(1.0) and board["c"]["wins"] == 1
  assert "b (makespan): no ratio on 1 setting(s)" in markdown_leaderboard(rows)


def test_a_bar_in_a_label_keeps_every_table_row_to_its_columns():
  """A '|' in a method's label split its leaderboard row (and the pivot's head) into one more
  column."""
  from go_jax import harness_reports
  rows = [dict(row("a", "g1", "t", 1.0), label="go|lr=1e-3"), row("b", "g1", "t", 2.0)]
  for table in (markdown_leaderboard(rows), harness_reports.markdown_pivots(rows)):
    lines = [l for l in table.splitlines() if l.startswith("|")]
    assert len({l.count("|") for l in lines}) == 1, table
