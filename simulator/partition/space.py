"""Strategy spaces of operator partitioning (docs/design.md section 4.2).

Why: an op too large for one device can only run if its tensors are split across devices
(Tofu, Wang et al., EuroSys 2019: "partition-n-reduce"). Which splits an op admits follows from
its dimension numbers: an output dimension that corresponds to an operand dimension (elementwise,
broadcast, transpose, reshape where sizes match, dot batch / free dims, convolution batch /
output feature) can be split in both; a reduced dimension (dot contracting dims, convolution
input feature, an add-reduce's dims) can be split in the operands, leaving every shard a partial
sum of the whole output (PARTIAL) that needs a reduction.

What: a *layout* is an int: `R` (0, replicated: every worker holds the whole tensor), `P` (1, a
partial sum: every worker holds a whole-shaped addend) or `split(d)` = 2 + d (worker j holds the
j-th of k equal slices along dim d). An op's `Option` says its output layout and the layout it
needs of each node input and of each leaf (parameter / constant) it reads; option 0 is always
replicate (k full copies). `StrategySpace` holds every op's options for one degree k.
`hlo_space` derives it from the JAX/HLO front end's instructions; `generic_space` gives a
shape-free space (replicate, batch split, model split) for graphs without shapes.
`comm_bytes` is the exact number of bytes that a strategy moves between workers under the
expansion of `simulator.partition.expand` (and so under the simulator's rule 3).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from simulator.frontends.hlo import entry_nodes, flatten_value
from simulator.frontends.hlo_parse import parse_hlo
from simulator.graph import CompGraph

R, P = 0, 1  # layout ids; split along dim d is 2 + d


def split(d: int) -> int:
  return 2 + int(d)


def layout_name(layout: int) -> str:
  return {R: "R", P: "P"}.get(layout, f"S{layout - 2}")


@dataclasses.dataclass(frozen=True)
class Option:
  """One way to run an op on k workers.

  out: the output's layout (R, P or split(d)).
  ins: (number of node inputs,) layout needed of each node input (R or split(d')).
  leaves: (number of leaves,) layout of each parameter / constant operand (R or split(d')).
  """
  out: int
  ins: Tuple[int, ...]
  leaves: Tuple[int, ...]
  # (cost, param_bytes, temp_bytes) of each shard where a profile gives them (Piper's TMPCs);
  # None: derived from the op's fields (section 4.2).
  shard: Optional[Tuple[float, float, float]] = None

  @property
  def split(self) -> bool:
    """Whether each shard does 1/k of the op's work (every option but replicate)."""
    return self.out != R

  @property
  def name(self) -> str:
    return (f"{layout_name(self.out)}<-(" + ",".join(layout_name(x) for x in self.ins) +
            (";" + ",".join(layout_name(x) for x in self.leaves) if self.leaves else "") + ")")


@dataclasses.dataclass(frozen=True)
class OpSpace:
  """The options of one op and what they act on.

  inputs: producer op id of each node input, in operand order (a producer may appear twice).
  in_bytes: bytes of each node input (the producer's output as this op reads it).
  leaf_bytes: param_bytes share of each leaf operand (they sum to the op's param_bytes).
  shape: the output's dims (() where unknown).
  options: option 0 is replicate; the others split the op (each needs divisibility by k).
  kind: "dot", "conv", "elementwise", "reduce", "data" (reshape, transpose, broadcast, ...)
    or "other" (replicate only).
  weight_leaves: indices into the leaves that are weights (model parameters, rank >= 2).
  leaf_shapes: dims of each leaf operand.
  """
  inputs: Tuple[int, ...]
  in_bytes: Tuple[float, ...]
  leaf_bytes: Tuple[float, ...]
  shape: Tuple[int, ...]
  options: Tuple[Option, ...]
  kind: str = "other"
  weight_leaves: Tuple[int, ...] = ()
  leaf_shapes: Tuple[Tuple[int, ...], ...] = ()
  leaf_names: Tuple[str, ...] = ()
  leaf_batch: Tuple[Optional[int], ...] = ()  # batch dim of each leaf (an input batch) or None


@dataclasses.dataclass(frozen=True, eq=False)
class StrategySpace:
  """Every op's options for degree k (ops aligned with the graph's nodes)."""
  k: int
  ops: Tuple[OpSpace, ...]
  batch_dims: Tuple[Optional[int], ...]  # (N,) the output dim that carries the batch, or None
  out_bytes: np.ndarray  # (N,) bytes of each op's output (the graph's), the S of a transfer

  def num_options(self) -> np.ndarray:
    """(N,) int number of options of each op."""
    return np.array([len(o.options) for o in self.ops], np.int64)

  def check(self, graph: Optional[CompGraph], strategy) -> np.ndarray:
    """(N,) int option ids; ValueError naming the op on a bad strategy (graph None: the
    space's own ops, named by index)."""
    s = np.asarray(strategy)
    n = len(self.ops) if graph is None else graph.num_nodes
    label = (lambda i: str(i)) if graph is None else graph.node_label
    if s.shape != (n,) or len(self.ops) != n:
      raise ValueError(f"strategy has shape {s.shape}, expected ({n},) (one option per op"
                       + ("" if graph is None else f" of '{graph.name}'")
                       + f", space of {len(self.ops)} ops)")
    if s.size and (s.dtype.kind not in "biuf" or not np.all(np.isfinite(s))
                   or np.any(s != np.round(s))):
      bad = (np.arange(n) if s.dtype.kind not in "biuf"
             else np.flatnonzero(~np.isfinite(s) | (s != np.round(s))))
      raise ValueError(f"strategy gives op {label(int(bad[0]))} option {s[bad[0]]}: option "
                       "ids are integers")
    bad = np.flatnonzero((s < 0) | (s >= self.num_options()))
    if bad.size:
      i = int(bad[0])
      raise ValueError(f"strategy gives op {label(i)} option {s[i]}, which is not in "
                       f"[0, {len(self.ops[i].options)})")
    return s.astype(np.int64)


def transfer_bytes(src: int, dst: int, nbytes: float, k: int) -> float:
  """Bytes moved between workers to turn a tensor of `nbytes` in layout `src` into `dst`.

  As the expansion moves them (section 4.2): same layout or R -> split: 0 (local); split ->
  R: all-gather, every shard to every other worker, (k-1) S; split d -> split d': all-to-all,
  k (k-1) slices of S / k^2; P -> split: reduce-scatter, (k-1) S; P -> R: reduce-scatter then
  all-gather, 2 (k-1) S.
  """
  if src == dst or src == R or k == 1:
    return 0.0
  if src == P:
    return (k - 1) * nbytes * (2.0 if dst == R else 1.0)
  if dst == R:
    return (k - 1) * nbytes
  return (k - 1) * nbytes / k


def requirements(space: StrategySpace, strategy) -> Dict[Tuple[int, int], float]:
  """{(producer, layout): bytes} of every distinct layout that some consumer needs of a
  producer's output under `strategy` (bytes: the producer's whole output)."""
  need: Dict[Tuple[int, int], float] = {}
  for v, op in enumerate(space.ops):
    opt = op.options[int(strategy[v])]
    for u, lay in zip(op.inputs, opt.ins):
      need.setdefault((u, lay), float(space.out_bytes[u]))
  return need


def comm_bytes(space: StrategySpace, strategy) -> float:
  """Bytes the strategy moves between workers: per producer and distinct needed layout,
  `transfer_bytes` (the expansion merges consumers that need one layout, as rule 3 does)."""
  strategy = space.check(None, strategy)
  total = 0.0
  for (u, lay), b in requirements(space, strategy).items():
    src = space.ops[u].options[int(strategy[u])].out
    total += transfer_bytes(src, lay, b, space.k)
  return total


# ------------------------------------------------------------------ generic (shape-free)
def generic_space(graph: CompGraph, k: int) -> StrategySpace:
  """A shape-free space for graphs without shapes (profiles, synthetic graphs).

  Every op gets three options: replicate; "batch" (output and node inputs split along dim 0,
  parameters replicated: data parallelism); "model" (node inputs replicated, parameters split,
  output split along dim 1: a column split). Sizes are assumed divisible by k.
  """
  _check_k(k)
  ptr, pred = graph.predecessor_csr()
  out = graph.out_bytes
  ops_ = []
  for v in range(graph.num_nodes):
    ins = tuple(int(u) for u in pred[ptr[v]:ptr[v + 1]])
    leaves = (float(graph.param_bytes[v]),) if graph.param_bytes[v] > 0 else ()
    opts = [Option(R, (R,) * len(ins), (R,) * len(leaves))]
    if k > 1:
      opts.append(Option(split(0), (split(0),) * len(ins), (R,) * len(leaves)))
      opts.append(Option(split(1), (R,) * len(ins), (split(0),) * len(leaves)))
    ops_.append(OpSpace(ins, tuple(float(out[u]) for u in ins), leaves, (), tuple(opts),
                        "generic", tuple(range(len(leaves))), ((),) * len(leaves),
                        ("param",) * len(leaves), (None,) * len(leaves)))
  return StrategySpace(k, tuple(ops_), (0,) * graph.num_nodes, _frozen(graph.out_bytes))


def _frozen(x) -> np.ndarray:
  out = np.array(x, np.float64)
  out.setflags(write=False)
  return out


def _check_k(k) -> None:
  if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
    raise ValueError(f"partition degree k must be an integer >= 1, got {k!r}")


# ------------------------------------------------------------------ from HLO
# Opcodes whose operands and output correspond dim by dim, same shapes.
_SAME_DIMS = ("copy", "reduce-precision", "bitcast-convert", "map", "clamp", "select")


def _dims_of(shape) -> Tuple[int, ...]:
  return tuple(shape[0][1]) if len(shape) == 1 else ()


def _reshape_map(src: Sequence[int], dst: Sequence[int]) -> Dict[int, int]:
  """Output dim -> operand dim of a reshape where the leading (and trailing) dims agree."""
  m, i = {}, 0
  while i < min(len(src), len(dst)) and src[i] == dst[i]:
    m[i] = i
    i += 1
  j = 1
  while (j <= min(len(src), len(dst)) - i and src[-j] == dst[-j]):
    m[len(dst) - j] = len(src) - j
    j += 1
  return m


def _dim_map(inst, operand_dims: List[Tuple[int, ...]], reducer_is_add) -> \
    Tuple[str, Dict[int, Tuple], List[Tuple]]:
  """(kind, {out dim: per-operand dim or None}, [per-operand reduced dims]) of one instruction."""
  from simulator.frontends.hlo_parse import ELEMENTWISE, TRANSCENDENTAL
  op = inst.opcode
  out = _dims_of(inst.shape)
  n_ops = len(operand_dims)
  if not out and op not in ("reduce",):
    return "other", {}, []
  if op in ELEMENTWISE or op in TRANSCENDENTAL or op in _SAME_DIMS:
    m = {d: tuple(d if len(od) == len(out) else None for od in operand_dims)
         for d in range(len(out))}
    return "elementwise", m, []
  if op == "broadcast" and n_ops == 1:
    dims = inst.dims_attr("dimensions")
    m = {d: ((dims.index(d) if d in dims else None),) for d in range(len(out))}
    return "data", m, []
  if op == "transpose" and n_ops == 1:
    perm = inst.dims_attr("dimensions")
    return "data", {d: (perm[d],) for d in range(len(out))}, []
  if op in ("reshape", "bitcast") and n_ops == 1:
    return "data", {d: (s,) for d, s in _reshape_map(operand_dims[0], out).items()}, []
  if op == "dot" and n_ops == 2:
    lb, rb = inst.dims_attr("lhs_batch_dims"), inst.dims_attr("rhs_batch_dims")
    lc, rc = inst.dims_attr("lhs_contracting_dims"), inst.dims_attr("rhs_contracting_dims")
    lf = [d for d in range(len(operand_dims[0])) if d not in lb and d not in lc]
    rf = [d for d in range(len(operand_dims[1])) if d not in rb and d not in rc]
    cols = [(a, b) for a, b in zip(lb, rb)] + [(a, None) for a in lf] + [(None, b) for b in rf]
    if len(cols) != len(out):
      return "other", {}, []
    return "dot", dict(enumerate(cols)), [(a, b) for a, b in zip(lc, rc)]
  if op == "convolution" and n_ops == 2:
    labels = inst.attr("dim_labels") or ""
    mm = re.fullmatch(r"(\w+)_(\w+)->(\w+)", labels)
    groups = [int(inst.attr(a) or 1) for a in ("feature_group_count", "batch_group_count")]
    if not mm or groups != [1, 1]:
      return "other", {}, []
    lhs, rhs, res = mm.groups()
    m = {res.index("b"): (lhs.index("b"), None), res.index("f"): (None, rhs.index("o"))}
    return "conv", m, [(lhs.index("f"), rhs.index("i"))]
  if op == "reduce" and n_ops == 2 and reducer_is_add:
    dims = inst.dims_attr("dimensions")
    src = operand_dims[0]
    kept = [d for d in range(len(src)) if d not in dims]
    return "reduce", {o: (s, None) for o, s in enumerate(kept)}, [(d, None) for d in dims]
  return "other", {}, []


def _entry_parameters(text: str, entry: str) -> Dict[str, int]:
  """ENTRY parameter instruction name -> parameter number."""
  out, inside = {}, False
  pat = re.compile(r"\s*(?:ROOT\s+)?%?([^\s=(]+)\s*=.*?\sparameter\((\d+)\)")
  for line in text.split("\n"):
    if not inside:
      s = line.strip()
      inside = s.startswith("ENTRY") and s.split()[1].lstrip("%") == entry
      continue
    if line.strip() == "}":
      break
    m = pat.match(line)
    if m:
      out[m.group(1)] = int(m.group(2))
  return out


def hlo_space(hlo_graph, k: int, batch_parameters: int = 0) -> StrategySpace:
  """The strategy space of an `HloGraph` (pre-optimisation: plain instructions) for degree k.

  Args:
    hlo_graph: `simulator.frontends.hlo.HloGraph` (its graph's nodes are the space's ops).
    k: the degree (every split dim must be divisible by k).
    batch_parameters: how many of the ENTRY's last parameters hold the input batch; their
      dims propagate forward to give every op's batch dim (`StrategySpace.batch_dims`), which
      data parallelism splits. 0: no batch dims.
  """
  _check_k(k)
  mod = parse_hlo(hlo_graph.hlo_text)
  insts = mod.comps[mod.entry]
  params = _entry_parameters(hlo_graph.hlo_text, mod.entry)
  last = max(params.values(), default=-1)
  batch_leaves = {n for n, p in params.items() if p > last - batch_parameters}
  graph = hlo_graph.graph
  by_name = {x.name: x for x in insts}
  dims = {x.name: _dims_of(x.shape) for x in insts}
  # Node i's instruction and operand values (the front end's walk, so the same node ids).
  per_node = [(inst, ins) for _, inst, ins in entry_nodes(insts)]
  readers: Dict[str, set] = {}
  for i, (_, ins) in enumerate(per_node):
    for v in ins:
      for kind, ref in flatten_value(v):
        if kind == "leaf":
          readers.setdefault(ref, set()).add(i)
  batch_dim: List[Optional[int]] = [None] * graph.num_nodes
  read = graph.out_degree() > 0  # P only for an op somebody reads (its partial sum is reduced)
  ops_ = []
  for i in range(graph.num_nodes):
    inst, ins = per_node[i]
    odims = [dims[o] if v[0] != "tuple" else () for o, v in zip(inst.operands, ins)]
    reducer = _reducer_is_add(mod, inst)
    kind, m, red = _dim_map(inst, odims, reducer)
    if kind == "other":
      kind, m = _opaque_batch_map(inst, ins, odims, batch_dim, batch_leaves)
    # Operand records: node inputs and leaves, with the operand position they come from.
    node_pos, leaf_pos, inputs, in_bytes, leaf_bytes, leaf_shapes, leaf_names = \
        [], [], [], [], [], [], []
    for a, v in enumerate(ins):
      flat = flatten_value(v)
      for kd, ref in flat:
        if kd == "node":
          node_pos.append(a if v[0] != "tuple" else -1)
          inputs.append(ref)
          nb = by_name[inst.operands[a]].nbytes if v[0] != "tuple" else graph.out_bytes[ref]
          in_bytes.append(float(nb))
        else:
          leaf_pos.append(a if v[0] != "tuple" else -1)
          leaf_bytes.append(by_name[ref].nbytes / len(readers[ref]))
          leaf_shapes.append(dims.get(ref, ()))
          leaf_names.append(ref)
    out = _dims_of(inst.shape) if kind != "opaque" else tuple(inst.shape[0][1])
    # The output's batch dim: an output dim mapped from an operand's batch dim.
    flat_refs = [(kd, r) for v in ins for kd, r in flatten_value(v)]
    leaf_batch = tuple(0 if r in batch_leaves else None for kd, r in flat_refs if kd == "leaf")
    for d, col in sorted(m.items()):
      for (kd, r), a in zip(flat_refs, _positions(ins)):
        if a < 0 or col[a] is None:
          continue
        bd = batch_dim[r] if kd == "node" else (0 if r in batch_leaves else None)
        if bd is not None and bd == col[a]:
          batch_dim[i] = d
          break
      if batch_dim[i] is not None:
        break
    opts = [Option(R, (R,) * len(inputs), (R,) * len(leaf_bytes))]
    if k > 1:
      def lay(col, positions, shapes_of):
        res = []
        for a, shp in zip(positions, shapes_of):
          od = col[a] if a >= 0 else None
          if od is None:
            res.append(R)
          elif shp[od] % k:
            return None
          else:
            res.append(split(od))
        return tuple(res)
      node_shapes = [odims[a] if a >= 0 else () for a in node_pos]
      leaf_sh = [odims[a] if a >= 0 else () for a in leaf_pos]
      for d, col in sorted(m.items()):
        if out[d] % k or out[d] < k:
          continue
        a_in, a_leaf = lay(col, node_pos, node_shapes), lay(col, leaf_pos, leaf_sh)
        if a_in is not None and a_leaf is not None:
          opts.append(Option(split(d), a_in, a_leaf))
      if read[i]:
        for col in red:
          a_in, a_leaf = lay(col, node_pos, node_shapes), lay(col, leaf_pos, leaf_sh)
          if a_in is not None and a_leaf is not None and (a_in + a_leaf).count(R) < len(
              a_in + a_leaf):
            opts.append(Option(P, a_in, a_leaf))
    weights = tuple(j for j, (n_, s) in enumerate(zip(leaf_names, leaf_shapes))
                    if n_ not in batch_leaves and len(s) >= 2)
    ops_.append(OpSpace(tuple(inputs), tuple(in_bytes), tuple(leaf_bytes), out,
                        tuple(_dedup(opts)), kind, weights, tuple(leaf_shapes),
                        tuple(leaf_names), leaf_batch))
  return StrategySpace(k, tuple(ops_), tuple(batch_dim), _frozen(graph.out_bytes))


def _opaque_batch_map(inst, ins, odims, batch_dim, batch_leaves):
  """An op without a dimension map (a call, gather, slice, ...) keeps the batch: its output dim
  0 is split with every operand whose dim 0 carries the batch and has the output's dim-0 size
  (jnp.take of a batch of indices, a nested jit applied row by row); other operands are
  replicated. Without such an operand: replicate only."""
  leads = {d[0] if d else None for _, d in inst.shape}
  if len(leads) != 1 or None in leads:  # a tuple splits along dim 0 when all its leaves can
    return "other", {}
  out = tuple(inst.shape[0][1])
  col = []
  for a, v in enumerate(ins):
    od = odims[a]
    is_batch = (v[0] == "node" and batch_dim[v[1]] == 0) or (v[0] == "leaf" and
                                                             v[1] in batch_leaves)
    col.append(0 if is_batch and od and od[0] == out[0] else None)
  if all(c is None for c in col):
    return "other", {}
  return "opaque", {0: tuple(col)}


def _positions(ins) -> List[int]:
  """Operand position of every flattened source (-1 inside a tuple operand)."""
  return [a if v[0] != "tuple" else -1 for a, v in enumerate(ins) for _ in flatten_value(v)]




def _dedup(opts: List[Option]) -> List[Option]:
  seen, out = set(), []
  for o in opts:
    if o not in seen:
      seen.add(o)
      out.append(o)
  return out


def _reducer_is_add(mod, inst) -> bool:
  """Whether a reduce's `to_apply` computation adds (so a split reduced dim gives a sum)."""
  if inst.opcode != "reduce":
    return False
  comps = inst.called("to_apply")
  body = mod.comps.get(comps[0], []) if comps else []
  ops_ = [x.opcode for x in body if x.opcode not in ("parameter",)]
  return ops_ == ["add"]
