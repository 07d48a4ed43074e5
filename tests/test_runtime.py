"""CPU cores as devices: the batch is split across them and results stay exact."""

import os
import subprocess
import sys

import pytest

from simulator import runtime

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = r"""
from simulator.runtime import configure_cpu_devices
configure_cpu_devices(2)
import jax, numpy as np
from simulator import simulate, reference_simulate
from simulator.simulate import prepare_batch
from tests.test_simulate import random_instance
assert len(jax.local_devices()) == 2, jax.local_devices()
import os  # the public option, not the XLA flag (on a JAX that has it)
assert "xla_force_host" not in os.environ.get("XLA_FLAGS", "") or not hasattr(
    jax.config, "jax_num_cpu_devices")
for seed in range(6):
  g, topo, place, prio = random_instance(seed, 10 + 7 * seed, 1 + seed % 4)
  res = simulate(g, topo, place[:3], prio[:3])  # B=3 pads to 4: two rows per device
  _, pl, _ = prepare_batch(g, np.asarray(place[:3]), np.asarray(prio[:3]))
  assert pl.shape[0] == 4 and len(pl.sharding.device_set) == 2  # what `simulate` ran
  assert not res.makespan.committed  # sliced on the host (no compile per size), uncommitted
  for b in range(3):
    ref = reference_simulate(g, topo, place[b], prio[b])
    np.testing.assert_array_equal(np.asarray(res.start[b]), ref.start)
    np.testing.assert_array_equal(np.asarray(res.peak_memory[b]), ref.peak_memory)
    assert float(res.makespan[b]) == ref.makespan and bool(res.oom[b]) == ref.oom
# With an accelerator as the default backend, a small batch runs split over the host's CPU
# devices (simulator.sharding.host_devices): here the backend is made to say "gpu".
from simulator import sharding
g, topo, place, prio = random_instance(3, 40, 3)
plain = simulate(g, topo, place[:3], prio[:3])
jax.default_backend = lambda: "gpu"
assert sharding.host_devices(3) == jax.local_devices(backend="cpu")
assert sharding.host_devices(sharding.HOST_BATCH + 1) is None
routed = simulate(g, topo, place[:3], prio[:3])
for name in ("makespan", "start", "finish", "peak_memory", "oom"):
  np.testing.assert_array_equal(np.asarray(getattr(routed, name)), np.asarray(getattr(plain, name)))
assert not routed.makespan.committed  # returned to the default device, as a plain run's
print("OK")
"""


def test_sharded_batch_is_exact():
  """Run in a fresh process: the device count is fixed when JAX's backend starts."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
  proc = subprocess.run([sys.executable, "-c", _CHILD], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]


def test_configure_after_backend_start_is_a_no_op(monkeypatch):
  import jax
  jax.devices()  # the backend exists now
  monkeypatch.setenv("XLA_FLAGS", "")
  assert runtime.configure_cpu_devices(3) == 3
  assert os.environ["XLA_FLAGS"] == ""


def test_bad_count():
  for count in (0, runtime.MAX_CPU_DEVICES + 1):
    with pytest.raises(ValueError, match=r"count must be in \[1, 1024\]"):
      runtime.configure_cpu_devices(count)


def test_compiled_code_is_released_near_the_mapping_limit():
  """A sweep's executables hold memory mappings; past `vm.max_map_count` XLA fails with "Cannot
  allocate memory". Above the fraction the caches are dropped, the mappings fall, the release
  count moves on, and a dropped function still computes the same thing."""
  import jax
  import jax.numpy as jnp
  counts = runtime.memory_mappings()
  if counts is None:
    pytest.skip("no /proc memory-mapping counts on this system")
  assert counts[0] > 0 and counts[1] > counts[0]
  assert not runtime.release_compiled_code_if_needed(fraction=1.0)  # under the limit: kept
  fns = [jax.jit(lambda x, k=k: jnp.cumsum(x) * k) for k in range(40)]
  before_values = [float(f(jnp.ones(5 + k))[-1]) for k, f in enumerate(fns)]
  with_code = runtime.memory_mappings()[0]
  released = runtime.releases()
  assert runtime.release_compiled_code_if_needed(fraction=0.0)
  assert runtime.releases() == released + 1
  assert runtime.memory_mappings()[0] < with_code
  assert [float(f(jnp.ones(5 + k))[-1]) for k, f in enumerate(fns)] == before_values


def test_every_solve_checks_the_mapping_limit_first(monkeypatch):
  """A loop of `methods.solve` calls (not only the sweep executors) drops the caches in time."""
  from go_jax import methods  # pylint: disable=g-import-not-at-top
  from simulator import sources, topology_spec  # pylint: disable=g-import-not-at-top
  calls = []
  monkeypatch.setattr(runtime, "release_compiled_code_if_needed", lambda: calls.append(1))
  g = sources.load_graph("chain:n=8,seed=0")
  t = topology_spec.load_topology("nvlink2", g)
  methods.solve("heft", g, t)
  methods.solve("m_sct", g, t)
  assert calls == [1, 1]
