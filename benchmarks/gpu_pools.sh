#!/usr/bin/env bash
# The paper's 12 x 256 network on the 100-environment pools, on one GPU: the lever study's point of
# comparison that a CPU cannot afford (benchmarks/RESULTS.md, "The hard priors' levers": its arms are
# 4 x 64 and 8 x 128; 12 x 256 is ~40x the 4 x 64 step's CPU).
#
#   OUT=gpu-out bash benchmarks/gpu_pools.sh     # on a machine with one CUDA GPU, from the repo root
#
# Each arm is the lever study's CPU recipe for that setting (configs/scale/cpu.yaml at the length
# alg-star-match trains it, seed 0) with one change, the paper's network (12 layers, 16 heads, 256 dims),
# trained in bf16-mixed; pricing and newsvendor also at twice the steps. The five fits share the GPU, each
# with two DataLoader workers, each capped at $CAP seconds of wall-clock (a fit cut short says so in the
# log). Measured on one H200 (benchmarks/RESULTS.md, "The paper's network on the pools"): five fits keep it
# 100% busy at ~10 steps/s each; one alone keeps it ~20% busy, so the x2 arms need a longer lease or
# ORDER=... (a subset) to finish.
# Each fit's kept checkpoint (the authors' rule) is then played with alg-star on the CPU, on the lever
# study's 200 held-out environments of validation seed 10,003 (CPU generators: the same environments, and
# the same alg-star regret, as the study's table), one setting per process.
# Everything lands in $OUT: gpu_pools.log (all output) and pools.tar.gz (each fit's metrics.csv, each
# setting's held-out JSON).
#
# Knobs for a dry run on a CPU (the defaults are the GPU run; DRY_RUN=1 lets it past the GPU check):
#   SIZE="--model.network.n_layer 1 --model.network.n_head 1 --model.network.n_embd 8" EPOCHS_SCALE=0.1 \
#   PRECISION=32-true RUNS=20 CAP=120 OUT=/tmp/pools-dry DRY_RUN=1 bash benchmarks/gpu_pools.sh
# A machine without a CUDA GPU, or an ORDER naming no arm, is one line and exit 2 before anything runs.
set -uo pipefail
OUT=${OUT:-gpu-out}
CAP=${CAP:-330}
RUNS=${RUNS:-200}
PRECISION=${PRECISION:-bf16-mixed}
EPOCHS_SCALE=${EPOCHS_SCALE:-1}
SIZE=${SIZE:-"--model.network.n_layer 12 --model.network.n_head 16 --model.network.n_embd 256"}
# arm -> "task epochs": the lever study's settings (benchmarks/lever_study.py's SETTINGS), the recipe's
# length and twice it.
declare -A ARMS=(
  [mab-100]="mab 60"
  [pricing-100]="pricing 30"
  [pricing-100-x2]="pricing 60"
  [newsvendor-100]="newsvendor 30"
  [newsvendor-100-x2]="newsvendor 60"
)
ORDER=${ORDER:-"mab-100 pricing-100 pricing-100-x2 newsvendor-100 newsvendor-100-x2"}  # or a subset
refuse() { echo "gpu_pools.sh: error: $*" >&2; exit 2; }
for arm in $ORDER; do [ -n "${ARMS[$arm]:-}" ] || refuse "ORDER: no arm $arm (arms: ${!ARMS[*]})"; done
[ -n "$(echo $ORDER)" ] || refuse "ORDER names no arm (arms: ${!ARMS[*]})"
# One intra-op thread per process, as the lever study's arms: ten DataLoader workers and five launch loops
# share 16 cores.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
LOG=$OUT/gpu_pools.log
source benchmarks/gpu_env.sh  # refuses a machine without a CUDA GPU first; the bare machine's set-up (makes $OUT); logs the GPU and the versions
OUT=$(cd "$OUT" && pwd)  # absolute: the results' tar is made from $WORK
LOG=$OUT/gpu_pools.log
log() { echo "$(date +%T) $*" | tee -a "$LOG"; }
# fresh each run: a warm machine keeps /tmp, and a second run must not read the first's; gone at the end
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pools.XXXXXX")
on_exit 'rm -rf "$WORK"'

# The GPU's load every 30 s, ended by its own PID, and only while it is still this shell's child (a
# pattern, as pkill -f, would end other users' monitors; a PID the monitor left may be another's by then).
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader -l 30 >>"$LOG" 2>&1 &
SMI=$!
stop_monitor() { [ "$(ps -o ppid= -p "$SMI" 2>/dev/null | tr -d ' ')" = $$ ] && kill "$SMI" 2>/dev/null; SMI=; }
on_exit stop_monitor
FITS=()
for arm in $ORDER; do
  read -r task epochs <<<"${ARMS[$arm]}"
  epochs=$(python3 -c "print(max(1, round($epochs * $EPOCHS_SCALE)))")
  log "fit $arm: $task, pool_size 100, T = 100, $epochs epochs, cap ${CAP}s"
  ( t0=$SECONDS
    # shellcheck disable=SC2086
    timeout $((CAP + 60)) python3 -m omgpt fit --config configs/scale/cpu.yaml --model.task "$task" \
      --model.task_options "{pool_size: 100}" --model.horizon 100 --trainer.max_epochs "$epochs" $SIZE \
      --trainer.precision "$PRECISION" --data.num_workers 2 --trainer.max_time "$(printf "00:00:%02d:%02d" $((CAP / 60)) $((CAP % 60)))" \
      --trainer.logger.init_args.save_dir "$WORK/$arm" >"$WORK/$arm.log" 2>&1
    code=$?
    steps=$(python3 -c "import csv, glob, sys; print(max(int(r['step']) for f in glob.glob(sys.argv[1]) for r in csv.DictReader(open(f))))" \
      "$WORK/$arm/*/version_*/metrics.csv" 2>/dev/null)
    log "fit $arm: exit $code after $((SECONDS - t0)) s; last logged step ${steps:-?}; $(grep -c 'Time limit reached' "$WORK/$arm.log") time-limit stop(s)"
    tail -3 "$WORK/$arm.log" | tee -a "$LOG" ) &
  FITS+=($!)
done
wait "${FITS[@]}"  # (not the monitor, which runs until killed)
stop_monitor

kept() { find "$WORK/$1" -name '*.ckpt' ! -name last.ckpt | head -1; }
for setting in mab-100 pricing-100 newsvendor-100; do
  args=""
  for arm in $ORDER; do
    case $arm in "$setting" | "$setting"-x2) c=$(kept "$arm"); [ -n "$c" ] && args="$args --checkpoint $arm=$c" ;; esac
  done
  [ -z "$args" ] && { log "$setting: no checkpoint to play"; continue; }
  log "held-out $setting:$args"
  # shellcheck disable=SC2086
  ( timeout 240 python3 benchmarks/time_to_quality.py $args --holdout-runs "$RUNS" --holdout-seed 10003 \
      --json "$WORK/holdout-$setting.json" >"$WORK/holdout-$setting.log" 2>&1
    log "held-out $setting: exit $?"; cat "$WORK/holdout-$setting.log" >>"$LOG" ) &
done
wait
(cd "$WORK" && tar czf "$OUT/pools.tar.gz" ./*.log ./*.json ./*/*/version_*/metrics.csv 2>/dev/null)
log "done"
