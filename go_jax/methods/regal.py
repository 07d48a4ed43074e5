"""REGAL and GAS as registered methods: one policy forward pass, then the guided BRKGA.

  sol = methods.solve("regal", graph, topology, objective="peak_memory", budget=5000)
  sol = methods.solve("gas", graph, topology, objective="peak_memory")
  sol = methods.solve("regal_hint", graph, topology, objective="peak_memory")

`regal_hint` is REGAL whose policy also reads a heuristic key choice per op (GP's device and
XLA's memory order, go_jax/regal/hints.py; computed here for every problem, inside the timed
search) and starts from that guide (docs/regal.md section 4.1).

All (kind "joint") load a checkpoint of go_jax/regal/trainer.py (option `checkpoint`: a
shipped name of go_jax.pretrained or a folder holding the run's config.json and params.msgpack,
e.g. a training workdir; by default "auto": `shipped_checkpoint`), read the graph once with its
policy, take the most likely choice per op and key (`decode="mode"`; "sample": one draw,
seeded by the problem's seed), and run the guided BRKGA (go_jax/regal/guided.py) with the
checkpoint's population, elite / mutant fractions and elite_bias (for a shipped checkpoint
listed in SEARCH_PARAMS, those tuned for its guided search; options `population`,
`elite_frac`, `mutant_frac` override either), the problem's seed and `budget` evaluations
(default `evaluations` = 5000, REGAL's "BRKGA 5K" budget), the last `polish` share of them
(0 by default; 0.1, 0.3 and 0.9 for the shipped `regal_hint` at 2, 4 and 8 devices), with
what the BRKGA's whole generations leave, a hill climb from the BRKGA's best (options
`polish`, `polish_batch`, `polish_swap`, and `polish_peak`: the share of its moves aimed at
the memory peak, 0.3 for the shipped `regal_hint` at 4 and 8 devices, else 0;
go_jax/regal/guided.py). `regal_hint` only: its hint
is the best of `hint_partitions` GP placements (METIS seeds 0, 1, ..., each with XLA's memory
order; default 1, 16 for the shipped checkpoints) and the best `hint_seeds` of them
(default 0, 16 there) are chromosomes of the first generation, and with `hint_consensus` = k
(> 0) and more than one partition the strength of the hint's affinity follows how many of the
best k distinct partitions agree with it (default 0: off; 8 for the shipped 2-device
checkpoint; go_jax/regal/hints.py, docs/regal.md section 4.4); the
hint's simulations come out of the budget and are counted in `evaluations` (3 per partition
for peak_memory). `info` holds the checkpoint, forward_seconds, the share of ops / keys whose
choice is the uniform Beta(1, 1) (`uniform_share`), brkga's per-generation best objectives
and, for `regal_hint`, hint_evaluations and hint_candidates (distinct partitions). A topology
with more devices than the policy's `max_devices`, a checkpoint of another algorithm or with
parameters that do not fit its policy is a ValueError naming the problem.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from go_jax.methods import Problem, Proposal, Refused, evolution, register

DECODES = ("mode", "sample")
# The checkpoints "auto" chooses from, per method, where shipped (each serves its policy's
# max_devices).
SHIPPED = {"regal": ("regal", "regal_d4", "regal_d8"), "gas": ("gas", "gas_d4", "gas_d8"),
           "regal_hint": ("regal_hint", "regal_hint_d4", "regal_hint_d8")}
_CACHE: Dict[Tuple[str, float], Tuple[Any, Any, Any]] = {}  # (params file, mtime) -> loaded
# The guided BRKGA's population and elite / mutant fractions where a SHIPPED checkpoint's search
# differs from the ones it was trained with: tuned afterwards with optuna (TPE, 40 trials) for
# the guided search itself, on the training graphs (regal:seed=0..31, seed 0), and adopted
# because they also improved the validation graphs (regal:seed=2000..2019: +2.15% against
# +1.14% over BRKGA 5K); docs/regal.md section 4.1. Options population / elite_frac /
# mutant_frac override these; a checkpoint given as a folder uses its own config's.
# `regal_hint` also ends with a hill climb from the BRKGA's best (`polish`, a share of the
# budget, in batches of 16 moves, swap probability 0.5; go_jax/regal/guided.py): a tenth at 2
# devices, 0.3 at 4 and 0.9 at 8, each chosen on the training graphs (regal:seed=0..31, seed 0,
# improvement over BRKGA 5K: +4.21% / +3.98% / +7.22% against +3.71% / +1.67% / -1.13% without)
# and adopted because it also improved the validation split (60 graphs of a built REGAL-style
# dataset: +3.16% / +4.22% / +7.91% against +2.78% / +1.99% / +1.22%); docs/regal.md 4.2.
# At 4 and 8 devices 0.3 of the climb's moves are aimed at the memory peak (`polish_peak`,
# go_jax/methods/peak_moves.py), chosen on the first 40 validation graphs of a rebuilt split
# (4 devices: +5.13% against +4.68%; 8 devices: +9.13% against +7.99%; 0.5 and 1.0 were worse,
# and at 2 devices 0.5 and 1.0 lost to none: +1.63% / +1.23% against +1.67%); docs/regal.md 4.2.
# At every device count the hint is the best of 16 GP partitions (METIS seeds 0-15, each with
# XLA's memory order; `hint_partitions`) and all of them seed the first generation
# (`hint_seeds`), chosen on the validation graphs of that split (2 devices, first 120: +3.20%
# against +1.86%, 8 / 8: +2.66%; 4 devices, first 40: +6.26% against +5.13%; 8 devices:
# +10.88% against +9.13%); docs/regal.md 4.3. At 2 devices the hint's affinity strength
# follows the agreement of the best 8 of those partitions (`hint_consensus`), chosen on all
# 200 validation graphs of that split with seeds 0-3 (+3.55% against +3.37%, paired +0.18,
# 95% CI +0.01 to +0.34); docs/regal.md 4.4.
_POLISH = {"polish_batch": 16, "polish_swap": 0.5}
_HINTS = {"hint_partitions": 16, "hint_seeds": 16}
SEARCH_PARAMS: Dict[str, Dict[str, Any]] = {
    "regal_hint": {"population": 160, "elite_frac": 0.2, "mutant_frac": 0.0, "polish": 0.1,
                   "hint_consensus": 8, **_HINTS, **_POLISH},
    "regal_hint_d4": {"polish": 0.3, "polish_peak": 0.3, **_HINTS, **_POLISH},
    "regal_hint_d8": {"polish": 0.9, "polish_peak": 0.3, **_HINTS, **_POLISH},
}
SEARCH_OPTIONS = ("population", "elite_frac", "mutant_frac", "polish", "polish_batch",
                  "polish_swap", "polish_peak", "hint_partitions", "hint_seeds",
                  "hint_consensus")
INTEGER_OPTIONS = ("population", "polish_batch", "hint_partitions", "hint_seeds",
                   "hint_consensus")
# read here, not by the guided BRKGA
HINT_OPTIONS = ("hint_partitions", "hint_seeds", "hint_consensus")


def load_checkpoint(method: str, checkpoint: str):
  """(training config, policy module, params) of a REGAL / GAS checkpoint; ValueError naming
  what is wrong (unknown name, missing files, another algorithm, parameters that do not fit)."""
  from go_jax import pretrained  # pylint: disable=g-import-not-at-top
  from go_jax.regal import policy as pol  # pylint: disable=g-import-not-at-top
  from go_jax.training import checkpoint as ckpt_lib  # pylint: disable=g-import-not-at-top
  try:
    config = pretrained.load_config(checkpoint)
    folder = pretrained._folder(checkpoint)  # pylint: disable=protected-access
  except ValueError as e:
    raise ValueError(f"{method}: {e}") from e
  if config.get("algorithm", "ppo") != "regal" or "policy" not in config or (
      "brkga" not in config):
    raise ValueError(f"{method}: checkpoint {checkpoint!r} is not a REGAL / GAS run (its "
                     f"config.json has algorithm {config.get('algorithm', 'ppo')!r}; train one "
                     "with experiments/configs/regal.py)")
  path = os.path.join(folder, pretrained.PARAMS_NAME)
  if not os.path.isfile(path):
    raise ValueError(f"{method}: checkpoint {checkpoint!r} has no {pretrained.PARAMS_NAME}")
  cache_key = (os.path.realpath(path), os.path.getmtime(path))
  if cache_key not in _CACHE:
    try:
      module = pol.make_policy(config.policy)
    except ValueError as e:
      raise ValueError(f"{method}: checkpoint {checkpoint!r}: {e}") from e
    feats = _template_features(module.max_devices)
    hint = (np.zeros((feats.node_mask.shape[0], module.max_devices + 1), np.int32)
            if module.hints else None)
    shapes = jax.eval_shape(module.init, jax.random.key(0), feats, hint)
    try:
      params = ckpt_lib.load_params(path, shapes)
    except ValueError as e:
      raise ValueError(f"{method}: {e}") from e
    _CACHE[cache_key] = (config, module, params)
  return _CACHE[cache_key]


@functools.lru_cache(maxsize=None)
def shipped_checkpoint(method: str, devices: int) -> str:
  """The shipped checkpoint of `method` with the fewest device slots >= `devices`: `regal`
  (2 devices), `regal_d4` (4) or `regal_d8` (8); `gas`, `gas_d4` or `gas_d8`; `regal_hint`,
  `regal_hint_d4` or `regal_hint_d8`; none for more devices: `methods.Refused`, as for a
  checkpoint given by name. The 8-device `regal` and `gas` are runs at a tenth of the
  learning rate: at 3e-3 `regal`'s mode decode was 31% worse than BRKGA 5K and `gas`'s 1.8%
  (docs/regal.md section 3)."""
  from go_jax import pretrained  # pylint: disable=g-import-not-at-top
  known = pretrained.available()  # package data: read once per (method, devices), then cached
  slots = sorted((int(pretrained.load_config(name).policy.max_devices), name)
                 for name in SHIPPED[method] if name in known)
  for dmax, name in slots:
    if dmax >= devices:
      return name
  raise Refused(f"{method}: no shipped checkpoint serves {devices} devices (shipped: "
                   f"{', '.join(f'{n} ({d})' for d, n in slots) or 'none'}); train one with "
                   f"experiments/configs/regal.py:{method},devices={devices} and pass its "
                   "workdir as checkpoint")


def _template_features(max_devices: int):
  from go_jax.policies.features import graph_features  # pylint: disable=g-import-not-at-top
  from simulator import preset  # pylint: disable=g-import-not-at-top
  from simulator.graph import CompGraph  # pylint: disable=g-import-not-at-top
  graph = CompGraph(cost=np.ones(2), senders=[0], receivers=[1], out_bytes=np.ones(2))
  return graph_features(graph, preset("nvlink2"), max_devices=max_devices)


@functools.partial(jax.jit, static_argnums=0)
def _apply(module, params, feats, hint=None):
  """The policy's logits of one graph (one compile per module and padded size)."""
  return module.apply(params, feats, hint)


def solve_regal(method: str, problem: Problem, config: Dict[str, Any]) -> Proposal:
  """The body of `regal` and `gas` (module docstring)."""
  from go_jax.policies.features import graph_features  # pylint: disable=g-import-not-at-top
  from go_jax.regal import guided  # pylint: disable=g-import-not-at-top
  from go_jax.regal import policy as pol  # pylint: disable=g-import-not-at-top
  from simulator.simulate import padded  # pylint: disable=g-import-not-at-top
  if config["decode"] not in DECODES:
    raise ValueError(f"{method}: decode must be one of {list(DECODES)}, got "
                     f"{config['decode']!r}")
  checkpoint = config["checkpoint"]
  if not isinstance(checkpoint, str) or not checkpoint:
    raise ValueError(f"{method}: checkpoint must be 'auto', a shipped name or a folder, got "
                     f"{checkpoint!r}")
  d = problem.topology.num_devices
  if checkpoint == "auto":
    checkpoint = shipped_checkpoint(method, d)
  train_config, module, params = load_checkpoint(method, checkpoint)
  if d > module.max_devices:
    raise Refused(f"{method}: the policy of checkpoint {checkpoint!r} serves at most "
                     f"{module.max_devices} devices, the topology has {d}; train one with "
                     f"config.policy.max_devices >= {d}")
  t0 = time.perf_counter()
  pg = padded(problem.graph)
  feats = graph_features(problem.graph, problem.topology, pg.num_nodes_padded,
                         int(pg.senders.shape[0]), module.max_devices)
  search_config = dict(train_config.brkga)
  search_config.update(SEARCH_PARAMS.get(checkpoint, {}))
  from go_jax.methods import integral  # pylint: disable=g-import-not-at-top
  for k in INTEGER_OPTIONS:  # their default None reads the checkpoint's: no type to check by
    if config[k] is not None and not integral(config[k]):
      raise ValueError(f"{method}: {k} must be an integer, got {config[k]!r}")
  search_config.update({k: config[k] for k in SEARCH_OPTIONS if config[k] is not None})
  partitions, seed_slots, consensus = _hint_settings(search_config, module.hints, method)
  hint, seeds, candidates, hint_evaluations = None, [], [], 0
  if module.hints:  # the heuristic key choices the policy reads (go_jax/regal/hints.py)
    from go_jax.regal import hints  # pylint: disable=g-import-not-at-top
    candidates, hint_evaluations = hints.hint_candidates(
        problem.graph, problem.topology, problem.objective, partitions)
    if consensus and partitions > 1:  # strength by the partitions' agreement (docs/regal.md 4.4)
      hint = hints.consensus_choices(candidates, consensus, d, module.max_devices,
                                     pg.num_nodes_padded)
    else:
      hint = hints.choices_of(candidates[0][0], candidates[0][1], module.max_devices,
                              pg.num_nodes_padded)
    seeds = [(place, prio) for place, prio, _ in candidates[:seed_slots]]
  key_logits, bias_logits = _apply(module, params, feats, hint)
  key_logits = pol.used_logits(key_logits, d)
  if config["decode"] == "mode":
    kc, bc = pol.mode(key_logits, bias_logits)
  else:
    kc, bc = pol.sample(jax.random.key(problem.seed), key_logits, bias_logits, 1)
    kc, bc = kc[0], bc[0]
  guide = pol.guide_of(kc, bc, jnp.asarray(feats.node_mask))
  kc = np.asarray(kc)[:problem.graph.num_nodes]
  forward_seconds = time.perf_counter() - t0
  brkga = {k: v for k, v in search_config.items() if k not in HINT_OPTIONS}
  # the hint's simulations come out of the budget (evaluations counts them)
  budget = evolution.search_budget(problem, config)
  if budget - hint_evaluations < 1:
    raise ValueError(f"{method}: a budget of {budget} evaluations leaves none after the "
                     f"hint's {hint_evaluations} (hint_partitions)")
  prop = guided.search(dataclasses.replace(problem, budget=budget - hint_evaluations), guide,
                       brkga, name=method, seed_actions=seeds, seed_slots=seed_slots,
                       spent=hint_evaluations)
  info = dict(prop.info, checkpoint=checkpoint, forward_seconds=forward_seconds,
              uniform_share=float(np.mean(kc == pol.UNIFORM)) if kc.size else 1.0,
              decode=config["decode"], hint_evaluations=hint_evaluations,
              hint_candidates=len(candidates))
  return Proposal(prop.placement, prop.priority, prop.evaluations + hint_evaluations, info)


def _hint_settings(search: Dict[str, Any], hinted: bool,
                   method: str) -> Tuple[int, int, int]:
  """(hint_partitions (default 1), hint_seeds (default 0), hint_consensus (default 0)) of a
  search config, checked; ValueError for a bad value or for any set on a policy that reads no
  hint."""
  parts = 1 if search.get("hint_partitions") is None else int(search["hint_partitions"])
  seeds = 0 if search.get("hint_seeds") is None else int(search["hint_seeds"])
  consensus = 0 if search.get("hint_consensus") is None else int(search["hint_consensus"])
  if parts < 1:
    raise ValueError(f"{method}: hint_partitions must be >= 1, got {parts}")
  if not 0 <= seeds <= parts:
    raise ValueError(f"{method}: hint_seeds must be in [0, hint_partitions = {parts}], got "
                     f"{seeds}")
  if consensus < 0:
    raise ValueError(f"{method}: hint_consensus must be >= 0, got {consensus}")
  if not hinted and (parts != 1 or seeds or consensus):
    raise ValueError(f"{method}: hint_partitions / hint_seeds / hint_consensus need a policy "
                     "that reads hints (regal_hint)")
  return parts, seeds, consensus


@register("regal", "joint", "REGAL: a graph policy picks per-op Beta key distributions and "
          "crossover bias for BRKGA (one forward pass + guided BRKGA, budget evaluations)",
          learned=True, checkpoint="auto", evaluations=5000, decode="mode", population=None,
          elite_frac=None, mutant_frac=None, polish=None, polish_batch=None, polish_swap=None,
          polish_peak=None, hint_partitions=None, hint_seeds=None, hint_consensus=None)
def regal(problem: Problem, config) -> Proposal:
  return solve_regal("regal", problem, config)


@register("gas", "joint", "GAS (REGAL's graph-agnostic search): BRKGA with learned key "
          "distributions and bias shared by all ops (same trainer as REGAL)",
          learned=True, checkpoint="auto", evaluations=5000, decode="mode", population=None,
          elite_frac=None, mutant_frac=None, polish=None, polish_batch=None, polish_swap=None,
          polish_peak=None, hint_partitions=None, hint_seeds=None, hint_consensus=None)
def gas(problem: Problem, config) -> Proposal:
  return solve_regal("gas", problem, config)


@register("regal_hint", "joint", "REGAL whose policy also reads a heuristic guide (GP's device "
          "and XLA's memory order per op, go_jax/regal/hints.py) and starts from it",
          learned=True, checkpoint="auto", evaluations=5000, decode="mode", population=None,
          elite_frac=None, mutant_frac=None, polish=None, polish_batch=None, polish_swap=None,
          polish_peak=None, hint_partitions=None, hint_seeds=None, hint_consensus=None)
def regal_hint(problem: Problem, config) -> Proposal:
  return solve_regal("regal_hint", problem, config)
