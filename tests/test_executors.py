"""The executors of the sweep launchers (go_jax.executors): local and Ray give the same rows.

A tiny sweep (2 methods x 2 graphs x 2 seeds on a 2-device topology) runs in this process and as
Ray tasks on a local Ray instance of 1 CPU (started once for the module, a few seconds; one
worker process, which compiles each program once: the CI machine has 2 cores); the
rows must agree in everything but their timing, and the placements the cells find must be the
same. A driver "killed" after half the cells resumes without redoing them, a failing cell is the
same error row either way, and without Ray --executor=ray is one line naming the extra. The
REGAL and learned-placer tables run their cells through the same executors.
"""

import os
import re
import subprocess
import sys

import pytest

from go_jax import executors, harness
from experiments import cli

ray = pytest.importorskip("ray")  # the "cluster" extra (also in the "test" extra)

# Compile time dominates (tests/conftest.py). The Ray workers, started after the module's
# fixture has set JAX_DISABLE_MOST_OPTIMIZATIONS, compile the same way as this process.
pytestmark = pytest.mark.fast_compile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMING = ("search_seconds",)
# Every test's graphs, on nvlink2 (one padded shape: the workers compile once for all tests).
GRAPHS = ["chain:n=12,seed=0", "series_parallel:n=14,seed=0"]


def tiny_config(**overrides):
  cfg = dict(methods=["random", "brkga"], graphs=list(GRAPHS),
             topologies=["nvlink2"], seeds=[0, 1], objective="makespan", budget=32,
             method_options={"brkga": {"population": 16}})
  cfg.update(overrides)
  return harness.settings(cfg)


def stable(rows):
  return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


class Spy:
  """An executor that records the cells it is asked to run, then runs them with `inner`."""

  def __init__(self, inner):
    self.inner, self.items = inner, []

  def run(self, task, items, on_done, before=None):
    self.items += list(items)
    return self.inner.run(task, items, on_done, before)


@pytest.fixture(scope="module")
def ray_executor():
  """One local Ray instance (1 CPU, no dashboard) for the module, started by the executor as
  a launcher starts it (its workers import this checkout's go-jax)."""
  with executors.make("ray", num_cpus=1) as executor:
    assert ray.is_initialized()
    yield executor
  assert not ray.is_initialized()


@pytest.fixture(scope="module")
def local_rows(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("local"))
  return harness.run(tiny_config(), out, progress=False)


def test_ray_rows_are_the_local_rows(ray_executor, local_rows, tmp_path):
  out = str(tmp_path / "ray")
  rows = harness.run(tiny_config(), out, progress=False, executor=ray_executor)
  assert len(rows) == 8 and not any(r["error"] for r in rows)
  assert stable(rows) == stable(local_rows)
  assert stable(harness.load_rows(out)) == stable(local_rows)  # the file holds them, in order
  assert os.path.isfile(os.path.join(out, harness.MD_NAME))


def test_ray_placements_are_the_local_placements(ray_executor):
  cfg = tiny_config()
  cells = harness.plan(cfg)

  def placements(cell):  # pickled by value to the workers
    _, answers = harness.run_cell(cell, harness.worker_instances(cfg))
    return [a.placement.tolist() for a in answers]

  found = {}
  ray_executor.run(placements, cells,
                   lambda cell, result, error: found.__setitem__(cell, (result, error)))
  local = harness.Instances(cfg)
  for cell in cells:
    result, error = found[cell]
    assert error is None
    assert result == [a.placement.tolist() for a in harness.run_cell(cell, local)[1]], cell


def test_killed_driver_resumes_without_redoing_cells(ray_executor, local_rows, tmp_path):
  cfg = tiny_config()
  cells = harness.plan(cfg)
  out = str(tmp_path / "resumed")
  # The driver dies after half the cells: results.json holds what finished by then.
  first = harness.execute(cells[:4], harness.Instances(cfg), out, launcher=harness.LAUNCHER,
                          config=cfg, progress=False, executor=ray_executor)
  spy = Spy(ray_executor)
  rows = harness.execute(cells, harness.Instances(cfg), out, launcher=harness.LAUNCHER,
                         config=cfg, progress=False, executor=spy)
  assert spy.items == cells[4:]
  assert rows[:4] == first  # kept as written, timing included: not run again
  assert stable(rows) == stable(local_rows)
  spy.items = []
  harness.execute(cells, harness.Instances(cfg), out, launcher=harness.LAUNCHER, config=cfg,
                  progress=False, executor=spy)
  assert spy.items == []


def test_a_failing_cell_is_the_same_error_row(ray_executor, tmp_path):
  # A file that exists passes the config check (sources.check_spec) and fails when the cell
  # builds it.
  garbage = tmp_path / "garbage.npz"
  garbage.write_bytes(b"not a zip archive" * 4)
  cfg = tiny_config(graphs=[str(garbage), "chain:n=12,seed=0"], seeds=[0],
                    methods=["random"], method_options={})
  local = harness.run(cfg, str(tmp_path / "local"), progress=False)
  remote = harness.run(cfg, str(tmp_path / "ray"), progress=False, executor=ray_executor)
  assert local[0]["error"] and "garbage.npz" in local[0]["error"]
  assert stable(remote) == stable(local)
  with pytest.raises(ValueError, match="garbage.npz"):
    harness.run(dict(cfg, fail_fast=True), str(tmp_path / "ff"), progress=False,
                executor=ray_executor)


def test_before_runs_in_the_driver_and_its_error_is_the_cells(ray_executor):
  seen, done = [], {}

  def before(item):
    seen.append(item)
    if item == 2:
      raise ValueError("no checkpoint for 2")

  ray_executor.run(lambda x: x * x, [1, 2, 3], lambda i, r, e: done.__setitem__(i, (r, e)),
                   before=before)
  assert seen == [1, 2, 3]
  assert done[1] == (1, None) and done[3] == (9, None)
  assert done[2][0] is None and str(done[2][1]) == "no checkpoint for 2"


def test_executor_registry_and_bad_options(monkeypatch):
  assert executors.names() == ["local", "ray"]
  assert isinstance(executors.make(), executors.LocalExecutor)
  with pytest.raises(ValueError, match="unknown executor 'dask'"):
    executors.make("dask")
  with pytest.raises(ValueError, match="cpus_per_cell"):
    executors.make("ray", cpus_per_cell=0)
  with pytest.raises(ValueError, match="cpus_per_cell must be finite"):
    executors.make("ray", cpus_per_cell=float("inf"))
  with pytest.raises(ValueError, match="gpus_per_cell must be a multiple of 0.0001"):
    executors.make("ray", gpus_per_cell=1e-5)
  with pytest.raises(ValueError, match=r"num_cpus \(--ray_num_cpus\) sizes a local instance; "
                     "the cluster at 'auto' has its own"):  # it was silently ignored
    executors.make("ray", address="auto", num_cpus=4)
  with pytest.raises(ValueError, match="takes no options"):
    executors.make("local", address="auto")
  # A cluster address that does not answer fails at once with one line, before ray.init.
  with pytest.raises(ConnectionError, match=r"no Ray cluster at '127.0.0.1:1': cannot connect"):
    executors.check_reachable("127.0.0.1:1")
  with pytest.raises(ConnectionError, match="no Ray cluster at 'ray://127.0.0.1:1'"):
    executors.check_reachable("ray://127.0.0.1:1")
  executors.check_reachable("auto")  # other forms are left to Ray
  monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")  # the driver's other flags are kept
  env = executors.worker_env(cpus_per_cell=1, gpus_per_cell=0)
  assert env["JAX_PLATFORMS"] == "cpu"
  assert env["XLA_FLAGS"] == "--xla_dump_to=/tmp/x --xla_cpu_multi_thread_eigen=false"
  # a driver that already sets the flag (as the test run does: tests/conftest.py) is inherited
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
  assert "XLA_FLAGS" not in executors.worker_env(cpus_per_cell=1, gpus_per_cell=0)
  assert "JAX_PLATFORMS" not in executors.worker_env(cpus_per_cell=4, gpus_per_cell=1)


class FakeRay:
  """Stands in for the `ray` module where a test only looks at what the executor asks of it."""

  def __init__(self):
    self.options, self.up = None, False

  def is_initialized(self):
    return self.up

  def init(self, **options):
    self.options, self.up = options, True

  def cluster_resources(self):
    return {"CPU": float(self.options.get("num_cpus") or 1)}

  def shutdown(self):
    self.up = False


def test_a_local_instance_is_new_even_where_ray_address_is_set(monkeypatch):
  # ray.init() without an address joins $RAY_ADDRESS's (or the last `ray start`) cluster, and
  # refuses num_cpus there: "unset --ray_address" must start a local instance all the same.
  fake = FakeRay()
  monkeypatch.setattr(executors, "import_ray", lambda: fake)
  monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
  with executors.make("ray", num_cpus=1):
    assert fake.options["address"] == "local" and fake.options["num_cpus"] == 1
  assert not fake.up


def test_auto_is_checked_where_it_points(monkeypatch):
  # ray.init("auto") joins $RAY_ADDRESS, else the last `ray start`'s recorded address (left
  # behind when that cluster was killed): a dead one there was minutes of Ray's retries.
  fake = FakeRay()
  monkeypatch.setattr(executors, "import_ray", lambda: fake)
  monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
  with pytest.raises(ConnectionError, match=re.escape(
      "--ray_address=auto is '127.0.0.1:1' ($RAY_ADDRESS), and no Ray cluster at "
      "'127.0.0.1:1': cannot connect")):
    executors.make("ray", address="auto").__enter__()
  monkeypatch.delenv("RAY_ADDRESS")
  from ray._private import utils  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(utils, "read_ray_address", lambda temp_dir=None: "127.0.0.1:1")
  with pytest.raises(ConnectionError, match=r"\(the last `ray start` on this machine\)"):
    executors.make("ray", address="auto").__enter__()
  assert fake.options is None  # ray.init was never asked
  monkeypatch.setattr(utils, "read_ray_address", lambda temp_dir=None: None)
  with executors.make("ray", address="auto"):  # nothing recorded: Ray looks itself
    assert fake.options["address"] == "auto"


def _listener(answer):
  """A loopback port whose connections get `answer(conn)`: what listens there is not Ray."""
  import socket
  import threading
  server = socket.socket()
  server.bind(("127.0.0.1", 0))
  server.listen(4)

  def serve():
    held = []  # connections stay open until the server closes
    while True:
      try:
        conn, _ = server.accept()
      except OSError:  # closed
        return
      held.append(conn)
      answer(conn)
  threading.Thread(target=serve, daemon=True).start()
  return server


@pytest.mark.parametrize("answer", [
    lambda conn: None,  # accepts and says nothing (ray.init would retry for many minutes)
    lambda conn: conn.close(),
    lambda conn: conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n"),  # e.g. the dashboard
], ids=["silent", "closes", "http1"])
def test_an_address_where_something_else_listens_is_one_line(monkeypatch, answer):
  monkeypatch.setattr(executors, "REACH_TIMEOUT_S", 0.5)
  server = _listener(answer)
  try:
    address = "127.0.0.1:%d" % server.getsockname()[1]
    with pytest.raises(ConnectionError, match=rf"no Ray cluster at '{address}': {address} "
                       "accepts connections but does not answer as Ray's gRPC server does"):
      executors.check_reachable(address)
  finally:
    server.close()


def test_a_running_clusters_address_passes_the_check(ray_executor):
  executors.check_reachable(ray.get_runtime_context().gcs_address)  # Ray's GCS: gRPC


class TwoPartError(Exception):
  """Pickles, but its class cannot be rebuilt from its args (one message, two parameters)."""

  def __init__(self, what, why):
    super().__init__(f"{what}: {why}")


def test_a_cells_exception_that_does_not_unpickle_comes_back_as_its_line(monkeypatch):
  # It came back as "ray task failed: RaySystemError: ..." where locally the row says
  # "TwoPartError: graph: too big".
  monkeypatch.setattr(executors, "_WORKER_CONFIGURED", True)  # this process is no worker
  monkeypatch.setattr(executors, "release_compiled_code", lambda: None)

  def task(item):
    raise TwoPartError("graph", "too big")

  status, exc = executors._guarded(task, 0, 1.0)
  assert status == "error" and type(exc) is RuntimeError
  assert str(exc) == harness.error_text(TwoPartError("graph", "too big")) == (
      "TwoPartError: graph: too big")
  status, exc = executors._guarded(lambda i: 1 / i, 0, 1.0)
  assert type(exc) is ZeroDivisionError  # one that comes back whole is itself


def test_local_executor_checks_the_mapping_limit_after_every_cell(monkeypatch):
  """After each cell, failed or not, the executor gives the process the chance to drop JAX's
  caches (simulator.runtime.release_compiled_code_if_needed)."""
  from simulator import runtime
  calls = []
  monkeypatch.setattr(runtime, "release_compiled_code_if_needed", lambda: calls.append(1))

  def task(x):
    if x == 2:
      raise ValueError("bad cell")
    return x * x

  done = []
  executors.make("local").run(task, [1, 2, 3], lambda i, r, e: done.append((i, r, e)))
  assert len(calls) == 3 and [d[1] for d in done] == [1, None, 9]


def test_workers_share_the_drivers_compilation_cache(monkeypatch, tmp_path):
  import jax
  monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
  old = jax.config.jax_compilation_cache_dir
  try:  # nothing is compiled in between, so JAX's cache itself is never opened here
    jax.config.update("jax_compilation_cache_dir", None)
    assert "JAX_COMPILATION_CACHE_DIR" not in executors.worker_env(1, 0)
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    assert executors.worker_env(1, 0)["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path)
    # Without a configured folder (the test run's own cache sets one), the environment's.
    jax.config.update("jax_compilation_cache_dir", None)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "env"))
    assert executors.worker_env(1, 0)["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "env")
  finally:
    jax.config.update("jax_compilation_cache_dir", old)


def test_without_ray_the_flag_says_how_to_install_it(monkeypatch):
  monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
  with pytest.raises(ValueError) as err:
    executors.make("ray")
  assert str(err.value) == executors.RAY_MISSING == (
      '--executor=ray needs Ray: pip install "go-jax[cluster]"')


def test_launcher_without_ray_is_one_line(tmp_path):
  code = ("import sys; sys.modules['ray'] = None; "
          "sys.argv = ['go-jax-evaluate', '--executor=ray', '--out=' + sys.argv[1]]; "
          "from experiments import evaluate; evaluate.run()")
  env = dict(os.environ, JAX_PLATFORMS="cpu", MPLBACKEND="Agg", PYTHONPATH=REPO)
  proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ev")], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines() == [
      'go-jax-evaluate: error: --executor=ray needs Ray: pip install "go-jax[cluster]"']
  assert not os.path.exists(tmp_path / "ev" / "results.json")
  assert cli.RAY_ONLY_FLAGS  # the flags that need --executor=ray


# ------------------------------------------------------------------ the table launchers
def _same_answers(a, b):
  """Cells of two table JSONs: the same keys, objectives and placements (times differ)."""
  assert sorted(a) == sorted(b)
  for key in a:
    assert "error" not in a[key], (key, a[key])
    assert (a[key]["objective"], a[key]["placement"]) == (b[key]["objective"],
                                                          b[key]["placement"]), key


def test_regal_table_on_ray_has_the_local_cells(ray_executor, tmp_path):
  import ml_collections  # pylint: disable=g-import-not-at-top
  from experiments import regal_comparison
  from experiments.configs import regal_table as table_config
  config = table_config.get_config()
  config.methods = ("brkga", "random")
  config.reference = "brkga"
  config.datasets = ml_collections.ConfigDict({"tiny": ";".join(GRAPHS)})
  config.topology = "nvlink{devices}"
  config.device_counts = (2,)
  config.seeds = (0,)
  config.budget = 32
  config.plots = False
  config.method_options = ml_collections.ConfigDict({"brkga": {"population": 16}})
  quiet = lambda s: None
  local = regal_comparison.run_table(config, str(tmp_path / "local"), log=quiet)
  remote = regal_comparison.run_table(config, str(tmp_path / "ray"), log=quiet,
                                      executor=ray_executor)
  assert remote["computed"] == len(remote["cells"]) == 4
  _same_answers(local["cells"], remote["cells"])
  again = regal_comparison.run_table(config, str(tmp_path / "ray"), log=quiet,
                                     executor=ray_executor)
  assert again["computed"] == 0 and again["skipped"] == 4


def test_learned_placers_on_ray_have_the_local_cells(ray_executor, tmp_path):
  from experiments import placer_comparison
  from experiments.configs import learned_placers
  cfg = learned_placers.get_config("tiny").to_dict()
  cfg.update(graphs=GRAPHS[:1], topologies=["nvlink2"], learned=[],  # deterministic methods
             families={GRAPHS[0]: "chain"}, cold_start=False)
  quiet = lambda s: None
  local = placer_comparison.run_comparison(cfg, str(tmp_path / "local"), log=quiet)
  remote = placer_comparison.run_comparison(cfg, str(tmp_path / "ray"), log=quiet,
                                            executor=ray_executor)
  assert remote["computed"] == len(remote["cells"]) >= 2
  _same_answers(local["cells"], remote["cells"])


def test_transfer_on_ray_pretrains_in_the_driver_and_has_the_local_rows(ray_executor, tmp_path):
  from go_jax import transfer
  from test_transfer import tiny_config as transfer_config, tiny_pretrain  # tests/ is on the path
  cfg = dict(transfer_config(tmp_path), baselines=("heft",), finetune_updates=1)
  pretrained = []
  remote = transfer.run(cfg, str(tmp_path / "ray"), progress=False, executor=ray_executor,
                        pretrain_config=lambda row: pretrained.append(row) or tiny_pretrain(row))
  assert pretrained == ["go_hint"]  # in this process, before the cell went to a worker
  assert len(remote) == 4 and not any(r["error"] for r in remote)
  local = transfer.run(cfg, str(tmp_path / "local"), pretrain_config=None, progress=False)
  assert stable(remote) == stable(local)  # the same checkpoint, fine-tuned by one update
