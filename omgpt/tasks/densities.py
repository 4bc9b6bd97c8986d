"""Prior and likelihood helpers of the tasks: uniform draws, box densities, the Gaussian log likelihood."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def uniform(n: int, dims: tuple[int, ...], low: float, high: float, generator: torch.Generator) -> Tensor:
    """``U[low, high]`` samples of shape ``(n, *dims)`` on the generator's device."""
    return low + (high - low) * torch.rand((n, *dims), generator=generator, device=generator.device)


def box_log_density(v: Tensor, lo: float, hi: float, width: float | None = None) -> Tensor:
    """Log density (up to a constant) of the rows of ``v`` ``(M, d)`` under ``U[lo, hi]^d``: ``0``
    inside, ``-inf`` outside. With ``width < hi - lo``, that of the pricing in-domain shift's mixture
    instead: ``κ ~ U[lo, hi - width]``, then ``U[κ, κ + width]^d``, whose density is proportional to
    the length of the ``κ`` that cover ``v``."""
    if width is None or width >= hi - lo:
        inside = (v.amin(-1) >= lo) & (v.amax(-1) <= hi)
        return torch.where(inside, 0.0, -math.inf).to(v.dtype)
    low = torch.clamp(v.amax(-1) - width, min=lo)
    high = torch.clamp(v.amin(-1), max=hi - width)
    inside = ((v >= lo) & (v <= hi)).all(-1) & (high > low)
    return torch.where(inside, torch.log((high - low).clamp(min=1e-30)), torch.full_like(low, -math.inf))


MIN_NOISE_VAR = 1e-6  # noise_std = 0 (a noiseless test shift) would make the Gaussian likelihood a point mass


def gaussian_log_likelihood(o: Tensor, mean: Tensor, noise_std: float) -> Tensor:
    """``log N(o; mean, σ²)`` up to a constant, ``-(o - mean)² / (2σ²)``, for the tasks with Gaussian
    observation noise of standard deviation ``σ = noise_std`` (docs/paper-gaps.md §6). The paper writes
    ``exp(-(1/σ²) Σ (O - mean)²)``, the likelihood of noise variance ``σ²/2``, which sharpens the
    posterior by a factor 2 in log space; this is the correct Gaussian one."""
    return -((o - mean) ** 2) / (2 * noise_variance(noise_std))


def noise_variance(noise_std: float) -> float:
    """``σ²`` as the Gaussian likelihood uses it (at least :data:`MIN_NOISE_VAR`)."""
    return max(float(noise_std) ** 2, MIN_NOISE_VAR)
