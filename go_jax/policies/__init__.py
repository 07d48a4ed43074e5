"""Policy networks for the learned graph optimizers (GO, GDP and their ablations).

  config = variant_config("go")            # or default_config(), then override fields
  policy = make_policy(config)             # a flax.linen Module
  params = policy.init(key, feats)         # feats: ONE graph's GraphFeatures (features.py)
  out = policy.apply(params, feats)        # PolicyOutput; vmap apply over a batch of graphs

`POLICIES` maps a policy kind (config.policy) to its module class; the named variants (the
paper's "go" with go-jax's load state, "gdp", the ablations "no_gnn", "no_attention",
"no_recurrence", "no_superposition", "no_load_state", and "go_hint") are configurations of the
one GO module, listed in `VARIANTS`. A config's `hint` (a method name of
go_jax.training.hints) turns on the module's `use_hint`; features then carry that method's
placement.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict

import flax.linen as nn
import ml_collections

from go_jax.policies.attention import IMPLEMENTATIONS, RELATIVE
from go_jax.policies.features import batch_features, check_decode_order, graph_features
from go_jax.policies.go import GOPolicy
from go_jax.policies.types import GraphFeatures, PolicyOutput

POLICIES: Dict[str, Callable[..., nn.Module]] = {"go": GOPolicy}

# Variant name -> overrides of default_config().
VARIANTS: Dict[str, Dict[str, object]] = {
    "go": {},
    # placement only, no superposition (GDP, Zhou et al. 2019); with the load state, like "go"
    "gdp": {"superposition": False, "priority_head": False},
    "no_gnn": {"use_gnn": False},
    "no_attention": {"use_attention": False},
    "no_recurrence": {"recurrence": False},
    "no_superposition": {"superposition": False},
    "no_load_state": {"load_state": False},
    # GO plus a fast baseline's placement as a hint and without the load state (the shipped
    # checkpoint of 2026-11-21; policies/go.py): "go" vs "go_hint" is the hint's row
    "go_hint": {"hint": "best_list", "load_state": False},
    # GO with a fuse request per op: the fusion tasks ("fusion", "joint3"; design.md 4.1)
    "go_fusion": {"fusion_head": True},
}

# config keys that are not module fields (decode_order: how the features are built, features.py)
_META_KEYS = ("policy", "variant", "hint", "decode_order")


def default_config() -> ml_collections.ConfigDict:
  """GO's full policy. Every field but `policy` and `variant` is a GOPolicy attribute."""
  c = ml_collections.ConfigDict()
  c.policy = "go"  # key of POLICIES
  c.variant = "go"  # informational: the VARIANTS entry this config came from
  c.hidden = 128  # width of every node / device state
  c.gnn_layers = 3  # GraphSAGE depth
  c.attention_layers = 2
  c.heads = 4
  c.segment_len = 128  # nodes per attention segment (S)
  c.recurrence = True  # segments attend to the previous segment's states
  c.superposition = True  # graph-conditioned FiLM of each attention layer's input
  c.superposition_stop_gradient = False
  c.use_gnn = True
  c.use_attention = True
  c.priority_head = True  # False: priority logits are zeros (GDP places only)
  c.priority_levels = 8  # L
  c.max_devices = 8  # Dmax
  c.device_id_embedding = True  # learned embedding per device slot
  c.dropout = 0.0
  c.relative = "xl"  # relative positions: "xl" (Transformer-XL u/v) or "bias" (cheaper)
  c.attention_impl = "scan"  # "scan" (faster on CPU) or "parallel": the same outputs
  c.hint = ""  # baseline whose placement the policy sees ("": none; go_jax.training.hints)
  c.hint_init = 5.0  # initial logit bonus of the hint (GOPolicy.hint_init)
  c.load_state = True  # placement sees the device load committed so far (policies/load.py)
  c.load_block = 8  # nodes per block of the load state's scan
  c.load_guard = True  # memory barrier on devices the estimated peak overflows (load.py)
  c.load_margin = 0.1  # memory share the greedy decode keeps free (load.py)
  c.load_greedy_block = 0  # nodes per block of the greedy decode (0: load_block; 1: node by node)
  c.load_exact = True  # colocation groups decided at their leader, exact barrier (load.py)
  c.load_comm = False  # the copy term: input bytes away from a device lower its logit (load.py)
  c.load_group_copies = False  # copies of colocation groups counted once both are decided
  c.load_copy_to_receiver = False  # a copy live until its receiver's block (load.py)
  c.load_time = False  # the time term: a later earliest finish on a device lowers its logit
  c.load_time_copies = False  # with load_time: greedy decode counts copies in time (load.py)
  c.fusion_head = False  # a fuse request per op (the fusion tasks; GOPolicy.fusion_head)
  c.decode_order = "topological"  # the order the policy walks (features.DECODE_ORDERS)
  return c


def variant_config(name: str) -> ml_collections.ConfigDict:
  """default_config() with the overrides of a named variant."""
  if name not in VARIANTS:
    raise ValueError(f"unknown policy variant {name!r}; available: {sorted(VARIANTS)}")
  c = default_config()
  c.update(VARIANTS[name])
  c.variant = name
  return c


def make_policy(config) -> nn.Module:
  """The policy module a config describes (a ConfigDict or a plain dict)."""
  cfg = dict(config)
  kind = cfg.get("policy", "go")
  if kind not in POLICIES:
    raise ValueError(f"unknown policy {kind!r}; available: {sorted(POLICIES)}")
  cls = POLICIES[kind]
  fields = {f.name for f in dataclasses.fields(cls)} - {"parent", "name"}
  unknown = sorted(set(cfg) - fields - set(_META_KEYS))
  if unknown:
    raise ValueError(f"policy config has unknown field(s) {unknown}; valid: {sorted(fields)}")
  kwargs = {k: v for k, v in cfg.items() if k in fields}
  kwargs["use_hint"] = bool(cfg.get("hint", ""))
  for k in ("hidden", "heads", "segment_len", "priority_levels", "max_devices", "load_block"):
    if k in kwargs and int(kwargs[k]) < 1:
      raise ValueError(f"policy config: {k} must be >= 1, got {kwargs[k]}")
  for k in ("gnn_layers", "attention_layers"):
    if k in kwargs and int(kwargs[k]) < 0:
      raise ValueError(f"policy config: {k} must be >= 0, got {kwargs[k]}")
  if kwargs.get("hidden", 128) % kwargs.get("heads", 4):
    raise ValueError(f"policy config: hidden ({kwargs.get('hidden')}) must be a multiple of "
                     f"heads ({kwargs.get('heads')})")
  if not 0.0 <= float(kwargs.get("dropout", 0.0)) < 1.0:
    raise ValueError(f"policy config: dropout must be in [0, 1), got {kwargs['dropout']}")
  check_decode_order(cfg.get("decode_order", "topological"))
  for key, table in (("attention_impl", IMPLEMENTATIONS), ("relative", RELATIVE)):
    if key in kwargs and kwargs[key] not in table:
      raise ValueError(f"policy config: unknown {key} {kwargs[key]!r}; choose from "
                       f"{sorted(table)}")
  return cls(**kwargs)


__all__ = ["POLICIES", "VARIANTS", "default_config", "variant_config", "make_policy",
           "GOPolicy", "GraphFeatures", "PolicyOutput", "graph_features", "batch_features"]
