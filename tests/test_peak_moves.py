"""Peak-directed moves of the hill climb (go_jax/methods/peak_moves.py, `climb.hill_climb(peak_prob)`)."""

import jax.numpy as jnp
import numpy as np
import pytest

from go_jax import methods
from go_jax.methods import climb, peak_moves, regal_baselines
from simulator import preset, simulate
from simulator.simulate import padded
from simulator.sources import load_graph

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py


def _holders(graph, topo, place, prio):
  res = simulate(graph, topo, place, prio)
  pg = padded(graph)
  np_ = pg.num_nodes_padded
  n = graph.num_nodes
  pad = lambda x, v: np.concatenate([np.asarray(x, np.float32), np.full(np_ - n, v, np.float32)])
  place_p = np.zeros(np_, np.int32)
  place_p[:n] = np.asarray(place)[graph.colocation_root()]
  held = peak_moves.peak_holders(pg, jnp.asarray(place_p), pad(res.start[0], 0.0),
                                 pad(res.finish[0], 0.0), res.peak_memory[0])
  return np.asarray(held)[:n], res


def test_worked_example_holders(diamond):
  """docs/design.md's worked example: device 0 peaks (3 bytes) at t = 7, where b's output, d's
  output and the copy of c's output are live; the copy is charged to its consumer d."""
  g, topo, place, prio = diamond
  held, res = _holders(g, topo, place, prio)
  np.testing.assert_array_equal(np.asarray(res.peak_memory[0]), [3.0, 2.0])
  np.testing.assert_array_equal(held, [0.0, 1.0, 0.0, 2.0])


def test_holders_sum_to_the_peak_on_one_device():
  """Everything on one device: no transfers, so the intervals are exact and the held bytes add
  up to the simulated peak less the resident parameters."""
  g = load_graph("regal:n=40,seed=5")
  topo = preset("nvlink2")
  place = np.zeros(g.num_nodes, np.int64)
  prio = -np.arange(g.num_nodes, dtype=np.float64)
  held, res = _holders(g, topo, place, prio)
  resident = float(np.sum(g.param_bytes))
  assert held.sum() == pytest.approx(float(res.peak_memory[0, 0]) - resident, rel=1e-5)
  assert (held >= 0).all()


def test_draw_follows_the_weights_and_falls_back():
  w = jnp.asarray([0.0, 3.0, 0.0, 1.0])
  u = jnp.linspace(0.0, 0.999, 1000)
  idx = np.asarray(peak_moves.draw(w, u, jnp.full(1000, 7)))
  assert set(idx.tolist()) == {1, 3}
  assert np.mean(idx == 1) == pytest.approx(0.75, abs=0.01)
  np.testing.assert_array_equal(np.asarray(peak_moves.draw(jnp.zeros(4), u[:3], jnp.full(3, 7))),
                                [7, 7, 7])


def test_climb_with_peak_directed_moves():
  """peak_prob 1: the climb still re-simulates to its objective and never gets worse; peak_prob
  0 draws what the climb drew before the option existed (the same answer as the default)."""
  g = load_graph("regal:n=48,seed=3")
  topo = preset("nvlink2")
  problem = methods.Problem(g, topo, "peak_memory", 1, 800, None)
  start, prio = regal_baselines._start_action(problem, "gp_dfs")  # pylint: disable=protected-access
  pg, place0, prio0, movable, num_movable = climb.climb_inputs(
      problem, start.placement, prio)
  import jax  # pylint: disable=g-import-not-at-top
  key = jax.random.key(1, impl="rbg")
  ub = jnp.float32(problem.upper_bound())
  runs = {}
  for p in (0.0, 1.0):
    runs[p] = climb.hill_climb(
        pg, topo, key, ub, jnp.int32(20), jnp.int32(0), jnp.float32(0.5), place0, prio0,
        movable, num_movable, peak_prob=jnp.float32(p), kind="peak_memory", batch=8)
  default = climb.hill_climb(
      pg, topo, key, ub, jnp.int32(20), jnp.int32(0), jnp.float32(0.5), place0, prio0,
      movable, num_movable, kind="peak_memory", batch=8)
  np.testing.assert_array_equal(np.asarray(runs[0.0].place), np.asarray(default.place))
  np.testing.assert_array_equal(np.asarray(runs[0.0].prio), np.asarray(default.prio))
  c = runs[1.0]
  assert float(c.obj) <= float(c.start_obj)
  n = g.num_nodes
  place = np.asarray(c.place[:n], np.int64)[g.colocation_root()]
  again = methods.evaluate(g, topo, place, np.asarray(c.prio[:n], np.float64), "peak_memory")
  assert again["objective"] == pytest.approx(float(c.obj), rel=1e-6)


def test_local_search_option():
  """local_search(peak_prob=...): the answer re-simulates to its objective, is no worse than its
  start, and a share outside [0, 1] is refused."""
  g = load_graph("regal:n=40,seed=7")
  topo = preset("nvlink4")
  sol = methods.solve("local_search", g, topo, objective="peak_memory", budget=256, seed=2,
                      batch=16, peak_prob=0.5)
  assert sol.info["best_objective"] <= sol.info["start_objective"]
  assert sol.objective == pytest.approx(sol.info["best_objective"], rel=1e-6)
  with pytest.raises(ValueError, match="peak_prob must be in"):
    methods.solve("local_search", g, topo, objective="peak_memory", budget=64, peak_prob=2.0)
