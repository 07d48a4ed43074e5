"""The benchmark suite: PipeDream training graphs and synthetic graphs on 2, 4 and 8 NVLink
V100s, each also with per-device memory at 0.6x the model's single-device footprint (so one
device cannot hold it), every placement method, 3 seeds, 5000 simulator evaluations per search.

  python -m experiments.evaluate --config=experiments/configs/suite.py --out=results/suite
"""

from experiments.configs import evaluate_base

PRESETS = ("nvlink2", "nvlink4", "nvlink8")
MEMORY_LIMIT = "@mem=0.6x"


def get_config():
  config = evaluate_base.get_config()
  config.methods = ("single", "random", "round_robin", "expert", "metis", "heft", "m_topo",
                    "m_etf", "m_sct", "sa", "brkga")
  config.graphs = ("pipedream:alexnet", "pipedream:vgg16", "pipedream:resnet50",
                   "pipedream:inception_v3", "pipedream:gnmt",
                   "layered:n=1000,width=32,seed=0", "regal:n=500,seed=0",
                   "series_parallel:n=500,seed=0")
  config.topologies = tuple(t + m for t in PRESETS for m in ("", MEMORY_LIMIT))
  config.seeds = (0, 1, 2)
  config.budget = 5000
  return config
