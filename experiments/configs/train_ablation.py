"""GO with one part removed: the ablations of GO's paper, on train_go's graphs and settings.

  python -m experiments.train --config=experiments/configs/train_ablation.py:no_gnn \\
      --workdir=runs/no_gnn

The argument after the colon names the variant: no_gnn, no_attention, no_recurrence or
no_superposition (go_jax.policies.VARIANTS).
"""

from experiments.configs import train_go
from go_jax import policies

ABLATIONS = ("no_gnn", "no_attention", "no_recurrence", "no_superposition")


def get_config(arg: str = "no_superposition"):
  if arg not in ABLATIONS:
    raise ValueError(f"train_ablation.py: unknown ablation {arg!r}; choose one of "
                     f"{list(ABLATIONS)} (e.g. --config=experiments/configs/"
                     "train_ablation.py:no_gnn)")
  config = train_go.get_config()
  config.policy = policies.variant_config(arg)
  return config
