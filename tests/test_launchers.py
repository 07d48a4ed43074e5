"""Every launcher tried as a new user would: help, bad input, output folder, noise, resume.

The commands run as the installed console scripts (setup.py entry points) in subprocesses, as a
user starts them; several run at once to keep the file's wall time down. The SIGKILL tests
(train, evaluate) are the slow ones: each runs the launcher twice (killed, resumed) beside an
uninterrupted run and compares what they wrote.
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

from experiments import cli

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)


def entry_points():
  """{console script: module} of setup.py."""
  with open(os.path.join(REPO, "setup.py")) as fh:
    text = fh.read()
  return dict(re.findall(r'"(go-jax[\w-]*) = ([\w.]+):run"', text))


def script(name):
  path = os.path.join(BIN, name)
  if not os.path.exists(path):
    pytest.skip(f"{name} is not installed (pip install -e .)")
  return path


def env(**extra):
  out = dict(os.environ, JAX_PLATFORMS="cpu", MPLBACKEND="Agg")
  out.pop("PYTHONPATH", None)
  out.update(extra)
  return out


def start(args, cwd, **extra_env):
  return subprocess.Popen(args, cwd=cwd, env=env(**extra_env), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def finish(proc, timeout=300):
  out, err = proc.communicate(timeout=timeout)
  return proc.returncode, out, err


# ------------------------------------------------------------------ help
def _docstring(module):
  """A launcher's module docstring, read without importing it (launchers share flag names)."""
  with open(os.path.join(REPO, *module.split(".")) + ".py") as fh:
    return ast.get_docstring(ast.parse(fh.read()))


# Launchers whose --topology names a file they write (go-jax-calibrate --topology measures the
# local devices), not a topology spec to read: their help lists no presets.
WRITES_TOPOLOGY = ("go-jax-calibrate",)


def test_every_console_script_help_shows_its_docstring_and_flags(tmp_path):
  scripts = entry_points()
  assert len(scripts) >= 8, scripts
  procs = {name: start([script(name), "--help"], tmp_path) for name in scripts}
  for name, proc in procs.items():
    rc, out, err = finish(proc)
    first = _docstring(scripts[name]).strip().splitlines()[0]
    assert rc == 0 or "flags:" in out, (name, rc, err[-2000:])
    assert first in out, (name, out[:500])
    assert "Try --helpfull" in out and "USAGE" not in out.split("flags:")[0]
    flag_lines = re.findall(r"^  --(?:\[no\])?(\w+):", out, re.M)
    assert "config" in flag_lines or "graph" in flag_lines or "out" in flag_lines, (name, out)
    assert "compilation_cache" in flag_lines, (name, out)  # every launcher (experiments.cli)
    if "topology" in flag_lines and name not in WRITES_TOPOLOGY:
      assert "Presets:" in out and "nvlink8" in out, name


_HELP_LAUNCHER = """
from experiments import cli
def main(argv):
  print("main ran")
cli.run(main, doc="a launcher")
"""


def test_help_flags_exit_zero_and_errors_one(tmp_path):
  """absl exits 1 after --help / --helpfull; every launcher (cli.run) exits 0 there, also for
  help given in a --flagfile (nested, or '--flagfile FILE'), and a bad flag or a missing
  flagfile still exits 1, also after --help=false."""
  path = tmp_path / "launcher.py"
  path.write_text(_HELP_LAUNCHER)
  (tmp_path / "help.flags").write_text("--helpfull\n")
  (tmp_path / "outer.flags").write_text(f"--flagfile={tmp_path / 'help.flags'}\n")
  cases = {("--help",): 0, ("--helpfull",): 0, ("-?",): 0, ("--helpshort=t",): 0,
           ("--help=false", "--nosuch"): 1, ("--flagfile=help.flags",): 0,
           ("--flagfile", "help.flags"): 0, ("--flagfile=outer.flags",): 0,
           ("--flagfile=missing.flags",): 1}
  procs = {args: start([sys.executable, str(path), *args], tmp_path, PYTHONPATH=REPO)
           for args in cases}
  for args, proc in procs.items():
    rc, out, err = finish(proc)
    assert rc == cases[args], (args, rc, err[-2000:])
    assert "main ran" not in out, args
    assert ("a launcher" in out) == (rc == 0), (args, out[-500:])
    if rc:
      assert len(err.strip().splitlines()) == 1, (args, err[-2000:])


# ------------------------------------------------------------------ bad input
BAD_NPZ_BYTES = b"\x80\x04not a zip archive at all" * 10


def bad_files(tmp):
  """Bad inputs a new user might give: {name: path}."""
  files = {name: tmp / name for name in ("garbage.npz", "pickled.npz", "bad.json", "a_file",
                                         "nan.npz", "negative.npz", "none.json")}
  files["garbage.npz"].write_bytes(BAD_NPZ_BYTES)
  np.savez(files["pickled.npz"], cost=np.array([object()], dtype=object))
  files["bad.json"].write_text("{bad")
  files["a_file"].write_text("x")
  files["summary_folder"] = tmp / "with_summary_folder"  # an output folder whose summary.json
  (files["summary_folder"] / "summary.json").mkdir(parents=True, exist_ok=True)  # is a folder
  edge = dict(senders=np.array([0]), receivers=np.array([1]))
  np.savez(files["nan.npz"], cost=np.array([np.nan, 1.0]), **edge)
  np.savez(files["negative.npz"], cost=np.array([-1.0, 1.0]), **edge)
  files["none.json"].write_text(json.dumps({"version": 1, "devices": [], "links": {
      "bandwidth": [], "latency": []}}))
  return files


def no_get_config(tmp):
  path = tmp / "noget.py"
  path.write_text("x = 1\n")
  return path


def corrupt_checkpoint(tmp):
  """A checkpoint folder: the shipped go config beside a params.msgpack of garbage."""
  from go_jax import pretrained  # pylint: disable=g-import-not-at-top
  folder = tmp / "corrupt_ckpt"
  folder.mkdir(exist_ok=True)
  src = os.path.join(pretrained.ROOT, "go", "config.json")
  (folder / "config.json").write_text(open(src).read())
  (folder / "params.msgpack").write_bytes(BAD_NPZ_BYTES)
  return folder


def simulate_bad_inputs(tmp):
  """(flags, text the one line must contain) of go-jax-simulate (run in-process by
  tests/test_simulate_launcher.py, two of them here as a console script)."""
  f = bad_files(tmp)
  out = f"--out={tmp / 'sim'}"
  return [
      ([f"--graph={tmp / 'missing.npz'}", out], "missing.npz"),
      ([f"--graph={f['garbage.npz']}", out], "not a .npz"),
      ([f"--graph={f['pickled.npz']}", out], "object (pickled) arrays"),
      ([f"--graph={f['nan.npz']}", out], "not finite"),
      ([f"--graph={f['negative.npz']}", out], "negative"),
      (["--graph=nosuchmodel", out], "unknown graph name 'nosuchmodel'"),
      (["--graph=layered:n=0,width=4", out], "num_nodes"),
      (["--graph=layered:n=0", out], "num_nodes"),
      ([f"--topology={f['none.json']}", out], "none.json"),
      (["--topology=nvlink2@mem=-1", out], "mem"),
      (["--topology=bogus", out], "unknown preset 'bogus'"),
      ([f"--topology={f['bad.json']}", out], "bad.json"),
      (["--placement=bogus", out], "bogus"),
      (["--mem_capacity=-1", out], "mem_capacity"),
      (["--mem_capacity=nan", out], "flag --mem_capacity=nan: not a number"),  # any float flag
      (["--mem_capacity=1e400", out], "flag --mem_capacity=1e400: overflows to inf"),
      (["--mem_capacity=1e31", out], "--mem_capacity=1e+31: Topology: mem_capacity"),
      ([f"--out={f['summary_folder']}"], "summary.json there is a folder"),
      ([f"--out={f['a_file']}"], "exists and is not a folder"),
  ]


def _bad_inputs(tmp):
  """(command, text the one line must contain) for bad input across the launchers."""
  f = bad_files(tmp)
  sim = simulate_bad_inputs(tmp)
  return [([script("go-jax-simulate"), *args], want) for args, want in (sim[1], sim[-1])] + [
      ([script("go-jax-place"), "--topology=bogus", f"--out={tmp / 'place'}"], "bogus"),
      ([script("go-jax-place"), f"--graph={f['garbage.npz']}", f"--out={tmp / 'place'}"],
       "garbage.npz"),
      ([script("go-jax-place"), f"--out={f['a_file']}"], "exists and is not a folder"),
      ([script("go-jax-place"), f"--checkpoint={corrupt_checkpoint(tmp)}",
        f"--out={tmp / 'place'}"], "params.msgpack cannot be read into this policy"),
      ([script("go-jax-place"), "--finetune_seconds=nan", f"--out={tmp / 'place'}"],
       "flag --finetune_seconds=nan: not a number"),  # absl's bounds let nan through
      ([script("go-jax-place"), "--learning_rate", "1e400", f"--out={tmp / 'place'}"],
       "flag --learning_rate=1e400: not a finite number"),  # inf only where it means unbounded
      ([script("go-jax-place"), f"--topology={f['none.json']}", f"--out={tmp / 'place'}"],
       "none.json"),
      ([script("go-jax-train"), f"--workdir={tmp / 'tr'}", "--config.nosuch=3"],
       "--config.nosuch=3: the config has no field 'nosuch'"),
      ([script("go-jax-train"), f"--workdir={f['a_file']}"], "exists and is not a folder"),
      ([script("go-jax-train"), f"--workdir={tmp / 'tr'}", "--export=../../etc"],
       "--export=../../etc: checkpoint name must be a plain folder name"),  # before training
      ([script("go-jax-evaluate"), f"--config={tmp / 'nope.py'}", f"--out={tmp / 'ev'}"],
       "nope.py: cannot load the config file"),
      ([script("go-jax-evaluate"), f"--config={f['bad.json']}", f"--out={tmp / 'ev'}"],
       "SyntaxError"),
      ([script("go-jax-evaluate"), "--config.nosuch=1", f"--out={tmp / 'ev'}"], "nosuch"),
      ([script("go-jax-evaluate"), "--config", str(no_get_config(tmp)), f"--out={tmp / 'ev'}"],
       f"--config={tmp / 'noget.py'}: the config file defines no get_config()"),
      ([sys.executable, "-m", "experiments.partition_table", "--devices=3",
        f"--out={tmp / 'pt'}"], "--devices=3: no nvlink<D> preset for [3]"),
      ([script("go-jax-simulate"), "--graph=costgraph:" + str(tmp), f"--out={tmp / 'sim'}"],
       "it is a folder"),
      ([script("go-jax-transfer"), f"--out={f['a_file']}"], "exists and is not a folder"),
      ([script("go-jax-bench-simulator"), "--sizes=0", f"--out={tmp / 'b.json'}"], "--sizes"),
      ([script("go-jax-bench-simulator"), f"--out={tmp}"], "is a folder"),
      ([sys.executable, "-m", "experiments.partition_table", "--placers=heft,tofu",
        f"--out={tmp / 'pt'}"], "not placement methods: ['tofu']"),
      ([sys.executable, "-m", "experiments.partition_table", "--mem_factor=0",
        f"--out={tmp / 'pt'}"], "--mem_factor=0: must be > 0"),
      # multi-process flags (go_jax.distributed): checked before JAX starts
      ([script("go-jax-place"), "--process_id=1", f"--out={tmp / 'place'}"],
       "need a coordinator_address"),
      ([script("go-jax-train"), "--coordinator_address=localhost:1234", "--num_processes=2",
        "--process_id=2", f"--workdir={tmp / 'tr'}"], "process_id must be in [0, 2)"),
      ([script("go-jax-evaluate"), "--coordinator_address=localhost:1234", "--num_processes=2",
        "--executor=ray", f"--out={tmp / 'ev'}"], "--executor=ray with --coordinator_address"),
  ]


def test_bad_input_is_one_line_and_nonzero(tmp_path):
  cases = _bad_inputs(tmp_path)
  procs = []
  for k in range(0, len(cases), 4):  # a few at a time (2 CPU cores)
    batch = [(args, want, start(args, tmp_path)) for args, want in cases[k:k + 4]]
    for args, want, proc in batch:
      procs.append((args, want, *finish(proc)))
  for args, want, rc, out, err in procs:
    name = (os.path.basename(args[0]) if args[1] != "-m" else  # python -m experiments.X
            args[2].rsplit(".", 1)[-1] + ".py")
    lines = [l for l in err.splitlines() if l.strip()]
    assert rc != 0, (args, out[-500:], err[-2000:])
    assert "Traceback" not in err, (args, err[-3000:])
    assert len(lines) == 1, (args, err[-3000:])
    assert lines[0].startswith(f"{name}: error: "), (args, lines)
    assert want in lines[0], (args, lines)


# ml_collections loads a config file with importlib's deprecated load_module().
@pytest.mark.filterwarnings("ignore:the load_module\\(\\) method is deprecated:DeprecationWarning")
def test_a_config_file_that_raises_is_one_line_without_its_traceback():
  """ml_collections quotes the whole traceback of a config file's own error (get_config
  refusing its argument); the launchers keep the exception alone."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", flag_values=values)
  arg = os.path.join(REPO, "experiments", "configs", "pretrain.py") + ":no_such_row"
  with pytest.raises(flags.Error) as info:
    values(["prog", f"--config={arg}"])
  assert "Traceback" in str(info.value)
  line = cli._config_traceback_error(str(info.value))  # pylint: disable=protected-access
  assert line == (f"flag --config={arg}: ValueError: pretrain.py: unknown row 'no_such_row'; "
                  "choose one of " + line.split("choose one of ", 1)[1])
  assert "Traceback" not in line and "\n" not in line
  assert cli._config_traceback_error("flag --x=1: some other error") is None  # pylint: disable=protected-access


def test_simulate_bad_input_in_process(tmp_path, capsys):
  """go-jax-simulate's bad inputs through the same parsing and error plumbing as the console
  script (cli._parse_flags, cli.wrap_main), in this process to save the start-ups."""
  from experiments import simulate  # pylint: disable=g-import-not-at-top
  main = cli.wrap_main(simulate.main)
  for args, want in simulate_bad_inputs(tmp_path):
    cli.FLAGS.unparse_flags()
    with pytest.raises(SystemExit) as info:
      main(cli._parse_flags(["go-jax-simulate", *args]))  # pylint: disable=protected-access
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if l.strip()]
    assert info.value.code == 1, (args, err)
    assert len(lines) == 1 and want in lines[0] and ": error: " in lines[0], (args, err)
  cli.FLAGS.unparse_flags()


def test_verbose_shows_the_traceback(tmp_path):
  rc, _, err = finish(start([script("go-jax-simulate"), "--graph=nosuchmodel", "--v=1",
                             f"--out={tmp_path}"], tmp_path))
  assert rc == 1 and "Traceback" in err and "unknown graph name" in err.splitlines()[-1]


def test_unwritable_out_is_found_before_any_work(tmp_path):
  locked = tmp_path / "locked"
  locked.mkdir()
  locked.chmod(0o500)
  try:
    if os.access(locked, os.W_OK):  # running as root: permissions are not enforced
      pytest.skip("permissions are not enforced for this user")
    with pytest.raises(cli.app.UsageError, match="cannot write"):
      cli.check_out(str(locked / "sub"))
  finally:
    locked.chmod(0o700)


def test_check_out(tmp_path):
  assert cli.check_out(str(tmp_path / "a" / "b")) == str(tmp_path / "a" / "b")
  assert os.listdir(tmp_path / "a" / "b") == []  # the probe is removed
  assert cli.check_out(str(tmp_path / "c" / "x.json"), is_file=True).endswith("x.json")
  (tmp_path / "f").write_text("")
  with pytest.raises(cli.app.UsageError, match="--out=.*exists and is not a folder"):
    cli.check_out(str(tmp_path / "f"))
  with pytest.raises(cli.app.UsageError, match="--dest=.*is a folder"):
    cli.check_out(str(tmp_path), flag="dest", is_file=True)
  with pytest.raises(ValueError, match="--compilation_cache=.*exists and is not a folder"):
    cli.use_compilation_cache(str(tmp_path / "f"))
  cli.use_compilation_cache(None)  # JAX's own setting stays


# ------------------------------------------------------------------ import path and noise
MODULE = '''
from simulator.sources import synthetic

def small_graph():
  return synthetic.chain(6, seed=1, name="my_chain")
'''


def test_graph_module_beside_the_user_and_no_noise(tmp_path):
  """`--graph=module:function` from the module's folder, no PYTHONPATH; JAX_PLATFORMS unset,
  and still no backend-probing line."""
  (tmp_path / "my_models.py").write_text(MODULE)
  run_env = env(JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
  run_env.pop("JAX_PLATFORMS")
  run_env.pop("JAX_COMPILATION_CACHE_DIR", None)  # the flag alone names the cache
  proc = subprocess.run([script("go-jax-simulate"), "--graph=my_models:small_graph",
                         "--topology=nvlink2", "--out=sim", "--compilation_cache=cc"],
                        cwd=tmp_path, env=run_env, capture_output=True, text=True, timeout=300,
                        check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "my_chain" in proc.stdout
  assert "Unable to initialize backend" not in proc.stderr, proc.stderr
  summary = json.loads((tmp_path / "sim" / "summary.json").read_text())
  assert summary["graph"]["nodes"] == 6
  assert os.listdir(tmp_path / "cc"), "--compilation_cache: nothing was cached"


def test_quiet_third_party_drops_only_info_from_quiet_packages():
  import logging
  cli.quiet_third_party()
  filt = [f for f in cli.logging.get_absl_logger().filters
          if isinstance(f, cli._BelowWarningFrom)][0]  # pylint: disable=protected-access

  def record(level, path):
    return logging.LogRecord("absl", level, path, 1, "m", (), None)

  orbax = os.path.join(os.sep, "site-packages", "orbax", "checkpoint", "x.py")
  assert not filt.filter(record(logging.INFO, orbax))
  assert filt.filter(record(logging.WARNING, orbax))
  assert filt.filter(record(logging.INFO, os.path.join(os.sep, "go_jax", "x.py")))
  assert logging.getLogger("jax._src.xla_bridge").getEffectiveLevel() >= logging.WARNING


# ------------------------------------------------------------------ resume after SIGKILL
def _wait_for(predicate, proc, timeout=240):
  t0 = time.time()
  while not predicate():
    if proc.poll() is not None:
      return False
    if time.time() - t0 > timeout:
      raise AssertionError("timed out waiting for the launcher's first output")
    time.sleep(0.05)
  return True


def _kill(proc):
  os.kill(proc.pid, signal.SIGKILL)
  proc.communicate(timeout=60)
  assert proc.returncode == -signal.SIGKILL


# --curves=off: the learning curves evaluated after training are a third of a run's time and
# not compared here (tests/test_training.py's launcher test runs them, after a resume too).
# One minibatch, no attention and no segment recurrence: the run's cost is compiling the PPO
# update, and each of them adds to it (about 30% together) while the launcher's outputs and its
# resume are the same code for every policy (the variants are tested in test_policies.py).
TRAIN_ARGS = ["--config.updates=8", "--config.updates_per_call=1", "--config.checkpoint_every=2",
              "--config.minibatches=1", "--config.policy.use_attention=False",
              "--config.policy.recurrence=False", "--noprogress", "--curves=off"]


def _read_events(path):
  """(tag, step, value) of every scalar in a TensorBoard event file (TFRecord framing)."""
  from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top
  out = []
  with open(path, "rb") as fh:
    data = fh.read()
  pos = 0
  while pos < len(data):
    (length,) = struct.unpack("<Q", data[pos:pos + 8])
    event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
    pos += 12 + length + 4
    for v in event.summary.value:
      out.append((v.tag, event.step, v.simple_value))
  return out


def test_train_end_to_end_and_resumes_after_sigkill_to_identical_parameters(tmp_path):
  """go-jax-train's outputs (metrics, summary, TensorBoard events, parameters), then a run
  killed after its first checkpoint resumes to the uninterrupted run's parameters bit for bit.

  The uninterrupted run goes first and fills a persistent compilation cache that the killed
  and the resumed run start from (the same executables, a third of the time)."""
  pytest.importorskip("tensorboardX")
  train = script("go-jax-train")
  cache = dict(JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jax_cache"),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
  ref = tmp_path / "ref"
  rc, out, err = finish(start([train, f"--workdir={ref}", *TRAIN_ARGS], tmp_path, **cache))
  assert rc == 0, err[-3000:]
  assert "8 updates (resumed from 0)" in out + err
  assert sorted(os.listdir(ref / "checkpoints"), key=int) == ["6", "8"]  # the last two kept
  rows = [json.loads(line) for line in open(ref / "metrics.jsonl")]
  assert [r["step"] for r in rows] == list(range(1, 9))
  assert all(np.isfinite(r["loss"]) and r["ratio_mean"] > 0 for r in rows)
  assert "placements_per_s" in rows[-1]
  summary = json.load(open(ref / "summary.json"))
  assert summary["updates"] == 8 and summary["resumed_from"] == 0
  assert len(summary["instances"]) == 2
  assert all(r["best_agrees"] and r["best_objective"] >= r["lower_bound"] * (1 - 1e-6)
             for r in summary["instances"])
  files = sorted((ref / "tensorboard").glob("events.out.tfevents.*"))
  assert len(files) == 1
  steps = sorted({step for tag, step, _ in _read_events(files[0]) if tag == "train/ratio_mean"})
  assert steps == list(range(1, 9))

  work = tmp_path / "killed"
  proc = start([train, f"--workdir={work}", *TRAIN_ARGS], tmp_path, **cache)
  ckpts = work / "checkpoints"
  first = lambda: ckpts.is_dir() and any(p.isdigit() for p in os.listdir(ckpts))
  assert _wait_for(first, proc), proc.communicate()[1][-3000:]
  _kill(proc)
  assert not (work / "params.msgpack").exists()  # killed before the end
  resumed = finish(start([train, f"--workdir={work}", *TRAIN_ARGS], tmp_path, **cache))
  assert resumed[0] == 0, resumed[2][-3000:]
  assert "resumed from 0" not in resumed[1]
  assert (work / "params.msgpack").read_bytes() == (ref / "params.msgpack").read_bytes()
  steps = [json.loads(l)["step"] for l in (work / "metrics.jsonl").read_text().splitlines()]
  assert steps == list(range(1, 9))
  assert json.load(open(work / "summary.json"))["resumed_from"] > 0


# Two seeds: 56 cells, enough that the kill (after the first cell is written) leaves most of
# them to the resumed run.
EVAL_ARGS = ["--config.seeds=(0,1)", "--noprogress", "--cpu_devices=1"]


def _comparable(rows):
  """Rows without their wall-clock fields, in a fixed order."""
  keep = [{k: v for k, v in r.items() if "seconds" not in k and k != "error"} for r in rows]
  return sorted(keep, key=lambda r: json.dumps(r, sort_keys=True))


def test_evaluate_resumes_after_sigkill_to_identical_rows(tmp_path):
  evaluate = script("go-jax-evaluate")
  ref = start([evaluate, f"--out={tmp_path / 'ref'}", *EVAL_ARGS], tmp_path)
  out = tmp_path / "killed"
  proc = start([evaluate, f"--out={out}", *EVAL_ARGS], tmp_path)
  assert _wait_for(lambda: (out / "results.json").exists(), proc), proc.communicate()[1][-3000:]
  _kill(proc)
  partial = json.loads((out / "results.json").read_text())["rows"]
  resumed = finish(start([evaluate, f"--out={out}", *EVAL_ARGS], tmp_path))
  assert resumed[0] == 0, resumed[2][-3000:]
  assert finish(ref)[0] == 0
  rows = json.loads((out / "results.json").read_text())["rows"]
  ref_rows = json.loads((tmp_path / "ref" / "results.json").read_text())["rows"]
  assert 0 < len(partial) < len(rows) == len(ref_rows) == 56
  assert _comparable(rows) == _comparable(ref_rows)


def test_garbage_npz_is_a_value_error_naming_the_file(tmp_path):
  from simulator import CompGraph
  garbage = tmp_path / "garbage.npz"
  garbage.write_bytes(BAD_NPZ_BYTES)
  with pytest.raises(ValueError, match="garbage.npz.*not a .npz"):
    CompGraph.load(str(garbage))
  pickled = tmp_path / "pickled.npz"
  np.savez(pickled, cost=np.array([object()], dtype=object))
  with pytest.raises(ValueError, match="pickled.npz.*object \\(pickled\\) arrays") as info:
    CompGraph.load(str(pickled))
  assert "allow_pickle" not in str(info.value)
  with pytest.raises(ValueError, match="missing.npz"):
    CompGraph.load(str(tmp_path / "missing.npz"))


# One graph (one padded shape, so BRKGA compiles once per process) on two topologies: 4 cells.
TRANSFER_ARGS = ["--config.graphs=('layered:n=24,width=4,seed=1',)",
                 "--config.topologies=('nvlink2','nvlink2@mem=0.8x')",
                 "--config.baselines=('heft','brkga')", "--config.brkga_budget=100",
                 "--config.rows=()"]


def test_transfer_resumes_after_sigkill_cell_by_cell(tmp_path):
  """Baseline cells only (GO's cells go through the same per-cell store)."""
  transfer = script("go-jax-transfer")
  ref = start([transfer, f"--out={tmp_path / 'ref'}", *TRANSFER_ARGS], tmp_path)
  out = tmp_path / "killed"
  proc = start([transfer, f"--out={out}", *TRANSFER_ARGS], tmp_path)
  assert _wait_for(lambda: (out / "results.json").exists(), proc), proc.communicate()[1][-3000:]
  _kill(proc)
  partial = json.loads((out / "results.json").read_text())["rows"]
  resumed = finish(start([transfer, f"--out={out}", *TRANSFER_ARGS], tmp_path))
  assert resumed[0] == 0, resumed[2][-3000:]
  assert finish(ref)[0] == 0
  rows = json.loads((out / "results.json").read_text())["rows"]
  ref_rows = json.loads((tmp_path / "ref" / "results.json").read_text())["rows"]
  assert 0 < len(partial) < len(rows) == len(ref_rows) == 4
  assert _comparable(rows) == _comparable(ref_rows)


def test_sweep_whose_every_cell_failed_exits_nonzero(tmp_path):
  """A bad option value fails every cell: the rows are written, and the status says so."""
  rc, _, err = finish(start([
      script("go-jax-evaluate"), "--config.methods=('brkga',)", "--noprogress",
      "--config.method_options={'brkga': {'population': -3}}", f"--out={tmp_path / 'ev'}",
      "--config.graphs=('chain:n=8',)", "--config.topologies=('nvlink2',)"], tmp_path))
  last = err.strip().splitlines()[-1]
  assert rc == 1 and "every cell failed (1 rows" in last and "population -3" in last, err
  assert (tmp_path / "ev" / "results.json").is_file()


def test_bench_large_graphs_resumes_its_cells(tmp_path):
  """bench_large_graphs writes its JSON after every cell; a rerun with the same settings keeps
  the cells it finds, and other settings are refused with one line."""
  out = tmp_path / "large.json"
  args = [sys.executable, "-m", "experiments.bench_large_graphs", "--graphs=",
          "--simulate_graph=chain:n=30,seed=0", "--batch=2", "--repeats=1", f"--out={out}"]
  rc, _, err = finish(start(args, REPO))
  assert rc == 0, err
  first = json.loads(out.read_text())
  assert first["launcher"] == "bench_large_graphs" and first["simulate"]["nodes"] == 30
  rc, _, err = finish(start(args + ["-v=1"], REPO))
  assert rc == 0 and "resumed from" in err, err
  assert json.loads(out.read_text())["cells"] == first["cells"]
  rc, _, err = finish(start([a.replace("--batch=2", "--batch=3") for a in args], REPO))
  assert rc == 1 and "differing: ['batch']" in err.strip().splitlines()[-1], err



KILLED_CELL = """
import os, signal, sys
from experiments import bench_large_graphs

def killed_cell(spec, cfg):  # a cell whose worker the OOM killer takes: SIGKILL
  os.kill(os.getpid(), signal.SIGKILL)

if __name__ == "__main__":
  try:
    bench_large_graphs.run_cell(killed_cell, "chain:n=3", {})
  except ValueError as e:
    sys.exit(str(e))
"""


def test_bench_large_graphs_reports_a_dead_worker_at_once(tmp_path):
  """A cell whose worker dies stops the run with one line naming the cell and the signal,
  instead of waiting for a result forever. (In a subprocess: the launcher's absl flags stay out
  of the test process.)"""
  script_path = tmp_path / "killed.py"
  script_path.write_text(KILLED_CELL)
  rc, _, err = finish(start([sys.executable, str(script_path)], REPO, PYTHONPATH=REPO),
                      timeout=120)
  assert rc == 1 and err.strip().splitlines()[-1] == (
      "killed_cell on chain:n=3 failed: worker died (signal 9: killed, perhaps out of "
      "memory)"), err


def test_bench_large_graphs_refuses_a_non_learned_method_and_repeated_graphs(tmp_path):
  """--method=heft (no learned method) and a graph given twice are refused with one line
  naming the flag, before any graph is loaded."""
  base = [sys.executable, "-m", "experiments.bench_large_graphs", "--simulate_graph=",
          f"--out={tmp_path / 'large.json'}"]
  for extra, words in (
      (["--graphs=chain:n=5", "--method=heft"], "--method=heft: not a learned method"),
      (["--graphs=chain:n=5;chain:n=5"],
       "--graphs=chain:n=5;chain:n=5: a value is given twice (chain:n=5)")):
    rc, _, err = finish(start(base + extra, REPO), timeout=120)
    assert rc == 1 and words in err.strip().splitlines()[-1], err
    assert not (tmp_path / "large.json").exists()
