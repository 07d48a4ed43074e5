"""Experiment: the fusion model (design.md 4.1) against XLA's real fusion and measured time.

An experiment, not library code; the launcher is `experiments/validate_cost_model.py --fusion`.
For each compiled zoo step (`cost_model_validation.StepCase`, which keeps both the pre- and the
post-optimisation HLO of one program) it predicts the single-device step time four ways under
the same calibrated "local" roofline:

  * post: the post-optimisation graph in XLA's schedule (what `validate` already predicts);
  * pre + XLA: the pre-optimisation graph with XLA's own fusion decisions carried onto it
    (`simulator.frontends.xla.xla_fusion_decisions`), fused by section 4.1;
  * pre, no fusion, and pre + every request (`fuse_all`): the two ends of the fusion range.

On one device the makespan is the sum of the (fused) op costs, whatever the order. The fused
graph uses the graph-level op classes for groups (section 4.1), the post graph the classes of
XLA's fusions read from the HLO, so the two differ by what the fusion model leaves out:
groups that are not trees (multi-output fusions, producers XLA duplicates into several
fusions) and the finer classes of the post graph.

The fusion table (no fusion / every request / XLA's / GO's, alone and after placement) is
experiments/fusion_comparison.py, its launcher experiments/fusion_table.py.
"""

from __future__ import annotations

from typing import Dict, List

import numpy as np

from experiments.cost_model_validation import StepCase, fmt_spearman, scatter_panel, spearman
from simulator.costmodel import opclass as feat
from simulator.costmodel import roofline
from simulator.costmodel.devices import local_spec

VARIANTS = ("none", "xla", "all")



def predict_fusion(case: StepCase, calibration) -> Dict[str, object]:
  """Single-device predictions of the pre graph with no / XLA's / every fuse request."""
  from simulator import Topology, fusion, simulate
  from simulator.frontends.xla import xla_fusion_decisions
  if not case.pre_text:
    raise ValueError(f"case {case.name!r} has no pre-optimisation HLO (build it with zoo_case)")
  pre_h = feat.hlo_graph(case.pre_text, case.name + "/pre")
  post_h = feat.hlo_graph(case.hlo_text, case.name)
  spec = local_spec(calibration)
  g = roofline.apply_cost_model(pre_h, spec, calibration, fresh_bytes=case.fresh_bytes)
  n = g.num_nodes
  fuse = np.stack([np.zeros(n, bool), xla_fusion_decisions(pre_h, post_h), np.ones(n, bool)])
  place = np.zeros((3, n), np.int32)
  prio = np.tile(-np.arange(n, dtype=np.float64), (3, 1))
  res = simulate(g, Topology.uniform(1, bandwidth=1.0), place, prio, fuse=fuse)
  groups = [fusion.fuse_graph(g, place[k], fuse[k]).graph.num_nodes for k in range(3)]
  out = {"pre_nodes": n, "post_nodes": post_h.graph.num_nodes}
  for k, v in enumerate(VARIANTS):
    out[f"pre_{v}_s"] = float(res.makespan[k])
    out[f"pre_{v}_peak_bytes"] = float(res.peak_memory[k, 0])
    out[f"pre_{v}_groups"] = int(groups[k])
  return out


def fusion_report(cases: List[StepCase], report: Dict[str, object], calibration):
  """Adds the fusion predictions to `validate`'s report rows; returns the fusion summary."""
  rows = report["rows"]
  for c, r in zip(cases, rows):
    r.update(predict_fusion(c, calibration))
    r["xla_vs_post_percent"] = 100 * (r["pre_xla_s"] - r["predicted_s"]) / r["predicted_s"]
    r["xla_vs_measured_percent"] = 100 * (r["pre_xla_s"] - r["measured_s"]) / r["measured_s"]
  meas = [r["measured_s"] for r in rows]
  post = [r["predicted_s"] for r in rows]
  xla = [r["pre_xla_s"] for r in rows]
  return {
      "mape_xla_vs_post_percent": float(np.mean([abs(r["xla_vs_post_percent"]) for r in rows])),
      "mape_xla_vs_measured_percent": float(np.mean([abs(r["xla_vs_measured_percent"])
                                                     for r in rows])),
      "spearman_xla_vs_post": spearman(post, xla),
      "spearman_xla_vs_measured": spearman(meas, xla),
      "targets": {"mape_xla_vs_post_percent": 15.0, "mape_xla_vs_measured_percent": 25.0}}


def fusion_table(report: Dict[str, object]) -> str:
  f = report["fusion"]
  lines = [f"{'model':24s} {'meas_ms':>8s} {'post_ms':>8s} {'pre_ms':>8s} {'xla_ms':>8s} "
           f"{'all_ms':>8s} {'vs_post':>8s} {'vs_meas':>8s} {'groups x/post':>14s}"]
  for r in report["rows"]:
    lines.append(
        f"{r['model']:24s} {r['measured_s'] * 1e3:8.2f} {r['predicted_s'] * 1e3:8.2f} "
        f"{r['pre_none_s'] * 1e3:8.2f} {r['pre_xla_s'] * 1e3:8.2f} {r['pre_all_s'] * 1e3:8.2f} "
        f"{r['xla_vs_post_percent']:+7.1f}% {r['xla_vs_measured_percent']:+7.1f}% "
        f"{r['pre_xla_groups']:>7d}/{r['post_nodes']:<6d}")
  lines.append(f"pre + XLA fusion vs post graph: MAPE {f['mape_xla_vs_post_percent']:.1f}% "
               f"(target 15%), Spearman {fmt_spearman(f['spearman_xla_vs_post'])}; vs measured: "
               f"MAPE {f['mape_xla_vs_measured_percent']:.1f}% (target 25%), Spearman "
               f"{fmt_spearman(f['spearman_xla_vs_measured'])}")
  return "\n".join(lines)


def fusion_plot(report: Dict[str, object], path: str, title: str = "") -> str:
  """Two panels: pre + XLA fusion vs the post graph's prediction, and vs measured (log-log)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from simulator import fileio
  rows = report["rows"]
  xla = np.array([r["pre_xla_s"] for r in rows]) * 1e3
  fig, axes = plt.subplots(1, 2, figsize=(11, 5.2))
  for ax, key, label, band in ((axes[0], "predicted_s", "post graph, predicted (ms)", 0.15),
                               (axes[1], "measured_s", "measured step time (ms)", 0.25)):
    x = np.array([r[key] for r in rows]) * 1e3
    scatter_panel(ax, x, xla, [r["model"] for r in rows], band, label,
                  "pre graph + XLA's fusion, predicted (ms)")
    ax.legend(loc="upper left")
  fig.suptitle(title or "fusion model vs XLA's fusion")
  fig.tight_layout()
  with fileio.atomic_open(path, "wb", make_dirs=True) as fh:
    fig.savefig(fh, format="png", dpi=120)
  plt.close(fig)
  return path
