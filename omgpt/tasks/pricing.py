"""Contextual dynamic pricing with linear demand (paper appendix D.2).

Environment ``γ = (α, β)``: ``α ~ U[0.5, 1.5]^d``, ``β ~ U[0.05, 1.05]^d`` (paper: ``d = 6``). Context
``X_t ~ U[0, 2.5]^d``. Demand at price ``a``: ``D_t = αᵀX_t - βᵀX_t · a + ε_t`` with
``ε_t ~ N(0, σ²)``, ``σ² = 0.2`` (a variance, as the paper's posterior formulas use it). Observation
``O_t = D_t``; reward is revenue ``a · D_t``, whose expectation ``a (αᵀX - βᵀX a)`` is maximised by
``a* = αᵀX / (2 βᵀX)``, always inside ``A = [0, 30]`` under this prior (it is at most 15).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from omgpt.tasks.base import Envs, Scaling, Task, register, uniform


@register("pricing")
class Pricing(Task):
    """Args:
        dim: context dimension ``d`` (paper: 6; 4 / 10 / 20 in the scaling study).
        noise_var: variance of the demand noise (paper: 0.2).
    """

    loss = "mse"
    benchmarks = ("ilse", "cils")  # the paper's benchmarks for this task (appendix D.3)
    obs_dim = 1
    action_dim = 1
    action_low, action_high = 0.0, 30.0

    def __init__(self, dim: int = 6, noise_var: float = 0.2, **pool):
        self.dim, self.noise_var = dim, noise_var
        self.context_dim = dim
        super().__init__(**pool)

    def _sample_prior(self, n: int, generator: torch.Generator) -> Envs:
        return {
            "alpha": uniform(n, (self.dim,), 0.5, 1.5, generator),
            "beta": uniform(n, (self.dim,), 0.05, 1.05, generator),
        }

    def sample_context(self, envs: Envs, t: int, generator: torch.Generator) -> Tensor:
        return uniform(envs["alpha"].shape[0], (self.dim,), 0.0, 2.5, generator)

    def intercept_slope(self, envs: Envs, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(αᵀX, βᵀX)``: demand at price 0 and its decrease per unit of price, each ``(B,)``."""
        return (envs["alpha"] * x).sum(-1), (envs["beta"] * x).sum(-1)

    def observe(self, envs: Envs, x: Tensor, a: Tensor, t: int, generator: torch.Generator) -> Tensor:
        intercept, slope = self.intercept_slope(envs, x)
        noise = math.sqrt(self.noise_var) * torch.randn(intercept.shape, generator=generator, device=generator.device)
        return (intercept - slope * a[:, 0] + noise)[:, None]

    def optimal_action(self, envs: Envs, x: Tensor, t: int) -> Tensor:
        intercept, slope = self.intercept_slope(envs, x)
        return self.project((intercept / (2 * slope))[:, None])

    def expected_reward(self, envs: Envs, x: Tensor, a: Tensor, t: int) -> Tensor:
        intercept, slope = self.intercept_slope(envs, x)
        return a[:, 0] * (intercept - slope * a[:, 0])

    def scaling(self) -> Scaling:
        # Measured under the prior with noisy-oracle prices (d = 6): demand mean 3.7, sd 1.9;
        # a* mean 0.98, sd 0.33; X ~ U[0, 2.5] has mean 1.25, sd 0.72.
        return Scaling(
            feature_loc=(0.6 * self.dim,) + (1.25,) * self.dim,
            feature_scale=(0.3 * self.dim,) + (0.72,) * self.dim,
            action_loc=(1.0,),
            action_scale=(0.33,),
        )
