"""GO (Zhou et al., NeurIPS 2020): the full policy (GraphSAGE, segment-recurrent attention,
parameter superposition) trained jointly on placement and scheduling over several graphs.

  python -m experiments.train --config=experiments/configs/train_go.py --workdir=runs/go
"""

from experiments.configs import train_base
from go_jax import policies


def get_config():
  config = train_base.get_config()
  config.graphs = ("layered:n=200,width=16,seed=1", "layered:n=500,width=24,seed=2",
                   "regal:n=400,seed=1", "series_parallel:n=300,seed=1",
                   "pipedream:resnet50", "pipedream:vgg16", "pipedream:gnmt")
  config.topologies = ("nvlink4", "nvlink8@mem=0.4x")
  config.task = "joint"
  config.graphs_per_update = 2
  config.policy = policies.variant_config("go")
  return config
