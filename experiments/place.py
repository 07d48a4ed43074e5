r"""Places one graph on one topology with GO and the fast baselines and compares them.

The `go-jax-place` command, a thin launcher over `go_jax.place`: GO zero-shot from a pretrained
checkpoint (greedy and best of K), GO fine-tuned for a wall-clock budget, and the baselines
(heft, m_etf, m_sct, metis, expert, brkga, brkga_seeded); every action re-simulated. Prints
the comparison table and which method won (or that no method found a feasible placement,
and the memory the least demanding one needs), and writes to --out: results.json / results.csv (the rows, in the
format of go-jax-evaluate, and the settings), results.md (the table), placement.npz (the best
placement and priority and GO's, on the original nodes when the graph was coarsened),
gantt_<method>.png (GO and the best baseline) and objective_bars.png (feasible methods). Where
GO cannot serve the topology (more devices than its policy), the baselines run and the header
says why GO was skipped.

--task picks what is compared (`go_jax.place_tasks`): joint (the above), fusion (one fixed
schedule, --placement_from's placement and priority, fused by GO's go_fusion and by no_fusion,
fuse_all and xla_fusion; XLA's decisions come from a zoo:/jax: pre-optimisation --graph) or
joint3 (GO's go_joint3 places, orders and fuses, against the baselines and the best one
followed by xla_fusion / fuse_all). Fusing rows show their fused graph's node count (groups);
placement.npz then holds the best row's fuse mask too.

--partition adds operator-partitioning rows (tofu, data_parallel, megatron; 'all'): every op
split over the devices, scored on the expanded graph (docs/design.md section 4.2); they are
listed beside the placements but never the winner placement (their actions are on another
graph), and the verdict names the best of them.

--execute (task joint, a zoo: or jax: graph at stage=pre) then runs every row's placement and
priority for real on the first D local JAX devices (D: the topology's; on a CPU --cpu_devices=D
exposes them) with `go_jax.execute.place_program`, and prints the measured median step time
beside the predicted makespan, their ratio, the segments the program was split into and the
Spearman rank correlation over the rows (`go_jax.place_execute`); execution.md and results.json
("execution") hold them. Predictions are in the seconds of the graph's cost-model device: for
comparable numbers cost the graph with this machine's calibration (go-jax-calibrate) and use
the topology go-jax-calibrate --topology writes, as in the last example.

Examples:
  go-jax-place                                 # built-in default, a few minutes on 2 CPU cores
  go-jax-place --graph=pipedream:vgg16 --topology=nvlink8@mem=0.6x --finetune_seconds=300
  go-jax-place --graph=gnmt2 --checkpoint=runs/pretrain/go_hint --baselines=heft,m_sct
  go-jax-place --method=go --finetune_seconds=120          # the paper's GO (no hint)
  go-jax-place --graph=my_models.step:program --device_spec=a100 --objective=peak_memory
  go-jax-place --graph=my_graph.npz --checkpoint=none --noplots --out=/tmp/place1
  go-jax-place --task=fusion --graph=zoo:gpt2_small,size=tiny,stage=pre --topology=nvlink1
  go-jax-place --task=joint3 --graph=zoo:gpt2_small,size=tiny,stage=pre --topology=nvlink4
  go-jax-place --graph=zoo:gpt2_small,size=tiny,stage=pre --topology=nvlink4@mem=0.5x \
      --partition=all --method=none --baselines=heft,m_sct   # + tofu, data_parallel, megatron
  go-jax-place --graph=zoo:gnmt2,size=tiny,device=local,calibration=cal.json \
      --topology=local.json --cpu_devices=2 --execute
  go-jax-place --coordinator_address=host0:1234 --num_processes=2 --process_id=i  # i = 0, 1

--coordinator_address / --num_processes / --process_id run the command as one JAX run over
several processes or hosts (go_jax.distributed, docs/cluster.md): every process computes the
same table with the batches split over all devices; process 0 alone prints it and writes --out.
"""

from __future__ import annotations

import os
from typing import Sequence

from absl import app, flags, logging

from go_jax import distributed, place_execute, place_tasks, pretrained
from simulator import runtime, topology_spec
from go_jax import place as place_lib
from go_jax.methods import MAX_SEED
from experiments import cli

FLAGS = flags.FLAGS

flags.DEFINE_string(
    "graph", place_lib.DEFAULT_GRAPH,
    "Graph: a source spec ('layered:n=300,width=16,seed=0', 'pipedream:vgg16', "
    "'zoo:gnmt2,size=tiny'), a CompGraph .npz file, a bare model name (PipeDream, else "
    "model zoo) or 'package.module:function' returning a CompGraph or a JAX program (fn, args). "
    + cli.GRAPH_IMPORT_HELP)
flags.DEFINE_string("topology", place_lib.DEFAULT_TOPOLOGY, cli.topology_help(
    "Topology spec: PRESET or a topology .json file (docs/topology.md), optionally @mem=VALUE, "
    "VALUE bytes per device or a multiple of the graph's single-device footprint "
    "('nvlink8@mem=0.6x')."))
flags.DEFINE_enum("objective", "makespan", ["makespan", "peak_memory"], "What to minimise.")
flags.DEFINE_integer("seed", 0, "Seed of GO and of the randomised baselines.",
                     lower_bound=0, upper_bound=MAX_SEED)
flags.DEFINE_enum("task", "joint", list(place_tasks.TASKS),
                  "What to compare: joint (placement and priority), fusion (fuse requests on "
                  "--placement_from's fixed schedule) or joint3 (placement, priority and "
                  "fusion, against the baselines and each followed by XLA's / every fusion).")
flags.DEFINE_enum("method", place_tasks.AUTO,
                  [place_tasks.AUTO, "go_hint", "go", "gdp", "go_fusion", "go_joint3", "none"],
                  "The learned method of the GO rows: auto (the task's: go_hint, go_fusion, "
                  "go_joint3), go_hint (GO with the best list scheduler's answer as a hint), "
                  "go (the paper's GO), gdp, go_fusion (fusion), go_joint3 (joint3), or none "
                  "(baselines only).")
flags.DEFINE_string("placement_from", place_tasks.DEFAULT_PLACEMENT_FROM,
                    "--task=fusion: the placement or joint method whose placement and priority "
                    "every fusion method fuses.")
flags.DEFINE_string("checkpoint", "",
                    "GO's starting policy: a shipped checkpoint name, a training workdir "
                    "(config.json + params.msgpack) or 'none' (fresh parameters, no zero-shot); "
                    "empty: the method's own shipped checkpoint.")
flags.DEFINE_float("finetune_seconds", place_lib.DEFAULT_FINETUNE_SECONDS,
                   "GO fine-tuning wall-clock budget (0: no fine-tuning).", lower_bound=0.0)
flags.DEFINE_integer("finetune_updates", None, "Optional cap on fine-tuning updates.",
                     lower_bound=1)
flags.DEFINE_float("learning_rate", place_lib.DEFAULT_LEARNING_RATE,
                   "Fine-tuning learning rate (constant).", lower_bound=0.0)
flags.DEFINE_integer("samples", None, "K, actions sampled per update (default: the "
                     "method's: 256 for go's fine-tuning, else the checkpoint config's).",
                     lower_bound=1)
flags.DEFINE_list("baselines", list(place_lib.DEFAULT_BASELINES),
                  "Baseline methods (go_jax.methods); built-in ones whose optional dependency "
                  "is missing (metis without pymetis) are skipped, unknown names refused. Default "
                  "with --task=fusion: " + ",".join(place_tasks.FUSION_BASELINES) + ".")
flags.DEFINE_integer("brkga_budget", place_lib.DEFAULT_BRKGA_BUDGET,
                     "Simulator evaluations of brkga and brkga_seeded.", lower_bound=1)
flags.DEFINE_integer("max_nodes", place_lib.DEFAULT_MAX_NODES,
                     "Graphs with more nodes are coarsened to this many.", lower_bound=2)
flags.DEFINE_string("device_spec", place_lib.DEFAULT_DEVICE_SPEC,
                    "Cost-model device of a JAX program or zoo graph that names none, and of "
                    "the program rebuilt for XLA's fusion decisions (simulator.costmodel).")
flags.DEFINE_string("out", "results/place", "Folder for the results and plots.")
flags.DEFINE_bool("plots", True, "Write the Gantt charts and the bar chart.")
flags.DEFINE_bool("execute", False,
                  "After the comparison, run every row's placement for real on the first D "
                  "local JAX devices (D: the topology's) and print the measured step time "
                  "beside the predicted makespan (task joint; a zoo: or jax: graph at "
                  "stage=pre). Predictions are in the graph's cost-model device's seconds: "
                  "for comparable numbers cost the graph with this machine's calibration "
                  "(go-jax-calibrate; zoo:...,device=local,calibration=cal.json) and use the "
                  "topology go-jax-calibrate --topology writes.")
flags.DEFINE_integer("execute_repeats", place_execute.DEFAULT_REPEATS,
                     "--execute: timed steps per placement (the median is shown).",
                     lower_bound=1)
flags.DEFINE_list("partition", [],
                  "Operator-partitioning methods whose rows join the table (design.md 4.2): "
                  "any of tofu, data_parallel, megatron, partition_brute, or 'all' (tofu, "
                  "data_parallel, megatron). Each splits every op over all the devices and is "
                  "scored on its expanded graph; a zoo: graph at stage=pre keeps its shapes "
                  "(HLO strategy space), other graphs use the shape-free space.")
flags.DEFINE_integer("cpu_devices", None,
                     "Expose this many CPU devices before JAX starts (JAX's default on a CPU "
                     "is one), e.g. for --execute on a CPU-only machine.", lower_bound=1,
                     upper_bound=runtime.MAX_CPU_DEVICES)
cli.define_distributed_flags()


def _as_flag_error(flag: str, fn, *args, **kwargs):
  """Runs fn, turning a ValueError into a UsageError that names the flag at fault."""
  try:
    return fn(*args, **kwargs)
  except ValueError as e:
    logging.debug("--%s rejected", flag, exc_info=True)  # the full traceback at --v=1
    raise app.UsageError(f"--{flag}={getattr(FLAGS, flag)}: {e}") from e


def _check_out() -> None:
  """--out is a writable folder without another launcher's results (process 0's)."""
  cli.check_results_out(FLAGS.out, place_lib.LAUNCHER,
                         files=(place_lib.NPZ_NAME, place_lib.BARS_NAME))


def _execution_devices():
  """--execute's checks before any work: task, graph kind and stage, topology, local devices."""
  try:
    place_execute.check_request(FLAGS.graph, FLAGS.task)
  except ValueError as e:
    raise app.UsageError(f"--execute: {e}") from e
  count = _as_flag_error("topology", place_execute.topology_devices, FLAGS.topology)
  try:
    return place_execute.local_devices(count)
  except ValueError as e:
    raise app.UsageError(f"--execute: {e}; on a CPU, give --cpu_devices={count}") from e


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {list(argv[1:])}")
  if FLAGS.execute and cli.multi_process():
    raise app.UsageError("--execute times this process's own devices: run it as one process "
                         "(no --coordinator_address)")
  cli.initialize_distributed()  # before anything starts JAX's backends
  if FLAGS.cpu_devices:
    runtime.configure_cpu_devices(FLAGS.cpu_devices)
  out = distributed.output(FLAGS.out)  # process 0 writes; the others compute alike
  distributed.from_primary(_check_out)  # process 0's check stops every process
  devices = _execution_devices() if FLAGS.execute else None
  partition = _as_flag_error("partition", place_lib.partition_methods, FLAGS.partition)
  if FLAGS.execute and partition:
    raise app.UsageError("--execute runs placements of the graph as given; a --partition row "
                         "answers on its own expanded graph: give one of the two")
  if FLAGS["placement_from"].present and FLAGS.task != "fusion":
    raise app.UsageError(f"--placement_from is for --task=fusion (the placement it fuses); "
                         f"--task={FLAGS.task} places itself")
  from simulator import costmodel  # pylint: disable=g-import-not-at-top
  _as_flag_error("device_spec", costmodel.device_spec, FLAGS.device_spec)  # before the graph
  graph = _as_flag_error("graph", place_lib.load_graph_arg, FLAGS.graph,
                         device_spec=FLAGS.device_spec, shapes=bool(partition))
  program = None
  if FLAGS.execute:
    try:
      program = place_execute.load_program(FLAGS.graph, seed=FLAGS.seed)
    except ValueError as e:
      raise app.UsageError(f"--execute: {e}") from e
  _as_flag_error("topology", topology_spec.parse_topology, FLAGS.topology)
  if FLAGS.checkpoint and FLAGS.checkpoint != place_lib.NO_CHECKPOINT:
    # Config and parameters read now: a corrupt params.msgpack under an explicit --checkpoint
    # stops the run, where inside the sweep it would only drop GO's rows.
    _as_flag_error("checkpoint", pretrained.load, FLAGS.checkpoint)
  try:
    result = place_lib.place(
        graph, FLAGS.topology, objective=FLAGS.objective, seed=FLAGS.seed,
        method=None if FLAGS.method == "none" else FLAGS.method,
        checkpoint=FLAGS.checkpoint or None, finetune_seconds=FLAGS.finetune_seconds,
        finetune_updates=FLAGS.finetune_updates, learning_rate=FLAGS.learning_rate,
        samples=FLAGS.samples, brkga_budget=FLAGS.brkga_budget,
        baselines=FLAGS.baselines if FLAGS["baselines"].present else None,
        max_nodes=FLAGS.max_nodes, graph_spec=FLAGS.graph, task=FLAGS.task,
        placement_from=FLAGS.placement_from, device_spec=FLAGS.device_spec,
        partition=partition)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  if out is None:  # not process 0: it computed the same rows and reports nothing
    return
  print(place_lib.header(result))  # the table first: it survives a failed write
  print()
  print(place_lib.markdown_table(result))
  print()
  print(place_lib.verdict(result), flush=True)
  files = place_lib.write_outputs(result, out, plots=FLAGS.plots)  # kept if execution fails
  if program is not None:
    try:
      report = place_execute.execute(result, program, devices=devices,
                                     repeats=FLAGS.execute_repeats)
    except ValueError as e:
      raise app.UsageError(f"--execute: {e}") from e
    print()
    print(place_execute.markdown_table(report), flush=True)
    files.update(place_execute.write_outputs(result, report, out, files))
  print(f"\nwrote {out}/: " + ", ".join(sorted(os.path.basename(p)
                                                    for p in files.values())))


def run():
  """Console-script entry point (`go-jax-place`)."""
  cli.run(main, __doc__)


if __name__ == "__main__":
  run()
