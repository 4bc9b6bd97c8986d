"""Linear bandit (paper appendix D.2).

No context (``X_t`` is null: contexts are ``(B, 0)`` tensors, so a feature token is the previous
observation alone). Actions lie in the unit ball ``A = B(0, 1) ⊂ R^d`` (paper: ``d = 2``). Environment
``γ = w`` drawn uniformly on the unit sphere ``‖w‖ = 1``. Playing ``a`` yields the reward
``O_t ~ N(wᵀa, σ²)``, ``σ = 0.2`` (a standard deviation: docs/paper-gaps.md §6). The expected reward ``wᵀa`` is maximised over the ball
by ``a* = w``, so the pseudo-regret of a step is ``1 - wᵀa_t`` and the action suboptimality is the
Euclidean distance ``‖a* - a_t‖`` (the base default).

The noisy oracle perturbs ``a*`` by the default ``U[-1, 1]^d`` and the rollout projects the result back
onto the ball (:meth:`LinearBandit.project`). ``action_low/high = ∓1`` describe the box ``[-1, 1]^d``
that contains the ball, which is all the box-assuming defaults need. The default scaling (loc 0,
scale 1) fits: rewards lie within about ``[-2.5, 2.5]`` and the coordinates of ``a*`` have sd ``1/√d``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from omgpt import checks
from omgpt.tasks.base import Envs, Task
from omgpt.tasks.mixins import check_noise_std, GaussianNoise
from omgpt.tasks.registry import register


NORM_TOL = 1e-6  # float slack of the unit ball (see LinearBandit.project)


def unit_vectors(n: int, d: int, generator: torch.Generator) -> Tensor:
    """``n`` directions uniform on the unit sphere of ``R^d`` (normalised Gaussians), ``(n, d)``."""
    while True:
        z = torch.randn(n, d, generator=generator, device=generator.device)
        norm = torch.linalg.vector_norm(z, dim=-1, keepdim=True)
        if (norm > 0).all():  # a zero Gaussian vector has probability 0; redraw rather than divide by it
            return z / norm


@register("linear-bandit")
class LinearBandit(GaussianNoise, Task):
    """Args:
    dim: dimension ``d`` of actions and of ``w`` (paper: 2).
    noise_std: standard deviation ``σ`` of the reward noise (paper: 0.2).
    """

    loss = "l1"  # the Bayes decision under it: the posterior median (coordinate-wise)
    moved_params = ("w",)
    moved_on_sphere = True  # w is a unit vector
    benchmarks = ("linucb", "lints")  # the paper's benchmarks for this task (appendix D.3)
    context_dim = 0
    obs_dim = 1
    action_low, action_high = -1.0, 1.0  # the box [-1, 1]^d around the unit ball

    def __init__(self, dim: int = 2, noise_std: float = 0.2, **pool):
        self.dim, self.noise_std = checks.size("dim", dim), check_noise_std(noise_std)
        self.action_dim = self.dim
        super().__init__(**pool)

    def sample_prior(self, n: int, generator: torch.Generator) -> Envs:
        return {"w": unit_vectors(n, self.dim, generator)}

    def sample_context(self, envs: Envs, t: int, generator: torch.Generator) -> Tensor:
        w = envs["w"]
        return w.new_zeros(w.shape[0], 0)

    def optimal_action(self, envs: Envs, x: Tensor, t: int) -> Tensor:
        return envs["w"].clone()

    def expected_reward(self, envs: Envs, x: Tensor, a: Tensor, t: int) -> Tensor:
        return (envs["w"] * a).sum(-1)

    def mean_observation(self, envs: Envs, x: Tensor, a: Tensor, t: int) -> Tensor:
        """The observation is the reward: its mean is the expected reward."""
        return self.expected_reward(envs, x, a, t)[:, None]

    def regression_features(self, x: Tensor, a: Tensor) -> Tensor:
        """The mean reward ``wᵀa``: features the action, ``(B, 1, d)``."""
        return a[:, None]

    def regression_params(self, candidates: Envs) -> tuple[Tensor, None]:
        return candidates["w"], None

    def log_prior(self, candidates: Envs) -> Tensor:
        """Uniform on the sphere (the rejuvenation walk stays on it)."""
        return candidates["w"].new_zeros(candidates["w"].shape[0])

    def project(self, a: Tensor, x: Tensor | None = None) -> Tensor:
        """Euclidean projection onto the unit ball: vectors with norm above 1 are scaled down to norm 1,
        the others are left unchanged.

        Norms within ``NORM_TOL`` of 1 count as inside: a unit vector such as ``a* = w`` has a float
        norm of ``1 ± 1e-7``, and rescaling it would move the oracle off ``a*`` (nonzero regret)."""
        norm = torch.linalg.vector_norm(a, dim=-1, keepdim=True)
        return torch.where(norm > 1.0 + NORM_TOL, a / norm, a)

    def mean_action(self, a: Tensor, x: Tensor | None = None) -> Tensor:
        """Back onto the unit sphere: the average of unit ``a*`` lies inside the ball, and the posterior-
        expected reward ``E[w]ᵀa`` is maximised over the ball by ``E[w] / ‖E[w]‖`` (a zero mean stays 0)."""
        norm = torch.linalg.vector_norm(a, dim=-1, keepdim=True)
        return torch.where(norm > 0, a / norm.clamp(min=1e-30), a)

    def sample_action(self, n: int, generator: torch.Generator) -> Tensor:
        """Uniform in the unit ball: a uniform direction times a radius ``U^{1/d}``, ``(n, dim)``."""
        direction = unit_vectors(n, self.dim, generator)
        radius = torch.rand(n, 1, generator=generator, device=generator.device) ** (1.0 / self.dim)
        return direction * radius
