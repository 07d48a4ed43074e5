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
go-jax-place, go-jax-train and go-jax-evaluate do (docs/cluster.md). Process 0 writes: only
`is_primary()` writes a run's results, plots, metrics and parameters; the others compute the
same answers and write nothing (`output(path)`: the path on process 0, None elsewhere). What
every process must decide alike comes from process 0: `agree` (a wall-clock budget's "one
more call?"), `from_primary` (JSON: what a resumed sweep finds already done, process 0's
output checks) and `tree_from_primary` (arrays: a restored checkpoint), so that no
filesystem need be shared and no process waits in a collective that another skipped.
Without --coordinator_address nothing happens: one process, its local devices. On GPU or TPU
clusters whose scheduler JAX recognises (SLURM, Cloud TPU), `jax.distributed.initialize()`
can find these values itself; give them explicitly elsewhere (e.g. localhost CPU processes).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Optional, TypeVar

import jax
import numpy as np
from absl import flags, logging

T = TypeVar("T")

# host:port, the host a name, an IPv4 address or a bracketed IPv6 one ("[::1]:1234")
_ADDRESS = re.compile(r"^(?:[^\s:\[\]]+|\[[0-9A-Fa-f:.]+\]):(\d+)$")


def check(coordinator_address: str, num_processes: int, process_id: int) -> bool:
  """Whether the arguments ask for a multi-process run; ValueError naming a bad one."""
  if not coordinator_address:
    if num_processes != 1 or process_id != 0:
      raise ValueError(f"num_processes={num_processes} and process_id={process_id} need a "
                       "coordinator_address (host:port of process 0)")
    return False
  match = _ADDRESS.match(coordinator_address)
  if not match:
    raise ValueError(f"coordinator_address must be host:port, got {coordinator_address!r}")
  if not 1 <= int(match.group(1)) <= 65535:  # port 0 or one past 65535: every process hangs
    raise ValueError(f"coordinator_address {coordinator_address!r}: the port must be in "
                     f"[1, 65535], got {int(match.group(1))}")
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


def output(path: Optional[T]) -> Optional[T]:
  """`path` on process 0, None on the others: the one guard of a launcher's output folder
  (results, plots, metrics, parameters), so that the other processes write nothing."""
  return path if is_primary() else None


def agree(value: T) -> T:
  """Process 0's `value` (a bool or an int) on every process (one collective; with one
  process, `value` itself).

  For host-side decisions that steer collectives and may differ between processes, e.g. a
  wall-clock budget's "start another call?" or "how many updates fit in the next call": were
  one process to stop while another started the next call, that one would wait in its
  collective forever.
  """
  if jax.process_count() == 1:
    return value
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  return type(value)(multihost_utils.broadcast_one_to_all(np.int64(value)))


def from_primary(read: Callable[[], Any]) -> Any:
  """`read()` evaluated on process 0 and sent (as JSON) to every process; with one process,
  `read()`. For what a run's processes must see alike but only process 0 can read, e.g. the
  rows an interrupted sweep finished (in process 0's results file) that a resumed run skips,
  or process 0's checks of its output folder. An exception of `read` is raised on every
  process (process 0: the original; the others: a ValueError with its text)."""
  if jax.process_count() == 1:
    return read()
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  data, error = None, None
  if is_primary():
    try:  # a value JSON cannot hold is read()'s error too: raised after the broadcast
      text = json.dumps({"value": read()})
    except Exception as e:  # pylint: disable=broad-except
      error, text = e, json.dumps({"error": str(e)})  # raised on every process (the others
      # would wait in the broadcast forever)
    data = np.frombuffer(text.encode(), np.uint8)
  size = int(multihost_utils.broadcast_one_to_all(np.int64(0 if data is None else data.size)))
  buf = data if data is not None else np.zeros(size, np.uint8)
  message = json.loads(np.asarray(multihost_utils.broadcast_one_to_all(buf)).tobytes().decode())
  if "error" in message:
    if error is not None:
      raise error  # process 0: the original exception
    raise ValueError(message["error"])
  return message["value"]


def broadcast(tree: T) -> T:
  """Process 0's arrays of `tree` (every process gives the same structure, shapes and dtypes)
  on every process, as uncommitted device arrays; with one process, `tree` itself."""
  if jax.process_count() == 1:
    return tree
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  host = jax.device_get(tree)
  out = multihost_utils.broadcast_one_to_all(host)
  return jax.tree_util.tree_map(lambda o, h: jnp.asarray(np.asarray(o).astype(np.asarray(h).dtype)),
                                out, host)


def tree_from_primary(read: Callable[[], T], template: T) -> T:
  """`read()`, a pytree of arrays shaped like `template`, evaluated on process 0 and sent to
  every process (`broadcast`); e.g. a checkpoint that only process 0's disk holds. An exception
  of `read` is raised on every process (`from_primary`). With one process, `read()`."""
  if jax.process_count() == 1:
    return read()
  box = []
  from_primary(lambda: box.append(read()))
  return broadcast(box[0] if box else template)


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
