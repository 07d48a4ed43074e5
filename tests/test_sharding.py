"""Batched search and training split across devices (simulator.sharding): the same answers.

`workloads()` runs tiny versions of the sharded paths (BRKGA; PPO updates with K + 1 = 9
simulations padded to 10 and minibatches of 4 split in 2; SA; local_search, whose hill climb
splits each batch of 16 moves, as regal_hint's polish does; a REGAL update, whose guided
BRKGA searches split their populations under vmap; HDP in the full tier: NAMES) and returns
their results. The tests run it here (one CPU device: the unsharded program), in a child
process with 2 CPU devices (`configure_cpu_devices`; the count is fixed when JAX starts, hence
the process) and in 2 processes of one CPU device each joined by `go_jax.distributed` (BRKGA
only, to keep the file's time down), all started first so they run at once, and compare:
integer results (placements, device choices) and objectives exactly, float32 parameters after
gradient steps to a relative 1e-5 (the sharded loss sums its per-device parts, another
reduction order).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile

import numpy as np
import pytest

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTOL = 1e-5  # float32 results that pass through a reduction over the split batch
# What the 1- and 2-device runs compare (GO_JAX_TEST_SHARDING=quick: BRKGA and PPO only).
# HDP (11 s of CPU in each of the two processes, its compile) only in the full tier
# (GO_JAX_FULL_TESTS=1, tests/conftest.py): it splits its K samples with the same
# sharding.map_batch / pad_rows as the PPO workload.
NAMES = ("brkga", "ppo") + (() if os.environ.get("GO_JAX_TEST_SHARDING") == "quick"
                            else ("sa", "local_search", "regal")) + \
    (("hdp",) if os.environ.get("GO_JAX_FULL_TESTS") == "1" else ())


def _leaves(tree):
  import jax  # pylint: disable=g-import-not-at-top
  return [np.asarray(x, np.float64).ravel().tolist()
          for x in jax.tree_util.tree_leaves(jax.device_get(tree))]


def workloads(names=("brkga", "ppo")):
  """{name: {field: list}} of the tiny sharded paths `names` (JSON-able, to cross processes)."""
  import jax  # pylint: disable=g-import-not-at-top
  from go_jax import methods
  from go_jax.regal import trainer as regal_trainer
  from tests import test_regal, test_training
  from tests.test_simulate import random_instance

  out = {"devices": len(jax.devices()), "processes": jax.process_count()}
  g, topo, _, _ = random_instance(3, 30, 3)
  for name, kw in (("brkga", dict(population=20)), ("sa", dict(chains=8)),
                   ("local_search", dict(batch=16))):
    if name in names:
      sol = methods.solve(name, g, topo, seed=1, budget=48, **kw)
      curve = sol.info.get("best_per_generation", sol.info.get("best_per_step",
                                                                [sol.info.get("improvements")]))
      out[name] = dict(placement=np.asarray(sol.placement).tolist(),
                       priority=np.asarray(sol.priority).tolist(), curve=list(curve),
                       objective=sol.objective)
  if "hdp" in names:
    sol = methods.solve("hdp", g, topo, seed=2, budget=2 * 5, samples=5, groups=4)
    out["hdp"] = dict(placement=np.asarray(sol.placement).tolist(), objective=sol.objective)
  if "ppo" in names:  # K + 1 = 9 simulations per update, padded to 10 on 2 devices
    trainer = test_training.toy_trainer(samples=8, updates_per_call=2, updates=2,
                                        minibatches=2)
    state, metrics = trainer.update_chunk(trainer.init(0))
    out["ppo"] = dict(best_placement=np.asarray(state.best_placement).tolist(),
                      best_objective=np.asarray(state.best_objective).tolist(),
                      ratio_mean=np.asarray(metrics["ratio_mean"]).tolist(),
                      params=_leaves(state.params))
  if "regal" in names:
    cfg = test_regal.config(updates=1)
    cfg.updates_per_call, cfg.checkpoint_every, cfg.graphs_per_update = 1, 1, 2
    cfg.brkga.evaluations = 32
    graphs, topos, names_ = test_regal.instances()
    rt = regal_trainer.make_train(cfg, graphs[:2], topos[:2], names_[:2])
    state, metrics = rt.update_chunk(rt.init(0))
    out["regal"] = dict(guided_objective_ratio=np.asarray(metrics["guided_objective_ratio"])
                        .tolist(), reward_mean=np.asarray(metrics["reward_mean"]).tolist(),
                        params=_leaves(state.params))
  return out


_CHILD = r"""
import json, sys
from simulator.runtime import configure_cpu_devices
configure_cpu_devices(2)
from tests.test_sharding import NAMES, workloads
print("RESULT " + json.dumps(workloads(NAMES)))
"""

# One of 2 processes on localhost (1 CPU device each) joined by go_jax.distributed: a global
# mesh of 2 devices over 2 processes.
_PROCESS = r"""
import json, sys
from go_jax import distributed
distributed.initialize(f"localhost:{sys.argv[1]}", 2, int(sys.argv[2]))
from tests.test_sharding import helpers, workloads
print("RESULT " + json.dumps(dict(workloads(("brkga",)), distributed=helpers())))
"""


def helpers():
  """go_jax.distributed's process-0 helpers given this process's own values (JSON-able)."""
  import jax  # pylint: disable=g-import-not-at-top
  from go_jax import distributed  # pylint: disable=g-import-not-at-top
  p = jax.process_index()

  def fail():
    raise OSError(f"read failed on process {p}")
  try:
    distributed.from_primary(fail)
    error = None
  except (OSError, ValueError) as e:
    error = str(e)
  tree = distributed.tree_from_primary(lambda: {"a": np.arange(3, dtype=np.int32) + p},
                                       {"a": np.zeros(3, np.int32)})
  return {"agree": [distributed.agree(p == 0), distributed.agree(10 + p)],
          "from_primary": distributed.from_primary(lambda: {"process": p}),
          "tree": [np.asarray(tree["a"]).tolist(), str(tree["a"].dtype)], "error": error,
          "output": distributed.output("out")}


def child_output(proc) -> str:
  """What a child started by `start_child` printed (it must exit 0)."""
  proc.wait(timeout=600)
  proc.log.seek(0)
  text = proc.log.read()
  proc.log.close()
  assert proc.returncode == 0, text[-3000:]
  return text


def child_result(proc):
  """The RESULT line of a child started by `start_child`."""
  text = child_output(proc)
  line = [x for x in text.splitlines() if x.startswith("RESULT ")][-1]
  return json.loads(line[len("RESULT "):])


def start_child(code, *args):
  """A child writing to a temporary file, not a pipe: a pipe that nobody reads while this
  process computes would fill up with the children's log lines and block them (and their
  partner process in a collective)."""
  # The run's XLA flags (tests/conftest.py: the classic CPU emitters, so that the children
  # compile as fast as this process and share its cache) without a device count of its own.
  flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "",
                 os.environ.get("XLA_FLAGS", "")).strip()
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags, PYTHONPATH=REPO)
  log = tempfile.TemporaryFile("w+")
  proc = subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO, env=env, stdout=log,
                          stderr=subprocess.STDOUT, text=True)
  proc.log = log
  return proc


def assert_same(one, two, exact=("placement", "priority", "curve", "objective",
                                 "best_placement", "best_objective")):
  for name in sorted(set(two) - {"devices", "processes", "distributed"}):
    for field, value in one[name].items():
      other = two[name][field]
      if field in exact:
        assert value == other, (name, field)
      else:
        np.testing.assert_allclose(np.concatenate([np.ravel(v) for v in value]) if
                                   field == "params" else value,
                                   np.concatenate([np.ravel(v) for v in other]) if
                                   field == "params" else other,
                                   rtol=RTOL, atol=1e-7, err_msg=f"{name}.{field}")


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def results(place_runs):  # pylint: disable=redefined-outer-name,unused-argument
  """(one device here, two local devices in a child, two processes), computed side by side
  (and beside `place_runs`, started first)."""
  import jax  # pylint: disable=g-import-not-at-top
  port = str(free_port())
  procs = [start_child(_CHILD)] + [start_child(_PROCESS, port, str(i)) for i in range(2)]
  try:
    here = workloads(NAMES)
  except BaseException:
    for proc in procs:
      proc.kill()
    raise
  assert here["devices"] == len(jax.devices()) == 1
  return here, [child_result(proc) for proc in procs]


def test_two_devices_give_the_one_device_answers(results):
  one, (two, *_) = results
  assert (two["devices"], two["processes"]) == (2, 1)
  assert_same(one, two)


def test_two_processes_give_the_one_process_answers(results):
  one, (_, *procs) = results
  for i, other in enumerate(procs):
    assert (other["devices"], other["processes"]) == (2, 2)
    assert_same(one, other)
    assert other["distributed"] == {  # process 0's values (and error) on both processes
        "agree": [True, 10], "from_primary": {"process": 0}, "tree": [[0, 1, 2], "int32"],
        "error": "read failed on process 0", "output": "out" if i == 0 else None}


@pytest.mark.parametrize("address, processes, pid, match", [
    ("localhost:0", 2, 0, r"the port must be in \[1, 65535\], got 0"),  # every process hung
    ("localhost:65536", 2, 1, r"the port must be in \[1, 65535\], got 65536"),
    ("localhost", 2, 0, "must be host:port"),
    ("::1:1234", 2, 0, "must be host:port"),  # IPv6 needs its brackets
    ("localhost:1234", 2, 2, r"process_id must be in \[0, 2\), got 2"),
    ("localhost:1234", 0, 0, "num_processes must be >= 1"),
    ("", 2, 0, "need a coordinator_address"),
])
def test_bad_multi_process_values_are_named(address, processes, pid, match):
  from go_jax import distributed  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match=match):
    distributed.check(address, processes, pid)


def test_good_multi_process_values_pass():
  from go_jax import distributed  # pylint: disable=g-import-not-at-top
  assert not distributed.check("", 1, 0)
  for address in ("localhost:1234", "10.1.2.3:65535", "[::1]:1234", "host-0.example:1"):
    assert distributed.check(address, 2, 1), address


def test_a_primary_value_json_cannot_hold_is_raised_after_the_broadcast(monkeypatch):
  """Process 0's read() whose value is not JSON was raised there before the broadcast: the
  other processes waited in it forever. Now every process gets the error."""
  import jax  # pylint: disable=g-import-not-at-top
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  from go_jax import distributed  # pylint: disable=g-import-not-at-top
  sent = []
  monkeypatch.setattr(jax, "process_count", lambda: 2)  # process 0 of 2, the others simulated
  monkeypatch.setattr(jax, "process_index", lambda: 0)
  monkeypatch.setattr(multihost_utils, "broadcast_one_to_all",
                      lambda x: sent.append(x) or x)
  with pytest.raises(TypeError, match="not JSON serializable"):
    distributed.from_primary(lambda: {"rows": {1, 2}})
  assert len(sent) == 2  # the size and the message went out: the others raise it too
  assert json.loads(np.asarray(sent[1]).tobytes().decode())["error"]


def test_batch_sharding_rules():
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp
  from simulator import sharding
  devices = jax.devices()[:1] * 1
  assert sharding.batch_sharding(devices=devices) is None  # one device: nothing changes
  assert sharding.num_parts(None) == 1 and sharding.padded_batch(9, None) == 9
  x = jnp.arange(6).reshape(3, 2)
  assert sharding.split(x, None) is x and sharding.replicate(x, None) is x
  np.testing.assert_array_equal(sharding.pad_rows(x, 5), [[0, 1], [2, 3], [4, 5], [0, 1],
                                                           [0, 1]])
  np.testing.assert_array_equal(sharding.pad_rows(x.T, 4, axis=1), [[0, 2, 4, 0], [1, 3, 5, 1]])


# go-jax-place as 2 localhost processes (--coordinator_address ...): BRKGA's population split
# over both; process 0 writes, process 1 (given its own --out) writes nothing.
_PLACE = "from experiments import place; place.run()"
PLACE_ARGS = ("--graph=layered:n=40,width=4,seed=0", "--topology=nvlink2", "--method=none",
              "--baselines=brkga", "--brkga_budget=200", "--noplots")


@pytest.fixture(scope="module")
def place_runs(tmp_path_factory):
  """(processes, their --out folders) of the 2-process go-jax-place run, started at once."""
  port = str(free_port())
  outs = [tmp_path_factory.mktemp("place") / f"out{i}" for i in range(2)]
  procs = [start_child(_PLACE, *PLACE_ARGS, f"--out={outs[i]}",
                       f"--coordinator_address=localhost:{port}", "--num_processes=2",
                       f"--process_id={i}") for i in range(2)]
  yield procs, outs
  for proc in procs:
    if proc.poll() is None:
      proc.kill()


def test_place_launcher_as_two_processes_writes_the_one_process_answer_once(place_runs):
  from go_jax import place as place_lib  # pylint: disable=g-import-not-at-top
  procs, outs = place_runs
  one = place_lib.place(place_lib.load_graph_arg(PLACE_ARGS[0].split("=", 1)[1]), "nvlink2",
                        method=None, baselines=["brkga"], brkga_budget=200)
  texts = [child_output(proc) for proc in procs]
  assert "process 1 of 2: 1 local of 2 devices" in texts[1], texts[1][-3000:]
  assert not outs[1].exists()  # process 1 computed the same table and wrote nothing
  rows = json.loads((outs[0] / "results.json").read_text())["rows"]
  assert [(r["method"], r["objective"]) for r in rows] == [("brkga", one.best.objective)]
  saved = np.load(outs[0] / "placement.npz")
  np.testing.assert_array_equal(saved["placement"], one.best.placement)
  np.testing.assert_array_equal(saved["priority"], one.best.priority)
