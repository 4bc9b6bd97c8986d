# Sourced by the GPU scripts (benchmarks/gpu_check.sh, benchmarks/gpu_pools.sh) from the repo root, with
# $LOG set: makes a bare lent machine run the source tree, then logs the GPU and the versions.
#
# A machine without the package index: the pure-Python dependencies its image lacks travel as wheels in
# .whl/ (jsonargparse and its signature helpers, gymnasium); cvxpy is imported only by the LP reference.
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
# Without an install (a bare machine: pip there cannot build the project), the source tree imports as it
# would installed once omgpt/ holds the three top-level folders the install maps into it (pyproject.toml,
# [tool.setuptools.package-dir]); the links go again when the sourcing script ends.
if ! python3 -c "import omgpt.datamodules" 2>/dev/null; then
  for d in callbacks datamodules analysis; do ln -s "../$d" "omgpt/$d"; done
  trap 'rm -f omgpt/callbacks omgpt/datamodules omgpt/analysis' EXIT
fi
nvidia-smi -L 2>&1 | tee -a "$LOG"
python3 -c "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__,
torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')" 2>&1 | tee -a "$LOG"
