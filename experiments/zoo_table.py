r"""Model-zoo table: node/edge counts before and after XLA's optimization, build times, params.

For every zoo model (or `--models`) at `--size`, builds the training step's graph with the HLO
front end at each stage, each in a fresh worker process (so one model's compile does not slow
the next and peak memory is its own), and reports nodes, edges, parameters, GFLOPs per step and
the build wall time split into trace+lower(+compile) and HLO parse. Prints a table, writes JSON
after every cell; a rerun with the same --out and --size resumes (only missing and failed cells
run; other models' rows in the file are kept). Another launcher's file, or a stored cell that is
not the table's (not an object, a field missing), is refused before any cell runs.

  python -m experiments.zoo_table                         # all models, default sizes, pre + post
  python -m experiments.zoo_table --models=gnmt8 --stages=pre
"""

import os

from absl import app, flags

from experiments import cli, zoo_cells

FLAGS = flags.FLAGS
flags.DEFINE_list("models", [], "zoo models (default: all)")
flags.DEFINE_enum("size", "default", ["default", "small", "tiny"], "zoo size")
flags.DEFINE_list("stages", ["pre", "post"], "front-end stages (pre, post)")
flags.DEFINE_integer("timeout", 900, "seconds allowed per cell", lower_bound=1)
flags.DEFINE_string("out", "results/zoo_table.json", "JSON output path")




def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  cli.check_out(FLAGS.out, is_file=True)
  from simulator import zoo
  models = FLAGS.models or sorted(zoo.available())
  cli.check_zoo_models(models)
  bad = sorted(set(FLAGS.stages) - {"pre", "post"})
  if bad or not FLAGS.stages:
    raise app.UsageError(f"--stages={','.join(FLAGS.stages)}: give pre and/or post")
  for flag, values in (("models", models), ("stages", FLAGS.stages)):
    if len(set(values)) != len(values):
      raise app.UsageError(f"--{flag}={','.join(values)}: a value is given twice")
  try:  # its stored cells are checked before any cell runs
    rows = zoo_cells.run_table(models, FLAGS.size, FLAGS.stages, FLAGS.out, FLAGS.timeout)
  except ValueError as e:
    raise app.UsageError(cli.one_line(e)) from e
  print("\n| model | stage | nodes | edges | params (M) | GFLOP/step | build s "
        "(lower+parse) |\n|---|---|---:|---:|---:|---:|---:|")
  for r in rows:
    if "error" in r:
      print(f"| {r['model']} | {r['stage']} | error: {r['error']} |||||")
    else:
      print(f"| {r['model']} | {r['stage']} | {r['nodes']:,} | {r['edges']:,} | "
            f"{r['params'] / 1e6:.1f} | {r['gflops']:.1f} | {r['build_s']:.1f} "
            f"({r['lower_s']:.1f}+{r['parse_s']:.1f}) |")
  print(f"\nwrote {FLAGS.out}")
  cli.fail_if_every_cell_failed(rows, os.path.abspath(FLAGS.out))


def run():
  """Entry point (`python -m experiments.zoo_table`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
