"""METIS graph partitioning as a placement baseline (the classic min-cut split).

The computation graph is taken as undirected; each colocation group is merged into one vertex
first (so the group lands on one device, rule 1). Vertex weight = summed op cost, edge weight =
bytes the edge moves (the sender's out_bytes, summed over merged parallel edges), both scaled to
positive integers as METIS requires. METIS (via pymetis) cuts the graph into D parts of balanced
weight while minimising the cut; with `speed_weights`, target part weights are proportional to
device speeds. Parts are then mapped to devices by rank: the heaviest part to the fastest
device. Scheduling is left to the default critical-path priority.
"""

from __future__ import annotations

import numpy as np
import pymetis

from go_jax.methods import Problem, Proposal, register
from simulator.graph import csr

_WEIGHT_TOTAL = 1e7  # scaled vertex / edge weights sum to about this (fits METIS' 32-bit ints)


def _scaled(values: np.ndarray) -> np.ndarray:
  """Non-negative floats to integers >= 1 with the same proportions (about 1e7 in total)."""
  values = np.asarray(values, np.float64)
  total = values.sum()
  if total <= 0:
    return np.ones(values.shape, np.int64)
  return np.maximum(1, np.round(values * (_WEIGHT_TOTAL / total))).astype(np.int64)


def contracted_graph(graph):
  """Colocation groups merged: (vertex of each op (N,), vertex costs (V,), undirected edges
  as a dict {(a, b): bytes} with a < b)."""
  root = graph.colocation_root()
  roots, vertex = np.unique(root, return_inverse=True)
  cost = np.zeros(len(roots))
  np.add.at(cost, vertex, graph.cost)
  edges = {}
  for u, v in zip(graph.senders.tolist(), graph.receivers.tolist()):
    a, b = int(vertex[u]), int(vertex[v])
    if a == b:
      continue
    key = (min(a, b), max(a, b))
    edges[key] = edges.get(key, 0.0) + float(graph.out_bytes[u])
  return vertex, cost, edges


def _csr(num_vertices: int, edges):
  """Symmetric CSR (xadj, adjncy, eweights) lists of the undirected weighted graph.

  Each vertex's neighbours come in ascending order (what METIS is given does not depend on the
  order the edges were found in).
  """
  keys = np.array(list(edges), np.int64).reshape(-1, 2)
  weights = _scaled(np.array([edges[k] for k in edges])) if len(keys) else np.zeros(0, np.int64)
  src = np.concatenate([keys[:, 0], keys[:, 1]])
  dst = np.concatenate([keys[:, 1], keys[:, 0]])
  by_dst = np.argsort(dst, kind="stable")  # csr is stable: rows come out ascending
  xadj, adjncy, ew = csr(src[by_dst], dst[by_dst], num_vertices,
                         np.concatenate([weights, weights])[by_dst])
  return xadj.tolist(), adjncy.tolist(), ew.tolist()


@register("metis", "placement",
          "METIS k-way min-cut partition (cost-balanced, speed-weighted), heaviest part on the "
          "fastest device", seed=0, ufactor=30, speed_weights=True)
def metis(problem: Problem, config) -> Proposal:
  """Config: seed (METIS' random seed; the problem seed is added), ufactor (allowed imbalance
  in 1/1000: 30 = parts up to 3% over target), speed_weights (targets proportional to speed).
  info: part_weights (seconds at speed 1 per device), edge_cut_bytes, vertices."""
  (place, info), = metis_placements(problem.graph, problem.topology,
                                    [int(config["seed"]) + int(problem.seed)],
                                    int(config["ufactor"]), bool(config["speed_weights"]))
  return Proposal(place, info=info)


def metis_placements(g, topo, seeds, ufactor: int = 30, speed_weights: bool = True):
  """[(placement (N,) int64, info)] of `metis` with each METIS seed in `seeds` (the problem's
  seed already added): the contraction and CSR are built once for all of them."""
  d = topo.num_devices
  if ufactor < 1:
    raise ValueError(f"metis: ufactor must be >= 1 (imbalance in 1/1000), got {ufactor}")
  vertex, cost, edges = contracted_graph(g)
  nv = len(cost)
  by_speed = np.argsort(-topo.speed, kind="stable")  # fastest device first
  out = []
  csr_lists = _csr(nv, edges) if d > 1 and nv > d else None
  for seed in seeds:
    if d == 1:
      part = np.zeros(nv, np.int64)
      note = "one device"
    elif nv <= d:  # one vertex per part: heaviest vertex first
      part = np.empty(nv, np.int64)
      part[np.argsort(-cost, kind="stable")] = np.arange(nv)
      note = f"{nv} vertices <= {d} devices: one per part"
    else:
      xadj, adjncy, ew = csr_lists
      tpwgts = None
      if speed_weights and np.ptp(topo.speed) > 0:
        frac = topo.speed[by_speed] / topo.speed.sum()  # part p is meant for the p-th fastest
        tpwgts = (frac / frac.sum()).tolist()  # pymetis >= 2025 warns unless they sum to 1
      # METIS takes a C int: an option's seed offset plus a problem seed near methods.MAX_SEED
      # went past it (pymetis read some other seed, or raised); it wraps to the seed's last 31 bits.
      opts = pymetis.Options(seed=int(seed) % 2**31, ufactor=int(ufactor))
      if hasattr(pymetis, "CSRAdjacency"):  # pymetis >= 2025 deprecates the xadj/adjncy keywords
        graph = {"adjacency": pymetis.CSRAdjacency(xadj, adjncy)}
      else:
        graph = {"xadj": xadj, "adjncy": adjncy}
      _, parts = pymetis.part_graph(d, **graph, vweights=_scaled(cost).tolist(),
                                    eweights=ew or None, tpwgts=tpwgts, options=opts)
      part = np.asarray(parts, np.int64)
      note = "metis"
    load = np.bincount(part, weights=cost, minlength=d)
    rank = np.empty(d, np.int64)  # part -> device: heaviest part to the fastest device
    rank[np.argsort(-load, kind="stable")] = np.arange(d)
    dev_of_part = by_speed[rank]
    place = dev_of_part[part][vertex]
    cut = sum(w for (a, b), w in edges.items() if part[a] != part[b])
    info = {"part_weights": np.bincount(place, weights=g.cost, minlength=d).tolist(),
            "edge_cut_bytes": float(cut), "vertices": nv, "mode": note}
    out.append((place.astype(np.int64), info))
  return out
