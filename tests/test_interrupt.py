"""An interrupted run keeps its work: Ctrl-C or SIGTERM during training checkpoints the updates
done since the last periodic checkpoint (training.loop._run_chunks), and the launchers turn
SIGTERM into that same interrupt and end it with one line and exit status 130 (experiments/cli).
"""

import os
import signal
import types

import flax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import cli
from go_jax.training import checkpoint, loop


@flax.struct.dataclass
class _State:
  step: jnp.ndarray   # () int32: updates done
  value: jnp.ndarray  # (3,) float32: stands in for the parameters


class _Trainer:
  """update_chunk adds one update; the `interrupt_at`-th call raises KeyboardInterrupt, as
  Ctrl-C inside a jitted call does."""

  def __init__(self, interrupt_at: int):
    self.hp = types.SimpleNamespace(updates_per_call=1)
    self.calls, self.interrupt_at = 0, interrupt_at

  def update_chunk(self, state):
    self.calls += 1
    if self.calls == self.interrupt_at:
      raise KeyboardInterrupt
    new = _State(step=state.step + 1, value=state.value + 1.0)
    return new, {"loss": np.array([float(new.step)])}


def _fresh():
  return _State(step=jnp.asarray(0, jnp.int32), value=jnp.zeros(3, jnp.float32))


@pytest.mark.parametrize("interrupt_at,expected", [
    (8, [5, 7]),  # 7 updates done, the last periodic checkpoint at 5: 7 is kept
    (6, [5]),     # interrupted right after a checkpoint: nothing new to save
])
def test_interrupt_checkpoints_the_updates_done(tmp_path, interrupt_at, expected):
  ckpt = checkpoint.Checkpointer(str(tmp_path / "ckpt"), keep=3)
  history = []
  with pytest.raises(KeyboardInterrupt):
    loop._run_chunks(_Trainer(interrupt_at), _fresh(), total=20, checkpointer=ckpt,
                     checkpoint_every=5, history=history)
  ckpt.close()
  ckpt = checkpoint.Checkpointer(str(tmp_path / "ckpt"), keep=3)
  assert ckpt.all_steps() == expected
  restored = ckpt.restore(_fresh(), expected[-1])
  ckpt.close()
  assert int(restored.step) == expected[-1]
  np.testing.assert_array_equal(np.asarray(restored.value), np.full(3, expected[-1], np.float32))
  assert [r["step"] for r in history] == list(range(1, interrupt_at))  # metrics of every update


def test_interrupt_without_a_workdir_just_stops():
  with pytest.raises(KeyboardInterrupt):
    loop._run_chunks(_Trainer(3), _fresh(), total=20)


def test_sigterm_is_an_interrupt_and_the_launcher_exits_130(capsys):
  previous = signal.getsignal(signal.SIGTERM)
  try:
    cli._terminate_as_interrupt()  # pylint: disable=protected-access
    with pytest.raises(KeyboardInterrupt):
      os.kill(os.getpid(), signal.SIGTERM)
      for _ in range(1000):  # the handler runs between bytecodes of the main thread
        pass
  finally:
    signal.signal(signal.SIGTERM, previous)

  def main(argv):
    del argv
    raise KeyboardInterrupt

  with pytest.raises(SystemExit) as e:
    cli.wrap_main(main)(["prog"])
  assert e.value.code == 130
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "interrupted" in err[0] and "rerun the command" in err[0]


_IN_FLIGHT = r"""
import sys
import jax, jax.numpy as jnp
from experiments import cli

def main(argv):
  del argv
  def body(c):
    i, x = c
    return i + 1, jnp.sin(x) * 1.0001 + 0.5
  run = jax.jit(lambda x: jax.lax.while_loop(lambda c: c[0] < 150, body, (0, x))[1])
  x = jnp.ones(2_000_000)
  run(x).block_until_ready()  # compiled (about 1 s a call); the next call is left in flight
  global pending
  pending = run(x * 2.0)      # dispatched asynchronously: still running
  print("in flight", not pending.is_ready(), file=sys.stderr)
  cli._settle_jax = (lambda settle: lambda: (settle(), print(
      "settled", pending.is_ready(), file=sys.stderr)))(cli._settle_jax)
  raise KeyboardInterrupt                # Ctrl-C while XLA's threads compute

cli.wrap_main(main)(["prog"])
"""


def test_interrupt_waits_for_jax_work_in_flight(tmp_path):
  """A launcher interrupted while a jitted computation still runs on XLA's threads waits for it
  (cli._settle_jax) before it exits with its one line and status 130; exiting under the running
  computation was a segmentation fault (status 139) after the message."""
  out = _run_script(tmp_path, "in_flight.py", _IN_FLIGHT)
  assert out.returncode == 130, (out.returncode, out.stderr[-2000:])
  lines = [s for s in out.stderr.strip().splitlines() if s]
  assert lines[0] == "in flight True"  # the interrupt came while it ran
  assert lines[1] == "settled True"  # and it had finished before the exit
  assert "interrupted" in lines[-1]


_LOST_IN_GC = r"""
import gc, os, signal, sys, time
from experiments import cli

def main(argv):
  del argv
  cli._terminate_as_interrupt()
  fired = []
  def callback(phase, info):
    if phase == "start" and not fired:
      fired.append(True)
      os.kill(os.getpid(), signal.SIGTERM)
      for _ in range(1000):  # the handler runs here, in the gc callback: the interpreter
        pass                 # prints "Exception ignored" and drops the KeyboardInterrupt
  gc.callbacks.append(callback)
  gc.collect()
  for _ in range(1000):  # up to 10 s of work after the lost interrupt
    time.sleep(0.01)
  print("ran to the end", file=sys.stderr)

cli.wrap_main(main)(["prog"])
"""


def _run_script(tmp_path, name, text):
  import subprocess
  import sys
  script = tmp_path / name
  script.write_text(text)
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
      + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
  return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                        timeout=300, env=env, check=False)


def test_sigterm_lost_in_a_gc_callback_is_delivered_again(tmp_path):
  """SIGTERM whose handler runs inside a garbage-collection callback (JAX has one) raised its
  KeyboardInterrupt where the interpreter ignores exceptions, and the run finished with status
  0; cli._redeliver_lost sends it again, and the launcher ends with its one line and 130."""
  out = _run_script(tmp_path, "lost_in_gc.py", _LOST_IN_GC)
  assert out.returncode == 130, (out.returncode, out.stderr[-2000:])
  assert "ran to the end" not in out.stderr
  assert "Exception ignored" not in out.stderr
  lines = [s for s in out.stderr.strip().splitlines() if s]
  assert len(lines) == 1 and "interrupted" in lines[0], out.stderr[-2000:]


def test_interrupt_waits_for_jax_work_only_so_long(tmp_path):
  """The wait for a computation in flight is bounded (cli.SETTLE_SECONDS; here 0.05 s): past it
  the launcher leaves with its one line and 130 without tearing the interpreter down under
  XLA's threads (os._exit), instead of holding an interrupted run for as long as it computes."""
  script = _IN_FLIGHT.replace("from experiments import cli",
                              "from experiments import cli\ncli.SETTLE_SECONDS = 0.05")
  script = script.replace("global pending", "global pending\n  import atexit\n  atexit.register("
                          "lambda: print('teardown', file=sys.stderr))")
  script = script.replace("  cli._settle_jax = ", "  _unused = ")  # the real, bounded wait
  out = _run_script(tmp_path, "in_flight_long.py", script)
  assert out.returncode == 130, (out.returncode, out.stderr[-2000:])
  lines = [s for s in out.stderr.strip().splitlines() if s]
  assert lines[0] == "in flight True"
  assert "interrupted" in lines[-1] and "Traceback" not in out.stderr
  assert "teardown" not in out.stderr  # it left at once, without the interpreter's exit


_LAUNCHED = r"""
import atexit, sys
from experiments import cli

def main(argv):
  del argv
  atexit.register(lambda: print("teardown", file=sys.stderr))
  raise KeyboardInterrupt  # between two cells: XLA may still compile on its threads

cli.run(main, doc="a launcher")
"""


def test_an_interrupted_launcher_leaves_without_the_interpreter_teardown(tmp_path):
  """A launcher started by cli.run leaves an interrupt by os._exit(130) after its one line:
  the interpreter's teardown under XLA's threads was a segmentation fault (139) after the
  message in the table launchers (2 of 3 SIGTERMs of partition_table)."""
  out = _run_script(tmp_path, "launched.py", _LAUNCHED)
  assert out.returncode == 130, (out.returncode, out.stderr[-2000:])
  lines = [s for s in out.stderr.strip().splitlines() if s]
  assert len(lines) == 1 and "interrupted" in lines[0], out.stderr[-2000:]
