"""Keeps the Bazel BUILD file in sync with the tree (docs/design.md section 1).

BUILD is Starlark, a subset of Python: it is executed here with stub rules (py_library, py_binary,
py_test, ...) that record their arguments, then compared with the files on disk:
  - every .py file under simulator/, go_jax/ and experiments/ is in the srcs of exactly one target;
  - every tests/test_*.py has its own py_test (named after the file) that lists it and
    tests/conftest.py; other .py files under tests/ are in some py_test's srcs;
  - every launcher (experiments/*.py, not __init__.py, that defines `def main(`) has a py_binary
    whose main is that file, and every py_binary's main is a launcher;
  - every file a target lists exists; every local dep (":name") names a target of BUILD;
  - library deps follow experiments -> go_jax -> simulator; a test that imports a launcher
    depends on its py_binary.
Each failure names the file or target at fault and what to change in BUILD.
"""

import ast
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "BUILD")
PACKAGES = ("simulator", "go_jax", "experiments")
# Package -> the library targets it may depend on (experiments -> go_jax -> simulator).
LIBRARY_OF = {"simulator": "simulator", "go_jax": "go_jax", "experiments": "experiments_lib"}
ALLOWED_LIBRARY_DEPS = {
    "simulator": set(),
    "go_jax": {"simulator"},
    "experiments_lib": {"go_jax", "simulator"},
}
FILE_ATTRS = ("srcs", "data")
CONFTEST = "tests/conftest.py"
HINT = "(keep BUILD in sync with the tree: see the comments at its top)"


class Target:

  def __init__(self, rule, kwargs):
    if "name" not in kwargs:
      raise ValueError(f"BUILD: a {rule}(...) has no name: {kwargs}")
    self.rule = rule
    self.name = kwargs["name"]
    self.kwargs = kwargs

  def files(self):
    """Paths (relative to the repo) that the target names: srcs, data and main."""
    out = [f for attr in FILE_ATTRS for f in self.kwargs.get(attr, [])]
    if "main" in self.kwargs:
      out.append(self.kwargs["main"])
    return out

  def local_deps(self):
    return [d[1:] for d in self.kwargs.get("deps", []) if d.startswith(":")]

  def __repr__(self):
    return f"{self.rule}(name = {self.name!r})"


def parse_build(path=BUILD):
  """Executes the Starlark file with stub rules; returns {name: Target} in file order."""
  targets = {}
  duplicates = []

  def rule(kind):
    def record(**kwargs):
      t = Target(kind, kwargs)
      if t.name in targets:
        duplicates.append(t.name)
      targets[t.name] = t
    return record

  def glob(*args, **kwargs):
    raise AssertionError("BUILD uses glob(); list files explicitly so that tests/test_build.py "
                         "can check them")

  env = {
      "py_library": rule("py_library"),
      "py_binary": rule("py_binary"),
      "py_test": rule("py_test"),
      "filegroup": rule("filegroup"),
      "package": lambda **kwargs: None,
      "exports_files": lambda *args, **kwargs: None,
      "load": lambda *args, **kwargs: None,
      "glob": glob,
  }
  with open(path, encoding="utf-8") as fh:
    source = fh.read()
  exec(compile(source, path, "exec"), env)  # pylint: disable=exec-used
  assert not duplicates, f"BUILD defines these target names more than once: {duplicates}"
  return targets


def _rel(path):
  return os.path.relpath(path, REPO).replace(os.sep, "/")


def python_files(top):
  """Every .py file under REPO/top (skipping __pycache__ and hidden folders), repo-relative."""
  out = []
  for root, dirs, files in os.walk(os.path.join(REPO, top)):
    dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
    out += [_rel(os.path.join(root, f)) for f in sorted(files) if f.endswith(".py")]
  return out


def is_launcher(rel):
  """experiments/NAME.py (top level, not __init__.py) that defines a module-level main()."""
  folder, base = os.path.split(rel)
  if folder != "experiments" or base == "__init__.py" or not base.endswith(".py"):
    return False
  with open(os.path.join(REPO, rel), encoding="utf-8") as fh:
    return re.search(r"^def main\(", fh.read(), re.MULTILINE) is not None


def launchers():
  return [f for f in python_files("experiments") if is_launcher(f)]


def unit_test_files():
  return [f for f in python_files("tests") if os.path.basename(f).startswith("test_")]


@pytest.fixture(scope="module")
def targets():
  return parse_build()


def test_build_parses_with_known_rules(targets):
  assert targets, "BUILD defines no targets"
  for lib in LIBRARY_OF.values():
    if lib == "experiments_lib" and lib not in targets:
      continue  # only needed once experiments/ has non-launcher modules (checked below)
    assert lib in targets and targets[lib].rule == "py_library", (
        f"BUILD has no py_library '{lib}' {HINT}")


def test_every_package_file_is_in_exactly_one_target(targets):
  owners = {}
  for t in targets.values():
    for f in t.kwargs.get("srcs", []):
      owners.setdefault(f, []).append(t.name)
  missing, doubled = [], []
  for pkg in PACKAGES:
    for f in python_files(pkg):
      n = len(owners.get(f, []))
      if n == 0:
        where = (f"a py_binary with main = \"{f}\"" if is_launcher(f)
                 else f"the srcs of py_library '{LIBRARY_OF[pkg]}'")
        missing.append(f"{f} (add it to {where})")
      elif n > 1:
        doubled.append(f"{f} (in {owners[f]})")
  problems = []
  if missing:
    problems.append("files in no BUILD target:\n  " + "\n  ".join(missing))
  if doubled:
    problems.append("files in more than one BUILD target (keep one):\n  " + "\n  ".join(doubled))
  assert not problems, "\n".join(problems) + f"\n{HINT}"


def test_targets_list_only_existing_files(targets):
  stale = [f"{f} (listed by {t!r})" for t in targets.values() for f in t.files()
           if not os.path.isfile(os.path.join(REPO, f))]
  assert not stale, ("BUILD lists files that do not exist (remove or rename them):\n  "
                     + "\n  ".join(stale) + f"\n{HINT}")


def test_every_test_file_has_its_own_py_test(targets):
  problems = []
  for f in unit_test_files():
    name = os.path.splitext(os.path.basename(f))[0]
    t = targets.get(name)
    if t is None or t.rule != "py_test":
      problems.append(f"{f}: no py_test named '{name}' (add one with srcs = "
                      f"[\"{CONFTEST}\", \"{f}\"])")
      continue
    srcs = t.kwargs.get("srcs", [])
    if f not in srcs:
      problems.append(f"{f}: py_test '{name}' does not list it in srcs")
    if os.path.isfile(os.path.join(REPO, CONFTEST)) and CONFTEST not in srcs:
      problems.append(f"{f}: py_test '{name}' does not list {CONFTEST} in srcs")
    if t.kwargs.get("main", f) != f:
      problems.append(f"{f}: py_test '{name}' has main = {t.kwargs['main']!r}")
  listed = {f for t in targets.values() if t.rule == "py_test" for f in t.kwargs.get("srcs", [])}
  tests = set(unit_test_files())
  for f in python_files("tests"):
    if f not in tests and f not in listed:
      problems.append(f"{f}: helper module in no py_test's srcs (add it to the py_tests that "
                      "use it)")
  assert not problems, "\n".join(problems) + f"\n{HINT}"


def test_py_tests_are_test_files(targets):
  """A py_test without its tests/test_*.py (renamed or deleted test file) is stale."""
  stems = {os.path.splitext(os.path.basename(f))[0] for f in unit_test_files()}
  stale = [f"py_test '{t.name}' (no tests/{t.name}.py)" for t in targets.values()
           if t.rule == "py_test" and t.name not in stems]
  assert not stale, "BUILD has stale tests:\n  " + "\n  ".join(stale) + f"\n{HINT}"


def test_every_launcher_has_a_py_binary(targets):
  mains = {t.kwargs.get("main"): t for t in targets.values() if t.rule == "py_binary"}
  problems = []
  for f in launchers():
    t = mains.get(f)
    if t is None:
      stem = os.path.splitext(os.path.basename(f))[0]
      problems.append(f"{f}: launcher (defines main) with no py_binary; add "
                      f"py_binary(name = \"{stem}\", srcs = [\"{f}\"], main = \"{f}\", deps = "
                      "[\":experiments_lib\", \":go_jax\", \":simulator\"])")
    elif f not in t.kwargs.get("srcs", []):
      problems.append(f"{f}: py_binary '{t.name}' has it as main but not in srcs")
  for main, t in mains.items():
    if main is None:
      problems.append(f"py_binary '{t.name}' has no main")
    elif os.path.isfile(os.path.join(REPO, main)) and not is_launcher(main):
      problems.append(f"py_binary '{t.name}': main {main} is not a launcher "
                      "(experiments/*.py defining `def main(`)")
  assert not problems, "\n".join(problems) + f"\n{HINT}"


def test_deps_name_targets_and_follow_the_layering(targets):
  problems = []
  for t in targets.values():
    for d in t.local_deps():
      if d not in targets:
        problems.append(f"{t!r} depends on ':{d}', which BUILD does not define")
  for lib, allowed in ALLOWED_LIBRARY_DEPS.items():
    if lib in targets:
      bad = sorted(set(targets[lib].local_deps()) - allowed)
      if bad:
        problems.append(f"py_library '{lib}' depends on {bad}; the direction is experiments -> "
                        "go_jax -> simulator")
  has_non_launchers = any(not is_launcher(f) for f in python_files("experiments"))
  if has_non_launchers and "experiments_lib" not in targets:
    problems.append("experiments/ has non-launcher modules but BUILD has no py_library "
                    "'experiments_lib'")
  assert not problems, "\n".join(problems) + f"\n{HINT}"


def _imported_launchers(path):
  """Stems of the experiments launchers that a Python file imports."""
  with open(os.path.join(REPO, path), encoding="utf-8") as fh:
    tree = ast.parse(fh.read(), filename=path)
  stems = {os.path.splitext(os.path.basename(f))[0] for f in launchers()}
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    else:
      continue
    for n in names:
      parts = n.split(".")
      if len(parts) >= 2 and parts[0] == "experiments" and parts[1] in stems:
        found.add(parts[1])
  return found


def test_tests_that_import_a_launcher_depend_on_it(targets):
  binary_of = {os.path.splitext(os.path.basename(t.kwargs["main"]))[0]: t.name
               for t in targets.values() if t.rule == "py_binary" and "main" in t.kwargs}
  problems = []
  for f in unit_test_files():
    t = targets.get(os.path.splitext(os.path.basename(f))[0])
    if t is None:
      continue  # reported by test_every_test_file_has_its_own_py_test
    for stem in sorted(_imported_launchers(f)):
      b = binary_of.get(stem)
      if b is not None and b not in t.local_deps():
        problems.append(f"{f} imports experiments.{stem}: add \":{b}\" to the deps of py_test "
                        f"'{t.name}'")
  assert not problems, "\n".join(problems) + f"\n{HINT}"
