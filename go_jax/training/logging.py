"""Training logs: JSONL metrics, TensorBoard event files and progress lines.

* `metrics.jsonl`: one JSON object per PPO update ({"step": n, "time": unix seconds, metric:
  value, ...}), appended and flushed after every call, so a reader sees whole lines only (a
  crash can lose at most the lines of the last call). On resume from checkpoint step s, lines
  past s (written after the last checkpoint) are dropped first, with an atomic rewrite, so the
  file never holds two values for one update. Readers (`read_jsonl`) skip, with a warning, a
  line that is not a JSON object with an integer step (a torn last line, a damaged line).
* TensorBoard: scalar event files under `<workdir>/tensorboard` written with tensorboardX
  (imported lazily; a clear error says how to install it). On resume the writer is opened with
  `purge_step = s`, which tells TensorBoard to discard events of steps >= s from earlier files.
* `Progress`: a log line per call in tqdm's format: updates done, elapsed and remaining time,
  updates/s, simulated placements/s and the latest metrics.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Dict, List, Mapping, Optional

import numpy as np
import tqdm
from absl import logging as absl_logging

from simulator import fileio

JSONL_NAME = "metrics.jsonl"
TB_DIR = "tensorboard"


def _json_value(x) -> Optional[float]:
  """A metric as strict-JSON float (None for NaN / inf)."""
  x = float(x)
  return x if math.isfinite(x) else None


def _is_step(x) -> bool:
  return isinstance(x, int) and not isinstance(x, bool)


def number(x) -> float:
  """A logged metric as a float: NaN for what is not a number (null, a string)."""
  return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else math.nan


def read_jsonl(path: str) -> List[Dict[str, Any]]:
  """The rows of a metrics file: every line that is a JSON object with an integer "step".
  Other lines are skipped with one warning: a torn last line (an interrupted write), a line
  that is not an object (`[1]`) or whose step is missing or not an integer (`{"step": null}`)."""
  if not os.path.exists(path):
    return []
  rows, skipped = [], 0
  with open(path, encoding="utf-8", errors="replace") as fh:
    for line in fh:
      if not line.strip():
        continue
      try:
        row = json.loads(line)
      except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        row = None
      if isinstance(row, dict) and _is_step(row.get("step")):
        rows.append(row)
      else:
        skipped += 1
  if skipped:
    absl_logging.warning("%s: skipped %d line(s) that are not a metrics row (a JSON object "
                         "with an integer step)", path, skipped)
  return rows


def truncate_jsonl(path: str, last_step: int) -> int:
  """Keeps the lines with step <= last_step (atomic rewrite); returns how many were kept."""
  rows = [r for r in read_jsonl(path) if r["step"] <= last_step]
  if os.path.exists(path):
    with fileio.atomic_open(path, "w") as fh:
      for r in rows:
        fh.write(json.dumps(r, allow_nan=False) + "\n")
  return len(rows)


def _summary_writer(logdir: str, purge_step: Optional[int]):
  try:
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError("TensorBoard logging needs tensorboardX: pip install tensorboardX (or "
                      "set config.tensorboard = False)") from e
  return SummaryWriter(logdir=logdir, purge_step=purge_step)


class MetricsLogger:
  """Writes per-update metrics to `<workdir>/metrics.jsonl` and TensorBoard event files."""

  def __init__(self, workdir: str, *, tensorboard: bool = True, resume_step: int = 0):
    os.makedirs(workdir, exist_ok=True)
    self.jsonl_path = os.path.join(workdir, JSONL_NAME)
    if resume_step > 0:
      truncate_jsonl(self.jsonl_path, resume_step)
    elif os.path.exists(self.jsonl_path):
      os.remove(self.jsonl_path)  # a fresh run: no stale lines from an older one
    self._fh = open(self.jsonl_path, "a")
    self._tb = None
    if tensorboard:
      self._tb = _summary_writer(os.path.join(workdir, TB_DIR),
                                 resume_step if resume_step > 0 else None)

  def write(self, step: int, metrics: Mapping[str, float]) -> None:
    """One update's metrics (scalars)."""
    row = {"step": int(step), "time": time.time()}
    row.update({k: _json_value(v) for k, v in metrics.items()})
    self._fh.write(json.dumps(row, allow_nan=False) + "\n")
    if self._tb is not None:
      for k, v in metrics.items():
        self._tb.add_scalar(f"train/{k}", float(v), int(step))

  def flush(self) -> None:
    self._fh.flush()
    if self._tb is not None:
      self._tb.flush()

  def close(self) -> None:
    self.flush()
    self._fh.close()
    if self._tb is not None:
      self._tb.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


# tqdm's meter without the bar itself (these are log lines, not a redrawn terminal line).
BAR_FORMAT = ("{desc} {n_fmt}/{total_fmt} ({percentage:.0f}%) [{elapsed}<{remaining}, "
              "{rate_fmt}{postfix}]")


class Progress:
  """Throughput and ETA of a run, one absl log line per call in tqdm's format.

  The line is `tqdm.format_meter`'s without the bar ("update 40/100 (40%) [00:12<00:18,
  3.30update/s, ...]"), with the placements/s and the given metrics as its postfix. The first
  call of a process includes compilation, so the rate behind the ETA is that of the calls after
  it once there are any."""

  def __init__(self, start_step: int, total: int, placements_per_update: int,
               enabled: bool = True):
    self.total = int(total)
    self.start = int(start_step)
    self.per_update = int(placements_per_update)
    self.enabled = enabled
    self.t_start = self.t_last = time.perf_counter()
    self.step_last = int(start_step)
    self.calls, self.steady_updates, self.steady_seconds = 0, 0, 0.0

  def update(self, step: int, summary: Mapping[str, float]) -> Dict[str, float]:
    """Records that `step` updates are done; returns (and logs) the last call's speed."""
    now = time.perf_counter()
    done, seconds = step - self.step_last, max(now - self.t_last, 1e-9)
    self.t_last, self.step_last = now, step
    self.calls += 1
    if self.calls > 1:
      self.steady_updates += done
      self.steady_seconds += seconds
    rate = done / seconds
    steady = self.steady_updates / self.steady_seconds if self.steady_updates else rate
    eta = (self.total - step) / steady if steady > 0 else float("inf")
    out = {"updates_per_s": rate, "placements_per_s": rate * self.per_update, "eta_s": eta}
    if self.enabled:
      absl_logging.info("%s", self.line(step, steady, summary))
    return out

  def line(self, step: int, rate: float, summary: Mapping[str, float]) -> str:
    """tqdm's meter for `step` of `total` at `rate` updates/s (behind the ETA), with the
    placements/s and `summary` as postfix."""
    postfix = ", ".join([f"{rate * self.per_update:.4g} placements/s"] +
                        [f"{k}={v:.4g}" for k, v in summary.items()])
    return tqdm.tqdm.format_meter(step, self.total, time.perf_counter() - self.t_start,
                                  prefix="update", unit="update",
                                  rate=rate if rate > 0 else None, postfix=postfix,
                                  initial=self.start, bar_format=BAR_FORMAT)


def plot_metric_curves(workdir: str, series, ylabel: str, path: str, *, scale: float = 1.0,
                       zero_line: bool = False, window: int = 10) -> str:
  """A learning-curve PNG from `workdir`'s metrics.jsonl: per (metric, label) of `series`, the
  raw values (faint) and their moving average over `window` updates, times `scale`, against
  the update. ValueError when the run logged nothing."""
  import matplotlib  # pylint: disable=g-import-not-at-top  (plots only)
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  rows = read_jsonl(os.path.join(workdir, JSONL_NAME))
  if not rows:
    raise ValueError(f"{workdir} has no {JSONL_NAME} to plot")
  steps = np.asarray([r["step"] for r in rows])
  fig, ax = plt.subplots(figsize=(6, 4))
  for name, label in series:
    y = np.asarray([number(r.get(name)) for r in rows], np.float64)
    w = min(window, len(y))
    smooth = np.convolve(np.nan_to_num(y), np.ones(w) / w, mode="valid")
    ax.plot(steps, scale * y, alpha=0.25)
    ax.plot(steps[w - 1:], scale * smooth, label=label)
  if zero_line:
    ax.axhline(0.0, color="k", lw=0.5)
  ax.set_xlabel("update")
  ax.set_ylabel(ylabel)
  ax.set_title(os.path.basename(os.path.abspath(workdir)))
  ax.legend()
  from go_jax import plotting  # pylint: disable=g-import-not-at-top
  plotting.literal_text(fig)  # a '$' in the workdir's name is not TeX
  fig.tight_layout()
  with fileio.atomic_open(path, "wb") as fh:
    fig.savefig(fh, format="png", dpi=100)
  plt.close(fig)
  return path
