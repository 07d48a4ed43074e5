"""Shared pytest fixtures: the package data folder, small graphs with known answers, the
fast-compile mode of the modules marked `fast_compile`, and the `full` tier (long variants of
default tests, run with GO_JAX_FULL_TESTS=1). The run shares one compilation cache and compiles
with XLA:CPU's classic emitters (CPU_EMITTERS_FLAG)."""

import contextlib
import os

import numpy as np
import pytest

from simulator import CompGraph, Topology
from simulator.sources import data_root


# One JAX persistent compilation cache for the whole test run (GO_JAX_TEST_COMPILE_CACHE=0 turns
# it off): the same programs are otherwise compiled again by each xdist worker, by each launcher
# a test starts as a subprocess, and after every `jax.clear_caches()`. The folder is new for each
# run (nothing carries over between runs) and is removed at its end. JAX keys each entry on the
# program, the compile options (so the fast_compile modules' programs, compiled with most
# optimisations off, never stand in for optimised ones), the flags and the versions.
COMPILE_CACHE_ENV = "GO_JAX_TEST_COMPILE_CACHE"
# Programs that compile in at least this many seconds are cached (JAX's default is 1 s).
COMPILE_CACHE_MIN_SECONDS = "0.5"


def _start_compile_cache(config) -> None:
  """In the controlling process only (xdist workers and subprocesses inherit the environment):
  a fresh cache folder in JAX_COMPILATION_CACHE_DIR, unless the run already names one."""
  if hasattr(config, "workerinput") or os.environ.get(COMPILE_CACHE_ENV) == "0" or \
      os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    return
  import tempfile  # pylint: disable=g-import-not-at-top
  folder = tempfile.mkdtemp(prefix="go_jax_tests_jax_cache_")
  config.go_jax_compile_cache = folder
  os.environ["JAX_COMPILATION_CACHE_DIR"] = folder
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", COMPILE_CACHE_MIN_SECONDS)
  import jax  # pylint: disable=g-import-not-at-top
  # jax was imported by this file before the variables were set: tell this process too.
  jax.config.update("jax_compilation_cache_dir", folder)
  jax.config.update("jax_persistent_cache_min_compile_time_secs",
                    float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))


# XLA:CPU's classic LLVM IR emitters instead of its newer MLIR fusion emitters, for the whole
# test run (the xdist workers, the launchers the tests start and the Ray workers inherit
# XLA_FLAGS, so that they all share the run's cache): they compile the same program in 12-45%
# less time (the CI policy's PPO update: 9.2 -> 5.2 s with most optimisations off; at the
# shipped size with them on, 25 -> 22 s with the first call), and the suite is bound by
# compiling. The compiled code runs about 15% slower (the simulator's loop), which the tests do
# not feel. Benchmarks and users' runs keep XLA's default; the results here are checked against
# the float64 reference simulator either way. GO_JAX_TEST_XLA_DEFAULT=1 (or an XLA_FLAGS naming
# the flag) keeps XLA's choice.
CPU_EMITTERS_FLAG = "--xla_cpu_use_fusion_emitters=false"
XLA_DEFAULT_ENV = "GO_JAX_TEST_XLA_DEFAULT"


def _classic_cpu_emitters(config) -> None:
  """In the controlling process, before any JAX backend starts: CPU_EMITTERS_FLAG in
  XLA_FLAGS."""
  flags = os.environ.get("XLA_FLAGS", "")
  if hasattr(config, "workerinput") or os.environ.get(XLA_DEFAULT_ENV) == "1" or \
      "xla_cpu_use_fusion_emitters" in flags:
    return
  os.environ["XLA_FLAGS"] = f"{flags} {CPU_EMITTERS_FLAG}".strip()


def pytest_unconfigure(config):
  folder = getattr(config, "go_jax_compile_cache", None)
  if folder:
    import shutil  # pylint: disable=g-import-not-at-top
    shutil.rmtree(folder, ignore_errors=True)


def pytest_configure(config):
  """Registers the markers the tests use (`pytest -m "not slow"` leaves the slow ones out),
  sets the run's XLA emitters (_classic_cpu_emitters) and starts its compilation cache
  (_start_compile_cache)."""
  _classic_cpu_emitters(config)
  _start_compile_cache(config)
  config.addinivalue_line("markers", "slow: takes a minute or more (builds and installs a wheel)")
  config.addinivalue_line(
      "markers", "fast_compile: (module-wide, `pytestmark = pytest.mark.fast_compile`) XLA "
      "compiles the module's programs, and those of the launchers it starts, with most "
      "optimisations off; see _fast_compile in tests/conftest.py")
  config.addinivalue_line(
      "markers", "full: a long variant of a test that also runs in a smaller form by default "
      f"(e.g. every zoo model instead of three); skipped unless {FULL_ENV}=1")


FULL_ENV = "GO_JAX_FULL_TESTS"


def pytest_collection_modifyitems(config, items):
  """Skips the `full` tier unless GO_JAX_FULL_TESTS=1: the default suite must fit the 2-core CI
  machine's 15 minutes, and each `full` test has a default variant covering the same code."""
  del config
  if os.environ.get(FULL_ENV) == "1":
    return
  skip = pytest.mark.skip(reason=f"full tier: set {FULL_ENV}=1 to run it")
  for item in items:
    if item.get_closest_marker("full") is not None:
      item.add_marker(skip)


FAST_COMPILE_ENV = "JAX_DISABLE_MOST_OPTIMIZATIONS"


@contextlib.contextmanager
def _most_optimizations_disabled(disabled: bool):
  """jax_disable_most_optimizations (this process) and FAST_COMPILE_ENV (the subprocesses it
  starts) set to `disabled` inside the block, both restored after it, then the caches cleared:
  the flag is not part of JAX's executable cache key."""
  import jax  # pylint: disable=g-import-not-at-top
  before = (jax.config.read("jax_disable_most_optimizations"), os.environ.get(FAST_COMPILE_ENV))
  jax.config.update("jax_disable_most_optimizations", disabled)
  if disabled:
    os.environ[FAST_COMPILE_ENV] = "1"
  else:
    os.environ.pop(FAST_COMPILE_ENV, None)
  try:
    yield
  finally:
    jax.config.update("jax_disable_most_optimizations", before[0])
    if before[1] is None:
      os.environ.pop(FAST_COMPILE_ENV, None)
    else:
      os.environ[FAST_COMPILE_ENV] = before[1]
    jax.clear_caches()


@pytest.fixture(scope="module", autouse=True)
def _fast_compile(request):
  """Most XLA optimisations off (LLVM -O0, no expensive passes) while a module marked
  `fast_compile` runs: in this process (jax_disable_most_optimizations, read at every compile)
  and in the subprocesses it starts (the JAX_DISABLE_MOST_OPTIMIZATIONS environment variable).

  For modules whose cost is XLA's compile time and whose checks do not depend on how fast the
  compiled code runs (on the 2-core CI machine XLA compiles about a third faster, and these
  modules take 13-33% less CPU time). XLA's HLO passes do not change, so the optimised HLO the
  front ends read is the same; float results may differ in the last bits, so a test whose
  outcome flips on them is fragile and must be made robust first (test_imitation.py's GO toy
  missed its bound without the optimisations at a PPO learning rate of 3e-3, and passes either
  way at 1e-3), and modules that run more than they compile stay unmarked; a test of a marked
  module that runs more than it compiles asks for the `optimized` fixture.
  The flag is not part of JAX's executable cache key: leaving the module clears the caches, so
  that no later module runs an executable compiled without optimisation.
  """
  if request.node.get_closest_marker("fast_compile") is None:
    yield
    return
  with _most_optimizations_disabled(True):
    yield


@pytest.fixture
def optimized():
  """XLA's optimisations back on for one test of a `fast_compile` module: for a test that runs
  more than it compiles (a policy forward pass on a 5,000-op graph takes 29 s unoptimised
  instead of 9 s), beside tests that mostly compile. The caches are cleared after it, as after
  a fast_compile module, so that its executables stay with it."""
  with _most_optimizations_disabled(False):
    yield


@pytest.fixture
def shared_data():
  """The folder of the profiled graphs (PipeDream, Piper) that the sources read.

  The package's own data folder (simulator/data), or $GO_JAX_DATA where that is set. The data
  ships with the package, so this never skips: a missing folder fails the test that asks for it.
  """
  path = data_root()
  assert os.path.isdir(os.path.join(path, "pipedream")), f"no pipedream/ in {path}"
  return path


@pytest.fixture
def diamond():
  """The worked example of docs/design.md section 4: graph, topology, placement, priority."""
  g = CompGraph(cost=[1, 2, 3, 1], senders=[0, 0, 1, 2], receivers=[1, 2, 3, 3],
                out_bytes=[1, 1, 1, 1], name="diamond")
  topo = Topology.uniform(2, bandwidth=1.0, latency=0.5)
  return g, topo, np.array([0, 0, 1, 0]), np.zeros(4)
