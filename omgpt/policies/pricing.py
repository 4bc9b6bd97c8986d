"""Dynamic-pricing benchmarks (paper appendix D.3): ILSE (Qiang & Bayati 2016), CILS (Keskin &
Zeevi 2014) and Thompson sampling (TS, Wang et al. 2021: ``ts-pricing``).

All three estimate the linear demand ``D = αᵀX - βᵀX·a + ε`` by ridge regression on
``z = (X, a·X) ∈ R^{2d}``: ``(α̂, -β̂) = Σ_t^{-1} Σ_{τ<t} O_τ z_τ`` with
``Σ_t = Σ_{τ<t} z_τ z_τᵀ + σ² I`` (``σ`` = the task's noise standard deviation), and price greedily at
``â_t = α̂ᵀX_t / (2 β̂ᵀX_t)``; CILS adds forced exploration when prices stop moving, TS prices
greedily under parameters sampled around the estimate. They assume linear demand, so they are
mis-specified on the square-demand variants (docs/paper-gaps.md §5).

Cold start (``t = 1``): with no data the ridge estimate is ``α̂ = β̂ = 0`` and the greedy price is
undefined, so all three play a uniform random price from ``initial_prices`` (default ``U[0.5, 2]``, a
seller's plausible opening range) drawn with the policy generator. The same price is played whenever
the estimate cannot price, i.e. ``β̂ᵀX ≤ 0`` (estimated revenue does not bend down; TS: the sampled
``β~ ≤ 0``). An opening range over all of ``A = [0, 30]`` or jumping to the top of ``A`` costs ~1000
regret on step 1 alone while the prior's optimal prices sit near 1 (mean 0.98, sd 0.33): we give the
benchmarks the generous start.

Free constants (docs/protocol.md): every one takes the ridge ``λ`` in place of ``σ²`` (``ridge``); CILS its
forced-deviation constant ``κ`` in ``κ·t^{-1/4}`` (paper: ``1/10``, ``radius``); TS a multiplier of its
sampling covariance (``spread``, paper: 1). ``<name>-tuned`` reads the values chosen on validation
environments (:mod:`omgpt.tuning`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from omgpt import checks
from omgpt.policies.base import HistoryPolicy, register_policy
from omgpt.tasks.pricing import Pricing

RIDGE_GRID = (0.003, 0.01, 0.04, 0.2, 1.0, 5.0, 25.0)


@register_policy("ilse", tasks=(Pricing,))
class ILSE(HistoryPolicy):
    """Iterated least-squares estimation: the greedy price under the current ridge estimate.

    ``Σ`` ``(B, 2d, 2d)`` and ``Σ O z`` ``(B, 2d)`` are accumulated in ``observe`` and solved with one
    batched ``torch.linalg.solve`` per step. They are kept in float64: ``Σ``'s entries grow like
    ``t·(30·2.5)²`` while its smallest eigenvalue can stay near the ``σ² = 0.04`` ridge, a condition
    number at which a float32 solve loses most of its digits.

    When ``β̂ᵀX ≤ 0`` the estimated revenue ``a(α̂ᵀX - β̂ᵀX·a)`` has no interior maximum (it does not
    bend down); the policy then plays its opening price. Prices are clipped to ``A``.

    Args:
        initial_prices: ``(low, high)`` of the uniform opening price.
        ridge: ``λ`` of ``Σ_t = Σ z zᵀ + λ I``; default the paper's ``σ²`` (the task's noise variance).
    """

    tunable = {"ridge": RIDGE_GRID}

    def __init__(self, task, initial_prices: tuple[float, float] = (0.5, 2.0), ridge: float | None = None):
        super().__init__(task)
        self.initial_prices = initial_prices
        self.ridge = task.noise_std**2 if ridge is None else checks.number("ridge", ridge, low=0, low_open=True)

    def reset(self, envs, horizon, generator):
        super().reset(envs, horizon, generator)
        dim = 2 * self.task.context_dim
        eye = torch.eye(dim, dtype=torch.float64, device=self.device)
        self.gram = (self.ridge * eye).expand(self.batch, dim, dim).clone()  # Σ_t, (B, 2d, 2d)
        self.moment = torch.zeros(self.batch, dim, dtype=torch.float64, device=self.device)  # Σ O z, (B, 2d)

    def observe(self, t: int, actions: Tensor, observations: Tensor) -> None:
        super().observe(t, actions, observations)
        x = self.xs[:, t].double()  # (B, d)
        z = torch.cat([x, actions.double() * x], dim=-1)  # (B, 2d)
        self.gram += z[:, :, None] * z[:, None, :]
        self.moment += observations.double() * z

    def estimate(self) -> tuple[Tensor, Tensor]:
        """Ridge estimates ``(α̂, β̂)``, each ``(B, d)`` in float64."""
        theta = torch.linalg.solve(self.gram, self.moment)  # (B, 2d) = (α̂, -β̂)
        d = self.task.context_dim
        return theta[:, :d], -theta[:, d:]

    def random_price(self, like: Tensor) -> Tensor:
        """Uniform price in ``initial_prices``, ``(B, 1)``: the cold start."""
        low, high = self.initial_prices
        u = torch.rand(self.batch, 1, generator=self.generator, device=self.device)
        return (low + (high - low) * u).to(dtype=like.dtype, device=like.device)

    def greedy_price(self, x: Tensor) -> Tensor:
        """``â_t = α̂ᵀX / (2β̂ᵀX)`` (the opening price where ``β̂ᵀX ≤ 0``), clipped to ``A``, ``(B, 1)``."""
        alpha, beta = self.estimate()
        intercept, slope = (alpha * x.double()).sum(-1), (beta * x.double()).sum(-1)  # (B,), (B,)
        fallback = self.random_price(x)[:, 0].double()
        price = torch.where(slope > 0, intercept / (2 * slope), fallback)  # the unused branch may be inf/nan
        return price.clamp(self.task.action_low, self.task.action_high)[:, None].to(x.dtype)

    def decide(self, t: int, x: Tensor) -> Tensor:
        return self.random_price(x) if t == 0 else self.greedy_price(x)


@register_policy("cils", tasks=(Pricing,))
class CILS(ILSE):
    """Constrained iterated least squares (Keskin & Zeevi 2014) as the paper's appendix writes it.

    With ``â_t`` the ILSE price, ``ā_{t-1}`` the mean of the prices played so far and
    ``δ_t = â_t - ā_{t-1}`` (``t`` 1-based, so ``t = t_0 + 1`` for ``decide``'s 0-based ``t_0``):

        a_t = ā_{t-1} + sgn(δ_t) · t^{-1/4}/10   if |δ_t| < t^{-1/4}/10,   else â_t.

    Prices that hug the historical average carry no information about the slope ``β``; the forced
    deviation keeps the price dispersion growing like ``√t``, which the slope estimate needs to be
    consistent. ``sgn(0)`` is taken as ``+1`` so that an exact tie still explores. Clipped to ``A``.

    Args:
        radius: ``κ`` of the forced deviation ``κ·t^{-1/4}`` (the paper's ``1/10``).
    """

    tunable = {"ridge": RIDGE_GRID, "radius": (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)}

    def __init__(
        self, task, initial_prices: tuple[float, float] = (0.5, 2.0), ridge: float | None = None, radius: float = 0.1
    ):
        super().__init__(task, initial_prices, ridge)
        self.radius = checks.number("radius", radius, low=0)

    def decide(self, t: int, x: Tensor) -> Tensor:
        if t == 0:
            return self.random_price(x)
        greedy = self.greedy_price(x)  # (B, 1)
        mean_price = self.actions[:, :t].mean(dim=1).to(x.dtype)  # ā_{t-1}, (B, 1)
        delta = greedy - mean_price
        radius = self.radius * (t + 1) ** -0.25
        sign = torch.where(delta >= 0, 1.0, -1.0).to(x.dtype)
        price = torch.where(delta.abs() < radius, mean_price + sign * radius, greedy)
        return price.clamp(self.task.action_low, self.task.action_high)


@register_policy("ts-pricing", tasks=(Pricing,))
class TSPricing(ILSE):
    """Thompson sampling for pricing (Wang et al. 2021) as the paper's appendix writes it.

    With ILSE's ridge state -- ``Σ_t`` ``(2d×2d)`` and ``θ̂ = (α̂, -β̂) = Σ_t^{-1} Σ_{τ<t} O_τ z_τ`` -- and
    ``M = blockdiag(X_t, X_t)`` ``(2d×2)``, TS samples the intercept and price coefficient *at* ``X_t``,

        (α~, -β~) ~ N( Mᵀθ̂ = (α̂ᵀX_t, -β̂ᵀX_t),  Σ~_t^{-1} ),   Σ~_t = (Mᵀ Σ_t^{-1} M)^{-1},

    and prices ``a_t = α~ / (2β~)``, clipped to ``A``.

    Reading of the covariance. The paper samples from ``N(·, Σ~_t^{-1})`` and defines
    ``Σ~_t = (Mᵀ Σ_t^{-1} M)^{-1}``; the two inverses cancel, so the covariance is ``Mᵀ Σ_t^{-1} M``
    ``(2×2)`` -- exactly the covariance of ``Mᵀθ`` when ``θ ~ N(θ̂, Σ_t^{-1})`` (LinTS' posterior
    without the extra ``σ²`` or ``√(2 log T)`` factor), which is what "the empirical covariance
    matrix given ``X_t``" describes. We use it as is, no extra scale.

    Sign convention. The ridge estimates ``(α, -β)``, and ``Mᵀ Σ_t^{-1} M`` is the covariance of
    ``(αᵀX, -βᵀX)``. The paper writes the mean as ``(α̂ᵀX_t, β̂ᵀX_t)``; taken literally with this
    covariance the off-diagonal term would have the wrong sign (intercept and slope estimates are
    positively correlated -- a higher intercept is explained away by a steeper slope -- while
    ``Mᵀ Σ^{-1} M`` gives the intercept and ``-β`` a negative covariance). So we sample in the
    regression's coordinates, ``(α~, -β~) ~ N((α̂ᵀX, -β̂ᵀX), Mᵀ Σ_t^{-1} M)``, and flip the sign of the
    second coordinate: equivalently ``(α~, β~) ~ N((α̂ᵀX, β̂ᵀX), D Mᵀ Σ_t^{-1} M D)``, ``D = diag(1, -1)``.
    The variances are the same either way.

    As ILSE: the first price (``t = 1``) is the uniform opening price in ``initial_prices``, and so
    is every price whose sampled slope is not positive (``β~ ≤ 0``: sampled revenue does not bend
    down). Each step draws the two standard normals and then the fallback uniform from the policy
    generator (all environments at once), so runs are reproducible from the policy seed.

    Args:
        spread: multiplier of the sampling covariance ``Mᵀ Σ_t^{-1} M`` (the paper's: 1).
    """

    tunable = {"ridge": RIDGE_GRID, "spread": (0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)}

    def __init__(
        self, task, initial_prices: tuple[float, float] = (0.5, 2.0), ridge: float | None = None, spread: float = 1.0
    ):
        super().__init__(task, initial_prices, ridge)
        self.spread = checks.number("spread", spread, low=0)

    def sample_parameters(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Draw ``(α~, β~)`` at the context ``x`` ``(B, d)``, each ``(B,)`` in float64."""
        d = self.task.context_dim
        x64 = x.double()
        m = torch.zeros(self.batch, 2 * d, 2, dtype=torch.float64, device=x64.device)  # blockdiag(X, X)
        m[:, :d, 0], m[:, d:, 1] = x64, x64
        theta = torch.linalg.solve(self.gram, self.moment)  # (B, 2d) = (α̂, -β̂)
        mean = (m * theta[:, :, None]).sum(1)  # (B, 2) = (α̂ᵀX, -β̂ᵀX)
        cov = self.spread * m.transpose(1, 2) @ torch.linalg.solve(self.gram, m)  # (B, 2, 2) = c Mᵀ Σ^{-1} M
        cov = (cov + cov.transpose(1, 2)) / 2
        # 2×2 Cholesky written out (robust to a rank-deficient X = 0: the variances are then 0).
        c00, c01, c11 = cov[:, 0, 0].clamp(min=0), cov[:, 0, 1], cov[:, 1, 1]
        l00 = c00.sqrt()
        l10 = torch.where(l00 > 0, c01 / l00.clamp(min=1e-300), torch.zeros_like(c01))
        l11 = (c11 - l10**2).clamp(min=0).sqrt()
        eps = torch.randn(self.batch, 2, generator=self.generator, device=self.device).to(mean)
        intercept = mean[:, 0] + l00 * eps[:, 0]
        neg_slope = mean[:, 1] + l10 * eps[:, 0] + l11 * eps[:, 1]
        return intercept, -neg_slope

    def decide(self, t: int, x: Tensor) -> Tensor:
        if t == 0:
            return self.random_price(x)
        intercept, slope = self.sample_parameters(x)
        fallback = self.random_price(x)[:, 0].double()
        price = torch.where(slope > 0, intercept / (2 * slope), fallback)  # the unused branch may be inf/nan
        return price.clamp(self.task.action_low, self.task.action_high)[:, None].to(x.dtype)
