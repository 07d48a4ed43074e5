"""Graph coarsening: merge ops into groups so that large graphs fit a method's budget.

Why: the learned policies and the exact / search baselines scale with the node count, while
real training steps have 10^4-10^5 HLO ops (GO places graphs of up to 80k nodes through
grouping; HDP learns a grouper). `coarsen(graph, max_nodes)` returns a graph of at most
`max_nodes` nodes plus the old -> new mapping; a placement or priority found on the coarse
graph is carried back with `expand`. `contract(graph, groups)` is the merge itself, also used to
score XLA's own fusion groups as a grouping baseline (`xla_fusion_graph`). The group-id
primitives both rest on (canonical ids, the group graph's edges, union-find, and
`acyclic_pieces` / `acyclic_groups`, which split groups so a contraction stays acyclic) are
`simulator.grouping`'s; the two acyclic splitters are re-exported here.

Merging a group G into one node (`contract`):
  * cost, flops, param_bytes: sums over G (the members run one after another on one device).
  * bytes_accessed: sum over G, or with `boundary_bytes=True` only G's boundary (bytes of the
    distinct outside producers it reads + its param_bytes + its out_bytes), as a fusion that
    keeps its internal values on chip would access.
  * out_bytes: with `out_bound="sum"` (the default) bytes of the members' outputs read outside
    G (or read by nobody: graph outputs). The simulator sends a node's whole out_bytes to every
    device that reads it, so this overstates transfers when different members feed different
    groups; "edge_max" / "edge_mean" give instead the max / mean over G's consumer groups H of
    the bytes H reads from G (distinct producing members), + the bytes of G's unread outputs:
    what one transfer carries, at the price of understating the output memory G's device holds.
  * temp_bytes: with `temp_bound="sum"` (the default) the largest member temp_bytes + the bytes
    of the members' outputs read only inside G (a conservative bound: every internal value
    live while the merged op runs); with `temp_bound="peak"` the members' peak live bytes when
    they run one after another on one device in the graph's topological order: at member u's
    step, u's temp_bytes + the internal outputs produced at or before u and read at or after
    it (what section 4's memory rule 7 would hold for G's internal values on one device).
  * op_type: the type of the heaviest member (cost, then flops; ties: lowest id).
  * colocation: coarse nodes holding members of one colocation group share one id (a union of
    such classes), so any placement that satisfies the coarse colocation, once expanded,
    satisfies the original one; `expand(..., coarse_graph)` applies the coarse rule first.
  * edges: one between two groups wherever a member edge crosses; the result must be acyclic
    (CompGraph validates); `acyclic_groups` splits groups minimally-greedily to make it so.
  * names: "<first member name> (+k)"; group ids are renumbered in order of smallest member.

Strategies of `coarsen`, applied in order until the graph has <= max_nodes nodes; "weight" is
cost, or where the graph has no costs yet (a fresh HLO graph) a roofline's shape,
max(flops, FLOPS_PER_BYTE * bytes_accessed) (about a V100's ratio of peak flops to bandwidth):
  (a) "colocate": parameter / optimizer / constant-like ops and zero-weight ops join their only
      consumer (sinks: their only producer);
  (b) "chains": u -> v merged where v is u's only consumer and u is v's only producer;
      "trees": more general safe merges, lightest first, only as many as needed and none
      making a group heavier than TREE_WEIGHT_CAP * total / max_nodes: u into its only
      consumer (in-trees), then v into its only producer (out-trees). Any set of such
      contractions keeps the graph acyclic (every edge leaving a group leaves its root).
      On a colocated graph the merges keep placement units (`simulator.coarsen_units`):
      merges inside one unit first, each uniting merge followed by the ones it made free,
      uniting merges limited (TREE_UNITING_SHARE, TREE_UNIT_FLOOR), passes repeated;
  (c) "scopes": groups keyed by the JAX op_name path of their heaviest member (the
      "[...]" part of node_names, or the name itself, split on '/'; transformation wrappers like
      jvp(...) / transpose(...) dropped), truncated to depth k = deepest .. 1; a scope's groups
      are merged and then split by `acyclic_groups` where the merge would close a cycle; at
      the depth that would overshoot, only the lightest scopes (as few as reach max_nodes),
      or none where even one scope is far too coarse;
  With `max_group_weight=f` (a fraction of the total weight; default None: no cap) "chains"
  and "trees" never make a group heavier than f * total, and "scopes" cuts a scope that heavy
  into runs of its groups in a topological order, each run starting below f * total of
  weight (so it exceeds the cap by at most its last group; acyclic_pieces then splits where
  needed): one name scope cannot swallow a quarter of a training step (GNMT-8's encoder
  backward, 15,748 ops, without a cap). "topological" is not capped (it must reach max_nodes).
  (d) "topological": the fallback that always reaches max_nodes: the graph's topological order
      cut into max_nodes contiguous runs balanced by weight and count (contiguous runs of a
      topological order can never form a cycle). On a colocated graph the sequence of
      placement units is cut instead, into as many runs as fit max_nodes once each run is
      split into acyclic pieces, which are then refined by the plain runs while nodes are to
      spare (`coarsen_units.unit_runs`), unless the plain cut keeps as many units and nodes;
      it may end a little below max_nodes. Where that cut's makespan bound (coarse critical
      path or heaviest unit, `coarsen_units.makespan_bound`) is over KEPT_BOUND_FACTOR times
      the best level cut's (`coarsen_units.level_runs`: groups sorted by longest-path level
      and a bin of colocated units, cut into balanced runs and at every level or bin change;
      1-8 bins tried; of those within LEVEL_BOUND_SLACK of the lowest bound, the lightest
      heaviest unit), the level cut is taken instead: colocated ops spread over the depth
      made the unit cut's pieces serial slabs.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from simulator import coarsen_units, grouping, ops
from simulator.coarse_bounds import edge_out_bytes, peak_internal_bytes
from simulator.graph import CompGraph
from simulator.grouping import acyclic_groups, acyclic_pieces  # noqa: F401  (re-exported)

STRATEGIES = ("colocate", "chains", "trees", "scopes", "topological")
TREE_WEIGHT_CAP = 2.0  # "trees" never makes a group heavier than this * total / max_nodes
FLOPS_PER_BYTE = 16.0  # weight without costs: max(flops, this * bytes), a roofline's shape
PARAM_LIKE = tuple(ops.op_type_id(t) for t in ("parameter", "optimizer", "constant"))
_WRAPPER = re.compile(r"^[\w\-]+\((.*)\)$")


# ------------------------------------------------------------------ contract / expand
TEMP_BOUNDS = ("sum", "peak")
OUT_BOUNDS = ("sum", "edge_max", "edge_mean")


def contract(graph: CompGraph, groups, *, boundary_bytes: bool = False,
             temp_bound: str = "sum", out_bound: str = "sum",
             name: Optional[str] = None) -> CompGraph:
  """Merges each group of nodes into one node (rules in the module docstring).

  Raises:
    ValueError: `groups` has the wrong shape or type, the merge makes a cycle (use
      `acyclic_groups` first), or `temp_bound` is not one of TEMP_BOUNDS.
  """
  if temp_bound not in TEMP_BOUNDS:
    raise ValueError(f"temp_bound must be one of {TEMP_BOUNDS}, got {temp_bound!r}")
  if out_bound not in OUT_BOUNDS:
    raise ValueError(f"out_bound must be one of {OUT_BOUNDS}, got {out_bound!r}")
  labels = grouping.check_groups(graph, groups)
  m = int(labels.max()) + 1
  s, r = graph.senders.astype(np.int64), graph.receivers.astype(np.int64)
  cross = labels[s] != labels[r]
  read_outside = np.zeros(graph.num_nodes, bool)
  read_outside[s[cross]] = True
  sink = graph.out_degree() == 0
  external = read_outside | sink
  total = lambda w: np.bincount(labels, weights=w, minlength=m)
  if temp_bound == "peak":
    temp = peak_internal_bytes(graph, labels, external, m)
  else:
    temp = np.zeros(m)
    np.maximum.at(temp, labels, graph.temp_bytes)
    temp = temp + total(np.where(external, 0.0, graph.out_bytes))
  out_bytes = total(np.where(external, graph.out_bytes, 0.0))
  sent = out_bytes if out_bound == "sum" else edge_out_bytes(graph, labels, sink, m, out_bound)
  if boundary_bytes:  # distinct (outside producer, group) pairs read + parameters + outputs
    pairs = np.unique(s[cross] * m + labels[r[cross]])
    accessed = out_bytes + total(graph.param_bytes) + np.bincount(
        pairs % m, weights=graph.out_bytes[pairs // m], minlength=m)
  else:
    accessed = total(graph.bytes_accessed)
  heavy = np.lexsort((np.arange(graph.num_nodes), -graph.flops, -graph.cost, labels))
  lead = heavy[np.r_[True, labels[heavy][1:] != labels[heavy][:-1]]]  # heaviest per group
  qs, qr = grouping.quotient(s, r, labels)
  names = None
  if graph.node_names is not None:
    size = np.bincount(labels, minlength=m)
    first = np.full(m, graph.num_nodes)
    np.minimum.at(first, labels, np.arange(graph.num_nodes))
    names = [graph.node_names[f] + (f" (+{k - 1})" if k > 1 else "")
             for f, k in zip(first.tolist(), size.tolist())]
  try:
    return CompGraph(
        cost=total(graph.cost), senders=qs, receivers=qr, out_bytes=sent,
        param_bytes=total(graph.param_bytes), temp_bytes=temp,
        flops=total(graph.flops), bytes_accessed=accessed, op_type=graph.op_type[lead],
        colocation=coarsen_units.colocation_classes(graph.colocation, labels, m),
        name=name or f"{graph.name}/contracted{m}", node_names=names)
  except ValueError as e:
    raise ValueError(f"contract: these groups of '{graph.name}' do not give a valid graph "
                     f"(split them with acyclic_groups): {e}") from e


def expand(coarse_placement, mapping, coarse_graph: Optional[CompGraph] = None) -> np.ndarray:
  """(..., N) per-node values (placement or priority) from (..., M) per-coarse-node ones.

  With `coarse_graph`, its colocation rule is applied first (each coarse colocation group takes
  the value of its lowest-id node), so an expanded placement satisfies the original colocation.
  """
  values = np.asarray(coarse_placement)
  mapping = np.asarray(mapping)
  if mapping.ndim != 1 or (mapping.size and not np.issubdtype(mapping.dtype, np.integer)):
    raise ValueError(f"mapping must be a 1-D int array, got shape {mapping.shape}, "
                     f"dtype {mapping.dtype}")
  m = values.shape[-1] if values.ndim else 0
  if mapping.size and (mapping.min() < 0 or mapping.max() >= m):
    raise ValueError(f"mapping refers to coarse nodes outside [0, {m}) (coarse values have "
                     f"shape {values.shape})")
  if coarse_graph is not None:
    if coarse_graph.num_nodes != m:
      raise ValueError(f"coarse graph has {coarse_graph.num_nodes} nodes, values have {m}")
    values = values[..., coarse_graph.colocation_root()]
  return values[..., mapping]


def xla_fusion_graph(pre_graph: CompGraph, groups) -> CompGraph:
  """The pre-optimisation graph contracted by XLA's fusion groups (`frontends.xla`): XLA's
  fusion as a grouping baseline; bytes_accessed counts each fusion's boundary only."""
  return contract(pre_graph, groups, boundary_bytes=True, name=f"{pre_graph.name}/xla_fusion")


# ------------------------------------------------------------------ strategies
@dataclasses.dataclass(frozen=True)
class Coarsened:
  """A coarse graph and where each original node went."""
  graph: CompGraph                    # (M nodes) the contracted graph, M <= max_nodes
  mapping: np.ndarray                 # (N,) int original node -> coarse node
  steps: Tuple[Tuple[str, int], ...]  # (strategy, node count after it), in order applied

  def expand(self, coarse_values) -> np.ndarray:
    """(..., N) values from (..., M) coarse ones, coarse colocation applied (see `expand`)."""
    return expand(coarse_values, self.mapping, self.graph)


class _State:
  """Current grouping (labels: original node -> group) and its quotient DAG."""

  def __init__(self, graph: CompGraph, weight: np.ndarray, cap: float = np.inf,
               keep_units: bool = True):
    self.graph, self.node_weight, self.cap = graph, weight, cap  # cap: no group heavier
    self.keep_units = keep_units
    self.s, self.r = graph.senders.astype(np.int64), graph.receivers.astype(np.int64)
    self.set(np.arange(graph.num_nodes, dtype=np.int64))

  def set(self, labels: np.ndarray):
    self.labels = grouping.canonical(labels)
    self.m = int(self.labels.max()) + 1
    self.qs, self.qr = grouping.quotient(self.s, self.r, self.labels)
    self.weight = np.bincount(self.labels, weights=self.node_weight, minlength=self.m)

  def merge(self, pairs_a, pairs_b, budget: Optional[int] = None, order=None,
            cap: float = np.inf):
    """Unions group pairs (in `order`, at most `budget` merges, none making a group heavier
    than `cap`) and updates the state."""
    parent, weight = list(range(self.m)), self.weight.tolist()
    done = 0
    a, b = np.asarray(pairs_a).tolist(), np.asarray(pairs_b).tolist()
    for k in (range(len(a)) if order is None else np.asarray(order).tolist()):
      if budget is not None and done >= budget:
        break
      ra, rb = grouping.find(parent, a[k]), grouping.find(parent, b[k])
      if ra != rb and weight[ra] + weight[rb] <= cap:
        parent[max(ra, rb)] = min(ra, rb)
        weight[min(ra, rb)] += weight[max(ra, rb)]
        done += 1
    if done:
      self.set(grouping.roots(parent)[self.labels])

  def units(self) -> Optional[np.ndarray]:
    """(m,) placement unit of every group; None where the graph has no colocation (or units
    are not kept)."""
    if not self.keep_units:
      return None
    return coarsen_units.units(self.graph.colocation, self.labels, self.m)

  def merge_keeping_units(self, pairs_a, pairs_b, budget: int, order, cap: float,
                          costly: Optional[int] = None, unit: Optional[np.ndarray] = None):
    """`merge` that keeps placement units (`coarsen_units.merge_keeping_units`); `unit`: the
    current `units()`, where the caller has them."""
    unit = self.units() if unit is None else unit
    if unit is None:
      return self.merge(pairs_a, pairs_b, budget=budget, order=order, cap=cap)
    parent = coarsen_units.merge_keeping_units(unit, self.weight, pairs_a, pairs_b,
                                               budget=budget, order=order, cap=cap,
                                               costly=costly)
    if parent is not None:
      self.set(grouping.roots(parent)[self.labels])


def _colocate(st: _State, max_nodes: int):
  node_light = np.isin(st.graph.op_type, PARAM_LIKE) | (st.node_weight == 0)
  # a group is param-like when all of its members are
  light = np.bincount(st.labels, weights=~node_light, minlength=st.m) == 0
  outdeg = np.bincount(st.qs, minlength=st.m)
  into_consumer = light[st.qs] & (outdeg[st.qs] == 1)  # in-tree merges: safe together
  st.merge(st.qs[into_consumer], st.qr[into_consumer])
  outdeg = np.bincount(st.qs, minlength=st.m)
  indeg = np.bincount(st.qr, minlength=st.m)
  light = np.bincount(st.labels, weights=~node_light, minlength=st.m) == 0
  sink = light[st.qr] & (outdeg[st.qr] == 0) & (indeg[st.qr] == 1)
  st.merge(st.qr[sink], st.qs[sink])


def _chains(st: _State, max_nodes: int):
  outdeg = np.bincount(st.qs, minlength=st.m)
  indeg = np.bincount(st.qr, minlength=st.m)
  chain = (outdeg[st.qs] == 1) & (indeg[st.qr] == 1)
  st.merge(st.qs[chain], st.qr[chain], cap=st.cap)


# Colocated graphs (`simulator.coarsen_units`): a pass of "trees" unites units for at most
# this share of the merges still needed (free merges are not limited) and never leaves fewer
# units than TREE_UNIT_FLOOR * max_nodes; the passes repeat while they make progress, since
# the mirror of an in-tree merge is often an out-tree one (PipeDream: B_v into B_u, then F_v
# into F_u) and is free only once the other pass has run. Chosen on the units left by 9
# PipeDream graphs at 16-512 nodes (shares 0.1-1, floors 0-1): a floor of half the nodes
# keeps about max_nodes / 2 units everywhere, the share barely matters.
TREE_UNITING_SHARE = 0.5
TREE_UNIT_FLOOR = 0.5


def _trees(st: _State, max_nodes: int):
  colocated = st.units() is not None
  while st.m > max_nodes:
    before = st.m
    floor = int(TREE_UNIT_FLOOR * max_nodes)
    for forward in (True, False):  # u into its only consumer, then v into its only producer
      if st.m <= max_nodes:
        return
      need = st.m - max_nodes  # merges still needed
      deg = np.bincount(st.qs if forward else st.qr, minlength=st.m)
      ok = deg[st.qs if forward else st.qr] == 1
      a, b = st.qs[ok], st.qr[ok]
      order = np.lexsort((a, st.weight[a] + st.weight[b]))  # lightest merges first
      unit = st.units() if colocated else None
      st.merge_keeping_units(
          a, b, budget=need, order=order,
          cap=min(TREE_WEIGHT_CAP * st.weight.sum() / max_nodes, st.cap),
          costly=max(0, min(int(np.ceil(TREE_UNITING_SHARE * need)),
                            int(unit.max()) + 1 - floor)) if colocated else None, unit=unit)
    if not colocated or st.m == before:
      return


def scope_path(name: str) -> Tuple[str, ...]:
  """The name-scope path of a node name: the "[op_name]" part if any, wrappers dropped."""
  i = name.rfind("[")
  path = name[i + 1:name.rfind("]")] if i >= 0 and name.endswith("]") else name
  parts = []
  for p in path.split("/"):
    while True:
      m = _WRAPPER.match(p)
      if not m:
        break
      p = m.group(1)
    if p:
      parts.append(p)
  return tuple(parts)


def _split_heavy(st: _State, scope: np.ndarray, num_keys: int) -> np.ndarray:
  """(m,) scope ids (-1: none) with every scope heavier than st.cap cut into runs of its
  groups in a topological order, each run starting below cap of cumulative weight (a run
  exceeds cap only by its last group); ids renumbered 0..K-1."""
  pos = np.empty(st.m, np.int64)  # a topological position of every group
  pos[np.argsort(acyclic_pieces(st.m, st.qs, st.qr, np.arange(st.m)), kind="stable")] = \
      np.arange(st.m)
  has = scope >= 0
  total = np.bincount(scope[has], weights=st.weight[has], minlength=num_keys)
  idx = np.flatnonzero(has & (total[np.maximum(scope, 0)] > st.cap))
  piece = np.zeros(st.m, np.int64)
  if idx.size:
    idx = idx[np.lexsort((pos[idx], scope[idx]))]
    w = st.weight[idx]
    cum = np.cumsum(w) - w  # weight before each group, over all heavy scopes
    start = np.r_[True, scope[idx][1:] != scope[idx][:-1]]
    base = np.maximum.accumulate(np.where(start, cum, 0.0))  # weight before its scope
    piece[idx] = np.floor((cum - base) / st.cap).astype(np.int64) + 1
  key = np.where(has, scope * (st.m + 1) + piece, -1)
  _, inv = np.unique(key[has], return_inverse=True)
  out = -np.ones(st.m, np.int64)
  out[has] = inv
  return out


def _scopes(st: _State, max_nodes: int):
  g = st.graph
  if g.node_names is None:
    return
  paths = [scope_path(x) for x in g.node_names]
  depth = max((len(p) for p in paths), default=0)
  for k in range(depth - 1, 0, -1):  # the full path names the op itself: start one above
    if st.m <= max_nodes:
      return
    order = np.lexsort((np.arange(g.num_nodes), -st.node_weight, st.labels))
    lead = order[np.r_[True, st.labels[order][1:] != st.labels[order][:-1]]]
    keys: Dict[Tuple[str, ...], int] = {}
    scope = np.array([keys.setdefault(paths[i][:k], len(keys)) if len(paths[i]) > k
                      else -1 for i in lead.tolist()], np.int64)
    if not keys:
      continue
    if np.isfinite(st.cap):
      scope = _split_heavy(st, scope, len(keys))
    num = int(scope.max()) + 1

    def merged(num_keys):  # labels after merging the `num_keys` lightest scopes
      take = (scope >= 0) & (rank[np.maximum(scope, 0)] < num_keys)
      proposal = np.where(take, scope, num + np.arange(st.m))
      return acyclic_pieces(st.m, st.qs, st.qr, proposal)[st.labels]

    rank = np.empty(num, np.int64)  # scopes by total weight, lightest first
    rank[np.argsort(np.bincount(np.maximum(scope, 0), weights=st.weight * (scope >= 0),
                                minlength=num), kind="stable")] = np.arange(num)
    labels = merged(num)
    if labels.max() + 1 < max_nodes:  # merging every scope overshoots: merge the lightest few
      lo, hi = 0, num  # invariant: merged(hi) reaches max_nodes
      while hi - lo > 1:
        mid = (lo + hi) // 2
        if merged(mid).max() + 1 <= max_nodes:
          hi = mid
        else:
          lo = mid
      labels = merged(hi)
      if labels.max() + 1 < max_nodes // 2:  # one scope is too coarse: leave it to "topological"
        return
    st.set(labels)


# "topological" on a colocated graph keeps `coarsen_units.unit_runs`' cut unless its makespan
# bound (`coarsen_units.makespan_bound`) is over this factor above the best `level_runs` cut's.
# PipeDream's profiles (the F_u / B_u pairs unit_runs was made for) keep their cut; a layered
# DAG of 4,097 ops with 300 colocated triples at 512 nodes: 3.44 against 1.35.
KEPT_BOUND_FACTOR = 1.5
# Of the level cuts whose bound is within this factor of the lowest, the one with the lightest
# heaviest unit (the bound ignores the device count: a unit shares its device with other work).
# Layered DAGs of 4,097 ops with 100 / 300 colocated triples or 300 pairs at 512 nodes, HEFT
# expanded on 4 V100s: 1.60 / 1.85 / 1.86 s with it, 1.99 / 2.01 / 1.86 s without.
LEVEL_BOUND_SLACK = 1.1


def _topological(st: _State, max_nodes: int):
  if st.m <= max_nodes:
    return
  order = acyclic_pieces(st.m, st.qs, st.qr, np.arange(st.m))  # topological position
  pos = np.empty(st.m, np.int64)
  pos[np.argsort(order, kind="stable")] = np.arange(st.m)
  seq = np.argsort(pos)
  plain = np.empty(st.m, np.int64)
  plain[seq] = coarsen_units.balanced_runs(st.weight[seq], max_nodes)
  unit = st.units()
  if unit is not None and unit.max() > 0:  # one unit left: nothing to keep apart
    unit_of = lambda labels, m: coarsen_units.units(st.graph.colocation, labels[st.labels], m)
    bound = lambda labels: coarsen_units.makespan_bound(st.qs, st.qr, st.weight, labels,
                                                        unit_of)
    kept = coarsen_units.unit_runs(st.m, st.qs, st.qr, st.weight, unit, pos, max_nodes)
    colocated = np.zeros(int(unit.max()) + 1, bool)
    colocated[unit[st.labels[st.graph.colocation >= 0]]] = True
    level = coarsen_units.levels(st.m, st.qs, st.qr, pos)
    cuts = [coarsen_units.level_runs(st.weight, unit, colocated, pos, level, max_nodes, b)
            for b in coarsen_units.LEVEL_RUN_BINS]
    cuts = [lab for lab in cuts if lab.max() + 1 <= max_nodes]
    parts = [bound(lab) for lab in cuts]
    if cuts:
      low = min(max(p) for p in parts)
      if max(bound(kept)) > KEPT_BOUND_FACTOR * low:  # the lightest heaviest unit near `low`
        kept = cuts[min((p[1], j) for j, p in enumerate(parts)
                          if max(p) <= LEVEL_BOUND_SLACK * low)[1]]
    score = lambda labels: (len(np.unique(unit_of(labels, int(labels.max()) + 1))),
                            labels.max())
    if score(kept) >= score(plain):  # more units, or as many and as many nodes
      plain = kept
  st.set(plain[st.labels])


STRATEGY_FNS = {"colocate": _colocate, "chains": _chains, "trees": _trees, "scopes": _scopes,
                "topological": _topological}


def coarsen(graph: CompGraph, max_nodes: int, *, strategies: Sequence[str] = STRATEGIES,
            max_group_weight: Optional[float] = None, temp_bound: str = "sum",
            out_bound: str = "sum", keep_units: bool = True,
            name: Optional[str] = None) -> Coarsened:
  """Merges nodes until at most `max_nodes` remain (strategies in the module docstring).

  The result is always acyclic; total cost, flops and param_bytes are kept. Passing
  `strategies` without "topological" may leave more than `max_nodes` nodes. The defaults
  (no weight cap, the "sum" temp bound) are what `,coarsen=N` graphs, pretraining and Placeto
  use; learned methods on large graphs pass a cap and "peak" (go_jax/methods/learned.py).
  `keep_units=False` coarsens a colocated graph as if it had no colocation (the merges and
  the fallback ignore placement units, `simulator.coarsen_units`): what coarsening did before
  units were kept, for comparisons.

  Raises:
    ValueError: `max_nodes` is not a positive integer, an unknown strategy is named,
      `max_group_weight` is not in (0, 1], or `temp_bound` / `out_bound` is not one of
      TEMP_BOUNDS / OUT_BOUNDS.
  """
  if max_group_weight is not None and (isinstance(max_group_weight, bool) or not isinstance(
      max_group_weight, (int, float, np.floating, np.integer)) or not 0 < max_group_weight <= 1):
    raise ValueError(f"max_group_weight must be a fraction in (0, 1] or None, got "
                     f"{max_group_weight!r}")
  if temp_bound not in TEMP_BOUNDS:
    raise ValueError(f"temp_bound must be one of {TEMP_BOUNDS}, got {temp_bound!r}")
  if isinstance(max_nodes, bool) or not isinstance(max_nodes, (int, np.integer)) \
      or max_nodes < 1:
    raise ValueError(f"max_nodes must be a positive integer, got {max_nodes!r}")
  bad = [s for s in strategies if s not in STRATEGY_FNS]
  if bad:
    raise ValueError(f"unknown coarsening strategies {bad}; valid: {list(STRATEGY_FNS)}")
  weight = (graph.cost if graph.cost.sum() > 0 else
            np.maximum(graph.flops, FLOPS_PER_BYTE * graph.bytes_accessed))
  weight = np.asarray(weight, np.float64)
  cap = np.inf if max_group_weight is None else float(max_group_weight) * weight.sum()
  st = _State(graph, weight, cap, keep_units=bool(keep_units))
  steps = []
  for s in strategies:
    if st.m <= max_nodes:
      break
    STRATEGY_FNS[s](st, int(max_nodes))
    steps.append((s, st.m))
  coarse = contract(graph, st.labels, temp_bound=temp_bound, out_bound=out_bound,
                    name=name or f"{graph.name}/coarse{st.m}")
  return Coarsened(coarse, st.labels, tuple(steps))
