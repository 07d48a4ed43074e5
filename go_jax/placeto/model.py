"""Placeto's policy network (Addanki et al., NeurIPS 2019, section 3.2): a graph embedding of the
current placement, read out at the group the episode visits now, and a softmax over devices.

Inputs (`GroupGraph`, one coarse graph of Mp padded groups, built on the host by
go_jax/placeto/env.py) and the episode's state (placement, visited flags, current group):

1. **Per-group attributes** (the paper's node features): the static ones of `GroupGraph.feats`
   (cost, output bytes, memory and critical-path figures, `env.STATIC_FEATURES`) and the state's
   current device (one-hot over `max_devices`), "is the current node" and "visited" flags.
2. **Message passing** over predecessors and successors: `rounds` synchronous rounds, each
   node summing (degree-normalised) messages from its parents and from its children through
   separate networks, then a residual update. (The paper sweeps the DAG in topological order
   once per direction; a few synchronous rounds are the batched, jit-friendly version, as the
   brief of issue 14 asks.)
3. **Pooling of parent / child / parallel groups** (the paper's three-way split): for the
   current group v, the mean embedding (each set through its own network) of the groups that
   reach v (parents: all ancestors), that v reaches (children: all descendants) and of the
   others (parallel: neither), concatenated with v's own embedding.
4. **Policy head**: that vector, plus per device what the device holds seen from the current
   group (`device_features`: the cost shares of its parents / children / parallel groups and
   direct neighbours there, the device's load and memory), scored by one network shared by
   all devices (a device-equivariant head: no device id is learned separately), gives
   `max_devices` logits; the devices beyond the topology's are masked out (-1e9), so one
   network serves any device count up to `max_devices`, and no output depends on the graph's
   size.

Only the current group's embedding is read out, but the state changes every step, so the whole
embedding is recomputed at each step (as in the paper); the network is small (hidden 32-64) and
the groups few (32-64), which keeps a step cheap next to its simulation.
"""

from __future__ import annotations

from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

NEG = -1e9  # logit of a device the topology does not have


@flax.struct.dataclass
class GroupGraph:
  """The coarse graph of one instance as the network reads it (padded groups never count)."""
  feats: jnp.ndarray  # (Mp, F) float32 static per-group attributes (env.STATIC_FEATURES)
  senders: jnp.ndarray  # (Eg,) int32 coarse edge u -> v: v consumes u's output (0 on padding)
  receivers: jnp.ndarray  # (Eg,) int32
  edge_mask: jnp.ndarray  # (Eg,) bool real edges
  node_mask: jnp.ndarray  # (Mp,) bool real groups
  ancestors: jnp.ndarray  # (Mp, Mp) float32 [v, u] = 1 when u reaches v (u != v)
  device_mask: jnp.ndarray  # (Dmax,) bool the topology's devices
  weight: jnp.ndarray  # (Mp,) float32 the group's share of the graph's cost (0 on padding)
  memory: jnp.ndarray  # (Mp,) float32 the group's bytes over the smallest device memory (0: inf)


def default_config() -> ml_collections.ConfigDict:
  """The policy's settings: hidden width, message-passing rounds, devices it can serve."""
  c = ml_collections.ConfigDict()
  c.hidden = 32
  c.rounds = 3
  c.max_devices = 8
  return c


def check_config(config) -> None:
  """ValueError naming the first bad field of a policy config."""
  for name in ("hidden", "rounds", "max_devices"):
    value = config.get(name, None) if hasattr(config, "get") else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f"config.policy.{name} must be an integer >= 1, got {value!r}")
  extra = sorted(set(config.keys()) - {"hidden", "rounds", "max_devices"})
  if extra:
    raise ValueError(f"config.policy has unknown field(s) {extra}; fields: hidden, rounds, "
                     "max_devices")


class PlacetoPolicy(nn.Module):
  """Logits over devices for the current group of a placement state (module docstring)."""
  hidden: int = 32
  rounds: int = 3
  max_devices: int = 8

  @nn.compact
  def __call__(self, graph: GroupGraph, placement, visited, current):
    """placement (Mp,) int32 device per group, visited (Mp,) bool, current () int32 group
    visited now -> (max_devices,) float32 logits."""
    mp = graph.node_mask.shape[-1]
    real = graph.node_mask.astype(jnp.float32)
    ids = jnp.arange(mp)
    is_current = (ids == current).astype(jnp.float32)
    onehot = jax.nn.one_hot(placement, self.max_devices) * real[:, None]
    x = jnp.concatenate([graph.feats, onehot, is_current[:, None],
                         visited.astype(jnp.float32)[:, None] * real[:, None]], -1)
    h = nn.relu(nn.Dense(self.hidden, name="embed")(x)) * real[:, None]
    emask = graph.edge_mask.astype(jnp.float32)[:, None]
    out_deg = jax.ops.segment_sum(emask[:, 0], graph.senders, mp)
    in_deg = jax.ops.segment_sum(emask[:, 0], graph.receivers, mp)
    for r in range(self.rounds):
      to_parent = nn.Dense(self.hidden, name=f"child_msg{r}")(h)  # what a child tells parents
      to_child = nn.Dense(self.hidden, name=f"parent_msg{r}")(h)  # what a parent tells children
      from_children = jax.ops.segment_sum(to_parent[graph.receivers] * emask, graph.senders,
                                          mp) / jnp.maximum(out_deg, 1.0)[:, None]
      from_parents = jax.ops.segment_sum(to_child[graph.senders] * emask, graph.receivers,
                                         mp) / jnp.maximum(in_deg, 1.0)[:, None]
      upd = nn.Dense(self.hidden, name=f"update{r}")(
          jnp.concatenate([h, nn.relu(from_children), nn.relu(from_parents)], -1))
      h = (h + nn.relu(upd)) * real[:, None]
    parents = graph.ancestors[current]  # (Mp,) groups that reach v
    children = graph.ancestors[:, current]  # (Mp,) groups v reaches
    parallel = real * (1.0 - parents) * (1.0 - children) * (1.0 - is_current)

    def pool(weight, name):
      z = nn.relu(nn.Dense(self.hidden, name=name)(h))
      return weight @ z / jnp.maximum(jnp.sum(weight), 1.0)

    z = jnp.concatenate([h[current], pool(parents, "pool_parents"),
                         pool(children, "pool_children"), pool(parallel, "pool_parallel")], -1)
    z = nn.Dense(self.hidden, name="head0")(z)
    dev = device_features(graph, onehot, current, parents, children, parallel)
    z = nn.relu(z[None, :] + nn.Dense(self.hidden, name="head_device")(dev))  # (Dmax, H)
    logits = nn.Dense(1, name="head1")(z)[:, 0]
    return jnp.where(graph.device_mask, logits, NEG).astype(jnp.float32)


def device_features(graph: GroupGraph, onehot, current, parents, children, parallel):
  """(Dmax, 9) what each device holds, seen from the current group v: the cost shares of v's
  parents, children and parallel groups on it, its share of v's direct predecessors and
  successors, its load (cost share x devices, v left out), its memory with and without v (over
  the smallest device memory), and whether v is on it now. The head scores every device with
  the same network on these, so no device is special (the paper's head reads device one-hots
  through the pooled embeddings; this keeps that information per device)."""
  w = graph.weight
  others = w * (1.0 - jax.nn.one_hot(current, w.shape[0]))

  def share(mask):
    mass = mask * w
    return mass @ onehot / jnp.maximum(jnp.sum(mass), 1e-9)

  emask = graph.edge_mask.astype(jnp.float32)
  into = emask * (graph.receivers == current)
  out_of = emask * (graph.senders == current)
  preds = into @ onehot[graph.senders] / jnp.maximum(jnp.sum(into), 1.0)
  succs = out_of @ onehot[graph.receivers] / jnp.maximum(jnp.sum(out_of), 1.0)
  d = jnp.maximum(jnp.sum(graph.device_mask), 1)
  load = others @ onehot * d
  mem = (graph.memory * (1.0 - jax.nn.one_hot(current, w.shape[0]))) @ onehot
  return jnp.stack([share(parents), share(children), share(parallel), preds, succs, load,
                    mem, mem + graph.memory[current], onehot[current]], -1)


def make_policy(config) -> PlacetoPolicy:
  """The module a policy config describes (ValueError on a bad config)."""
  check_config(config)
  return PlacetoPolicy(hidden=int(config.hidden), rounds=int(config.rounds),
                       max_devices=int(config.max_devices))


def apply_states(module: PlacetoPolicy, params: Any, graph: GroupGraph, placement, visited,
                 current):
  """Logits of a batch of states of one graph: placement / visited (..., Mp), current (...)
  -> (..., max_devices). Any number of leading axes (episodes, steps)."""
  lead = current.shape
  flat = lambda x: x.reshape((-1,) + x.shape[len(lead):])  # noqa: E731
  logits = jax.vmap(module.apply, (None, None, 0, 0, 0))(
      params, graph, flat(placement), flat(visited), flat(current))
  return logits.reshape(lead + (module.max_devices,))
