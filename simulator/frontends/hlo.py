"""JAX -> XLA HLO text -> CompGraph (DESIGN section 6, "simulator/frontends").

Why: placement methods should be scored on real programs, both as XLA first sees them ("pre":
`jax.jit(fn).lower(*args).as_text(dialect="hlo")`) and after XLA's passes ("post":
`.compile().as_text()`, where XLA's fusion groups are single `fusion` instructions), so XLA's own
grouping can be read and compared as a baseline.

What: the HLO text is parsed (a small line parser, no XLA bindings) and the ENTRY computation
becomes one CompGraph node per compute instruction, with an edge from each operand's producer.

Conventions (all documented choices):
  * `parameter` / `constant` are not nodes. Their bytes become `param_bytes` of the nodes that
    read them, split evenly among the distinct reader nodes; a parameter or constant that no
    node reads (e.g. one returned as is) contributes nothing. Their edges are dropped.
  * `tuple` / `get-tuple-element` make no nodes and count no bytes: a tuple is a bundle of its
    operands' sources, and a get-tuple-element of a tuple forwards element `index`; of a node
    (a while, say) it forwards the edge from that node. The ROOT tuple is not a node.
  * `fusion`, `call`, `while`, `conditional` are one node each. flops = the sum over the called
    computation's instructions (recursively). A fusion's bytes_accessed is its boundary (operand
    + output bytes), since a fusion does not materialise its inner values; a call's / while's /
    conditional's bytes_accessed is the sum over the called instructions. A while counts body +
    condition times XLA's `known_trip_count` from backend_config when present (post stage), else
    once (pre stage; this matches XLA's own cost_analysis). A conditional takes the max over its
    branches (one branch runs).
  * `custom-call` is its own node with flops 0 (opaque library call).
  * flops: dot = 2 * prod(output dims) * prod(contracting dims); convolution = 2 * output
    elements * kernel spatial size * input features per group (padding taps included, unlike
    XLA, which skips taps that fall in the padding); elementwise ops 1 per output element;
    reductions 1 per input element (XLA counts input - output elements); reduce-window = output
    elements * window size; sort = n * ceil(log2 n) for n elements of its first operand (XLA's
    convention). Transcendentals (exp, log, tanh, logistic, rsqrt, sqrt, power, sine,
    cosine, ...) count 1 flop per element here AND are recorded separately in
    `HloGraph.transcendentals` (XLA's cost_analysis reports them only under "transcendentals").
  * bytes_accessed = operand bytes + output bytes; out_bytes from the result shape (tuples: sum).
  * `cost` is 0 everywhere: a cost model (e.g. a roofline) must fill it before simulation.
  * Node names are the HLO instruction name, plus " [op_name]" from JAX's metadata when present.
  * Opcodes missing from `OPCODE_TYPES` map to "unknown" and are listed in one warning.
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from typing import Dict, List, Optional, Tuple

import numpy as np

from simulator import ops
from simulator.graph import CompGraph

# ------------------------------------------------------------------ registries
DTYPE_BYTES = {"pred": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2,
               "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8,
               "c128": 16, "token": 0, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3": 1,
               "f8e4m3b11fnuz": 1, "f8e4m3fnuz": 1, "f8e5m2fnuz": 1}

TRANSCENDENTAL = ("exponential", "exponential-minus-one", "log", "log-plus-one", "tanh",
                  "logistic", "rsqrt", "sqrt", "cbrt", "power", "sine", "cosine", "tan",
                  "atan2", "erf")
ELEMENTWISE = ("add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum",
               "negate", "abs", "sign", "floor", "ceil", "round-nearest-afz",
               "round-nearest-even", "compare", "select", "clamp", "convert", "and", "or", "xor",
               "not", "shift-left", "shift-right-logical", "shift-right-arithmetic", "is-finite",
               "real", "imag", "complex", "popcnt", "clz", "map", "stochastic-convert")

_GENERIC = {
    "dot": "dot", "convolution": "conv", "reduce": "reduce", "reduce-window": "pool",
    "select-and-scatter": "pool", "fusion": "fusion", "call": "fusion", "while": "while",
    "conditional": "conditional", "custom-call": "custom_call", "copy": "copy",
    "copy-start": "copy", "copy-done": "copy", "reshape": "reshape", "bitcast": "reshape",
    "transpose": "transpose", "reverse": "transpose", "broadcast": "broadcast", "iota": "constant",
    "slice": "slice", "dynamic-slice": "gather", "gather": "gather", "scatter": "scatter",
    "dynamic-update-slice": "scatter", "concatenate": "concat", "pad": "pad", "sort": "sort",
    "rng": "rng", "rng-bit-generator": "rng", "rng-get-and-update-state": "rng",
    "all-reduce": "collective", "all-gather": "collective", "reduce-scatter": "collective",
    "all-to-all": "collective", "collective-permute": "collective",
    "all-reduce-start": "collective", "all-reduce-done": "collective",
    "all-gather-start": "collective", "all-gather-done": "collective",
    "collective-permute-start": "collective", "collective-permute-done": "collective",
    "bitcast-convert": "elementwise", "reduce-precision": "elementwise",
    "optimization-barrier": "copy", "after-all": "constant", "add-dependency": "copy",
    "partition-id": "constant", "replica-id": "constant",
    "tanh": "activation", "logistic": "activation",
}
# HLO opcode -> generic vocabulary name (simulator.ops.OP_TYPES).
OPCODE_TYPES: Dict[str, str] = {**{k: "elementwise" for k in ELEMENTWISE + TRANSCENDENTAL},
                                **_GENERIC}

LEAVES = ("parameter", "constant")            # become param_bytes of their readers
FORWARDING = ("tuple", "get-tuple-element")   # make no nodes


# ------------------------------------------------------------------ parsed HLO
@dataclasses.dataclass
class Inst:
  name: str
  shape: List[Tuple[str, Tuple[int, ...]]]  # flattened (dtype, dims) leaves
  opcode: str
  operands: List[str]
  attrs: str
  is_root: bool

  @property
  def nbytes(self) -> int:
    return sum(DTYPE_BYTES.get(dt, 4) * math.prod(d) for dt, d in self.shape)

  @property
  def elements(self) -> int:
    return sum(math.prod(d) for _, d in self.shape)

  def attr(self, key: str) -> Optional[str]:
    m = re.search(r"(?:^|[\s,])" + re.escape(key) + r"=(\{[^}]*\}|[^\s,]+)", self.attrs)
    return m.group(1) if m else None

  def dims_attr(self, key: str) -> List[int]:
    v = self.attr(key)
    return [int(t) for t in re.findall(r"\d+", v)] if v else []

  def called(self, key: str) -> List[str]:
    v = self.attr(key)
    return [t.lstrip("%") for t in re.findall(r"%?[\w.\-]+", v)] if v else []

  def op_name(self) -> Optional[str]:
    m = re.search(r'op_name="((?:[^"\\]|\\.)*)"', self.attrs)
    return m.group(1) if m else None


_HEAD = re.compile(r"\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*")
_LEAF_SHAPE = re.compile(r"(\w+)\[([^\]]*)\]")


def _match_close(s: str, i: int) -> int:
  """Index just past the bracket closing the one at s[i]; skips quoted strings."""
  pairs, stack, quoted = {"(": ")", "{": "}", "[": "]"}, [], False
  for j in range(i, len(s)):
    c = s[j]
    if quoted:
      quoted = c != '"' or s[j - 1] == "\\"
    elif c == '"':
      quoted = True
    elif c in pairs:
      stack.append(pairs[c])
    elif stack and c == stack[-1]:
      stack.pop()
      if not stack:
        return j + 1
  raise ValueError(f"unbalanced brackets in HLO line: {s[:120]!r}")


def _split_top(s: str) -> List[str]:
  parts, depth, cur = [], 0, []
  for c in s:
    if c in "([{":
      depth += 1
    elif c in ")]}":
      depth -= 1
    if c == "," and depth == 0:
      parts.append("".join(cur))
      cur = []
    else:
      cur.append(c)
  if "".join(cur).strip():
    parts.append("".join(cur))
  return parts


def _parse_inst(line: str) -> Optional[Inst]:
  m = _HEAD.match(line)
  if not m:
    return None
  rest = line[m.end():]
  if rest.startswith("("):
    end = _match_close(rest, 0)
  else:
    sm = re.match(r"\w+\[[^\]]*\](\{[^}]*\})?", rest)
    if not sm:
      return None
    end = sm.end()
  shape_txt, rest = rest[:end], rest[end:].lstrip()
  shape = [(dt, tuple(int(x.lstrip("<=")) for x in dims.split(",") if x.strip()))
           for dt, dims in _LEAF_SHAPE.findall(re.sub(r"/\*.*?\*/", "", shape_txt))]
  om = re.match(r"([\w\-]+)\(", rest)
  if not om:
    return None
  opcode = om.group(1)
  close = _match_close(rest, om.end() - 1)
  inner, attrs = rest[om.end():close - 1], rest[close:]
  operands = [] if opcode in LEAVES else [p.split()[-1].lstrip("%") for p in _split_top(inner)
                                           if p.strip()]
  return Inst(m.group(2), shape, opcode, operands, attrs, bool(m.group(1)))


def parse_hlo_module(text: str) -> Tuple[Dict[str, List[Inst]], str]:
  """{computation name: instructions in order}, and the ENTRY computation's name."""
  comps, entry, cur = {}, None, None
  for line in text.splitlines():
    if cur is None:
      s = line.strip()
      if line[:1].strip() and s.endswith("{") and not s.startswith("HloModule"):
        toks = s.split()
        is_entry = toks[0] == "ENTRY"
        cur = toks[1 if is_entry else 0].lstrip("%")
        comps[cur] = []
        entry = cur if is_entry else entry
    elif line.strip() == "}":
      cur = None
    else:
      inst = _parse_inst(line)
      if inst is not None:
        comps[cur].append(inst)
  if entry is None:
    raise ValueError("HLO text has no ENTRY computation")
  return comps, entry


# ------------------------------------------------------------------ flop rules
def _dot(inst, shapes):
  lhs = shapes[inst.operands[0]][0][1]
  k = math.prod(lhs[d] for d in inst.dims_attr("lhs_contracting_dims"))
  return 2 * inst.elements * k, 0


def _conv(inst, shapes):
  kernel = shapes[inst.operands[1]][0][1]
  labels = inst.attr("dim_labels") or ""
  kernel_labels = labels.split("_")[1].split("->")[0] if "_" in labels else ""
  o = kernel[kernel_labels.index("o")] if "o" in kernel_labels else 1
  return 2 * inst.elements * (math.prod(kernel) // max(o, 1)), 0


def _reduce(inst, shapes):
  inputs = inst.operands[:len(inst.operands) // 2] or inst.operands
  return sum(math.prod(shapes[o][0][1]) for o in inputs), 0


def _reduce_window(inst, shapes):
  w = re.search(r"size=([\dx]+)", inst.attr("window") or "")
  return inst.elements * (math.prod(int(t) for t in w.group(1).split("x")) if w else 1), 0


def _sort(inst, shapes):
  n = math.prod(shapes[inst.operands[0]][0][1])
  return n * max(math.ceil(math.log2(n)), 1) if n > 1 else 0, 0


FLOP_RULES = {"dot": _dot, "convolution": _conv, "reduce": _reduce,
              "reduce-window": _reduce_window, "sort": _sort,
              **{k: (lambda i, s: (i.elements, 0)) for k in ELEMENTWISE},
              **{k: (lambda i, s: (i.elements, i.elements)) for k in TRANSCENDENTAL}}


def _trip_count(inst) -> int:
  m = re.search(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)', inst.attrs)
  return int(m.group(1)) if m else 1


class _Costs:
  """Per-instruction (flops, transcendentals, bytes_accessed), recursing into called code."""

  def __init__(self, comps):
    self.comps, self.memo, self.unknown = comps, {}, set()
    self.shapes = {c: {i.name: i.shape for i in insts} for c, insts in comps.items()}

  def computation(self, comp: str) -> np.ndarray:
    if comp not in self.memo:
      self.memo[comp] = np.zeros(3)  # guards against (invalid) recursion
      total = np.zeros(3)
      for inst in self.comps.get(comp, []):
        if inst.opcode not in LEAVES + FORWARDING:
          total += self.inst(inst, comp, inner=True)
      self.memo[comp] = total
    return self.memo[comp]

  def _boundary_bytes(self, inst, comp) -> float:
    shapes = self.shapes[comp]
    op_bytes = sum(DTYPE_BYTES.get(dt, 4) * math.prod(d) for o in inst.operands
                   for dt, d in shapes.get(o, []))
    return float(op_bytes + inst.nbytes)

  def inst(self, inst, comp, inner=False) -> np.ndarray:
    op = inst.opcode
    if op not in OPCODE_TYPES and op not in LEAVES + FORWARDING:
      self.unknown.add(op)
    boundary = self._boundary_bytes(inst, comp)
    if op == "fusion":
      sub = sum((self.computation(c) for c in inst.called("calls")), np.zeros(3))
      return np.array([sub[0], sub[1], boundary])
    if op == "call":
      return sum((self.computation(c) for c in inst.called("to_apply")), np.zeros(3))
    if op == "while":
      body = sum((self.computation(c) for c in inst.called("body") + inst.called("condition")),
                 np.zeros(3))
      return body * _trip_count(inst)
    if op == "conditional":
      branches = (inst.called("branch_computations") + inst.called("true_computation")
                  + inst.called("false_computation"))
      subs = [self.computation(c) for c in branches] or [np.zeros(3)]
      return np.max(np.stack(subs), axis=0)
    rule = FLOP_RULES.get(op)
    f, t = rule(inst, self.shapes[comp]) if rule else (0, 0)
    return np.array([f, t, boundary], dtype=float)


# ------------------------------------------------------------------ graph building
@dataclasses.dataclass(frozen=True)
class HloGraph:
  graph: CompGraph
  transcendentals: np.ndarray  # (N,) transcendental element ops per node (also in flops)
  hlo_text: str
  unknown_opcodes: Tuple[str, ...]


def _flatten(value) -> list:
  """A value is ('node', i), ('leaf', name) or ('tuple', [values]); returns the non-tuple items."""
  if value[0] == "tuple":
    return [x for v in value[1] for x in _flatten(v)]
  return [value]


def hlo_to_graph(text: str, name: str = "hlo") -> HloGraph:
  """Builds the CompGraph of the ENTRY computation of an HLO module's text."""
  comps, entry = parse_hlo_module(text)
  costs = _Costs(comps)
  insts = comps[entry]
  by_name = {i.name: i for i in insts}
  values, nodes, stats, readers = {}, [], [], {}
  for inst in insts:
    if inst.opcode in LEAVES:
      values[inst.name] = ("leaf", inst.name)
      continue
    missing = [o for o in inst.operands if o not in values]
    if missing:
      raise ValueError(f"HLO instruction '{inst.name}' reads undefined value(s) {missing}")
    if inst.opcode == "tuple":
      values[inst.name] = ("tuple", [values[o] for o in inst.operands])
      continue
    if inst.opcode == "get-tuple-element":
      src = values[inst.operands[0]]
      idx = int(inst.attr("index") or 0)
      values[inst.name] = src[1][idx] if src[0] == "tuple" else src
      continue
    i = len(nodes)
    nodes.append(inst)
    stats.append(costs.inst(inst, entry))
    values[inst.name] = ("node", i)
    for o in inst.operands:
      for kind, ref in _flatten(values[o]):
        readers.setdefault((kind, ref), set()).add(i)
  if not nodes:
    raise ValueError(f"HLO module '{name}' has no compute instructions in its ENTRY "
                     f"computation (only parameters, constants and tuples)")
  n = len(nodes)
  param_bytes = np.zeros(n)
  senders, receivers = [], []
  for (kind, ref), rs in readers.items():
    if kind == "leaf":
      for r in rs:  # split evenly among the distinct readers
        param_bytes[r] += by_name[ref].nbytes / len(rs)
    else:
      for r in rs:
        if r != ref:
          senders.append(ref)
          receivers.append(r)
  stats = np.array(stats, dtype=float).reshape(n, 3)
  unknown = tuple(sorted(costs.unknown))
  if unknown:
    warnings.warn(f"HLO module '{name}': opcodes without a mapping (op_type 'unknown', "
                  f"flops 0): {', '.join(unknown)}")
  names = [f"{x.name} [{x.op_name()}]" if x.op_name() else x.name for x in nodes]
  graph = CompGraph(
      cost=np.zeros(n), senders=np.array(senders, np.int64),
      receivers=np.array(receivers, np.int64),
      out_bytes=[x.nbytes for x in nodes], param_bytes=param_bytes, temp_bytes=np.zeros(n),
      flops=stats[:, 0], bytes_accessed=stats[:, 2],
      op_type=[ops.op_type_id(OPCODE_TYPES.get(x.opcode, "unknown")) for x in nodes],
      name=name, node_names=names)
  return HloGraph(graph, stats[:, 1], text, unknown)


def lower_hlo_text(fn, *example_args, stage: str = "pre") -> str:
  """HLO text of `fn` before ("pre") or after ("post") XLA's optimisation passes."""
  import jax
  if stage not in ("pre", "post"):
    raise ValueError(f"stage must be 'pre' or 'post', got {stage!r}")
  try:
    lowered = jax.jit(fn).lower(*example_args)
    if stage == "pre":
      return lowered.as_text(dialect="hlo")
    return lowered.compile().as_text()
  except Exception as e:  # tracing / lowering / compilation errors of any type
    raise ValueError(f"cannot lower {getattr(fn, '__name__', fn)!r} to HLO: "
                     f"{type(e).__name__}: {e}") from e


def from_jax_full(fn, *example_args, stage: str = "pre", name: Optional[str] = None) -> HloGraph:
  """Like `from_jax`, but also returns transcendental counts and the HLO text."""
  text = lower_hlo_text(fn, *example_args, stage=stage)
  return hlo_to_graph(text, name or f"{getattr(fn, '__name__', 'fn')}/{stage}")


def from_jax(fn, *example_args, stage: str = "pre", name: Optional[str] = None) -> CompGraph:
  """CompGraph of `jax.jit(fn)` on `example_args` (cost = 0: fill it with a cost model).

  Raises:
    ValueError: `fn` fails to trace, lower or compile (the message carries XLA's / JAX's).
  """
  return from_jax_full(fn, *example_args, stage=stage, name=name).graph
