"""Checkpoints of a PPO run (orbax): save the whole TrainState, keep the last k, resume exactly.

A checkpoint holds every array of the `TrainState` (policy params, optimizer state, raw PRNG key
data, update count, running reward means, best action per instance), so a run restored from
step s and trained to step n gives bitwise the same parameters as one trained to n straight
(tests/test_training.py checks it). Orbax writes each step into a temporary folder and renames it
when complete, so an interrupted save never leaves a checkpoint that looks finished; only the
newest `keep` steps are kept. In a multi-process run (`go_jax.distributed`) only process 0
makes a Checkpointer (`loop.open_checkpoints`): its orbax saves and restores alone, and the
restored state reaches the other processes by broadcast, so no shared filesystem is needed.

Restoring needs a template of the state (same tree structure, shapes and dtypes), which the
caller builds with the same config (`Trainer.init`); a checkpoint from another config fails with
a ValueError naming the mismatch rather than deep inside orbax.

`save_params` / `load_params` write the policy parameters alone (flax msgpack, atomically), the
file a fine-tuning run starts from.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import serialization

from simulator import fileio


def _orbax():
  """orbax.checkpoint, imported when a Checkpointer is made: it takes about a third of a second
  to import, and every process that uses the method registry imports this module (fine-tuning
  never writes orbax checkpoints)."""
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  return ocp


class Checkpointer:
  """Saves and restores TrainStates under `directory` (one sub-folder per update count)."""

  def __init__(self, directory: str, keep: int = 3):
    if keep < 1:
      raise ValueError(f"checkpoints to keep must be >= 1, got {keep}")
    self.directory = os.path.abspath(directory)
    # orbax would fail only in its save threads, late, and leave them to hang the exit
    if os.path.lexists(self.directory) and not os.path.isdir(self.directory):
      raise ValueError(f"{self.directory}: the checkpoint folder exists and is not a folder; "
                       "move it away or use another workdir")
    ocp = self._ocp = _orbax()
    self._multi = jax.process_count() > 1
    if self._multi:  # process 0 alone saves (go_jax.distributed: process 0 writes)
      os.makedirs(self.directory, exist_ok=True)  # orbax: no create=True with active_processes
      options = ocp.CheckpointManagerOptions(
          max_to_keep=int(keep), create=False,
          multiprocessing_options=ocp.options.MultiprocessingOptions(
              primary_host=jax.process_index(), active_processes={jax.process_index()}))
    else:
      options = ocp.CheckpointManagerOptions(max_to_keep=int(keep), create=True)
    self._manager = ocp.CheckpointManager(self.directory, options=options)

  def latest_step(self) -> Optional[int]:
    """The newest complete checkpoint's step, or None when there is none."""
    return self._manager.latest_step()

  def all_steps(self):
    return sorted(self._manager.all_steps())

  def save(self, step: int, state) -> None:
    """Saves `state` as checkpoint `step` (asynchronous; `wait` or `close` to finish)."""
    if self._multi:  # host copies: this process's orbax saves alone, outside collectives
      state = jax.device_get(state)
    self._manager.save(int(step), args=self._ocp.args.StandardSave(state))

  def restore(self, template, step: Optional[int] = None):
    """The checkpoint `step` (default: newest) restored into the structure of `template`."""
    step = self.latest_step() if step is None else int(step)
    if step is None:
      raise ValueError(f"no checkpoint in {self.directory}")
    abstract = jax.tree_util.tree_map(
        lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype)
        if not isinstance(x, jax.ShapeDtypeStruct) else x, template)
    try:
      restored = self._manager.restore(step, args=self._ocp.args.StandardRestore(abstract))
    except (ValueError, KeyError, TypeError) as e:
      raise ValueError(f"checkpoint {step} in {self.directory} does not match this run's "
                       f"state (was it written with another config?): {e}") from e
    # Orbax returns arrays committed to a device; fresh states are uncommitted, and jit keys
    # its executables on that, so a restored state would compile the update a second time.
    return jax.tree_util.tree_map(jnp.asarray, jax.device_get(restored))

  def restore_latest(self, template) -> Tuple[Optional[int], Any]:
    """(step, state) of the newest checkpoint that restores, trying older ones when a newer
    one is damaged (a disk filled or a file overwritten after orbax finished it: a later run
    then resumes from the last good one instead of failing); (None, template) when there is
    none. ValueError with the newest checkpoint's error when none restores."""
    steps = sorted(self.all_steps(), reverse=True)
    first_error = None
    for step in steps:
      try:
        return step, self.restore(template, step)
      except Exception as e:  # pylint: disable=broad-except  (orbax/tensorstore raise many)
        first_error = first_error or (step, e)
        logging.warning("checkpoint %d in %s cannot be restored (%s); trying an older one",
                        step, self.directory, str(e).splitlines()[0][:200])
    if first_error is None:
      return None, template
    step, e = first_error
    if isinstance(e, ValueError) and len(steps) == 1:
      raise e
    raise ValueError(f"checkpoint {step} in {self.directory} cannot be restored, nor any older "
                     f"one: {type(e).__name__}: {e}") from e

  def wait(self) -> None:
    """Blocks until pending saves are on disk."""
    self._manager.wait_until_finished()

  def close(self) -> None:
    """Waits for pending saves and closes the manager, also when a save failed (its error is
    raised after the close: a manager left open keeps orbax's threads alive at exit)."""
    try:
      self._manager.wait_until_finished()
    finally:
      self._manager.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


def save_params(path: str, params: Any) -> str:
  """Writes policy parameters (flax msgpack) atomically."""
  data = serialization.to_bytes(jax.device_get(params))
  with fileio.atomic_open(path, "wb", make_dirs=True) as fh:
    fh.write(data)
  return path


def load_params(path: str, template: Any) -> Any:
  """Parameters saved by `save_params`, in the structure and shapes of `template` (e.g.
  `module.init` or its `jax.eval_shape`). ValueError when the file is missing or its tree or
  any leaf's shape differs from the template's (flax restores a tree without checking
  shapes): the message names the file and the first differing leaf."""
  if not os.path.isfile(path):
    raise ValueError(f"no parameter file at {path}")
  with open(path, "rb") as fh:
    data = fh.read()
  try:
    params = serialization.from_bytes(template, data)
  except (ValueError, KeyError, TypeError) as e:
    raise ValueError(f"parameters in {path} cannot be read into this policy (a corrupt "
                     f"file, or another policy config?): {e}") from e
  got = jax.tree_util.tree_flatten_with_path(params)[0]
  want = jax.tree_util.tree_flatten_with_path(template)[0]
  for (where, leaf), (_, ref) in zip(got, want):
    if np.shape(leaf) != tuple(np.shape(ref)):
      raise ValueError(f"parameters in {path} do not fit the policy of its config.json "
                       f"(shapes differ: {jax.tree_util.keystr(where)} is {np.shape(leaf)}, "
                       f"the policy's {tuple(np.shape(ref))})")
  return params
