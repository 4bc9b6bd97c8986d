"""Queueing benchmark beyond the paper's ``random`` (docs/protocol.md): certainty-equivalent control, ``ce``.

The queue's transition law is known up to the arrival rate ``λ`` (:mod:`omgpt.tasks.queueing`), so the
classical adaptive controller estimates ``λ`` from the transitions seen so far and plays the DP policy
that would be optimal were the estimate true (certainty equivalence). It does not know the prior's six
values of ``λ``: its estimate ranges over ``[0, 1]``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from omgpt.policies.base import Policy, register_policy
from omgpt.tasks.queueing import Queueing, solve_dp, transition_matrix


@register_policy("ce", tasks=(Queueing,))
class CertaintyEquivalence(Policy):
    """Estimate ``λ``, then act by the known-``λ`` optimal policy.

    Estimate: the posterior mean of ``λ`` under a flat prior on ``[0, 1]``, from the exact likelihood of
    every transition seen, ``Π_τ P_{a_τ}[S_τ, S_{τ+1}](λ)``, computed on ``grid`` equally spaced values
    (a smoothed maximum likelihood: at ``t = 1`` it is 1/2, and it never sits on an endpoint that one
    run of luck would suggest). Policy: the finite-horizon DP of the task's horizon for the estimate's
    nearest grid value and the episode's known cost ``c``; its tables for every grid value are solved
    once per batch, at the first step, when the context shows ``c``.

    Args:
        grid: number of values of ``λ`` the estimate and the DP tables range over.
    """

    def __init__(self, task, grid: int = 101):
        super().__init__(task)
        self.grid = int(grid)

    def reset(self, envs, horizon, generator):
        super().reset(envs, horizon, generator)
        self.lams = torch.linspace(0.0, 1.0, self.grid, dtype=torch.float64, device=self.device)  # (G,)
        self.log_lik = torch.zeros(self.batch, self.grid, dtype=torch.float64, device=self.device)  # (B, G)
        self.tables: Tensor | None = None  # (B, G, T, 5), solved at the first step
        self.state: Tensor | None = None

    def estimate(self) -> Tensor:
        """The posterior mean of ``λ`` under the flat prior, ``(B,)``."""
        return (torch.softmax(self.log_lik, dim=-1) * self.lams).sum(-1)

    def act(self, t: int, x: Tensor) -> Tensor:
        self.state = x[:, 0].round().long().to(self.device)
        if self.tables is None:
            c = x[:, 1].double().to(self.device)
            actions = solve_dp(self.lams.repeat(self.batch), c.repeat_interleave(self.grid), self.task.horizon)[0]
            self.tables = actions.reshape(self.batch, self.grid, self.task.horizon, -1)
        nearest = (self.estimate()[:, None] - self.lams).abs().argmin(-1)  # (B,)
        rows = torch.arange(self.batch, device=self.device)
        return self.tables[rows, nearest, t, self.state][:, None].to(dtype=x.dtype, device=x.device)

    def observe(self, t: int, actions: Tensor, observations: Tensor) -> None:
        a = actions[:, 0].double().to(self.device)
        nxt = observations[:, 0].round().long().to(self.device)
        p = transition_matrix(self.lams[None, :], a[:, None])  # (B, G, 5, 5)
        rows = torch.arange(self.batch, device=self.device)
        step = p[rows, :, self.state, nxt]  # (B, G): the likelihood of this transition under each λ
        self.log_lik += torch.log(step.clamp(min=1e-300))
