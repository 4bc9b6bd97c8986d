"""Queueing control: the service rate of a single queue (paper appendix D.2, after de Farias & Van Roy
2003, §6.1).

The queue starts empty. At the beginning of period ``t`` the decision maker sees the queue length
``S_t = O_{t-1}`` (``O_0 = 0``) and picks a service rate ``a_t`` in ``A = {0, 0.2, …, 1}``; right before
the period ends one customer arrives with probability ``λ`` (unknown). The queue holds at most 4
customers, and the observation ``O_t`` is the queue length at the end of period ``t``. The transition
matrix ``P_a[s, s']``, exactly as the appendix writes it::

    s = 0      : P[0,0] = 1-λ,          P[0,1] = λ
    s = 1,2,3  : P[s,s-1] = (1-λ) a,    P[s,s] = (1-λ)(1-a) + λ a,    P[s,s+1] = λ (1-a)
    s = 4      : P[4,3] = (1-λ) a,      P[4,4] = 1 - a + λ a

(an empty queue has nothing to serve; a full queue turns the arrival away). The reward is minus a
holding plus service cost with a known cost parameter ``c``: ``r(X_t, a_t) = -(O_{t-1} + c·a_t²)``. It
is a deterministic function of the state at the start of the period and the action, so "the expected
reward given the state and the action" is the reward itself.

Context ``X_t = (O_{t-1}, c)`` (docs/paper-gaps.md §3; ``c`` is known, so it is part of the context), observation
``O_t`` (one number). The environment is ``γ = (λ, c)``, uniform over the 36 points
``λ ∈ {0.1, 0.26, 0.42, 0.58, 0.74, 0.9}`` × ``c ∈ {5, 16, 27, 38, 49, 60}`` (the Task base's
``pool_size`` option pools the hidden ``λ``; the known ``c`` is redrawn every episode, docs/paper-gaps.md §6).

Actions. The paper trains this task with the squared loss, so the action is a continuous scalar that
:meth:`Queueing.project` rounds to the nearest grid point (after clipping to ``[0, 1]``); the model
regresses ``a*``. ``sample_action`` (the ``random`` benchmark) is uniform over the six grid values.

Optimal action. ``a*_t(s)`` is the finite-horizon dynamic-programming policy with the known ``λ``:
``V_T ≡ 0``, ``Q_t(s, a) = -(s + c a²) + Σ_{s'} P_a[s, s'] V_{t+1}(s')``, ``V_t(s) = max_a Q_t(s, a)``,
``a*_t(s) = argmax_a Q_t(s, a)`` (ties go to the smaller rate; 0-based ``t`` = 0..T-1). The horizon
must be known: it is the ``horizon`` task option (default the paper's ``T = 100``). :meth:`start`
runs the backward induction for that horizon, batched over environments in float64 (no loop over
environments; a loop over the ``T`` stages), and stores the ``(B, T, 5)`` tables of optimal actions
``dp_action`` and optimal values-to-go ``dp_value``. An episode shorter than the option is fine -- its
first steps follow the ``T``-horizon optimal policy (with ``T = 100`` it differs from the short
horizon's optimum only in the last few periods of *that* horizon, which an early stop never reaches);
an episode longer than the option raises (build the task with ``horizon=`` at least the episode's
length, e.g. ``--option horizon=200``).

Regret (docs/paper-gaps.md §4). The curve at ``t`` is the expected cumulative reward of the optimal policy up to
``t`` minus the algorithm's: per step, ``E[r(S*_t, a*_t(S*_t))] - r(S_t, a_t)`` where the first term
is the optimal policy's expected reward at step ``t`` from the empty queue (exact: the state
distribution is propagated forward through the DP policy's transition matrices in :meth:`start`,
``opt_reward`` of shape ``(B, T)``; ``Σ_t opt_reward = V_0(0)``) and the second is the algorithm's
reward in the state it is actually in. The curve can dip below 0 mid-horizon (a lucky run of no
arrivals), and even the oracle's curve is zero only in expectation over runs, not run by run.

Model of the world (``alg-star``, docs/protocol.md). The transition law is known given ``λ``, so the likelihood
of an observation is ``P_a[S_t, O_t]`` (:meth:`log_likelihood`). The prior over ``λ`` has six points,
so the posterior is exact over them (:meth:`candidates`: the six values, or the pool); each
candidate's ``a*`` comes from a table of the DP policy for every ``(λ, c)`` of the prior, built once
per task (:meth:`dp_table`). ``alg-star`` then plays the posterior mean of the candidates' ``a*``
rounded to the grid (the squared loss's Bayes decision, :meth:`project`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from omgpt import checks
from omgpt.errors import OMGPTError
from omgpt.tasks.base import Envs, Scaling, Task
from omgpt.tasks.registry import register

LAMBDAS = (0.1, 0.26, 0.42, 0.58, 0.74, 0.9)
COSTS = (5.0, 16.0, 27.0, 38.0, 49.0, 60.0)
CAPACITY = 4  # the queue holds 0..4 customers
STATES = CAPACITY + 1
GRID_STEPS = 5  # A = {0, 1/5, ..., 5/5}


def action_grid(device=None, dtype=torch.float32) -> Tensor:
    """The six service rates ``0, 0.2, …, 1``."""
    return torch.arange(GRID_STEPS + 1, device=device, dtype=dtype) / GRID_STEPS


def transition_matrix(lam: Tensor, a: Tensor) -> Tensor:
    """The appendix's matrix ``P_a[s, s']`` for arrival rates ``lam`` and service rates ``a`` (same
    broadcastable shape ``S``), shape ``(*S, 5, 5)``; rows sum to 1."""
    lam, a = torch.broadcast_tensors(lam, a)
    zero = torch.zeros_like(a)
    down, up = (1 - lam) * a, lam * (1 - a)
    stay = (1 - lam) * (1 - a) + lam * a
    rows = [
        [1 - lam, lam, zero, zero, zero],
        [down, stay, up, zero, zero],
        [zero, down, stay, up, zero],
        [zero, zero, down, stay, up],
        [zero, zero, zero, down, 1 - a + lam * a],
    ]
    return torch.stack([torch.stack(row, dim=-1) for row in rows], dim=-2)


def stage(lam: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """One period of environments ``(lam, c)``, each ``(B,)``, in float64: the transition matrices of the
    six rates ``(B, 6, 5, 5)`` and the reward ``-(s + c a²)`` of every queue length and rate ``(B, 5, 6)``."""
    lam, c = lam.double(), c.double()
    grid = action_grid(lam.device, torch.float64)
    states = torch.arange(STATES, device=lam.device, dtype=torch.float64)
    reward = -(states[None, :, None] + c[:, None, None] * grid[None, None, :] ** 2)
    return transition_matrix(lam[:, None], grid[None, :]), reward


def q_values(trans: Tensor, reward: Tensor, v_next: Tensor) -> Tensor:
    """``Q(s, a) = r(s, a) + Σ_s' P_a[s, s'] V_next(s')`` of every queue length and rate, ``(B, 5, 6)``."""
    return reward + torch.einsum("basn,bn->bsa", trans, v_next)


def solve_dp(lam: Tensor, c: Tensor, horizon: int) -> tuple[Tensor, Tensor, Tensor]:
    """Finite-horizon DP for a batch of environments ``(lam, c)``, each ``(B,)``.

    Returns ``(action, value, opt_reward)``: the optimal service rate ``a*_t(s)`` ``(B, T, 5)``, the
    optimal value-to-go ``V_t(s)`` ``(B, T, 5)`` (float64), and the optimal policy's expected reward at
    step ``t`` started from the empty queue ``(B, T)`` (float64).
    """
    b, device = lam.shape[0], lam.device
    trans, reward = stage(lam, c)
    best = torch.empty(b, horizon, STATES, dtype=torch.long, device=device)
    value = torch.empty(b, horizon, STATES, dtype=torch.float64, device=device)
    v_next = torch.zeros(b, STATES, dtype=torch.float64, device=device)
    for t in reversed(range(horizon)):
        q = q_values(trans, reward, v_next)
        v_next, best[:, t] = q.max(dim=-1).values, q.argmax(dim=-1)  # argmax: first maximum (smaller a)
        value[:, t] = v_next
    # Forward: the optimal policy's state distribution from the empty queue, and its expected reward.
    dist = torch.zeros(b, STATES, dtype=torch.float64, device=device)
    dist[:, 0] = 1.0
    rows = torch.arange(STATES, device=device)
    opt_reward = torch.empty(b, horizon, dtype=torch.float64, device=device)
    for t in range(horizon):
        idx = best[:, t]  # (B, 5)
        opt_reward[:, t] = (dist * reward.gather(2, idx[:, :, None])[:, :, 0]).sum(-1)
        step_p = trans[torch.arange(b, device=device)[:, None], idx, rows[None, :]]  # (B, 5, 5): P_{a*(s)}[s, ·]
        dist = torch.einsum("bs,bsn->bn", dist, step_p)
    return action_grid(device)[best], value, opt_reward


def _grid_index(values: Tensor, grid: tuple[float, ...]) -> Tensor:
    """The index of the nearest grid value of each entry of ``values``."""
    ref = torch.tensor(grid, dtype=torch.float64, device=values.device)
    return (values.double()[:, None] - ref).abs().argmin(-1)


@register("queueing")
class Queueing(Task):
    """Args:
    horizon: the episode length ``T`` the DP plans for (paper: 100); episodes may be shorter, never
        longer.
    """

    observed_params = ("c",)  # the known cost is in the context: a pool fixes only λ
    loss = "mse"
    benchmarks = ("random", "ce")  # the paper's benchmark (appendix D.3) and certainty equivalence (docs/protocol.md)
    context_dim = 2  # (O_{t-1}, c)
    state_dims = 1  # the queue length O_{t-1} is the episode's state
    obs_dim = 1  # queue length at the end of the period
    action_dim = 1
    action_low, action_high = 0.0, 1.0

    def __init__(self, horizon: int = 100, **pool):
        self.horizon = checks.size("horizon", horizon)
        super().__init__(**pool)

    # -- prior and simulator ------------------------------------------------------------------------
    def sample_prior(self, n: int, generator: torch.Generator) -> Envs:
        device = generator.device
        li = torch.randint(len(LAMBDAS), (n,), generator=generator, device=device)
        ci = torch.randint(len(COSTS), (n,), generator=generator, device=device)
        return {
            "lam": torch.tensor(LAMBDAS, dtype=torch.float64, device=device)[li],
            "c": torch.tensor(COSTS, device=device)[ci],
        }

    def start(self, envs: Envs, generator: torch.Generator) -> Envs:
        envs = dict(envs)
        action, value, opt_reward = solve_dp(envs["lam"], envs["c"], self.horizon)
        envs.update(
            queue=torch.zeros(envs["lam"].shape[0], dtype=torch.long, device=envs["lam"].device),
            dp_action=action,
            dp_value=value,
            opt_reward=opt_reward,
        )
        return envs

    def _check_t(self, envs: Envs, t: int) -> None:
        if t >= self.horizon:
            raise OMGPTError(
                f"queueing step {t + 1} is beyond the task's horizon {self.horizon} that the DP "
                f"planned for; build the task with a larger horizon (--option horizon=N)"
            )

    def sample_context(self, envs: Envs, t: int, generator: torch.Generator) -> Tensor:
        return torch.stack([envs["queue"].float(), envs["c"].float()], dim=-1)

    def observe(self, envs: Envs, x: Tensor, a: Tensor, t: int, generator: torch.Generator) -> Tensor:
        queue = envs["queue"]
        p = transition_matrix(envs["lam"], a[:, 0].double())  # (B, 5, 5)
        row = p[torch.arange(queue.shape[0], device=queue.device), queue]  # (B, 5)
        u = torch.rand(queue.shape, generator=generator, device=generator.device, dtype=torch.float64)
        # Inverse CDF over the first four buckets (the last absorbs rounding): one uniform per step, so
        # policies run with the same seeds share their arrival/service luck as far as possible.
        nxt = (row[:, :-1].cumsum(-1) < u[:, None]).sum(-1)
        return nxt.to(x.dtype)[:, None]

    def step(self, envs: Envs, x: Tensor, a: Tensor, o: Tensor, t: int) -> None:
        envs["queue"] = o[:, 0].round().long()

    # -- decisions and rewards ----------------------------------------------------------------------
    def project(self, a: Tensor, x: Tensor | None = None) -> Tensor:
        """Clip to ``[0, 1]`` and round to the nearest multiple of 0.2."""
        return torch.round(a.clamp(self.action_low, self.action_high) * GRID_STEPS) / GRID_STEPS

    def sample_action(self, n: int, generator: torch.Generator) -> Tensor:
        idx = torch.randint(GRID_STEPS + 1, (n, 1), generator=generator, device=generator.device)
        return idx.float() / GRID_STEPS

    def optimal_action(self, envs: Envs, x: Tensor, t: int) -> Tensor:
        """``a*_t`` in the current queue length: from the episode's DP tables (built in :meth:`start`), or,
        for candidate environments that have none (``alg-star``'s), from :meth:`dp_table` at the queue
        length the context shows."""
        self._check_t(envs, t)
        if "dp_action" not in envs:
            table = self.dp_table(x.device)  # (6, 6, T, 5)
            li = _grid_index(envs["lam"], LAMBDAS)
            ci = _grid_index(envs["c"], COSTS)
            return table[li, ci, t, x[:, 0].round().long()][:, None].to(x.dtype)
        queue = envs["queue"]
        return envs["dp_action"][torch.arange(queue.shape[0], device=queue.device), t, queue][:, None].to(x.dtype)

    def dp_table(self, device=None) -> Tensor:
        """The optimal service rate for every ``(λ, c)`` of the prior, step and queue length,
        ``(6, 6, T, 5)``: one batched :func:`solve_dp`, computed on first use and kept."""
        return self._solved()[0].to(device)

    def value_table(self, device=None) -> Tensor:
        """The optimal value-to-go ``V_t(s)`` for every ``(λ, c)`` of the prior, ``(6, 6, T + 1, 5)``
        (float64; ``V_T ≡ 0``), from the same :func:`solve_dp`."""
        return self._solved()[1].to(device)

    def _solved(self) -> tuple[Tensor, Tensor]:
        if getattr(self, "_dp_solved", None) is None:
            lam = torch.tensor(LAMBDAS, dtype=torch.float64).repeat_interleave(len(COSTS))
            c = torch.tensor(COSTS, dtype=torch.float64).repeat(len(LAMBDAS))
            action, value, _ = solve_dp(lam, c, self.horizon)
            shape = (len(LAMBDAS), len(COSTS), self.horizon, STATES)
            value = torch.cat([value.reshape(shape), value.new_zeros(*shape[:2], 1, STATES)], dim=2)
            self._dp_solved = (action.reshape(shape), value)
        return self._dp_solved

    def grid_actions(self, device=None) -> Tensor:
        """The six service rates, ``(6, 1)``."""
        return action_grid(device)[:, None]

    def action_values(self, envs: Envs, x: Tensor, t: int) -> Tensor:
        """``Q_t(s, a) = -(s + c a²) + Σ_s' P_a[s, s'] V_{t+1}(s')`` of the six rates at the queue length
        the context shows, under each environment's ``λ`` (the DP of :meth:`value_table`), ``(B, 6)``
        (float64)."""
        self._check_t(envs, t)
        li, ci = _grid_index(envs["lam"], LAMBDAS), _grid_index(envs["c"], COSTS)
        q = q_values(*stage(envs["lam"], envs["c"]), self.value_table(x.device)[li, ci, t + 1])  # (B, 5, 6)
        queue = x[:, 0].round().long()
        return q[torch.arange(queue.shape[0], device=x.device), queue]

    def log_likelihood(self, candidates: Envs, x: Tensor, a: Tensor, o: Tensor, t: int) -> Tensor:
        """``log P_a[S_t, O_t]`` under each candidate's ``λ`` (``-inf`` for a transition it cannot make)."""
        queue, nxt = x[:, 0].round().long(), o[:, 0].round().long()
        p = transition_matrix(candidates["lam"].to(torch.float64), a[:, 0].double())  # (M, 5, 5)
        rows = torch.arange(queue.shape[0], device=queue.device)
        return torch.log(p[rows, queue, nxt])

    def candidates(self, episodes: int, particles: int, generator: torch.Generator) -> tuple[Envs, int, bool]:
        """The six ``λ`` of the prior (the pool's, with a pool), the same for every episode: an exact
        posterior (``particles`` is not needed). ``c`` is known: it comes from the context."""
        if self._pool is not None:
            return super().candidates(episodes, particles, generator)
        device = generator.device
        lam = torch.tensor(LAMBDAS, dtype=torch.float64, device=device).repeat(episodes)
        return {"lam": lam, "c": torch.full_like(lam, COSTS[0]).float()}, len(LAMBDAS), True

    def expected_reward(self, envs: Envs, x: Tensor, a: Tensor, t: int) -> Tensor:
        """``r(X_t, a) = -(O_{t-1} + c a²)`` (deterministic given the state and the action)."""
        return -(x[:, 0] + x[:, 1] * a[:, 0] ** 2)

    def optimal_reward(self, envs: Envs, x: Tensor, t: int, a_star: Tensor | None = None) -> Tensor:
        """The optimal policy's expected reward at ``t`` from the empty queue (float64), which the
        regret subtracts ``r(X_t, a_t)`` from."""
        self._check_t(envs, t)
        return envs["opt_reward"][:, t]

    # -- the model of the world ---------------------------------------------------------------------
    def context_params(self, x: Tensor) -> Envs:
        """The known cost ``c``, the context's second number."""
        return {"c": x[:, 1]}

    def mean_observation(self, envs: Envs, x: Tensor, a: Tensor, t: int) -> Tensor:
        """The expected queue length at the end of the period, ``Σ_s' P_a[S_t, s'] s'``, ``(B, 1)``."""
        queue = x[:, 0].round().long()
        p = transition_matrix(envs["lam"], a[:, 0].double())  # (B, 5, 5)
        row = p[torch.arange(queue.shape[0], device=queue.device), queue]
        return (row @ torch.arange(STATES, dtype=row.dtype, device=row.device)).to(x.dtype)[:, None]

    def scaling(self) -> Scaling:
        # Measured under the prior, T = 100: the queue length (0..4) has mean 2.9 / 2.0 and sd 1.6 for
        # the oracle / the random policy; c uniform on {5, …, 60}: mean 32.5, sd 18.8; service is
        # costly, so a* is mostly 0: mean 0.07, sd 0.17.
        return Scaling(
            feature_loc=(2.5, 2.5, 32.5),
            feature_scale=(1.6, 1.6, 18.8),
            action_loc=(0.1,),
            action_scale=(0.2,),
        )
