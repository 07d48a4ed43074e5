"""Pretraining of the fusion policy (issue 13): the shipped `go_fusion` checkpoint.

  go-jax-train --config=experiments/configs/pretrain_fusion.py --workdir=runs/pretrain/go_fusion \\
      --export=go_fusion --export_dir=go_jax/pretrained --export_to_package   # shipping it
  go-jax-train --config=experiments/configs/pretrain_fusion.py:seed=1,updates=400 ...

One policy serves both fusion methods (`go_jax.methods.learned`): `go_fusion` (task "fusion":
fuse requests on a given placement and priority) and `go_joint3` (task "joint3": placement,
priority and fuse requests). It is trained on "joint3" on one, four and eight devices: on one
device the placement is forced and the priority only moves memory, so those instances teach the
fusion head what "fusion" asks of it, and the multi-device ones teach the three heads together.

The policy is GO with the best list scheduler's placement as a hint (as the shipped `go_hint`,
the checkpoint `go-jax-place` uses) plus the fusion head (policy variant "go_fusion"): what is
learned here is fusion and its interplay with placement, not placement from scratch (issue 11
is that question).

Training instances: the pre-optimisation training-step graphs (JAX/HLO front end, `stage=pre`:
XLA has not fused anything yet) of the zoo families GNMT, Transformer (NMT and XL) and ResNet-50
at the sizes whose graphs have at most 2048 ops (one padded bucket), costed on the V100
roofline, on `nvlink1`, `nvlink4` and `nvlink8` with their full memory. Held out, never trained
on (the figures of issue 13, experiments/fusion_table.py): `HELD_OUT` = BERT, GPT-2, WaveNet
and AmoebaNet, families absent from training, as in the transfer study's `HELD_OUT_OTHER`.
The argument sets the seed and optionally a fixed step budget in place of the wall-clock one
("seed=1,updates=400,imitation_steps=200").
"""

from experiments.configs import pretrain, train_base

TRAIN_GRAPHS = (
    "zoo:gnmt2,size=tiny,stage=pre", "zoo:gnmt4,size=tiny,stage=pre",
    "zoo:transformer_nmt,size=tiny,stage=pre", "zoo:transformer_xl2,size=tiny,stage=pre",
    "zoo:transformer_xl2,size=small,stage=pre", "zoo:resnet50,size=tiny,stage=pre",
    "zoo:resnet50,size=small,stage=pre",
)
TRAIN_TOPOLOGIES = ("nvlink1", "nvlink4", "nvlink8")
# The families of the figures: none of their graphs is trained on.
HELD_OUT = ("bert_base", "gpt2_small", "wavenet_2x18", "wavenet_4x36", "amoebanet")
OPTIONS = ("seed", "updates", "imitation_steps")


def fusion_policy():
  """The go_fusion policy: the shipped go_hint policy (hint, no load state, hidden 64) plus the
  fusion head."""
  p = pretrain.small_policy("go_hint")
  p.fusion_head = True
  p.variant = "go_fusion"
  return p


def parse_arg(arg: str):
  """"" or "seed=N,updates=U,imitation_steps=S" -> {option: int}."""
  values = {}
  for opt in [a.strip() for a in (arg or "").split(",") if a.strip()]:
    key, _, value = opt.partition("=")
    if key not in OPTIONS or not value.isdigit() or (key != "seed" and int(value) < 1):
      raise ValueError(f"pretrain_fusion.py: bad option {opt!r} in {arg!r}; options: "
                       f"{', '.join(k + '=N' for k in OPTIONS)} (N >= 1 but seed)")
    values[key] = int(value)
  return values


def get_config(arg: str = ""):
  opts = parse_arg(arg)
  config = train_base.get_config()
  config.policy = fusion_policy()
  config.task = "joint3"
  config.graphs = TRAIN_GRAPHS
  config.topologies = TRAIN_TOPOLOGIES
  config.seed = opts.get("seed", 0)
  config.samples = 32
  config.graphs_per_update = 4
  config.updates_per_call = 5
  config.updates = 2000  # more than the wall-clock budget allows on a 2-core CPU
  config.max_seconds = 1200.0  # PPO
  config.epochs = 1
  config.learning_rate = 3e-4
  config.entropy_coef = 0.01
  config.checkpoint_every = 50
  config.keep_checkpoints = 3
  config.tensorboard = False
  config.imitation.enabled = True  # placement and priority from the teachers; fusion by PPO
  config.imitation.seed = config.seed
  config.imitation.steps = 400
  config.imitation.steps_per_call = 20
  config.imitation.graphs_per_step = 8
  config.imitation.max_seconds = 180.0
  if "updates" in opts or "imitation_steps" in opts:
    config.max_seconds = None
    config.imitation.max_seconds = None
    per = config.updates_per_call
    config.updates = max(per, opts.get("updates", config.updates) // per * per)
    steps = opts.get("imitation_steps", config.imitation.steps)
    config.imitation.steps = max(20, steps // 20 * 20)
    config.checkpoint_every = max(per, config.updates // 10 // per * per)
  return config
