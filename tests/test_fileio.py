"""Atomic writes: complete files or none, never a partial file or a stray temporary."""

import json
import os
import stat

import pytest

from simulator import fileio


def test_atomic_open_replaces_only_on_success(tmp_path):
  path = tmp_path / "out.txt"
  path.write_text("old")
  with pytest.raises(RuntimeError):
    with fileio.atomic_open(str(path)) as fh:
      fh.write("half")
      raise RuntimeError("interrupted")
  assert path.read_text() == "old"
  assert os.listdir(tmp_path) == ["out.txt"]  # no temporary left behind
  with fileio.atomic_open(str(path)) as fh:
    fh.write("new")
  assert path.read_text() == "new"
  assert stat.S_IMODE(os.stat(path).st_mode) == 0o644


def test_missing_folder(tmp_path):
  """The error names the file asked for, not the random temporary ('.tmp_k2j4.txt')."""
  with pytest.raises(FileNotFoundError) as info:
    with fileio.atomic_open(str(tmp_path / "no" / "f.txt")) as fh:
      fh.write("x")
  assert info.value.filename == str(tmp_path / "no" / "f.txt") and ".tmp_" not in str(info.value)
  with fileio.atomic_open(str(tmp_path / "a" / "b" / "f.bin"), "wb", make_dirs=True) as fh:
    fh.write(b"x")
  assert (tmp_path / "a" / "b" / "f.bin").read_bytes() == b"x"


def test_write_json_is_strict(tmp_path):
  path = str(tmp_path / "r" / "x.json")
  fileio.write_json(path, {"a": [1, 2.5]})
  assert json.loads(open(path).read()) == {"a": [1, 2.5]}
  with pytest.raises(ValueError):
    fileio.write_json(path, {"a": float("nan")})
  assert json.loads(open(path).read()) == {"a": [1, 2.5]}  # the old file survives
