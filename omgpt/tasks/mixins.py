"""Mix-ins several tasks share: Gaussian observation noise (bandits, pricing) and the linear / square /
mixed demand types (pricing, newsvendor), and the check of the noise option."""

from __future__ import annotations

import torch
from torch import Tensor

from omgpt.errors import OMGPTError
from omgpt.tasks.base import Envs, HiddenType
from omgpt.tasks.densities import gaussian_log_likelihood, noise_variance


class GaussianNoise:
    """For tasks whose scalar observation is its mean plus ``N(0, σ²)`` noise, ``σ = noise_std``
    (bandits, pricing): the simulator and the likelihood both follow from :meth:`Task.mean_observation`."""

    noise_std: float

    def observe(self, envs: Envs, x: Tensor, a: Tensor, t: int, generator: torch.Generator) -> Tensor:
        mean = self.mean_observation(envs, x, a, t)[:, 0]
        noise = self.noise_std * torch.randn(mean.shape, generator=generator, device=generator.device)
        return (mean + noise)[:, None]

    def log_likelihood(self, candidates: Envs, x: Tensor, a: Tensor, o: Tensor, t: int) -> Tensor:
        return gaussian_log_likelihood(o[:, 0], self.mean_observation(candidates, x, a, t)[:, 0], self.noise_std)

    # The mean observation is linear in the hidden parameters, ``φ_k(x, a)ᵀθ_γ`` (``k``: the
    # environment's demand type, one of ``K``), so the Gaussian log-likelihood of a whole history is
    # ``-(yᵀy - 2θᵀΦ_kᵀy + θᵀΦ_kᵀΦ_kθ) / 2σ²``: the running ``Φ_kᵀΦ_k``, ``Φ_kᵀy`` and ``yᵀy`` suffice.
    def regression_features(self, x: Tensor, a: Tensor) -> Tensor:
        """``φ_k(x, a)`` for every kind ``k``, ``(B, K, p)``."""
        raise NotImplementedError

    def regression_params(self, candidates: Envs) -> tuple[Tensor, Tensor | None]:
        """``θ_γ`` ``(M, p)`` and each candidate's kind ``(M,)`` (``None`` when ``K = 1``)."""
        raise NotImplementedError

    def likelihood_stats(self, stats: Envs | None, x: Tensor, a: Tensor, o: Tensor, t: int, used: Tensor) -> Envs:
        phi = self.regression_features(x.double(), a.double()) * used[:, None, None]  # (B, K, p); ignored steps add 0
        y = o[:, 0].double() * used  # (B,)
        step = {"xtx": phi[..., :, None] * phi[..., None, :], "xty": phi * y[:, None, None], "yty": y**2}
        return step if stats is None else {k: stats[k] + v for k, v in step.items()}

    def likelihood_from_stats(self, candidates: Envs, stats: Envs) -> Tensor:
        theta, kind = self.regression_params(candidates)
        b = stats["yty"].shape[0]
        theta = theta.double().reshape(b, -1, theta.shape[-1])  # (b, N, p)
        # θᵀΦ_kᵀΦ_kθ - 2θᵀΦ_kᵀy for every kind k, (b, N, K)
        sq = torch.einsum("bnp,bkpq,bnq->bnk", theta, stats["xtx"], theta) - 2 * torch.einsum(
            "bnp,bkp->bnk", theta, stats["xty"]
        )
        sq = sq[..., 0] if kind is None else sq.gather(-1, kind.reshape(b, -1, 1))[..., 0]
        return (-(stats["yty"][:, None] + sq) / (2 * noise_variance(self.noise_std))).reshape(-1)


class DemandTypes:
    """For tasks whose demand is linear, square, or a hidden per-environment mixture of the two
    (``demand_types`` = ``"linear"`` / ``"square"`` / ``"mixed"``; pricing and newsvendor)."""

    demand_types: str

    @property
    def hidden_type(self) -> HiddenType | None:
        """The mixed prior's hidden demand type, ``envs["square"]``; fixed types hide none."""
        return HiddenType("square", "demand type", ("linear", "square")) if self.demand_types == "mixed" else None

    def is_square(self, envs: Envs) -> Tensor | bool:
        """Which environments have square demand: ``envs["square"]`` ``(B,)`` in the mixed prior, else
        the task's fixed type (a Python bool)."""
        if "square" in envs:
            return envs["square"]
        if self.demand_types == "mixed":
            raise KeyError("mixed demand types need envs['square']")
        return self.demand_types == "square"


def check_noise_std(noise_std: float) -> float:
    """The Gaussian tasks' noise option: a standard deviation ``σ ≥ 0`` (docs/paper-gaps.md §6: the paper's
    ``N(·, 0.2)`` is ``σ = 0.2``, as in the authors' code), finite."""
    value = float(noise_std)
    if not (value >= 0 and value < float("inf")):
        raise OMGPTError(f"noise_std must be a finite non-negative standard deviation, got {noise_std}")
    return value
