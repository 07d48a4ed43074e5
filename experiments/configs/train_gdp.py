"""GDP (Zhou et al., 2019): GO's placement-only ancestor, without parameter superposition;
the priority stays the critical path.

  python -m experiments.train --config=experiments/configs/train_gdp.py --workdir=runs/gdp
"""

from experiments.configs import train_go
from go_jax import policies


def get_config():
  config = train_go.get_config()
  config.task = "placement"
  config.policy = policies.variant_config("gdp")
  return config
