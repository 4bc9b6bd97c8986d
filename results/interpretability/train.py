"""Train the models of results/interpretability/ (CPU, ~15-30 min each on one thread):

    OMP_NUM_THREADS=1 nohup .venv/bin/python results/interpretability/train.py > runs/interpretability.log 2>&1 &
    OMP_NUM_THREADS=1 nohup .venv/bin/python results/interpretability/train.py \
        --config results/interpretability/nonperishable.yaml > runs/interpretability_nonperishable.log 2>&1 &

The first (pricing with two demand types, ``pricing_mixed.yaml``) feeds the probes and t-SNE maps, the
second (the non-perishable newsvendor, ``nonperishable.yaml`` layered on top) the manipulation test.

The pricing model's pre-training histories are played by the project's `random` policy with prices on
[0, 3] (`data_policy_options: {high: 3.0}`; pricing_mixed.yaml says why not all of [0, 30]).

The non-perishable newsvendor needs a policy of its own: `random` levels uniform on [I_t, 30 + I_t]
exceed the demand (mean ~11.5) by ~3.5 on average, so the inventory drifts upwards without bound.
`uniform-level` (registered here) draws the level uniformly on [I_t + low, I_t + high] (default
[0, 20]: mean order 10, the inventory stays small, as under good play), independently of the environment.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from omgpt.cli import cli_main
from omgpt.policies import Policy, register_policy

HERE = Path(__file__).resolve().parent


@register_policy("uniform-level")
class UniformLevel(Policy):
    """Non-perishable newsvendor: an order-up-to level uniform on ``[I_t + low, I_t + high]`` (leak-free)."""

    def __init__(self, task, low: float = 0.0, high: float = 20.0):
        super().__init__(task)
        self.low, self.high = low, high

    def act(self, t, x):
        u = torch.rand(self.batch, 1, generator=self.generator, device=self.device)
        return x[:, :1] + self.low + (self.high - self.low) * u


if __name__ == "__main__":
    sys.exit(cli_main(["fit", "--config", str(HERE / "pricing_mixed.yaml"), *sys.argv[1:]]))
