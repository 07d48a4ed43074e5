"""simulate: the jit-compiled, batched event-driven simulator of docs/design.md section 4.

One `lax.while_loop` over commits, vmapped over B (placement, priority) pairs. The per-commit
work is what decides the speed (design.md section 4, implementation notes), so no step touches all
N ops:

* Each device keeps a shallow, wide min-tree (A-ary, L levels, A**L >= Np) over the ops sorted by
  priority (descending, ties by id). A leaf holds r_j while op j is known, uncommitted and placed
  on that device, else +inf. The root is min r_j, so s_d = max(free_d, root_d) for all devices
  costs O(D); the candidate, the highest-priority op with r_j <= s_d, is the leftmost leaf <= s_d,
  found by an L-step descent; removing it rewrites the L + 1 nodes on that path, whose siblings
  the descent already read.
* Successor updates are processed `chunk` edges per iteration from a CSR list; an op with many
  consumers holds the loop for ceil(outdeg / chunk) iterations before the next commit. The total
  trip count is the same for every action (every op commits once), so it is computed on the host
  and the vmapped loop wastes no iterations.
* Newly known ops are inserted with scatter-min on their leaf-to-root path (commutative, so
  several insertions into one tree in one iteration cannot conflict).
* An iteration's two halves, a chunk of edges and a commit, run in either order with the same
  results (`commit_first`). On a CPU the edges come first (2-3% faster there on large
  batches). Elsewhere the commit comes first: its descent then reads the trees before the
  iteration writes them, not between the insertions and the removal, where XLA's GPU pipeline
  copied the two lower tree levels twice per iteration (an H200 at N = 1000, B = 16,384:
  886 ms of the loop's 1.10 s were those copies; BENCHMARKS.md "On a GPU").
* On a CPU the batch runs as sequential sub-batches (`block_size`: a few MB of loop state
  each, e.g. 64 actions at N = 1000, D = 8) through `lax.map`, each a vmapped loop: the loop's
  state of a whole batch does not fit the cache, a sub-batch's does. The state is kept small
  for the same reason: per op, the loop records only when its send channel starts
  (`send_t0`); each transfer's start is recomputed after the loop.
* Memory peaks are computed after the loop (per sub-batch where there are sub-batches, while
  its events are in the cache; else for the whole batch at once) from the alloc/free events
  each schedule makes (`simulator.memory_peaks`: one packed sort and a running sum per device).

Times are float32 (float64 when jax_enable_x64 is on). `simulate` is the host API (validation,
padding, caching); `simulate_padded` is the pure function to call inside other jitted code.
"""

from __future__ import annotations

import functools
import weakref
from typing import Optional

import flax
import jax
import jax.numpy as jnp
import numpy as np

from simulator.graph import CompGraph
from simulator import sharding as sharding_lib
from simulator import fusion, padding
from simulator.padding import PaddedGraph, pad_graph, tree_shape
from simulator.events import schedule_events, sequential_transfers
from simulator.memory_peaks import peak_memory, rank_order, resident_base
from simulator.reference import check_actions, check_time_range
from simulator.topology import Topology

INF = float("inf")
# Smallest batch the host API pads to. On XLA:CPU the loop compiled for a batch of one runs
# O(N) work per iteration (layered:n=40000,width=64 on nvlink8: B = 1 took 6.9-10 s where
# B = 2 took 0.47 s; N = 10,000: 226 vs 74 ms; N = 300: 1.2 ms both), so one action is
# simulated as two (the copy is discarded).
MIN_BATCH = 2
# Sub-batching of the commit loop on a CPU (`simulate_padded(block=...)`). The loop's state is
# tens of KB per action (N = 1000, D = 8: the D min-trees over all op positions, about 36 KB,
# plus the per-op arrays, about 60 KB in all), so a vmapped batch of 1024 (60 MB) works out of
# main memory, each commit a few cache misses per action. The default block keeps a sub-batch's
# state near CPU_BLOCK_BYTES (a share of a server core's L3), as a power of two in
# [CPU_BLOCK_MIN, CPU_BLOCK_MAX]: smaller sub-batches pay the loop's per-iteration overhead more
# often. Elsewhere (GPU/TPU) the whole batch runs as one loop: there the batch is the
# parallelism.
CPU_BLOCK_BYTES = 4 << 20
CPU_BLOCK_MIN, CPU_BLOCK_MAX = 8, 128


@flax.struct.dataclass
class SimResult:
  """Outcome of B actions; times in seconds, memory in bytes."""
  makespan: jnp.ndarray  # (B,)
  start: jnp.ndarray  # (B, N)
  finish: jnp.ndarray  # (B, N)
  peak_memory: jnp.ndarray  # (B, D)
  oom: jnp.ndarray  # (B,) bool


@flax.struct.dataclass
class _Carry:
  """Loop state of one action (the loop is vmapped over B)."""
  it: jnp.ndarray  # () int32 iteration
  levels: tuple  # L + 1 arrays (D * A**l,): per-device min-trees, device-major; 0 = roots
  free: jnp.ndarray  # (D,) time each device becomes free
  chan: jnp.ndarray  # (D,) time each device's send channel becomes free
  ready: jnp.ndarray  # (Np,) running max over committed preds of avail(pred, device(op))
  pending: jnp.ndarray  # (Np,) int32 uncommitted predecessors
  start: jnp.ndarray  # (Np,)
  finish: jnp.ndarray  # (Np,)
  # (Np,) when the op's send channel starts its transfers (max(finish, channel free)); each
  # destination's start and the last arrival are recomputed from it after the loop
  # (`events.transfer_times`), so the carry holds one number per op instead of D + 1
  send_t0: jnp.ndarray
  cur: jnp.ndarray  # () int32 op whose successor edges are being processed
  ptr: jnp.ndarray  # () int32 next edge of `cur` to process
  end: jnp.ndarray  # () int32 one past the last edge of `cur`
  cur_avail: jnp.ndarray  # (D,) avail(cur, e): finish on its device, arrival elsewhere


def _dtype():
  return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32


def _first_true(mask):
  """Index of the first True of a 1-D mask, 0 if none (as argmax). One int32 min-reduce: XLA's
  CPU backend runs it much faster than argmax's (value, index) variadic reduce."""
  n = mask.shape[-1]
  idx = jnp.min(jnp.where(mask, jnp.arange(n, dtype=jnp.int32), n))
  return jnp.where(idx == n, 0, idx)


def _simulate_one(pg: PaddedGraph, topo: Topology, placement, pos2op, fuse=None,
                  commit_first: bool = False):
  """Simulates one action; vmapped over the batch by `simulate_padded`. `commit_first` orders
  each loop iteration's two halves (module docstring): the same results either way."""
  dt = _dtype()
  place = placement.astype(jnp.int32)[pg.coloc_root]  # rule 1
  place = jnp.where(pg.node_mask, place, 0)
  root = None
  if fuse is not None:  # section 4.1: absorbed members stop being nodes, roots carry groups
    pg, root = fusion.apply_padded(pg, place, fuse, dt)
  np_ = pg.cost.shape[0]
  d = topo.speed.shape[0]
  levels_n, arity = tree_shape(np_)
  shift = arity.bit_length() - 1
  k = pg.chunk
  speed, overhead = jnp.asarray(topo.speed, dt), jnp.asarray(topo.overhead, dt)
  bw, lat = jnp.asarray(topo.bandwidth, dt), jnp.asarray(topo.latency, dt)
  cost, out_bytes = pg.cost.astype(dt), pg.out_bytes.astype(dt)
  dev_ids = jnp.arange(d)

  # Leaf position of each op: its rank by (priority descending, id ascending).
  pos = jnp.zeros(np_, jnp.int32).at[pos2op].set(jnp.arange(np_, dtype=jnp.int32))
  # cons[u, e]: u has a consumer on device e (one transfer per consumer device, rule 3).
  recv_dev = place[pg.receivers]
  cons = jnp.zeros((np_, d), bool).at[pg.senders, recv_dev].max(pg.edge_mask)
  n_leaves = arity ** levels_n
  roots0 = (pg.num_preds == 0) & pg.node_mask
  leaves = jnp.full((d, n_leaves), INF, dt).at[place, pos].min(
      jnp.where(roots0, 0.0, INF).astype(dt))
  levels = [leaves]
  for _ in range(levels_n):
    levels.append(levels[-1].reshape(d, -1, arity).min(-1))
  levels = tuple(reversed(levels))  # level 0 = roots (D, 1)
  # Carried flat, (D * A**l,): under vmap a scatter then indexes (batch, i), not (batch, d, i).
  levels = tuple(lv.reshape(-1) for lv in levels)
  sizes = [arity ** l for l in range(levels_n + 1)]

  zeros = jnp.zeros(np_, dt)
  carry = _Carry(
      it=jnp.int32(0), levels=levels, free=jnp.zeros(d, dt), chan=jnp.zeros(d, dt),
      ready=zeros, pending=pg.num_preds.astype(jnp.int32), start=zeros, finish=zeros,
      send_t0=zeros, cur=jnp.int32(0),
      ptr=jnp.int32(0), end=jnp.int32(0),
      cur_avail=jnp.zeros(d, dt))

  def edges(c: _Carry, levels, ptr, end, cur_avail):
    """Successor edges ptr..ptr+k of the op committed last: readiness (rule 4); newly known
    ops inserted with scatter-min on their leaf-to-root paths."""
    e = ptr + jnp.arange(k, dtype=jnp.int32)
    valid = e < end
    j = pg.receivers[jnp.where(valid, e, 0)]
    dj = place[j]
    ready = c.ready.at[j].max(jnp.where(valid, cur_avail[dj], -INF))
    pending = c.pending.at[j].add(-valid.astype(jnp.int32))
    newly = valid & (pending[j] == 0)
    val = jnp.where(newly, ready[j], INF)
    lj = pos[j]
    levels = tuple(lv.at[dj * sizes[l] + (lj >> (shift * (levels_n - l)))].min(val)
                   for l, lv in enumerate(levels))
    return ready, pending, levels

  def commit(c: _Carry, levels, do):
    """Rule 5 on `levels` where `do` and an op is known: the device that starts first and its
    candidate (the descent), removed from its tree; its finish and transfers (rules 2, 3).
    Returns (levels, committed, op, the carry's updated fields)."""
    s_all = jnp.maximum(c.free, levels[0])
    s = jnp.min(s_all)
    dstar = _first_true(s_all == s)  # first minimum: ties -> lowest device id
    do = do & (s < INF)
    node = jnp.int32(0)
    path, kids, picks = [node], [], []
    for l in range(1, levels_n + 1):
      ch = jax.lax.dynamic_slice(levels[l], (dstar * sizes[l] + node * arity,), (arity,))
      idx = _first_true(ch <= s)  # leftmost = highest priority, lowest id
      node = node * arity + idx
      path.append(node)
      kids.append(ch)
      picks.append(idx)
    op = pos2op[node]
    new_vals = [jnp.asarray(INF, dt)]  # leaf value after removal, then parents bottom-up
    for l in range(levels_n, 0, -1):
      new_vals.append(jnp.min(jnp.where(jnp.arange(arity) == picks[l - 1], new_vals[-1],
                                        kids[l - 1])))  # a select, not a one-element scatter
    new_vals = new_vals[::-1]  # aligned with `path` (level 0 .. L)
    levels = tuple(lv.at[jnp.where(do, dstar * sizes[l] + path[l], lv.shape[0])].set(
        new_vals[l], mode="drop") for l, lv in enumerate(levels))  # dropped unless `do`
    fin = s + (cost[op] / speed[dstar] + overhead[dstar])  # rule 2
    mask = cons[op] & (dev_ids != dstar)  # rule 3
    times = lat[dstar] + out_bytes[op] / bw[dstar]
    t0 = jnp.maximum(fin, c.chan[dstar])
    _, arrival = sequential_transfers(t0, times, mask)
    chan_new = jnp.where(mask.any(), arrival[-1], c.chan[dstar])
    on_d = do & (dev_ids == dstar)
    drop_op = jnp.where(do, op, np_)
    return levels, do, op, dict(
        free=jnp.where(on_d, fin, c.free), chan=jnp.where(on_d, chan_new, c.chan),
        start=c.start.at[drop_op].set(s, mode="drop"),
        finish=c.finish.at[drop_op].set(fin, mode="drop"),
        send_t0=c.send_t0.at[drop_op].set(t0, mode="drop"), cur=jnp.where(do, op, c.cur),
        cur_avail=jnp.where(do, jnp.where(dev_ids == dstar, fin, arrival), c.cur_avail))

  def body(c: _Carry) -> _Carry:
    # One iteration: a chunk of the last committed op's edges, and a commit once they are all
    # processed. Either order gives the same schedule and trip count (a commit in the edges-
    # first order sees exactly the trees the commit-first order's next iteration reads).
    if commit_first:  # the trees are read before they are written, then written in sequence
      levels, do, op, out = commit(c, c.levels, c.ptr >= c.end)
      ptr = jnp.where(do, pg.succ_ptr[op], c.ptr)
      end = jnp.where(do, pg.succ_ptr[op + 1], c.end)
      ready, pending, levels = edges(c, levels, ptr, end, out["cur_avail"])
      ptr = ptr + k
    else:  # the descent reads the trees between the insertions and the removal
      ready, pending, levels = edges(c, c.levels, c.ptr, c.end, c.cur_avail)
      levels, do, op, out = commit(c, levels, c.ptr + k >= c.end)
      ptr = jnp.where(do, pg.succ_ptr[op], c.ptr + k)
      end = jnp.where(do, pg.succ_ptr[op + 1], c.end)
    return _Carry(it=c.it + 1, levels=levels, ready=ready, pending=pending, ptr=ptr, end=end,
                  **out)

  c = jax.lax.while_loop(lambda c: c.it < pg.num_iters, body, carry)
  makespan, start, finish, events = schedule_events(pg, topo, place, cons, c.start, c.finish,
                                                    c.send_t0, dt)
  if root is not None:  # members report their group's times
    start, finish = start[root], finish[root]
  return makespan, start, finish, events


def loop_state_bytes(num_nodes_padded: int, num_devices: int, itemsize: int = 4) -> int:
  """Estimated bytes of the commit loop's state per action: the D min-trees (every level)
  and the per-op arrays (ready, pending, start, finish, send_t0, priority position)."""
  levels, arity = tree_shape(num_nodes_padded)
  tree = num_devices * sum(arity ** l for l in range(levels + 1))
  return itemsize * (tree + 6 * num_nodes_padded)


def block_size(block: Optional[int], batch: int, num_nodes_padded: int = 1024,
               num_devices: int = 8, itemsize: int = 4, platform: Optional[str] = None) -> int:
  """Actions per sequential sub-batch of the commit loop for a batch of `batch` (0: the whole
  batch in one loop): the batch split into equal sub-batches of at most `block` (so at most
  one row per sub-batch is padding). None picks `block` by the platform the loop runs on
  (`platform`; None: the default backend): on a CPU the power of two in
  [CPU_BLOCK_MIN, CPU_BLOCK_MAX] nearest below CPU_BLOCK_BYTES / `loop_state_bytes`;
  elsewhere 0."""
  if block is None:
    block = 0
    if (jax.default_backend() if platform is None else platform) == "cpu":
      fit = CPU_BLOCK_BYTES // loop_state_bytes(num_nodes_padded, num_devices, itemsize)
      block = min(max(1 << max(int(fit).bit_length() - 1, 0), CPU_BLOCK_MIN), CPU_BLOCK_MAX)
  if block < 0:
    raise ValueError(f"simulate_padded: block must be >= 0, got {block}")
  if not 0 < block < batch:
    return 0
  parts = -(-batch // block)  # equal sub-batches of at most `block`: little padding
  return -(-batch // parts)


def _blocked(fn, block: int, *xs):
  """fn over the rows of xs (pytrees with the batch first) in sequential sub-batches of
  `block` (`lax.map`'s batch_size: vmapped within a sub-batch). The batch is first padded to a
  multiple of `block` with copies of its first row (sliced off after), so the loop is compiled
  for one sub-batch shape only."""
  b = jax.tree_util.tree_leaves(xs)[0].shape[0]
  pad = -b % block
  padded_xs = jax.tree_util.tree_map(
      lambda x: jnp.concatenate([x, jnp.repeat(x[:1], pad, 0)]) if pad else x, xs)
  out = jax.lax.map(lambda row: fn(*row), padded_xs, batch_size=block)
  return jax.tree_util.tree_map(lambda x: x[:b], out)


def simulate_padded(pg: PaddedGraph, topology: Topology, placement, priority,
                    fuse=None, peak_method: Optional[str] = None,
                    block: Optional[int] = None, platform: Optional[str] = None,
                    commit_first: Optional[bool] = None) -> SimResult:
  """Pure, traceable simulator: placement (B, Np) int, priority (B, Np) float.

  Results keep the padded node axis. Padded nodes must carry a valid device id (e.g. 0); their
  values are ignored. vmap it over graphs (a stacked PaddedGraph) or topologies as needed.
  `fuse` (B, Np) bool applies design.md section 4.1 (the graph must be padded with
  `fusion=True`; padded entries must be False); a fused member reports its group's times.
  `peak_method` ("scan" or "segments"; None: by backend) picks how memory peaks are summed
  (`memory_peaks.peak_memory`); a static argument under jit. `block` (static; None: `block_size`'s
  default for the backend) runs the commit loop over sequential sub-batches of that many
  actions: the same results, bit for bit, but on a CPU each sub-batch's loop state stays in
  the core's cache (module docstring). `platform` (static; None: the default backend) is the
  platform the computation runs on, which those two defaults follow: "cpu" where the host
  API runs a small batch on the host while an accelerator is the default (`simulate`).
  `commit_first` (static; None: off on a CPU, on elsewhere) orders each loop iteration's
  commit before its edges (module docstring); the results are the same.
  """
  if fuse is not None and pg.fusion is None:
    raise ValueError("simulate_padded(fuse=...) needs a graph padded with fusion tables "
                     "(pad_graph(graph, fusion=True))")
  # Ops by priority descending, ties by lowest id; padding last.
  key = jnp.where(pg.node_mask, -jnp.asarray(priority, _dtype()), INF)
  pos2op, _ = rank_order(key)
  d = topology.speed.shape[-1]
  platform = jax.default_backend() if platform is None else platform
  if commit_first is None:
    commit_first = platform != "cpu"
  one = lambda pl, po, fu: _simulate_one(pg, topology, pl, po, fu, commit_first)
  if peak_method is None:
    peak_method = "scan" if platform == "cpu" else "segments"
  blk = block_size(block, placement.shape[0], pg.cost.shape[-1], d,
                   jnp.dtype(_dtype()).itemsize, platform)
  if blk:
    def row(pl, po, fu):  # one action through the loop and its memory peaks (a batch of 1)
      makespan, start, finish, events = one(pl, po, fu)
      events = jax.tree_util.tree_map(lambda x: x[None], events)
      return makespan, start, finish, peak_memory(resident_base(events, d), peak_method)[0]
    # each sub-batch's events are summed while they are in the cache
    makespan, start, finish, peak = _blocked(row, blk, placement, pos2op, fuse)
  else:
    makespan, start, finish, events = jax.vmap(
        one, in_axes=(0, 0, None if fuse is None else 0))(placement, pos2op, fuse)
    peak = peak_memory(resident_base(events, d), peak_method)  # the whole batch: one sort
  oom = jnp.any(peak > jnp.asarray(topology.mem_capacity, peak.dtype), -1)
  return SimResult(makespan=makespan, start=start, finish=finish, peak_memory=peak, oom=oom)


_simulate_jit = jax.jit(simulate_padded,
                        static_argnames=("peak_method", "block", "platform", "commit_first"))
_PAD_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# Sizes set by `pad_to` per graph object: (num_nodes, num_edges, chunk), None = the default.
_PAD_SIZES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@functools.partial(jax.jit, static_argnames=("sharding", "platform"))
def _simulate_split(pg, topology, *batch, sharding, platform=None):
  """`simulate_padded` with the batch split across the sharding's devices, each device
  simulating its own part (`sharding.map_batch`: its own loop, sub-batched on a CPU)."""
  return sharding_lib.map_batch(
      lambda g, t, *x: simulate_padded(g, t, *x, platform=platform), sharding,
      (pg, topology), batch)


def _jitted_for(placement):
  """(jitted simulator, its static keyword arguments) that `simulate` runs for a prepared
  placement batch (`prepare_batch`): split per device where the batch is split across devices,
  else `_simulate_jit`."""
  sharding = getattr(placement, "sharding", None)
  if isinstance(sharding, jax.sharding.NamedSharding):
    return _simulate_split, {"sharding": sharding}
  return _simulate_jit, {}


def lower(pg: PaddedGraph, topology: Topology, *batch):
  """The lowered computation `simulate` runs on a prepared batch (`prepare_batch`'s placement,
  priority[, fuse]); `.compile()` it to time compilation apart (simulator.benchmark)."""
  fn, static = _jitted_for(batch[0])
  return fn.lower(pg, topology, *batch, **static)


def padded(graph: CompGraph, fusion: bool = False) -> PaddedGraph:
  """The graph padded to its bucket, or to the sizes `pad_to` set for it (with its fusion
  tables where asked), cached per graph object, dtype mode and `fusion`."""
  per_graph = _PAD_CACHE.setdefault(graph, {})
  mode = (bool(jax.config.jax_enable_x64), bool(fusion))
  if mode not in per_graph:
    num_nodes, num_edges, chunk = _PAD_SIZES.get(graph, (None, None, None))
    per_graph[mode] = pad_graph(graph, num_nodes, num_edges, chunk, fusion=fusion)
  return per_graph[mode]


def pad_to(graph: CompGraph, num_nodes: Optional[int] = None, num_edges: Optional[int] = None,
           chunk: Optional[int] = None) -> CompGraph:
  """Makes `simulate` (and every method that calls it with this graph object) pad `graph` to
  these sizes instead of its own power-of-two buckets; returns `graph`.

  The compiled simulator is specialised to the padded sizes, so graphs of many sizes padded to
  one common size share one compilation (one per device count): worth it for many small graphs
  simulated a few times each, where compiling dominates. Padding changes no result
  (docs/design.md section 4). `chunk` is the edge chunk (`simulator.padding.choose_chunk`; 1
  serves any out-degree). Raises ValueError where the graph does not fit."""
  pad_graph(graph, num_nodes, num_edges, chunk)  # checks the sizes now, not at the first call
  _PAD_SIZES[graph] = (num_nodes, num_edges, chunk)
  _PAD_CACHE.pop(graph, None)
  return graph


def batch_sharding(devices=None):
  """A sharding that splits the batch axis across `devices` (default: this process's local
  devices, where `prepare_batch` puts host arrays), or None where there is only one. See
  `simulator.runtime.configure_cpu_devices` for CPU cores and `simulator.sharding`."""
  return sharding_lib.batch_sharding(
      devices=jax.local_devices() if devices is None else list(devices))


def prepare_batch(graph: CompGraph, placement, priority, batch_bucket: Optional[int] = None,
                  shard: bool = True, fuse=None, devices=None):
  """(padded graph, placement (Bb, Np), priority (Bb, Np)[, fuse (Bb, Np)]) ready for
  `simulate_padded`; the fuse mask is returned only when given.

  Actions must already be validated (`check_actions`, `check_fuse`). The batch is padded to
  `padding.batch_bucket(B)` (or `batch_bucket`) by repeating its first row, so that varying B
  does not recompile for every size (at least `MIN_BATCH` rows); with `shard` and several
  local devices (or `devices`, where given) it is split across them (when each gets at least
  one real row). With `devices` the batch is put on them, split or on the first one alone.
  """
  b, n = placement.shape
  pg = padded(graph, fusion=fuse is not None)
  sharding = batch_sharding(devices) if shard else None
  if sharding is not None and b < sharding.mesh.size:
    sharding = None
  parts = 1 if sharding is None else sharding.mesh.size
  bb = (max(padding.batch_bucket(b), MIN_BATCH) if batch_bucket is None
        else int(batch_bucket))
  bb = -(-bb // parts) * parts
  if bb < b:
    raise ValueError(f"batch_bucket {bb} is smaller than the batch {b}")
  pl = np.zeros((bb, pg.num_nodes_padded), np.int32)
  pr = np.zeros((bb, pg.num_nodes_padded), np.float64)
  pl[:b, :n], pr[:b, :n] = placement, priority
  pl[b:], pr[b:] = pl[0], pr[0]
  where = sharding if sharding is not None else None if devices is None else list(devices)[0]
  if where is not None:
    pl, pr = jax.device_put(pl, where), jax.device_put(pr, where)
  if fuse is None:
    return pg, pl, pr
  fu = np.zeros((bb, pg.num_nodes_padded), bool)
  fu[:b, :n] = fuse
  fu[b:] = fu[0]
  if where is not None:
    fu = jax.device_put(fu, where)
  return pg, pl, pr, fu


def check_fuse(graph: CompGraph, fuse, shape) -> np.ndarray:
  """Validates a fuse mask of `shape` (the placement's) for `graph`; returns it as bool."""
  fusion.check_fusable(graph)
  return fusion.check_mask(fuse, shape, graph.name)


def check_fused_time_range(graph: CompGraph, topology: Topology) -> None:
  """`check_time_range` for any fused action of `graph`: a fused group can cost more than its
  members, so each op is bounded with what it can add to a group (`fusion.fused_cost_bound`).
  It depends on the graph and topology alone, so a fusing search can be refused before it
  starts with the message its final simulation would give (`fusion.check_fusable` first)."""
  fusion.check_fusable(graph)
  t = padded(graph, fusion=True).fusion  # cached per graph: no per-call table building
  n = graph.num_nodes
  check_time_range(graph, topology, cost=fusion.fused_cost_bound(
      graph.cost, *(np.asarray(x)[:n] for x in (t.flops, t.bytes_accessed, t.rate_flops,
                                                 t.rate_bytes, t.overhead))))


def simulate(graph: CompGraph, topology: Topology, placement, priority,
             batch_bucket: Optional[int] = None, shard: bool = True, fuse=None) -> SimResult:
  """Simulates B actions of one graph: placement (B, N) int, priority (B, N) float, and
  optionally fuse (B, N) bool (design.md section 4.1: fused members report their group's
  times; the graph needs a cost reference).

  A single action of shape (N,) is accepted and treated as B = 1. See `prepare_batch` for the
  padding of the batch and its split across devices. Where an accelerator is the default
  backend, a batch of at most `sharding.HOST_BATCH` actions runs on this process's CPU devices
  instead (`sharding.host_devices`: a small batch is launch-bound there); the results are the
  CPU's, which the simulator's semantics make identical up to float rounding.
  """
  placement, priority = check_actions(graph, topology, placement, priority)
  if fuse is None:
    check_time_range(graph, topology)
  else:
    fuse = np.atleast_2d(check_fuse(graph, fuse, placement.shape))
    check_fused_time_range(graph, topology)
  placement, priority = np.atleast_2d(placement), np.atleast_2d(priority)
  b, n = placement.shape
  host = sharding_lib.host_devices(b)
  if fuse is None:
    pg, pl, pr = prepare_batch(graph, placement, priority, batch_bucket, shard, devices=host)
    batch = (pl, pr)
  else:
    pg, pl, pr, fu = prepare_batch(graph, placement, priority, batch_bucket, shard, fuse,
                                   devices=host)
    batch = (pl, pr, fu)
  fn, static = _jitted_for(batch[0])
  if host is not None:  # the graph and topology join the batch on the host
    sharding = static.get("sharding")
    pg, topology = (sharding_lib.put_replicated((pg, topology), list(sharding.mesh.devices.flat))
                    if sharding is not None else jax.device_put((pg, topology), host[0]))
    static = dict(static, platform="cpu")
  res = fn(pg, topology, *batch, **static)
  if host is not None or jax.default_backend() == "cpu":
    # Sliced on the host and back on the default device, uncommitted, as a default-backend
    # run's: a jnp slice compiles once per (B, N), about 20 ms for every new graph size, which
    # a search over many graphs of one padded shape would pay per graph; on the CPU the copy is
    # cheap. On an accelerator the device slices (no transfer; one compile per size).
    # (device_put of a contiguous copy: jnp.asarray of a strided view stages a copy program.)
    host_res = jax.tree_util.tree_map(np.asarray, res)
    return SimResult(*(jax.device_put(np.ascontiguousarray(x)) for x in _trim(host_res, b, n)))
  return SimResult(*_trim(res, b, n))


def _trim(res: SimResult, b: int, n: int):
  """(makespan, start, finish, peak_memory, oom) of the first b actions and n ops."""
  return (res.makespan[:b], res.start[:b, :n], res.finish[:b, :n], res.peak_memory[:b],
          res.oom[:b])
