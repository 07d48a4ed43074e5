"""Graph sources: one parser from a short text to a CompGraph (docs/design.md section 6).

`load_graph(text)` is the graph argument of every launcher and config. It accepts:
  * a source spec `kind:arg,key=value,...`:
      layered:n=1000,width=32,seed=0      regal:n=200,seed=3       chain:n=50
      series_parallel:n=100,seed=1        pipedream:resnet50       pipedream:gnmt,training=false
      piper:gnmt                          piper:bert32a100,tensor_parallel=4,variant=recomp
      zoo:resnet50,size=small,stage=post,device=a100      zoo:gnmt8      zoo:gpt2_small,batch=4
      jax:my_models.step:program,stage=post,device=a100   (a JAX program: `jax_program`)
      costgraph:graphs/graph_1f2e.pbtxt   (a TensorFlow CostGraphDef text file: `costgraph`)
  * a path ending in ".npz" (a graph saved by `CompGraph.save`);
  * a bare model name: a PipeDream model if it is one (`pipedream:<name>`), else a model-zoo
    model (`zoo:<name>`);
  * `package.module:function[,key=value...]`, read as `jax:package.module:function...` when
    `package.module` is not a source kind. The working directory is on the import path while
    the module is imported and the program built (as with `python -m`), so `my_module:fn`
    works from the folder holding my_module.py.
`resolve_spec(text)` gives the source spec a text stands for (the same rules), e.g. to record.
Every form takes a trailing `coarsen=N` (e.g. `zoo:bert_base,coarsen=512`): the graph contracted
to at most N nodes by `simulator.coarsen.coarsen`, for policies trained on a size bucket.

Generators take `n` (alias of num_nodes) and their keyword arguments; the importers take a
model name or file path as their one positional argument, `jax:` a `package.module:function`;
a path with ',' or '=' in its name is taken whole when it names an existing file.
Every error (unknown kind, name, key or value, missing file, a module or function that cannot be
imported or called) is a ValueError that names the spec and lists the valid choices.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from typing import Callable, Dict, List, Optional, Tuple

from simulator.graph import CompGraph
from simulator.sources import costgraph, jax_program, pipedream, piper, synthetic
from simulator.sources import zoo as zoo_source
from simulator.sources.datafiles import DATA_ENV_VAR, data_root
from simulator.sources.pipedream import load_pipedream
from simulator.sources.piper import load_piper
from simulator.sources.synthetic import chain, layered_dag, regal_dag, series_parallel


def _parse_bool(text: str) -> bool:
  low = text.lower()
  if low in ("true", "1", "yes", "y", "on"):
    return True
  if low in ("false", "0", "no", "n", "off"):
    return False
  raise ValueError(f"expected a boolean (true/false), got {text!r}")


def _parse_float(text: str) -> float:
  return float(text)


def _parse_str(text: str) -> str:
  return text


# Value parsers, keyed by the annotation text of the generator/loader parameter.
_PARSERS = {"int": int, "float": _parse_float, "bool": _parse_bool, "str": _parse_str,
            "Optional[float]": _parse_float, "Optional[int]": int, "Optional[str]": _parse_str}


@dataclasses.dataclass(frozen=True)
class SourceKind:
  """One registry entry: the function, whether it takes a name/path argument, key aliases."""
  fn: Callable[..., CompGraph]
  positional: Optional[str] = None  # parameter receiving the unnamed argument
  positional_help: str = "a model name or path"  # what the unnamed argument is, for errors
  aliases: Dict[str, str] = dataclasses.field(default_factory=dict)
  description: str = ""
  # Keys outside the function's annotated parameters are passed on as `**kwargs`, parsed by
  # this function (the zoo's model-specific knobs; the model validates them).
  free_keys: Optional[Callable[[str], object]] = None

  def keys(self) -> Dict[str, Callable[[str], object]]:
    """Spec key -> value parser, from the function's annotated parameters."""
    out = {}
    for p in inspect.signature(self.fn).parameters.values():
      if p.name == self.positional:
        continue
      annotation = p.annotation if isinstance(p.annotation, str) else getattr(
          p.annotation, "__name__", str(p.annotation))
      if annotation in _PARSERS:
        out[p.name] = _PARSERS[annotation]
    for alias, target in self.aliases.items():
      out[alias] = out[target]
    return out


_SIZE = {"n": "num_nodes"}
REGISTRY: Dict[str, SourceKind] = {
    "layered": SourceKind(layered_dag, aliases=_SIZE, description="random layered DAG"),
    "regal": SourceKind(regal_dag, aliases=_SIZE, description="REGAL-style random graph"),
    "chain": SourceKind(chain, aliases=_SIZE, description="chain"),
    "series_parallel": SourceKind(series_parallel, aliases=_SIZE,
                                  description="random series-parallel DAG"),
    "pipedream": SourceKind(load_pipedream, positional="path_or_model_name",
                            description="PipeDream layer profile"),
    "piper": SourceKind(load_piper, positional="path_or_name",
                        description="Piper workload JSON"),
    "zoo": SourceKind(zoo_source.load_zoo, positional="model", free_keys=zoo_source.parse_knob,
                      description="model-zoo training step via the HLO front end + cost model"),
    "jax": SourceKind(jax_program.load_jax_program, positional="target",
                      positional_help="'package.module:function'",
                      description="a JAX program (fn, args) or CompGraph from a function of no "
                      "arguments, via the HLO front end + cost model"),
    "costgraph": SourceKind(costgraph.load_costgraph, positional="path",
                            positional_help="a CostGraphDef text file (.pbtxt)",
                            description="TensorFlow CostGraphDef text file (REGAL's format)"),
}


def _forms() -> str:
  return (f"a source spec ({', '.join(k + ':...' for k in REGISTRY)}), a path ending in .npz, "
          "a bare model name or 'package.module:function'")


def _bare_name(name: str) -> str:
  """The spec of a bare model name: PipeDream if it is one, else the model zoo."""
  names = available_graphs()
  for kind in ("pipedream", "zoo"):
    if name in names.get(kind, ()):
      return f"{kind}:{name}"
  raise ValueError(
      f"unknown graph name {name!r}: not a PipeDream model "
      f"({', '.join(names.get('pipedream', ())) or 'none found'}) nor a model-zoo model "
      f"({', '.join(names.get('zoo', ()))}); other forms: {_forms()}")


def resolve_spec(text: str, *, device: Optional[str] = None) -> str:
  """The source spec `text` stands for (forms in the module docstring); source specs and .npz
  paths are returned as they are (stripped), so resolving twice changes nothing.

  Args:
    text: a graph argument.
    device: a cost-model device for a JAX program (`jax:`, `module:function` or a `zoo:`
      model, bare names included) whose text names none; None leaves their default (v100).

  Raises:
    ValueError: empty text, a missing .npz file, an unknown bare name or an unknown kind that is
      not `package.module:function` either (the messages list the options).
  """
  if not isinstance(text, str) or not text.strip():
    raise ValueError(f"graph spec must be a non-empty string, got {text!r}")
  text = text.strip()
  base, limit = split_coarsen(text)
  if limit is not None:  # resolve the rest, keep the coarsening last
    return f"{resolve_spec(base, device=device)},{COARSEN_KEY}={limit}"
  if text.endswith(".npz"):
    if not os.path.isfile(text):
      raise ValueError(f"cannot read graph file {text!r}: " + (
          "it is a folder" if os.path.isdir(text) else "it does not exist"))
    return text
  kind, sep, rest = text.partition(":")
  kind = kind.strip()
  if not sep:
    if text in REGISTRY:
      return f"{text}:"
    text = _bare_name(text)
    kind, _, rest = text.partition(":")
  if kind not in REGISTRY:
    if not jax_program.is_target(text.split(",", 1)[0].strip()):
      raise ValueError(f"graph spec {text!r}: unknown graph spec kind {kind!r} (valid kinds: "
                       f"{', '.join(REGISTRY)}) and {text!r} is not 'package.module:function'; "
                       f"the forms are: {_forms()}")
    text, kind, rest = f"jax:{text}", "jax", text
  if kind in ("jax", "zoo") and device is not None and rest.strip():
    keys = [item.partition("=")[0].strip() for item in rest.split(",") if "=" in item]
    if "device" not in keys:
      text = f"{text},device={device}"
  return text


def _split_spec(spec: str):
  """(kind, items) of a resolved source spec: the kind before the first ':', then the items
  between commas (a `jax:` target keeps its own ':')."""
  kind, sep, rest = spec.partition(":")
  items = [x.strip() for x in rest.split(",")] if sep and rest.strip() else []
  return kind.strip(), items


COARSEN_KEY = "coarsen"


def split_coarsen(spec: str):
  """(spec without its `coarsen=N` item, N or None); ValueError on a bad or repeated N.

  The item may come anywhere after the name or kind, also right after the kind
  (`layered:coarsen=8,n=20`); no graph source has a key of its own called `coarsen`."""
  head, items = spec, []
  kind, sep, rest = spec.partition(":")
  if sep and kind.strip() in REGISTRY:  # `kind:` then items; a `jax:` target keeps its ':'
    head, items = f"{kind}:", rest.split(",")
  else:
    head, *items = spec.split(",")
  keep, limit = [], None
  for item in items:
    key, eq, text = item.partition("=")
    if key.strip() != COARSEN_KEY or not eq:
      keep.append(item)
      continue
    if limit is not None:
      raise ValueError(f"graph spec {spec!r}: key {COARSEN_KEY!r} given twice")
    try:
      limit = int(text.strip())
    except ValueError:
      limit = 0
    if limit < 1:
      raise ValueError(f"graph spec {spec!r}: {COARSEN_KEY} must be a positive number of "
                       f"nodes, got {text.strip()!r}")
  if limit is None:
    return spec, None
  if head.endswith(":"):
    return head + ",".join(keep), limit
  return ",".join([head] + keep), limit


def load_graph(spec: str) -> CompGraph:
  """Builds or loads the graph a graph argument names (forms in the module docstring).

  Any form takes a trailing `coarsen=N` item: the graph is then contracted to at most N nodes
  with `simulator.coarsen.coarsen` (unchanged when it has N nodes or fewer) and named
  `<name>@coarse<N>`.

  Raises:
    ValueError: a malformed spec, unknown kind, name, key or value, a missing file, a module or
      function that cannot be imported or called, or a bad return value (the message names the
      spec and lists the options).
  """
  base, limit = split_coarsen(str(spec).strip())
  graph = _load_graph(base)
  if limit is None or graph.num_nodes <= limit:
    return graph
  from simulator import coarsen  # pylint: disable=g-import-not-at-top  (only when asked)
  return coarsen.coarsen(graph, limit, name=f"{graph.name}@coarse{limit}").graph


def check_spec(spec: str) -> str:
  """Checks a graph argument without building its graph; returns the source spec it stands for.

  Everything `load_graph` checks before the graph's own loader runs (the form, the kind, every
  key and value), plus that the named thing exists: a PipeDream or Piper model or file, a
  zoo model, a CostGraphDef file, an .npz file, a `jax:` module and function (the module is
  imported; the function is not called); a synthetic graph (layered, regal, chain,
  series_parallel) is generated, which checks every parameter. Sweeps check their graphs with
  it before any cell runs, so a typo fails the launch instead of every cell of that graph.

  Raises:
    ValueError: as `load_graph` would for these reasons (the message names the spec).
  """
  base, limit = split_coarsen(str(spec).strip())
  resolved = resolve_spec(base)
  if not resolved.endswith(".npz"):
    kind_name, kwargs = _parse(resolved)
    check = _CHECKS.get(kind_name)
    if check is not None:
      try:
        check(kwargs)
      except jax_program.ModuleNotImportable as e:
        raise _not_importable(resolved, e) from e
      except ValueError as e:
        if resolved in str(e):
          raise
        raise ValueError(f"graph spec {resolved!r}: {e}") from None
  return resolved if limit is None else f"{resolved},{COARSEN_KEY}={limit}"


def _check_jax(target: str, **settings) -> None:
  jax_program.check_settings(target, **settings)  # stage, device, calibration
  with jax_program.working_dir_on_path():
    jax_program.import_function(target)


def _check_costgraph(path: str) -> None:
  if not os.path.isfile(path):  # load_costgraph's own message
    raise ValueError(f"cannot read CostGraphDef file {path!r}: " + (
        "it is a folder" if os.path.isdir(path) else "it does not exist"))


# The cheap existence checks of the importers (`check_spec`), from the parsed keyword arguments.
_CHECKS: Dict[str, Callable[[Dict[str, object]], None]] = {
    "pipedream": lambda kw: pipedream.load_pipedream(**kw),  # a profile of a few KB: build it
    "piper": lambda kw: piper.load_piper(**kw),  # a JSON file of a few KB: read it all
    "zoo": lambda kw: zoo_source.check_zoo(**kw),
    "jax": lambda kw: _check_jax(**kw),
    "costgraph": lambda kw: _check_costgraph(kw["path"])}
# The seeded synthetic generators are checked by generating (under a second for 1e5 nodes):
# every parameter (a negative size or seed, a size above synthetic.MAX_NODES) is refused before
# a sweep starts.
for _kind in ("layered", "regal", "chain", "series_parallel"):
  _CHECKS[_kind] = (lambda kind: lambda kw: REGISTRY[kind].fn(**kw))(_kind)
del _kind


def _not_importable(spec: str, e: "jax_program.ModuleNotImportable") -> ValueError:
  return ValueError(f"graph spec {spec!r}: {e.module!r} is neither a graph source kind "
                    f"({', '.join(REGISTRY)}) nor an importable module ({e.cause})")


def _load_graph(spec: str) -> CompGraph:
  """`load_graph` without the coarsening."""
  spec = resolve_spec(spec)
  if spec.endswith(".npz"):
    return CompGraph.load(spec)
  kind_name, kwargs = _parse(spec)
  try:
    return REGISTRY[kind_name].fn(**kwargs)
  except jax_program.ModuleNotImportable as e:
    raise _not_importable(spec, e) from e


def _leading_path(kind: SourceKind, items: List[str]):
  """(path, the other items): the longest run of leading items that, joined by commas, names
  an existing file with a ',' or '=' in its name (`costgraph:runs/a=1,b=2.pbtxt`), so that such
  a path is not split into key=value items; (None, items) where there is none."""
  if kind.positional is None:
    return None, items
  for k in range(len(items), 0, -1):
    candidate = ",".join(items[:k])
    if ("," in candidate or "=" in candidate) and os.path.isfile(candidate):
      return candidate, items[k:]
  return None, items


def _parse(spec: str):
  """(kind name, keyword arguments of its function) of a resolved source spec; ValueError on an
  unknown key, a bad value, a missing required argument or a stray unnamed one."""
  kind_name, items = _split_spec(spec)
  kind = REGISTRY[kind_name]
  keys = kind.keys()
  kwargs, args = {}, []
  path, items = _leading_path(kind, items)
  if path is not None:
    args.append(path)
  for item in items:
    if not item:
      raise ValueError(f"empty item in graph spec {spec!r}")
    key, eq, text = item.partition("=")
    key = key.strip()
    if not eq:
      if kind.positional is None or args or kwargs:
        where = ("only a name/path first" if kind.positional else "no unnamed arguments")
        raise ValueError(f"graph spec {spec!r}: unexpected argument {item!r} ({kind_name} "
                         f"takes {where}); valid keys: {', '.join(sorted(keys))}")
      args.append(item)
      continue
    if key not in keys and kind.free_keys is not None and key.isidentifier():
      if key in kwargs:
        raise ValueError(f"graph spec {spec!r}: key {key!r} given twice")
      kwargs[key] = kind.free_keys(text.strip())
      continue
    if key not in keys and kind.positional is not None and not args and (
        "/" in key or os.sep in key):  # a path, split at its '=': say so
      raise ValueError(f"graph spec {spec!r}: no file {','.join(items)!r} exists, and "
                       f"{key!r} is not a key of {kind_name} (valid keys: "
                       f"{', '.join(sorted(keys))})")
    if key not in keys:
      raise ValueError(f"graph spec {spec!r}: unknown key {key!r} for {kind_name}; valid "
                       f"keys: {', '.join(sorted(keys))}")
    target = kind.aliases.get(key, key)
    if target in kwargs:
      raise ValueError(f"graph spec {spec!r}: key {key!r} given twice")
    try:
      kwargs[target] = keys[key](text.strip())
    except ValueError as e:
      raise ValueError(f"graph spec {spec!r}: bad value for {key!r}: {e}") from None
  if kind.positional is not None:
    if not args:
      listing = ("" if kind_name in ("jax", "costgraph") else "; available: " + (
          ", ".join(available_graphs().get(kind_name, [])) or "(none found)"))
      raise ValueError(f"graph spec {spec!r}: {kind_name} needs {kind.positional_help} after "
                       f"'{kind_name}:'{listing}")
    kwargs[kind.positional] = args[0]
  missing = [p.name for p in inspect.signature(kind.fn).parameters.values()
             if p.default is inspect.Parameter.empty and p.name not in kwargs
             and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
  if missing:
    raise ValueError(f"graph spec {spec!r}: {kind_name} requires {', '.join(missing)} "
                     f"(n = num_nodes); valid keys: {', '.join(sorted(keys))}")
  return kind_name, kwargs


def spec_identity(text: str) -> Tuple:
  """What a graph argument names, as a hashable value: an .npz file by its real path; any other
  spec by its kind, its parsed arguments with the function's defaults filled in (a file
  argument by its real path) and its `coarsen` limit. So 'layered:n=100,width=10' and
  'layered:width=10, n=100,seed=0' are one graph. Builds nothing (unlike `check_spec`, which
  generates a synthetic graph to check it); ValueError as `resolve_spec` and the key parsing."""
  base, limit = split_coarsen(resolve_spec(text))
  if base.endswith(".npz"):
    return ("npz", os.path.realpath(base), limit)
  kind_name, kwargs = _parse(base)
  kind = REGISTRY[kind_name]
  full = {p.name: p.default for p in inspect.signature(kind.fn).parameters.values()
          if p.default is not inspect.Parameter.empty}
  full.update(kwargs)
  if kind.positional is not None and os.path.exists(str(full[kind.positional])):
    full[kind.positional] = os.path.realpath(str(full[kind.positional]))
  return (kind_name, tuple(sorted((k, repr(v)) for k, v in full.items())), limit)


def available_graphs() -> Dict[str, List[str]]:
  """Kind -> model names: zoo models, and those found in the package data (empty for generators
  and for `jax:`, whose argument is any `package.module:function`)."""
  out = {k: [] for k in REGISTRY}
  from simulator import zoo
  out["zoo"] = sorted(zoo.available())
  try:
    root = data_root()
  except ValueError:
    return out
  out["pipedream"] = sorted(pipedream.pipedream_models(root))
  out["piper"] = sorted(piper.piper_models(root))
  return out


__all__ = ["DATA_ENV_VAR", "REGISTRY", "SourceKind", "data_root", "load_graph", "check_spec",
           "resolve_spec", "available_graphs", "load_pipedream", "load_piper", "layered_dag", "regal_dag",
           "chain", "series_parallel", "synthetic", "pipedream", "piper", "jax_program"]
