"""Base config of PPO training (experiments/train.py, go_jax.training).

Derived configs import this one and override fields. Fields:
  graphs: graph specs of simulator.sources.load_graph ("layered:n=200,width=16,seed=1",
    "pipedream:resnet50", ...).
  topologies: topology specs as go_jax.harness parses them ("nvlink4", "nvlink4@mem=0.6x": a
    factor of the graph's single-device footprint). Instances = every graph x every topology;
    all are padded to one bucket (the largest graph's).
  task: "placement" (priority = critical path), "scheduling" (placement fixed to the
    `fixed_placement` method's) or "joint" (go_jax.training.TASKS).
  objective: "makespan" or "peak_memory" (go_jax.objectives; infeasible ranks last).
  reference: method whose objective normalises rewards: reward = -sqrt(objective / reference).
  fixed_placement: placement method the scheduling task keeps.
  samples: K actions sampled per graph per update, all from one forward pass.
  graphs_per_update: G instances per update (all when equal to their number, else a random G).
  updates, updates_per_call: PPO updates in total and per jitted call (lax.scan); updates must
    be a multiple of updates_per_call.
  epochs, minibatches, clip_eps, entropy_coef, value_coef, max_grad_norm, learning_rate,
    lr_schedule ("constant", "cosine", "linear"), warmup_updates: PPO / optimizer settings.
    A gradient step costs one forward + backward pass of the policy per graph whatever the
    number of samples it scores (all K share that pass), so minibatches > 1 multiplies the cost
    of an update without making a step cheaper; K is cheap by comparison (at N = 1000 the
    simulation of 65 actions took a sixth of an update, experiments/bench_ppo.py).
  advantage: baseline subtracted from the reward ("leave_one_out", "sample_mean", "value",
    "running_mean"); normalize_advantages: standardise over the batch.
  ema_decay: decay of the running mean reward per instance (TrainState.reward_ema).
  self_imitation_coef: weight of the cross-entropy of each instance's best action so far
    (self-imitation, go_jax/training/ppo.py); 0 turns it off.
  seed, prng_impl: PRNG seed and implementation ("rbg" compiles fastest).
  checkpoint_every, keep_checkpoints: in updates (a multiple of updates_per_call); newest kept.
  tensorboard: also write TensorBoard event files (needs tensorboardX).
  init_params: params.msgpack (or the workdir) of an earlier run to start from: fine-tuning a
    pretrained policy on held-out graphs (None: fresh parameters).
  max_seconds: wall-clock budget, checked between jitted calls (None: none).
  policy: the policy network (go_jax.policies.variant_config).
  imitation: behaviour cloning of the best baselines before PPO (go_jax.training.imitation;
    `imitation.enabled` False: PPO from fresh parameters).
"""

import ml_collections
from ml_collections import config_dict

from go_jax import policies
from go_jax.training import imitation


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.graphs = ("layered:n=200,width=16,seed=1", "layered:n=200,width=16,seed=2",
                   "series_parallel:n=200,seed=1")
  config.topologies = ("nvlink4", "nvlink4@mem=0.6x")
  config.task = "joint"
  config.objective = "makespan"
  config.reference = "heft"
  config.fixed_placement = "heft"
  config.samples = 64
  config.graphs_per_update = 2
  config.updates = 2000
  config.updates_per_call = 10
  config.epochs = 2
  config.minibatches = 1
  config.clip_eps = 0.2
  config.entropy_coef = 0.05
  config.value_coef = 0.5
  config.max_grad_norm = 1.0
  config.learning_rate = 3e-4
  config.lr_schedule = "cosine"
  config.warmup_updates = 20
  config.advantage = "leave_one_out"
  config.normalize_advantages = True
  config.ema_decay = 0.9
  config.self_imitation_coef = 0.0
  config.seed = 0
  config.prng_impl = "rbg"
  config.checkpoint_every = 100
  config.keep_checkpoints = 3
  config.tensorboard = True
  config.init_params = config_dict.placeholder(str)  # None; --config.init_params=runs/go
  config.max_seconds = config_dict.placeholder(float)
  config.policy = policies.variant_config("go")
  config.imitation = imitation.default_config()
  return config
