"""go-jax simulator: graph IR, device topologies, graph sources and the simulators.

Depends on JAX and numpy only (docs/design.md section 1); never imports go_jax.
"""

from simulator.graph import CompGraph
from simulator.topology import Topology, available_presets, preset
from simulator.reference import ReferenceResult, reference_simulate
from simulator.simulate import SimResult, simulate


def __getattr__(name: str):
  """`from_jax` (front end + cost model, `simulator.sources.jax_program`) is imported on first
  use, so that importing the front end (which imports this package first) never imports the
  cost model."""
  if name == "from_jax":
    from simulator.sources.jax_program import from_jax
    return from_jax
  raise AttributeError(f"module 'simulator' has no attribute {name!r}")


__all__ = ["CompGraph", "Topology", "preset", "available_presets", "simulate",
           "reference_simulate", "SimResult", "ReferenceResult", "from_jax"]
