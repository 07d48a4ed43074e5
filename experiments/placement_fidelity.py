"""Experiment: the simulator's predicted step time of placed programs against the measured one.

An experiment, not library code (it times programs on the local devices): the launcher is
experiments/validate_placements.py; what it checks is the simulator (`simulator.simulate`, with
the calibrated local cost model and the measured local topology) and placed execution
(`go_jax.execute`).

For each zoo model (one size, "small" by default) and each device count D:
  * the step's pre-optimisation graph is costed with the calibrated "local" roofline, and XLA's
    own fusion decisions on it are read from the post-optimisation module
    (`go_jax.methods.fusion.xla_fusion_program`);
  * each method (`go_jax.methods.solve`, on the measured D-device topology) gives a placement
    and a priority; random placements use several seeds;
  * `execute.place_program` runs the placement for real on the first D local devices, and
    `PlacedProgram.node_placement` is the placement it actually ran;
  * predicted, by the simulator: (1) the makespan of that node placement and the method's
    priority, fused with XLA's decisions (design.md 4.1: groups never cross devices, as XLA
    compiles each device's segments separately); (2) the same unfused; (3) the makespan of the
    placed program's *segment graph* (`segment_graph`: one node per segment, costing its ops
    plus the host's measured time to launch a call, and one node per value that crosses
    segments), which is how the program really runs: a segment's values are ready only when
    the whole segment is;
  * measured: each placement is timed right after it is compiled (two warm-up calls, then the
    median of `repeats` calls), with the arguments placed where they are first read
    (`PlacedProgram.place_args`), and then released: a segment's executable holds a few memory
    maps, and all of a model's placements at once can pass the kernel's limit.
Per (model, D): Spearman's rank correlation between predicted and measured, and the MAPE.

What no prediction here models: that virtual CPU devices share the host's cores (the topology
measures each device alone, and XLA runs one device's ops on all cores), and the host's waits
between dependent segments beyond the measured link latency.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from experiments.cost_model_validation import (error_percent, floor_label, fmt_spearman, log_axis,
                                              spearman)

RANDOM = "random"


@dataclasses.dataclass(frozen=True)
class ModelCase:
  """One zoo model's step, ready to place: its program, costed graph and XLA's decisions."""
  name: str
  step: Callable[..., Any]
  args: Tuple
  graph: Any  # CompGraph: the pre-optimisation graph, costed on the local device
  fuse: np.ndarray  # (N,) bool XLA's fusion decisions on the graph
  traced: Any  # go_jax.execute.TracedProgram


def model_case(name: str, size: str, calibration) -> ModelCase:
  """Builds, costs and traces zoo model `name`'s training step at `size`."""
  from go_jax import execute
  from go_jax.methods.fusion import xla_fusion_program
  from simulator import zoo
  from simulator.costmodel import local_spec
  z = zoo.build(name, size)
  args = z.concrete_args()
  graph, fuse, _ = xla_fusion_program(z.step, *args, device_spec=local_spec(calibration),
                                      calibration=calibration, name=f"zoo:{name}/{size}/pre")
  traced = execute.trace_program(z.step, *args)
  if traced.num_nodes != graph.num_nodes:
    raise ValueError(f"{name}: the traced program has {traced.num_nodes} nodes, its graph "
                     f"{graph.num_nodes}")
  return ModelCase(f"{name}/{size}", z.step, args, graph, np.asarray(fuse, bool), traced)


def placements(case: ModelCase, topology, methods_: Sequence[str], random_seeds: int,
               seed: int = 0, options: Optional[Dict[str, Dict[str, Any]]] = None,
               progress: Callable[[str], None] = lambda s: None
               ) -> List[Tuple[str, np.ndarray, np.ndarray]]:
  """(label, placement (N,), priority (N,)) per method; "random" gives `random_seeds` rows."""
  from go_jax import methods
  out = []
  for name in methods_:
    seeds = range(random_seeds) if name == RANDOM else (seed,)
    for s in seeds:
      t0 = time.perf_counter()
      sol = methods.solve(name, case.graph, topology, objective="makespan", seed=int(s),
                          **(options or {}).get(name, {}))
      label = f"{name}_{s}" if name == RANDOM else name
      progress(f"{case.name} D={topology.num_devices}: {label} placed in "
               f"{time.perf_counter() - t0:.1f} s")
      out.append((label, np.asarray(sol.placement, np.int64),
                  np.asarray(sol.priority, np.float64)))
  return out


def predict(case: ModelCase, topology, placement, priority) -> Dict[str, float]:
  """Simulated makespans (s) of one action: fused with XLA's decisions, and unfused."""
  from go_jax import methods
  fused = methods.evaluate(case.graph, topology, placement, priority, "makespan", fuse=case.fuse)
  plain = methods.evaluate(case.graph, topology, placement, priority, "makespan")
  return {"predicted_s": float(fused["makespan"]), "predicted_unfused_s": float(plain["makespan"])}


def segment_graph(case: ModelCase, placed, dispatch_s: float = 0.0):
  """The placed program as a graph of its segments: (CompGraph, placement, priority).

  One node per segment (cost: its nodes' costs summed, plus `dispatch_s`, the host's time to
  launch a call; placed on the segment's device; priority: dispatch order), and one node per
  value that crosses segments (cost 0, out_bytes its size, on the device that makes it, or for
  a program argument the device that reads it first), with edges producer -> value -> readers.
  Simulating it predicts the placed program as it runs: a segment's values are ready when the
  whole segment is, and only values that cross devices are copied.
  """
  from jax.extend import core as jcore
  from simulator.graph import CompGraph
  plan, traced, g = placed.plan, placed.traced, case.graph
  segs = plan.segments
  seg_of_eqn = np.full(len(traced.eqns), -1)
  for k, seg in enumerate(segs):
    seg_of_eqn[list(seg.eqns)] = k
  node_seg = np.where(traced.node_eqn >= 0, seg_of_eqn[np.maximum(traced.node_eqn, 0)], -1)
  senders, receivers = np.asarray(g.senders), np.asarray(g.receivers)
  for k in np.flatnonzero(traced.node_eqn < 0):  # untagged: its first consumer's segment
    succ = receivers[senders == k]
    succ = succ[node_seg[succ] >= 0]
    if succ.size:
      node_seg[k] = node_seg[succ.min()]
  ok = node_seg >= 0
  cost = np.zeros(len(segs))
  np.add.at(cost, node_seg[ok], np.asarray(g.cost)[ok])
  cost += dispatch_s
  made_by = {v: seg_of_eqn[i] for i, e in enumerate(traced.eqns) for v in e.outvars
             if not isinstance(v, jcore.DropVar) and seg_of_eqn[i] >= 0}
  value, src, dst, out_bytes, device = {}, [], [], [], [s.device for s in segs]
  prio = list(-np.arange(len(segs), dtype=float))
  for k, seg in enumerate(segs):
    for v in seg.in_vars:
      if v not in value:
        t = made_by.get(v)
        value[v] = len(device)
        device.append(segs[t].device if t is not None else seg.device)
        out_bytes.append(float(np.prod(v.aval.shape)) * np.dtype(v.aval.dtype).itemsize)
        prio.append(prio[t] if t is not None else 1.0)
        if t is not None:
          src.append(t)
          dst.append(value[v])
      src.append(value[v])
      dst.append(k)
  n = len(device)
  graph = CompGraph(cost=np.concatenate([cost, np.zeros(n - len(segs))]),
                    senders=np.asarray(src, np.int64), receivers=np.asarray(dst, np.int64),
                    out_bytes=np.concatenate([np.zeros(len(segs)), out_bytes]),
                    name=f"{case.name}/segments")
  return graph, np.asarray(device, np.int64), np.asarray(prio, np.float64)


def predict_segments(case: ModelCase, placed, topology, dispatch_s: float) -> float:
  """Simulated makespan (s) of the placed program's segment graph (`segment_graph`)."""
  from go_jax import methods
  graph, placement, priority = segment_graph(case, placed, dispatch_s)
  return float(methods.evaluate(graph, topology, placement, priority, "makespan")["makespan"])


def dispatch_seconds(device, calls: int = 2000) -> float:
  """Host seconds to launch one compiled call (not waiting for it): a segment's fixed cost."""
  import jax
  import jax.numpy as jnp
  x = jax.device_put(jnp.ones((8,), jnp.float32), device)
  f = jax.jit(lambda a: a + 1.0).lower(x).compile()
  jax.block_until_ready(f(x))
  t0 = time.perf_counter()
  for _ in range(calls):
    y = f(x)
  elapsed = time.perf_counter() - t0
  jax.block_until_ready(y)
  return elapsed / calls


def run_model(case: ModelCase, topologies: Dict[int, Any], methods_: Sequence[str],
              random_seeds: int, repeats: int, devices: Sequence[Any], seed: int = 0,
              options: Optional[Dict[str, Dict[str, Any]]] = None,
              progress: Callable[[str], None] = lambda s: None) -> List[Dict[str, Any]]:
  """Rows (one per device count and placement) of one model: predicted and measured seconds."""
  from go_jax import execute, methods
  import jax
  rows = []
  dispatch_s = dispatch_seconds(devices[0])
  for d, topo in sorted(topologies.items()):
    for label, placement, priority in placements(case, topo, methods_, random_seeds, seed,
                                                 options, progress):
      t0 = time.perf_counter()
      placed = execute.place_program(case.step, case.args, placement, devices[:d],
                                     priority=priority, traced=case.traced)
      compile_s = time.perf_counter() - t0
      pred = predict(case, topo, placed.node_placement, priority)
      given = methods.evaluate(case.graph, topo, placement, priority, "makespan",
                               fuse=case.fuse)["makespan"]
      # Timed now and released: every segment's executable holds a few memory maps, and a
      # model's placements together can pass the kernel's limit (vm.max_map_count, 65530).
      load = os.getloadavg()[0]
      t = placed.measure(repeats)  # arguments where first read, 2 warm-ups, the median
      row = {"model": case.name, "devices": d, "placement": label,
             "method": label.split("_")[0] if label.startswith(RANDOM) else label,
             **pred, "predicted_given_s": float(given),
             "predicted_segments_s": predict_segments(case, placed, topo, dispatch_s),
             "dispatch_s": dispatch_s, "segments": placed.num_segments,
             "split_equations": placed.plan.split_equations,
             "devices_used": int(len(set(placed.node_placement.tolist()))),
             "moved_nodes": int(np.sum(placed.node_placement != placement)),
             "compile_s": compile_s, "measured_s": float(t),
             "loadavg": [load, os.getloadavg()[0]]}
      for key, pkey in (("error_percent", "predicted_s"),
                        ("error_unfused_percent", "predicted_unfused_s"),
                        ("error_segments_percent", "predicted_segments_s")):
        row[key] = error_percent(row[pkey], float(t), f"{case.name} D={d} {label}")
      rows.append(row)  # `placed` is released when the next placement replaces it
      progress(f"{case.name} D={d}: {label}: {row['segments']} segments, compiled in "
               f"{compile_s:.1f} s, predicted {pred['predicted_s'] * 1e3:.2f} ms (segment "
               f"graph {row['predicted_segments_s'] * 1e3:.2f} ms), measured {t * 1e3:.2f} ms")
  jax.clear_caches()
  return rows


def summarize(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
  """Per (model, devices): placements, Spearman and MAPE (fused and unfused predictions)."""
  groups: Dict[Tuple[str, int], List[Dict[str, Any]]] = {}
  for r in rows:
    groups.setdefault((r["model"], r["devices"]), []).append(r)
  out = []
  for (model, d), rs in sorted(groups.items()):
    meas = [r["measured_s"] for r in rs]
    out.append({
        "model": model, "devices": d, "placements": len(rs),
        "spearman": spearman([r["predicted_s"] for r in rs], meas),
        "mape_percent": float(np.mean([abs(r["error_percent"]) for r in rs])),
        "spearman_unfused": spearman([r["predicted_unfused_s"] for r in rs], meas),
        "mape_unfused_percent": float(np.mean([abs(r["error_unfused_percent"]) for r in rs])),
        "spearman_segments": spearman([r["predicted_segments_s"] for r in rs], meas),
        "mape_segments_percent": float(np.mean([abs(r["error_segments_percent"])
                                                for r in rs])),
        "measured_range_s": [float(min(meas)), float(max(meas))]})
  return out


def table(summary: Sequence[Dict[str, Any]], threshold: float = 0.8) -> str:
  """The per (model, devices) summary as a markdown table."""
  lines = ["| model | devices | placements | Spearman | MAPE | Spearman (unfused) | "
           "MAPE (unfused) | Spearman (segments) | MAPE (segments) | measured range |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
  mark = lambda r: "" if r is not None and r >= threshold else " (below)"
  for s in summary:
    lo, hi = s["measured_range_s"]
    lines.append(f"| {s['model']} | {s['devices']} | {s['placements']} | "
                 f"{fmt_spearman(s['spearman'])}{mark(s['spearman'])} | "
                 f"{s['mape_percent']:.1f}% | "
                 f"{fmt_spearman(s['spearman_unfused'])} | {s['mape_unfused_percent']:.1f}% | "
                 f"{fmt_spearman(s['spearman_segments'])}{mark(s['spearman_segments'])} | "
                 f"{s['mape_segments_percent']:.1f}% | {lo * 1e3:.1f}-{hi * 1e3:.1f} ms |")
  return "\n".join(lines)


def rows_table(rows: Sequence[Dict[str, Any]]) -> str:
  """Every placement: predicted (fused, unfused, segment graph) and measured milliseconds."""
  lines = ["| model | D | placement | segments | predicted | unfused | segment graph | "
           "measured | error | error (segments) |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
  for r in rows:
    lines.append(f"| {r['model']} | {r['devices']} | {r['placement']} | {r['segments']} | "
                 f"{r['predicted_s'] * 1e3:.2f} | {r['predicted_unfused_s'] * 1e3:.2f} | "
                 f"{r['predicted_segments_s'] * 1e3:.2f} | {r['measured_s'] * 1e3:.2f} | "
                 f"{r['error_percent']:+.0f}% | {r['error_segments_percent']:+.0f}% |")
  return "\n".join(lines)


def _panel(ax, rows, summary, key: str, rho_key: str, ylabel: str) -> None:
  """One log-log panel of `key` against measured: a colour per model, a marker per D; points
  at 0 are drawn at the axis floor and counted in the legend (`log_axis`)."""
  import matplotlib.pyplot as plt
  models = sorted({r["model"] for r in rows})
  counts = sorted({r["devices"] for r in rows})
  markers = dict(zip(counts, "os^Dv<>"))
  cmap = plt.get_cmap("tab10")
  lo, hi, meas, pred, at_floor = log_axis([r["measured_s"] * 1e3 for r in rows],
                                          [r[key] * 1e3 for r in rows])
  ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="y = x")
  by = {(s["model"], s["devices"]): s for s in summary}
  for i, m in enumerate(models):
    for d in counts:
      sel = [j for j, r in enumerate(rows) if r["model"] == m and r["devices"] == d]
      if sel:
        ax.scatter(meas[sel], pred[sel], color=cmap(i % 10), marker=markers[d], s=24,
                   zorder=3,
                   label=f"{m.split('/')[0]} D={d} (rho {fmt_spearman(by[(m, d)][rho_key])})")
  if at_floor.any():
    ax.scatter(meas[at_floor], pred[at_floor], marker="x", color="k", s=40, zorder=4,
               label=floor_label(int(at_floor.sum())))
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlim(lo, hi)
  ax.set_ylim(lo, hi)
  ax.set_xlabel("measured step time (ms)")
  ax.set_ylabel(ylabel)
  ax.legend(fontsize=5.5, loc="upper left", ncol=2)


def scatter_plot(rows: Sequence[Dict[str, Any]], summary: Sequence[Dict[str, Any]],
                 path: str) -> str:
  """Predicted vs measured per placement (log-log): the op-level prediction (XLA's fusion) and
  the segment graph's, side by side."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from simulator import fileio
  if not rows:
    raise ValueError("scatter_plot: no rows")
  fig, axes = plt.subplots(1, 2, figsize=(13.0, 6.4))
  _panel(axes[0], rows, summary, "predicted_s", "spearman",
         "predicted step time (ms): ops, XLA's fusion")
  _panel(axes[1], rows, summary, "predicted_segments_s", "spearman_segments",
         "predicted step time (ms): the segment graph")
  fig.suptitle("placed programs: simulator vs measured")
  fig.tight_layout()
  with fileio.atomic_open(path, "wb", make_dirs=True) as fh:
    fig.savefig(fh, format="png", dpi=120)
  plt.close(fig)
  return path


__all__ = ["ModelCase", "dispatch_seconds", "model_case", "placements", "predict",
           "predict_segments", "rows_table", "run_model", "scatter_plot", "segment_graph",
           "summarize", "table"]
