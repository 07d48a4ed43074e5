"""Where the profiled graphs live, and how a model name or a path becomes a file.

The PipeDream and Piper profiles ship inside the package (`simulator/data/`, listed in setup.py's
package_data, with their MIT license texts), so an installed go-jax finds them with nothing beside
it. `$GO_JAX_DATA` overrides that folder (same layout: `pipedream/`, `piper/`), e.g. to try
profiles of one's own under the `pipedream:`/`piper:` names.
"""

from __future__ import annotations

import os
from typing import Callable, Dict

DATA_ENV_VAR = "GO_JAX_DATA"

# simulator/data/: the package data folder (simulator/sources/datafiles.py -> simulator/).
PACKAGE_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")


def data_root() -> str:
  """The data folder: $GO_JAX_DATA if set (and non-empty), else the package's own data folder.

  Raises ValueError when $GO_JAX_DATA names no folder, or when the package data is missing
  (a broken install: a wheel or checkout without simulator/data).
  """
  root = os.environ.get(DATA_ENV_VAR)
  if root:
    if not os.path.isdir(root):
      raise ValueError(f"{DATA_ENV_VAR}={root!r} is not a folder")
    return root
  if not os.path.isdir(PACKAGE_DATA):
    raise ValueError(f"package data folder not found at {PACKAGE_DATA!r} (an incomplete install?); "
                     f"reinstall go-jax or set {DATA_ENV_VAR} to a folder holding pipedream/ and "
                     "piper/")
  return PACKAGE_DATA


def resolve(path_or_name: str, models: Callable[[], Dict[str, str]], source: str,
            file_kind: str, suffix: str) -> str:
  """An existing file path as given, or the file of a model name listed by `models()`.

  Raises ValueError for a path (a name with a separator or `suffix`) that does not exist, or
  an unknown model name (listing the known ones).
  """
  if os.path.isfile(path_or_name):
    return path_or_name
  if os.path.isdir(path_or_name):
    raise ValueError(f"{source} {file_kind} '{path_or_name}' is a folder, not a file")
  if os.sep in path_or_name or path_or_name.endswith(suffix):
    raise ValueError(f"{source} {file_kind} '{path_or_name}' does not exist")
  found = models()
  if path_or_name not in found:
    raise ValueError(f"unknown {source} model '{path_or_name}'; available: "
                     f"{', '.join(sorted(found)) or '(none found)'}")
  return found[path_or_name]
