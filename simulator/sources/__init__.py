"""Graph sources: one registry from a short text spec to a CompGraph (DESIGN section 6).

A spec is `kind:arg,key=value,...` or a path ending in ".npz" (a graph saved by
`CompGraph.save`). Examples:

  layered:n=1000,width=32,seed=0      regal:n=200,seed=3       chain:n=50
  series_parallel:n=100,seed=1        pipedream:resnet50       pipedream:gnmt,training=false
  piper:gnmt                          piper:bert32a100,tensor_parallel=4,variant=recomp
  zoo:resnet50,size=small,stage=post,device=a100      zoo:gnmt8      zoo:gpt2_small,batch=4

Generators take `n` (alias of num_nodes) and their keyword arguments; the importers take a
model name or file path as their one positional argument. Every error (unknown kind, key or
value) is a ValueError that lists the valid choices.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Callable, Dict, List, Optional

from simulator.graph import CompGraph
from simulator.sources import pipedream, piper, synthetic
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
}


def _split_spec(spec: str):
  kind, sep, rest = spec.partition(":")
  kind = kind.strip()
  if kind not in REGISTRY:
    raise ValueError(f"unknown graph spec kind {kind!r} in {spec!r}; valid kinds: "
                     f"{', '.join(REGISTRY)}, or a path ending in .npz")
  items = [x.strip() for x in rest.split(",")] if sep and rest.strip() else []
  return kind, items


def load_graph(spec: str) -> CompGraph:
  """Builds or loads the graph a spec names (see the module docstring for the syntax)."""
  if not isinstance(spec, str) or not spec.strip():
    raise ValueError(f"graph spec must be a non-empty string, got {spec!r}")
  spec = spec.strip()
  if spec.endswith(".npz"):
    return CompGraph.load(spec)
  kind_name, items = _split_spec(spec)
  kind = REGISTRY[kind_name]
  keys = kind.keys()
  kwargs, args = {}, []
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
      raise ValueError(f"graph spec {spec!r}: {kind_name} needs a model name or path, e.g. "
                       f"'{kind_name}:<name>'; available: "
                       f"{', '.join(available_graphs().get(kind_name, [])) or '(none found)'}")
    kwargs[kind.positional] = args[0]
  missing = [p.name for p in inspect.signature(kind.fn).parameters.values()
             if p.default is inspect.Parameter.empty and p.name not in kwargs
             and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
  if missing:
    raise ValueError(f"graph spec {spec!r}: {kind_name} requires {', '.join(missing)} "
                     f"(n = num_nodes); valid keys: {', '.join(sorted(keys))}")
  return kind.fn(**kwargs)


def available_graphs() -> Dict[str, List[str]]:
  """Kind -> model names: zoo models, and those found in the shared data (empty for generators)."""
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


__all__ = ["DATA_ENV_VAR", "REGISTRY", "SourceKind", "data_root", "load_graph", "available_graphs",
           "load_pipedream", "load_piper", "layered_dag", "regal_dag", "chain",
           "series_parallel", "synthetic", "pipedream", "piper"]
