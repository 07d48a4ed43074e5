r"""Simulates one placement and priority of a graph on a device topology; prints and plots it.

The `go-jax-simulate` command. It runs both the jitted batched `simulator.simulate` and the plain
Python `simulator.reference_simulate` (which also returns the timeline), checks that their
makespans agree, prints a per-device table and writes `<out>/schedule.png` (Gantt chart and memory
over time) and `<out>/summary.json`. Graphs and topologies are named as in every launcher
(`simulator.sources.load_graph`, `simulator.topology_spec`).

Examples:
  go-jax-simulate
  go-jax-simulate --graph=pipedream:resnet50 --topology=nvlink8@mem=0.6x --placement=random
  go-jax-simulate --graph=resnet50 --topology=my_cluster.json --placement=heft
  go-jax-simulate --graph=my_models:small_graph --out=/tmp/run0   # my_models.py in this folder
  go-jax-simulate --graph=my_graph.npz --placement=npy:placement.npy --priority=topo \
      --mem_capacity=8e9 --out=/tmp/run1
"""

from __future__ import annotations

import os
from typing import Any, Dict, Sequence

import numpy as np
from absl import app, flags, logging

import simulator
from simulator import fileio, sources, topology_spec
from go_jax import placements, plotting, results
from experiments import cli

FLAGS = flags.FLAGS

DEFAULT_GRAPH = "layered:n=200,width=16,seed=0"
DEFAULT_OUT = "results/simulate"  # under the root of every launcher's output (results/...)
MAKESPAN_RTOL = 1e-5

flags.DEFINE_string("graph", DEFAULT_GRAPH,
                    "Graph: a source spec ('layered:n=1000,width=32,seed=0', 'pipedream:resnet50',"
                    " 'zoo:gnmt2,size=tiny', 'chain:n=50'), a CompGraph .npz file, a bare model "
                    "name (PipeDream, else model zoo) or 'package.module:function' returning a "
                    "CompGraph or a JAX program (fn, args). " + cli.GRAPH_IMPORT_HELP)
flags.DEFINE_string("topology", "nvlink4", cli.topology_help(
    "Topology spec: PRESET or a topology .json file (docs/topology.md), optionally @mem=VALUE, "
    "VALUE bytes per device or a multiple of the graph's single-device footprint "
    "('nvlink8@mem=0.6x')."))
flags.DEFINE_float("mem_capacity", None, "Per-device memory capacity in bytes, overriding the "
                   "topology's (e.g. 8e9; 'inf' for unbounded).", lower_bound=0.0)
flags.DEFINE_string("placement", "round_robin",
                    "Placement: a registered placement or joint method, one of "
                    f"{sorted(placements.placement_names())}, an (N,) int array saved with "
                    "numpy.save ('npy:<path>' or '<path>.npy'), or one device per op inline "
                    "('0,1,1,0').")
flags.DEFINE_string("priority", "critical_path",
                    f"Priority (higher runs first): one of {sorted(placements.PRIORITIES)}, an "
                    "(N,) float array saved with numpy.save ('npy:<path>' or '<path>.npy'), or "
                    "one number per op inline ('3,2,1').")
flags.DEFINE_integer("seed", 0, "Seed of the random strategies.", lower_bound=0)
flags.DEFINE_string("out", DEFAULT_OUT, "Folder for schedule.png and summary.json.")


# ------------------------------------------------------------------ inputs
def _as_flag_error(flag: str, fn, *args):
  """Runs fn(*args), turning a ValueError into a UsageError that names the flag at fault."""
  try:
    return fn(*args)
  except ValueError as e:
    logging.debug("--%s rejected", flag, exc_info=True)  # the full traceback at --v=1
    raise app.UsageError(f"--{flag}={getattr(FLAGS, flag)}: {e}") from e


# ------------------------------------------------------------------ summary
def summarize(graph, topology, ref, makespan_simulate: float, setup: Dict[str, Any]
              ) -> Dict[str, Any]:
  """JSON-ready dict of the run: inputs, makespans, per-device load, transfers and memory."""
  d = topology.num_devices
  place = np.asarray(ref.placement)
  busy = np.bincount(place, weights=ref.finish - ref.start, minlength=d)
  makespan = float(ref.makespan)
  t_src = np.array([t.src for t in ref.transfers], int)
  t_bytes = np.array([graph.out_bytes[t.op] for t in ref.transfers], float)
  t_time = np.array([t.arrival - t.start for t in ref.transfers], float)
  sent = np.bincount(t_src, minlength=d)
  sent_bytes = np.bincount(t_src, weights=t_bytes, minlength=d)
  send_busy = np.bincount(t_src, weights=t_time, minlength=d)
  cap = np.asarray(topology.mem_capacity, float)
  peak = np.asarray(ref.peak_memory, float)
  devices = [{
      "device": k,
      "ops": int(np.sum(place == k)),
      "busy_s": float(busy[k]),
      "utilization": float(busy[k] / makespan) if makespan > 0 else 0.0,
      "transfers_sent": int(sent[k]),
      "bytes_sent": float(sent_bytes[k]),
      "send_busy_s": float(send_busy[k]),
      "peak_memory_bytes": float(peak[k]),
      "mem_capacity_bytes": results.finite(cap[k]),
      "oom": bool(peak[k] > cap[k]),
  } for k in range(d)]
  agree = bool(np.isclose(makespan_simulate, makespan, rtol=MAKESPAN_RTOL, atol=0.0))
  return {
      "graph": {"spec": setup["graph"], "name": graph.name, "nodes": graph.num_nodes,
                "edges": graph.num_edges, "total_cost_s": float(graph.cost.sum())},
      "topology": {"spec": setup["topology"], "preset": setup.get("preset", setup["topology"]),
                   "devices": d, "footprint_bytes": setup.get("footprint"),
                   # None: the preset's memory; "inf" (JSON has no infinity): unbounded
                   "mem_capacity_override": (
                       setup["mem_capacity"] if setup["mem_capacity"] is None or
                       np.isfinite(setup["mem_capacity"]) else "inf")},
      "placement": setup["placement"],
      "priority": setup["priority"],
      "seed": setup["seed"],
      "makespan_s": makespan,
      "makespan_simulate_s": float(makespan_simulate),
      "makespans_agree": agree,
      "transfers": len(ref.transfers),
      "bytes_moved": float(t_bytes.sum()),
      "oom": bool(ref.oom),
      "devices": devices,
  }


def format_table(s: Dict[str, Any]) -> str:
  """The human-readable report printed by the launcher."""
  fs, fb = plotting.format_seconds, plotting.format_bytes
  g, t = s["graph"], s["topology"]
  head = [
      ("graph", f"{g['spec']} ('{g['name']}': {g['nodes']} ops, {g['edges']} edges, "
                f"total cost {fs(g['total_cost_s'])})"),
      ("topology", f"{t['spec']} ({t['devices']} devices"
                   + (f", memory set to {fb(float(t['mem_capacity_override']))})"
                      if t["mem_capacity_override"] is not None else ")")),
      ("actions", f"placement={s['placement']} priority={s['priority']} seed={s['seed']}"),
      ("makespan", f"{fs(s['makespan_s'], 6)} (jitted simulate: "
                   f"{fs(s['makespan_simulate_s'], 6)}, "
                   f"{'agrees' if s['makespans_agree'] else 'DISAGREES'})"),
      ("transfers", f"{s['transfers']}, {fb(s['bytes_moved'])} moved"),
      ("OOM", "YES" if s["oom"] else "no"),
  ]
  lines = [f"{k:<10}{v}" for k, v in head]
  cols = ("device", "ops", "busy", "util", "sent", "bytes sent", "peak memory", "capacity",
          "OOM")
  rows = [(str(r["device"]), str(r["ops"]), fs(r["busy_s"]), f"{r['utilization']:.1%}",
           str(r["transfers_sent"]), fb(r["bytes_sent"]), fb(r["peak_memory_bytes"]),
           fb(r["mem_capacity_bytes"] if r["mem_capacity_bytes"] is not None else np.inf),
           "YES" if r["oom"] else "no") for r in s["devices"]]
  widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
  fmt = lambda row: "  ".join(x.rjust(w) for x, w in zip(row, widths))
  lines += ["", fmt(cols), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]
  return "\n".join(lines)


def write_json(obj: Dict[str, Any], path: str) -> str:
  """Writes strict JSON (no NaN/inf) atomically (see `simulator.fileio`)."""
  return fileio.write_json(path, obj)


# ------------------------------------------------------------------ run
def run_simulation(graph, topology, placement: np.ndarray, priority: np.ndarray,
                   setup: Dict[str, Any], out: str) -> Dict[str, Any]:
  """Simulates with both simulators, writes schedule.png and summary.json; returns the summary."""
  res = simulator.simulate(graph, topology, placement[None], priority[None])
  makespan_simulate = float(np.asarray(res.makespan)[0])
  ref = simulator.reference_simulate(graph, topology, placement, priority)
  summary = summarize(graph, topology, ref, makespan_simulate, setup)
  if not summary["makespans_agree"]:
    logging.warning("makespans disagree beyond rtol %g: simulate %.9g s, reference_simulate "
                    "%.9g s", MAKESPAN_RTOL, makespan_simulate, ref.makespan)
  if bool(np.asarray(res.oom)[0]) != bool(ref.oom):
    logging.warning("OOM flags disagree: simulate %s, reference_simulate %s",
                    bool(np.asarray(res.oom)[0]), ref.oom)
  png = os.path.join(out, "schedule.png")
  plotting.plot_schedule(graph, topology, ref, png, title=(
      f"{graph.name} on {setup['topology']}: placement {setup['placement']}, priority "
      f"{setup['priority']}, makespan {plotting.format_seconds(ref.makespan)}"
      f"{', OUT OF MEMORY' if ref.oom else ''}"))
  summary["files"] = {"schedule": os.path.abspath(png),
                      "summary": os.path.abspath(os.path.join(out, "summary.json"))}
  write_json(summary, summary["files"]["summary"])
  return summary


def load_topology(spec, graph, mem_capacity=None):
  """(topology, base preset or file, single-device footprint or None) of a topology spec (str or
  parsed), with --mem_capacity (if given) replacing every device's memory."""
  parsed = topology_spec.parse_topology(spec)
  topology, footprint = topology_spec.make_topology(parsed, graph)
  if mem_capacity is not None:
    topology = topology.with_memory(mem_capacity)
  return topology, parsed.preset, footprint


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  cli.check_out(FLAGS.out, files=("schedule.png", "summary.json"))
  setup = {k: getattr(FLAGS, k) for k in ("graph", "topology", "mem_capacity", "placement",
                                           "priority", "seed", "out")}
  spec = _as_flag_error("topology", topology_spec.parse_topology, FLAGS.topology)  # files read
  graph = _as_flag_error("graph", sources.load_graph, FLAGS.graph)
  topology, setup["preset"], setup["footprint"] = _as_flag_error(
      "topology", load_topology, spec, graph)
  if FLAGS.mem_capacity is not None:  # its own flag at fault (e.g. above 1e30)
    topology = _as_flag_error("mem_capacity", topology.with_memory, FLAGS.mem_capacity)
  placement = _as_flag_error("placement", placements.make_placement, FLAGS.placement, graph,
                             topology, FLAGS.seed)
  priority = _as_flag_error("priority", placements.make_priority, FLAGS.priority, graph,
                            topology, FLAGS.seed)
  logging.info("simulating %r on %s", graph, FLAGS.topology)
  summary = run_simulation(graph, topology, placement, priority, setup, FLAGS.out)
  print(format_table(summary))
  print(f"\nwrote {summary['files']['schedule']}\n      {summary['files']['summary']}")


def run():
  """Console-script entry point (`go-jax-simulate`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
