"""Executors: where the cells of a sweep run (in this process, or as Ray tasks on a cluster).

  executor = executors.make("ray", address="auto", cpus_per_cell=1)
  with executor:
    executor.run(task, items, on_done, before=before)

An executor maps `task(item)` over `items` and calls `on_done(item, result, error)` in THIS
process as each item finishes (`error` is the exception the task raised, else None), in
whatever order they finish. The caller (e.g. `harness.execute`) merges results and writes its
results file in `on_done`, so that the file has one writer and is rewritten atomically after
every cell, whichever executor ran it. `before(item)` runs in this process before the item is
dispatched (e.g. pretraining a checkpoint the cell needs); its exception is reported through
`on_done` like the task's, and the item is then not run.

  local  runs the items one after the other in this process (the default).
  ray    runs every item as one Ray task with its CPU/GPU request, on a local Ray instance
         (started here, with `num_cpus` CPUs or one per core; its workers import the same
         go-jax as this process) or on the cluster at `address` ("auto": the one this machine
         belongs to; "ray://host:10001": a remote one; go-jax must be installed on every node,
         at the same version, for the rows to be the local executor's). Needs
         the optional extra: pip install "go-jax[cluster]". The task must pickle: the task
         object is sent to the workers and rebuilds there what it needs (`harness.CellTask`
         keeps a cache per worker process). Workers run JAX on the CPU unless GPUs are
         requested, with as many XLA CPU threads and devices as the cells' CPU request, so that
         concurrent cells do not oversubscribe the cores.

Executors are registered in EXECUTORS by name (`make`, `names`); a launcher exposes them with
`experiments.cli.define_executor_flags`.
"""

from __future__ import annotations

import math
import os
import pickle
import sys
import warnings
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from absl import logging

# What a launcher prints when --executor=ray is asked for without Ray installed.
RAY_MISSING = '--executor=ray needs Ray: pip install "go-jax[cluster]"'

OnDone = Callable[[Any, Any, Optional[BaseException]], None]


class Executor:
  """Maps a task over items, reporting each finished item to the caller (module docstring).

  A context manager: `__enter__` acquires what the executor needs (a Ray connection), and
  `__exit__` releases it. `run` outside a `with` block enters and exits around itself.
  """

  name = "base"

  def __enter__(self) -> "Executor":
    return self

  def __exit__(self, *exc) -> None:
    pass

  def run(self, task: Callable[[Any], Any], items: Sequence[Any], on_done: OnDone,
          before: Optional[Callable[[Any], None]] = None) -> None:
    raise NotImplementedError


class LocalExecutor(Executor):
  """Runs the items one after the other in this process (exceptions go to `on_done`)."""

  name = "local"

  def __init__(self, **options):
    if options:
      raise ValueError(f"executor 'local' takes no options, got {sorted(options)}")

  def run(self, task, items, on_done, before=None) -> None:
    for item in items:
      try:
        if before is not None:
          before(item)
        result = task(item)
      except Exception as exc:  # pylint: disable=broad-except
        on_done(item, None, exc)
        continue
      finally:
        release_compiled_code()
      on_done(item, result, None)


def release_compiled_code() -> None:
  """After every cell, in the process that ran it: JAX's caches are dropped when the process
  nears the kernel's memory-mapping limit (`simulator.runtime.release_compiled_code_if_needed`),
  so that a sweep of hundreds of shapes does not fail with "Cannot allocate memory"."""
  from simulator import runtime  # pylint: disable=g-import-not-at-top
  runtime.release_compiled_code_if_needed()


_PROCESS_CACHES: Dict[Tuple[str, str], Any] = {}


def process_cache(namespace: str, cfg: Any, make: Callable[[], Any]) -> Any:
  """This process's object for (`namespace`, `cfg`), made by `make()` on first use and kept:
  what a task rebuilds once per worker process (graphs, topologies, warmed-up shapes) for all
  the cells of one sweep config that the process runs. `cfg` is keyed by its JSON text."""
  import json  # pylint: disable=g-import-not-at-top
  key = (namespace, json.dumps(cfg, sort_keys=True, default=repr))
  if key not in _PROCESS_CACHES:
    _PROCESS_CACHES[key] = make()
  return _PROCESS_CACHES[key]


# ------------------------------------------------------------------ Ray
def import_ray():
  """The `ray` module, or ValueError(RAY_MISSING) where it is not installed."""
  try:
    import ray  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ValueError(RAY_MISSING) from e
  return ray


def worker_env(cpus_per_cell: float, gpus_per_cell: float) -> Dict[str, str]:
  """Environment of the Ray worker processes: JAX on the CPU unless GPUs are requested, and
  XLA's CPU work on one thread when a cell asks for one CPU (else XLA's thread pool would take
  every core of the machine in every worker). The driver's persistent compilation cache, if it
  has one (e.g. regal_table's --compilation_cache), is the workers' too, so that a program one
  worker compiled is not compiled again by the next (on a cluster the folder must be shared)."""
  env = {}
  if not gpus_per_cell:
    env["JAX_PLATFORMS"] = "cpu"
  if cpus_per_cell <= 1:
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
      env["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false".strip()
  cache = _compilation_cache_dir()
  if cache:
    env["JAX_COMPILATION_CACHE_DIR"] = cache
  return env


def _compilation_cache_dir() -> Optional[str]:
  """The driver's JAX persistent compilation cache folder, or None (JAX is not imported for it)."""
  jax = sys.modules.get("jax")
  configured = getattr(getattr(jax, "config", None), "jax_compilation_cache_dir", None)
  return configured or os.environ.get("JAX_COMPILATION_CACHE_DIR") or None


def configure_worker(cpus_per_cell: float) -> None:
  """Once per worker process, before its first JAX computation: as many CPU devices as the
  cell's CPUs (`simulator.runtime.configure_cpu_devices`), so that a batch is split only
  across the cores the cell was given."""
  global _WORKER_CONFIGURED
  if _WORKER_CONFIGURED:
    return
  _WORKER_CONFIGURED = True
  from simulator import runtime  # pylint: disable=g-import-not-at-top
  runtime.configure_cpu_devices(max(1, int(cpus_per_cell)))


_WORKER_CONFIGURED = False


def _guarded(task, item, cpus_per_cell):
  """The Ray task body: ("ok", result) or ("error", exception), so that a cell's exception
  reaches the driver as itself (its type and text), not wrapped in Ray's RayTaskError. One
  that would not come back whole (it does not pickle, or its class cannot be rebuilt from its
  args: an __init__ with other parameters, which the driver's ray.get met as a RaySystemError)
  travels as a RuntimeError with the same "Type: text" line as `harness.error_text`."""
  configure_worker(cpus_per_cell)
  try:
    return "ok", task(item)
  except Exception as exc:  # pylint: disable=broad-except
    try:
      pickle.loads(pickle.dumps(exc))
    except Exception:  # pylint: disable=broad-except
      exc = RuntimeError(f"{type(exc).__name__}: {' '.join(str(exc).split())}")
    return "error", exc
  finally:
    release_compiled_code()  # a Ray worker process runs many cells too


REACH_TIMEOUT_S = 5.0  # how long `check_reachable` waits for a cluster's port and its answer
# An HTTP/2 client's first bytes (the connection preface and an empty SETTINGS frame): a gRPC
# server, as Ray's GCS and Ray Client servers are, answers with a SETTINGS frame of its own.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_HTTP2_SETTINGS = 4  # the frame type byte (the 4th of a frame's 9-byte header)


def check_reachable(address: str) -> None:
  """A quick check that a `HOST:PORT` (or `ray://HOST:PORT`) cluster address answers as a Ray
  cluster does, before `ray.init`, which retries an unreachable one for about a minute with a
  screen of warnings, and one where another service listens (the dashboard's port 8265, a
  typo'd port) for many minutes. "auto" and other forms are left to Ray, and so is what
  answers where Ray's TLS is on ($RAY_USE_TLS: no plain HTTP/2 to probe with).

  Raises:
    ConnectionError: the host does not resolve, nothing listens on the port, or what listens
      does not answer as a gRPC server (one line).
  """
  import socket  # pylint: disable=g-import-not-at-top
  host, sep, port = address.split("://", 1)[-1].rpartition(":")
  if not sep or not host or not port.isdigit():
    return
  try:
    with socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_TIMEOUT_S) as sock:
      if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return
      head = b""
      try:
        sock.sendall(_HTTP2_PREFACE)
        while len(head) < 9:
          chunk = sock.recv(9 - len(head))
          if not chunk:
            break
          head += chunk
      except OSError:  # a timeout, a reset: no answer
        pass
  except OSError as e:
    raise ConnectionError(f"no Ray cluster at {address!r}: cannot connect to {host}:{port} "
                          f"({e.strerror or e})") from e
  if len(head) < 9 or head[3] != _HTTP2_SETTINGS:
    raise ConnectionError(f"no Ray cluster at {address!r}: {host}:{port} accepts connections but "
                          "does not answer as Ray's gRPC server does (another service's port, "
                          "e.g. the dashboard's 8265? Ray's is 6379, Ray Client's 10001)")


def auto_address() -> Optional[Tuple[str, str]]:
  """(address, where it comes from) of the cluster that `ray.init(address="auto")` joins, as
  far as it can be told without Ray's help: $RAY_ADDRESS, else the address the last `ray start`
  on this machine recorded (a file Ray leaves behind when that cluster was killed, not
  stopped). None where neither is set: Ray then looks for running instances itself."""
  env = os.environ.get("RAY_ADDRESS")
  if env:
    return env, "$RAY_ADDRESS"
  try:
    from ray._private import utils  # pylint: disable=g-import-not-at-top
    recorded = utils.read_ray_address()
  except Exception:  # pylint: disable=broad-except  # a Ray without it: left to Ray
    return None
  return (recorded, "the last `ray start` on this machine") if recorded else None


class RayExecutor(Executor):
  """Every item one Ray task, results collected with `ray.wait` as they finish.

  Args:
    address: a running cluster's address ("auto", "HOST:PORT", "ray://HOST:10001"); None
      starts a local Ray instance (and stops it on exit).
    num_cpus: CPUs of the local instance (None: one per core); refused with `address`.
    cpus_per_cell, gpus_per_cell: each task's resource request (Ray schedules as many tasks
      at once as the resources allow).
  """

  name = "ray"

  def __init__(self, address: Optional[str] = None, num_cpus: Optional[int] = None,
               cpus_per_cell: float = 1.0, gpus_per_cell: float = 0.0):
    if not 0 < cpus_per_cell < math.inf:
      raise ValueError(f"executor 'ray': cpus_per_cell must be finite and > 0, got "
                       f"{cpus_per_cell}")
    if not 0 <= gpus_per_cell < math.inf:
      raise ValueError(f"executor 'ray': gpus_per_cell must be finite and >= 0, got "
                       f"{gpus_per_cell}")
    for name, value in (("cpus_per_cell", cpus_per_cell), ("gpus_per_cell", gpus_per_cell)):
      if abs(value * 1e4 - round(value * 1e4)) > 1e-6:  # Ray's resolution of fractions
        raise ValueError(f"executor 'ray': {name} must be a multiple of 0.0001, got {value}")
    if num_cpus is not None and num_cpus < 1:
      raise ValueError(f"executor 'ray': num_cpus must be >= 1, got {num_cpus}")
    if num_cpus is not None and address:  # it would be ignored: say so rather than not cap
      raise ValueError(f"executor 'ray': num_cpus (--ray_num_cpus) sizes a local instance; "
                       f"the cluster at {address!r} has its own CPUs (--cpus_per_cell "
                       "is each cell's request there)")
    self._ray = import_ray()  # fails now, before any work, where Ray is missing
    self.address = address or None
    self.num_cpus = num_cpus
    self.cpus_per_cell = float(cpus_per_cell)
    self.gpus_per_cell = float(gpus_per_cell)
    self._started = False  # whether this executor called ray.init (and so shuts it down)

  def __enter__(self) -> "RayExecutor":
    ray = self._ray
    env = {"env_vars": worker_env(self.cpus_per_cell, self.gpus_per_cell)}
    if ray.is_initialized():  # the caller's Ray session: used as it is
      return self
    options = dict(runtime_env=env, log_to_driver=True)
    if self.address:
      found = auto_address() if self.address == "auto" else None
      try:
        check_reachable(found[0] if found else self.address)
      except ConnectionError as e:
        if not found:
          raise
        raise ConnectionError(f"--ray_address=auto is {found[0]!r} ({found[1]}), and {e}") from e
      options.update(address=self.address)
    else:  # workers on this machine import the same go-jax as this process
      root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
      env["env_vars"]["PYTHONPATH"] = os.pathsep.join(
          [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
      # "local": a new instance even where $RAY_ADDRESS is set or `ray start` ran on this
      # machine (address None would join that cluster, and refuse num_cpus there)
      options.update(address="local", num_cpus=self.num_cpus or os.cpu_count() or 1,
                     include_dashboard=False)
    with warnings.catch_warnings():  # Ray starts its processes with fork+exec, which is safe
      warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called",
                              category=RuntimeWarning)
      try:
        ray.init(**options)
      except ConnectionError as e:  # no cluster there: one line naming the address
        raise ConnectionError(f"no Ray cluster at {self.address!r}: "
                              f"{' '.join(str(e).split())}") from e
    self._started = True
    resources = ray.cluster_resources()
    logging.info("ray: %s with %s CPUs, %s GPUs; %g CPU / %g GPU per cell",
                 self.address or "local instance", resources.get("CPU", 0),
                 resources.get("GPU", 0), self.cpus_per_cell, self.gpus_per_cell)
    where = self.address or "local instance"
    short = [f"{want:g} {kind} per cell, the {where} has {resources.get(kind, 0):g}"
             for kind, want in (("CPU", self.cpus_per_cell), ("GPU", self.gpus_per_cell))
             if want > resources.get(kind, 0)]
    if short and not self.address:  # no task could ever be scheduled: Ray would wait forever
      self.__exit__()
      raise ValueError(f"executor 'ray': {'; '.join(short)} (lower --cpus_per_cell / "
                       "--gpus_per_cell or raise --ray_num_cpus)")
    if short:  # a cluster may grow (an autoscaler): say why nothing starts, then wait
      logging.warning("ray: %s; no cell starts until the cluster has that much", "; ".join(short))
    return self

  def __exit__(self, *exc) -> None:
    if self._started:
      self._ray.shutdown()
      self._started = False

  def run(self, task, items, on_done, before=None) -> None:
    if not self._ray.is_initialized():
      with self:
        return self.run(task, items, on_done, before)
    ray = self._ray
    remote = ray.remote(_guarded).options(num_cpus=self.cpus_per_cell,
                                          num_gpus=self.gpus_per_cell, max_retries=0)
    task_ref = ray.put(task)  # sent once, not once per item
    pending: Dict[Any, Any] = {}
    try:
      for item in items:
        if before is not None:
          try:
            before(item)  # in this process, before dispatch (e.g. pretraining)
          except Exception as exc:  # pylint: disable=broad-except
            on_done(item, None, exc)
            continue
        pending[remote.remote(task_ref, item, self.cpus_per_cell)] = item
        pending = self._collect(pending, on_done, timeout=0)
      while pending:
        pending = self._collect(pending, on_done, timeout=None)
    finally:
      for ref in pending:  # an interruption: what has not finished is cancelled
        ray.cancel(ref, force=True)

  def _collect(self, pending, on_done, timeout):
    """Reports the finished tasks of `pending` (waiting for one unless timeout=0); returns the
    rest."""
    ray = self._ray
    ready, _ = ray.wait(list(pending), num_returns=1 if timeout is None else len(pending),
                        timeout=timeout)
    for ref in ready:
      item = pending.pop(ref)
      try:
        status, value = ray.get(ref)
      except ray.exceptions.RayError as exc:  # the worker died (out of memory, killed, ...)
        on_done(item, None, RuntimeError(f"ray task failed: {type(exc).__name__}: "
                                         f"{' '.join(str(exc).split())[:500]}"))
        continue
      if status == "ok":
        on_done(item, value, None)
      else:
        on_done(item, None, value)
    return pending


EXECUTORS: Dict[str, Callable[..., Executor]] = {"local": LocalExecutor, "ray": RayExecutor}


def names() -> Sequence[str]:
  return list(EXECUTORS)


def make(name: str = "local", **options) -> Executor:
  """The executor registered as `name`, built with `options`; ValueError for an unknown name
  (or, for "ray", RAY_MISSING where Ray is not installed)."""
  if name not in EXECUTORS:
    raise ValueError(f"unknown executor {name!r}; executors: {names()}")
  return EXECUTORS[name](**options)
