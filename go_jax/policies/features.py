"""Host-side (numpy) feature builders: CompGraph + Topology -> padded GraphFeatures.

The policy sees every graph through the same fixed-width, scale-free features, so that one
network serves graphs of ten ops and of tens of thousands of ops, measured in microseconds or in
seconds, on 2, 4 or 8 devices. Padding to power-of-two buckets (`simulator.padding.bucket`)
happens here, before `jit`, so every graph of a bucket reuses one compiled policy.

Node features (`NODE_FEATURES`, one column each, float32, 0 on padding rows):
  log_cost         log1p(cost / mean cost of the graph)
  log_out_bytes    log1p(out_bytes * N / M), M = mean per-device memory capacity of the
                   topology's finite devices (the graph's total output + parameter bytes when
                   every capacity is infinite). 1 inside the log1p is the op's "fair share" of
                   one device's memory, so the column reads alike at any scale.
  log_param_bytes  log1p(param_bytes * N / M), M as above
  log_temp_bytes   log1p(temp_bytes * N / M), M as above
  log_out_share    log1p(out_bytes / mean out_bytes of the graph): sizes relative to each other
                   even where the device memory dwarfs the whole graph
  log_send_time    log1p(out_bytes * mean seconds per byte over the device pairs / mean cost):
                   the time to move the op's output to another device, in typical op costs
                   (0 with one device)
  log_in_degree    log1p(number of predecessors)
  log_out_degree   log1p(number of successors)
  depth            longest path (in edges) from any source / the graph's largest depth
                   (0 for a graph without edges)
  position         position in the decode order / N
  colocated        1 if the op belongs to a colocation group (colocation >= 0)
  log_flops        log1p(flops / mean flops), 0 when the graph records no flops
  log_bytes_acc    log1p(bytes_accessed / mean), 0 when the graph records none

Load inputs (`GraphFeatures.node_load`, `node_end`, `device_capacity`; raw shares, not logs,
because the policy's load state adds them up, see load.py):
  node_load        param_bytes / T, out_bytes / T, temp_bytes / T and cost / the graph's total
                   cost, T = the graph's total param + output bytes
  node_end         decode-order position of the op's last consumer (the last position when
                   nothing consumes it)
  node_leader      decode-order position of the op's colocation leader, the first op of its
                   group in the decode order (its own position when ungrouped): rule 1 puts
                   the group where the simulator's root goes, so the load state counts every
                   member on its leader's device and the policy decides the group there
  device_capacity  min(mem_capacity / T, MEM_RATIO_CAP)

The decode order (`DECODE_ORDERS`, the policy config's `decode_order`) is the topological order
the policy walks: its segments, its load state's scan and the positions above follow it.
"topological" (the default) is Kahn's order with the smallest ready id first; "rank" is HEFT's
order, decreasing upward rank with mean durations and transfer times (ties in Kahn's order),
so that the load state's time term (load_time.py) sees devices fill in the order a list
scheduler fills them. Any topological order is valid: every op comes after its inputs.

Device features (`DEVICE_FEATURES`, 0 on padding devices):
  speed            speed / the topology's largest speed
  log_memory       log1p(min(mem_capacity / T, MEM_RATIO_CAP)), T = the graph's total output +
                   parameter bytes: how many copies of the whole graph's tensors fit
  unbounded        1 where mem_capacity is infinite
  log_overhead     log1p(overhead / mean op cost)
  log_send         mean over the other real devices e (both directions) of
                   log1p((mean out_bytes / bandwidth) / mean op cost): the time to move a
                   typical tensor, in typical op costs (0 with one device)
  log_latency      mean over the other real devices of log1p(latency / mean op cost)
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from go_jax.policies.types import GraphFeatures
from simulator.graph import CompGraph
from simulator.ops import NUM_OP_TYPES
from simulator.padding import bucket
from simulator.topology import Topology

NODE_FEATURES = ("log_cost", "log_out_bytes", "log_param_bytes", "log_temp_bytes",
                 "log_out_share", "log_send_time", "log_in_degree", "log_out_degree", "depth",
                 "position", "colocated", "log_flops", "log_bytes_acc")
DEVICE_FEATURES = ("speed", "log_memory", "unbounded", "log_overhead", "log_send",
                   "log_latency")
NUM_NODE_FEATURES = len(NODE_FEATURES)
NUM_DEVICE_FEATURES = len(DEVICE_FEATURES)
MEM_RATIO_CAP = 1e4  # device memory over graph bytes is clipped here (and for infinite memory)


def _rank_order(graph: CompGraph, topology: Topology) -> np.ndarray:
  """HEFT's order: decreasing upward rank (mean duration + transfer), ties in Kahn's order. A
  producer's rank exceeds its consumers' (durations are positive), or ties and comes first."""
  from go_jax.methods.list_scheduling import heft_rank  # pylint: disable=g-import-not-at-top
  pos = np.empty(graph.num_nodes, np.int64)
  pos[graph.topological_order()] = np.arange(graph.num_nodes)
  return np.lexsort((pos, -heft_rank(graph, topology))).astype(np.int64)


# name -> (graph, topology) -> (N,) op ids in a topological order (the policy's decode order)
DECODE_ORDERS = {
    "topological": lambda graph, topology: np.asarray(graph.topological_order(), np.int64),
    "rank": _rank_order,
}


def check_decode_order(name: str) -> str:
  """`name` if it is a decode order (`DECODE_ORDERS`), else a ValueError naming the choices."""
  if name not in DECODE_ORDERS:
    raise ValueError(f"policy config: unknown decode_order {name!r}; choose from "
                     f"{sorted(DECODE_ORDERS)}")
  return name


def decode_order(graph: CompGraph, topology: Topology, name: str = "topological") -> np.ndarray:
  """(N,) op ids in the named decode order (`DECODE_ORDERS`)."""
  return DECODE_ORDERS[check_decode_order(name)](graph, topology)


def _relative(x: np.ndarray, scale: float) -> np.ndarray:
  """x / scale, or zeros when scale is 0 (e.g. a graph that records no flops)."""
  return x / scale if scale > 0 else np.zeros_like(x)


def node_depth(graph: CompGraph) -> np.ndarray:
  """(N,) longest path (number of edges) from any source to each op."""
  order = graph.topological_order()
  pos = np.empty(graph.num_nodes, np.int64)
  pos[order] = np.arange(graph.num_nodes)
  s, r = graph.senders, graph.receivers
  # Edges sorted by their consumer's topological position: when an edge is relaxed, every edge
  # into its producer has been relaxed already, so one pass gives the longest paths.
  idx = np.argsort(pos[r], kind="stable")
  depth = [0] * graph.num_nodes
  for u, v in zip(s[idx].tolist(), r[idx].tolist()):
    if depth[u] + 1 > depth[v]:
      depth[v] = depth[u] + 1
  return np.asarray(depth, np.int64)


def _memory_scale(graph: CompGraph, topology: Topology) -> float:
  cap = np.asarray(topology.mem_capacity, np.float64)
  finite = cap[np.isfinite(cap)]
  if finite.size and finite.mean() > 0:
    return float(finite.mean())
  return float(graph.out_bytes.sum() + graph.param_bytes.sum())


def node_features(graph: CompGraph, topology: Topology,
                  order: Optional[np.ndarray] = None) -> np.ndarray:
  """(N, NUM_NODE_FEATURES) float32 features of the real nodes (see the module docstring);
  `order`: the decode order of `position` (default: the graph's topological order)."""
  n = graph.num_nodes
  mem = _memory_scale(graph, topology)
  depth = node_depth(graph)
  mean_cost = float(graph.cost.mean())
  d = topology.num_devices
  _, per_byte = topology.link_tables()
  mean_per_byte = per_byte.sum() / (d * (d - 1)) if d > 1 else 0.0
  pos = np.empty(n, np.float64)
  pos[graph.topological_order() if order is None else order] = np.arange(n)
  cols = {
      "log_cost": np.log1p(_relative(graph.cost, mean_cost)),
      "log_out_bytes": np.log1p(_relative(graph.out_bytes * n, mem)),
      "log_param_bytes": np.log1p(_relative(graph.param_bytes * n, mem)),
      "log_temp_bytes": np.log1p(_relative(graph.temp_bytes * n, mem)),
      "log_out_share": np.log1p(_relative(graph.out_bytes, graph.out_bytes.mean())),
      "log_send_time": np.log1p(_relative(graph.out_bytes * mean_per_byte,
                                          mean_cost if mean_cost > 0 else 1.0)),
      "log_in_degree": np.log1p(graph.in_degree()),
      "log_out_degree": np.log1p(graph.out_degree()),
      "depth": _relative(depth.astype(np.float64), float(depth.max())),
      "position": pos / n,
      "colocated": (graph.colocation >= 0).astype(np.float64),
      "log_flops": np.log1p(_relative(graph.flops, graph.flops.mean())),
      "log_bytes_acc": np.log1p(_relative(graph.bytes_accessed, graph.bytes_accessed.mean())),
  }
  return np.stack([cols[k] for k in NODE_FEATURES], axis=1).astype(np.float32)


def device_features(graph: CompGraph, topology: Topology) -> np.ndarray:
  """(D, NUM_DEVICE_FEATURES) float32 features of the topology's devices, given the graph."""
  speed = np.asarray(topology.speed, np.float64)
  d = speed.shape[0]
  cap = np.asarray(topology.mem_capacity, np.float64)
  total = float(graph.out_bytes.sum() + graph.param_bytes.sum())
  ratio = cap / total if total > 0 else np.full(d, np.inf)
  mean_cost = float(graph.cost.mean())
  time_unit = mean_cost if mean_cost > 0 else 1.0
  latency, per_byte = topology.link_tables()
  send = np.log1p(graph.out_bytes.mean() * per_byte / time_unit)
  lat = np.log1p(latency / time_unit)
  off = ~np.eye(d, dtype=bool)

  def mean_links(x):  # mean over both directions of every link to another device
    if d == 1:
      return np.zeros(1)
    x = np.where(off, x, 0.0)
    return (x.sum(1) + x.sum(0)) / (2 * (d - 1))

  cols = {
      "speed": speed / speed.max(),
      "log_memory": np.log1p(np.minimum(ratio, MEM_RATIO_CAP)),
      "unbounded": (~np.isfinite(cap)).astype(np.float64),
      "log_overhead": np.log1p(np.asarray(topology.overhead, np.float64) / time_unit),
      "log_send": mean_links(send),
      "log_latency": mean_links(lat),
  }
  return np.stack([cols[k] for k in DEVICE_FEATURES], axis=1).astype(np.float32)


def load_inputs(graph: CompGraph, topology: Topology,
                order: Optional[np.ndarray] = None) -> tuple:
  """((N, 4) node_load, (N,) node_end, (D,) device_capacity) of the real nodes and devices
  (see the module docstring): what the policy's load state adds up. `order`: the decode order
  (default: the graph's topological order)."""
  n = graph.num_nodes
  total_mem = float(graph.param_bytes.sum() + graph.out_bytes.sum())
  total_cost = float(graph.cost.sum())
  node_load = np.stack([_relative(np.asarray(graph.param_bytes, np.float64), total_mem),
                        _relative(np.asarray(graph.out_bytes, np.float64), total_mem),
                        _relative(np.asarray(graph.temp_bytes, np.float64), total_mem),
                        _relative(np.asarray(graph.cost, np.float64), total_cost)], axis=1)
  pos = np.empty(n, np.int64)
  pos[graph.topological_order() if order is None else order] = np.arange(n)
  end = pos.copy()
  np.maximum.at(end, graph.senders, pos[graph.receivers])
  end[graph.out_degree() == 0] = n - 1  # rule 7: an output nobody consumes lives to the end
  cap = np.asarray(topology.mem_capacity, np.float64)
  ratio = cap / total_mem if total_mem > 0 else np.full(cap.shape, np.inf)
  return (node_load.astype(np.float32), end.astype(np.int32),
          np.minimum(ratio, MEM_RATIO_CAP).astype(np.float32))


def colocation_leaders(graph: CompGraph, position: np.ndarray) -> np.ndarray:
  """(N,) int32 topological position of each op's colocation leader (the group member first in
  topological order; the op's own position when ungrouped), given each op's `position`."""
  position = np.asarray(position, np.int64)
  leader = position.copy()
  grouped = np.flatnonzero(graph.colocation >= 0)
  if grouped.size:
    _, group = np.unique(np.asarray(graph.colocation)[grouped], return_inverse=True)
    first = np.full(int(group.max()) + 1, np.iinfo(np.int64).max)
    np.minimum.at(first, group, position[grouped])
    leader[grouped] = first[group]
  return leader.astype(np.int32)


def graph_features(graph: CompGraph, topology: Topology, num_nodes: Optional[int] = None,
                   num_edges: Optional[int] = None, max_devices: int = 8,
                   hint_placement: Optional[np.ndarray] = None,
                   order: str = "topological") -> GraphFeatures:
  """Features of one graph on one topology, padded (numpy leaves; jit / vmap accept them).

  Args:
    graph, topology: the problem.
    num_nodes, num_edges: padded sizes (default: the power-of-two buckets of the graph's).
    max_devices: Dmax, the device axis of `device_feats` / `device_mask`.
    hint_placement: (N,) device per op of a hint placement (GraphFeatures.hint; None: no hint).
    order: the decode order (`DECODE_ORDERS`; the policy config's `decode_order`).

  Raises:
    ValueError: the topology has more than `max_devices` devices, the graph does not fit
      `num_nodes` / `num_edges`, or `order` is not a decode order.
  """
  n, e, d = graph.num_nodes, graph.num_edges, topology.num_devices
  if d > max_devices:
    raise ValueError(f"topology has {d} devices but the policy handles at most "
                     f"max_devices={max_devices}")
  np_ = bucket(n) if num_nodes is None else int(num_nodes)
  ep = bucket(e) if num_edges is None else int(num_edges)
  if np_ < n or ep < e:
    raise ValueError(f"graph '{graph.name}' ({n} nodes, {e} edges) does not fit the padded "
                     f"size ({np_} nodes, {ep} edges)")
  if np.any(graph.op_type >= NUM_OP_TYPES):
    i = int(np.flatnonzero(graph.op_type >= NUM_OP_TYPES)[0])
    raise ValueError(f"graph '{graph.name}': op_type {graph.op_type[i]} of node "
                     f"{graph.node_label(i)} is outside the vocabulary [0, {NUM_OP_TYPES})")
  walk = decode_order(graph, topology, order)
  feats = np.zeros((np_, NUM_NODE_FEATURES), np.float32)
  feats[:n] = node_features(graph, topology, walk)
  op_type = np.zeros(np_, np.int32)
  op_type[:n] = graph.op_type
  senders = np.zeros(ep, np.int32)
  senders[:e] = graph.senders
  receivers = np.zeros(ep, np.int32)
  receivers[:e] = graph.receivers
  topo_order = np.arange(np_, dtype=np.int32)  # padding keeps its ids, after every real node
  topo_order[:n] = walk
  topo_position = np.empty(np_, np.int32)
  topo_position[topo_order] = np.arange(np_, dtype=np.int32)
  dev = np.zeros((max_devices, NUM_DEVICE_FEATURES), np.float32)
  dev[:d] = device_features(graph, topology)
  node_load = np.zeros((np_, 4), np.float32)
  node_end = np.zeros(np_, np.int32)
  capacity = np.zeros(max_devices, np.float32)
  node_load[:n], node_end[:n], capacity[:d] = load_inputs(graph, topology, walk)
  node_leader = np.arange(np_, dtype=np.int32)  # padding: its own position
  node_leader[:n] = colocation_leaders(graph, topo_position[:n])
  hint = None
  if hint_placement is not None:
    given = np.asarray(hint_placement)
    if given.shape != (n,) or np.any(given < 0) or np.any(given >= d):
      raise ValueError(f"graph '{graph.name}': hint_placement must be ({n},) devices in "
                       f"[0, {d}), got shape {given.shape}")
    hint = np.full(np_, -1, np.int32)
    hint[:n] = given
  return GraphFeatures(
      node_feats=feats, op_type=op_type, node_mask=np.arange(np_) < n,
      senders=senders, receivers=receivers, edge_mask=np.arange(ep) < e,
      topo_order=topo_order, topo_position=topo_position,
      device_mask=np.arange(max_devices) < d, device_feats=dev, hint=hint, node_load=node_load,
      node_end=node_end, node_leader=node_leader, device_capacity=capacity)


def batch_features(graphs: Sequence[CompGraph], topologies: Sequence[Topology],
                   max_devices: int = 8) -> GraphFeatures:
  """Features of G (graph, topology) pairs padded to one common bucket, stacked on axis 0.

  `topologies` holds one topology per graph, or a single one shared by all graphs.
  """
  graphs, topologies = list(graphs), list(topologies)
  if not graphs:
    raise ValueError("batch_features needs at least one graph")
  if len(topologies) == 1:
    topologies = topologies * len(graphs)
  if len(topologies) != len(graphs):
    raise ValueError(f"batch_features got {len(graphs)} graphs but {len(topologies)} "
                     "topologies (give one per graph, or one for all)")
  np_ = bucket(max(g.num_nodes for g in graphs))
  ep = bucket(max(g.num_edges for g in graphs))
  each = [graph_features(g, t, np_, ep, max_devices) for g, t in zip(graphs, topologies)]
  return GraphFeatures(**{f: np.stack([getattr(x, f) for x in each])
                          for f in GraphFeatures.__dataclass_fields__ if f != "hint"})
