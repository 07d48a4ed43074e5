"""Placeto's MDP on the project's simulator: grouped instances, batched jitted episodes.

  instances, data = env.build(graphs, topologies, groups=32, objective="makespan")
  episodes = env.run_episodes(module, params, data, key, samples=8, init="single",
                              greedy=False, objective="makespan")    # inside jit

**Groups.** Placeto places groups of ops, formed beforehand (the paper uses TensorFlow's
colocation groups and a grouper); here a graph is grouped by the project's coarsening
(`simulator.coarsen.coarsen(units, groups)`) of its colocation units (`colocation_units`: one
unit per colocation class, so that a group holds whole classes and every group is a free
decision), and `Instance.expand` carries a group placement back to the ops (every op takes its
group's device, which keeps the graph's colocation).

**The MDP** (paper, section 3.1). The state is the current placement of the groups. An episode
visits the groups once each in a fixed order (the coarse graph's topological order), one step
per group; at step t the policy sees the current placement (plus "current" and "visited"
flags) and picks the device of group order[t]. The episode starts from `init`: "single" (every
group on device 0) or "random" (a uniform device per group, one draw per episode). After each
step the placement is simulated (the WHOLE graph, expanded: the reward is exact, not an
estimate on the coarse graph) with the critical-path priority of the graph
(`simulator.graph.upward_rank`), and the intermediate reward is the improvement of the
objective, r_t = (R(p_t) - R(p_{t+1})) / scale, where R is the objective of
go_jax.objectives (an out-of-memory placement scores above every feasible one, by how much it
overflows: the penalty the reward sees) and `scale` the instance's lower bound on it, so that
graphs of different sizes give rewards of one magnitude. Rewards therefore telescope: their
sum over an episode is (R(p_0) - R(p_T)) / scale, the episode's total improvement.

**Batching.** Every instance of a training set is padded to one bucket: Mp groups (the
episode's T = Mp steps; padded steps decide nothing), Np ops and Ep edges for the simulator
(`simulator.padding`), and the devices of every topology to the largest device count (devices
beyond a topology's own never host an op, and the policy masks them). One step of all G x K
parallel episodes is ONE call of the padded simulator (`simulate_padded`, vmapped over the G
graphs), and an episode is one `lax.scan` over the steps.
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Optional, Sequence, Tuple

import flax
import jax
import jax.numpy as jnp
import numpy as np

from go_jax import objectives
from go_jax.placeto.model import GroupGraph, PlacetoPolicy, apply_states
from simulator.coarsen import Coarsened, coarsen
from simulator.graph import CompGraph, upward_rank
from simulator.padding import PaddedGraph, bucket, choose_chunk, pad_graph
from simulator import sharding as sharding_lib
from simulator.simulate import simulate_padded
from simulator.topology import Topology

INITS = ("single", "random")
# The static per-group attributes of GroupGraph.feats, in order (all O(1) by construction).
STATIC_FEATURES = ("log_cost", "log_comm", "log_memory", "log_memory_pressure", "up_rank",
                   "down_rank", "log_in_degree", "log_out_degree")


@dataclasses.dataclass(frozen=True)
class Instance:
  """One (graph, topology) pair on the host: its grouping and the visiting order."""
  name: str
  graph: CompGraph  # the graph as given (N ops)
  topology: Topology  # its own topology (D devices, unpadded)
  coarse: Coarsened  # the grouping of the colocation units: coarse graph (M groups)
  order: np.ndarray  # (M,) int groups in visiting order (topological order of the coarse graph)
  group_of: np.ndarray  # (N,) int the group whose device each op takes (coarse colocation root)
  lower_bound: float  # the objective's lower bound (the reward scale)

  def expand(self, group_placement) -> np.ndarray:
    """(..., N) op placement from (..., M) or padded (..., Mp) group devices."""
    return np.asarray(group_placement)[..., self.group_of].astype(np.int64)


@flax.struct.dataclass
class Instances:
  """Training instances stacked on a leading axis I (one bucket); `x[idx]` takes a batch."""
  net: GroupGraph  # fields (I, Mp, F) / (I, Eg) / (I, Mp, Mp) / (I, Dmax): the network's input
  sim: PaddedGraph  # fields (I, Np) / (I, Ep) / (I, Np + 1): the whole graph, for the simulator
  topology: Topology  # fields (I, D) / (I, D, D), padded to the largest device count
  group_of: jnp.ndarray  # (I, Np) int32 group whose device each op takes (0 on padding)
  priority: jnp.ndarray  # (I, Np) float32 critical-path priority of the ops
  order: jnp.ndarray  # (I, Mp) int32 group visited at step t (padded steps: padded groups)
  position: jnp.ndarray  # (I, Mp) int32 step at which each group is visited
  decides: jnp.ndarray  # (I, Mp) bool step t's action counts (a real colocation-root group)
  root: jnp.ndarray  # (I, Mp) int32 coarse colocation root of each group (moves with it)
  num_devices: jnp.ndarray  # (I,) int32 the topology's own device count
  upper_bound: jnp.ndarray  # (I,) float32 no feasible placement's objective exceeds it
  scale: jnp.ndarray  # (I,) float32 the objective's lower bound: rewards are divided by it


@flax.struct.dataclass
class Episodes:
  """G x K episodes of T steps."""
  placements: jnp.ndarray  # (G, K, T + 1, Mp) int32 the state before each step, and the last
  actions: jnp.ndarray  # (G, K, T) int32 device picked at each step
  rewards: jnp.ndarray  # (G, K, T) float32 (R(p_t) - R(p_{t+1})) / scale
  objectives: jnp.ndarray  # (G, K, T + 1) float32 R of every state (lower is better)


# ------------------------------------------------------------------ host side
def pad_topology(topology: Topology, num_devices: int) -> Topology:
  """`topology` with devices appended up to `num_devices`: speed 1, unbounded memory; they
  never host an op (the policy masks them), so the simulation is that of the topology."""
  d = topology.num_devices
  if num_devices == d:
    return topology
  extra = num_devices - d
  bw = np.ones((num_devices, num_devices))
  bw[:d, :d] = topology.bandwidth
  np.fill_diagonal(bw, np.inf)
  lat = np.zeros((num_devices, num_devices))
  lat[:d, :d] = topology.latency
  return Topology(speed=np.concatenate([topology.speed, np.ones(extra)]),
                  overhead=np.concatenate([topology.overhead, np.zeros(extra)]),
                  mem_capacity=np.concatenate([topology.mem_capacity, np.full(extra, np.inf)]),
                  bandwidth=bw, latency=lat)


def ancestors(graph: CompGraph) -> np.ndarray:
  """(M, M) bool: [v, u] when u reaches v by a path of one or more edges."""
  m = graph.num_nodes
  anc = np.zeros((m, m), bool)
  ptr, pred = graph.predecessor_csr()
  for v in graph.topological_order().tolist():
    for u in pred[ptr[v]:ptr[v + 1]].tolist():
      anc[v] |= anc[u]
      anc[v, u] = True
  return anc


def _downward(graph: CompGraph) -> np.ndarray:
  """(M,) longest summed cost of a path from a source to each node, the node's own included."""
  ptr, pred = graph.predecessor_csr()
  down = np.zeros(graph.num_nodes)
  for v in graph.topological_order().tolist():
    p = pred[ptr[v]:ptr[v + 1]]
    down[v] = graph.cost[v] + (down[p].max() if p.size else 0.0)
  return down


def _finite_capacities(topology: Topology) -> np.ndarray:
  """The finite device capacities, each at least 1 byte: the features divide bytes by them, and
  a device of 0 bytes (a valid topology) made them inf or, for 0 bytes held, NaN."""
  cap = np.asarray(topology.mem_capacity, np.float64)
  return np.maximum(cap[np.isfinite(cap)], 1.0)


def static_features(coarse: CompGraph, topology: Topology) -> np.ndarray:
  """(M, F) the per-group attributes of STATIC_FEATURES on `topology` (unpadded)."""
  speed, overhead = float(np.mean(topology.speed)), float(np.mean(topology.overhead))
  dur = coarse.cost / speed + overhead
  unit = max(float(np.mean(dur)), 1e-12)
  d = topology.num_devices
  if d > 1:
    off = ~np.eye(d, dtype=bool)
    latency = float(np.mean(topology.latency[off]))
    per_byte = float(np.mean(1.0 / topology.bandwidth[off]))
    comm = latency + coarse.out_bytes * per_byte
  else:
    comm = np.zeros(coarse.num_nodes)
  cap = _finite_capacities(topology)
  held = coarse.param_bytes + coarse.out_bytes + coarse.temp_bytes
  memory = held / float(cap.min()) if cap.size else np.zeros(coarse.num_nodes)
  pressure = ((coarse.param_bytes.sum() + coarse.out_bytes.sum()) / float(cap.sum())
              if cap.size else 0.0)
  up, down = upward_rank(coarse), _downward(coarse)
  cp = max(float(up.max()), 1e-12)
  cols = [np.log1p(dur / unit), np.log1p(comm / unit), np.log1p(memory),
          np.full(coarse.num_nodes, np.log1p(pressure)), up / cp, down / cp,
          np.log1p(coarse.in_degree()), np.log1p(coarse.out_degree())]
  return np.stack(cols, -1).astype(np.float32)


def colocation_units(graph: CompGraph) -> Tuple[CompGraph, np.ndarray]:
  """(unit graph, (N,) op -> unit): one unit per colocation class (rule 1: its ops share one
  device), so that grouping never splits a class.

  A unit sums its ops' cost, flops, bytes, parameters and outputs (temp: the largest); its
  edges are those between class roots (the lowest-id ops), a subgraph of the DAG and so a DAG
  (merging the classes whole would close cycles: PipeDream colocates a layer's backward op with
  its forward op). Without colocation the unit graph is the graph itself."""
  n = graph.num_nodes
  root = graph.colocation_root()
  if np.array_equal(root, np.arange(n)):
    return graph, np.arange(n, dtype=np.int64)
  roots, unit_of = np.unique(root, return_inverse=True)
  m = roots.size
  keep = (root[graph.senders] == graph.senders) & (root[graph.receivers] == graph.receivers)
  pairs = np.unique(np.stack([unit_of[graph.senders[keep]], unit_of[graph.receivers[keep]]],
                             1), axis=0).reshape(-1, 2)

  def total(x):
    return np.bincount(unit_of, weights=x, minlength=m)

  temp = np.zeros(m)
  np.maximum.at(temp, unit_of, graph.temp_bytes)
  units = CompGraph(cost=total(graph.cost), out_bytes=total(graph.out_bytes),
                    param_bytes=total(graph.param_bytes), temp_bytes=temp,
                    flops=total(graph.flops), bytes_accessed=total(graph.bytes_accessed),
                    op_type=graph.op_type[roots], senders=pairs[:, 0], receivers=pairs[:, 1],
                    name=f"{graph.name}/units{m}")
  return units, unit_of.astype(np.int64)


def make_instance(graph: CompGraph, topology: Topology, groups: int, objective: str,
                  name: Optional[str] = None) -> Instance:
  """Groups one graph (at most `groups` groups of whole colocation classes: `coarsen` on
  `colocation_units`) and fixes its visiting order."""
  units, unit_of = colocation_units(graph)
  coarse = coarsen(units, int(groups))
  cg = coarse.graph
  order = cg.topological_order().astype(np.int64)
  group_of = cg.colocation_root()[coarse.mapping[unit_of]].astype(np.int64)
  lb = float(objectives.get_objective(objective).lower_bound(graph, topology)["bound"])
  return Instance(name=name or graph.name, graph=graph, topology=topology, coarse=coarse,
                  order=order, group_of=group_of, lower_bound=lb if lb > 0 else 1.0)


def stack(instances: Sequence[Instance], objective: str, max_devices: int,
          sizes: Optional[Tuple[int, int, int, int]] = None) -> Instances:
  """Pads the instances to one bucket and stacks them. `sizes` = (Mp, Eg, Np, Ep) forces the
  bucket (None: the smallest that holds them all)."""
  d = max(i.topology.num_devices for i in instances)
  if d > max_devices:
    raise ValueError(f"a topology has {d} devices; the policy serves at most {max_devices} "
                     f"(config.policy.max_devices)")
  mp = bucket(max(i.coarse.graph.num_nodes for i in instances))
  eg = bucket(max(i.coarse.graph.num_edges for i in instances))
  np_ = bucket(max(i.graph.num_nodes for i in instances))
  ep = bucket(max(i.graph.num_edges for i in instances))
  if sizes is not None:
    want = tuple(int(s) for s in sizes)
    if any(w < h for w, h in zip(want, (mp, eg, np_, ep))):
      raise ValueError(f"instances need padded sizes {(mp, eg, np_, ep)}, more than {want}")
    mp, eg, np_, ep = want
  chunk = choose_chunk(np.concatenate([i.graph.out_degree() for i in instances]), sizes=(np_, ep))
  obj = objectives.get_objective(objective)
  rows = []
  for inst in instances:
    cg, m, n = inst.coarse.graph, inst.coarse.graph.num_nodes, inst.graph.num_nodes
    feats = np.zeros((mp, len(STATIC_FEATURES)), np.float32)
    feats[:m] = static_features(cg, inst.topology)
    anc = np.zeros((mp, mp), np.float32)
    anc[:m, :m] = ancestors(cg)
    weight, memory = np.zeros(mp, np.float32), np.zeros(mp, np.float32)
    weight[:m] = cg.cost / max(float(cg.cost.sum()), 1e-30)
    cap = _finite_capacities(inst.topology)
    if cap.size:
      memory[:m] = (cg.param_bytes + cg.out_bytes + cg.temp_bytes) / float(cap.min())
    es, er = np.zeros(eg, np.int32), np.zeros(eg, np.int32)
    es[:cg.num_edges], er[:cg.num_edges] = cg.senders, cg.receivers
    order = np.concatenate([inst.order, np.arange(m, mp)]).astype(np.int32)
    position = np.empty(mp, np.int32)
    position[order] = np.arange(mp)
    root = np.concatenate([cg.colocation_root(), np.arange(m, mp)]).astype(np.int32)
    decides = np.zeros(mp, bool)
    decides[:m] = root[order[:m]] == order[:m]
    group_of = np.zeros(np_, np.int32)
    group_of[:n] = inst.group_of
    prio = np.zeros(np_, np.float32)
    prio[:n] = upward_rank(inst.graph)
    rows.append(Instances(
        net=GroupGraph(feats=feats, senders=es, receivers=er,
                       edge_mask=np.arange(eg) < cg.num_edges, node_mask=np.arange(mp) < m,
                       ancestors=anc,
                       device_mask=np.arange(max_devices) < inst.topology.num_devices,
                       weight=weight, memory=memory),
        sim=pad_graph(inst.graph, np_, ep, chunk),
        topology=pad_topology(inst.topology, d), group_of=group_of, priority=prio,
        order=order, position=position, decides=decides, root=root,
        num_devices=np.int32(inst.topology.num_devices),
        upper_bound=np.float32(obj.upper_bound(inst.graph, inst.topology)),
        scale=np.float32(inst.lower_bound)))
  return jax.tree_util.tree_map(lambda *xs: jnp.asarray(np.stack([np.asarray(x) for x in xs])),
                                *rows)


def build(graphs: Sequence[CompGraph], topologies: Sequence[Topology], groups: int,
          objective: str, max_devices: int = 8, names: Optional[Sequence[str]] = None,
          sizes=None) -> Tuple[List[Instance], Instances]:
  """(host instances, stacked Instances) of matching graphs and topologies."""
  if not graphs or len(graphs) != len(topologies):
    raise ValueError(f"need matching, non-empty graphs and topologies, got {len(graphs)} and "
                     f"{len(topologies)}")
  if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
    raise ValueError(f"groups must be an integer >= 1, got {groups!r}")
  objectives.get_objective(objective)
  names = [g.name for g in graphs] if names is None else list(names)
  insts = [make_instance(g, t, groups, objective, n) for g, t, n in
           zip(graphs, topologies, names)]
  return insts, stack(insts, objective, max_devices, sizes)


# ------------------------------------------------------------------ jitted side
def evaluate(batch: Instances, group_placement, objective: str):
  """(G, B) objectives of (G, B, Mp) group placements: every op takes its group's device,
  one vmapped call of the padded simulator for all G x B placements; the B placements of a
  graph are split across every device of the run where B divides evenly
  (`simulator.sharding`)."""
  value_fn = objectives.get_objective(objective).value
  sharding = sharding_lib.batch_sharding(group_placement.shape[1])

  def one(inst: Instances, gp):
    place = jnp.take(gp, inst.group_of, axis=-1)  # (B, Np)
    place = jnp.where(inst.sim.node_mask, place, 0)
    prio = jnp.broadcast_to(inst.priority, place.shape)
    res = sharding_lib.map_batch(simulate_padded, sharding, (inst.sim, inst.topology),
                                 (place, prio))
    return value_fn(res.makespan, res.peak_memory, res.oom, inst.topology.mem_capacity,
                    inst.upper_bound).astype(jnp.float32)

  return jax.vmap(one)(batch, group_placement)


def initial_placement(key, batch: Instances, samples: int, init: str):
  """(G, K, Mp) int32 the episodes' first state ("single": device 0; "random": uniform over
  the topology's devices, colocated groups together)."""
  g, mp = batch.order.shape
  if init == "single":
    return jnp.zeros((g, samples, mp), jnp.int32)
  if init != "random":
    raise ValueError(f"init must be one of {list(INITS)}, got {init!r}")
  place = jax.random.randint(key, (g, samples, mp), 0, batch.num_devices[:, None, None])
  root = jnp.broadcast_to(batch.root[:, None], place.shape)
  return jnp.take_along_axis(place, root, -1).astype(jnp.int32)


def visited_before(batch: Instances, steps):
  """(G, T, Mp) bool: the groups visited before each step in `steps` (T,)."""
  return batch.position[:, None, :] < steps[None, :, None]


def run_episodes(module: PlacetoPolicy, params: Any, batch: Instances, key, *, samples: int,
                 init: str, greedy: bool, objective: str) -> Episodes:
  """K episodes per instance of the batch (module docstring): one `lax.scan` over the T = Mp
  steps, each step one forward pass per episode and ONE batched simulator call. `greedy`
  takes the most likely device at every step instead of sampling."""
  g, mp = batch.order.shape
  k_init, k_steps = jax.random.split(key)
  place0 = initial_placement(k_init, batch, samples, init)
  obj0 = evaluate(batch, place0, objective)
  ids = jnp.arange(mp)

  def step(carry, t):
    place, obj = carry
    v = batch.order[:, t]  # (G,)
    visited = jnp.broadcast_to((batch.position < t)[:, None], place.shape)
    current = jnp.broadcast_to(v[:, None], (g, samples))
    logits = jax.vmap(lambda net, p, vis, cur: apply_states(module, params, net, p, vis, cur))(
        batch.net, place, visited, current)  # (G, K, Dmax)
    if greedy:
      action = jnp.argmax(logits, -1).astype(jnp.int32)
    else:
      action = jax.random.categorical(jax.random.fold_in(k_steps, t), logits).astype(jnp.int32)
    moved = (batch.root == v[:, None]) & batch.decides[:, t][:, None]  # (G, Mp) v's class
    new = jnp.where(moved[:, None, :], action[..., None], place)
    # Steps where no instance decides (padding past the last group) need no simulation.
    new_obj = jax.lax.cond(jnp.any(batch.decides[:, t]),
                           lambda: evaluate(batch, new, objective), lambda: obj)
    reward = (obj - new_obj) / batch.scale[:, None]
    return (new, new_obj), (place, action, reward, new_obj)

  (last, _), (places, actions, rewards, objs) = jax.lax.scan(step, (place0, obj0), ids)
  del ids
  placements = jnp.concatenate([places, last[None]], 0)  # (T + 1, G, K, Mp)
  objs = jnp.concatenate([obj0[None], objs], 0)  # (T + 1, G, K)
  return Episodes(placements=jnp.moveaxis(placements, 0, 2),
                  actions=jnp.moveaxis(actions, 0, 2), rewards=jnp.moveaxis(rewards, 0, 2),
                  objectives=jnp.moveaxis(objs, 0, 2))
