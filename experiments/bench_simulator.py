r"""Benchmark: jitted `simulate` vs heap-based `reference_simulate` (the go-jax-bench-simulator).

For each graph size N (random layered DAG, about 2 predecessors per node) it times the
reference per placement, then the jitted simulator for each batch size B; every cell runs in a
fresh worker process so that compile time and peak host memory are that cell's own. Prints a
table and writes JSON (atomically).

  python -m experiments.bench_simulator                    # N in {100,1000,4000}, B in {1,256,1024}
  python -m experiments.bench_simulator --sizes=1000 --batches=1024 --profile
  python -m experiments.bench_simulator --sizes=1000 --batches=1024 --pin_core=0  # one core

With --pin_core every cell (the reference and `simulate` alike) runs pinned to that one CPU core
(`os.sched_setaffinity` in the worker before JAX starts, as `taskset -c` would), so the speedup
column is the single-core ratio of the two, measured in one run.
"""

import json
import multiprocessing
import os
import platform
import sys
import time

from absl import app, flags, logging

from simulator import fileio
from experiments import cli, cli_tables

FLAGS = flags.FLAGS
flags.DEFINE_list("sizes", ["100", "1000", "4000"], "graph sizes N (nodes)")
flags.DEFINE_list("batches", ["1", "256", "1024"], "batch sizes B (placements per call)")
flags.DEFINE_list("devices", ["1", "all"], "CPU device counts to shard each batch over "
                  "('all' = one per core; see simulator.runtime.configure_cpu_devices)")
flags.DEFINE_string("topology", "nvlink8", cli.topology_help(
    "Topology spec: a preset or a topology .json file (docs/topology.md), optionally "
    "@mem=VALUE."))
flags.DEFINE_string("graph", "layered:n={n},width={width},seed=0",
                    "graph spec template; {n} and {width} (= round(sqrt(n))) are filled in")
flags.DEFINE_integer("ref_samples", 20, "placements timed with the reference per size",
                     lower_bound=1)
flags.DEFINE_integer("repeats", 3, "timed runs per cell (the median is reported)",
                     lower_bound=1)
flags.DEFINE_bool("profile", False, "also print the top XLA ops of the largest cell")
flags.DEFINE_integer("pin_core", None, "run every cell pinned to this one CPU core (as "
                     "`taskset -c`), so that the speedup is a single-core ratio; needs "
                     "--devices=1")
flags.DEFINE_string("out", "results/bench_simulator.json", "JSON output path (an existing "
                    "file there must be an earlier bench_simulator result: it is replaced)")
LAUNCHER = "bench_simulator"


def check_own_out(path: str) -> None:
  """UsageError naming --out when `path` holds something other than a bench_simulator result
  (another launcher's results, any other file), which the run would overwrite. A file of an
  earlier version (no "launcher" field, but this launcher's "graph_template" and "rows") is
  one of its own."""
  if not os.path.exists(path):
    return
  try:
    with open(path, encoding="utf-8") as fh:
      old = json.load(fh)
  except (OSError, ValueError, RecursionError) as e:
    raise app.UsageError(f"--out={path}: exists and is not a readable results JSON "
                         f"({type(e).__name__}); move it away or use another --out") from e
  ours = isinstance(old, dict) and (old.get("launcher") == LAUNCHER or (
      "launcher" not in old and "graph_template" in old and "rows" in old))
  if not ours:
    raise app.UsageError(f"--out={path}: not written by {LAUNCHER}; use another --out")


def _worker(kind, n, batch, cfg, queue):
  """Runs one cell in a fresh process and puts its result dict on `queue`."""
  try:
    if cfg["pin_core"] is not None:  # before JAX starts: its thread pools see one core
      os.sched_setaffinity(0, {cfg["pin_core"]})
    from simulator import runtime
    runtime.configure_cpu_devices(cfg["devices"])
    from simulator import benchmark, topology_spec
    from simulator.sources import load_graph
    graph = load_graph(graph_spec(cfg["graph"], n))
    topo, _ = topology_spec.make_topology(cfg["topology"], graph)
    cells = {  # what a worker measures, by cell kind
        "reference": lambda: benchmark.time_reference(graph, topo, cfg["ref_samples"]),
        "simulate": lambda: benchmark.time_simulate(graph, topo, batch, cfg["repeats"]),
        "profile": lambda: {"top_ops": benchmark.profile_simulate(graph, topo, batch)},
    }
    out = cells[kind]()
    out.update(n=graph.num_nodes, edges=graph.num_edges, graph=graph.name,
               peak_rss_bytes=benchmark.peak_rss_bytes(), cpus=sorted(os.sched_getaffinity(0)))
    queue.put(out)
  except Exception as e:  # reported by the parent with the cell's name
    queue.put({"error": f"{type(e).__name__}: {e}"})


def run_cell(kind, n, batch=0, devices=1):
  ctx = multiprocessing.get_context("spawn")
  queue = ctx.Queue()
  cfg = {"graph": FLAGS.graph, "topology": FLAGS.topology, "ref_samples": FLAGS.ref_samples,
         "repeats": FLAGS.repeats, "devices": devices, "pin_core": FLAGS.pin_core}
  proc = ctx.Process(target=_worker, args=(kind, n, batch, cfg, queue))
  proc.start()
  out = cli_tables.worker_result(proc, queue)  # a dead worker is an error, Ctrl-C ends it
  if "error" in out:
    raise ValueError(f"{kind} cell N={n} B={batch} failed: {out['error']}")
  return out


def graph_spec(template: str, n: int) -> str:
  """The --graph template filled in for size n ({n}; {width} = max(4, round(sqrt(n))))."""
  return template.format(n=n, width=max(4, round(n ** 0.5)))


def check_template(template: str, sizes) -> None:
  """UsageError unless --graph is a template whose every size is a valid graph spec, and one
  that depends on {n} when several sizes are asked for (else every row is the same graph)."""
  from simulator import sources  # pylint: disable=g-import-not-at-top
  if len(set(sizes)) > 1 and "{n}" not in template:
    raise app.UsageError(f"--graph={template}: has no {{n}}, so every --sizes value would be "
                         "the same graph; put {n} in it or give one size")
  for n in sizes:
    try:
      spec = graph_spec(template, n)
    except (KeyError, IndexError, ValueError) as e:
      raise app.UsageError(f"--graph={template}: not a template of {{n}} and {{width}} "
                           f"({type(e).__name__}: {e})") from e
    try:
      sources.check_spec(spec)
    except ValueError as e:
      raise app.UsageError(f"--graph={template}: {cli.one_line(e)}") from e


def format_table(rows):
  head = ("N", "E", "B", "method", "devices", "placements/s", "node-commits/s", "speedup",
          "compile s", "peak RSS")
  lines = [" | ".join(head), " | ".join("---" for _ in head)]
  for r in rows:
    lines.append(" | ".join([
        str(r["n"]), str(r["edges"]), str(r.get("batch", 1)), r["method"],
        str(r.get("devices", 1)),
        f"{r['placements_per_s']:,.1f}", f"{r['node_commits_per_s']:,.0f}",
        f"{r['speedup']:.1f}x" if "speedup" in r else "1.0x",
        f"{r['compile_s']:.2f}" if "compile_s" in r else "-",
        f"{r['peak_rss_bytes'] / 2**20:,.0f} MiB"]))
  return "\n".join(lines)


def _positive_ints(flag, values):
  """The integers of a list flag; UsageError naming the flag unless each is >= 1."""
  try:
    out = [int(v) for v in values]
  except ValueError as e:
    raise app.UsageError(f"--{flag}={','.join(values)}: not a list of integers") from e
  if not out or min(out) < 1:
    raise app.UsageError(f"--{flag}={','.join(values)}: each value must be >= 1")
  return out


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  cli.check_out(FLAGS.out, is_file=True)
  check_own_out(FLAGS.out)
  sizes = _positive_ints("sizes", FLAGS.sizes)
  batches = _positive_ints("batches", FLAGS.batches)
  cli_tables.refuse_repeats("sizes", sizes)
  cli_tables.refuse_repeats("batches", batches)
  check_template(FLAGS.graph, sizes)
  cores = os.cpu_count() or 1
  if FLAGS.pin_core is not None:
    if FLAGS.pin_core not in os.sched_getaffinity(0):
      raise app.UsageError(f"--pin_core={FLAGS.pin_core}: not a core this process may run on "
                           f"({sorted(os.sched_getaffinity(0))})")
    cores = 1
  devices = sorted(set(_positive_ints("devices", [str(cores) if v == "all" else v
                                                   for v in FLAGS.devices])))
  if FLAGS.pin_core is not None and devices != [1]:
    raise app.UsageError(f"--pin_core runs on one core: --devices={','.join(FLAGS.devices)} "
                         "must be 1 (or all)")
  from simulator import topology_spec  # pylint: disable=g-import-not-at-top
  try:
    topology_spec.parse_topology(FLAGS.topology)  # a bad spec or file: before any cell
  except ValueError as e:
    raise app.UsageError(f"--topology={FLAGS.topology}: {e}") from e
  cells = len(sizes) * (1 + len(batches) * len(devices))
  rows, t_start, done = [], time.time(), 0
  for n in sizes:
    ref = run_cell("reference", n)
    ref["method"] = "reference"
    rows.append(ref)
    done += 1
    for b in batches:
      for dev in devices:
        cell = run_cell("simulate", n, b, dev)
        cell.update(method="simulate", devices=dev,
                    speedup=cell["placements_per_s"] / ref["placements_per_s"])
        rows.append(cell)
        done += 1
        elapsed = time.time() - t_start
        logging.info("[%d/%d] N=%d B=%d devices=%d: %.1f placements/s (%.1fx reference), "
                     "compile %.2f s; elapsed %.0f s, ETA %.0f s", done, cells, n, b, dev,
                     cell["placements_per_s"], cell["speedup"], cell["compile_s"], elapsed,
                     elapsed / done * (cells - done))
  import jax
  payload = {
      "launcher": LAUNCHER, "command": " ".join(sys.argv),
      "machine": {"platform": platform.platform(), "processor": platform.processor(),
                  "cpu_count": os.cpu_count(), "jax": jax.__version__,
                  "devices": [str(d) for d in jax.devices()],
                  "device_kind": jax.devices()[0].device_kind},
      "topology": FLAGS.topology, "graph_template": FLAGS.graph, "pin_core": FLAGS.pin_core,
      "rows": [{k: v for k, v in r.items() if k != "makespans"} for r in rows]}
  if FLAGS.profile:
    prof = run_cell("profile", max(sizes), max(batches), 1)
    payload["profile"] = prof["top_ops"]
    print(f"\ntop XLA ops, N={max(sizes)} B={max(batches)}:")
    for p in prof["top_ops"]:
      print(f"  {p['ms']:9.1f} ms  {p['calls']:6d} calls  {p['op']}")
  print()
  print(format_table(rows))
  if FLAGS.pin_core is not None:
    print(f"\nall cells pinned to core {FLAGS.pin_core}; single-core ratio simulate/reference: " +
          ", ".join(f"N={r['n']} B={r['batch']}: {r['speedup']:.1f}x"
                    for r in rows if r["method"] == "simulate"))
  fileio.write_json(FLAGS.out, payload, indent=1)
  print(f"\nwrote {FLAGS.out}")


def run():
  """Console-script entry point (`go-jax-bench-simulator`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
