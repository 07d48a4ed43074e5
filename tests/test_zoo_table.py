"""experiments/zoo_cells.py (the zoo table's cells): the table resumes cell by cell (the cells are faked: a real one
builds a zoo model's HLO in a worker process)."""

import json
import os
import signal
import time

import pytest

from experiments import zoo_cells
from experiments import cli_tables


class FakeCell:
  """A cell runner that records its calls and fails the cells named in `fail`."""

  def __init__(self, fail=()):
    self.calls, self.fail = [], set(fail)

  def __call__(self, model, size, stage, timeout):
    self.calls.append((model, stage))
    if (model, stage) in self.fail:
      return {"model": model, "stage": stage, "error": "RuntimeError: injected"}
    return dict(model=model, size=size, stage=stage, nodes=len(model), edges=1, params=2,
                gflops=0.5, lower_s=0.1, parse_s=0.2, build_s=0.3)


def test_resumes_only_missing_and_failed_cells(tmp_path):
  out = str(tmp_path / "zoo.json")
  first = FakeCell(fail={("bert_base", "post")})
  rows = zoo_cells.run_table(["bert_base", "mlp"], "tiny", ["pre", "post"], out, 5,
                             cell=first, log=lambda *_: None)
  assert len(first.calls) == 4 and [r.get("error") is not None for r in rows] == [
      False, True, False, False]
  again = FakeCell()
  rows = zoo_cells.run_table(["bert_base", "mlp"], "tiny", ["pre", "post"], out, 5,
                             cell=again, log=lambda *_: None)
  assert again.calls == [("bert_base", "post")] and not any("error" in r for r in rows)
  # a run of one model keeps the other's rows in the file
  one = FakeCell()
  assert zoo_cells.run_table(["mlp"], "tiny", ["pre"], out, 5, cell=one, log=lambda *_: None)
  assert not one.calls and len(json.load(open(out))["cells"]) == 4
  with pytest.raises(ValueError, match=r"other settings \(differing: \['size'\]\)"):
    zoo_cells.run_table(["mlp"], "small", ["pre"], out, 5, cell=one, log=lambda *_: None)
  other = tmp_path / "other.json"
  other.write_text(json.dumps({"rows": []}))
  with pytest.raises(ValueError, match="not written by zoo_table"):
    zoo_cells.run_table(["mlp"], "tiny", ["pre"], str(other), 5, cell=one, log=lambda *_: None)


@pytest.mark.parametrize("cell,match", [
    ({"model": "gnmt2", "stage": "pre", "edges": 1}, "cell 'gnmt2/pre': field 'nodes' missing"),
    ("oops", "cell 'gnmt2/pre': not an object"),
])
def test_launcher_refuses_a_malformed_stored_cell_before_any_cell(tmp_path, cell, match):
  """experiments/zoo_table.py: a hand-edited cell (no nodes, a string) is a one-line error
  naming the file, the cell and the field, before any cell runs (was a KeyError / TypeError
  in the print loop)."""
  import subprocess
  import sys
  out = tmp_path / "zoo.json"
  out.write_text(json.dumps({"launcher": "zoo_table", "settings": {"size": "tiny"},
                             "cells": {"gnmt2/pre": cell}}))
  proc = subprocess.run([sys.executable, "-m", "experiments.zoo_table", "--models=gnmt2",
                         "--size=tiny", "--stages=pre", "--timeout=1", f"--out={out}"],
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode != 0 and match in proc.stderr and str(out) in proc.stderr, proc.stderr
  assert "Traceback" not in proc.stderr
  assert json.loads(out.read_text())["cells"]["gnmt2/pre"] == cell  # nothing ran or rewrote it


def _killed_worker(model, size, stage, queue):  # a worker the OOM killer takes: SIGKILL
  os.kill(os.getpid(), signal.SIGKILL)


def _exiting_worker(model, size, stage, queue):  # a worker that leaves without a result
  os._exit(3)  # pylint: disable=protected-access


def _hung_worker(model, size, stage, queue):
  time.sleep(60)


def test_a_dead_worker_is_an_error_row_at_once():
  """A worker killed by a signal or exiting without a result is reported as such promptly
  (not as a timeout after the whole --timeout); a hung one times out."""
  t0 = time.monotonic()
  row = zoo_cells.run_cell("mlp", "tiny", "pre", 120, worker=_killed_worker)
  assert row == {"model": "mlp", "stage": "pre",
                 "error": "worker died (signal 9: killed, perhaps out of memory)"}
  row = zoo_cells.run_cell("mlp", "tiny", "pre", 120, worker=_exiting_worker)
  assert row["error"] == "worker died (exit status 3)"
  assert time.monotonic() - t0 < 60
  row = zoo_cells.run_cell("mlp", "tiny", "pre", 1, worker=_hung_worker)
  assert row["error"] == "timed out after 1 s"


class _InterruptedQueue:
  def get(self, timeout=None):
    raise KeyboardInterrupt


def test_an_interrupt_ends_the_worker_and_goes_on():
  """Ctrl-C / SIGTERM while a cell runs: the worker is ended at once, the interrupt raised."""
  import multiprocessing
  proc = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(60,))
  proc.start()
  t0 = time.monotonic()
  with pytest.raises(KeyboardInterrupt):
    cli_tables.worker_result(proc, _InterruptedQueue())
  assert not proc.is_alive() and time.monotonic() - t0 < 10


def test_death_text():
  assert cli_tables.death_text(-signal.SIGSEGV) == "signal 11: Segmentation fault"
  assert cli_tables.death_text(2) == "exit status 2"


def test_cli_tables_imports_on_its_own():
  """`import experiments.cli_tables` first failed on its circle with experiments.cli (which
  re-exports it): 'cannot import name duration_text from partially initialized module'."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  done = subprocess.run([sys.executable, "-c", "import experiments.cli_tables"],
                        capture_output=True, text=True, check=False,
                        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  assert done.returncode == 0, done.stderr[-2000:]
