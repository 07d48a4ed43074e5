"""Pretrained GO policies shipped inside the package (package data, a few hundred KB each).

  config, params = pretrained.load("go_hint")     # the training config and policy parameters
  tuned = training.finetune(config, graph, topology, params, max_seconds=120)

Each checkpoint is a folder `go_jax/pretrained/<name>/` with the `config.json` of the training
run (its `policy` field rebuilds the network) and `params.msgpack` (flax msgpack). They are
produced by a documented command (BENCHMARKS.md, "GO transfer"), e.g.

  go-jax-train --config=experiments/configs/pretrain.py --workdir=runs/pretrain \\
      --export=go_hint

which trains and then copies the run's config and final parameters here (`export`).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Tuple

import jax
import ml_collections
import numpy as np

from simulator import fileio

ROOT = os.path.dirname(os.path.abspath(__file__))
CONFIG_NAME, PARAMS_NAME = "config.json", "params.msgpack"
DEFAULT = "go_hint"


def available() -> Dict[str, str]:
  """Name -> folder of every shipped (or exported) checkpoint."""
  out = {}
  for name in sorted(os.listdir(ROOT)):
    folder = os.path.join(ROOT, name)
    if os.path.isfile(os.path.join(folder, PARAMS_NAME)):
      out[name] = folder
  return out


def _folder(name_or_path: str) -> str:
  if os.path.isdir(name_or_path):
    return name_or_path
  known = available()
  if name_or_path not in known:
    raise ValueError(f"no pretrained checkpoint {name_or_path!r}: give a shipped name "
                     f"({sorted(known)}) or a folder holding {CONFIG_NAME} and {PARAMS_NAME}")
  return known[name_or_path]


def load_config(name_or_path: str = DEFAULT) -> ml_collections.ConfigDict:
  """The training config of a checkpoint (a shipped name or a training run's workdir)."""
  path = os.path.join(_folder(name_or_path), CONFIG_NAME)
  if not os.path.isfile(path):
    raise ValueError(f"pretrained checkpoint {name_or_path!r} has no {CONFIG_NAME} ({path})")
  with open(path) as fh:
    return ml_collections.ConfigDict(json.load(fh))


def template(policy_config) -> Any:
  """Freshly initialised parameters of the policy a config describes (the structure
  `load_params` restores into), from a 2-op graph on 2 devices."""
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
  module = policies.make_policy(policy_config)
  return jax.jit(module.init)(jax.random.key(0), feats)


def load(name_or_path: str = DEFAULT) -> Tuple[ml_collections.ConfigDict, Any]:
  """(training config, policy parameters) of a shipped checkpoint or a run's workdir."""
  from go_jax.training import checkpoint  # pylint: disable=g-import-not-at-top
  config = load_config(name_or_path)
  params = checkpoint.load_params(os.path.join(_folder(name_or_path), PARAMS_NAME),
                                  template(config.policy))
  return config, params


def export(workdir: str, name: str, root: str = ROOT) -> str:
  """Copies a finished training run's config.json and params.msgpack to `root/<name>/`
  (atomically per file); returns the folder."""
  if not name or os.sep in name or name.startswith("."):
    raise ValueError(f"checkpoint name must be a plain folder name, got {name!r}")
  folder = os.path.join(root, name)
  for fname in (CONFIG_NAME, PARAMS_NAME):
    src = os.path.join(workdir, fname)
    if not os.path.isfile(src):
      raise ValueError(f"{workdir} has no {fname}: export a finished training run")
    with open(src, "rb") as fh:
      data = fh.read()
    with fileio.atomic_open(os.path.join(folder, fname), "wb", make_dirs=True) as fh:
      fh.write(data)
  return folder


__all__ = ["available", "load", "load_config", "template", "export", "DEFAULT", "ROOT"]
