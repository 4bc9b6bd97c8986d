#!/usr/bin/env bash
# The GPU checks of one short lease (benchmarks/RESULTS.md, "GPU"), as one script:
#
#   OUT=gpu-out bash benchmarks/gpu_check.sh            # on a machine with one CUDA GPU, from the repo root
#   OUT=gpu-out bash benchmarks/gpu_check.sh alg-star   # step 6 only (a lease too short for the rest)
#
# 1. training-step throughput at the paper's size (12 layers, 256 dims, B = 64, T = 100): float32 vs
#    bf16 autocast, the paper's two-token layout vs the transition layout, eager (and compiled for one);
# 2. the demo's size on the GPU (launch-bound: what a small model gets from a GPU);
# 3. `omgpt bench --device cuda` (the four ratios of benchmarks/RESULTS.md);
# 4. a paper-scale fit through the CLI: 3 epochs of 100 steps, bf16-mixed, DDP (NCCL, every visible GPU),
#    each epoch validated by the KV-cached rollout: the whole Trainer path on a GPU;
# 5. the shipped newsvendor model evaluated on the GPU on the card's test seed, to set beside its card
#    (computed on a CPU);
# 6. alg-star's particle filter on the GPU (4096 particles x 50 episodes a batch: the slowest policy
#    of the demo's evaluation), then its structured samplers (sampler="gaussian" / "collapsed", a few hundred particles;
#    each against itself with 8x the particles; not run on a GPU yet).
# Each step has its own time limit, so one that hangs costs only its own numbers. Everything lands in
# $OUT: gpu.log (all output) and one JSON / CSV per step. A machine without a CUDA GPU, or an argument
# other than alg-star, is one line and exit 2 before anything is written.
set -uo pipefail
case "${1:-all}" in all | alg-star) ;; *) echo "gpu_check.sh: error: unknown argument ${1}: give alg-star or nothing" >&2; exit 2 ;; esac
OUT=${OUT:-gpu-out}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
LOG=$OUT/gpu.log
step() { local limit=$1; shift; echo "=== $* (limit ${limit}s)" | tee -a "$LOG"; local t0=$SECONDS
         timeout "$limit" "$@" 2>&1 | tee -a "$LOG"; echo "=== exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s" | tee -a "$LOG"; }

source benchmarks/gpu_env.sh  # refuses a machine without a CUDA GPU first; the bare machine's set-up (makes $OUT); logs the GPU and the versions

if [ "${1:-all}" = all ]; then
step 90 python3 benchmarks/throughput.py --device cuda --size paper --batch 64 --horizon 100 --layouts paper,transition \
  --precision 32,bf16 --no-compile --steps 30 --json "$OUT/throughput_paper.json"
step 150 python3 benchmarks/throughput.py --device cuda --size paper --batch 64 --horizon 100 --layouts paper \
  --precision bf16 --steps 30 --json "$OUT/throughput_paper_compiled.json"
step 45 python3 benchmarks/throughput.py --device cuda --size demo --batch 64 --horizon 50 --layouts paper,transition \
  --no-compile --steps 30 --json "$OUT/throughput_demo.json"
step 180 python3 -m omgpt bench --device cuda --json "$OUT/bench.json"
step 150 python3 -m omgpt fit --config configs/newsvendor.yaml --config configs/trainer/ddp.yaml --config configs/trainer/bf16.yaml \
  --data.batches_per_epoch 100 --trainer.max_epochs 3 --data.num_workers 8 --trainer.enable_progress_bar false \
  --trainer.logger.init_args.save_dir /tmp/gpufit
cp /tmp/gpufit/omgpt/version_0/metrics.csv "$OUT/fit_metrics.csv" 2>/dev/null
step 90 python3 -m omgpt evaluate --ckpt pretrained/newsvendor --policies omgpt --runs 1000 --seed 2 --batch_size 1000 \
  --device cuda --no_progress true --out /tmp/gpueval
cp /tmp/gpueval/summary.json "$OUT/eval_summary.json" 2>/dev/null
fi
# The CPU's figures play 50 episodes a batch; a GPU's particle filter is launch-bound there, so the second
# run plays 1,000 episodes 500 at a time (the same likelihoods, other environments: seconds per 100 episodes).
step 150 python3 benchmarks/alg_star_particles.py --speed --runs 100 --device cuda
step 200 python3 benchmarks/alg_star_particles.py --speed --runs 1000 --batch 500 --device cuda
step 120 python3 benchmarks/alg_star_particles.py --task pricing --sampler gaussian --particles 512 --factor 8 \
  --runs 1000 --batch 500 --device cuda
step 120 python3 benchmarks/alg_star_particles.py --task newsvendor --sampler collapsed --particles 384 --factor 8 \
  --runs 1000 --batch 500 --device cuda
echo "=== done" | tee -a "$LOG"
