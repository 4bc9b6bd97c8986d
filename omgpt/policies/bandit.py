"""Bandit benchmarks (paper appendix D.3, docs/paper-gaps.md §5): UCB and Gaussian Thompson sampling for the
multi-armed bandit, LinUCB and LinTS for the linear bandit.

All four are batched over environments: their statistics are ``(B, ·)`` tensors updated in
``observe`` and every decision is a handful of batched tensor operations. Statistics are kept in
float64 (cheap at these sizes, and the ridge solves stay accurate however long the episode); the
actions go back in the context's dtype. ``T`` below is always the episode horizon given to ``reset``
and ``β_T = sqrt(2 log T)`` the exploration scale all four share.

Multi-armed bandit (``n_a`` = pulls of arm ``a`` so far, ``r̂_a`` = their mean reward, 0 if none):

* ``ucb``: ``a_t = argmax_a r̂_a + sqrt(2 log T / max(1, n_a))`` -- docs/paper-gaps.md §5's correction of the paper's
  ``sqrt(2 log T)/min{1, n_a}`` (which never shrinks the bonus).
* ``ts``: ``a_t = argmax_a r~_a``, ``r~_a ~ N(r̂_a, sqrt(2 log T)/max(1, n_a))`` independently.
  **The second argument is a variance**: the standard deviation is ``(2 log T)^{1/4} / sqrt(max(1, n_a))``.
  Reasons: (i) the paper writes its Gaussians as ``N(mean, σ²)`` (the rewards' ``N(r_a, σ²)``;
  that their ``0.2`` is the standard deviation is settled by the authors' code, docs/paper-gaps.md §6, and changes
  nothing here); (ii) the paper's LinTS samples
  from ``N(ŵ, sqrt(2 log T) Σ_t^{-1})``, which is unambiguously a covariance, and in one dimension
  with unit actions ``Σ_t^{-1} = 1/(n + σ²) ≈ 1/max(1, n)`` -- the bandit formula is its
  per-arm special case only under the variance reading; (iii) a Gaussian posterior's variance shrinks
  like ``1/n`` (its sd like ``1/sqrt(n)``); a *standard deviation* of ``1/n`` would concentrate the
  samples faster than the estimate ``r̂_a`` does, i.e. under-explore.

Cold starts (both): an unpulled arm has ``r̂_a = 0`` and ``n_a = 0``, so, by ``max(1, n_a)``, the same
bonus / spread as an arm pulled once -- unpulled arms are *not* forced first (that is the formula as
written; an arm whose first reward beats 0 is favoured over the unpulled ones, one below 0 is not).
UCB is deterministic and breaks ties by the lowest arm index (``torch.argmax`` returns the first
maximum, as :meth:`MultiArmedBandit.project` does), so its first pull is arm 0 in every environment --
harmless, since arms are exchangeable under the prior. Exact ties after the first pull need two
identical continuous rewards (probability 0). TS's first pull is the argmax of ``k`` draws from
``N(0, sqrt(2 log T))``: a uniformly random arm, from the policy generator.

Linear bandit (``Σ_t = Σ_{τ<t} a_τ a_τᵀ + σ² I_d`` with ``σ`` the task's noise standard deviation,
``ŵ_t = Σ_t^{-1} Σ_{τ<t} O_τ a_τ`` -- ridge regression; both as the paper writes them):

* ``linucb``: ``a_t ∈ argmax_{‖a‖≤1} ŵ_tᵀa + β_T ‖a‖_{Σ_t^{-1}}`` -- see :func:`maximise_on_ball` for
  how the (non-concave) maximisation is solved and how accurately.
* ``lints``: ``w~_t ~ N(ŵ_t, β_T Σ_t^{-1})`` (the covariance is ``sqrt(2 log T)·Σ_t^{-1}``, as written,
  so ``w~ = ŵ + (2 log T)^{1/4} L^{-T} z`` with ``Σ_t = L Lᵀ`` and ``z ~ N(0, I)`` from the policy
  generator) and ``a_t = w~_t / ‖w~_t‖``, the maximiser of ``w~ᵀa`` over the unit ball.

Cold starts: at ``t = 1`` LinUCB's objective is constant on the sphere (``ŵ = 0``,
``Σ^{-1} = I/σ²``), so it plays ``e_1 = (1, 0, …)`` (the tie rule; the prior on ``w`` is rotation
invariant, so no direction is better); LinTS plays the direction of a draw from ``N(0, β_T I/σ²)``,
a uniformly random unit vector. (``w~ = 0`` happens only when ``T = 1``, where ``β_T = 0``; LinTS then
plays ``e_1``.)

Free constants (docs/protocol.md). ``β_T`` is sized for unit-variance rewards while the tasks' noise has standard
deviation 0.2, so each policy takes an ``explore`` multiplier ``c`` on its bonus or its sampling spread
(the authors' bandit code grid-searches the same multiplier), and LinUCB / LinTS a ``ridge`` ``λ``
in place of ``σ²`` in ``Σ_t``. The defaults are the paper's formulas; ``<name>-tuned`` reads the
constants chosen on validation environments (:mod:`omgpt.tuning`). Two textbook variants that know
the noise level are registered as well: ``ucb-noise`` (UCB1's bonus scaled by the noise ``σ``,
``r̂_a + σ sqrt(2 log T / max(1, n_a))``) and ``ts-noise`` (Agrawal & Goyal's Gaussian Thompson
sampling with the known noise variance, ``r~_a ~ N(S_a/(n_a + 1), σ²/(n_a + 1))``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from omgpt import checks
from omgpt.policies.base import Policy, register_policy
from omgpt.tasks.linear_bandit import LinearBandit
from omgpt.tasks.mab import MultiArmedBandit


def exploration_scale(horizon: int) -> float:
    """``β_T = sqrt(2 log T)`` (0 for ``T = 1``)."""
    return math.sqrt(2.0 * math.log(max(horizon, 1)))


# --------------------------------------------------------------------------------------------------
# Multi-armed bandit
EXPLORE_GRID = (0.01, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)  # multipliers of the paper's exploration


class _ArmStatistics(Policy):
    """Per-arm pull counts ``n_a`` and reward sums, ``(B, k)`` float64, from the one-hot actions played.

    Args:
        explore: multiplier ``c`` of the exploration bonus (UCB) or the sampling standard deviation (TS);
            1 is the paper's formula.
    """

    tunable = {"explore": EXPLORE_GRID}

    def __init__(self, task, explore: float = 1.0):
        super().__init__(task)
        self.explore = checks.number("explore", explore, low=0)

    def reset(self, envs, horizon, generator):
        super().reset(envs, horizon, generator)
        shape = (self.batch, self.task.n_arms)
        self.counts = torch.zeros(shape, dtype=torch.float64, device=self.device)
        self.sums = torch.zeros(shape, dtype=torch.float64, device=self.device)
        self.beta = exploration_scale(horizon)

    def observe(self, t: int, actions: Tensor, observations: Tensor) -> None:
        a = actions.to(self.device, torch.float64)  # one-hot (B, k)
        self.counts += a
        self.sums += a * observations.to(self.device, torch.float64)  # (B, 1) broadcasts over arms

    def means(self) -> Tensor:
        """``r̂_a``: empirical mean reward, 0 for unpulled arms, ``(B, k)``."""
        return self.sums / self.counts.clamp(min=1.0)

    def choose(self, scores: Tensor, like: Tensor) -> Tensor:
        """One-hot of ``argmax`` (first maximum on ties), ``(B, k)`` in ``like``'s dtype/device."""
        return self.task.one_hot(scores.argmax(-1)).to(dtype=like.dtype, device=like.device)


@register_policy("ucb", tasks=(MultiArmedBandit,))
class UCB(_ArmStatistics):
    """``a_t = argmax_a r̂_a + sqrt(2 log T / max(1, n_a))``, ties to the lowest arm index (module doc)."""

    def index(self) -> Tensor:
        """The UCB index of every arm, ``(B, k)`` float64."""
        return self.means() + self.explore * torch.sqrt(
            2.0 * math.log(max(self.horizon, 1)) / self.counts.clamp(min=1.0)
        )

    def act(self, t: int, x: Tensor) -> Tensor:
        return self.choose(self.index(), x)


@register_policy("ts", tasks=(MultiArmedBandit,))
class GaussianTS(_ArmStatistics):
    """``a_t = argmax_a r~_a`` with ``r~_a ~ N(r̂_a, v_a)``, variance ``v_a = sqrt(2 log T)/max(1, n_a)``
    (the module doc explains the variance reading). Draws use the policy generator."""

    def variances(self) -> Tensor:
        """``v_a = sqrt(2 log T) / max(1, n_a)``, ``(B, k)`` float64."""
        return self.beta / self.counts.clamp(min=1.0)

    def sample(self) -> Tensor:
        """One draw of ``r~`` per arm and environment, ``(B, k)`` float64."""
        z = torch.randn(self.counts.shape, generator=self.generator, device=self.device, dtype=torch.float64)
        return self.means() + self.explore * self.variances().sqrt() * z

    def act(self, t: int, x: Tensor) -> Tensor:
        return self.choose(self.sample(), x)


@register_policy("ucb-noise", tasks=(MultiArmedBandit,))
class UCBKnownNoise(UCB):
    """UCB1 for rewards of known noise ``σ``: ``r̂_a + σ sqrt(2 log T / max(1, n_a))`` (``explore = σ``)."""

    tunable = {}

    def __init__(self, task):
        super().__init__(task, explore=task.noise_std)


@register_policy("ts-noise", tasks=(MultiArmedBandit,))
class GaussianTSKnownNoise(GaussianTS):
    """Gaussian Thompson sampling with the known noise variance (Agrawal & Goyal 2017, §2.2, their
    flat-prior form): ``r~_a ~ N(S_a / (n_a + 1), σ² / (n_a + 1))`` with ``S_a`` the arm's reward sum."""

    tunable = {}

    def means(self) -> Tensor:
        return self.sums / (self.counts + 1.0)

    def variances(self) -> Tensor:
        return self.task.noise_std**2 / (self.counts + 1.0)


# --------------------------------------------------------------------------------------------------
# Linear bandit: maximising ŵᵀa + β‖a‖_M over the unit ball (M = Σ^{-1})
def ucb_objective(a: Tensor, w_hat: Tensor, m: Tensor, beta: float) -> Tensor:
    """``ŵᵀa + β sqrt(aᵀMa)`` for candidates ``a (B, S, d)``, ``ŵ (B, d)``, ``M (B, d, d)`` -> ``(B, S)``."""
    quad = torch.einsum("bsd,bde,bse->bs", a, m, a).clamp(min=0.0)
    return torch.einsum("bsd,bd->bs", a, w_hat) + beta * quad.sqrt()


TIE_TOL = 1e-13  # relative: objective values this close count as ties (float noise, e.g. at t = 1)


def _first_max(values: Tensor) -> Tensor:
    """Index of the first value within ``TIE_TOL`` (relative) of the row maximum, ``(B,)``: ties go to
    the lowest index even when rounding makes a later candidate larger by an ulp."""
    top = values.max(-1, keepdim=True).values
    near = values >= top - TIE_TOL * (1.0 + top.abs())
    return near.to(torch.uint8).argmax(-1)  # argmax returns the first maximum


def _circle(theta: Tensor) -> Tensor:
    return torch.stack([torch.cos(theta), torch.sin(theta)], dim=-1)


def _circle_objective(theta: Tensor, w_hat: Tensor, m: Tensor, beta: float) -> Tensor:
    """:func:`ucb_objective` at ``a = (cos θ, sin θ)`` for angles ``θ`` ``(B, S)`` or ``(S,)`` -> ``(B, S)``,
    written out in ``cos θ``, ``sin θ`` (several times faster than the batched quadratic form)."""
    c, s = torch.cos(theta), torch.sin(theta)
    col = lambda v: v[:, None]  # noqa: E731 -- (B,) -> (B, 1)
    linear = col(w_hat[:, 0]) * c + col(w_hat[:, 1]) * s
    quad = col(m[:, 0, 0]) * c * c + 2 * col(m[:, 0, 1]) * c * s + col(m[:, 1, 1]) * s * s
    return linear + beta * quad.clamp(min=0.0).sqrt()


def _maximise_on_circle(w_hat: Tensor, m: Tensor, beta: float, coarse: int, fine: int, stages: int) -> Tensor:
    theta = torch.arange(coarse, dtype=w_hat.dtype, device=w_hat.device) * (2 * math.pi / coarse)
    values = _circle_objective(theta, w_hat, m, beta)
    best = theta[_first_max(values)]  # (B,): first maximum on ties -> θ = 0, a = e_1
    half = 2 * math.pi / coarse  # the optimum's basin lies within one coarse spacing of the best point
    offsets = torch.linspace(-1.0, 1.0, 2 * fine + 1, dtype=w_hat.dtype, device=w_hat.device)  # includes 0
    for _ in range(stages):
        grid = best[:, None] + half * offsets  # (B, 2·fine + 1), centred on the incumbent
        values = _circle_objective(grid, w_hat, m, beta)
        centre = values[:, fine]
        pick = values.argmax(-1)
        top = values.gather(-1, pick[:, None])[:, 0]
        improved = top > centre + TIE_TOL * (1.0 + centre.abs())  # keep the incumbent on ties
        best = torch.where(improved, grid.gather(-1, pick[:, None])[:, 0], best)
        half = half / fine
    return _circle(best)


def _unit(z: Tensor) -> Tensor:
    return z / torch.linalg.vector_norm(z, dim=-1, keepdim=True).clamp(min=1e-300)


def _secular_candidates(w_hat: Tensor, m: Tensor, beta: float, iterations: int) -> Tensor:
    """Candidates ``(B, 3, d)`` from the exact reformulation (see :func:`maximise_on_ball`): the root of
    the secular equation and the two "hard case" points."""
    mu, q = torch.linalg.eigh(m)  # ascending eigenvalues μ_i > 0, eigenvectors in the columns of Q
    alpha2 = beta**2 * mu  # α_i² (α_i = β sqrt(μ_i): the eigenvalues of A = β M^{1/2})
    top = alpha2[:, -1:]  # α_max², (B, 1)
    gap = (top - alpha2).clamp(min=0.0)  # γ_i = α_max² - α_i² ≥ 0, computed without cancellation
    c = torch.einsum("bdi,bd->bi", q, w_hat)  # c' = Qᵀŵ
    ac2 = alpha2 * c * c  # (α_i c'_i)²

    # Root s* > 0 of φ(s) = Σ (α_i c'_i)² / (s + γ_i)² = 1 (λ = α_max² + s): φ decreases from φ(0+)
    # to 0, and φ(s) ≤ α_max²‖c‖²/s², so s* ≤ α_max‖c‖. Bisection to float64 resolution.
    lo = torch.zeros_like(top)
    hi = (top.sqrt() * torch.linalg.vector_norm(c, dim=-1, keepdim=True)).clamp(min=1e-300)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        phi = (ac2 / (mid + gap).square()).sum(-1, keepdim=True)
        above = phi > 1.0  # the root lies to the right of mid
        lo, hi = torch.where(above, mid, lo), torch.where(above, hi, mid)
    # z = c' + α ⊙ v with v_i = α_i c'_i / (s + γ_i): z_i = c'_i (α_max² + s) / (s + γ_i).
    root = c * (top + hi) / (hi + gap)

    # Hard case (c' ⟂ the top eigenspace, φ(0+) ≤ 1): λ = α_max², v_i as above off the top eigenspace,
    # and the rest of the unit norm along the top eigenvector, with either sign.
    rest = gap > 1e-12 * top
    v = torch.where(rest, alpha2.sqrt() * c / torch.where(rest, gap, 1.0), 0.0)
    tau = (1.0 - v.square().sum(-1, keepdim=True)).clamp(min=0.0).sqrt()
    e_top = torch.zeros_like(v)
    e_top[:, -1] = 1.0
    hard = [c + alpha2.sqrt() * (v + sign * tau * e_top) for sign in (1.0, -1.0)]

    z = torch.stack([root, *hard], dim=1)  # (B, 3, d) in the eigenbasis
    return _unit(torch.einsum("bdi,bsi->bsd", q, z))


def maximise_on_ball(
    w_hat: Tensor,
    m: Tensor,
    beta: float,
    coarse: int = 1024,
    fine: int = 128,
    stages: int = 3,
    iterations: int = 200,
) -> Tensor:
    """``argmax_{‖a‖≤1} f(a) = ŵᵀa + β sqrt(aᵀMa)`` for a batch: ``ŵ (B, d)``, ``M (B, d, d)`` SPD -> ``(B, d)``.

    ``f`` is convex (linear plus a norm), so its maximum over the ball is attained on the unit sphere;
    it is not concave and can have two local maxima there (near ``±`` the top eigenvector of ``M``
    when ``ŵ`` is small), so a local ascent alone is not safe. Two methods, and the best of their
    candidates is returned (every candidate is a unit vector, so taking the best can only help):

    * **Exact reformulation** (any ``d ≥ 2``). With ``A = β M^{1/2}``, ``β‖a‖_M = max_{‖v‖≤1} vᵀAa``, so
      ``max_a f(a) = max_{‖v‖≤1} ‖ŵ + Av‖`` and ``a* = (ŵ + Av*)/‖ŵ + Av*‖``. Maximising the convex
      quadratic ``‖ŵ + Av‖²`` over the ball is a trust-region subproblem whose global solution is
      known: in the eigenbasis of ``M`` (eigenvalues ``α_i²`` of ``A²``, ``c' = Qᵀŵ``),
      ``v_i = α_i c'_i / (λ - α_i²)`` with ``λ ≥ α_max²`` the root of ``Σ_i (α_i c'_i/(λ - α_i²))² = 1``
      -- i.e. ``a* ∝ (λI - β²M)^{-1} ŵ``. The root is found by ``iterations`` bisection steps (to float64
      resolution, objective error ~1e-15 relative). In the "hard case" (``ŵ`` orthogonal to the top
      eigenvector, e.g. ``ŵ = 0``) there is no root above ``α_max²``; then ``λ = α_max²`` and the top
      eigenvector fills the remaining norm of ``v`` (two symmetric maximisers): both are candidates, and
      they also cover the nearly-hard case whose root float64 cannot resolve.
    * ``d = 2`` (the paper's case) also gets a **grid** on the circle ``a = (cos θ, sin θ)``, as an
      independent check: ``coarse`` angles, then ``stages`` times ``2·fine + 1`` angles spanning ± the
      previous spacing around the incumbent (defaults: ``2π/1024 ≈ 6e-3`` rad down to ``≈ 3e-9`` rad;
      never worse than the best coarse angle). The tests check both agree to ~1e-12.
    * ``d = 1``: the sphere is ``{+1, -1}``.

    Ties (within ``TIE_TOL``, e.g. the constant objective at ``t = 1``) go to the first candidate:
    ``e_1`` (the grid's ``θ = 0``; for ``d ≥ 3`` ``±e_i`` are listed first).
    """
    b, d = w_hat.shape
    eye = torch.eye(d, dtype=w_hat.dtype, device=w_hat.device).expand(b, d, d)
    if d == 1:
        candidates = torch.cat([eye, -eye], dim=1)
    elif d == 2:
        grid = _maximise_on_circle(w_hat, m, beta, coarse, fine, stages)[:, None]
        candidates = torch.cat([grid, _secular_candidates(w_hat, m, beta, iterations)], dim=1)
    else:
        candidates = torch.cat([eye, -eye, _secular_candidates(w_hat, m, beta, iterations)], dim=1)
    values = ucb_objective(candidates, w_hat, m, beta)
    return candidates[torch.arange(b, device=w_hat.device), _first_max(values)]


class _Ridge(Policy):
    """``Σ_t = Σ a aᵀ + λ I`` ``(B, d, d)`` and ``Σ O a`` ``(B, d)``, float64, accumulated in ``observe``.

    Args:
        explore: multiplier ``c`` of ``β_T`` (LinUCB's bonus, LinTS' covariance); 1 is the paper's.
        ridge: ``λ``; default the paper's ``σ²`` (the task's noise variance).
    """

    tunable = {"explore": (0.001, 0.003, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0), "ridge": (0.01, 0.04, 0.2, 1.0)}

    def __init__(self, task, explore: float = 1.0, ridge: float | None = None):
        super().__init__(task)
        self.explore = checks.number("explore", explore, low=0)
        self.ridge = task.noise_std**2 if ridge is None else checks.number("ridge", ridge, low=0, low_open=True)

    def reset(self, envs, horizon, generator):
        super().reset(envs, horizon, generator)
        d = self.task.dim
        eye = torch.eye(d, dtype=torch.float64, device=self.device)
        self.gram = (self.ridge * eye).expand(self.batch, d, d).clone()  # Σ_t
        self.moment = torch.zeros(self.batch, d, dtype=torch.float64, device=self.device)  # Σ O a
        self.beta = self.explore * exploration_scale(horizon)

    def observe(self, t: int, actions: Tensor, observations: Tensor) -> None:
        a = actions.to(self.device, torch.float64)  # (B, d)
        self.gram += a[:, :, None] * a[:, None, :]
        self.moment += observations.to(self.device, torch.float64) * a

    def estimate(self) -> Tensor:
        """Ridge estimate ``ŵ = Σ_t^{-1} Σ O a``, ``(B, d)`` float64."""
        return torch.linalg.solve(self.gram, self.moment)


@register_policy("linucb", tasks=(LinearBandit,))
class LinUCB(_Ridge):
    """``a_t ∈ argmax_{‖a‖≤1} ŵᵀa + sqrt(2 log T) ‖a‖_{Σ_t^{-1}}``, maximised by :func:`maximise_on_ball`."""

    def act(self, t: int, x: Tensor) -> Tensor:
        m = torch.linalg.inv(self.gram)
        m = 0.5 * (m + m.mT)  # exactly symmetric for eigh / the quadratic form
        return maximise_on_ball(self.estimate(), m, self.beta).to(dtype=x.dtype, device=x.device)


@register_policy("lints", tasks=(LinearBandit,))
class LinTS(_Ridge):
    """``w~ ~ N(ŵ, sqrt(2 log T) Σ_t^{-1})`` from the policy generator, ``a_t = w~/‖w~‖``."""

    def sample(self) -> Tensor:
        """One draw of ``w~`` per environment, ``(B, d)`` float64."""
        z = torch.randn(self.moment.shape, generator=self.generator, device=self.device, dtype=torch.float64)
        chol = torch.linalg.cholesky(self.gram)  # Σ = L Lᵀ, so Cov(L^{-T} z) = Σ^{-1}
        noise = torch.linalg.solve_triangular(chol.mT, z[..., None], upper=True)[..., 0]
        return self.estimate() + math.sqrt(self.beta) * noise

    def act(self, t: int, x: Tensor) -> Tensor:
        w = self.sample()
        norm = torch.linalg.vector_norm(w, dim=-1, keepdim=True)
        e1 = torch.zeros_like(w)
        e1[:, 0] = 1.0
        a = torch.where(norm > 0, w / norm.clamp(min=1e-300), e1)
        return a.to(dtype=x.dtype, device=x.device)
