"""Front ends that turn programs into CompGraphs (DESIGN section 6): JAX/XLA HLO for now."""

from simulator.frontends.hlo import (HloGraph, from_jax, from_jax_full, hlo_to_graph,
                                     parse_hlo_module)

__all__ = ["HloGraph", "from_jax", "from_jax_full", "hlo_to_graph", "parse_hlo_module"]
