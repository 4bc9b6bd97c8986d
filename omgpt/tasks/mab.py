"""Stochastic multi-armed bandit (paper appendix D.2).

No context (``X_t`` is null: contexts are ``(B, 0)`` tensors, so a feature token is the previous
observation alone). ``k = 20`` arms; environment ``γ = (r_1, …, r_k)`` with ``r_a ~ N(0, 1)`` i.i.d.
Playing arm ``a`` yields the reward ``O_t ~ N(r_a, σ²)``, ``σ = 0.2`` (a standard deviation, as for pricing: docs/paper-gaps.md §6).
``a* = argmax_a r_a``; the pseudo-regret of a step is the reward gap ``r_{a*} - r_{a_t}``, which is
also the action suboptimality the bandit reports (docs/paper-gaps.md §4).

Actions are one-hot vectors of length ``k`` (``discrete = True``): the action tokens are one-hot and
the model's read-out is a vector of logits, trained with cross-entropy against the optimal arm.
Both the read-out and the one-hot tokens stay unscaled (action loc 0, scale 1). Rewards have mean 0
and variance ``1 + σ²`` under any arm-choice rule that ignores ``γ``, so the default feature scaling
(loc 0, scale 1) is already right.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from omgpt import checks
from omgpt.tasks.base import Envs, Task
from omgpt.tasks.mixins import check_noise_std, GaussianNoise
from omgpt.tasks.registry import register


@register("mab")
class MultiArmedBandit(GaussianNoise, Task):
    """Args:
    n_arms: number of arms ``k`` (paper: 20).
    noise_std: standard deviation ``σ`` of the reward noise (paper: 0.2).
    """

    loss = "ce"  # the Bayes decision under it: a posterior draw of the best arm (posterior sampling)
    discrete = True
    moved_params = ("r",)
    benchmarks = ("ucb", "ts")  # the paper's benchmarks for this task (appendix D.3)
    context_dim = 0
    obs_dim = 1
    action_low, action_high = 0.0, 1.0  # one-hot coordinates; not a box the actions fill

    def __init__(self, n_arms: int = 20, noise_std: float = 0.2, **pool):
        self.n_arms, self.noise_std = checks.size("n_arms", n_arms, low=2), check_noise_std(noise_std)
        self.action_dim = self.n_arms
        super().__init__(**pool)

    # ----------------------------------------------------------------------------------------------
    def sample_prior(self, n: int, generator: torch.Generator) -> Envs:
        return {"r": torch.randn(n, self.n_arms, generator=generator, device=generator.device)}

    def sample_context(self, envs: Envs, t: int, generator: torch.Generator) -> Tensor:
        r = envs["r"]
        return r.new_zeros(r.shape[0], 0)

    def optimal_action(self, envs: Envs, x: Tensor, t: int) -> Tensor:
        return self.one_hot(envs["r"].argmax(-1))

    def expected_reward(self, envs: Envs, x: Tensor, a: Tensor, t: int) -> Tensor:
        """``r_a`` for a one-hot ``a`` (for a probability vector: the mixed strategy's mean reward)."""
        return (envs["r"] * a).sum(-1)

    def mean_observation(self, envs: Envs, x: Tensor, a: Tensor, t: int) -> Tensor:
        """The observation is the reward: its mean is the expected reward."""
        return self.expected_reward(envs, x, a, t)[:, None]

    def regression_features(self, x: Tensor, a: Tensor) -> Tensor:
        """The mean reward ``r_a = aᵀr``: features the one-hot arm, ``(B, 1, k)``."""
        return a[:, None]

    def regression_params(self, candidates: Envs) -> tuple[Tensor, None]:
        return candidates["r"], None

    def log_prior(self, candidates: Envs) -> Tensor:
        """``r ~ N(0, I)``."""
        return -0.5 * (candidates["r"] ** 2).sum(-1)

    def suboptimality(self, envs: Envs, x: Tensor, a: Tensor, t: int, a_star: Tensor | None = None) -> Tensor:
        """The reward gap ``r_{a*} - r_{a_t}`` (docs/paper-gaps.md §4): arm indices carry no distance, so ``|a* - a|``
        would be meaningless; this equals the step's pseudo-regret."""
        return self.regret(envs, x, a, t, a_star)

    # ----------------------------------------------------------------------------------------------
    # Discrete-action hooks.
    def one_hot(self, index: Tensor) -> Tensor:
        """Arm indices ``(B,)`` -> float one-hot actions ``(B, n_arms)``."""
        return F.one_hot(index, self.n_arms).float()

    def project(self, a: Tensor, x: Tensor | None = None) -> Tensor:
        """The nearest one-hot vector (that of the largest coordinate; ties go to the lowest index):
        the identity on one-hot actions, and a valid arm for anything else a policy returns."""
        return self.one_hot(a.argmax(-1)).to(a.dtype)

    def perturb(self, a: Tensor, noisy: Tensor, generator: torch.Generator, scale: float = 1.0) -> Tensor:
        """The noisy oracle's discrete perturbation (docs/paper-gaps.md §2): where ``noisy (B, 1)`` is true, shift the
        arm index by ``U{-2, -1, 1, 2}``, then **clamp** the index into ``{0, …, k-1}``.

        Clamping (rather than wrapping around) is the projection onto ``A`` that the continuous tasks
        apply after their perturbation; its side effect is that a shift pointing past the first or last
        arm lands on the nearest end arm, which can be ``a*`` itself (arms are exchangeable under the
        prior, so ``a*`` is an end arm with probability ``2/k``). ``scale`` generalises the shift to
        ``U{±1, …, ±m}`` with ``m = max(1, round(2·scale))`` (``scale = 1``, the paper's, gives ``±1, ±2``).
        """
        m = max(1, round(2 * scale))
        b, device = a.shape[0], a.device
        magnitude = torch.randint(1, m + 1, (b,), generator=generator, device=generator.device).to(device)
        sign = torch.randint(0, 2, (b,), generator=generator, device=generator.device).to(device) * 2 - 1
        shift = sign * magnitude * noisy.reshape(b).to(device).long()
        index = (a.argmax(-1) + shift).clamp(0, self.n_arms - 1)
        return self.one_hot(index).to(a.dtype)

    def sample_action(self, n: int, generator: torch.Generator) -> Tensor:
        """A uniformly random arm, one-hot ``(n, n_arms)``."""
        return self.one_hot(torch.randint(self.n_arms, (n,), generator=generator, device=generator.device))

    def action_from_output(
        self, output: Tensor, generator: torch.Generator | None = None, greedy: bool = False
    ) -> Tensor:
        """Logits ``(B, n_arms)`` -> a one-hot arm drawn from ``softmax(logits)`` with ``generator`` (the
        argmax when ``greedy``)."""
        if greedy:
            return self.one_hot(output.argmax(-1)).to(output.dtype)
        probs = torch.softmax(output.float(), dim=-1)
        if generator is not None and generator.device != probs.device:
            probs = probs.to(generator.device)
        index = torch.multinomial(probs, 1, generator=generator)[:, 0].to(output.device)
        return self.one_hot(index).to(output.dtype)
