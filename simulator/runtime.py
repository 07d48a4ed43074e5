"""Process-level JAX settings: CPU cores as devices, and the compiled code a long sweep keeps.

XLA runs the simulator's small per-commit kernels on one core. Declaring each core a separate
CPU device lets `simulate` split its batch across them (about 1.9x on the 2-core CI machine,
see BENCHMARKS.md). The device count is read once, when JAX creates its CPU backend, so
launchers call `configure_cpu_devices` before running anything else with JAX.

A sweep that compiles a new program per graph shape (the REGAL table: about 900 cells) keeps
every executable in JAX's caches, and each holds its own memory mappings (about 150 per cell
there). Linux caps a process's mappings (`vm.max_map_count`, 65,530 by default); past it every
`mmap` fails and XLA stops with "LLVM compilation error: Cannot allocate memory" although
memory is free (a learned method's solve alone holds about 4,000 mappings, so a plain loop of
about 16 `methods.solve("go", ...)` calls gets there). `release_compiled_code_if_needed`, called
by the executors after every cell and by `methods.solve` before every solve, drops JAX's caches
before that point.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Optional, Tuple

from absl import logging

_FLAG = "--xla_force_host_platform_device_count"
_CONFIG = "jax_num_cpu_devices"


def _backends_started_error(error: RuntimeError) -> bool:
  """Whether `error` is JAX refusing the CPU device count because its backends already exist."""
  return "backend" in str(error).lower()


# The most CPU devices `configure_cpu_devices` exposes: each is a JAX device with its own
# runtime state, and far more than a machine has cores only slows JAX's start (100000 hung it).
MAX_CPU_DEVICES = 1024


def configure_cpu_devices(count: Optional[int] = None) -> int:
  """Exposes `count` CPU devices (default: one per core); returns the count requested.

  Uses JAX's public `jax_num_cpu_devices` option where the installed JAX has it, else XLA's
  `--xla_force_host_platform_device_count` flag (read when the CPU backend starts). Has no effect
  once JAX's backends exist: the option refuses then and a warning is logged (the XLA flag is
  silently too late). On a GPU or TPU machine the accelerator stays the default device and this
  only affects the host platform.
  """
  count = (os.cpu_count() or 1) if count is None else int(count)
  if not 1 <= count <= MAX_CPU_DEVICES:
    raise ValueError(f"configure_cpu_devices: count must be in [1, {MAX_CPU_DEVICES}], got "
                     f"{count}")
  import jax  # pylint: disable=g-import-not-at-top
  try:
    jax.config.update(_CONFIG, count)
  except AttributeError:  # a JAX without the option: the XLA flag (no effect once started)
    flags = re.sub(rf"{_FLAG}=\d+", "", os.environ.get("XLA_FLAGS", "")).strip()
    os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={count}".strip()
  except RuntimeError as e:
    if not _backends_started_error(e):
      raise
    logging.warning("configure_cpu_devices(%d) ignored: JAX backends are already initialized",
                    count)
  return count


# Fraction of the process's mapping limit above which the executors drop JAX's caches.
MAPPINGS_FRACTION = 0.5
_RELEASES = [0]  # how many times this process dropped JAX's caches here


def releases() -> int:
  """How many times `release_compiled_code_if_needed` dropped JAX's caches in this process: a
  caller that records which shapes are compiled (e.g. to keep compilation out of a timing)
  forgets its record when this changes."""
  return _RELEASES[0]


@functools.lru_cache(maxsize=None)
def _mapping_limit() -> Optional[int]:
  """The kernel's per-process mapping limit (read once), or None where /proc does not say."""
  try:
    with open("/proc/sys/vm/max_map_count") as fh:
      return int(fh.read().split()[0])
  except (OSError, ValueError, IndexError):
    return None


def memory_mappings() -> Optional[Tuple[int, int]]:
  """(mappings this process has, the kernel's per-process limit), or None where the system
  does not say (not Linux, or /proc unreadable)."""
  limit = _mapping_limit()
  if limit is None:
    return None
  try:
    with open("/proc/self/maps", "rb") as fh:
      count = sum(1 for _ in fh)
  except OSError:
    return None
  return count, limit


def release_compiled_code_if_needed(fraction: Optional[float] = None) -> bool:
  """Drops JAX's compilation caches (`jax.clear_caches`) when this process holds more than
  `fraction` (default `MAPPINGS_FRACTION`) of its memory-mapping limit (module docstring); returns whether it did. Results
  are unchanged: a later call of a dropped function compiles it again. A no-op where JAX is not
  imported or the counts are unknown."""
  import sys  # pylint: disable=g-import-not-at-top
  jax = sys.modules.get("jax")
  counts = memory_mappings() if jax is not None else None
  fraction = MAPPINGS_FRACTION if fraction is None else float(fraction)
  if counts is None or counts[0] <= fraction * counts[1]:
    return False
  import gc  # pylint: disable=g-import-not-at-top
  jax.clear_caches()
  gc.collect()
  _RELEASES[0] += 1
  after = memory_mappings()
  logging.info("JAX caches dropped: %d memory mappings of the process limit %d (now %s)",
               counts[0], counts[1], after[0] if after else "?")
  return True
