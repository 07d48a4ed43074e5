"""Bad and borderline input across the library (found by fuzzing): each is a ValueError naming
what is wrong, or the exact answer, never a silent wrong one."""

import json

import numpy as np
import pytest

from go_jax import methods
from simulator import CompGraph, Topology, reference_simulate, simulate, topology_file
from simulator.sources import check_spec, load_graph

DIAMOND = dict(cost=[1., 2, 3, 1, 2, 1], senders=[0, 0, 1, 2, 3, 4], receivers=[1, 2, 3, 4, 5, 5])


def test_event_times_beyond_float32_are_refused():
  """An arrival of 1e50 s was inf in float32 and its op never committed (makespan 1.0)."""
  g = CompGraph(cost=[1., 1.], senders=[0], receivers=[1], out_bytes=[1e30, 0.])
  topo = Topology.uniform(2, bandwidth=1e-20)
  assert reference_simulate(g, topo, [0, 1], [0., 0.]).makespan == pytest.approx(1e50)
  for run in (lambda: simulate(g, topo, [0, 1], [0., 0.]),
              lambda: methods.solve("round_robin", g, topo)):
    with pytest.raises(ValueError, match="beyond float32's range"):
      run()
  slow = CompGraph(cost=[1e30, 1.], senders=[0], receivers=[1])
  with pytest.raises(ValueError, match="event times can reach"):
    simulate(slow, Topology.uniform(1, bandwidth=1.0, speed=1e-9), [0, 0], [0., 0.])


def test_solve_checks_its_arguments():
  g, topo = CompGraph(**DIAMOND), Topology.uniform(3, bandwidth=1e3, latency=1e-3)
  cases = [
      (dict(name="critical_path", placement=[0, 1.5, 2.9, 0, 0, 0]), r"placement\[1\] = 1.5 is not an integer device id"),
      (dict(name="critical_path", placement=[[0] * 6] * 2), r"shape \(N,\)"),
      (dict(name="random", budget=0), "budget .* integer >= 1"),
      (dict(name="random", seed=-1), "seed must be an integer >= 0"),
      (dict(name="brkga", seed=1.5), "seed must be an integer >= 0"),
      # JAX's keys keep 32 bits: brkga with seed 2**32 gave seed 0's answer
      (dict(name="brkga", seed=2**32), r"seed must be an integer >= 0 and <= 2147483647"),
      (dict(name="metis", seed=2**63), r"seed must be an integer >= 0 and <= 2147483647"),
      (dict(name="random", samples=2.5), "samples=2.5 must be an integer"),
  ]
  for kwargs, match in cases:
    name = kwargs.pop("name")
    with pytest.raises(ValueError, match=match):
      methods.solve(name, g, topo, **kwargs)
  assert methods.solve("random", g, topo, samples=3.0).evaluations == 3


def test_solution_placement_is_where_each_op_ran_and_gaps_are_not_negative():
  g = CompGraph(**DIAMOND, colocation=[0, 0, 1, 1, 2, 2])
  sol = methods.solve("round_robin", g, Topology.uniform(3, bandwidth=1e3))
  root = g.colocation_root()
  assert np.array_equal(sol.placement, sol.placement[root])  # rule 1: the group's device
  chain = CompGraph(cost=[0.3] * 7, senders=list(range(6)), receivers=list(range(1, 7)))
  sol = methods.solve("heft", chain, Topology.uniform(1, bandwidth=1.0))
  assert sol.gap == 0.0  # float32 2.0999999 against the float64 bound 2.1


def test_subnormal_priorities_are_not_zero():
  g = CompGraph(cost=[1., 1., 1.], senders=[], receivers=[])
  topo = Topology.uniform(1, bandwidth=1.0)
  pr = np.array([0.0, 1e-40, 0.0])  # a float32 subnormal, distinct from 0 in float32
  assert simulate(g, topo, [0, 0, 0], pr).start.tolist() == [[1., 0., 2.]]
  assert reference_simulate(g, topo, [0, 0, 0], pr).start.tolist() == [1., 0., 2.]


def test_actions_and_topology_helpers_name_the_problem():
  g = CompGraph(cost=[1., 1., 1.], senders=[], receivers=[])
  topo = Topology.uniform(2, bandwidth=1.0)
  for placement, priority, match in (([0, 0, 0], [None, 0, 0], "priority must hold real"),
                                     (["0", "1", "0"], [0, 0, 0], "placement must hold real"),
                                     ([0, 0, 0], [1j, 0, 0], "priority must hold real"),
                                     ([[[0, 0, 0]]], [[[0, 0, 0]]], r"\(B, N\)")):
    with pytest.raises(ValueError, match=match):
      simulate(g, topo, placement, priority)
  for bad in (2.5, True):
    with pytest.raises(ValueError, match="num_devices must be an integer"):
      Topology.uniform(bad, bandwidth=1.0)
  with pytest.raises(ValueError, match=r"one value per device \(2\), got shape \(3,\)"):
    topo.with_memory([1, 2, 3])


def _topology_file(tmp_path, text):
  path = tmp_path / "t.json"
  path.write_text(text)
  return str(path)


def test_topology_files_refuse_overflow_and_repeated_keys(tmp_path):
  base = {"version": 1, "devices": [{"name": "a", "speed": 1.0, "memory": 1e9}]}
  good = _topology_file(tmp_path, json.dumps(base))
  assert topology_file.from_json(good).num_devices == 1
  text = json.dumps(base)
  for bad, match in ((text.replace("1000000000.0", "1e400"), "1e400 is beyond the range"),
                     (text.replace("1000000000.0", '"1e400GB"'), "beyond the range"),
                     (text.replace("1000000000.0", "1" + "0" * 400), "401 digits"),
                     (text.replace('"speed": 1.0', '"speed": 1.0, "speed": 2.0'),
                      "'speed' is given twice")):
    with pytest.raises(ValueError, match=match):
      topology_file.from_json(_topology_file(tmp_path, bad))
  inf = _topology_file(tmp_path, text.replace("1000000000.0", '"inf"'))
  assert np.isinf(topology_file.from_json(inf).mem_capacity[0])  # the spelling of unbounded


def test_check_spec_refuses_what_load_graph_would():
  for spec, match in (("piper:gnmt,tensor_parallel=0", "tensor_parallel must be"),
                      ("piper:bert32a100,variant=nosuch", "no TMPC 'nosuch'"),
                      ("zoo:gpt2_small,batch=0", "knob 'batch' must be a positive integer"),
                      ("chain:n=12,seed=-1", "seed must be >= 0"),
                      ("layered:n=100000000000,width=3", "num_nodes must be <= 10,000,000")):
    with pytest.raises(ValueError, match=match):
      check_spec(spec)
  with pytest.raises(ValueError, match="seed must be >= 0"):
    load_graph("chain:n=12,seed=-1")
  assert check_spec("zoo:inception_v3,width=0.5")  # a float knob is the build's to check


def test_integer_options_without_a_default_refuse_fractions():
  g, topo = CompGraph(**DIAMOND), Topology.uniform(2, bandwidth=1e3)
  for name, opts in (("regal", dict(population=20.5)),
                     ("regal_hint", dict(hint_partitions=2.7, hint_seeds=2))):
    with pytest.raises(ValueError, match="must be an integer, got"):
      methods.solve(name, g, topo, evaluations=300, **opts)


def test_fusion_and_partition_inputs_are_checked():
  from simulator import fusion
  from simulator.partition import expand, generic_space
  from simulator.partition.space import comm_bytes
  from go_jax.methods.partition_search import brute_force
  chain = CompGraph(cost=[1.] * 4, senders=[0, 1, 2], receivers=[1, 2, 3], flops=[1.] * 4,
                    bytes_accessed=[3.] * 4)
  for bad, match in ((["False"] * 4, "fuse must hold booleans"), ([0.5] * 4, "booleans"),
                     ([True] * 3, "fuse has shape")):
    with pytest.raises(ValueError, match=match):
      fusion.check_mask(bad, (4,), "chain")
  for bad in ([0, np.nan, 0, 0], [0, 0.5, 0, 0], [0, -3, 0, 0], [0, 0, 0]):
    with pytest.raises(ValueError, match="placement"):
      fusion.effective_placement(chain, bad)
  space = generic_space(chain, 2)
  for bad, match in (([1.7] * 4, "option ids are integers"), ([np.nan] * 4, "integers"),
                     ([-1] * 4, r"not in \[0, 3\)"), (["1"] * 4, "integers")):
    with pytest.raises(ValueError, match=match):
      expand(chain, space, bad)
    with pytest.raises(ValueError, match=match):
      comm_bytes(space, bad)
  long = load_graph("chain:n=40,seed=0")  # more ops than numpy's 32 meshgrid axes
  one = [np.array([0])] * long.num_nodes
  assert brute_force(long, generic_space(long, 2), allowed=one).strategy.tolist() == [0] * 40
  wide = load_graph("chain:n=2000,seed=0")  # 2^2000 assignments: beyond float64, refused
  with pytest.raises(ValueError, match="more than 1e308 assignments.*exceeds the limit"):
    brute_force(wide, generic_space(wide, 2))
  topo = Topology.uniform(4, bandwidth=1e9)
  for opts, match in ((dict(degree=2.5), "degree must be an integer"),
                      (dict(degree=True), "degree must be an integer"),
                      (dict(space=generic_space(long, 2), degree=4), "disagree")):
    with pytest.raises(ValueError, match=match):
      methods.solve("data_parallel", long, topo, **opts)
  with pytest.raises(ValueError, match="more workers than the topology's 2"):
    methods.solve("data_parallel", long, Topology.uniform(2, bandwidth=1e9),
                  space=generic_space(long, 4))
