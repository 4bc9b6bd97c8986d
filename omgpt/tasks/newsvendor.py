"""Feature-based newsvendor (paper appendix D.2), uncensored and censored.

Environment ``γ = (w, ε̄, h)``: ``w ~ U[0,3]^d``, ``ε̄ ~ U[1,10]``, holding cost ``h ~ U[0.5,2]``,
lost-sale cost ``l = 1``. Context ``X_t = (h, X~_t)`` with ``X~_t ~ U[0,3]^d`` (``h`` is known to the
decision maker, so it is part of the context). Demand ``D_t = wᵀX~_t + ε_t``, ``ε_t ~ U(0, ε̄)``.
Observation ``O_t = D_t`` (uncensored) or the sales ``min(D_t, a_t)`` (censored). Reward is minus the
cost ``h (a - D)^+ + l (D - a)^+``.

The optimal order is the ``1/(1+h)`` quantile of demand, ``wᵀX~ + ε̄/(1+h)``. The paper states it
without the action set; since the expected cost is convex in ``a``, the optimum over ``A = [0, 30]`` is
that quantile clipped to ``A`` (it exceeds 30 for about 1% of draws), which is what we use so that the
oracle's regret is exactly zero.
"""
from __future__ import annotations

import torch
from torch import Tensor

from omgpt.tasks.base import Envs, Scaling, Task, register, uniform


@register("newsvendor", censored=False)
@register("newsvendor-censored", censored=True)
class Newsvendor(Task):
    """Args:
        censored: observe sales ``min(D, a)`` instead of demand.
        dim: dimension of ``X~`` (paper: 4).
        lost_sale_cost: ``l`` (paper: 1).
    """

    loss = "l1"
    benchmarks = ("erm", "fai")  # the paper's benchmarks for this task (appendix D.3)
    obs_dim = 1
    action_dim = 1
    action_low, action_high = 0.0, 30.0

    def __init__(self, censored: bool = False, dim: int = 4, lost_sale_cost: float = 1.0, **pool):
        self.censored, self.dim, self.lost_sale_cost = censored, dim, lost_sale_cost
        self.name = "newsvendor-censored" if censored else "newsvendor"
        self.context_dim = 1 + dim
        super().__init__(**pool)

    def _sample_prior(self, n: int, generator: torch.Generator) -> Envs:
        return {
            "w": uniform(n, (self.dim,), 0.0, 3.0, generator),
            "eps_bar": uniform(n, (), 1.0, 10.0, generator),
            "h": uniform(n, (), 0.5, 2.0, generator),
        }

    def sample_context(self, envs: Envs, t: int, generator: torch.Generator) -> Tensor:
        n = envs["w"].shape[0]
        return torch.cat([envs["h"][:, None], uniform(n, (self.dim,), 0.0, 3.0, generator)], dim=-1)

    def mean_demand_floor(self, envs: Envs, x: Tensor) -> Tensor:
        """``wᵀX~``: the lower end of the demand's support, shape ``(B,)``."""
        return (envs["w"] * x[:, 1:]).sum(-1)

    def observe(self, envs: Envs, x: Tensor, a: Tensor, t: int, generator: torch.Generator) -> Tensor:
        eps = envs["eps_bar"] * torch.rand(envs["eps_bar"].shape, generator=generator, device=generator.device)
        demand = (self.mean_demand_floor(envs, x) + eps)[:, None]
        return torch.minimum(demand, a) if self.censored else demand

    def optimal_action(self, envs: Envs, x: Tensor, t: int) -> Tensor:
        quantile = self.mean_demand_floor(envs, x) + envs["eps_bar"] / (1 + envs["h"])
        return self.project(quantile[:, None])

    def expected_reward(self, envs: Envs, x: Tensor, a: Tensor, t: int) -> Tensor:
        # D ~ U[m, m + e]:  E(a - D)^+ = 0 below m, (a - m)^2 / 2e inside, a - m - e/2 above;
        # E(D - a)^+ = E(D) - a + E(a - D)^+.
        m, e, h, l = self.mean_demand_floor(envs, x), envs["eps_bar"], envs["h"], self.lost_sale_cost
        a = a[:, 0]
        inside = (a - m).clamp(0, None).clamp(None, e)
        overage = inside**2 / (2 * e) + (a - m - e).clamp(0, None)
        underage = m + e / 2 - a + overage
        return -(h * overage + l * underage)

    def scaling(self) -> Scaling:
        # Measured under the prior: demand and a* have mean ~12 and sd ~5; h ~ U[0.5,2]; X~ ~ U[0,3].
        return Scaling(
            feature_loc=(12.0, 1.25) + (1.5,) * self.dim,
            feature_scale=(5.0, 0.43) + (0.87,) * self.dim,
            action_loc=(12.0,),
            action_scale=(5.0,),
        )
