r"""The four learned placers at equal search time (issue 14, part 3).

  python -m experiments.learned_placers --config=experiments/configs/learned_placers.py \
      --out=results/learned_placers
  python -m experiments.learned_placers --config=experiments/configs/learned_placers.py:quick \
      --out=results/learned_placers_quick --config.shard=0/2 &     # two processes sharing
  python -m experiments.learned_placers --config=experiments/configs/learned_placers.py:quick \
      --out=results/learned_placers_quick --config.shard=1/2       # one folder

GO (the paper's, no hint), GDP, Placeto and HDP, each from its shipped checkpoint (HDP trains
per graph from scratch, as in its paper) and given the same wall-clock search time, against the
classic methods HEFT, m-SCT, METIS and BRKGA with 5,000 evaluations (the reference is HEFT).
The objective after 30, 120 and 600 s is read from one 600 s run per learned method (its
anytime curve); loading, compiling and the zero-shot pass count toward the time, and every
cell starts with cold JAX caches.

Graphs (`GRAPHS`): the transfer benchmark's held-out graphs (experiments/configs/pretrain.py:
PipeDream VGG-16, ResNet-50 and ResNet-101, zoo BERT and WaveNet) and the families the Placeto
paper used (NMT: PipeDream GNMT-large; Inception: PipeDream Inception-v3; NASNet: PipeDream
NASNet-A large), plus one random layered DAG. (The zoo's GNMT-4 at its default size is no
instance: one op group of it, coarsened to 512 ops, needs 33.9 GB of temporaries, more than a
32 GB V100 holds, so every placement is out of memory.) `seen` marks a graph a method's
checkpoint trained on (the same model, at any coarsening): GO and GDP trained on GNMT-large,
Placeto on Inception-v3 and ResNet-50; the tables star those cells and the Placeto claim skips
them. Topologies: 2, 4 and 8 NVLink V100s with their full memory and with 0.6x of the graph's
single-device footprint per device.

The full grid is 9 graphs x 6 topologies x 8 methods, about 36 hours of one core (54 instances x
4 learned methods x 600 s, a cluster's job: shard it over processes with --config.shard).
Subsets run on the 2-core CPU machine for BENCHMARKS.md:
- "quick": 5 graphs, one per family, on nvlink2, nvlink4 at 0.6x memory and nvlink8; 30 and
  120 s;
- "heldout": the same settings on more held-out graphs (PipeDream VGG-16 and ResNet-50, which
  with quick's Inception-v3 and ResNet-101 make up the transfer benchmark's
  `pretrain.HELD_OUT`, and zoo WaveNet);
- "long": the 600 s companion (NASNet-A large and ResNet-101 on nvlink4 at 0.6x memory);
- "tiny": a CI-sized run (two small graphs, nvlink2, a few seconds per method).
"""

import ml_collections

from experiments.configs import pretrain, pretrain_placeto

FAMILIES = {
    "pipedream:gnmt_large": "NMT",
    "pipedream:resnet50": "ResNet",
    "pipedream:inception_v3": "Inception",
    "pipedream:nasnetalarge,coarsen=256": "NASNet",
    "pipedream:resnet101": "ResNet",
    "pipedream:vgg16": "VGG",
    "zoo:bert_base,coarsen=512": "Transformer",
    "zoo:wavenet_2x18,coarsen=512": "WaveNet",
    "layered:n=200,width=16,seed=101": "synthetic",
}
GRAPHS = tuple(FAMILIES)
TOPOLOGIES = ("nvlink2", "nvlink4", "nvlink8",
              "nvlink2@mem=0.6x", "nvlink4@mem=0.6x", "nvlink8@mem=0.6x")
QUICK_GRAPHS = ("pipedream:gnmt_large", "pipedream:inception_v3",
                "pipedream:nasnetalarge,coarsen=256", "pipedream:resnet101",
                "zoo:bert_base,coarsen=512")
QUICK_TOPOLOGIES = ("nvlink2", "nvlink4@mem=0.6x", "nvlink8")
LONG_GRAPHS = ("pipedream:nasnetalarge,coarsen=256", "pipedream:resnet101")
LONG_TOPOLOGIES = ("nvlink4@mem=0.6x",)
# Held-out graphs that QUICK_GRAPHS leaves out: the rest of pretrain.HELD_OUT, and WaveNet.
HELDOUT_GRAPHS = ("pipedream:vgg16", "pipedream:resnet50", "zoo:wavenet_2x18,coarsen=512")
CLASSIC = ("heft", "m_sct", "metis", "brkga")
LEARNED = ("go", "gdp", "placeto", "hdp")


def _model(spec: str) -> str:
  """A graph spec without its coarsening: the model it is built from."""
  return ",".join(p for p in spec.split(",") if not p.startswith("coarsen="))


def seen(graphs, trained) -> tuple:
  """The `graphs` whose model is among the `trained` specs."""
  models = {_model(s) for s in trained}
  return tuple(g for g in graphs if _model(g) in models)


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  arg = (arg or "").strip()
  if arg not in ("", "quick", "long", "heldout", "tiny"):
    raise ValueError(f"learned_placers.py: unknown argument {arg!r}; give '', 'quick', "
                     "'long', 'heldout' or 'tiny'")
  c = ml_collections.ConfigDict()
  c.graphs = GRAPHS
  c.topologies = TOPOLOGIES
  c.seconds = (30.0, 120.0, 600.0)
  if arg == "quick":
    c.graphs, c.topologies, c.seconds = QUICK_GRAPHS, QUICK_TOPOLOGIES, (30.0, 120.0)
  if arg == "heldout":
    c.graphs, c.topologies, c.seconds = HELDOUT_GRAPHS, QUICK_TOPOLOGIES, (30.0, 120.0)
  if arg == "long":
    c.graphs, c.topologies = LONG_GRAPHS, LONG_TOPOLOGIES
  c.families = {g: FAMILIES[g] for g in c.graphs}
  c.classic = CLASSIC
  c.learned = LEARNED
  c.reference = "heft"
  c.budgets = {"brkga": 5000}
  c.method_options = {}
  go_seen = seen(c.graphs, pretrain.TRAIN_GRAPHS)
  c.seen = {"go": go_seen, "gdp": go_seen,
            "placeto": seen(c.graphs, pretrain_placeto.TRAIN_GRAPHS)}
  c.objective = "makespan"
  c.seed = 0  # an integer in [0, methods.MAX_SEED], checked before the first cell
  c.samples = ml_collections.config_dict.placeholder(int)  # None: each method's K
  c.within = 0.05  # "time to within 5% of the final result"
  c.compare_at = 120.0  # GO against Placeto and HDP after this many seconds
  c.shard = "0/1"  # "i/n": this process runs cells i, i + n, ... (several share one --out)
  c.cold_start = True  # clear JAX's caches before every cell
  c.plots = True
  c.fail_fast = False
  if arg == "tiny":
    c.graphs = ("layered:n=24,width=4,seed=100", "series_parallel:n=20,seed=101")
    c.families = {c.graphs[0]: "synthetic", c.graphs[1]: "synthetic"}
    c.topologies = ("nvlink2",)
    c.classic = ("heft", "random")
    c.learned = ("placeto", "hdp")
    c.seen, c.budgets = {}, {}
    c.seconds = (2.0, 4.0)
    c.compare_at = 4.0
    c.cold_start = False
    c.method_options = {"placeto": {"samples": 4}, "hdp": {"samples": 4}}
  return c
