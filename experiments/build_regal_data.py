r"""Builds REGAL's synthetic dataset or the zoo "XLA set" as CostGraphDef files + manifest.

Library: `go_jax.datasets` (recipe, filter, split and file format in docs/regal_data.md).
Resumable: run the same command again after an interruption and it continues where the
manifest stops; split sizes may grow between runs (a sample grows into the full set).

  # REGAL's 10,000 / 1,000 / 1,000 (hours; BRKGA 100 vs 5,000 evaluations per candidate)
  nice -n 10 python -m experiments.build_regal_data --out=data/regal
  # a small sample with a modest budget
  nice -n 10 python -m experiments.build_regal_data --out=data/regal_sample --train=40 \
      --valid=10 --test=10 --high_budget=2000
  # the XLA set: zoo models (tiny and small sizes, post-optimisation, <= 512 ops), by family
  python -m experiments.build_regal_data --set=xla --out=data/regal_xla --sizes=tiny
"""

import json

from absl import app, flags

from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_enum("set", "regal", ["regal", "xla"], "which dataset: REGAL's synthetic graphs or "
                  "the zoo XLA set")
flags.DEFINE_string("out", "data/regal", "dataset folder (resumed when it holds a manifest)")
flags.DEFINE_integer("train", 10000, "regal: training graphs")
flags.DEFINE_integer("valid", 1000, "regal: validation graphs")
flags.DEFINE_integer("test", 1000, "regal: test graphs")
flags.DEFINE_integer("seed", 0, "regal: recipe seed (candidate k is the same in every run)",
                     lower_bound=0)
flags.DEFINE_integer("min_nodes", 50, "regal: fewest ops per graph")
flags.DEFINE_integer("max_nodes", 200, "regal: most ops per graph")
flags.DEFINE_integer("max_candidates", None, "regal: stop after this many candidates "
                     "(default 50x the graphs asked for)", lower_bound=1)
flags.DEFINE_string("topology", "nvlink2@mem=0.5x", cli.topology_help(
    "Topology spec of the room-for-improvement filter (mem=Fx: F times each graph's "
    "single-device footprint)."))
flags.DEFINE_string("objective", "makespan", "objective BRKGA minimises in the filter")
flags.DEFINE_integer("low_budget", 100, "BRKGA evaluations of the filter's low run")
flags.DEFINE_integer("high_budget", 5000, "BRKGA evaluations of the filter's high run")
flags.DEFINE_float("min_improvement", 0.2, "relative makespan reduction low -> high that "
                   "counts as room for improvement")
flags.DEFINE_list("models", [], "xla: zoo models (default: all)")
flags.DEFINE_list("sizes", ["tiny", "small"], "xla: zoo sizes")
flags.DEFINE_integer("coarsen", 512, "xla: contract graphs to at most this many ops (0: no)",
                     lower_bound=0)
flags.DEFINE_list("valid_families", ["wavenet"], "xla: validation model families")
flags.DEFINE_list("test_families", ["inception", "transformer_xl"], "xla: test model families")
flags.DEFINE_bool("filter", False, "xla: apply the room-for-improvement filter too")


# Flags that only one --set reads, and the filter's flags (read by --set=xla only with
# --filter): given for a set that ignores them, they are refused rather than dropped silently.
REGAL_ONLY = ("train", "valid", "test", "seed", "min_nodes", "max_nodes", "max_candidates")
XLA_ONLY = ("models", "sizes", "coarsen", "valid_families", "test_families", "filter")
FILTER_FLAGS = ("topology", "objective", "low_budget", "high_budget", "min_improvement")


def check_set_flags() -> None:
  """app.UsageError naming the first flag given explicitly (absl's `.present`) that the chosen
  --set ignores."""
  ignored = XLA_ONLY if FLAGS.set == "regal" else REGAL_ONLY
  for name in ignored:
    if FLAGS[name].present:
      raise app.UsageError(f"--{name} does not apply to --set={FLAGS.set} (it is a "
                           f"{'xla' if FLAGS.set == 'regal' else 'regal'} option)")
  if FLAGS.set == "xla" and not FLAGS.filter:
    for name in FILTER_FLAGS:
      if FLAGS[name].present:
        raise app.UsageError(f"--{name} is a filter option, which --set=xla reads only with "
                             f"--filter")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  check_set_flags()
  from go_jax import datasets  # pylint: disable=g-import-not-at-top
  filt = dict(topology=FLAGS.topology, objective=FLAGS.objective,
              low_budget=FLAGS.low_budget, high_budget=FLAGS.high_budget,
              min_improvement=FLAGS.min_improvement)
  if FLAGS.set == "regal":
    options = dict(train=FLAGS.train, valid=FLAGS.valid, test=FLAGS.test, seed=FLAGS.seed,
                   min_nodes=FLAGS.min_nodes, max_nodes=FLAGS.max_nodes,
                   max_candidates=FLAGS.max_candidates, **filt)
    check, build = datasets.check_regal_options, datasets.build_regal_dataset
  else:
    options = dict(models=FLAGS.models or None, sizes=FLAGS.sizes,
                   coarsen=FLAGS.coarsen or None, valid_families=FLAGS.valid_families,
                   test_families=FLAGS.test_families, filter=FLAGS.filter, **filt)
    check, build = datasets.check_xla_options, datasets.build_xla_dataset
  check(**options)  # bad options write nothing, not even the folder (a rerun must not differ)
  out = cli.check_out(FLAGS.out)
  manifest = build(out, **options)
  figures = datasets.acceptance(manifest)
  print(json.dumps(figures, indent=1))
  print(f"wrote {out}/manifest.json")
  if not figures["kept"]:  # a folder no training can use: say so in the exit status
    raise app.UsageError(f"no graph kept of {figures['candidates']} candidates (rejected: "
                         f"{figures['rejected']}); loosen the filter options")


def run():
  """Console-script style entry point."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
