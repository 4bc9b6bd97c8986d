"""``Alg*``: the posterior oracle of paper appendix A.3 (algorithm "posterior") and appendix D.3.

``Alg*`` knows the prior over environments (never the environment itself). It keeps the posterior
``P(γ | H_t)`` over a set of candidate environments and decides from the candidates' optimal actions
``a*_γ(X_t)``:

* posterior **sampling** (multi-armed bandit): draw ``γ~ ~ P(· | H_t)`` and play its best arm;
* posterior **median** (linear bandit, newsvendor): the smallest ``a*_γ`` whose posterior CDF reaches
  1/2 (the paper's definition); for vector actions (linear bandit) the median of each coordinate,
  then projected onto the unit ball;
* posterior **averaging** (pricing): ``Σ_γ P(γ | H_t) a*_γ``, mapped back onto the actions by
  ``Task.mean_action`` (the linear bandit's average of unit ``a*`` is renormalised onto the sphere).

Candidates. With a finite pool (``pool_size=``, the paper's setting) the candidates are the pool:
the posterior is exact. Without one it is a particle approximation (sequential Monte Carlo):
``particles`` environments are drawn from the task's prior at every :meth:`~AlgStar.reset`,
independently for each of the ``B`` episodes, with the policy generator, and weighted by their
likelihood (importance sampling, the prior as proposal). Plain importance sampling degenerates -- the
posterior soon sits on the one particle nearest the truth -- so by default (``rejuvenate=True``) an
episode whose effective sample size ``1 / Σ p²`` falls below ``ess_threshold · particles`` is
resampled to equal weights (systematic resampling) and every particle then takes ``moves``
random-walk Metropolis-Hastings steps whose target is the exact posterior (prior density ×
likelihood of the whole history: resample-move, Gilks & Berzuini 2001). The prior densities are in
:func:`log_prior` (the pricing in-domain shift's mixture included); discrete parts of an environment
(the mixed prior's type, the change point) are only resampled, never moved. On pricing (500 runs,
``T = 100``, ``benchmarks/alg_star_particles.py``) the cumulative regret with 4096 particles is 4.59
against 4.56 with 16384 (ratio 1.007); without rejuvenation 7.89 against 6.95 (ratio 1.13).
Both start from the prior: uniform weights, so the first decision is the prior's sample / median /
mean.

Likelihoods (of the observations given the contexts and actions; each step adds a ``(B, N)`` term to
the log-weights, kept in float64 and normalised only when used):

* mab, linear bandit, pricing (Gaussian noise of standard deviation ``σ = noise_std``, so
  ``σ² = 0.04`` by default, SPEC §6):
  ``-(O - mean_γ)² / (2σ²)`` with ``mean_γ = r_a``, ``wᵀa``, ``αᵀX - βᵀX · a`` (``a²`` for square demand,
  per candidate in the mixed prior). The paper writes ``exp(-(1/σ²) Σ (O - mean)²)``, which is the
  Gaussian likelihood of noise variance ``σ²/2``: it sharpens the posterior by a factor 2 in log
  space. We use the correct Gaussian likelihood.
* newsvendor, uncensored (the paper's): ``D ~ U[m_γ, m_γ + ε̄_γ]``, so each step adds
  ``-log ε̄_γ`` where ``0 ≤ O - m_γ ≤ ε̄_γ`` (up to ``FEASIBILITY_TOL``) and ``-inf`` elsewhere, i.e. the
  paper's ``ε̄^{1-t} 1{feasible}``; ``m_γ`` is the candidate's demand floor (linear, square or mixed
  demand; the change point of the non-stationary variant is part of the candidate).
* newsvendor, censored (sales ``O = min(D, a)``): a sale below the order reveals the demand (the
  uncensored term above); a sell-out (``O = a``) only says ``D ≥ a``, which has probability
  ``clamp((m_γ + ε̄_γ - a) / ε̄_γ, 0, 1)``. The non-perishable variants have the same likelihoods.

The holding cost ``h`` of the newsvendor is known: it is the first feature of every context. A
candidate's ``a*`` therefore uses the observed ``h`` in place of its own (exact conditioning, ``h``
being independent of ``(w, ε̄)`` under the prior). A finite pool fixes only ``(w, ε̄)``; ``h`` is
redrawn every episode (``Task.observed_params``, SPEC §6), so it tells nothing about the pool member
and the weights rightly come from the observations only.

Degeneracy: the newsvendor likelihood can rule out every candidate (a particle set with no feasible
environment; a pool never, since it holds the true one). For an episode where an observation would
leave no candidate with positive weight, that observation is ignored: the weights stay as they were,
and the rejuvenation moves' target leaves it out too (``used`` marks the observations that count).
Resample-move makes this rare: in 50 newsvendor episodes of 100 steps with 4096 particles, 0 of
5000 observations were ignored (linear demand, censored or not), 5.2% in the non-stationary variant
(whose change point is only resampled, never moved).

Linear bandit: at the start the posterior is uniform on the circle, so the coordinate-wise median is
near ``0``, an action whose reward carries no information about ``w``: the paper's posterior median
explores slowly here (with particles its cumulative regret over 100 steps, ~19, is above LinUCB's, ~11;
late in the horizon it is below).

Cost: ``B × N`` candidate evaluations per step (``N`` = pool size or ``particles``), memory ``O(B N)``
(``B = 50``-``100``, ``N = 4096``: a few MB); a rejuvenation re-evaluates the likelihood of the whole
history, ``moves × t × B' × N`` (on one CPU thread ~8 s per 50 pricing episodes of 100 steps, against
~1 s without rejuvenation). Tasks: ``mab``, ``linear-bandit``, every pricing variant
(square, mixed, shifts, noise levels) and every newsvendor variant (censored, square, mixed,
non-stationary, non-perishable). Queueing and revenue management have no likelihood here: building
``alg-star`` for them raises :class:`~omgpt.errors.OMGPTError`.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from omgpt.errors import OMGPTError
from omgpt.policies.base import HistoryPolicy, register_policy
from omgpt.tasks.base import Envs, Task
from omgpt.tasks.linear_bandit import LinearBandit
from omgpt.tasks.mab import MultiArmedBandit
from omgpt.tasks.newsvendor import Newsvendor
from omgpt.tasks.pricing import Pricing

SUPPORTED = (MultiArmedBandit, LinearBandit, Pricing, Newsvendor)
DECISIONS = ("sample", "median", "mean")
FEASIBILITY_TOL = 1e-3  # float slack of the newsvendor support check: the true environment must stay feasible
MIN_NOISE_VAR = 1e-6  # noise_std = 0 (a noiseless test shift) would make the Gaussian likelihood a point mass


def default_decision(task: Task) -> str:
    """The paper's rule per task: sampling (bandit), median (linear bandit, newsvendor), mean (pricing)."""
    if isinstance(task, MultiArmedBandit):
        return "sample"
    if isinstance(task, Pricing):
        return "mean"
    return "median"


def log_likelihood(task: Task, cands: Envs, x: Tensor, a: Tensor, o: Tensor, t: int) -> Tensor:
    """``log P(O_t | γ, X_t, a_t)`` up to a constant shared by all candidates, ``(M,)``.

    ``cands`` holds ``M`` candidate environments and ``x, a, o`` the matching ``M`` rows of context,
    action and observation (the ``B`` episodes broadcast over their ``N`` candidates)."""
    o = o[:, 0]
    if isinstance(task, Newsvendor):
        m, e = task.mean_demand_floor(cands, x, t), cands["eps_bar"]
        excess = o - m
        feasible = (excess >= -FEASIBILITY_TOL) & (excess <= e + FEASIBILITY_TOL)
        exact = torch.where(feasible, -torch.log(e), torch.full_like(e, -math.inf))
        if not task.censored:
            return exact
        sold_out = o >= a[:, 0]  # O = min(D, a) equals a exactly when the demand reached the order
        tail = ((m + e + FEASIBILITY_TOL - a[:, 0]) / e).clamp(0.0, 1.0)  # P(D >= a)
        return torch.where(sold_out, torch.log(tail), exact)
    var = max(float(task.noise_std) ** 2, MIN_NOISE_VAR)
    if isinstance(task, Pricing):
        intercept, slope = task.intercept_slope(cands, x)
        price = a[:, 0]
        square = task.is_square(cands)
        term = (price**2 if square else price) if isinstance(square, bool) else torch.where(square, price**2, price)
        mean = intercept - slope * term
    else:  # bandits: the observation is the reward, whose mean is the expected reward
        mean = task.expected_reward(cands, x, a, t)
    return -((o - mean) ** 2) / (2 * var)


def moved_keys(task: Task) -> tuple[str, ...]:
    """The continuous environment parameters a rejuvenation move perturbs (discrete ones -- the mixed
    prior's ``square``, the change point ``tau`` -- and the newsvendor's known ``h`` stay as drawn)."""
    if isinstance(task, MultiArmedBandit):
        return ("r",)
    if isinstance(task, LinearBandit):
        return ("w",)
    if isinstance(task, Pricing):
        return ("alpha", "beta")
    return ("w", "eps_bar", "w_after") if task.nonstationary else ("w", "eps_bar")


def _box_log_density(v: Tensor, lo: float, hi: float, width: float) -> Tensor:
    """Log prior density (up to a constant) of the rows of ``v`` ``(M, d)``: ``U[lo, hi]^d``, or with
    ``width < hi - lo`` the pricing in-domain shift's mixture: ``κ ~ U[lo, hi - width]``, then
    ``U[κ, κ + width]^d``, whose density is proportional to the length of the ``κ`` that cover ``v``."""
    if width >= hi - lo:
        inside = ((v >= lo) & (v <= hi)).all(-1)
        return torch.where(inside, 0.0, -math.inf).to(v.dtype)
    low = torch.clamp(v.amax(-1) - width, min=lo)
    high = torch.clamp(v.amin(-1), max=hi - width)
    inside = ((v >= lo) & (v <= hi)).all(-1) & (high > low)
    return torch.where(inside, torch.log((high - low).clamp(min=1e-30)), torch.full_like(low, -math.inf))


def log_prior(task: Task, cands: Envs) -> Tensor:
    """Log prior density of the moved parameters up to a constant, ``-inf`` outside the support, ``(M,)``."""
    if isinstance(task, MultiArmedBandit):
        return -0.5 * (cands["r"] ** 2).sum(-1)
    if isinstance(task, LinearBandit):  # uniform on the sphere; the move stays on it
        return cands["w"].new_zeros(cands["w"].shape[0])
    if isinstance(task, Pricing):
        shift, width = task.ood_shift, 1.0 - task.id_shift
        (a_lo, a_hi), (b_lo, b_hi) = task.alpha_range, task.beta_range
        return _box_log_density(cands["alpha"], a_lo + shift, a_hi + shift, width * (a_hi - a_lo)) + _box_log_density(
            cands["beta"], b_lo + shift, b_hi + shift, width * (b_hi - b_lo)
        )
    out = _box_log_density(cands["w"], 0.0, 3.0, 3.0) + _box_log_density(cands["eps_bar"][:, None], 1.0, 10.0, 9.0)
    if task.nonstationary:
        out = out + _box_log_density(cands["w_after"], 0.0, 3.0, 3.0)
    return out


def weighted_median(values: Tensor, log_w: Tensor) -> Tensor:
    """Posterior median along the last dim: ``min{v_i : Σ_{v_j ≤ v_i} p_j ≥ 1/2}`` per row.

    ``values`` ``(B, N)``, ``log_w`` ``(B, N)`` unnormalised log-weights; returns ``(B,)``."""
    p = torch.softmax(log_w, dim=-1)
    sorted_values, order = values.sort(dim=-1)
    cdf = p.gather(-1, order).cumsum(-1)
    # float slack: four equal weights must put the median at the second value, not the third
    index = (cdf < 0.5 - 1e-9).sum(-1, keepdim=True).clamp(max=values.shape[-1] - 1)
    return sorted_values.gather(-1, index)[..., 0]


@register_policy("alg-star", tasks=SUPPORTED)
class AlgStar(HistoryPolicy):
    """Posterior sampling / median / averaging over a pool or a particle set (see the module docstring).

    Args:
        particles: candidates per episode drawn from the prior when the task has no finite pool.
        decision: ``"sample"``, ``"median"`` or ``"mean"``; default: the paper's rule for the task.
        rejuvenate: resample-move the particles when their effective sample size drops below
            ``ess_threshold · particles`` (plain importance sampling from the prior when false).
        moves: Metropolis-Hastings sweeps per rejuvenation.
        ess_threshold: fraction of ``particles`` below which the effective sample size triggers one.
    """

    def __init__(
        self,
        task: Task,
        particles: int = 4096,
        decision: str | None = None,
        rejuvenate: bool = True,
        moves: int = 2,
        ess_threshold: float = 0.5,
    ):
        if not isinstance(task, SUPPORTED):
            raise OMGPTError(
                f"alg-star needs the task's likelihood, implemented for mab, linear-bandit, pricing and newsvendor "
                f"tasks; task {task.name!r} has none"
            )
        if int(particles) < 1:
            raise OMGPTError(f"particles must be a positive integer, got {particles}")
        decision = decision or default_decision(task)
        if decision not in DECISIONS:
            raise OMGPTError(f"decision must be one of {', '.join(DECISIONS)}; got {decision!r}")
        if int(moves) < 0 or not 0.0 <= float(ess_threshold) <= 1.0:
            raise OMGPTError(f"moves must be >= 0 and ess_threshold in [0, 1]; got {moves}, {ess_threshold}")
        super().__init__(task)
        self.particles, self.decision = int(particles), decision
        self.rejuvenate, self.moves, self.ess_threshold = bool(rejuvenate), int(moves), float(ess_threshold)

    # ----------------------------------------------------------------------------------------------
    def reset(self, envs: Envs, horizon: int, generator: torch.Generator) -> None:
        super().reset(envs, horizon, generator)
        task, b = self.task, self.batch
        self.exact = task._pool is not None
        if self.exact:  # exact posterior over the pool, shared by every episode
            pool = {k: v.to(self.device) for k, v in task._pool.items()}
            n = next(iter(pool.values())).shape[0]
            self.candidates = {k: v[None].expand(b, *v.shape).reshape(b * n, *v.shape[1:]) for k, v in pool.items()}
        else:  # independent particles per episode
            n = self.particles
            self.candidates = task._sample_prior(b * n, generator)
        self.n = n
        self.log_w = torch.zeros(b, n, dtype=torch.float64, device=self.device)  # importance weights, uniform prior  # (B, N)
        self.log_lik = torch.zeros_like(self.log_w)  # each candidate's log-likelihood of the used observations  # (B, N)
        self.used = torch.zeros(b, horizon, dtype=torch.bool, device=self.device)  # steps whose observation counts
        self.rejuvenations = torch.zeros(b, dtype=torch.long, device=self.device)
        self.accepted = torch.zeros((), dtype=torch.float64, device=self.device)  # MH acceptances (diagnostics)
        self.proposed = torch.zeros((), dtype=torch.float64, device=self.device)

    @property
    def acceptance_rate(self) -> float:
        """Fraction of the Metropolis-Hastings moves accepted since :meth:`reset` (diagnostics)."""
        return float(self.accepted / self.proposed) if self.proposed > 0 else float("nan")

    def log_posterior(self) -> Tensor:
        """Normalised ``log P(γ | H_t)`` over the candidates, ``(B, N)`` (float64)."""
        return torch.log_softmax(self.log_w, dim=-1)

    def _broadcast(self, v: Tensor) -> Tensor:
        """``(b, ...)`` -> ``(b N, ...)``: each episode's row repeated for its ``N`` candidates."""
        n = self.n
        return v[:, None].expand(v.shape[0], n, *v.shape[1:]).reshape(v.shape[0] * n, *v.shape[1:])

    def _seen_at(self, cands: Envs, x: Tensor) -> Envs:
        """Candidates as the decision maker sees them at the matching rows of context ``x``: the
        newsvendor's holding cost ``h`` is known, so the context's replaces the candidate's."""
        if isinstance(self.task, Newsvendor):
            return {**cands, "h": self.task.split_context(x)[0].to(cands["h"].dtype)}
        return cands

    def decide(self, t: int, x: Tensor) -> Tensor:
        task, b, n = self.task, self.batch, self.n
        if self.decision == "sample":
            pick = torch.multinomial(torch.softmax(self.log_w, dim=-1), 1, generator=self.generator)[:, 0]  # (B,)
            rows = torch.arange(b, device=self.device) * n + pick
            chosen = self._seen_at({k: v[rows] for k, v in self.candidates.items()}, x)
            return task.optimal_action(chosen, x, t)
        x_flat = self._broadcast(x)  # (B N, dx)
        a_star = task.optimal_action(self._seen_at(self.candidates, x_flat), x_flat, t).reshape(b, n, -1)  # (B, N, da)
        if self.decision == "mean":
            p = torch.softmax(self.log_w, dim=-1).to(a_star.dtype)
            return task.mean_action((p[..., None] * a_star).sum(1), x)
        median = torch.stack([weighted_median(a_star[..., i], self.log_w) for i in range(a_star.shape[-1])], dim=-1)
        return task.project(median, x)

    def observe(self, t: int, actions: Tensor, observations: Tensor) -> None:
        super().observe(t, actions, observations)
        x, bc = self.xs[:, t], self._broadcast
        ll = log_likelihood(self.task, self.candidates, bc(x), bc(actions), bc(observations), t).reshape(self.batch, self.n)
        updated = self.log_w + ll.double()
        alive = torch.isfinite(updated).any(-1)  # (B,): an episode with no candidate left ignores this observation
        self.log_w = torch.where(alive[:, None], updated, self.log_w)
        self.log_lik = torch.where(alive[:, None], self.log_lik + ll.double(), self.log_lik)
        self.used[:, t] = alive
        if not self.exact and self.rejuvenate:
            p = torch.softmax(self.log_w, dim=-1)
            ess = 1.0 / (p**2).sum(-1)  # (B,)
            low = (ess < self.ess_threshold * self.n).nonzero()[:, 0]
            if low.numel():
                self._resample_move(low, t)

    # ----------------------------------------------------------------------------------------------
    # Particle rejuvenation (resample-move SMC).
    def _history_log_lik(self, cands: Envs, rows: Tensor, t: int) -> Tensor:
        """Log-likelihood of the used observations up to step ``t`` for candidates ``(b' N)`` of the
        episodes ``rows`` ``(b',)``, ``(b', N)``."""
        total = torch.zeros(rows.numel(), self.n, dtype=torch.float64, device=self.device)
        for s in range(t + 1):
            x, a, o = (self._broadcast(v[rows, s]) for v in (self.xs, self.actions, self.observations))
            ll = log_likelihood(self.task, cands, x, a, o, s).reshape(-1, self.n)
            total += torch.where(self.used[rows, s][:, None], ll.double(), 0.0)
        return total

    def _resample_move(self, rows: Tensor, t: int) -> None:
        """Systematic resampling of the episodes ``rows`` to equal weights, then ``moves`` random-walk
        Metropolis-Hastings sweeps on the posterior (prior × likelihood of every used observation).

        The walk's covariance is ``2.38² / p`` times the covariance of the resampled cloud (``p`` moved
        coordinates; a small ridge keeps it positive definite): the classic scaling for a roughly
        Gaussian target. The linear bandit's walk is isotropic and renormalised onto the unit sphere,
        which keeps it symmetric there."""
        task, n, g, device = self.task, self.n, self.generator, self.device
        b = rows.numel()

        def per_episode(v: Tensor) -> Tensor:  # (B N, ...) -> (b', N, ...)
            return v.reshape(self.batch, n, *v.shape[1:])[rows]

        def flat_envs(d: Envs) -> Envs:  # (b', N, ...) -> (b' N, ...)
            return {k: v.reshape(b * n, *v.shape[2:]) for k, v in d.items()}

        # systematic resampling: one uniform per episode
        p = torch.softmax(self.log_w[rows], dim=-1)  # (b', N)
        u = (torch.rand(b, 1, generator=g, device=device, dtype=torch.float64) + torch.arange(n, device=device)) / n
        pick = torch.searchsorted(p.cumsum(-1), u).clamp(max=n - 1)  # (b', N)
        view = {}
        for k, v in self.candidates.items():
            v = per_episode(v)
            view[k] = v.gather(1, pick.reshape(b, n, *[1] * (v.dim() - 2)).expand_as(v))
        log_lik = self.log_lik[rows].gather(1, pick)
        lp = log_prior(task, flat_envs(view)).reshape(b, n).double()

        keys = moved_keys(task)
        sizes = [view[k].reshape(b, n, -1).shape[-1] for k in keys]
        theta = torch.cat([view[k].reshape(b, n, -1) for k in keys], dim=-1)  # (b', N, p)
        dim = theta.shape[-1]
        centred = theta.double() - theta.double().mean(1, keepdim=True)
        cov = centred.transpose(1, 2) @ centred / n  # (b', p, p)
        eye = torch.eye(dim, dtype=cov.dtype, device=device)
        scale = cov.diagonal(dim1=1, dim2=2).mean(-1)  # (b',)
        cov = cov + (1e-8 + 1e-6 * scale)[:, None, None] * eye
        chol, info = torch.linalg.cholesky_ex(cov)
        isotropic = scale.sqrt()[:, None, None] * eye
        sphere = isinstance(task, LinearBandit)
        chol = isotropic if sphere else torch.where((info == 0)[:, None, None], chol, isotropic)
        chol = (2.38 / math.sqrt(dim) * chol).to(theta.dtype)

        for _ in range(self.moves):
            step = torch.randn(b, n, dim, generator=g, device=device, dtype=theta.dtype)
            prop = theta + step @ chol.transpose(1, 2)
            if sphere:
                prop = prop / torch.linalg.vector_norm(prop, dim=-1, keepdim=True).clamp(min=1e-12)
            new = dict(view)
            for k, part in zip(keys, prop.split(sizes, dim=-1)):
                new[k] = part.reshape(view[k].shape)
            new_lp = log_prior(task, flat_envs(new)).reshape(b, n).double()
            ok = torch.isfinite(new_lp)  # proposals outside the prior's support need no likelihood
            new_ll = self._history_log_lik(flat_envs(new), rows, t) if ok.any() else torch.full_like(log_lik, -math.inf)
            log_u = torch.log(torch.rand(b, n, generator=g, device=device, dtype=torch.float64))
            accept = ok & (log_u < (new_lp + new_ll) - (lp + log_lik))  # a nan ratio (-inf - -inf) rejects
            theta = torch.where(accept[..., None], prop, theta)
            view = {k: torch.where(accept.reshape(b, n, *[1] * (v.dim() - 2)), new[k], v) for k, v in view.items()}
            lp, log_lik = torch.where(accept, new_lp, lp), torch.where(accept, new_ll, log_lik)
            self.accepted += accept.sum()
            self.proposed += accept.numel()

        for k, v in view.items():  # write the episodes back
            full = self.candidates[k].reshape(self.batch, n, *v.shape[2:]).clone()
            full[rows] = v
            self.candidates[k] = full.reshape(self.batch * n, *v.shape[2:])
        self.log_lik[rows] = log_lik
        self.log_w[rows] = 0.0
        self.rejuvenations[rows] += 1
