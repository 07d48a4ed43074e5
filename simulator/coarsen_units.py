"""Placement units in coarsening: what a placement of a coarse graph can still choose.

A placement chooses one device per *unit*: a colocation class of the coarse graph (coarse
nodes holding members of one original colocation group share a device, and such classes
unite transitively: `colocation_classes`) or an uncolocated coarse node. On a colocated graph
every merge of two groups from different units unites them, so coarsening by weight alone
can leave far fewer units than nodes. PipeDream's profiles colocate each layer's forward op
F_u with its backward op B_u; merging F_u with F_v but not B_v with B_u unites two units for
one node less. ResNet-50 coarsened to 10 nodes had one unit (it could only run on one device),
and Inception-v3, DenseNet-121 and NASNet-Mobile at 16 nodes had 2-3 and did not fit 4 or 8
devices at 0.6x memory.

This module holds the unit-keeping parts of `simulator.coarsen`'s strategies:
  * `merge_keeping_units`: the "trees" merges, free ones (both ends one unit already) first,
    a merge that unites two units promoting those it made free (the mirror merge), and at
    most `costly` uniting merges;
  * `unit_runs`: the "topological" fallback on the sequence of units instead of groups;
  * `level_runs`: the fallback on groups sorted by level and a bin of units, taken where
    `makespan_bound` says the unit cut serialises the graph;
  * `balanced_runs`: the contiguous, weight-and-count-balanced cut both fallbacks use.
A graph without colocation never reaches the first two (`units` is None), so its coarsening is
what it was before units were kept.
"""

from __future__ import annotations

import heapq
from typing import Dict, List, Optional, Tuple

import numpy as np

from simulator import grouping
from simulator.graph import csr


def colocation_classes(coloc: np.ndarray, labels: np.ndarray, m: int) -> np.ndarray:
  """(m,) coarse colocation ids: coarse nodes sharing an original colocation group, united."""
  has = coloc >= 0
  out = -np.ones(m, np.int64)
  if not has.any():
    return out
  parent = list(range(m))
  first: Dict[int, int] = {}
  for c, l in zip(coloc[has].tolist(), labels[has].tolist()):
    if c in first:
      grouping.union(parent, first[c], l)
    else:
      first[c] = l
  roots = grouping.roots(parent)
  touched = np.zeros(m, bool)
  touched[labels[has]] = True
  out[touched] = grouping.canonical(roots[touched])
  return out


def units(coloc: np.ndarray, labels: np.ndarray, m: int) -> Optional[np.ndarray]:
  """(m,) canonical unit id of every group (labels: node -> group); None without colocation."""
  if not (coloc >= 0).any():
    return None
  cls = colocation_classes(coloc, labels, m)
  return grouping.canonical(np.where(cls >= 0, cls, cls.max() + 1 + np.arange(m)))


def merge_keeping_units(unit: np.ndarray, weight: np.ndarray, pairs_a, pairs_b, *,
                        budget: int, order, cap: float,
                        costly: Optional[int] = None) -> Optional[List[int]]:
  """Union-find parents (over the m groups) after at most `budget` merges of group pairs, or
  None if none was made.

  Every candidate k (pairs_a[k], pairs_b[k]) costs 0 (both groups in one unit) or 1 (it unites
  two units). Free ones go first; a merge that unites two units promotes the candidates it
  made free (a small-to-large scan of each unit's candidate list, so O(C log C) in all), so
  the mirror merge B_v -> B_u follows F_u -> F_v. Ties keep `order` (the caller's lightest-
  first order). No merge makes a group heavier than `cap`; at most `costly` (None: any number)
  unite two units. Any subset of the candidates must be safe together, as "trees"' are.
  """
  m = len(unit)
  a, b = np.asarray(pairs_a).tolist(), np.asarray(pairs_b).tolist()
  order = np.asarray(order).tolist()
  rank = {k: i for i, k in enumerate(order)}
  parent, weight = list(range(m)), np.asarray(weight, np.float64).tolist()
  uparent = list(range(int(unit.max()) + 1))
  unit = unit.tolist()
  touching: Dict[int, list] = {}  # unit root -> candidates with an end in it
  for k in order:
    touching.setdefault(unit[a[k]], []).append(k)
    if unit[b[k]] != unit[a[k]]:
      touching.setdefault(unit[b[k]], []).append(k)
  heap = [(int(unit[a[k]] != unit[b[k]]), rank[k], k) for k in order]
  heapq.heapify(heap)
  done, united = 0, 0
  while heap and done < budget:
    _, _, k = heapq.heappop(heap)
    ra, rb = grouping.find(parent, a[k]), grouping.find(parent, b[k])
    if ra == rb or weight[ra] + weight[rb] > cap:
      continue
    ua, ub = grouping.find(uparent, unit[a[k]]), grouping.find(uparent, unit[b[k]])
    if ua != ub and costly is not None and united >= costly:
      break  # the heap holds the free merges first: only uniting ones are left
    parent[max(ra, rb)] = min(ra, rb)
    weight[min(ra, rb)] += weight[max(ra, rb)]
    done += 1
    if ua == ub:
      continue
    united += 1
    small, big = sorted((ua, ub), key=lambda u: len(touching.get(u, ())))
    uparent[small] = big
    for j in touching.get(small, ()):  # the candidates this union made free
      if grouping.find(uparent, unit[a[j]]) == grouping.find(uparent, unit[b[j]]):
        heapq.heappush(heap, (0, rank[j], j))
    touching.setdefault(big, []).extend(touching.pop(small, ()))
  return parent if done else None


def balanced_runs(w: np.ndarray, k: int) -> np.ndarray:
  """(len(w),) run ids 0..k-1 cutting a sequence into k contiguous runs, none empty, balanced
  half by the weights `w` and half by count."""
  n = len(w)
  w = np.asarray(w, np.float64)
  # by count alone where nothing weighs (a scalar here would cut the sequence as ONE run)
  w = (w / w.sum() if w.sum() > 0 else np.zeros(n)) + 1.0 / n
  cum = np.cumsum(w)
  ideal = np.floor((cum - w / 2) / cum[-1] * k).astype(np.int64).tolist()
  run, prev = [], -1
  for j, r in enumerate(ideal):  # follow the ideal cut, one run at a time, none left empty
    prev = max(min(max(r, prev), prev + 1), k - (n - j))
    run.append(prev)
  return np.asarray(run, np.int64)


def unit_runs(m: int, qs: np.ndarray, qr: np.ndarray, weight: np.ndarray, unit: np.ndarray,
              pos: np.ndarray, max_nodes: int) -> np.ndarray:
  """(m,) group labels for a colocated graph (m groups, quotient edges qs -> qr, topological
  positions `pos`): its units in order of their first group cut into as many balanced runs
  as keep at most `max_nodes` nodes once each run's groups are split into acyclic pieces.

  Why: contiguous runs of the group order (the plain fallback) put F_u and B_v of PipeDream's
  colocated pairs in runs that overlap differently, and the runs' colocation chains unite
  nearly every unit (Inception-v3 at 16 nodes: one unit). A run of units is one unit: a few
  nodes (its forward part and its backward part). The number of runs is found by bisection
  and a scan above it (one run is one node, so the search always has an answer). Where that
  leaves fewer than `max_nodes` nodes, each piece is then cut by the plain fallback's runs, as
  many as fit. `simulator.coarsen` keeps the plain cut instead where it has as many units.
  """
  num_units = int(unit.max()) + 1
  first = np.full(num_units, m)
  np.minimum.at(first, unit, pos)
  seq = np.argsort(first, kind="stable")  # units in order of their first group
  where = np.empty(num_units, np.int64)
  where[seq] = np.arange(num_units)
  w = np.bincount(unit, weights=weight, minlength=num_units)[seq]

  def pieces(k):
    return grouping.acyclic_pieces(m, qs, qr, balanced_runs(w, k)[where[unit]])

  # The node count is not monotone in the number of runs: after the bisection, a few larger
  # counts are tried as well (a random DAG of 40 ops at 22 nodes: 6 runs by bisection, 11 fit).
  best = _largest(pieces, min(num_units, max_nodes), max_nodes, scan=UNIT_RUN_SCAN)
  if best.max() + 1 >= max_nodes:
    return best
  # Nodes to spare: refine every piece by the plain fallback's runs of the group order, as
  # many as still fit. A refinement never unites units, so it keeps every unit and adds nodes.
  order = np.argsort(pos, kind="stable")
  plain = np.empty(m, np.int64)

  def refined(k):
    plain[order] = balanced_runs(np.asarray(weight, np.float64)[order], k)
    return grouping.acyclic_pieces(m, qs, qr, best * (k + 1) + plain)

  return _largest(refined, min(m, max_nodes), max_nodes)


UNIT_RUN_SCAN = 32  # run counts tried above the bisection's answer


def _largest(labels_of, hi: int, max_nodes: int, scan: int = 0) -> np.ndarray:
  """labels_of(k) for the largest k in [1, hi] whose labels have at most `max_nodes` ids,
  found by bisection and then among up to `scan` larger k (all of them if that few, else
  evenly spaced); labels_of(1) must have at most `max_nodes` ids."""
  lo, top = 1, hi
  best = labels_of(lo)
  while lo < hi:
    mid = (lo + hi + 1) // 2
    labels = labels_of(mid)
    if labels.max() + 1 <= max_nodes:
      lo, best = mid, labels
    else:
      hi = mid - 1
  if scan and top > lo:
    ks = np.unique(np.linspace(lo + 1, top, min(scan, top - lo)).round().astype(np.int64))
    for k in ks[::-1].tolist():  # the largest fitting one
      labels = labels_of(k)
      if labels.max() + 1 <= max_nodes:
        return labels
  return best


# Bins tried by `level_runs`: the heaviest unit it leaves is about the colocated weight / bins,
# the node count it needs about the levels * (bins + 1).
LEVEL_RUN_BINS = (1, 2, 3, 4, 6, 8)


def levels(m: int, qs: np.ndarray, qr: np.ndarray, pos: np.ndarray) -> np.ndarray:
  """(m,) longest path, in edges, from a source to each of the m groups (topological
  positions `pos`)."""
  lev = [0] * m
  ptr, succ = csr(qs, qr, m)
  ptr, succ = ptr.tolist(), succ.tolist()
  for u in np.argsort(pos, kind="stable").tolist():
    for v in succ[ptr[u]:ptr[u + 1]]:
      lev[v] = max(lev[v], lev[u] + 1)
  return np.asarray(lev, np.int64)


def level_runs(weight: np.ndarray, unit: np.ndarray, colocated: np.ndarray, pos: np.ndarray,
               level: np.ndarray, max_nodes: int, bins: int) -> np.ndarray:
  """(m,) group labels for a colocated graph of m groups (per group: `weight`, `unit`,
  topological position `pos`, `level` from `levels`): the groups sorted by (level, bin,
  position), a topological order, cut into as many balanced runs as fit `max_nodes` and at
  every change of level or bin (labels_of(1) may not fit: the caller checks). `colocated`
  (num_units,) marks the units holding colocated ops; they are dealt to `bins` bins, heaviest
  first into the lightest; the other groups form a bin of their own, which unites nothing.

  Why: `unit_runs` puts whole units in a run, and a unit whose ops lie far apart in depth (the
  random colocation triples of a layered DAG, or units "trees" united) makes a run's pieces
  serial slabs (a layered DAG of 4,097 ops, 300 triples, at 512 nodes: coarse critical path
  3.4 s, against 1.0 s for the same graph without colocation). Here every node lies within one
  level (so any such cut is acyclic) and is as narrow as the plain cut's, and a node's
  colocated ops come from one bin, so the units it unites stay within a bin.
  """
  m = len(unit)
  num_units = int(unit.max()) + 1
  uw = np.bincount(unit, weights=weight, minlength=num_units)
  color, load = -np.ones(num_units, np.int64), np.zeros(bins)
  idx = np.flatnonzero(colocated)
  for u in idx[np.argsort(-uw[idx], kind="stable")].tolist():
    color[u] = int(np.argmin(load))
    load[color[u]] += uw[u]
  key = color[unit] + 1
  seq = np.lexsort((pos, key, level))
  seg = (level * (bins + 1) + key)[seq]
  w = np.asarray(weight, np.float64)[seq]
  out = np.empty(m, np.int64)

  def labels_of(k):
    out[seq] = grouping.canonical(balanced_runs(w, k) * (int(seg.max()) + 1) + seg)
    return out.copy()

  return _largest(labels_of, min(m, max_nodes), max_nodes)


def makespan_bound(qs: np.ndarray, qr: np.ndarray, weight: np.ndarray, labels: np.ndarray,
                   unit_of) -> Tuple[float, float]:
  """(coarse critical path by `weight`, heaviest unit) of the groups `labels` (group -> coarse
  node); unit_of(labels, m) gives the units. Their max bounds any schedule from below, however
  many devices (one device runs a unit's nodes one after another)."""
  m = int(labels.max()) + 1
  w = np.bincount(labels, weights=weight, minlength=m)
  cs, cr = grouping.quotient(qs, qr, labels)
  ptr, succ = csr(cs, cr, m)
  ptr, succ, wl = ptr.tolist(), succ.tolist(), w.tolist()
  indeg = np.bincount(cr, minlength=m).tolist()
  top = [0.0] * m  # longest path ending at each node, the node included
  ready = [u for u in range(m) if indeg[u] == 0]
  while ready:
    u = ready.pop()
    top[u] += wl[u]
    for v in succ[ptr[u]:ptr[u + 1]]:
      top[v] = max(top[v], top[u])
      indeg[v] -= 1
      if indeg[v] == 0:
        ready.append(v)
  unit = unit_of(labels, m)
  heaviest = np.bincount(unit, weights=w).max() if unit is not None else w.max()
  return max(top), float(heaviest)
