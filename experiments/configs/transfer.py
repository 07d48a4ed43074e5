"""GO transfer to held-out graphs on 4 and 8 memory-constrained devices (issues 5 and 11).

  python -m experiments.transfer --config=experiments/configs/transfer.py --out=results/transfer

Held-out graphs (never trained on, experiments/configs/pretrain.py): PipeDream VGG-16,
ResNet-50, Inception-v3 and ResNet-101 (`pretrain.HELD_OUT`) and model-zoo graphs of families
absent from training (`pretrain.HELD_OUT_OTHER`), on nvlink4 and nvlink8 with 0.6x of the
graph's single-device footprint per device. Baselines: HEFT, m-ETF, m-SCT, METIS, expert
split, BRKGA and BRKGA seeded with the list schedulers' answers, each BRKGA with 5,000
evaluations. Learned
rows (`pretrain.ROWS`): the paper's GO and GDP, GO with the hint and the ablations of GO, each
zero-shot and fine-tuned for 120 s. Missing pretrained rows are pretrained first (about 30
minutes each on the 2-core CPU); select rows with --config.rows='("go", "gdp")'. Fine-tuning
takes about 2.5 minutes per instance and row on one core.
"""

import ml_collections

from experiments.configs import pretrain


def get_config():
  c = ml_collections.ConfigDict()
  c.graphs = pretrain.HELD_OUT + pretrain.HELD_OUT_OTHER
  c.topologies = ("nvlink4@mem=0.6x", "nvlink8@mem=0.6x")
  c.baselines = ("heft", "m_etf", "m_sct", "metis", "expert", "brkga", "brkga_seeded")
  c.brkga_budget = 5000
  c.rows = tuple(pretrain.ROWS)
  c.objective = "makespan"
  c.seed = 0
  # K of zero-shot best-of-K and of each fine-tuning update; None: each method's own (its
  # checkpoint's, 64; `go` and `gdp` fine-tune with 256: go_jax/methods/learned.py
  # FINETUNE_SAMPLES).
  c.samples = ml_collections.config_dict.placeholder(int)
  c.finetune_seconds = {"default": 120.0}
  c.finetune_lr = 1e-3
  # Fine-tuning's PPO self-imitation weight (go_jax/training/ppo.py); None: each method's
  # default (go_jax/methods/learned.py FINETUNE_SELF_IMITATION).
  c.finetune_self_imitation = ml_collections.config_dict.placeholder(float)
  # The share of each fine-tuning's time spent on a hill climb from its best answer at the end
  # (the learned methods' `polish`); None: each method's default (go_jax/methods/learned.py
  # FINETUNE_POLISH: 0.2 for `go` and `gdp`); 0: PPO alone.
  c.finetune_polish = ml_collections.config_dict.placeholder(float)
  # An int: fine-tune every row for this many PPO updates instead of finetune_seconds (a
  # budget that does not depend on the machine's load; configs/ablation.py).
  c.finetune_updates = ml_collections.config_dict.placeholder(int)
  c.pretrain_dir = "runs/pretrain"  # <pretrain_dir>/<row>: a row's pretrained run
  # Appended to a missing row's experiments/configs/pretrain.py argument, e.g.
  # "updates=720,imitation_steps=600" (a step budget; configs/ablation.py).
  c.pretrain_options = ""
  c.pretrain_missing = True  # pretrain rows whose checkpoint is missing
  c.use_shipped = True  # a row with a shipped checkpoint (go_hint) uses it
  return c
