"""Train the models of results/interpretability/ (CPU, ~15-30 min each on one thread):

    OMP_NUM_THREADS=1 nohup .venv/bin/python -m tools.interpretability_train > runs/interpretability.log 2>&1 &
    OMP_NUM_THREADS=1 nohup .venv/bin/python -m tools.interpretability_train \
        --config results/interpretability/nonperishable.yaml > runs/interpretability_nonperishable.log 2>&1 &

The first (pricing with two demand types, ``pricing_mixed.yaml``) feeds the probes and t-SNE maps, the
second (the non-perishable newsvendor, ``nonperishable.yaml`` layered on top) the manipulation test.

The pricing model's pre-training histories are played by the project's `random` policy with prices on
[0, 3] (`data_policy_options: {high: 3.0}`; pricing_mixed.yaml says why not all of [0, 30]).

The non-perishable newsvendor's pre-training data policy is `uniform-level` (omgpt/policies/newsvendor.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from omgpt.commands.cli import cli_main

RESULTS = Path(__file__).resolve().parents[1] / "results" / "interpretability"


if __name__ == "__main__":
    sys.exit(cli_main(["fit", "--config", str(RESULTS / "pricing_mixed.yaml"), *sys.argv[1:]]))
