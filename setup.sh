#!/usr/bin/env bash
# Set up OMGPT in ./.venv (idempotent; a second run takes a second).
#
# torch is installed before the project so that pip never resolves the plain `torch` requirement
# itself, which on a machine without torch pulls a multi-GB CUDA build:
#   * a torch that the invoking python3 already has (e.g. a GPU build) is reused, untouched, through
#     --system-site-packages;
#   * otherwise a CPU machine gets the CPU build (TORCH_SPEC, default torch==2.13.0, which the
#     project's CPU machines carry on disk), and a machine with an NVIDIA GPU gets pip's default build.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
VENV=.venv
STAMP="$VENV/.omgpt-installed"

if [ -f "$STAMP" ] && [ "$STAMP" -nt pyproject.toml ] && "$VENV/bin/python" -c "import torch, lightning, omgpt, ddop" 2>/dev/null; then
  exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
  if "$PY" -c "import torch" 2>/dev/null; then
    echo "setup: reusing the torch of $PY ($("$PY" -c 'import torch; print(torch.__version__)'))"
    "$PY" -m venv --system-site-packages "$VENV"
  else
    "$PY" -m venv "$VENV"
  fi
fi
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"

if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "setup: NVIDIA GPU found, installing pip's default (CUDA) torch"
    $PIP install ${TORCH_SPEC:-torch}
  else
    echo "setup: no GPU, installing the CPU build ${TORCH_SPEC:-torch==2.13.0}"
    # Elsewhere, without that file on disk, PyPI's Linux torch is a CUDA build: set
    # TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cpu" for the CPU one.
    $PIP install ${TORCH_SPEC:-torch==2.13.0}
  fi
fi

# The distribution was called `omgpt` until it took a name of its own (`omgpt` on the package index is
# an unrelated project): a venv set up before then drops that editable install, whose import hook and
# `omgpt` script would otherwise stay beside the new one's.
if compgen -G "$VENV/lib/python*/site-packages/omgpt-[0-9]*.dist-info" >/dev/null; then
  $PIP uninstall -y omgpt
fi
echo "setup: installing omgpt-ops (editable; the package and command are omgpt) and its dependencies"
$PIP install -e ".[dev]"
# The real demand tables of newsvendor-data (omgpt/demand_data.py: bakery, yaz) are CSV files shipped by
# ddop (BSD-3). Its metadata pins scikit-learn 0.23 and TensorFlow, which its data do not need, so it
# goes in without dependencies; omgpt reads the files and never imports ddop's loaders.
$PIP install --no-deps "ddop==0.7.6"
"$VENV/bin/python" -c "import torch, lightning, omgpt, pandas, ddop" && touch "$STAMP"
