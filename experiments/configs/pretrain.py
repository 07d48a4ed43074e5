"""Pretraining of GO policies for transfer (issue 11): the shipped checkpoints and the sweep rows.

  go-jax-train --config=experiments/configs/pretrain.py:go --workdir=runs/pretrain/go \\
      --export=go --export_dir=go_jax/pretrained --export_to_package   # shipping it
  go-jax-train --config=experiments/configs/pretrain.py:no_gnn,seed=1 --workdir=runs/abl/no_gnn_1
  go-jax-train --config=experiments/configs/pretrain.py:go,updates=800,imitation_steps=600 ...

The argument names the row (`ROWS`, go_jax/transfer_rows.py) and optionally a seed ("go,seed=2") and
a fixed step budget in place of the wall-clock one ("updates=U,imitation_steps=S"):
"go" (default: the paper's GO with go-jax's device-load state, no hint), "gdp" (placement only,
no superposition), "go_hint" (GO with the best list scheduler's placement as a hint) and the
ablations of "go" without GNN, attention, segment recurrence, superposition, load state or
imitation. Every row trains for the same wall-clock budget on the same instances with the same
seed: teachers + behaviour cloning (`imitation.max_seconds`, go_jax/training/imitation.py)
then PPO (`max_seconds`); about 30 minutes in all on the 2-core CPU.

Training instances: every graph of `TRAIN_GRAPHS` on every topology of `TRAIN_TOPOLOGIES`:
synthetic families at several sizes, PipeDream and Piper profiles, model-zoo graphs (coarsened
to at most 512 ops), on 2-8 devices, one of them multi-host, with 0.4x-1.0x of the graph's
single-device footprint per device. Every training graph has at most 512 ops, so the whole set
pads to one 512-node bucket. Held out for evaluation (experiments/configs/transfer.py, never
trained on): `HELD_OUT` (PipeDream VGG-16, ResNet-50, Inception-v3, ResNet-101) and
`HELD_OUT_OTHER` (families absent from training). Recipes are chosen on `VALIDATION`, a third
set that is neither.
"""

from experiments.configs import train_base
from go_jax import policies, transfer

ROWS = transfer.ROWS  # row -> (policy variant, hint, task)
TRAIN_GRAPHS = (
    # PipeDream profiles (layer level)
    "pipedream:alexnet", "pipedream:gnmt", "pipedream:gnmt_large", "pipedream:resnet18",
    "pipedream:squeezenet1_0", "pipedream:resnext50", "pipedream:densenet121,coarsen=512",
    "pipedream:nasnetamobile,coarsen=512",
    # Piper profiles
    "piper:gnmt", "piper:resnet",
    # synthetic families at several sizes
    "layered:n=100,width=8,seed=11", "layered:n=300,width=16,seed=3",
    "layered:n=500,width=32,seed=13", "regal:n=120,seed=14", "regal:n=300,seed=3",
    "regal:n=500,seed=15", "series_parallel:n=100,seed=16", "series_parallel:n=300,seed=3",
    "series_parallel:n=500,seed=17", "chain:n=64,seed=18",
    # model zoo (operator level, through the HLO front end), coarsened to the bucket
    "zoo:gnmt2,coarsen=512", "zoo:transformer_nmt,coarsen=512",
    "zoo:transformer_xl2,coarsen=512",
)
TRAIN_TOPOLOGIES = ("nvlink2@mem=0.8x", "nvlink4@mem=0.6x", "nvlink4@mem=1.0x",
                    "nvlink8@mem=0.6x", "nvlink8@mem=0.4x", "pcie4@mem=0.8x",
                    "v100_2x4_ib@mem=0.5x")
HELD_OUT = ("pipedream:vgg16", "pipedream:resnet50", "pipedream:inception_v3",
            "pipedream:resnet101")
# Models none of whose kind is trained on (no BERT, GPT-2, WaveNet or AmoebaNet above)
HELD_OUT_OTHER = ("zoo:bert_base,coarsen=512", "zoo:gpt2_small,coarsen=512",
                  "zoo:wavenet_2x18,coarsen=512", "zoo:amoebanet,coarsen=512")
# The validation set ("v2" in BENCHMARKS.md): where recipes and decode settings are chosen,
# so that the held-out sets above are only ever measured. Training families at new sizes and
# seeds, and PipeDream/zoo graphs that are neither trained on nor held out; zero-shot, ratios to
# the best list scheduler (experiments/configs/ablation.py:<budget>,valid).
VALIDATION = ("layered:n=200,width=12,seed=201", "layered:n=600,width=32,seed=202",
              "regal:n=200,seed=203", "regal:n=600,seed=204", "series_parallel:n=200,seed=205",
              "series_parallel:n=600,seed=206", "chain:n=128,seed=207",
              "pipedream:resnext101,coarsen=512", "pipedream:nasnetalarge,coarsen=512",
              "zoo:transformer_xl8,coarsen=512")
VALIDATION_BASELINES = ("heft", "m_sct", "m_etf")


def small_policy(row: str):
  """The policy of a row at the shipped size (hidden 64: about 0.2M parameters)."""
  if row not in ROWS:
    raise ValueError(f"pretrain.py: unknown row {row!r}; choose one of {list(ROWS)} (e.g. "
                     "--config=experiments/configs/pretrain.py:no_gnn)")
  variant, hint, _ = ROWS[row]
  p = policies.variant_config(variant)
  p.variant = row
  p.hint = hint
  p.hidden = 64
  p.gnn_layers = 2
  p.attention_layers = 2
  p.heads = 4
  p.segment_len = 64
  return p


# Options of "row,opt=value,...": the seed, and a fixed step budget in place of the wall-clock
# one (the ablation table, experiments/configs/ablation.py: every row gets the same number of
# cloning steps and PPO updates whatever the machine's load).
# "self_imitation=C" sets PPO's self-imitation weight (go_jax/training/ppo.py; a float).
# "comm=1" turns on the load state's copy term (policy.load_comm, go_jax/policies/load.py).
# "group_copies=1" counts a colocation group's copies once both ends are decided, and
# "greedy_block=N" sets the greedy decode's block (policy.load_group_copies / load_greedy_block).
# "time=1" turns on the load state's time term (policy.load_time, go_jax/policies/load_time.py).
# "rank=1" makes the policy walk HEFT's upward-rank order (policy.decode_order "rank",
# go_jax/policies/features.py) instead of Kahn's topological order.
# "on_policy=B" decodes a share B of the cloning's instances against the policy's own loads
# (imitation.on_policy, go_jax/training/imitation.py; a float in [0, 1]).
# "block=N" sets the load state's block (policy.load_block, go_jax/policies/load.py) for
# training and sampling: 1 makes teacher forcing see every earlier decision, not only those of
# earlier blocks of 8.
# "prefer_heft=1" clones the list schedulers with HEFT's solution as the target wherever it fits
# memory, m-ETF's or m-SCT's elsewhere (imitation.teachers / imitation.prefer).
# "smoothing=F" sets imitation.label_smoothing; "margin=F" the greedy decode's memory margin
# (policy.load_margin).
OPTIONS = ("seed", "updates", "imitation_steps", "self_imitation", "comm", "group_copies",
           "greedy_block", "time", "rank", "on_policy", "block", "prefer_heft", "smoothing",
           "margin")
FLOAT_OPTIONS = ("self_imitation", "on_policy", "smoothing", "margin")


def _number(key: str, value: str):
  """The option's value (float for FLOAT_OPTIONS, else int), or None where it is not one."""
  try:
    return float(value) if key in FLOAT_OPTIONS else int(value)
  except ValueError:
    return None


def parse_arg(arg: str):
  """"row" or "row,seed=N,updates=U,imitation_steps=S,self_imitation=C,comm=1" -> (row, {option:
  number})."""
  row, *opts = [a.strip() for a in (arg or "go").split(",")]
  values = {}
  for opt in opts:
    key, _, value = opt.partition("=")
    if key not in OPTIONS or _number(key, value) is None:
      raise ValueError(f"pretrain.py: bad option {opt!r} in {arg!r}; options: "
                       f"{', '.join(k + '=N' for k in OPTIONS)} (e.g. "
                       "--config=experiments/configs/pretrain.py:go,seed=1)")
    values[key] = _number(key, value)
  for key in ("updates", "imitation_steps"):
    if key in values and values[key] < 1:
      raise ValueError(f"pretrain.py: {key} must be >= 1 in {arg!r}")
  for key in ("comm", "group_copies", "time", "rank", "prefer_heft"):
    if values.get(key, 0) not in (0, 1):
      raise ValueError(f"pretrain.py: {key} must be 0 or 1 in {arg!r}")
  if values.get("greedy_block", 0) < 0:
    raise ValueError(f"pretrain.py: greedy_block must be >= 0 in {arg!r}")
  if values.get("block", 1) < 1:
    raise ValueError(f"pretrain.py: block must be >= 1 in {arg!r}")
  if not 0.0 <= values.get("smoothing", 0.0) < 1.0:
    raise ValueError(f"pretrain.py: smoothing must be in [0, 1) in {arg!r}")
  if not 0.0 <= values.get("margin", 0.0) < 1.0:
    raise ValueError(f"pretrain.py: margin must be in [0, 1) in {arg!r}")
  return row, values


def get_config(arg: str = "go"):
  row, opts = parse_arg(arg)
  seed = opts.get("seed", 0)
  config = train_base.get_config()
  config.policy = small_policy(row)
  config.task = ROWS[row][2]
  config.graphs = TRAIN_GRAPHS
  config.topologies = TRAIN_TOPOLOGIES
  config.seed = seed
  config.samples = 64
  config.graphs_per_update = 4
  config.updates = 5000  # about what the wall-clock budget below allows on a 2-core CPU
  config.updates_per_call = 10
  config.epochs = 1
  config.max_seconds = 1080.0  # PPO
  config.learning_rate = 3e-4
  config.entropy_coef = 0.01
  config.checkpoint_every = 200
  config.keep_checkpoints = 40  # the learning curves evaluate them (experiments/learning_curves.py)
  if "self_imitation" in opts:
    config.self_imitation_coef = opts["self_imitation"]
  if opts.get("comm"):
    config.policy.load_comm = True
  if opts.get("group_copies"):
    config.policy.load_group_copies = True
  if opts.get("time"):
    config.policy.load_time = True
  if opts.get("rank"):
    config.policy.decode_order = "rank"
  if "greedy_block" in opts:
    config.policy.load_greedy_block = opts["greedy_block"]
  config.imitation.enabled = row not in transfer.NO_IMITATION
  config.imitation.seed = seed
  config.imitation.steps = 3000  # about what the wall-clock budget below allows on a 2-core CPU
  config.imitation.steps_per_call = 20
  config.imitation.graphs_per_step = 8
  config.imitation.max_seconds = 420.0
  if "block" in opts:
    config.policy.load_block = opts["block"]
  if opts.get("prefer_heft"):
    config.imitation.teachers = ("heft", "m_etf", "m_sct")
    config.imitation.prefer = "heft"
  if "smoothing" in opts:
    config.imitation.label_smoothing = opts["smoothing"]
  if "margin" in opts:
    config.policy.load_margin = opts["margin"]
  if "on_policy" in opts:
    if not 0.0 <= opts["on_policy"] <= 1.0:
      raise ValueError(f"pretrain.py: on_policy must be in [0, 1] in {arg!r}")
    config.imitation.on_policy = opts["on_policy"]
  if "updates" in opts or "imitation_steps" in opts:
    # A step budget: no wall-clock caps; a row without imitation gets the PPO updates that
    # the cloning steps' time buys (a cloning step costs about half a PPO update here:
    # 2340 steps in 400 s vs 3120 updates in 1080 s, BENCHMARKS.md).
    per_call = config.updates_per_call
    config.updates = opts.get("updates", config.updates)
    config.imitation.steps = opts.get("imitation_steps", config.imitation.steps)
    config.imitation.steps -= config.imitation.steps % config.imitation.steps_per_call
    config.imitation.steps = max(config.imitation.steps, config.imitation.steps_per_call)
    config.max_seconds = None
    config.imitation.max_seconds = None
    if not config.imitation.enabled and row != "go_hint":
      config.updates += config.imitation.steps // 2
    config.updates -= config.updates % per_call
    config.updates = max(config.updates, per_call)
    config.checkpoint_every = max(per_call, config.updates // 20 // per_call * per_call)
    config.keep_checkpoints = 2
  elif not config.imitation.enabled and row != "go_hint":
    config.max_seconds += config.imitation.max_seconds  # the same wall-clock budget, all PPO
  return config
