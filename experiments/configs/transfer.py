"""GO transfer to held-out graphs on 4 and 8 memory-constrained devices (issue 5's figures).

  python -m experiments.transfer --config=experiments/configs/transfer.py --out=results/transfer

Held-out graphs (never trained on, experiments/configs/pretrain.py): PipeDream VGG-16,
ResNet-50, Inception-v3 and ResNet-101, on nvlink4 and nvlink8 with 0.6x of the graph's
single-device footprint per device. Baselines: HEFT, m-ETF, m-SCT, METIS, expert split, BRKGA
and BRKGA seeded with the list schedulers' answers, each BRKGA with 5,000 evaluations. Learned rows: GO with the hint (the shipped checkpoint), the paper's GO,
and the ablations of go_hint, each zero-shot and fine-tuned for 120 s; the paper's GDP for 30 s
(it is far behind at any budget; BENCHMARKS.md). Missing pretrained rows are pretrained first.
The whole sweep takes about 70 minutes of two CPU cores.
"""

import ml_collections

from experiments.configs import pretrain


def get_config():
  c = ml_collections.ConfigDict()
  c.graphs = pretrain.HELD_OUT
  c.topologies = ("nvlink4@mem=0.6x", "nvlink8@mem=0.6x")
  c.baselines = ("heft", "m_etf", "m_sct", "metis", "expert", "brkga", "brkga_seeded")
  c.brkga_budget = 5000
  c.rows = tuple(pretrain.ROWS)
  c.objective = "makespan"
  c.seed = 0
  c.samples = 64  # K of zero-shot best-of-K and of each fine-tuning update
  c.finetune_seconds = {"default": 120.0, "gdp": 30.0}
  c.finetune_lr = 1e-3
  c.pretrain_dir = "runs/pretrain"  # <pretrain_dir>/<row>: a row's pretrained run
  c.pretrain_missing = True  # pretrain rows whose checkpoint is missing
  c.use_shipped = True  # a row with a shipped checkpoint (go_hint) uses it
  return c
