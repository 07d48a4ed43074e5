"""Alternative bounds of a merged op's bytes for `simulator.coarsen.contract`.

Why a module of its own: `contract`'s default rules ("sum") overstate a large group's temp
bytes (every internal value live at once) and its transfers (every external output sent to
every consumer device); the large-graph path of the learned methods uses these tighter
bounds (rules and a worked example in simulator/coarsen.py's docstring and docs/design.md
section 7). Both are vectorised numpy over the original graph, O(N log N + E log E).
"""

from __future__ import annotations

import numpy as np

from simulator.graph import CompGraph


def peak_internal_bytes(graph: CompGraph, labels: np.ndarray, external: np.ndarray,
                        m: int) -> np.ndarray:
  """(m,) per group: the peak over its members, run in the graph's topological order on one
  device, of the member's temp_bytes + the internal outputs (not `external`) live then: from
  their producer's step through their last consumer's step, both included."""
  n = graph.num_nodes
  pos = np.empty(n, np.int64)
  pos[graph.topological_order()] = np.arange(n)
  seq = np.lexsort((pos, labels))  # group-major, topological within a group
  step = np.empty(n, np.int64)
  step[seq] = np.arange(n)
  s, r = graph.senders.astype(np.int64), graph.receivers.astype(np.int64)
  inside = labels[s] == labels[r]
  last = step.copy()
  np.maximum.at(last, s[inside], step[r[inside]])
  held = np.where(external, 0.0, np.asarray(graph.out_bytes, np.float64))
  delta = np.zeros(n + 1)
  np.add.at(delta, step, held)
  np.add.at(delta, last + 1, -held)
  live = np.cumsum(delta)[:n] + np.asarray(graph.temp_bytes, np.float64)[seq]
  peak = np.zeros(m)
  np.maximum.at(peak, labels[seq], live)
  return peak


def edge_out_bytes(graph: CompGraph, labels: np.ndarray, sink: np.ndarray, m: int,
                   how: str) -> np.ndarray:
  """(m,) per group: the bytes one consumer group reads from it (distinct producing members'
  out_bytes), the max or mean over its consumer groups, + its members' unread outputs."""
  s, r = graph.senders.astype(np.int64), graph.receivers.astype(np.int64)
  cross = labels[s] != labels[r]
  pairs = np.unique(s[cross] * m + labels[r[cross]])  # distinct (producer, consumer group)
  prod, cons = pairs // m, pairs % m
  key, inv = np.unique(labels[prod] * m + cons, return_inverse=True)  # (group, consumer group)
  edge = np.bincount(inv, weights=np.asarray(graph.out_bytes, np.float64)[prod])
  src = key // m
  out = np.zeros(m)
  if how == "edge_max":
    np.maximum.at(out, src, edge)
  else:
    out = np.bincount(src, weights=edge, minlength=m) / np.maximum(
        np.bincount(src, minlength=m), 1)
  return out + np.bincount(labels, weights=np.where(sink, graph.out_bytes, 0.0), minlength=m)
