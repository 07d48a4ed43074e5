"""The trainers behind go-jax-train, selected by a config's `algorithm` field (default "ppo").

  spec = trainers.get(config)                     # ValueError names an unknown algorithm
  result = spec.train(config, workdir, progress=True)
  for line in spec.report(result): print(line)
  spec.curves(workdir, config, samples=16, progress=True, trained=result)   # a plot's path

A trainer is registered by name as "module:attribute" of a `TrainerSpec` and imported on first
use, so a config of one algorithm never imports the others. `result` has at least `state.step`
and `resumed_from`.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from typing import Any, Callable, Dict, List

DEFAULT = "ppo"


@dataclasses.dataclass(frozen=True)
class TrainerSpec:
  train: Callable[..., Any]  # (config, workdir, progress=) -> result (resumes from workdir)
  report: Callable[[Any], List[str]]  # result -> lines for the launcher to print
  # (workdir, config, samples=, progress=, trained=result or None) -> path of the curve plot
  curves: Callable[..., str]


TRAINERS: Dict[str, str] = {"ppo": "go_jax.training.trainers:PPO",
                            "regal": "go_jax.regal.trainer:SPEC",
                            "placeto": "go_jax.placeto.trainer:SPEC"}


def get(config) -> TrainerSpec:
  """The trainer of `config.algorithm` (absent: PPO)."""
  name = config.get("algorithm", DEFAULT) if hasattr(config, "get") else DEFAULT
  if name not in TRAINERS:
    raise ValueError(f"unknown algorithm {name!r}; available: {sorted(TRAINERS)}")
  module, attr = TRAINERS[name].split(":")
  return getattr(importlib.import_module(module), attr)


def _ppo_train(config, workdir, progress=True):
  from go_jax.training import loop  # pylint: disable=g-import-not-at-top
  return loop.train(config, workdir, progress=progress)


def _ppo_report(result) -> List[str]:
  """One line per instance; one no update drew yet (a run shorter than its instance list) has
  no best ('best None = None x heft' before)."""
  return [f"{row['instance']}: " + (
      "best not drawn yet" if row["best_objective"] is None else
      f"best {row['best_objective']} = {row['best_ratio']} x {row['reference_method']}")
          + f", greedy {row['greedy_objective']}" for row in result.summary]


def _ppo_curves(workdir, config, samples=16, progress=True, trained=None) -> str:
  from go_jax import training  # pylint: disable=g-import-not-at-top
  from go_jax.training import evaluation  # pylint: disable=g-import-not-at-top
  if trained is not None:
    trainer = trained.trainer
  else:
    graphs, topos, names = training.build_instances(config)
    trainer = training.make_train(config, graphs, topos, names=names)
  evaluation.checkpoint_curve(workdir, trainer, samples=samples, progress=progress)
  return os.path.join(os.path.abspath(workdir), evaluation.PLOT_NAME)


def logged_curves(plot: Callable[[str], str], name: str) -> Callable[..., str]:
  """A `TrainerSpec.curves` for a trainer whose curve is drawn from its own metrics log.

  `plot(workdir)` draws it and returns its path; `name` is the file it writes in `workdir`. Only
  process 0 draws (go_jax.distributed); the others return the path process 0 writes.
  """
  def curves(workdir, config, samples=16, progress=True, trained=None) -> str:
    del config, samples, progress, trained  # the log holds everything the plot needs
    from go_jax import distributed  # pylint: disable=g-import-not-at-top
    if not distributed.is_primary():
      return os.path.abspath(os.path.join(workdir, name))
    return os.path.abspath(plot(workdir))
  return curves


PPO = TrainerSpec(train=_ppo_train, report=_ppo_report, curves=_ppo_curves)
