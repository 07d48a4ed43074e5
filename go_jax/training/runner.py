"""A resumable training run in a workdir, shared by the REINFORCE trainers (REGAL, Placeto).

  state, summary, start, speed = runner.run(trainer, state, config, workdir, total=..., ...)

What every such run does on the host around its jitted `trainer.update_chunk`: restore the
newest orbax checkpoint of `workdir` (after checking that the config is the one the run was
started with), write config.json, log metrics (metrics.jsonl, optionally TensorBoard), call
update chunks until `total` updates or past `config.max_seconds` (`loop._run_chunks`, with its
progress line and periodic checkpoints), then write summary.json, the final params.msgpack and
the run's learning curve. With `workdir=None` the run is in memory and writes nothing. The PPO
trainer (`loop.train`) has its own version: it also clones teachers and loads initial
parameters between the restore and the first update.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from go_jax import distributed
from go_jax.training import checkpoint as ckpt_lib
from go_jax.training import logging as train_logging
from go_jax.training import loop
from simulator import fileio


def run(trainer, state, config, workdir: Optional[str], *, total: int, every: int,
        progress: bool, progress_metrics: Sequence[str],
        summarize: Callable[[Any, List[Dict[str, float]]], List[Dict[str, Any]]],
        instance_names: Sequence[str], plot: Optional[Callable[[str], str]] = None
        ) -> Tuple[Any, List[Dict[str, Any]], int, Dict[str, float]]:
  """Trains `state` with `trainer` for `total` updates in `workdir` (None: in memory), resuming
  from its checkpoints; returns (final state, summary rows, update resumed from, speed of the
  last call). `summarize(state, history)` makes the summary rows (history: the per-update
  metrics of this process); `plot(workdir)` draws the learning curve after the run."""
  max_seconds = config.get("max_seconds", None)
  checkpointer, logger, start = None, None, 0
  history: List[Dict[str, float]] = []
  files = workdir if distributed.is_primary() else None  # process 0 writes (go_jax.distributed)
  try:
    if files is not None:
      os.makedirs(workdir, exist_ok=True)
    if workdir is not None:
      checkpointer, state, latest = loop.open_checkpoints(workdir, config, state,
                                                          int(config.keep_checkpoints))
      loop.check_not_past(workdir, latest, total)
      start = 0 if latest is None else int(state.step)
    if files is not None:
      fileio.write_json(os.path.join(workdir, loop.CONFIG_NAME),
                        loop.config_dict(config))
      logger = train_logging.MetricsLogger(workdir, resume_step=start,
                                           tensorboard=bool(config.tensorboard))
    prog = train_logging.Progress(start, total, trainer.placements_per_update,
                                  enabled=progress)
    deadline = None if max_seconds is None else time.perf_counter() + float(max_seconds)
    state, speed = loop._run_chunks(  # pylint: disable=protected-access
        trainer, state, total=total, logger=logger, checkpointer=checkpointer,
        checkpoint_every=every, progress=prog, deadline=deadline, history=history,
        progress_metrics=tuple(progress_metrics))
    if checkpointer is not None:
      checkpointer.wait()
  finally:
    loop.close_outputs(logger, checkpointer)
  summary = summarize(state, history)
  if files is not None:
    fileio.write_json(os.path.join(workdir, loop.SUMMARY_NAME),
                      {"updates": int(state.step), "resumed_from": start,
                       "speed": {k: float(v) for k, v in speed.items() if np.isfinite(v)},
                       "summary": summary, "instances": list(instance_names)})
    ckpt_lib.save_params(os.path.join(workdir, loop.PARAMS_NAME), state.params)
    if plot is not None:
      plot(workdir)
  return state, summary, start, speed
