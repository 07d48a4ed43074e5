"""JAX -> XLA HLO text -> CompGraph (docs/design.md section 6, "simulator/frontends").

Why: placement methods should be scored on real programs, both as XLA first sees them ("pre":
`jax.jit(fn).lower(*args).as_text(dialect="hlo", debug_info=True)`) and after XLA's passes
("post": `.compile().as_text()`, where XLA's fusion groups are single `fusion` instructions and
the ENTRY computation is printed in XLA's schedule), so XLA's own grouping and order can be read
and compared as baselines (`simulator.frontends.xla`).

What: the HLO text is parsed (`hlo_parse`: linear time, no XLA bindings) and the ENTRY
computation becomes one CompGraph node per compute instruction, with an edge from each operand's
producer. `HloGraph` keeps per-node metadata aligned with the nodes: instruction name, opcode,
JAX `op_name`, source location (the stack frame, resolved), fusion kind, the instructions inside
each fusion / call / while / conditional, and each node's position in the ENTRY sequence.

Conventions (all documented choices):
  * `parameter` / `constant` are not nodes. Their bytes become `param_bytes` of the nodes that
    read them, split evenly among the distinct reader nodes; a parameter or constant that no
    node reads (e.g. one returned as is) contributes nothing. Their edges are dropped.
  * `tuple` / `get-tuple-element` make no nodes and count no bytes: a tuple is a bundle of its
    operands' sources, and a get-tuple-element of a tuple forwards element `index`; of a node
    (a while, say) it forwards the edge from that node. The ROOT tuple is not a node. An
    optimization barrier (`opt-barrier`, from jax.checkpoint) forwards its operand the same way:
    it only orders XLA's passes and runs no kernel.
  * `fusion`, `call`, `while`, `conditional`, `async-start` are one node each. flops = the sum
    over the called computation's instructions (recursively). A fusion's bytes_accessed is its
    boundary (operand + output bytes), since a fusion does not materialise its inner values; a
    call's / while's / conditional's bytes_accessed is the sum over the called instructions. A
    while counts body + condition times its trip count (`hlo_parse.while_trip_count`): XLA's
    `known_trip_count` from backend_config (post stage), else the counted loop that JAX writes
    for scan / fori_loop / map (pre stage: `i < N` with `i` from a constant, stepped by 1);
    a loop whose count is neither (a while_loop on data) counts once, as XLA's cost_analysis
    does, and is named in a warning. A conditional takes the max over its branches (one branch
    runs).
  * flops, bytes_accessed and temp_bytes: the rules of `simulator.frontends.hlo_costs` (XLA's
    HloCostAnalysis where it counts, with documented differences). out_bytes from the result
    shape (tuples: sum of leaves; a custom-call's u8/s8 workspace excluded).
  * `cost` is 0 everywhere: a cost model (`simulator.costmodel`, a roofline) fills it before
    simulation. The front end never imports the cost model (the cost model reads the front
    end's HloGraph); `simulator.from_jax(..., device_spec=...)` composes the two.
  * Node names are the HLO instruction name, plus " [op_name]" from JAX's metadata when present.
  * Opcodes missing from `OPCODE_TYPES` map to "unknown" and are listed in one warning.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Optional, Tuple

import numpy as np

from simulator import ops
from simulator.frontends.hlo_costs import Costs, workspace_bytes
from simulator.frontends.hlo_parse import (BARRIERS, CALLED_ATTRS, DTYPE_BYTES, ELEMENTWISE,
                                           FORWARDING, LEAVES, OPCODE_TYPES, TRANSCENDENTAL,
                                           HloModule, Inst, parse_hlo, parse_hlo_module)
from simulator.graph import CompGraph

__all__ = ["CALLED_ATTRS", "DTYPE_BYTES", "ELEMENTWISE", "FORWARDING", "LEAVES", "OPCODE_TYPES",
           "TRANSCENDENTAL", "HloGraph", "HloModule", "Inst", "Member", "from_jax",
           "from_jax_full", "hlo_to_graph", "lower_hlo_text", "module_graph", "parse_hlo",
           "parse_hlo_module"]


# ------------------------------------------------------------------ metadata
Member = Tuple[str, str, str, str]  # (opcode, instruction name, op_name, source)


class _Members:
  """The instructions inside the computations an instruction runs, recursively (memoised)."""

  def __init__(self, mod: HloModule):
    self.mod, self.memo = mod, {}

  def key(self, inst: Inst) -> Member:
    return (inst.opcode, inst.name, inst.op_name() or "",
            self.mod.frames.get(inst.stack_frame_id(), ""))

  def computation(self, comp: str) -> Tuple[Member, ...]:
    if comp not in self.memo:
      self.memo[comp] = ()
      out = []
      for inst in self.mod.comps.get(comp, []):
        if inst.opcode not in LEAVES and inst.opcode not in FORWARDING:
          key = self.key(inst)
          out.append(key)
          out.extend(self.of_node(inst, key[2], key[3]))  # a nested jit inside, at any depth
      self.memo[comp] = tuple(out)
    return self.memo[comp]

  def of(self, inst: Inst) -> Tuple[Member, ...]:
    attrs = CALLED_ATTRS.get(inst.opcode, ())
    return tuple(m for a in attrs for c in inst.called(a) for m in self.computation(c))

  def of_node(self, inst: Inst, op_name: str, source: str) -> Tuple[Member, ...]:
    """`of`, with op_names relative to a nested jit (no 'jit(f)/' root) made absolute by the
    caller's op_name, their source chains (relative too) continued by the caller's, as XLA's
    inliner writes both after its passes, and missing sources filled with the caller's."""
    inner = self.of(inst) if inst.opcode in CALLED_ATTRS else ()
    if not inner or not op_name:
      return inner
    top = op_name.split("/", 1)[0] + "/"
    out = []
    for o, n, p, s in inner:
      if p and not p.startswith(top):  # inside a nested jit: relative name and frames
        p, s = f"{op_name}/{p}", (f"{s} < {source}" if s and source else s)
      out.append((o, n, p, s or source))
    return tuple(out)


# ------------------------------------------------------------------ graph building
@dataclasses.dataclass(frozen=True)
class HloGraph:
  """A CompGraph built from HLO, with per-node metadata aligned with the graph's nodes."""
  graph: CompGraph
  transcendentals: np.ndarray  # (N,) transcendental element ops per node (also in flops)
  hlo_text: str
  unknown_opcodes: Tuple[str, ...]
  inst_names: Tuple[str, ...] = ()    # (N,) HLO instruction name
  opcodes: Tuple[str, ...] = ()       # (N,) HLO opcode
  op_names: Tuple[str, ...] = ()      # (N,) JAX op_name metadata ("" where absent)
  sources: Tuple[str, ...] = ()       # (N,) resolved stack frame chain ("" where absent)
  fusion_kinds: Tuple[str, ...] = ()  # (N,) kLoop / kInput / kOutput / kCustom; "" if no fusion
  inner: Tuple[Tuple[Member, ...], ...] = ()  # (N,) instructions inside each fusion / call /
  #                                               while / conditional; () for other nodes
  positions: Optional[np.ndarray] = None  # (N,) index of the node's instruction in ENTRY
  is_scheduled: bool = False  # the module is scheduled: ENTRY order is XLA's execution order

  @property
  def fused_op_names(self) -> Tuple[Tuple[str, ...], ...]:
    """(N,) op_names of the instructions inside each node (empty for plain instructions)."""
    return tuple(tuple(m[2] for m in x) for x in self.inner)


def flatten_value(value) -> list:
  """A value is ('node', i), ('leaf', name) or ('tuple', [values]); returns the non-tuple items."""
  if value[0] == "tuple":
    return [x for v in value[1] for x in flatten_value(v)]
  return [value]


def entry_nodes(insts):
  """The instructions of an ENTRY computation that make graph nodes, in node order: yields
  (position in ENTRY, inst, operand values), node i being the i-th yielded. Parameters and
  constants are leaves, tuples and get-tuple-elements forward their operands, so an operand
  value is ('node', i), ('leaf', name) or ('tuple', [values]) (`flatten_value`). The one walk
  of ENTRY of the front end (`hlo_to_graph`) and of what reads its nodes again
  (`simulator.partition.space.hlo_space`)."""
  values, count = {}, 0
  for pos, inst in enumerate(insts):
    if inst.opcode in LEAVES:
      values[inst.name] = ("leaf", inst.name)
      continue
    try:
      ins = [values[o] for o in inst.operands]
    except KeyError:
      missing = [o for o in inst.operands if o not in values]
      raise ValueError(f"HLO instruction '{inst.name}' reads undefined value(s) "
                       f"{missing}") from None
    if inst.opcode == "tuple":
      values[inst.name] = ("tuple", ins)
      continue
    if inst.opcode in BARRIERS:  # passes its operand(s) through
      values[inst.name] = ins[0] if len(ins) == 1 else ("tuple", ins)
      continue
    if inst.opcode == "get-tuple-element":
      index = inst.attr("index")
      if len(ins) != 1 or index is None or not index.isdigit():
        raise ValueError(f"HLO instruction '{inst.name}': get-tuple-element needs one operand "
                         f"and an integer index=, got {len(ins)} operand(s), index={index}")
      idx = int(index)
      if ins[0][0] == "tuple" and idx >= len(ins[0][1]):
        raise ValueError(f"HLO instruction '{inst.name}': index={idx} of a tuple of "
                         f"{len(ins[0][1])} element(s)")
      values[inst.name] = ins[0][1][idx] if ins[0][0] == "tuple" else ins[0]
      continue
    values[inst.name] = ("node", count)
    count += 1
    yield pos, inst, ins


def hlo_to_graph(text: str, name: str = "hlo") -> HloGraph:
  """Builds the CompGraph (and metadata) of the ENTRY computation of an HLO module's text."""
  mod = parse_hlo(text)
  return module_graph(mod, mod.entry, name, text)


def module_graph(mod: HloModule, comp: str, name: str, text: str,
                 costs: Optional[Costs] = None, warn: bool = True) -> HloGraph:
  """`hlo_to_graph` of one computation `comp` of a parsed module, as if it were the ENTRY
  (the cost model builds the graphs of the computations a while / call / conditional runs);
  `costs` may be shared between calls on the same module (its memo is module-wide); warn:
  the warnings about unmapped opcodes and loops without a trip count (the ENTRY's build gives
  them once for the module)."""
  costs = costs if costs is not None else Costs(mod)
  members = _Members(mod)
  insts = mod.comps[comp]
  by_name = costs.by_name(comp)
  nodes, positions, stats, leaf_readers = [], [], [], {}
  senders, receivers = [], []
  for pos, inst, ins in entry_nodes(insts):
    i = len(nodes)
    nodes.append(inst)
    positions.append(pos)
    stats.append(costs.inst(inst, comp))
    for v in ins:
      for kind, ref in flatten_value(v):
        if kind == "node":
          senders.append(ref)
          receivers.append(i)
        else:
          leaf_readers.setdefault(ref, set()).add(i)
  if not nodes:
    raise ValueError(f"HLO module '{name}' has no compute instructions in its ENTRY "
                     f"computation (only parameters, constants and tuples)")
  n = len(nodes)
  param_bytes = np.zeros(n)
  for ref, rs in leaf_readers.items():
    share = by_name[ref].nbytes / len(rs)  # split evenly among the distinct readers
    for r in rs:
      param_bytes[r] += share
  stats = np.array(stats, dtype=float).reshape(n, 4)
  unknown = tuple(sorted(costs.unknown))
  if unknown and warn:
    warnings.warn(f"HLO module '{name}': opcodes without a mapping (op_type 'unknown', "
                  f"flops 0): {', '.join(unknown)}")
  if costs.unknown_trips and warn:
    loops = sorted(costs.unknown_trips)
    warnings.warn(f"HLO module '{name}': {len(loops)} while loop(s) without a known trip count "
                  f"(their condition depends on data) counted once: "
                  f"{', '.join(loops[:5])}{', ...' if len(loops) > 5 else ''}")
  op_names = tuple(x.op_name() or "" for x in nodes)
  sources = tuple(mod.frames.get(x.stack_frame_id(), "") for x in nodes)
  workspace = np.array([workspace_bytes(x) for x in nodes], dtype=float)
  type_ids = {op: ops.op_type_id(OPCODE_TYPES.get(op, "unknown"))
              for op in {x.opcode for x in nodes}}
  graph = CompGraph(
      cost=np.zeros(n), senders=np.array(senders, np.int64),
      receivers=np.array(receivers, np.int64),
      out_bytes=np.array([x.nbytes for x in nodes], dtype=float) - workspace,
      param_bytes=param_bytes, temp_bytes=stats[:, 3],
      flops=stats[:, 0], bytes_accessed=stats[:, 2],
      op_type=[type_ids[x.opcode] for x in nodes],
      name=name, node_names=[f"{x.name} [{p}]" if p else x.name
                             for x, p in zip(nodes, op_names)])
  return HloGraph(
      graph, stats[:, 1], text, unknown, inst_names=tuple(x.name for x in nodes),
      opcodes=tuple(x.opcode for x in nodes), op_names=op_names, sources=sources,
      fusion_kinds=tuple((x.attr("kind") or "") if x.opcode == "fusion" else "" for x in nodes),
      inner=tuple(members.of_node(x, p, s) for x, p, s in zip(nodes, op_names, sources)),
      positions=np.asarray(positions, np.int64), is_scheduled=mod.is_scheduled)


def lower_hlo_text(fn, *example_args, stage: str = "pre") -> str:
  """HLO text of `fn` before ("pre", with op_name / source metadata) or after ("post") XLA's
  optimisation passes (post is scheduled: its ENTRY order is XLA's execution order)."""
  import jax
  if stage not in ("pre", "post"):
    raise ValueError(f"stage must be 'pre' or 'post', got {stage!r}")
  try:
    # A function the user already jitted is lowered as it is (its own static arguments and
    # donations): wrapped in a second jit its whole body would be one `call`, one node at pre.
    lowered = (fn if callable(getattr(fn, "lower", None)) else jax.jit(fn)).lower(*example_args)
    if stage == "pre":
      return lowered.as_text(dialect="hlo", debug_info=True)
    # The post text is matched to the pre text by its op_name metadata. JAX's persistent
    # compilation cache (where the user has one) leaves metadata out of its key by default, so a
    # hit could hand back the executable, and the metadata, of another program of the same
    # computation; this compile keys on the metadata too.
    before = jax.config.jax_compilation_cache_include_metadata_in_key
    jax.config.update("jax_compilation_cache_include_metadata_in_key", True)
    try:
      return lowered.compile().as_text()
    finally:
      jax.config.update("jax_compilation_cache_include_metadata_in_key", before)
  except Exception as e:  # tracing / lowering / compilation errors of any type
    raise ValueError(f"cannot lower {getattr(fn, '__name__', fn)!r} to HLO: "
                     f"{type(e).__name__}: {e}") from e


def from_jax_full(fn, *example_args, stage: str = "pre", name: Optional[str] = None) -> HloGraph:
  """Like `from_jax`, but returns the `HloGraph`: transcendentals, metadata and the HLO text."""
  text = lower_hlo_text(fn, *example_args, stage=stage)
  return hlo_to_graph(text, name or f"{getattr(fn, '__name__', 'fn')}/{stage}")


def from_jax(fn, *example_args, stage: str = "pre", name: Optional[str] = None) -> CompGraph:
  """CompGraph of `jax.jit(fn)` on `example_args`, with `cost` 0 (flops and bytes filled).

  The front end only parses: costing the ops on a device is the cost model's job
  (`simulator.costmodel.apply_cost_model`), and `simulator.from_jax(..., device_spec=...)`
  composes the two.

  Raises:
    ValueError: `fn` fails to trace, lower or compile (the message carries XLA's / JAX's).
  """
  return from_jax_full(fn, *example_args, stage=stage, name=name).graph
