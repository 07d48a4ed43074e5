"""The learned methods' large-graph path (go_jax/methods/learned.py's module docstring): a graph
above `max_nodes` ops is coarsened, solved coarse with the coarse memory scaled, and every
stage expanded to the original ops and re-simulated there. Split from learned.py, which keeps
the one-instance path; its names are re-exported there.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Dict

import numpy as np

from go_jax.methods import Problem, Proposal, anytime_curve, evaluate_batch
from simulator import coarsen as coarsen_lib
from simulator import topology_spec
from simulator.graph import CompGraph, upward_rank
from simulator.simulate import simulate

# The large-graph path's own coarsening (not `coarsen`'s defaults, which pretraining graphs,
# `,coarsen=N` specs and Placeto keep): no group above this fraction of the total cost, so a
# name scope cannot become a quarter of the step, and merged ops hold only their members' peak
# live bytes (simulator/coarsen.py's "peak" temp bound), so coarse actions can fit in memory.
# Transfers: a merged op sends all of its outputs read outside ("sum", coarsen's rule; the
# "edge_max" alternative sends what one consumer group reads but then understates the output
# memory its device holds: on GNMT-8 its coarse-feasible answers were OOM on the original).
# Memory: the coarse capacities are the original's times the smallest coarse / original
# peak-memory ratio over a few spread placements ("calibrated"), not the single-device
# footprints' ratio ("footprint"), which a spread placement does not follow.
COARSE_MAX_GROUP_WEIGHT = 0.01
COARSE_TEMP_BOUND = "peak"
COARSE_OUT_BOUND = "sum"
COARSE_MEMORY_SCALE = "calibrated"
MEMORY_SCALES = ("footprint", "calibrated")
CRITICAL_SUFFIX = ", critical-path order"  # a coarse stage's placement, the original's order
PHASES = ("coarsen", "memory", "load", "setup", "compile", "search", "expand", "verify")


def expand_priority(coarse: coarsen_lib.Coarsened, priority, tie_break) -> np.ndarray:
  """(N,) float ranks 0..N-1 of the original ops: by their group's coarse `priority` (M,), ties
  (the members of one group) by `tie_break` (N,), e.g. the original graph's critical path;
  higher runs first, as for every priority."""
  group = coarsen_lib.expand(np.asarray(priority, np.float64), coarse.mapping)
  order = np.lexsort((np.asarray(tie_break, np.float64), group))
  ranks = np.empty(order.size, np.float64)
  ranks[order] = np.arange(order.size)
  return ranks


def coarse_options(method: str, config: Dict[str, Any]) -> Dict[str, Any]:
  """The large-graph path's coarsening options from `config` (defaults: COARSE_*), checked."""
  cap = config.get("coarse_max_group_weight", COARSE_MAX_GROUP_WEIGHT)
  if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float))
                          or not 0 < cap <= 1):
    raise ValueError(f"{method}: coarse_max_group_weight must be a fraction in (0, 1] or None, "
                     f"got {cap!r}")
  out = dict(max_group_weight=cap)
  for key, default, valid in (("temp_bound", COARSE_TEMP_BOUND, coarsen_lib.TEMP_BOUNDS),
                              ("out_bound", COARSE_OUT_BOUND, coarsen_lib.OUT_BOUNDS),
                              ("memory_scale", COARSE_MEMORY_SCALE, MEMORY_SCALES)):
    out[key] = config.get("coarse_" + key, default)
    if out[key] not in valid:
      raise ValueError(f"{method}: coarse_{key} must be one of {valid}, got {out[key]!r}")
  out["critical_order"] = config.get("coarse_critical_order", True)
  if not isinstance(out["critical_order"], (bool, np.bool_)):
    raise ValueError(f"{method}: coarse_critical_order must be True or False, got "
                     f"{out['critical_order']!r}")
  return out


def memory_scale(graph: CompGraph, coarse: coarsen_lib.Coarsened, topology, how: str,
                 critical=None) -> float:
  """Factor from the original capacities to the coarse problem's: "footprint": the coarse /
  original single-device footprints; "calibrated": the smallest coarse / original peak memory
  (per device, over devices holding at least a quarter of the largest one's) over three spread
  placements of the coarse graph (its topological order
  cut into D cost-balanced blocks, uniform random over D devices and over D // 2), each
  expanded to the original, memory unbounded, critical-path priorities (one batched simulation
  of each graph; a fixed seed). `critical`: the original graph's `upward_rank`, if known."""
  if how == "footprint":
    return (topology_spec.single_device_footprint(coarse.graph, topology)
            / max(topology_spec.single_device_footprint(graph, topology), 1.0))
  cg, d = coarse.graph, topology.num_devices
  order = cg.topological_order()
  cum = np.cumsum(cg.cost[order])
  block = np.empty(cg.num_nodes, np.int64)
  block[order] = np.minimum((cum - cg.cost[order]) / max(cum[-1], 1e-30) * d, d - 1)
  rng = np.random.default_rng(0)
  places = np.stack([block, rng.integers(0, d, cg.num_nodes),
                     rng.integers(0, max(d // 2, 1), cg.num_nodes)])
  free = topology.with_memory(np.inf)
  coarse_prio = upward_rank(cg)
  peak_c = np.asarray(simulate(cg, free, places, np.broadcast_to(coarse_prio, places.shape))
                      .peak_memory, np.float64)
  critical = upward_rank(graph) if critical is None else critical
  prios = np.broadcast_to(expand_priority(coarse, coarse_prio, critical),
                          (len(places), graph.num_nodes))
  peak_o = np.asarray(simulate(graph, free, np.stack([coarse.expand(p) for p in places]),
                               prios).peak_memory, np.float64)
  busy = peak_o >= 0.25 * peak_o.max(axis=1, keepdims=True)  # devices that matter
  return float(np.min(np.where(busy, peak_c / np.maximum(peak_o, 1.0), np.inf)))


def solve_coarsened(method: str, problem: Problem, config: Dict[str, Any],
                    placement_only: bool, coarse_nodes: int, solve: Callable,
                    stages: int) -> Proposal:
  """A learned method on a graph too large for it: coarsen to `coarse_nodes`, solve there,
  expand every stage to the original ops and re-simulate them there (learned.py's module
  docstring). `solve(method, problem, config, placement_only, reserved=...)` solves the coarse
  problem: learned._solve, which returns `stages` stages."""
  graph = problem.graph
  t0 = time.perf_counter()
  opts = coarse_options(method, config)
  coarse = coarsen_lib.coarsen(
      graph, coarse_nodes, name=f"{graph.name}@coarse{coarse_nodes}",
      max_group_weight=opts["max_group_weight"], temp_bound=opts["temp_bound"],
      out_bound=opts["out_bound"])
  t1 = time.perf_counter()
  critical = upward_rank(graph)
  topo, scale = problem.topology, 1.0
  caps = np.asarray(topo.mem_capacity, np.float64)
  if np.all(np.isfinite(caps)):  # the same tightness on the coarse graph (module docstring)
    scale = memory_scale(graph, coarse, topo, opts["memory_scale"], critical)
    topo = topo.with_memory(caps * scale)
  tm = time.perf_counter()
  # The stages' re-simulation on the original graph counts in the budget too: every stage once,
  # and for the joint methods once more with the critical-path order.
  reserved = stages * (2 if not placement_only and opts["critical_order"] else 1)
  budget = None if problem.budget is None else int(problem.budget) - reserved
  prop = solve(method, dataclasses.replace(problem, graph=coarse.graph, topology=topo,
                                            budget=budget), config, placement_only,
               reserved=reserved)
  t2 = time.perf_counter()
  stages = prop.info["stages"]
  places = np.stack([coarse.expand(s["placement"]) for s in stages])
  prios = np.stack([critical if placement_only else
                    expand_priority(coarse, s["priority"], critical) for s in stages])
  if not placement_only and opts["critical_order"]:
    # each placement also with the original graph's critical-path order (the coarse order
    # leaves every group's members in one block, which a fine-grained order can interleave)
    stages = stages + [dict(s, stage=f"{s['stage']}{CRITICAL_SUFFIX}") for s in stages]
    places = np.concatenate([places, places])
    order = expand_priority(coarse, np.zeros(coarse.graph.num_nodes), critical)  # strict
    prios = np.concatenate([prios, np.broadcast_to(order, prios.shape)])
  t3 = time.perf_counter()
  scored = evaluate_batch(graph, problem.topology, places, prios, problem.objective)
  t4 = time.perf_counter()
  out = [dict(s, placement=p, priority=q, objective=r["objective"], feasible=r["feasible"],
              seconds=s["seconds"] + (tm - t0), coarse_objective=s["objective"],
              coarse_feasible=s["feasible"])
         for s, p, q, r in zip(stages, places, prios, scored)]
  best = min(out, key=lambda s: s["objective"])  # the earliest of equal ones
  info = dict(prop.info)
  fixed = sum(float(info.get(k) or 0.0) for k in ("load_seconds", "setup_seconds",
                                                 "compile_seconds"))
  info.update(
      stages=out, stage=best["stage"], curve=anytime_curve(out),
      coarse_curve=info.get("curve"),
      coarsened={"nodes": graph.num_nodes, "coarse_nodes": coarse.graph.num_nodes,
                 "target_nodes": coarse_nodes, "steps": [list(x) for x in coarse.steps],
                 "memory_scale": float(scale), "options": opts},
      phases={"coarsen": t1 - t0, "memory": tm - t1, "load": float(info.get("load_seconds") or 0.0),
              "setup": float(info.get("setup_seconds") or 0.0),
              "compile": float(info.get("compile_seconds") or 0.0),
              "search": max(t2 - tm - fixed, 0.0), "expand": t3 - t2, "verify": t4 - t3})
  return Proposal(best["placement"], None if placement_only else best["priority"],
                  evaluations=prop.evaluations + len(out), info=info)
