#!/usr/bin/env bash
# Does a refactor leave every fit as it was? The same short fit of six config kinds under REV and under
# this working tree; their final weights and AdamW states must be equal bit for bit.
#
#   bash tools/same_fits.sh REV [OUT]      # e.g. bash tools/same_fits.sh HEAD~3 /tmp/same_fits
#
# REV is checked out in a worktree under OUT, with its callbacks/, datamodules/, analysis/ and configs/
# linked under omgpt/ so that REV's code, not this tree's installed packages, runs there. Each fit is 3
# epochs of 2 batches with the curriculum and the mixed phase shortened to act within them. Run it
# before re-keying the model store (python -m tools.rekey_models, then --apply): a fit that changed must
# train anew. OUT is emptied first only when it is a folder this script made (it leaves .same_fits in it);
# a bad REV, a file, or a folder with other contents is one line and exit 2 before anything is deleted.
set -euo pipefail
refuse() { echo "same_fits.sh: error: $*" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || refuse "usage: bash tools/same_fits.sh REV [OUT]"
REV=$1
OUT=${2:-/tmp/same_fits}
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY="$HERE/.venv/bin/python"
git -C "$HERE" rev-parse -q --verify "$REV^{commit}" >/dev/null || refuse "REV $REV: not a commit of $HERE"
if [ -e "$OUT" ] || [ -L "$OUT" ]; then
  [ -d "$OUT" ] && [ ! -L "$OUT" ] || refuse "OUT $OUT: not a folder (give a folder this script may empty)"
  # a folder of an earlier run (its marker) is emptied; an empty one is taken; anything else is someone's
  [ -e "$OUT/.same_fits" ] || [ -z "$(ls -A "$OUT")" ] || refuse "OUT $OUT: a folder with other contents (not made by same_fits.sh); give a new or empty one"
fi
rm -rf "$OUT" && mkdir -p "$OUT" && touch "$OUT/.same_fits"
git -C "$HERE" worktree prune  # an earlier run's worktree, deleted with OUT, unregistered
git -C "$HERE" worktree add -q --detach "$OUT/old" "$REV"
trap 'git -C "$HERE" worktree remove --force "$OUT/old"' EXIT
for d in callbacks datamodules analysis; do ln -s "$OUT/old/$d" "$OUT/old/omgpt/$d"; done
ln -s "$OUT/old/configs" "$OUT/old/omgpt/_configs"
ln -s "$OUT/old/benchmarks" "$OUT/old/omgpt/_benchmarks"

SMALL="--model.horizon 12 --data.batch_size 8 --data.batches_per_epoch 2 --data.val_runs 8 --data.val_batch_size 8
  --trainer.max_epochs 3 --trainer.enable_progress_bar false --trainer.enable_model_summary false"
MIX="--data.algorithm1.mixed.start_epoch 1 --data.algorithm1.mixed.rollouts 16 --data.algorithm1.mixed.rollout_batch 8
  --data.algorithm1.mixed.batches_per_epoch 2"
CUR="--data.algorithm1.curriculum.stage_epochs 1"
declare -A KINDS=(
  [paper]="--config configs/newsvendor.yaml $CUR $MIX"
  [cpu]="--config configs/newsvendor.yaml --config configs/scale/cpu.yaml $MIX"
  [tiny]="--config configs/newsvendor.yaml --config configs/scale/tiny.yaml"
  [demo]="--config configs/demo.yaml"
  [recipe_curriculum]="--config configs/recipe/baseline.yaml --config configs/recipe/compact-rope-curriculum.yaml $CUR"
  [pretrained_pricing]="--config configs/scale/cpu.yaml --config configs/pretrained/pricing.yaml $MIX"
)
for kind in "${!KINDS[@]}"; do
  for tree in old new; do
    dir="$OUT/old"; [ "$tree" = new ] && dir="$HERE"
    # shellcheck disable=SC2086
    (cd "$dir" && OMP_NUM_THREADS=1 "$PY" -m omgpt fit ${KINDS[$kind]} $SMALL \
      --trainer.logger.init_args.save_dir "$OUT/$kind-$tree" --trainer.logger.init_args.name r \
      --trainer.logger.init_args.version v > "$OUT/$kind-$tree.log" 2>&1) || { echo "$kind ($tree) failed: $OUT/$kind-$tree.log"; exit 1; }
  done
done
"$PY" - "$OUT" "${!KINDS[@]}" <<'PY'
import sys
from pathlib import Path

import torch

out, kinds = Path(sys.argv[1]), sys.argv[2:]
different = []
for kind in sorted(kinds):
    # the end of each fit: its newest checkpoint (a config without the project's checkpoint rule has no last.ckpt)
    a, b = (torch.load(max((out / f"{kind}-{t}").rglob("*.ckpt"), key=lambda p: p.stat().st_mtime), map_location="cpu", weights_only=False) for t in ("old", "new"))
    weights = a["state_dict"].keys() == b["state_dict"].keys() and all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    oa, ob = a["optimizer_states"][0]["state"], b["optimizer_states"][0]["state"]
    moments = all(torch.equal(oa[i][k], ob[i][k]) for i in oa for k in oa[i])
    print(f"{kind:>20}: step {a['global_step']} / {b['global_step']}, weights equal {weights}, AdamW states equal {moments}")
    if not (weights and moments and a["global_step"] == b["global_step"]):
        different.append(kind)
sys.exit(f"different fits: {', '.join(different)}" if different else 0)
PY
