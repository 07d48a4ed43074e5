"""Synthetic computation graphs: random layered DAGs, REGAL-style graphs, chains, series-parallel.

Every generator is deterministic per seed (one `numpy.random.Generator` per call) and returns a
validated CompGraph with all per-op fields filled (docs/design.md section 2):

  - cost: seconds, log-uniform over [1e-5, 1e-2] s (a few microseconds of launch overhead up to
    a large convolution), or small integers (1..10) when `integer_costs=True`. Integer graphs let
    the jitted simulator and the float64 reference agree exactly (docs/design.md section 3).
  - out_bytes: log-uniform over [4 KiB, 64 MiB], rounded to whole fp32 words; integers 1..10
    when `integer_costs=True`.
  - param_bytes: non-zero only for ops with weights (conv, dot, norm, embedding): log-uniform
    over [1 KiB, 16 MiB]; integers 1..10 when `integer_costs=True`.
  - temp_bytes: one op in five gets scratch memory (log-uniform [4 KiB, 16 MiB]; 1..5 integer).
  - op_type: a generic type from `simulator.ops`, drawn with weights resembling CNN/MLP graphs.
  - colocation: `colocation_groups` disjoint groups of `colocation_size` random ops (default
    none), to exercise colocation constraints.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from simulator import ops
from simulator.graph import CompGraph

# (op type, sampling weight) for synthetic ops.
_TYPE_WEIGHTS = (("conv", 0.15), ("dot", 0.15), ("elementwise", 0.25), ("activation", 0.15),
                 ("norm", 0.1), ("pool", 0.05), ("reshape", 0.05), ("concat", 0.05),
                 ("reduce", 0.05))
_WEIGHTED_TYPES = ("conv", "dot", "norm", "embedding")
# Layer pairs with more (node, candidate) cells than this draw predecessors with replacement.
_DENSE_LIMIT = 2**22


# The largest generated graph: its arrays stay a few GB (the largest graphs measured here have
# 80k ops); a size beyond it is a typo that would otherwise end in a MemoryError.
MAX_NODES = 10_000_000


def _check_int(name: str, value, minimum: int, maximum: Optional[int] = None) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise ValueError(f"{name} must be an integer, got {value!r}")
  if value < minimum:
    raise ValueError(f"{name} must be >= {minimum}, got {value}")
  if maximum is not None and value > maximum:
    raise ValueError(f"{name} must be <= {maximum:,}, got {value:,}")
  return int(value)


def _rng(seed) -> np.random.Generator:
  return np.random.default_rng(_check_int("seed", seed, 0))


def _check_float(name: str, value, lo: float, hi: float, lo_open: bool = False) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
    raise ValueError(f"{name} must be a number, got {value!r}")
  v = float(value)
  if not np.isfinite(v) or v < lo or v > hi or (lo_open and v == lo):
    bound = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
    raise ValueError(f"{name} must be in {bound}, got {value}")
  return v


def _log_uniform(rng: np.random.Generator, lo: float, hi: float, n: int) -> np.ndarray:
  return np.exp(rng.uniform(np.log(lo), np.log(hi), size=n))


def _node_attributes(rng: np.random.Generator, n: int, integer_costs: bool,
                     colocation_groups: int, colocation_size: int) -> dict:
  """Per-op fields shared by all generators (see the module docstring for distributions)."""
  colocation_groups = _check_int("colocation_groups", colocation_groups, 0)
  colocation_size = _check_int("colocation_size", colocation_size, 1)
  if colocation_groups * colocation_size > n:
    raise ValueError(f"colocation_groups * colocation_size = "
                     f"{colocation_groups * colocation_size} exceeds the {n} nodes")
  names, weights = zip(*_TYPE_WEIGHTS)
  probs = np.asarray(weights) / np.sum(weights)
  types = np.asarray([ops.op_type_id(t) for t in names])[rng.choice(len(names), size=n, p=probs)]
  weighted = np.isin(types, [ops.op_type_id(t) for t in _WEIGHTED_TYPES])
  has_temp = rng.random(n) < 0.2
  if integer_costs:
    cost = rng.integers(1, 11, size=n).astype(np.float64)
    out_bytes = rng.integers(1, 11, size=n).astype(np.float64)
    param_bytes = np.where(weighted, rng.integers(1, 11, size=n), 0).astype(np.float64)
    temp_bytes = np.where(has_temp, rng.integers(1, 6, size=n), 0).astype(np.float64)
  else:
    words = lambda x: 4.0 * np.round(x / 4.0)
    cost = _log_uniform(rng, 1e-5, 1e-2, n)
    out_bytes = words(_log_uniform(rng, 4096.0, 64 * 2.0**20, n))
    param_bytes = np.where(weighted, words(_log_uniform(rng, 1024.0, 16 * 2.0**20, n)), 0.0)
    temp_bytes = np.where(has_temp, words(_log_uniform(rng, 4096.0, 16 * 2.0**20, n)), 0.0)
  colocation = -np.ones(n, np.int64)
  if colocation_groups:
    members = rng.permutation(n)[:colocation_groups * colocation_size]
    colocation[members] = np.repeat(np.arange(colocation_groups), colocation_size)
  return dict(cost=cost, out_bytes=out_bytes, param_bytes=param_bytes, temp_bytes=temp_bytes,
              op_type=types, colocation=colocation)


def _edges(pairs) -> tuple:
  if not pairs:
    return np.zeros(0, np.int64), np.zeros(0, np.int64)
  arr = np.asarray(pairs, np.int64)
  return arr[:, 0], arr[:, 1]


def layered_dag(num_nodes: int, width: Optional[int] = None, *, avg_degree: Optional[float] = None,
                edge_prob: Optional[float] = None, skip_prob: float = 0.1, seed: int = 0,
                integer_costs: bool = False, colocation_groups: int = 0,
                colocation_size: int = 2, name: Optional[str] = None) -> CompGraph:
  """A random layered DAG: ceil(num_nodes / width) layers of (nearly) equal size.

  Nodes of layer 0 are sources. Every node of a later layer gets at least one predecessor in
  the previous layer, and possibly skip edges from any older layer (as in residual networks).
  Node ids are in layer order, so they are topologically sorted. Skip predecessors, and all
  predecessors when a layer times its previous layer exceeds 4M pairs, are drawn with
  replacement (duplicates merged, so the mean degree can fall slightly short).

  Args:
    num_nodes: number of ops (>= 1).
    width: nodes per layer (>= 1); width 1 gives a chain plus skip edges. Required; None
      (the default, so that a bad `num_nodes` is reported first) raises ValueError.
    avg_degree: mean number of predecessors of a non-first-layer node (>= 1, default 2):
      1 + Poisson(avg_degree - 1), capped by the number of candidates.
    edge_prob: instead of `avg_degree`, connect each (previous-layer node, node) pair with this
      probability, keeping at least one predecessor per node. Give at most one of the two.
    skip_prob: with `avg_degree`, the probability that each predecessor after the first is
      drawn from an older layer; with `edge_prob`, the probability of one extra skip edge.
    seed: random seed.
    integer_costs: small integer costs and byte sizes instead of realistic ones.
    colocation_groups, colocation_size: random colocation groups (none by default).
    name: graph name (default describes the arguments).
  """
  n = _check_int("num_nodes", num_nodes, 1, MAX_NODES)
  if width is None:
    raise ValueError("layered requires width (nodes per layer, >= 1), e.g. "
                     "'layered:n=200,width=16'")
  width = _check_int("width", width, 1)
  skip_prob = _check_float("skip_prob", skip_prob, 0.0, 1.0)
  if avg_degree is not None and edge_prob is not None:
    raise ValueError("give at most one of avg_degree and edge_prob")
  if edge_prob is not None:
    edge_prob = _check_float("edge_prob", edge_prob, 0.0, 1.0)
  else:
    avg_degree = _check_float("avg_degree", 2.0 if avg_degree is None else avg_degree,
                              1.0, 1e9)
  rng = _rng(seed)
  num_layers = -(-n // width)
  sizes = np.full(num_layers, n // num_layers)
  sizes[:n % num_layers] += 1
  start = np.concatenate([[0], np.cumsum(sizes)])
  senders, receivers = [], []
  for layer in range(1, num_layers):  # vectorized over the nodes of a layer
    prev_lo, lo, hi = int(start[layer - 1]), int(start[layer]), int(start[layer + 1])
    w, n_prev = hi - lo, lo - prev_lo
    dense = w * n_prev <= _DENSE_LIMIT
    if edge_prob is not None:
      if dense:
        hit = rng.random((w, n_prev)) < edge_prob
        lonely = np.flatnonzero(~hit.any(axis=1))
        hit[lonely, rng.integers(0, n_prev, size=lonely.size)] = True
        rows, cols = np.nonzero(hit)
      else:
        counts = np.maximum(rng.binomial(n_prev, edge_prob, size=w), 1)
        rows = np.repeat(np.arange(w), counts)
        cols = rng.integers(0, n_prev, size=rows.size)
      # Plus, with probability skip_prob, one skip edge from an older layer.
      k_skip = (rng.random(w) < skip_prob).astype(np.int64) if prev_lo else np.zeros(w, np.int64)
    else:
      k = np.minimum(1 + rng.poisson(avg_degree - 1.0, size=w), lo)  # lo = all earlier ops
      # The first predecessor is always in the previous layer; the others skip back with
      # probability skip_prob. Whatever one side cannot hold goes to the other.
      k_skip = rng.binomial(k - 1, skip_prob) if prev_lo else np.zeros(w, np.int64)
      k_prev = np.minimum(k - k_skip, n_prev)
      k_skip = np.minimum(k - k_prev, prev_lo)
      if dense:  # k_prev distinct ops per row: the first columns of a random permutation
        order = np.argsort(rng.random((w, n_prev)), axis=1)
        rows, pos = np.nonzero(np.arange(n_prev)[None, :] < k_prev[:, None])
        cols = order[rows, pos]
      else:
        rows = np.repeat(np.arange(w), k_prev)
        cols = rng.integers(0, n_prev, size=rows.size)
    senders += [prev_lo + cols, rng.integers(0, max(prev_lo, 1), size=int(k_skip.sum()))]
    receivers += [lo + rows, lo + np.repeat(np.arange(w), k_skip)]
  s = np.concatenate(senders) if senders else np.zeros(0, np.int64)
  r = np.concatenate(receivers) if receivers else np.zeros(0, np.int64)
  attrs = _node_attributes(rng, n, integer_costs, colocation_groups, colocation_size)
  knob = f"p{edge_prob:g}" if edge_prob is not None else f"d{avg_degree:g}"
  return CompGraph(senders=s, receivers=r, **attrs,
                   name=name or f"layered_n{n}_w{width}_{knob}_s{seed}")


def regal_dag(num_nodes: int, seed: int = 0, *, max_inputs: int = 3, locality: float = 8.0,
              integer_costs: bool = False, time_unit: float = 1e-4,
              bytes_unit: float = 2.0**16, colocation_groups: int = 0,
              colocation_size: int = 2, name: Optional[str] = None) -> CompGraph:
  """A REGAL-style random computation graph (an approximation; see below).

  REGAL (Paliwal et al., ICLR 2020) trains on procedurally generated TensorFlow CostGraphDefs.
  Their published dataset (deepmind-research/regal README) shows what such a graph holds: ops
  numbered in topological order, each with a few data inputs from earlier ops
  ("input_info.preceding_node"), a small integer `compute_cost` and a small integer output
  `size` (tens of units), plus a _SOURCE op feeding every op by control edges. We could not
  consult the paper's exact generator, so this follows that shape:

    - op i (in id order, which is topological) draws k_i ~ Uniform{0..max_inputs} data
      inputs; a 0 is kept with probability 0.1 only (else 1), so extra sources (ops fed only
      by _SOURCE) are rare; op 0 is the first source;
    - each input is the op at distance 1 + floor(Exponential(mean=locality)) back (uniform
      over all earlier ops when that falls before op 0), duplicates merged: recent ops are
      preferred, giving chain-like graphs with local branching and occasional long skips;
    - compute cost and output size are independent integers in [1, 100]; with
      `integer_costs=True` they are used as they are (seconds, bytes), else scaled by
      `time_unit` seconds (1e-4..1e-2 s) and `bytes_unit` bytes (64 KiB..6.25 MiB).
    - The _SOURCE op is omitted (it only orders the sources). param/temp bytes, op types and
      colocation come from the shared sampler used by all generators.

  Args:
    num_nodes: number of ops (>= 1).
    seed: random seed.
    max_inputs: most data inputs per op (>= 1).
    locality: mean distance (in ops) back to an input (> 0); larger spreads edges further.
    integer_costs, time_unit, bytes_unit: see above.
    colocation_groups, colocation_size, name: as in `layered_dag`.
  """
  n = _check_int("num_nodes", num_nodes, 1, MAX_NODES)
  max_inputs = _check_int("max_inputs", max_inputs, 1)
  locality = _check_float("locality", locality, 0.0, 1e9, lo_open=True)
  time_unit = _check_float("time_unit", time_unit, 0.0, 1e3, lo_open=True)
  bytes_unit = _check_float("bytes_unit", bytes_unit, 0.0, 1e12, lo_open=True)
  rng = _rng(seed)
  pairs = []
  for v in range(1, n):
    k = min(int(rng.integers(0, max_inputs + 1)), v)
    if k == 0 and rng.random() < 0.9:
      k = 1  # sources are rare in real graphs
    chosen = set()
    for _ in range(k):
      dist = 1 + int(rng.exponential(locality))
      u = v - dist if dist <= v else int(rng.integers(0, v))
      chosen.add(u)
    pairs.extend((u, v) for u in sorted(chosen))
  s, r = _edges(pairs)
  attrs = _node_attributes(rng, n, integer_costs, colocation_groups, colocation_size)
  cost = rng.integers(1, 101, size=n).astype(np.float64)
  size = rng.integers(1, 101, size=n).astype(np.float64)
  attrs["cost"] = cost if integer_costs else cost * time_unit
  attrs["out_bytes"] = size if integer_costs else size * bytes_unit
  return CompGraph(senders=s, receivers=r, **attrs, name=name or f"regal_n{n}_s{seed}")


def chain(num_nodes: int, seed: int = 0, *, integer_costs: bool = False,
          colocation_groups: int = 0, colocation_size: int = 2,
          name: Optional[str] = None) -> CompGraph:
  """A chain 0 -> 1 -> ... -> n-1 with random per-op fields (a pipeline-partitioning toy)."""
  n = _check_int("num_nodes", num_nodes, 1, MAX_NODES)
  rng = _rng(seed)
  attrs = _node_attributes(rng, n, integer_costs, colocation_groups, colocation_size)
  ids = np.arange(n - 1)
  return CompGraph(senders=ids, receivers=ids + 1, **attrs, name=name or f"chain_n{n}_s{seed}")


def series_parallel(num_nodes: int, seed: int = 0, *, parallel_prob: float = 0.5,
                    max_branches: int = 4, integer_costs: bool = False,
                    colocation_groups: int = 0, colocation_size: int = 2,
                    name: Optional[str] = None) -> CompGraph:
  """A random series-parallel DAG with exactly `num_nodes` ops, built by recursive composition.

  A block of m ops between an entry op `a` and an exit op `b` (either may be absent at the top
  level) is, recursively:
    - m == 1: a single op x with edges a -> x -> b;
    - parallel (probability `parallel_prob`, when m >= 2): 2..max_branches sub-blocks of
      >= 1 op each, all between a and b (a fork at a, a join at b);
    - series: a middle op c and two sub-blocks (m1 ops between a and c, m - 1 - m1 between c
      and b; an empty sub-block is the edge itself).
  Splits are uniform, so the recursion depth is logarithmic on average; an explicit work
  stack avoids Python's recursion limit anyway. Node ids are then relabelled in topological
  order.

  Args:
    num_nodes: number of ops (>= 1).
    seed: random seed.
    parallel_prob: probability of a parallel composition at each block of >= 2 ops.
    max_branches: most branches of one parallel composition (>= 2).
    integer_costs, colocation_groups, colocation_size, name: as in `layered_dag`.
  """
  n = _check_int("num_nodes", num_nodes, 1, MAX_NODES)
  parallel_prob = _check_float("parallel_prob", parallel_prob, 0.0, 1.0)
  max_branches = _check_int("max_branches", max_branches, 2)
  rng = _rng(seed)
  pairs = []
  count = 0
  stack = [(n, -1, -1)]  # (ops in block, entry op or -1, exit op or -1)
  while stack:
    m, a, b = stack.pop()
    if m == 0:
      if a >= 0 and b >= 0:
        pairs.append((a, b))
      continue
    if m == 1:
      x, count = count, count + 1
      if a >= 0:
        pairs.append((a, x))
      if b >= 0:
        pairs.append((x, b))
      continue
    if rng.random() < parallel_prob:
      k = int(rng.integers(2, min(max_branches, m) + 1))
      cuts = np.sort(rng.choice(np.arange(1, m), size=k - 1, replace=False))
      for part in np.diff(np.concatenate([[0], cuts, [m]])):
        stack.append((int(part), a, b))
    else:
      c, count = count, count + 1
      m1 = int(rng.integers(0, m))
      stack.append((m1, a, c))
      stack.append((m - 1 - m1, c, b))
  assert count == n
  s, r = _edges(pairs)
  tmp = CompGraph(cost=np.zeros(n), senders=s, receivers=r)
  rank = np.empty(n, np.int64)
  rank[tmp.topological_order()] = np.arange(n)
  attrs = _node_attributes(rng, n, integer_costs, colocation_groups, colocation_size)
  return CompGraph(senders=rank[tmp.senders], receivers=rank[tmp.receivers], **attrs,
                   name=name or f"series_parallel_n{n}_s{seed}")
