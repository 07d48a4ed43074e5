"""Pretrained GO policies shipped inside the package (package data, a few hundred KB each).

  config, params = pretrained.load("go_hint")     # the training config and policy parameters
  tuned = training.finetune(config, graph, topology, params, max_seconds=120)

Each checkpoint is a folder `go_jax/pretrained/<name>/` with the `config.json` of the training
run (its `policy` field rebuilds the network) and `params.msgpack` (flax msgpack). They are
produced by a documented command (BENCHMARKS.md, "GO transfer"), e.g.

  go-jax-train --config=experiments/configs/pretrain.py --workdir=runs/pretrain \\
      --export=my_policy --export_dir=policies

which trains and then copies the run's config and final parameters to
`policies/my_policy/` (`export`). `load("policies/my_policy")` reads such a folder; a shipped
name ("go", "go_hint", "go_fusion", ...) always means the shipped checkpoint, even when the working
directory holds a folder of that name (write "./go" for the folder).

`export` never writes into the installed package: shipping a checkpoint is a source-checkout
step (`export(..., export_dir=pretrained.ROOT, allow_package=True)`).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Tuple

import jax
import ml_collections
import numpy as np

from simulator import fileio

ROOT = os.path.dirname(os.path.abspath(__file__))  # the shipped checkpoints
PACKAGE_ROOT = os.path.dirname(ROOT)  # the go_jax package, never an export target by default
CONFIG_NAME, PARAMS_NAME = "config.json", "params.msgpack"
DEFAULT = "go_hint"


def available() -> Dict[str, str]:
  """Name -> folder of every checkpoint shipped inside the package."""
  out = {}
  for name in sorted(os.listdir(ROOT)):
    folder = os.path.join(ROOT, name)
    if os.path.isfile(os.path.join(folder, PARAMS_NAME)):
      out[name] = folder
  return out


def is_path(name_or_path: str) -> bool:
  """Whether a checkpoint argument is clearly a path, not a shipped name: it holds a path
  separator or starts with '.' ("./go", "runs/pretrain", "~/ckpt" after expansion)."""
  seps = {os.sep, "/"} | ({os.altsep} if os.altsep else set())
  return any(c in name_or_path for c in seps) or name_or_path.startswith(".")


def _folder(name_or_path: str) -> str:
  """The folder a checkpoint argument names: a shipped name first (a local folder of the same
  name does not shadow it), else an existing folder."""
  if not isinstance(name_or_path, str) or not name_or_path:
    raise ValueError(f"checkpoint must be a shipped name or a folder, got {name_or_path!r}")
  known = available()
  if name_or_path in known and not is_path(name_or_path):
    return known[name_or_path]
  path = os.path.expanduser(name_or_path)
  if os.path.isdir(path):
    return path
  raise ValueError(f"no pretrained checkpoint {name_or_path!r}: give a shipped name "
                   f"({sorted(known)}) or a folder holding {CONFIG_NAME} and {PARAMS_NAME}")


def load_config(name_or_path: str = DEFAULT) -> ml_collections.ConfigDict:
  """The training config of a checkpoint (a shipped name or a training run's workdir)."""
  path = os.path.join(_folder(name_or_path), CONFIG_NAME)
  if not os.path.isfile(path):
    raise ValueError(f"pretrained checkpoint {name_or_path!r} has no {CONFIG_NAME} ({path})")
  try:
    with open(path, encoding="utf-8") as fh:
      data = json.load(fh)
  except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
    raise ValueError(f"pretrained checkpoint {name_or_path!r}: {path} is not readable JSON "
                     f"({e})") from None
  if not isinstance(data, dict):
    raise ValueError(f"pretrained checkpoint {name_or_path!r}: {path} must hold a JSON "
                     f"object, got {type(data).__name__}")
  return ml_collections.ConfigDict(data)


def _template_inputs(policy_config):
  """(module, features of a 2-op graph on 2 devices) that initialise the policy of a config."""
  # Deferred: go_jax.training imports the methods, which a plain `pretrained.available()`
  # does not need.
  from go_jax import policies  # pylint: disable=g-import-not-at-top
  from simulator import preset  # pylint: disable=g-import-not-at-top
  from simulator.graph import CompGraph  # pylint: disable=g-import-not-at-top
  graph = CompGraph(cost=np.ones(2), senders=[0], receivers=[1], out_bytes=np.ones(2),
                    name="template")
  hint = np.zeros(2, np.int64) if policy_config.get("hint", "") else None
  feats = policies.graph_features(graph, preset("nvlink2"), max_devices=int(
      policy_config["max_devices"]), hint_placement=hint)
  return policies.make_policy(policy_config), feats


def template(policy_config) -> Any:
  """Freshly initialised parameters of the policy a config describes (the structure
  `load_params` restores into), from a 2-op graph on 2 devices."""
  module, feats = _template_inputs(policy_config)
  return jax.jit(module.init)(jax.random.key(0), feats)


# policy config (sorted JSON) -> its parameters' structure: `load` traces the policy's init
# once per config, not on every call (a repeated zero-shot solve spent about half its time
# re-tracing it)
_SHAPES: Dict[str, Any] = {}


def _shapes(policy_config) -> Any:
  """The parameters' structure as jax.ShapeDtypeStruct leaves: `template` without compiling
  or running the initialisation (what `load` restores into); cached per policy config."""
  as_dict = policy_config.to_dict() if hasattr(policy_config, "to_dict") else dict(policy_config)
  key = json.dumps(as_dict, sort_keys=True, default=repr)
  if key not in _SHAPES:
    module, feats = _template_inputs(policy_config)
    _SHAPES[key] = jax.eval_shape(module.init, jax.random.key(0), feats)
  return _SHAPES[key]


def load(name_or_path: str = DEFAULT) -> Tuple[ml_collections.ConfigDict, Any]:
  """(training config, policy parameters) of a shipped checkpoint or a run's workdir."""
  from go_jax.training import checkpoint  # pylint: disable=g-import-not-at-top
  config = load_config(name_or_path)
  path = os.path.join(_folder(name_or_path), PARAMS_NAME)
  shapes = _shapes(config.policy)
  return config, checkpoint.load_params(path, shapes)


def _inside(path: str, folder: str) -> bool:
  path, folder = os.path.realpath(path), os.path.realpath(folder)
  return os.path.commonpath([path, folder]) == folder


def check_export(name: str, export_dir: str, *, allow_package: bool = False) -> str:
  """The folder `export` writes, or the ValueError it would raise for this name and folder
  (a launcher checks before training, not after it)."""
  if not name or not isinstance(name, str) or is_path(name) or name in (".", ".."):
    raise ValueError(f"checkpoint name must be a plain folder name, got {name!r}")
  if not export_dir or not isinstance(export_dir, str):
    raise ValueError(f"export_dir must name a folder, got {export_dir!r}")
  export_dir = os.path.expanduser(export_dir)
  if not allow_package and _inside(export_dir, PACKAGE_ROOT):
    raise ValueError(f"export_dir {export_dir!r} is inside the go_jax package "
                     f"({PACKAGE_ROOT}); export to a folder of your own (e.g. --export_dir="
                     "policies) and load it by path")
  return os.path.join(export_dir, name)


def check_run(workdir: str) -> None:
  """ValueError naming the file unless `workdir`'s config.json and params.msgpack load as the
  checkpoint of its algorithm (PPO: `load`; REGAL / GAS and Placeto: their methods' loaders),
  e.g. a corrupt params.msgpack or one of another policy config."""
  folder = os.path.join(os.path.abspath(os.path.expanduser(workdir)), "")  # never a shipped name
  algorithm = load_config(folder).get("algorithm", "ppo")
  if algorithm == "regal":
    from go_jax.methods import regal  # pylint: disable=g-import-not-at-top
    regal.load_checkpoint("regal", folder)
  elif algorithm == "placeto":
    from go_jax.methods import placeto  # pylint: disable=g-import-not-at-top
    placeto.load_checkpoint(folder)
  else:
    load(folder)


def export(workdir: str, name: str, export_dir: str, *, allow_package: bool = False) -> str:
  """Copies a finished training run's config.json and params.msgpack to
  `<export_dir>/<name>/` (atomically per file); returns the folder, which `load` reads.

  Raises:
    ValueError: a name that is not a plain folder name; a workdir without the run's files, or
      whose files do not load as a checkpoint (`check_run`: a corrupt params.msgpack, one of
      another policy config); an `export_dir` inside the installed go_jax package (unless
      `allow_package`, which ships a checkpoint from a source checkout:
      `export_dir=pretrained.ROOT`).
  """
  folder = check_export(name, export_dir, allow_package=allow_package)
  for fname in (CONFIG_NAME, PARAMS_NAME):
    src = os.path.join(workdir, fname)
    if not os.path.isfile(src):
      raise ValueError(f"{workdir} has no {fname}: export a finished training run")
  check_run(workdir)  # nothing is copied that a load would refuse
  for fname in (CONFIG_NAME, PARAMS_NAME):
    with open(os.path.join(workdir, fname), "rb") as fh:
      data = fh.read()
    with fileio.atomic_open(os.path.join(folder, fname), "wb", make_dirs=True) as fh:
      fh.write(data)
  return folder


__all__ = ["available", "is_path", "load", "load_config", "template", "check_export", "check_run",
           "export", "DEFAULT", "ROOT"]
