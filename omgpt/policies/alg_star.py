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
likelihood of the whole history: resample-move, Gilks & Berzuini 2001). The prior densities are the
tasks' ``log_prior`` (the pricing in-domain shift's mixture included); discrete parts of an
environment (the mixed prior's type, the change point) are only resampled, never moved. On pricing (500 runs,
``T = 100``, ``benchmarks/alg_star_particles.py``) the cumulative regret with 4096 particles is 4.59
against 4.56 with 16384 (ratio 1.007); without rejuvenation 7.89 against 6.95 (ratio 1.13).
Both start from the prior: uniform weights, so the first decision is the prior's sample / median /
mean.

Everything task-specific comes from the task's model of the world (:class:`~omgpt.tasks.base.Task`):
its candidates (:meth:`~omgpt.tasks.base.Task.candidates`), the likelihood of each observation
(:meth:`~omgpt.tasks.base.Task.log_likelihood`: Gaussian for the bandits and pricing, the uniform
demand's support for the newsvendor, censored or not), the prior density and the parameters the moves
perturb (:meth:`~omgpt.tasks.base.Task.log_prior`, ``moved_params``), the parameters its contexts show
(:meth:`~omgpt.tasks.base.Task.context_params`) and the loss, whose Bayes decision is the rule: the
posterior mean minimises the squared loss, the median the absolute one, and a draw from the posterior
of the best discrete action is the paper's rule under cross-entropy. Each step adds a ``(B, N)``
likelihood term to the log-weights, kept in float64 and normalised only when used.

Known parameters. What the context shows (the newsvendor's holding cost ``h``) is known: a candidate's
``a*`` uses the context's value in place of its own (exact conditioning, the known parameters being
independent of the hidden ones under the prior). A finite pool fixes only the hidden parameters; the
known ones are redrawn every episode (``Task.observed_params``, docs/paper-gaps.md §6), so they tell nothing about
the pool member and the weights rightly come from the observations only.

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
(``B = 50``-``100``, ``N = 4096``: a few MB). A rejuvenation move needs every particle's likelihood of
the whole used history. By default (``likelihood="stats"``) it comes from running statistics the task
keeps per episode (:meth:`~omgpt.tasks.base.Task.likelihood_stats`, updated in :meth:`observe`, the
ignored observations left out):

* Gaussian-linear tasks (``mab``, ``linear-bandit``, every pricing variant): the mean observation is
  ``φ(x, a)ᵀθ``, so ``ΦᵀΦ``, ``Φᵀy`` and ``yᵀy`` (one set per demand type in the mixed prior) give
  the log-likelihood of the whole history in ``O(p²)`` per particle, whatever ``t``;
* the newsvendor (every variant): the uniform demand's support makes the feasible set of ``w`` a
  polytope with two faces per step, which no fixed-size statistic summarises; its statistics are the
  used history itself and the whole-history likelihood is one batched product ``(N, d) × (d, t)`` and
  a min / max over time (a change point is a mask on the time index): still ``O(t)`` per particle,
  but no Python loop over the steps.

``likelihood="history"`` sums :meth:`~omgpt.tasks.base.Task.log_likelihood` over the past steps in
float64 (``O(t)`` Python steps per move): the reference, which gives the same weights, moves and
decisions (``tests/test_alg_star.py``, on every task). Measured with
``benchmarks/alg_star_particles.py --speed`` (``T = 100``, one thread, 100 episodes, both arms on the
same environments): see ``benchmarks/RESULTS.md``; what remains (``benchmarks/alg_star_profile.py``,
50 episodes × 100 steps, 4096 particles) is mostly the rejuvenation's fixed work -- resampling, the
moves' normal draws, prior densities, copies -- at about 22 (pricing) and 14 (newsvendor)
rejuvenations per episode, then the per-step decision (the posterior median sorts ``N`` values per
episode) and the newsvendor's ``O(t)`` support check. That work scales with ``N``, not ``t``; with
1,024 particles instead of 4,096 the regret rises. The structured samplers
(``sampler="gaussian"`` / ``"collapsed"`` / ``"auto"``, :mod:`omgpt.policies.alg_star_samplers`) use the
shape of the pricing and newsvendor likelihoods to need a few hundred particles at no higher regret,
which is where the factor 10 comes from (``benchmarks/alg_star_vs_commit.py``). They are the default
(``"auto"``) where they apply; every other task keeps ``"smc"``.

Tasks: every task with a likelihood -- ``mab``,
``linear-bandit``, every pricing variant (square, mixed, shifts, noise levels), every newsvendor variant
(censored, square, mixed, non-stationary, non-perishable) and queueing (an exact posterior over its six
arrival rates: no particles, no moves). Revenue management has none: building ``alg-star`` for it
raises :class:`~omgpt.errors.OMGPTError`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from omgpt.errors import OMGPTError
from omgpt.policies.alg_star_samplers import CollapsedNoiseSampler, GaussianBoxSampler, systematic_pick, walk_cholesky
from omgpt.policies.base import HistoryPolicy, register_policy
from omgpt.tasks.base import Envs, Task

# The Bayes decision of each pre-training loss (paper Prop. 2): what minimises the posterior expected
# loss of the action -- the mean (squared loss), the median (absolute loss); under cross-entropy over
# discrete actions, the paper's posterior sampling of the best action.
DECISION_OF_LOSS = {"mse": "mean", "l1": "median", "ce": "sample"}
DECISIONS = ("sample", "median", "mean", "value")
SAMPLERS = {s.name: s for s in (GaussianBoxSampler, CollapsedNoiseSampler)}  # besides "smc", the default


def default_decision(task: Task) -> str:
    """The decision rule that follows the task's loss (the paper's rule per task: sampling for the
    bandit, median for the linear bandit and the newsvendor, mean for pricing)."""
    return DECISION_OF_LOSS[task.loss]


def weighted_median(values: Tensor, log_w: Tensor) -> Tensor:
    """Posterior median along the last dim: ``min{v_i : Σ_{v_j ≤ v_i} p_j ≥ 1/2}`` per row.

    ``values`` ``(B, N)``, ``log_w`` ``(B, N)`` unnormalised log-weights; returns ``(B,)``."""
    p = torch.softmax(log_w, dim=-1)
    if values.device.type == "cpu":  # numpy's vectorised sort is ~3x faster than torch's on CPU (50 x 4096 floats)
        order = torch.from_numpy(np.argsort(values.numpy(), axis=-1))
    else:
        order = values.argsort(dim=-1)
    sorted_values = values.gather(-1, order)
    cdf = p.gather(-1, order).cumsum(-1)
    # float slack: four equal weights must put the median at the second value, not the third
    index = (cdf < 0.5 - 1e-9).sum(-1, keepdim=True).clamp(max=values.shape[-1] - 1)
    return sorted_values.gather(-1, index)[..., 0]


@register_policy("alg-star", applies=lambda task: task.has_likelihood)
class AlgStar(HistoryPolicy):
    """Posterior sampling / median / averaging over a pool or a particle set (see the module docstring).

    Args:
        particles: candidates per episode drawn from the prior when the task has no finite pool.
        decision: ``"sample"``, ``"median"`` or ``"mean"``; default: the paper's rule for the task.
            ``"value"`` (tasks with :meth:`~omgpt.tasks.base.Task.action_values`): the grid action of
            highest posterior-expected value, each candidate valued with its own optimal policy after
            the step.
        rejuvenate: resample-move the particles when their effective sample size drops below
            ``ess_threshold · particles`` (plain importance sampling from the prior when false).
        moves: Metropolis-Hastings sweeps per rejuvenation.
        ess_threshold: fraction of ``particles`` below which the effective sample size triggers one.
        likelihood: how a move gets the likelihood of the whole history: ``"stats"`` (default) from the
            task's running statistics (:meth:`~omgpt.tasks.base.Task.likelihood_stats`), ``"history"``
            by summing :meth:`~omgpt.tasks.base.Task.log_likelihood` over the past steps (the reference;
            also what a task without statistics uses).
        sampler: how the posterior is approximated without a finite pool: ``"auto"`` (default: the
            structured sampler where one applies, else ``"smc"``), ``"smc"`` (the resample-move particles
            above, for every task), ``"gaussian"`` (importance sampling from the Gaussian posterior and
            the prior box: pricing with one demand type and no in-domain shift) or ``"collapsed"``
            (particles over ``w`` with the noise width integrated out: the uncensored, stationary
            newsvendor with one demand type). The structured samplers
            (:mod:`omgpt.policies.alg_star_samplers`) default to 512 and 384 particles (4 moves), take
            6-8x less CPU than ``"smc"`` and are closer to the exact posterior (``benchmarks/RESULTS.md``).
            ``"auto"`` keeps ``"smc"`` where ``rejuvenate`` or ``likelihood`` is set away from its
            default: those are options of the particles.
    """

    LIKELIHOODS = ("stats", "history")

    def __init__(
        self,
        task: Task,
        particles: int | None = None,
        decision: str | None = None,
        rejuvenate: bool = True,
        moves: int | None = None,
        ess_threshold: float = 0.5,
        likelihood: str = "stats",
        sampler: str = "auto",
    ):
        if not task.has_likelihood:
            raise OMGPTError(f"alg-star needs the task's observation likelihood; task {task.name!r} has none")
        smc_options = not rejuvenate or likelihood != "stats"
        if sampler == "auto":
            sampler = next((s.name for s in SAMPLERS.values() if s.supports(task) and not smc_options), "smc")
        if sampler != "smc" and sampler not in SAMPLERS:
            raise OMGPTError(f"sampler must be one of auto, smc, {', '.join(SAMPLERS)}; got {sampler!r}")
        if sampler != "smc" and not SAMPLERS[sampler].supports(task):
            raise OMGPTError(f"alg-star's {sampler!r} sampler does not apply to task {task.name!r}; use sampler='smc'")
        structured = SAMPLERS.get(sampler)
        if structured is not None and smc_options:
            raise OMGPTError(f"rejuvenate and likelihood are options of sampler='smc', not of {sampler!r}")
        particles = particles if particles is not None else getattr(structured, "default_particles", 4096)
        moves = moves if moves is not None else getattr(structured, "default_moves", 2)
        if int(particles) < 1:
            raise OMGPTError(f"particles must be a positive integer, got {particles}")
        decision = decision or default_decision(task)
        if decision not in DECISIONS:
            raise OMGPTError(f"decision must be one of {', '.join(DECISIONS)}; got {decision!r}")
        if decision == "value" and not task.has_action_values:
            raise OMGPTError(f"decision 'value' needs a task that values its grid actions; task {task.name!r} does not")
        if int(moves) < 0 or not 0.0 <= float(ess_threshold) <= 1.0:
            raise OMGPTError(f"moves must be >= 0 and ess_threshold in [0, 1]; got {moves}, {ess_threshold}")
        if likelihood not in self.LIKELIHOODS:
            raise OMGPTError(f"likelihood must be one of {', '.join(self.LIKELIHOODS)}; got {likelihood!r}")
        super().__init__(task)
        self.particles, self.decision = int(particles), decision
        self.likelihood = likelihood if task.has_likelihood_stats else "history"
        self.rejuvenate, self.moves, self.ess_threshold = bool(rejuvenate), int(moves), float(ess_threshold)
        self.sampler = sampler
        self.structured = (
            None if structured is None else structured(task, self.particles, self.moves, self.ess_threshold)
        )
        # a structured sampler's few hundred particles per episode are too small a parallel region for
        # a second CPU thread (omgpt.threads.at_most; benchmarks/rollout_threads.py: the collapsed
        # sampler 1.64x faster on one, the Gaussian one level); 4,096 smc particles keep both
        self.cpu_threads = 1 if self.structured is not None else None

    # ----------------------------------------------------------------------------------------------
    def reset(self, envs: Envs, horizon: int, generator: torch.Generator) -> None:
        super().reset(envs, horizon, generator)
        b = self.batch
        if self.structured is not None:  # a structured sampler keeps the particles; decide() reads them
            self.structured.reset(b, horizon, generator)
            self.n, self.exact, self.candidates = self.particles, False, None
            self.log_w = torch.zeros(b, self.n, dtype=torch.float64, device=self.device)
            return
        # the pool (exact posterior, shared by every episode) or independent particles per episode
        self.candidates, n, self.exact = self.task.candidates(b, self.particles, generator)
        self.n = n
        self.log_w = torch.zeros(
            b, n, dtype=torch.float64, device=self.device
        )  # importance weights, uniform prior  # (B, N)
        self.log_lik = torch.zeros_like(
            self.log_w
        )  # each candidate's log-likelihood of the used observations  # (B, N)
        self.used = torch.zeros(b, horizon, dtype=torch.bool, device=self.device)  # steps whose observation counts
        self.rejuvenations = torch.zeros(b, dtype=torch.long, device=self.device)
        self.accepted = torch.zeros((), dtype=torch.float64, device=self.device)  # MH acceptances (diagnostics)
        self.proposed = torch.zeros((), dtype=torch.float64, device=self.device)
        self.stats = None  # the task's running likelihood statistics of each episode's used history

    @property
    def acceptance_rate(self) -> float:
        """Fraction of the Metropolis-Hastings moves accepted since :meth:`reset` (diagnostics)."""
        source = self if self.structured is None else self.structured
        accepted, proposed = getattr(source, "accepted", 0), getattr(source, "proposed", 0)  # "gaussian": no moves
        return float(accepted / proposed) if proposed > 0 else float("nan")

    def log_posterior(self) -> Tensor:
        """Normalised ``log P(γ | H_t)`` over the candidates, ``(B, N)`` (float64)."""
        return torch.log_softmax(self.log_w, dim=-1)

    def posterior(self) -> Tensor:
        """``P(γ | H_t)`` over the candidates, ``(B, N)`` (float64)."""
        return torch.softmax(self.log_w, dim=-1)

    def _broadcast(self, v: Tensor) -> Tensor:
        """``(b, ...)`` -> ``(b N, ...)``: each episode's row repeated for its ``N`` candidates."""
        n = self.n
        return v[:, None].expand(v.shape[0], n, *v.shape[1:]).reshape(v.shape[0] * n, *v.shape[1:])

    def _seen_at(self, cands: Envs, x: Tensor) -> Envs:
        """Candidates as the decision maker sees them at the matching rows of context ``x``: the
        parameters the context shows (the newsvendor's holding cost) replace the candidates' own."""
        known = self.task.context_params(x)
        return {**cands, **{k: v.to(cands[k].dtype) for k, v in known.items()}}

    def candidate_actions(self, t: int, x: Tensor) -> Tensor:
        """Every candidate's optimal action at step ``t`` in context ``x`` ``(B, dx)``, ``(B, N, da)``
        (with :meth:`log_posterior`, the posterior over ``a*``; alg-star-match reads both)."""
        x_flat = self._broadcast(x)  # (B N, dx)
        return self.task.optimal_action(self._seen_at(self.candidates, x_flat), x_flat, t).reshape(
            self.batch, self.n, -1
        )

    def weigh(self, t: int, x: Tensor) -> None:
        """Record ``X_t`` and bring the weighted candidates to it: after this, :meth:`candidate_actions`
        and :meth:`posterior` are the posterior over ``a*_t`` given the history (what :meth:`decide`
        reads; the posterior-weighted training targets read it without deciding)."""
        self.xs[:, t] = x
        if self.structured is not None:  # the structured sampler's weighted candidates given the history
            self.candidates, self.log_w = self.structured.posterior(x)

    def act(self, t: int, x: Tensor) -> Tensor:
        self.weigh(t, x)
        return self.decide(t, x)

    def decide(self, t: int, x: Tensor) -> Tensor:
        task, b, n = self.task, self.batch, self.n
        if self.decision == "sample":
            pick = torch.multinomial(self.posterior(), 1, generator=self.generator)[:, 0]  # (B,)
            rows = torch.arange(b, device=self.device) * n + pick
            chosen = self._seen_at({k: v[rows] for k, v in self.candidates.items()}, x)
            return task.optimal_action(chosen, x, t)
        if self.decision == "value":
            return self.best_valued(t, x)
        a_star = self.candidate_actions(t, x)  # (B, N, da)
        if self.decision == "mean":
            p = self.posterior().to(a_star.dtype)
            return task.mean_action((p[..., None] * a_star).sum(1), x)
        median = torch.stack([weighted_median(a_star[..., i], self.log_w) for i in range(a_star.shape[-1])], dim=-1)
        return task.project(median, x)

    def best_valued(self, t: int, x: Tensor) -> Tensor:
        """The grid action of highest posterior-expected value ``Σ_k w_k Q_t^{γ_k}(X_t, a)``, ``(B, da)``."""
        x_flat = self._broadcast(x)
        values = self.task.action_values(self._seen_at(self.candidates, x_flat), x_flat, t).reshape(
            self.batch, self.n, -1
        )
        expected = (self.posterior()[..., None] * values).sum(1)  # (B, G)
        return self.task.grid_actions(x.device)[expected.argmax(-1)].to(x.dtype)

    def observe(self, t: int, actions: Tensor, observations: Tensor) -> None:
        super().observe(t, actions, observations)
        x, bc = self.xs[:, t], self._broadcast
        if self.structured is not None:
            self.structured.observe(t, x, actions, observations)
            return
        ll = self.task.log_likelihood(self.candidates, bc(x), bc(actions), bc(observations), t).reshape(
            self.batch, self.n
        )
        updated = self.log_w + ll.double()
        alive = torch.isfinite(updated).any(-1)  # (B,): an episode with no candidate left ignores this observation
        self.log_w = torch.where(alive[:, None], updated, self.log_w)
        self.log_lik = torch.where(alive[:, None], self.log_lik + ll.double(), self.log_lik)
        self.used[:, t] = alive
        if self.likelihood == "stats" and self.rejuvenate and not self.exact:  # what the moves read
            self.stats = self.task.likelihood_stats(self.stats, x, actions, observations, t, alive)
        if not self.exact and self.rejuvenate:
            p = self.posterior()
            ess = 1.0 / (p**2).sum(-1)  # (B,)
            low = (ess < self.ess_threshold * self.n).nonzero()[:, 0]
            if low.numel():
                self._resample_move(low, t)

    # ----------------------------------------------------------------------------------------------
    # Particle rejuvenation (resample-move SMC).
    def _history_log_lik(self, cands: Envs, rows: Tensor, t: int) -> Tensor:
        """Log-likelihood of the used observations up to step ``t`` for candidates ``(b' N)`` of the
        episodes ``rows`` ``(b',)``, ``(b', N)``: from the task's statistics, or (``likelihood=
        "history"``) step by step in float64."""
        if self.likelihood == "stats":
            return self.task.likelihood_from_stats(cands, {k: v[rows] for k, v in self.stats.items()}).reshape(
                -1, self.n
            )
        cands = {k: v.double() if v.is_floating_point() else v for k, v in cands.items()}
        total = torch.zeros(rows.numel(), self.n, dtype=torch.float64, device=self.device)
        for s in range(t + 1):
            x, a, o = (self._broadcast(v[rows, s]).double() for v in (self.xs, self.actions, self.observations))
            ll = self.task.log_likelihood(cands, x, a, o, s).reshape(-1, self.n)
            total += torch.where(self.used[rows, s][:, None], ll, 0.0)
        return total

    def _resample_move(self, rows: Tensor, t: int) -> None:
        """Systematic resampling of the episodes ``rows`` to equal weights, then ``moves`` random-walk
        Metropolis-Hastings sweeps on the posterior (prior × likelihood of every used observation).

        The walk's covariance is ``2.38² / p`` times the covariance of the resampled cloud (``p`` moved
        coordinates; :func:`~omgpt.policies.alg_star_samplers.walk_cholesky`). The linear bandit's walk
        is isotropic and renormalised onto the unit sphere, which keeps it symmetric there."""
        task, n, g, device = self.task, self.n, self.generator, self.device
        b = rows.numel()

        def per_episode(v: Tensor) -> Tensor:  # (B N, ...) -> (b', N, ...)
            return v.reshape(self.batch, n, *v.shape[1:])[rows]

        def flat_envs(d: Envs) -> Envs:  # (b', N, ...) -> (b' N, ...)
            return {k: v.reshape(b * n, *v.shape[2:]) for k, v in d.items()}

        # systematic resampling: one uniform per episode
        pick = systematic_pick(self.log_w[rows], torch.rand(b, 1, generator=g, device=device, dtype=torch.float64))
        view = {}
        for k, v in self.candidates.items():
            v = per_episode(v)
            view[k] = v.gather(1, pick.reshape(b, n, *[1] * (v.dim() - 2)).expand_as(v))
        log_lik = self.log_lik[rows].gather(1, pick)
        lp = task.log_prior(flat_envs(view)).reshape(b, n).double()

        keys = task.moved_params
        sizes = [view[k].reshape(b, n, -1).shape[-1] for k in keys]
        theta = torch.cat([view[k].reshape(b, n, -1) for k in keys], dim=-1)  # (b', N, p)
        dim, sphere = theta.shape[-1], task.moved_on_sphere
        chol = walk_cholesky(theta, isotropic=sphere)

        def moved(values: Tensor) -> Envs:  # (b', N, p) -> the moved parameters, shaped as in view
            return {k: part.reshape(view[k].shape) for k, part in zip(keys, values.split(sizes, dim=-1))}

        for _ in range(self.moves):
            step = torch.randn(b, n, dim, generator=g, device=device, dtype=theta.dtype)
            prop = theta + step @ chol.transpose(1, 2)
            if sphere:
                prop = prop / torch.linalg.vector_norm(prop, dim=-1, keepdim=True).clamp(min=1e-12)
            new = {**view, **moved(prop)}
            new_lp = task.log_prior(flat_envs(new)).reshape(b, n).double()
            ok = torch.isfinite(new_lp)  # proposals outside the prior's support need no likelihood
            new_ll = self._history_log_lik(flat_envs(new), rows, t) if ok.any() else torch.full_like(log_lik, -math.inf)
            log_u = torch.log(torch.rand(b, n, generator=g, device=device, dtype=torch.float64))
            accept = ok & (log_u < (new_lp + new_ll) - (lp + log_lik))  # a nan ratio (-inf - -inf) rejects
            theta = torch.where(accept[..., None], prop, theta)  # the other parameters never move
            lp, log_lik = torch.where(accept, new_lp, lp), torch.where(accept, new_ll, log_lik)
            self.accepted += accept.sum()
            self.proposed += accept.numel()

        view.update(moved(theta))
        for k, v in view.items():  # write the episodes back (in place: the particles are this policy's own)
            self.candidates[k].view(self.batch, n, *v.shape[2:])[rows] = v
        self.log_lik[rows] = log_lik
        self.log_w[rows] = 0.0
        self.rejuvenations[rows] += 1
