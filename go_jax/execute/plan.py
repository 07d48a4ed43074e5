"""From a node placement to device segments of jaxpr equations (the host-side plan).

Rules (docs/design.md section 9, "Placed execution"):
  * An equation runs on the device that holds most of its nodes' work (weight per node:
    flops + bytes accessed + 1; ties: the lowest device). Equations whose nodes the placement
    puts on several devices are counted (`Plan.split_equations`): one equation cannot be split.
  * An equation with no node (the lowering folded it away) runs on the device of its first
    consumer, else of the producer of its first input, else on the device holding most of the
    work. Equations whose values reach no output of the program are not run (XLA drops them).
  * Dispatch order: a topological order of the equations, the highest priority first among the
    ready ones (an equation's priority: the max over its nodes'; no priority: the program's own
    order). An equation without a node takes its most urgent consumer's priority (so it is
    dispatched just before it), or runs as soon as it is ready if nothing reads it.
  * Segments: equations are appended, in dispatch order, to an open segment of their device; a
    device's open segment is closed (compiled as one `jax.jit` and dispatched) when an equation
    on another device needs one of its values, and at the end in the order they were opened. So
    each device runs its equations in dispatch order, and a value crosses devices as soon as the
    schedule needs it, not sooner.
  * `Plan.node_placement` is the placement actually run, per node: its equation's device; a node
    without an equation (a literal's broadcast) takes its first consumer node's device.
"""

from __future__ import annotations

import dataclasses
import heapq
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from jax.extend import core as jcore

from go_jax.execute.trace import TracedProgram


@dataclasses.dataclass(frozen=True)
class Segment:
  """Consecutive equations of one device, compiled and dispatched as one `jax.jit`."""
  device: int  # index into the program's devices
  eqns: Tuple[int, ...]  # equation indices, in dispatch order
  in_vars: Tuple[Any, ...]  # jaxpr vars read from outside (program inputs, consts, others)
  out_vars: Tuple[Any, ...]  # vars read by later segments or returned by the program


@dataclasses.dataclass(frozen=True)
class Plan:
  eqn_device: np.ndarray  # (E,) int device of each equation
  order: np.ndarray  # (L,) int the live equations' indices, in dispatch order
  segments: Tuple[Segment, ...]  # in dispatch order
  node_placement: np.ndarray  # (N,) int device each graph node actually runs on
  split_equations: int  # equations whose nodes the placement put on several devices
  dead_equations: int = 0  # equations whose values never reach an output: not run


def _is_var(v) -> bool:
  return not isinstance(v, jcore.Literal) and not isinstance(v, jcore.DropVar)


def _dataflow(eqns) -> Tuple[List[List[int]], List[List[int]]]:
  """(producers, consumers): per equation, the distinct equations it reads from / feeds."""
  made_by: Dict[Any, int] = {}
  producers: List[List[int]] = []
  consumers: List[List[int]] = [[] for _ in eqns]
  for i, e in enumerate(eqns):
    ps = list(dict.fromkeys(made_by[v] for v in e.invars if _is_var(v) and v in made_by))
    producers.append(ps)
    for p in ps:
      consumers[p].append(i)
    for v in e.outvars:
      if _is_var(v):
        made_by[v] = i
  return producers, consumers


def _equation_devices(traced: TracedProgram, placement: np.ndarray, num_devices: int,
                      producers, consumers) -> Tuple[np.ndarray, np.ndarray, int]:
  """(device per equation, has-a-node mask, number of split equations)."""
  e = len(traced.eqns)
  g = traced.graph.graph
  weight = np.asarray(g.flops, float) + np.asarray(g.bytes_accessed, float) + 1.0
  mapped = traced.node_eqn >= 0
  load = np.zeros((e, num_devices))
  np.add.at(load, (traced.node_eqn[mapped], placement[mapped]), weight[mapped])
  has_node = load.sum(1) > 0
  main = int(np.argmax(load.sum(0)))  # the device holding most of the work
  device = np.where(has_node, np.argmax(load, 1), main)  # ties: the lowest device
  split = int(np.sum((load > 0).sum(1) > 1))
  for i in reversed(range(e)):  # no node: the first consumer's device (consumers come later)
    if not has_node[i] and consumers[i]:
      device[i] = device[consumers[i][0]]
  for i in range(e):  # ... else the first input's producer's, else the main device
    if not has_node[i] and not consumers[i] and producers[i]:
      device[i] = device[producers[i][0]]
  return device, has_node, split


def _live(traced: TracedProgram, consumers) -> np.ndarray:
  """(E,) bool: the equation's value reaches the program's outputs (others are not run)."""
  outs = {v for v in traced.closed.jaxpr.outvars if _is_var(v)}
  live = np.zeros(len(traced.eqns), bool)
  for i in reversed(range(len(traced.eqns))):
    live[i] = any(live[c] for c in consumers[i]) or any(
        v in outs for v in traced.eqns[i].outvars if _is_var(v))
  return live


def _dispatch_order(traced: TracedProgram, priority: Optional[np.ndarray], has_node, producers,
                    consumers) -> np.ndarray:
  """Kahn's algorithm, the highest priority ready equation first (ties: program order)."""
  e = len(traced.eqns)
  if priority is None:
    prio = -np.arange(e, dtype=float)
  else:
    mapped = traced.node_eqn >= 0
    prio = np.full(e, -np.inf)
    np.maximum.at(prio, traced.node_eqn[mapped], np.asarray(priority, float)[mapped])
  for i in reversed(range(e)):  # no node: just before its most urgent consumer (else asap)
    if not has_node[i]:
      prio[i] = max((prio[c] for c in consumers[i]), default=np.inf)
  indeg = np.array([len(p) for p in producers])
  ready = [(-prio[i], i) for i in range(e) if indeg[i] == 0]
  heapq.heapify(ready)
  order = []
  while ready:
    _, i = heapq.heappop(ready)
    order.append(i)
    for c in consumers[i]:
      indeg[c] -= 1
      if indeg[c] == 0:
        heapq.heappush(ready, (-prio[c], c))
  return np.asarray(order, np.int64)


def _segments(traced: TracedProgram, device: np.ndarray, order: np.ndarray) -> List[Segment]:
  eqns = traced.eqns
  program_outs = {v for v in traced.closed.jaxpr.outvars if _is_var(v)}
  made_by = {v: i for i, e in enumerate(eqns) for v in e.outvars if _is_var(v)}
  readers: Dict[Any, set] = {}
  for i in order:  # the live equations
    for v in eqns[i].invars:
      if _is_var(v):
        readers.setdefault(v, set()).add(i)
  open_segs: Dict[int, List[int]] = {}  # device -> its open segment's equations (insertion order)
  where: Dict[int, int] = {}  # equation -> device of the open segment holding it
  segments: List[Segment] = []

  def close(d: int):
    members = open_segs.pop(d)
    inside = set(members)
    ins, outs = {}, {}
    for i in members:
      for v in eqns[i].invars:
        if _is_var(v) and made_by.get(v) not in inside:
          ins[v] = None
      for v in eqns[i].outvars:
        if _is_var(v) and (v in program_outs or readers.get(v, set()) - inside):
          outs[v] = None
      where.pop(i)
    segments.append(Segment(d, tuple(members), tuple(ins), tuple(outs)))

  for i in order:
    d = int(device[i])
    for v in eqns[i].invars:
      p = made_by.get(v) if _is_var(v) else None
      if p is not None and p in where and where[p] != d:
        close(where[p])
    open_segs.setdefault(d, []).append(int(i))
    where[int(i)] = d
  for d in list(open_segs):  # dicts keep insertion order: the order the segments were opened
    close(d)
  return segments


def _node_placement(traced: TracedProgram, device: np.ndarray, placement: np.ndarray):
  g = traced.graph.graph
  out = np.where(traced.node_eqn >= 0, device[np.maximum(traced.node_eqn, 0)], placement)
  for k in np.flatnonzero(traced.node_eqn < 0):  # untagged: the first tagged consumer's device
    succ = np.asarray(g.receivers)[np.asarray(g.senders) == k]
    succ = succ[traced.node_eqn[succ] >= 0]
    if succ.size:
      out[k] = out[succ.min()]
  return out.astype(np.int64)


def make_plan(traced: TracedProgram, placement, num_devices: int,
              priority=None) -> Plan:
  """The plan of running `traced` with `placement` (N,) over `num_devices` devices.

  Raises:
    ValueError: placement or priority of the wrong length, or a device outside [0, D).
  """
  n = traced.num_nodes
  placement = np.asarray(placement)
  if placement.shape != (n,) or not np.issubdtype(placement.dtype, np.integer):
    raise ValueError(f"placement must be an int array of shape ({n},) (one device per node of "
                     f"the program's pre-optimisation graph), got {placement.dtype} "
                     f"{placement.shape}")
  if n and (placement.min() < 0 or placement.max() >= num_devices):
    bad = int(np.flatnonzero((placement < 0) | (placement >= num_devices))[0])
    raise ValueError(f"placement puts node {bad} ({traced.graph.graph.node_names[bad]!r}) on "
                     f"device {int(placement[bad])}, outside [0, {num_devices})")
  if priority is not None:
    priority = np.asarray(priority, float)
    if priority.shape != (n,) or not np.all(np.isfinite(priority)):
      raise ValueError(f"priority must be {n} finite floats, got shape {priority.shape}")
  producers, consumers = _dataflow(traced.eqns)
  device, has_node, split = _equation_devices(traced, placement, num_devices, producers,
                                              consumers)
  order = _dispatch_order(traced, priority, has_node, producers, consumers)
  live = _live(traced, consumers)
  order = order[live[order]]
  return Plan(device, order, tuple(_segments(traced, device, order)),
              _node_placement(traced, device, placement), split, int(np.sum(~live)))


__all__ = ["Plan", "Segment", "make_plan"]
