"""The partitioning figures (issue 15): operator partitioning against placement on zoo steps.

Per zoo model (its training step before XLA's passes, costed on a device, with its HLO strategy
space) and device count D (the `nvlink<D>` preset), with every device's memory set to
`mem_factor` times the graph's single-device footprint (section 2, topology specs): the
placement methods (`placers`, the best by objective is "best placement") and the partitioning
methods (`partitioners`, k = D workers) are solved and re-simulated; a row holds the makespan,
feasibility, fullest device's peak memory against the capacity, the communication bytes of a
strategy and the search seconds. `optimality` checks Tofu's dynamic program against brute
force on programs small enough to enumerate.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from go_jax import methods
from go_jax.methods import partition_search as search
from go_jax.methods import partitioning
from simulator import topology_spec
from simulator.partition import programs

PLACERS = ("heft", "m_etf", "m_sct", "metis", "expert")
PARTITIONERS = ("tofu", "data_parallel", "megatron")


def check_lists(models: Sequence[str], counts: Sequence[int], placers: Sequence[str],
                partitioners: Sequence[str], batch: int, size: Optional[str] = None) -> None:
  """ValueError naming the launcher's flag: an empty --models (a table with no rows), no
  method at all, an entry given twice (it would run twice or make two columns), a device count below 2
  (a partition over one worker is the single-device step, out of memory by construction at a
  --mem_factor below 1) or a --batch that does not divide a device count (data parallelism
  would silently fall back to replicating every op). With --batch=0 each model's own batch
  at `size` (`zoo.check`) must divide the counts, so the check names the model."""
  if not models:
    raise ValueError("--models: empty; give at least one zoo model")
  if not placers and not partitioners:
    raise ValueError("--placers and --partitioners: both empty; give at least one method")
  for flag, values in (("models", models), ("devices", counts), ("placers", placers),
                       ("partitioners", partitioners)):
    twice = sorted({str(v) for v in values if list(values).count(v) > 1})
    if twice:
      raise ValueError(f"--{flag}: given twice: {', '.join(twice)}")
  small = [d for d in counts if d < 2]
  if small:
    raise ValueError(f"--devices: {small[0]} is below 2 (partitioning over one worker is "
                     "the single-device step, out of memory by construction)")
  why = "data parallelism would replicate every op instead of splitting the batch"
  bad = [d for d in counts if batch and batch % d]
  if bad:
    raise ValueError(f"--batch={batch} does not divide --devices count(s) {bad} ({why})")
  if batch or size is None:
    return
  from simulator import zoo  # pylint: disable=g-import-not-at-top  # loads the zoo's modules
  for model in models:
    own = zoo.check(model, size).get("batch")
    bad = [d for d in counts if own and own % d]
    if bad:
      raise ValueError(f"--batch=0: {model}'s own batch at --size={size} is {own}, which does "
                       f"not divide --devices count(s) {bad} ({why}); give --batch")


def cell_key(model: str, devices: int, method: str) -> str:
  """The key of one row in a resumable results file."""
  return f"{model} D={devices} {method}"


def model_rows(model: str, size: str, devices: Sequence[int], mem_factor: float,
               device: str = "v100", placers: Sequence[str] = PLACERS,
               partitioners: Sequence[str] = PARTITIONERS, *,
               done: Optional[Mapping[str, Dict[str, Any]]] = None,
               on_row: Optional[Callable[[str, Dict[str, Any]], None]] = None,
               **knobs) -> List[Dict[str, Any]]:
  """One row per (device count, method) on `model`'s step (module docstring).

  `done` holds rows of an earlier run by `cell_key` (made with the same size, knobs, device
  and mem_factor: the caller checks): those are returned as they are, not rerun, and the graph
  is not built when every row is there. `on_row(key, row)` is called after each new row, so a
  caller can save its results file before the next one.
  """
  done = done or {}
  names = [n for n in list(placers) + list(partitioners) if n in methods.available()]
  if all(cell_key(model, d, n) in done for d in devices for n in names):
    return [done[cell_key(model, d, n)] for d in devices for n in names]
  graph = programs.zoo_graph(model, size, device, **knobs)
  rows = []
  for d in devices:
    spec = topology_spec.parse_topology(f"nvlink{d}@mem={mem_factor}x")
    topo, footprint = topology_spec.make_topology(spec, graph)
    for name in names:
      key = cell_key(model, d, name)
      if key in done:
        rows.append(done[key])
        continue
      t0 = time.perf_counter()
      sol = methods.solve(name, graph, topo)
      rows.append({
          "model": model, "size": size, "knobs": dict(knobs), "devices": d, "method": name,
          "kind": methods.get(name).kind, "nodes": graph.num_nodes,
          "solved_nodes": sol.graph.num_nodes, "footprint": footprint,
          "capacity": float(np.min(topo.mem_capacity)), "makespan": sol.makespan,
          "feasible": sol.feasible, "peak_memory": float(np.max(sol.peak_memory)),
          "comm_bytes": sol.info.get("comm_bytes"), "exact": sol.info.get("exact"),
          "replicated": sol.info.get("replicated"), "search_seconds": sol.search_seconds,
          "levels_bytes": sol.info.get("levels_bytes"),
          "one_shot_bytes": sol.info.get("one_shot_bytes"), "picked": sol.info.get("picked"),
          "seconds": time.perf_counter() - t0})
      if on_row is not None:
        on_row(key, rows[-1])
  return rows


_ROW_NUMBERS = ("devices", "nodes", "footprint", "capacity", "makespan", "peak_memory")
_ROW_TEXTS = ("model", "method", "kind")
_OPT_FIELDS = ("program", "k", "ops", "assignments", "brute_bytes", "tofu_bytes", "ratio",
               "brute_seconds", "tofu_seconds")


def check_cells(cells: Mapping[str, Any], path: str, optimality_key: str = "optimality") -> None:
  """ValueError naming `path`, the cell and the field for a results file's cell the tables
  could not read (hand-edited or corrupted): a row that is not an object, lacks a field or has
  one of the wrong type (a NaN number included); the optimality cell, a list of such rows."""
  def number(x, nan_ok=False):
    return (isinstance(x, (int, float)) and not isinstance(x, bool)
            and (nan_ok or x == x))
  for key, cell in cells.items():
    if key == optimality_key:
      if not isinstance(cell, list):
        raise ValueError(f"{path}: cell {key!r} is not a list")
      for i, r in enumerate(cell):
        if not isinstance(r, dict):
          raise ValueError(f"{path}: cell {key!r} row {i} is not an object")
        for f in _OPT_FIELDS:
          if f not in r:
            raise ValueError(f"{path}: cell {key!r} row {i} has no field {f!r}")
      continue
    if not isinstance(cell, dict):
      raise ValueError(f"{path}: cell {key!r} is not an object")
    for f in _ROW_NUMBERS + _ROW_TEXTS + ("feasible", "comm_bytes"):
      if f not in cell:
        raise ValueError(f"{path}: cell {key!r} has no field {f!r}")
    for f in _ROW_NUMBERS:
      if not number(cell[f]):
        raise ValueError(f"{path}: cell {key!r} field {f!r} is not a number: {cell[f]!r}")
    for f in _ROW_TEXTS:
      if not isinstance(cell[f], str):
        raise ValueError(f"{path}: cell {key!r} field {f!r} is not a string: {cell[f]!r}")
    if not isinstance(cell["feasible"], bool):
      raise ValueError(f"{path}: cell {key!r} field 'feasible' is not true/false: "
                       f"{cell['feasible']!r}")
    if cell["comm_bytes"] is not None and not number(cell["comm_bytes"]):
      raise ValueError(f"{path}: cell {key!r} field 'comm_bytes' is not a number: "
                       f"{cell['comm_bytes']!r}")


def summary(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
  """Per (model, devices): each partitioner's row and the best placement (feasible first)."""
  out = []
  keys = sorted({(r["model"], r["devices"]) for r in rows})
  for model, d in keys:
    cell = [r for r in rows if r["model"] == model and r["devices"] == d]
    placed = [r for r in cell if r["kind"] != "partition"]
    best = min(placed, key=lambda r: (not r["feasible"], r["makespan"])) if placed else None
    entry = {"model": model, "devices": d, "nodes": cell[0]["nodes"],
             "footprint": cell[0]["footprint"], "capacity": cell[0]["capacity"],
             "placements_feasible": sum(r["feasible"] for r in placed),
             "placements": len(placed), "best_placement": best}
    for r in cell:
      if r["kind"] == "partition":
        entry[r["method"]] = r
    out.append(entry)
  return out


def _times(x: float) -> str:
  """A ratio for the table: 2 decimals in [0.01, 1000), else 3 significant digits (a capacity
  of 1e-300 footprints must not print as 0.00 beside a 300-digit ratio)."""
  return f"{x:.2f}" if 0.01 <= abs(x) < 1000 else f"{x:.3g}"


def _ms(r) -> str:
  if r is None:
    return "-"
  text = f"{r['makespan'] * 1e3:.3g} ms"
  if r["feasible"]:
    return text
  return (f"OOM ({_times(r['peak_memory'] / r['capacity'])}x cap)" if r["capacity"] > 0 else
          f"OOM ({r['peak_memory']:.3g} B, no memory)")


def table_text(rows: Sequence[Dict[str, Any]], partitioners=PARTITIONERS) -> str:
  """The Markdown table of `summary(rows)`: simulated step time (OOM: peak over capacity) and
  communication bytes per partitioner, and the best placement."""
  head = ["model", "D", "ops", "capacity / footprint", "placements feasible",
          "best placement"] + [f"{p}" for p in partitioners] + [f"{p} comm" for p in partitioners]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for e in summary(rows):
    best = e["best_placement"]
    cells = [e["model"], str(e["devices"]), str(e["nodes"]),
             _times(e['capacity'] / e['footprint']),
             f"{e['placements_feasible']} / {e['placements']}",
             (f"{best['method']} {_ms(best)}" if best else "-")]
    cells += [_ms(e.get(p)) for p in partitioners]
    cells += [(f"{e[p]['comm_bytes'] / 1e6:.3g} MB" if e.get(p) else "-") for p in partitioners]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


# ------------------------------------------------------------------ optimality
def _programs():
  """Small JAX programs (<= 12 ops) whose strategy spaces can be enumerated."""
  import jax
  import jax.numpy as jnp
  f32 = jnp.float32
  s = lambda *shape: jax.ShapeDtypeStruct(shape, f32)

  def mlp(x, w1, w2):
    return jnp.sum(jnp.tanh(x @ w1) @ w2)

  def attention(q, k, v):
    a = jax.nn.relu(q @ k.T)
    return (a @ v) * 2.0

  def residual(x, w1, w2):
    h = jnp.maximum(x @ w1, 0.0)
    return x + h @ w2

  def mlp_grad(x, w1, w2):
    return jax.grad(lambda a, b: jnp.sum(jnp.tanh(x @ a) @ b), (0, 1))(w1, w2)

  def grid(x, w):  # every output dim is 2: at k = 4 only a rows x columns split divides it
    return jnp.tanh(x @ w) * 2.0

  return {"mlp": (mlp, (s(8, 16), s(16, 8), s(8, 4))),
          "grid": (grid, (s(2, 8), s(8, 2))),
          "attention": (attention, (s(8, 16), s(8, 16), s(8, 16))),
          "residual": (residual, (s(8, 16), s(16, 32), s(32, 16))),
          "mlp_grad": (mlp_grad, (s(8, 16), s(16, 8), s(8, 4)))}


def optimality(degrees: Sequence[int] = (2, 4), limit: int = 2_000_000,
               level_limit: int = 200_000) -> List[Dict[str, Any]]:
  """Tofu's DP against brute force (same choices: every op partitioned) per program and k:
  the one-shot DP against brute force over 1-level strategies ("ratio"), and for k = 2^m > 2
  the tofu method's recursive answer (the recursive DP, or the one-shot strategy lifted where
  that is better) against brute force over m-level strategies ("level_ratio"; the recursive DP
  alone: "recursive_only_ratio"; None where there are more than `level_limit` of them), all in
  exact `comm_bytes`."""
  from simulator.partition import levels
  out = []
  for name, (fn, args) in _programs().items():
    graph = programs.program_graph(fn, *args, name=name)
    for k in degrees:
      space = programs.space_for(graph, k)
      allowed = partitioning.tofu_allowed(space)
      t0 = time.perf_counter()
      best = search.brute_force(graph, space, allowed, limit=limit)
      t1 = time.perf_counter()
      got = search.dp(graph, space, allowed)
      t2 = time.perf_counter()
      row = {"program": name, "k": k, "ops": graph.num_nodes,
             "assignments": best.states, "brute_bytes": best.comm_bytes,
             "tofu_bytes": got.comm_bytes, "ratio": _ratio(got.comm_bytes, best.comm_bytes),
             "exact": got.exact, "brute_seconds": t1 - t0, "tofu_seconds": t2 - t1,
             "level_assignments": None, "level_brute_bytes": None, "recursive_bytes": None,
             "level_ratio": None}
      if k > 2 and k & (k - 1) == 0:
        space2, m = programs.space_for(graph, 2), levels.num_levels(k)
        rec = search.recursive_dp(graph, space2, m)
        # The tofu method keeps the one-shot strategy (lifted) where it moves fewer bytes.
        picked = min(rec.comm_bytes, got.comm_bytes)
        row.update(recursive_bytes=rec.comm_bytes, recursive_exact=rec.exact,
                   tofu_recursive_bytes=picked)
        try:
          lb = search.brute_force_levels(graph, space2, m, limit=level_limit)
          row.update(level_assignments=lb.states, level_brute_bytes=lb.comm_bytes,
                     level_ratio=_ratio(picked, lb.comm_bytes),
                     recursive_only_ratio=_ratio(rec.comm_bytes, lb.comm_bytes))
        except ValueError:
          pass
      out.append(row)
  return out


def _ratio(got: float, best: float) -> float:
  return got / best if best > 0 else (1.0 if got == 0 else float("inf"))


def optimality_text(rows: Sequence[Dict[str, Any]]) -> str:
  head = ["program", "k", "ops", "assignments", "brute force bytes", "tofu bytes",
          "tofu / brute", "brute s", "tofu s", "multi-level assignments",
          "multi-level brute bytes", "recursive DP bytes", "tofu (recursive) bytes",
          "tofu (recursive) / multi-level brute"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  f = lambda x, fmt: "-" if x is None else format(x, fmt)
  for r in rows:
    lines.append(f"| {r['program']} | {r['k']} | {r['ops']} | {r['assignments']} | "
                 f"{r['brute_bytes']:.0f} | {r['tofu_bytes']:.0f} | {r['ratio']:.3f} | "
                 f"{r['brute_seconds']:.2f} | {r['tofu_seconds']:.3f} | "
                 f"{f(r['level_assignments'], 'd')} | {f(r['level_brute_bytes'], '.0f')} | "
                 f"{f(r['recursive_bytes'], '.0f')} | "
                 f"{f(r.get('tofu_recursive_bytes'), '.0f')} | {f(r['level_ratio'], '.3f')} |")
  return "\n".join(lines)
