"""Contextual dynamic pricing (paper appendix D.2 and §5.1.4): linear, square or mixed demand, and
the test-time shifts of the environment prior.

Environment ``γ = (α, β)``: ``α ~ U[0.5, 1.5]^d``, ``β ~ U[0.05, 1.05]^d`` (paper: ``d = 6``; 4 / 10 / 20
in the model-size study). Context ``X_t ~ U[0, 2.5]^d``. Noise ``ε_t ~ N(0, σ²)``, ``σ = 0.2`` (a
variance, as the paper's posterior formulas use it). Observation ``O_t = D_t``; reward is revenue
``a · D_t``. Demand at price ``a``:

* linear (the paper's): ``D = αᵀX - βᵀX · a + ε``; expected revenue ``a (αᵀX - βᵀX a)`` is maximised by
  ``a* = αᵀX / (2 βᵀX)``, at most 15 under this prior, so always inside ``A = [0, 30]``;
* square (``demand_types="square"``; the paper never defines it, docs/paper-gaps.md §3):
  ``D = αᵀX - βᵀX · a² + ε``; expected revenue ``a (αᵀX - βᵀX a²)`` is concave on ``a ≥ 0`` and
  maximised by ``a* = sqrt(αᵀX / (3 βᵀX))``, at most ``sqrt(10) ≈ 3.2``;
* mixed (``demand_types="mixed"``): each environment is linear or square with probability 1/2, the
  type hidden from the decision maker and stored as ``envs["square"]`` (bool ``(B,)``, only in the mixed
  prior); demand, ``a*`` and expected revenue follow each environment's own type.

Test-time shifts (paper §5.1.4) change only the prior of ``(α, β)``, never the scaling, so a model
pre-trained on the unshifted prior can be evaluated on them by passing the options at evaluation:

* ``noise_std``: the test noise standard deviation (the paper tests 0.1 / 0.2 / 0.3 against
  pre-training 0.2);
* ``ood_shift = μ`` (out-of-domain): ``α ~ U[0.5+μ, 1.5+μ]^d``, ``β ~ U[0.05+μ, 1.05+μ]^d``
  (paper: ``μ ∈ {0.1, 0.5, 1}``);
* ``id_shift = μ`` (in-domain): per environment, draw ``κ_1 ~ U[0.5, 0.5+μ]`` and
  ``κ_2 ~ U[0.05, 0.05+μ]`` (the paper's ``U[0.5, 1.5-(1-μ)]`` and ``U[0.05, 1.05-(1-μ)]``), then
  ``α ~ U[κ_1, κ_1+1-μ]^d`` and ``β ~ U[κ_2, κ_2+1-μ]^d`` -- a random sub-interval of length ``1-μ``
  of each original range, one ``κ`` per environment shared by all ``d`` coordinates (the paper writes
  a scalar ``κ`` and ``[κ, κ+1-μ]^6``). We read "randomly selected" as part of generating each test
  environment, not as one sub-interval for the whole test set: that is what makes the parameters
  "more centered within the range" on average, as the paper explains its results (paper:
  ``μ ∈ {0.1, 0.2, 0.3}``). Both shifts compose (the sub-interval is taken of the shifted range).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from omgpt import checks
from omgpt.errors import OMGPTError
from omgpt.tasks.base import Envs, Scaling, Task
from omgpt.tasks.densities import box_log_density, uniform
from omgpt.tasks.mixins import check_noise_std, DemandTypes, GaussianNoise
from omgpt.tasks.registry import register

DEMAND_TYPES = ("linear", "square", "mixed")


@register("pricing-square", demand_types="square")
@register("pricing")  # applied first: the class's name
class Pricing(GaussianNoise, DemandTypes, Task):
    """Args:
    dim: context dimension ``d`` (paper: 6; 4 / 10 / 20 in the scaling study).
    noise_std: standard deviation ``σ`` of the demand noise (paper: 0.2).
    demand_types: ``"linear"`` (paper), ``"square"`` or ``"mixed"`` (1/2 each, hidden in ``envs["square"]``).
    ood_shift: out-of-domain shift ``μ`` of both parameter ranges (test-time; paper §5.1.4).
    id_shift: in-domain shift ``μ ∈ [0, 1)``: random sub-intervals of length ``1-μ`` (test-time).
    """

    loss = "mse"  # the Bayes decision under it: the posterior mean of a*
    moved_params = ("alpha", "beta")  # the mixed prior's type is only resampled
    benchmarks = ("ilse", "cils", "ts-pricing")  # the paper's benchmarks for this task (appendix D.3)
    obs_dim = 1
    action_dim = 1
    action_low, action_high = 0.0, 30.0
    alpha_range: ClassVar[tuple[float, float]] = (0.5, 1.5)
    beta_range: ClassVar[tuple[float, float]] = (0.05, 1.05)

    def __init__(
        self,
        dim: int = 6,
        noise_std: float = 0.2,
        demand_types: str = "linear",
        ood_shift: float = 0.0,
        id_shift: float = 0.0,
        **pool,
    ):
        if demand_types not in DEMAND_TYPES:
            raise OMGPTError(f"demand_types must be one of {', '.join(DEMAND_TYPES)}; got {demand_types!r}")
        if not 0.0 <= id_shift < 1.0:
            raise OMGPTError(f"id_shift must be in [0, 1), got {id_shift}")
        if self.beta_range[0] + ood_shift <= 0:
            raise OMGPTError(f"ood_shift must keep β positive (> {-self.beta_range[0]}), got {ood_shift}")
        dim = checks.size("dim", dim)
        self.dim, self.noise_std, self.demand_types = dim, check_noise_std(noise_std), demand_types
        self.ood_shift, self.id_shift = float(ood_shift), float(id_shift)
        self.context_dim = dim
        super().__init__(**pool)

    def sample_prior(self, n: int, generator: torch.Generator) -> Envs:
        # Without shifts these are exactly the draws (and values) of the unshifted prior.
        (a_lo, a_hi), (b_lo, b_hi) = self.alpha_range, self.beta_range
        shift, mu = self.ood_shift, self.id_shift
        alpha = uniform(n, (self.dim,), a_lo + shift, a_hi + shift, generator)
        beta = uniform(n, (self.dim,), b_lo + shift, b_hi + shift, generator)
        if mu > 0:  # shrink each range to a random sub-interval [κ, κ + 1 - μ]: an affine map per env
            width = 1.0 - mu
            k1 = uniform(n, (1,), a_lo + shift, a_hi + shift - width, generator)
            k2 = uniform(n, (1,), b_lo + shift, b_hi + shift - width, generator)
            alpha = k1 + (alpha - (a_lo + shift)) * width / (a_hi - a_lo)
            beta = k2 + (beta - (b_lo + shift)) * width / (b_hi - b_lo)
        envs = {"alpha": alpha, "beta": beta}
        if self.demand_types == "mixed":
            envs["square"] = torch.rand(n, generator=generator, device=generator.device) < 0.5
        return envs

    def sample_context(self, envs: Envs, t: int, generator: torch.Generator) -> Tensor:
        return uniform(envs["alpha"].shape[0], (self.dim,), 0.0, 2.5, generator)

    def intercept_slope(self, envs: Envs, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(αᵀX, βᵀX)``: demand at price 0 and its decrease per unit of price (or of price squared,
        square demand), each ``(B,)``."""
        return torch.einsum("...d,...d->...", envs["alpha"], x), torch.einsum(
            "...d,...d->...", envs["beta"], x
        )  # 2x a mul-sum

    def _price_term(self, envs: Envs, price: Tensor) -> Tensor:
        """``a`` (linear) or ``a²`` (square), per environment, for prices ``(B,)``."""
        square = self.is_square(envs)
        if isinstance(square, bool):
            return price**2 if square else price
        return torch.where(square, price**2, price)

    def mean_observation(self, envs: Envs, x: Tensor, a: Tensor, t: int) -> Tensor:
        """The expected demand at price ``a``: ``αᵀX - βᵀX · a`` (``a²`` for square demand), ``(B, 1)``."""
        intercept, slope = self.intercept_slope(envs, x)
        return (intercept - slope * self._price_term(envs, a[:, 0]))[:, None]

    def regression_features(self, x: Tensor, a: Tensor) -> Tensor:
        """The mean demand ``αᵀx - βᵀx · a`` (square: ``a²``) is ``(x, -a x)ᵀ(α, β)`` (``-a² x``):
        ``(B, K, 2d)``, the kinds linear then square in the mixed prior, else the task's one type."""
        kinds = {"linear": (a,), "square": (a**2,), "mixed": (a, a**2)}[self.demand_types]
        return torch.stack([torch.cat([x, -term * x], dim=-1) for term in kinds], dim=1)

    def regression_params(self, candidates: Envs) -> tuple[Tensor, Tensor | None]:
        theta = torch.cat([candidates["alpha"], candidates["beta"]], dim=-1)
        return theta, (candidates["square"].long() if self.demand_types == "mixed" else None)

    def regression_envs(self, theta: Tensor) -> Envs:
        """The environments of parameter rows ``θ = (α, β)`` ``(M, 2d)`` (:meth:`regression_params`' inverse)."""
        return {"alpha": theta[:, : self.dim], "beta": theta[:, self.dim :]}

    def prior_box(self) -> tuple[Tensor, Tensor] | None:
        """The prior of ``θ = (α, β)`` as a box ``(lo, hi)`` ``(2d,)`` each (alg-star's Gaussian sampler),
        or ``None`` where it is not a box with one demand type (the in-domain shift's mixture, mixed types)."""
        if self.id_shift > 0 or self.demand_types == "mixed":
            return None
        (a_lo, a_hi), (b_lo, b_hi), s, d = self.alpha_range, self.beta_range, self.ood_shift, self.dim
        return torch.tensor([a_lo + s] * d + [b_lo + s] * d), torch.tensor([a_hi + s] * d + [b_hi + s] * d)

    def params_at_context(self, envs: Envs, x: Tensor) -> Tensor:
        """``(αᵀX, βᵀX)`` ``(B, 2)``: the demand function at ``x``, all that ``a*`` depends on there."""
        return torch.stack(self.intercept_slope(envs, x), dim=-1)

    def log_prior(self, candidates: Envs) -> Tensor:
        """``U`` on the (shifted) ranges of ``α`` and ``β``, or the in-domain shift's mixture over
        random sub-intervals of length ``1 - μ``."""
        (a_lo, a_hi), (b_lo, b_hi) = self.alpha_range, self.beta_range
        shift, width = self.ood_shift, 1.0 - self.id_shift
        return box_log_density(
            candidates["alpha"], a_lo + shift, a_hi + shift, width * (a_hi - a_lo)
        ) + box_log_density(candidates["beta"], b_lo + shift, b_hi + shift, width * (b_hi - b_lo))

    def optimal_action(self, envs: Envs, x: Tensor, t: int) -> Tensor:
        intercept, slope = self.intercept_slope(envs, x)
        linear = intercept / (2 * slope)
        square = self.is_square(envs)
        if isinstance(square, bool):
            best = torch.sqrt(intercept / (3 * slope)) if square else linear
        else:
            best = torch.where(square, torch.sqrt(intercept / (3 * slope)), linear)
        return self.project(best[:, None], x)

    def expected_reward(self, envs: Envs, x: Tensor, a: Tensor, t: int) -> Tensor:
        intercept, slope = self.intercept_slope(envs, x)
        return a[:, 0] * (intercept - slope * self._price_term(envs, a[:, 0]))

    # Measured under the (unshifted) prior with noisy-oracle prices, 4096 environments x 100 steps
    # (demand mean/sd at d = 4, 6, 10, 20 | a* mean/sd at d = 6 | played prices mean/sd at d = 6):
    #   linear: 2.5/1.4, 3.7/1.8, 6.2/2.8, 12.5/5.2 (~0.6 d / 0.3 d) | 0.98/0.33 | 0.98/0.47
    #   square: 3.0/2.1, 4.5/2.9, 7.5/4.5, 15.0/8.6 (~0.75 d / 0.45 d) | 0.80/0.13 | 0.80/0.36
    #   mixed:  2.8/1.8, 4.1/2.4, 6.9/3.8, 13.8/7.2 (~0.69 d / 0.4 d) | 0.89/0.27 | 0.90/0.43
    # a*'s sd shrinks with d (0.45 at d = 4, 0.15 at d = 20, linear); the action scale stays at the
    # order of a*'s sd at d = 6 (the read-out's target), which leaves the played prices (the action
    # tokens, widened by the noisy oracle's ±1 perturbations) at sd 1.0-1.9 in its units across d
    # (1.9: linear, d = 4, first 40 steps) and the targets at 0.2-1.4.
    # X ~ U[0, 2.5] has mean 1.25, sd 0.72. Shifts and noise_std never change the scaling.
    _SCALING: ClassVar[dict[str, tuple[float, float, float, float]]] = {
        # demand loc / d, demand scale / d, a* loc, a* scale
        "linear": (0.6, 0.3, 1.0, 0.33),
        "square": (0.75, 0.45, 0.8, 0.3),
        "mixed": (0.69, 0.4, 0.9, 0.33),
    }

    def scaling(self) -> Scaling:
        d_loc, d_scale, a_loc, a_scale = self._SCALING[self.demand_types]
        return Scaling(
            feature_loc=(d_loc * self.dim,) + (1.25,) * self.dim,
            feature_scale=(d_scale * self.dim,) + (0.72,) * self.dim,
            action_loc=(a_loc,),
            action_scale=(a_scale,),
        )
