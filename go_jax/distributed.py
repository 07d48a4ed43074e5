"""Several processes, on one host or many, as ONE JAX run (`jax.distributed`).

After `initialize`, `jax.devices()` lists every process's devices and the batched searches and
training loops split their batches across all of them (`simulator.sharding`): BRKGA's and SA's
populations, REGAL's searches, PPO's and HDP's sampled placements. Every process runs the same
program on the same inputs (same config, same seed) and ends with the same, replicated
results; XLA moves the batch's parts between processes (gloo collectives on CPU).

  # on host 0 (the coordinator) and host 1, or in two shells on one machine (i = 0, 1):
  distributed.initialize("host0:1234", num_processes=2, process_id=i)
  sol = methods.solve("brkga", graph, topology, seed=0)

A launcher defines the flags with `define_flags()` and calls `initialize_from_flags()` first in
`main`, before anything starts JAX's backends (as `simulator.runtime.configure_cpu_devices`).
The shipped launchers do not define them yet: their output files would need "process 0
writes" handling (checkpoints, metrics, tables).
Without --coordinator_address nothing happens: one process, its local devices. On GPU or TPU
clusters whose scheduler JAX recognises (SLURM, Cloud TPU), `jax.distributed.initialize()`
can find these values itself; give them explicitly elsewhere (e.g. localhost CPU processes).
"""

from __future__ import annotations

import re

import jax
from absl import flags, logging

_ADDRESS = re.compile(r"^[^\s:]+:\d+$")


def check(coordinator_address: str, num_processes: int, process_id: int) -> bool:
  """Whether the arguments ask for a multi-process run; ValueError naming a bad one."""
  if not coordinator_address:
    if num_processes != 1 or process_id != 0:
      raise ValueError(f"num_processes={num_processes} and process_id={process_id} need a "
                       "coordinator_address (host:port of process 0)")
    return False
  if not _ADDRESS.match(coordinator_address):
    raise ValueError(f"coordinator_address must be host:port, got {coordinator_address!r}")
  if num_processes < 1:
    raise ValueError(f"num_processes must be >= 1, got {num_processes}")
  if not 0 <= process_id < num_processes:
    raise ValueError(f"process_id must be in [0, {num_processes}), got {process_id}")
  return True


def initialize(coordinator_address: str = "", num_processes: int = 1,
               process_id: int = 0) -> bool:
  """Joins this process to a run of `num_processes` (`jax.distributed.initialize`); returns
  whether it did (False without a coordinator address: a one-process run).

  Must run before JAX's backends start. On CPU, selects gloo collectives (XLA's CPU
  cross-process communication) where the installed JAX has the option.
  """
  if not check(coordinator_address, num_processes, process_id):
    return False
  try:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  except (AttributeError, ValueError) as e:  # a JAX without the option or without gloo
    logging.warning("gloo CPU collectives unavailable (%s); CPU devices of other processes "
                    "may not be usable", e)
  jax.distributed.initialize(coordinator_address=coordinator_address,
                             num_processes=num_processes, process_id=process_id)
  logging.info("process %d of %d: %d local of %d devices", jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())
  return True


def is_primary() -> bool:
  """Whether this is process 0 (the one that writes a run's shared outputs)."""
  return jax.process_index() == 0


def define_flags(flag_values=flags.FLAGS) -> None:
  """--coordinator_address, --num_processes and --process_id on a launcher."""
  flags.DEFINE_string("coordinator_address", "", "Multi-process run (go_jax.distributed): "
                      "host:port of process 0; every process gets the same value, the same "
                      "--num_processes and its own --process_id. Empty: one process.",
                      flag_values=flag_values)
  flags.DEFINE_integer("num_processes", 1, "Processes in a multi-process run.", lower_bound=1,
                       flag_values=flag_values)
  flags.DEFINE_integer("process_id", 0, "This process's index in [0, --num_processes).",
                       lower_bound=0, flag_values=flag_values)


def initialize_from_flags(flag_values=flags.FLAGS) -> bool:
  """`initialize` with the values of `define_flags`'s flags (ValueError naming a bad one)."""
  return initialize(flag_values.coordinator_address, flag_values.num_processes,
                    flag_values.process_id)
