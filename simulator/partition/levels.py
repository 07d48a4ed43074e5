"""Multi-level (recursive bisection) strategies of operator partitioning (design.md 4.2.1).

Why: Tofu (Wang et al., EuroSys 2019, section 4) partitions for k = 2^m workers by solving the
k = 2 problem m times, each time on the tensors' halved shapes, so an op may split different
dims at different levels (rows x columns over 4 workers), which 1-level layouts (one dim over
all k workers) cannot express.

What: a *multi-level strategy* is an (N, m) int array: op v's option at level l, an option id
of the op's k = 2 space (`StrategySpace` with k = 2), valid when every tensor of the op stays
divisible: a dim split at c levels must be divisible by 2^c (`check`, `level_allowed`). A
tensor's layout is the tuple of its m per-level layouts; worker j's level-l bit is bit
(m - 1 - l) of j (level 0 is the most significant, so (S0, S0) gives worker j the j-th quarter
of the rows, as the 1-level S0 at k = 4). Worker j holds a *box* (per dim an interval, halved at
every S level by its bit, in level order) and, at P levels, an addend.

`conversion(L, X, m)` is the rule that turns layout L into the layout X a consumer needs (X has
no P): first the P levels of L are reduce-scattered in level order (at level l the two workers
that differ in bit l hold addends of one box; each keeps its bit's half along X's dim at level l
(dim 0 where X[l] is R) and sends the other half to its partner, which adds it: a reduce op);
then every consumer worker j' takes each distinct producer box that intersects the box it needs
from the holder of that box nearest to j' (fewest differing bits: itself when possible, else the
worker that agrees with j' on the R levels): nothing when the holder is j', a direct edge when
the whole box is needed, else a slice op of the intersection. `producer_fraction` gives the
fraction of a tensor's bytes moved for a producer layout and the set of layouts its consumers
need (a direct edge from a shard to a worker is sent once, as rule 3 sends it), and `comm_bytes`
sums it; `simulator.partition.expand` builds the same plan as ops, so the two agree exactly.
"""

from __future__ import annotations

import functools
from typing import Dict, List, Sequence, Tuple

import numpy as np

from simulator.partition.space import P, R, StrategySpace

Box = Tuple[Tuple[int, int], ...]


def num_levels(k: int) -> int:
  """m with 2^m = k; ValueError otherwise."""
  m = int(k).bit_length() - 1
  if k < 1 or 2**m != k:
    raise ValueError(f"recursive bisection needs a power-of-two degree, got {k}")
  return m


def _bit(j: int, level: int, m: int) -> int:
  return (j >> (m - 1 - level)) & 1


def _divisible(dims: Sequence[int], per_level: Sequence[int]) -> bool:
  """Whether a tensor of `dims` admits the per-level layouts (a dim split c times: 2^c | dim)."""
  if not dims:
    return True
  count: Dict[int, int] = {}
  for x in per_level:
    if x >= 2:
      count[x - 2] = count.get(x - 2, 0) + 1
  return all(d >= len(dims) or (dims[d] % 2**c == 0 and dims[d] >= 2**c)
             for d, c in count.items())


def op_valid(space: StrategySpace, v: int, options: Sequence[int]) -> bool:
  """Whether op v may take `options` (one per level): every tensor stays divisible."""
  op = space.ops[v]
  opts = [op.options[int(o)] for o in options]
  if not _divisible(op.shape, [o.out for o in opts]):
    return False
  for p, u in enumerate(op.inputs):
    if not _divisible(space.ops[u].shape, [o.ins[p] for o in opts]):
      return False
  for p, dims in enumerate(op.leaf_shapes):
    if not _divisible(dims, [o.leaves[p] for o in opts]):
      return False
  return True


def level_allowed(space: StrategySpace, prefix: np.ndarray, partition: bool = True) -> \
    List[np.ndarray]:
  """Per op, the option ids valid at the next level after the (N, l) `prefix`; with
  `partition`, replicate (option 0) only where nothing else is valid (Tofu splits every op)."""
  out = []
  for v, op in enumerate(space.ops):
    ok = [o for o in range(len(op.options)) if op_valid(space, v, list(prefix[v]) + [o])]
    if partition and len(ok) > 1:
      ok = [o for o in ok if o != 0] or ok
    out.append(np.asarray(ok, np.int64))
  return out


def check(graph, space: StrategySpace, strategy) -> np.ndarray:
  """(N, m) int option ids of a multi-level strategy; ValueError naming the op when bad."""
  s = np.asarray(strategy)
  if space.k != 2:
    raise ValueError(f"a multi-level strategy takes the k = 2 space of every level, got a "
                     f"space of degree {space.k}")
  if s.ndim != 2 or s.shape[0] != graph.num_nodes or len(space.ops) != graph.num_nodes:
    raise ValueError(f"multi-level strategy has shape {s.shape}, expected ({graph.num_nodes}, m)")
  num = space.num_options()
  for v in range(graph.num_nodes):
    if ((s[v] < 0) | (s[v] >= num[v])).any():
      raise ValueError(f"strategy gives op {graph.node_label(v)} options {list(s[v])}, not all "
                       f"in [0, {num[v]})")
    if not op_valid(space, v, s[v]):
      raise ValueError(f"strategy gives op {graph.node_label(v)} options {list(s[v])}, which "
                       f"split a dim more often than it is divisible by 2")
  return s.astype(np.int64)


def layouts(space: StrategySpace, strategy: np.ndarray):
  """(out, ins): each op's output layout tuple and, per node input, the layout tuple it needs."""
  out, ins = [], []
  for v, op in enumerate(space.ops):
    opts = [op.options[int(o)] for o in strategy[v]]
    out.append(tuple(o.out for o in opts))
    ins.append([tuple(o.ins[p] for o in opts) for p in range(len(op.inputs))])
  return out, ins


def requirements(space: StrategySpace, strategy) -> Dict[int, List[Tuple[int, ...]]]:
  """{producer: [distinct layout tuples its consumers need]} (in first-need order)."""
  _, ins = layouts(space, strategy)
  need: Dict[int, List[Tuple[int, ...]]] = {}
  for v, op in enumerate(space.ops):
    for u, x in zip(op.inputs, ins[v]):
      lst = need.setdefault(u, [])
      if x not in lst:
        lst.append(x)
  return need


def _ndim(*lays) -> int:
  return 1 + max([x - 2 for lay in lays for x in lay if x >= 2], default=0)


def box(lay: Sequence[int], j: int, m: int, ndim: int) -> Box:
  """Worker j's box under a layout tuple without P (intervals in units of 1/2^m of a dim)."""
  lo, hi = [0] * ndim, [2**m] * ndim
  for level, x in enumerate(lay):
    if x >= 2:
      d = x - 2
      mid = (lo[d] + hi[d]) // 2
      if _bit(j, level, m):
        lo[d] = mid
      else:
        hi[d] = mid
  return tuple(zip(lo, hi))


def _size(b: Box, m: int) -> float:
  return float(np.prod([(h - l) / 2**m for l, h in b]))


def _meet(a: Box, b: Box):
  out = tuple((max(x[0], y[0]), min(x[1], y[1])) for x, y in zip(a, b))
  return out if all(l < h for l, h in out) else None


@functools.lru_cache(maxsize=None)
def conversion(src: Tuple[int, ...], dst: Tuple[int, ...], m: int):
  """The plan turning layout `src` into `dst` (no P) on k = 2^m workers (module docstring).

  Returns (reduces, moves): reduces, per P level of src in order, the fraction of the tensor
  that every worker sends its partner and adds (one slice + one reduce op per worker);
  moves[j'] = [(holder j, fraction, how)] with how "local", "direct" or "slice".
  """
  k = 2**m
  nd = _ndim(src, dst)
  lay = list(src)
  boxes = [box([x if x >= 2 else R for x in src], j, m, nd) for j in range(k)]
  reduces = []
  for level, x in enumerate(src):
    if x != P:
      continue
    d = dst[level] - 2 if dst[level] >= 2 else 0
    new = []
    for j in range(k):
      b = list(boxes[j])
      lo, hi = b[d]
      mid = (lo + hi) // 2
      b[d] = (mid, hi) if _bit(j, level, m) else (lo, mid)
      new.append(tuple(b))
    reduces.append(_size(boxes[0], m) / 2)
    boxes = new
    lay[level] = 2 + d
  holders: Dict[Box, List[int]] = {}
  for j, b in enumerate(boxes):
    holders.setdefault(b, []).append(j)
  moves = []
  for j2 in range(k):
    need = box(dst, j2, m, nd)
    got = []
    for b, hs in holders.items():
      inter = _meet(b, need)
      if inter is None:
        continue
      h = min(hs, key=lambda j: (bin(j ^ j2).count("1"), j))
      how = "local" if h == j2 else ("direct" if inter == b else "slice")
      got.append((h, _size(inter, m), how))
    moves.append(got)
  return tuple(reduces), tuple(tuple(g) for g in moves)


@functools.lru_cache(maxsize=None)
def producer_fraction(src: Tuple[int, ...], dsts: Tuple[Tuple[int, ...], ...], m: int) -> float:
  """Fraction of a tensor's bytes moved to give its consumers every layout in `dsts`: reduce
  pieces, slices, and direct edges (a direct edge from a shard counted once per destination;
  after a reduction the sources are that conversion's own reduce ops)."""
  k = 2**m
  total, direct = 0.0, {}
  for x in dsts:
    reduces, moves = conversion(src, x, m)
    total += k * sum(reduces)
    for j2, got in enumerate(moves):
      for h, frac, how in got:
        if how == "slice":
          total += frac
        elif how == "direct":
          direct[(x if reduces else None, h, j2)] = frac
  return total + sum(direct.values())


def comm_bytes(space: StrategySpace, strategy) -> float:
  """Bytes a multi-level strategy ((N, m)) moves between workers under the expansion."""
  s = np.asarray(strategy)
  m = s.shape[1]
  out, _ = layouts(space, s)
  return float(sum(space.out_bytes[u] * producer_fraction(out[u], tuple(xs), m)
                   for u, xs in requirements(space, s).items()))


def level_objective(space: StrategySpace, strategy) -> float:
  """Tofu's recursive objective: sum over levels l (from 0) of 2^l x the k = 2 transfer bytes
  of level l on the shapes halved by the producers' S levels before l."""
  from simulator.partition.space import transfer_bytes
  s = np.asarray(strategy)
  out, ins = layouts(space, s)
  total = 0.0
  for level in range(s.shape[1]):
    seen = set()
    for v, op in enumerate(space.ops):
      for u, x in zip(op.inputs, ins[v]):
        if (u, x[level]) in seen:
          continue
        seen.add((u, x[level]))
        halved = sum(1 for y in out[u][:level] if y >= 2)
        total += 2**level * transfer_bytes(out[u][level], x[level],
                                           space.out_bytes[u] / 2**halved, 2)
  return total


def lift(space_k: StrategySpace, space2: StrategySpace, strategy, m: int) -> np.ndarray:
  """The (N, m) multi-level strategy equal to a 1-level strategy of degree k = 2^m: every op's
  option repeated at all m levels (S<d> over k workers = S<d> at every level, P = P at every
  level; `comm_bytes` of the two agree). ValueError if an option has no k = 2 counterpart."""
  s = np.asarray(strategy, np.int64)
  out = np.zeros((len(space_k.ops), m), np.int64)
  for v, (opk, op2) in enumerate(zip(space_k.ops, space2.ops)):
    o = opk.options[int(s[v])]
    key = (o.out, o.ins, o.leaves)
    ids = [i for i, x in enumerate(op2.options) if (x.out, x.ins, x.leaves) == key]
    if not ids:
      raise ValueError(f"op {v}: option {o.name} of degree {space_k.k} has no k = 2 counterpart")
    out[v] = ids[0]
  return out
