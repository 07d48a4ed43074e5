"""Fusion baselines (design.md section 4.1): no fusion, every request, and XLA's own choice.

Fusion methods (kind "fusion") work on a fixed placement and priority (`solve(...,
placement=p, priority=q)`) and return a fuse mask; the registry re-simulates it like every
other answer, so a Solution's objective is the fused simulation's.

* `no_fusion`: no request (the graph as it is).
* `fuse_all`: every op asks; rules F1-F2 keep the legal requests (greedy, in topological order).
* `xla_fusion`: XLA's decisions carried onto the pre-optimisation graph
  (`simulator.frontends.xla.xla_fusion_decisions(pre, post)`), passed as the option
  `decisions`; `xla_fusion_program(fn, *args)` builds the costed pre graph and the decisions
  of a JAX program in one call. A `jax:` or `zoo:` graph does not remember its program, so the
  decisions cannot be recomputed from the graph alone: `xla_decisions_for_spec(spec, graph)`
  rebuilds the program from the graph's spec (what go-jax-place --task=fusion uses).
"""

from __future__ import annotations

import numpy as np

from go_jax.methods import Problem, Proposal, register
from simulator import fusion


def _checked(problem: Problem) -> None:
  fusion.check_fusable(problem.graph)


@register("no_fusion", "fusion", "fusion baseline: no op is fused")
def no_fusion(problem: Problem, config) -> Proposal:
  del config
  return Proposal(problem.placement, fuse=np.zeros(problem.graph.num_nodes, bool))


@register("fuse_all", "fusion",
          "fusion baseline: every op asks to fuse into its consumer (the legal requests hold)")
def fuse_all(problem: Problem, config) -> Proposal:
  del config
  _checked(problem)
  return Proposal(problem.placement, fuse=np.ones(problem.graph.num_nodes, bool))


@register("xla_fusion", "fusion",
          "fusion baseline: XLA's own fusion decisions on a pre-optimisation JAX graph",
          decisions=None)
def xla_fusion(problem: Problem, config) -> Proposal:
  _checked(problem)
  decisions = config["decisions"]
  n = problem.graph.num_nodes
  if decisions is None:
    raise ValueError(
        "xla_fusion needs XLA's decisions for this graph: pass decisions=(N,) bool, from "
        "simulator.frontends.xla.xla_fusion_decisions(pre, post) or "
        "go_jax.methods.fusion.xla_fusion_program(fn, *args)")
  try:
    decisions = fusion.check_mask(decisions, (n,), problem.graph.name)
  except ValueError as e:
    raise ValueError(f"xla_fusion: decisions: {e}") from None
  return Proposal(problem.placement, fuse=decisions)


def xla_fusion_program(fn, *example_args, device_spec="v100", calibration=None, name=None):
  """(pre graph costed on `device_spec`, XLA's fuse decisions on it, post graph costed alike)
  for one JAX program: what `xla_fusion` and the fusion validation need."""
  from simulator import costmodel  # local: the cost model is only needed here
  from simulator.frontends import hlo, xla
  spec = (costmodel.device_spec(device_spec, calibration) if isinstance(device_spec, str)
          else device_spec)
  pre = hlo.from_jax_full(fn, *example_args, stage="pre", name=name)
  post = hlo.from_jax_full(fn, *example_args, stage="post", name=name)
  decisions = xla.xla_fusion_decisions(pre, post)
  return (costmodel.apply_cost_model(pre, spec, calibration), decisions,
          costmodel.apply_cost_model(post, spec, calibration))


def xla_decisions_for_spec(spec: str, graph=None, device_spec="v100") -> np.ndarray:
  """XLA's fuse decisions (N,) bool for the graph a `zoo:` or `jax:` pre-optimisation spec names
  (e.g. "zoo:gpt2_small,size=tiny,stage=pre"): the program is rebuilt from the spec (a graph
  does not remember it) and `xla_fusion_program` compiles it; `device_spec` costs a spec that
  names no device (decisions do not depend on it). With `graph`, the program's pre graph must
  be that graph (same number of nodes and node names), so the decisions are its ops'.

  Raises:
    ValueError: the spec is not a zoo: or jax: pre-optimisation program (another source, a .npz
      file, stage=post, a coarsened graph, a function returning a CompGraph), the spec is
      malformed, or the program's pre graph does not match `graph`.
  """
  from simulator import costmodel, sources  # local: heavy and only needed here
  from simulator.graph import CompGraph
  from simulator.sources import jax_program, zoo as zoo_source
  text = sources.resolve_spec(spec)
  if sources.split_coarsen(text)[1] is not None:
    raise ValueError(f"graph spec {spec!r} is coarsened: XLA's fusion decisions are made on "
                     "the program's own ops")
  kind, _, rest = text.partition(":")
  kind = kind.strip()
  if text.endswith(".npz") or kind not in ("zoo", "jax"):
    raise ValueError(f"graph spec {spec!r} is not a zoo: or jax: pre-optimisation program: "
                     "XLA's fusion decisions need the program (e.g. 'zoo:gpt2_small,size=tiny,"
                     "stage=pre')")
  items = [x.strip() for x in rest.split(",") if x.strip()]
  keys = {k.strip(): v.strip() for k, _, v in (x.partition("=") for x in items if "=" in x)}
  free = [x for x in items if "=" not in x]
  stage = keys.pop("stage", jax_program.DEFAULT_STAGE)
  if stage != "pre":
    raise ValueError(f"graph spec {spec!r} is not a pre-optimisation program (stage={stage}): "
                     "a post graph is XLA's fused program already; use stage=pre")
  device = keys.pop("device", device_spec)
  calib_path = keys.pop("calibration", None)
  calibration = costmodel.Calibration.load(calib_path) if calib_path else None
  keys.pop("cache", None)
  if kind == "zoo":
    from simulator import zoo
    name = keys.pop("model", free[0] if free else None)
    z = zoo.build(name, keys.pop("size", "default"),
                  **{k: zoo_source.parse_knob(v) for k, v in keys.items()})
    fn, args = z.step, tuple(z.abstract_args())
  else:
    target = keys.pop("target", free[0] if free else "")
    with jax_program.working_dir_on_path():
      out = jax_program.import_function(target)()
    if not (isinstance(out, tuple) and len(out) == 2 and callable(out[0])):
      what = "a CompGraph" if isinstance(out, CompGraph) else type(out).__name__
      raise ValueError(f"graph spec {spec!r}: the function returns {what}, not a JAX program "
                       "(fn, args): XLA's fusion decisions need the program")
    fn, args = out[0], tuple(out[1])
  pre, decisions, _ = xla_fusion_program(fn, *args, device_spec=device, calibration=calibration)
  if graph is not None:
    names = None if graph.node_names is None else list(graph.node_names)
    if pre.num_nodes != graph.num_nodes or names != list(pre.node_names):
      differ = ("other node names" if pre.num_nodes == graph.num_nodes
                else f"{graph.num_nodes} ops")
      raise ValueError(f"the pre-optimisation program of {spec!r} ({pre.num_nodes} ops) is not "
                       f"graph '{graph.name}' ({differ}): XLA's decisions would not be its ops'")
  return np.asarray(decisions, bool)
