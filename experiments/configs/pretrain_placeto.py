r"""Pretraining of Placeto (issue 14): the shipped `placeto` checkpoint.

  go-jax-train --config=experiments/configs/pretrain_placeto.py --workdir=runs/pretrain/placeto \
      --export=placeto --export_dir=go_jax/pretrained --export_to_package   # shipping it
  go-jax-train --config=experiments/configs/pretrain_placeto.py:seed=1,updates=400 ...
  go-jax-train --config=experiments/configs/pretrain_placeto.py:tiny --workdir=/tmp/p  # CI size

`algorithm = "placeto"` selects go_jax/placeto/trainer.py (REINFORCE with the paper's
intermediate rewards and per-step baseline; design.md section 7). One policy serves 2-8
devices (`max_devices` = 8): it is trained on 2, 4 and 8 NVLink V100s with their full memory and
on 4 with 0.6x the single-device footprint (every single-device placement, the episodes' start,
is then out of memory: the policy learns from the penalty).

Training graphs (`TRAIN_GRAPHS`), families as in the Placeto paper (NMT-, Inception- and
NASNet-like) plus ResNets and the synthetic families: the PipeDream training graphs of GNMT,
Inception-v3, NASNet-A mobile, ResNet-18 / 50 and SqueezeNet, and random layered and
series-parallel DAGs. Every graph is contracted to at most 256 ops (`,coarsen=256`: one padded
bucket for the simulator, whose exact whole-graph run time is each step's reward) and grouped
into 32 groups by the trainer.

Held out, never trained on (`HELD_OUT`), graphs of the same families: GNMT-large (NMT),
NASNet-A large (NASNet), ResNet-101 and ResNeXt-50 (ResNet), and layered / series-parallel
DAGs of other seeds. The Inception family has one PipeDream model (Inception-v3, trained on),
so it has no held-out member here.

REINFORCE settings: K = 8 episodes on G = 2 instances per update, learning rate 3e-3, discount
0.9 (returns weigh about the next ten moves). Measured on the shared 2-core CPU (issue 14):
with discount 1, learning rate 1e-3 and G = 4 the policy stayed near uniform for 400 updates,
and with discount 0.9 and 3e-3 but the paper's plain MLP head over device one-hots the episodes'
final objective did not improve in 600 updates; with the device-equivariant head of
go_jax/placeto/model.py and advantages normalised per instance (both changed at once) it did.
The shipped checkpoint: 2,670 updates in 769 s (max_seconds 780; about 13.5 min of wall clock
with loading and compiling), the sampled episodes' final objective over the lower bound
1.92 (mean of updates 1-250) -> 1.74 (updates 2501-2670), policy entropy 1.17 -> 0.61.
Zero-shot greedy episode against 90 s of fine-tuning (`finetune_seconds=90`) on nvlink4,
held-out graphs: GNMT-large 0.532 s vs 0.520 s (x1.02; HEFT 0.520 s), NASNet-A large
(coarsen=256) 0.512 s vs 0.447 s (x1.15; HEFT 0.536 s), layered n=200 seed 101 0.110 s vs
0.091 s (x1.21; HEFT 0.075 s).

The argument sets the seed and optionally a fixed update budget in place of the wall-clock one
("seed=1,updates=400"), or "tiny": a CI-sized run on two small synthetic graphs.
"""

import ml_collections

from go_jax.placeto import trainer

COARSE = ",coarsen=256"
SYNTHETIC_TRAIN = tuple(
    [f"layered:n={n},width={w},seed={s}" for s, (n, w) in enumerate(
        [(96, 8), (128, 8), (160, 12), (200, 16), (240, 16), (256, 24)])] +
    [f"series_parallel:n={n},seed={s}" for s, n in enumerate([96, 128, 160, 200, 240, 256])])
PIPEDREAM_TRAIN = tuple(f"pipedream:{m}{COARSE}" for m in (
    "gnmt", "inception_v3", "nasnetamobile", "resnet18", "resnet50", "squeezenet1_0"))
TRAIN_GRAPHS = PIPEDREAM_TRAIN + SYNTHETIC_TRAIN
TRAIN_TOPOLOGIES = ("nvlink2", "nvlink4", "nvlink8", "nvlink4@mem=0.6x")
HELD_OUT = tuple(
    [f"pipedream:{m}{COARSE}" for m in ("gnmt_large", "nasnetalarge", "resnet101",
                                        "resnext50")] +
    [f"layered:n={n},width=16,seed={s}" for s, n in ((100, 128), (101, 200), (102, 256))] +
    [f"series_parallel:n={n},seed={s}" for s, n in ((100, 128), (101, 200), (102, 256))])
OPTIONS = ("seed", "updates")


def parse_arg(arg: str):
  """"" or "seed=N,updates=U" -> {option: int}; "tiny" -> {"tiny": 1}."""
  if (arg or "").strip() == "tiny":
    return {"tiny": 1}
  values = {}
  for opt in [a.strip() for a in (arg or "").split(",") if a.strip()]:
    key, _, value = opt.partition("=")
    if key not in OPTIONS or not value.isdigit() or (key != "seed" and int(value) < 1):
      raise ValueError(f"pretrain_placeto.py: bad option {opt!r} in {arg!r}; options: "
                       f"{', '.join(k + '=N' for k in OPTIONS)} (N >= 1 but seed), or 'tiny'")
    values[key] = int(value)
  return values


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  opts = parse_arg(arg)
  config = trainer.default_config()
  config.graphs = TRAIN_GRAPHS
  config.topologies = TRAIN_TOPOLOGIES
  config.held_out = HELD_OUT
  config.objective = "makespan"
  config.groups = 32
  config.init = "single"
  config.seed = opts.get("seed", 0)
  config.samples = 8
  config.graphs_per_update = 2
  config.updates_per_call = 10
  config.updates = 10_000  # more than the wall-clock budget allows on a 2-core CPU
  config.max_seconds = 780.0  # 13 min of updates: ~15 min with loading and compiling
  config.learning_rate = 3e-3
  config.lr_schedule = "constant"
  config.entropy_coef = 0.01
  config.discount = 0.9
  config.checkpoint_every = 100
  config.keep_checkpoints = 2
  config.policy.hidden = 32
  config.policy.rounds = 3
  config.policy.max_devices = 8
  if "tiny" in opts:
    config.graphs = ("layered:n=24,width=4,seed=0", "series_parallel:n=24,seed=1")
    config.topologies = ("nvlink2",)
    config.held_out = ("layered:n=24,width=4,seed=100",)
    config.groups = 8
    config.samples = 4
    config.graphs_per_update = 2
    config.updates, config.updates_per_call, config.checkpoint_every = 4, 2, 2
    config.max_seconds = None
  elif "updates" in opts:
    config.max_seconds = None
    per = config.updates_per_call
    config.updates = max(per, opts["updates"] // per * per)
    config.checkpoint_every = max(per, config.updates // 10 // per * per)
  return config
