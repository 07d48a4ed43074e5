"""Per-instruction flops, transcendentals, bytes_accessed and temp_bytes of parsed HLO.

Why: a roofline cost model needs each op's arithmetic and memory traffic, and the memory
simulation each op's scratch; the counts follow XLA's own `HloCostAnalysis` where it counts
something, so they can be checked against `cost_analysis()` (tests/test_frontends.py).

Rules (documented choices; called computations are costed recursively and memoised):
* flops (XLA's `HloCostAnalysis` rules unless said otherwise):
    - dot: 2 * output elements * prod(contracting dims).
    - convolution: 2 * (output elements / output spatial positions) * input features per
      group * the (output position, kernel tap) pairs that hit the input, per spatial dim:
      taps falling in the padding or in lhs-dilation holes are skipped, exactly as XLA does.
    - dot and convolution of complex operands (c64, c128): 4 times that, real flops (a complex
      multiply-add is 8 real flops; XLA counts 2, as for a real one). The cost model costs
      them at the f32 (c64) or f64 (c128) peak (`simulator.costmodel.opclass.PEAK_DTYPE`).
    - elementwise: 1 per output element, whatever the element type (complex too, as XLA:
      they are memory bound, costed by their bytes); transcendentals (exp, log, tanh, logistic, rsqrt,
      sqrt, power, sine, ...) also 1 per element here AND recorded separately in
      `HloGraph.transcendentals` (XLA reports them only under "transcendentals").
    - reduce: input elements * flops of `to_apply` (XLA: (input - output) elements * ...);
      reduce-window: output elements * window size * `to_apply` flops (XLA: window - 1);
      map: elements * `to_apply` flops; sort: n * ceil(log2 n) for n elements (as XLA).
    - scatter: update elements * flops of its update computation (0 for a plain set), as XLA.
    - select-and-scatter: source elements * ((window - 1) * select flops + scatter flops).
    - all-reduce / all-reduce-start: output elements * `to_apply` flops (as XLA, independent
      of the number of participants); reduce-scatter: input elements * `to_apply` flops.
    - 0: gather, dynamic-slice, dynamic-update-slice, all-gather, all-to-all,
      collective-permute (pure data movement; their bytes are counted), custom-call (opaque).
* bytes_accessed = operand bytes + output bytes, except ops that touch only a slice of a big
  operand, which count what they touch, as XLA does: gather / dynamic-slice = 2 * output +
  index bytes; dynamic-update-slice = 2 * update + index bytes; scatter = 3 * updates +
  index bytes (XLA counts only the first index operand of the dynamic ones).
* temp_bytes (scratch live only while the op runs):
    - custom-call whose result is a tuple ending in a 1-D u8/s8 array: that array is a
      library workspace (cuDNN / cuBLAS on GPU); its bytes are temp_bytes, not out_bytes.
    - call / while / conditional: the peak bytes of the called computation's intermediate
      values when its instructions run in their printed order (a value lives from its
      definition to its last use, through tuples; parameters, constants and the values the
      root returns are not counted; nested calls add their own temp while they run); while:
      max(body, condition); conditional: max over branches.
    - everything else 0: a fusion does not materialise its inner values, and a sort's or a
      library call's internal scratch is not visible in HLO.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Dict, List, Tuple

import numpy as np

from simulator.frontends.hlo_parse import (CALLED_ATTRS, COMPLEX_MAC_FACTOR, DTYPE_BYTES,
                                           ELEMENTWISE, FORWARDING, LEAVES, OPCODE_TYPES, TRANSCENDENTAL,
                                           WORKSPACE_DTYPES, HloModule, Inst,
                                           while_trip_count)


# ------------------------------------------------------------------ flop rules
def _operand_shape(costs, comp, inst, k) -> Tuple[int, ...]:
  leaves = costs.leaves(comp, inst.operands[k])
  return leaves[0][1] if leaves else ()


def _mac_factor(costs, comp, inst) -> int:
  """Real flops per multiply-add of a dot / conv over a real one's 2: 4 for complex operands."""
  leaves = costs.leaves(comp, inst.operands[0])
  return COMPLEX_MAC_FACTOR.get(leaves[0][0], 1) if leaves else 1


def _dot(inst, costs, comp):
  lhs = _operand_shape(costs, comp, inst, 0)
  k = math.prod(lhs[d] for d in inst.dims_attr("lhs_contracting_dims") if d < len(lhs))
  return 2 * inst.elements * k * _mac_factor(costs, comp, inst), 0


@functools.lru_cache(maxsize=4096)
def _valid_taps(size: int, window: int, out: int, stride: int, pad_lo: int, lhs_dil: int,
                rhs_dil: int) -> int:
  """(output position, kernel tap) pairs of one spatial dim that hit a real input element."""
  pos = (np.arange(out)[:, None] * stride + np.arange(window)[None, :] * rhs_dil - pad_lo)
  ok = (pos >= 0) & (pos <= (size - 1) * lhs_dil) & (pos % lhs_dil == 0)
  return int(ok.sum())


def _window_field(window: str, key: str, count: int, default: int) -> List[int]:
  m = re.search(r"(?:^|\s|\{)" + key + r"=([\d_x\-]+)", window)
  if not m:
    return [default] * count
  return [int(t.split("_")[0]) for t in m.group(1).split("x")]


def _conv(inst, costs, comp):
  lhs, kernel = (_operand_shape(costs, comp, inst, k) for k in (0, 1))
  labels = inst.attr("dim_labels") or ""
  if "_" not in labels or "->" not in labels:
    raise ValueError(f"convolution '{inst.name}' has no dim_labels attribute")
  lhs_l, rest = labels.split("_", 1)
  ker_l, out_l = rest.split("->")
  out = inst.shape[0][1]
  spatial = [c for c in out_l if c.isdigit()]
  window = inst.attr("window") or ""
  stride = _window_field(window, "stride", len(spatial), 1)
  pads = _window_field(window, "pad", len(spatial), 0)
  lhs_dil = _window_field(window, "lhs_dilate", len(spatial), 1)
  rhs_dil = _window_field(window, "rhs_dilate", len(spatial), 1)
  taps, positions = 1, 1
  for j, d in enumerate(sorted(spatial)):
    o = out[out_l.index(d)]
    positions *= o
    taps *= _valid_taps(lhs[lhs_l.index(d)], kernel[ker_l.index(d)], o, stride[j], pads[j],
                        lhs_dil[j], rhs_dil[j])
  features = kernel[ker_l.index("i")] if "i" in ker_l else 1
  return (2 * (inst.elements // positions) * features * taps * _mac_factor(costs, comp, inst)
          if positions else 0), 0


def _applied(inst, costs, attr="to_apply") -> Tuple[float, float]:
  """(flops, transcendentals) of one application of the computation named by `attr`."""
  f = t = 0.0
  for c in inst.called(attr):
    sub = costs.computation(c)
    f, t = f + sub[0], t + sub[1]
  return f, t


def _per_element(count_fn, attr="to_apply"):
  def rule(inst, costs, comp):
    n = count_fn(inst, costs, comp)
    f, t = _applied(inst, costs, attr)
    return n * f, n * t
  return rule


def _elements_of(costs, comp, name) -> int:
  return sum(math.prod(d) for _, d in costs.leaves(comp, name))


def _window_size(inst) -> int:
  w = re.search(r"size=([\dx]+)", inst.attr("window") or "")
  return math.prod(int(t) for t in w.group(1).split("x")) if w else 1


def _select_and_scatter(inst, costs, comp):
  source = _elements_of(costs, comp, inst.operands[1])
  sel, scat = _applied(inst, costs, "select"), _applied(inst, costs, "scatter")
  w = _window_size(inst)
  return (source * ((w - 1) * sel[0] + scat[0]), source * ((w - 1) * sel[1] + scat[1]))


def _sort(inst, costs, comp):
  n = _elements_of(costs, comp, inst.operands[0])
  return n * max(math.ceil(math.log2(n)), 1) if n > 1 else 0, 0


def _updates(inst) -> List[str]:
  """A scatter's update operands: (N inputs, indices, N updates)."""
  return inst.operands[len(inst.operands) // 2 + 1:]


FLOP_RULES = {
    "dot": _dot, "convolution": _conv, "sort": _sort,
    "reduce": _per_element(lambda i, c, comp: _elements_of(c, comp, i.operands[0])),
    "reduce-window": _per_element(lambda i, c, comp: math.prod(i.shape[0][1]) * _window_size(i)),
    "map": _per_element(lambda i, c, comp: i.elements),
    "scatter": _per_element(lambda i, c, comp: _elements_of(c, comp, _updates(i)[0])),
    "select-and-scatter": _select_and_scatter,
    "all-reduce": _per_element(lambda i, c, comp: i.elements),
    "all-reduce-start": _per_element(lambda i, c, comp: i.elements),
    "reduce-scatter": _per_element(lambda i, c, comp: _elements_of(c, comp, i.operands[0])),
    **{k: (lambda i, c, comp: (i.elements, 0)) for k in ELEMENTWISE},
    **{k: (lambda i, c, comp: (i.elements, i.elements)) for k in TRANSCENDENTAL},
}


# ------------------------------------------------------------------ byte rules
def _boundary(inst, costs, comp) -> float:
  d = costs.by_name(comp)
  return float(sum(d[o].nbytes for o in inst.operands if o in d) + inst.nbytes)


def _sliced(touched, index_operands, times: int = 2):
  """Bytes of an op that touches only a slice: `times` * slice bytes + index operand bytes."""
  def rule(inst, costs, comp):
    return float(times * touched(inst, costs, comp)
                 + sum(costs.nbytes(comp, o) for o in index_operands(inst)))
  return rule


_output_slice = _sliced(lambda i, c, comp: i.nbytes, lambda i: i.operands[1:])
BYTES_RULES = {
    "gather": _output_slice, "dynamic-slice": _output_slice,
    "dynamic-update-slice": _sliced(lambda i, c, comp: c.nbytes(comp, i.operands[1]),
                                    lambda i: i.operands[2:]),
    "scatter": _sliced(lambda i, c, comp: sum(c.nbytes(comp, o) for o in _updates(i)),
                       lambda i: i.operands[len(i.operands) // 2:len(i.operands) // 2 + 1], 3),
}


def workspace_bytes(inst: Inst) -> int:
  """Bytes of a custom-call's library workspace: a trailing 1-D u8/s8 leaf of a tuple result."""
  if inst.opcode != "custom-call" or len(inst.shape) < 2:
    return 0
  dt, dims = inst.shape[-1]
  return math.prod(dims) * DTYPE_BYTES[dt] if dt in WORKSPACE_DTYPES and len(dims) == 1 else 0


def _trip_count(costs, inst, comp) -> int:
  """`hlo_parse.while_trip_count`; 1 where it is not known (as XLA's cost_analysis), and the
  loop is recorded in `costs.unknown_trips` so that the front end warns about it."""
  n = while_trip_count(inst, comp, costs.by_name)
  if n is None:
    costs.unknown_trips.add(inst.name)
    return 1
  return n


# ------------------------------------------------------------------ costs
# A cost is (flops, transcendentals, bytes_accessed, temp_bytes).
_ZERO = (0.0, 0.0, 0.0, 0.0)


def _sum_called(costs, inst, attrs, times: int = 1):
  f = t = b = tmp = 0.0
  for a in attrs:
    for c in inst.called(a):
      sub = costs.computation(c)
      f, t, b, tmp = f + sub[0], t + sub[1], b + sub[2], max(tmp, sub[3])
  return (f * times, t * times, b * times, tmp)


def _fusion_cost(costs, inst, comp):
  f, t, _, _ = _sum_called(costs, inst, ("calls",))
  return (f, t, _boundary(inst, costs, comp), 0.0)


def _conditional_cost(costs, inst, comp):
  subs = [costs.computation(c) for a in CALLED_ATTRS["conditional"] for c in inst.called(a)]
  return tuple(max(s[k] for s in subs) for k in range(4)) if subs else _ZERO


CALL_RULES = {
    "fusion": _fusion_cost,
    "call": lambda costs, inst, comp: _sum_called(costs, inst, ("to_apply",)),
    "async-start": lambda costs, inst, comp: _sum_called(costs, inst, ("calls",)),
    "while": lambda costs, inst, comp: _sum_called(costs, inst, ("body", "condition"),
                                                   _trip_count(costs, inst, comp)),
    "conditional": _conditional_cost,
}


def _peak_live(insts: List[Inst], temps: List[float]) -> float:
  """Peak bytes of a computation's intermediate values when its instructions run in order."""
  base, last = {}, {}
  for k, inst in enumerate(insts):
    if inst.opcode in FORWARDING:  # aliases: keep what they bundle alive
      base[inst.name] = tuple(b for o in inst.operands for b in base.get(o, ()))
    else:
      base[inst.name] = () if inst.opcode in LEAVES else (inst.name,)
    for o in inst.operands:
      for b in base.get(o, ()):
        last[b] = k
  root = next((i for i in reversed(insts) if i.is_root), insts[-1] if insts else None)
  returned = set(base.get(root.name, ())) if root is not None else set()
  frees: Dict[int, List[str]] = {}
  for b, k in last.items():
    frees.setdefault(k, []).append(b)
  live = peak = 0.0
  size: Dict[str, float] = {}
  for k, inst in enumerate(insts):
    if base[inst.name] == (inst.name,) and inst.name not in returned:
      size[inst.name] = float(inst.nbytes - workspace_bytes(inst))
      live += size[inst.name]
    peak = max(peak, live + temps[k])
    for b in frees.get(k, ()):
      live -= size.get(b, 0.0)
    if inst.name in size and inst.name not in last:  # never read: dies at once
      live -= size[inst.name]
  return peak


class Costs:
  """Per-instruction costs, recursing into called computations (memoised per computation)."""

  def __init__(self, mod: HloModule):
    self.comps, self.memo, self.unknown, self._by_name = mod.comps, {}, set(), {}
    self.unknown_trips = set()  # while loops whose trip count is not known (counted once)

  def by_name(self, comp: str) -> Dict[str, Inst]:
    d = self._by_name.get(comp)
    if d is None:
      d = self._by_name[comp] = {i.name: i for i in self.comps.get(comp, [])}
    return d

  def leaves(self, comp: str, name: str):
    i = self.by_name(comp).get(name)
    return i.shape if i is not None else []

  def nbytes(self, comp: str, name: str) -> int:
    i = self.by_name(comp).get(name)
    return i.nbytes if i is not None else 0

  def computation(self, comp: str):
    if comp not in self.memo:
      self.memo[comp] = _ZERO  # guards against (invalid) recursion
      insts = self.comps.get(comp, [])
      f = t = b = 0.0
      temps = []
      for inst in insts:
        c = (_ZERO if inst.opcode in LEAVES or inst.opcode in FORWARDING
             else self.inst(inst, comp))
        f, t, b = f + c[0], t + c[1], b + c[2]
        temps.append(c[3])
      self.memo[comp] = (f, t, b, _peak_live(insts, temps))
    return self.memo[comp]

  def inst(self, inst: Inst, comp: str):
    """(flops, transcendentals, bytes_accessed, temp_bytes) of one instruction of `comp`."""
    try:
      return self._inst(inst, comp)
    except (IndexError, KeyError, ZeroDivisionError) as e:  # operands or attributes missing
      raise ValueError(f"HLO instruction '{inst.name}' ({inst.opcode}, computation '{comp}'): "
                       f"malformed operands or attributes for its cost rule "
                       f"({type(e).__name__}: {e})") from None

  def _inst(self, inst: Inst, comp: str):
    op = inst.opcode
    call = CALL_RULES.get(op)
    if call is not None:
      return call(self, inst, comp)
    if op not in OPCODE_TYPES and op not in LEAVES and op not in FORWARDING:
      self.unknown.add(op)
    rule = FLOP_RULES.get(op)
    f, t = rule(inst, self, comp) if rule else (0, 0)
    return (float(f), float(t), BYTES_RULES.get(op, _boundary)(inst, self, comp),
            float(workspace_bytes(inst)))
