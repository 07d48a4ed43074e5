"""Base config of the evaluation harness (experiments/evaluate.py, go_jax.harness).

Derived configs import this one and override fields. Fields:
  methods: method names of go_jax.methods (built-in methods whose optional dependency is
    missing are skipped with a warning; an unknown name stops the run before any cell).
  graphs: graph specs of simulator.sources.load_graph ("layered:n=200,width=16,seed=0", ...).
  topologies: "PRESET", "file.json" or either with "@mem=VALUE", VALUE bytes ("8e9", "inf") or a factor of the
    graph's single-device footprint ("0.6x": one device cannot hold the model).
  seeds: seeds of every cell.
  objective: "makespan" or "peak_memory" (or a list of both).
  budget: simulator evaluations per search (None: each method's own default).
  method_options: method -> options of its own (overrides of its registered defaults), e.g.
    {"brkga": {"population": 16}} or {"go_hint": {"finetune_seconds": 60}}.
  schedule_placement: the placement method whose solution scheduling methods order (its own
    options, if any, go in method_options under its name, whether or not it is in methods).
  plots: a Gantt/memory PNG per cell and a bar chart per graph/topology.
  fail_fast: stop at the first cell that raises instead of recording it as an error row.
"""

import ml_collections
from ml_collections import config_dict


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.methods = ("single", "random", "round_robin", "expert")
  config.graphs = ("layered:n=200,width=16,seed=0",)
  config.topologies = ("nvlink4",)
  config.seeds = (0,)
  config.objective = "makespan"
  config.budget = config_dict.placeholder(int)  # None; --config.budget=5000 sets it
  config.method_options = {}
  config.schedule_placement = "expert"
  config.plots = False
  config.fail_fast = False
  return config
