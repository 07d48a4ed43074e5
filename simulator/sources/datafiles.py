"""Where the shared profiled graphs live, and how a model name or a path becomes a file."""

from __future__ import annotations

import os
from typing import Callable, Dict

DATA_ENV_VAR = "GO_JAX_DATA"


def data_root() -> str:
  """The shared data folder: $GO_JAX_DATA if set, else <repo root>/../shared/data."""
  root = os.environ.get(DATA_ENV_VAR)
  if root:
    if not os.path.isdir(root):
      raise ValueError(f"{DATA_ENV_VAR}={root!r} is not a folder")
    return root
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  root = os.path.normpath(os.path.join(repo, os.pardir, "shared", "data"))
  if not os.path.isdir(root):
    raise ValueError(f"shared data folder not found at {root!r}; set {DATA_ENV_VAR} to the "
                     f"folder holding pipedream/ and piper/")
  return root


def resolve(path_or_name: str, models: Callable[[], Dict[str, str]], source: str,
            file_kind: str, suffix: str) -> str:
  """An existing file path as given, or the file of a model name listed by `models()`.

  Raises ValueError for a path (a name with a separator or `suffix`) that does not exist, or
  an unknown model name (listing the known ones).
  """
  if os.path.isfile(path_or_name):
    return path_or_name
  if os.sep in path_or_name or path_or_name.endswith(suffix):
    raise ValueError(f"{source} {file_kind} '{path_or_name}' does not exist")
  found = models()
  if path_or_name not in found:
    raise ValueError(f"unknown {source} model '{path_or_name}'; available: "
                     f"{', '.join(sorted(found)) or '(none found)'}")
  return found[path_or_name]
