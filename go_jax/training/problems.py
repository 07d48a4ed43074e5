"""Host-side setup of a training set: (graph, topology) instances padded into one stacked batch.

Everything the jitted PPO update needs about its problems is computed here once, with numpy, and
stacked on a leading instance axis I so that an update can gather any G of them by index:

* every graph padded to ONE common node / edge bucket (`simulator.padding`) and its policy
  features built at the same size, so all instances share one compiled update;
* every topology padded to D_sim = the largest device count of the set with idle devices (speed
  1, no overhead, infinite memory) that the policy never picks (its device mask excludes them):
  such a device never commits an op, never receives a transfer and holds no memory, so the
  simulated result is exactly that of the real topology;
* the objective's upper bound (infeasible actions score `ub * (1 + overflow)`, design.md section 5)
  and the reference objective of a fast baseline (`config.reference`, default HEFT), which
  normalises rewards per graph as GO does: reward = -sqrt(objective / reference);
* the fixed halves of the action for tasks that learn only one of them: the critical-path
  priority (upward rank) for placement, a baseline's placement for scheduling;
* the priority tie-break: a sampled priority level l becomes the priority l + 0.5 * rank01, where
  rank01 is the op's upward rank scaled to [0, 1]; within one level the critical path runs
  first, and the 0.5 scale never lets the tie-break cross a level. With a policy hint
  (go_jax/training/hints.py) the hint's priority order takes the critical path's place in
  both, so that following the hint reproduces the hint's solution exactly.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence

import flax
import jax
import jax.numpy as jnp
import numpy as np

from go_jax import methods, objectives
from go_jax.training import hints
from go_jax.placements import upward_rank
from go_jax.policies.types import GraphFeatures
from simulator.graph import CompGraph
from simulator.padding import PaddedGraph, bucket, choose_chunk, pad_graph
from simulator.topology import Topology

# (graph, topology, num_nodes, num_edges, hint_placement=None) -> GraphFeatures padded to that
# size (hint_placement: (N,) a hint's devices, given only when the policy takes a hint).
FeatureFn = Callable[..., GraphFeatures]


@flax.struct.dataclass
class TrainData:
  """The stacked instances of a training set (leading axis I); jitted code indexes into it."""
  graph: PaddedGraph  # fields (I, Np) / (I, Ep) / (I, Np + 1); `chunk` shared (static)
  topology: Topology  # speed (I, Ds), overhead (I, Ds), mem_capacity (I, Ds), bandwidth and
  #                     latency (I, Ds, Ds); devices past an instance's own D are idle padding
  feats: GraphFeatures  # policy inputs, fields (I, Np, ...) / (I, Ep) / (I, Dmax, ...)
  upper_bound: jnp.ndarray  # (I,) float32 objective no feasible action exceeds
  reference: jnp.ndarray  # (I,) float32 reference objective (> 0) that normalises rewards
  fixed_placement: jnp.ndarray  # (I, Np) int32 placement of tasks that do not learn it (0 pad)
  fixed_priority: jnp.ndarray  # (I, Np) float32 priority of tasks that do not learn it (upward
  #                              rank; 0 on padding)
  tiebreak: jnp.ndarray  # (I, Np) float32 in [0, 0.5]: added to a sampled priority level
  decides_place: jnp.ndarray  # (I, Np) bool real colocation roots: ops whose placement counts
  # (I, Np) bool ops whose fuse request can be legal (one consumer, both fusible; design.md
  # 4.1); None unless the problems were built for a fusion task (`graph` then carries the
  # fusion tables)
  fusible: Optional[jnp.ndarray] = None


@dataclasses.dataclass(frozen=True)
class Problems:
  """A training set: the stacked device arrays plus the host-side originals for reporting."""
  data: TrainData
  names: List[str]  # (I,) "graph name @ topology label" for logs and summaries
  graphs: List[CompGraph]
  topologies: List[Topology]
  reference: np.ndarray  # (I,) float64 reference objective
  reference_method: str
  lower_bound: np.ndarray  # (I,) float64 best known lower bound of the objective
  objective: str

  @property
  def num_instances(self) -> int:
    return len(self.graphs)

  @property
  def num_nodes_padded(self) -> int:
    return int(self.data.fixed_placement.shape[-1])


def pad_topology(topology: Topology, num_devices: int) -> Topology:
  """`topology` with idle devices appended up to `num_devices` (see the module docstring)."""
  d = topology.num_devices
  extra = num_devices - d
  if extra < 0:
    raise ValueError(f"cannot pad a {d}-device topology to {num_devices} devices")

  def vec(x, fill):
    return np.concatenate([np.asarray(x, np.float64), np.full(extra, fill)])

  def mat(x, fill):
    out = np.full((num_devices, num_devices), fill, np.float64)
    out[:d, :d] = x
    return out

  return Topology(speed=vec(topology.speed, 1.0), overhead=vec(topology.overhead, 0.0),
                  mem_capacity=vec(topology.mem_capacity, np.inf),
                  bandwidth=mat(topology.bandwidth, 1.0), latency=mat(topology.latency, 0.0))


def _stack(trees):
  return jax.tree_util.tree_map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *trees)


def _padded(x: np.ndarray, n: int, dtype) -> np.ndarray:
  out = np.zeros(n, dtype)
  out[:len(x)] = x
  return out


def _explicit(arrays: Optional[Sequence], graphs, names, field: str, dtype):
  """Per-instance (N_i,) arrays of `field` checked against the graphs, or None."""
  if arrays is None:
    return None
  arrays = [np.asarray(a, dtype) for a in arrays]
  if len(arrays) != len(graphs):
    raise ValueError(f"{field}: got {len(arrays)} arrays for {len(graphs)} instances")
  for name, g, a in zip(names, graphs, arrays):
    if a.shape != (g.num_nodes,):
      raise ValueError(f"instance {name}: {field} has shape {a.shape}, expected "
                       f"({g.num_nodes},)")
    if not np.all(np.isfinite(a)) or (dtype == np.int64 and a.size and a.min() < 0):
      raise ValueError(f"instance {name}: {field} has negative or non-finite entries")
  return arrays


def _reference(graph, topology, objective: str, method: str, placement, name: str,
               solved: Dict[str, methods.Solution], priority=None) -> float:
  """Objective of `method`'s solution (placement fixed for scheduling-only and fusion methods,
  priority too for fusion ones); > 0. A placement / joint method's solution is taken from (or
  put in) `solved`, the instance's solutions already computed (e.g. HEFT by the hint)."""
  kind = methods.get(method).kind
  if kind == "fusion":
    value = methods.solve(method, graph, topology, objective=objective, placement=placement,
                          priority=priority).objective
  elif kind == "schedule":
    value = methods.solve(method, graph, topology, objective=objective,
                          placement=placement).objective
  else:
    value = hints.solve_once(method, graph, topology, objective, solved).objective
  if not (np.isfinite(value) and value > 0):
    # Refused, not a bad option: go-jax-place then runs the baselines alone (a graph of zero
    # cost or bytes, whose reference answer of 0 is already optimal, stopped the whole job).
    raise methods.Refused(f"instance {name}: reference objective of '{method}' is {value}; "
                          "rewards are normalised by it, so it must be finite and > 0 (a graph "
                          "of zero cost?)")
  return float(value)


def build_problems(graphs: Sequence[CompGraph], topologies: Sequence[Topology], *,
                   features: FeatureFn, max_devices: int, objective: str = "makespan",
                   reference: str = "heft", fixed_placement: Optional[str] = None,
                   names: Optional[Sequence[str]] = None, hint: str = "",
                   fusion: bool = False, fixed_placements: Optional[Sequence] = None,
                   fixed_priorities: Optional[Sequence] = None) -> Problems:
  """Pads and stacks instance i = (graphs[i], topologies[i]) for the jitted trainer.

  `features` builds the policy's GraphFeatures of one instance at a given padded size;
  `fixed_placement` names the method whose placement tasks that learn only the schedule keep
  (None: such tasks are not used). `hint` (go_jax.training.hints; "": none) names the baseline
  whose placement the features carry; its priority order then replaces the critical path as
  the tie-break within a level and as the fixed priority of placement-only tasks, so the
  hint's exact solution is the action of a policy that follows the hint. ValueError on empty
  or mismatched lists, a topology with more than `max_devices` devices, or an unknown method or
  objective. `fusion` pads the graphs with their fusion tables (design.md 4.1; every graph
  needs a cost reference) for the fusion tasks. `fixed_placements` / `fixed_priorities` (one
  (N_i,) array per instance) give the fixed placement / priority of the tasks that do not learn
  them explicitly, in place of `fixed_placement`'s and of the critical path (a fusion method
  asked to fuse a given schedule). A `reference` method of kind "schedule" or "fusion" is
  solved on that fixed placement (and priority).
  """
  graphs, topologies = list(graphs), list(topologies)
  if not graphs:
    raise ValueError("a training set needs at least one (graph, topology) instance")
  if len(graphs) != len(topologies):
    raise ValueError(f"graphs and topologies pair up one to one: got {len(graphs)} graphs and "
                     f"{len(topologies)} topologies")
  names = list(names) if names is not None else [
      f"{g.name}@{t.num_devices}dev" for g, t in zip(graphs, topologies)]
  if len(names) != len(graphs):
    raise ValueError(f"got {len(names)} names for {len(graphs)} instances")
  obj = objectives.get_objective(objective)
  for field, method in (("reference", reference), ("fixed_placement", fixed_placement)):
    if method is not None:
      try:
        methods.get(method)
      except ValueError as e:
        raise ValueError(f"{field}: {e}") from e
  if fixed_placement is not None and methods.get(fixed_placement).kind in ("schedule",
                                                                          "fusion"):
    raise ValueError(f"fixed_placement '{fixed_placement}' does not place; name a placement "
                     "method (e.g. 'heft', 'expert')")
  explicit_place = _explicit(fixed_placements, graphs, names, "fixed_placements", np.int64)
  explicit_prio = _explicit(fixed_priorities, graphs, names, "fixed_priorities", np.float64)
  for name, topo in zip(names, topologies):
    if topo.num_devices > max_devices:
      raise ValueError(f"instance {name}: topology has {topo.num_devices} devices, more than "
                       f"the policy's max_devices={max_devices}")

  np_ = bucket(max(g.num_nodes for g in graphs))
  ep = bucket(max(g.num_edges for g in graphs))
  chunk = choose_chunk(np.concatenate([g.out_degree() for g in graphs]), sizes=(np_, ep))
  d_sim = max(t.num_devices for t in topologies)
  padded, feats, topos = [], [], []
  ub, ref, lb, place, prio, tie, decides, fusible = [], [], [], [], [], [], [], []
  for i, (name, g, t) in enumerate(zip(names, graphs, topologies)):
    n = g.num_nodes
    if fusion:
      try:
        padded.append(pad_graph(g, np_, ep, chunk, fusion=True))
      except ValueError as e:
        raise ValueError(f"instance {name}: {e}") from e
      fusible.append(_padded(np.asarray(padded[-1].fusion.admissible)[:n], np_, bool))
    else:
      padded.append(pad_graph(g, np_, ep, chunk))
    topos.append(pad_topology(t, d_sim))
    rank = upward_rank(g)
    top = rank.max() if n and rank.max() > 0 else 1.0
    tiebreak, hint_place = 0.5 * rank / top, None
    solved: Dict[str, methods.Solution] = {}  # this instance's solutions, each computed once
    if hint:
      sol = hints.hint_solution(hint, g, t, objective, solved=solved)
      rank, tiebreak, hint_place = sol.priority, hints.priority_tiebreak(sol.priority), \
          sol.placement
    feats.append(features(g, t, np_, ep) if hint_place is None else
                 features(g, t, np_, ep, hint_placement=hint_place))
    fixed = np.zeros(n, np.int64)
    if explicit_place is not None:
      fixed = explicit_place[i]
      if fixed.size and fixed.max() >= t.num_devices:
        raise ValueError(f"instance {name}: fixed_placements name device {int(fixed.max())}; "
                         f"the topology has {t.num_devices}")
    elif fixed_placement is not None:
      fixed = hints.solve_once(fixed_placement, g, t, objective, solved).placement
    if explicit_prio is not None:
      rank = explicit_prio[i]
    ub.append(obj.upper_bound(g, t))
    ref.append(_reference(g, t, objective, reference, fixed, name, solved, rank))
    lb.append(obj.lower_bound(g, t)["bound"])
    place.append(_padded(fixed, np_, np.int32))
    prio.append(_padded(rank, np_, np.float32))
    tie.append(_padded(tiebreak, np_, np.float32))
    decides.append(_padded(g.colocation_root() == np.arange(n), np_, bool))
  for name, f in zip(names, feats):
    if f.node_mask.shape[-1] != np_ or f.device_mask.shape[-1] != max_devices:
      raise ValueError(f"instance {name}: features have {f.node_mask.shape[-1]} nodes and "
                       f"{f.device_mask.shape[-1]} devices; expected {np_} and {max_devices}")
  data = TrainData(
      graph=_stack(padded), topology=_stack(topos), feats=_stack(feats),
      upper_bound=jnp.asarray(ub, jnp.float32), reference=jnp.asarray(ref, jnp.float32),
      fixed_placement=jnp.asarray(np.stack(place)), fixed_priority=jnp.asarray(np.stack(prio)),
      tiebreak=jnp.asarray(np.stack(tie)), decides_place=jnp.asarray(np.stack(decides)),
      fusible=jnp.asarray(np.stack(fusible)) if fusion else None)
  return Problems(data=data, names=names, graphs=graphs, topologies=topologies,
                  reference=np.asarray(ref, np.float64), reference_method=reference,
                  lower_bound=np.asarray(lb, np.float64), objective=objective)
