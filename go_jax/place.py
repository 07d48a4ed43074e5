"""Place one graph on one topology with GO and the fast baselines, and compare them (go-jax-place).

  graph = place.load_graph_arg("layered:n=300,width=16,seed=0")
  result = place.place(graph, "nvlink4@mem=0.6x", finetune_seconds=60)
  print(place.markdown_table(result)); place.write_outputs(result, "results/place")

`place` runs, on one (graph, topology) instance: GO zero-shot from a pretrained checkpoint (the
greedy action and the best of K sampled ones, `training.zero_shot`), GO fine-tuned with PPO for a
wall-clock budget (`training.finetune`), and the baseline methods (`methods.solve`). Every
reported action is re-simulated with `methods.evaluate`, so every number in the table is what
the simulator gives for the placement and priority shown, whatever a method believed. GO's search
seconds are its measured wall time including instance setup (the hint placement) and XLA
compilation, which dominates on small graphs; the baselines' are `Solution.search_seconds`.

Graphs with more than `max_nodes` nodes are coarsened (`simulator.coarsen`) and solved on the
coarse graph; the saved placements are expanded back to the original nodes (and re-simulated on
the original graph) next to the coarse ones.

Graph arguments (`load_graph_arg`): a source spec (`layered:n=300,width=16,seed=0`,
`pipedream:vgg16`, `zoo:gnmt2,size=tiny`, see `simulator.sources`), a `.npz` file of
`CompGraph.save`, a bare model name (PipeDream if it is one, else a model-zoo model), or
`package.module:function`, a function of no arguments returning a `CompGraph` or a JAX program
`(fn, args)` that `simulator.from_jax` turns into its pre-optimisation HLO graph.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
import re
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import ml_collections
import numpy as np
from absl import logging

import simulator
from go_jax import harness, methods, objectives, plotting, pretrained
from simulator import coarsen as coarsen_lib
from simulator import fileio, sources
from simulator.graph import CompGraph

DEFAULT_GRAPH = "layered:n=300,width=16,seed=0"
DEFAULT_TOPOLOGY = "nvlink4@mem=0.6x"
DEFAULT_BASELINES = ("heft", "m_etf", "m_sct", "metis", "expert", "brkga")
DEFAULT_MAX_NODES = 2000
DEFAULT_FINETUNE_SECONDS = 60.0
DEFAULT_BRKGA_BUDGET = 5000
DEFAULT_LEARNING_RATE = 1e-3
DEFAULT_DEVICE_SPEC = "v100"
# One update per call: the first call's K samples are then drawn from the starting parameters,
# so fine-tuning also yields the zero-shot stages and one compiled update serves all three.
FINETUNE_UPDATES_PER_CALL = 1
FINETUNE_MAX_UPDATES = 1_000_000  # "unbounded": the wall-clock budget ends fine-tuning
NO_CHECKPOINT = "none"
JSON_NAME, MD_NAME, NPZ_NAME, BARS_NAME = (
    "results.json", "results.md", "placement.npz", "objective_bars.png")


# ------------------------------------------------------------------ graphs
def _call_graph_function(text: str, device_spec: str) -> CompGraph:
  """The graph of `package.module:function` (a CompGraph or a JAX program (fn, args))."""
  module_name, _, func_name = text.partition(":")
  if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", module_name) or \
      not func_name.isidentifier():
    raise ValueError(f"graph {text!r}: {module_name!r} is not a graph source kind "
                     f"({', '.join(sources.REGISTRY)}) and {text!r} is not "
                     "'package.module:function'")
  try:
    module = importlib.import_module(module_name)
  except ImportError as e:
    raise ValueError(f"graph {text!r}: {module_name!r} is neither a graph source kind "
                     f"({', '.join(sources.REGISTRY)}) nor an importable module ({e})") from e
  fn = getattr(module, func_name, None)
  if not callable(fn):
    raise ValueError(f"graph {text!r}: module {module_name!r} has no function {func_name!r}")
  try:
    out = fn()
  except Exception as e:  # the user's code: name it, keep the cause
    raise ValueError(f"graph {text!r}: calling {func_name}() failed: "
                     f"{type(e).__name__}: {e}") from e
  if isinstance(out, CompGraph):
    return out
  if isinstance(out, tuple) and len(out) == 2 and callable(out[0]) and isinstance(out[1], tuple):
    program, args = out
    return simulator.from_jax(program, *args, stage="pre", device_spec=device_spec,
                              name=text)
  raise ValueError(f"graph {text!r}: {func_name}() must return a CompGraph or a JAX program "
                   f"(fn, args) with args a tuple, got {type(out).__name__}")


def load_graph_arg(text: str, *, device_spec: str = DEFAULT_DEVICE_SPEC) -> CompGraph:
  """The graph a command-line argument names (forms in the module docstring).

  `device_spec` (a `simulator.costmodel` device name) costs the ops of a JAX program.

  Raises:
    ValueError: malformed spec, unknown name (the message lists the options), missing file,
      a module or function that cannot be imported or called, or a bad return value.
  """
  if not isinstance(text, str) or not text.strip():
    raise ValueError(f"graph must be a non-empty string, got {text!r}")
  text = text.strip()
  if text.endswith(".npz"):
    if not os.path.isfile(text):
      raise ValueError(f"graph file {text!r} does not exist")
    return CompGraph.load(text)
  if ":" in text:
    if text.partition(":")[0].strip() in sources.REGISTRY:
      return sources.load_graph(text)
    return _call_graph_function(text, device_spec)
  names = sources.available_graphs()
  for kind in ("pipedream", "zoo"):
    if text in names[kind]:
      return sources.load_graph(f"{kind}:{text}")
  raise ValueError(
      f"unknown graph name {text!r}: not a PipeDream model "
      f"({', '.join(names['pipedream']) or 'none found: ../shared/data is absent'}) nor a "
      f"model-zoo model ({', '.join(names['zoo'])}); other forms: a source spec "
      f"({', '.join(k + ':...' for k in sources.REGISTRY)}), a .npz file or "
      "'package.module:function'")


# ------------------------------------------------------------------ GO policy
def load_policy(checkpoint: str = pretrained.DEFAULT
                ) -> Tuple[ml_collections.ConfigDict, Any, str]:
  """(config, params, label) of a shipped checkpoint name or a training workdir.

  "none" gives fresh parameters (params None) of the shipped default checkpoint's policy and
  training config: fine-tuning from scratch, the no-transfer comparison.
  """
  if checkpoint == NO_CHECKPOINT:
    return pretrained.load_config(pretrained.DEFAULT), None, "none (fresh parameters)"
  config, params = pretrained.load(checkpoint)
  return config, params, checkpoint


def go_config(config, *, objective: str, learning_rate: float = DEFAULT_LEARNING_RATE,
              samples: Optional[int] = None) -> ml_collections.ConfigDict:
  """A copy of a training config set up to fine-tune on one instance for a time budget."""
  cfg = ml_collections.ConfigDict(config.to_dict() if hasattr(config, "to_dict")
                                  else dict(config))
  cfg.update(objective=objective, graphs_per_update=1, updates=FINETUNE_MAX_UPDATES,
             updates_per_call=FINETUNE_UPDATES_PER_CALL, learning_rate=float(learning_rate),
             lr_schedule="constant", warmup_updates=0)
  if samples is not None:
    if samples < 1:
      raise ValueError(f"samples must be >= 1, got {samples}")
    cfg.samples = int(samples)
  return cfg


# ------------------------------------------------------------------ results
@dataclasses.dataclass(frozen=True)
class Row:
  """One method's action on the solved graph, as the simulator scores it."""
  method: str  # display name, e.g. "go fine-tuned (60s)" or "heft"
  key: str  # file-safe id, e.g. "go_finetuned" or "heft"
  kind: str  # "go" or "baseline"
  objective: float  # lower is better; infeasible actions score above every feasible one
  makespan: float  # seconds
  peak_memory: np.ndarray  # (D,) bytes
  feasible: bool
  gap: float  # objective / lower bound - 1
  search_seconds: float  # wall time (GO: setup + compile + search)
  placement: np.ndarray  # (N,) int, on the solved graph
  priority: np.ndarray  # (N,) float
  info: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class PlaceResult:
  rows: List[Row]
  best: Row  # the row of smallest objective (a baseline wins ties)
  graph: CompGraph  # the graph solved (the coarse one when coarsened)
  original: CompGraph  # the graph given
  coarsened: Optional[coarsen_lib.Coarsened]
  topology: simulator.Topology
  lower_bound: float
  settings: Dict[str, Any]
  original_scores: Dict[str, Dict[str, Any]]  # coarsened: row key -> expanded, re-simulated

  def row(self, key: str) -> Optional[Row]:
    return next((r for r in self.rows if r.key == key), None)

  @property
  def go_row(self) -> Optional[Row]:
    """GO's final answer: fine-tuned, else zero-shot best of K (None: GO did not run)."""
    return _go_final(self.rows)

  @property
  def best_baseline(self) -> Optional[Row]:
    rows = [r for r in self.rows if r.kind == "baseline"]
    return min(rows, key=lambda r: r.objective) if rows else None

  def expand(self, values: np.ndarray) -> np.ndarray:
    """Per-node values of the solved graph carried to the original graph's nodes."""
    return values if self.coarsened is None else self.coarsened.expand(values)


def _go_final(rows: Sequence[Row]) -> Optional[Row]:
  by_key = {r.key: r for r in rows}
  return by_key.get("go_finetuned", by_key.get("go_zero_shot_best"))


def _row(graph, topology, objective: str, lb: float, method: str, key: str, kind: str,
         placement, priority, seconds: float, **info) -> Row:
  place = np.asarray(placement, np.int64)
  prio = np.asarray(priority, np.float64)
  s = methods.evaluate(graph, topology, place, prio, objective)
  gap = s["objective"] / lb - 1.0 if lb > 0 else math.inf
  return Row(method, key, kind, s["objective"], s["makespan"], s["peak_memory"],
             s["feasible"], gap, float(seconds), place, prio, info)


def _since(t0: float) -> str:
  return f"{time.perf_counter() - t0:.1f} s elapsed"


# ------------------------------------------------------------------ place
def place(graph: CompGraph, topology_spec: str, *, objective: str = "makespan", seed: int = 0,
          checkpoint: str = pretrained.DEFAULT, config=None, params=None,
          finetune_seconds: float = DEFAULT_FINETUNE_SECONDS,
          finetune_updates: Optional[int] = None,
          learning_rate: float = DEFAULT_LEARNING_RATE, samples: Optional[int] = None,
          baselines: Sequence[str] = DEFAULT_BASELINES,
          brkga_budget: int = DEFAULT_BRKGA_BUDGET, max_nodes: int = DEFAULT_MAX_NODES,
          graph_spec: Optional[str] = None) -> PlaceResult:
  """Runs GO (zero-shot, fine-tuned) and the baselines on one instance; see module docstring.

  Args:
    graph: the graph to place.
    topology_spec: 'PRESET' or 'PRESET@mem=VALUE' (`harness.parse_topology`).
    objective: "makespan" or "peak_memory".
    seed: seed of GO and of the randomised baselines.
    checkpoint: GO's starting policy (`load_policy`), unless `config` is given.
    config, params: a training config and policy parameters to use instead (params None:
      fresh parameters, no zero-shot rows).
    finetune_seconds: fine-tuning wall-clock budget (0: no fine-tuning).
    finetune_updates: optional cap on fine-tuning updates (None: the time budget decides).
    learning_rate, samples: fine-tuning learning rate and K (None: the config's K).
    baselines: method names; ones not registered (e.g. metis without pymetis) are skipped.
    brkga_budget: simulator evaluations of brkga.
    max_nodes: graphs above this many nodes are coarsened to it.
    graph_spec: the text the graph came from (recorded in the settings).
  """
  t0 = time.perf_counter()
  objectives.get_objective(objective)
  if finetune_seconds < 0:
    raise ValueError(f"finetune_seconds must be >= 0, got {finetune_seconds}")
  if finetune_updates is not None and finetune_updates < 1:
    raise ValueError(f"finetune_updates must be >= 1 or None, got {finetune_updates}")
  if not isinstance(max_nodes, (int, np.integer)) or max_nodes < 2:
    raise ValueError(f"max_nodes must be an integer >= 2, got {max_nodes!r}")
  tspec = harness.parse_topology(topology_spec)
  methods.available()  # registers the built-in methods
  unknown = [b for b in baselines if b not in methods.METHODS]
  for b in unknown:
    logging.warning("baseline %r is not registered (optional dependency missing?): skipped; "
                    "registered: %s", b, sorted(methods.METHODS))
  baselines = [b for b in baselines if b in methods.METHODS]
  scheduling = [b for b in baselines if methods.METHODS[b].kind == "schedule"]
  if scheduling:
    raise ValueError(f"baselines {scheduling} only schedule a fixed placement; give placement "
                     "or joint methods")

  # The instance: coarsen big graphs, then the topology (its memory may scale with the graph).
  original, coarse = graph, None
  if graph.num_nodes > max_nodes:
    coarse = coarsen_lib.coarsen(graph, int(max_nodes))
    graph = coarse.graph
    logging.info("coarsened %d -> %d nodes (%s) to solve (%s)", original.num_nodes,
                 graph.num_nodes, ", ".join(f"{s}: {m}" for s, m in coarse.steps), _since(t0))
  # Capacities from the graph given (a "0.6x" footprint is the user's graph's), not the coarse.
  topology, footprint = harness.make_topology(tspec, original)
  lb = float(objectives.get_objective(objective).lower_bound(graph, topology)["bound"])
  logging.info("instance: %r on %s (%d devices), %s lower bound %.6g (%s)", graph,
               topology_spec, topology.num_devices, objective, lb, _since(t0))

  # GO: zero-shot from the checkpoint, then fine-tuned; every action re-simulated by `ev`.
  if config is None:
    config, params, label = load_policy(checkpoint)
  else:
    label = checkpoint if params is not None else "none (fresh parameters)"
  cfg = go_config(config, objective=objective, learning_rate=learning_rate, samples=samples)
  k = int(cfg.samples)
  ev = lambda *a, **kw: _row(graph, topology, objective, lb, *a, **kw)
  rows: List[Row] = []
  from go_jax import training  # pylint: disable=g-import-not-at-top  (heavy: PPO, policies)
  if finetune_seconds > 0:
    logging.info("GO from %s: zero-shot, then fine-tuning for %g s (lr %g, K=%d) (%s)", label,
                 finetune_seconds, learning_rate, k, _since(t0))
    t = time.perf_counter()
    f = training.finetune(cfg, graph, topology, params, max_seconds=float(finetune_seconds),
                          max_updates=finetune_updates, seed=seed)
    seconds = time.perf_counter() - t
    if params is not None:  # zero-shot: the greedy action and the first update's K samples
      rows.append(ev("go zero-shot (greedy)", "go_zero_shot_greedy", "go",
                     f.zero_shot_placement, f.zero_shot_priority, f.zero_shot_seconds))
      zb = f.zero_shot_best
      rows.append(ev(f"go zero-shot (best of {k})", "go_zero_shot_best", "go",
                     zb["placement"], zb["priority"], zb["seconds"], samples=k))
      logging.info("GO zero-shot: greedy %.6g, best of %d %.6g", rows[-2].objective, k,
                   rows[-1].objective)
    rows.append(ev(f"go fine-tuned ({finetune_seconds:g}s)", "go_finetuned",
                   "go", f.placement, f.priority, seconds, updates=int(f.updates),
                   samples=k, start=label, start_greedy_objective=f.zero_shot_objective))
    logging.info("GO fine-tuned: %.6g after %d updates in %.1f s (%s)", rows[-1].objective,
                 f.updates, seconds, _since(t0))
  elif params is not None:
    logging.info("GO zero-shot from %s, K=%d (%s)", label, k, _since(t0))
    t = time.perf_counter()
    z = training.zero_shot(cfg, graph, topology, params, seed=seed, samples=k)
    seconds = time.perf_counter() - t
    rows.append(ev("go zero-shot (greedy)", "go_zero_shot_greedy", "go", z.greedy_placement,
                   z.greedy_priority, seconds))
    rows.append(ev(f"go zero-shot (best of {k})", "go_zero_shot_best", "go", z.best_placement,
                   z.best_priority, seconds, samples=k))
    logging.info("GO zero-shot: greedy %.6g, best of %d %.6g in %.1f s (%s)",
                 rows[-2].objective, k, rows[-1].objective, seconds, _since(t0))
  # The baselines (solve re-simulates too; `ev` does it again so that all rows are alike).
  for name in baselines:
    budget = brkga_budget if name == "brkga" else None
    sol = methods.solve(name, graph, topology, objective=objective, seed=seed, budget=budget)
    rows.append(ev(name, name, "baseline", sol.placement, sol.priority, sol.search_seconds,
                   evaluations=int(sol.evaluations), reason=sol.reason))
    logging.info("%s: %.6g in %.1f s (%s)", name, rows[-1].objective, sol.search_seconds,
                 _since(t0))
  if not rows:
    raise ValueError("nothing to compare: no baselines and no GO rows (give baselines, "
                     "finetune_seconds > 0 or a pretrained checkpoint)")
  best = min(rows, key=lambda r: (r.objective, r.kind == "go"))

  original_scores = {}  # every action expanded to the original nodes, scored there
  if coarse is not None:
    for r in rows:
      s = methods.evaluate(original, topology, coarse.expand(r.placement),
                           coarse.expand(r.priority), objective)
      original_scores[r.key] = {"objective": s["objective"], "makespan": s["makespan"],
                                "peak_memory": float(np.max(s["peak_memory"])),
                                "feasible": s["feasible"]}
  settings = {
      "graph": graph_spec, "graph_name": original.name, "nodes": original.num_nodes,
      "edges": original.num_edges, "solved_nodes": graph.num_nodes,
      "coarsened": coarse is not None, "max_nodes": int(max_nodes),
      "topology": topology_spec, "devices": topology.num_devices,
      "mem_capacity": _finite(np.min(topology.mem_capacity)),
      "mem_reference": _finite(footprint), "objective": objective, "seed": int(seed),
      "lower_bound": lb, "checkpoint": label, "finetune_seconds": float(finetune_seconds),
      "finetune_updates": finetune_updates, "learning_rate": float(learning_rate),
      "samples": k, "baselines": list(baselines), "skipped_baselines": unknown,
      "brkga_budget": int(brkga_budget), "seconds": time.perf_counter() - t0,
  }
  return PlaceResult(rows, best, graph, original, coarse, topology, lb, settings,
                     original_scores)


# ------------------------------------------------------------------ reporting
def _finite(x) -> Optional[float]:
  """JSON-safe float: None for None, NaN and inf (strict JSON has neither)."""
  return None if x is None or not math.isfinite(float(x)) else float(x)


def row_json(r: Row, topology) -> Dict[str, Any]:
  cap = float(np.min(topology.mem_capacity))
  peak = float(np.max(r.peak_memory))
  return {"method": r.method, "key": r.key, "kind": r.kind, "objective": _finite(r.objective),
          "makespan_s": _finite(r.makespan), "peak_memory_bytes": peak,
          "peak_memory_per_device": [float(x) for x in r.peak_memory],
          "mem_capacity_bytes": _finite(cap),
          "memory_fraction": peak / cap if math.isfinite(cap) and cap > 0 else None,
          "feasible": bool(r.feasible), "gap": _finite(r.gap),
          "search_seconds": r.search_seconds,
          **{k: (v if not isinstance(v, float) else _finite(v)) for k, v in r.info.items()}}


def _fmt_objective(value: float, objective: str) -> str:
  return (plotting.format_seconds(value) if objective == "makespan"
          else plotting.format_bytes(value))


def markdown_table(result: PlaceResult) -> str:
  """The comparison table (Markdown), best objective in bold."""
  obj = result.settings["objective"]
  cap = float(np.min(result.topology.mem_capacity))
  head = ("method", f"objective ({obj})", "makespan", "peak memory / capacity", "feasible",
          "gap to LB", "search s")
  lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * 6) + "|"]
  for r in result.rows:
    peak = float(np.max(r.peak_memory))
    mem = (f"{plotting.format_bytes(peak)} / {plotting.format_bytes(cap)} ({peak / cap:.0%})"
           if math.isfinite(cap) and cap > 0 else f"{plotting.format_bytes(peak)} / inf")
    value = _fmt_objective(r.objective, obj)
    cells = (r.method, f"**{value}**" if r is result.best else value,
             plotting.format_seconds(r.makespan), mem, "yes" if r.feasible else "NO",
             f"{r.gap:+.1%}" if math.isfinite(r.gap) else "inf", f"{r.search_seconds:.3g}")
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def header(result: PlaceResult) -> str:
  """What was solved: graph, coarsening, topology, objective, lower bound, GO's start."""
  s, g, obj = result.settings, result.original, result.settings["objective"]
  lines = [f"graph: {s['graph'] or g.name} ('{g.name}', {g.num_nodes} ops, "
           f"{g.num_edges} edges)"]
  if result.coarsened is not None:
    lines.append(f"coarsened to {result.graph.num_nodes} nodes (more than max_nodes="
                 f"{s['max_nodes']}): methods solved the coarse graph; placement.npz also "
                 "holds the placements expanded to the original nodes, which score there:")
    lines += [f"  {r.method}: {obj} {_fmt_objective(v['objective'], obj)}"
              f"{'' if v['feasible'] else ' (OUT OF MEMORY)'}"
              for r in {id(r): r for r in (result.best, result.go_row) if r}.values()
              for v in [result.original_scores[r.key]]]
  cap = plotting.format_bytes(np.min(result.topology.mem_capacity))
  lines += [f"topology: {s['topology']} ({s['devices']} devices, capacity {cap} per device)",
            f"objective: {obj} (lower bound {_fmt_objective(s['lower_bound'], obj)})",
            f"GO: checkpoint {s['checkpoint']}; GO search seconds are wall time including "
            "setup and XLA compilation"]
  return "\n".join(lines)


def verdict(result: PlaceResult) -> str:
  """One line: which method won and by how much against the best baseline."""
  best, base, obj = result.best, result.best_baseline, result.settings["objective"]
  fmt = lambda v: _fmt_objective(v, obj)
  if base is None:
    return f"{best.method} won with {fmt(best.objective)} (no baselines run)"
  if best.kind == "go":
    return (f"{best.method} won: {fmt(best.objective)}, {1 - best.objective / base.objective:.2%}"
            f" below the best baseline {base.method} ({fmt(base.objective)})")
  go = min((r for r in result.rows if r.kind == "go"), key=lambda r: r.objective, default=None)
  if go is None:
    return f"{best.method} won with {fmt(best.objective)} (GO not run)"
  if go.objective == best.objective:
    return f"{best.method} won with {fmt(best.objective)}, tied by {go.method}"
  return (f"{best.method} (baseline) won: {fmt(best.objective)}; GO's best ({go.method}, "
          f"{fmt(go.objective)}) is {go.objective / best.objective - 1:.2%} above it")


def to_json(result: PlaceResult) -> Dict[str, Any]:
  out = {"settings": result.settings, "best": result.best.method,
         "verdict": verdict(result),
         "rows": [row_json(r, result.topology) for r in result.rows]}
  if result.coarsened is not None:
    out["original_graph"] = result.original_scores  # row key -> expanded action's scores
  return out


def _slug(key: str) -> str:
  return re.sub(r"[^A-Za-z0-9_.-]+", "_", key)


def write_outputs(result: PlaceResult, out: str, *, plots: bool = True) -> Dict[str, str]:
  """Writes results.json, results.md, placement.npz and (with plots) the PNGs; returns paths."""
  os.makedirs(out, exist_ok=True)
  files = {}
  best, go = result.best, result.go_row
  arrays = {"placement": result.expand(best.placement),
            "priority": result.expand(best.priority), "method": np.array(best.method)}
  if go is not None:
    arrays.update(go_placement=result.expand(go.placement),
                  go_priority=result.expand(go.priority), go_method=np.array(go.method))
  if result.coarsened is not None:
    arrays.update(mapping=result.coarsened.mapping, coarse_placement=best.placement,
                  coarse_priority=best.priority)
    if go is not None:
      arrays.update(coarse_go_placement=go.placement, coarse_go_priority=go.priority)
  files["placement"] = os.path.join(out, NPZ_NAME)
  with fileio.atomic_open(files["placement"], "wb") as fh:
    np.savez(fh, **arrays)
  if plots:
    for r in {id(r): r for r in (go, result.best_baseline) if r is not None}.values():
      ref = simulator.reference_simulate(result.graph, result.topology, r.placement,
                                         r.priority)
      path = os.path.join(out, f"gantt_{_slug(r.key)}.png")
      obj = result.settings["objective"]
      plotting.plot_schedule(result.graph, result.topology, ref, path, title=(
          f"{r.method} on {result.graph.name} / {result.settings['topology']}: {obj} "
          f"{_fmt_objective(r.objective, obj)}{'' if r.feasible else ', OUT OF MEMORY'}"))
      files[f"gantt_{r.key}"] = path
    files["bars"] = plotting.plot_bars(
        [r.method for r in result.rows], [r.objective for r in result.rows],
        os.path.join(out, BARS_NAME), title=f"{result.graph.name} on "
        f"{result.settings['topology']}", ylabel=result.settings["objective"],
        reference=result.lower_bound)
  files["table"] = os.path.join(out, MD_NAME)
  with fileio.atomic_open(files["table"], "w") as fh:
    fh.write(header(result) + "\n\n" + markdown_table(result) + "\n\n" + verdict(result)
             + "\n")
  files["results"] = os.path.join(out, JSON_NAME)
  data = to_json(result)
  data["files"] = {k: os.path.abspath(v) for k, v in sorted(files.items())}
  fileio.write_json(files["results"], data)
  return {k: os.path.abspath(v) for k, v in files.items()}


__all__ = ["place", "load_graph_arg", "load_policy", "go_config", "PlaceResult", "Row",
           "markdown_table", "header", "verdict", "to_json", "write_outputs", "DEFAULT_GRAPH",
           "DEFAULT_TOPOLOGY", "DEFAULT_BASELINES"]
