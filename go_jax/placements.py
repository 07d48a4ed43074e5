"""Placements and priorities by name, as the launchers take them (go-jax-simulate's --placement).

A placement gives each op a device id in [0, D); a priority gives each op a float, higher runs
first when several ops are ready on one device (design.md section 2 "Actions", section 4 rule 5).

Placement names are the registered placement and joint methods of `go_jax.methods` (the one
registry: "single", "random", "round_robin", "expert", "heft", "metis", "brkga", "go", ...),
solved with `methods.solve` and the given seed, so a name means the same everywhere
(`placement_names()` lists them). Priorities are the strategies in `PRIORITIES`, functions
`(graph, topology, seed) -> (N,)`.

`make_placement` / `make_priority` also accept an action saved with `numpy.save`, as
"npy:<path>" or a bare path ending in ".npy", so that an action found by one tool (a search, a
trained policy) can be replayed and plotted by another, and an inline one, one number per op in
op order ("0,1,1,0"), for a small graph typed by hand. Results are validated here, with
messages naming the method, strategy or file, before they reach the simulator.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, Mapping, Optional

import numpy as np

from go_jax import methods
from simulator.graph import upward_rank  # re-exported: the project's callers import it here

Strategy = Callable[..., np.ndarray]  # (graph, topology, seed) -> (N,)

NPY_PREFIX = "npy:"


# ------------------------------------------------------------------ placements
def round_robin(graph, topology, seed: int = 0) -> np.ndarray:
  """The k-th op in topological order goes to device k mod D (spreads every layer of a DAG);
  the `round_robin` method of the registry, and a seed of the evolutionary searches."""
  del seed
  out = np.empty(graph.num_nodes, np.int32)
  out[graph.topological_order()] = np.arange(graph.num_nodes) % topology.num_devices
  return out


def placement_names() -> Dict[str, str]:
  """Name -> description of every placement `make_placement` takes by name: the registered
  placement and joint methods of `go_jax.methods`."""
  return methods.available(kinds=("placement", "joint"))


# ------------------------------------------------------------------ priorities
def uniform_priority(graph, topology, seed: int = 0) -> np.ndarray:
  """All zeros: ties are broken by the simulator (lowest op id), i.e. roughly FIFO by id."""
  del topology, seed
  return np.zeros(graph.num_nodes, np.float64)


def critical_path_priority(graph, topology, seed: int = 0) -> np.ndarray:
  """Upward rank (see `upward_rank`): the op with the longest remaining path runs first."""
  del topology, seed
  return upward_rank(graph)


def topo_priority(graph, topology, seed: int = 0) -> np.ndarray:
  """N - position in topological order: ops earlier in the order run first."""
  del topology, seed
  n = graph.num_nodes
  out = np.empty(n, np.float64)
  out[graph.topological_order()] = np.arange(n, 0, -1, dtype=np.float64)
  return out


PRIORITIES: Dict[str, Strategy] = {
    "uniform": uniform_priority,
    "critical_path": critical_path_priority,
    "topo": topo_priority,
}


# ------------------------------------------------------------------ specs
def npy_path(spec: str) -> Optional[str]:
  """The file of an "npy:<path>" or "<path>.npy" spec, or None for a strategy name."""
  if spec.startswith(NPY_PREFIX):
    return spec[len(NPY_PREFIX):]
  if spec.endswith(".npy"):
    return spec
  return None


def is_valid_spec(spec: str, registry: Mapping[str, object]) -> bool:
  """Cheap syntactic check (registered name or .npy spec) for flag validators."""
  path = npy_path(spec)
  return spec in registry or (path is not None and bool(path))


def _load_npy(path: str, what: str, graph) -> np.ndarray:
  if not path:
    raise ValueError(f"{what}: empty path in '{NPY_PREFIX}' spec")
  if not os.path.isfile(path):
    raise ValueError(f"{what} file '{path}' " + ("is a folder" if os.path.isdir(path) else
                                                  "does not exist"))
  try:
    arr = np.load(path, allow_pickle=False)
  except (OSError, ValueError) as e:
    raise ValueError(f"cannot read {what} file '{path}': {e}") from e
  if not isinstance(arr, np.ndarray):
    raise ValueError(f"{what} file '{path}' holds an archive, expected one array (numpy.save)")
  if arr.shape != (graph.num_nodes,):
    raise ValueError(f"{what} file '{path}' has shape {arr.shape}, expected "
                     f"({graph.num_nodes},) for graph '{graph.name}'")
  if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating) or
          arr.dtype == np.bool_):
    raise ValueError(f"{what} file '{path}' has dtype {arr.dtype}, expected numbers")
  return arr


def _unknown(kind: str, spec: str, registry: Mapping[str, object]) -> ValueError:
  return ValueError(f"unknown {kind} '{spec}'; available: {sorted(registry)} or "
                    f"'{NPY_PREFIX}<path>' / '<path>.npy' (an array saved with numpy.save)")


def check_placement(placement, graph, topology, source: str = "placement") -> np.ndarray:
  """(N,) int32 placement or ValueError naming `source` and the first bad op."""
  arr = np.asarray(placement)
  n, d = graph.num_nodes, topology.num_devices
  if arr.shape != (n,):
    raise ValueError(f"{source}: shape {arr.shape}, expected ({n},)")
  if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
    i = int(np.flatnonzero(~np.isfinite(arr) | (arr != np.round(arr)))[0])
    raise ValueError(f"{source}: op {graph.node_label(i)} has device {arr[i]}, not an integer")
  bad = np.flatnonzero((arr < 0) | (arr >= d))
  if bad.size:
    i = int(bad[0])
    raise ValueError(f"{source}: op {graph.node_label(i)} has device {arr[i]}, outside [0, {d}) "
                     f"of the {d}-device topology")
  return arr.astype(np.int32)


def check_priority(priority, graph, source: str = "priority") -> np.ndarray:
  """(N,) float64 finite priority or ValueError naming `source` and the first bad op."""
  arr = np.asarray(priority, np.float64)
  n = graph.num_nodes
  if arr.shape != (n,):
    raise ValueError(f"{source}: shape {arr.shape}, expected ({n},)")
  bad = np.flatnonzero(~np.isfinite(arr))
  if bad.size:
    i = int(bad[0])
    raise ValueError(f"{source}: op {graph.node_label(i)} has priority {arr[i]}, not finite")
  return arr


def inline_values(spec: str, what: str) -> Optional[np.ndarray]:
  """The numbers of an inline action, one per op in op order ("0,1,1,0"; a lone number for a
  one-op graph), as float64; None when `spec` is not one (a name or a path). ValueError naming
  the first item that is not a number."""
  text = spec.strip()
  items = [x.strip() for x in text.split(",")]
  if len(items) == 1:
    try:
      float(items[0])
    except ValueError:
      return None  # a name or a path
  values = []
  for i, item in enumerate(items):
    try:
      values.append(float(item))
    except ValueError:
      raise ValueError(f"inline {what} {text!r}: item {i} ({item!r}) is not a number") from None
  return np.asarray(values, np.float64)


def make_placement(spec: str, graph, topology, seed: int = 0) -> np.ndarray:
  """(N,) int32 placement from a registered placement / joint method (`placement_names`),
  solved with `methods.solve(spec, graph, topology, seed=seed)`, from an .npy spec, or inline
  (one device per op, comma-separated: "0,1,1")."""
  path = npy_path(spec)
  if path is not None:
    return check_placement(_load_npy(path, "placement", graph), graph, topology,
                           f"placement file '{path}'")
  inline = inline_values(spec, "placement")
  if inline is not None:
    if np.all(np.isfinite(inline) & (inline == np.round(inline)) & (np.abs(inline) < 2**62)):
      inline = inline.astype(np.int64)  # devices shown as typed in the range message
    return check_placement(inline, graph, topology, f"inline placement {spec.strip()!r}")
  names = placement_names()
  if spec not in names:
    if spec in methods.unavailable():
      methods.get(spec)  # raises: says which package the method needs
    if spec in methods.available():
      what = ("partitions every op and answers on its own expanded graph (design.md 4.2)"
              if methods.get(spec).kind == "partition" else
              "only schedules a given placement (a priority rule)")
      raise ValueError(f"'{spec}' {what}; placements: {sorted(names)}")
    raise _unknown("placement", spec, names)
  sol = methods.solve(spec, graph, topology, seed=seed)
  return check_placement(sol.placement, graph, topology, f"placement method '{spec}'")


def make_priority(spec: str, graph, topology, seed: int = 0) -> np.ndarray:
  """(N,) float64 priority from a strategy name in `PRIORITIES`, an .npy spec, or inline (one
  number per op, comma-separated: "3,2.5,1")."""
  path = npy_path(spec)
  if path is not None:
    return check_priority(_load_npy(path, "priority", graph), graph, f"priority file '{path}'")
  inline = inline_values(spec, "priority")
  if inline is not None:
    return check_priority(inline, graph, f"inline priority {spec.strip()!r}")
  if spec not in PRIORITIES:
    raise _unknown("priority", spec, PRIORITIES)
  return check_priority(PRIORITIES[spec](graph, topology, seed), graph,
                        f"priority strategy '{spec}'")


def __getattr__(name: str):
  """`PLACEMENTS`: a view of the registry (name -> description of `placement_names()`), for
  callers written when placements had their own table; new code calls `placement_names()`."""
  if name == "PLACEMENTS":
    return placement_names()
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
