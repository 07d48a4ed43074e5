"""go-jax-place --execute (go_jax/place_execute.py, issue 17 part 3): which graphs can run, the
program a spec names, each row run and timed on one device in this process, and on two CPU
devices in subprocesses (the device count is fixed when JAX starts): the library on a tiny zoo
model and the launcher on a small JAX program, its errors one line each."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from go_jax import place as place_lib
from go_jax import place_execute

pytestmark = pytest.mark.fast_compile  # compile time dominates: tests/conftest.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HELPER = textwrap.dedent('''
    """Programs for go-jax-place --execute (test helper)."""
    import jax
    import jax.numpy as jnp
    from simulator.sources import synthetic

    def mlp():
      def step(w1, w2, w3, x):
        a = jnp.tanh(x @ w1)
        b = jnp.tanh(x @ w2)
        return (jnp.tanh(a @ w3) + b).sum()
      w = jax.ShapeDtypeStruct((32, 32), jnp.float32)
      return step, (w, w, w, jnp.ones((16, 32), jnp.float32))

    def graph_only():
      return synthetic.chain(6, name="helper_chain")
''')
MODULE = "place_execute_helper"
# The library on two CPU devices: a tiny zoo model, three baselines, one results folder. Each row
# is one compiled program per segment: heft (many segments), the expert split (a few) and single
# (one); m_sct's many-segment placement is executed by the launcher's run on the helper's MLP.
LIBRARY_SCRIPT = textwrap.dedent('''
    import json, sys
    from simulator import runtime
    runtime.configure_cpu_devices(2)
    from go_jax import place, place_execute
    spec, out = sys.argv[1], sys.argv[2]
    place_execute.check_request(spec)
    graph = place.load_graph_arg(spec)
    program = place_execute.load_program(spec)
    result = place.place(graph, "nvlink2", method=None, baselines=["heft", "expert", "single"],
                         graph_spec=spec)
    report = place_execute.execute(result, program, repeats=2)
    files = place.write_outputs(result, out, plots=False)
    files.update(place_execute.write_outputs(result, report, out, files))
    print(place_execute.markdown_table(report))
    print("ROWS", json.dumps([r.key for r in result.rows]))
''')


@pytest.fixture
def helper(tmp_path, monkeypatch):
  (tmp_path / f"{MODULE}.py").write_text(HELPER)
  monkeypatch.syspath_prepend(str(tmp_path))
  yield MODULE
  sys.modules.pop(MODULE, None)


def _env(**extra):
  return dict(os.environ, JAX_PLATFORMS="cpu", MPLBACKEND="Agg", **extra)


def _start(args, cwd, **extra_env):
  return subprocess.Popen(args, cwd=cwd, env=_env(**extra_env), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def _launch(cwd, *flags):
  path = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)
  return _start([sys.executable, "-m", "experiments.place", *flags], cwd, PYTHONPATH=path)


@pytest.fixture(scope="module")
def two_device_runs(tmp_path_factory):
  """The two-device subprocesses, started together (each mostly compiles): the library on
  zoo:gpt2_small,size=tiny and the launcher with --execute on the helper's program."""
  tmp = tmp_path_factory.mktemp("execute")
  (tmp / f"{MODULE}.py").write_text(HELPER)
  lib = _start([sys.executable, "-c", LIBRARY_SCRIPT, "zoo:gpt2_small,size=tiny",
                str(tmp / "lib")], REPO)
  cli = _launch(tmp, f"--graph={MODULE}:mlp", "--topology=nvlink2", "--cpu_devices=2",
                "--execute", "--execute_repeats=2", "--method=none", "--noplots",
                "--baselines=heft,m_sct,single,round_robin", f"--out={tmp / 'cli'}")
  runs = {}
  for name, proc in (("lib", lib), ("cli", cli)):
    out, err = proc.communicate(timeout=300)
    runs[name] = (proc.returncode, out, err, tmp / name)
  return runs


def _check_outputs(folder, keys):
  data = json.loads((folder / "results.json").read_text())
  ex = data["execution"]
  assert list(ex["rows"]) == keys == [r["key"] for r in data["rows"]]
  assert len(ex["devices"]) == 2 and ex["repeats"] == 2
  for rec in ex["rows"].values():
    assert rec["measured_seconds"] > 0 and rec["predicted_makespan"] > 0
    assert rec["ratio"] == pytest.approx(rec["measured_seconds"] / rec["predicted_makespan"])
    assert rec["segments"] >= 1
  assert os.path.basename(data["files"]["execution"]) == "execution.md"
  md = (folder / "execution.md").read_text()
  assert "| method | predicted makespan | measured step" in md and "Spearman" in md
  return data


# ------------------------------------------------------------------ which graphs can run
@pytest.mark.parametrize("spec,task,message", [
    ("layered:n=20,width=4,seed=0", "joint", "needs a graph that is a JAX program"),
    ("pipedream:vgg16", "joint", "got 'pipedream:vgg16'"),
    ("zoo:gpt2_small,size=tiny,stage=post", "joint", "needs stage=pre"),
    ("zoo:gpt2_small,size=tiny,coarsen=50", "joint", "drop coarsen=50"),
    ("zoo:gpt2_small,size=tiny", "fusion", "fusion is not executed"),
    ("zoo:gpt2_small,size=tiny", "joint3", "got task 'joint3'"),
])
def test_check_request_refuses_what_cannot_run(spec, task, message):
  with pytest.raises(ValueError, match=message):
    place_execute.check_request(spec, task)


def test_check_request_accepts_programs(helper):
  place_execute.check_request("zoo:gpt2_small,size=tiny,device=a100,layers=1")
  place_execute.check_request(f"{helper}:mlp")  # bare module:function = jax:
  place_execute.check_request(f"jax:{helper}:mlp,stage=pre")


def test_load_program_zoo_and_jax(helper):
  prog = place_execute.load_program("zoo:gpt2_small,size=tiny,device=a100,seq=4")
  assert prog.fn.__name__ and isinstance(prog.args, tuple)
  assert all(isinstance(x, jax.Array) for x in jax.tree_util.tree_leaves(prog.args))
  assert prog.args[2]["tokens"].shape == (2, 4)  # seq=4: a knob of the program, not the graph
  prog = place_execute.load_program(f"{helper}:mlp")
  assert [x.shape for x in prog.args] == [(32, 32)] * 3 + [(16, 32)]
  assert all(isinstance(x, jax.Array) for x in prog.args)  # ShapeDtypeStructs: zeros
  assert float(jax.numpy.abs(prog.args[0]).sum()) == 0.0
  with pytest.raises(ValueError, match="returns a CompGraph"):
    place_execute.load_program(f"{helper}:graph_only")
  with pytest.raises(ValueError, match="unknown knob"):
    place_execute.load_program("zoo:gpt2_small,size=tiny,nosuch=3")


def test_devices_and_spearman():
  assert place_execute.topology_devices("nvlink2@mem=0.6x") == 2
  with pytest.raises(ValueError, match="JAX sees"):
    place_execute.local_devices(len(jax.local_devices()) + 1)
  assert place_execute.spearman([1, 2], [3, 4]) is None
  assert place_execute.spearman([1, 2, 3], [10, 30, 20]) == pytest.approx(0.5)
  assert place_execute.spearman([1, 1, 1], [1, 2, 3]) is None  # constant: no correlation


# ------------------------------------------------------------------ one device, in process
def test_execute_on_one_device(helper, tmp_path):
  spec = f"{helper}:mlp"
  graph = place_lib.load_graph_arg(spec)
  program = place_execute.load_program(spec)
  result = place_lib.place(graph, "nvlink1", method=None, baselines=["heft", "single"],
                           graph_spec=spec)
  report = place_execute.execute(result, program, devices=jax.local_devices()[:1], repeats=1)
  assert [r.key for r in report.records] == ["heft", "single"]
  for rec, row in zip(report.records, result.rows):
    assert rec.measured > 0 and rec.segments == 1 and rec.moved_nodes == 0
    assert rec.predicted == pytest.approx(row.makespan) == pytest.approx(rec.row_predicted)
  assert report.spearman is None and "n/a" in place_execute.markdown_table(report)
  files = place_lib.write_outputs(result, str(tmp_path), plots=False)
  files.update(place_execute.write_outputs(result, report, str(tmp_path), files))
  data = json.loads((tmp_path / "results.json").read_text())
  assert data["launcher"] == "place" and set(data["execution"]["rows"]) == {"heft", "single"}
  assert data["rows"] and data["verdict"]  # the comparison is still all there
  assert os.path.isfile(files["execution"])
  with pytest.raises(ValueError, match="other nodes|lowers to"):
    other = place_execute.Program(lambda x: (x * 2).sum(), (np.ones(3, np.float32),), "x")
    place_execute.execute(result, other, devices=jax.local_devices()[:1])
  with pytest.raises(ValueError, match="2 devices, 1 given"):
    two = place_lib.place(graph, "nvlink2", method=None, baselines=["single"], graph_spec=spec)
    place_execute.execute(two, program, devices=jax.local_devices()[:1])


# ------------------------------------------------------------------ two CPU devices
def test_library_on_two_cpu_devices(two_device_runs):
  rc, out, err, folder = two_device_runs["lib"]
  assert rc == 0, err[-3000:]
  keys = json.loads(out.split("ROWS ", 1)[1])
  assert keys == ["heft", "expert", "single"]
  data = _check_outputs(folder, keys)
  assert data["execution"]["rows"]["single"]["segments"] == 1  # all on one device
  assert "median of 2 steps" in out and "over 3 rows" in out


def test_launcher_execute_on_two_cpu_devices(two_device_runs):
  rc, out, err, folder = two_device_runs["cli"]
  assert rc == 0, err[-3000:]
  assert "measured / predicted" in out and "Spearman rank correlation" in out
  assert "execution.md" in out.rsplit("wrote", 1)[1]
  data = _check_outputs(folder, ["heft", "m_sct", "single", "round_robin"])
  rho = data["execution"]["spearman"]
  assert rho is None or -1 <= rho <= 1


def test_launcher_errors_are_one_line(tmp_path):
  (tmp_path / f"{MODULE}.py").write_text(HELPER)
  out = f"--out={tmp_path / 'out'}"
  cases = [
      (["--graph=layered:n=20,width=4,seed=0", "--execute"],
       "--execute: placed execution needs a graph that is a JAX program"),
      ([f"--graph={MODULE}:mlp", "--task=fusion", "--execute"], "fusion is not executed"),
      ([f"--graph={MODULE}:mlp", "--topology=nvlink2", "--execute"],
       "give --cpu_devices=2"),
      ([f"--graph={MODULE}:graph_only", "--topology=nvlink2", "--cpu_devices=2", "--execute"],
       "returns a CompGraph"),
  ]
  procs = [(_launch(tmp_path, *flags, out, "--method=none", "--noplots"), message)
           for flags, message in cases]
  for proc, message in procs:
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, err
    assert message in err and "Traceback" not in err, err[-2000:]
    assert len(err.strip().splitlines()) == 1, err
  assert not os.path.exists(tmp_path / "out" / "results.json")  # refused before any results
