"""The sweep experiments/bench_executor.py times (an experiments/evaluate.py config): minutes on
2 cores, with the searches (not compilation or Ray's start) most of the time: five methods on
two 300-op graphs (two padded shapes) on a 4-device topology, six seeds, random search and BRKGA
with 10,000 simulator evaluations each; 2 graphs x 5 methods x 6 seeds = 60 cells."""

from experiments.configs import evaluate_base


def get_config():
  config = evaluate_base.get_config()
  config.methods = ("random", "expert", "heft", "m_etf", "brkga")
  config.graphs = ("layered:n=300,width=16,seed=0", "series_parallel:n=300,seed=1")
  config.topologies = ("nvlink4",)
  config.seeds = (0, 1, 2, 3, 4, 5)
  config.budget = 10000
  config.method_options = {"brkga": {"population": 100}}
  return config
