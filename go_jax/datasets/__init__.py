"""Graph datasets on disk: REGAL's synthetic set and an XLA set of zoo models (regal_data.md).

  from go_jax import datasets
  datasets.build_regal_dataset("data/regal", train=40, valid=10, test=10, high_budget=2000)
  names, graphs = datasets.load_split("regal_data:test,dir=data/regal,limit=100")

Both sets are folders of TensorFlow CostGraphDef text files (`simulator.sources.costgraph`)
plus a manifest; `go_jax.datasets.store` holds what they share (topology hash, the resumable
store, split loading), `regal` the synthetic recipe and BRKGA filter, `xla_set` the zoo set.
"""

from go_jax.datasets.regal import (build_regal_dataset, candidate_graph, check_regal_options,
                                   room_for_improvement)
from go_jax.datasets.store import (SPLITS, acceptance, load_split, parse_data_spec,
                                   read_manifest, topology_hash)
from go_jax.datasets.xla_set import (build_xla_dataset, check_xla_options, model_family,
                                     zoo_variants)

__all__ = ["SPLITS", "acceptance", "build_regal_dataset", "build_xla_dataset",
           "candidate_graph", "check_regal_options", "check_xla_options", "load_split",
           "model_family", "parse_data_spec", "read_manifest", "room_for_improvement",
           "topology_hash", "zoo_variants"]
