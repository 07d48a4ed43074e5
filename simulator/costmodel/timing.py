"""How the calibration's programs are compiled and timed (`simulator.costmodel.microbench`'s
programs, and the zoo steps of the validation experiment).

Timing: every program is compiled once (`jit(f).lower(...).compile()`: the same executable is
timed and its post-optimisation HLO is what the cost model sees), called twice to warm up, then
measured in rounds: each round times every program once (one call + block_until_ready, or the
mean of k such calls for programs under `min_sample_s`), and a program's time is the median over
its rounds. Interleaving the programs makes every program see the same machine load (other
processes on a shared machine) instead of the load of the moment it happened to run.

A compiled microbenchmark reads cold operands (`cold_copies`), and `fresh_bytes` says how many
bytes of its buffers the host allocator maps afresh (and page-faults) on every call.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import numpy as np

if TYPE_CHECKING:  # annotations only: microbench imports this module
  from simulator.costmodel.microbench import Program

# A timing sample repeats a program until it lasts this long, so that a microbenchmark spans many
# scheduler time slices, as a training step does: on a loaded machine a 100 us program that fits
# in one slice runs at full speed, a 100 ms step shares the cores, and a calibration taken from
# single short calls would not describe the steps it is validated on.
MIN_SAMPLE_S = 0.05
MAX_INNER = 2000  # calls per sample at most


# glibc serves allocations of at least this size with a fresh mmap on every call (its dynamic
# mmap threshold stops growing at 32 MiB on 64-bit hosts), so their pages fault on first touch.
MMAP_THRESHOLD = 32 * 2**20


def executable_platform(exe) -> str:
  """The platform ("cpu", "gpu", ...) an executable runs on: that of its arguments' devices,
  else JAX's default backend (an executable without arguments)."""
  import jax
  try:
    for s in jax.tree_util.tree_leaves(exe.input_shardings):
      for d in s.device_set:
        return d.platform
  except Exception:  # pylint: disable=broad-except  (executables without shardings)
    pass
  return jax.default_backend()


def fresh_bytes(exe, hlo_text: str) -> float:
  """Bytes an XLA:CPU executable's call maps afresh: its temp buffer and each output buffer of
  at least MMAP_THRESHOLD bytes (smaller ones come back from the allocator's free lists).
  0 on other platforms: a GPU's (BFC) allocator keeps its device memory and hands it out again
  without faulting pages in."""
  if executable_platform(exe) != "cpu":
    return 0.0
  from simulator.frontends.hlo import parse_hlo_module
  from simulator.costmodel.opclass import strip_comments
  total = 0.0
  try:
    temp = float(exe.memory_analysis().temp_size_in_bytes)
  except Exception:  # backends without a memory analysis
    temp = 0.0
  if temp >= MMAP_THRESHOLD:
    total += temp
  comps, entry = parse_hlo_module(strip_comments(hlo_text))
  root = next((i for i in comps[entry] if i.is_root), None)
  if root is not None:
    from simulator.frontends.hlo_parse import leaf_bytes
    for dt, dims in root.shape:
      nbytes = leaf_bytes(dt, dims)
      total += nbytes if nbytes >= MMAP_THRESHOLD else 0.0
  return total


@dataclasses.dataclass(frozen=True)
class Compiled:
  program: Program
  call: Callable    # () -> result of one execution (blocked on by the timer)
  hlo_text: str     # post-optimisation HLO of exactly the executable that is timed
  fresh_bytes: float = 0.0  # bytes mapped afresh per call (see `fresh_bytes`)


def compile_program(p: Program, device=None) -> Compiled:
  """Compiles `p` (its arguments placed on `device`) and warms it up."""
  import jax
  args = jax.device_put(p.args, device) if device is not None else p.args
  try:
    exe = jax.jit(p.fn).lower(*args).compile()
  except Exception as e:  # tracing / compilation errors of any type
    raise ValueError(f"microbenchmark {p.name} failed to compile: {type(e).__name__}: {e}") from e
  copies = [args] + [jax.tree.map(lambda a: a.copy() if hasattr(a, "copy") else a, args)
                     for _ in range(cold_copies(args) - 1)]
  state = {"k": 0}

  def call():  # rotates over the copies: each call reads operands the last calls did not
    state["k"] = (state["k"] + 1) % len(copies)
    return exe(*copies[state["k"]])

  for _ in range(2):
    jax.block_until_ready(call())
  text = exe.as_text()
  return Compiled(p, call, text, fresh_bytes(exe, text))


# Operands are read cold: in a training step most of an op's operands (parameters, activations
# saved for the backward pass, optimizer state) were last touched long before, out of the
# caches, while a program timed in a loop on the same arguments finds them in L2 / L3 (up to
# 1.5x faster on the 2-core EPYC this was developed on). A program is given enough copies of
# its arguments, used in turn, that they do not fit in COLD_BYTES of cache together.
COLD_BYTES = 48 * 2**20
MAX_COPIES = 16


def cold_copies(args) -> int:
  """How many copies of `args` to rotate over so that their total exceeds COLD_BYTES."""
  import jax
  nbytes = sum(getattr(a, "nbytes", 0) for a in jax.tree.leaves(args))
  if COLD_BYTES <= 0 or nbytes <= 0:
    return 1
  return int(min(MAX_COPIES, max(1, math.ceil(COLD_BYTES / nbytes))))


def check_timing(repeats, min_sample_s) -> None:
  """ValueError unless `repeats` is an int >= 1 and `min_sample_s` a finite number >= 0 (callers
  check before compiling their programs, so that a bad value fails at once, not minutes on)."""
  if isinstance(repeats, bool) or not isinstance(repeats, (int, np.integer)) or repeats < 1:
    raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
  if (isinstance(min_sample_s, bool) or not isinstance(min_sample_s, (int, float, np.floating))
      or not math.isfinite(min_sample_s) or min_sample_s < 0):
    raise ValueError(f"min_sample_s must be a finite number of seconds >= 0, got "
                     f"{min_sample_s!r}")


def time_calls(calls: Sequence[Callable], repeats: int, min_sample_s: float = MIN_SAMPLE_S,
               progress: Optional[Callable[[int, int], None]] = None) -> np.ndarray:
  """(len(calls),) median seconds per call over `repeats` interleaved rounds (see module doc)."""
  import jax
  check_timing(repeats, min_sample_s)
  inner = []
  for call in calls:  # calls per sample: enough for min_sample_s, 1 for long programs
    fastest = np.inf
    for _ in range(3):
      t0 = time.perf_counter()
      jax.block_until_ready(call())
      fastest = min(fastest, time.perf_counter() - t0)
    inner.append(max(1, min(MAX_INNER, math.ceil(min_sample_s / max(fastest, 1e-7)))))
  samples = np.zeros((repeats, len(calls)))
  for r in range(repeats):
    for k, call in enumerate(calls):
      t0 = time.perf_counter()
      for _ in range(inner[k]):
        jax.block_until_ready(call())
      samples[r, k] = (time.perf_counter() - t0) / inner[k]
    if progress is not None:
      progress(r + 1, repeats)
  return np.median(samples, axis=0)
