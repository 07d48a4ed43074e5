r"""Trains a GO-style policy with PPO, or REGAL / GAS with REINFORCE (go-jax-train); resumes
from --workdir's checkpoint.

A thin launcher over the trainer that the config's `algorithm` field selects
(go_jax/training/trainers.py: "ppo", the default, is `go_jax.training.train`; "regal" is
go_jax/regal/trainer.py, experiments/configs/regal.py). For PPO the config (an ml_collections file, see
experiments/configs/train_base.py) names the graphs, topologies, task, objective, PPO settings
and policy variant. Writes to --workdir: checkpoints/ (orbax, newest kept), metrics.jsonl (one
line per update), tensorboard/ (event files), config.json, summary.json (best and greedy action
per instance, re-simulated), params.msgpack (final policy parameters) and, unless
--curves=off, the learning curves (eval.jsonl, learning_curves.png: greedy and best-of-K ratio
to the reference per graph family at every kept checkpoint). Rerunning the same command after an
interruption continues from the newest checkpoint.

  python -m experiments.train                                   # tiny CI config
  python -m experiments.train --config=experiments/configs/train_go.py --workdir=runs/go
  python -m experiments.train --config=experiments/configs/train_ablation.py:no_gnn \
      --workdir=runs/no_gnn --config.updates=500
  go-jax-train --config=experiments/configs/pretrain.py:go --workdir=runs/pretrain/go \
      --export=go --export_dir=runs/pretrained     # then --checkpoint=runs/pretrained/go
  go-jax-train --config=experiments/configs/pretrain.py:go --workdir=runs/pretrain/go \
      --curves=only                                # learning curves of a finished run
  go-jax-train --config=... --workdir=runs/go --coordinator_address=host0:1234 \
      --num_processes=2 --process_id=i             # i = 0, 1: one run over 2 processes

With --coordinator_address (go_jax.distributed, docs/cluster.md) process 0 alone writes
--workdir (checkpoints included) and resumes from it; the others train alike, writing nothing.
"""

from __future__ import annotations

import os
from typing import Sequence

from absl import app, flags

from go_jax import distributed, pretrained
from go_jax.training import loop, trainers
from experiments import cli

FLAGS = flags.FLAGS
DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs",
                              "train_test.py")

_CONFIG = cli.define_config_file(
    "config", default=DEFAULT_CONFIG,
    help_string="Training config file (experiments/configs/train_*.py); fields can be "
    "overridden with --config.FIELD=VALUE.")
flags.DEFINE_string("workdir", "runs/train", "Folder for checkpoints, logs and the summary; "
                    "a checkpoint there is resumed.")
flags.DEFINE_string("export", None, "After training, copy the run's config and final "
                    "parameters to --export_dir/NAME, a checkpoint folder that go-jax-place "
                    "--checkpoint=PATH and methods.solve(..., checkpoint=PATH) load.")
flags.DEFINE_string("export_dir", "runs/pretrained", "Folder --export writes NAME/ into (never "
                    "the installed package).")
flags.DEFINE_bool("export_to_package", False, "Developers: allow --export_dir to be the "
                  "package's go_jax/pretrained of a source checkout (shipping a checkpoint).")
flags.DEFINE_bool("progress", True, "Log a progress line (updates/s, placements/s, ETA) per "
                  "jitted call.")
flags.DEFINE_enum("curves", "after", ["after", "only", "off"], "Learning curves: evaluate "
                  "the parameters after imitation and every kept checkpoint on the training "
                  "instances (greedy and best of --curve_samples, per graph family) and write "
                  "eval.jsonl and learning_curves.png to --workdir: after training, only (a "
                  "finished run, no training), or off.")
flags.DEFINE_integer("curve_samples", 16, "K of the learning curves' best-of-K.",
                     lower_bound=1)
cli.define_distributed_flags()


def _check_out() -> None:
  """--workdir (and --export_dir) can be written (process 0's)."""
  cli.check_out(FLAGS.workdir, flag="workdir")
  try:  # a file where the checkpoints go stops now, not in orbax's save threads
    loop.check_checkpoint_dir(FLAGS.workdir)
  except ValueError as e:
    raise app.UsageError(f"--workdir={FLAGS.workdir}: {e}") from e
  if FLAGS.export:
    try:  # a bad name or folder stops now, not after the training it would export
      pretrained.check_export(FLAGS.export, FLAGS.export_dir,
                              allow_package=FLAGS.export_to_package)
    except ValueError as e:
      raise app.UsageError(f"--export={FLAGS.export}: {e}") from e
    cli.check_out(FLAGS.export_dir, flag="export_dir")


def _attributed(message: str, workdir: str, config_file: str) -> str:
  """The one line of a ValueError, attributed to what it is about: as is when it starts with a
  file of --workdir (which it names), with --workdir= when it names the workdir elsewhere (a
  checkpoint of its checkpoints/ folder that does not restore, a run of another config), else
  with --config= (the config's own fields)."""
  roots = {workdir, os.path.abspath(workdir)}
  if message.startswith(tuple(os.path.join(r, "") for r in roots) + tuple(
      f"{r}:" for r in roots)):
    return message
  if any(f"{r}{sep}" in message or f"workdir {r} " in message
         for r in roots for sep in (os.sep, ":")):
    return f"--workdir={workdir}: {message}"
  return f"--config={config_file}: {message}"


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  cli.initialize_distributed()  # before anything starts JAX's backends
  primary = distributed.is_primary()  # process 0 writes; the others train alike, silently
  distributed.from_primary(_check_out)  # process 0's check stops every process
  config = _CONFIG.value
  progress = FLAGS.progress and primary
  try:
    spec = trainers.get(config)  # config.algorithm: PPO (default) or another trainer
    result = None
    if FLAGS.curves != "only":
      result = spec.train(config, FLAGS.workdir, progress=progress)
      if primary:
        for line in spec.report(result):
          print(line)
        print(f"{int(result.state.step)} updates (resumed from {result.resumed_from}); wrote "
              f"{os.path.abspath(FLAGS.workdir)}")
    if FLAGS.curves != "off":
      path = spec.curves(FLAGS.workdir, config, samples=FLAGS.curve_samples,
                         progress=progress, trained=result)
      if primary:
        print(f"wrote {path}")
  except ValueError as e:
    raise app.UsageError(_attributed(str(e), FLAGS.workdir,
                                     FLAGS["config"].config_filename)) from e
  if FLAGS.export and primary:
    folder = pretrained.export(FLAGS.workdir, FLAGS.export, FLAGS.export_dir,
                               allow_package=FLAGS.export_to_package)
    print(f"exported the policy to {folder}")


def run():
  """Console-script entry point (`go-jax-train`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
