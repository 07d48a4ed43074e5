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
assignment (vectorised) for graphs of a few ops.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence

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


def dp(graph: CompGraph, space: StrategySpace, allowed: Optional[Sequence] = None,
       beam: int = 256, seed: int = 0) -> SearchResult:
  """Tofu's dynamic program over the topological order (module docstring).

  Args:
    allowed: per op, the option ids it may take (None: all).
    beam: the most states kept at a cut.
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
  rng = np.random.default_rng(seed)
  salt = rng.integers(1, 2**62, size=(2, n), dtype=np.int64) | 1
  opt = np.zeros((1, n), np.int64)  # option of every op per state
  lay = np.zeros((1, n), np.int64)  # output layout of every op per state
  paid = np.zeros((1, n), np.int64)  # bitmask of layouts delivered per producer per state
  cost = np.zeros(1)
  exact, most = True, 1
  for t, v in enumerate(order.tolist()):
    choices = allow[v]
    b, c = opt.shape[0], choices.size
    cand = np.repeat(cost[:, None], c, axis=1)
    new_bits = {}
    inputs = space.ops[v].inputs
    for p, u in enumerate(inputs):
      x = in_lay[v][choices, p]  # (c,) layout needed of u
      src = out_lay[u][opt[:, u]]  # (b,)
      fresh = ((paid[:, u, None] >> x[None, :]) & 1) == 0
      dup = np.zeros(c, bool)  # an earlier input position of v already asked u for x
      for q in range(p):
        if inputs[q] == u:
          dup |= in_lay[v][choices, q] == x
      charge = transfer_table(src[:, None], x[None, :], space.out_bytes[u], k)
      cand += np.where(fresh & ~dup[None, :], charge, 0.0)
      new_bits[u] = new_bits.get(u, 0) | (np.int64(1) << x)
    rows, cols = np.divmod(np.arange(b * c), c)
    flat = cand.reshape(-1)
    # State key after the step: live ops' options' layouts and paid masks.
    live = order[: t + 1][last_use[order[: t + 1]] > t]
    lay_live = lay[rows][:, live]
    paid_live = paid[rows][:, live]
    if live.size:
      lay_live[:, live == v] = out_lay[v][choices[cols]][:, None]
      for u, bits in new_bits.items():
        paid_live[:, live == u] |= bits[cols][:, None]
    key = lay_live @ salt[0, live] + paid_live @ salt[1, live]  # wraps: a hash
    idx = np.lexsort((np.arange(b * c), flat))
    _, first = np.unique(key[idx], return_index=True)
    keep = idx[np.sort(first)]
    keep = keep[np.argsort(flat[keep], kind="stable")]
    most = max(most, keep.size)
    if keep.size > beam:
      exact = False
      keep = keep[:beam]
    r, cc = rows[keep], cols[keep]
    opt, lay, paid, cost = opt[r], lay[r], paid[r], flat[keep]
    opt[:, v] = choices[cc]
    lay[:, v] = out_lay[v][choices[cc]]
    for u, bits in new_bits.items():
      paid[:, u] |= bits[cc]
  best = int(np.argmin(cost))
  return SearchResult(opt[best].copy(), float(cost[best]), exact, int(most))


def brute_force(graph: CompGraph, space: StrategySpace, allowed: Optional[Sequence] = None,
                limit: int = 200_000) -> SearchResult:
  """The exact minimum of `comm_bytes` by enumerating every assignment (at most `limit`)."""
  allow = _allowed(space, allowed)
  total = int(np.prod([a.size for a in allow], dtype=np.float64))
  if total > limit:
    raise ValueError(f"brute force over {total} assignments of '{graph.name}' exceeds the "
                     f"limit of {limit}; use a smaller graph")
  out_lay, in_lay = _tables(space)
  grid = np.stack(np.meshgrid(*allow, indexing="ij"), -1).reshape(-1, graph.num_nodes)
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
