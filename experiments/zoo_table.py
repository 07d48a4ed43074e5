r"""Model-zoo table: node/edge counts before and after XLA's optimization, build times, params.

For every zoo model (or `--models`) at `--size`, builds the training step's graph with the HLO
front end at each stage, each in a fresh worker process (so one model's compile does not slow
the next and peak memory is its own), and reports nodes, edges, parameters, GFLOPs per step and
the build wall time split into trace+lower(+compile) and HLO parse. Prints a table, writes JSON.

  python -m experiments.zoo_table                         # all models, default sizes, pre + post
  python -m experiments.zoo_table --models=gnmt8 --stages=pre
"""

import multiprocessing
import os
import platform
import time

from absl import app, flags, logging

from simulator import fileio
from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_list("models", [], "zoo models (default: all)")
flags.DEFINE_enum("size", "default", ["default", "small", "tiny"], "zoo size")
flags.DEFINE_list("stages", ["pre", "post"], "front-end stages (pre, post)")
flags.DEFINE_integer("timeout", 900, "seconds allowed per cell", lower_bound=1)
flags.DEFINE_string("out", "results/zoo_table.json", "JSON output path")


def _worker(model, size, stage, queue):
  try:
    import jax
    import numpy as np
    from simulator import zoo
    from simulator.frontends import hlo
    t0 = time.perf_counter()
    z = zoo.build(model, size)
    args = z.abstract_args()
    params = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(args[0]))
    text = hlo.lower_hlo_text(z.step, *args, stage=stage)
    t1 = time.perf_counter()
    g = hlo.hlo_to_graph(text, f"{model}/{stage}").graph
    t2 = time.perf_counter()
    queue.put(dict(model=model, size=size, stage=stage, nodes=g.num_nodes, edges=g.num_edges,
                   params=params, gflops=float(g.flops.sum()) / 1e9,
                   lower_s=t1 - t0, parse_s=t2 - t1, build_s=t2 - t0))
  except Exception as e:  # reported with the cell's name
    queue.put({"model": model, "stage": stage, "error": f"{type(e).__name__}: {e}"})


def run_cell(model, size, stage, timeout):
  ctx = multiprocessing.get_context("spawn")
  queue = ctx.Queue()
  proc = ctx.Process(target=_worker, args=(model, size, stage, queue))
  proc.start()
  try:
    out = queue.get(timeout=timeout)
  except Exception:  # queue.Empty: the cell ran past its time
    out = {"model": model, "stage": stage, "error": f"timed out after {timeout} s"}
  proc.join(5)
  if proc.is_alive():
    proc.kill()
  return out


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
  rows, start = [], time.perf_counter()
  cells = [(m, s) for m in models for s in FLAGS.stages]
  for i, (model, stage) in enumerate(cells):
    row = run_cell(model, FLAGS.size, stage, FLAGS.timeout)
    rows.append(row)
    done = time.perf_counter() - start
    logging.info("[%d/%d] %s/%s: %s (elapsed %.0f s, ETA %.0f s)", i + 1, len(cells), model,
                 stage, row.get("error") or f"{row['nodes']} nodes in {row['build_s']:.1f} s",
                 done, done / (i + 1) * (len(cells) - i - 1))
  print(f"\n| model | stage | nodes | edges | params (M) | GFLOP/step | build s "
        f"(lower+parse) |\n|---|---|---:|---:|---:|---:|---:|")
  for r in rows:
    if "error" in r:
      print(f"| {r['model']} | {r['stage']} | error: {r['error']} |||||")
    else:
      print(f"| {r['model']} | {r['stage']} | {r['nodes']:,} | {r['edges']:,} | "
            f"{r['params'] / 1e6:.1f} | {r['gflops']:.1f} | {r['build_s']:.1f} "
            f"({r['lower_s']:.1f}+{r['parse_s']:.1f}) |")
  fileio.write_json(FLAGS.out, {"size": FLAGS.size, "machine": platform.processor() or
                                platform.machine(), "rows": rows})
  print(f"\nwrote {FLAGS.out}")
  cli.fail_if_every_cell_failed(rows, os.path.abspath(FLAGS.out))


def run():
  """Entry point (`python -m experiments.zoo_table`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
