#!/usr/bin/env bash
# The GPU figures of BENCHMARKS.md (issues 11 and 16) in one command, for a machine with one
# accelerator: about 6-8 minutes on an H200. Each benchmark prints its table and writes JSON
# under the folder given (default results/gpu); the log goes there too.
#
#   bash experiments/gpu_checks.sh [OUT_DIR]
#
# 1. simulate's throughput at N = 1000 over the batch (the curve whose best point issue 16 asks
#    to be at least 1e5 placements/s) and compile time at N = 4000 (under 10 s);
# 2. PPO's simulated placements per second at N = 1000 for K = 256, 1024, 4096 (issue 11: at
#    least 1e4/s on one GPU);
# 3. GO's largest graphs end to end with 20 s of fine-tuning (issue 16: under a minute on a GPU).
set -euo pipefail
out="${1:-results/gpu}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
log="$out/gpu_checks.log"
python -c "import jax; print(jax.__version__, jax.devices())" 2>&1 | tee "$log"
run() { echo "+ $*" | tee -a "$log"; "$@" 2>&1 | tee -a "$log"; }
run python -m experiments.bench_simulator --sizes=1000 --batches=1024,4096,16384,65536 \
    --devices=1 --ref_samples=20 --out="$out/bench_simulator_1000.json"
run python -m experiments.bench_simulator --sizes=4000 --batches=1024 --devices=1 --repeats=2 \
    --ref_samples=5 --out="$out/bench_simulator_4000.json"
run python -m experiments.bench_ppo --shipped_size --samples=256,1024,4096 --epochs=1 \
    --graphs_per_update=1 --calls=2 --out="$out/bench_ppo.json"
run python -m experiments.bench_large_graphs --finetune_seconds=20 --baselines= \
    --out="$out/bench_large_graphs.json"
