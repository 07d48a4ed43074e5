"""Zoo graph source: `zoo:<model>[,size=...][,stage=pre|post][,device=...][,<knob>=<value>...]`.

Builds the training-step graph of a `simulator.zoo` model with the JAX/HLO front end and fills
its `cost` with the roofline cost model of a device spec (`simulator.costmodel`), composed by
`simulator.sources.jax_program.from_jax` as for the `jax:` source, so the graph is ready to
simulate. Note that a "post" graph is the program as XLA optimizes it for the LOCAL
backend (CPU fusion decisions, here) even when its costs are those of another device.

The cost model reads per-instruction detail of the HLO module (op classes of fusions), so it is
applied to the front end's HloGraph as it is built. Building a large model (the unrolled 8-layer
GNMT has > 50k ops) takes tens of seconds, so the costed graph is cached on disk as .npz (under
$GO_JAX_CACHE, default ~/.cache/go_jax/zoo), keyed by the model, size, stage, knobs, device,
calibration file content, the JAX version and the source text of the front end, the zoo and
the cost model, so any change to them rebuilds. Pass cache=false to bypass it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from typing import Optional

from simulator.graph import CompGraph

CACHE_ENV_VAR = "GO_JAX_CACHE"


def parse_knob(text: str):
  """A knob value from spec text: a Python literal (int, float, tuple, bool) or a bare string."""
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def cache_dir() -> str:
  root = os.environ.get(CACHE_ENV_VAR) or os.path.join(os.path.expanduser("~"), ".cache",
                                                       "go_jax")
  return os.path.join(root, "zoo")


def _source_digest() -> str:
  """Digest of the code that decides a zoo graph: front end, zoo and cost model packages, and
  the module composing them (`jax_program`)."""
  import jax
  from simulator import costmodel, frontends, zoo
  from simulator.sources import jax_program
  h = hashlib.sha256(jax.__version__.encode())
  files = [os.path.join(os.path.dirname(pkg.__file__), fname)
           for pkg in (frontends, zoo, costmodel)
           for fname in sorted(os.listdir(os.path.dirname(pkg.__file__)))
           if fname.endswith(".py")]
  for path in files + [jax_program.__file__]:
    with open(path, "rb") as f:
      h.update(os.path.basename(path).encode() + f.read())
  return h.hexdigest()[:16]


def check_zoo(model: str, size: str = "default", stage: str = "pre", device: str = "v100",
              calibration: Optional[str] = None, cache: bool = True, **knobs) -> None:
  """What `load_zoo` checks before its long build (model, size, knobs, stage, device,
  calibration file), without building (`simulator.sources.check_spec`).

  Raises:
    ValueError: unknown model, size, stage, knob, device or a bad calibration file.
  """
  del cache
  from simulator import costmodel, zoo
  from simulator.sources import jax_program
  if stage not in jax_program.STAGES:
    raise ValueError(f"stage must be {' or '.join(map(repr, jax_program.STAGES))}, got "
                     f"{stage!r}")
  costmodel.device_spec(device, costmodel.Calibration.load(calibration) if calibration
                        else None)
  zoo.check(model, size, **knobs)


def load_zoo(model: str, size: str = "default", stage: str = "pre", device: str = "v100",
             calibration: Optional[str] = None, cache: bool = True, **knobs) -> CompGraph:
  """The costed CompGraph of zoo model `model`'s training step (see the module docstring).

  Raises:
    ValueError: unknown model, size, stage, knob, device or a bad calibration file.
  """
  from simulator import costmodel, zoo
  from simulator.sources import jax_program
  calib = costmodel.Calibration.load(calibration) if calibration else None
  spec = costmodel.device_spec(device, calib)  # fail fast, before a long build
  calib_digest = ""
  if calibration:
    with open(calibration, "rb") as f:
      calib_digest = hashlib.sha256(f.read()).hexdigest()
  key = json.dumps([model, size, stage, sorted((k, repr(v)) for k, v in knobs.items()), device,
                    calib_digest, _source_digest()])
  path = os.path.join(cache_dir(), hashlib.sha256(key.encode()).hexdigest()[:24] + ".npz")
  graph = None
  if cache and os.path.isfile(path):
    try:
      graph = CompGraph.load(path)
    except ValueError:
      graph = None  # a corrupt cache entry is rebuilt
  if graph is None:
    z = zoo.build(model, size, **knobs)
    graph = jax_program.from_jax(z.step, *z.abstract_args(), stage=stage,
                                 name=f"zoo:{model}/{size}/{stage}/{device}", device_spec=spec,
                                 calibration=calib)
    if cache:
      os.makedirs(os.path.dirname(path), exist_ok=True)
      graph.save(path)
  return graph
