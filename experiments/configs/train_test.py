"""Tiny CI config of PPO training: two small graphs on 2 devices, a small policy, a few updates.

  python -m experiments.train --config=experiments/configs/train_test.py --workdir=/tmp/run
"""

from experiments.configs import train_base


def get_config():
  config = train_base.get_config()
  config.graphs = ("chain:n=12,seed=0", "series_parallel:n=14,seed=0")
  config.topologies = ("nvlink2",)
  config.task = "joint"
  config.samples = 8
  config.graphs_per_update = 2
  config.updates = 4
  config.updates_per_call = 2
  config.epochs = 1
  config.minibatches = 2
  config.warmup_updates = 0
  config.checkpoint_every = 2
  config.keep_checkpoints = 2
  config.policy.hidden = 16
  config.policy.gnn_layers = 1
  config.policy.attention_layers = 1
  config.policy.heads = 2
  config.policy.segment_len = 8
  config.policy.priority_levels = 4
  return config
