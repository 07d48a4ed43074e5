"""Fusion baselines (design.md section 4.1): no fusion, every request, and XLA's own choice.

Fusion methods (kind "fusion") work on a fixed placement and priority (`solve(...,
placement=p, priority=q)`) and return a fuse mask; the registry re-simulates it like every
other answer, so a Solution's objective is the fused simulation's.

* `no_fusion`: no request (the graph as it is).
* `fuse_all`: every op asks; rules F1-F2 keep the legal requests (greedy, in topological order).
* `xla_fusion`: XLA's decisions carried onto the pre-optimisation graph
  (`simulator.frontends.xla.xla_fusion_decisions(pre, post)`), passed as the option
  `decisions`; `xla_fusion_program(fn, *args)` builds the costed pre graph and the decisions
  of a JAX program in one call. A `jax:` or `zoo:` graph does not remember its program, so the
  decisions cannot be recomputed from the graph alone.
"""

from __future__ import annotations

import numpy as np

from go_jax.methods import Problem, Proposal, register
from simulator import fusion


def _checked(problem: Problem) -> None:
  fusion.check_fusable(problem.graph)


@register("no_fusion", "fusion", "fusion baseline: no op is fused")
def no_fusion(problem: Problem, config) -> Proposal:
  del config
  return Proposal(problem.placement, fuse=np.zeros(problem.graph.num_nodes, bool))


@register("fuse_all", "fusion",
          "fusion baseline: every op asks to fuse into its consumer (the legal requests hold)")
def fuse_all(problem: Problem, config) -> Proposal:
  del config
  _checked(problem)
  return Proposal(problem.placement, fuse=np.ones(problem.graph.num_nodes, bool))


@register("xla_fusion", "fusion",
          "fusion baseline: XLA's own fusion decisions on a pre-optimisation JAX graph",
          decisions=None)
def xla_fusion(problem: Problem, config) -> Proposal:
  _checked(problem)
  decisions = config["decisions"]
  n = problem.graph.num_nodes
  if decisions is None:
    raise ValueError(
        "xla_fusion needs XLA's decisions for this graph: pass decisions=(N,) bool, from "
        "simulator.frontends.xla.xla_fusion_decisions(pre, post) or "
        "go_jax.methods.fusion.xla_fusion_program(fn, *args)")
  decisions = np.asarray(decisions, bool)
  if decisions.shape != (n,):
    raise ValueError(f"xla_fusion: decisions have shape {decisions.shape}, expected ({n},) "
                     f"for graph '{problem.graph.name}'")
  return Proposal(problem.placement, fuse=decisions)


def xla_fusion_program(fn, *example_args, device_spec="v100", calibration=None, name=None):
  """(pre graph costed on `device_spec`, XLA's fuse decisions on it, post graph costed alike)
  for one JAX program: what `xla_fusion` and the fusion validation need."""
  from simulator import costmodel  # local: the cost model is only needed here
  from simulator.frontends import hlo, xla
  spec = (costmodel.device_spec(device_spec, calibration) if isinstance(device_spec, str)
          else device_spec)
  pre = hlo.from_jax_full(fn, *example_args, stage="pre", name=name)
  post = hlo.from_jax_full(fn, *example_args, stage="post", name=name)
  decisions = xla.xla_fusion_decisions(pre, post)
  return (costmodel.apply_cost_model(pre, spec, calibration), decisions,
          costmodel.apply_cost_model(post, spec, calibration))
