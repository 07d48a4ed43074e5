r"""PPO throughput: time per update and simulated placements per second during training.

For each (G graphs per update, K samples per graph) cell it builds a trainer on G layered DAGs of
the same size (seeds 0..G-1), compiles the jitted update (`update_chunk`, `--updates_per_call`
updates per call), then times `--calls` calls. A placement is one simulated action: an update
simulates G * (K + 1) (K samples + the greedy action). For reference it also times the
simulator alone on random actions of the same shapes, called as inside the update
(`rollout.simulate_actions`), so the table shows how much of an update is simulation; the rest
is the policy: one forward pass per graph for sampling, then one forward + backward pass per
graph for each of the epochs x minibatches gradient steps. Prints a Markdown table and writes JSON.

  python -m experiments.bench_ppo --samples=16,64 --graphs_per_update=1   # N = 1000, nvlink8
  python -m experiments.bench_ppo --shipped_size --samples=64,256 --epochs=1,2 \
      --graphs_per_update=1          # the shipped policy at the training settings
  python -m experiments.bench_ppo --samples=32 --graphs_per_update=2 --minibatches=2
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any, Dict, List, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from go_jax import policies
from go_jax.training import ppo, rollout
from simulator import fileio, preset, sources
from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_integer("nodes", 1000, "Ops per graph (layered:n=NODES,width=WIDTH,seed=i).")
flags.DEFINE_integer("width", 32, "Layer width of the layered DAGs.")
flags.DEFINE_string("topology", "nvlink8", cli.topology_help("Topology preset."))
flags.DEFINE_list("samples", ["16", "64"], "K values (samples per graph per update).")
flags.DEFINE_list("graphs_per_update", ["1", "2"], "G values (graphs per update).")
flags.DEFINE_string("task", "joint", "placement, scheduling or joint.")
flags.DEFINE_string("variant", "go", "Policy variant (go_jax.policies.VARIANTS).")
flags.DEFINE_list("epochs", ["2"], "PPO epochs per update (train_base: 2; pretrain.py: 1); "
                  "a list benchmarks each.")
flags.DEFINE_integer("hidden", None, "Policy width (None: the variant's, 128; the shipped "
                     "policies of experiments/configs/pretrain.py use 64).")
flags.DEFINE_bool("shipped_size", False, "The policy at the shipped size of "
                  "experiments/configs/pretrain.py (hidden 64, GraphSAGE 2, attention 2 x 4 "
                  "heads, segments of 64): the size whose throughput the training figures use.")

flags.DEFINE_integer("minibatches", 1, "PPO minibatches per epoch (train_base: 1).")
flags.DEFINE_integer("updates_per_call", 5, "Updates per jitted call.")
flags.DEFINE_integer("calls", 2, "Timed calls per cell (after the compiling one).")
flags.DEFINE_string("out", "results/bench_ppo.json", "JSON output path.")


def _policy():
  p = policies.variant_config(FLAGS.variant)
  if FLAGS.shipped_size:
    p.update(hidden=64, gnn_layers=2, attention_layers=2, heads=4, segment_len=64)
  if FLAGS.hidden is not None:
    p.hidden = FLAGS.hidden
  return p


def _config(k: int, g: int, epochs: int):
  cfg = dict(task=FLAGS.task, objective="makespan", reference="heft", fixed_placement="heft",
             samples=k, graphs_per_update=g, updates=1000,
             updates_per_call=FLAGS.updates_per_call, epochs=epochs,
             minibatches=FLAGS.minibatches, learning_rate=3e-4, entropy_coef=0.05,
             lr_schedule="cosine", policy=_policy())
  return cfg


def _load_average() -> float:
  """The 1-minute load average (the machine's load during a cell), NaN where unknown."""
  try:
    return float(os.getloadavg()[0])
  except OSError:
    return float("nan")


def _time_simulator(trainer: ppo.Trainer, k: int) -> float:
  """Seconds of one batched simulation of G x (K + 1) random actions, as inside an update."""
  data = trainer.data
  task = rollout.get_task(trainer.hp.task)
  g, np_ = data.fixed_placement.shape
  d = int(np.asarray(data.feats.device_mask).sum(axis=1).min())
  rng = np.random.default_rng(0)
  actions = rollout.Actions(
      placement=jnp.asarray(rng.integers(0, d, (g, k + 1, np_)), jnp.int32),
      level=jnp.asarray(rng.integers(0, 8, (g, k + 1, np_)), jnp.int32))
  fn = jax.jit(lambda dt, a: rollout.simulate_actions(trainer.hp.objective, task, dt,
                                                      a).objective)
  jax.block_until_ready(fn(data, actions))
  times = []
  for _ in range(3):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(data, actions))
    times.append(time.perf_counter() - t0)
  return float(np.median(times))


def bench_cell(k: int, g: int, epochs: int) -> Dict[str, Any]:
  graphs = [sources.load_graph(f"layered:n={FLAGS.nodes},width={FLAGS.width},seed={i}")
            for i in range(g)]
  topos = [preset(FLAGS.topology)] * g
  t0 = time.perf_counter()
  trainer = ppo.make_train(_config(k, g, epochs), graphs, topos)
  setup_s = time.perf_counter() - t0
  state = trainer.init(0)
  t0 = time.perf_counter()
  state, _ = trainer.update_chunk(state)
  jax.block_until_ready(state)
  first_s = time.perf_counter() - t0
  times = []
  for _ in range(FLAGS.calls):
    t0 = time.perf_counter()
    state, metrics = trainer.update_chunk(state)
    jax.block_until_ready(state)
    times.append(time.perf_counter() - t0)
  per_update = float(np.median(times)) / FLAGS.updates_per_call
  placements = trainer.placements_per_update
  sim_s = _time_simulator(trainer, k)
  return {"nodes": FLAGS.nodes, "edges": graphs[0].num_edges, "topology": FLAGS.topology,
          "task": FLAGS.task, "variant": FLAGS.variant,
          "hidden": int(trainer.policy.module.hidden), "G": g, "K": k,
          "epochs": epochs, "minibatches": FLAGS.minibatches, "load_average": _load_average(),
          "placements_per_update": placements, "seconds_per_update": per_update,
          "updates_per_s": 1.0 / per_update, "placements_per_s": placements / per_update,
          "simulate_seconds": sim_s, "simulate_share": sim_s / per_update,
          "setup_s": setup_s, "compile_and_first_call_s": first_s,
          "ratio_mean_last": float(metrics["ratio_mean"][-1])}


def markdown(rows: Sequence[Dict[str, Any]]) -> str:
  head = ("| N | hidden | G | K | epochs | placements/update | s/update | updates/s | "
          "placements/s | simulate s (share) | compile + first call s | load |")
  lines = [head, "|" + "---|" * 12]
  for r in rows:
    lines.append(f"| {r['nodes']} | {r['hidden']} | {r['G']} | {r['K']} | {r['epochs']} | "
                 f"{r['placements_per_update']} | "
                 f"{r['seconds_per_update']:.3f} | {r['updates_per_s']:.2f} | "
                 f"{r['placements_per_s']:.1f} | {r['simulate_seconds']:.3f} "
                 f"({100 * r['simulate_share']:.0f}%) | {r['compile_and_first_call_s']:.1f} | "
                 f"{r['load_average']:.1f} |")
  return "\n".join(lines)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  cli.check_out(FLAGS.out, is_file=True)
  rows: List[Dict[str, Any]] = []
  for g in [int(x) for x in FLAGS.graphs_per_update]:
    for epochs in [int(x) for x in FLAGS.epochs]:
      for k in [int(x) for x in FLAGS.samples]:
        rows.append(bench_cell(k, g, epochs))
        print(markdown(rows[-1:]), flush=True)
  print(markdown(rows))
  machine = {"platform": platform.platform(), "python": platform.python_version(),
             "jax": jax.__version__, "devices": [str(d) for d in jax.devices()],
             "cpu_count": os.cpu_count()}
  fileio.write_json(FLAGS.out, {"machine": machine, "rows": rows})
  print(f"wrote {os.path.abspath(FLAGS.out)}")


def run():
  """Entry point (`python -m experiments.bench_ppo`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
