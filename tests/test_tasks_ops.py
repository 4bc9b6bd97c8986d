"""Operations tasks: queueing control (DP oracle) and network revenue management (re-solving LP),
against hand-computed cases, exhaustive search, brute-force grids, SciPy's HiGHS and the CLI."""

from __future__ import annotations

import itertools
import math
import json

import numpy as np
import pytest
import torch

from omgpt import lp
from omgpt.commands.cli import cli_main
from omgpt.errors import OMGPTError
from omgpt.policies import Policy, make_policy
from omgpt.rollout import rollout
from omgpt.tasks import make_task
from omgpt.tasks.queueing import COSTS, LAMBDAS, action_grid, solve_dp, transition_matrix
from omgpt.tasks.revenue import fluid_lp, solve_box_lp


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------------------------------
# Queueing
def queue_dynamics(lam: float, a: float) -> np.ndarray:
    """The transition matrix rebuilt from the story (independently of the appendix's table): a
    non-empty queue completes one service with probability ``a``, then one customer arrives with
    probability ``λ`` and is turned away when 4 are waiting."""
    p = np.zeros((5, 5))
    for s in range(5):
        for served, p_served in ((1, a if s > 0 else 0.0), (0, 1 - a if s > 0 else 1.0)):
            for arrived, p_arrived in ((1, lam), (0, 1 - lam)):
                p[s, min(4, s - served + arrived)] += p_served * p_arrived
    return p


def test_queueing_transition_matrix_matches_the_appendix():
    lam, a = torch.tensor(0.26, dtype=torch.float64), torch.tensor(0.4, dtype=torch.float64)
    p = transition_matrix(lam, a)
    # By hand: (1-λ)a = 0.296, (1-λ)(1-a)+λa = 0.444+0.104 = 0.548, λ(1-a) = 0.156, 1-a+λa = 0.704.
    expected = torch.tensor(
        [
            [0.74, 0.26, 0.0, 0.0, 0.0],
            [0.296, 0.548, 0.156, 0.0, 0.0],
            [0.0, 0.296, 0.548, 0.156, 0.0],
            [0.0, 0.0, 0.296, 0.548, 0.156],
            [0.0, 0.0, 0.0, 0.296, 0.704],
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(p, expected, rtol=0, atol=1e-12)
    # Every (λ, a) of the grid: stochastic rows, equal to the service-then-arrival story.
    lams = torch.tensor(LAMBDAS, dtype=torch.float64)[:, None]
    grid = action_grid(dtype=torch.float64)[None, :]
    all_p = transition_matrix(lams, grid)  # (6, 6, 5, 5)
    assert all_p.shape == (6, 6, 5, 5) and (all_p >= 0).all()
    torch.testing.assert_close(all_p.sum(-1), torch.ones(6, 6, 5, dtype=torch.float64))
    for i, j in itertools.product(range(6), range(6)):
        np.testing.assert_allclose(all_p[i, j].numpy(), queue_dynamics(LAMBDAS[i], j / 5), atol=1e-12)


def test_queueing_simulator_draws_from_the_matrix():
    task = make_task("queueing", horizon=5)
    n = 100_000
    envs = task.start({"lam": torch.full((n,), 0.26, dtype=torch.float64), "c": torch.full((n,), 5.0)}, gen(0))
    envs["queue"] = torch.full((n,), 2)  # start from the middle state
    x = task.sample_context(envs, 0, gen(0))
    assert torch.equal(x, torch.tensor([[2.0, 5.0]]).expand(n, 2))
    nxt = task.observe(envs, x, torch.full((n, 1), 0.4), 0, gen(1))[:, 0].long()
    freq = torch.bincount(nxt, minlength=5).double() / n
    torch.testing.assert_close(
        freq, torch.tensor([0.0, 0.296, 0.548, 0.156, 0.0], dtype=torch.float64), rtol=0, atol=0.005
    )
    assert freq[0] == 0 and freq[4] == 0  # impossible moves never happen


def exhaustive_best(lam: float, c: float, start: int, horizon: int):
    """Every deterministic Markov policy on the states reachable from ``start``, evaluated exactly by
    propagating the state distribution: returns (best value, value of every policy, the policies)."""
    grid = np.arange(6) / 5
    trans = np.stack([queue_dynamics(lam, a) for a in grid])  # (6, 5, 5)
    reach = [list(range(max(0, start - t), min(4, start + t) + 1)) for t in range(horizon)]
    per_step = [list(itertools.product(range(6), repeat=len(r))) for r in reach]
    policies = list(itertools.product(*per_step))
    n = len(policies)
    dist = np.zeros((n, 5))
    dist[:, start] = 1.0
    value = np.zeros(n)
    states = np.arange(5)
    for t, states_t in enumerate(reach):
        act = np.zeros((n, 5), dtype=int)
        act[:, states_t] = np.array([pol[t] for pol in policies])
        value += (dist * -(states[None, :] + c * grid[act] ** 2)).sum(1)
        dist = np.einsum("ps,psn->pn", dist, trans[act, states[None, :]])
    return value.max(), value, policies, reach


# Within 3 periods service pays only when it is cheap: costs below the prior's make the optimal
# policies non-trivial (the DP is the same code for any c); (0.42, 27) is a prior point (never serve).
@pytest.mark.parametrize(("lam", "c"), [(0.9, 0.5), (0.58, 1.0), (0.26, 0.3), (0.1, 2.0), (0.74, 0.8), (0.42, 27.0)])
@pytest.mark.parametrize("start", [0, 4])
def test_queueing_dp_matches_exhaustive_search(lam, c, start):
    """T = 3: all 6·6²·6³ = 46656 deterministic Markov policies on the reachable states."""
    horizon = 3
    best, values, policies, reach = exhaustive_best(lam, c, start, horizon)
    action, value, _ = solve_dp(
        torch.tensor([lam], dtype=torch.float64), torch.tensor([c], dtype=torch.float64), horizon
    )
    assert value[0, 0, start].item() == pytest.approx(best, abs=1e-10)
    # The DP policy (on the reachable states) is one of the exhaustive maximisers, and the only one
    # when the maximiser is unique.
    dp_policy = tuple(tuple(round(action[0, t, s].item() * 5) for s in states) for t, states in enumerate(reach))
    winners = [pol for pol, v in zip(policies, values) if v >= best - 1e-10]
    assert dp_policy in winners
    if len(winners) == 1:
        assert dp_policy == winners[0]


def test_queueing_dp_serves_when_it_pays():
    """Sanity beyond T = 3: with cheap service a long queue is served at full rate early on; service
    is never bought at the last step (it only pays off later) nor for an empty queue; a dearer
    service is never used more."""
    lam = torch.tensor([0.26, 0.26], dtype=torch.float64)
    action, value, opt_reward = solve_dp(lam, torch.tensor([5.0, 60.0]), 100)
    assert action[0, 0, 3] == 1.0 and (action[:, -1] == 0).all() and (action[:, :, 0] == 0).all()
    assert (action[1] <= action[0]).all()
    torch.testing.assert_close(opt_reward.sum(1), value[:, 0, 0])  # the forward pass agrees with V_0(0)


def test_queueing_oracle_regret_is_zero_in_expectation_and_random_positive():
    task = make_task("queueing", horizon=20)
    n = 4000
    envs = task.sample_envs(n, gen(0))
    oracle = rollout(task, envs, make_policy("oracle", task), 20, gen(1), gen(2))
    assert torch.equal(oracle.actions, oracle.optimal_actions)
    cum = oracle.cumulative_regret().double()
    se = cum.std(0) / n**0.5
    assert (cum.mean(0).abs() <= 4 * se + 1e-6).all()  # mean 0 at every t, up to Monte Carlo error
    assert cum.abs().max() > 0  # ... but run by run it is not (it can dip below 0)

    rand = rollout(task, envs, make_policy("random", task), 20, gen(1), gen(2))
    final = rand.cumulative_regret()[:, -1].double()
    assert final.mean() > 10 * final.std() / n**0.5
    grid = action_grid()
    assert torch.isin(rand.actions, grid).all() and torch.isin(rand.optimal_actions, grid).all()
    few = {k: v[:500] for k, v in envs.items()}
    noisy = rollout(task, few, make_policy("noisy-oracle", task), 20, gen(1), gen(2))
    assert torch.isin(noisy.actions, grid).all()  # projected onto the grid
    # The context is (O_{t-1}, c) and the observation the queue length at the period's end.
    assert torch.equal(oracle.contexts[:, 1:, 0], oracle.observations[:, :-1, 0])
    assert (oracle.contexts[:, 0, 0] == 0).all() and torch.equal(
        oracle.contexts[:, :, 1], envs["c"][:, None].expand(n, 20)
    )
    assert set(oracle.observations.unique().tolist()) <= {0.0, 1.0, 2.0, 3.0, 4.0}


def test_queueing_project_pool_and_horizon():
    task = make_task("queueing", pool_size=4, pool_seed=3)
    envs = task.sample_envs(500, gen(0))
    pairs = torch.unique(torch.stack([envs["lam"], envs["c"].double()], -1), dim=0)
    assert envs["lam"].unique().numel() <= 4  # the pool fixes the hidden λ; the known c is redrawn
    assert envs["c"].unique().numel() == len(COSTS)
    assert all(lam in LAMBDAS and c in COSTS for lam, c in pairs.tolist())
    a = torch.tensor([[-0.3], [0.09], [0.11], [0.5], [0.71], [2.0]])
    torch.testing.assert_close(task.project(a), torch.tensor([[0.0], [0.0], [0.2], [0.4], [0.8], [1.0]]))
    draws = task.sample_action(6000, gen(1))
    assert torch.equal(draws.unique(), action_grid())
    short = make_task("queueing", horizon=5)
    with pytest.raises(OMGPTError, match="horizon"):
        rollout(short, short.sample_envs(2, gen(0)), make_policy("oracle", short), 6, gen(1))


# --------------------------------------------------------------------------------------------------
# Revenue management
def test_queueing_likelihood_is_the_transition_probability():
    """``log_likelihood`` is ``log P_a[s, s']`` of the appendix's matrix under each candidate's λ."""
    task = make_task("queueing")
    lam = torch.tensor([0.1, 0.9, 0.42], dtype=torch.float64)
    x = torch.tensor([[0.0, 5.0], [2.0, 16.0], [4.0, 60.0]])
    a = torch.tensor([[0.4], [0.6], [1.0]])
    o = torch.tensor([[1.0], [1.0], [3.0]])
    ll = task.log_likelihood({"lam": lam, "c": x[:, 1]}, x, a, o, 0)
    expected = [
        math.log(queue_dynamics(l, float(ai))[int(s), int(n)])
        for l, ai, s, n in zip(lam.tolist(), a[:, 0], x[:, 0], o[:, 0])
    ]
    torch.testing.assert_close(ll, torch.tensor(expected, dtype=ll.dtype))
    assert (
        task.log_likelihood({"lam": torch.tensor([0.1])}, x[:1], a[:1], torch.tensor([[2.0]]), 0) == -math.inf
    )  # 0 -> 2 cannot happen


def test_queueing_alg_star_on_one_environment_is_the_oracle():
    """With one environment in the pool the posterior is a point mass: alg-star plays the DP policy."""
    task = make_task("queueing", pool_size=1, horizon=30)
    envs = task.sample_envs(40, gen(0))
    star = rollout(task, envs, make_policy("alg-star", task), 30, gen(1), gen(2))
    oracle = rollout(task, envs, make_policy("oracle", task), 30, gen(1), gen(2))
    assert torch.equal(star.actions, oracle.actions)


def test_queueing_alg_star_posterior_is_exact_over_the_six_rates():
    """Without a pool the candidates are the prior's six λ and the posterior is Bayes' rule on them."""
    task = make_task("queueing", horizon=10)
    policy = make_policy("alg-star", task)
    envs = task.sample_envs(3, gen(0))
    policy.reset(envs, 10, gen(1))
    assert policy.exact and policy.n == len(LAMBDAS)
    x = torch.tensor([[1.0, 5.0]] * 3)
    policy.act(0, x)
    policy.observe(0, torch.full((3, 1), 0.2), torch.tensor([[2.0], [1.0], [0.0]]))
    for row, nxt in enumerate((2, 1, 0)):
        lik = torch.tensor([queue_dynamics(l, 0.2)[1, nxt] for l in LAMBDAS], dtype=torch.float64)
        torch.testing.assert_close(policy.posterior()[row], lik / lik.sum())


def test_certainty_equivalence_learns_the_arrival_rate_and_beats_random():
    """``ce``'s estimate converges to λ; with the known-λ DP it plays close to the oracle."""
    task = make_task("queueing", horizon=100)
    envs = task.sample_envs(200, gen(0))
    ce = make_policy("ce", task)
    history = rollout(task, envs, ce, 100, gen(1), gen(2))
    assert (ce.estimate() - envs["lam"]).abs().mean() < 0.1
    rand = rollout(task, envs, make_policy("random", task), 100, gen(1), gen(2))
    assert history.cumulative_regret()[:, -1].mean() < 0.05 * rand.cumulative_regret()[:, -1].mean()
    # before any data the estimate is the flat prior's mean, 1/2
    fresh = make_policy("ce", task)
    fresh.reset(envs, 100, gen(3))
    torch.testing.assert_close(fresh.estimate(), torch.full((200,), 0.5, dtype=torch.float64))


def random_lps(n: int, seed: int):
    g = gen(seed)
    c = 1 + torch.rand(n, 3, generator=g, dtype=torch.float64)
    m = (1 + torch.rand(n, 3, 3, generator=g, dtype=torch.float64)) * torch.rand(
        n, 1, 3, generator=g, dtype=torch.float64
    )
    b = 1.5 * torch.rand(n, 3, generator=g, dtype=torch.float64)
    b[:5] = 0.0  # no budget at all
    b[5:10, 0] = 1e-3  # one nearly exhausted resource
    return c, m, b


def test_vertex_solver_matches_the_cvxpy_reference():
    c, m, b = random_lps(300, 0)
    for upper in (torch.ones_like(c), torch.randint(0, 6, c.shape, generator=gen(1)).double()):
        y, value = solve_box_lp(c, m, b, upper)
        y_ref, value_ref = lp.box_lp(c, m, b, upper)
        np.testing.assert_allclose(value.numpy(), value_ref, atol=1e-7)
        assert (y >= 0).all() and (y <= upper).all()
        assert ((m @ y[:, :, None])[:, :, 0] <= b + 1e-9).all()  # feasible
        assert np.abs(y.numpy() - y_ref).max() < 1e-6  # generic LPs: the optimum is unique


def test_fluid_lp_against_a_brute_force_grid():
    task = make_task("revenue")
    envs = task.sample_envs(4, gen(3))
    b = torch.tensor([[1.0, 1.0, 1.0], [0.6, 1.2, 0.9], [0.3, 0.3, 0.3], [2.0, 0.1, 2.0]], dtype=torch.float64)
    y = fluid_lp(envs["r"], envs["A"], envs["p"], b)
    torch.testing.assert_close(y, fluid_lp(envs["r"], envs["A"], envs["p"], b, solver="cvxpy"), rtol=0, atol=1e-6)
    axis = torch.linspace(0, 1, 101, dtype=torch.float64)
    cube = torch.cartesian_prod(axis, axis, axis)  # (101³, 3)
    for i in range(4):
        p, r, a = envs["p"][i].double(), envs["r"][i].double(), envs["A"][i].double()
        objective = cube @ (p * r)
        feasible = ((cube * p) @ a <= b[i] + 1e-12).all(-1)
        grid_best = objective[feasible].max().item()
        lp_value = ((p * r) * y[i]).sum().item()
        assert grid_best <= lp_value + 1e-9  # the LP is at least as good as any grid point
        assert lp_value <= grid_best + 0.01 * (p * r).sum().item() + 1e-9  # and the grid gets within a step
    # a* is the LP's y of the arriving type.
    started = task.start(envs, gen(0))
    x = task.sample_context(started, 0, gen(4))
    k = task.arriving_type(started, x)
    y1 = fluid_lp(envs["r"], envs["A"], envs["p"], torch.ones(4, 3))
    torch.testing.assert_close(task.optimal_action(started, x, 0)[:, 0], y1[torch.arange(4), k].float())


class AlwaysAccept(Policy):
    def act(self, t, x):
        return torch.ones(x.shape[0], 1)


def replay_budget(task, history):
    """Budgets ``B_t`` (B, T+1, J) rebuilt from the observations, and whether each request fit."""
    n, horizon = history.contexts.shape[:2]
    j = task.resources
    budget = torch.full((n, j), float(task.horizon), dtype=torch.float64)
    budgets, fits = [budget], []
    for t in range(horizon):
        need, y = history.observations[:, t, 1 : 1 + j].double(), history.observations[:, t, -1].double()
        fits.append((need <= budget + 1e-9).all(-1))
        budget = budget - need * y[:, None]
        budgets.append(budget)
    return torch.stack(budgets, 1), torch.stack(fits, 1)


def hindsight_lp(history, budget: float) -> np.ndarray:
    """The paper's bound with one variable per arrival (not aggregated by type): accept a fraction
    ``z_t`` of every request so as to earn the most within the budget, ``max Σ r~_t z_t  s.t.
    Σ A~_t z_t ≤ budget, 0 ≤ z ≤ 1`` (cvxpy)."""
    import cvxpy as cp

    out = []
    for o in history.observations.double().numpy():  # (T, 1 + J + 1): r~, A~, y
        z = cp.Variable(len(o))
        problem = cp.Problem(cp.Maximize(o[:, 0] @ z), [o[:, 1:-1].T @ z <= budget, z >= 0, z <= 1])
        out.append(problem.solve())
    return np.array(out)


def test_revenue_budget_acceptance_and_context():
    task = make_task("revenue", horizon=30)
    envs = task.sample_envs(64, gen(0))
    h = rollout(task, envs, AlwaysAccept(task), 30, gen(1), gen(2))
    budgets, fits = replay_budget(task, h)
    assert (budgets >= -1e-9).all()  # never negative
    assert (~fits).any() and fits.any()  # always accepting exhausts the budget: both cases occur
    y = h.observations[:, :, -1]
    assert (y[~fits] == 0).all() and (y[fits] == 1).all()  # a = 1: accepted exactly when it fits
    # Context (r~, A~, B_t/(T-t+1)); observation (r~, A~, y).
    torch.testing.assert_close(h.observations[:, :, :4], h.contexts[:, :, :4], rtol=0, atol=0)
    per_period = budgets[:, :-1] / (30 - torch.arange(30, dtype=torch.float64))[None, :, None]
    torch.testing.assert_close(h.contexts[:, :, 4:].double(), per_period, rtol=1e-6, atol=1e-6)
    types = torch.cat([envs["r"][..., None], envs["A"]], -1)  # every context is one of the env's types
    assert ((h.contexts[:, :, None, :4] == types[:, None]).all(-1).sum(-1) == 1).all()


def test_revenue_hindsight_bound_and_regret():
    horizon = 20
    task = make_task("revenue", horizon=horizon)
    envs = task.sample_envs(48, gen(5))
    finals = {}
    for name in ("oracle", "random", "noisy-oracle"):
        h = rollout(task, envs, make_policy(name, task), horizon, gen(6), gen(7))
        bound = hindsight_lp(h, float(horizon))  # budget B_1 = T·1
        collected = (h.observations[:, :, 0] * h.observations[:, :, -1]).sum(1).double().numpy()
        assert (bound >= collected - 1e-6).all()  # the bound holds run by run for the realised reward
        _, fits = replay_budget(task, h)
        expected = (h.contexts[:, :, 0] * h.actions[:, :, 0] * fits).sum(1).double().numpy()
        # Final regret = hindsight LP of the whole sequence - expected collected reward, exactly.
        np.testing.assert_allclose(h.cumulative_regret()[:, -1].double().numpy(), bound - expected, atol=1e-3)
        finals[name] = h.cumulative_regret()[:, -1].mean().item()
        if name == "oracle":
            assert torch.equal(h.actions, h.optimal_actions)
    assert finals["oracle"] < finals["noisy-oracle"] < finals["random"]
    assert finals["oracle"] >= -1.0 and finals["random"] > 3.0


def test_revenue_cvxpy_solver_option_gives_the_same_episode():
    fast, ref = make_task("revenue", horizon=6), make_task("revenue", horizon=6, solver="cvxpy")
    envs = fast.sample_envs(8, gen(0))
    h1 = rollout(fast, envs, make_policy("noisy-oracle", fast), 6, gen(1), gen(2))
    h2 = rollout(ref, envs, make_policy("noisy-oracle", ref), 6, gen(1), gen(2))
    torch.testing.assert_close(h1.optimal_actions, h2.optimal_actions, rtol=0, atol=1e-6)
    torch.testing.assert_close(h1.regrets, h2.regrets, rtol=0, atol=1e-5)
    with pytest.raises(OMGPTError, match="solver"):
        make_task("revenue", solver="simplex")
    with pytest.raises(OMGPTError, match="horizon"):
        rollout(fast, envs, make_policy("oracle", fast), 7, gen(1))


# --------------------------------------------------------------------------------------------------
# Through the CLI
@pytest.mark.parametrize(("task", "options"), [("queueing", []), ("revenue", ["--option", "horizon=20"])])
def test_evaluate_cli_runs_the_ops_tasks(tmp_path, task, options):
    argv = [
        "evaluate",
        "--task",
        task,
        *options,
        "--policies",
        "oracle,noisy-oracle,random",
        "--runs",
        "8",
        "--horizon",
        "20",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    assert cli_main(argv) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["policies"]) == {"oracle", "noisy-oracle", "random"}
