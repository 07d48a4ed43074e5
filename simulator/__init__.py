"""go-jax simulator: graph IR, device topologies, graph sources and the simulators.

Depends on JAX and numpy only (DESIGN section 1); never imports go_jax.
"""

from simulator.graph import CompGraph
from simulator.topology import Topology, available_presets, preset
from simulator.reference import ReferenceResult, reference_simulate
from simulator.simulate import SimResult, simulate
from simulator.frontends import from_jax

__all__ = ["CompGraph", "Topology", "preset", "available_presets", "simulate",
           "reference_simulate", "SimResult", "ReferenceResult", "from_jax"]
