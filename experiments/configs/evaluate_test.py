"""Tiny CI config of the evaluation harness: 2 small synthetic graphs, one 2-device topology
with and without a memory limit, the simple baselines plus those classic methods that are
available (those missing an optional dependency are skipped with a warning), a small search
budget, one seed.

The budget (32 simulator evaluations) is below one generation of BRKGA's default population
(100 - 20 elites = 80 evaluations), so BRKGA runs with a population of 16 here (13 new
chromosomes per generation: 2 generations); every cell of this config runs without error."""

from experiments.configs import evaluate_base


def get_config():
  config = evaluate_base.get_config()
  config.methods = ("single", "random", "round_robin", "expert", "heft", "m_etf", "brkga")
  config.graphs = ("chain:n=12,seed=0", "series_parallel:n=14,seed=0")
  config.topologies = ("nvlink2", "nvlink2@mem=0.6x")
  config.seeds = (0,)
  config.budget = 32
  config.method_options = {"brkga": {"population": 16}}
  return config
