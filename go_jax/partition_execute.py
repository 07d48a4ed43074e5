"""One partitioned training step run for real with `jax.sharding` (issue 15), beside the
simulator's prediction of the same strategy.

Why: the expanded graph of section 4.2 predicts the step time of a partitioned program; this
runs the program that the data-parallel strategy stands for (every batch leaf split along dim 0
over a one-axis `Mesh` of D devices, parameters and optimizer state replicated: XLA's SPMD
partitioner inserts the gradient all-reduce) and times it, with the unpartitioned step on one
device as the reference. On a CPU the D devices are virtual (`simulator.runtime.
configure_cpu_devices`, before JAX starts) and share the host's cores.

What: `measure` returns the measured medians and the simulated makespans of `data_parallel`
(D workers) and of every op on one device, on a graph costed with a calibration of this machine
(`device="local"`) and a measured topology (`go-jax-calibrate --topology`), so that seconds are
comparable.
"""

from __future__ import annotations

import time
from typing import Any, Dict

import numpy as np


def _median_seconds(fn, args, repeats: int) -> float:
  import jax
  jax.block_until_ready(fn(*args))  # compile and warm up
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - t0)
  return float(np.median(times))


def measure(model: str, size: str, devices: int, topology, calibration: str,
            repeats: int = 10, **knobs) -> Dict[str, Any]:
  """Measured vs simulated step time of data parallelism on `devices` local devices."""
  import jax
  from jax.sharding import Mesh, NamedSharding, PartitionSpec
  from go_jax import methods
  from simulator import costmodel, topology_spec, zoo
  from simulator.partition import programs
  if len(jax.devices()) < devices:
    raise ValueError(f"{devices} devices needed, JAX has {len(jax.devices())} (on a CPU, "
                     f"configure_cpu_devices({devices}) before JAX starts)")
  z = zoo.build(model, size, **knobs)
  params, opt, batch = z.concrete_args()
  graph = programs.program_graph(z.step, params, opt, batch, device="local",
                                 calibration=costmodel.Calibration.load(calibration),
                                 name=f"{model}/{size}",
                                 batch_parameters=len(jax.tree_util.tree_leaves(batch)))
  topo, _ = topology_spec.make_topology(topology_spec.parse_topology(topology), graph)
  if topo.num_devices < devices:
    raise ValueError(f"topology has {topo.num_devices} devices, {devices} needed")
  one = methods.solve("single", graph, topo)
  dp = methods.solve("data_parallel", graph, topo, degree=devices)

  mesh = Mesh(np.array(jax.devices()[:devices]), ("d",))
  rep, split = NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("d"))
  shardings = (jax.tree_util.tree_map(lambda _: rep, params),
               jax.tree_util.tree_map(lambda _: rep, opt),
               jax.tree_util.tree_map(lambda _: split, batch))
  sharded = jax.jit(z.step, in_shardings=shardings)
  placed = jax.device_put((params, opt, batch), shardings)
  measured_dp = _median_seconds(sharded, placed, repeats)
  single = jax.jit(z.step)
  on_one = jax.device_put((params, opt, batch), jax.devices()[0])
  measured_one = _median_seconds(single, on_one, repeats)
  return {"model": model, "size": size, "knobs": dict(knobs), "devices": devices,
          "nodes": graph.num_nodes, "expanded_nodes": dp.graph.num_nodes,
          "measured_single": measured_one, "simulated_single": one.makespan,
          "measured_data_parallel": measured_dp, "simulated_data_parallel": dp.makespan,
          "comm_bytes": dp.info["comm_bytes"],
          "ratio_single": measured_one / one.makespan,
          "ratio_data_parallel": measured_dp / dp.makespan}
