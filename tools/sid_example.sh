#!/usr/bin/env bash
# docs/real-demand.md's "your own table" example, end to end, on ddop's Store Item Demand table
# (10 stores x 50 items x 5 years, which no test reads): tune two benchmarks on the validation stores,
# pre-train OMGPT on the training stores by the bakery recipe, evaluate on the two held-out stores.
# Writes runs/sid* and copies the evaluation's summary.json (the cluster-bootstrap block included) to
# results/sid-example/. About 15 CPU-minutes on one thread:
#     OMP_NUM_THREADS=1 bash tools/sid_example.sh
# Every command line of the docs' block is a line of this script (tests/test_readme.py checks it).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p runs results/sid-example
if [ -e runs/sid ]; then echo "runs/sid exists: move it away first (this script trains into it)" >&2; exit 2; fi
D=$(.venv/bin/python -c "from omgpt.demand_data import ddop_file; print(ddop_file('SID_data.csv').parent)")
paste -d, $D/SID_data.csv $D/SID_target.csv > runs/sid.csv          # its features and its demand, side by side
SID="--option csv=runs/sid.csv --option series=store,item --option demand=sales --option group=store --option drop=weekday,year"
.venv/bin/omgpt tune --task newsvendor-data $SID --horizon 100 --policies saa,saa-weekday   # on the validation stores
.venv/bin/omgpt fit --config configs/pretrained/bakery.yaml \
    --model.task_options '{csv: runs/sid.csv, series: "store,item", demand: sales, group: store, drop: "weekday,year", critical_ratio: [0.5, 0.9]}' \
    --data.val_runs 500 --data.val_batch_size 250 --trainer.logger.init_args.save_dir runs/sid
.venv/bin/omgpt evaluate --task newsvendor-data $SID --option part=test --option critical_ratio=0.75 \
    --ckpt runs/sid/omgpt/version_0/checkpoints/epoch*-spl*.ckpt --seed 7 \
    --policies omgpt,saa,saa-tuned,saa-weekday,saa-weekday-tuned,gbm,hindsight-linear --out runs/sid-eval
cp runs/sid-eval/summary.json results/sid-example/summary.json
