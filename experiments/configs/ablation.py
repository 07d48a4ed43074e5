"""The ablation table of the hint-free GO (issue 11): what each part of GO contributes.

  go-jax-transfer --config=experiments/configs/ablation.py --out=results/ablation

Rows: the full model `go` and the ablations of `go` without GNN, attention, segment
recurrence, superposition, device-load state or imitation warm start (go_jax/transfer.py ROWS),
each with three pretraining seeds (e.g. no_gnn, no_gnn_s1, no_gnn_s2: the spread of every row).
Every row is pretrained on the same 161 instances (experiments/configs/pretrain.py) with the
shipped `go`'s recipe (the copy term on, `comm=1`; it only acts where the load state is on) and
the same fixed step budget, `pretrain_options`: 760 behaviour-cloning steps then 870 PPO updates
(a row without imitation gets 380 more PPO updates instead, the time the cloning takes), a
quarter of the shipped `go`'s 3,000 + 3,480 steps, so that the 21 rows fit about two sessions
on the 2-core CPU (15-25 minutes each, two side by side); a step budget, not a wall-clock one,
so the rows do not depend on the machine's load while they train. Each row is then evaluated
zero-shot (greedy and best of 64) and fine-tuned for 100 PPO updates (a count, not seconds,
for the same reason) on the transfer benchmark's eight held-out PipeDream instances, against
the same baselines as the transfer table.
Pretrained rows live in runs/ablation/<row>; missing ones are pretrained first.
"""

from experiments.configs import pretrain, transfer

# The full model and its six ablations, each pretrained with every seed of SEEDS.
ABLATIONS = ("go", "no_gnn", "no_attention", "no_recurrence", "no_superposition",
             "no_load_state", "no_imitation")
SEEDS = (0, 1, 2)
ROWS = tuple(row + (f"_s{seed}" if seed else "") for row in ABLATIONS for seed in SEEDS)


def get_config():
  c = transfer.get_config()
  c.graphs = pretrain.HELD_OUT
  c.rows = ROWS
  c.finetune_updates = 100
  c.samples = 64  # a fixed step budget: every row's updates draw the same K (the table's setting)
  c.pretrain_dir = "runs/ablation"
  c.pretrain_options = "updates=870,imitation_steps=760,comm=1"  # shipped recipe, 1/4 steps
  c.use_shipped = False  # the shipped `go` had 4x this budget: not comparable
  return c
