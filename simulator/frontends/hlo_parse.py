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
from typing import Dict, List, Optional, Tuple


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
               "real", "imag", "complex", "popcnt", "clz", "stochastic-convert")

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
    "optimization-barrier": "copy", "after-all": "constant", "add-dependency": "copy",
    "partition-id": "constant", "replica-id": "constant", "async-start": "fusion",
    "async-update": "fusion", "async-done": "fusion",
    "tanh": "activation", "logistic": "activation",
}
# HLO opcode -> generic vocabulary name (simulator.ops.OP_TYPES).
OPCODE_TYPES: Dict[str, str] = {**{k: "elementwise" for k in ELEMENTWISE + TRANSCENDENTAL},
                                **_GENERIC}

LEAVES = ("parameter", "constant")            # become param_bytes of their readers
FORWARDING = ("tuple", "get-tuple-element")   # make no nodes
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
    leaves = [(dt, tuple(int(x.lstrip("<=")) for x in dims.split(",") if x.strip()))
              for dt, dims in _LEAF_SHAPE.findall(_COMMENT.sub("", txt))]
    hit = (leaves, sum(DTYPE_BYTES.get(dt, 4) * math.prod(d) for dt, d in leaves),
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
    return Inst(m.group(2), leaves, opcode, operands, line[m.end():], bool(m.group(1)),
                nbytes, elements)
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
  for line in text.split("\n"):
    if cur is not None:
      if line.strip() == "}":
        cur = None
        continue
      inst = _parse_inst(line)
      if inst is not None:
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
      comps[cur] = []
      entry = cur if is_entry else entry
    else:
      section = None
  if entry is None:
    raise ValueError("HLO text has no ENTRY computation")
  return HloModule(comps, entry, scheduled, _resolve_frames(tables))


def parse_hlo_module(text: str) -> Tuple[Dict[str, List[Inst]], str]:
  """{computation name: instructions in order}, and the ENTRY computation's name."""
  mod = parse_hlo(text)
  return mod.comps, mod.entry
