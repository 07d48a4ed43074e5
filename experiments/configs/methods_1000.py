"""Search time and quality of every placement method on a 1000-op graph with 8 devices.

The figures the baselines issue asks for: BRKGA 5K (REGAL's setting, 5,000 simulator
evaluations) wall time, and HEFT / m-ETF / m-SCT under 10 s at 1000 ops. Two seeds: the second
run of each jitted search (brkga, sa, random) reuses the first one's compilation.

  python -m experiments.evaluate --config=experiments/configs/methods_1000.py \\
      --out=results/methods_1000
"""

from experiments.configs import evaluate_base


def get_config():
  config = evaluate_base.get_config()
  config.methods = ("single", "round_robin", "expert", "random", "metis", "heft", "m_topo",
                    "m_etf", "m_sct", "sa", "brkga")
  config.graphs = ("layered:n=1000,width=32,seed=0",)
  config.topologies = ("nvlink8",)
  config.seeds = (0, 1)
  config.budget = 5000
  return config
