"""CompGraph: the host-side, validated intermediate representation of a computation graph.

One op per node and one output tensor per op (docs/design.md section 2). Every front end (synthetic
generators, profile importers, the JAX/HLO front end) produces a CompGraph; every optimizer and
the simulators consume one. Construction validates eagerly so that bad input fails here with a
message naming the node, edge or field, never later inside a jitted simulator.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence

import numpy as np

from simulator import fileio
from simulator.costref import CostReference

# Per-node float fields, in the order they are stored and reported.
FLOAT_FIELDS = ("cost", "out_bytes", "param_bytes", "temp_bytes", "flops", "bytes_accessed")
# The largest value a graph or topology field may hold. The simulator works in float32 (max
# about 3.4e38): with every value at most 1e30, sums over up to 1e8 nodes (a makespan, a
# device's memory) stay finite, where a larger value would overflow to inf or wrap a
# difference negative and give a silently wrong answer.
MAX_VALUE = 1e30


def _as_1d(name: str, value, dtype) -> np.ndarray:
  arr = np.asarray(value)
  if arr.ndim != 1:
    raise ValueError(f"CompGraph field '{name}' must be 1-D, got shape {arr.shape}")
  if arr.dtype.kind not in "biuf":  # strings, complex, dates, objects: never a number of ours
    raise ValueError(f"CompGraph field '{name}' must hold real numbers, got dtype {arr.dtype}")
  if np.issubdtype(dtype, np.integer) and arr.size:
    if not np.issubdtype(arr.dtype, np.integer):
      if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
        raise ValueError(f"CompGraph field '{name}' must hold integers")
    info = np.iinfo(dtype)
    if arr.min() < info.min or arr.max() > info.max:
      raise ValueError(f"CompGraph field '{name}' has values outside the {np.dtype(dtype)} "
                       f"range [{info.min}, {info.max}]")
  out = np.array(arr, dtype=dtype)
  out.setflags(write=False)
  return out


def csr(src, dst, n: int, payload=None):
  """Compressed sparse rows of the pairs (src[k], dst[k]), stable within a row.

  Returns (ptr (n+1,), idx) or, with `payload`, (ptr, idx, payload reordered likewise). Row u is
  idx[ptr[u]:ptr[u+1]]; pairs keep their input order within a row (stable), so
  pre-sorting by dst gives ascending rows. `src` values must lie in [0, n). The one CSR builder
  of the project (graph adjacency, coarsening, METIS input).
  """
  src = np.asarray(src, np.int64)
  dst = np.asarray(dst)
  ptr = np.zeros(n + 1, np.int64)
  np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
  if src.size < 2 or np.all(src[1:] >= src[:-1]):  # already grouped by row: no sort
    return (ptr, dst) if payload is None else (ptr, dst, np.asarray(payload))
  order = np.argsort(src, kind="stable")
  if payload is None:
    return ptr, dst[order]
  return ptr, dst[order], np.asarray(payload)[order]


def upward_rank(graph: "CompGraph") -> np.ndarray:
  """(N,) longest path, in summed `cost` (seconds at speed 1), from each op to any sink.

  The op's own cost is included, so a sink's rank is its cost. This is HEFT's upward rank without
  communication terms: ops on the critical path get the highest values. The default priority of
  the project (critical path first) and the priority of the single-device footprint.
  """
  n = graph.num_nodes
  cost = graph.cost.tolist()
  ptr, succ = graph.successor_csr()
  ptr, succ = ptr.tolist(), succ.tolist()
  rank = [0.0] * n
  for u in reversed(graph.topological_order().tolist()):
    best = 0.0
    for v in succ[ptr[u]:ptr[u + 1]]:
      if rank[v] > best:
        best = rank[v]
    rank[u] = cost[u] + best
  return np.asarray(rank, np.float64)


@dataclasses.dataclass(frozen=True, eq=False)
class CompGraph:
  """A computation graph with per-op costs and sizes (numpy, immutable, validated).

  Attributes:
    cost: (N,) seconds of op on the reference device (speed 1.0).
    senders: (E,) producer op of each edge u->v (v consumes u's output).
    receivers: (E,) consumer op of each edge.
    out_bytes: (N,) bytes of the op's output tensor.
    param_bytes: (N,) bytes resident on the op's device for the whole step.
    temp_bytes: (N,) scratch bytes live only while the op runs.
    flops: (N,) floating point operations (0 where unknown).
    bytes_accessed: (N,) bytes read + written (0 where unknown).
    op_type: (N,) int id in the shared op vocabulary (`simulator.ops`).
    colocation: (N,) int group id; ops of a group share a device; -1 = no group.
    name: graph name.
    node_names: optional tuple of N op names.
    reference: the roofline device that made `cost` (`simulator.costref.CostReference`), set
      by the cost model; fusion (design.md section 4.1) needs it. None for other sources.

  Edges are stored merged (duplicates removed) and sorted by (sender, receiver).
  """

  cost: np.ndarray
  senders: np.ndarray
  receivers: np.ndarray
  out_bytes: Optional[np.ndarray] = None
  param_bytes: Optional[np.ndarray] = None
  temp_bytes: Optional[np.ndarray] = None
  flops: Optional[np.ndarray] = None
  bytes_accessed: Optional[np.ndarray] = None
  op_type: Optional[np.ndarray] = None
  colocation: Optional[np.ndarray] = None
  name: str = "graph"
  node_names: Optional[Sequence[str]] = None
  reference: Optional[CostReference] = None

  def __post_init__(self):
    set_ = lambda k, v: object.__setattr__(self, k, v)
    cost = _as_1d("cost", self.cost, np.float64)
    n = cost.shape[0]
    if n == 0:
      raise ValueError(f"CompGraph '{self.name}': empty graph (no nodes)")
    set_("cost", cost)
    for f in FLOAT_FIELDS[1:]:
      v = getattr(self, f)
      set_(f, _as_1d(f, np.zeros(n) if v is None else v, np.float64))
    set_("op_type", _as_1d("op_type", np.zeros(n) if self.op_type is None else self.op_type,
                           np.int32))
    set_("colocation", _as_1d(
        "colocation", -np.ones(n) if self.colocation is None else self.colocation, np.int64))
    if self.node_names is not None:
      names = tuple(str(s) for s in self.node_names)
      if len(names) != n:
        raise ValueError(f"CompGraph '{self.name}': node_names has {len(names)} entries, "
                         f"expected {n}")
      set_("node_names", names)
    if self.reference is not None and not isinstance(self.reference, CostReference):
      raise ValueError(f"CompGraph '{self.name}': reference must be a CostReference, got "
                       f"{type(self.reference).__name__}")

    for f in ("op_type", "colocation") + FLOAT_FIELDS:
      arr = getattr(self, f)
      if arr.shape[0] != n:
        raise ValueError(f"CompGraph '{self.name}': field '{f}' has length {arr.shape[0]}, "
                         f"expected {n} (length of 'cost')")
    for f in FLOAT_FIELDS:
      arr = getattr(self, f)
      bad = np.flatnonzero(~np.isfinite(arr))
      if bad.size:
        i = int(bad[0])
        raise ValueError(f"CompGraph '{self.name}': field '{f}' of node {self.node_label(i)} "
                         f"is not finite ({arr[i]})")
      bad = np.flatnonzero(arr < 0)
      if bad.size:
        i = int(bad[0])
        raise ValueError(f"CompGraph '{self.name}': field '{f}' of node {self.node_label(i)} "
                         f"is negative ({arr[i]})")
      bad = np.flatnonzero(arr > MAX_VALUE)
      if bad.size:
        i = int(bad[0])
        raise ValueError(f"CompGraph '{self.name}': field '{f}' of node {self.node_label(i)} "
                         f"is {arr[i]:g}, above {MAX_VALUE:g} (the simulator's float32 "
                         "range; check the units)")
    if np.any(self.op_type < 0):
      i = int(np.flatnonzero(self.op_type < 0)[0])
      raise ValueError(f"CompGraph '{self.name}': op_type of node {self.node_label(i)} "
                       f"is negative")
    if np.any(self.colocation < -1):
      i = int(np.flatnonzero(self.colocation < -1)[0])
      raise ValueError(f"CompGraph '{self.name}': colocation of node {self.node_label(i)} "
                       f"is {self.colocation[i]} (use -1 for no group)")
    self._validate_edges(n)

  def _validate_edges(self, n: int):
    s = _as_1d("senders", self.senders, np.int64)
    r = _as_1d("receivers", self.receivers, np.int64)
    if s.shape != r.shape:
      raise ValueError(f"CompGraph '{self.name}': senders has {s.shape[0]} entries but "
                       f"receivers has {r.shape[0]}")
    for f, arr in (("senders", s), ("receivers", r)):
      bad = np.flatnonzero((arr < 0) | (arr >= n))
      if bad.size:
        k = int(bad[0])
        raise ValueError(f"CompGraph '{self.name}': edge {k} ({s[k]} -> {r[k]}) has "
                         f"{f[:-1]} index {arr[k]} out of range [0, {n})")
    loops = np.flatnonzero(s == r)
    if loops.size:
      k = int(loops[0])
      raise ValueError(f"CompGraph '{self.name}': edge {k} is a self loop on node "
                       f"{self.node_label(int(s[k]))}")
    # Merge duplicate edges; canonical order is (sender, receiver).
    key = np.unique(s * n + r)
    s, r = (key // n).astype(np.int32), (key % n).astype(np.int32)
    s.setflags(write=False)
    r.setflags(write=False)
    object.__setattr__(self, "senders", s)
    object.__setattr__(self, "receivers", r)
    order = self._kahn_order()
    if order.shape[0] < n:
      raise ValueError(f"CompGraph '{self.name}': graph has a cycle through node "
                       f"{self.node_label(self._node_on_cycle(order))}")
    order.setflags(write=False)
    object.__setattr__(self, "_topo", order)

  def _kahn_order(self) -> np.ndarray:
    """Topological order (smallest ready id first); shorter than N iff there is a cycle."""
    import heapq
    n = self.num_nodes
    indeg = np.bincount(self.receivers, minlength=n)
    ptr, succ = self.successor_csr()
    heap = [int(i) for i in np.flatnonzero(indeg == 0)]
    heapq.heapify(heap)
    indeg = indeg.tolist()
    out = []
    while heap:
      u = heapq.heappop(heap)
      out.append(u)
      for v in succ[ptr[u]:ptr[u + 1]].tolist():
        indeg[v] -= 1
        if indeg[v] == 0:
          heapq.heappush(heap, v)
    return np.asarray(out, dtype=np.int32)

  def _node_on_cycle(self, partial_order: np.ndarray) -> int:
    """Walks predecessors inside the non-sortable remainder until a node repeats."""
    left = np.ones(self.num_nodes, bool)
    left[partial_order] = False
    pred_of = {}
    for u, v in zip(self.senders.tolist(), self.receivers.tolist()):
      if left[u] and left[v]:
        pred_of.setdefault(v, u)
    node, seen = int(np.flatnonzero(left)[0]), set()
    while node not in seen:
      seen.add(node)
      node = pred_of[node]
    return node

  # ---------------------------------------------------------------- accessors
  @property
  def num_nodes(self) -> int:
    return int(self.cost.shape[0])

  @property
  def num_edges(self) -> int:
    return int(self.senders.shape[0])

  def node_label(self, i: int) -> str:
    if self.node_names is not None and 0 <= i < len(self.node_names):
      return f"{i} ('{self.node_names[i]}')"
    return str(i)

  def topological_order(self) -> np.ndarray:
    """(N,) op ids in a topological order (Kahn's algorithm, smallest ready id first)."""
    return self._topo

  def successor_csr(self):
    """(ptr (N+1,), succ (E,)): successors of u are succ[ptr[u]:ptr[u+1]], ascending."""
    return csr(self.senders, self.receivers, self.num_nodes)  # edges sorted by (s, r)

  def predecessor_csr(self):
    """(ptr (N+1,), pred (E,)): predecessors of v are pred[ptr[v]:ptr[v+1]], ascending."""
    return csr(self.receivers, self.senders, self.num_nodes)  # stable: senders stay ascending

  def in_degree(self) -> np.ndarray:
    return np.bincount(self.receivers, minlength=self.num_nodes)

  def out_degree(self) -> np.ndarray:
    return np.bincount(self.senders, minlength=self.num_nodes)

  def colocation_root(self) -> np.ndarray:
    """(N,) for each op, the lowest op id of its colocation group (itself when ungrouped)."""
    root = np.arange(self.num_nodes)
    grouped = np.flatnonzero(self.colocation >= 0)
    if grouped.size:
      groups = self.colocation[grouped]
      first = {}
      for i, g in zip(grouped.tolist(), groups.tolist()):
        first.setdefault(g, i)  # ascending i, so the first seen is the lowest id
      root[grouped] = [first[g] for g in groups.tolist()]
    return root

  def replace(self, **changes) -> "CompGraph":
    return dataclasses.replace(self, **changes)

  def __repr__(self):
    return (f"CompGraph(name={self.name!r}, nodes={self.num_nodes}, edges={self.num_edges}, "
            f"total_cost={self.cost.sum():.4g}s)")

  # ---------------------------------------------------------------- I/O
  def save(self, path: str) -> None:
    """Writes an .npz atomically (temporary file in the same folder, then rename)."""
    arrays = {f: getattr(self, f) for f in FLOAT_FIELDS + ("op_type", "colocation",
                                                           "senders", "receivers")}
    named = [self.name] + list(self.node_names or ())
    if any("\x00" in x for x in named):  # numpy's string arrays drop trailing NULs
      raise ValueError(f"CompGraph {self.name!r}: a name holds a NUL character, which an "
                       ".npz file cannot keep")
    arrays["name"] = np.asarray(self.name)
    if self.node_names is not None:
      arrays["node_names"] = np.asarray(self.node_names, dtype=str)
    if self.reference is not None:
      arrays.update(self.reference.to_arrays())
    with fileio.atomic_open(path, "wb") as fh:
      np.savez_compressed(fh, **arrays)

  @classmethod
  def load(cls, path: str) -> "CompGraph":
    """Reads a graph written by `save`; raises ValueError naming the file on bad content."""
    fields = FLOAT_FIELDS + ("op_type", "colocation", "senders", "receivers")
    try:
      with open(path, "rb") as fh:
        magic = fh.read(4)
    except OSError as e:
      raise ValueError(f"cannot read CompGraph file '{path}': {e.strerror or e}") from e
    if magic[:2] != b"PK":  # np.load would take any other bytes for a pickle
      raise ValueError(f"cannot read CompGraph file '{path}': not a .npz (zip) archive, as "
                       "CompGraph.save writes")
    try:
      with np.load(path, allow_pickle=False) as data:
        unknown = [k for k in data.files if k not in fields + ("name", "node_names")
                   and not k.startswith("ref_")]
        if unknown:  # a misspelt field would otherwise read as its default
          raise ValueError(f"unknown arrays {unknown}; CompGraph.save writes {list(fields)}, "
                           "name, node_names and ref_*")
        kwargs = {k: data[k] for k in fields if k in data.files}
        kwargs["name"] = os.path.basename(path)
        if "name" in data.files:
          name = data["name"]
          if name.ndim != 0 or name.dtype.kind != "U":
            raise ValueError(f"'name' must be one string, got shape {name.shape}, dtype "
                             f"{name.dtype}")
          kwargs["name"] = str(name)
        if "node_names" in data.files:
          names = data["node_names"]
          if names.ndim != 1 or names.dtype.kind != "U":
            raise ValueError(f"'node_names' must be a 1-D string array, got shape "
                             f"{names.shape}, dtype {names.dtype}")
          kwargs["node_names"] = [str(s) for s in names]
        kwargs["reference"] = CostReference.from_arrays(data)
    except ValueError as e:
      if "pickle" in str(e):  # object arrays are never loaded (they would run code)
        raise ValueError(f"cannot read CompGraph file '{path}': it holds object (pickled) "
                         "arrays, which are not loaded; CompGraph.save writes numeric and "
                         "string arrays only") from e
      raise ValueError(f"cannot read CompGraph file '{path}': {e}") from e
    except Exception as e:  # OSError, zipfile.BadZipFile, EOFError, zlib.error, KeyError
      raise ValueError(f"cannot read CompGraph file '{path}': {type(e).__name__}: {e}") from e
    missing = [k for k in ("cost", "senders", "receivers") if k not in kwargs]
    if missing:
      raise ValueError(f"CompGraph file '{path}' lacks field(s) {missing}")
    try:
      return cls(**kwargs)
    except ValueError as e:
      raise ValueError(f"CompGraph file '{path}': {e}") from e

  def to_graphs_tuple(self):
    """A `jraph.GraphsTuple` (numpy leaves) with every per-node field as a node feature."""
    import jraph  # local import: only graph-network code needs jraph
    nodes = {f: getattr(self, f).astype(np.float32) for f in FLOAT_FIELDS}
    nodes["op_type"] = self.op_type
    nodes["colocation"] = self.colocation.astype(np.int32)
    return jraph.GraphsTuple(
        nodes=nodes,
        edges={"bytes": self.out_bytes[self.senders].astype(np.float32)},
        senders=self.senders.astype(np.int32),
        receivers=self.receivers.astype(np.int32),
        n_node=np.asarray([self.num_nodes], np.int32),
        n_edge=np.asarray([self.num_edges], np.int32),
        globals=None)
