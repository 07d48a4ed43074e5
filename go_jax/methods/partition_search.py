"""Strategy searches of operator partitioning (docs/design.md section 4.2 and 7).

Why: Tofu (Wang et al., EuroSys 2019) picks every operator's partition by a dynamic program
over a linear order of the (coarsened) graph whose state is the partition of the tensors that
cross the cut, minimising the bytes communicated. Brute force over tiny graphs checks it.

What: `dp` runs that dynamic program over the graph's topological order. The state after op t
is, for every *live* tensor (produced at or before t, read after t), its layout and the set of
layouts already delivered to its earlier readers (a second reader needing the same layout
costs nothing more, as in the expansion: rule 3 sends a tensor to a device once). Transition
costs are `simulator.partition.transfer_bytes`, so the DP's objective is exactly
`simulator.partition.comm_bytes`. States are held as a beam of at most `beam` rows, merged by
equal state (a hash of the live columns) and kept by lowest cost: with `beam` at least the number
of distinct states the DP is exact (the result says whether the beam ever overflowed). All
arithmetic is numpy over the beam (no Python loop over states). `brute_force` enumerates every
assignment (vectorised) for graphs of a few ops. `coarsen_ties` is Tofu's coarsening (by a
conservative rule), which `dp` follows. `recursive_dp` is Tofu's recursive bisection for
k = 2^m (multi-level strategies of `simulator.partition.levels`: the k = 2 DP per level) and
`brute_force_levels` its brute force.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from simulator.graph import CompGraph
from simulator.partition.space import P, R, StrategySpace


def transfer_table(src, dst, nbytes, k: int):
  """`transfer_bytes` vectorised over arrays of layouts (numpy broadcasting)."""
  src, dst = np.asarray(src), np.asarray(dst)
  out = np.where(dst == R, (k - 1) * nbytes, (k - 1) * nbytes / k)
  out = np.where(src == P, (k - 1) * nbytes * np.where(dst == R, 2.0, 1.0), out)
  return np.where((src == dst) | (src == R) | (k == 1), 0.0, out)


@dataclasses.dataclass(frozen=True)
class SearchResult:
  strategy: np.ndarray  # (N,) option id of every op
  comm_bytes: float  # the objective: bytes moved between workers
  exact: bool  # the beam never overflowed (the DP is exact) / brute force
  states: int  # the largest number of distinct states held at one cut
  width: int = 0  # `dp`: the most live ops a state held (its columns; never all N ops)


def _tables(space: StrategySpace):
  out_lay = [np.array([o.out for o in op.options], np.int64) for op in space.ops]
  in_lay = [np.array([o.ins for o in op.options], np.int64).reshape(len(op.options), -1)
            for op in space.ops]
  return out_lay, in_lay


def _allowed(space: StrategySpace, allowed) -> List[np.ndarray]:
  if allowed is None:
    return [np.arange(len(op.options)) for op in space.ops]
  out = [np.asarray(a, np.int64) for a in allowed]
  for v, a in enumerate(out):
    if a.size == 0:
      raise ValueError(f"op {v} has no allowed partition option")
  return out


def coarsen_ties(space: StrategySpace) -> Dict[int, Tuple[int, np.ndarray]]:
  """Tofu's coarsening (paper section 5), by a conservative rule: an elementwise op whose node
  inputs all come from one producer of its own shape joins that producer's group, so it takes
  the partition of its producer: {member: (producer, (options of producer,) member option
  whose output and inputs have the producer's output layout, -1 where there is none, e.g. a
  partial sum)}. Chains of such ops form one group; `dp` follows the ties."""
  ties: Dict[int, Tuple[int, np.ndarray]] = {}
  for v, op in enumerate(space.ops):
    if op.kind != "elementwise" or not op.inputs or len(set(op.inputs)) != 1:
      continue
    u = op.inputs[0]
    if not op.shape or space.ops[u].shape != op.shape:
      continue
    table = np.full(len(space.ops[u].options), -1, np.int64)
    for a, ou in enumerate(space.ops[u].options):
      for b, ov in enumerate(op.options):
        if ov.out == ou.out and all(x == ou.out for x in ov.ins):
          table[a] = b
          break
    if (table >= 0).any():
      ties[v] = (u, table)
  return ties


def dp(graph: CompGraph, space: StrategySpace, allowed: Optional[Sequence] = None,
       beam: int = 256, seed: int = 0,
       ties: Optional[Dict[int, Tuple[int, np.ndarray]]] = None,
       tables: Optional[Dict[Tuple[int, int], np.ndarray]] = None,
       groups: Optional[Dict[Tuple[int, int], int]] = None) -> SearchResult:
  """Tofu's dynamic program over the topological order (module docstring).

  Args:
    allowed: per op, the option ids it may take (None: all).
    beam: the most states kept at a cut.
    ties: `coarsen_ties`: a member op takes the option its producer's option maps to (where
      that is allowed; free where it maps to -1), so the DP branches once per group.
    tables: {(consumer, input position): (layouts, layouts) bytes of delivering the producer's
      output layout (row) as the needed layout (column)} replacing `transfer_table` (the
      recursive DP's exact per-level costs).
    groups: {(consumer, input position): bit offset}: readers of one producer share a
      delivered layout only within one offset (the recursive DP's readers whose earlier
      levels' needs differ do not share). Offset o is bit o % 64 of word o // 64 of the
      producer's delivered mask (as many int64 words as the largest offset needs; a group's
      layout bits never straddle two words).
  """
  n, k = graph.num_nodes, space.k
  out_lay, in_lay = _tables(space)
  allow = _allowed(space, allowed)
  order = graph.topological_order()
  pos = np.empty(n, np.int64)
  pos[order] = np.arange(n)
  last_use = pos.copy()  # position of the last reader (itself when nobody reads it)
  for v, op in enumerate(space.ops):
    for u in op.inputs:
      last_use[u] = max(last_use[u], pos[v])
  words = 1 + max(groups.values(), default=0) // 64 if groups else 1
  rng = np.random.default_rng(seed)
  salt = rng.integers(1, 2**62, size=(1 + words, n), dtype=np.int64) | 1
  # A state holds only its live ops (produced, read later), each in a slot (column) that a
  # dead op's successor reuses, so a step costs O(beam x live ops), not O(beam x N); the
  # options of the ops already dead are recovered at the end from per-step back pointers.
  born = np.zeros(n + 1, np.int64)
  np.add.at(born, pos[last_use > pos], 1)
  np.add.at(born, last_use[last_use > pos], -1)
  width = max(1, int(np.cumsum(born).max()))  # the most ops live after one step
  slot = np.full(n, -1, np.int64)
  free = list(range(width - 1, -1, -1))
  opt = np.zeros((1, width), np.int64)  # option of every live op per state
  lay = np.zeros((1, width), np.int64)  # output layout of every live op per state
  # bitmask of layouts delivered per live producer per state, in `words` int64 words
  paid = np.zeros((1, width, words), np.int64)
  cost = np.zeros(1)
  back: List[np.ndarray] = []  # per step: the state each kept state extends
  picked: List[np.ndarray] = []  # per step: the option each kept state gave the step's op
  live: List[int] = []  # the live ops, in topological order
  exact, most = True, 1
  for t, v in enumerate(order.tolist()):
    choices = allow[v]
    b, c = opt.shape[0], choices.size
    cand = np.repeat(cost[:, None], c, axis=1)
    new_bits = {}
    inputs = space.ops[v].inputs
    for p, u in enumerate(inputs):
      x = in_lay[v][choices, p]  # (c,) layout needed of u
      offset = groups.get((v, p), 0) if groups else 0
      word, shift = divmod(offset, 64)
      src = out_lay[u][opt[:, slot[u]]]  # (b,)
      fresh = ((paid[:, slot[u], word, None] >> (x[None, :] + shift)) & 1) == 0
      dup = np.zeros(c, bool)  # an earlier input position of v already asked u for x
      for q in range(p):
        if inputs[q] == u and (groups.get((v, q), 0) if groups else 0) == offset:
          dup |= in_lay[v][choices, q] == x
      if tables is not None and (v, p) in tables:
        charge = tables[(v, p)][src[:, None], x[None, :]]
      else:
        charge = transfer_table(src[:, None], x[None, :], space.out_bytes[u], k)
      cand += np.where(fresh & ~dup[None, :], charge, 0.0)
      new_bits[(u, word)] = new_bits.get((u, word), 0) | (np.int64(1) << (x + shift))
    if ties and v in ties:
      u, table = ties[v]
      want = table[opt[:, slot[u]]]  # (b,) the option the group gives v, -1: free
      hit = choices[None, :] == want[:, None]
      cand = np.where(hit | ~hit.any(1, keepdims=True), cand, np.inf)
    rows, cols = np.divmod(np.arange(b * c), c)
    flat = cand.reshape(-1)
    # State key after the step: live ops' options' layouts and paid masks.
    stay = [u for u in live if last_use[u] > t]
    cols_live = slot[np.array(stay, np.int64)]
    lay_live = lay[rows[:, None], cols_live[None, :]]
    paid_live = paid[rows[:, None], cols_live[None, :]]
    at = {u: i for i, u in enumerate(stay)}
    for (u, word), bits in new_bits.items():
      if u in at:
        paid_live[:, at[u], word] |= bits[cols]
    key = lay_live @ salt[0, stay]  # wraps: a hash
    for word in range(words):
      key = key + paid_live[:, :, word] @ salt[1 + word, stay]
    if last_use[v] > t:  # v's own column: its layout, nothing delivered yet
      key = key + out_lay[v][choices[cols]] * salt[0, v]
    idx = np.lexsort((np.arange(b * c), flat))
    idx = idx[np.isfinite(flat[idx])]
    _, first = np.unique(key[idx], return_index=True)
    keep = idx[np.sort(first)]
    keep = keep[np.argsort(flat[keep], kind="stable")]
    most = max(most, keep.size)
    if keep.size > beam:
      exact = False
      keep = keep[:beam]
    r, cc = rows[keep], cols[keep]
    opt, lay, paid, cost = opt[r], lay[r], paid[r], flat[keep]
    back.append(r)
    picked.append(choices[cc])
    for (u, word), bits in new_bits.items():
      if u in at:
        paid[:, slot[u], word] |= bits[cc]
    for u in live:
      if last_use[u] <= t:  # read for the last time: its slot is free
        free.append(int(slot[u]))
    live = stay
    if last_use[v] > t:
      slot[v] = free.pop()
      opt[:, slot[v]] = choices[cc]
      lay[:, slot[v]] = out_lay[v][choices[cc]]
      paid[:, slot[v]] = 0
      live.append(v)
  best = int(np.argmin(cost))
  strategy = np.zeros(n, np.int64)
  state = best
  for t in range(n - 1, -1, -1):
    strategy[order[t]] = picked[t][state]
    state = int(back[t][state])
  return SearchResult(strategy, float(cost[best]), exact, int(most), width)


def brute_force(graph: CompGraph, space: StrategySpace, allowed: Optional[Sequence] = None,
                limit: int = 200_000) -> SearchResult:
  """The exact minimum of `comm_bytes` by enumerating every assignment (at most `limit`)."""
  allow = _allowed(space, allowed)
  # float64: a large graph's count overflows to inf (int() of it raised OverflowError)
  count = float(np.prod([a.size for a in allow], dtype=np.float64))
  if not count <= limit:
    shown = f"{count:.0f}" if np.isfinite(count) else "more than 1e308"
    raise ValueError(f"brute force over {shown} assignments of '{graph.name}' "
                     f"({graph.num_nodes} ops) exceeds the limit of {limit}; use a smaller "
                     f"graph")
  total = int(count)
  out_lay, in_lay = _tables(space)
  # Every assignment, in meshgrid "ij" order (the last op fastest), as mixed-radix digits: a
  # meshgrid has one array axis per op, and numpy allows at most 32 (64) of them.
  sizes = np.array([a.size for a in allow], np.int64)
  strides = np.concatenate([np.cumprod(sizes[::-1])[::-1][1:], [1]]).astype(np.int64)
  index = np.arange(total, dtype=np.int64)[:, None]
  digits = (index // strides[None, :]) % sizes[None, :]
  grid = np.stack([allow[v][digits[:, v]] for v in range(graph.num_nodes)], -1)
  k = space.k
  cost = np.zeros(grid.shape[0])
  readers = {}
  for v, op in enumerate(space.ops):
    for p, u in enumerate(op.inputs):
      readers.setdefault(u, []).append(in_lay[v][grid[:, v], p])
  for u, lays in readers.items():
    x = np.sort(np.stack(lays, 1), axis=1)  # (C, r) needed layouts
    first = np.ones_like(x, bool)
    first[:, 1:] = x[:, 1:] != x[:, :-1]
    src = out_lay[u][grid[:, u]][:, None]
    cost += np.where(first, transfer_table(src, x, space.out_bytes[u], k), 0.0).sum(1)
  best = int(np.argmin(cost))
  return SearchResult(grid[best].copy(), float(cost[best]), True, int(grid.shape[0]))


def recursive_dp(graph: CompGraph, space2: StrategySpace, m: int, partition: bool = True,
                 beam: int = 256, seed: int = 0, coarsen: bool = False) -> SearchResult:
  """Tofu's recursive bisection (section 4 of the paper) for 2^m workers: the k = 2 `dp` run m
  times; at level l every op may take the options of `space2` (the k = 2 space) that keep its
  tensors divisible after the earlier levels' splits (`levels.level_allowed`; with `partition`
  replicate only where nothing else is).
  Level costs: Tofu's paper counts level l as 2^l k = 2 problems on halved shapes
  (`levels.level_objective`), which misjudges conversions whose earlier levels differ (a
  (S0, S1) -> (S1, S1) conversion moves 3/4 of the tensor, not 1/2). Here the cost of an edge at
  level l is the exact marginal: the exact bytes (`levels.producer_fraction`) of the producer's
  and consumer's layouts so far with level l's layouts repeated on the remaining levels, less
  the same with level l - 1's repeated; the levels' costs telescope to the exact bytes of the
  final strategy (up to consumers sharing a layout), and level 0 is the one-shot degree-k DP;
  an option that cannot repeat (a dim too small) is costed with R on the remaining levels.
  The result's `comm_bytes` is the exact `levels.comm_bytes` of the (N, m) strategy; `exact`:
  no level's beam overflowed; `coarsen`: every level's DP follows `coarsen_ties`."""
  from simulator.partition import levels
  if space2.k != 2:
    raise ValueError(f"recursive_dp takes the k = 2 space, got degree {space2.k}")
  prefix = np.zeros((graph.num_nodes, 0), np.int64)
  exact, most = True, 1
  for level in range(m):
    allow = levels.level_allowed(space2, prefix, partition)
    tables, groups = _level_tables(space2, prefix, allow, m)
    res = dp(graph, space2, allow, beam=beam, seed=seed,
             ties=coarsen_ties(space2) if coarsen else None, tables=tables, groups=groups)
    exact &= res.exact
    most = max(most, res.states)
    prefix = np.column_stack([prefix, res.strategy])
  return SearchResult(prefix, levels.comm_bytes(space2, prefix), exact, most)


def brute_force_levels(graph: CompGraph, space2: StrategySpace, m: int, partition: bool = True,
                       limit: int = 200_000) -> SearchResult:
  """The exact minimum of `levels.comm_bytes` over every multi-level strategy of 2^m workers
  whose levels each take `levels.level_allowed` options (the choices of `recursive_dp`)."""
  import itertools
  from simulator.partition import levels
  n = graph.num_nodes
  per_op = []
  for v in range(n):
    tuples = [()]
    for _ in range(m):
      nxt = []
      for t in tuples:
        pre = np.zeros((n, len(t)), np.int64)
        pre[v] = t
        ok = levels.level_allowed(space2, pre, partition)[v]
        nxt += [t + (int(o),) for o in ok]
      tuples = nxt
    per_op.append(tuples)
  total = int(np.prod([len(t) for t in per_op], dtype=np.float64))
  if total > limit:
    raise ValueError(f"brute force over {total} multi-level assignments of '{graph.name}' "
                     f"exceeds the limit of {limit}; use a smaller graph")
  out_lays = [[tuple(space2.ops[v].options[o].out for o in t) for t in per_op[v]]
              for v in range(n)]
  in_lays = [[[tuple(space2.ops[v].options[o].ins[p] for o in t) for t in per_op[v]]
              for p in range(len(space2.ops[v].inputs))] for v in range(n)]
  readers = {}
  for v, op in enumerate(space2.ops):
    for p, u in enumerate(op.inputs):
      readers.setdefault(u, []).append((v, p))
  best, best_cost = None, np.inf
  for combo in itertools.product(*[range(len(t)) for t in per_op]):
    cost = 0.0
    for u, rs in readers.items():
      xs = []
      for v, p in rs:
        x = in_lays[v][p][combo[v]]
        if x not in xs:
          xs.append(x)
      cost += space2.out_bytes[u] * levels.producer_fraction(out_lays[u][combo[u]],
                                                             tuple(sorted(xs)), m)
      if cost >= best_cost:
        break
    if cost < best_cost:
      best, best_cost = combo, cost
  strat = np.array([per_op[v][best[v]] for v in range(n)], np.int64).reshape(n, m)
  return SearchResult(strat, float(best_cost), True, total)


def _level_tables(space2: StrategySpace, prefix: np.ndarray, allow, m: int):
  """({(v, p): (L, L) float} exact marginal bytes of each edge at the next level (see
  `recursive_dp`), over layout ids 0..L-1; {(v, p): bit offset} one per distinct earlier need
  of a producer (readers with different earlier needs never share a delivery): the i-th need
  takes the (i % F)-th group of L bits of int64 word i // F of the producer's mask (F = 64 // L
  groups fit in a word; `dp` keeps as many words as the offsets need))."""
  from simulator.partition import levels
  level = prefix.shape[1]
  outs = [[space2.ops[v].options[o].out for o in prefix[v]] for v in range(len(space2.ops))]
  width = 2 + max([len(op.shape) for op in space2.ops] + [max(
      (x - 2 for o in op.options for x in (o.out,) + o.ins if x >= 2), default=0) + 1
      for op in space2.ops])
  tables, groups, seen = {}, {}, {}
  fresh = 64 // width

  def tail(v, head, o, rest, lay_of):
    """head + option o's layout on the remaining levels: repeated where o stays divisible
    when repeated, else once and then R (the tensor is not split further)."""
    lay = int(lay_of(o))
    if rest <= 1 or levels.op_valid(space2, v, list(prefix[v][:len(head)]) + [o] * rest):
      return tuple(head) + (lay,) * rest
    return tuple(head) + (lay,) + (R,) * (rest - 1)

  for v, op in enumerate(space2.ops):
    for p, u in enumerate(op.inputs):
      need = [space2.ops[v].options[o].ins[p] for o in prefix[v]]
      lp, xp = tuple(outs[u]), tuple(need)
      ids = seen.setdefault(u, {})
      ids.setdefault(xp, len(ids))
      word, group = divmod(ids[xp], fresh)
      groups[(v, p)] = 64 * word + group * width
      rest = m - level
      base = 0.0
      if level:
        lp_prev = tail(u, lp[:-1], prefix[u][-1], rest + 1, lambda o: space2.ops[u].options[o].out)
        xp_prev = tail(v, xp[:-1], prefix[v][-1], rest + 1,
                       lambda o: space2.ops[v].options[o].ins[p])
        base = levels.producer_fraction(lp_prev, (xp_prev,), m)
      t = np.zeros((width, width))
      outs_u = {}
      for o in allow[u]:
        a = int(space2.ops[u].options[o].out)
        outs_u[a] = outs_u.get(a) or tail(u, lp, o, rest, lambda o: space2.ops[u].options[o].out)
      ins_v = {}
      for o in allow[v]:
        x = int(space2.ops[v].options[o].ins[p])
        cand = tail(v, xp, o, rest, lambda o: space2.ops[v].options[o].ins[p])
        if x not in ins_v or cand[-1] != R:
          ins_v[x] = cand
      for a, la in outs_u.items():
        for x, lx in ins_v.items():
          t[a, x] = levels.producer_fraction(la, (lx,), m) - base
      tables[(v, p)] = t * space2.out_bytes[u]
  return tables, groups
