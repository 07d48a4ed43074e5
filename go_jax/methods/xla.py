"""XLA's own schedule as a scheduling baseline (docs/design.md section 7): the method `xla_order`.

A graph built from a post-optimisation HLO module (`simulator.from_jax(fn, *args,
stage="post")`) numbers its nodes in the order of the ENTRY computation's instructions, and a
scheduled module prints that computation in XLA's execution order. Priority = -node id therefore
reproduces XLA's schedule exactly on one device (`simulator.frontends.xla_schedule_priority`
is the same rule, read from an `HloGraph`); on several devices it is XLA's order used as a list
scheduling priority. On any other graph it is just the node-id order.
"""

from __future__ import annotations

import numpy as np

from go_jax.methods import Problem, Proposal, register


@register("xla_order", "schedule",
          "node order: XLA's schedule when the graph is a post-optimization HLO module")
def xla_order(problem: Problem, config) -> Proposal:
  del config
  return Proposal(problem.placement, -np.arange(problem.graph.num_nodes, dtype=np.float64))
