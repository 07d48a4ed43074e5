"""A JAX program as jaxpr equations, each tied to the nodes of its pre-optimisation graph.

Why: a placement found by the simulator indexes the nodes of the graph that
`simulator.from_jax(fn, *args, stage="pre")` builds (one node per HLO instruction of the ENTRY
computation). To run the program with those choices, the program must be cut where the HLO is
cut, but XLA cannot run pieces of an HLO module on different devices through JAX's public API;
JAX can, a jaxpr equation at a time. So we go back from HLO nodes to the jaxpr equations that
lowered to them.

How: the program's jaxpr is re-evaluated with every equation `i` inside a named scope `gjx<i>`
(its own name stack and traceback kept, as `jax.core.eval_jaxpr` keeps them). Lowering that
evaluation yields the same HLO instructions in the same order (only their op_name metadata
gains the tag; `trace_program` checks node count and opcodes against the plain lowering), so the
tag in each node's op_name (or in the op_names of the instructions inside a fusion / call) names
its equation. Nodes without a tag are instructions the lowering made for no equation in
particular (the broadcast of a literal constant, say); equations without a node are ones the
lowering folded away (constant arithmetic, a broadcast merged with an identical one).

Sharding annotations that only place a value (`VALUE_IDENTITY`) run as the identity in a
placed segment; the ones whose meaning depends on devices are refused (`refuse_pinned`).

The evaluator below is written by hand because JAX's `eval_jaxpr` has no hook around each
equation; it binds each equation exactly as `eval_jaxpr` does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from typing import Any, Callable, Dict, List, Sequence

import jax
import numpy as np
from jax.extend import core as jcore

from simulator.frontends import hlo as hlo_frontend

TAG = "gjx"
_TAG_RE = re.compile(TAG + r"(\d+)(?=/|$)")


def _source_info_util():
  # JAX keeps no public way to bind an equation under its own name stack and traceback;
  # eval_jaxpr itself uses this module.
  from jax._src import source_info_util  # pylint: disable=g-import-not-at-top
  return source_info_util


# Primitives that only say where a value lives: each output is its input, value for value. A
# placed segment runs them as the identity (at any depth: `unpin`), since the device they name
# is not the one the placement chose, and JAX refuses a jit on one device that names another.
VALUE_IDENTITY = ("sharding_constraint", "device_put")
# Primitives whose meaning depends on the devices they run on (a body per device, collectives
# over mesh axes): a placed program cannot run them on the one device of a segment.
_PER_DEVICE = ("shard_map", "xla_pmap")


def _pins(value) -> bool:
  """Whether an equation parameter names devices: a sharding, a device or a non-empty mesh."""
  if isinstance(value, (tuple, list)):
    return any(_pins(x) for x in value)
  if isinstance(value, (jax.sharding.Sharding, jax.Device)):
    return True
  return hasattr(value, "axis_names") and hasattr(value, "empty") and not value.empty


def _mesh_sharded(aval) -> bool:
  """Whether a value's type is sharded over an Explicit mesh axis (explicit sharding mode; an
  Auto mesh, as any jit under a mesh has, leaves placement to the compiler)."""
  mesh = getattr(getattr(aval, "sharding", None), "mesh", None)
  return jax.sharding.AxisType.Explicit in tuple(getattr(mesh, "axis_types", ()))


def _shape_dtype(aval):
  return getattr(aval, "shape", None), getattr(aval, "dtype", None)


def _sub_jaxprs(params) -> List[Any]:
  out = []
  for value in params.values():
    for x in value if isinstance(value, (tuple, list)) else (value,):
      if isinstance(x, jcore.ClosedJaxpr):
        out.append(x.jaxpr)
      elif isinstance(x, jcore.Jaxpr):
        out.append(x)
  return out


def refuse_pinned(jaxpr, name: str) -> None:
  """Refuses, by primitive and source line, an equation (at any depth) that a placed program
  cannot run on the device its placement chose; `VALUE_IDENTITY` ones are run as the identity.

  Raises:
    ValueError: a shard_map / pmap, an equation whose parameters name devices (a jit with
      in / out shardings or traced under a mesh context, whose segment JAX would refuse; an op
      with an out_sharding), or whose values are sharded over an Explicit mesh axis (explicit
      sharding mode: reshard, mesh_cast).
  """
  siu = _source_info_util()
  for eqn in jaxpr.eqns:
    prim, why = eqn.primitive.name, None
    if prim in VALUE_IDENTITY:
      if any(_shape_dtype(o.aval) != _shape_dtype(i.aval)
             for i, o in zip(eqn.invars, eqn.outvars)):
        why = "its outputs differ in type from its inputs"
    elif prim in _PER_DEVICE:
      why = "it runs a body per device of its mesh"
    else:
      pinned = [k for k, v in eqn.params.items() if _pins(v)]
      if pinned:
        why = f"its parameter {pinned[0]!r} names devices ({eqn.params[pinned[0]]})"
      elif any(_mesh_sharded(v.aval) for v in eqn.outvars):
        why = "its values are sharded over an explicit mesh axis"
    if why:
      raise ValueError(f"program {name!r}: {prim} at {siu.summarize(eqn.source_info)} pins "
                       f"values to devices ({why}); a placed program puts each op on the device "
                       f"its placement chose: pass the program without sharding annotations, "
                       f"outside any mesh context (jax.sharding.set_mesh)")
    for sub in _sub_jaxprs(eqn.params):
      refuse_pinned(sub, name)


def _unpin_jaxpr(jaxpr):
  """`jaxpr` with every `VALUE_IDENTITY` equation (at any depth) removed, its outputs replaced by
  its inputs; the same object where there is none."""
  sub: Dict[Any, Any] = {}

  def s(v):
    return sub.get(v, v) if isinstance(v, jcore.Var) else v

  eqns, changed = [], False
  for eqn in jaxpr.eqns:
    if eqn.primitive.name in VALUE_IDENTITY:
      sub.update((o, s(i)) for i, o in zip(eqn.invars, eqn.outvars))
      changed = True
      continue
    params = _unpin_params(eqn.params)
    invars = [s(v) for v in eqn.invars]
    if params is not eqn.params or any(a is not b for a, b in zip(invars, eqn.invars)):
      eqn, changed = eqn.replace(invars=invars, params=params), True
    eqns.append(eqn)
  if not changed:
    return jaxpr
  return jaxpr.replace(eqns=eqns, outvars=[s(v) for v in jaxpr.outvars])


def _unpin_params(params):
  """`params` with their jaxprs unpinned (`_unpin_jaxpr`); the same object if none changed."""
  def one(x):
    if isinstance(x, jcore.ClosedJaxpr):
      inner = _unpin_jaxpr(x.jaxpr)
      return x if inner is x.jaxpr else x.replace(jaxpr=inner)
    if isinstance(x, jcore.Jaxpr):
      return _unpin_jaxpr(x)
    return x

  new = {}
  for k, v in params.items():
    new[k] = tuple(one(x) for x in v) if isinstance(v, tuple) else one(v)
  same = all(new[k] is v or (isinstance(v, tuple) and all(a is b for a, b in zip(new[k], v)))
             for k, v in params.items())
  return params if same else new


def eval_equations(eqns: Sequence[Any], in_vars: Sequence[Any], out_vars: Sequence[Any],
                   values: Sequence[Any], tag: bool = False,
                   first_index: int = 0, unpin: bool = False) -> List[Any]:
  """Binds `eqns` in order on `values` (one per `in_vars`) and returns `out_vars`' values.

  With `tag`, equation k runs inside the named scope f"{TAG}{first_index + k}". With `unpin`
  (a placed segment), `VALUE_IDENTITY` equations, at any depth, return their inputs.
  """
  siu = _source_info_util()
  env: Dict[Any, Any] = dict(zip(in_vars, values))

  def read(v):
    return v.val if isinstance(v, jcore.Literal) else env[v]

  for k, eqn in enumerate(eqns):
    if unpin and eqn.primitive.name in VALUE_IDENTITY:
      for v, i in zip(eqn.outvars, eqn.invars):
        if not isinstance(v, jcore.DropVar):
          env[v] = read(i)
      continue
    params = eqn.primitive.get_bind_params(_unpin_params(eqn.params) if unpin else eqn.params)
    scope = jax.named_scope(f"{TAG}{first_index + k}") if tag else contextlib.nullcontext()
    with scope:
      stack = siu.current_name_stack() + eqn.source_info.name_stack
      with siu.user_context(eqn.source_info.traceback, name_stack=stack), eqn.ctx.manager:
        out = eqn.primitive.bind(*[read(v) for v in eqn.invars], **params)
    outs = out if eqn.primitive.multiple_results else [out]
    for v, o in zip(eqn.outvars, outs):
      if not isinstance(v, jcore.DropVar):
        env[v] = o
  return [read(v) for v in out_vars]


@dataclasses.dataclass(frozen=True)
class TracedProgram:
  """A program's jaxpr and the equation each node of its pre-optimisation graph came from."""
  closed: Any  # jax.extend.core.ClosedJaxpr of fn on the flattened args
  in_tree: Any  # pytree structure of the args
  out_tree: Any  # pytree structure of the outputs
  graph: hlo_frontend.HloGraph  # the tagged lowering (same nodes as from_jax(fn, *args))
  node_eqn: np.ndarray  # (N,) int: index of the equation each node came from; -1: untagged

  @property
  def eqns(self) -> List[Any]:
    return self.closed.jaxpr.eqns

  @property
  def num_nodes(self) -> int:
    return self.graph.graph.num_nodes


def _node_equation(op_name: str, inner_op_names: Sequence[str]) -> int:
  """The equation tagged in a node's op_name, else in the first tagged instruction inside it."""
  for name in (op_name, *inner_op_names):
    m = _TAG_RE.search(name or "")
    if m:
      return int(m.group(1))
  return -1


def _unwrap_jit(fn: Callable, closed, name: str):
  """The body of `fn`'s jaxpr where `fn` is already jitted, else `closed` as it is.

  Why: the front end lowers an already-jitted function as it is (its body's instructions are
  the graph's nodes), while its jaxpr is a single `jit` equation, which re-evaluated in a jit
  would lower to one `call` node; the equations that match the graph's nodes are its body's.

  Raises:
    ValueError: `fn` is jitted with in_shardings / out_shardings: they pin its values to
      devices (and lower to nodes of their own), where a placed program puts each op on the
      device its placement chose.
  """
  jaxpr = closed.jaxpr
  if not callable(getattr(fn, "lower", None)) or len(jaxpr.eqns) != 1 or jaxpr.constvars:
    return closed
  eqn = jaxpr.eqns[0]
  if (eqn.primitive.name not in ("jit", "pjit") or list(eqn.invars) != list(jaxpr.invars)
      or list(eqn.outvars) != list(jaxpr.outvars)):
    return closed
  pinned = [x for k in ("in_shardings", "out_shardings") for x in eqn.params.get(k, ())
            if isinstance(x, jax.sharding.Sharding)]
  if pinned:
    raise ValueError(f"program {name!r} is jitted with shardings ({pinned[0]}): a placed "
                     f"program puts each op on the device its placement chose; pass the "
                     f"function jitted without in_shardings / out_shardings")
  return eqn.params["jaxpr"]


def _refuse_static_arguments(fn: Callable, name: str, args) -> None:
  """A jitted function with static arguments is refused by name: the front end lowers it (its
  own jit binds them), but the placed program's arguments are all traced values, where JAX would
  say only 'Non-hashable static arguments are not supported' of a tracer. Called after tracing
  failed (a static argument always fails there), so a program that traces is traced once."""
  if not (callable(getattr(fn, "lower", None)) and callable(getattr(fn, "trace", None))):
    return
  try:
    dynamic = fn.trace(*args).in_tree
  except Exception:  # pylint: disable=broad-except  # make_jaxpr reports the user's error
    return
  if dynamic != jax.tree_util.tree_structure((tuple(args), {})):
    raise ValueError(f"program {name!r} is a jitted function with static arguments "
                     f"(static_argnums): a placed program traces all its arguments; pass the "
                     f"function unjitted with its static arguments bound (functools.partial)")


def trace_program(fn: Callable, *args, check: bool = True) -> TracedProgram:
  """Traces `fn` on `args` (arrays or ShapeDtypeStructs) and ties graph nodes to equations.

  Raises:
    ValueError: `fn` fails to trace or lower, the program has side effects (which could not be
      split across devices), or the tagged lowering's nodes differ from the plain one's (`check`).
  """
  name = getattr(fn, "__name__", "fn")
  flat, in_tree = jax.tree_util.tree_flatten(args)
  try:
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
  except Exception as e:  # the user's program: name it, keep the cause
    _refuse_static_arguments(fn, name, args)  # its static arguments failed as tracers: say so
    raise ValueError(f"cannot trace {name!r}: {type(e).__name__}: {e}") from e
  if closed.effects:
    raise ValueError(f"program {name!r} has side effects ({', '.join(map(str, closed.effects))})"
                     f"; a placed program must be pure")
  out_tree = jax.tree_util.tree_structure(out_shape)
  closed = _unwrap_jit(fn, closed, name)
  jaxpr = closed.jaxpr
  refuse_pinned(jaxpr, name)

  def tagged(*flat_args):
    return eval_equations(jaxpr.eqns, [*jaxpr.constvars, *jaxpr.invars], jaxpr.outvars,
                          [*closed.consts, *flat_args], tag=True)

  tagged.__name__ = name
  graph = hlo_frontend.from_jax_full(tagged, *flat, stage="pre", name=name)
  if check:
    plain = hlo_frontend.from_jax_full(fn, *args, stage="pre", name=name)
    if plain.opcodes != graph.opcodes:
      raise ValueError(
          f"program {name!r}: its re-traced equations lower to {graph.graph.num_nodes} nodes, "
          f"the program to {plain.graph.num_nodes} (or in another order); cannot tie the "
          f"graph's nodes to equations")
  node_eqn = np.array([_node_equation(p, q) for p, q in zip(graph.op_names,
                                                             graph.fused_op_names)], np.int64)
  return TracedProgram(closed, in_tree, out_tree, graph, node_eqn)


__all__ = ["TAG", "TracedProgram", "eval_equations", "trace_program"]
