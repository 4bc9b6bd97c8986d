"""Newsvendor benchmarks (paper appendix D.3): ERM (Ban & Rudin 2019) and FAI (Ding et al. 2024).

Both assume demand linear in the features ``X~`` (docs/paper-gaps.md §5), which is what makes them the right
baselines on linear demand and mis-specified on square or non-stationary demand. The newsvendor context
is ``x = (h, X~)``: the holding cost ``h`` is known and constant within an episode, ``X~`` are the
demand features.

Each is the strongest honest version of itself, as the paper authors' own code runs it (docs/paper-gaps.md §6), with
the paper text's weaker form kept as a named variant so both can be measured in one run:

* ``fai`` -- the authors' FAI: ``w~_0 ~ U[0,3]^d``, step ``2(1 - e^{-t}) / (t·max(1, h))``, weights
  clipped to ``[0, 40]``; ``fai-paper`` -- the paper text's: ``w~_0 ~ U[0,1]^d``, steps ``h/√t``, ``l/√t``.
* ``erm`` -- quantile regression with a small L1 penalty on the slopes (``l1 = 0.5``), which picks a
  moderate fit when there are fewer samples than coefficients; ``erm-lp`` -- the unpenalised exact LP,
  whose optimum with ``t ≤ d + 1`` samples is an extreme interpolating vertex (mean ``|a - a*|`` 4-5
  at ``t = 3-6`` against 2.3-3.4 penalised; final regret at ``T = 100`` 43.9 against 33.6:
  ``benchmarks/erm_cold_start.py``).

Cold start: at the first step neither has data, so both play ``w~_0ᵀX~_1`` with ``w~_0`` FAI's initial
weights drawn from the policy generator (``U[0,3]^d`` for ``fai`` and ``erm``, ``U[0,1]^d`` for the
``-paper`` / ``-lp`` variants), so ERM and FAI start from the same kind of guess.

Free constants (docs/protocol.md): ERM's ``l1``, FAI's step-size multiplier ``step_scale`` and initial range
``initial_high``; ``erm-tuned`` / ``fai-tuned`` read the values chosen on validation environments
(:mod:`omgpt.tuning`). The paper-text variants keep their constants fixed: they exist to show the text.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.optimize import linprog
from torch import Tensor

from omgpt import checks, lp
from omgpt.errors import OMGPTError
from omgpt.policies.base import HistoryPolicy, Policy, register_policy
from omgpt.tasks.newsvendor import Newsvendor
from omgpt.tasks.newsvendor_nonperishable import NonperishableNewsvendor


def quantile_regression(features: np.ndarray, targets: np.ndarray, q: float, l1: float = 0.0) -> np.ndarray:
    """Linear quantile regression with intercept at level ``q``, solved exactly as an LP by HiGHS (its
    readable statement, and the reference the tests check this against, is
    :func:`omgpt.lp.quantile_regression`).

    The standard LP (Koenker & Bassett): with ``Z = [1, features]`` ``(n, p)``,
    ``min_{β, u, v} q·1ᵀu + (1-q)·1ᵀv + l1·‖β_{1:}‖₁  s.t.  Zβ + u - v = y,  u, v ≥ 0``
    -- ``u`` and ``v`` are the positive and negative residuals, so the objective is the pinball loss
    (summed, not averaged, over the ``n`` points: a fixed ``l1`` weighs less and less as data accrue),
    plus an L1 penalty on the slopes (not the intercept) written with ``β_{1:} = β⁺ - β⁻``, ``β^± ≥ 0``.

    Why the LP is built here rather than calling ``sklearn.linear_model.QuantileRegressor(solver=
    "highs", alpha=0)``, which solves the same LP: on a 2-core CPU (``timeit``, best of 5 repeats of 50
    fits, n = 100 points, d = 4) this dense formulation takes 2.4-3.2 ms per fit against 3.7 ms for
    sklearn (1.1 vs 2.1 ms at n = 10), whose input validation and sparse assembly dominate at these
    sizes; a ``scipy.sparse`` ``A_eq`` is ~15% slower than dense here. The coefficients agree to 1e-7.

    Args:
        features: ``(n, d)``. targets: ``(n,)``. q: quantile level in ``(0, 1)``.

    Returns:
        ``β = (intercept, coefficients)``, shape ``(1 + d,)``. Without the penalty and with fewer points
        than coefficients the LP has a continuum of optima (every interpolating ``β``) and HiGHS returns
        an extreme vertex, often with huge slopes; the penalty picks the sparsest, most moderate fit.
    """
    n, d = features.shape
    ones, eye = np.ones((n, 1)), np.eye(n)
    a_eq = np.hstack([ones, features, -features, eye, -eye])  # (n, 1 + 2d + 2n) acting on (β_0, β⁺, β⁻, u, v)
    cost = np.concatenate([[0.0], np.full(2 * d, l1), np.full(n, q), np.full(n, 1.0 - q)])
    bounds = [(None, None)] + [(0, None)] * (2 * d + 2 * n)
    result = linprog(cost, A_eq=a_eq, b_eq=targets, bounds=bounds, method="highs")
    if not result.success:  # cannot happen for a feasible, bounded-below LP; fail loudly if it does
        raise RuntimeError(f"quantile-regression LP failed: {result.message}")
    x = result.x
    return np.concatenate([x[:1], x[1 : 1 + d] - x[1 + d : 1 + 2 * d]])


def batched_quantile_regression(
    features: Tensor, targets: Tensor, q: Tensor, l1: float = 0.0, tol: float = 1e-10, max_iter: int = 100
) -> Tensor:
    """The problem of :func:`quantile_regression` for ``B`` data sets at once, by a primal-dual interior
    point method (Frisch-Newton, Portnoy & Koenker 1997; the ``"fn"`` method of R's quantreg) in torch.

    The penalty ``l1·|β_j|`` is the pinball loss of two pseudo-observations ``(±l1 e_j, 0)`` without
    intercept (``ρ_q(-l1 β_j) + ρ_q(l1 β_j) = l1 |β_j|``), so the problem is an unpenalised quantile
    regression on ``n + 2d`` rows ``z_i``. Its LP dual is ``max yᵀa  s.t.  Zᵀa = (1-q) Zᵀ1,
    0 ≤ a ≤ 1`` (Koenker 2005, §6.2), whose equality multipliers are ``-β``; every iteration solves one
    ``(1+d) × (1+d)`` system per data set, so the cost is ``O(n d²)`` per iteration and data set with no
    Python loop over the batch. Iterates stop when every duality gap is below ``tol`` times ``1 + |objective|``.

    Args:
        features: ``(B, n, d)``. targets: ``(B, n)``. q: quantile levels ``(B,)`` in ``(0, 1)``.

    Returns:
        ``β = (intercept, coefficients)`` ``(B, 1 + d)`` float64. The optimal objective equals the LP's
        (up to ``tol``); where the LP's optimum is not unique the point returned is inside the optimal
        face, not HiGHS's vertex.
    """
    features, y, q = features.double(), targets.double(), q.double()[:, None]
    b, n, d = features.shape
    data = torch.cat([torch.ones(b, n, 1, dtype=features.dtype, device=features.device), features], dim=-1)
    if l1 > 0:
        pseudo = l1 * torch.eye(d, dtype=features.dtype, device=features.device)
        pseudo = torch.cat(
            [torch.zeros(2 * d, 1, dtype=pseudo.dtype, device=pseudo.device), torch.cat([pseudo, -pseudo])], dim=-1
        )
        data = torch.cat([data, pseudo.expand(b, 2 * d, 1 + d)], dim=1)
        y = torch.cat([y, y.new_zeros(b, 2 * d)], dim=1)
    # min cᵀx s.t. Ax = r, 0 ≤ x ≤ 1 (x = a, c = -y, A = Zᵀ); slack s = 1 - x; dual: Aᵀv + z - w = c.
    a_t, c = data, -y  # A = a_tᵀ, (B, m, p)
    x = (1 - q).expand_as(c).clone()  # primal feasible: A x = (1-q) Zᵀ1
    s = 1 - x
    v = torch.linalg.lstsq(a_t, c[..., None]).solution  # (B, p, 1): least squares start for the dual
    resid = c - (a_t @ v)[..., 0]
    z = resid.clamp(min=0) + 1.0  # z - w = resid: dual feasible, strictly positive
    w = z - resid

    def solve(rhs: Tensor, theta: Tensor) -> tuple[Tensor, Tensor]:
        """Newton direction of the primal-dual system at fixed scaling ``Θ``: ``(dx, dv)``."""
        normal = a_t.transpose(1, 2) @ (theta[..., None] * a_t)  # A Θ Aᵀ (B, p, p)
        # a relative ridge of 1e-13: A Θ Aᵀ is singular with fewer points than coefficients and no penalty
        normal = normal + 1e-13 * normal.diagonal(dim1=1, dim2=2).mean(-1)[:, None, None] * torch.eye(
            normal.shape[-1], dtype=normal.dtype, device=normal.device
        )
        dv = torch.linalg.solve(normal, (a_t.transpose(1, 2) @ (theta * rhs)[..., None]))
        return theta * ((a_t @ dv)[..., 0] - rhs), dv

    def step(value: Tensor, change: Tensor) -> Tensor:
        """Largest step ``≤ 1`` keeping ``value + α change ≥ 0`` (each row), times 0.995."""
        ratio = torch.where(change < 0, -value / change, torch.full_like(value, math.inf))
        return (0.995 * ratio.amin(-1, keepdim=True)).clamp(max=1.0)

    for _ in range(max_iter):
        gap = (x * z + s * w).sum(-1, keepdim=True)  # (B, 1)
        objective = (c * x).sum(-1, keepdim=True)
        if bool((gap <= tol * (1 + objective.abs())).all()):
            break
        theta = 1.0 / (z / x + w / s)
        mu = gap / (2 * x.shape[-1])
        # predictor (affine, μ = 0), then Mehrotra's centring and second-order corrector
        # Newton on x∘z = τ_z, s∘w = τ_w (A dx = 0, ds = -dx, Aᵀdv + dz - dw = 0) gives
        # dx = Θ(Aᵀdv - rhs), rhs = z - w - τ_z/x + τ_w/s, and A Θ Aᵀ dv = A Θ rhs.
        dx, dv = solve(z - w, theta)
        ds = -dx
        dz, dw = -z - z * dx / x, -w - w * ds / s
        ap, ad = torch.minimum(step(x, dx), step(s, ds)), torch.minimum(step(z, dz), step(w, dw))
        mu_aff = ((x + ap * dx) * (z + ad * dz) + (s + ap * ds) * (w + ad * dw)).sum(-1, keepdim=True) / (
            2 * x.shape[-1]
        )
        sigma = (mu_aff / mu).clamp(0, 1) ** 3
        target_z = sigma * mu - dx * dz  # the complementarity targets with the corrector terms
        target_w = sigma * mu - ds * dw
        dx, dv = solve(z - w - target_z / x + target_w / s, theta)
        ds = -dx
        dz = (target_z - x * z - z * dx) / x
        dw = (target_w - s * w - w * ds) / s
        ap, ad = torch.minimum(step(x, dx), step(s, ds)), torch.minimum(step(z, dz), step(w, dw))
        x, s = x + ap * dx, s + ap * ds
        v, z, w = v + ad[..., None] * dv, z + ad * dz, w + ad * dw
    return -v[..., 0]


def initial_weights(policy: HistoryPolicy, high: float) -> Tensor:
    """FAI's ``w~_0 ~ U[0, high]^d`` per environment ``(B, d)``, from the policy generator."""
    return high * torch.rand(policy.batch, policy.task.dim, generator=policy.generator, device=policy.device)


@register_policy("erm", tasks=(Newsvendor,))
class ERM(HistoryPolicy):
    """Empirical risk minimisation (Ban & Rudin 2019) as the paper's appendix describes it.

    The optimal order is the ``1/(1+h)`` quantile of ``wᵀX~ + ε``, so at step ``t`` ERM fits a linear
    quantile regression (with intercept, which absorbs the noise quantile) at level ``q = 1/(1+h)`` on
    all past pairs ``(X~_τ, O_τ)``, ``τ < t``, and orders its prediction at ``X~_t``. The intercept
    matters: ``wᵀX~ + ε̄/(1+h)`` is linear in ``X~`` only up to that constant.

    Few samples. With ``t ≤ d + 1`` past points the exact LP interpolates them with an extreme vertex
    (slopes of ±10 and more), and its orders are far off; the authors' iterative solver returns a
    moderate fit there. ``l1`` adds ``l1·‖slopes‖₁`` to the summed pinball loss (see
    :func:`quantile_regression`): with few points it shrinks the fit towards an intercept (the
    empirical quantile of past demands), and as points accrue its weight vanishes. ``l1 = 0.5`` was the
    best of ``{0, 0.1, 0.3, 0.5, 1}`` on the full prior at ``T = 100`` (``benchmarks/erm_cold_start.py``);
    ``erm-lp`` is ERM with ``l1 = 0`` (the exact, unpenalised LP, solved by HiGHS: with ``t ≤ d + 1``
    points its optimum is a continuum and HiGHS's vertex is what defines it) and the paper's
    ``U[0,1]^d`` start.

    Solvers. By default (``solver="ipm"``) every environment's problem of a step is solved at once by
    :func:`batched_quantile_regression`, an interior point method batched in torch; ``"highs"`` solves
    the standard-form LP of :func:`quantile_regression` per environment and step (a Python loop over
    the batch, a few ms per LP at ``t ~ 100``: the reference the tests check the batched solver
    against -- optimal objectives equal to ~1e-10, coefficients to ~1e-8 where the optimum is unique).

    Censored task: ERM regresses on the observed sales ``min(D, a)``, as the literature's naive ERM does
    -- it ignores censoring, so it is biased downward there; that is the baseline the paper compares to.

    Args:
        l1: L1 penalty on the slopes, in units of the summed pinball loss.
        initial_high: the first order is ``w~_0ᵀX~_1``, ``w~_0 ~ U[0, initial_high]^d`` (FAI's start).
        solver: ``"ipm"`` (batched interior point, default), ``"highs"`` (one HiGHS LP per environment)
            or ``"cvxpy"`` (the readable reference :func:`omgpt.lp.quantile_regression`; slower).
    """

    SOLVERS = {"ipm": None, "highs": quantile_regression, "cvxpy": lp.quantile_regression}
    tunable = {"l1": (0.0, 0.1, 0.3, 0.5, 1.0, 2.0)}

    # one small LP per episode per step: faster on one CPU thread than on two (omgpt.threads.at_most;
    # benchmarks/rollout_threads.py: 2.2x)
    cpu_threads = 1

    def __init__(self, task, l1: float = 0.5, initial_high: float = 3.0, solver: str = "ipm"):
        if solver not in self.SOLVERS:
            raise OMGPTError(f"unknown solver {solver!r}; choose one of {', '.join(self.SOLVERS)}")
        super().__init__(task)
        self.l1, self.initial_high, self.solver = float(l1), float(initial_high), solver

    def reset(self, envs, horizon, generator):
        super().reset(envs, horizon, generator)
        self.w0 = initial_weights(self, self.initial_high)  # (B, d)

    def decide(self, t: int, x: Tensor) -> Tensor:
        h, feats = self.task.split_context(x)  # (B,), (B, d)
        if t == 0:
            return (self.w0 * feats).sum(-1, keepdim=True)
        levels = 1.0 / (1.0 + h.double())  # (B,)
        if self.solver == "ipm":
            beta = batched_quantile_regression(
                self.task.split_context(self.xs[:, :t])[1], self.observations[:, :t, 0], levels, self.l1
            )
            return (beta[:, 0] + (beta[:, 1:] * feats.double()).sum(-1)).to(x.dtype)[:, None]
        past_feats = self.task.split_context(self.xs[:, :t])[1].double().cpu().numpy()  # (B, t, d)
        past_obs = self.observations[:, :t, 0].double().cpu().numpy()  # (B, t)
        levels = levels.cpu().numpy()
        now = feats.double().cpu().numpy()  # (B, d)
        orders = np.empty(self.batch)
        for i in range(self.batch):
            beta = self.SOLVERS[self.solver](past_feats[i], past_obs[i], levels[i], self.l1)
            orders[i] = beta[0] + beta[1:] @ now[i]
        return torch.as_tensor(orders, dtype=x.dtype, device=x.device)[:, None]


@register_policy("erm-lp", tasks=(Newsvendor,))
class ERMExactLP(ERM):
    """ERM as the paper text leaves it: the unpenalised LP and FAI's paper start ``U[0,1]^d``."""

    tunable = {}

    def __init__(self, task, l1: float = 0.0, initial_high: float = 1.0, solver: str = "highs"):
        super().__init__(task, l1, initial_high, solver)


@register_policy("fai", tasks=(Newsvendor,))
class FAI(HistoryPolicy):
    """Feature-based adaptive inventory (Ding et al. 2024): online (sub)gradient descent on the cost
    ``h (a - D)^+ + l (D - a)^+`` over linear order rules ``a = w~ᵀX~``::

        a_t = w~_tᵀ X~_t,   w~_t = Π(w~_{t-1} - η_t h X~_{t-1})   if O_{t-1} < a_{t-1}   (leftover)
                            w~_t = Π(w~_{t-1} + η_t l X~_{t-1})   otherwise               (stock-out)

    with ``t`` 1-based. Two variants (docs/paper-gaps.md §6):

    * ``schedule="authors"`` (``fai``, the default): the paper authors' own code -- ``w~_0 ~ U[0,3]^d``,
      ``η_t = 2(1 - e^{-t}) / (t · max(1, h))`` and ``Π`` clips every weight to ``[0, 40]``;
    * ``schedule="paper"`` (``fai-paper``): the paper's appendix text -- ``w~_0 ~ U[0,1]^d``,
      ``η_t = 1/√t`` and no clipping.

    At ``t = 1`` there is no ``t-1`` step, so the first order uses ``w~_0`` and the first update comes at
    ``t = 2``; in ``decide``'s 0-based ``t`` the 1-based index is ``t + 1``. ``a_{t-1}`` is the order
    actually placed (after projection onto ``A``).

    Censoring: the update needs only whether there was leftover stock. With sales ``O = min(D, a)``,
    ``O < a`` exactly when ``D < a``, so FAI runs unchanged (and unbiased) on the censored task.

    Batched over environments; ``w~`` lives in ``self.weights`` ``(B, d)``.

    Args:
        schedule: ``"authors"`` or ``"paper"`` (above).
        step_scale: multiplier of ``η_t`` (1: the schedule's own).
        initial_high: ``w~_0 ~ U[0, initial_high]^d``; default the schedule's (3 or 1).
    """

    SCHEDULES = ("authors", "paper")
    WEIGHT_CLIP = (0.0, 40.0)  # the authors' projection of the weights
    tunable = {"step_scale": (0.25, 0.5, 1.0, 2.0, 4.0), "initial_high": (1.0, 3.0, 6.0)}

    def __init__(self, task, schedule: str = "authors", step_scale: float = 1.0, initial_high: float | None = None):
        if schedule not in self.SCHEDULES:
            raise OMGPTError(f"fai schedule must be one of {', '.join(self.SCHEDULES)}; got {schedule!r}")
        super().__init__(task)
        self.schedule = schedule
        self.step_scale = checks.number("step_scale", step_scale, low=0)
        default_high = 3.0 if schedule == "authors" else 1.0
        self.initial_high = default_high if initial_high is None else checks.number("initial_high", initial_high, low=0)

    def reset(self, envs, horizon, generator):
        super().reset(envs, horizon, generator)
        self.weights = initial_weights(self, self.initial_high)  # (B, d)

    def step_size(self, t: int, h: Tensor) -> Tensor:
        """``η_t`` per environment ``(B,)`` for the 1-based step ``t``; the paper's ``1/√t``
        multiplies the cost's own slope (``h`` or ``l``), the authors' divides by ``max(1, h)``."""
        if self.schedule == "paper":
            return torch.full_like(h, self.step_scale / math.sqrt(t))
        return self.step_scale * 2.0 * (1.0 - math.exp(-t)) / (t * h.clamp(min=1.0))

    def decide(self, t: int, x: Tensor) -> Tensor:
        if t > 0:
            h, prev_feats = self.task.split_context(self.xs[:, t - 1])  # (B,), (B, d)
            leftover = self.observations[:, t - 1, 0] < self.actions[:, t - 1, 0]  # (B,): over-ordered
            slope = torch.where(leftover, -h, torch.full_like(h, self.task.lost_sale_cost))
            self.weights = self.weights + (self.step_size(t + 1, h) * slope)[:, None] * prev_feats
            if self.schedule == "authors":
                self.weights = self.weights.clamp(*self.WEIGHT_CLIP)
        return (self.weights * self.task.split_context(x)[1]).sum(-1, keepdim=True)


@register_policy("fai-paper", tasks=(Newsvendor,))
class FAIPaper(FAI):
    """FAI exactly as the paper's appendix text writes it (``U[0,1]^d`` start, ``h/√t``, ``l/√t`` steps)."""

    tunable = {}

    def __init__(self, task, schedule: str = "paper"):
        super().__init__(task, schedule)


@register_policy("uniform-level", tasks=(NonperishableNewsvendor,))
class UniformLevel(Policy):
    """Pre-training data for the non-perishable newsvendor: an order-up-to level uniform on
    ``[I_t + low, I_t + high]`` (leak-free: independent of the environment). ``random`` levels uniform on
    ``[I_t, I_t + 30]`` exceed the demand (mean ~11.5) by ~3.5 on average, so the inventory would drift
    upwards without bound; the default ``[0, 20]`` (mean order 10) keeps it small, as under good play
    (results/interpretability/nonperishable.yaml)."""

    def __init__(self, task, low: float = 0.0, high: float = 20.0):
        super().__init__(task)
        self.low, self.high = low, high

    def act(self, t, x):
        u = torch.rand(self.batch, 1, generator=self.generator, device=self.device)
        return x[:, :1] + self.low + (self.high - self.low) * u
