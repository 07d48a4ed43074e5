"""Tests of the list-scheduling placements: HEFT, m-TOPO, m-ETF, m-SCT.

Toy instances with hand-computed answers, memory awareness (split when one device is too small,
feasible=False with a reason when nothing fits; the live-interval model keeping what really
fits, and agreeing with the simulator on random instances), agreement of each Solution with a fresh
simulation, degenerate inputs (one device, one op, no edges, zero costs) and determinism.
Graphs have at most 8 ops and 8 edges and topologies 1 or 2 devices, so that every `solve`
reuses one of two compiled simulators (the padding buckets) and the file stays fast.
"""

import numpy as np
import pytest

import go_jax.methods.list_scheduling as ls  # registers the methods
from go_jax.methods import METHODS as METHODS_REGISTRY
from go_jax.methods import Problem, evaluate, solve
from simulator import CompGraph, Topology, reference_simulate
from simulator.sources import load_graph

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

METHODS = ("heft", "m_topo", "m_etf", "m_sct")
LIST_SCHEDULERS = ("heft", "m_etf", "m_sct")  # estimate start times (m_topo does not)


def _chain(n, **fields):
  return CompGraph(cost=np.ones(n), senders=np.arange(n - 1), receivers=np.arange(1, n),
                   name=f"chain{n}", **fields)


@pytest.mark.parametrize("method", METHODS)
def test_chain_with_expensive_transfers_stays_on_one_device(method):
  g = _chain(3)
  topo = Topology.uniform(2, bandwidth=1.0, latency=100.0)
  sol = solve(method, g, topo)
  assert len(set(sol.placement.tolist())) == 1
  assert sol.makespan == pytest.approx(3.0)
  assert sol.feasible


@pytest.mark.parametrize("method", LIST_SCHEDULERS)
def test_independent_equal_ops_spread_one_per_device(method):
  d = 2
  g = CompGraph(cost=np.ones(d), senders=[], receivers=[], name="independent")
  sol = solve(method, g, Topology.uniform(d, bandwidth=1.0))
  assert sorted(sol.placement.tolist()) == list(range(d))
  assert sol.makespan == pytest.approx(1.0)


def test_m_topo_balanced_chunks():
  # Equal memory per op: balanced m-TOPO gives each device one contiguous, equal chunk.
  g = CompGraph(cost=np.ones(2), senders=[], receivers=[], param_bytes=np.full(2, 10.0))
  sol = solve("m_topo", g, Topology.uniform(2, bandwidth=1.0))
  np.testing.assert_array_equal(sol.placement, [0, 1])
  assert sol.makespan == pytest.approx(1.0)
  chain = _chain(4, param_bytes=np.full(4, 10.0))
  sol = solve("m_topo", chain, Topology.uniform(2, bandwidth=1.0))
  np.testing.assert_array_equal(sol.placement, [0, 0, 1, 1])
  # Unbalanced: fill the first device to capacity before the next.
  sol = solve("m_topo", chain, Topology.uniform(2, bandwidth=1.0, mem_capacity=35.0),
              balance=False)
  np.testing.assert_array_equal(sol.placement, [0, 0, 0, 1])


def test_heft_hand_computed_dag():
  """Diamond a->b, a->c, b->d, c->d; costs 2,3,1,2; out bytes .5,1,4,0; 2 devices, 1 B/s.

  Upward ranks (mean transfer = bytes): d 2, b 3+1+2=6, c 1+4+2=7, a 2+.5+7=9.5, so the order
  is a, c, b, d. a: EFT 2 on both, device 0. c: ready 2 on dev 0 (3 on dev 1): EFT 3, dev 0.
  b: dev 0 is busy until 3 (EFT 6); dev 1 gets a's output at 2.5: EFT 5.5, dev 1. d: inputs
  on dev 0 at max(3, 5.5+1) = 6.5 -> EFT 8.5; on dev 1 at max(5.5, 3+4) = 7 -> 9: dev 0.
  """
  g = CompGraph(cost=[2, 3, 1, 2], senders=[0, 0, 1, 2], receivers=[1, 2, 3, 3],
                out_bytes=[0.5, 1, 4, 0], name="heft-toy")
  topo = Topology.uniform(2, bandwidth=1.0)
  np.testing.assert_allclose(ls.heft_rank(g, topo), [9.5, 6, 7, 2])
  sol = solve("heft", g, topo)
  np.testing.assert_array_equal(sol.placement, [0, 1, 0, 0])
  assert sol.info["estimated_makespan"] == pytest.approx(8.5)
  assert sol.makespan == pytest.approx(8.5)  # the simulator agrees on this instance


def test_heft_insertion_fills_idle_gaps():
  starts, finishes = [0.0, 5.0], [2.0, 6.0]
  assert ls._insert_start(starts, finishes, 1.0, 2.0) == (2.0, 1)  # gap [2, 5)
  assert ls._insert_start(starts, finishes, 1.0, 4.0) == (6.0, 2)  # too long: after the end
  assert ls._insert_start(starts, finishes, 1.0, 0.5) == (2.0, 1)  # ready inside busy [0, 2)
  assert ls._insert_start(starts, finishes, 0.0, 0.0) == (0.0, 0)  # zero length overlaps none
  assert ls._insert_start([], [], 3.0, 1.0) == (3.0, 0)


@pytest.mark.parametrize("method", METHODS)
def test_splits_a_graph_too_big_for_one_device(method):
  # 4 ops of 10 parameter bytes + 1 output byte; 25 bytes per device: two per device fit.
  g = _chain(4, param_bytes=np.full(4, 10.0), out_bytes=np.ones(4))
  topo = Topology.uniform(2, bandwidth=1.0, mem_capacity=25.0)
  sol = solve(method, g, topo)
  assert sol.feasible, sol.reason
  assert np.bincount(sol.placement, minlength=2).tolist() == [2, 2]
  assert not sol.reason


@pytest.mark.parametrize("method", METHODS)
def test_infeasible_memory_returns_a_reason(method):
  g = _chain(3, param_bytes=np.full(3, 10.0))
  topo = Topology.uniform(2, bandwidth=1.0, mem_capacity=5.0)
  sol = solve(method, g, topo)
  assert not sol.feasible
  assert "memory" in sol.reason
  assert sol.objective > sol.makespan  # ranked below every feasible action


@pytest.fixture(scope="module")
def random_case():
  g = load_graph("layered:n=8,width=3,seed=0,colocation_groups=2,colocation_size=2")
  assert g.num_edges <= 8 and np.any(g.colocation >= 0)
  topo = Topology.create(speed=[1.0, 2.0], overhead=[1e-5] * 2, mem_capacity=[np.inf] * 2,
                         bandwidth=np.full((2, 2), 1e9), latency=np.full((2, 2), 1e-5))
  return g, topo


@pytest.mark.parametrize("method", METHODS)
def test_objective_matches_evaluate_and_colocation(method, random_case):
  g, topo = random_case
  sol = solve(method, g, topo)
  again = evaluate(g, topo, sol.placement, sol.priority)
  assert sol.objective == again["objective"]
  assert sol.feasible
  for group in np.unique(g.colocation[g.colocation >= 0]):
    assert len(set(sol.placement[g.colocation == group].tolist())) == 1
  sol2 = solve(method, g, topo)  # deterministic
  np.testing.assert_array_equal(sol.placement, sol2.placement)
  np.testing.assert_array_equal(sol.priority, sol2.priority)


@pytest.mark.parametrize("method", METHODS)
def test_one_device_one_op_no_edges_zero_costs(method):
  g = load_graph("layered:n=8,width=3,seed=0")
  one = Topology.uniform(1, bandwidth=1.0)
  sol = solve(method, g, one)
  assert np.all(sol.placement == 0)
  assert sol.makespan == pytest.approx(g.cost.sum())
  single = CompGraph(cost=[2.0], senders=[], receivers=[])
  sol = solve(method, single, Topology.uniform(2, bandwidth=1.0))
  assert sol.makespan == pytest.approx(2.0) and 0 <= sol.placement[0] < 2
  zero = CompGraph(cost=np.zeros(5), senders=[0, 1, 1], receivers=[1, 2, 3])
  sol = solve(method, zero, Topology.uniform(2, bandwidth=1.0))
  assert sol.makespan == 0.0 and sol.feasible


def test_favourite_parents_lp():
  topo = Topology.uniform(2, bandwidth=1.0, latency=1.0)
  fav, status = ls.favourite_parents(_chain(4, out_bytes=np.ones(4)), topo)
  assert fav.tolist() == [-1, 0, 1, 2], status  # a chain keeps every edge local
  # Fork a->b, a->c (transfer 2 s each, x_ab + x_ac >= 1): the LP keeps the longer branch b
  # local (w = 1 + 3 = 4 with x_ab = 0, x_ac = 1; any other split is longer).
  fork = CompGraph(cost=[1, 3, 1], senders=[0, 0], receivers=[1, 2], out_bytes=[1, 0, 0])
  fav, status = ls.favourite_parents(fork, topo)
  assert fav.tolist() == [-1, 0, -1], status
  fav, status = ls.favourite_parents(fork, Topology.uniform(1, bandwidth=1.0))
  assert np.all(fav == -1) and "one device" in status


def test_bad_options():
  g = _chain(2)
  topo = Topology.uniform(2, bandwidth=1.0)
  with pytest.raises(ValueError, match="mem_fraction"):
    solve("m_etf", g, topo, mem_fraction=0.0)
  with pytest.raises(ValueError, match="lp_time_limit"):
    solve("m_sct", g, topo, lp_time_limit=0.0)
  with pytest.raises(ValueError, match="no option"):
    solve("heft", g, topo, balance=True)


# ------------------------------------------------------------------ live-interval memory model
@pytest.mark.parametrize("method, options", [
    ("heft", {}), ("m_etf", {}), ("m_sct", {}),
    ("m_topo", dict(balance=False, memory_model="live"))])
def test_live_model_keeps_a_chain_whose_outputs_die_young(method, options):
  """Chain a->b->c->d of unit ops with 10-byte outputs, 25 bytes per device, 100 s latency.

  The static count needs 40 bytes on one device, so it splits the chain and pays the latency.
  Live: a's output dies when b finishes, so at most two outputs (20 bytes) are ever held; the
  whole chain fits device 0 (makespan 4), and the estimate is the simulated peak exactly.
  """
  g = _chain(4, out_bytes=np.full(4, 10.0))
  topo = Topology.uniform(2, bandwidth=1.0, latency=100.0, mem_capacity=25.0)
  sol = solve(method, g, topo, **options)
  np.testing.assert_array_equal(sol.placement, [0, 0, 0, 0])
  assert sol.feasible and not sol.reason and sol.makespan == pytest.approx(4.0)
  np.testing.assert_allclose(sol.info["estimated_bytes"], sol.peak_memory)
  np.testing.assert_allclose(sol.peak_memory, [20.0, 0.0])
  old = solve(method, g, topo, **dict(options, memory_model="static"))
  assert len(set(old.placement.tolist())) == 2 and old.makespan > 100.0


@pytest.mark.parametrize("method", ("heft", "m_etf", "m_sct"))
def test_live_model_refuses_a_device_at_the_time_it_would_overflow(method):
  """Fork a->b, a->c (costs 1, 2, 3), 10-byte outputs, 25 bytes per device, free links.

  c, the longer branch (higher level; m-SCT's favourite child), follows a on device 0. b
  would hold its output from its start while a's (until b finishes) and c's are live: 30
  bytes on device 0 at any time b could run there, so b goes to device 1, where its copy of
  a's output and its own make 20 bytes. Makespan 4.
  """
  g = CompGraph(cost=[1, 2, 3], senders=[0, 0], receivers=[1, 2], out_bytes=[10, 10, 10],
                name="fork")
  topo = Topology.uniform(2, bandwidth=np.inf, latency=0.0, mem_capacity=25.0)
  sol = solve(method, g, topo)
  np.testing.assert_array_equal(sol.placement, [0, 1, 0])
  assert sol.feasible and not sol.reason and sol.makespan == pytest.approx(4.0)
  np.testing.assert_allclose(sol.info["estimated_bytes"], sol.peak_memory)
  np.testing.assert_allclose(sol.peak_memory, [20.0, 20.0])


@pytest.mark.parametrize("model", ls.MEMORY_MODELS)
@pytest.mark.parametrize("method", METHODS)
def test_feasible_when_capacity_is_ample(method, model, random_case):
  g, topo = random_case
  ample = topo.with_memory(float((g.param_bytes + g.out_bytes + g.temp_bytes).sum()) + 1.0)
  sol = solve(method, g, ample, memory_model=model)
  assert sol.feasible and not sol.reason
  assert np.all(np.asarray(sol.info["estimated_bytes"]) <= ample.mem_capacity)


def _random_instance(rng, free_links: bool):
  """4-14 ops, 2-3 devices, random costs / bytes / links, capacity 25-80% of all bytes."""
  n, d = int(rng.integers(4, 15)), int(rng.integers(2, 4))
  edges = [(i, j) for j in range(1, n) for i in range(j) if rng.random() < 0.3]
  g = CompGraph(cost=rng.uniform(0.5, 2, n), senders=[e[0] for e in edges],
                receivers=[e[1] for e in edges],
                out_bytes=rng.integers(0, 10, n).astype(float),
                param_bytes=rng.integers(0, 6, n) * (rng.random(n) < 0.5).astype(float),
                temp_bytes=rng.integers(0, 5, n) * (rng.random(n) < 0.3).astype(float))
  bw = np.full((d, d), np.inf) if free_links else rng.uniform(1, 20, (d, d))
  lat = np.zeros((d, d)) if free_links else rng.uniform(0, 0.5, (d, d))
  cap = (g.param_bytes + g.out_bytes + g.temp_bytes).sum() * rng.uniform(0.25, 0.8)
  return g, Topology.create(speed=rng.uniform(0.5, 2, d), overhead=[0.0] * d,
                            mem_capacity=[cap] * d, bandwidth=bw, latency=lat)


def test_live_estimate_agrees_with_the_simulator_on_random_instances():
  """50 small random instances: a placement the live model calls feasible simulates feasible.

  Exactly so for HEFT, m-ETF and m-SCT when transfers take no time (their plan is then the
  simulated schedule). Known gap otherwise: send-channel contention delays transfers in the
  simulator (the sender holds its output longer), which the plans ignore; measured 3, 2 and 8
  of ~160 placements (m-ETF, m-SCT, HEFT) on 300 such instances; here at most 10%. m-TOPO's
  plan is not the simulated order (see m_topo), so its live model is only counted. The live
  model calls feasible more placements than the static one, which never errs.
  """
  rng = np.random.default_rng(0)
  claims = {m: [0, 0] for m in METHODS}  # claimed feasible, of which simulated out of memory
  static_claims = 0
  for k in range(50):
    g, topo = _random_instance(rng, free_links=k % 2 == 0)
    problem = Problem(g, topo, "makespan", 0, None, None)
    for m in METHODS:
      prop = METHODS_REGISTRY[m].fn(problem, dict(METHODS_REGISTRY[m].defaults,
                                                  memory_model="live"))
      if "reason" in prop.info:
        continue
      oom = reference_simulate(g, topo, prop.placement, prop.priority).oom
      claims[m][0] += 1
      claims[m][1] += oom
      if k % 2 == 0 and m != "m_topo":
        assert not oom, (k, m)
      static = METHODS_REGISTRY[m].fn(problem, dict(METHODS_REGISTRY[m].defaults,
                                                    memory_model="static"))
      if "reason" not in static.info:
        static_claims += 1
        assert not reference_simulate(g, topo, static.placement, static.priority).oom
  for m in LIST_SCHEDULERS:
    assert claims[m][1] <= 0.1 * claims[m][0], claims
  assert sum(c[0] for c in claims.values()) > static_claims, (claims, static_claims)


def test_bad_memory_options():
  g = _chain(2)
  topo = Topology.uniform(2, bandwidth=1.0)
  with pytest.raises(ValueError, match="memory_model"):
    solve("m_sct", g, topo, memory_model="peak")
  with pytest.raises(ValueError, match="priority"):
    solve("m_topo", g, topo, priority="level")


@pytest.mark.parametrize("name", ["heft", "m_etf", "m_sct"])
def test_auto_memory_model_falls_back_when_the_live_plan_overflows(name):
  """PipeDream VGG-16 on nvlink4 at 0.6x: the live greedy fills device 0 with forward
  activations kept for the backward pass and then fits no device; "auto" (the default) sees
  its own plan overflow and uses the static count's plan, which is feasible."""
  from simulator import sources, topology_spec  # pylint: disable=g-import-not-at-top
  graph = sources.load_graph("pipedream:vgg16")
  topo = topology_spec.load_topology("nvlink4@mem=0.6x", graph)
  live = solve(name, graph, topo, memory_model="live")
  auto = solve(name, graph, topo)
  assert not live.feasible and live.info["memory_model"] == "live"
  assert auto.feasible and auto.info["memory_model"] == "static"
  assert "overflowed" in auto.info["live_plan"]
  static = solve(name, graph, topo, memory_model="static")
  np.testing.assert_array_equal(auto.placement, static.placement)


def _count_live_checks(monkeypatch):
  """[n]: n counts the calls of the live memory model's `check` from now on."""
  from go_jax.methods import memory_plan
  checks = [0]
  check = memory_plan._LiveMemory.check

  def counted(self, *args):
    checks[0] += 1
    return check(self, *args)

  monkeypatch.setattr(memory_plan._LiveMemory, "check", counted)
  return checks


def _assert_same_schedule(a, b):
  np.testing.assert_array_equal(a.placement, b.placement)
  np.testing.assert_array_equal(a.priority, b.priority)
  assert a.info == b.info


def test_m_sct_tight_memory_does_not_retry_every_waiting_op(monkeypatch):
  """Under tight memory (live model) hundreds of ops wait for a full device; re-trying each at
  every release of memory made m-SCT quadratic (zoo:gnmt2 at mem=0.2x: minutes). Ops that
  would still overflow for good are no longer re-tried, with the same schedule as re-trying."""
  from go_jax.methods import memory_plan
  from simulator.topology_spec import load_topology
  g = load_graph("layered:n=600,width=32")
  problem = Problem(g, load_topology("nvlink4@mem=0.2x", g), "makespan", 0, None, None)
  config = dict(METHODS_REGISTRY["m_sct"].defaults, memory_model="live")
  checks = _count_live_checks(monkeypatch)
  fast = ls.m_sct(problem, config)
  assert checks[0] < 15 * g.num_nodes  # was 37 per op here, and growing with the graph
  monkeypatch.setattr(memory_plan._LiveMemory, "lasting_excess",
                      lambda self, d, level, const: np.full(level.shape, -np.inf))
  every = ls.m_sct(problem, config)  # every waiting op re-tried at every release
  _assert_same_schedule(fast, every)


def test_m_etf_tight_memory_does_not_retry_overflows_a_release_cannot_end(monkeypatch):
  """An op refused because the device overflows until t_ok was re-tried at every release of
  memory there, even when the device had released before t_ok fewer bytes than the overflow
  (m_sct on zoo:gnmt8 at mem=0.2x: millions of checks). Such retries are skipped, with the
  same schedule as re-trying them."""
  from go_jax.methods import memory_plan
  from simulator.topology_spec import load_topology
  g = load_graph("zoo:bert_base,size=tiny")
  problem = Problem(g, load_topology("nvlink4@mem=0.3x", g), "makespan", 0, None, None)
  config = dict(METHODS_REGISTRY["m_etf"].defaults, memory_model="live")
  checks = _count_live_checks(monkeypatch)
  fast = ls.m_etf(problem, config)
  assert checks[0] < 8 * g.num_nodes  # was 18 per op here
  monkeypatch.setattr(memory_plan._LiveMemory, "adds_before", lambda *_: False)
  every = ls.m_etf(problem, config)  # every blocked op re-tried at every release
  _assert_same_schedule(fast, every)


@pytest.mark.parametrize("method,graph,topology", [
    ("m_sct", "layered:n=600,width=32", "nvlink4@mem=0.2x"),
    ("m_etf", "zoo:bert_base,size=tiny", "nvlink4@mem=0.3x")])
def test_retry_index_cache_is_fresh_whenever_it_decides(monkeypatch, method, graph, topology):
  """The retry index of the waiting (op, device) pairs caches each pair's `lasting_parts` and
  `adds_before` until a copy of one of the op's inputs reaches the device; a missed refresh
  would keep an op waiting that a release lets fit (or retry one that cannot). Every cached row
  it decides on must equal a fresh computation."""
  from go_jax.methods import list_memory
  from simulator.topology_spec import load_topology
  g = load_graph(graph)
  problem = Problem(g, load_topology(topology, g), "makespan", 0, None, None)
  config = dict(METHODS_REGISTRY[method].defaults, memory_model="live")
  refresh = list_memory.RetryIndex._refresh
  compared = [0]

  def checked(self, ops, e, rows, level, const, adds=None, t_ok=None, start=None):
    for k in np.flatnonzero(rows & ~self.stale[ops, e]).tolist():
      j = int(ops[k])
      assert (level[k], const[k]) == self.mem.lasting_parts(j, e), (j, e)
      if adds is not None:
        assert bool(adds[k]) == self.mem.adds_before(j, e, float(t_ok[k]), float(start[k]))
      compared[0] += 1
    refresh(self, ops, e, rows, level, const, adds, t_ok, start)

  monkeypatch.setattr(list_memory.RetryIndex, "_refresh", checked)
  getattr(ls, method)(problem, config)
  assert compared[0] > 1000  # cached rows were decided on
