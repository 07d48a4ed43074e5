"""Group ids over the nodes of a DAG: the primitives that coarsening and fusion matching share.

A grouping is an (N,) int array, node -> group id. This module holds what is true of any
grouping, whatever the nodes cost:
  * `canonical`: ids renumbered 0..G-1 in order of each group's smallest member (the one form
    every grouping is compared and contracted in); `check_groups` validates and canonicalises.
  * `quotient`: the distinct edges between different groups (the group graph).
  * `union` / `find` / `roots`: a union-find over group ids (path compression, the smaller id
    becomes the root), for merging groups pair by pair.
  * `acyclic_pieces` / `acyclic_groups`: groups split, minimally-greedily, so that contracting
    them keeps the DAG acyclic (the rule in `acyclic_pieces`).

Separate from `simulator.coarsen` because that module is about the merge rules (how a group's
costs and bytes add up, `contract`) and the strategies that choose groups (`coarsen`); these
primitives work on plain (senders, receivers, labels) arrays, know nothing of costs, and also
serve XLA's fusion groups (`simulator.frontends.xla` repairs its matched groups with
`acyclic_groups`). `simulator.coarsen` re-exports `acyclic_pieces` and `acyclic_groups`.
"""

from __future__ import annotations

from collections import deque
from typing import Dict, List, Tuple

import numpy as np

from simulator.graph import CompGraph, csr


def canonical(groups: np.ndarray) -> np.ndarray:
  """Group ids renumbered 0..G-1 in order of each group's smallest member."""
  _, first, inv = np.unique(groups, return_index=True, return_inverse=True)
  return np.argsort(np.argsort(first))[inv].astype(np.int64)


def check_groups(graph: CompGraph, groups) -> np.ndarray:
  """`canonical` ids of `groups`; ValueError unless it holds one integer id per node of `graph`."""
  g = np.asarray(groups)
  if g.shape != (graph.num_nodes,):
    raise ValueError(f"groups must have shape ({graph.num_nodes},) (one id per node of "
                     f"'{graph.name}'), got {g.shape}")
  if g.size and not np.issubdtype(g.dtype, np.integer):
    raise ValueError(f"groups must be integers, got dtype {g.dtype}")
  return canonical(g.astype(np.int64))


def quotient(senders, receivers, labels) -> Tuple[np.ndarray, np.ndarray]:
  """Distinct edges between different groups."""
  s, r = labels[senders], labels[receivers]
  keep = s != r
  if not keep.any():
    return np.zeros(0, np.int64), np.zeros(0, np.int64)
  m = int(labels.max()) + 1
  key = np.unique(s[keep] * m + r[keep])
  return key // m, key % m


def union(parent: List[int], a: int, b: int) -> bool:
  """Joins the sets of a and b (the smaller root stays); False if they were one already."""
  ra, rb = find(parent, a), find(parent, b)
  if ra == rb:
    return False
  parent[max(ra, rb)] = min(ra, rb)
  return True


def find(parent: List[int], a: int) -> int:
  """The root of a's set, compressing the path to it."""
  root = a
  while parent[root] != root:
    root = parent[root]
  while parent[a] != root:
    parent[a], a = root, parent[a]
  return root


def roots(parent: List[int]) -> np.ndarray:
  """(len(parent),) the root of every element."""
  return np.array([find(parent, i) for i in range(len(parent))], np.int64)


def acyclic_pieces(n: int, senders, receivers, groups) -> np.ndarray:
  """Splits groups so that contracting them keeps a DAG acyclic; ids in a topological order.

  Groups are emitted in a Kahn order over groups; when every remaining group waits on another
  (a cycle among groups), the group of a ready node gives up, as a group of its own, the part
  of it that is ready now (the members whose predecessors are all done or in that part)
  restricted to what other groups wait on (the members of that part that feed a node outside
  the group, and their ancestors within the part). So a shared producer wrongly placed in one
  group leaves alone, and a group that spans a loss (forward and backward ops) splits in two.
  Groups that take part in no cycle are kept whole. O(N + E) plus the peeled parts.
  """
  senders = np.asarray(senders, np.int64)
  receivers = np.asarray(receivers, np.int64)
  groups = canonical(np.asarray(groups, np.int64))
  n_groups = int(groups.max()) + 1 if n else 0
  ext = groups[senders] != groups[receivers]
  ext_missing = np.bincount(groups[receivers[ext]], minlength=n_groups).tolist()
  pred_left = np.bincount(receivers, minlength=n).tolist()
  ptr, succ = csr(senders, receivers, n)
  ptr, succ = ptr.tolist(), succ.tolist()
  gptr, members = csr(groups, np.arange(n), n_groups)
  gptr, members = gptr.tolist(), members.tolist()
  grp = groups.tolist()
  done, out = [False] * n, [0] * n
  queue = deque(g for g in range(n_groups) if ext_missing[g] == 0)
  queued = [ext_missing[g] == 0 for g in range(n_groups)]
  ready = [u for u in range(n) if pred_left[u] == 0]  # nodes whose predecessors are all done
  ready_in: List[List[int]] = [[] for _ in range(n_groups)]  # the same, per group (may hold
  for u in ready:                                            # done nodes: filtered at a peel)
    ready_in[grp[u]].append(u)
  next_id, emitted = 0, 0

  def emit(nodes):
    nonlocal next_id, emitted
    for u in nodes:
      done[u], out[u] = True, next_id
    for u in nodes:
      for v in succ[ptr[u]:ptr[u + 1]]:
        pred_left[v] -= 1
        if pred_left[v] == 0:
          ready.append(v)
          ready_in[grp[v]].append(v)
        gv = grp[v]
        if gv != grp[u]:
          ext_missing[gv] -= 1
          if ext_missing[gv] == 0 and not queued[gv]:
            queued[gv] = True
            queue.append(gv)
    next_id += 1
    emitted += len(nodes)

  while emitted < n:
    if queue:
      g = queue.popleft()
      rest = [u for u in members[gptr[g]:gptr[g + 1]] if not done[u]]
      if rest:
        emit(rest)
      continue
    while done[ready[-1]]:
      ready.pop()
    g = grp[ready[-1]]  # deadlock: peel off the part of g that can run now
    # Its members that are ready and not done, in id order (members are), then what they
    # make ready inside g; predecessor counts are copied only for the members reached, so a
    # peel costs its part, not the whole group (a group of 10^4 ops peeled 10^4 times was
    # quadratic).
    stack = sorted(set(u for u in ready_in[g] if not done[u]))
    ready_in[g] = list(stack)
    left: Dict[int, int] = {}
    part = []
    while stack:  # the ready part, in a topological order
      u = stack.pop()
      part.append(u)
      for v in succ[ptr[u]:ptr[u + 1]]:
        if grp[v] == g and not done[v]:
          left[v] = left.get(v, pred_left[v]) - 1
          if left[v] == 0:
            stack.append(v)
    needed, in_part = set(), set(part)  # what other groups wait on: feeders of outside nodes
    for u in reversed(part):
      if any(grp[v] != g or v in needed for v in succ[ptr[u]:ptr[u + 1]] if v in in_part
             or grp[v] != g):
        needed.add(u)
    emit([u for u in part if u in needed] or part)
  return np.asarray(out, np.int64)


def acyclic_groups(graph: CompGraph, groups) -> np.ndarray:
  """(N,) group ids, split as needed so that `simulator.coarsen.contract(graph, ...)` is
  acyclic."""
  return canonical(acyclic_pieces(graph.num_nodes, graph.senders, graph.receivers,
                                   check_groups(graph, groups)))


__all__ = ["canonical", "check_groups", "quotient", "union", "find", "roots", "acyclic_pieces",
           "acyclic_groups"]
