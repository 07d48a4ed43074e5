"""Expansion of a partitioning strategy into a CompGraph (docs/design.md section 4.2).

Why: a partitioned step is still a graph of ops and transfers, so it is written as a CompGraph
that the simulator of section 4 scores unchanged (as are the placement methods and the plots):
op i under a split option becomes k shard ops, one per worker, and the communication its
neighbours' layouts imply is made of ops and edges whose transfers rule 3 (one transfer of
`out_bytes` per producer per destination device, one send channel per device) times exactly.
Shard j of every op, and the communication ops that worker j sends from, form colocation group
j ("worker j"), so a placement of the expanded graph is a map of workers to devices.

Communication, per producer u (layout L) and distinct layout X that its consumers need
(`simulator.partition.space.transfer_bytes` gives the bytes; all collectives are *direct*,
every worker sending to every other over its own link, not rings or trees):
  * L == X, or L == R (a replicated tensor is sliced locally): shard j -> consumer shard j;
  * split -> R (all-gather): every consumer shard reads every producer shard (S/k each);
  * split d -> split d' (all-to-all): zero-cost "slice" ops of S/k^2 bytes on worker j, one per
    other worker j', between u's shard j and the consumer's shard j';
  * P -> split or R (reduce-scatter, then all-gather for R): k - 1 zero-cost slice ops of S/k
    per producer shard, and a "reduce" op per worker adding its k pieces (out S/k; with a cost
    reference, the roofline of (k-1) S/k / 4 additions reading k S/k and writing S/k bytes;
    without, 0); consumers needing R read every worker's reduce op (an all-gather).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Tuple

import numpy as np

from simulator import ops
from simulator.graph import CompGraph
from simulator.partition.space import P, R, StrategySpace, requirements

SHARD, SLICE, REDUCE = 0, 1, 2  # roles of expanded nodes


@dataclasses.dataclass(frozen=True)
class Expanded:
  """An expanded graph and its map back to the original ops."""
  graph: CompGraph
  origin: np.ndarray  # (M,) int original op of each node (shards and the comm ops of its output)
  worker: np.ndarray  # (M,) int worker (= colocation group) of each node
  role: np.ndarray  # (M,) int SHARD, SLICE or REDUCE
  k: int
  comm_bytes: float  # bytes crossing workers under rule 3 (`transfer_bytes_of`)

  def placement(self, devices=None) -> np.ndarray:
    """(M,) device of every node: worker j on devices[j] (default: device j)."""
    dev = np.arange(self.k) if devices is None else np.asarray(devices, np.int64)
    if dev.shape != (self.k,):
      raise ValueError(f"devices must give one device per worker ({self.k}), got shape "
                       f"{dev.shape}")
    return dev[self.worker]


def transfer_bytes_of(graph: CompGraph, device: np.ndarray) -> float:
  """Bytes rule 3 sends for a placement: out_bytes per producer per other consumer device."""
  dest = set()
  for u, v in zip(graph.senders.tolist(), graph.receivers.tolist()):
    if device[u] != device[v]:
      dest.add((u, int(device[v])))
  return float(sum(graph.out_bytes[u] for u, _ in dest))


class _Roofline:
  """Shard costs from the graph's cost reference (None: cost scaled by the work share)."""

  def __init__(self, graph: CompGraph):
    self.ref = graph.reference
    if self.ref is None:
      return
    from simulator.costmodel.opclass import graph_class  # local: the cost model imports graph
    ref = self.ref
    cls = [ref.class_id(graph_class(t, f, b)) for t, f, b in zip(
        graph.op_type.tolist(), graph.flops.tolist(), graph.bytes_accessed.tolist())]
    self.rate_f = np.where(np.asarray(ref.memory_only)[cls], np.inf,
                           np.asarray(ref.flops_eff)[cls] * ref.peak_flops)
    self.rate_b = np.asarray(ref.bytes_eff)[cls] * ref.mem_bandwidth
    self.over = np.asarray(ref.overhead_ratio)[cls] * ref.launch_overhead
    ew = ref.class_id("elementwise")
    self.add_rates = (ref.flops_eff[ew] * ref.peak_flops, ref.bytes_eff[ew] * ref.mem_bandwidth,
                      ref.overhead_ratio[ew] * ref.launch_overhead)

  def shard_cost(self, graph, i: int, flops: float, nbytes: float, work: float) -> float:
    if self.ref is None:
      return float(graph.cost[i]) * work
    roof = lambda f, b: max(f / self.rate_f[i], b / self.rate_b[i]) + self.over[i]
    full = roof(graph.flops[i], graph.bytes_accessed[i])
    return float(graph.cost[i]) * (roof(flops, nbytes) / full if full > 0 else work)

  def reduce_cost(self, piece: float, k: int) -> float:
    if self.ref is None:
      return 0.0
    rf, rb, over = self.add_rates
    return max((k - 1) * piece / 4.0 / rf, (k + 1) * piece / rb) + over


class _Builder:
  """The rows (cost, out, param, temp, flops, bytes, op_type, name, worker, op, role) and edges
  of an expanded graph under construction: the one place that `expand` and `expand_levels`
  share for shard rows, communication ops, consumer edges and the final CompGraph."""

  def __init__(self, graph: CompGraph, k: int):
    self.graph, self.k = graph, k
    self.rows: List[Tuple] = []
    self.senders: List[int] = []
    self.receivers: List[int] = []
    self.roof = _Roofline(graph)
    self.shard = np.zeros((graph.num_nodes, k), np.int64)  # (N, k) row of op i's shard j
    names = graph.node_names
    self.label = (lambda i: names[i]) if names is not None else str
    self.t_slice, self.t_red = ops.op_type_id("slice"), ops.op_type_id("reduce")

  def shards(self, i: int, op, work: float, in_fracs, leaf_fracs, out_frac: float,
             override=None):
    """k shard rows of op i (`op` its OpSpace): `work` the shard's share of the op's work,
    the fractions each shard holds of the op's node inputs, leaves and output; `override`
    (cost, params, temp): a profile's figures of the shard."""
    g = self.graph
    in_bytes, leaf_bytes = op.in_bytes, op.leaf_bytes
    io = sum(in_bytes) + sum(leaf_bytes) + g.out_bytes[i]
    part = (sum(b * f for b, f in zip(in_bytes, in_fracs)) +
            sum(b * f for b, f in zip(leaf_bytes, leaf_fracs)) + g.out_bytes[i] * out_frac)
    nbytes = g.bytes_accessed[i] * (part / io if io > 0 else work)
    flops = g.flops[i] * work
    params = (sum(b * f for b, f in zip(leaf_bytes, leaf_fracs)) if leaf_bytes
              else g.param_bytes[i])
    cost = self.roof.shard_cost(g, i, flops, nbytes, work)
    temp = g.temp_bytes[i] * work
    if override is not None:
      cost, params, temp = override
    for j in range(self.k):
      self.shard[i, j] = len(self.rows)
      self.rows.append((cost, g.out_bytes[i] * out_frac, params, temp, flops, nbytes,
                        int(g.op_type[i]), f"{self.label(i)}#{j}", j, i, SHARD))

  def add(self, row, srcs) -> int:
    """A communication row read from the rows `srcs`; returns its index."""
    self.rows.append(row)
    for s in srcs:
      self.senders.append(s)
      self.receivers.append(len(self.rows) - 1)
    return len(self.rows) - 1

  def slice(self, u: int, j: int, nbytes: float, srcs, name: str) -> int:
    """A zero-cost slice row of u's output on worker j."""
    return self.add((0.0, nbytes, 0.0, 0.0, 0.0, 0.0, self.t_slice,
                     f"{self.label(u)}#{j}{name}", j, u, SLICE), srcs)

  def reduce(self, u: int, j: int, piece: float, ways: int, srcs, name: str) -> int:
    """A reduce row on worker j adding `ways` pieces of `piece` bytes of u's output."""
    return self.add((self.roof.reduce_cost(piece, ways), piece, 0.0, 0.0,
                     (ways - 1) * piece / 4.0, (ways + 1) * piece, self.t_red,
                     f"{self.label(u)}>reduce{name}#{j}", j, u, REDUCE), srcs)

  def consume(self, v: int, srcs_per_worker):
    """Edges into op v's shard j from every row of srcs_per_worker[j]."""
    for j, srcs in enumerate(srcs_per_worker):
      for s in srcs:
        self.senders.append(s)
        self.receivers.append(int(self.shard[v, j]))

  def assemble(self, name: str) -> "Expanded":
    """The expanded CompGraph and its maps back to the original ops."""
    cols = list(zip(*self.rows))
    worker = np.asarray(cols[8], np.int64)
    exp = CompGraph(
        cost=cols[0], senders=np.asarray(self.senders, np.int64),
        receivers=np.asarray(self.receivers, np.int64), out_bytes=cols[1],
        param_bytes=cols[2], temp_bytes=cols[3], flops=cols[4], bytes_accessed=cols[5],
        op_type=cols[6], colocation=worker, name=name, node_names=cols[7],
        reference=self.graph.reference)
    return Expanded(exp, np.asarray(cols[9], np.int64), worker, np.asarray(cols[10], np.int64),
                    self.k, transfer_bytes_of(exp, worker))


def expand(graph: CompGraph, space: StrategySpace, strategy) -> Expanded:
  """The expanded graph of `strategy` ((N,) option ids of `space`) on `space.k` workers.

  Degree 1 is the identity: the graph itself, every op on worker 0, no communication.
  A 2-D strategy ((N, m) option ids of the k = 2 `space`) is multi-level: `expand_levels`.
  """
  if np.ndim(strategy) == 2:
    return expand_levels(graph, space, strategy)
  strat = space.check(graph, strategy)
  k = space.k
  n = graph.num_nodes
  if k == 1:
    return Expanded(graph, np.arange(n), np.zeros(n, np.int64), np.zeros(n, np.int64), 1, 0.0)
  b = _Builder(graph, k)
  frac = lambda lay: 1.0 / k if lay not in (R, P) else 1.0
  for i in graph.topological_order().tolist():
    op, opt = space.ops[i], space.ops[i].options[strat[i]]
    b.shards(i, op, 1.0 / k if opt.split else 1.0, [frac(x) for x in opt.ins],
             [frac(x) for x in opt.leaves], frac(opt.out), opt.shard)
  provided: Dict[Tuple[int, int], List[List[int]]] = {}
  need = requirements(space, strat)

  def provide(u: int, lay: int) -> List[List[int]]:
    """Per worker, the nodes whose outputs together hold u's output in layout `lay` there."""
    key = (u, lay)
    if key in provided:
      return provided[key]
    src = space.ops[u].options[strat[u]].out
    us = b.shard[u].tolist()
    size = need[key]
    if src == lay or src == R:
      res = [[us[j]] for j in range(k)]
    elif src != P and lay == R:
      res = [list(us) for _ in range(k)]
    elif src != P:  # split d -> split d': all-to-all through slices of S/k^2
      res = [[us[j]] for j in range(k)]
      for j in range(k):
        for j2 in range(k):
          if j2 != j:
            res[j2].append(b.slice(u, j, size / k / k, [us[j]], f">slice>{j2}"))
    else:  # partial: reduce-scatter (then all-gather for R)
      piece = size / k
      pieces = [[us[j]] for j in range(k)]
      for j in range(k):
        for j2 in range(k):
          if j2 != j:
            pieces[j2].append(b.slice(u, j, piece, [us[j]], f">slice>{j2}"))
      red = [b.reduce(u, j, piece, k, pieces[j], "") for j in range(k)]
      res = [[red[j]] for j in range(k)] if lay != R else [list(red) for _ in range(k)]
    provided[key] = res
    return res

  for v in graph.topological_order().tolist():
    op, opt = space.ops[v], space.ops[v].options[strat[v]]
    for u, lay in zip(op.inputs, opt.ins):
      b.consume(v, provide(u, lay))
  return b.assemble(f"{graph.name}@k{k}")


def expand_levels(graph: CompGraph, space: StrategySpace, strategy) -> Expanded:
  """The expanded graph of a multi-level strategy ((N, m) option ids of the k = 2 `space`,
  `simulator.partition.levels`) on 2^m workers: op shares multiply over the levels, and every
  conversion is `levels.conversion`'s plan of slice and reduce ops."""
  from simulator.partition import levels
  strat = levels.check(graph, space, strategy)
  n, m = strat.shape
  k = 2**m
  if m == 0:
    return Expanded(graph, np.arange(n), np.zeros(n, np.int64), np.zeros(n, np.int64), 1, 0.0)
  b = _Builder(graph, k)
  out_lay, in_lay = levels.layouts(space, strat)
  frac = lambda lays: float(np.prod([0.5 if x >= 2 else 1.0 for x in lays]))
  for i in graph.topological_order().tolist():
    op = space.ops[i]
    opts = [op.options[int(o)] for o in strat[i]]
    b.shards(i, op, float(np.prod([0.5 if o.split else 1.0 for o in opts])),
             [frac([o.ins[p] for o in opts]) for p in range(len(op.inputs))],
             [frac([o.leaves[p] for o in opts]) for p in range(len(op.leaf_bytes))],
             frac(out_lay[i]))
  provided: Dict[Tuple[int, Tuple[int, ...]], List[List[int]]] = {}

  def provide(u: int, lay: Tuple[int, ...]) -> List[List[int]]:
    key = (u, lay)
    if key in provided:
      return provided[key]
    size = float(graph.out_bytes[u])
    reduces, moves = levels.conversion(out_lay[u], lay, m)
    cur = b.shard[u].tolist()
    level_ids = [lv for lv, x in enumerate(out_lay[u]) if x == P]
    for lv, piece in zip(level_ids, reduces):
      nb = piece * size
      mate = lambda j: j ^ (1 << (m - 1 - lv))
      sl = [b.slice(u, j, nb, [cur[j]], f">slice{lv}>{mate(j)}") for j in range(k)]
      cur = [b.reduce(u, j, nb, 2, [cur[j], sl[mate(j)]], str(lv)) for j in range(k)]
    res = []
    for j2, got in enumerate(moves):
      res.append([b.slice(u, h, f * size, [cur[h]], f">slice>{j2}") if how == "slice"
                  else cur[h] for h, f, how in got])
    provided[key] = res
    return res

  for v in graph.topological_order().tolist():
    for u, lay in zip(space.ops[v].inputs, in_lay[v]):
      b.consume(v, provide(u, lay))
  return b.assemble(f"{graph.name}@k{k}x{m}")
