"""PipeDream layer profiles -> CompGraph (forward-only or full training step).

The PipeDream profiler (msr-fiddle/pipedream) writes one `graph.txt` per model: one line per
torch module ("layer") and one TAB-indented line per data edge (format in
simulator/data/pipedream/README.md):

  nodeN -- <module repr> -- forward_compute_time=F, backward_compute_time=B, activation_size=A,
           parameter_size=P[ -- stage_id=S]
  <TAB>nodeU -- nodeV

Units: F and B are milliseconds measured on one (unrecorded) GPU for the profiled batch; A and
P are bytes; A may be a list "[a; b; c]" for modules returning several tensors and is summed
(CompGraph has one output tensor per op). Costs are converted to seconds. The "Input" layer's
forward time includes data loading and is zeroed (README caveat).

A training graph models one step of the profiled batch under the simulator's memory rules
(docs/design.md section 4 rule 7): a forward op F_u and, for layers with backward work or weights, a
backward op B_u; see `training_graph` for the edges and sizes.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
from typing import Dict, List, Optional, Tuple

import numpy as np

from simulator import ops
from simulator.graph import CompGraph
from simulator.sources import datafiles

_REQUIRED = ("forward_compute_time", "backward_compute_time", "activation_size",
             "parameter_size")
_ATTR_ITEM = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S")
_INPUT_REPR = re.compile(r"^Input\d*$")


@dataclasses.dataclass(frozen=True)
class Layer:
  """One profiled layer. Times in milliseconds, sizes in bytes, as in the file."""
  layer_id: str           # e.g. "node13"
  module: str             # torch module repr, e.g. "Conv2d(64, 64, kernel_size=(3, 3))"
  forward_ms: float
  backward_ms: float
  activation_bytes: float  # summed when the file gives a list
  parameter_bytes: float
  line: int               # 1-based line number in the file


@dataclasses.dataclass(frozen=True)
class Profile:
  """A parsed graph.txt: layers in file order and deduplicated edges as (producer, consumer)
  layer indices."""
  path: str
  layers: Tuple[Layer, ...]
  edges: Tuple[Tuple[int, int], ...]


def _number(path: str, lineno: int, key: str, text: str) -> float:
  text = text.strip()
  try:
    if text.startswith("["):
      if not text.endswith("]"):
        raise ValueError("unterminated list")
      items = [x for x in text[1:-1].split(";") if x.strip()]
      if not items:
        raise ValueError("empty list")
      values = [float(x) for x in items]
    else:
      values = [float(text)]
  except ValueError as e:
    raise ValueError(f"{path}:{lineno}: field '{key}' has a malformed value {text!r} ({e})") \
        from None
  bad = [v for v in values if not np.isfinite(v) or v < 0]  # each item, not only the sum
  if bad:
    raise ValueError(f"{path}:{lineno}: field '{key}' must be finite and >= 0, got {bad[0]!r} "
                     f"in {text!r}")
  value = float(sum(values))
  if not np.isfinite(value) or value < 0:
    raise ValueError(f"{path}:{lineno}: field '{key}' must be finite and >= 0, got {text!r}")
  return value


def _is_attr_part(part: str) -> bool:
  return all(_ATTR_ITEM.match(item.strip()) for item in part.split(", "))


def parse_pipedream(path: str) -> Profile:
  """Reads a PipeDream graph.txt.

  Raises:
    ValueError: naming the file and line, on a malformed node or edge line, a missing or bad
      field, a duplicate layer id, an edge to an undeclared layer or a self loop.
  """
  try:
    with open(path, encoding="utf-8") as fh:
      lines = fh.read().splitlines()
  except (OSError, UnicodeDecodeError) as e:
    raise ValueError(f"cannot read PipeDream profile '{path}': {e}") from e
  layers: List[Layer] = []
  index: Dict[str, int] = {}
  raw_edges = []
  for lineno, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    if line[0] in " \t":
      parts = line.strip().split(" -- ")
      if len(parts) != 2 or not all(p.strip() for p in parts) or any(" " in p.strip()
                                                                      for p in parts):
        raise ValueError(f"{path}:{lineno}: malformed edge line {line.strip()!r} "
                         f"(expected '<TAB>nodeU -- nodeV')")
      raw_edges.append((parts[0].strip(), parts[1].strip(), lineno))
      continue
    parts = line.split(" -- ")
    # Trailing "k=v, k=v" parts hold attributes (the profile's, then e.g. stage_id).
    j = len(parts)
    while j > 2 and _is_attr_part(parts[j - 1]):
      j -= 1
    if len(parts) < 3 or j == len(parts) or not parts[0].strip() or " " in parts[0].strip():
      raise ValueError(f"{path}:{lineno}: malformed node line {line[:120]!r} (expected "
                       f"'nodeN -- <module> -- forward_compute_time=..., ...')")
    attrs = {}
    for part in parts[j:]:
      for item in part.split(", "):
        key, value = item.strip().split("=", 1)
        if key in attrs:
          raise ValueError(f"{path}:{lineno}: field '{key}' given twice")
        attrs[key] = (value, lineno)
    missing = [k for k in _REQUIRED if k not in attrs]
    if missing:
      raise ValueError(f"{path}:{lineno}: node line lacks field(s) {missing}")
    values = {k: _number(path, lineno, k, attrs[k][0]) for k in _REQUIRED}
    layer_id = parts[0].strip()
    if layer_id in index:
      raise ValueError(f"{path}:{lineno}: duplicate layer id '{layer_id}' (first on line "
                       f"{layers[index[layer_id]].line})")
    index[layer_id] = len(layers)
    layers.append(Layer(layer_id=layer_id, module=" -- ".join(parts[1:j]).strip(),
                        forward_ms=values["forward_compute_time"],
                        backward_ms=values["backward_compute_time"],
                        activation_bytes=values["activation_size"],
                        parameter_bytes=values["parameter_size"], line=lineno))
  if not layers:
    raise ValueError(f"{path}: no layers found (empty or not a PipeDream profile)")
  edges = {}
  for u, v, lineno in raw_edges:
    for end in (u, v):
      if end not in index:
        raise ValueError(f"{path}:{lineno}: edge {u} -- {v} names undeclared layer '{end}'")
    if u == v:
      raise ValueError(f"{path}:{lineno}: edge {u} -- {v} is a self loop")
    edges.setdefault((index[u], index[v]), None)
  return Profile(path=path, layers=tuple(layers), edges=tuple(edges))


def pipedream_models(root: Optional[str] = None) -> Dict[str, str]:
  """Model name -> graph.txt path for the profiles under `root` (default: the package data)."""
  root = datafiles.data_root() if root is None else root
  pattern = os.path.join(root, "pipedream", "profiler", "*", "profiles", "*", "graph.txt")
  return {os.path.basename(os.path.dirname(p)): p for p in sorted(glob.glob(pattern))}


def resolve_pipedream(path_or_model_name: str) -> str:
  """A file path as given, or the graph.txt of a model name (e.g. 'resnet50', 'gnmt')."""
  return datafiles.resolve(path_or_model_name, pipedream_models, "PipeDream", "profile",
                           ".txt")


def _model_name(path: str) -> str:
  base = os.path.basename(path)
  if base == "graph.txt":
    return os.path.basename(os.path.dirname(os.path.abspath(path)))
  return os.path.splitext(base)[0]


def load_pipedream(path_or_model_name: str, *, training: bool = True,
                   optimizer_state_factor: float = 1.0, zero_input_time: bool = True,
                   name: Optional[str] = None) -> CompGraph:
  """Loads a PipeDream profile as a CompGraph.

  Args:
    path_or_model_name: a graph.txt path or a model name found by `pipedream_models`.
    training: True for a training step (forward + backward ops, `training_graph`), False for
      the forward graph only (one op per layer, the file's edges).
    optimizer_state_factor: optimizer state bytes per parameter byte (1.0: momentum SGD; 2.0:
      Adam; 0: plain SGD). Only used when `training`.
    zero_input_time: zero the forward time of "Input" layers (it measures data loading).
    name: graph name (default "pipedream_<model>_train" or "..._fwd").
  """
  path = resolve_pipedream(path_or_model_name)
  profile = parse_pipedream(path)
  if name is None:
    name = f"pipedream_{_model_name(path)}_{'train' if training else 'fwd'}"
  try:
    if training:
      return training_graph(profile, optimizer_state_factor=optimizer_state_factor,
                            zero_input_time=zero_input_time, name=name)
    return forward_graph(profile, zero_input_time=zero_input_time, name=name)
  except ValueError as e:
    raise ValueError(f"PipeDream profile '{path}': {e}") from e


def _forward_costs(profile: Profile, zero_input_time: bool) -> np.ndarray:
  fwd = np.asarray([l.forward_ms for l in profile.layers]) * 1e-3
  if zero_input_time:
    is_input = np.asarray([bool(_INPUT_REPR.match(l.module)) for l in profile.layers])
    fwd = np.where(is_input, 0.0, fwd)
  return fwd


def forward_graph(profile: Profile, *, zero_input_time: bool = True,
                  name: str = "pipedream_fwd") -> CompGraph:
  """One op per layer: cost = forward time (s), out_bytes = activation, param_bytes = weights."""
  layers = profile.layers
  s, r = np.asarray(profile.edges, np.int64).reshape(-1, 2).T
  return CompGraph(
      cost=_forward_costs(profile, zero_input_time), senders=s, receivers=r,
      out_bytes=[l.activation_bytes for l in layers],
      param_bytes=[l.parameter_bytes for l in layers],
      op_type=[ops.torch_module_type(l.module) for l in layers],
      name=name, node_names=[f"{l.layer_id}/fwd {l.module}" for l in layers])


def training_graph(profile: Profile, *, optimizer_state_factor: float = 1.0,
                   zero_input_time: bool = True, name: str = "pipedream_train") -> CompGraph:
  """Forward ops F_u (ids 0..L-1, file order) then backward ops B_u (reverse file order).

  A layer u gets B_u when it has backward time or parameters. Edges:
    - F_u -> F_v for each file edge u -> v (forward data flow);
    - B_v -> B_u for each file edge u -> v (gradients flow back); when v has no backward op,
      B_u instead waits for whatever v's gradient waits for (the backward ops downstream of v,
      or F_w of a forward sink w: the loss is available once the last forward ops ran);
    - F_u -> B_u, and F_u -> B_v for each consumer v of u: u's activation is needed by its own
      backward op and by the backward ops of its consumers (their weight gradients), so under
      the memory rules it stays live until then.
  Sizes: out_bytes(F_u) = activation of u; out_bytes(B_v) = gradients w.r.t. v's inputs = the
  summed activations of v's forward predecessors (0 for none); param_bytes(F_u) = weights,
  param_bytes(B_u) = weights * (1 + optimizer_state_factor) (gradients + optimizer state).
  F_u and B_u share a colocation group, so weights, gradients and optimizer state stay on one
  device. op_type(B_u) is the forward type with the backward flag (`simulator.ops`).
  """
  if isinstance(optimizer_state_factor, bool) or not isinstance(
      optimizer_state_factor, (int, float, np.integer, np.floating)) or not np.isfinite(
          float(optimizer_state_factor)) or optimizer_state_factor < 0:
    raise ValueError(f"optimizer_state_factor must be finite and >= 0, got "
                     f"{optimizer_state_factor}")
  layers = profile.layers
  n = len(layers)
  fwd_graph = forward_graph(profile, zero_input_time=zero_input_time, name=name)  # validates
  succ = [[] for _ in range(n)]
  pred = [[] for _ in range(n)]
  for u, v in profile.edges:
    succ[u].append(v)
    pred[v].append(u)
  has_bwd = [l.backward_ms > 0 or l.parameter_bytes > 0 for l in layers]
  bwd_layers = [u for u in reversed(range(n)) if has_bwd[u]]
  bwd_id = {u: n + k for k, u in enumerate(bwd_layers)}

  # grad_deps[u]: ops that u's output gradient waits for, as seen by u's producers.
  grad_deps: List[frozenset] = [frozenset()] * n
  for u in reversed(fwd_graph.topological_order().tolist()):
    deps = set() if succ[u] else {u}  # a forward sink: the loss follows F_u itself
    for v in succ[u]:
      deps |= {bwd_id[v]} if has_bwd[v] else grad_deps[v]
    grad_deps[u] = frozenset(deps)

  pairs = list(profile.edges)
  for u in bwd_layers:
    b = bwd_id[u]
    pairs.extend((x, b) for x in grad_deps[u])
    pairs.append((u, b))
    pairs.extend((p, b) for p in pred[u])
  act = np.asarray([l.activation_bytes for l in layers])
  params = np.asarray([l.parameter_bytes for l in layers])
  types = fwd_graph.op_type
  bl = np.asarray(bwd_layers, np.int64)
  colocation = -np.ones(n + len(bl), np.int64)
  colocation[bl] = np.arange(len(bl))
  colocation[n:] = np.arange(len(bl))
  s, r = np.asarray(pairs, np.int64).reshape(-1, 2).T
  return CompGraph(
      cost=np.concatenate([fwd_graph.cost, [layers[u].backward_ms * 1e-3 for u in bwd_layers]]),
      senders=s, receivers=r,
      out_bytes=np.concatenate([act, [act[pred[u]].sum() for u in bwd_layers]]),
      param_bytes=np.concatenate([params, params[bl] * (1.0 + optimizer_state_factor)]),
      op_type=np.concatenate([types, types[bl] + ops.BACKWARD_OFFSET]),
      colocation=colocation, name=name,
      node_names=list(fwd_graph.node_names) + [f"{layers[u].layer_id}/bwd {layers[u].module}"
                                               for u in bwd_layers])
