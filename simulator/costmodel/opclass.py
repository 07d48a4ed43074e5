"""Per-op roofline inputs: op class, flops, streamed bytes, dtype, XLA:CPU partitions.

Why: a roofline needs, per op, how much arithmetic and memory traffic it does and how efficiently
its kind of op uses the hardware. A CompGraph has flops, bytes and a generic op type; after XLA's
passes almost every op is a `fusion`, so the op type alone cannot tell a matmul from an add. When
the HLO text is at hand (`HloGraph` from `simulator.frontends.from_jax_full`) the class is read
from the fused computation instead.

Op classes (`OP_CLASSES`) and how a node gets one:
  * From HLO (`hlo_features`): a fusion's class is that of its "hero", the first rule of
    `HERO_RULES` matched by an opcode inside the fused computation (nested fusions included,
    reducer bodies excluded): convolution > dot > scatter / dynamic-update-slice > gather /
    dynamic-slice > reduce-window / select-and-scatter ("pool": overlapping windows, several
    reads per element; a tiling reduce-window is a "reduce") > reduce > sort, rng,
    collectives ("other") > a physical transpose ("transpose": strided access dominates
    whatever arithmetic is fused with it) > any arithmetic ("elementwise", a loop fusion) >
    only copies / slices / concatenates / pads / broadcasts / iota ("data_movement":
    contiguous streaming). An unfused instruction is classified by its opcode. Dots and
    convolutions are refined by shape and code path (`REFINE`, below).
  * From a CompGraph alone (`graph_features`): by `op_type` (`OP_TYPE_CLASSES`); a `fusion`
    whose arithmetic intensity (flops / bytes) reaches `COMPUTE_INTENSITY` counts as "dot"
    (compute bound, e.g. a fusion around a matmul), else "elementwise".
  * Convolutions are split by XLA:CPU's code path (`_conv_form`): "conv_grouped" (depthwise /
    grouped, feature_group_count > 1), "conv_eigen" (a convolution XLA left unfused: its own or
    Eigen's kernels, e.g. 1-D and transposed convs), and among library-fused ones "conv_filter"
    (the weight-gradient form, whose window spans the input) and "conv".
  * "free" ops cost nothing and launch nothing: `bitcast` (and `reshape` when only the op type is
    known: XLA turns a layout-preserving reshape into a bitcast, a real one into a copy), the
    graph-input / parameter types, and ops with zero flops and zero bytes. They are metadata
    only: XLA emits no kernel / thunk for them.
  * "control" = while / conditional / call. With HLO, the work of the called computations is
    listed as sub-leaves owned by the control node: a while's body counts its trip count
    times (the front end's `while_trip_count`: XLA's known_trip_count, or JAX's counted loop;
    1 when unknown) and its condition trip count + 1 times, a call
    once, a conditional its heaviest branch (largest flops + bytes; chosen statically). The
    control node itself only adds its launch overhead. Without HLO, a control node is one
    roofline over its aggregate flops and bytes.

Streamed bytes: the graph's `bytes_accessed` (operands + output; a fusion's boundary), except for
indexed ops, where it would count whole buffers that the op only touches in part: a gather-class
op reads from each operand at most as many bytes as it writes (sum_i min(operand_i, out) + out);
a scatter-class op updates its buffer in place, so it streams its other operands (indices and
updates) in and the same amount out (2 x (operands - out), when that is positive).

Partitions: XLA:CPU splits large loop fusions across its thread pool and records the split as
`"outer_dimension_partitions"` in the op's backend_config; the roofline divides such an op's time
by a fitted parallel speed-up (see `roofline`). Other backends never set it (1).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Dict, List, Sequence, Tuple

import numpy as np

from simulator import ops
from simulator.frontends import hlo as hlo_frontend
from simulator.frontends.hlo import HloGraph, hlo_to_graph, module_graph, parse_hlo
from simulator.frontends.hlo_costs import Costs
from simulator.frontends.hlo_parse import COMPLEX_MAC_FACTOR, DTYPE_BYTES, while_trip_count
from simulator.graph import CompGraph

OP_CLASSES = ("dot", "dot_small", "conv", "conv_grouped", "conv_filter", "conv_eigen",
              "elementwise", "reduce", "pool", "transpose", "data_movement", "gather", "scatter",
              "custom_call", "control", "other", "free")
CLASS_IDS = {c: i for i, c in enumerate(OP_CLASSES)}
# Peaks a node's compute dtype may use (index into this tuple; new ones go last); "other" uses
# the f32 peak, a dtype the device lacks its fallback (`DeviceSpec.peak`: f8 16-bit, else f32).
# PEAK_DTYPE maps HLO types that use another type's peak: complex dots the real units of their
# precision (their flops count the real arithmetic: `hlo_costs`), 8-bit integer dots the int8
# units, the 8-bit floats that fp8 units run (e4m3fn, e5m2: Hopper's formats) the fp8 units;
# the other 8-bit floats (fnuz, e4m3, e3m4, b11fnuz) the f16 units, to which XLA:GPU converts
# them; f8e8m0fnu (a scale type, made f32) and the rest are "other".
NODE_DTYPES = ("f32", "bf16", "f16", "f64", "other", "s8", "f8")
DTYPE_IDS = {d: i for i, d in enumerate(NODE_DTYPES)}
FP8_UNIT_DTYPES = ("f8e4m3fn", "f8e5m2")
PEAK_DTYPE = {"c64": "f32", "c128": "f64", "s8": "s8", "u8": "s8",
              **{d: "f16" for d in DTYPE_BYTES if d.startswith("f8") and d != "f8e8m0fnu"},
              **{d: "f8" for d in FP8_UNIT_DTYPES}}


def dtype_id(hlo_dtype: str) -> int:
  """Index into NODE_DTYPES of the peak an op of compute dtype `hlo_dtype` runs at."""
  return DTYPE_IDS.get(PEAK_DTYPE.get(hlo_dtype, hlo_dtype), DTYPE_IDS["other"])

COMPUTE_INTENSITY = 8.0  # flops per byte above which an opaque fusion counts as "dot"

_DATA_MOVEMENT = ("copy", "copy-start", "copy-done", "reshape", "broadcast",
                  "slice", "concatenate", "pad", "reverse", "iota", "bitcast")
# Ordered: the first rule with an opcode present in a fusion names its class.
HERO_RULES: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("control", ("while", "conditional", "call")),
    ("custom_call", ("custom-call",)),
    ("conv", ("convolution",)),
    ("dot", ("dot",)),
    ("scatter", ("scatter", "dynamic-update-slice")),
    ("gather", ("gather", "dynamic-slice")),
    ("pool", ("reduce-window", "select-and-scatter")),
    ("reduce", ("reduce",)),
    ("other", ("sort", "rng", "rng-bit-generator", "rng-get-and-update-state", "all-reduce",
               "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
               "all-reduce-start", "all-reduce-done", "all-gather-start", "all-gather-done",
               "collective-permute-start", "collective-permute-done")),
    ("transpose", ("transpose",)),
    ("elementwise", hlo_frontend.ELEMENTWISE + hlo_frontend.TRANSCENDENTAL
     + ("bitcast-convert", "reduce-precision")),
    ("data_movement", _DATA_MOVEMENT),
)


def _conv_form(cls: str, conv, fused: bool, operand_dims) -> str:
  """Splits convolutions by the code path XLA:CPU gives them (several-fold apart in throughput):
  grouped / depthwise (feature_group_count > 1); convolutions left unfused in the module
  ("conv_eigen": XLA's own / Eigen kernels: 1-D convs, lhs-dilated transposed convs); and, among
  those fused into a library (XNNPACK / YNNPACK) fusion, the weight-gradient form ("conv_filter":
  a window larger than the output's spatial extent, or batch_group_count > 1) and the rest."""
  if conv.opcode != "convolution":
    return cls
  if int(conv.attr("feature_group_count") or 1) > 1:
    return "conv_grouped"
  if not fused:
    return "conv_eigen"
  labels = conv.attr("dim_labels") or ""
  out_labels = labels.split("->")[-1]
  out_dims = conv.shape[0][1] if conv.shape else ()
  spatial = [out_dims[k] for k, ch in enumerate(out_labels) if ch.isdigit() and k < len(out_dims)]
  m = re.search(r"size=([\dx]+)", conv.attr("window") or "")
  window = math.prod(int(t) for t in m.group(1).split("x")) if m else 1
  if int(conv.attr("batch_group_count") or 1) > 1 or window > math.prod(spatial):
    return "conv_filter"
  return cls


SMALL_GEMM = 64  # a GEMM side (M or N) under this leaves the library's register tiles half empty


def _dot_form(cls: str, dot, fused: bool, operand_dims) -> str:
  """"dot_small": a dot whose per-batch GEMM has M, N or K < SMALL_GEMM (a small batch through a
  weight matrix, a weight gradient summed over a small batch, per-head attention): the library
  cannot fill its register tiles or amortise packing, so it runs well below its large-GEMM
  rate. Only library-fused dots: XLA:CPU hands an unfused dot (e.g. a weight gradient, whose
  operand is transposed) to Eigen, whose blocking copes with a small side."""
  if dot.opcode != "dot" or len(dot.operands) < 2 or not fused:
    return cls
  sides, k = [], 1
  for j, side in enumerate(("lhs", "rhs")):
    dims = operand_dims(dot.operands[j])
    contracting = set(dot.dims_attr(f"{side}_contracting_dims"))
    skip = contracting | set(dot.dims_attr(f"{side}_batch_dims"))
    sides.append(math.prod(d for i, d in enumerate(dims) if i not in skip))
    if j == 0:
      k = math.prod(d for i, d in enumerate(dims) if i in contracting)
  return "dot_small" if min(sides + [k]) < SMALL_GEMM else cls


def _pool_form(cls: str, rw, fused: bool, operand_dims) -> str:
  """A reduce-window whose windows tile the input (stride = size in every dimension, as XLA:CPU
  emits for the first stage of a long reduction) reads each element once: "reduce". Windows
  that overlap (pooling with stride < size) and select-and-scatter stay "pool"."""
  if rw.opcode != "reduce-window":
    return cls
  window = rw.attr("window") or ""
  size = re.search(r"size=([\dx]+)", window)
  stride = re.search(r"stride=([\dx]+)", window)
  sizes = [int(t) for t in size.group(1).split("x")] if size else []
  strides = [int(t) for t in stride.group(1).split("x")] if stride else [1] * len(sizes)
  return "reduce" if sizes and sizes == strides else cls


# Hero class -> refinement by the hero instruction: f(class, hero, fused?, operand dims) -> class.
REFINE = {"conv": _conv_form, "dot": _dot_form, "pool": _pool_form}
# Unfused instructions that are metadata only (no kernel).
FREE_OPCODES = ("bitcast", "after-all", "partition-id", "replica-id", "add-dependency")

# Generic op type (simulator.ops) -> class, for graphs without HLO text.
OP_TYPE_CLASSES: Dict[str, str] = {
    "unknown": "other", "input": "free", "parameter": "free", "constant": "data_movement",
    "conv": "conv", "dot": "dot", "elementwise": "elementwise", "reduce": "reduce",
    "norm": "reduce", "activation": "elementwise", "pool": "pool", "concat": "data_movement",
    "reshape": "free", "embedding": "gather", "lstm": "dot", "attention": "dot",
    "softmax": "reduce", "loss": "reduce", "optimizer": "elementwise", "fusion": "elementwise",
    "while": "control", "conditional": "control", "custom_call": "custom_call",
    "collective": "other", "copy": "data_movement", "slice": "data_movement",
    "transpose": "transpose", "broadcast": "data_movement", "gather": "gather",
    "scatter": "scatter", "pad": "data_movement", "rng": "other", "sort": "other",
}
assert set(OP_TYPE_CLASSES) == set(ops.OP_TYPES), "every op type needs a class"


@dataclasses.dataclass(frozen=True)
class OpLeaves:
  """Roofline work items ("leaves"); a graph node owns one or more of them.

  A plain node is one leaf it owns with weight 1; a control node owns its own leaf (launch
  overhead only) plus the leaves of its called computations, weighted by how often they run.
  The duration of node i is the weighted sum of the durations of the leaves it owns.
  """
  num_nodes: int
  owner: np.ndarray  # (M,) int node id in [0, num_nodes)
  weight: np.ndarray  # (M,) float executions per step
  op_class: np.ndarray  # (M,) int index into OP_CLASSES
  flops: np.ndarray  # (M,) float flops per execution (transcendentals included)
  transcendentals: np.ndarray  # (M,) float transcendental element ops per execution
  bytes: np.ndarray  # (M,) float streamed bytes per execution
  dtype: np.ndarray  # (M,) int index into NODE_DTYPES (the compute dtype of dots / convs)
  partitions: np.ndarray  # (M,) float XLA:CPU parallel partitions (1 = not split)

  @staticmethod
  def concat(parts: Sequence["OpLeaves"]) -> Tuple["OpLeaves", np.ndarray]:
    """All leaves of several graphs in one set; returns it and (M,) the graph index of each."""
    offsets = np.cumsum([0] + [p.num_nodes for p in parts])
    fields = {f.name: np.concatenate([getattr(p, f.name) for p in parts])
              for f in dataclasses.fields(OpLeaves) if f.name not in ("num_nodes", "owner")}
    owner = np.concatenate([p.owner + o for p, o in zip(parts, offsets)])
    graph_of = np.concatenate([np.full(p.owner.shape, k) for k, p in enumerate(parts)])
    return OpLeaves(int(offsets[-1]), owner, **fields), graph_of

  def class_counts(self) -> Dict[str, float]:
    """Executions per step of each class (weights summed)."""
    tot = np.bincount(self.op_class, weights=self.weight, minlength=len(OP_CLASSES))
    return {c: float(tot[i]) for i, c in enumerate(OP_CLASSES) if tot[i] > 0}


def _leaves(rows: List[tuple], num_nodes: int) -> OpLeaves:
  """rows of (owner, weight, class name, flops, transcendentals, bytes, dtype, partitions)."""
  cols = list(zip(*rows)) if rows else [()] * 8
  return OpLeaves(
      num_nodes=num_nodes, owner=np.asarray(cols[0], np.int64),
      weight=np.asarray(cols[1], np.float64),
      op_class=np.asarray([CLASS_IDS[c] for c in cols[2]], np.int64),
      flops=np.asarray(cols[3], np.float64), transcendentals=np.asarray(cols[4], np.float64),
      bytes=np.asarray(cols[5], np.float64),
      dtype=np.asarray([dtype_id(d) for d in cols[6]], np.int64),
      partitions=np.asarray(cols[7], np.float64))


# ------------------------------------------------------------------ from a CompGraph
def graph_class(op_type_id: int, flops: float, nbytes: float) -> str:
  """Class of a node known only by its generic op type, flops and bytes."""
  name = ops.op_type_name(ops.forward_type(op_type_id))
  cls = OP_TYPE_CLASSES[name]
  if name == "fusion" and flops >= COMPUTE_INTENSITY * max(nbytes, 1.0):
    cls = "dot"
  if flops == 0 and nbytes == 0 and cls != "control":
    cls = "free"
  return cls


def graph_features(graph: CompGraph) -> OpLeaves:
  """One leaf per node from the graph's own fields (dtype assumed f32, no partitions)."""
  rows = [(i, 1.0, graph_class(t, f, b), f, 0.0, b, "f32", 1.0)
          for i, (t, f, b) in enumerate(zip(graph.op_type.tolist(), graph.flops.tolist(),
                                            graph.bytes_accessed.tolist()))]
  return _leaves(rows, graph.num_nodes)


# ------------------------------------------------------------------ from HLO text
_PARTITIONS = re.compile(r'"outer_dimension_partitions"\s*:\s*\[([^\]]*)\]')
_COMMENT = re.compile(r"/\*.*?\*/")


def strip_comments(text: str) -> str:
  """Removes /*...*/ comments (XLA writes /*index=5*/ inside long operand lists)."""
  return _COMMENT.sub("", text)


def _partitions(inst) -> float:
  m = _PARTITIONS.search(inst.attrs)
  parts = [int(t) for t in re.findall(r"\d+", m.group(1))] if m else []
  return float(math.prod(parts)) if parts else 1.0


class _Module:
  """The parsed module: classes, dtypes and streamed bytes of its instructions."""

  def __init__(self, text: str):
    self.text = text
    self.module = parse_hlo(text)
    self.comps, self.entry = self.module.comps, self.module.entry
    self.costs = Costs(self.module)  # shared by the graphs of its computations (one memo)
    self._graphs: Dict[str, object] = {}
    self.by_name = {c: {i.name: i for i in insts} for c, insts in self.comps.items()}
    self.entry_of = {i.name: c for c, insts in self.comps.items() for i in insts}
    self._fused: Dict[str, Tuple[frozenset, tuple]] = {}

  def fused(self, comp: str) -> Tuple[frozenset, tuple]:
    """Opcodes inside a fused computation (nested fusions included, reducer bodies not) and
    its (computation, instruction) pairs."""
    if comp not in self._fused:
      self._fused[comp] = (frozenset(), ())
      found, insts = set(), []
      for inst in self.comps.get(comp, []):
        if inst.opcode == "fusion":
          for c in inst.called("calls"):
            sub, sub_insts = self.fused(c)
            found |= sub
            insts += sub_insts
        else:
          found.add(inst.opcode)
          insts.append((comp, inst))
      self._fused[comp] = (frozenset(found), tuple(insts))
    return self._fused[comp]

  def classify(self, inst) -> Tuple[str, str]:
    """(class name, compute dtype) of one instruction."""
    if inst.opcode in FREE_OPCODES:
      return "free", "f32"
    if inst.opcode == "fusion":
      found, insts = set(), []
      for c in inst.called("calls"):
        f, i = self.fused(c)
        found |= f
        insts += i
    else:
      found, insts = {inst.opcode}, [(self.entry_of.get(inst.name), inst)]
    for cls, opcodes in HERO_RULES:
      if found.intersection(opcodes):
        comp, hero = next(((c, i) for c, i in insts if i.opcode in opcodes), (None, inst))
        refine = REFINE.get(cls, lambda c, *_: c)
        lookup = self.by_name.get(comp, {})
        dims = lambda name: (lookup[name].shape[0][1] if name in lookup and lookup[name].shape
                             else ())
        return (refine(cls, hero, inst.opcode == "fusion", dims),
                self._dtype(inst, insts, opcodes))
    inert = found - set(hlo_frontend.LEAVES + hlo_frontend.FORWARDING)
    return ("other" if inert else "free"), "f32"

  def _dtype(self, inst, insts, hero_opcodes) -> str:
    """dtype of the hero's first operand (a dot's / conv's input dtype), else of its output."""
    for comp, sub in insts:
      if sub.opcode in hero_opcodes:
        first = self.by_name.get(comp, {}).get(sub.operands[0]) if sub.operands else None
        if comp is not None and first is not None and first.shape:
          return first.shape[0][0]
        break
    return inst.shape[0][0] if inst.shape else "f32"

  def streamed_bytes(self, inst, comp: str, cls: str, nbytes: float) -> float:
    d = self.by_name[comp]
    operand_bytes = [float(d[o].nbytes) if o in d else 0.0 for o in inst.operands]
    out = float(inst.nbytes)
    if cls == "gather":
      return float(sum(min(b, out) for b in operand_bytes) + out)
    if cls == "scatter":
      rest = sum(operand_bytes) - out
      return 2.0 * rest if rest > 0 else nbytes
    return nbytes

  def called(self, inst) -> List[Tuple[str, float]]:
    """(computation, executions per execution of `inst`) that a control instruction runs."""
    if inst.opcode == "while":  # the front end's trip count (1 where it is not known)
      n = float(while_trip_count(inst, self.entry_of.get(inst.name),
                                 lambda c: self.by_name.get(c, {})) or 1)
      return ([(c, n) for c in inst.called("body")]
              + [(c, n + 1.0) for c in inst.called("condition")])
    if inst.opcode == "call":
      return [(c, 1.0) for c in inst.called("to_apply")]
    branches = (inst.called("branch_computations") + inst.called("true_computation")
                + inst.called("false_computation"))
    if not branches:
      return []
    work = [self.work(c) for c in branches]
    return [(branches[int(np.argmax(work))], 1.0)]

  def work(self, comp: str) -> float:
    """flops + bytes of a computation (the front end's counts), to pick a conditional branch."""
    g = self.graph_of(comp)
    return 0.0 if g is None else float(g.graph.flops.sum() + g.graph.bytes_accessed.sum())

  def graph_of(self, comp: str):
    """The front end's HloGraph of one computation (None when it has no compute instruction),
    built once per computation from the module parsed once (re-parsing the text per control
    node had made a module of thousands of calls quadratic)."""
    if comp not in self._graphs:
      try:
        self._graphs[comp] = module_graph(self.module, comp, comp, self.text, self.costs,
                                          warn=False)
      except ValueError:
        self._graphs[comp] = None
    return self._graphs[comp]


# ------------------------------------------------------------------ XLA:GPU library calls
# XLA:GPU runs many GEMMs and convolutions as custom-calls into cuBLAS / cuBLASLt / cuDNN. The
# front end counts a custom-call as opaque (0 flops; its bytes include the library workspace
# that the call returns as a trailing u8/s8 array), so a roofline would see a memory-bound
# "custom_call". `gpu_library_call` gives such a call the class and the flops of the dot or
# convolution it computes, read from its own attributes. No XLA:CPU module has these targets.
GPU_GEMM_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul", "__cublas$lt$matmul$f8")
# cuDNN convolution targets -> which operand / result plays which role of the forward
# convolution its window and dim_labels describe.
GPU_CONV_TARGETS = {"__cudnn$convForward": "forward",
                    "__cudnn$convBiasActivationForward": "forward",
                    "__cudnn$convBackwardInput": "input",
                    "__cudnn$convBackwardFilter": "filter"}
_TARGET = re.compile(r'custom_call_target="([^"]*)"')


def _json_dims(attrs: str, key: str) -> List[int]:
  m = re.search(r'"' + key + r'"\s*:\s*\[([^\]]*)\]', attrs)
  return [int(t) for t in re.findall(r"\d+", m.group(1))] if m else []


def gpu_library_call(inst, by_name) -> "Tuple[str, float, float] | None":
  """(class, flops, workspace bytes) of an XLA:GPU cuBLAS / cuDNN custom-call; None for any
  other instruction. `by_name`: the instructions of its computation (operand shapes).

  GEMM: 2 x result elements x the contracting size (the `dot_dimension_numbers` of its
  backend_config); "dot_small" when M, N or K < SMALL_GEMM, as for a dot. Convolution: 2 x the
  forward output's elements x the kernel's elements per output feature (window taps x input
  features per group; taps in the padding are not subtracted), whichever of the three
  tensors the call returns; "conv_grouped" when feature_group_count > 1, "conv_filter" for a
  weight gradient, else "conv".
  """
  if inst.opcode != "custom-call" or "custom_call_target" not in inst.attrs:
    return None
  m = _TARGET.search(inst.attrs)
  target = m.group(1) if m else ""
  if target not in GPU_GEMM_TARGETS and target not in GPU_CONV_TARGETS:
    return None
  from simulator.frontends.hlo_costs import workspace_bytes
  dims = lambda name: (by_name[name].shape[0][1] if name in by_name and by_name[name].shape
                       else ())
  result = inst.shape[0][1] if inst.shape else ()
  work = float(workspace_bytes(inst))
  if target in GPU_GEMM_TARGETS:
    if len(inst.operands) < 2:
      return "dot", 0.0, work
    lhs, rhs = dims(inst.operands[0]), dims(inst.operands[1])
    sides, k = [], 1
    for side, shape in (("lhs", lhs), ("rhs", rhs)):
      contracting = set(_json_dims(inst.attrs, f"{side}_contracting_dimensions"))
      skip = contracting | set(_json_dims(inst.attrs, f"{side}_batch_dimensions"))
      sides.append(math.prod(d for i, d in enumerate(shape) if i not in skip))
      if side == "lhs":
        k = math.prod(d for i, d in enumerate(shape) if i in contracting)
    cls = "dot_small" if min(sides + [k]) < SMALL_GEMM else "dot"
    return cls, 2.0 * math.prod(result) * k * _mac_factor(inst, by_name), work
  role = GPU_CONV_TARGETS[target]
  labels = inst.attr("dim_labels") or ""
  groups = int(inst.attr("feature_group_count") or 1)
  cls = "conv_grouped" if groups > 1 else ("conv_filter" if role == "filter" else "conv")
  ops_ = [dims(o) for o in inst.operands[:2]]
  if "_" not in labels or "->" not in labels or len(ops_) < 2:
    return cls, 0.0, work
  out_shape = {"forward": result, "input": ops_[0], "filter": ops_[1]}[role]
  kernel = {"forward": ops_[1], "input": ops_[1], "filter": result}[role]
  ker_labels = labels.split("_", 1)[1].split("->")[0]
  if len(ker_labels) != len(kernel) or "o" not in ker_labels or not kernel[ker_labels.index("o")]:
    return cls, 0.0, work
  per_output = math.prod(kernel) // kernel[ker_labels.index("o")]
  return cls, 2.0 * math.prod(out_shape) * per_output * _mac_factor(inst, by_name), work


def _mac_factor(inst, by_name) -> int:
  """4 for a library call on complex operands (real flops, as the front end's dots), else 1."""
  first = by_name.get(inst.operands[0]) if inst.operands else None
  return COMPLEX_MAC_FACTOR.get(first.shape[0][0], 1) if first is not None and first.shape else 1


def _rows(h: HloGraph, mod: _Module, comp: str, owner_of, weight: float) -> List[tuple]:
  """Leaf rows of the nodes of `h` (the graph of computation `comp` of `mod`)."""
  insts = [i for i in mod.comps[comp]
           if i.opcode not in hlo_frontend.LEAVES + hlo_frontend.FORWARDING]
  g = h.graph
  if len(insts) != g.num_nodes:
    raise ValueError(f"HLO computation '{comp}' has {len(insts)} compute instructions but the "
                     f"graph has {g.num_nodes} nodes: the text is not this graph's")
  out = []
  for k, inst in enumerate(insts):
    owner = owner_of(k)
    cls, dtype = mod.classify(inst)
    if cls == "control":
      out.append((owner, weight, "control", 0.0, 0.0, 0.0, "f32", 1.0))
      for sub, mult in mod.called(inst):
        sub_graph = mod.graph_of(sub)
        if sub_graph is not None:
          out += _rows(sub_graph, mod, sub, lambda _k, o=owner: o, weight * mult)
      continue
    flops, trans = float(g.flops[k]), float(h.transcendentals[k])
    nbytes = 0.0 if cls == "free" else mod.streamed_bytes(inst, comp, cls,
                                                          float(g.bytes_accessed[k]))
    lib = gpu_library_call(inst, mod.by_name.get(comp, {}))  # XLA:GPU cuBLAS / cuDNN calls
    if lib is not None:
      cls, flops, nbytes = lib[0], lib[1], nbytes - lib[2]
    if cls == "free" or (flops == 0 and nbytes == 0):
      cls, flops, trans, nbytes = "free", 0.0, 0.0, 0.0
    out.append((owner, weight, cls, flops, trans, nbytes, dtype, _partitions(inst)))
  return out


def hlo_features(h: HloGraph) -> OpLeaves:
  """Leaves of the nodes of an HloGraph, with classes read from its HLO text."""
  mod = _Module(strip_comments(h.hlo_text))
  return _leaves(_rows(h, mod, mod.entry, lambda k: k, 1.0), h.graph.num_nodes)


def hlo_graph(text: str, name: str = "hlo") -> HloGraph:
  """`simulator.frontends.hlo_to_graph` on the text with XLA's /*...*/ comments removed."""
  return hlo_to_graph(strip_comments(text), name)


def features(graph) -> OpLeaves:
  """Leaves of a CompGraph (op-type classes) or of an HloGraph (classes read from its HLO)."""
  if isinstance(graph, HloGraph):
    return hlo_features(graph)
  if isinstance(graph, CompGraph):
    return graph_features(graph)
  raise ValueError(f"expected a CompGraph or an HloGraph, got {type(graph).__name__}")
