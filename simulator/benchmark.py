"""Timing of `simulate` against `reference_simulate` (used by experiments/bench_simulator.py).

Each measurement is a plain dict so that it can be produced in a worker process (for a clean
peak-memory reading per cell) and written to JSON as is. Throughput figures are ratios taken in
one process on one machine; nothing here asserts a time.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import resource
import tempfile
import time
from typing import Dict, List

import jax
import numpy as np

from simulator.graph import CompGraph
from simulator.reference import reference_simulate
from simulator.simulate import lower as lower_simulate, prepare_batch
from simulator.topology import Topology


def random_actions(graph: CompGraph, topology: Topology, batch: int, seed: int = 0):
  """(placement (B, N) int32, priority (B, N) float32): uniform devices, random priorities."""
  rng = np.random.default_rng(seed)
  n, d = graph.num_nodes, topology.num_devices
  return (rng.integers(0, d, (batch, n)).astype(np.int32),
          rng.random((batch, n)).astype(np.float32))


def peak_rss_bytes() -> int:
  """Peak resident set size of this process so far (Linux reports KiB)."""
  return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def time_reference(graph: CompGraph, topology: Topology, samples: int, seed: int = 0) -> Dict:
  """Mean wall time of `reference_simulate` per placement over `samples` random actions."""
  place, prio = random_actions(graph, topology, samples, seed)
  reference_simulate(graph, topology, place[0], prio[0])  # warm caches
  t0 = time.perf_counter()
  makespans = [reference_simulate(graph, topology, p, q).makespan for p, q in zip(place, prio)]
  per = (time.perf_counter() - t0) / samples
  return {"seconds_per_placement": per, "placements_per_s": 1.0 / per,
          "node_commits_per_s": graph.num_nodes / per, "samples": samples,
          "makespans": makespans}


def time_simulate(graph: CompGraph, topology: Topology, batch: int, repeats: int = 3,
                  seed: int = 0) -> Dict:
  """Compile seconds and median run seconds of the jitted simulator on one batch."""
  place, prio = random_actions(graph, topology, batch, seed)
  pg, pl, pr = prepare_batch(graph, place, prio)
  t0 = time.perf_counter()
  compiled = lower_simulate(pg, topology, pl, pr).compile()
  compile_s = time.perf_counter() - t0
  res = compiled(pg, topology, pl, pr)
  jax.block_until_ready(res)
  runs = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(compiled(pg, topology, pl, pr))
    runs.append(time.perf_counter() - t0)
  run_s = float(np.median(runs))
  # An accelerator's own peak (XLA's allocator); None on backends without memory stats (CPU).
  stats = jax.local_devices()[0].memory_stats() or {}
  return {"batch": batch, "devices": len(jax.local_devices()), "compile_s": compile_s,
          "run_s": run_s, "runs_s": runs, "device_peak_bytes": stats.get("peak_bytes_in_use"),
          "placements_per_s": batch / run_s,
          "node_commits_per_s": batch * graph.num_nodes / run_s,
          "chunk": pg.chunk, "loop_iterations": int(pg.num_iters),
          "padded_nodes": pg.num_nodes_padded, "padded_edges": int(pg.senders.shape[0]),
          "makespans": np.asarray(res.makespan)[:batch].tolist()}


def profile_simulate(graph: CompGraph, topology: Topology, batch: int, top: int = 25,
                     seed: int = 0) -> List[Dict]:
  """Per-XLA-op wall time of one jitted run (jax.profiler trace), largest first."""
  place, prio = random_actions(graph, topology, batch, seed)
  pg, pl, pr = prepare_batch(graph, place, prio)
  compiled = lower_simulate(pg, topology, pl, pr).compile()
  jax.block_until_ready(compiled(pg, topology, pl, pr))
  with tempfile.TemporaryDirectory() as folder:
    jax.profiler.start_trace(folder, create_perfetto_trace=True)
    jax.block_until_ready(compiled(pg, topology, pl, pr))
    jax.profiler.stop_trace()
    files = glob.glob(os.path.join(folder, "**", "*.trace.json.gz"), recursive=True)
    if not files:
      raise ValueError("the profiler wrote no perfetto trace")
    with gzip.open(files[0]) as fh:
      events = json.load(fh)["traceEvents"]
  total, calls = collections.Counter(), collections.Counter()
  for e in events:
    name = e.get("name", "")
    if e.get("ph") == "X" and not name.startswith(("ThunkExecutor", "$")):
      total[name] += e.get("dur", 0)
      calls[name] += 1
  return [{"op": k, "ms": v / 1e3, "calls": calls[k]} for k, v in total.most_common(top)]
