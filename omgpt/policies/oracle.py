"""The exact oracle (knows the environment) and the paper's noisy oracle ``f~`` that generates
pre-training histories (appendix B.3)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from omgpt.errors import OMGPTError
from omgpt.policies.base import Policy, register_policy


@register_policy("oracle")
class Oracle(Policy):
    """Plays ``a*_t`` computed from the hidden environment: zero regret on i.i.d.-context tasks."""

    def act(self, t: int, x: Tensor) -> Tensor:
        return self.task.optimal_action(self.envs, x, t)


@register_policy("noisy-oracle")
class NoisyOracle(Policy):
    """``f~(H_t) = a*_t + ε'_t``: ``ε'_t = 0`` with probability ``max(0, 1 - 2/√t)`` (``t`` 1-based),
    otherwise ``U[-1, 1]`` per action coordinate (the paper's ``U[-1,1]^d`` for ``d``-dim actions;
    discrete tasks shift the arm index by ``U{-2,-1,1,2}``: the task's
    :meth:`~omgpt.tasks.base.Task.perturb`); the rollout then projects onto ``A``. Early steps are noisy, late steps nearly optimal, mimicking
    how a good learning algorithm's suboptimality shrinks over time.

    Args:
        noise_scale: half-width of the uniform perturbation (paper: 1).
    """

    def __init__(self, task, noise_scale: float = 1.0):
        super().__init__(task)
        self.noise_scale = noise_scale

    def act(self, t: int, x: Tensor) -> Tensor:
        a_star = self.task.optimal_action(self.envs, x, t)
        p_noise = min(1.0, 2.0 / math.sqrt(t + 1))
        noisy = torch.rand(a_star.shape[0], 1, generator=self.generator, device=self.device) < p_noise
        return self.task.perturb(a_star, noisy, self.generator, self.noise_scale)


@register_policy("random")
class Random(Policy):
    """A uniformly random action (:meth:`~omgpt.tasks.base.Task.sample_action`; the paper's queueing benchmark).

    Also a leakage-free pre-training data policy: unlike ``f~``, its actions carry no information
    about the hidden environment, so a model trained on its histories must infer the environment
    from the observations -- as it has to at test time, when its own actions are the ones in the
    history.

    Args:
        high: for continuous tasks, draw from ``A ∩ (-inf, high]`` instead of all of ``A`` -- e.g.
            prices in ``[0, 3]`` (the optimal prices of the pricing prior lie in ``[0.1, 2.3]``): with
            square demand a price near the top of ``A = [0, 30]`` makes a demand of ``-900 βᵀX``,
            observations out of every scale the model meets at test time.
    """

    def __init__(self, task, high: float | None = None):
        super().__init__(task)
        if high is not None and (task.discrete or high <= task.action_low):
            raise OMGPTError(f"random: high={high} needs a continuous task with actions below it")
        self.high = high

    def act(self, t: int, x: Tensor) -> Tensor:
        if self.high is None:
            return self.task.sample_action(self.batch, self.generator)
        low, high = self.task.action_low, min(self.high, self.task.action_high)
        return low + (high - low) * torch.rand(
            self.batch, self.task.action_dim, generator=self.generator, device=self.device
        )
