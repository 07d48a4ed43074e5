"""The one batch-axis sharding that every batched search and training loop uses.

Simulations dominate go-jax's searches (BRKGA, SA, REGAL's guided BRKGA) and its training
(PPO's K sampled placements, REGAL's searches, HDP's K placements): each step simulates a batch
of independent actions. Inside ONE jit, the batch of actions is split across every device of
the run along a mesh axis "batch" (`jax.lax.with_sharding_constraint`); everything else (policy
parameters, graph, topology) stays replicated, and XLA inserts the reductions (the loss's mean,
the population's sort) where a sharded value meets a replicated one.

* `batch_sharding(batch)`: the NamedSharding over all devices of the run (`jax.devices()`: every
  process's devices after `jax.distributed.initialize`, so the same code runs on one host or
  many), or None where there is one device or the batch does not divide evenly; with None
  nothing is constrained and the single-device program is unchanged.
* `split(x, sharding)`: pins the producer of x replicated and splits x along its batch axis.
  Pinning matters: sharding propagation would otherwise run a random draw that feeds x
  sharded, and XLA's RngBitGenerator ("rbg" keys) draws different numbers when partitioned,
  so results would depend on the device count. With the pin every device draws the same
  numbers as one device does, and integer results are identical; float reductions over the
  batch (losses, gradients) may differ in the last bits (reduction order).
* `replicate(tree, sharding)`: outputs replicated, so each process can read them
  (`np.asarray` of a fully replicated array uses its local copy) and every process continues
  from the same state.
* `padded_batch(b, sharding)` / `pad_rows`: a batch that does not divide the device count is
  padded with copies of its first row (sliced off after), e.g. PPO's K sampled + 1 greedy.

CPU cores become devices with `simulator.runtime.configure_cpu_devices`; several hosts join
with `go_jax.distributed.initialize` (docs/cluster.md).

`host_devices(batch)`: where an accelerator is the default backend, the host CPU devices that a
small batch of the host API (`simulator.simulate.simulate`) runs on instead (see HOST_BATCH).
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

AXIS = "batch"
# Batches of at most this many actions that `simulate` (the host API) is given run on the host's
# CPU devices when the default backend is an accelerator. The commit loop is sequential: one
# iteration per commit whatever the batch, and on a GPU each iteration is about 30 kernel
# launches, so a small batch is launch-bound: on an H200 (2026-11-26) about 100 us per iteration
# at B = 1,024, N = 1,000 (0.103 s for 1,041 iterations), while one CPU core spends about
# 0.8 us per action per iteration (2-core EPYC, same size); the two cross near B = 125 per
# core. The large-graph path simulates a handful of actions over 61k-131k iterations (memory
# calibration, verification, the registry's re-simulation) and took 14.7 / 9.4 / 14.2 s on the
# GPU against 3.4 / 1.4 / 2.2 s on the 2-core CPU (BENCHMARKS.md, "GO on the largest graphs").
# Searches and training batches inside one jit are not routed: they stay on the accelerator.
HOST_BATCH = 64


def mesh_sharding(devices: Optional[Sequence] = None, spec=(AXIS,)):
  """NamedSharding over `devices` (default: all devices of the run) with PartitionSpec
  `spec`, or None with fewer than two devices."""
  devices = jax.devices() if devices is None else list(devices)
  if len(devices) < 2:
    return None
  mesh = jax.sharding.Mesh(np.asarray(devices), (AXIS,))
  return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))


def batch_sharding(batch: Optional[int] = None, devices: Optional[Sequence] = None):
  """The batch axis split across `devices` (default: every device of the run), or None: one
  device, or `batch` (when given) not a multiple of the device count."""
  sharding = mesh_sharding(devices)
  if sharding is None or (batch is not None and batch % sharding.mesh.size):
    return None
  return sharding


def host_devices(batch: int, backend: Optional[str] = None):
  """The host CPU devices (this process's) that a batch of `batch` actions should be simulated
  on instead of the default backend's devices, or None: the default backend (`backend`, default
  `jax.default_backend()`) is the CPU, or the batch is larger than HOST_BATCH, or this JAX has
  no CPU backend."""
  backend = jax.default_backend() if backend is None else backend
  if backend == "cpu" or batch > HOST_BATCH:
    return None
  try:
    return jax.local_devices(backend="cpu")
  except RuntimeError:  # no CPU platform in this process
    return None


def num_parts(sharding) -> int:
  """Devices the batch is split across (1 without a sharding)."""
  return 1 if sharding is None else int(sharding.mesh.size)


def padded_batch(batch: int, sharding) -> int:
  """`batch` rounded up to a multiple of the device count."""
  parts = num_parts(sharding)
  return -(-batch // parts) * parts


def pad_rows(x, size: int, axis: int = 0):
  """x with its `axis` extended to `size` by repeating its first entry (a valid action, whose
  copies are simulated and sliced off again)."""
  extra = size - x.shape[axis]
  if extra <= 0:
    return x
  first = jax.lax.slice_in_dim(x, 0, 1, axis=axis)
  reps = [1] * x.ndim
  reps[axis] = extra
  return jnp.concatenate([x, jnp.tile(first, reps)], axis=axis)


def _spec(ndim: int, axis: int):
  parts = [None] * ndim
  parts[axis] = AXIS
  return jax.sharding.PartitionSpec(*parts)


def replicate(tree, sharding):
  """Every array of `tree` constrained replicated over the sharding's mesh (no-op: None)."""
  if sharding is None:
    return tree
  rep = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
  return jax.tree_util.tree_map(lambda x: jax.lax.with_sharding_constraint(x, rep), tree)


def put_replicated(tree, devices: Optional[Sequence] = None):
  """Host values placed replicated on every device of the run (as is with one device).

  For the state a jitted loop carries from call to call: its output comes back replicated over
  all devices, so an initial state on the default device alone would make the second call
  compile again for the new input placement; put there from the start, one compile serves."""
  sharding = mesh_sharding(devices, spec=())
  return tree if sharding is None else jax.device_put(tree, sharding)


def split(tree, sharding, axis: int = 0):
  """Every array of `tree` computed replicated, then split along `axis` (see the module
  docstring); no-op with a None sharding. Traceable; under vmap the mapped axes stay whole."""
  if sharding is None:
    return tree
  tree = replicate(tree, sharding)
  return jax.tree_util.tree_map(
      lambda x: jax.lax.with_sharding_constraint(
          x, jax.sharding.NamedSharding(sharding.mesh, _spec(x.ndim, axis))), tree)


def map_batch(fn, sharding, shared, batch):
  """fn(*shared, *batch) where every array of `batch` (a tuple of pytrees) is split along
  axis 0 across the sharding's devices and each device runs fn on its own part
  (`jax.shard_map`); `shared` (a tuple) is replicated; fn's outputs must all have the batch
  axis first. With a None sharding: fn(*shared, *batch) as is.

  For batched loops whose trip count depends on the batch (the simulator's `lax.while_loop`
  runs until every action of its batch is done): split with `split` only, one loop would run
  over the whole batch and test "all done" across devices at every iteration (a cross-device,
  on several hosts a cross-process, reduction per commit); here each device runs its own loop
  to its own part's end. The batch is computed replicated first (see `split`)."""
  if sharding is None:
    return fn(*shared, *batch)
  batch = replicate(tuple(batch), sharding)
  spec = jax.sharding.PartitionSpec
  mapped = jax.shard_map(lambda *a: fn(*a), mesh=sharding.mesh,
                         in_specs=(spec(),) * len(shared) + (spec(AXIS),) * len(batch),
                         out_specs=spec(AXIS), check_vma=False)
  return mapped(*shared, *batch)

