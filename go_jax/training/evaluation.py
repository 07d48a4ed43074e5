"""Evaluation of a policy on a training set, per instance and per family: learning curves.

  rows = evaluate(trainer, params, samples=16)        # per instance: greedy / best of K vs ref
  fams = by_family(rows)                               # geometric means per graph family
  curve = checkpoint_curve(workdir, config)            # every kept checkpoint of a run

`evaluate` runs, for every instance of a trainer's problems and in ONE jitted call, the policy's
forward pass, its greedy action and K actions sampled from that pass, and simulates them all
(`rollout.simulate_actions`); the ratios are objective / the reference method's (HEFT by
default), so 1.0 is the reference and an out-of-memory action scores above the objective's
upper bound (design.md section 5). Its PRNG key comes from `seed`, never from a TrainState, so
evaluating a run does not change it.

`family_of` is the graph source of an instance ("pipedream", "zoo", "layered", ...: the text
before ':' of its graph spec); `by_family` aggregates with the geometric mean and adds the
family "all". `checkpoint_curve` evaluates the parameters after imitation (update 0, when the
run cloned) and at every checkpoint the run kept, with the wall-clock seconds of each point
read from the run's metrics (imitation included), and writes `<workdir>/eval.jsonl` and
`<workdir>/learning_curves.png` (go_jax.plotting_curves.learning_curves).
"""

from __future__ import annotations

import functools
import json
import math
import os
from typing import Any, Dict, List, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from go_jax import distributed
from go_jax.training import checkpoint as ckpt_lib
from go_jax.training import imitation, loop, rollout
from go_jax.training import logging as train_logging
from simulator import fileio

EVAL_NAME, PLOT_NAME = "eval.jsonl", "learning_curves.png"
TRACES: Dict[str, int] = {"evaluate": 0}


@functools.partial(jax.jit, static_argnames=("module", "task_name", "objective", "samples"))
def _evaluate(params, data, key, *, module, task_name: str, objective: str, samples: int):
  """(objective (I, K + 1), oom (I, K + 1)): K sampled actions then the greedy one."""
  TRACES["evaluate"] += 1
  task = rollout.get_task(task_name)
  out = jax.vmap(module.apply, in_axes=(None, 0))(params, data.feats)
  both = jax.tree_util.tree_map(lambda s, g: jnp.concatenate([s, g], 1),
                                rollout.sample(key, out, samples), rollout.greedy(out))
  res = rollout.simulate_actions(objective, task, data, both)
  return res.objective, res.oom


def family_of(instance: str) -> str:
  """The graph source of an instance name "<graph spec> @ <topology spec>"."""
  spec = instance.split(" @ ")[0].strip()
  return spec.split(":")[0] if ":" in spec else spec.split(",")[0]


def evaluate(trainer, params, *, samples: int = 16, seed: int = 0) -> List[Dict[str, Any]]:
  """Per instance of `trainer.problems`: greedy and best-of-K objective ratios to the reference
  and whether they are memory-feasible (see the module docstring)."""
  if samples < 1:
    raise ValueError(f"evaluate: samples must be >= 1, got {samples}")
  key = jax.random.key(int(seed), impl=trainer.hp.prng_impl)
  obj, oom = jax.device_get(_evaluate(params, trainer.data, key, module=trainer.policy.module,
                                      task_name=trainer.hp.task,
                                      objective=trainer.hp.objective, samples=int(samples)))
  probs = trainer.problems
  rows = []
  for i, name in enumerate(probs.names):
    ref = float(probs.reference[i])
    best = int(np.argmin(obj[i]))
    rows.append({"instance": name, "family": family_of(name),
                 "greedy_ratio": float(obj[i, -1]) / ref, "greedy_feasible": not bool(oom[i, -1]),
                 "best_ratio": float(obj[i, best]) / ref, "best_feasible": not bool(oom[i, best])})
  return rows


def _gmean(xs: Sequence[float]) -> float:
  return float(math.exp(np.mean(np.log(np.asarray(xs, np.float64)))))


def by_family(rows: Sequence[Mapping[str, Any]]) -> Dict[str, Dict[str, float]]:
  """Per family (and "all"): geometric-mean greedy and best-of-K ratios, feasible fractions."""
  groups: Dict[str, List[Mapping[str, Any]]] = {}
  for r in rows:
    groups.setdefault(r["family"], []).append(r)
  groups["all"] = list(rows)
  return {fam: {"instances": len(rs), "greedy_ratio": _gmean([r["greedy_ratio"] for r in rs]),
                "best_ratio": _gmean([r["best_ratio"] for r in rs]),
                "greedy_feasible": float(np.mean([r["greedy_feasible"] for r in rs])),
                "best_feasible": float(np.mean([r["best_feasible"] for r in rs]))}
          for fam, rs in groups.items()}


def _seconds_of_steps(workdir: str) -> Dict[int, float]:
  """Training wall seconds at each logged update: imitation (teachers and cloning) plus PPO
  from its first logged update (instance setup and the first compile left out)."""
  rows = train_logging.read_jsonl(os.path.join(workdir, train_logging.JSONL_NAME))
  offset = 0.0
  report = os.path.join(workdir, imitation.SUMMARY_NAME)
  if os.path.exists(report):
    with open(report) as fh:
      rep = json.load(fh)
    offset = float(rep.get("target_seconds", 0.0)) + float(rep.get("clone_seconds", 0.0))
  rows = [r for r in rows if np.isfinite(train_logging.number(r.get("time")))]
  if not rows:
    return {0: offset}
  t0 = float(rows[0]["time"])
  return {0: offset, **{int(r["step"]): offset + float(r["time"]) - t0 for r in rows}}


def checkpoint_curve(workdir: str, trainer, *, samples: int = 16, seed: int = 0,
                     plot: bool = True, progress: bool = True) -> List[Dict[str, Any]]:
  """Evaluates the run's parameters after imitation and at every kept checkpoint; writes
  `<workdir>/eval.jsonl` (one line per point and family) and the learning-curve plot.

  In a multi-process run (`go_jax.distributed`) process 0 reads the run (its checkpoints,
  cloned parameters and metrics) and writes the files; every process evaluates (the batches
  are split over all devices) with process 0's parameters."""
  template = trainer.init(0)
  cloned = os.path.join(workdir, imitation.PARAMS_NAME)
  ckpt = (ckpt_lib.Checkpointer(os.path.join(workdir, loop.CKPT_DIR), keep=10**6)
          if distributed.is_primary() else None)

  def plan() -> Dict[str, Any]:  # process 0's: what there is to evaluate
    steps = [int(s) for s in ckpt.all_steps()]
    has_cloned = os.path.exists(cloned)
    if not steps and not has_cloned:
      raise ValueError(f"{workdir}: no checkpoint and no {imitation.PARAMS_NAME} to evaluate")
    return {"cloned": has_cloned, "steps": steps, "seconds": _seconds_of_steps(workdir)}

  try:
    run = distributed.from_primary(plan)
    seconds = {int(k): v for k, v in run["seconds"].items()}  # JSON keys are strings
    points = [(0, True)] * run["cloned"] + [(step, False) for step in run["steps"]]
    out_rows = []
    for i, (step, is_cloned) in enumerate(points):
      read = ((lambda: ckpt_lib.load_params(cloned, template.params)) if is_cloned else
              (lambda s=step: ckpt.restore(template, s).params))
      params = distributed.tree_from_primary(read, template.params)
      fams = by_family(evaluate(trainer, params, samples=samples, seed=seed))
      secs = seconds.get(step)
      for fam, fig in fams.items():
        out_rows.append(dict(fig, step=step, seconds=secs, family=fam))
      if progress:
        a = fams["all"]
        print(f"learning curve: update {step} ({i + 1}/{len(points)}): greedy "
              f"x{a['greedy_ratio']:.3f} (feasible {a['greedy_feasible']:.0%}), best of "
              f"{samples} x{a['best_ratio']:.3f}", flush=True)
  finally:
    if ckpt is not None:
      ckpt.close()
  if not distributed.is_primary():  # process 0 writes
    return out_rows
  path = os.path.join(workdir, EVAL_NAME)
  with fileio.atomic_open(path, "w") as fh:
    for r in out_rows:
      fh.write(json.dumps(r, allow_nan=False) + "\n")
  if plot:
    from go_jax import plotting_curves  # pylint: disable=g-import-not-at-top  (matplotlib)
    plotting_curves.learning_curves(out_rows, os.path.join(workdir, PLOT_NAME), samples=samples)
  return out_rows


__all__ = ["evaluate", "by_family", "family_of", "checkpoint_curve", "EVAL_NAME", "PLOT_NAME"]
