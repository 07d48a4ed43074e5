"""Op fusion: fuse requests -> groups -> the quotient graph (docs/design.md section 4.1).

Why: GO's third task is fusion. A fused group runs as one kernel: its inner tensors are never
written to memory, its launch overhead is paid once, and it costs the roofline of its summed
work. This module is the definition's executable form, in two shapes that tests hold equal:

* host (numpy, exact, for users, plots and the reference simulator): `fusion_groups` decides
  which requests are legal and which op is each group's root, `fuse_graph` builds the quotient
  CompGraph that `reference_simulate` then runs by the unchanged section-4 rules;
* jitted (`apply_padded`, used by `simulate_padded(..., fuse=...)`): the same decisions and
  group sums on a padded graph with per-row fuse masks, without building a new graph: non-root
  members become "absorbed" nodes that never run and weigh nothing, their outside inputs are
  redirected to the group's root, and the root carries the group's cost and bytes. So one
  compiled simulator serves every fuse mask of a bucket.

Fusibility (`FUSIBLE`) and the compute-heavy ops (`HEAVY`) are tables over the op vocabulary
(`simulator.ops`), modelled on XLA's fusion rules: XLA never fuses parameters, graph inputs,
custom calls, collectives, control flow (while / conditional), sorts or RNG, and keeps at most
one matmul / convolution per fusion (output fusion puts elementwise consumers into it). Opaque
composite ops of profiled graphs (recurrent cells, attention blocks, "unknown") are not fusible.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import flax
import jax
import jax.numpy as jnp
import numpy as np

from simulator import ops
from simulator.graph import MAX_VALUE, CompGraph

# Op types that never join a fusion group (forward names; backward ids follow their forward).
UNFUSIBLE_TYPES = ("unknown", "input", "parameter", "while", "conditional", "custom_call",
                   "collective", "lstm", "attention", "rng", "sort")
# Compute-heavy op types: at most one per group (design.md 4.1, rule F2).
HEAVY_TYPES = ("conv", "dot")

# The anchor of a fused group, whose class prices the group (rule F4), is the member whose op
# class comes first here: XLA's "hero" order, as `costmodel.opclass.HERO_RULES` classifies a
# post-optimisation fusion (convolution > dot > scatter > gather > pool > reduce > other >
# transpose > elementwise > data movement), so a fused group is costed as the cost model costs
# the fusion XLA would make of it. Classes not listed rank last.
ANCHOR_ORDER = ("conv", "conv_grouped", "conv_filter", "conv_eigen", "dot", "dot_small",
                "scatter", "gather", "pool", "reduce", "other", "custom_call", "control",
                "transpose", "elementwise", "data_movement", "free")

FUSIBLE = np.array([name not in UNFUSIBLE_TYPES for name in ops.OP_TYPES], bool)
HEAVY = np.array([name in HEAVY_TYPES for name in ops.OP_TYPES], bool)


def fusible(op_type) -> np.ndarray:
  """Bool per op type id: may the op be in a fusion group (backward ids as their forward)."""
  return FUSIBLE[ops.forward_type(op_type)]


def heavy(op_type) -> np.ndarray:
  """Bool per op type id: is the op compute-heavy (a dot or a convolution, either direction)."""
  return HEAVY[ops.forward_type(op_type)]


def check_fusable(graph: CompGraph) -> None:
  """Raises ValueError unless fused groups of `graph` can be costed (design.md 4.1)."""
  if graph.reference is None:
    raise ValueError(
        f"graph '{graph.name}' has no cost reference: fusion costs a fused group with the "
        "roofline of the device that costed the graph, so it needs a graph costed by the cost "
        "model (a jax: or zoo: source, or simulator.costmodel.apply_cost_model); a coarsened "
        "graph (',coarsen=N') has none, as its nodes are groups of ops: fuse the graph itself")
  if not (np.any(graph.flops > 0) or np.any(graph.bytes_accessed > 0)):
    raise ValueError(f"graph '{graph.name}' has no flops and no bytes_accessed: fused groups "
                     "cannot be costed")


@dataclasses.dataclass(frozen=True)
class NodeTables:
  """Per-op inputs of the fusion rules (host numpy, float64)."""
  consumer: np.ndarray  # (N,) int: the only consumer of the op, or the op itself
  single: np.ndarray  # (N,) bool: exactly one consumer
  fusible: np.ndarray  # (N,) bool
  heavy: np.ndarray  # (N,) int 0/1
  flops: np.ndarray  # (N,) flops counted by the roofline (0 for memory-only classes)
  rate_flops: np.ndarray  # (N,) FLOP/s of the op's class (inf: a memory-only class)
  anchor_rank: np.ndarray  # (N,) int position of the op's class in ANCHOR_ORDER
  rate_bytes: np.ndarray  # (N,) bytes/s of the op's class
  overhead: np.ndarray  # (N,) seconds: the class's launch overhead


def node_tables(graph: CompGraph) -> NodeTables:
  """The per-op fusion inputs of a costed graph (`check_fusable` first)."""
  check_fusable(graph)
  from simulator.costmodel.opclass import graph_class  # local: the cost model imports graph
  ref = graph.reference
  n = graph.num_nodes
  out_deg = graph.out_degree()
  ptr, succ = graph.successor_csr()
  consumer = np.arange(n)
  one = out_deg == 1
  consumer[one] = succ[ptr[:-1][one]]
  cls = np.array([ref.class_id(graph_class(t, f, b)) for t, f, b in zip(
      graph.op_type.tolist(), graph.flops.tolist(), graph.bytes_accessed.tolist())], np.int64)
  flops_eff = np.asarray(ref.flops_eff)[cls]
  mem_only = np.asarray(ref.memory_only)[cls]
  order = {c: k for k, c in enumerate(ANCHOR_ORDER)}
  rank = np.array([order.get(ref.classes[c], len(ANCHOR_ORDER)) for c in cls], np.int64)
  t = NodeTables(
      consumer=consumer, single=one, fusible=fusible(graph.op_type),
      heavy=heavy(graph.op_type).astype(np.int64),
      flops=np.where(mem_only, 0.0, graph.flops),
      rate_flops=np.where(mem_only, np.inf, flops_eff * ref.peak_flops),
      anchor_rank=rank,
      rate_bytes=np.asarray(ref.bytes_eff)[cls] * ref.mem_bandwidth,
      overhead=np.asarray(ref.overhead_ratio)[cls] * ref.launch_overhead)
  _check_group_range(graph, t)
  return t


def group_cost_bound(flops, nbytes, rate_flops, rate_bytes, overhead) -> Tuple[np.ndarray, float]:
  """(work (N,), launch): summed over the members of any fused group, `work` plus `launch`
  bounds the group's F4 cost from above (numpy; the ops' roofline flops and bytes and their
  classes' rates and overheads, as `NodeTables` holds them).

  Why: a group's roofline replaces its members' costs and can exceed their sum (members that
  cost 0 with flops), so a bound of event times made of the op costs alone does not hold for a
  fused action. Each op's work is taken at the slowest flops and bytes rates of the graph's
  classes (the anchor is one of the members), and one launch at the largest overhead.
  """
  flops, nbytes = np.asarray(flops, np.float64), np.asarray(nbytes, np.float64)
  rf = float(np.min(rate_flops, initial=np.inf))
  rb = float(np.min(rate_bytes, initial=np.inf))
  work = np.where(flops > 0, flops / rf, 0.0) + np.where(nbytes > 0, nbytes / rb, 0.0)
  return work, float(np.max(overhead, initial=0.0))


def fused_cost_bound(cost, flops, nbytes, rate_flops, rate_bytes, overhead) -> np.ndarray:
  """(N,) per op a cost whose sum over any fused group's members is at least the group's
  duration numerator (its own cost for a group of one, `group_cost_bound` for more): what
  `reference.check_time_range` bounds a fused action's event times with."""
  work, launch = group_cost_bound(flops, nbytes, rate_flops, rate_bytes, overhead)
  return np.maximum(np.asarray(cost, np.float64), work + launch)


def _check_group_range(graph: CompGraph, t: NodeTables) -> None:
  """ValueError when some fused group of `graph` could hold a value above MAX_VALUE (the
  quotient graph is a CompGraph, which refuses one): its cost (`group_cost_bound` over every
  op), or the sum of its members' flops, bytes_accessed or param_bytes. Both simulators refuse
  such a graph alike, rather than the reference failing on a quotient the jitted one runs."""
  work, launch = group_cost_bound(t.flops, graph.bytes_accessed, t.rate_flops, t.rate_bytes,
                                  t.overhead)
  sums = {"cost": float(np.sum(work)) + launch, "flops": float(np.sum(graph.flops)),
          "bytes_accessed": float(np.sum(graph.bytes_accessed)),
          "param_bytes": float(np.sum(graph.param_bytes))}
  for field, total in sums.items():
    if not total <= MAX_VALUE:
      raise ValueError(
          f"graph '{graph.name}' cannot be fused: a fused group's {field} could reach "
          f"{total:.3g} (summed over its members" + (" at the cost reference's slowest rates"
                                                    if field == "cost" else "") +
          f"), above {MAX_VALUE:g}, the largest value of a graph (the quotient graph's "
          "range, design.md 4.1); scale flops, bytes and params, or the reference's rates")


def check_mask(fuse, shape, graph_name: str) -> np.ndarray:
  """A fuse mask of `shape` (the placement's) as bool; ValueError unless it holds booleans or
  0/1 (astype(bool) would read NaN, 0.5 or the string "False" as a request)."""
  arr = np.asarray(fuse)
  if arr.shape != tuple(shape):
    raise ValueError(f"fuse has shape {arr.shape}, expected {tuple(shape)} (the placement's) "
                     f"for graph '{graph_name}'")
  if arr.size and arr.dtype != bool:
    if arr.dtype.kind not in "biuf" or not np.all((arr == 0) | (arr == 1)):
      raise ValueError(f"fuse must hold booleans (or 0/1), got dtype {arr.dtype}")
  return arr.astype(bool)


def effective_placement(graph: CompGraph, placement) -> np.ndarray:
  """(N,) device of each op after colocation (rule 1); ValueError unless `placement` is (N,)
  integer device ids >= 0."""
  arr = np.asarray(placement)
  if arr.shape != (graph.num_nodes,):
    raise ValueError(f"placement has shape {arr.shape}, expected ({graph.num_nodes},) for "
                     f"graph '{graph.name}'")
  if arr.size and (arr.dtype.kind not in "biuf" or not np.all(np.isfinite(arr))
                   or np.any(arr != np.round(arr)) or np.any(arr < 0)):
    raise ValueError(f"placement of graph '{graph.name}' must hold integer device ids >= 0")
  return arr.astype(np.int64)[graph.colocation_root()]


def fusion_groups(graph: CompGraph, placement, fuse,
                  tables: Optional[NodeTables] = None) -> Tuple[np.ndarray, np.ndarray]:
  """Rules F1-F3: (legal (N,) bool, root (N,) int: the root op of each op's group).

  `placement` is the action's placement (colocation is applied here); `fuse` (N,) bool.
  """
  t = node_tables(graph) if tables is None else tables
  fuse = check_mask(fuse, (graph.num_nodes,), graph.name)
  place = effective_placement(graph, placement)
  j = t.consumer
  adm = fuse & t.single & t.fusible & t.fusible[j] & (place == place[j])  # F1
  h = t.heavy.copy()
  legal = np.zeros(graph.num_nodes, bool)
  for i in graph.topological_order().tolist():  # F2: decided in topological order
    if adm[i] and h[i] + h[j[i]] <= 1:
      legal[i] = True
      h[j[i]] += h[i]
  root = np.arange(graph.num_nodes)
  for i in reversed(graph.topological_order().tolist()):  # F3: consumers first
    if legal[i]:
      root[i] = root[j[i]]
  return legal, root


def group_cost(flops, nbytes, rate_flops, rate_bytes, overhead, max_cost, xp=np):
  """F4's cost of a group of >= 2 members from its sums and its anchor's rates (numpy or jnp)."""
  roof = xp.maximum(flops / rate_flops, nbytes / rate_bytes) + overhead
  return xp.where(max_cost > 0, roof, 0.0)


@dataclasses.dataclass(frozen=True)
class FusedGraph:
  """The quotient graph of one (placement, fuse) action and its maps to the original ops."""
  graph: CompGraph  # the quotient: one node per group, numbered by ascending root id
  root: np.ndarray  # (N,) root op of each op's group
  group: np.ndarray  # (N,) quotient node of each op
  roots: np.ndarray  # (G,) root op of each quotient node (ascending)
  placement: np.ndarray  # (G,) device of each group (its root's, after colocation)
  legal: np.ndarray  # (N,) bool: the op's fuse request was legal

  @property
  def num_fused(self) -> int:
    """Ops absorbed into another op's group (= N - G)."""
    return int(self.legal.sum())

  def members(self, g: int) -> np.ndarray:
    """Original op ids of quotient node `g`, ascending."""
    return np.flatnonzero(self.group == g)


def fuse_graph(graph: CompGraph, placement, fuse) -> FusedGraph:
  """Rule F4: the quotient graph of `graph` under one action (host, float64)."""
  t = node_tables(graph)
  legal, root = fusion_groups(graph, placement, fuse, t)
  place = effective_placement(graph, placement)
  n = graph.num_nodes
  roots = np.flatnonzero(~legal)  # every root is its own root; ascending
  group = np.searchsorted(roots, root)
  gn = roots.shape[0]
  size = np.bincount(group, minlength=gn)

  def gsum(x):
    out = np.zeros(gn)
    np.add.at(out, group, x)
    return out

  absorbed_out = np.where(legal, graph.out_bytes, 0.0)
  nbytes = np.maximum(gsum(graph.bytes_accessed) - 2.0 * gsum(absorbed_out), 0.0)
  flops = gsum(t.flops)
  temp = np.zeros(gn)
  np.maximum.at(temp, group, graph.temp_bytes)
  max_cost = np.zeros(gn)
  np.maximum.at(max_cost, group, graph.cost)
  anchor = np.empty(gn, np.int64)
  for g in range(gn):  # the member of the first class in ANCHOR_ORDER (ties: lowest id)
    m = np.flatnonzero(group == g)
    anchor[g] = m[np.argmin(t.anchor_rank[m])]
  fused_cost = group_cost(flops, nbytes, t.rate_flops[anchor], t.rate_bytes[anchor],
                          t.overhead[anchor], max_cost)
  cost = np.where(size > 1, fused_cost, graph.cost[roots])
  s, r = group[graph.senders], group[graph.receivers]
  keep = s != r
  label = (graph.node_names if graph.node_names is not None
           else [str(k) for k in range(n)])  # quotient nodes are named by their members
  names = ["+".join(label[k] for k in np.flatnonzero(group == g)) for g in range(gn)]
  fusion_type = ops.op_type_id("fusion")
  q = CompGraph(
      cost=cost, senders=s[keep], receivers=r[keep], out_bytes=graph.out_bytes[roots],
      param_bytes=gsum(graph.param_bytes), temp_bytes=temp,
      flops=np.where(size > 1, flops, graph.flops[roots]),
      bytes_accessed=np.where(size > 1, nbytes, graph.bytes_accessed[roots]),
      op_type=np.where(size > 1, fusion_type, graph.op_type[roots]),
      name=f"{graph.name}/fused", node_names=names, reference=graph.reference)
  return FusedGraph(graph=q, root=root, group=group, roots=roots, placement=place[roots],
                    legal=legal)


# ====================================================================== jitted form
@flax.struct.dataclass
class PaddedTables:
  """`NodeTables` padded to Np nodes for the jitted simulator (padding: unfusible, no work)."""
  topo: jnp.ndarray  # (Np,) int32 topological order of the real ops, then the padding
  consumer: jnp.ndarray  # (Np,) int32 only consumer, or the op itself
  admissible: jnp.ndarray  # (Np,) bool: single consumer, op and consumer fusible
  heavy: jnp.ndarray  # (Np,) int32 0/1
  flops: jnp.ndarray  # (Np,) roofline flops
  bytes_accessed: jnp.ndarray  # (Np,) bytes
  rate_flops: jnp.ndarray  # (Np,) FLOP/s (inf: memory-only class; 1 on padding)
  anchor_rank: jnp.ndarray  # (Np,) int32 class position in ANCHOR_ORDER (0 on padding)
  rate_bytes: jnp.ndarray  # (Np,) bytes/s (1 on padding)
  overhead: jnp.ndarray  # (Np,) seconds


def pad_tables(graph: CompGraph, num_nodes: int) -> PaddedTables:
  """The fusion tables of `graph` padded to `num_nodes` (called by `padding.pad_graph`)."""
  t = node_tables(graph)
  n = graph.num_nodes

  def vec(x, dtype, fill=0):
    out = np.full(num_nodes, fill, dtype)
    out[:n] = x
    return out

  return PaddedTables(
      topo=jnp.asarray(np.concatenate([graph.topological_order(),
                                       np.arange(n, num_nodes)]).astype(np.int32)),
      consumer=jnp.asarray(np.concatenate([t.consumer, np.arange(n, num_nodes)]).astype(
          np.int32)),
      admissible=jnp.asarray(vec(t.single & t.fusible & t.fusible[t.consumer], bool, False)),
      heavy=jnp.asarray(vec(t.heavy, np.int32)),
      flops=jnp.asarray(vec(t.flops, np.float64)),
      bytes_accessed=jnp.asarray(vec(graph.bytes_accessed, np.float64)),
      rate_flops=jnp.asarray(vec(t.rate_flops, np.float64, 1.0)),
      anchor_rank=jnp.asarray(vec(t.anchor_rank, np.int32)),
      rate_bytes=jnp.asarray(vec(t.rate_bytes, np.float64, 1.0)),
      overhead=jnp.asarray(vec(t.overhead, np.float64)))


def apply_padded(pg, place, fuse, dt):
  """Rules F1-F4 on one action of a padded graph, traceable (vmapped over the batch).

  Args: pg a PaddedGraph with `fusion` tables; place (Np,) int32 effective placement; fuse
  (Np,) bool; dt the float dtype. Returns (pg', root): pg' has absorbed members masked out
  (`node_mask` False, no cost, no bytes, no outgoing edges), every edge's receiver moved to its
  group's root, in-degrees recounted, and each root carrying its group's cost, param and temp
  bytes; root (Np,) int32 is the root op of each op's group.
  """
  ft = pg.fusion
  np_ = pg.cost.shape[0]
  ids = jnp.arange(np_, dtype=jnp.int32)
  j = ft.consumer
  adm = fuse & ft.admissible & (place == place[j]) & pg.node_mask  # F1

  def decide(h, i):  # F2, in topological order
    ok = adm[i] & (h[i] + h[j[i]] <= 1)
    return h.at[j[i]].add(jnp.where(ok, h[i], 0)), ok

  _, ok = jax.lax.scan(decide, ft.heavy, ft.topo)
  legal = jnp.zeros(np_, bool).at[ft.topo].set(ok)
  root = jnp.where(legal, j, ids)
  for _ in range(max(1, (np_ - 1).bit_length())):  # F3: pointer doubling to the root
    root = root[root]

  def seg(x, op=jax.ops.segment_sum):
    return op(x, root, num_segments=np_)

  cost = pg.cost.astype(dt)
  size = seg(jnp.ones(np_, jnp.int32))
  flops = seg(ft.flops.astype(dt))
  nbytes = jnp.maximum(seg(ft.bytes_accessed.astype(dt)) -
                       2.0 * seg(jnp.where(legal, pg.out_bytes.astype(dt), 0.0)), 0.0)
  max_cost = seg(cost, jax.ops.segment_max)
  # Anchor: the member of the first class in ANCHOR_ORDER, ties by lowest id (one key).
  key = ft.anchor_rank.astype(jnp.int32) * np_ + ids
  anchor = seg(jnp.where(pg.node_mask, key, jnp.iinfo(jnp.int32).max), jax.ops.segment_min)
  anchor = jnp.clip(anchor % np_, 0, np_ - 1)  # groups that are not roots: unused
  fused = group_cost(flops, nbytes, ft.rate_flops.astype(dt)[anchor],
                     ft.rate_bytes.astype(dt)[anchor], ft.overhead.astype(dt)[anchor],
                     max_cost, jnp)
  new_cost = jnp.where(legal, 0.0, jnp.where(size > 1, fused, cost))
  param = jnp.where(legal, 0.0, seg(pg.param_bytes.astype(dt)))
  temp = jnp.where(legal, 0.0, seg(pg.temp_bytes.astype(dt), jax.ops.segment_max))
  out = jnp.where(legal, 0.0, pg.out_bytes.astype(dt))
  edge_ok = pg.edge_mask & ~legal[pg.senders]
  receivers = root[pg.receivers]
  num_preds = jax.ops.segment_sum(edge_ok.astype(jnp.int32), receivers, num_segments=np_)
  return pg.replace(cost=new_cost, out_bytes=out, param_bytes=param, temp_bytes=temp,
                    node_mask=pg.node_mask & ~legal, num_preds=num_preds,
                    receivers=receivers, edge_mask=edge_ok), root
