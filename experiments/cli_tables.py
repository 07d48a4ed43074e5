"""The bookkeeping of go-jax's sweep and table launchers (re-exported by experiments.cli):
results files that resume (`load_resumable`, `run_resumable_table`), what a result records
about its machine (`machine_info`), plain JSON values, durations, the device counts of
`nvlink<D>` flags, and the exit status of a sweep whose every cell failed. Also (imported from
here, not from experiments.cli): the result of a cell's worker process (`worker_result`: a
dead worker, a timeout and Ctrl-C are not waited out) and repeated list-flag values
(`refuse_repeats`)."""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import platform
import queue as queue_lib
import re
import signal
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Sequence

from absl import app


def nvlink_counts(values: Sequence[str], flag: str = "devices") -> List[int]:
  """The device counts of a list flag whose count D means the `nvlink<D>` preset; UsageError
  naming the flag for a non-integer or a count without a preset (before any model is built)."""
  from simulator import topology  # pylint: disable=g-import-not-at-top
  try:
    counts = [int(v) for v in values]
  except ValueError as e:
    raise app.UsageError(f"--{flag}={','.join(values)}: not a list of integers") from e
  have = sorted(int(p[len("nvlink"):]) for p in topology.available_presets()
                if re.fullmatch(r"nvlink\d+", p))
  bad = [d for d in counts if d not in have]
  if not counts or bad:
    raise app.UsageError(f"--{flag}={','.join(values)}: no nvlink<D> preset for {bad or 'none'}; "
                         f"counts with one: {', '.join(map(str, have))}")
  return counts


def fail_if_every_cell_failed(rows: Sequence[Mapping[str, Any]], where: str) -> None:
  """Exit status 1 with one line when a sweep's rows are all errors (a bad option value in
  the config, a graph every method rejects): a script that checks the status sees the
  failure, where the tables alone would end in exit 0. Some errors among good rows pass."""
  if rows and all(r.get("error") for r in rows):
    fail(f"every cell failed ({len(rows)} rows, written to {where}); the first: "
         f"{rows[0]['error']}")


def plain(value):
  """ConfigDict / tuple values as plain JSON-able Python (dicts, lists, scalars)."""
  if hasattr(value, "to_dict"):
    value = value.to_dict()
  if isinstance(value, Mapping):
    return {str(k): plain(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [plain(v) for v in value]
  return value


def duration_text(seconds: float) -> str:
  """'42s', '7.5min' or '2.1h' ('?' for an unknown, infinite ETA)."""
  if not math.isfinite(seconds):
    return "?"
  if seconds < 90:
    return f"{seconds:.0f}s"
  if seconds < 5400:
    return f"{seconds / 60:.1f}min"
  return f"{seconds / 3600:.1f}h"


def machine_info() -> Dict[str, Any]:
  """What a result file records about where it was made: platform, CPUs, jax and its
  backend, the load average (1, 5, 15 min) and the UTC date."""
  import jax  # pylint: disable=g-import-not-at-top
  load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
  return {"platform": platform.platform(), "processor": platform.processor() or
          platform.machine(), "cpus": os.cpu_count(), "jax": jax.__version__,
          "backend": jax.default_backend(),
          "load_average": [round(x, 2) for x in load],
          "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def load_resumable(path: str, launcher: str, settings: Mapping[str, Any]) -> Dict[str, Any]:
  """The JSON of an earlier run of `launcher` at `path` ({} if there is none), to resume.

  Raises:
    ValueError: the file is unreadable, another launcher wrote it, or it was made with other
      `settings` (the fields that change every number; the message names the differing ones).
  """
  import json  # pylint: disable=g-import-not-at-top
  if not os.path.isfile(path):
    return {}
  try:
    with open(path, encoding="utf-8") as fh:
      old = json.load(fh)
  except (OSError, json.JSONDecodeError, RecursionError) as e:
    raise ValueError(f"{path}: not a readable results JSON ({e}); move it away to start "
                     "afresh") from e
  if (not isinstance(old, dict) or old.get("launcher") != launcher
      or not isinstance(old.get("cells"), dict)):
    raise ValueError(f"{path}: not written by {launcher}; use another --out")
  prev = old.get("settings", {})
  diff = sorted(k for k in settings if prev.get(k) != settings.get(k))
  if diff:
    raise ValueError(f"{path}: made with other settings (differing: {diff}); use another --out "
                     "or the same settings")
  return old


@contextlib.contextmanager
def started(executor):
  """`with executor:` where a ValueError of its start (a Ray instance too small for one
  cell's request) is a usage error of its own, not one of the config file the launcher's
  body names."""
  try:
    executor.__enter__()
  except ValueError as e:
    raise app.UsageError(one_line(e)) from e
  try:
    yield executor
  finally:
    executor.__exit__(None, None, None)


def run_resumable_table(run_fn: Callable[..., Dict[str, Any]], config, config_file: str,
                        out: str, json_name: str, md_name: str, executor=None) -> None:
  """The body of a resumable table launcher (learned_placers, regal_table): runs
  `run_fn(config, out, log=..., executor=executor)` with progress on stderr (inside the
  executor's `with` block: a Ray connection for the run), turns a ValueError (bad config
  field, unusable results file) into a one-line usage error naming the config file, then
  prints the markdown and what was written."""
  from go_jax import executors  # pylint: disable=g-import-not-at-top
  executor = executor if executor is not None else executors.make("local")
  try:
    with started(executor):
      result = run_fn(config, out, log=lambda s: print(s, file=sys.stderr, flush=True),
                      executor=executor)
  except ValueError as e:
    if getattr(e, "names_the_file", False):  # a results file's fault, not the config's
      raise app.UsageError(one_line(e)) from e
    raise app.UsageError(f"--config={config_file}: {one_line(e)}") from e
  print(result["markdown"])
  print(f"wrote {os.path.join(out, json_name)} ({result['computed']} cells run, "
        f"{result['skipped']} resumed), {os.path.join(out, md_name)}"
        + (f", {result['plot']}" if result.get("plot") else ""))


def refuse_repeats(flag: str, values: Sequence[Any], sep: str = ",") -> None:
  """app.UsageError naming the list flag and its repeated value (each cell would run twice)."""
  seen = set()
  for v in values:
    if v in seen:
      raise app.UsageError(f"--{flag}={sep.join(map(str, values))}: a value is given twice "
                           f"({v})")
    seen.add(v)


def death_text(exitcode) -> str:
  """How a worker process ended, for a cell's error: 'signal 9: killed, perhaps out of
  memory', 'signal 11: Segmentation fault', 'exit status 3'."""
  if exitcode is None:
    return "still running"
  if exitcode < 0:
    num = -exitcode
    if num == signal.SIGKILL:
      return f"signal {num}: killed, perhaps out of memory"
    return f"signal {num}: {signal.strsignal(num) or 'unknown signal'}"
  return f"exit status {exitcode}"


def stop_worker(proc, grace: float = 2.0) -> None:
  """Ends a worker process: SIGTERM, a short wait, then SIGKILL."""
  if proc.is_alive():
    proc.terminate()
    proc.join(grace)
  if proc.is_alive():
    proc.kill()
    proc.join(grace)


def worker_result(proc, queue, timeout: float | None = None, poll: float = 0.5) -> Dict[str, Any]:
  """The dict a started worker process puts on `queue`, waiting at most `timeout` seconds
  (None: no limit) and checking every `poll` seconds that the worker still runs. A worker that
  died without a result (OOM-killed, a segfault) or ran past `timeout` gives {"error": ...}
  saying so (and is ended). On KeyboardInterrupt (Ctrl-C, SIGTERM) the worker is ended at once
  and the interrupt goes on, so that the launcher stops without waiting for the cell."""
  deadline = None if timeout is None else time.monotonic() + timeout
  try:
    while True:
      try:
        out = queue.get(timeout=poll)
        break
      except queue_lib.Empty:
        pass
      if not proc.is_alive():
        try:  # a result put just before the worker exited may still be in the pipe
          out = queue.get(timeout=1.0)
          break
        except queue_lib.Empty:
          out = {"error": f"worker died ({death_text(proc.exitcode)})"}
          break
      if deadline is not None and time.monotonic() > deadline:
        out = {"error": f"timed out after {timeout} s"}
        break
  except BaseException:  # KeyboardInterrupt: do not wait for the cell to finish
    stop_worker(proc)
    raise
  proc.join(5)
  stop_worker(proc)
  return out


# Imported last, as experiments.cli imports this module last: either can then be imported first
# (`import experiments.cli_tables` alone failed on the circle). Only the functions above use them.
from experiments.cli import fail, one_line  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
