"""Host-side padding of CompGraphs to power-of-two size buckets, with masks.

The jitted simulator compiles once per (node bucket, edge bucket, edge chunk, tree shape); every
graph that pads to the same bucket reuses that executable. The edge chunk is chosen per graph
(`choose_chunk`), but a chunk already chosen for the same padded sizes in this process is kept
while it costs at most CHUNK_TOLERANCE more, so that near-ties do not compile every program of
a bucket again (the chunk changes no result, only the loop's speed). Everything the simulator
loop needs from the graph (successor CSR, predecessor counts, the exact loop trip count) is
precomputed here with numpy so the jitted code does no graph analysis of its own.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import flax
import jax.numpy as jnp
import numpy as np

from simulator.graph import CompGraph

MIN_BUCKET = 8
CHUNKS = (1, 2, 4, 8, 16)
# A chunk already chosen for a padded size (Np, Ep) is reused while its modelled cost is within
# this share of the best chunk's: neighbouring chunks' costs are often within a few percent, and
# a different chunk recompiles every program of the bucket (simulator, searches, policies).
CHUNK_TOLERANCE = 0.1
_BUCKET_CHUNKS: Dict[Tuple[int, int], List[int]] = {}  # (Np, Ep) -> chunks chosen so far


def bucket(n: int, minimum: int = MIN_BUCKET) -> int:
  """Smallest power of two >= max(n, minimum)."""
  return max(minimum, 1 << max(0, int(n) - 1).bit_length())


def batch_bucket(b: int, coarse: int = 1024) -> int:
  """Batch size to pad B actions to: a power of two up to `coarse`, then a multiple of it.

  Bounds recompilation for varying B while wasting at most `coarse` rows on large batches
  (a power of two would pad 5,000 actions to 8,192).
  """
  return bucket(b, 1) if b <= coarse else -(-int(b) // coarse) * coarse


@flax.struct.dataclass
class PaddedGraph:
  """A CompGraph padded to Np nodes and Ep edges; padded nodes never run and weigh nothing."""
  cost: jnp.ndarray  # (Np,) seconds at speed 1; 0 on padding
  out_bytes: jnp.ndarray  # (Np,) bytes
  param_bytes: jnp.ndarray  # (Np,) bytes
  temp_bytes: jnp.ndarray  # (Np,) bytes
  coloc_root: jnp.ndarray  # (Np,) int32 lowest op id of the op's colocation group
  node_mask: jnp.ndarray  # (Np,) bool, True on real nodes
  num_preds: jnp.ndarray  # (Np,) int32 in-degree
  succ_ptr: jnp.ndarray  # (Np + 1,) int32 CSR: successors of u are succ[succ_ptr[u]:succ_ptr[u+1]]
  senders: jnp.ndarray  # (Ep,) int32, sorted (CSR order); 0 on padding
  receivers: jnp.ndarray  # (Ep,) int32 (= succ); 0 on padding
  edge_mask: jnp.ndarray  # (Ep,) bool
  num_iters: jnp.ndarray  # () int32 exact trip count of the simulator loop for `chunk`
  chunk: int = flax.struct.field(pytree_node=False, default=4)  # successor edges per iteration
  # Per-op fusion inputs (`simulator.fusion.PaddedTables`), present when padded with
  # `fusion=True`; `simulate_padded(..., fuse=...)` needs them.
  fusion: Optional[object] = None

  @property
  def num_nodes_padded(self) -> int:
    return int(self.cost.shape[-1])


def loop_iterations(out_degree: np.ndarray, chunk: int) -> int:
  """Trip count of the simulator loop: each op holds the loop for ceil(outdeg / chunk) >= 1."""
  return int(np.maximum(1, -(-np.asarray(out_degree) // chunk)).sum())


def choose_chunk(out_degree: np.ndarray, commit_weight: float = 6.0,
                 sizes: Optional[Tuple[int, int]] = None) -> int:
  """Edge chunk minimising iterations * (commit work + chunk edge work).

  A commit (device choice, tree descent, transfers) costs roughly `commit_weight` times the
  work of one successor update, a figure measured on CPU with `experiments/bench_simulator.py`.
  With the padded `sizes` (Np, Ep), the first chunk already chosen for them in this process
  whose cost is within CHUNK_TOLERANCE of the best is kept (one compile per bucket).
  """
  costs = [loop_iterations(out_degree, k) * (commit_weight + k) for k in CHUNKS]
  best = int(np.argmin(costs))
  if sizes is None:
    return CHUNKS[best]
  chosen = _BUCKET_CHUNKS.setdefault((int(sizes[0]), int(sizes[1])), [])
  for k in chosen:
    if costs[CHUNKS.index(k)] <= (1.0 + CHUNK_TOLERANCE) * costs[best]:
      return k
  chosen.append(CHUNKS[best])
  return CHUNKS[best]


def pad_graph(graph: CompGraph, num_nodes: Optional[int] = None,
              num_edges: Optional[int] = None, chunk: Optional[int] = None,
              fusion: bool = False) -> PaddedGraph:
  """Pads `graph` to the given sizes (default: its power-of-two buckets).

  With `fusion`, also its fusion tables (design.md 4.1; the graph must have a cost reference).
  """
  n, e = graph.num_nodes, graph.num_edges
  np_ = bucket(n) if num_nodes is None else int(num_nodes)
  ep = bucket(e) if num_edges is None else int(num_edges)
  if np_ < n or ep < e:
    raise ValueError(f"graph '{graph.name}' ({n} nodes, {e} edges) does not fit the padded "
                     f"size ({np_} nodes, {ep} edges)")
  outdeg = graph.out_degree()
  chunk = choose_chunk(outdeg, sizes=(np_, ep)) if chunk is None else int(chunk)
  if chunk < 1:
    raise ValueError(f"chunk must be >= 1, got {chunk}")

  def vec(x, dtype, fill=0):
    out = np.full(np_, fill, dtype)
    out[:n] = x
    return out

  def evec(x):
    out = np.zeros(ep, np.int32)
    out[:e] = x
    return out

  ptr, _ = graph.successor_csr()
  succ_ptr = np.full(np_ + 1, e, np.int32)
  succ_ptr[:n + 1] = ptr
  return PaddedGraph(
      cost=jnp.asarray(vec(graph.cost, np.float64)),
      out_bytes=jnp.asarray(vec(graph.out_bytes, np.float64)),
      param_bytes=jnp.asarray(vec(graph.param_bytes, np.float64)),
      temp_bytes=jnp.asarray(vec(graph.temp_bytes, np.float64)),
      coloc_root=jnp.asarray(np.concatenate([graph.colocation_root(),
                                             np.arange(n, np_)]).astype(np.int32)),
      node_mask=jnp.asarray(np.arange(np_) < n),
      num_preds=jnp.asarray(vec(graph.in_degree(), np.int32)),
      succ_ptr=jnp.asarray(succ_ptr),
      senders=jnp.asarray(evec(graph.senders)),
      receivers=jnp.asarray(evec(graph.receivers)),
      edge_mask=jnp.asarray(np.arange(ep) < e),
      num_iters=jnp.asarray(loop_iterations(outdeg, chunk), jnp.int32),
      chunk=chunk, fusion=_fusion_tables(graph, np_) if fusion else None)


def _fusion_tables(graph: CompGraph, num_nodes: int):
  from simulator import fusion  # local: fusion imports this module's users
  return fusion.pad_tables(graph, num_nodes)


def pad_graphs(graphs: Sequence[CompGraph]) -> PaddedGraph:
  """Pads several graphs to one common bucket and stacks them (leading axis G) for vmap."""
  if not graphs:
    raise ValueError("pad_graphs needs at least one graph")
  np_ = bucket(max(g.num_nodes for g in graphs))
  ep = bucket(max(g.num_edges for g in graphs))
  chunk = choose_chunk(np.concatenate([g.out_degree() for g in graphs]), sizes=(np_, ep))
  padded = [pad_graph(g, np_, ep, chunk) for g in graphs]
  import jax  # local: tree utilities only
  return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *padded)


def tree_shape(num_nodes_padded: int) -> tuple:
  """(levels L, arity A) of the per-device min-trees: A**L >= Np with few, wide levels."""
  levels = 2 if num_nodes_padded <= 1 << 14 else 3
  arity = 1 << math.ceil(math.log2(num_nodes_padded) / levels)
  return levels, max(arity, 2)
