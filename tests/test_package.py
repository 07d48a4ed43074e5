"""go-jax as a user installs it: package data, and a built wheel that runs with nothing beside it.

The slow test builds a wheel of this checkout, installs it (not editable) into a fresh virtualenv
and runs `go-jax-place --graph=pipedream:resnet50 --topology=<file>.json@mem=0.6x` from an empty
folder: the PipeDream profiles, the shipped GO checkpoint and the topology file reader all have
to come from the installed package, not from the repository or a folder beside it.
"""

from __future__ import annotations

import ast
import fnmatch
import glob
import json
import os
import re
import shutil
import site
import subprocess
import sys
import textwrap
import zipfile

import pytest

import simulator
from simulator.sources import datafiles

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "simulator", "data")
# What the wheel must hold besides the .py files: package data of simulator/ and go_jax/.
PACKAGE_DATA_FOLDERS = ("simulator/data", "go_jax/pretrained", "go_jax/methods/data")
# Folders and files not needed to build the wheel, left out of the copy it is built from.
COPY_IGNORE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info",
                                     "__pycache__", ".hypothesis", ".pytest_cache", "results",
                                     "runs", "go_jax_out")


def _data_files(folder: str):
  """Repo-relative paths of the files under REPO/folder other than Python modules and caches:
  all of them must reach the wheel (a new kind of file needs a new package_data pattern)."""
  out = []
  for root, dirs, files in os.walk(os.path.join(REPO, folder)):
    dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
    out += [os.path.relpath(os.path.join(root, f), REPO).replace(os.sep, "/")
            for f in sorted(files) if not f.endswith((".py", ".pyc"))]
  return out


# ------------------------------------------------------------------ fast checks


def test_data_root_is_the_package_data(monkeypatch):
  monkeypatch.delenv(datafiles.DATA_ENV_VAR, raising=False)
  root = datafiles.data_root()
  assert root == os.path.join(os.path.dirname(os.path.abspath(simulator.__file__)), "data")
  # An empty GO_JAX_DATA counts as unset (not as the current folder).
  monkeypatch.setenv(datafiles.DATA_ENV_VAR, "")
  assert datafiles.data_root() == root


def test_data_root_error_names_the_missing_package_folder(monkeypatch, tmp_path):
  monkeypatch.delenv(datafiles.DATA_ENV_VAR, raising=False)
  monkeypatch.setattr(datafiles, "PACKAGE_DATA", str(tmp_path / "gone"))
  with pytest.raises(ValueError, match="package data folder not found at .*gone.*GO_JAX_DATA"):
    datafiles.data_root()


@pytest.mark.parametrize("folder,holder", [("pipedream", "Microsoft Corporation"),
                                           ("piper", "Microsoft Corporation")])
def test_shipped_data_has_its_license_and_source(folder, holder):
  with open(os.path.join(DATA, folder, "LICENSE"), encoding="utf-8") as fh:
    text = fh.read()
  assert text.startswith("MIT License")
  assert "Copyright (c) " in text and holder in text
  assert "Permission is hereby granted, free of charge" in text
  with open(os.path.join(DATA, folder, "README.md"), encoding="utf-8") as fh:
    assert "https://github.com/msr-fiddle/" + folder in fh.read()


def test_build_lists_every_package_data_file():
  """BUILD's data of the simulator and go_jax libraries name exactly the files on disk."""
  from test_build import parse_build  # pylint: disable=import-outside-toplevel
  targets = parse_build()
  for lib, folder in (("simulator", "simulator/data"), ("go_jax", "go_jax/pretrained"),
                      ("go_jax", "go_jax/methods/data")):
    listed = {f for f in targets[lib].kwargs.get("data", []) if f.startswith(folder + "/")}
    on_disk = set(_data_files(folder))
    assert on_disk - listed == set(), (
        f"add these files to the data of py_library '{lib}' in BUILD: {sorted(on_disk - listed)}")
    assert listed - on_disk == set(), (
        f"BUILD's py_library '{lib}' lists data files that do not exist: "
        f"{sorted(listed - on_disk)}")


def _setup_package_data():
  """setup.py's package_data, read from its source (running setup.py would build)."""
  with open(os.path.join(REPO, "setup.py"), encoding="utf-8") as fh:
    tree = ast.parse(fh.read())
  for node in ast.walk(tree):
    if isinstance(node, ast.keyword) and node.arg == "package_data":
      return ast.literal_eval(node.value)
  raise AssertionError("setup.py passes no package_data")


def _glob_matches(pattern: str, path: str) -> bool:
  """A package_data glob as setuptools applies it: '*' never crosses a '/'."""
  parts, pat = path.split("/"), pattern.split("/")
  return len(parts) == len(pat) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(parts, pat))


def test_setup_package_data_matches_every_data_file():
  """Every data file beside the packages is matched by a package_data glob of its package, so
  the wheel holds it (the slow wheel test checks the built wheel; this one takes no build)."""
  data = _setup_package_data()
  missing = []
  for folder in PACKAGE_DATA_FOLDERS:
    package = folder.split("/")[0]
    for path in _data_files(folder):
      rel = path[len(package) + 1:]
      if not any(_glob_matches(p, rel) for p in data.get(package, ())):
        missing.append(path)
  assert not missing, f"no package_data pattern in setup.py matches {missing}"


def _manifest_files():
  """Repo-relative files that MANIFEST.in adds to the sdist (its include / recursive-include
  lines; another directive must be taught here first)."""
  out = set()
  with open(os.path.join(REPO, "MANIFEST.in"), encoding="utf-8") as fh:
    lines = [line.split() for line in fh if line.strip() and not line.startswith("#")]
  for words in lines:
    if words[0] == "include":
      out.update(os.path.relpath(f, REPO) for w in words[1:]
                 for f in glob.glob(os.path.join(REPO, w)))
    elif words[0] == "recursive-include":
      for root, _, files in os.walk(os.path.join(REPO, words[1])):
        out.update(os.path.relpath(os.path.join(root, f), REPO) for f in files
                   if any(fnmatch.fnmatchcase(f, p) for p in words[2:]))
    else:
      raise AssertionError(f"MANIFEST.in: teach this test the directive {words[0]!r}")
  return {f.replace(os.sep, "/") for f in out}


def test_sdist_holds_what_its_markdown_files_link_to():
  """The Markdown files MANIFEST.in ships link only to files the sdist holds too (BENCHMARKS.md's
  figures under docs/figures were left out once): those files, the packages' modules (links to
  them name source files) and package data."""
  shipped = _manifest_files()
  docs = sorted(f for f in shipped if f.endswith(".md"))
  assert "README.md" in docs or os.path.isfile(os.path.join(REPO, "README.md"))
  missing = []
  for md in docs + ["README.md"]:
    with open(os.path.join(REPO, md), encoding="utf-8") as fh:
      links = re.findall(r"\]\(([^)#:\s]+)", fh.read())
    for link in links:
      path = os.path.normpath(os.path.join(os.path.dirname(md), link)).replace(os.sep, "/")
      if os.path.isdir(os.path.join(REPO, path)) or path.split("/")[0] in (
          "simulator", "go_jax", "experiments"):
        continue  # a package's folder or file (its modules and data are checked above)
      if path not in shipped:
        missing.append(f"{md} -> {link}")
  assert not missing, f"add these to MANIFEST.in: {missing}"


def test_readme_test_command_is_what_ci_runs_and_its_links_exist():
  with open(os.path.join(REPO, "README.md"), encoding="utf-8") as fh:
    readme = fh.read()
  with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as fh:
    match = re.search(r"^TEST_CMD='(.+)'$", fh.read(), re.MULTILINE)
  assert match, ".ci/run defines no TEST_CMD='...' line"
  assert match.group(1) in readme, f"README.md lacks .ci/run's test command: {match.group(1)}"
  links = re.findall(r"\]\(([^)#:]+)\)", readme)  # relative Markdown links
  assert "docs/design.md" in links
  missing = [link for link in links if not os.path.exists(os.path.join(REPO, link))]
  assert not missing, f"README.md links to files that do not exist: {missing}"
  assert "../shared" not in readme


# ------------------------------------------------------------------ the installed wheel

# The interpreter of the temporary virtualenv reports where each package came from.
_WHERE = textwrap.dedent("""
    import json, simulator, go_jax, experiments
    from simulator.sources import data_root
    print(json.dumps({"simulator": simulator.__file__, "go_jax": go_jax.__file__,
                      "experiments": experiments.__file__, "data_root": data_root()}))
""")


def _clean_env(venv: str) -> dict:
  """The environment of a new user: the venv's bin first, no PYTHONPATH, no GO_JAX_DATA."""
  env = {k: v for k, v in os.environ.items()
         if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV",
                      datafiles.DATA_ENV_VAR)}
  env.update(PATH=os.path.join(venv, "bin") + os.pathsep + env.get("PATH", ""),
             VIRTUAL_ENV=venv, PYTHONNOUSERSITE="1", JAX_PLATFORMS="cpu", MPLBACKEND="Agg",
             PYTHONDONTWRITEBYTECODE="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
  return env


def _run(cmd, *, cwd, env, timeout):
  proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                        check=False)
  assert proc.returncode == 0, (f"{' '.join(cmd)} exited {proc.returncode}\n"
                                f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
  return proc


@pytest.mark.slow
def test_wheel_installs_and_places_a_pipedream_graph_on_a_topology_file(tmp_path):
  """About 40-90 s on 2 busy CPU cores (wheel ~5 s, install ~5 s, go-jax-place the rest)."""
  # 1. A wheel built from a copy of the checkout, so that a stale build/ in the repository
  #    cannot leak files into it and nothing is written into the repository.
  src = tmp_path / "src"
  shutil.copytree(REPO, src, ignore=COPY_IGNORE)
  wheels = tmp_path / "wheels"
  _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
        str(src), "-w", str(wheels)], cwd=str(tmp_path), env=dict(os.environ), timeout=300)
  (wheel,) = [str(p) for p in wheels.glob("go_jax-*.whl")]
  with zipfile.ZipFile(wheel) as zf:
    names = set(zf.namelist())
  missing = [f for folder in PACKAGE_DATA_FOLDERS for f in _data_files(folder) if f not in names]
  assert not missing, f"setup.py's package_data misses these files: {missing}"

  # 2. A fresh virtualenv that sees the running environment's third-party packages (jax, flax,
  #    ...) but not its editable go-jax. `--system-site-packages` only reaches the base
  #    interpreter's site-packages; where the tests run inside a virtualenv (.ci/run's .venv),
  #    that environment's site-packages are added by a .pth file that lists them as plain paths.
  #    Plain path lines are appended to sys.path after the new venv's own site-packages, and
  #    the .pth files inside those folders are not executed, so setuptools' editable finder
  #    (__editable___go_jax_*_finder, installed by a .pth there) never loads; even where it does
  #    (an editable install in the base interpreter), it is appended to sys.meta_path after the
  #    path-based finder, so the installed wheel is found first. The assertions below check it.
  venv = tmp_path / "venv"
  _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
       cwd=str(tmp_path), env=dict(os.environ), timeout=120)
  python = str(venv / "bin" / "python")
  env = _clean_env(str(venv))
  venv_site = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                   cwd=str(tmp_path), env=env, timeout=60).stdout.strip()
  if sys.prefix != sys.base_prefix:
    with open(os.path.join(venv_site, "_running_env.pth"), "w", encoding="utf-8") as fh:
      fh.write("".join(p + "\n" for p in site.getsitepackages()))
  # pip of the running environment, run by the new interpreter, installs into the new venv.
  _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel],
       cwd=str(tmp_path), env=env, timeout=300)

  # 3. From an empty folder (nothing beside it), the packages come from the wheel.
  work = tmp_path / "empty" / "work"
  work.mkdir(parents=True)
  where = json.loads(_run([python, "-c", _WHERE], cwd=str(work), env=env,
                          timeout=120).stdout.strip().splitlines()[-1])
  for name, path in where.items():
    assert os.path.realpath(path).startswith(os.path.realpath(venv_site)), (
        f"{name} comes from {path}, not from the installed wheel in {venv_site}")

  # 4. A topology file of the user's own cluster, and the main command on it.
  topo_file = tmp_path / "empty" / "my_cluster.json"
  simulator.preset("nvlink4").to_json(str(topo_file), name="my_cluster")
  script = shutil.which("go-jax-place", path=os.path.join(str(venv), "bin"))
  assert script, f"the wheel installed no go-jax-place into {venv}/bin"
  out = work / "out"
  proc = _run([script, "--graph=pipedream:resnet50", f"--topology={topo_file}@mem=0.6x",
               "--finetune_seconds=0", "--baselines=heft", "--noplots", f"--out={out}"],
              cwd=str(work), env=env, timeout=540)
  table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
  assert len(table) >= 3, f"no comparison table in the output:\n{proc.stdout}"
  assert any("heft" in line for line in table), proc.stdout
  with open(out / "results.json", encoding="utf-8") as fh:
    results = json.load(fh)
  methods = {row["method"] for row in results["rows"]}
  assert "heft" in methods and len(methods) >= 2, methods  # heft and GO's rows
  assert os.listdir(work) == ["out"], "go-jax-place wrote outside --out"
