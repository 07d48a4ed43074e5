"""`place_program`: run a JAX program with each op on the device a placement chose.

  placed = execute.place_program(step, args, placement)       # placement: (N,) int per node
  outs = placed(*args)                                          # == jax.jit(step)(*args)
  seconds = placed.measure(repeats=10)                          # median step time

The program is split at the JAX level (`go_jax.execute.trace`: jaxpr equations tied to the nodes
of `simulator.from_jax(fn, *args, stage="pre")`), each device's segments
(`go_jax.execute.plan`) are compiled ahead of time with `jax.jit` pinned to that device, values
cross devices with `jax.device_put`, and the segments are dispatched in the plan's order without
waiting on any of them, so devices overlap as far as the data allow (JAX's dispatch is
asynchronous; a segment starts when its inputs are ready on its device).

Works on any backend with several devices. On a CPU, `--xla_force_host_platform_device_count=N`
in XLA_FLAGS (set before JAX starts) gives N devices that share the host's cores.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import jax
import numpy as np
from jax.extend import core as jcore

from go_jax.execute import plan as plan_lib
from go_jax.execute.trace import TracedProgram, eval_equations, trace_program


@dataclasses.dataclass
class _Compiled:
  segment: plan_lib.Segment
  call: Callable[..., Any]  # the compiled executable: in_vars' values -> out_vars' values


def _compile(traced: TracedProgram, seg: plan_lib.Segment, device) -> _Compiled:
  eqns = [traced.eqns[i] for i in seg.eqns]

  def piece(*values):
    return eval_equations(eqns, seg.in_vars, seg.out_vars, values, unpin=True)

  piece.__name__ = f"segment_d{seg.device}_{seg.eqns[0]}"
  sharding = jax.sharding.SingleDeviceSharding(device)
  jitted = jax.jit(piece, in_shardings=(sharding,) * len(seg.in_vars),
                   out_shardings=[sharding] * len(seg.out_vars))
  avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype, sharding=sharding,
                                weak_type=v.aval.weak_type)
           for v in seg.in_vars]
  compiled = jitted.lower(*avals).compile()
  # JAX's ahead-of-time call checks a committed argument's layout against the executable's, and
  # an array of a sub-byte type (int4, uint4, float4_e2m1fn, ...) that device_put made reports
  # its layout without the element size the executable's has (JAX 0.10), so that check refuses
  # what jit runs. Such segments are called through their jit, which reuses this compilation.
  if any(_sub_byte(v.aval.dtype) for v in seg.in_vars):
    return _Compiled(seg, jitted)
  return _Compiled(seg, compiled)


def _sub_byte(dtype) -> bool:
  return (not jax.dtypes.issubdtype(dtype, jax.dtypes.extended)
          and jax.dtypes.itemsize_bits(dtype) < 8)


class PlacedProgram:
  """A program compiled to run with a placement over `devices`; call it like the program.

  Attributes:
    devices: the devices, indexed by the placement's values.
    traced: the program's equations and graph (`go_jax.execute.trace.TracedProgram`).
    plan: equation devices, dispatch order, segments and the node placement actually run.
    compile_seconds: wall time of tracing, planning and compiling the segments.
  """

  def __init__(self, traced: TracedProgram, plan: plan_lib.Plan, devices: Sequence[Any],
               example_args: Optional[Tuple] = None):
    self.traced, self.plan, self.devices = traced, plan, tuple(devices)
    self.compile_seconds = 0.0
    self._example_args = example_args
    self._compiled = [_compile(traced, s, self.devices[s.device]) for s in plan.segments]
    self._index = {}  # device -> its first index
    for i, dev in enumerate(self.devices):
      self._index.setdefault(dev, i)
    # Consts (arrays the program closes over) are copied once, here, to the device that reads
    # them first; copies to other devices are made at the first call and kept.
    first = {}
    for c in self._compiled:
      for v in c.segment.in_vars:
        first.setdefault(v, c.segment.device)
    self._first_reader = first
    self._consts = {v: ({first[v]: jax.device_put(x, self.devices[first[v]])} if v in first
                        else {-1: x})
                    for v, x in zip(traced.closed.jaxpr.constvars, traced.closed.consts)}

  @property
  def num_segments(self) -> int:
    return len(self.plan.segments)

  @property
  def node_placement(self) -> np.ndarray:
    """(N,) the device each node of the program's graph runs on (see `plan`)."""
    return self.plan.node_placement

  def _where(self, x) -> int:
    """Index of the device holding array `x` (-1: a host value or another device)."""
    if isinstance(x, jax.Array) and len(x.sharding.device_set) == 1:
      return self._index.get(next(iter(x.sharding.device_set)), -1)
    return -1

  def __call__(self, *args):
    flat, tree = jax.tree_util.tree_flatten(args)
    if tree != self.traced.in_tree:
      raise ValueError(f"PlacedProgram: arguments of structure {tree}, expected "
                       f"{self.traced.in_tree}")
    jaxpr = self.traced.closed.jaxpr
    env: Dict[Any, Dict[int, Any]] = {}  # var -> device index -> its value on that device
    for v, x in zip(jaxpr.invars, flat):
      env[v] = {self._where(x): x}
    env.update(self._consts)
    for c in self._compiled:
      d = c.segment.device
      need = [v for v in c.segment.in_vars if d not in env[v]]
      if need:  # one batched transfer per segment: far cheaper than a device_put per value
        moved = jax.device_put([next(iter(env[v].values())) for v in need], self.devices[d])
        for v, m in zip(need, moved):
          env[v][d] = m
      outs = c.call(*[env[v][d] for v in c.segment.in_vars])
      for v, o in zip(c.segment.out_vars, outs):
        env[v] = {d: o}
    results = [_as_output(v.val if isinstance(v, jcore.Literal) else next(iter(env[v].values())),
                          v.aval) for v in jaxpr.outvars]
    return jax.tree_util.tree_unflatten(self.traced.out_tree, results)

  def place_args(self, *args) -> Tuple:
    """`args` with each array moved to the device of the first segment that reads it.

    A training loop keeps each weight on the device that uses it; a step called on arguments
    placed so copies only what a second device also reads, as the simulator assumes (an op's
    parameters are resident on its device)."""
    flat, tree = jax.tree_util.tree_flatten(args)
    first, invars = self._first_reader, self.traced.closed.jaxpr.invars
    placed = [jax.device_put(x, self.devices[first[v]]) if v in first else x
              for v, x in zip(invars, flat)]
    return jax.tree_util.tree_unflatten(tree, placed)

  def measure(self, repeats: int = 10, args: Optional[Tuple] = None, warmup: int = 2) -> float:
    """Median wall time in seconds of one call, dispatch to the last output ready, with the
    arguments first moved where they are read (`place_args`).

    `args`: the call's arguments (default: those `place_program` was given, when concrete).
    """
    if repeats < 1 or warmup < 0:
      raise ValueError(f"measure: repeats must be >= 1 and warmup >= 0, got {repeats}, {warmup}")
    args = self._example_args if args is None else args
    if args is None:
      raise ValueError("measure: place_program was given abstract arguments; pass args=")
    args = jax.block_until_ready(self.place_args(*args))
    times = []
    for k in range(warmup + repeats):
      t0 = time.perf_counter()
      jax.block_until_ready(self(*args))
      if k >= warmup:
        times.append(time.perf_counter() - t0)
    return float(statistics.median(times))


def _as_output(x, aval) -> jax.Array:
  """An output value as jax.jit returns it. A host value (a literal the program returns, or an
  argument or numpy constant it returns as is) becomes an array of its aval's dtype and weak
  type, not the bare Python scalar or (float64) numpy array it was."""
  if isinstance(x, jax.Array):
    return x
  y = jax.numpy.asarray(x)
  if (y.dtype, y.weak_type) != (aval.dtype, aval.weak_type):
    y = jax.numpy.asarray(x, aval.dtype)
  return y


def _concrete(args) -> bool:
  return all(isinstance(x, (jax.Array, np.ndarray, np.generic, int, float, complex, bool))
             for x in jax.tree_util.tree_leaves(args))


def place_program(fn: Callable, args: Tuple, placement, devices: Optional[Sequence[Any]] = None,
                  priority=None, traced: Optional[TracedProgram] = None) -> PlacedProgram:
  """`fn` compiled to run with `placement` over `devices`.

  Args:
    fn: a pure JAX function.
    args: its arguments, a tuple (arrays, or `jax.ShapeDtypeStruct`s: then `measure` needs args).
    placement: (N,) int, a device index per node of the graph that
      `simulator.from_jax(fn, *args, stage="pre")` builds (also `placed.traced.graph.graph`).
    devices: the devices the indices refer to (default: `jax.local_devices()`).
    priority: optional (N,) float, higher dispatched first among ready ops (a method's priority;
      default: the program's own order).
    traced: `trace_program(fn, *args)` when the caller already has it (several placements of one
      program share one trace).

  Raises:
    ValueError: `fn` fails to trace or has side effects, args not a tuple, a placement of the
      wrong length or with a device index outside [0, len(devices)).
  """
  t0 = time.perf_counter()
  if not isinstance(args, tuple):
    raise ValueError(f"place_program: args must be a tuple of the program's arguments, got "
                     f"{type(args).__name__}")
  devices = tuple(jax.local_devices() if devices is None else devices)
  if not devices:
    raise ValueError("place_program: no devices")
  traced = traced or trace_program(fn, *args)
  plan = plan_lib.make_plan(traced, placement, len(devices), priority)
  example = args if _concrete(args) else None
  placed = PlacedProgram(traced, plan, devices, example)
  placed.compile_seconds = time.perf_counter() - t0
  return placed


__all__ = ["PlacedProgram", "place_program"]
