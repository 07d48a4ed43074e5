"""The cells of the model-zoo table (experiments/zoo_table.py): one (model, front-end stage)
graph built in a fresh worker process, and the resumable loop over them. Apart from the
launcher, which defines flags, so that tests import it."""

import multiprocessing
import platform
import time

from absl import logging

from experiments import cli, cli_tables
from simulator import fileio


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


def run_cell(model, size, stage, timeout, worker=_worker):
  """The row of one cell, built by `worker` in a fresh process: an error row when the worker
  fails, dies (the signal: SIGKILL is most often the out-of-memory killer) or runs past
  `timeout` seconds; Ctrl-C ends the worker at once and goes on."""
  ctx = multiprocessing.get_context("spawn")
  queue = ctx.Queue()
  proc = ctx.Process(target=worker, args=(model, size, stage, queue))
  proc.start()
  out = cli_tables.worker_result(proc, queue, timeout)  # death and timeout: an error row
  if set(out) == {"error"}:
    out = {"model": model, "stage": stage, **out}
  return out


LAUNCHER = "zoo_table"


# The numbers of a cell that built (zoo_table prints them).
NUMBERS = ("nodes", "edges", "params", "gflops", "build_s", "lower_s", "parse_s")


def check_cells(cells, path) -> None:
  """Raises ValueError naming `path`, the cell and the field where a stored cell (one the run
  resumes, or prints) is not the table's: an object with model and stage, and either an error
  or every number of the table (a hand-edited or truncated file)."""
  for key, c in cells.items():
    where = f"{path}: cell {key!r}"
    if not isinstance(c, dict):
      raise ValueError(f"{where}: not an object (a {type(c).__name__})")
    for field in ("model", "stage") + (("error",) if "error" in c else ()):
      if not isinstance(c.get(field), str):
        raise ValueError(f"{where}: field {field!r} missing or not a string")
    if "error" in c:
      continue
    for field in NUMBERS:
      v = c.get(field)
      if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{where}: field {field!r} missing or not a number; move the file "
                         "away or delete the cell to rebuild it")


def run_table(models, size, stages, out, timeout, cell=run_cell, log=logging.info):
  """Every (model, stage) cell not already in `out` without an error, in a fresh worker each
  (`cell`; its row under "cells" as "model/stage"); `out` is rewritten atomically after each
  cell, so an interrupted run resumes there. Returns the rows of the cells asked for, in order;
  the file keeps other models' rows.

  Raises:
    ValueError: `out` is not this launcher's, or was made at another --size, or a stored
      cell is not the table's (`check_cells`).
  """
  settings = {"size": size}
  store = cli.load_resumable(out, LAUNCHER, settings)
  cells = dict(store.get("cells", {}))
  check_cells(cells, out)
  finished = lambda m, s: f"{m}/{s}" in cells and "error" not in cells[f"{m}/{s}"]
  todo = [(m, s) for m in models for s in stages if not finished(m, s)]
  done_before = len(models) * len(stages) - len(todo)
  if done_before:
    log("%d of %d cells resumed from %s" % (done_before, len(models) * len(stages), out))
  start = time.perf_counter()
  for i, (model, stage) in enumerate(todo):
    row = cell(model, size, stage, timeout)
    cells[f"{model}/{stage}"] = row
    fileio.write_json(out, {"launcher": LAUNCHER, "settings": settings, "size": size,
                            "machine": platform.processor() or platform.machine(),
                            "cells": cells})
    done = time.perf_counter() - start
    log("[%d/%d] %s/%s: %s (elapsed %.0f s, ETA %.0f s)" % (
        i + 1, len(todo), model, stage,
        row.get("error") or f"{row['nodes']} nodes in {row['build_s']:.1f} s",
        done, done / (i + 1) * (len(todo) - i - 1)))
  return [cells[f"{m}/{s}"] for m in models for s in stages]
