"""Front ends that turn programs into CompGraphs (DESIGN section 6): JAX/XLA HLO, and XLA's own
schedule and fusion groups read from the optimised module as baselines."""

from simulator.frontends.hlo import (HloGraph, from_jax, from_jax_full, hlo_to_graph,
                                     parse_hlo, parse_hlo_module)
from simulator.frontends.xla import (FusionMatch, match_fusions, xla_fusion_groups,
                                     xla_schedule_priority)

__all__ = ["HloGraph", "from_jax", "from_jax_full", "hlo_to_graph", "parse_hlo",
           "parse_hlo_module", "FusionMatch", "match_fusions", "xla_fusion_groups",
           "xla_schedule_priority"]
