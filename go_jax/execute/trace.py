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


def eval_equations(eqns: Sequence[Any], in_vars: Sequence[Any], out_vars: Sequence[Any],
                   values: Sequence[Any], tag: bool = False,
                   first_index: int = 0) -> List[Any]:
  """Binds `eqns` in order on `values` (one per `in_vars`) and returns `out_vars`' values.

  With `tag`, equation k runs inside the named scope f"{TAG}{first_index + k}".
  """
  siu = _source_info_util()
  env: Dict[Any, Any] = dict(zip(in_vars, values))

  def read(v):
    return v.val if isinstance(v, jcore.Literal) else env[v]

  for k, eqn in enumerate(eqns):
    params = eqn.primitive.get_bind_params(eqn.params)
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
