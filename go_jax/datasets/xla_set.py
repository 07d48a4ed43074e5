"""REGAL's "XLA set" counterpart: training-step graphs of the model zoo, split by model family.

REGAL evaluates transfer on graphs of real models (TensorFlow / XLA programs) besides its
synthetic set. Here they come from `simulator.zoo` through the HLO front end and the roofline
cost model (`zoo:` graph specs): every model at several zoo sizes (`tiny`, `small`, optionally
`default`) and knob overrides, the program after XLA's optimisation passes (`stage=post`, what
actually runs), contracted to at most `coarsen` ops where larger (the policies' node bucket).

Split by MODEL FAMILY, so that valid and test families are never seen in training: a model's
family is the zoo module that defines it (resnet, inception, amoebanet, wavenet, transformer
(BERT, GPT-2, Transformer NMT), gnmt, transformer_xl). By default wavenet is the validation
family and inception and transformer_xl the test families; the rest train.

The folder layout, manifest, atomic writes, resuming and de-duplication are those of the
synthetic set (`go_jax.datasets.store`). The room-for-improvement filter is off by default
(REGAL does not filter its real-model graphs); `filter=True` applies the synthetic set's.
"""

from __future__ import annotations

import functools
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from go_jax.datasets import regal, store
from simulator.graph import CompGraph

DEFAULT_VALID_FAMILIES = ("wavenet",)
DEFAULT_TEST_FAMILIES = ("inception", "transformer_xl")
DEFAULT_SIZES = ("tiny", "small")


def model_family(model: str) -> str:
  """The family of zoo model `model`: the name of the zoo module that defines it."""
  from simulator import zoo  # pylint: disable=g-import-not-at-top
  names = zoo.available()
  if model not in names:
    raise ValueError(f"unknown zoo model {model!r}; available: {', '.join(sorted(names))}")
  builder = zoo.MODELS[model].builder
  while isinstance(builder, functools.partial):  # gnmt2/4/8 are partials of one builder
    builder = builder.func
  return builder.__module__.rsplit(".", 1)[-1]


def family_split(family: str, valid_families: Sequence[str],
                 test_families: Sequence[str]) -> str:
  """train, valid or test for a family (ValueError when listed as both valid and test)."""
  if family in valid_families and family in test_families:
    raise ValueError(f"model family {family!r} is listed as both a valid and a test family")
  return "valid" if family in valid_families else "test" if family in test_families else "train"


def zoo_families() -> List[str]:
  """The family of every zoo model, sorted, without repeats."""
  from simulator import zoo  # pylint: disable=g-import-not-at-top
  return sorted({model_family(m) for m in zoo.available()})


def check_families(valid_families: Sequence[str], test_families: Sequence[str],
                   variants: Sequence[Tuple[str, str]] = ()) -> None:
  """ValueError naming the option and the family when a valid or test family is neither a zoo
  family nor the family of one of `variants` (a typo would otherwise send every graph to
  train), or when one is listed as both."""
  known = sorted(set(zoo_families()) | {fam for fam, _ in variants})
  for option, families in (("valid_families", valid_families),
                           ("test_families", test_families)):
    if isinstance(families, str):
      raise ValueError(f"{option} must be a list of family names, got the string {families!r}")
    unknown = [f for f in families if f not in known]
    if unknown:
      raise ValueError(f"{option}: unknown model family(ies) {unknown}; known: "
                       f"{', '.join(known)}")
  both = sorted(set(valid_families) & set(test_families))
  if both:
    raise ValueError(f"model family {both[0]!r} is listed as both a valid and a test family")


def zoo_variants(models: Optional[Sequence[str]] = None,
                 sizes: Sequence[str] = DEFAULT_SIZES, knobs: Sequence[str] = ("",),
                 stage: str = "post", coarsen: Optional[int] = 512,
                 device: str = "v100") -> List[Tuple[str, str]]:
  """(family, graph spec) of every model x size x knob set, sorted by family then model.

  `knobs` are extra spec items per variant ("" = the size's own knobs; e.g. "batch=2").
  ValueError naming the option (models, sizes, coarsen) and the value for an unknown model or
  size, a `coarsen` that is not a positive number of ops, or an empty list: these are the
  caller's mistakes, not variants that fail to build, so they stop before any folder is made.
  """
  from simulator import zoo  # pylint: disable=g-import-not-at-top
  models = sorted(zoo.available()) if models is None else list(models)
  if isinstance(sizes, str) or isinstance(models, str):
    raise ValueError("models and sizes must be lists of names, not a string")
  if not models or not sizes:
    raise ValueError(f"models and sizes must not be empty, got models={models}, sizes={sizes}")
  bad = [sz for sz in sizes if sz not in zoo.SIZES]
  if bad:
    raise ValueError(f"sizes: unknown zoo size(s) {bad}; valid: {', '.join(zoo.SIZES)}")
  if coarsen is not None and (isinstance(coarsen, bool) or not isinstance(coarsen, int)
                              or coarsen < 1):
    raise ValueError(f"coarsen must be a positive number of ops (None: no coarsening), got "
                     f"{coarsen!r}")
  out = []
  for model in models:
    family = model_family(model)
    for size in sizes:
      for extra in knobs:
        spec = f"zoo:{model},size={size},stage={stage},device={device}"
        spec += f",{extra}" if extra else ""
        spec += f",coarsen={coarsen}" if coarsen else ""
        out.append((family, spec))
  return sorted(out, key=lambda fs: (fs[0], fs[1]))


def check_xla_options(*, models: Optional[Sequence[str]] = None,
                      sizes: Sequence[str] = DEFAULT_SIZES, knobs: Sequence[str] = ("",),
                      stage: str = "post", coarsen: Optional[int] = 512, device: str = "v100",
                      valid_families: Sequence[str] = DEFAULT_VALID_FAMILIES,
                      test_families: Sequence[str] = DEFAULT_TEST_FAMILIES,
                      filter: bool = False, topology: str = regal.DEFAULT_TOPOLOGY,  # pylint: disable=redefined-builtin
                      objective: str = "makespan", low_budget: int = regal.LOW_BUDGET,
                      high_budget: int = regal.HIGH_BUDGET,
                      min_improvement: float = regal.MIN_IMPROVEMENT,
                      variants: Optional[Sequence[Tuple[str, str]]] = None
                      ) -> List[Tuple[str, str]]:
  """ValueError naming the option unless `build_xla_dataset` can run with these options
  (`zoo_variants`, `check_families`, and with `filter` the topology spec and
  `regal.check_filter_options`); returns the variants. Checked before the folder is touched
  (the launcher calls it before it even creates the folder): a manifest of bad settings would
  refuse the corrected rerun."""
  if variants is None:
    variants = zoo_variants(models, sizes, knobs, stage, coarsen, device)
  variants = [tuple(v) for v in variants]
  if not variants:
    raise ValueError("no variants to build (an empty list)")
  check_families(valid_families, test_families, variants)
  if filter:
    from simulator.topology_spec import parse_topology  # pylint: disable=g-import-not-at-top
    parse_topology(topology)
    regal.check_filter_options(objective, low_budget, high_budget, min_improvement)
  return variants


def build_xla_dataset(out: str, *, models: Optional[Sequence[str]] = None,
                      sizes: Sequence[str] = DEFAULT_SIZES, knobs: Sequence[str] = ("",),
                      stage: str = "post", coarsen: Optional[int] = 512, device: str = "v100",
                      valid_families: Sequence[str] = DEFAULT_VALID_FAMILIES,
                      test_families: Sequence[str] = DEFAULT_TEST_FAMILIES,
                      filter: bool = False, topology: str = regal.DEFAULT_TOPOLOGY,  # pylint: disable=redefined-builtin
                      objective: str = "makespan", low_budget: int = regal.LOW_BUDGET,
                      high_budget: int = regal.HIGH_BUDGET,
                      min_improvement: float = regal.MIN_IMPROVEMENT,
                      variants: Optional[Sequence[Tuple[str, str]]] = None,
                      load: Optional[Callable[[str], CompGraph]] = None,
                      save_seconds: float = 5.0, log: Optional[Callable[[str], None]] = print,
                      solve: Optional[Callable] = None) -> Dict:
  """Builds (or resumes) the XLA set in `out` (module docstring); returns the manifest.

  `variants` ((family, spec) pairs) replaces the zoo's list (tests); `load` replaces
  `simulator.sources.load_graph`. A variant that fails to build is recorded as rejected
  ("build_failed" with the error) and the build goes on. Every kept entry records its
  `family`, `model spec` and `split`.
  """
  variants = check_xla_options(models=models, sizes=sizes, knobs=knobs, stage=stage,
                               coarsen=coarsen, device=device, valid_families=valid_families,
                               test_families=test_families, filter=filter, topology=topology,
                               objective=objective, low_budget=low_budget,
                               high_budget=high_budget, min_improvement=min_improvement,
                               variants=variants)
  splits = {fam: family_split(fam, valid_families, test_families) for fam, _ in variants}
  if load is None:
    from simulator.sources import load_graph as load  # pylint: disable=g-import-not-at-top
  settings = dict(variants=[list(v) for v in variants], valid_families=list(valid_families),
                  test_families=list(test_families), filter=bool(filter))
  if filter:
    settings.update(topology=str(topology), objective=objective, low_budget=low_budget,
                    high_budget=high_budget, min_improvement=min_improvement)
  db = store.DatasetStore(out, "xla", settings, save_seconds=save_seconds, log=log)
  targets = {s: sum(1 for fam, _ in variants if splits[fam] == s) for s in store.SPLITS}
  try:
    while db.candidates < len(variants):
      index = db.candidates
      family, spec = variants[index]
      base = dict(candidate=index, family=family, spec=spec)
      try:
        graph = load(spec)
      except ValueError as e:
        db.reject("build_failed", error=str(e)[:500], **base)
        continue
      digest = store.topology_hash(graph)
      if digest in db.hashes:
        db.reject("duplicate", hash=digest, **base)
        continue
      fig = {}
      if filter:
        fig = regal.room_for_improvement(graph, topology, low_budget=low_budget,
                                         high_budget=high_budget, objective=objective,
                                         min_improvement=min_improvement, solve=solve)
        if not fig.pop("keep"):
          db.reject(fig["rule"], hash=digest, **base, **fig)
          continue
      db.add(splits[family], graph, digest, source=graph.name, **base, **fig)
      db.progress(targets, every=10.0)
  finally:
    db.save()
  db.progress(targets, force=True)
  return db.manifest


__all__ = ["DEFAULT_VALID_FAMILIES", "DEFAULT_TEST_FAMILIES", "DEFAULT_SIZES", "model_family",
           "family_split", "zoo_families", "check_families", "zoo_variants",
           "check_xla_options", "build_xla_dataset"]
