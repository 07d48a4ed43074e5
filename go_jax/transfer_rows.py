"""The learned rows of GO's transfer evaluation (`go_jax.transfer`): which rows there are
(`ROWS`: policy variant, hint, task), how a row label reads ("go_s2": row "go" pretrained with
seed 2, `parse_row`), the registered learned method a row runs under (`method_of`), and where
its pretrained checkpoint lives or is made (`checkpoint_of`, `pretrain_arg`,
`ensure_pretrained`).

Separate from `go_jax.transfer` because it is a different concern: `transfer` checks a sweep's
config, plans and runs its cells and reports the ratios; this module only names the rows and
finds or pretrains their policies (experiments/configs/pretrain.py builds a row's training
config from `ROWS`). `go_jax.transfer` re-exports every public name here (`transfer.ROWS`,
`transfer.parse_row(label)`, ...), so callers need not know of the split.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from absl import logging

from go_jax import pretrained, training

HINT = "best_list"
# Learned row -> (policy variant of go_jax.policies, hint, task). "go" (the paper's GO with
# go-jax's device-load state, pretrained with imitation then PPO) and "gdp" are the papers'
# systems; "go_hint" is GO with the best list scheduler's placement as a hint (the checkpoint of
# 2026-11-21); the rest are ablations of "go" with one part removed ("no_imitation": the same
# policy pretrained by PPO alone). experiments/configs/pretrain.py builds their configs.
ROWS: Dict[str, Tuple[str, str, str]] = {
    "go": ("go", "", "joint"),
    "gdp": ("gdp", "", "placement"),
    "go_hint": ("go_hint", HINT, "joint"),
    "no_gnn": ("no_gnn", "", "joint"),
    "no_attention": ("no_attention", "", "joint"),
    "no_recurrence": ("no_recurrence", "", "joint"),
    "no_superposition": ("no_superposition", "", "joint"),
    "no_load_state": ("no_load_state", "", "joint"),
    "no_imitation": ("go", "", "joint"),
}
# Rows pretrained without the imitation warm start.
NO_IMITATION = ("go_hint", "no_imitation")
SEED_SUFFIX = "_s"  # "go_s2": row "go" pretrained with seed 2 (the seeds of the ablation table)


def parse_row(label: str) -> Tuple[str, int]:
  """A row label -> (row of ROWS, pretraining seed): "go" -> ("go", 0), "go_s2" -> ("go", 2);
  ValueError for a label that names no row."""
  if label in ROWS:
    return label, 0
  base, sep, seed = label.rpartition(SEED_SUFFIX)
  if sep and base in ROWS and seed.isdigit():
    return base, int(seed)
  raise ValueError(f"unknown learned row {label!r}; rows: {list(ROWS)}, each optionally with "
                   f"a seed suffix ({SEED_SUFFIX}N, e.g. 'go{SEED_SUFFIX}1')")


def is_row(label: Optional[str]) -> bool:
  """Whether a cell label names a learned row (baseline cells have no label)."""
  if not isinstance(label, str):
    return False
  try:
    parse_row(label)
    return True
  except ValueError:
    return False


def pretrain_arg(label: str, cfg: Mapping[str, Any]) -> str:
  """The experiments/configs/pretrain.py argument that pretrains a row label: "go_s1" with
  pretrain_options "updates=800" -> "go,seed=1,updates=800"."""
  row, seed = parse_row(label)
  parts = [row] + ([f"seed={seed}"] if seed else [])
  extra = str(cfg.get("pretrain_options", "") or "").strip(", ")
  return ",".join(parts + ([extra] if extra else []))


def method_of(row: str) -> str:
  """The registered learned method a row's checkpoint runs under: gdp for placement-only
  policies, go_hint for hinted ones, go otherwise."""
  _, hint, task = ROWS[parse_row(row)[0]]
  return "gdp" if task == "placement" else ("go_hint" if hint else "go")


def checkpoint_of(row: str, cfg: Mapping[str, Any]) -> str:
  """Where a learned row's pretrained policy lives: the shipped checkpoint of that name if
  there is one (and `use_shipped`), else `<pretrain_dir>/<row>`."""
  if cfg.get("use_shipped", True) and row in pretrained.available():
    return pretrained.available()[row]
  return os.path.join(cfg["pretrain_dir"], row)


def ensure_pretrained(row: str, cfg: Mapping[str, Any],
                      pretrain_config: Optional[Callable[[str], Any]] = None) -> str:
  """The row's checkpoint folder, pretraining it first (with `pretrain_config(row)`) when it is
  missing and that is allowed."""
  folder = checkpoint_of(row, cfg)
  arg = pretrain_arg(row, cfg)
  if os.path.isfile(os.path.join(folder, pretrained.PARAMS_NAME)):
    shipped = cfg.get("use_shipped", True) and row in pretrained.available()
    if pretrain_config is not None and not shipped:  # a run of pretrain_dir: the one asked for?
      try:
        training.check_resume(folder, pretrain_config(arg))
      except ValueError as e:
        raise ValueError(f"row {row!r}: {folder} was not pretrained with {arg!r} ({e}); move it "
                         "away, or give the pretrain_options it was made with") from None
    return folder
  if not cfg.get("pretrain_missing", True) or pretrain_config is None:
    raise ValueError(f"row {row!r}: no pretrained policy at {folder} (run go-jax-train with "
                     f"experiments/configs/pretrain.py:{arg}, or allow pretrain_missing)")
  logging.info("row %s: pretraining (%s) into %s", row, arg, folder)
  training.train(pretrain_config(arg), folder)
  return folder
