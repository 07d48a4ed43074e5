"""Placed execution: run a JAX program with each op on the device a placement chose.

`place_program(fn, args, placement)` returns a `PlacedProgram` that computes what
`jax.jit(fn)(*args)` computes, with the program split at the JAX level into per-device segments
(`trace`: jaxpr equations tied to graph nodes; `plan`: devices, dispatch order, segments;
`program`: compilation, dispatch, timing). docs/design.md section 9 states the rules.
"""

from go_jax.execute.plan import Plan, Segment, make_plan
from go_jax.execute.program import PlacedProgram, place_program
from go_jax.execute.trace import TracedProgram, trace_program

__all__ = ["PlacedProgram", "Plan", "Segment", "TracedProgram", "make_plan", "place_program",
           "trace_program"]
