"""What every go-jax launcher shares: entry point, help, one-line errors and the --out check.

A launcher (experiments/NAME.py) ends with

  def run():
    cli.run(main, __doc__)

and `cli.run` then, for a console script (`go-jax-place`) exactly as for `python -m`:

* `--help` prints the launcher's module docstring (its examples) and its own flags with their
  help text. absl shows the `__main__` module's docstring and key flags, and under a console
  script `__main__` is the generated wrapper, so the launcher's are installed there.
* The working directory goes first on the import path, as `python -m` does, so that
  `--graph=my_module:fn` finds `my_module.py` in the folder the command is started from.
* Bad input ends the command with ONE line on stderr, `<prog>: error: <what is wrong>`, and exit
  status 1: a `ValueError`, `app.UsageError` or `OSError` from `main`, a flag that does not
  parse, a typo in a config override (`--config.nosuch=3`). `--v=1` adds the traceback.
  `--help` / `--helpfull` exit with status 0 (absl's own exit 1), also given in a --flagfile.
* Third-party chatter is held back: orbax's INFO lines and JAX's "Unable to initialize backend"
  line (both below WARNING); warnings and errors still show. JAX_PLATFORMS is left to the user
  (setting it would hide a GPU).

`check_out` (call it first in `main`) finds an unusable output folder or file before any work.
"""

from __future__ import annotations

import logging as std_logging
import math
import os
import re
import signal
import sys
import tempfile
import threading
import time
from typing import Callable, List, Optional, Sequence

from absl import app, flags
from absl import logging

FLAGS = flags.FLAGS

# Loggers whose records below WARNING are dropped (by logger-name prefix).
QUIET_LOGGERS = ("jax._src.xla_bridge", "orbax")
# Packages whose absl-logged records below WARNING are dropped (by source path): orbax logs
# through absl's logger, so its records carry absl's name and only the path says where they are
# from.
QUIET_PACKAGES = ("orbax",)

GRAPH_IMPORT_HELP = (
    "A 'package.module:function' graph is imported with the working directory first on the "
    "import path (as `python -m` does), so a module beside you needs no PYTHONPATH.")

# Flag-parse and override errors of ml_collections config files found while a launcher is
# imported (config_flags reads sys.argv when the flag is defined); reported by `run`.
_DEFERRED_ERRORS: List[str] = []


def prog_name(argv0: Optional[str] = None) -> str:
  """The command's name as the user typed it (go-jax-place, or the launcher module)."""
  name = os.path.basename(argv0 if argv0 is not None else (sys.argv[0] if sys.argv else ""))
  return name or "go-jax"


def one_line(error: BaseException) -> str:
  """The error's text on one line (whitespace runs collapsed), its type when it has no text."""
  text = " ".join(str(error).split())
  if isinstance(error, KeyError) and len(error.args) == 1:
    text = str(error.args[0])
  return text or type(error).__name__


def fail(message: str, exitcode: int = 1) -> None:
  """Prints `<prog>: error: <message>` as one line on stderr and exits with `exitcode`."""
  message = " ".join(message.split())
  message = _config_file_error(message) or message
  print(f"{prog_name()}: error: {message}", file=sys.stderr, flush=True)
  sys.exit(exitcode)


# ------------------------------------------------------------------ help
def topology_help(text: str) -> str:
  """`text` followed by the topology preset names (for a --topology flag's help)."""
  from simulator import topology  # pylint: disable=g-import-not-at-top
  return f"{text} Presets: {', '.join(sorted(topology.available_presets()))}."


def _install_help(module_name: str, doc: Optional[str]) -> None:
  """Makes absl's --help show `doc` and the flags of `module_name` when `__main__` is not it."""
  main_module = sys.modules.get("__main__")
  if doc and main_module is not None and main_module.__name__ != module_name:
    main_module.__doc__ = doc
  key = sys.argv[0] if sys.argv else module_name
  owned = list(FLAGS.flags_by_module_dict().get(module_name, ()))
  shared = list(FLAGS.flags_by_module_dict().get("go_jax.distributed", ()))  # if defined
  for flag in owned + _config_flags() + shared:
    FLAGS.register_key_flag_for_module(key, flag)


def _config_flags() -> list:
  """The config-file flags of `define_config_file` (registered under this module's name)."""
  return list(FLAGS.flags_by_module_dict().get(__name__, ()))


# ------------------------------------------------------------------ config files
def define_config_file(name: str, default: str, help_string: str):
  """`config_flags.DEFINE_config_file`, but a bad `--NAME.FIELD=VALUE` override on the command
  line (read by ml_collections while the launcher is imported) becomes a one-line error of
  `run` instead of a traceback at import."""
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  try:
    return config_flags.DEFINE_config_file(name, default=default, help_string=help_string)
  except Exception as e:  # pylint: disable=broad-except
    # What ml_collections raises for a bad override varies (AttributeError for an unknown field,
    # KeyError, TypeError, ValueError, FlagOrderError); the flag is then redefined without the
    # command line and the error reported, naming the override, once flags are parsed.
    _DEFERRED_ERRORS.append(_override_error(name, sys.argv, e))
    return config_flags.DEFINE_config_file(name, default=default, help_string=help_string,
                                           sys_argv=[sys.argv[0] if sys.argv else name])


def _override_error(name: str, argv: Sequence[str], error: Exception) -> str:
  """One line naming the `--NAME.FIELD=VALUE` override of `argv` that `error` is about."""
  overrides = [a for a in argv[1:] if a.lstrip("-").startswith(f"{name}.")]
  if isinstance(error, (AttributeError, KeyError)):  # an unknown field
    field = one_line(error).strip("\"'")
    bad = [a for a in overrides if a.lstrip("-").split("=", 1)[0].split(".")[-1] == field]
    return f"{(bad or overrides or ['--' + name])[0]}: the config has no field {field!r}"
  return f"{' '.join(overrides) or '--' + name}: {type(error).__name__}: {one_line(error)}"


# absl's help flags: each prints its text and leaves by SystemExit(1) while flags are parsed.
HELP_FLAGS = ("help", "?", "helpshort", "helpfull", "helpxml")


def _asks_for_help(argv: Sequence[str]) -> bool:
  """Whether `argv` (before a "--") holds one of absl's HELP_FLAGS, bare or =true, =t or =1."""
  for arg in argv[1:]:
    if arg == "--":
      return False
    name, _, value = arg.lstrip("-").partition("=")
    if arg.startswith("-") and name in HELP_FLAGS and value.lower() in ("", "true", "t", "1"):
      return True
  return False


def _expand_flagfiles(argv: Sequence[str]) -> List[str]:
  """`argv` with every --flagfile (nested ones too, '--flagfile=F' or '--flagfile F') replaced
  by its lines, as absl reads them, so that a help flag given in a flagfile is seen; `argv`
  itself where the files no longer read (absl then failed for its own reason, not help)."""
  try:
    return [argv[0]] + FLAGS.read_flags_from_files(list(argv[1:]), force_gnu=False)
  except Exception:  # pylint: disable=broad-except
    return list(argv)


def _parse_flags(argv: Sequence[str]) -> List[str]:
  """absl's flag parsing, every error one line; --help, --helpshort, --helpfull and --helpxml
  print and exit with status 0 (absl exits 1 for them: a shell, `make` or a CI step that asks
  a launcher for its help must not see a failure)."""
  if _DEFERRED_ERRORS:
    fail(_DEFERRED_ERRORS[0])
  try:
    try:
      rest = FLAGS(argv)
    except SystemExit as e:
      if e.code == 1 and (_asks_for_help(argv) or _asks_for_help(_expand_flagfiles(argv))):
        sys.exit(0)
      raise
    _refuse_nan_flags(argv)
    return rest
  except flags.Error as e:
    fail(_config_traceback_error(str(e)) or one_line(e))
  except Exception as e:  # pylint: disable=broad-except
    # A config file's own error (a SyntaxError, or anything its get_config raises) or a bad
    # override parsed with an explicit --config=FILE: any type, reported on one line.
    names = [f.name for f in _config_flags()]
    overridden = [n for n in names if any(a.lstrip("-").startswith(f"{n}.") for a in argv[1:])]
    if overridden and isinstance(e, (AttributeError, KeyError)):
      fail(_override_error(overridden[0], argv, e))
    if isinstance(e, AttributeError) and "get_config" in str(e):
      name, arg = _config_argument(argv, names)
      fail(f"--{name}={arg}: the config file defines no get_config() (it must return the "
           "ml_collections ConfigDict)")
    fail(f"bad flag value: {type(e).__name__}: {one_line(e)}")
  return []  # not reached: fail exits


# Float flags for which 'inf' is a value (unbounded); every other float flag must be finite.
INFINITE_FLAGS = frozenset({"mem_capacity"})


def _refuse_nan_flags(argv: Sequence[str] = ()) -> None:
  """Every float flag given as nan stops the launcher (absl's bounds let NaN through: it
  compares false with either bound, so '--finetune_seconds=nan' would run with a nan
  budget), and so does one given as inf (a budget or rate of inf ran, then failed writing its
  results) unless 'inf' means unbounded for it (`INFINITE_FLAGS`); there a number that
  overflows to inf ('1e400') is refused too, rather than read as unbounded."""
  for name in sorted(FLAGS):
    flag = FLAGS[name]
    if not (flag.present and isinstance(flag.value, float)) or math.isfinite(flag.value):
      continue
    if math.isnan(flag.value):
      fail(f"flag --{name}=nan: not a number; give a value")
    text = _flag_text(argv, name)
    if name not in INFINITE_FLAGS:
      fail(f"flag --{name}={text or flag.value}: not a finite number; give a finite value")
    if text is not None and text.strip().lstrip("+-").lower() not in ("inf", "infinity"):
      fail(f"flag --{name}={text}: overflows to inf (above 1.8e308); write 'inf' for "
           "unbounded, or a finite value")


def _flag_items(argv: Sequence[str]):
  """(name, text) of every '--name=VALUE' or '--name VALUE' on the command line, in order
  (text None for a trailing '--name')."""
  args = list(argv[1:])
  for i, a in enumerate(args):
    if a.startswith("-"):
      key, eq, value = a.lstrip("-").partition("=")
      yield key, value if eq else (args[i + 1] if i + 1 < len(args) else None)


def _flag_text(argv: Sequence[str], name: str) -> Optional[str]:
  """The text of the last '--name=VALUE' or '--name VALUE' on the command line; None when
  not found (e.g. given in a flagfile)."""
  texts = [text for key, text in _flag_items(argv) if key == name]
  return texts[-1] if texts else None


def _config_argument(argv: Sequence[str], names: Sequence[str]):
  """(flag, value) of the config-file flag on the command line ('--config=F' or '--config F');
  (the first config flag, '?') where none is given."""
  for key, text in _flag_items(argv):
    if key in names and text is not None:
      return key, text
  return (names[0] if names else "config"), "?"


def _config_traceback_error(text: str) -> Optional[str]:
  """ml_collections' message for a config file whose code raised (e.g. get_config refusing its
  argument), which quotes the whole traceback, as 'flag --config=ARG: ERROR' with only the
  exception (the lines after the traceback's last indented frame line); None for others."""
  if "Error whilst parsing config file" not in text or "Traceback (most recent call" not in text:
    return None
  flag = re.match(r"flag (--\S+?): Error whilst", text)
  lines = text.rstrip().splitlines()
  frame = max((i for i, line in enumerate(lines) if line.startswith(" ")), default=-1)
  error = " ".join(" ".join(lines[frame + 1:]).split())
  if not error:
    return None
  return f"flag {flag.group(1)}: {error}" if flag else error


def _config_file_error(text: str) -> Optional[str]:
  """ml_collections' long message for a config file that does not load, as '--config=PATH:
  cannot load the config file: WHY'; None for other messages."""
  match = re.search(r"Attempted \[[^\]]*\]:\s*(\S+)\s+(.*?)(?=\s*Attempted \[|$)", text)
  if "Failed loading config file" not in text or not match:
    return None
  return f"--config={match.group(1)}: cannot load the config file: {match.group(2)}"


# ------------------------------------------------------------------ noise
class _BelowWarningFrom(std_logging.Filter):
  """Drops records below WARNING that come from files of the given packages."""

  def __init__(self, packages: Sequence[str]):
    super().__init__()
    self._parts = tuple(f"{os.sep}{p}{os.sep}" for p in packages)

  def filter(self, record: std_logging.LogRecord) -> bool:
    if record.levelno >= std_logging.WARNING:
      return True
    return not any(p in (record.pathname or "") for p in self._parts)


def quiet_third_party() -> None:
  """Holds back the INFO chatter of orbax and JAX's backend probing (warnings still show)."""
  for name in QUIET_LOGGERS:
    std_logging.getLogger(name).setLevel(std_logging.WARNING)
  absl_logger = logging.get_absl_logger()
  if not any(isinstance(f, _BelowWarningFrom) for f in absl_logger.filters):
    absl_logger.addFilter(_BelowWarningFrom(QUIET_PACKAGES))


# ------------------------------------------------------------------ output check
def check_out(path: str, *, flag: str = "out", is_file: bool = False,
              files: Sequence[str] = ()) -> str:
  """Checks that an output folder (or, with is_file, an output file's folder) can be written:
  creates the folder and writes and removes a probe file in it. Call it before any work.

  Returns the absolute path. Raises app.UsageError naming the flag: the path is an existing
  file (a folder is wanted) or an existing folder (a file is wanted), or it cannot be created or
  written, or one of `files` (names the launcher writes in the folder) is a folder there (the
  write would fail only after the work, and after the other files).
  """
  if not path:
    raise app.UsageError(f"--{flag} is empty")
  path = os.path.abspath(os.path.expanduser(path))
  if is_file:
    if os.path.isdir(path):
      raise app.UsageError(f"--{flag}={path}: is a folder; give a file path")
    folder = os.path.dirname(path)
  else:
    if os.path.exists(path) and not os.path.isdir(path):
      raise app.UsageError(f"--{flag}={path}: exists and is not a folder")
    folder = path
  try:
    os.makedirs(folder, exist_ok=True)
    fd, probe = tempfile.mkstemp(prefix=".go_jax_probe_", dir=folder)
    os.close(fd)
    os.remove(probe)
  except OSError as e:
    raise app.UsageError(f"--{flag}={path}: cannot write there ({e.strerror or e})") from e
  for name in files:
    if os.path.isdir(os.path.join(folder, name)):
      raise app.UsageError(f"--{flag}={path}: {name} there is a folder, where this launcher "
                           "writes a file; move it away or give another folder")
  return path


def check_zoo_models(names: Sequence[str], flag: str = "models") -> None:
  """app.UsageError naming the --models entries that are not zoo models (and the zoo's)."""
  from simulator import zoo  # pylint: disable=g-import-not-at-top
  unknown = sorted(set(names) - set(zoo.available()))
  if unknown:
    raise app.UsageError(f"--{flag}: unknown zoo model(s) {unknown}; available: "
                         f"{', '.join(sorted(zoo.available()))}")


def check_results_out(path: str, launcher: str, files: Sequence[str] = ()) -> None:
  """`check_out` for a results folder (results.json, .csv, .md and `files`), which must also
  not hold another launcher's results (go_jax.results): both fail before any work, as
  app.UsageError."""
  from go_jax import results  # pylint: disable=g-import-not-at-top
  check_out(path, files=(results.JSON_NAME, results.CSV_NAME, results.MD_NAME, *files))
  try:
    results.load(path, launcher)
  except ValueError as e:
    raise app.UsageError(str(e)) from e


# ------------------------------------------------------------------ entry point
def _verbose() -> bool:
  try:
    return FLAGS["verbosity"].value >= 1
  except (KeyError, flags.UnparsedFlagAccessError):
    return False


# How long an interrupted launcher waits for the computations still running (`_settle_jax`).
SETTLE_SECONDS = 60.0


def _settle_jax(timeout: Optional[float] = None) -> bool:
  """Waits for the computations JAX still runs (dispatch is asynchronous); True when they all
  finished. An interrupt can arrive while a fine-tuning step runs on XLA's threads; exiting
  then tore the interpreter down under them, a segmentation fault after the one-line message
  (exit status 139). The wait is bounded (`timeout` seconds, default SETTLE_SECONDS; a second interrupt ends it too):
  a computation of minutes (a compile for thousands of devices) would otherwise hold the
  interrupted run; then it returns False and the caller leaves without the teardown."""
  jax = sys.modules.get("jax")
  if jax is None:
    return True
  deadline = time.monotonic() + (SETTLE_SECONDS if timeout is None else timeout)
  try:
    pending = list(jax.live_arrays())
    while pending and time.monotonic() < deadline:
      pending = [a for a in pending if not _is_ready(a)]
      if pending:
        time.sleep(0.02)
    return not pending
  except KeyboardInterrupt:  # a second Ctrl-C or SIGTERM: stop waiting
    return False
  except Exception:  # pylint: disable=broad-except  # a deleted or failed buffer: exit anyway
    return True


def _is_ready(array) -> bool:
  try:
    return array.is_deleted() or array.is_ready()
  except Exception:  # pylint: disable=broad-except  # a failed computation: nothing to wait for
    return True


# True in a process that `run` started as a launcher (not a test calling `wrap_main`).
_LAUNCHED = False


def _exit_interrupted(message: str) -> None:
  """Prints the one line and leaves with status 130 at once (os._exit), without the
  interpreter's teardown: XLA's threads may still compile or compute (an interrupt between
  two cells of a sweep, a wait cut short by `_settle_jax`), and tearing the interpreter down
  under them was a segmentation fault (status 139) after the message. Nothing is lost: results
  files and checkpoints are written atomically and trainers have saved theirs by now (their
  `finally`), and the streams and log handlers are flushed here."""
  print(f"{prog_name()}: error: {' '.join(message.split())}", file=sys.stderr, flush=True)
  for flush in (sys.stdout.flush, sys.stderr.flush, logging.flush):
    try:
      flush()
    except Exception:  # pylint: disable=broad-except  # a closed stream: leave anyway
      pass
  os._exit(130)  # pylint: disable=protected-access


def wrap_main(main: Callable[[List[str]], None]) -> Callable[[List[str]], None]:
  """`main` with its bad-input errors turned into one line and exit status 1."""

  def wrapped(argv: List[str]) -> None:
    try:
      main(argv)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: one line, the shell's status for SIGINT
      settled = _settle_jax()
      message = ("interrupted (training runs and resumable sweeps keep what they finished: "
                 "rerun the command to resume)")
      if _LAUNCHED or not settled:
        _exit_interrupted(message)
      fail(message, exitcode=130)  # called in-process (tests): SystemExit, as for errors
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as `cat` does
      os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
      sys.exit(1)
    except (app.UsageError, ValueError, OSError) as e:
      if _verbose():
        logging.exception("%s failed", prog_name())
      fail(one_line(e))

  return wrapped


def prepare(module_name: str, doc: Optional[str] = None) -> None:
  """Everything `run` sets up before parsing flags (import path, help, noise)."""
  cwd = os.getcwd()
  if cwd not in sys.path and "" not in sys.path[:1]:
    sys.path.insert(0, cwd)
  _install_help(module_name, doc)
  quiet_third_party()


def _terminate_as_interrupt() -> None:
  """SIGTERM (`kill`, a batch scheduler's pre-emption) raises KeyboardInterrupt as Ctrl-C does,
  so that a run stopped either way unwinds the same path: trainers checkpoint the updates done
  (`training.loop._run_chunks`) and results files stay whole (they are written atomically).

  A Python signal handler runs at the main thread's next bytecode, and that can be inside a
  garbage-collection callback or a `__del__` (JAX registers both): an exception raised there is
  "ignored" by the interpreter, and the run went on to finish with status 0. `_redeliver_lost`
  sees such a lost KeyboardInterrupt and delivers it again."""
  if threading.current_thread() is not threading.main_thread():
    return  # signal handlers can only be installed from the main thread

  def handler(signum, frame):  # pylint: disable=unused-argument
    raise KeyboardInterrupt(f"signal {signum}")
  signal.signal(signal.SIGTERM, handler)
  if not getattr(sys.unraisablehook, "_go_jax_redelivers", False):
    sys.unraisablehook = _redeliver_lost(sys.unraisablehook)


def _redeliver_lost(previous: Callable[..., None]) -> Callable[..., None]:
  """An unraisable-exception hook (`sys.unraisablehook`): a KeyboardInterrupt the interpreter
  could not raise (it came up in a gc callback or a finaliser) is sent again, as SIGTERM to the
  main thread, a moment later from a helper thread: sent from the hook itself, the handler
  would run inside the hook and be lost once more. Should the next one land in such code too,
  this hook sees it again. Any other unraisable exception goes to `previous`."""

  def resend() -> None:
    time.sleep(0.05)  # the hook and the callback that lost the interrupt have returned
    signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)

  def hook(unraisable) -> None:
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
      threading.Thread(target=resend, name="go-jax-interrupt", daemon=True).start()
      return
    previous(unraisable)

  hook._go_jax_redelivers = True  # pylint: disable=protected-access
  return hook


def run(main: Callable[[List[str]], None], doc: Optional[str] = None,
        argv: Optional[Sequence[str]] = None) -> None:
  """Console-script and `python -m` entry point of a launcher (module docstring)."""
  global _LAUNCHED
  _LAUNCHED = True  # an interrupt leaves by _exit_interrupted
  module = main.__module__ if main.__module__ != "__main__" else sys.argv[0]
  cache = define_compilation_cache_flag(module)  # before prepare: --help lists it
  prepare(module, doc)
  _terminate_as_interrupt()

  def main_with_cache(args: List[str]) -> None:
    if cache:
      use_compilation_cache(FLAGS.compilation_cache)
    main(args)

  app.run(wrap_main(main_with_cache), argv=list(argv) if argv is not None else None,
          flags_parser=_parse_flags)


# ------------------------------------------------------------------ where the work runs
# The compilation cache, several-process and executor flags live in experiments/cli_runtime.py;
# re-exported here, where the launchers find them. Imported last: it uses one_line from above.
from experiments.cli_runtime import (  # pylint: disable=g-import-not-at-top,wrong-import-position
    COMPILATION_CACHE_HELP, RAY_ONLY_FLAGS, define_compilation_cache_flag,
    define_distributed_flags, define_executor_flags, executor_from_flags, initialize_distributed,
    multi_process, use_compilation_cache)

# The sweep and table launchers' bookkeeping (result files, resuming, machine info, device
# counts) lives in experiments/cli_tables.py; re-exported here, where the launchers find it.
# Imported last: it uses fail and one_line from above.
from experiments.cli_tables import (  # pylint: disable=g-import-not-at-top,wrong-import-position
    duration_text, fail_if_every_cell_failed, load_resumable, machine_info, nvlink_counts, plain,
    run_resumable_table, started)
