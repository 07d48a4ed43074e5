"""XLA's own schedule and fusion, read from its optimised module, as baselines (design.md 6).

Why: a learned or searched schedule / fusion should be compared with what XLA itself does on
the same program. Both are read from the post-optimisation HLO (`from_jax_full(fn, *args,
stage="post")`) and carried onto the graphs the methods work on.

* `xla_schedule_priority(post)`: a scheduled module (`is_scheduled=true` in its header) prints
  the ENTRY computation in XLA's execution order. Priority = minus that position, so on one
  device `simulate` runs the nodes in exactly that order: every order prefix is a set closed
  under predecessors, so when the previous node finishes, the next one in the order is known
  and ready (all its producers ran on the same device), and it has the highest priority of the
  known ones.

* `match_fusions(pre, post)` / `xla_fusion_groups(pre, post)`: XLA's fusion groups mapped back
  onto the pre-optimisation graph. Every post node (a fusion, or a lone instruction) is one
  group; a pre node joins the group of the post node that holds "the same" instruction. The
  matching rule, in order of decreasing strictness (a level only sees nodes the earlier ones
  left unmatched):
    0. same opcode, instruction name and op_name (XLA keeps some names, e.g. of a `while`);
    1. same opcode, JAX op_name metadata and source location (the resolved stack frame);
    2. same op_name and source location (XLA rewrote the op, e.g. subtract -> add);
    3. a pre node that runs a computation (a nested jit `call` XLA inlined, a `while`): keyed
       by its first inner instruction with a level-1 (else level-2) key XLA kept;
    4. not metadata but structure, for the nodes levels 0-3 leave unmatched: a node whose
       consumers all went to one post node joins it (JAX emits broadcasts of constants without
       metadata, XLA fuses them into their consumers; a reshape XLA turned into a bitcast).
  Several pre nodes can share a key (a Python loop or a tree_map builds the same op at one
  source line) and several post nodes can hold it (those, or XLA duplicating a cheap producer
  into each consumer fusion). Such ambiguous nodes are assigned after the others, growing out
  from them: the node with the most already-matched graph neighbours goes first, to the
  candidate post node most of its neighbours with another key went to; failing those, most of
  its same-key neighbours among the candidates still holding an unused instance of the key
  (so the iterations of a loop spread over XLA's copies); else by rank (the r-th of m pre nodes
  with the key, in graph order -> the (r * k // m)-th of the k post instances, in schedule
  order).
  Limits: ops JAX emits without op_name metadata, and ops XLA removes (constant folding, CSE,
  algebraic simplification) or creates anew, cannot be matched and become singletons; the rank
  rule can pair wrongly where XLA reorders same-key ops, and a producer XLA duplicated into
  several fusions can sit in only one group. Whatever the pairing, the groups are repaired to
  keep the contracted graph acyclic (`simulator.grouping.acyclic_groups`: a group on a cycle of
  the group graph gives up the part the others wait on); an ambiguous node split off alone that
  way (typically a producer XLA duplicated) is matched again avoiding that post node (up to
  REPAIR_ROUNDS passes; the pass with the fewest split post nodes is kept).
  `FusionMatch.split_groups` counts the post nodes whose pre nodes still fall into several
  groups. Where no pre node matches at all, a ValueError says why: XLA's module keeps no op
  metadata of the program's ops (its instructions named: `jnp.cumsum` alone, ops on zero-size
  arrays), or the two modules' op_names agree but not their opcodes and places (two programs).
"""

from __future__ import annotations

import dataclasses
import heapq
from typing import Dict, List, Tuple

import numpy as np

from simulator.grouping import acyclic_groups
from simulator.frontends.hlo import HloGraph

REPAIR_ROUNDS = 4  # matching passes: each re-places the ambiguous nodes the repair split off


def xla_schedule_priority(post: HloGraph) -> np.ndarray:
  """(N,) float priority reproducing XLA's schedule of a post-optimisation module.

  Raises:
    ValueError: the module is not scheduled (e.g. a pre-optimisation module).
  """
  if not isinstance(post, HloGraph):
    raise ValueError(f"xla_schedule_priority needs an HloGraph (from_jax_full(..., "
                     f"stage='post')), got {type(post).__name__}")
  if not post.is_scheduled or post.positions is None:
    raise ValueError(f"HLO module of graph '{post.graph.name}' is not scheduled (no "
                     f"is_scheduled=true in its header): XLA's order exists only after its "
                     f"passes; build the graph with stage='post'")
  return -np.asarray(post.positions, np.float64)


@dataclasses.dataclass(frozen=True)
class FusionMatch:
  """XLA's fusion groups carried onto a pre-optimisation graph."""
  groups: np.ndarray     # (N_pre,) int group id, 0..G-1 (ids in order of smallest member)
  post_node: np.ndarray  # (N_pre,) int matched post node, -1 where unmatched
  level: np.ndarray      # (N_pre,) int matching level 0-4 (see module doc), -1 unmatched
  split_groups: int      # post nodes whose pre nodes were split into pieces (acyclicity)

  @property
  def fraction_mapped(self) -> float:
    """Fraction of pre nodes placed in the group of a post node."""
    return float(np.mean(self.post_node >= 0))

  @property
  def fraction_by_metadata(self) -> float:
    """Fraction of pre nodes matched by metadata (levels 0-3, not the structural level 4)."""
    return float(np.mean((self.post_node >= 0) & (self.level < 4)))


def _index(members: List[tuple], key_fn) -> Dict[tuple, List[int]]:
  """key -> flat ids of the post instruction occurrences with that key (schedule order)."""
  out: Dict[tuple, List[int]] = {}
  for e, m in enumerate(members):
    k = key_fn(m)
    if k is not None:
      out.setdefault(k, []).append(e)
  return out


def _occurrences(post: HloGraph) -> Tuple[np.ndarray, List[tuple]]:
  """Every instruction a post node stands for: (owner post node (E,), members)."""
  owner, members = [], []
  for j in np.argsort(post.positions, kind="stable"):
    own = (post.opcodes[j], post.inst_names[j], post.op_names[j], post.sources[j])
    mine = list(post.inner[j]) if post.opcodes[j] == "fusion" else [own, *post.inner[j]]
    owner.extend([int(j)] * len(mine))
    members.extend(mine)
  return np.asarray(owner, np.int64), members


_KEYS = {  # level -> key of a (opcode, name, op_name, source) member; None: unusable
    0: lambda m: (m[0], m[1], m[2]),
    1: lambda m: (m[0], m[2], m[3]) if m[2] else None,
    2: lambda m: (m[2], m[3]) if m[2] else None,
}


def _resolve_ambiguous(g, cands, keyof, owner, post_node, banned):
  """Assigns the nodes whose key several post nodes hold, growing out from the matched ones
  (rules in the module docstring); `banned[i]`: post nodes node i must avoid if it can."""
  ptr_s, succ = g.successor_csr()
  ptr_p, pred = g.predecessor_csr()
  nbrs = lambda i: np.concatenate([succ[ptr_s[i]:ptr_s[i + 1]], pred[ptr_p[i]:ptr_p[i + 1]]])
  capacity: Dict[tuple, Dict[int, int]] = {}
  for i, (lvl, k, occ, _, _) in cands.items():
    if (lvl, k) not in capacity:
      cap = capacity[(lvl, k)] = {}
      for o in owner[occ].tolist():
        cap[o] = cap.get(o, 0) + 1
  known = lambda i: int(np.sum(post_node[nbrs(i)] >= 0))
  heap = [(-known(i), i) for i in cands]
  heapq.heapify(heap)
  while heap:
    count, i = heapq.heappop(heap)
    if post_node[i] >= 0:
      continue
    if -count != known(i):  # stale entry: re-queue with the current count
      heapq.heappush(heap, (-known(i), i))
      continue
    lvl, k, occ, r, m = cands[i]
    owners, cap = owner[occ].tolist(), capacity[(lvl, k)]
    allowed = [o for o in dict.fromkeys(owners) if o not in banned.get(i, ())]
    allowed = allowed or list(dict.fromkeys(owners))
    avail = [o for o in allowed if cap[o] > 0] or allowed
    other, same = {}, {}  # votes of neighbours with another key / with the same key
    for j in nbrs(i).tolist():
      o = int(post_node[j])
      if o in cap and o in allowed:
        votes = same if keyof.get(j) == (lvl, k) else other
        votes[o] = votes.get(o, 0) + 1
    same = {o: v for o, v in same.items() if o in avail}
    by_rank = owners[r * len(owners) // m]
    votes = other or same
    post_node[i] = (max(votes, key=lambda o: (votes[o], -owners.index(o))) if votes
                    else by_rank if by_rank in avail
                    else avail[min(r * len(avail) // m, len(avail) - 1)])
    cap[int(post_node[i])] -= 1
    for j in nbrs(i).tolist():
      if j in cands and post_node[j] < 0:
        heapq.heappush(heap, (-known(j), j))


def match_fusions(pre: HloGraph, post: HloGraph) -> FusionMatch:
  """Maps XLA's fusion groups (post nodes) onto the pre-optimisation graph (module doc)."""
  for label, h in (("pre", pre), ("post", post)):
    if not isinstance(h, HloGraph) or not h.inst_names:
      raise ValueError(f"match_fusions: {label} must be an HloGraph from from_jax_full / "
                       f"hlo_to_graph, got {type(h).__name__}")
  g = pre.graph
  n = g.num_nodes
  owner, members = _occurrences(post)
  post_node, level = -np.ones(n, np.int64), -np.ones(n, np.int64)
  cands: Dict[int, tuple] = {}  # ambiguous node -> (level, key, occurrences, rank, m)
  keyof: Dict[int, tuple] = {}  # matched node -> (level, key)
  own = list(zip(pre.opcodes, pre.inst_names, pre.op_names, pre.sources))
  indexes = {lvl: _index(members, key_fn) for lvl, key_fn in _KEYS.items()}

  def assign(lvl, pending, index):
    for k, pres in pending.items():
      occ = index[k]
      if lvl == 0 and (len(pres) != 1 or len(occ) != 1):
        continue
      single = len(set(owner[occ].tolist())) == 1
      for r, i in enumerate(pres):
        level[i], keyof[i] = lvl, (lvl, k)
        if single:
          post_node[i] = owner[occ[0]]
        else:
          cands[i] = (lvl, k, occ, r, len(pres))

  for lvl, key_fn in _KEYS.items():
    pending: Dict[tuple, List[int]] = {}
    for i in np.flatnonzero(level < 0).tolist():
      k = key_fn(own[i])
      if k is not None and k in indexes[lvl]:
        pending.setdefault(k, []).append(i)
    assign(lvl, pending, indexes[lvl])
  # Level 3: a node running a computation is keyed by its first inner instruction XLA kept.
  pending = {}
  for i in np.flatnonzero(level < 0).tolist():
    for m in pre.inner[i]:
      k = next(((lvl, _KEYS[lvl](m)) for lvl in (1, 2) if _KEYS[lvl](m) in indexes[lvl]), None)
      if k is not None:
        pending.setdefault(k, []).append(i)
        break
  assign(3, pending, {k: indexes[k[0]][k[1]] for k in pending})
  banned, best, todo = {}, None, cands
  unmatched = np.flatnonzero(level < 0)
  for _ in range(REPAIR_ROUNDS):  # an ambiguous node split off its group tries another one
    _resolve_ambiguous(g, todo, keyof, owner, post_node, banned)
    level[unmatched], post_node[unmatched] = -1, -1
    _absorb(g, unmatched, post_node, level)
    raw = np.where(post_node >= 0, post_node, post.graph.num_nodes + np.arange(n))
    groups = acyclic_groups(g, raw)
    off = _off_main(post_node, groups)
    split = len(np.unique(post_node[off]))
    if best is None or split < best.split_groups:
      best = FusionMatch(groups, post_node.copy(), level.copy(), split)
    alone = np.bincount(groups)[groups] == 1  # split off alone: likely a duplicated producer
    todo = {i: cands[i] for i in np.flatnonzero(off & alone).tolist() if i in cands}
    if not todo:
      break
    for i in todo:
      banned.setdefault(i, set()).add(int(post_node[i]))
      post_node[i] = -1
  if n and not (best.post_node >= 0).any():
    raise ValueError(_no_match_message(pre, post, members))
  return best


def _ops(h: HloGraph, limit: int = 6) -> str:
  """The nodes of `h` in words, a fusion with its instructions: 'fusion(reduce-window), bitcast'."""
  words = [f"fusion({', '.join(dict.fromkeys(m[0] for m in h.inner[j]))})"
           if h.opcodes[j] == "fusion" else h.opcodes[j] for j in range(h.graph.num_nodes)]
  more = f", ... ({len(words) - limit} more)" if len(words) > limit else ""
  return ", ".join(words[:limit]) + more


def _names(names, limit: int = 3) -> str:
  """A few op_names in words: "'jit(f)/dot_general', 'jit(f)/exp'"."""
  more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
  return ", ".join(repr(x) for x in sorted(names)[:limit]) + more


def _no_match_message(pre: HloGraph, post: HloGraph, members: List[tuple]) -> str:
  """Why no pre node matched: XLA's module keeps none of the program's op metadata (it drops it
  when it rewrites some ops: cumsum's reduce-window, ops on zero-size arrays), or the two
  modules' metadata name the same ops at other places (two programs)."""
  pre_names = {m for m in pre.op_names if m} | {m[2] for inner in pre.inner for m in inner if m[2]}
  post_names = {m[2] for m in members if m[2]}
  head = (f"match_fusions: no instruction of the post-optimisation HLO "
          f"({post.graph.num_nodes} nodes) matches one of the pre text's {pre.graph.num_nodes}: ")
  if pre_names & post_names:
    return (head + "their op_names agree but not their opcodes and source locations: were the "
            "two lowered from the same program?")
  # Both keep op paths ('jit(f)/scope/prim'; an argument's bare name or the jit's own does not
  # count), of other ops: the module of another program.
  pre_paths, post_paths = ({m for m in names if "/" in m} for names in (pre_names, post_names))
  if pre_paths and post_paths:
    return (head + f"their op_names name other ops (pre: {_names(pre_paths)}; post: "
            f"{_names(post_paths)}): were the two lowered from the same program?")
  pre_side = ("" if pre_names else
              f"; the pre-optimisation module's ops ({_ops(pre)}) carry none either")
  return (f"match_fusions: XLA's compiled module of {pre.graph.name!r} has no op metadata to "
          f"match its {pre.graph.num_nodes} pre-optimisation nodes by: its instructions "
          f"({_ops(post)}) carry no op_name of the program's ops{pre_side}. XLA drops "
          f"the metadata of some ops it rewrites (cumsum's reduce-window, ops on zero-size "
          f"arrays), and JAX emits some without (a broadcast of a constant), so XLA's fusion of "
          f"this program cannot be carried onto its graph")


def _absorb(g, unmatched, post_node, level):
  """Level 4: an unmatched node whose consumers all went to one post node joins it (XLA fuses
  a broadcast of a constant into its consumers and folds a reshape into a bitcast)."""
  ptr, succ = g.successor_csr()
  todo = set(unmatched.tolist())
  for i in reversed(g.topological_order().tolist()):
    if i in todo and ptr[i + 1] > ptr[i]:
      owners = set(post_node[succ[ptr[i]:ptr[i + 1]]].tolist())
      if len(owners) == 1 and min(owners) >= 0:
        post_node[i], level[i] = owners.pop(), 4


def _off_main(post_node, groups) -> np.ndarray:
  """(N,) bool: mapped nodes outside the largest piece of their post node's group."""
  mapped = np.flatnonzero(post_node >= 0)
  if not mapped.size:
    return np.zeros(post_node.shape[0], bool)
  key = post_node[mapped] * (groups.max() + 1) + groups[mapped]
  uniq, counts = np.unique(key, return_counts=True)
  order = np.lexsort((-counts, uniq // (groups.max() + 1)))  # per post node, largest first
  first = np.r_[True, (uniq[order] // (groups.max() + 1))[1:]
                != (uniq[order] // (groups.max() + 1))[:-1]]
  main = set(uniq[order][first].tolist())
  off = np.zeros(post_node.shape[0], bool)
  off[mapped] = ~np.isin(key, list(main))
  return off


def xla_fusion_groups(pre: HloGraph, post: HloGraph) -> np.ndarray:
  """(N_pre,) int group ids: XLA's fusions mapped onto the pre graph (`match_fusions`)."""
  return match_fusions(pre, post).groups


def xla_fusion_decisions(pre: HloGraph, post: HloGraph) -> np.ndarray:
  """(N_pre,) bool fuse requests (design.md 4.1) that rebuild XLA's fusion groups on the pre
  graph: op i asks to fuse when it has exactly one consumer and XLA put both in one group.

  Groups that are not trees of single-consumer edges (an op feeding two ops of its own fusion,
  a multi-output fusion) cannot be expressed by section 4.1: such ops stay unfused, and the
  group splits into the trees it contains.
  """
  groups = xla_fusion_groups(pre, post)
  g = pre.graph
  out_deg = g.out_degree()
  ptr, succ = g.successor_csr()
  single = out_deg == 1
  consumer = np.arange(g.num_nodes)
  consumer[single] = succ[ptr[:-1][single]]
  return single & (groups == groups[consumer])
