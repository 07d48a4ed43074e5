"""The live memory model's waiting (op, device) pairs of m-ETF and m-SCT (`_list_schedule`).

A pair (j, e) refused because j would overflow e waits here for e to release memory (or for e's
queue to move past the overflow) and is then offered to e again. Each device's waiting pairs are
kept as columns of numpy arrays, so a release decides for all of them at once, by the same rules
and with the same floating-point operations as deciding for one pair at a time (m_sct on zoo:gnmt8
at mem=0.2x re-decided for 13M pairs one by one in Python: 106 s -> 47 s on 2 shared cores).
"""

from __future__ import annotations

from typing import List

import numpy as np


class _Rows:
  """Rows of float columns: appended one at a time, read and filtered as whole columns."""

  __slots__ = ("cols", "new")

  def __init__(self, width: int):
    self.cols = [np.zeros(0) for _ in range(width)]
    self.new: List[tuple] = []

  def __bool__(self) -> bool:
    return bool(self.new) or self.cols[0].size > 0

  def arrays(self) -> List[np.ndarray]:
    if self.new:
      add = np.array(self.new, np.float64).reshape(len(self.new), len(self.cols)).T
      self.cols = [np.concatenate([c, a]) for c, a in zip(self.cols, add)]
      self.new = []
    return self.cols

  def keep(self, mask: np.ndarray):
    self.cols = [c[mask] for c in self.cols]


class RetryIndex:
  """The pairs (j, e) waiting for e's memory, and the rule deciding when to offer e again.

  An op that would still overflow e for good (`lasting_excess`) would only be refused again:
  it waits in e's lasting rows until e has released as many bytes as its excess (re-trying every
  waiting op at every release made m_sct quadratic: minutes on zoo:gnmt2 at mem=0.2x).
  Likewise an op refused at start s whose overflow found just before t_ok (`check`) is still
  there at any later start, because e has released, before t_ok, fewer bytes than that overflow
  and what e gains only adds to it, would only be refused again: it stays blocked. That needs j
  to still add bytes there (`adds_before`) and either t_ok > s with e's queue before t_ok (j's
  start stays before t_ok), or t_ok <= s with e's queue past t_ok (then every commit on e, the
  only way a copy of j's input reaches e, re-decides for j here). m_sct on zoo:gnmt2 at
  mem=0.2x: 320k -> 140k checks.

  `lasting_parts` and `adds_before` of a pair change only when a copy of one of j's inputs
  reaches e; they are cached per row and recomputed after `before_commit` marks the pair stale.
  `done`, `dropped` and `forced` are the scheduler's arrays, read as they change.
  """

  # blocked rows: op, t_ok, start, bytes over, bytes released before t_ok since, and the cache
  # (lasting level, lasting const, adds_before); lasting rows: released bytes to wait for, op,
  # and the cached lasting level and const.
  _J, _T, _S, _OVER, _GONE, _LEVEL, _CONST, _ADDS = range(8)

  def __init__(self, graph, mem, done, dropped, forced):
    d = len(mem.profiles)
    self.mem, self.done, self.dropped, self.forced = mem, done, dropped, forced
    ptr, succ = graph.successor_csr()
    self.succ = [succ[ptr[v]:ptr[v + 1]] for v in range(graph.num_nodes)]
    self.stale = np.zeros((graph.num_nodes, d), bool)  # (j, e): the cached row needs refreshing
    self.blocked = [_Rows(8) for _ in range(d)]
    self.lasting = [_Rows(4) for _ in range(d)]

  def block(self, j: int, e: int, t_ok: float, start: float, over: float):
    """j refused on e at `start`: its overflow lasts until t_ok, `over` bytes just before."""
    self.blocked[e].new.append((j, t_ok, start, over, 0.0, 0.0, 0.0, 0.0))
    self.stale[j, e] = True

  def before_commit(self, j: int, e: int):
    """Marks stale the pairs (v, e) whose cache j's commit on e changes: v consumes an input of
    j whose copy reaches e now."""
    last_use = self.mem.last_use
    for i in self.mem.preds[j]:
      if e not in last_use[i]:
        self.stale[self.succ[i], e] = True

  def _waiting(self, ops: np.ndarray, e: int, take: np.ndarray):
    """(rows still waiting for e among `take`, those whose op is colocated or forced)."""
    live = take & ~self.done[ops] & self.dropped[ops, e]
    mem = self.mem
    direct = live & ((mem.group_device[mem.root[ops]] >= 0) | self.forced[ops])
    return live, direct

  def _refresh(self, ops, e, rows, level, const, adds=None, t_ok=None, start=None):
    """Recomputes in place the cached columns of the stale rows among `rows`."""
    mem = self.mem
    for k in np.flatnonzero(rows & self.stale[ops, e]).tolist():
      j = int(ops[k])
      level[k], const[k] = mem.lasting_parts(j, e)
      if adds is not None:
        adds[k] = mem.adds_before(j, e, float(t_ok[k]), float(start[k]))
      self.stale[j, e] = False

  def retry(self, e: int, everything: bool, free: float) -> List[int]:
    """The ops to offer e again after a commit (their `dropped` flag cleared): with
    `everything` (e released memory), of all waiting pairs, else of those whose overflow ends
    by `free`, the time e's queue reaches."""
    if not (self.blocked[e] or everything and self.lasting[e]):
      return []  # nothing waits for e (the common case with ample memory)
    mem = self.mem
    margin, rel = mem.lasting_margin(e), mem.released[e]
    offers = []
    if everything and self.lasting[e]:
      rows = self.lasting[e]
      key, ops, level, const = rows.arrays()
      take = key <= rel + margin
      if take.any():
        ops = ops.astype(np.int64)
        live, direct = self._waiting(ops, e, take)
        test = live & ~direct
        self._refresh(ops, e, test, level, const)
        excess = mem.lasting_excess(e, level, const)
        again = test & (excess > margin)
        key[again] = rel + excess[again]
        offers.append(ops[live & ~again])
        rows.keep(~take | again)
    rows = self.blocked[e]
    cols = rows.arrays()
    ops, t_ok, start, over, gone = cols[:5]
    take = np.ones(ops.size, bool) if everything else t_ok <= free
    if ops.size and take.any():
      ops = ops.astype(np.int64)
      live, direct = self._waiting(ops, e, take)
      test = live & ~direct
      self._refresh(ops, e, test, cols[self._LEVEL], cols[self._CONST], cols[self._ADDS],
                    t_ok, start)
      if everything:
        excess = mem.lasting_excess(e, cols[self._LEVEL], cols[self._CONST])
        lasting = test & (excess > margin)
        if lasting.any():
          self.lasting[e].new.extend(zip((rel + excess[lasting]).tolist(), ops[lasting].tolist(),
                                         cols[self._LEVEL][lasting].tolist(),
                                         cols[self._CONST][lasting].tolist()))
          test &= ~lasting
          live &= ~lasting
        freed = 0.0  # per row, summed in the order of `mem.freed`, then added to `gone`
        for t, nbytes in mem.freed.get(e, ()):
          freed = freed + np.where(t < t_ok, nbytes, 0.0)
        gone = cols[self._GONE] = gone + freed
      stay = (test & (gone < over - margin) & np.where(t_ok <= start, t_ok <= free, t_ok > free)
              & (cols[self._ADDS] != 0))
      offers.append(ops[live & ~stay])
      rows.keep(~take | stay)
    out = np.concatenate(offers).tolist() if offers else []
    self.dropped[out, e] = False
    return out
