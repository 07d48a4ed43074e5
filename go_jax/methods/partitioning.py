"""Operator-partitioning methods (docs/design.md sections 4.2 and 7): kind "partition".

Each method picks one option per op from the graph's strategy space for degree k (default:
the number of devices; `simulator.partition.programs.space_for` gives the HLO space of a graph
built with its program, else the shape-free generic space), expands the strategy into a
CompGraph of k workers (`simulator.partition.expand`), and answers with worker j on device j and
the critical-path priority of the expanded graph. `methods.solve` re-simulates that graph, so
`Solution.graph` is the expanded graph and `Solution.info` holds the strategy, its
communication bytes and the option counts.

  * `data_parallel`: every op with a batch dim split along it; ops that contract the batch
    (weight-gradient dots, batch sums) split it too, leaving a partial sum that is all-reduced
    (reduce-scatter + all-gather); every other op (optimizer updates, weights) replicated.
  * `megatron`: every weight read by a dot is split as Megatron-LM splits it: rank-2 kernels
    alternately column-wise (their output dim) and row-wise (their input dim) in the order of
    their first dot, so an MLP is column- then row-split and needs one all-reduce; rank-3
    attention kernels along their heads dim (the middle dim of a (model, heads, head) kernel,
    the first of a (heads, head, model) one). Every op that reads such a weight (its dots,
    gradient and optimizer update) takes an option splitting it that way; the other ops take
    the options of least communication (`dp` over those choices), replication included.
  * `tofu`: Tofu's dynamic program minimising communication bytes, every op partitioned
    (replicate only where an op has no split). `recursive=True` (default): Tofu's recursive
    bisection for k = 2^m (`partition_search.recursive_dp`: the k = 2 DP on each of m levels,
    a multi-level strategy of `simulator.partition.levels`), keeping instead the one-shot
    degree-k DP's strategy (lifted to m levels, `levels.lift`) where that moves fewer exact
    bytes (the level-by-level objective is Tofu's approximation: it can miss the exact bytes of
    a conversion across levels; `info` has both figures and which was picked); `recursive=False`, a degree that
    is not a power of two, or a Piper graph (its profile gives t = k options only): one DP at
    degree k over 1-level layouts (`partition_search.dp`). `coarsen=True` (default): Tofu's
    coarsening by a conservative rule (`partition_search.coarsen_ties`: an elementwise op of
    its only producer's shape takes its producer's partition), in every DP.
  * `partition_brute`: the exact minimum by enumeration over the same choices as `tofu`, for
    graphs of a few ops (the optimality check of `tofu`).
"""

from __future__ import annotations

from typing import Dict, List

import numpy as np

from go_jax.methods import Problem, Proposal, register
from go_jax.methods import partition_search as search
from simulator.graph import upward_rank
from simulator.partition import P, StrategySpace, expand, programs, split

_COMMON = dict(degree=None, space=None)


def _space(problem: Problem, config) -> StrategySpace:
  d = problem.topology.num_devices
  from go_jax.methods import integral  # pylint: disable=g-import-not-at-top
  degree = config["degree"]
  if degree is not None and (not integral(degree) or not 1 <= degree <= d):
    raise ValueError(f"partition degree must be an integer in [1, {d}] (the number of "
                     f"devices), got {degree!r}")
  space = config["space"]
  if space is None:
    return programs.space_for(problem.graph, d if degree is None else int(degree))
  if not isinstance(space, StrategySpace) or len(space.ops) != problem.graph.num_nodes:
    raise ValueError("option space must be a StrategySpace of the graph's ops")
  if degree is not None and int(degree) != space.k:
    raise ValueError(f"degree={degree} and a space of degree {space.k} disagree: give one")
  if space.k > d:
    raise ValueError(f"the option space is of degree {space.k}, more workers than the "
                     f"topology's {d} devices")
  return space


def _propose(problem: Problem, space: StrategySpace, strategy, info: Dict) -> Proposal:
  e = expand(problem.graph, space, strategy)
  rows = np.asarray(strategy, np.int64).reshape(problem.graph.num_nodes, -1)
  opts = [[space.ops[v].options[int(s)] for s in r] for v, r in enumerate(rows)]
  info = dict(info, degree=e.k, strategy=np.asarray(strategy, np.int64),
              comm_bytes=e.comm_bytes, replicated=int(sum(not any(o.split for o in r)
                                                          for r in opts)),
              partial=int(sum(any(o.out == P for o in r) for r in opts)),
              expanded_nodes=e.graph.num_nodes,
              shapes=programs.has_shapes(problem.graph))
  return Proposal(e.placement(), priority=upward_rank(e.graph), graph=e.graph, info=info)


def data_parallel_strategy(space: StrategySpace) -> np.ndarray:
  """(N,) options of data parallelism (module docstring)."""
  out = np.zeros(len(space.ops), np.int64)
  for v, op in enumerate(space.ops):
    bd = space.batch_dims[v]
    for o, opt in enumerate(op.options):
      if bd is not None and opt.out == split(bd):
        out[v] = o
        break
      contracts = any(space.batch_dims[u] is not None and lay == split(space.batch_dims[u])
                      for u, lay in zip(op.inputs, opt.ins))
      contracts |= any(b is not None and lay == split(b)
                       for b, lay in zip(op.leaf_batch, opt.leaves))
      if bd is None and opt.out == P and contracts:
        out[v] = o
        break
  return out


def megatron_allowed(space: StrategySpace) -> List[np.ndarray]:
  """Per op, the options Megatron's weight splits allow (module docstring)."""
  dims: Dict[str, int] = {}
  count = 0
  for op in space.ops:
    if op.kind != "dot":
      continue
    for j in op.weight_leaves:
      name, shape = op.leaf_names[j], op.leaf_shapes[j]
      if name in dims:
        continue
      if len(shape) == 2:
        dims[name] = 1 if count % 2 == 0 else 0
        count += 1
      else:
        dims[name] = 1 if shape[0] == max(shape) else 0
  allowed = []
  for op in space.ops:
    pinned = [(j, split(dims[nm])) for j, nm in enumerate(op.leaf_names) if nm in dims]
    ok = [o for o, opt in enumerate(op.options)
          if all(opt.leaves[j] == lay for j, lay in pinned)]
    allowed.append(np.asarray(ok if pinned and ok else range(len(op.options)), np.int64))
  return allowed


def tofu_allowed(space: StrategySpace, replicate: bool = False) -> List[np.ndarray]:
  """Every option but replicate, where an op has another (Tofu partitions every op)."""
  return [np.arange(0 if replicate or len(op.options) == 1 else 1, len(op.options))
          for op in space.ops]


@register("data_parallel", "partition", "operator partitioning: batch split of every op, "
          "gradient all-reduce, optimizer replicated", **_COMMON)
def data_parallel(problem: Problem, config) -> Proposal:
  space = _space(problem, config)
  strategy = data_parallel_strategy(space)
  from simulator.partition import comm_bytes
  return _propose(problem, space, strategy, {"objective_bytes": comm_bytes(space, strategy)})


@register("megatron", "partition", "operator partitioning: Megatron-LM column/row splits of "
          "the dots' weights, the rest by least communication", beam=256, **_COMMON)
def megatron(problem: Problem, config) -> Proposal:
  space = _space(problem, config)
  res = search.dp(problem.graph, space, megatron_allowed(space), beam=int(config["beam"]),
                  seed=problem.seed)
  return _propose(problem, space, res.strategy, {"exact": res.exact, "states": res.states})


@register("tofu", "partition", "operator partitioning: Tofu's dynamic program over the "
          "topological order, least communication bytes, recursive bisection for k = 2^m",
          beam=256, replicate=False, recursive=True, coarsen=True, **_COMMON)
def tofu(problem: Problem, config) -> Proposal:
  space = _space(problem, config)
  k = space.k
  if (config["recursive"] and k > 2 and k & (k - 1) == 0 and config["space"] is None and
      programs.has_levels(problem.graph)):
    space2 = programs.space_for(problem.graph, 2)
    from simulator.partition import levels
    m = levels.num_levels(k)
    res = search.recursive_dp(problem.graph, space2, m, partition=not config["replicate"],
                              beam=int(config["beam"]), seed=problem.seed,
                              coarsen=bool(config["coarsen"]))
    flat = search.dp(problem.graph, space, tofu_allowed(space, bool(config["replicate"])),
                     beam=int(config["beam"]), seed=problem.seed,
                     ties=search.coarsen_ties(space) if config["coarsen"] else None)
    lifted = levels.lift(space, space2, flat.strategy, m)
    lifted_bytes = levels.comm_bytes(space2, lifted)
    pick = res.strategy if res.comm_bytes <= lifted_bytes else lifted
    return _propose(problem, space2, pick, {
        "exact": res.exact, "states": res.states, "recursive": True,
        "levels_bytes": res.comm_bytes, "one_shot_bytes": lifted_bytes,
        "picked": "levels" if res.comm_bytes <= lifted_bytes else "one_shot",
        "objective_bytes": levels.level_objective(space2, res.strategy)})
  res = search.dp(problem.graph, space, tofu_allowed(space, bool(config["replicate"])),
                  beam=int(config["beam"]), seed=problem.seed,
                  ties=search.coarsen_ties(space) if config["coarsen"] else None)
  return _propose(problem, space, res.strategy, {"exact": res.exact, "states": res.states,
                                                 "recursive": False})


@register("partition_brute", "partition", "operator partitioning: brute force over tofu's "
          "choices (tiny graphs)", limit=200_000, replicate=False, **_COMMON)
def partition_brute(problem: Problem, config) -> Proposal:
  space = _space(problem, config)
  res = search.brute_force(problem.graph, space, tofu_allowed(space, bool(config["replicate"])),
                           limit=int(config["limit"]))
  return _propose(problem, space, res.strategy, {"exact": True, "assignments": res.states})
