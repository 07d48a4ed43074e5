"""The fusion table's logic (launcher: experiments/fusion_table.py): per zoo model, no fusion /
every request / XLA's fusion / GO's learned fusion, alone and after placement, and the joint
task (placement + scheduling + fusion) against the sequential pipeline.

Per model (its training step's pre-optimisation graph, costed on a device spec; XLA's fusion
decisions read from the same program's post-optimisation module) and per device count D:

  * D = 1 (`nvlink1`): every op on the device, critical-path priority; makespan and peak memory
    with `no_fusion`, `fuse_all`, `xla_fusion` and, with `learned`, `go_fusion` fine-tuned for
    the given seconds on that same placement and priority;
  * D > 1 (`nvlink<D>`): the best of the placement methods by unfused makespan is the
    placement, then the same fusions on it: "placement, then XLA's fusion" is the sequential
    pipeline; with `learned`, `go_joint3` (placement, priority and fusion at once) fine-tuned
    for the given seconds.

`figures(rows)` reduces the table to issue 13's figures: the share of models where GO's fusion
is at or below XLA's on one device (and by how much on average), and per D > 1 the geometric
mean of joint / pipeline makespans, with peak memory beside.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

FUSIONS = ("no_fusion", "fuse_all", "xla_fusion")
LEARNED_SINGLE, LEARNED_JOINT = "go_fusion", "go_joint3"


def model_rows(name: str, size: str, device: str, counts: Sequence[int],
               placers: Sequence[str], learned: Optional[Dict[str, Any]] = None
               ) -> Dict[str, object]:
  """Every cell of one zoo model (see the module docstring)."""
  from go_jax.methods.fusion import xla_fusion_program
  from simulator import zoo
  z = zoo.build(name, size)
  pre, decisions, post = xla_fusion_program(z.step, *z.abstract_args(), device_spec=device,
                                            name=f"zoo:{name}/{size}/pre")
  out = {"model": f"{name}/{size}", "pre_nodes": pre.num_nodes,
         "post_nodes": post.num_nodes, "xla_requests": int(decisions.sum())}
  out["cells"] = fusion_cells(pre, decisions, counts, placers, learned)
  return out


LAUNCHER = "fusion_table"
# The keys an older, untagged fusion_table.json held beside its rows (the launcher's settings):
# such a file is still read; any other untagged file is refused.
_UNTAGGED_KEYS = ("size", "device", "devices", "placers", "learned", "rows")


def _number(value) -> bool:
  return (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value))


def _check_entry(entry, where: str) -> None:
  """A stored fusion answer: a positive makespan (a simulated makespan of 0 is no result a
  model with ops has, and the table divides by it), a peak memory >= 0, a feasible flag."""
  if not isinstance(entry, dict):
    raise ValueError(f"{where}: not an object")
  if not _number(entry.get("makespan")) or entry["makespan"] <= 0:
    raise ValueError(f"{where}: field 'makespan' must be a positive number, got "
                     f"{entry.get('makespan')!r}")
  if not _number(entry.get("peak_memory")) or entry["peak_memory"] < 0:
    raise ValueError(f"{where}: field 'peak_memory' must be a number >= 0, got "
                     f"{entry.get('peak_memory')!r}")
  if not isinstance(entry.get("feasible"), bool):
    raise ValueError(f"{where}: field 'feasible' must be true or false, got "
                     f"{entry.get('feasible')!r}")


def check_row(row, where: str) -> None:
  """Raises ValueError naming `where`, the cell and the field of a stored row the table, the
  figures or a resumed run could not use."""
  if not isinstance(row, dict):
    raise ValueError(f"{where}: not an object")
  if not isinstance(row.get("model"), str):
    raise ValueError(f"{where}: field 'model' missing or not a string")
  where = f"{where} ({row['model']})"
  if not isinstance(row.get("cells"), list):
    raise ValueError(f"{where}: field 'cells' missing or not a list")
  for j, cell in enumerate(row["cells"]):
    at = f"{where} cell {j}"
    if not isinstance(cell, dict):
      raise ValueError(f"{at}: not an object")
    if not isinstance(cell.get("devices"), int) or isinstance(cell["devices"], bool):
      raise ValueError(f"{at}: field 'devices' missing or not an integer")
    if not isinstance(cell.get("placement"), str):
      raise ValueError(f"{at}: field 'placement' missing or not a string")
    for f in FUSIONS + (LEARNED_SINGLE, LEARNED_JOINT):
      if f in FUSIONS or f in cell:
        if f not in cell:
          raise ValueError(f"{at}: field '{f}' missing")
        _check_entry(cell[f], f"{at} field '{f}'")


def load_rows(path: str) -> Dict[str, Dict[str, Any]]:
  """Rows of an earlier fusion_table.json by model key ({} if there is none).

  Raises:
    ValueError: the file cannot be read as the fusion table's JSON, another launcher wrote it,
      or a row is malformed (the message names the file, the row, the cell and the field).
  """
  if not os.path.exists(path):
    return {}
  try:
    with open(path, encoding="utf-8") as fh:
      old = json.load(fh)
  except (OSError, ValueError, RecursionError) as e:
    raise ValueError(f"cannot resume from {path}: {e}") from e
  if not isinstance(old, dict):
    raise ValueError(f"cannot resume from {path}: not a JSON object; move it away to start "
                     "afresh")
  tag = old.get("launcher")
  if tag != LAUNCHER and (tag is not None or any(k not in old for k in _UNTAGGED_KEYS)):
    raise ValueError(f"{path}: not written by {LAUNCHER}"
                     + (f" (launcher {tag!r})" if tag is not None else "")
                     + "; use another --out")
  if not isinstance(old.get("rows"), list):
    raise ValueError(f"cannot resume from {path}: field 'rows' is not a list")
  for i, row in enumerate(old["rows"]):
    check_row(row, f"{path}: row {i}")
  return {r["model"]: r for r in old["rows"]}


def run_models(names: Sequence[str], size: str, settings: Dict[str, Any], path: str,
               build: Callable[[str], Dict[str, Any]],
               log: Callable[[str], None] = lambda _: None) -> Tuple[List[Dict], List[Dict]]:
  """The table's rows for `names`, resumed from `path` and saved there after every model.

  A stored row is reused only if it was made with `settings` (recorded in the row); otherwise
  `build(name)` recomputes it. Every row the file held stays in it, also rows of models this
  run does not ask for or has not reached yet. Returns (this run's rows in the order of
  `names`, the file's other rows).
  """
  from simulator import fileio  # pylint: disable=g-import-not-at-top
  done = load_rows(path)
  made_with = json.loads(json.dumps(settings))
  asked = {f"{name}/{size}" for name in names}
  others = [r for key, r in done.items() if key not in asked]
  rows, start = [], time.time()
  for k, name in enumerate(names):
    key = f"{name}/{size}"
    if key in done and done[key].get("settings") == made_with:
      rows.append(done[key])
      continue
    t0 = time.time()
    rows.append(dict(build(name), settings=made_with))
    done[key] = rows[-1]
    fileio.write_json(path, dict(settings, launcher=LAUNCHER, rows=list(done.values())))
    rate = (time.time() - start) / (k + 1)
    log(f"[{time.time() - start:7.1f}s] {k + 1}/{len(names)} {key} in {time.time() - t0:.1f}s"
        f", ETA {rate * (len(names) - k - 1):.0f}s")
  return rows, others


def _entry(graph, place, sol) -> Dict[str, Any]:
  """The scores of one fused answer (makespan, fullest device's peak, groups)."""
  from simulator import fusion
  fuse = np.zeros(graph.num_nodes, bool) if sol.fuse is None else sol.fuse
  groups = fusion.fuse_graph(graph, place, fuse).graph.num_nodes
  return {"makespan": float(sol.makespan), "peak_memory": float(np.max(sol.peak_memory)),
          "feasible": bool(sol.feasible), "groups": int(groups)}


def _learned_entry(graph, sol) -> Dict[str, Any]:
  """A learned method's entry: its best stage's scores plus the zero-shot one and its effort."""
  out = _entry(graph, sol.placement, sol)
  stages = sol.info.get("stages", [])
  zero = [s for s in stages if s["stage"].startswith("zero-shot")]
  out.update(stage=sol.info.get("stage"), updates=int(sol.info.get("updates", 0)),
             seconds=float(sol.search_seconds),
             zero_shot_objective=min((s["objective"] for s in zero), default=None))
  return out


def fusion_cells(pre, decisions, counts: Sequence[int], placers: Sequence[str],
                 learned: Optional[Dict[str, Any]] = None) -> List[Dict[str, Any]]:
  """One cell per device count: the placement and each fusion's makespan / peak / groups.

  `learned`: None (baselines only) or the options of the learned methods (`finetune_seconds`,
  `checkpoint`, `samples`, `seed`; see go_jax.methods.learned)."""
  from go_jax import methods
  from simulator import preset
  from simulator.graph import upward_rank
  prio = upward_rank(pre)
  cells = []
  for d in counts:
    topo = preset(f"nvlink{d}")
    if d == 1:
      place, placer, pprio = np.zeros(pre.num_nodes, np.int64), "single", prio
    else:
      sols = [methods.solve(p, pre, topo, objective="makespan") for p in placers]
      best = min(sols, key=lambda s: s.objective)
      place, placer, pprio = best.placement, best.method, best.priority
    cell = {"devices": d, "placement": placer}
    for f in FUSIONS:
      extra = {"decisions": decisions} if f == "xla_fusion" else {}
      s = methods.solve(f, pre, topo, placement=place, priority=pprio, **extra)
      cell[f] = _entry(pre, place, s)
    if learned is not None:
      opts = {k: v for k, v in learned.items() if k != "seed" and v is not None}
      seed = int(learned.get("seed", 0))
      if d == 1:
        s = methods.solve(LEARNED_SINGLE, pre, topo, placement=place, priority=pprio,
                          seed=seed, **opts)
        cell[LEARNED_SINGLE] = _learned_entry(pre, s)
      else:
        s = methods.solve(LEARNED_JOINT, pre, topo, seed=seed, **opts)
        cell[LEARNED_JOINT] = _learned_entry(pre, s)
    cells.append(cell)
  return cells


def _ms(entry: Optional[Dict[str, Any]]) -> str:
  if entry is None:
    return "-"
  return f"{entry['makespan'] * 1e3:.3f}" + ("" if entry["feasible"] else " (OOM)")


def _ratio(a: float, b: float, width: int) -> str:
  """a / b in `width` columns; '-' where b is not positive (a stored row's makespans are
  checked on load, so only a freshly built zero reaches here)."""
  return f"{a / b:{width}.3f}" if b > 0 else f"{'-':>{width}s}"


def cells_table(rows) -> str:
  """The table as text: one line per (model, D)."""
  lines = [f"{'model':26s} {'D':>2s} {'placement':>9s} {'none ms':>9s} {'all ms':>9s} "
           f"{'XLA ms':>9s} {'GO ms':>9s} {'XLA/none':>8s} {'GO/XLA':>7s} {'peak none MB':>12s} "
           f"{'peak XLA MB':>11s} {'peak GO MB':>10s}"]
  for r in rows:
    for c in r["cells"]:
      none, all_, xla = c["no_fusion"], c["fuse_all"], c["xla_fusion"]
      go = c.get(LEARNED_SINGLE) or c.get(LEARNED_JOINT)
      go_peak = go["peak_memory"] if go else None
      lines.append(
          f"{r['model']:26s} {c['devices']:2d} {c['placement']:>9s} {_ms(none):>9s} "
          f"{_ms(all_):>9s} {_ms(xla):>9s} {_ms(go):>9s} "
          f"{_ratio(xla['makespan'], none['makespan'], 8)} "
          f"{_ratio(go['makespan'], xla['makespan'], 7) if go else '-':>7s} "
          f"{none['peak_memory'] / 1e6:12.1f} {xla['peak_memory'] / 1e6:11.1f} "
          f"{f'{go_peak / 1e6:10.1f}' if go_peak is not None else '-':>10s}")
  return "\n".join(lines)


def _geomean(x: Sequence[float]) -> float:
  return float(math.exp(np.mean(np.log(x)))) if len(x) else float("nan")


def figures(rows) -> Dict[str, Any]:
  """Issue 13's figures from the table's rows (only the cells holding a learned entry).

  single: models, share with GO's fusion <= XLA's, mean of GO/XLA - 1 (negative: GO lower),
    geometric mean of GO/XLA and of GO/fuse_all;
  joint[D]: models, geometric means of joint / (placement + XLA), joint / (placement +
    fuse_all), and the mean peak-memory ratio joint / (placement + XLA)."""
  out: Dict[str, Any] = {"single": None, "joint": {}}
  single = [c for r in rows for c in r["cells"] if LEARNED_SINGLE in c]
  if single:
    ratio = [c[LEARNED_SINGLE]["makespan"] / c["xla_fusion"]["makespan"] for c in single]
    out["single"] = {
        "models": len(single),
        "at_or_below_xla_share": float(np.mean([x <= 1.0 for x in ratio])),
        "mean_relative_to_xla": float(np.mean(ratio) - 1.0),
        "geomean_vs_xla": _geomean(ratio),
        "geomean_vs_fuse_all": _geomean([c[LEARNED_SINGLE]["makespan"]
                                         / c["fuse_all"]["makespan"] for c in single])}
  by_d: Dict[int, List[Dict[str, Any]]] = {}
  for r in rows:
    for c in r["cells"]:
      if LEARNED_JOINT in c:
        by_d.setdefault(int(c["devices"]), []).append(c)
  for d, cells in sorted(by_d.items()):
    j = [c[LEARNED_JOINT] for c in cells]
    out["joint"][d] = {
        "models": len(cells),
        "feasible": int(sum(e["feasible"] for e in j)),
        "geomean_vs_pipeline_xla": _geomean([e["makespan"] / c["xla_fusion"]["makespan"]
                                             for e, c in zip(j, cells)]),
        "geomean_vs_pipeline_fuse_all": _geomean([e["makespan"] / c["fuse_all"]["makespan"]
                                                  for e, c in zip(j, cells)]),
        "ahead_share": float(np.mean([e["makespan"] < c["xla_fusion"]["makespan"]
                                      for e, c in zip(j, cells)])),
        "mean_peak_vs_pipeline_xla": float(np.mean([e["peak_memory"]
                                                    / c["xla_fusion"]["peak_memory"]
                                                    for e, c in zip(j, cells)]))}
  return out


def figures_text(fig: Dict[str, Any]) -> str:
  lines = []
  s = fig.get("single")
  if s:
    lines.append(f"1 device, {s['models']} models: GO fusion <= XLA on "
                 f"{s['at_or_below_xla_share']:.0%} (target 75%), mean GO/XLA - 1 = "
                 f"{s['mean_relative_to_xla']:+.1%}, geo-mean GO/XLA {s['geomean_vs_xla']:.3f}, "
                 f"GO/fuse_all {s['geomean_vs_fuse_all']:.3f}")
  for d, j in fig.get("joint", {}).items():
    lines.append(f"{d} devices, {j['models']} models ({j['feasible']} feasible): joint / "
                 f"(placement + XLA) geo-mean {j['geomean_vs_pipeline_xla']:.3f} (ahead on "
                 f"{j['ahead_share']:.0%}), joint / (placement + fuse_all) "
                 f"{j['geomean_vs_pipeline_fuse_all']:.3f}, peak memory x"
                 f"{j['mean_peak_vs_pipeline_xla']:.2f} of the pipeline's")
  return "\n".join(lines)
