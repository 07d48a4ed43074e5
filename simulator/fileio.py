"""Atomic file writes: a reader, or a run resumed after an interruption, never sees half a file.

Every result file of the project (graphs, JSON summaries, plots, checkpoints' side files) is
written through `atomic_open`: the content goes to a temporary file in the destination folder,
which is renamed over the destination only once it is complete (rename is atomic on POSIX).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import Any, Iterator, IO


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w", make_dirs: bool = False) -> Iterator[IO]:
  """Yields a file object whose content replaces `path` when the block exits without error.

  `make_dirs` creates the destination folder; otherwise a missing folder raises. The file gets
  mode 0644 (mkstemp creates 0600; results are meant to be shared).
  """
  folder = os.path.dirname(os.path.abspath(path))
  if make_dirs:
    os.makedirs(folder, exist_ok=True)
  try:
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp_", suffix=os.path.splitext(path)[1])
  except OSError as e:  # named the random temporary file ('/x/.tmp_k2j4.png'), not `path`
    raise OSError(e.errno, e.strerror, path) from e
  try:
    with os.fdopen(fd, mode) as fh:
      yield fh
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


class RepeatedKey(ValueError):
  """A JSON object names one key twice (`unique_keys`)."""


def unique_keys(pairs):
  """`json.load(..., object_pairs_hook=unique_keys)`: the object as a dict, RepeatedKey where
  a key repeats (json keeps the last value silently; in a hand-edited file that hides a typo)."""
  out = {}
  for key, value in pairs:
    if key in out:
      raise RepeatedKey(f"key {key!r} is given twice in one object")
    out[key] = value
  return out


def write_json(path: str, obj: Any, indent: int = 2) -> str:
  """Writes strict JSON (NaN and inf are an error) atomically, creating the folder."""
  with atomic_open(path, "w", make_dirs=True) as fh:
    json.dump(obj, fh, indent=indent, allow_nan=False)
    fh.write("\n")
  return path
