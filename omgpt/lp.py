"""Every linear program of the project, written as cvxpy reads it: the readable reference solvers.

Two kinds of LP appear in OMGPT:

* revenue management's **box LP** ``max cᵀy  s.t.  M y ≤ b,  0 ≤ y ≤ u`` -- the fluid LP of ``a*`` and
  of Ada, and the hindsight LP of the regret (:mod:`omgpt.tasks.revenue`);
* ERM's **quantile regression** with an L1 penalty on the slopes (:mod:`omgpt.policies.newsvendor`).

The code that runs them in rollouts is fast and harder to read: an exact batched vertex enumeration
for the box LP (thousands of tiny LPs per step), a dense HiGHS call on the standard-form LP for the
quantile regression. Here each problem is stated once in its mathematical form; the tests check the
fast solvers against these, and the ``solver="cvxpy"`` options of the revenue task, of Ada and of
ERM run them in place of the fast ones. cvxpy solves one LP per call (about 1-2 ms each, a compiled
problem reused through cvxpy ``Parameter`` s), which is why it is the reference and not the default.

cvxpy is imported on first use: importing :mod:`omgpt` does not pay for it.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from omgpt.errors import OMGPTError


def _solve(problem) -> None:
    import cvxpy as cp

    problem.solve()
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        raise OMGPTError(f"cvxpy could not solve the LP: status {problem.status}")


@lru_cache(maxsize=None)
def _box_lp(k: int, j: int):
    """``max cᵀy  s.t.  M y ≤ b,  0 ≤ y ≤ u`` with ``K = k`` variables and ``J = j`` constraints, its data
    as parameters so that cvxpy compiles it once per shape."""
    import cvxpy as cp

    c, m, b, upper = cp.Parameter(k), cp.Parameter((j, k)), cp.Parameter(j), cp.Parameter(k)
    y = cp.Variable(k)
    problem = cp.Problem(cp.Maximize(c @ y), [m @ y <= b, y >= 0, y <= upper])
    return problem, y, (c, m, b, upper)


def box_lp(c, m, b, upper) -> tuple[np.ndarray, np.ndarray]:
    """Solve ``max cᵀy  s.t.  M y ≤ b,  0 ≤ y ≤ upper`` for every row of a batch, one LP at a time.

    ``c (..., K)``, ``m (..., J, K)``, ``b (..., J)``, ``upper (..., K)`` (arrays or tensors). Returns
    ``(y (..., K), value (...))`` as float64 arrays."""
    c, m, b, upper = (np.asarray(v, dtype=np.float64) for v in (c, m, b, upper))
    lead, (k, j) = c.shape[:-1], (c.shape[-1], b.shape[-1])
    problem, y, params = _box_lp(k, j)
    rows = [v.reshape(-1, *v.shape[len(lead) :]) for v in (c, m, b, upper)]
    ys = np.empty((len(rows[0]), k))
    for i in range(len(ys)):
        for param, value in zip(params, rows):
            param.value = value[i]
        _solve(problem)
        ys[i] = np.clip(y.value, 0.0, rows[3][i])  # solver tolerance: back inside the box
    return ys.reshape(*lead, k), (rows[0] * ys).sum(-1).reshape(lead)


def quantile_regression(features: np.ndarray, targets: np.ndarray, q: float, l1: float = 0.0) -> np.ndarray:
    """Linear quantile regression with intercept at level ``q`` and an L1 penalty on the slopes:

    ``min_{β₀, β}  Σ_i ρ_q(y_i - β₀ - βᵀz_i) + l1·‖β‖₁``,  ``ρ_q(r) = max(q r, (q - 1) r)`` (the pinball loss).

    ``features (n, d)``, ``targets (n,)``; returns ``(β₀, β)`` of shape ``(1 + d,)``. An optimum, not
    necessarily the one a vertex solver returns when there are several (few points, no penalty)."""
    import cvxpy as cp

    features, targets = np.asarray(features, dtype=np.float64), np.asarray(targets, dtype=np.float64)
    d = features.shape[1]
    intercept = cp.Variable()
    slopes = cp.Variable(d) if d else None
    fit = intercept + features @ slopes if d else intercept * np.ones(len(targets))
    residual = targets - fit
    objective = cp.sum(cp.maximum(q * residual, (q - 1) * residual))
    if d and l1:
        objective = objective + l1 * cp.norm1(slopes)
    problem = cp.Problem(cp.Minimize(objective))
    _solve(problem)
    return np.concatenate([[intercept.value], slopes.value if d else []])
