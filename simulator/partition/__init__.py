"""Operator partitioning (docs/design.md section 4.2): strategy spaces and their expansion.

`space` says which splits each op admits (from the HLO front end's dimension numbers, or a
shape-free generic space); `expand` turns a strategy into a CompGraph of shard and communication
ops that the simulator scores unchanged; `search` holds the strategy searches (Tofu's dynamic
program, brute force, the data-parallel and Megatron rules) that `go_jax.methods.partitioning`
registers as methods; `programs` builds zoo / JAX programs with their spaces.
"""

from simulator.partition import levels
from simulator.partition.expand import (REDUCE, SHARD, SLICE, Expanded, expand, expand_levels,
                                        transfer_bytes_of)
from simulator.partition.space import (P, R, OpSpace, Option, StrategySpace, comm_bytes,
                                       generic_space, hlo_space, layout_name, requirements, split,
                                       transfer_bytes)

__all__ = ["P", "R", "REDUCE", "SHARD", "SLICE", "Expanded", "OpSpace", "Option",
           "StrategySpace", "comm_bytes", "expand", "expand_levels", "levels", "generic_space", "hlo_space", "layout_name",
           "requirements", "split", "transfer_bytes", "transfer_bytes_of"]
