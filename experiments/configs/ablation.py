"""The ablation table of the hint-free GO (issue 11): what each part of GO contributes.

  go-jax-transfer --config=experiments/configs/ablation.py --out=results/ablation

Rows: the full model `go` and the ablations of `go` without GNN, attention, segment
recurrence, superposition, device-load state or imitation warm start (go_jax/transfer_rows.py ROWS),
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

The argument picks the budget and the held-out family ("quarter" by default):
  --config=experiments/configs/ablation.py:full       the shipped `go`'s full step budget
      (3,000 cloning steps + 3,480 PPO updates; 1-2 hours per row on the 2-core CPU with two
      side by side, `no_imitation`'s 4,980 updates longer), rows in runs/ablation_full/<row>.
      Row `go` (seed 0) is the shipped checkpoint itself: it was trained with exactly this
      recipe and seed.
  --config=experiments/configs/ablation.py:full,zoo   the same rows zero-shot only (greedy
      and best of K; no fine-tuning) on the other held-out family, `pretrain.HELD_OUT_OTHER`
      (BERT-base, GPT-2 small, WaveNet 2x18, AmoebaNet at 512 ops). "zoo" alone: the quarter
      budget's rows there.
  --config=experiments/configs/ablation.py:full,valid  the same rows zero-shot on the
      validation set, `pretrain.VALIDATION` (20 instances, neither trained on nor held out),
      against HEFT, m-SCT and m-ETF: the set on which a recipe is chosen before the held-out
      families are run.
"""

from experiments.configs import pretrain, transfer

# The full model and its six ablations, each pretrained with every seed of SEEDS.
ABLATIONS = ("go", "no_gnn", "no_attention", "no_recurrence", "no_superposition",
             "no_load_state", "no_imitation")
SEEDS = (0, 1, 2)
ROWS = tuple(row + (f"_s{seed}" if seed else "") for row in ABLATIONS for seed in SEEDS)


# The step budgets (experiments/configs/pretrain.py options): the shipped `go`'s recipe (the
# copy term on) at its full step counts, and at a quarter of them.
BUDGETS = {
    "quarter": ("updates=870,imitation_steps=760,comm=1", "runs/ablation"),
    "full": ("updates=3480,imitation_steps=3000,comm=1", "runs/ablation_full"),
}
FAMILIES = ("pipedream", "zoo", "valid")


def get_config(arg: str = "quarter"):
  parts = [p for p in str(arg).split(",") if p]
  budgets = [p for p in parts if p in BUDGETS]
  families = [p for p in parts if p in FAMILIES]
  unknown = [p for p in parts if p not in BUDGETS and p not in FAMILIES]
  if unknown or len(budgets) > 1 or len(families) > 1:
    raise ValueError(f"ablation.py: bad argument {arg!r}; give a budget of {sorted(BUDGETS)} "
                     f"and/or a family of {list(FAMILIES)}, e.g. ablation.py:full,zoo")
  budget = budgets[0] if budgets else "quarter"
  c = transfer.get_config()
  c.graphs = pretrain.HELD_OUT
  c.rows = ROWS
  c.finetune_updates = 100
  c.samples = 64  # a fixed step budget: every row's updates draw the same K (the table's setting)
  c.pretrain_options, c.pretrain_dir = BUDGETS[budget]
  # The quarter budget's rows are not comparable with the shipped `go` (4x their steps); at
  # the full budget the shipped `go` is row `go`, seed 0 (its config.json: the same recipe).
  c.use_shipped = budget == "full"
  if families == ["zoo"]:
    c.graphs = pretrain.HELD_OUT_OTHER
  if families == ["valid"]:  # where recipes are compared, against the list schedulers
    c.graphs = pretrain.VALIDATION
    c.baselines = pretrain.VALIDATION_BASELINES
  if families in (["zoo"], ["valid"]):  # zero-shot only
    c.finetune_updates = None
    c.finetune_seconds = {"default": 0.0}
  return c
