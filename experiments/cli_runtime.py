"""Where and how a go-jax launcher's work runs (re-exported by experiments.cli): JAX's
persistent compilation cache (--compilation_cache, which `cli.run` defines for every launcher),
the flags of a run over several processes (`go_jax.distributed`) and the executor flags of a
sweep launcher's cells (`go_jax.executors`).

Every flag defined here is attributed to the launcher (`module_name`) or to go_jax.distributed,
never to this module, so that the launcher's --help lists it.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from absl import app, flags

FLAGS = flags.FLAGS


# ------------------------------------------------------------------ compilation cache
COMPILATION_CACHE_HELP = (
    "Folder for JAX's persistent compilation cache: a rerun, a resumed sweep or the next "
    "launcher loads the compiled programs instead of compiling them again. Default: "
    "$JAX_COMPILATION_CACHE_DIR if set, else none. On a cluster the folder must be shared.")


def define_compilation_cache_flag(module_name: str) -> bool:
  """--compilation_cache for a launcher (listed in its --help), unless it defines a flag of
  that name itself (go-jax-bench-executor's means something else). True when defined here."""
  if "compilation_cache" in FLAGS:
    return False
  flags.DEFINE_string("compilation_cache", None, COMPILATION_CACHE_HELP,
                      module_name=module_name)
  return True


def use_compilation_cache(folder: Optional[str]) -> None:
  """Point JAX's persistent compilation cache at `folder` (created if missing); None or "":
  leave JAX's own setting ($JAX_COMPILATION_CACHE_DIR, else no cache)."""
  if not folder:
    return
  folder = os.path.expanduser(folder)
  if os.path.exists(folder) and not os.path.isdir(folder):
    raise ValueError(f"--compilation_cache={folder}: exists and is not a folder")
  os.makedirs(folder, exist_ok=True)
  import jax  # pylint: disable=g-import-not-at-top
  jax.config.update("jax_compilation_cache_dir", folder)


# ------------------------------------------------------------------ several processes
def define_distributed_flags() -> None:
  """--coordinator_address, --num_processes, --process_id (`go_jax.distributed`): a launcher
  whose batched search or training runs as one JAX run over several processes."""
  from go_jax import distributed  # pylint: disable=g-import-not-at-top
  distributed.define_flags()


def initialize_distributed() -> bool:
  """`distributed.initialize_from_flags` (call it first in `main`, before anything starts
  JAX); app.UsageError (one line) for values that do not fit. Returns whether this process
  joined a multi-process run."""
  from go_jax import distributed  # pylint: disable=g-import-not-at-top
  try:
    return distributed.initialize_from_flags()
  except ValueError as e:
    raise app.UsageError(f"--coordinator_address/--num_processes/--process_id: {e}") from e


def multi_process() -> bool:
  """Whether the flags of `define_distributed_flags` ask for several processes (no JAX)."""
  return bool(FLAGS.coordinator_address)


# ------------------------------------------------------------------ executors
def define_executor_flags(module_name: str) -> None:
  """--executor, --ray_address, --ray_num_cpus, --cpus_per_cell, --gpus_per_cell: where a sweep
  launcher's cells run (`go_jax.executors`); `executor_from_flags` builds the executor. The
  flags are the launcher's own (`module_name`), so that its --help lists them."""
  from go_jax import executors  # pylint: disable=g-import-not-at-top
  if module_name == "__main__":  # as absl names the flags of a `python -m` module
    module_name = sys.argv[0] if sys.argv else module_name
  flags.DEFINE_enum(
      "executor", "local", executors.names(),
      "Where the cells run: 'local' (one after the other in this process) or 'ray' (one Ray "
      "task per cell, on a local Ray instance or the cluster at --ray_address; needs "
      'pip install "go-jax[cluster]"). Results are written by this process as cells finish; '
      "a rerun resumes.", module_name=module_name)
  flags.DEFINE_string(
      "ray_address", None, "With --executor=ray: the Ray cluster to join ('auto': the one this "
      "machine belongs to, 'HOST:PORT', 'ray://HOST:10001'); unset: start a local Ray "
      "instance.", module_name=module_name)
  flags.DEFINE_integer(
      "ray_num_cpus", None, "With --executor=ray and no --ray_address: CPUs of the local Ray "
      "instance (default: one per core).", module_name=module_name)
  flags.DEFINE_float(
      "cpus_per_cell", 1.0, "With --executor=ray: CPUs each cell's task requests (Ray runs as "
      "many cells at once as the CPUs allow; a worker's JAX gets that many CPU devices, and "
      "with 1 XLA runs single-threaded).", module_name=module_name)
  flags.DEFINE_float(
      "gpus_per_cell", 0.0, "With --executor=ray: GPUs each cell's task requests (0: the "
      "workers run JAX on the CPU).", module_name=module_name)


RAY_ONLY_FLAGS = ("ray_address", "ray_num_cpus", "cpus_per_cell", "gpus_per_cell")


def executor_from_flags():
  """The executor the flags of `define_executor_flags` name; app.UsageError (one line) for a
  Ray flag without --executor=ray, or --executor=ray without Ray installed."""
  from go_jax import executors  # pylint: disable=g-import-not-at-top
  name = FLAGS.executor
  if name != "ray":
    given = [f"--{f}" for f in RAY_ONLY_FLAGS if FLAGS[f].present]
    if given:
      raise app.UsageError(f"{', '.join(given)} need(s) --executor=ray")
    return executors.make(name)
  try:
    return executors.make(name, address=FLAGS.ray_address, num_cpus=FLAGS.ray_num_cpus,
                          cpus_per_cell=FLAGS.cpus_per_cell, gpus_per_cell=FLAGS.gpus_per_cell)
  except ValueError as e:
    raise app.UsageError(one_line(e)) from e


# Imported last, as experiments.cli imports this module last: either can then be imported first.
# Only executor_from_flags uses it.
from experiments.cli import one_line  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
