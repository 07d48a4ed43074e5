"""PPO training of GO-style policies (design.md sections 7-8): setup, the jitted update, the loop.

  from go_jax import training
  result = training.train(config, workdir)                 # experiments/train.py calls this
  trainer = training.make_train(config, graphs, topologies)
  state, metrics = trainer.update_chunk(trainer.init(0))   # updates_per_call updates, one jit
  tuned = training.finetune(config, graph, topology, params, max_seconds=60)
  first = training.zero_shot(config, graph, topology, params)   # greedy and best of K

Modules: `problems` (host-side instances: padding, features, references), `rollout` (tasks,
sampling from one forward pass, log-probabilities, rewards, advantages), `state` (TrainState,
HParams, learning-rate schedules), `ppo` (the update under one jit, make_train), `loop`
(resume, logging, checkpoints, summary), `tuning` (fine-tuning and zero-shot on one graph),
`imitation` (behaviour cloning of the best baselines before PPO), `checkpoint` (orbax),
`logging` (JSONL, TensorBoard, progress),
`trainers` (go-jax-train's trainers by `config.algorithm`: PPO here, REGAL in go_jax/regal).
"""

from go_jax.training.tuning import FinetuneResult, ZeroShotResult, finetune, zero_shot
from go_jax.training.loop import (TrainResult, build_instances, check_resume, load_pretrained,
                                  summarize, train)
from go_jax.training.ppo import (HParams, Policy, TrainState, Trainer, make_train,
                                 policy_from_config)
from go_jax.training.rollout import ADVANTAGES, TASKS

__all__ = ["train", "finetune", "zero_shot", "ZeroShotResult", "build_instances", "check_resume",
           "summarize",
           "load_pretrained", "make_train", "policy_from_config", "HParams", "Policy",
           "TrainState", "Trainer", "TrainResult", "FinetuneResult", "TASKS", "ADVANTAGES"]
