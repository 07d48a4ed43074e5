"""Pretraining of GO policies for transfer (issue 5): the shipped checkpoint and the sweep rows.

  go-jax-train --config=experiments/configs/pretrain.py --workdir=runs/pretrain/go_hint \\
      --export=go_hint --export_dir=go_jax/pretrained --export_to_package   # shipping it
  go-jax-train --config=experiments/configs/pretrain.py:no_gnn --workdir=runs/pretrain/no_gnn

The argument names the row (`ROWS`): "go_hint" (default: GO with the best list scheduler's
placement as a hint, see go_jax/policies/go.py), "go" (the paper's GO: no hint), "gdp" (the
paper's GDP: placement only, no superposition, no hint) and the ablations of go_hint without
GNN, attention, segment recurrence or superposition. Every row trains for the same wall-clock
budget (`max_seconds`) on the same instances.

Training graphs: six PipeDream training graphs (AlexNet, GNMT, GNMT-large, ResNet-18,
SqueezeNet, ResNeXt-50) and three synthetic families; every one on nvlink2, and on nvlink4 and
nvlink8 with 0.6x of the graph's single-device footprint per device. Held out for evaluation
(experiments/transfer.py): PipeDream VGG-16, ResNet-50, Inception-v3 and ResNet-101.
"""

from experiments.configs import train_base
from go_jax import policies, transfer

ROWS = transfer.ROWS  # row -> (policy variant, hint, task)
TRAIN_GRAPHS = ("pipedream:alexnet", "pipedream:gnmt", "pipedream:gnmt_large",
                "pipedream:resnet18", "pipedream:squeezenet1_0", "pipedream:resnext50",
                "layered:n=300,width=16,seed=3", "regal:n=300,seed=3",
                "series_parallel:n=300,seed=3")
HELD_OUT = ("pipedream:vgg16", "pipedream:resnet50", "pipedream:inception_v3",
            "pipedream:resnet101")


def small_policy(row: str):
  """The policy of a row at the shipped size (hidden 64: about 0.2M parameters)."""
  if row not in ROWS:
    raise ValueError(f"pretrain.py: unknown row {row!r}; choose one of {list(ROWS)} (e.g. "
                     "--config=experiments/configs/pretrain.py:no_gnn)")
  variant, hint, _ = ROWS[row]
  p = policies.variant_config(variant)
  p.variant = row
  p.hint = hint
  p.hidden = 64
  p.gnn_layers = 2
  p.attention_layers = 2
  p.heads = 4
  p.segment_len = 64
  return p


def get_config(arg: str = "go_hint"):
  config = train_base.get_config()
  config.policy = small_policy(arg)
  config.task = ROWS[arg][2]
  config.graphs = TRAIN_GRAPHS
  config.topologies = ("nvlink2", "nvlink4@mem=0.6x", "nvlink8@mem=0.6x")
  config.samples = 64
  config.graphs_per_update = 4
  config.updates = 5000  # the wall-clock budget below ends the run first on a 2-core CPU
  config.updates_per_call = 10
  config.max_seconds = 360.0
  config.learning_rate = 5e-4
  config.entropy_coef = 0.01
  config.checkpoint_every = 50
  return config
