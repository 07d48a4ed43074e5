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


def configure_cpu_devices(count: Optional[int] = None) -> int:
  """Exposes `count` CPU devices (default: one per core); returns the count requested.

  Has no effect (and logs a warning) once JAX's backends exist. On a GPU or TPU machine the
  accelerator stays the default device and this only affects the host platform.
  """
  count = (os.cpu_count() or 1) if count is None else int(count)
  if count < 1:
    raise ValueError(f"configure_cpu_devices: count must be >= 1, got {count}")
  import jax._src.xla_bridge as xla_bridge  # pylint: disable=g-import-not-at-top
  if xla_bridge.backends_are_initialized():
    logging.warning("configure_cpu_devices(%d) ignored: JAX backends are already initialized",
                    count)
    return count
  flags = re.sub(rf"{_FLAG}=\d+", "", os.environ.get("XLA_FLAGS", "")).strip()
  os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={count}".strip()
  return count
