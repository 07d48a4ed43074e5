"""Piper workloads (msr-fiddle/piper inputs/*.json) -> CompGraph.

Piper (Tarnawski et al., NeurIPS 2021) plans pipeline/data/tensor parallelism over a layer
graph. Its input JSON (see simulator/data/piper/README.md and the reader in Piper's algo.cpp)
gives per layer, for each tensor-parallel degree t, a list of TMPCs ("tensor model parallel
configurations", e.g. "vanilla" and "activation recomp"), and per edge a communicationCost.

Units, as Piper's planner uses them (algo.cpp): a "sample" is one microbatch. Per stage it
adds `timePerSample / d` (compute) and `bytes / bandwidth` (communication) into one time per
sample, so
  - timePerSample: forward + backward compute latency of the layer for one microbatch on each
    of its t devices. bert32a100.json gives seconds (0.03 s per transformer layer). gnmt.json
    and resnet.json were derived from PipeDream profiles and give PipeDream's milliseconds
    (resnet node76: 4.114 = 1.318 fw + 2.796 bw ms in the PipeDream resnet50 profile; gnmt
    node5 = gnmt_large's EmuBidirLSTM, 14.126 + 0.019 ms). We convert to seconds; see
    `_TIME_UNITS` and `time_unit`.
  - communicationCost: bytes sent along the edge per microbatch (Piper counts it twice, for
    the activation forward and its gradient backward); bandwidth: bytes/s.
  - parameterSize: bytes of the layer's weights on each device (used for data-parallel resync).
  - memoryUsageA, memoryUsageB: bytes; a layer's memory is A * y + B with y the number of
    microbatches whose activations are stashed at once. A is the activation stash of one
    microbatch (resnet node76: A = its PipeDream activation_size), B the resident model state
    (weights + gradients: 2 x parameterSize for "vanilla"; "activation recomp" moves most of A
    into B).
  - syncTimeFw/Bw: bytes of tensor-parallel synchronization on edges; not modelled here.

Conversion (one op per layer, each op the layer's forward + backward for one microbatch):
  cost = timePerSample in seconds; out_bytes = max communicationCost over the layer's
  outgoing edges (one output tensor per op; the consumers read the same tensor);
  param_bytes = parameterSize (or memoryUsageB with `include_model_state=True`);
  temp_bytes = memoryUsageA * microbatches: the activation stash lives and dies within the
  fused forward+backward op, so it is scratch memory of that op.
"""

from __future__ import annotations

import glob
import json
import math
import os
from typing import Dict, Optional

import numpy as np

from simulator import fileio, ops
from simulator.graph import CompGraph
from simulator.sources import datafiles

# Seconds per unit of timePerSample for the files shipped with Piper (see module docstring).
_TIME_UNITS = {"bert32a100": 1.0, "gnmt": 1e-3, "resnet": 1e-3}
_UNIT_SECONDS = {"s": 1.0, "ms": 1e-3}
_VARIANT_ALIASES = {"recomp": "activation recomp", "activation_recomp": "activation recomp"}


def piper_models(root: Optional[str] = None) -> Dict[str, str]:
  """Model name -> JSON path for the Piper inputs under `root` (default: the package data)."""
  root = datafiles.data_root() if root is None else root
  pattern = os.path.join(root, "piper", "inputs", "*.json")
  return {os.path.splitext(os.path.basename(p))[0]: p for p in sorted(glob.glob(pattern))}


def resolve_piper(path_or_name: str) -> str:
  """A file path as given, or the JSON of a model name ('bert32a100', 'gnmt', 'resnet')."""
  return datafiles.resolve(path_or_name, piper_models, "Piper", "input", ".json")


def _field(path: str, where: str, obj: dict, key: str, kind=float):
  if not isinstance(obj, dict) or key not in obj:
    raise ValueError(f"Piper input '{path}': {where} lacks field '{key}'")
  value = obj[key]
  if kind is float:
    try:
      finite = not isinstance(value, bool) and math.isfinite(value)
    except (TypeError, OverflowError):  # not a number; an int too large for a float
      finite = False
    if not finite or value < 0:
      shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:30] + "..."
      raise ValueError(f"Piper input '{path}': {where} field '{key}' must be a finite number "
                       f">= 0, got {shown}")
    return float(value)
  if not isinstance(value, kind) or isinstance(value, bool):
    raise ValueError(f"Piper input '{path}': {where} field '{key}' must be "
                     f"{kind.__name__}, got {value!r}")
  return value


def load_piper(path_or_name: str, *, tensor_parallel: int = 1, variant: str = "vanilla",
               microbatch: Optional[int] = None, time_unit: str = "auto",
               include_model_state: bool = False, name: Optional[str] = None) -> CompGraph:
  """Loads a Piper input JSON as a CompGraph (conversion in the module docstring).

  Args:
    path_or_name: a JSON path or a model name found by `piper_models`.
    tensor_parallel: the tensor-parallel degree t whose TMPCs to use (costs and sizes are then
      per device of the t-way split).
    variant: TMPC id: "vanilla" or "activation recomp" (alias "recomp").
    microbatch: number of microbatches whose activations are held at once (Piper's y), which
      scales temp_bytes; default 1.
    time_unit: unit of timePerSample: "s", "ms", or "auto" (the known value for Piper's own
      files, else "ms" when the per-microbatch total exceeds 10, an implausible step time
      in seconds, else "s").
    include_model_state: param_bytes = memoryUsageB (weights + gradients, plus recomputation
      buffers) instead of parameterSize.
    name: graph name (default "piper_<model>_t<t>" plus the variant when not vanilla).
  """
  path = resolve_piper(path_or_name)
  try:
    with open(path, encoding="utf-8") as fh:
      data = json.load(fh, object_pairs_hook=fileio.unique_keys)
  except (OSError, ValueError, RecursionError) as e:  # JSON, UTF-8, a repeated key
    reason = "nested too deeply" if isinstance(e, RecursionError) else e
    raise ValueError(f"cannot read Piper input '{path}': {reason}") from None
  if isinstance(tensor_parallel, bool) or not isinstance(tensor_parallel, (int, np.integer)) \
      or tensor_parallel < 1:
    raise ValueError(f"tensor_parallel must be an integer >= 1, got {tensor_parallel!r}")
  if microbatch is None:
    microbatch = 1
  if isinstance(microbatch, bool) or not isinstance(microbatch, (int, np.integer)) \
      or microbatch < 1:
    raise ValueError(f"microbatch must be an integer >= 1, got {microbatch!r}")
  if time_unit not in ("auto",) + tuple(_UNIT_SECONDS):
    raise ValueError(f"time_unit must be one of auto, {', '.join(_UNIT_SECONDS)}; "
                     f"got {time_unit!r}")
  variant = _VARIANT_ALIASES.get(variant, variant)
  model = os.path.splitext(os.path.basename(path))[0]
  nodes = _field(path, "top level", data, "nodes", list)
  edges = _field(path, "top level", data, "edges", list)
  if not nodes:
    raise ValueError(f"Piper input '{path}': no nodes")

  index, names, time, params, mem_a, mem_b = {}, [], [], [], [], []
  for k, node in enumerate(nodes):
    where = f"node #{k}"
    nid = _field(path, where, node, "id", int)
    where = f"node id {nid}"
    if nid in index:
      raise ValueError(f"Piper input '{path}': duplicate node id {nid}")
    index[nid] = k
    label = str(node.get("name", "")) if isinstance(node, dict) else ""
    names.append(f"{nid}:{label}" if label else str(nid))
    tmpcs = _field(path, where, node, "TMPCs", dict)
    degrees = sorted(tmpcs, key=lambda x: (len(x), x))
    if str(tensor_parallel) not in tmpcs:
      raise ValueError(f"Piper input '{path}': {where} has no TMPCs for tensor_parallel="
                       f"{tensor_parallel}; available degrees: {', '.join(degrees)}")
    options = tmpcs[str(tensor_parallel)]
    if not isinstance(options, list):
      raise ValueError(f"Piper input '{path}': {where} TMPCs for tensor_parallel="
                       f"{tensor_parallel} must be a list of TMPCs, got {options!r:.60}")
    if len({t.get("id") for t in options if isinstance(t, dict)}) < sum(
        isinstance(t, dict) for t in options):
      raise ValueError(f"Piper input '{path}': {where} has two TMPCs with one id for "
                       f"tensor_parallel={tensor_parallel}")
    chosen = [t for t in options if isinstance(t, dict) and t.get("id") == variant]
    if not chosen:
      ids = [t.get("id") for t in options if isinstance(t, dict)]
      raise ValueError(f"Piper input '{path}': {where} has no TMPC '{variant}' for "
                       f"tensor_parallel={tensor_parallel}; available: {ids}")
    tmpc, twhere = chosen[0], f"{where} TMPC '{variant}' (t={tensor_parallel})"
    time.append(_field(path, twhere, tmpc, "timePerSample"))
    params.append(_field(path, twhere, tmpc, "parameterSize"))
    mem_a.append(_field(path, twhere, tmpc, "memoryUsageA"))
    mem_b.append(_field(path, twhere, tmpc, "memoryUsageB"))

  n = len(nodes)
  senders, receivers = [], []
  out_bytes = np.zeros(n)
  for k, edge in enumerate(edges):
    where = f"edge #{k}"
    u = _field(path, where, edge, "sourceId", int)
    v = _field(path, where, edge, "destId", int)
    for end in (u, v):
      if end not in index:
        raise ValueError(f"Piper input '{path}': {where} ({u} -> {v}) names unknown node {end}")
    c = _field(path, where, edge, "communicationCost")
    senders.append(index[u])
    receivers.append(index[v])
    out_bytes[index[u]] = max(out_bytes[index[u]], c)

  time = np.asarray(time)
  if time_unit == "auto":
    scale = _TIME_UNITS.get(model, 1e-3 if time.sum() > 10.0 else 1.0)
  else:
    scale = _UNIT_SECONDS[time_unit]
  if name is None:
    name = f"piper_{model}_t{tensor_parallel}"
    if variant != "vanilla":
      name += "_" + variant.replace(" ", "_")
  try:
    return CompGraph(
        cost=time * scale, senders=np.asarray(senders, np.int64),
        receivers=np.asarray(receivers, np.int64), out_bytes=out_bytes,
        param_bytes=mem_b if include_model_state else params,
        temp_bytes=np.asarray(mem_a) * microbatch,
        op_type=[ops.torch_module_type(nm.split(":", 1)[-1]) for nm in names],
        name=name, node_names=names)
  except ValueError as e:
    raise ValueError(f"Piper input '{path}': {e}") from e
