"""HLO module text -> parsed computations (a linear-time line parser, no XLA bindings).

Why: the JAX front end (`simulator.frontends.hlo`) reads XLA's HLO text both before and after
XLA's passes; modules of 10^5 instructions (an unrolled GNMT training step) must parse in
seconds. Each instruction line is matched by one regular expression on the common path (array
result, operands without shapes), with an exact bracket-matching scan as the fallback. The
module header's `is_scheduled=true` and the debug-info tables (FileNames, FunctionNames,
FileLocations, StackFrames) are read too, so each instruction's `stack_frame_id` resolves to a
source chain. Also holds the opcode registries shared by the front end's modules.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
from typing import Callable, Dict, List, Optional, Tuple


# ------------------------------------------------------------------ registries
DTYPE_BYTES = {"pred": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2,
               "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8,
               "c128": 16, "token": 0, "opaque": 0, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3": 1,
               "f8e4m3b11fnuz": 1, "f8e4m3fnuz": 1, "f8e5m2fnuz": 1, "f8e3m4": 1,
               "f8e8m0fnu": 1, "f4e2m1fn": 1, "s1": 1, "u1": 1, "s2": 1, "u2": 1}
# Packed sub-byte types: bits per element. XLA packs them (a layout's ':E(4)'), an array taking
# ceil(elements * bits / 8) bytes: s4[3,5] is 8 bytes (its memory_analysis and cost_analysis).
# s1/u1 and pred are not packed (a byte per element on XLA:CPU), nor is anything else.
PACKED_BITS = {"s4": 4, "u4": 4, "f4e2m1fn": 4, "s2": 2, "u2": 2}


# Real flops of one complex multiply-add over a real one: (a+bi)(c+di) + e is 4 real multiplies
# and 4 real adds, 8 flops against 2. Dots and convolutions count real flops (XLA counts 2).
COMPLEX_MAC_FACTOR = {"c64": 4, "c128": 4}


def leaf_bytes(dtype: str, dims) -> int:
  """Bytes of one array of `dtype` (an HLO element type) and shape `dims`, as XLA stores it."""
  n = math.prod(dims)
  bits = PACKED_BITS.get(dtype)
  return DTYPE_BYTES[dtype] * n if bits is None else -(-n * bits // 8)

TRANSCENDENTAL = ("exponential", "exponential-minus-one", "log", "log-plus-one", "tanh",
                  "logistic", "rsqrt", "sqrt", "cbrt", "power", "sine", "cosine", "tan",
                  "atan2", "erf")
ELEMENTWISE = ("add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum",
               "negate", "abs", "sign", "floor", "ceil", "round-nearest-afz",
               "round-nearest-even", "compare", "select", "clamp", "convert", "and", "or", "xor",
               "not", "shift-left", "shift-right-logical", "shift-right-arithmetic", "is-finite",
               "real", "imag", "complex", "popcnt", "clz", "count-leading-zeros",
               "stochastic-convert")

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
    "bitcast-convert": "elementwise", "reduce-precision": "elementwise", "map": "elementwise",
    "after-all": "constant", "add-dependency": "copy",
    "partition-id": "constant", "replica-id": "constant", "async-start": "fusion",
    "async-update": "fusion", "async-done": "fusion",
    "tanh": "activation", "logistic": "activation",
}
# HLO opcode -> generic vocabulary name (simulator.ops.OP_TYPES).
OPCODE_TYPES: Dict[str, str] = {**{k: "elementwise" for k in ELEMENTWISE + TRANSCENDENTAL},
                                **_GENERIC}

LEAVES = ("parameter", "constant")            # become param_bytes of their readers
# Make no nodes. An optimization barrier (XLA prints `opt-barrier`; jax.checkpoint writes them)
# only orders the program: it passes its operand through, like a tuple, with no kernel.
BARRIERS = ("opt-barrier", "optimization-barrier")
FORWARDING = ("tuple", "get-tuple-element") + BARRIERS
# Opcode -> attributes naming the computations it runs (its "inner" instructions).
CALLED_ATTRS = {"fusion": ("calls",), "call": ("to_apply",), "async-start": ("calls",),
                "while": ("condition", "body"),
                "conditional": ("branch_computations", "true_computation", "false_computation")}
WORKSPACE_DTYPES = ("u8", "s8")
FRAME_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
# Source frames where a chain stops: the front end's lowering call and what called it.
CALLER_FRAMES = ("lower_hlo_text@hlo.py:",)


# ------------------------------------------------------------------ parsed HLO
@dataclasses.dataclass(eq=False, slots=True)
class Inst:
  name: str
  shape: List[Tuple[str, Tuple[int, ...]]]  # flattened (dtype, dims) leaves
  opcode: str
  operands: List[str]
  attrs: str
  is_root: bool
  nbytes: int = 0      # bytes of all result leaves
  elements: int = 0    # elements of all result leaves
  literal: str = ""    # the value of a scalar constant, as printed ("" for anything else)

  def attr(self, key: str) -> Optional[str]:
    m = _attr_re(key).search(self.attrs)
    return m.group(1) if m else None

  def dims_attr(self, key: str) -> List[int]:
    v = self.attr(key)
    return [int(t) for t in re.findall(r"\d+", v)] if v else []

  def called(self, key: str) -> List[str]:
    v = self.attr(key)
    return [t.lstrip("%") for t in re.findall(r"%?[\w.\-]+", v)] if v else []

  def op_name(self) -> Optional[str]:
    m = _OP_NAME.search(self.attrs) if "op_name" in self.attrs else None
    return m.group(1) if m else None

  def stack_frame_id(self) -> int:
    m = _FRAME_ID.search(self.attrs) if "stack_frame_id" in self.attrs else None
    return int(m.group(1)) if m else 0


@functools.lru_cache(maxsize=None)
def _attr_re(key: str):
  return re.compile(r"(?:^|[\s,])" + re.escape(key) + r"=(\{[^}]*\}|[^\s,]+)")


_HEAD = re.compile(r"\s*(ROOT\s+)?%?([^\s=(]+)\s*=\s*")
_SIMPLE = re.compile(r"\s*(ROOT\s+)?%?([^\s=(]+)\s*=\s*(\w+\[[^\]]*\](?:\{[^}]*\})?)\s*"
                     r"([\w\-]+)\(([^()\[\]{}\"]*)\)")
_ARRAY_SHAPE = re.compile(r"\w+\[[^\]]*\](?:\{[^}]*\})?")
_OPCODE = re.compile(r"\s*([\w\-]+)\(")
_LEAF_SHAPE = re.compile(r"(\w+)\[([^\]]*)\]")
_COMMENT = re.compile(r"/\*.*?\*/")
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_FRAME_ID = re.compile(r"stack_frame_id=(\d+)")
_TABLE_ROW = re.compile(r"(\d+)\s+(.*)")
_SHAPES: Dict[str, Tuple[list, int, int]] = {}  # shape text -> (leaves, bytes, elements)


def _shape_info(txt: str) -> Tuple[list, int, int]:
  hit = _SHAPES.get(txt)
  if hit is None:
    leaves = []
    for dt, dims in _LEAF_SHAPE.findall(_COMMENT.sub("", txt)):
      if dt not in DTYPE_BYTES:
        raise ValueError(f"HLO shape {txt.strip()!r}: unknown element type {dt!r} (known: "
                         f"{', '.join(sorted(DTYPE_BYTES))})")
      try:
        leaves.append((dt, tuple(int(x.lstrip("<=")) for x in dims.split(",") if x.strip())))
      except ValueError:
        raise ValueError(f"HLO shape {txt.strip()!r}: dimension sizes must be integers or "
                         f"bounds '<=N'; unbounded dynamic dimensions ('?', a symbolic "
                         f"shape) are not supported: give concrete shapes") from None
    hit = (leaves, sum(leaf_bytes(dt, d) for dt, d in leaves),
           sum(math.prod(d) for _, d in leaves))
    if len(_SHAPES) < 200_000:
      _SHAPES[txt] = hit
  return hit


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
  m = _SIMPLE.match(line)
  if m:  # fast path: array result, operands without shapes or brackets
    leaves, nbytes, elements = _shape_info(m.group(3))
    opcode, inner = m.group(4), m.group(5)
    if "/*" in inner:
      inner = _COMMENT.sub("", inner)
    operands = ([] if opcode in LEAVES or not inner.strip() else
                [p.strip().lstrip("%") for p in inner.split(",")])
    literal = inner.strip() if opcode == "constant" and leaves and not leaves[0][1] else ""
    return Inst(m.group(2), leaves, opcode, operands, line[m.end():], bool(m.group(1)),
                nbytes, elements, literal)
  m = _HEAD.match(line)
  if not m:
    return None
  pos = m.end()
  if line.startswith("(", pos):
    end = _match_close(line, pos)
  else:
    sm = _ARRAY_SHAPE.match(line, pos)
    if not sm:
      return None
    end = sm.end()
  leaves, nbytes, elements = _shape_info(line[pos:end])
  om = _OPCODE.match(line, end)
  if not om:
    return None
  opcode, start = om.group(1), om.end()
  close = line.find(")", start)
  inner = line[start:close] if close >= 0 else "("
  if "(" in inner or '"' in inner:  # nested brackets or strings: the slow, exact scan
    close = _match_close(line, start - 1) - 1
    inner = line[start:close]
  if "/*" in inner:
    inner = _COMMENT.sub("", inner)
  if opcode in LEAVES or not inner.strip():
    operands = []
  elif "[" in inner or "{" in inner or "(" in inner:  # operands printed with their shapes
    operands = [p.split()[-1].lstrip("%") for p in _split_top(inner) if p.strip()]
  else:
    operands = [p.split()[-1].lstrip("%") for p in inner.split(",")]
  return Inst(m.group(2), leaves, opcode, operands, line[close + 1:], bool(m.group(1)),
              nbytes, elements)


@dataclasses.dataclass(frozen=True)
class HloModule:
  """A parsed HLO module: its computations, the ENTRY's name, schedule flag, source frames."""
  comps: Dict[str, List[Inst]]  # computation name -> instructions in printed order
  entry: str
  is_scheduled: bool            # header says is_scheduled=true: ENTRY order is XLA's schedule
  frames: Dict[int, str]        # stack_frame_id -> "func@file:line:col < caller ..." chain


def _resolve_frames(tables: Dict[str, Dict[int, str]]) -> Dict[int, str]:
  """stack_frame_id -> source chain, innermost first. XLA prints parent_frame_id one above the
  parent's id (0: no parent); loops are cut. The chain stops at the front end's own lowering
  call (`CALLER_FRAMES`), so the chains of one program lowered twice, from different call
  sites (once per stage), agree."""
  unquote = lambda s: s.strip().strip('"')
  files = {k: os.path.basename(unquote(v)) for k, v in tables.get("FileNames", {}).items()}
  funcs = {k: unquote(v) for k, v in tables.get("FunctionNames", {}).items()}
  locs = {}
  for k, v in tables.get("FileLocations", {}).items():
    f = dict(kv.split("=", 1) for kv in v.strip("{} ").split())
    locs[k] = (f"{funcs.get(int(f.get('function_name_id', 0)), '?')}@"
               f"{files.get(int(f.get('file_name_id', 0)), '?')}:{f.get('line', '?')}:"
               f"{f.get('column', '?')}")
  raw = {}
  for k, v in tables.get("StackFrames", {}).items():
    f = dict(kv.split("=", 1) for kv in v.strip("{} ").split())
    raw[k] = (int(f.get("file_location_id", 0)), int(f.get("parent_frame_id", 0)) - 1)
  out = {}
  for k in raw:
    chain, seen, cur = [], set(), k
    while cur in raw and cur not in seen:
      seen.add(cur)
      loc = locs.get(raw[cur][0], "?")
      if loc.startswith(CALLER_FRAMES):
        break
      chain.append(loc)
      cur = raw[cur][1]
    out[k] = " < ".join(chain)
  return out


def parse_hlo(text: str) -> HloModule:
  """Parses HLO module text (linear in its length)."""
  comps, entry, cur, scheduled, section = {}, None, None, False, None
  tables: Dict[str, Dict[int, str]] = {}
  names: set = set()
  for number, line in enumerate(text.split("\n"), 1):
    if cur is not None:
      if line.strip() == "}":
        cur = None
        continue
      if not line.strip():
        continue
      try:
        inst = _parse_inst(line)
      except ValueError as e:
        raise ValueError(f"HLO line {number} (computation '{cur}'): {e}") from None
      if inst is None:
        raise ValueError(f"HLO line {number} (computation '{cur}') is not an instruction "
                         f"'name = shape opcode(operands)': {line.strip()[:120]!r}")
      if inst.name in names:
        raise ValueError(f"HLO line {number} (computation '{cur}'): instruction "
                         f"'{inst.name}' is defined twice")
      names.add(inst.name)
      comps[cur].append(inst)
      continue
    s = line.strip()
    if s.startswith("HloModule"):
      scheduled = "is_scheduled=true" in s
    elif s in FRAME_SECTIONS:
      section = tables.setdefault(s, {})
    elif section is not None and s and s[0].isdigit():
      m = _TABLE_ROW.match(s)
      if m:
        section[int(m.group(1))] = m.group(2)
    elif line[:1].strip() and s.endswith("{"):
      section = None
      toks = s.split()
      is_entry = toks[0] == "ENTRY"
      cur = toks[1 if is_entry else 0].lstrip("%")
      comps[cur], names = [], set()
      entry = cur if is_entry else entry
    else:
      section = None
  if cur is not None:
    raise ValueError(f"HLO text ends inside computation '{cur}' (no closing '}}'): truncated?")
  if entry is None:
    raise ValueError("HLO text has no ENTRY computation")
  _check_called(comps)
  return HloModule(comps, entry, scheduled, _resolve_frames(tables))


# Attributes naming the computations an instruction runs or applies (reducers included).
_CALLS = tuple(sorted({a for attrs in CALLED_ATTRS.values() for a in attrs} | {"to_apply"}))


def _check_called(comps: Dict[str, List[Inst]]) -> None:
  """ValueError naming an instruction that calls a computation the module does not define."""
  for comp, insts in comps.items():
    for inst in insts:
      if "=%" not in inst.attrs and not any(a + "=" in inst.attrs for a in _CALLS):
        continue
      for a in _CALLS:
        missing = [c for c in inst.called(a) if c not in comps]
        if missing:
          raise ValueError(f"HLO instruction '{inst.name}' (computation '{comp}'): {a}= names "
                           f"computation(s) {missing} that the module does not define")


def parse_hlo_module(text: str) -> Tuple[Dict[str, List[Inst]], str]:
  """{computation name: instructions in order}, and the ENTRY computation's name."""
  mod = parse_hlo(text)
  return mod.comps, mod.entry


# ------------------------------------------------------------------ while trip counts
_KNOWN_TRIP = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)')


def _int_literal(inst: Optional[Inst]) -> Optional[int]:
  if inst is None or inst.opcode != "constant" or not inst.literal:
    return None
  try:
    return int(inst.literal)
  except ValueError:
    return None


def _tuple_index(inst: Optional[Inst], param: str) -> Optional[int]:
  """k where `inst` is get-tuple-element(param), index=k; else None."""
  if inst is None or inst.opcode != "get-tuple-element" or inst.operands != [param]:
    return None
  index = inst.attr("index")
  return int(index) if index is not None and index.isdigit() else None


def while_trip_count(inst: Inst, caller: Optional[str],
                     by_name: Callable[[str], Dict[str, Inst]]) -> Optional[int]:
  """Iterations of a `while` instruction of computation `caller`: XLA's `known_trip_count`
  (backend_config, post stage), else the counted loop JAX writes for scan / fori_loop / map,
  recognised as XLA's own loop analysis does for its simplest pattern: the condition's root is
  `i < N` (or `N > i`) for an integer constant N and tuple element i of the state, the body's
  root tuple sets that element to `i + 1`, and the loop's initial tuple gives it an integer
  constant c0: max(0, N - c0) iterations. None when the count is not known (a loop whose
  condition depends on data). `by_name(comp)`: {instruction name: Inst} of a computation (the
  caller's memoised lookup)."""
  m = _KNOWN_TRIP.search(inst.attrs)
  if m:
    return int(m.group(1))
  cond, body = inst.called("condition"), inst.called("body")
  if len(cond) != 1 or len(body) != 1 or len(inst.operands) != 1 or caller is None:
    return None

  def root_and_param(comp):
    insts = by_name(comp).values()
    roots = [i for i in insts if i.is_root]
    params = [i.name for i in insts if i.opcode == "parameter"]
    return (roots[0], params[0]) if len(roots) == 1 and len(params) == 1 else (None, None)

  cmp, c_param = root_and_param(cond[0])
  if cmp is None or cmp.opcode != "compare" or len(cmp.operands) != 2:
    return None
  direction = cmp.attr("direction")
  lhs, rhs = (by_name(cond[0]).get(o) for o in cmp.operands)
  index, bound = (lhs, rhs) if direction == "LT" else (rhs, lhs) if direction == "GT" else (
      None, None)
  k, n = _tuple_index(index, c_param), _int_literal(bound)
  if k is None or n is None:
    return None
  out, b_param = root_and_param(body[0])
  if out is None or out.opcode != "tuple" or k >= len(out.operands):
    return None
  step = by_name(body[0]).get(out.operands[k])
  if step is None or step.opcode != "add" or len(step.operands) != 2:
    return None
  a, b = (by_name(body[0]).get(o) for o in step.operands)
  if not ((_tuple_index(a, b_param) == k and _int_literal(b) == 1)
          or (_tuple_index(b, b_param) == k and _int_literal(a) == 1)):
    return None
  init = by_name(caller).get(inst.operands[0])
  if init is None or init.opcode != "tuple" or k >= len(init.operands):
    return None
  c0 = _int_literal(by_name(caller).get(init.operands[k]))
  return None if c0 is None else max(0, n - c0)
