"""REGAL's "Tuned BRKGA" baseline: `brkga_tuned`, BRKGA with hyper-parameters tuned offline.

REGAL (Paliwal et al., ICLR 2020) compares against BRKGA run with its hyper-parameters (population
size, elite and mutant fractions, elite bias) tuned on the training graphs. Here:

* `tune` (library) searches those four with optuna's TPE sampler at a fixed evaluation budget
  (5,000 by default, REGAL's) on a list of training instances. A trial runs the registered
  `brkga` with the trial's values on every instance and seed; its score is the geometric mean
  over them of objective(trial) / objective(default BRKGA, same instance, seed and budget), so
  below 1 is better than the defaults. Trial 0 is the default configuration itself (score 1), so
  the result is never worse than the defaults on the training set. The search space is
  quantised (SEARCH_SPACE) because the jitted BRKGA compiles once per distinct
  (population, elites, mutants, elite_bias): a coarse grid lets trials reuse executables.
  `experiments/tune_brkga.py` is its launcher; optuna is an optional dependency (the "tune"
  extra), imported only by `tune`.
* `brkga_tuned` (registered, joint) reads the tuned values from a JSON file (option
  `params_file`; default the shipped go_jax/methods/data/brkga_tuned.json, whose "metadata"
  records the command, training set and result it came from) and runs the registered `brkga`
  with them. The file's "params" object must hold exactly the four fields; anything else is a
  ValueError naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import go_jax.methods as registry
from go_jax.methods import Problem, Proposal, register

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
DEFAULT_PARAMS_FILE = os.path.join(DATA_DIR, "brkga_tuned.json")

# The tuned hyper-parameters: name -> (type, lowest, highest, step) of the search space.
SEARCH_SPACE: Dict[str, Tuple[type, float, float, float]] = {
    "population": (int, 20, 200, 10),
    "elite_frac": (float, 0.05, 0.35, 0.05),
    "mutant_frac": (float, 0.0, 0.3, 0.05),
    "elite_bias": (float, 0.5, 0.95, 0.05),
}
PARAMS = tuple(SEARCH_SPACE)
TUNE_BUDGET = 5000  # simulator evaluations per BRKGA run while tuning (REGAL's "5K")


# ------------------------------------------------------------------ the params file
def check_params(params: Any, where: str) -> Dict[str, Any]:
  """The four BRKGA hyper-parameters of `params`, validated; ValueError naming `where` (the
  file) and the field at fault."""
  if not isinstance(params, dict):
    raise ValueError(f"{where}: field 'params' must be an object with {list(PARAMS)}, got "
                     f"{type(params).__name__}")
  missing = [k for k in PARAMS if k not in params]
  extra = sorted(set(params) - set(PARAMS))
  if missing or extra:
    field = (missing or extra)[0]
    raise ValueError(f"{where}: field 'params.{field}' is "
                     f"{'missing' if missing else 'not a BRKGA hyper-parameter'}; "
                     f"'params' must hold exactly {list(PARAMS)}")
  out = {}
  for name in PARAMS:
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
        value):
      raise ValueError(f"{where}: field 'params.{name}' must be a finite number, got "
                       f"{value!r}")
    if name == "population" and (value != int(value) or value < 2):
      raise ValueError(f"{where}: field 'params.population' must be an integer >= 2, got "
                       f"{value!r}")
    if name in ("elite_frac", "mutant_frac") and not 0.0 <= value < 1.0:
      raise ValueError(f"{where}: field 'params.{name}' must be in [0, 1), got {value!r}")
    if name == "elite_bias" and not 0.0 <= value <= 1.0:
      raise ValueError(f"{where}: field 'params.elite_bias' must be in [0, 1], got {value!r}")
    out[name] = int(value) if name == "population" else float(value)
  p = out["population"]
  elites = max(1, int(round(out["elite_frac"] * p)))
  if elites + int(round(out["mutant_frac"] * p)) >= p:
    raise ValueError(f"{where}: field 'params.population' ({p}) must exceed its elites and "
                     f"mutants (elite_frac {out['elite_frac']}, mutant_frac "
                     f"{out['mutant_frac']})")
  return out


def load_params(path: Optional[str] = None) -> Dict[str, Any]:
  """The BRKGA hyper-parameters stored in the JSON file `path` (None: the shipped file)."""
  path = DEFAULT_PARAMS_FILE if path is None else os.fspath(path)
  try:
    with open(path, encoding="utf-8") as fh:
      data = json.load(fh)
  except OSError as e:
    raise ValueError(f"brkga_tuned: cannot read params_file {path}: {e.strerror or e}") from e
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: not valid JSON ({e})") from e
  if not isinstance(data, dict) or "params" not in data:
    raise ValueError(f"{path}: field 'params' is missing (a JSON object with 'params': "
                     f"{{{', '.join(PARAMS)}}} is expected)")
  return check_params(data["params"], path)


@register("brkga_tuned", "joint",
          "BRKGA with hyper-parameters tuned offline by optuna (REGAL's Tuned BRKGA)",
          params_file=None, evaluations=TUNE_BUDGET, seed_heuristics=False)
def brkga_tuned(problem: Problem, config) -> Proposal:
  """The registered `brkga` with the params file's values (module docstring). info: brkga's,
  plus tuned_params and params_file."""
  path = config["params_file"] or DEFAULT_PARAMS_FILE
  params = load_params(path)
  spec = registry.get("brkga")
  unknown = sorted(set(params) - set(spec.defaults))
  if unknown:  # brkga's options were renamed: say so instead of a KeyError deep inside
    raise ValueError(f"brkga_tuned: brkga has no option(s) {unknown}; options: "
                     f"{sorted(spec.defaults)}")
  cfg = dict(spec.defaults, **params, evaluations=config["evaluations"],
             seed_heuristics=config["seed_heuristics"])
  prop = spec.fn(problem, cfg)
  return dataclasses.replace(prop, info=dict(prop.info, tuned_params=params,
                                             params_file=os.path.abspath(path)))


# ------------------------------------------------------------------ tuning
def default_params() -> Dict[str, Any]:
  """The registered `brkga`'s defaults of the four tuned hyper-parameters."""
  spec = registry.get("brkga")
  return {k: spec.defaults[k] for k in PARAMS}


def _gmean(values: Sequence[float]) -> float:
  return float(math.exp(sum(math.log(v) for v in values) / len(values)))


def _run(instance, objective: str, seed: int, budget: int, params) -> float:
  name, graph, topology = instance
  del name
  return registry.solve("brkga", graph, topology, objective=objective, seed=seed,
                        budget=budget, **params).objective


def tune(instances: Sequence[Tuple[str, Any, Any]], *, objective: str = "peak_memory",
         trials: int = 30, budget: int = TUNE_BUDGET, seeds: Sequence[int] = (0,),
         sampler_seed: int = 0,
         progress: Optional[Callable[[str], None]] = None) -> Dict[str, Any]:
  """Tunes BRKGA's hyper-parameters on `instances`, (name, graph, topology) triples.

  Returns {"params": best values, "gmean_ratio": their score, "default_params",
  "default_objectives" and "tuned_objectives" ({instance name: [objective per seed]}),
  "trials": [{"number", "params", "gmean_ratio", "seconds"}], "optuna_version"}.
  `progress` gets one line per trial. Raises ValueError on bad arguments, with the package to
  install when optuna is missing.
  """
  try:
    import optuna  # pylint: disable=g-import-not-at-top  (optional: the "tune" extra)
  except ImportError as e:
    raise ValueError(f"tuning BRKGA needs optuna (pip install 'go-jax[tune]' or pip install "
                     f"optuna): {e}") from e
  if not instances:
    raise ValueError("tune: no training instances")
  if int(trials) < 1:
    raise ValueError(f"tune: trials must be >= 1, got {trials}")
  if int(budget) < 1:
    raise ValueError(f"tune: budget must be >= 1 evaluations, got {budget}")
  seeds = [int(s) for s in seeds]
  if not seeds:
    raise ValueError("tune: at least one seed is needed")
  say = progress or (lambda line: None)
  defaults = default_params()
  t0 = time.perf_counter()
  base = {name: [_run((name, g, t), objective, s, budget, defaults) for s in seeds]
          for name, g, t in instances}
  say(f"default BRKGA {defaults} on {len(instances)} instance(s) x {len(seeds)} seed(s): "
      f"{time.perf_counter() - t0:.1f} s")
  results: Dict[int, Dict[str, Any]] = {}

  def score(trial) -> float:
    params = {}
    for name, (kind, lo, hi, step) in SEARCH_SPACE.items():
      if kind is int:
        params[name] = trial.suggest_int(name, int(lo), int(hi), step=int(step))
      else:
        params[name] = round(trial.suggest_float(name, lo, hi, step=step), 6)
    t = time.perf_counter()
    objs = {name: [_run((name, g, tp), objective, s, budget, params) for s in seeds]
            for name, g, tp in instances}
    ratio = _gmean([o / b for name in objs for o, b in zip(objs[name], base[name])])
    results[trial.number] = {"number": trial.number, "params": params, "gmean_ratio": ratio,
                             "seconds": time.perf_counter() - t, "objectives": objs}
    return ratio

  def report(study, trial):
    r = results[trial.number]
    say(f"trial {trial.number + 1}/{trials} " +
        " ".join(f"{k}={v:g}" for k, v in r["params"].items()) +
        f": gmean ratio {r['gmean_ratio']:.4f} (best {study.best_value:.4f}), "
        f"{r['seconds']:.1f} s")

  optuna.logging.set_verbosity(optuna.logging.WARNING)
  study = optuna.create_study(direction="minimize",
                              sampler=optuna.samplers.TPESampler(seed=int(sampler_seed)))
  study.enqueue_trial(dict(defaults))  # trial 0: the defaults (score 1 by construction)
  study.optimize(score, n_trials=int(trials), callbacks=[report])
  best = results[study.best_trial.number]
  return {"params": check_params(best["params"], "tune"), "gmean_ratio": best["gmean_ratio"],
          "best_trial": best["number"], "default_params": defaults,
          "default_objectives": base, "tuned_objectives": best["objectives"],
          "trials": [{k: v for k, v in r.items() if k != "objectives"}
                     for _, r in sorted(results.items())],
          "optuna_version": optuna.__version__}


def instances_from_specs(graph_specs: Sequence[str],
                         topology_spec: str) -> List[Tuple[str, Any, Any]]:
  """(spec, graph, topology) per graph spec, the topology resolved against each graph (so
  '@mem=0.6x' is relative to that graph)."""
  from simulator.sources import load_graph  # pylint: disable=g-import-not-at-top
  from simulator.topology_spec import load_topology  # pylint: disable=g-import-not-at-top
  out = []
  for spec in graph_specs:
    graph = load_graph(spec)
    out.append((spec, graph, load_topology(topology_spec, graph)))
  return out
