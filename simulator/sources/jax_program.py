"""JAX programs as graphs: the front end and the cost model composed (docs/design.md section 6).

The JAX/HLO front end (`simulator.frontends`) parses a program into a CompGraph with flops and
bytes but no cost; the cost model (`simulator.costmodel`) costs a parsed graph on a device. Neither
imports the other's caller: this module is where the two meet, for `simulator.from_jax` and for
the `jax:` graph source

  jax:package.module:function[,stage=pre|post][,device=v100][,calibration=path]

whose function takes no arguments and returns either a JAX program `(fn, args)` (args a tuple of
arrays or `jax.ShapeDtypeStruct`s) or a ready `CompGraph` (returned as is: stage, device and
calibration apply to programs only). A program becomes the graph of `jax.jit(fn)` at `stage`
("pre": as XLA first sees it, the default; "post": after XLA's passes for the LOCAL backend),
costed by the roofline of `device` (a `simulator.costmodel` device name, default "v100"; "local"
needs `calibration`, a calibration JSON file).

The module is imported with the working directory on `sys.path` (as `python -m` does), so
`jax:my_module:fn` works from the folder holding my_module.py without setting PYTHONPATH.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
from typing import Callable, Iterator, Optional, Tuple

from simulator import costmodel
from simulator.frontends import hlo as hlo_frontend
from simulator.graph import CompGraph

DEFAULT_STAGE = "pre"
DEFAULT_DEVICE = "v100"
STAGES = ("pre", "post")
_TARGET = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*)")


class ModuleNotImportable(ValueError):
  """The module of a `module:function` target does not exist on the import path."""

  def __init__(self, target: str, module: str, cause: str):
    super().__init__(f"graph 'jax:{target}': module {module!r} is not importable ({cause})")
    self.target, self.module, self.cause = target, module, cause


def is_target(text: str) -> bool:
  """Whether `text` has the form `package.module:function`."""
  return _TARGET.fullmatch(text) is not None


def from_jax(fn, *example_args, stage: str = DEFAULT_STAGE, name: Optional[str] = None,
             device_spec=None, calibration=None) -> CompGraph:
  """CompGraph of `jax.jit(fn)` on `example_args` (exported as `simulator.from_jax`).

  Without `device_spec`, `cost` is 0 (to be filled by a cost model later), as from the front end
  (`simulator.frontends.from_jax`). With it (a `simulator.costmodel.DeviceSpec` or a registered
  name such as "v100", or "local" with a `calibration`), `cost` holds the roofline durations on
  that device, computed from the HLO module (op classes of fusions included).

  Raises:
    ValueError: `fn` fails to trace, lower or compile (the message carries XLA's / JAX's), an
      unknown device spec, or a calibration without a device spec.
  """
  if device_spec is None:
    if calibration is not None:
      raise ValueError("from_jax: a calibration needs a device_spec to apply to (e.g. "
                       "device_spec='local')")
    return hlo_frontend.from_jax(fn, *example_args, stage=stage, name=name)
  spec = (costmodel.device_spec(device_spec, calibration) if isinstance(device_spec, str)
          else device_spec)
  full = hlo_frontend.from_jax_full(fn, *example_args, stage=stage, name=name)
  return costmodel.apply_cost_model(full, spec, calibration)


@contextlib.contextmanager
def working_dir_on_path() -> Iterator[None]:
  """The working directory first on `sys.path` for the duration (as `python -m` puts it), unless
  it is already there (also as "", the interpreter's spelling of it)."""
  cwd = os.getcwd()
  if cwd in sys.path or "" in sys.path:
    yield
    return
  sys.path.insert(0, cwd)
  importlib.invalidate_caches()
  try:
    yield
  finally:
    if cwd in sys.path:
      sys.path.remove(cwd)


def import_function(target: str) -> Callable:
  """The function a `package.module:function` target names (call inside `working_dir_on_path`).

  Raises:
    ModuleNotImportable: the module (or a package above it) does not exist.
    ValueError: malformed target, the module fails while importing, or no such function.
  """
  m = _TARGET.fullmatch(target)
  if m is None:
    raise ValueError(f"graph 'jax:{target}': expected 'jax:package.module:function', got "
                     f"{target!r}")
  module_name, func_name = m.groups()
  try:
    module = importlib.import_module(module_name)
  except ModuleNotFoundError as e:
    missing = e.name or ""
    if module_name == missing or module_name.startswith(missing + "."):
      raise ModuleNotImportable(target, module_name, str(e)) from e
    raise ValueError(f"graph 'jax:{target}': importing module {module_name!r} failed: "
                     f"{type(e).__name__}: {e}") from e
  except Exception as e:  # the user's module: name it, keep the cause
    raise ValueError(f"graph 'jax:{target}': importing module {module_name!r} failed: "
                     f"{type(e).__name__}: {e}") from e
  fn = getattr(module, func_name, None)
  if not callable(fn):
    raise ValueError(f"graph 'jax:{target}': module {module_name!r} has no function "
                     f"{func_name!r}")
  return fn


def call_target(target: str):
  """Imports and calls a `package.module:function` target with the working directory on the
  path: its `CompGraph`, or its JAX program `(fn, args)` (args a tuple).

  Raises:
    ModuleNotImportable: no such module.
    ValueError: malformed target, no such function, the function (or importing its module)
      fails (its exception type and message are kept), or a wrong return value.
  """
  with working_dir_on_path():
    fn = import_function(target)
    func_name = target.rpartition(":")[2]
    try:
      out = fn()
    except Exception as e:  # the user's code: name it, keep the cause
      raise ValueError(f"graph 'jax:{target}': calling {func_name}() failed: "
                       f"{type(e).__name__}: {e}") from e
  if isinstance(out, CompGraph):
    return out
  if not (isinstance(out, tuple) and len(out) == 2 and callable(out[0])
          and isinstance(out[1], tuple)):
    got = type(out).__name__
    if isinstance(out, tuple) and len(out) == 2 and callable(out[0]):
      got = f"(fn, args) with args a {type(out[1]).__name__}"
    elif isinstance(out, tuple):
      got = f"a tuple of {len(out)} item(s)" + ("" if len(out) != 2 else
                                                f" whose first, a {type(out[0]).__name__}, "
                                                "is not callable")
    raise ValueError(f"graph 'jax:{target}': {func_name}() must return a CompGraph or a JAX "
                     f"program (fn, args) with args a tuple, got {got}")
  return out


def _cost_model(device: str, calibration: Optional[str]
                ) -> Tuple[costmodel.DeviceSpec, Optional[costmodel.Calibration]]:
  """The device spec and calibration (None without a file) of a spec's `device` and
  `calibration` keys."""
  calib = costmodel.Calibration.load(calibration) if calibration else None
  return costmodel.device_spec(device, calib), calib


def check_settings(target: str, stage: str = DEFAULT_STAGE, device: str = DEFAULT_DEVICE,
                   calibration: Optional[str] = None
                   ) -> Tuple[costmodel.DeviceSpec, Optional[costmodel.Calibration]]:
  """A `jax:` spec's stage, device and calibration checked (the calibration file read):
  (device spec, calibration). `load_jax_program` and `simulator.sources.check_spec` both."""
  if stage not in STAGES:
    raise ValueError(f"graph 'jax:{target}': stage must be one of {', '.join(STAGES)}, got "
                     f"{stage!r}")
  try:
    return _cost_model(device, calibration)
  except ValueError as e:
    raise ValueError(f"graph 'jax:{target}': {e}") from e


def load_jax_program(target: str, stage: str = DEFAULT_STAGE, device: str = DEFAULT_DEVICE,
                     calibration: Optional[str] = None) -> CompGraph:
  """The graph of a `jax:` spec's `package.module:function` (see the module docstring).

  Stage, device and calibration are checked before the user's function runs.

  Raises:
    ModuleNotImportable: no such module.
    ValueError: malformed target, bad stage / device / calibration file, no such function, the
      function (or importing its module) fails (its exception type and message are kept), a
      wrong return value, or a program that fails to lower.
  """
  spec, calib = check_settings(target, stage, device, calibration)
  with working_dir_on_path():
    out = call_target(target)
    if isinstance(out, CompGraph):
      return out
    program, args = out
    try:
      return from_jax(program, *args, stage=stage, name=f"jax:{target}/{stage}/{device}",
                      device_spec=spec, calibration=calib)
    except ValueError as e:
      raise ValueError(f"graph 'jax:{target}': {e}") from e


__all__ = ["DEFAULT_DEVICE", "DEFAULT_STAGE", "ModuleNotImportable", "STAGES", "call_target",
           "check_settings", "from_jax", "import_function", "is_target", "load_jax_program",
           "working_dir_on_path"]
