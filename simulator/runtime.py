"""Process-level JAX settings: exposing CPU cores as devices so batches shard across them.

XLA runs the simulator's small per-commit kernels on one core. Declaring each core a separate
CPU device lets `simulate` split its batch across them (about 1.9x on the 2-core CI machine,
see BENCHMARKS.md). The device count is read once, when JAX creates its CPU backend, so
launchers call `configure_cpu_devices` before running anything else with JAX.
"""

from __future__ import annotations

import os
import re
from typing import Optional

from absl import logging

_FLAG = "--xla_force_host_platform_device_count"
_CONFIG = "jax_num_cpu_devices"


def _backends_started_error(error: RuntimeError) -> bool:
  """Whether `error` is JAX refusing the CPU device count because its backends already exist."""
  return "backend" in str(error).lower()


def configure_cpu_devices(count: Optional[int] = None) -> int:
  """Exposes `count` CPU devices (default: one per core); returns the count requested.

  Uses JAX's public `jax_num_cpu_devices` option where the installed JAX has it, else XLA's
  `--xla_force_host_platform_device_count` flag (read when the CPU backend starts). Has no effect
  once JAX's backends exist: the option refuses then and a warning is logged (the XLA flag is
  silently too late). On a GPU or TPU machine the accelerator stays the default device and this
  only affects the host platform.
  """
  count = (os.cpu_count() or 1) if count is None else int(count)
  if count < 1:
    raise ValueError(f"configure_cpu_devices: count must be >= 1, got {count}")
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
