"""Front ends that turn programs into CompGraphs (design.md section 6): JAX/XLA HLO, and XLA's own
schedule and fusion groups read from the optimised module as baselines.

The front end parses (HLO -> CompGraph / HloGraph with flops and bytes, `cost` 0); it never
imports the cost model, which reads the front end's HloGraph to cost it. The composition of the
two (`simulator.from_jax(..., device_spec=...)`, the `jax:` graph source) is
`simulator.sources.jax_program`.
"""

from simulator.frontends.hlo import (HloGraph, from_jax, from_jax_full, hlo_to_graph,
                                     parse_hlo, parse_hlo_module)
from simulator.frontends.xla import (FusionMatch, match_fusions, xla_fusion_decisions,
                                     xla_fusion_groups, xla_schedule_priority)

__all__ = ["HloGraph", "from_jax", "from_jax_full", "hlo_to_graph", "parse_hlo",
           "parse_hlo_module", "FusionMatch", "match_fusions", "xla_fusion_decisions",
           "xla_fusion_groups", "xla_schedule_priority"]
