"""Graphs with their strategy spaces: zoo / JAX programs and the space of any graph.

Why: a CompGraph alone has no shapes, yet partitioning needs each op's dimension numbers. A
graph built here from a JAX program keeps its HLO module (`attach`), so `space_for(graph, k)`
derives the HLO strategy space; any other graph (profiles, synthetic, saved .npz, coarsened)
gets the shape-free `generic_space`. The association is held weakly by graph identity.
"""

from __future__ import annotations

import weakref
from typing import Dict, Tuple

from simulator.graph import CompGraph
from simulator.partition.space import StrategySpace, generic_space, hlo_space

_HLO: "weakref.WeakKeyDictionary[CompGraph, Tuple[object, int, Dict[int, StrategySpace]]]" = \
    weakref.WeakKeyDictionary()


def attach(graph: CompGraph, hlo_graph, batch_parameters: int = 0) -> CompGraph:
  """Records that `graph`'s nodes are `hlo_graph`'s (an HloGraph), whose last
  `batch_parameters` ENTRY parameters hold the input batch. Returns `graph`."""
  if hlo_graph.graph.num_nodes != graph.num_nodes:
    raise ValueError(f"attach: graph '{graph.name}' has {graph.num_nodes} nodes but the HLO "
                     f"graph has {hlo_graph.graph.num_nodes}")
  _HLO[graph] = (hlo_graph, int(batch_parameters), {})
  return graph


def has_shapes(graph: CompGraph) -> bool:
  return graph in _HLO


def has_levels(graph: CompGraph) -> bool:
  """Whether recursive bisection applies: every graph but a Piper one (whose options are the
  profile's t = k figures, not halvings)."""
  hit = _HLO.get(graph)
  return hit is None or hit[0] is not None


def space_for(graph: CompGraph, k: int) -> StrategySpace:
  """The HLO strategy space of an attached graph (cached per k), the profile's space of a
  `piper_graph`, else the generic one."""
  hit = _HLO.get(graph)
  if hit is None:
    return generic_space(graph, k)
  hlo_graph, batch, cache = hit
  if k not in cache:
    if hlo_graph is None:
      raise ValueError(f"graph '{graph.name}' has strategy spaces for k in {sorted(cache)} "
                       f"only (its profile's tensor-parallel degrees), not {k}")
    cache[k] = hlo_space(hlo_graph, k, batch_parameters=batch)
  return cache[k]


def piper_graph(name: str, degrees=(2, 4, 8), **kwargs) -> CompGraph:
  """A Piper workload (`simulator.sources.piper.load_piper`, tensor_parallel=1) whose strategy
  space for each k in `degrees` comes from the profile's TMPCs: per layer, option 0 replicates
  it (k copies of its t=1 TMPC: time, parameters, activations), option 1 is its t=k TMPC on the
  k workers (each shard's time, parameter bytes and activation bytes as the profile gives them),
  every input replicated and the output a partial sum, so its readers all-reduce the layer's
  output (Megatron's one all-reduce per tensor-parallel layer; the profile's own per-neighbour
  sync bytes are not used). A layer without a TMPC at degree k has option 0 only."""
  from simulator.partition.space import P, R, OpSpace, Option, _frozen
  from simulator.sources.piper import load_piper
  base = load_piper(name, tensor_parallel=1, **kwargs)
  ptr, pred = base.predecessor_csr()
  ops_by_k = {}
  for k in degrees:
    try:
      tp = load_piper(name, tensor_parallel=k, **kwargs)
    except ValueError:
      tp = None
    ops_ = []
    for v in range(base.num_nodes):
      ins = tuple(int(u) for u in pred[ptr[v]:ptr[v + 1]])
      opts = [Option(R, (R,) * len(ins), ())]
      if tp is not None and base.out_degree()[v] > 0:
        opts.append(Option(P, (R,) * len(ins), (), shard=(float(tp.cost[v]),
                                                          float(tp.param_bytes[v]),
                                                          float(tp.temp_bytes[v]))))
      ops_.append(OpSpace(ins, tuple(float(base.out_bytes[u]) for u in ins), (), (),
                          tuple(opts), "layer"))
    ops_by_k[k] = StrategySpace(k, tuple(ops_), (None,) * base.num_nodes,
                                _frozen(base.out_bytes))
  _HLO[base] = (None, 0, ops_by_k)
  return base


def program_graph(fn, *args, device: str = "v100", name=None, batch_parameters: int = 0,
                  calibration=None) -> CompGraph:
  """The pre-optimisation graph of `jax.jit(fn)(*args)`, costed on `device` (with a
  `simulator.costmodel.Calibration` for "local"), with its strategy space."""
  from simulator import costmodel
  from simulator.frontends import hlo
  full = hlo.from_jax_full(fn, *args, stage="pre", name=name)
  graph = costmodel.apply_cost_model(full, costmodel.device_spec(device, calibration),
                                     calibration)
  return attach(graph, full, batch_parameters)


def zoo_graph(model: str, size: str = "tiny", device: str = "v100", **knobs) -> CompGraph:
  """A zoo training step (pre-optimisation, costed on `device`) with its HLO strategy space;
  the batch is the step's third argument."""
  import jax
  from simulator import zoo
  z = zoo.build(model, size, **knobs)
  args = z.abstract_args()
  return program_graph(z.step, *args, device=device,
                       name=f"zoo:{model}/{size}/pre/{device}",
                       batch_parameters=len(jax.tree_util.tree_leaves(args[2])))


def load_graph(spec: str) -> CompGraph:
  """A graph spec (design.md section 6) with shapes where it can have them: `zoo:` specs at
  stage pre without `coarsen` are built here; other specs load as usual."""
  from simulator import sources
  from simulator.sources.zoo import parse_knob
  base, limit = sources.split_coarsen(str(spec).strip())
  resolved = sources.resolve_spec(base)
  kind, _, rest = resolved.partition(":")
  if kind == "piper" and limit is None and "," not in rest:
    return piper_graph(rest.strip())
  if kind != "zoo" or limit is not None:
    return sources.load_graph(spec)
  items = [x.strip() for x in rest.split(",") if x.strip()]
  model, kw = items[0], {}
  for item in items[1:]:
    key, eq, text = item.partition("=")
    if not eq:
      raise ValueError(f"graph spec {spec!r}: unexpected item {item!r}")
    kw[key.strip()] = text.strip()
  if kw.pop("stage", "pre") != "pre":  # fusions have no dimension map: the generic space
    return sources.load_graph(spec)
  kw.pop("cache", None)
  size, device = kw.pop("size", "default"), kw.pop("device", "v100")
  return zoo_graph(model, size, device, **{k: parse_knob(v) for k, v in kw.items()})
