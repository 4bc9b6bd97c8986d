"""Network revenue management (paper appendix D.2, after Talluri & van Ryzin 2006, Jasin 2015).

There are ``J = 3`` resources with initial budget ``B_1 = T·1`` (``T`` the horizon, paper: 50) and
``K = 3`` customer types ``(r~^k, A~^k) ∈ [1, 2]^{1+J}`` (reward and per-resource consumption, drawn
``U[1,2]`` once per environment). Each period one customer arrives, of type ``k`` with probability
``p_k = μ_k / Σμ``, ``μ ~ U[0,1]^K`` (unknown). The action ``a_t ∈ [0, 1]`` is the probability of
accepting; the request is accepted, ``y_t = 1``, with probability ``a_t`` when the remaining budget
covers it (``A~_t ≤ B_t`` in every resource) and ``y_t = 0`` otherwise. An accepted request earns
``r~_t`` and consumes ``A~_t``: ``B_{t+1} = B_t - A~_t y_t`` (never negative).

Tokens (docs/paper-gaps.md §3, "Variants"). The paper's ``X_t = (r~_t, A~_t)`` hides the budget that ``a*_t``
depends on, so the context is ``X_t = (r~_t, A~_{t,1..J}, b_{t,1..J})`` with
``b_t = B_t / (T - t + 1)`` (1-based ``t``) the remaining budget per remaining period -- ``1 + 2J = 7``
numbers -- and the observation is the paper's ``O_t = X_t`` (the type) plus the realised acceptance:
``O_t = (r~_t, A~_{t,1..J}, y_t)`` -- ``J + 2 = 5`` numbers, ``y_t`` last.

Optimal action ``a*_t``: re-solve the fluid LP with the TRUE type probabilities every period,
``max Σ_k p_k r~^k y_k  s.t.  Σ_k p_k A~^k y_k ≤ b_t,  0 ≤ y ≤ 1``, and play ``y_k`` of the arriving
type (when the arriving request does not fit in the budget the action is immaterial -- it is
rejected anyway -- and ``a*`` is still the LP's ``y_k``).

LP solvers (``solver`` option). ``"enum"`` (default) is an exact batched solver: an LP with ``K``
variables attains its optimum at a vertex, where ``K`` of its ``2K + J`` constraints are tight, so
:func:`solve_box_lp` solves the ``C(9, 3) = 84`` minus the 21 impossible (``y_k = 0`` and
``y_k = u_k`` together) = 63 candidate ``3×3`` systems of every environment at once by Cramer's rule,
keeps the feasible candidates and takes the best (float64; ties go to the first candidate).
``"cvxpy"`` is the readable reference: the LP as :func:`omgpt.lp.box_lp` states it, one cvxpy call
per environment per LP. Measured on the development machine (2 shared CPU cores, one thread, K = J =
3, 2000 random LPs, SciPy 1.17.1, CVXPY 1.9.3; the ranges are two runs under different load):
``linprog(method="highs")`` 0.95-2.3 ms per LP; a CVXPY problem compiled once with ``Parameter`` data
(DPP, as :mod:`omgpt.lp` builds it) 1.2-2.2 ms per LP with the HiGHS backend, 0.8-1.2 ms with
Clarabel (objective within 1e-8 of HiGHS). Per-call overhead dominates LPs this small. The batched
enumeration: 0.36 ms for a single LP, 0.55 ms for a batch of 64 (9 µs per LP), 6-11 µs per LP for
batches of 1024-4096 -- 100-200× faster than one solver call per environment; every rollout step
solves two LP batches (``a*``, memoised across the oracle policy / target / suboptimality calls, and
the hindsight bound, shared by :meth:`Revenue.optimal_reward` and :meth:`Revenue.step`), so an oracle
rollout of 64 environments × 50 steps takes 0.08 s with ``enum`` and several seconds with one solver
call per LP (6.1 s with SciPy's HiGHS; identical regrets). The tests check ``enum`` against
``cvxpy`` on random LPs and against a brute-force grid.

Regret (docs/paper-gaps.md §4: the hindsight LP upper bound minus the collected reward). Let ``HLP_t`` be the
hindsight LP of the first ``t`` arrivals with the pro-rated budget ``(t/T)·B_1 = t·1``:
``max Σ_{s≤t} r~_s z_s  s.t.  Σ_{s≤t} A~_s z_s ≤ (t/T) B_1,  0 ≤ z ≤ 1`` (solved exactly by
aggregating the arrivals by type: ``K`` variables bounded by the type counts, the same vertex
solver). The per-step regret is ``(HLP_t - HLP_{t-1}) - r~_t a_t 1{A~_t ≤ B_t}``: the increment of the
bound minus the expected reward of the action (expectation over the acceptance coin; :meth:`regret`
is called without the realised ``y_t``). So the cumulative curve at ``t`` is
``HLP_t - Σ_{s≤t} E[reward_s]``, and at ``t = T`` it is exactly the paper's bound -- the hindsight LP
of the whole arrival sequence with the full budget ``B_1`` -- minus the (expected) collected reward,
which is ≥ 0 in expectation for every policy (run by run the realised reward ``Σ r~_t y_t`` never
exceeds the bound; its coin-averaged version can, by the acceptance noise). Mid-horizon values are not bounds (a policy may spend
more than ``t/T`` of the budget early) and can be negative.

Horizon. ``T`` is the ``horizon`` task option (default the paper's 50): it sets ``B_1 = T·1`` and the
divisor ``T - t + 1``. Episodes must not run longer (that raises); a shorter episode runs the
``T``-period problem cut short, whose final regret is not the hindsight bound of the short problem.
Training, validation and ``omgpt evaluate`` build the task with ``make_episode_task``, which sets this
option to the episode length unless it is given explicitly.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import torch
from torch import Tensor

from omgpt import checks, lp
from omgpt.errors import OMGPTError
from omgpt.tasks.base import Envs, Scaling, Task
from omgpt.tasks.densities import uniform
from omgpt.tasks.registry import register

_FEAS_TOL = 1e-9


@lru_cache(maxsize=None)
def _vertex_rows(k: int, j: int) -> tuple[tuple[int, ...], ...]:
    """``k``-tuples of constraints that can define a vertex of ``{M y ≤ b, 0 ≤ y ≤ u}``.

    Rows ``0..j-1``: ``M y ≤ b``; ``j..j+k-1``: ``-y ≤ 0``; ``j+k..j+2k-1``: ``y ≤ u``. A tuple holding
    both bounds of one variable is singular and dropped (``K = J = 3``: 63 of the 84 tuples remain).
    """
    keep = []
    for rows in itertools.combinations(range(j + 2 * k), k):
        lower = {r - j for r in rows if j <= r < j + k}
        upper = {r - j - k for r in rows if r >= j + k}
        if not lower & upper:
            keep.append(rows)
    return tuple(keep)


def _solve_small(a: list[list[Tensor]], rhs: list[Tensor]) -> tuple[list[Tensor], Tensor]:
    """Solve ``a y = rhs`` for a batch of small systems given entry by entry: ``a[i][j]`` and
    ``rhs[i]`` are tensors of one shape ``S``. Returns ``(y, nonsingular)``, ``y`` the list of
    coordinates (each ``S``).

    ``K = 3`` uses Cramer's rule written out on whole tensors (elementwise ops) -- on the CPU far
    faster than ``torch.linalg.solve_ex``, whose batched small solves pay a LAPACK call per matrix;
    other sizes fall back to ``solve_ex``.
    """
    k = len(rhs)
    if k == 3:
        (a00, a01, a02), (a10, a11, a12), (a20, a21, a22) = a
        # Cofactors: the inverse's columns are r1×r2, r2×r0, r0×r1 over det.
        c0 = (a11 * a22 - a12 * a21, a12 * a20 - a10 * a22, a10 * a21 - a11 * a20)  # r1×r2
        c1 = (a21 * a02 - a22 * a01, a22 * a00 - a20 * a02, a20 * a01 - a21 * a00)  # r2×r0
        c2 = (a01 * a12 - a02 * a11, a02 * a10 - a00 * a12, a00 * a11 - a01 * a10)  # r0×r1
        det = a00 * c0[0] + a01 * c0[1] + a02 * c0[2]
        return [(rhs[0] * c0[i] + rhs[1] * c1[i] + rhs[2] * c2[i]) / det for i in range(3)], det != 0
    mat = torch.stack([torch.stack(row, dim=-1) for row in a], dim=-2)
    y, info = torch.linalg.solve_ex(mat, torch.stack(rhs, dim=-1)[..., None])
    return list(y[..., 0].movedim(-1, 0)), info == 0


def solve_box_lp(c: Tensor, m: Tensor, b: Tensor, upper: Tensor) -> tuple[Tensor, Tensor]:
    """Exact batched solver of ``max cᵀy  s.t.  M y ≤ b,  0 ≤ y ≤ upper`` by vertex enumeration.

    Args: ``c (..., K)``, ``m (..., J, K)``, ``b (..., J)`` with ``b ≥ 0`` (so ``y = 0`` is feasible),
    ``upper (..., K)`` with ``upper ≥ 0``. Returns ``(y (..., K), value (...))`` in float64. Meant for
    small ``K`` (it enumerates ``O(C(2K+J, K))`` candidate vertices). The work is laid out as
    ``(candidate, batch)`` tensors: one small matrix product per matrix entry picks the candidate
    systems, then everything is elementwise -- no gathers of strided views, no tiny reductions.
    """
    lead, k, j = c.shape[:-1], c.shape[-1], b.shape[-1]
    c, m, b, upper = (v.double().reshape(-1, *v.shape[len(lead) :]) for v in (c, m, b, upper))
    n, device = c.shape[0], c.device
    eye = torch.eye(k, dtype=torch.float64, device=device).expand(n, k, k)
    g = torch.cat([m, -eye, eye], dim=1)  # (N, J + 2K, K): all constraints G y ≤ h
    h = torch.cat([b, torch.zeros_like(upper), upper], dim=1)  # (N, J + 2K)
    rows = torch.tensor(_vertex_rows(k, j), device=device)  # (V, K)
    pick = torch.nn.functional.one_hot(rows, j + 2 * k).double()  # (V, K, J + 2K)
    # Entry (i, l) of every candidate system, (V, N): row rows[v][i] of G, column l.
    a = [[pick[:, i] @ g[:, :, l].T for l in range(k)] for i in range(k)]
    ys, ok = _solve_small(a, [pick[:, i] @ h.T for i in range(k)])  # K coordinates, each (V, N)
    cols = [v.T.contiguous() for v in (c, upper, b)]  # (K, N), (K, N), (J, N)
    c_t, u_t, b_t = cols
    for i, yi in enumerate(ys):
        ok = ok & torch.isfinite(yi) & (yi >= -_FEAS_TOL) & (yi <= u_t[i] * (1 + _FEAS_TOL) + _FEAS_TOL)
    m_t = m.permute(1, 2, 0).contiguous()  # (J, K, N)
    for r in range(j):
        used = sum(m_t[r, i] * yi for i, yi in enumerate(ys))
        ok = ok & (used <= b_t[r] * (1 + _FEAS_TOL) + _FEAS_TOL)
    obj = sum(c_t[i] * yi for i, yi in enumerate(ys))
    obj = torch.where(ok, obj, torch.tensor(-torch.inf, dtype=torch.float64, device=device))
    best = obj.argmax(dim=0, keepdim=True)  # (1, N): the first best candidate
    y = torch.cat([yi.gather(0, best) for yi in ys], dim=0).T  # (N, K)
    y = torch.minimum(y.clamp(min=0), upper)
    return y.reshape(*lead, k), (c * y).sum(-1).reshape(lead)


def _same(key: tuple, other: tuple) -> bool:
    """Memo keys: the same tensor objects (identity) and the same step."""
    return key[-1] == other[-1] and all(a is b for a, b in zip(key[:-1], other[:-1]))


SOLVERS = ("enum", "cvxpy")


def solve(c: Tensor, m: Tensor, b: Tensor, upper: Tensor, solver: str = "enum") -> tuple[Tensor, Tensor]:
    """:func:`solve_box_lp` (``"enum"``) or its cvxpy reference :func:`omgpt.lp.box_lp` (``"cvxpy"``),
    as float64 tensors on the inputs' device."""
    if solver == "enum":
        return solve_box_lp(c, m, b, upper)
    if solver == "cvxpy":
        y, value = lp.box_lp(*(v.double().cpu() for v in (c, m, b, upper)))
        return torch.as_tensor(y, device=c.device), torch.as_tensor(value, device=c.device)
    raise OMGPTError(f"unknown LP solver {solver!r}; choose one of {', '.join(SOLVERS)}")


def fluid_lp(r: Tensor, a: Tensor, p: Tensor, b: Tensor, solver: str = "enum") -> Tensor:
    """The re-solving (fluid) LP ``max Σ_k p_k r_k y_k  s.t.  Σ_k p_k A_k y_k ≤ b,  0 ≤ y ≤ 1``.

    ``r (B, K)``, ``a (B, K, J)``, ``p (B, K)`` (true probabilities for ``a*``, empirical frequencies
    for Ada), ``b (B, J)`` budget per remaining period. Returns ``y (B, K)`` (float64).
    """
    r, a, p, b = r.double(), a.double(), p.double(), b.double()
    c, m, upper = p * r, (p[:, :, None] * a).transpose(1, 2), torch.ones_like(r)
    return solve(c, m, b, upper, solver)[0]


@register("revenue")
class Revenue(Task):
    """Args:
    horizon: ``T``: sets the budget ``B_1 = T·1`` and ``b_t = B_t/(T-t+1)`` (paper: 50).
    types: number of customer types ``K`` (paper: 3).
    resources: number of resources ``J`` (paper: 3).
    solver: ``"enum"`` (exact batched vertex enumeration, default) or ``"cvxpy"`` (the readable
        reference of :mod:`omgpt.lp`, one LP per environment and step; slow).
    """

    observed_params = ("r", "A")  # the type table is known (Ada reads it): a pool fixes only the probabilities
    loss = "mse"
    default_horizon = 50  # the paper's T for revenue management
    benchmarks = ("ada",)  # the paper's benchmark for this task (appendix D.3, algorithm 4)
    action_dim = 1
    action_low, action_high = 0.0, 1.0

    def __init__(self, horizon: int = 50, types: int = 3, resources: int = 3, solver: str = "enum", **pool):
        horizon, types, resources = (
            checks.size("horizon", horizon),
            checks.size("types", types),
            checks.size("resources", resources),
        )
        if solver not in SOLVERS:
            raise OMGPTError(f"unknown LP solver {solver!r}; choose one of {', '.join(SOLVERS)}")
        self.horizon, self.types, self.resources, self.solver = horizon, types, resources, solver
        self.context_dim = 1 + 2 * resources  # (r~_t, A~_t, b_t)
        self.obs_dim = 2 + resources  # (r~_t, A~_t, y_t)
        self._memo: dict = {}  # last LP solutions, keyed on the identity of the state tensors
        super().__init__(**pool)

    # -- prior and state ----------------------------------------------------------------------------
    def sample_prior(self, n: int, generator: torch.Generator) -> Envs:
        mu = uniform(n, (self.types,), 0.0, 1.0, generator)
        return {
            "r": uniform(n, (self.types,), 1.0, 2.0, generator),
            "A": uniform(n, (self.types, self.resources), 1.0, 2.0, generator),
            "p": mu / mu.sum(-1, keepdim=True),
        }

    def start(self, envs: Envs, generator: torch.Generator) -> Envs:
        envs = dict(envs)
        n, device = envs["r"].shape[0], envs["r"].device
        envs["budget"] = torch.full((n, self.resources), float(self.horizon), dtype=torch.float64, device=device)
        envs["counts"] = torch.zeros(n, self.types, dtype=torch.float64, device=device)  # arrivals so far by type
        envs["bound"] = torch.zeros(n, dtype=torch.float64, device=device)  # HLP_{t-1}: 0 before the first arrival
        return envs

    def _check_t(self, t: int) -> None:
        if t >= self.horizon:
            raise OMGPTError(
                f"revenue step {t + 1} is beyond the task's horizon {self.horizon}; build the task with "
                f"--option horizon=N for longer episodes"
            )

    def arriving_type(self, envs: Envs, x: Tensor) -> Tensor:
        """Index of the arriving type, ``(B,)``, read off the context (it copies the type's numbers)."""
        types = torch.cat([envs["r"][..., None], envs["A"]], dim=-1)  # (B, K, 1 + J)
        return ((types - x[:, None, : 1 + self.resources]) ** 2).sum(-1).argmin(-1)

    def fits(self, envs: Envs, x: Tensor) -> Tensor:
        """Whether the remaining budget covers the arriving request, ``(B,)`` bool."""
        need = envs["A"][torch.arange(x.shape[0], device=x.device), self.arriving_type(envs, x)].double()
        return (need <= envs["budget"] + _FEAS_TOL).all(-1)

    # -- simulator ----------------------------------------------------------------------------------
    def sample_context(self, envs: Envs, t: int, generator: torch.Generator) -> Tensor:
        self._check_t(t)
        p = envs["p"]
        u = torch.rand(p.shape[0], 1, generator=generator, device=generator.device)
        k = (p.cumsum(-1)[:, :-1] < u).sum(-1)  # inverse CDF
        rows = torch.arange(p.shape[0], device=p.device)
        per_period = envs["budget"] / (self.horizon - t)  # B_t / (T - t + 1) with 1-based t
        return torch.cat([envs["r"][rows, k, None], envs["A"][rows, k], per_period.to(envs["r"].dtype)], dim=-1)

    def observe(self, envs: Envs, x: Tensor, a: Tensor, t: int, generator: torch.Generator) -> Tensor:
        u = torch.rand(a.shape[0], generator=generator, device=generator.device)
        y = (u < a[:, 0]) & self.fits(envs, x)
        return torch.cat([x[:, : 1 + self.resources], y[:, None].to(x.dtype)], dim=-1)

    def step(self, envs: Envs, x: Tensor, a: Tensor, o: Tensor, t: int) -> None:
        rows = torch.arange(x.shape[0], device=x.device)
        k = self.arriving_type(envs, x)
        used = envs["A"][rows, k].double() * o[:, -1:].double()
        envs["budget"] = (envs["budget"] - used).clamp(min=0.0)
        envs["counts"], envs["bound"] = self._bound_after(envs, x, t)

    # -- decisions and rewards ----------------------------------------------------------------------
    def fluid_solution(self, envs: Envs, t: int) -> Tensor:
        """The re-solving LP's ``y (B, K)`` at step ``t`` with the true probabilities (float64).

        ``b_t`` comes from the float64 state (the context holds its float32 copy). A rollout step asks
        for ``a*`` up to three times (oracle policy, target, suboptimality): the last solution is
        memoised on the identity of the state tensors, which are replaced, never modified, each step.
        """
        key = (envs["budget"], envs["p"], envs["r"], envs["A"], t)
        memo = self._memo.get("fluid")
        if memo is not None and _same(memo[0], key):
            return memo[1]
        y = fluid_lp(envs["r"], envs["A"], envs["p"], envs["budget"] / (self.horizon - t), self.solver)
        self._memo["fluid"] = (key, y)
        return y

    def optimal_action(self, envs: Envs, x: Tensor, t: int) -> Tensor:
        self._check_t(t)
        y = self.fluid_solution(envs, t)
        return y[torch.arange(x.shape[0], device=x.device), self.arriving_type(envs, x)][:, None].to(x.dtype)

    def expected_reward(self, envs: Envs, x: Tensor, a: Tensor, t: int) -> Tensor:
        """``r~_t a_t`` if the request fits in the remaining budget, else 0 (expected over the coin)."""
        return x[:, 0] * a[:, 0] * self.fits(envs, x).to(x.dtype)

    def hindsight_bound(self, envs: Envs, counts: Tensor, periods: int) -> Tensor:
        """``HLP``: the hindsight LP of arrivals with ``counts (B, K)`` over ``periods`` periods and the
        pro-rated budget ``(periods/T)·B_1 = periods·1``, ``(B,)`` float64 (0 for ``periods = 0``)."""
        budget = torch.full(
            (counts.shape[0], self.resources), float(periods), dtype=torch.float64, device=counts.device
        )
        c, m = envs["r"].double(), envs["A"].double().transpose(1, 2)
        return solve(c, m, budget, counts, self.solver)[1]

    def _bound_after(self, envs: Envs, x: Tensor, t: int) -> tuple[Tensor, Tensor]:
        """Counts including the arrival ``x`` at step ``t`` and ``HLP_t`` over them (memoised, so
        :meth:`step` reuses what :meth:`optimal_reward` solved)."""
        key = (envs["counts"], envs["r"], envs["A"], x, t)
        memo = self._memo.get("bound")
        if memo is not None and _same(memo[0], key):
            return memo[1]
        counts = envs["counts"] + torch.nn.functional.one_hot(self.arriving_type(envs, x), self.types).double()
        out = (counts, self.hindsight_bound(envs, counts, t + 1))
        self._memo["bound"] = (key, out)
        return out

    def optimal_reward(self, envs: Envs, x: Tensor, t: int, a_star: Tensor | None = None) -> Tensor:
        """The hindsight bound's increment ``HLP_t - HLP_{t-1}`` (float64), so that the regret
        ``(HLP_t - HLP_{t-1}) - r~_t a_t 1{fits}`` (see the module docstring) sums to
        ``HLP_T - Σ_t E[reward_t]``."""
        self._check_t(t)
        return self._bound_after(envs, x, t)[1] - envs["bound"]

    def scaling(self) -> Scaling:
        j = self.resources
        # r~, A~ ~ U[1, 2]: mean 1.5, sd 0.29; y ∈ {0, 1}. Measured under the prior (T = 50): b_t
        # starts at 1 and drifts, mean 1.3 / 1.9 and sd 1.2 / 2.3 for the oracle / the random policy
        # (it grows when budget is left near the end); a* has mean 0.62, sd 0.37.
        return Scaling(
            feature_loc=(1.5,) * (1 + j) + (0.5,) + (1.5,) * (1 + j) + (1.5,) * j,
            feature_scale=(0.29,) * (1 + j) + (0.5,) + (0.29,) * (1 + j) + (1.5,) * j,
            action_loc=(0.6,),
            action_scale=(0.4,),
        )
