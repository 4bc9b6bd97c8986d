# Sourced first by the GPU scripts (benchmarks/gpu_check.sh, benchmarks/gpu_pools.sh) from the repo root:
# refuses a machine without a CUDA GPU, makes a bare lent machine run the source tree, then logs the GPU
# and the versions (on stdout, and in $LOG where the script sets it; its folder is made here).
#
# No GPU: one line and exit 2 before anything is set up or written. On a CPU the scripts would train
# the paper's network in bf16 until their caps (gpu_pools.sh) or run every step into a --device cuda
# refusal and exit 0 (gpu_check.sh). DRY_RUN=1 lets a dry run through on a CPU (gpu_pools.sh's knobs).
if [ "${DRY_RUN:-0}" != 1 ] && ! { nvidia-smi -L >/dev/null 2>&1 &&
  python3 -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null; }; then
  echo "${0##*/}: error: no CUDA GPU on this machine (nvidia-smi -L and torch.cuda.is_available()); DRY_RUN=1 runs it anyway" >&2
  exit 2
fi
LOG=${LOG:-/dev/null}
mkdir -p "$(dirname "$LOG")"

# What runs when the sourcing script ends, in order: on_exit 'COMMAND' adds one (a second `trap ... EXIT`
# would replace the first).
EXITS=()
on_exit() { EXITS+=("$1"); trap 'for c in "${EXITS[@]}"; do eval "$c"; done' EXIT; }

# A machine without the package index: the pure-Python dependencies its image lacks travel as wheels in
# .whl/ (jsonargparse and its signature helpers, gymnasium); cvxpy is imported only by the LP reference.
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=${PYTHONPATH:-}:/tmp/site
fi
# Without an install (a bare machine: pip there cannot build the project), the source tree imports as it
# would installed once omgpt/ holds the three top-level folders the install maps into it (pyproject.toml,
# [tool.setuptools.package-dir]); the links go again when the sourcing script ends.
if ! python3 -c "import omgpt.datamodules" 2>/dev/null; then
  for d in callbacks datamodules analysis; do ln -s "../$d" "omgpt/$d"; done
  on_exit 'rm -f omgpt/callbacks omgpt/datamodules omgpt/analysis'
fi
nvidia-smi -L 2>&1 | tee -a "$LOG"
python3 -c "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__,
torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')" 2>&1 | tee -a "$LOG"
