"""REGAL's synthetic dataset, rebuilt: random graphs, de-duplicated, filtered by BRKGA.

REGAL (Paliwal et al., ICLR 2020) trains on 10,000 / 1,000 / 1,000 procedurally generated
CostGraphDefs (deepmind-research/regal), of distinct topologies, kept only where BRKGA shows
"room for improvement". This module follows that recipe (docs/regal_data.md):

  1. candidate k (k = 0, 1, ...) is `simulator.sources.synthetic.regal_dag` with
     num_nodes ~ Uniform{min_nodes..max_nodes} and a graph seed, both drawn from
     `numpy.random.default_rng([seed, k])` (so candidate k is the same in every run and a
     resumed build continues exactly); fan-in, costs and sizes are regal_dag's REGAL-like
     distributions (up to `max_inputs` data inputs at distance 1 + Exp(`locality`) back,
     compute cost and output size integers in [1, 100] times the time / byte units);
  2. a candidate whose `topology_hash` (Weisfeiler-Lehman, `go_jax.datasets.store`) was already
     kept, in any split, is a duplicate and dropped;
  3. the room-for-improvement filter (`room_for_improvement`): BRKGA at a LOW and at a HIGH
     evaluation budget on the topology spec (default 2 V100s with NVLink, memory 0.5x the
     graph's single-device footprint, so a graph must be split evenly to fit); it is kept when
     the low-budget placement does not fit memory and the high-budget one does, or when the
     high-budget makespan is at least `min_improvement` (20%) lower than the low-budget one;
  4. kept graphs go to train / valid / test in turn (the least-filled split relative to its
     target), written as CostGraphDef text `<split>/graph_<hash>.pbtxt` + `manifest.json`,
     atomically and resumably (`DatasetStore`).
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import numpy as np

from go_jax.datasets import store
from simulator.graph import CompGraph
from simulator.sources.synthetic import regal_dag
from simulator.topology import Topology
from simulator.topology_spec import make_topology, parse_topology

# REGAL's published split sizes.
REGAL_SPLITS = {"train": 10000, "valid": 1000, "test": 1000}
DEFAULT_TOPOLOGY = "nvlink2@mem=0.5x"
# BRKGA evaluation budgets of the filter: REGAL's "BRKGA 5K" as the high one; one generation
# (80 evaluations with the default population 100 and 20 elites) as the low one.
LOW_BUDGET, HIGH_BUDGET = 100, 5000
MIN_IMPROVEMENT = 0.2  # "20% faster in running time"


def candidate_graph(index: int, *, seed: int = 0, min_nodes: int = 50, max_nodes: int = 200,
                    max_inputs: int = 3, locality: float = 8.0) -> CompGraph:
  """Candidate `index` of the recipe (module docstring, step 1), named `regal_<seed>_<index>`."""
  if not 1 <= min_nodes <= max_nodes:
    raise ValueError(f"need 1 <= min_nodes <= max_nodes, got {min_nodes}, {max_nodes}")
  rng = np.random.default_rng([int(seed), int(index)])
  n = int(rng.integers(min_nodes, max_nodes + 1))
  return regal_dag(n, seed=int(rng.integers(2**31)), max_inputs=max_inputs, locality=locality,
                   name=f"regal_{seed}_{index}")


def check_filter_options(objective: str, low_budget, high_budget, min_improvement) -> None:
  """ValueError naming the option unless REGAL's filter can run with these values: a known
  objective, integer budgets with low_budget < high_budget and low_budget at least one
  generation of `methods.solve("brkga")` (80 evaluations), min_improvement in [0, 1). Builders
  call it before touching their folder: a manifest left by a run that then failed would hold
  the bad settings and refuse the corrected rerun."""
  from go_jax import objectives  # pylint: disable=g-import-not-at-top
  objectives.get_objective(objective)
  for name, value in (("low_budget", low_budget), ("high_budget", high_budget)):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
      raise ValueError(f"{name} must be an integer number of evaluations, got {value!r}")
  if not 1 <= low_budget < high_budget:
    raise ValueError(f"need 1 <= low_budget < high_budget, got {low_budget}, {high_budget}")
  from go_jax.methods import evolution  # pylint: disable=g-import-not-at-top
  generation = evolution.generation_evaluations()
  if low_budget < generation:  # solve("brkga") refuses it, at the first candidate
    raise ValueError(f"low_budget={low_budget} is below one BRKGA generation ({generation} "
                     f"evaluations: population - elites of brkga's defaults); give "
                     f"low_budget >= {generation}")
  if not 0 <= min_improvement < 1:  # nan fails too
    raise ValueError(f"min_improvement must be in [0, 1) (a relative makespan reduction), got "
                     f"{min_improvement!r}")


def room_for_improvement(graph: CompGraph, topology=DEFAULT_TOPOLOGY, *,
                         low_budget: int = LOW_BUDGET, high_budget: int = HIGH_BUDGET,
                         objective: str = "makespan", seed: int = 0,
                         min_improvement: float = MIN_IMPROVEMENT,
                         solve: Optional[Callable] = None) -> Dict:
  """REGAL's filter on one graph: BRKGA at `low_budget` vs `high_budget` evaluations.

  Args:
    graph: the candidate.
    topology: a topology spec (a relative `@mem=0.5x` is scaled to this graph) or a Topology.
    low_budget, high_budget: BRKGA's simulator evaluations (`methods.solve(..., budget=)`).
    objective: what BRKGA minimises ("makespan"; memory enters as feasibility).
    seed: BRKGA's seed (the same for both runs).
    min_improvement: the relative makespan reduction from low to high that counts as room.
    solve: `methods.solve` (the default) or a stand-in with its signature, for tests.

  Returns:
    {"keep": bool, "rule": "fits_only_high" | "faster_high" | "no_room" | "high_oom",
     "low_makespan", "high_makespan" (s), "low_feasible", "high_feasible", "improvement"
     (1 - high/low makespan), "capacity" (bytes per device), "low_seconds", "high_seconds"}.
  """
  if not 1 <= low_budget < high_budget:
    raise ValueError(f"need 1 <= low_budget < high_budget, got {low_budget}, {high_budget}")
  if solve is None:
    from go_jax import methods  # pylint: disable=g-import-not-at-top
    solve = methods.solve
  topo = topology if isinstance(topology, Topology) else make_topology(topology, graph)[0]
  low = solve("brkga", graph, topo, objective=objective, budget=int(low_budget), seed=seed)
  high = solve("brkga", graph, topo, objective=objective, budget=int(high_budget), seed=seed)
  improvement = 1.0 - high.makespan / low.makespan if low.makespan > 0 else 0.0
  if not high.feasible:
    rule = "high_oom"
  elif not low.feasible:
    rule = "fits_only_high"
  elif improvement >= min_improvement:
    rule = "faster_high"
  else:
    rule = "no_room"
  cap = float(np.max(np.asarray(topo.mem_capacity)))
  return {"keep": rule in ("fits_only_high", "faster_high"), "rule": rule,
          "low_makespan": float(low.makespan), "high_makespan": float(high.makespan),
          "low_feasible": bool(low.feasible), "high_feasible": bool(high.feasible),
          "improvement": float(improvement), "capacity": cap if np.isfinite(cap) else None,
          "low_seconds": float(low.search_seconds), "high_seconds": float(high.search_seconds)}


def check_regal_options(*, train: int = REGAL_SPLITS["train"],
                        valid: int = REGAL_SPLITS["valid"], test: int = REGAL_SPLITS["test"],
                        seed: int = 0, min_nodes: int = 50, max_nodes: int = 200,
                        max_inputs: int = 3, locality: float = 8.0,
                        topology: str = DEFAULT_TOPOLOGY, objective: str = "makespan",
                        low_budget: int = LOW_BUDGET, high_budget: int = HIGH_BUDGET,
                        min_improvement: float = MIN_IMPROVEMENT,
                        max_candidates: Optional[int] = None) -> Dict[str, int]:
  """ValueError naming the option unless `build_regal_dataset` can run with these options;
  returns the split targets. Every option is checked before the folder is touched (the
  launcher calls it before it even creates the folder): a manifest written by a run that then
  failed would hold the bad settings and refuse the corrected rerun."""
  targets = {"train": int(train), "valid": int(valid), "test": int(test)}
  if min(targets.values()) < 0 or not sum(targets.values()):
    raise ValueError(f"split sizes must be >= 0 and not all 0, got {targets}")
  if max_candidates is not None and (isinstance(max_candidates, bool) or int(max_candidates) < 1):
    raise ValueError(f"max_candidates must be >= 1 (None: 50x the graphs asked for), got "
                     f"{max_candidates!r}")
  first = candidate_graph(0, seed=seed, min_nodes=min_nodes, max_nodes=max_nodes,
                          max_inputs=max_inputs, locality=locality)
  make_topology(parse_topology(topology), first)  # a relative @mem needs a graph
  check_filter_options(objective, low_budget, high_budget, min_improvement)
  return targets


def build_regal_dataset(out: str, *, train: int = REGAL_SPLITS["train"],
                        valid: int = REGAL_SPLITS["valid"], test: int = REGAL_SPLITS["test"],
                        seed: int = 0, min_nodes: int = 50, max_nodes: int = 200,
                        max_inputs: int = 3, locality: float = 8.0,
                        topology: str = DEFAULT_TOPOLOGY, objective: str = "makespan",
                        low_budget: int = LOW_BUDGET, high_budget: int = HIGH_BUDGET,
                        min_improvement: float = MIN_IMPROVEMENT, brkga_seed: int = 0,
                        max_candidates: Optional[int] = None, save_seconds: float = 5.0,
                        log_seconds: float = 10.0, log: Optional[Callable[[str], None]] = print,
                        solve: Optional[Callable] = None) -> Dict:
  """Builds (or resumes) REGAL's dataset in folder `out` (module docstring); returns the
  manifest.

  Split sizes may change between runs of one folder (a sample can be grown into the full set);
  every other option must match the folder's manifest (ValueError otherwise). The build stops
  when every split is full or after `max_candidates` candidates in all (default 50x the
  graphs asked for). `save_seconds`: how often the manifest is rewritten (a kill loses at most
  that much work; graph files already written are rewritten identically). Interrupting
  (Ctrl-C) saves the manifest first. `solve` replaces `methods.solve` (tests).
  """
  targets = check_regal_options(train=train, valid=valid, test=test, seed=seed,
                                min_nodes=min_nodes, max_nodes=max_nodes, max_inputs=max_inputs,
                                locality=locality, topology=topology, objective=objective,
                                low_budget=low_budget, high_budget=high_budget,
                                min_improvement=min_improvement, max_candidates=max_candidates)
  settings = dict(seed=seed, min_nodes=min_nodes, max_nodes=max_nodes, max_inputs=max_inputs,
                  locality=locality, topology=str(topology), objective=objective,
                  low_budget=low_budget, high_budget=high_budget,
                  min_improvement=min_improvement, brkga_seed=brkga_seed)
  db = store.DatasetStore(out, "regal", settings, save_seconds=save_seconds, log=log)
  limit = max_candidates if max_candidates is not None else 50 * sum(targets.values())
  try:
    while True:
      split = store.split_for(db.counts(), targets)
      if split is None or db.candidates >= limit:
        break
      index = db.candidates
      graph = candidate_graph(index, seed=seed, min_nodes=min_nodes, max_nodes=max_nodes,
                              max_inputs=max_inputs, locality=locality)
      digest = store.topology_hash(graph)
      base = dict(candidate=index, nodes=graph.num_nodes, edges=graph.num_edges, hash=digest)
      if digest in db.hashes:
        db.reject("duplicate", **base)
      else:
        fig = room_for_improvement(graph, topology, low_budget=low_budget,
                                   high_budget=high_budget, objective=objective,
                                   seed=brkga_seed, min_improvement=min_improvement,
                                   solve=solve)
        if fig.pop("keep"):
          db.add(split, graph, digest, candidate=index, source=graph.name, **fig)
        else:
          db.reject(fig["rule"], **base, **fig)
      db.progress(targets, every=log_seconds)
  finally:
    db.save()
  db.progress(targets, force=True)
  if store.split_for(db.counts(), targets) is not None:
    db.log(f"[regal] stopped after {db.candidates} candidates (max_candidates={limit}) before "
           f"every split was full: {db.counts()}")
  return db.manifest


__all__ = ["REGAL_SPLITS", "DEFAULT_TOPOLOGY", "LOW_BUDGET", "HIGH_BUDGET", "MIN_IMPROVEMENT",
           "candidate_graph", "check_filter_options", "check_regal_options",
           "room_for_improvement", "build_regal_dataset"]
