"""The transfer sweep experiments/bench_executor.py times with --sweep=transfer (issue 16's
figure: the transfer benchmark's sweep wall time, local executor vs Ray on one machine).

A real slice of experiments/configs/transfer.py, not a toy: its four held-out PipeDream graphs
(VGG-16, ResNet-50, Inception-v3, ResNet-101) on nvlink4 with 0.6x of the graph's footprint per
device, ALL its baselines (HEFT, m-ETF, m-SCT, METIS, expert split, BRKGA and seeded BRKGA with
5,000 evaluations each) and the shipped GO and GDP checkpoints (`use_shipped`, nothing is
pretrained), zero-shot and fine-tuned. Fine-tuning runs a FIXED number of PPO updates
(`finetune_updates`: 300, about 5 s of search on the 2-core CPU after 10-20 s of compilation)
instead of transfer.py's 120 s, so that every executor computes the same rows whatever its
speed (a wall-clock budget would not). 4 graphs x (7 baselines + 2 learned
rows) = 36 cells. Add nvlink8 with --config.topologies='("nvlink4@mem=0.6x","nvlink8@mem=0.6x")'.
"""

from experiments.configs import pretrain, transfer


def get_config():
  c = transfer.get_config()
  c.graphs = pretrain.HELD_OUT
  c.topologies = ("nvlink4@mem=0.6x",)
  c.rows = ("go", "gdp")
  c.use_shipped = True
  c.pretrain_missing = False  # a missing checkpoint is an error, never a 30-minute pretraining
  c.finetune_updates = 300
  return c
