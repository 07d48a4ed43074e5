"""TensorFlow CostGraphDef text files (.pbtxt) <-> CompGraph: `costgraph:PATH` graph specs.

REGAL's public dataset (deepmind-research/regal) ships its graphs as CostGraphDef messages
(tensorflow/core/framework/cost_graph.proto) in protobuf TEXT format. This module reads and
writes that format WITHOUT TensorFlow or protobuf-compiled classes: the parser below is a small
hand-written text-format reader (nested messages in `{}` or `<>`, repeated fields, `[a, b]`
lists, scalars, quoted strings with escapes, `#` comments), because depending on TensorFlow (or
on generated `_pb2` modules) for one message type would be a large, version-fragile dependency
of a package that otherwise needs only JAX and numpy.

Mapping (normative; docs/regal_data.md has a worked example):
  - every `node` is one op, ordered by its `id` (ids may be sparse; proto3 omits a 0 `id`);
    TF's executor pseudo-nodes `_SOURCE` and `_SINK` are dropped with their edges (they only
    order the real sources / sinks, and a zero-cost op with edges everywhere would add a
    transfer latency to every op placed away from it);
  - `input_info { preceding_node: u preceding_port: p }` -> edge u -> v (data edge);
    `control_input: u` -> edge u -> v as well. A CompGraph has no per-edge bytes: each edge
    moves its producer's whole output (design.md section 4, rule 3), so a control edge is an
    ordinary dependency here;
  - `output_info { size }`: one op has one `out_bytes`, the SUM of the sizes of all its output
    ports (a consumer of any port is charged the node's whole output; aliasing ports
    (`alias_input_port` >= 0) are counted too, since a copy still moves across devices);
  - `compute_cost` (int64 microseconds) -> `cost` in seconds (cost = compute_cost / 1e6); where
    it is 0 or absent, `compute_time` (also microseconds) is used;
  - `persistent_memory_size` -> `param_bytes`; `temporary_memory_size` -> `temp_bytes`;
  - `name` -> `node_names`. Other fields (`device`, `memory_time`, `is_final`, `inaccurate`,
    `shape`, `dtype`, the graph-level `cost`, ...) and unknown fields are parsed and skipped.
  `op_type`, `flops`, `bytes_accessed` and `colocation` are not carried by CostGraphDef: they
  come back as 0 (-1 for colocation).

`write_costgraph` writes the same mapping back (ids 1..N after a `_SOURCE` id 0 feeding the
sources by control edges, as in REGAL's files; one output port per op; costs rounded to whole
microseconds, bytes to whole bytes), so `load_costgraph(write_costgraph(g))` equals `g` in its
edges, names, byte fields and costs at microsecond resolution.

Errors: a malformed file (bad token, unbalanced braces, a known field of the wrong kind, a
repeated singular field, a negative size), an input naming no node, duplicate ids or a cycle is
a ValueError naming the file, the line and the field or node.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Dict, List, Optional, Union

import numpy as np

from simulator import fileio
from simulator.graph import CompGraph

SPECIAL_NODES = ("_SOURCE", "_SINK")
MICROSECONDS = 1e6  # compute_cost units per second

# ------------------------------------------------------------------------------- tokenizer
_TOKEN = re.compile(r"""
    (?P<space>[ \t\r\f\v]+) | (?P<newline>\n) | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>-?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)[fFuU]?(?![\w.]))
  | (?P<ident>-?[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>[{}<>:,;\[\]/])
""", re.VERBOSE)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "a": "\a",
            "b": "\b", "f": "\f", "v": "\v", "?": "?"}


@dataclasses.dataclass(frozen=True)
class _Tok:
  kind: str  # string, number, ident, punct, eof
  text: str
  line: int


def _tokenize(text: str, path: str) -> List[_Tok]:
  out, pos, line = [], 0, 1
  while pos < len(text):
    m = _TOKEN.match(text, pos)
    if m is None:
      raise ValueError(f"{path}:{line}: unexpected character {text[pos]!r} (not protobuf "
                       f"text format)")
    kind = m.lastgroup
    if kind == "newline":
      line += 1
    elif kind not in ("space", "comment"):
      out.append(_Tok(kind, m.group(), line))
    pos = m.end()
  out.append(_Tok("eof", "", line))
  return out


def _unescape(tok: _Tok, path: str) -> str:
  """The text of a string token. Octal and hex escapes are bytes, as in TF's writer (which
  escapes each byte of a non-ASCII UTF-8 name): the string's bytes are decoded as UTF-8."""
  body, out, i = tok.text[1:-1], bytearray(), 0
  while i < len(body):
    c = body[i]
    if c != "\\":
      out += c.encode("utf-8", "surrogatepass")
      i += 1
      continue
    nxt = body[i + 1]
    if nxt in _ESCAPES:
      out += _ESCAPES[nxt].encode()
      i += 2
    elif nxt in "01234567":
      digits = re.match(r"[0-7]{1,3}", body[i + 1:]).group()
      if int(digits, 8) > 255:
        raise ValueError(f"{path}:{tok.line}: octal escape '\\{digits}' in string {tok.text} "
                         "is not a byte (above \\377)")
      out.append(int(digits, 8))
      i += 1 + len(digits)
    elif nxt in "xX" and re.match(r"[0-9a-fA-F]{1,2}", body[i + 2:]):
      digits = re.match(r"[0-9a-fA-F]{1,2}", body[i + 2:]).group()
      out.append(int(digits, 16))
      i += 2 + len(digits)
    else:
      raise ValueError(f"{path}:{tok.line}: bad escape '\\{nxt}' in string {tok.text}")
  try:
    return out.decode("utf-8")
  except UnicodeDecodeError as e:
    raise ValueError(f"{path}:{tok.line}: string {tok.text} is not UTF-8 once its escapes "
                     f"are read as bytes ({e.reason} at byte {e.start})") from None


# ---------------------------------------------------------------------------------- parser
@dataclasses.dataclass(frozen=True)
class Field:
  """One parsed field: a scalar token (`value` is a `_Tok`) or a message (a list of Fields)."""
  name: str
  value: Union[_Tok, List["Field"]]
  line: int

  @property
  def is_message(self) -> bool:
    return isinstance(self.value, list)


class _Parser:
  """Recursive-descent reader of the protobuf text format into `Field` trees (no schema)."""

  def __init__(self, text: str, path: str):
    self.depth = 0  # messages open around the current token
    self.path = path
    self.toks = _tokenize(text, path)
    self.i = 0

  def _peek(self) -> _Tok:
    return self.toks[self.i]

  def _next(self) -> _Tok:
    tok = self.toks[self.i]
    self.i += 1
    return tok

  def _fail(self, tok: _Tok, what: str):
    shown = "end of file" if tok.kind == "eof" else repr(tok.text)
    raise ValueError(f"{self.path}:{tok.line}: expected {what}, got {shown}")

  def message(self, close: Optional[str]) -> List[Field]:
    if close is not None:
      self.depth += 1
      if self.depth > MAX_DEPTH:
        raise ValueError(f"{self.path}:{self._peek().line}: messages nested deeper than "
                         f"{MAX_DEPTH} (protobuf's own limit)")
    fields = []
    while True:
      tok = self._peek()
      if close is None and tok.kind == "eof":
        return fields
      if close is not None and tok.kind == "punct" and tok.text == close:
        self._next()
        self.depth -= 1
        return fields
      if tok.kind == "eof":
        self._fail(tok, f"a field name or '{close}' (unclosed message)")
      name = self._field_name()
      fields.extend(self._field_value(name, tok.line))
      sep = self._peek()
      if sep.kind == "punct" and sep.text in ",;":
        self._next()

  def _field_name(self) -> str:
    tok = self._next()
    if tok.kind == "ident" and not tok.text.startswith("-"):
      return tok.text
    if tok.kind == "punct" and tok.text == "[":  # extension or Any type URL: kept as a name
      parts = []
      while not (self._peek().kind == "punct" and self._peek().text == "]"):
        part = self._next()
        if part.kind == "eof":
          self._fail(part, "']' closing an extension name")
        parts.append(part.text)
      self._next()
      return "[" + "".join(parts) + "]"
    self._fail(tok, "a field name")

  def _field_value(self, name: str, line: int) -> List[Field]:
    tok = self._next()
    colon = tok.kind == "punct" and tok.text == ":"
    if colon:
      tok = self._next()
    if tok.kind == "punct" and tok.text in "{<":
      return [Field(name, self.message("}" if tok.text == "{" else ">"), line)]
    if not colon:
      self._fail(tok, f"':' or '{{' after field name {name!r}")
    if tok.kind == "punct" and tok.text == "[":  # list of values of a repeated field
      out = []
      if self._peek().kind == "punct" and self._peek().text == "]":
        self._next()
        return out
      while True:
        item = self._next()
        if item.kind == "punct" and item.text in "{<":
          out.append(Field(name, self.message("}" if item.text == "{" else ">"), item.line))
        else:
          out.append(Field(name, self._scalar(item, name), item.line))
        end = self._next()
        if end.kind == "punct" and end.text == "]":
          return out
        if not (end.kind == "punct" and end.text == ","):
          self._fail(end, f"',' or ']' in the list of field {name!r}")
    return [Field(name, self._scalar(tok, name), line)]

  def _scalar(self, tok: _Tok, name: str) -> _Tok:
    if tok.kind == "string":  # adjacent strings concatenate
      text = _unescape(tok, self.path)
      while self._peek().kind == "string":
        text += _unescape(self._next(), self.path)
      return _Tok("string", text, tok.line)
    if tok.kind in ("number", "ident"):
      return tok
    self._fail(tok, f"a value for field {name!r}")


def parse_text_format(text: str, path: str = "<string>") -> List[Field]:
  """The top-level fields of a protobuf text-format message (no schema; see `Field`)."""
  return _Parser(text, path).message(None)


# -------------------------------------------------------------------- schema of CostGraphDef
# Field name -> kind, per message. Kinds: "int", "str", "bool", "msg:<message>", "enum";
# a trailing "*" marks a repeated field. Fields not listed are skipped.
_SCHEMA = {
    "CostGraphDef": {"node": "msg:Node*"},
    "Node": {"name": "str", "device": "str", "id": "int", "input_info": "msg:InputInfo*",
             "output_info": "msg:OutputInfo*", "temporary_memory_size": "int",
             "persistent_memory_size": "int", "host_temp_memory_size": "int",
             "device_temp_memory_size": "int", "device_persistent_memory_size": "int",
             "compute_cost": "int", "compute_time": "int", "memory_time": "int",
             "is_final": "bool", "control_input": "int*", "inaccurate": "bool"},
    "InputInfo": {"preceding_node": "int", "preceding_port": "int"},
    "OutputInfo": {"size": "int", "alias_input_port": "int", "shape": "msg:TensorShapeProto",
                   "dtype": "enum"},
    "TensorShapeProto": {},
}
_INT = re.compile(r"^-?(0[xX][0-9a-fA-F]+|\d+)[uU]?$")
INT64 = (-2**63, 2**63 - 1)  # the range of CostGraphDef's int fields (int64 / int32 ids)
MAX_DEPTH = 100  # nesting of messages, as protobuf's parser allows


def _convert(field: Field, kind: str, where: str, path: str):
  """The Python value of a scalar field of schema kind `kind` (int, str, bool, enum)."""
  tok = field.value
  bad = lambda what: ValueError(f"{path}:{field.line}: field '{where}' expects {what}, got "
                                f"{tok.text!r}")
  if kind == "int":
    if tok.kind != "number" or not _INT.match(tok.text):
      raise bad("an integer")
    try:  # a leading 0 is octal in the text format, as in C
      text = tok.text.rstrip("uU")
      value = int(text, 8) if re.match(r"^-?0\d", text) else int(text, 0)
    except ValueError:
      raise bad("an integer") from None
    if not INT64[0] <= value <= INT64[1]:
      raise bad("an int64 (|value| < 2**63)")
    return value
  if kind == "str":
    if tok.kind != "string":
      raise bad("a quoted string")
    return tok.text
  if kind == "bool":
    if tok.text in ("true", "True", "t", "1"):
      return True
    if tok.text in ("false", "False", "f", "0"):
      return False
    raise bad("true or false")
  return tok.text  # enum: name or number, unused


def _read(fields: List[Field], message: str, where: str, path: str) -> Dict[str, object]:
  """Known fields of one message -> {name: value or list}, schema-checked; unknowns skipped."""
  schema, out = _SCHEMA[message], {}
  for f in fields:
    kind = schema.get(f.name)
    if kind is None:
      continue
    repeated, kind = kind.endswith("*"), kind.rstrip("*")
    here = f"{where}.{f.name}"
    if kind.startswith("msg:"):
      if not f.is_message:
        raise ValueError(f"{path}:{f.line}: field '{here}' is a message; expected "
                         f"'{f.name} {{ ... }}', got the value {f.value.text!r}")
      value = _read(f.value, kind[4:], here, path)
      value["_line"] = f.line
    else:
      if f.is_message:
        raise ValueError(f"{path}:{f.line}: field '{here}' is a scalar, got a message")
      value = _convert(f, kind, here, path)
    if repeated:
      out.setdefault(f.name, []).append(value)
    elif f.name in out:
      raise ValueError(f"{path}:{f.line}: field '{here}' is not repeated but is given twice")
    else:
      out[f.name] = value
  return out


def _non_negative(value: int, line: int, where: str, path: str) -> int:
  if value < 0:
    raise ValueError(f"{path}:{line}: field '{where}' is negative ({value})")
  return value


def costgraph_from_text(text: str, path: str = "<string>",
                        name: Optional[str] = None) -> CompGraph:
  """The CompGraph of CostGraphDef text `text` (module docstring: mapping and errors); `path`
  only names the source in messages."""
  top = _read(parse_text_format(text, path), "CostGraphDef", "CostGraphDef", path)
  nodes = top.get("node", [])
  by_id, line_of = {}, {}
  for node in nodes:
    nid = node.get("id", 0)
    label = node.get("name", f"id {nid}")
    if nid in by_id:
      raise ValueError(f"{path}:{node['_line']}: node {label!r} has id {nid}, already used by "
                       f"node {by_id[nid].get('name', '')!r} (line {line_of[nid]})")
    by_id[nid], line_of[nid] = node, node["_line"]
  special = {nid for nid, node in by_id.items() if node.get("name", "") in SPECIAL_NODES}
  ids = sorted(nid for nid in by_id if nid not in special)
  if not ids:
    raise ValueError(f"{path}: no nodes (a CostGraphDef needs at least one 'node {{ ... }}' "
                     f"other than {'/'.join(SPECIAL_NODES)})")
  index = {nid: k for k, nid in enumerate(ids)}
  n = len(ids)
  cost, out_bytes, param, temp = (np.zeros(n) for _ in range(4))
  names, senders, receivers = [], [], []
  for k, nid in enumerate(ids):
    node, line = by_id[nid], line_of[nid]
    label = node.get("name", f"id {nid}")
    names.append(node.get("name", f"node_{nid}"))
    micros = {key: _non_negative(node.get(key, 0), line, f"node {label!r}: {key}", path)
              for key in ("compute_cost", "compute_time")}
    cost[k] = (micros["compute_cost"] or micros["compute_time"]) / MICROSECONDS
    for key, arr in (("persistent_memory_size", param), ("temporary_memory_size", temp)):
      arr[k] = _non_negative(node.get(key, 0), line, f"node {label!r}: {key}", path)
    for out in node.get("output_info", []):
      out_bytes[k] += _non_negative(out.get("size", 0), out["_line"],
                                    f"node {label!r}: output_info.size", path)
    preds = [(inp.get("preceding_node", 0), inp["_line"], "input_info.preceding_node")
             for inp in node.get("input_info", [])]
    preds += [(u, line, "control_input") for u in node.get("control_input", [])]
    for u, where, field in preds:
      if u in special:
        continue
      if u not in index:
        raise ValueError(f"{path}:{where}: node {label!r} (id {nid}): field '{field}' names "
                         f"node id {u}, which is not a node of the file (dangling input)")
      senders.append(index[u])
      receivers.append(k)
  try:
    return CompGraph(cost=cost, senders=np.asarray(senders, np.int64),
                     receivers=np.asarray(receivers, np.int64), out_bytes=out_bytes,
                     param_bytes=param, temp_bytes=temp, node_names=names,
                     name=name or os.path.splitext(os.path.basename(path))[0])
  except ValueError as e:  # a cycle or self loop: name the file and the node's line
    text = str(e)
    graph_name = re.match(r"CompGraph '.*?': ", text)  # the name may itself say "node 7"
    m = re.search(r"node (\d+)", text[graph_name.end() if graph_name else 0:])
    k = int(m.group(1)) if m else -1
    where = f"{path}:{line_of[ids[k]]}" if 0 <= k < len(ids) else path
    raise ValueError(f"{where}: {e}") from None


def load_costgraph(path: str, name: Optional[str] = None) -> CompGraph:
  """The CompGraph of a CostGraphDef text file (.pbtxt); `name` defaults to the file's stem.

  Raises:
    ValueError: a missing or unreadable file, or a malformed one (the message names the file,
      line and field or node; see the module docstring).
  """
  if not os.path.isfile(path):
    raise ValueError(f"cannot read CostGraphDef file {path!r}: " + (
        "it is a folder" if os.path.isdir(path) else "it does not exist"))
  try:
    with open(path, encoding="utf-8") as fh:
      text = fh.read()
  except (OSError, UnicodeDecodeError) as e:
    raise ValueError(f"cannot read CostGraphDef file {path!r}: {e}") from None
  return costgraph_from_text(text, path, name)


# ---------------------------------------------------------------------------------- writer
def _quote(text: str) -> str:
  out = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
  return '"' + out.replace("\r", "\\r").replace("\t", "\\t") + '"'


def costgraph_text(graph: CompGraph, *, source_node: bool = True) -> str:
  """CostGraphDef text of `graph` (module docstring); see `write_costgraph`."""
  for field, values in (("out_bytes", graph.out_bytes), ("temp_bytes", graph.temp_bytes),
                        ("param_bytes", graph.param_bytes),
                        ("cost (microseconds)", graph.cost * MICROSECONDS)):
    if values.size and np.max(values) >= INT64[1]:
      raise ValueError(f"graph {graph.name!r}: {field} of node {int(np.argmax(values))} "
                       f"({np.max(values):.3g}) does not fit CostGraphDef's int64 field")
  names = graph.node_names or tuple(f"node_{i}" for i in range(graph.num_nodes))
  bad = [s for s in names if s in SPECIAL_NODES]
  if bad:
    raise ValueError(f"graph {graph.name!r}: node name {bad[0]!r} is reserved for TF's "
                     f"executor pseudo-node and would be dropped on reading; rename the node")
  for i, s in enumerate(names):
    try:
      s.encode("utf-8")
    except UnicodeEncodeError as err:  # a lone surrogate: no UTF-8 file can hold it
      raise ValueError(f"graph {graph.name!r}: the name of node {i} ({s!r}) is not valid "
                       f"Unicode ({err.reason} at character {err.start}); a CostGraphDef "
                       "file is UTF-8, so rename the node") from None
  ptr, preds = graph.predecessor_csr()
  ptr, preds = ptr.tolist(), preds.tolist()
  offset = 1 if source_node else 0
  lines = [f"# CostGraphDef (tensorflow/core/framework/cost_graph.proto) text of graph "
           f"{graph.name!r}: {graph.num_nodes} ops, {graph.num_edges} edges.",
           "# compute_cost in microseconds, sizes in bytes; written by go-jax "
           "(simulator/sources/costgraph.py)."]
  if source_node:
    lines += ["node {", '  name: "_SOURCE"', "}"]
  for i in range(graph.num_nodes):
    lines += ["node {", f"  name: {_quote(names[i])}", f"  id: {i + offset}"]
    for u in preds[ptr[i]:ptr[i + 1]]:
      lines += ["  input_info {", f"    preceding_node: {u + offset}",
                "    preceding_port: 0", "  }"]
    lines += ["  output_info {", f"    size: {int(round(graph.out_bytes[i]))}",
              "    alias_input_port: -1", "  }"]
    if int(round(graph.temp_bytes[i])):
      lines.append(f"  temporary_memory_size: {int(round(graph.temp_bytes[i]))}")
    if int(round(graph.param_bytes[i])):
      lines.append(f"  persistent_memory_size: {int(round(graph.param_bytes[i]))}")
    if source_node and ptr[i] == ptr[i + 1]:
      lines.append("  control_input: 0")
    lines += [f"  compute_cost: {int(round(graph.cost[i] * MICROSECONDS))}", "}"]
  return "\n".join(lines) + "\n"


def write_costgraph(graph: CompGraph, path: str, *, source_node: bool = True) -> str:
  """Writes `graph` as a CostGraphDef text file, atomically (creating the folder); returns path.

  `source_node` adds REGAL's `_SOURCE` (id 0, control edges to the sources; ops get ids 1..N),
  else ops get ids 0..N-1. Costs are rounded to whole microseconds and bytes to whole bytes
  (int64 fields); op_type, flops, bytes_accessed and colocation are not written (CostGraphDef
  has no such fields). Raises ValueError for an op named `_SOURCE` or `_SINK` and for a name
  that is not valid Unicode (a lone surrogate).
  """
  text = costgraph_text(graph, source_node=source_node)
  with fileio.atomic_open(path, "w", make_dirs=True) as fh:
    fh.write(text)
  return path
