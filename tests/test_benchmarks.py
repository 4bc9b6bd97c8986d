"""The classical benchmarks (ERM, FAI, ILSE, CILS) on hand-computed cases, plus their regret in rollouts."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from omgpt import lp
from omgpt.errors import OMGPTError
from omgpt.policies import Policy, make_policy
from omgpt.policies.newsvendor import batched_quantile_regression, quantile_regression
from omgpt.rollout import rollout
from omgpt.tasks import make_task


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def start(policy, task, batch: int, horizon: int, seed: int = 0):
    """``reset`` a policy on ``batch`` environments (learning policies only use the batch size)."""
    policy.reset(task.sample_envs(batch, gen(seed)), horizon, gen(seed + 1))
    return policy


# --------------------------------------------------------------------------------------------------
# FAI
def test_fai_paper_gradient_steps_follow_the_paper_text():
    """Env 0 over-orders (leftover: step -h/√t·X~), env 1 sells out (censored O = a: step +l/√t·X~)."""
    task = make_task("newsvendor", dim=2, lost_sale_cost=1.5)
    fai = start(make_policy("fai-paper", task), task, batch=2, horizon=3)
    w0 = fai.weights.clone()
    assert ((w0 >= 0) & (w0 <= 1)).all()

    h = torch.tensor([0.5, 2.0])
    x0 = torch.tensor([[0.5, 1.0, 2.0], [2.0, 3.0, 0.5]])  # (h, X~)
    a0 = fai.act(0, x0)
    torch.testing.assert_close(a0[:, 0], (w0 * x0[:, 1:]).sum(-1))  # the first order uses w~_0
    fai.observe(0, a0, torch.stack([a0[0] - 1.0, a0[1]]))  # O < a in env 0 only

    x1 = torch.tensor([[0.5, 0.2, 1.0], [2.0, 1.0, 1.0]])
    a1 = fai.act(1, x1)  # 1-based t = 2: step size 1/√2
    expected = w0 + torch.stack([-h[0] * x0[0, 1:], 1.5 * x0[1, 1:]]) / math.sqrt(2)
    torch.testing.assert_close(fai.weights, expected)
    torch.testing.assert_close(a1[:, 0], (expected * x1[:, 1:]).sum(-1))

    fai.observe(1, a1, torch.stack([a1[0] + 1.0, a1[1] - 1.0]))  # now env 0 stocks out, env 1 has leftover
    fai.act(2, x0)  # 1-based t = 3
    expected = expected + torch.stack([1.5 * x1[0, 1:], -h[1] * x1[1, 1:]]) / math.sqrt(3)
    torch.testing.assert_close(fai.weights, expected)


def test_fai_default_is_the_authors_variant():
    """``w~_0 ~ U[0,3]^d``, step ``2(1 - e^{-t}) / (t·max(1, h))`` times the cost slope, weights clipped
    to ``[0, 40]`` (docs/paper-gaps.md §6). Env 0 (h = 0.5) has leftover, env 1 (h = 2) sells out, at t = 2."""
    task = make_task("newsvendor", dim=2, lost_sale_cost=1.0)
    fai = start(make_policy("fai", task), task, batch=2, horizon=3)
    w0 = fai.weights.clone()
    assert ((w0 >= 0) & (w0 <= 3)).all() and (w0 > 1).any()  # U[0,3], not the paper's U[0,1]

    x0 = torch.tensor([[0.5, 1.0, 2.0], [2.0, 3.0, 0.5]])  # (h, X~)
    a0 = fai.act(0, x0)
    fai.observe(0, a0, torch.stack([a0[0] - 1.0, a0[1]]))
    fai.act(1, x0)  # 1-based t = 2
    eta = 2 * (1 - math.exp(-2)) / 2  # / max(1, h): 1 for env 0 (h = 0.5), 2 for env 1
    expected = w0 + torch.stack([-0.5 * eta * x0[0, 1:], eta / 2 * x0[1, 1:]])
    torch.testing.assert_close(fai.weights, expected.clamp(0, 40))

    # The projection onto [0, 40]: after huge features a stock-out's step would pass 40, a leftover's 0.
    fai = start(make_policy("fai", task), task, batch=2, horizon=2)
    huge = torch.tensor([[0.5, 1e3, 1e3], [2.0, 1e3, 1e3]])
    a = fai.act(0, huge)
    fai.observe(0, a, torch.stack([a[0], a[1] - 1.0]))  # env 0 sells out (O = a), env 1 has leftover
    fai.act(1, x0)
    torch.testing.assert_close(fai.weights, torch.tensor([[40.0, 40.0], [0.0, 0.0]]))


def test_fai_is_unchanged_by_censoring():
    """``min(D, a) < a`` iff ``D < a``: with common random numbers FAI orders exactly the same."""
    played = []
    for name in ("newsvendor", "newsvendor-censored"):
        task = make_task(name)
        history = rollout(task, task.sample_envs(8, gen(3)), make_policy("fai", task), 30, gen(4), gen(5))
        played.append(history.actions)
    torch.testing.assert_close(played[0], played[1])


# --------------------------------------------------------------------------------------------------
# ERM
@pytest.mark.parametrize(("q", "expected"), [(0.2, 1.0), (0.5, 2.0), (0.8, 5.0)])
def test_quantile_regression_intercept_only_is_the_sample_quantile(q, expected):
    beta = quantile_regression(np.zeros((3, 0)), np.array([1.0, 5.0, 2.0]), q)
    assert beta[0] == pytest.approx(expected)


@pytest.mark.parametrize(("q", "expected"), [(0.2, 0.0), (0.8, 0.5)])
def test_quantile_regression_three_points_by_hand(q, expected):
    """Points (0,0), (1,1), (3,0). An optimum interpolates two of them; pinball losses of the three lines:
    y = 0: q·1; y = 1.5 - x/2: (1-q)·1.5; y = x: (1-q)·3. So q = 0.2 -> y = 0, q = 0.8 -> y = 1.5 - x/2."""
    beta = quantile_regression(np.array([[0.0], [1.0], [3.0]]), np.array([0.0, 1.0, 0.0]), q)
    assert beta[0] + 2.0 * beta[1] == pytest.approx(expected)


def pinball(residuals: np.ndarray, q: float) -> float:
    return float(np.sum(np.where(residuals > 0, q * residuals, (q - 1) * residuals)))


def test_quantile_regression_matches_brute_force():
    """An LP optimum sits at a vertex: a line through 2 of the points. Enumerate all of them."""
    rng = np.random.default_rng(0)
    feats, targets, q = rng.uniform(0, 3, (7, 1)), rng.uniform(0, 5, 7), 0.3
    design = np.hstack([np.ones((7, 1)), feats])
    best = min(
        pinball(targets - design @ np.linalg.solve(design[list(pair)], targets[list(pair)]), q)
        for pair in itertools.combinations(range(7), 2)
    )
    beta = quantile_regression(feats, targets, q)
    assert pinball(targets - design @ beta, q) == pytest.approx(best)


@pytest.mark.parametrize("l1", [0.0, 0.5])
@pytest.mark.parametrize(("n", "d"), [(3, 4), (10, 4), (60, 2)])
def test_quantile_regression_matches_the_cvxpy_reference(n, d, l1):
    """The dense HiGHS LP and the readable cvxpy statement reach the same objective (pinball loss plus
    penalty); with few points and no penalty the optimum is not unique, so only the objective is
    compared."""
    rng = np.random.default_rng(n + d)
    feats = rng.uniform(0, 3, (n, d))
    targets = feats @ rng.uniform(0, 3, d) + rng.uniform(0, 5, n)
    design = np.hstack([np.ones((n, 1)), feats])

    def objective(beta):
        return pinball(targets - design @ beta, 0.3) + l1 * np.abs(beta[1:]).sum()

    fast, reference = quantile_regression(feats, targets, 0.3, l1), lp.quantile_regression(feats, targets, 0.3, l1)
    assert objective(fast) == pytest.approx(objective(reference), abs=1e-6)


@pytest.mark.parametrize("l1", [0.0, 0.5])
@pytest.mark.parametrize(("n", "d"), [(1, 4), (3, 4), (5, 4), (10, 4), (99, 4), (7, 0), (60, 2)])
def test_batched_quantile_regression_reaches_the_lp_optimum(n, d, l1):
    """The batched interior point method against one HiGHS LP per data set: the same optimal objective
    (pinball loss plus penalty) on every data set; the argmin can be a continuum (few points, no
    penalty), so coefficients are compared only where the penalty makes the optimum unique."""
    rng = np.random.default_rng(10 * n + d)
    b = 16
    feats = rng.uniform(0, 3, (b, n, d))
    targets = (feats @ rng.uniform(0, 3, (b, d, 1)))[..., 0] + rng.uniform(0, 5, (b, n))
    q = rng.uniform(1 / 3, 2 / 3, b)
    fast = batched_quantile_regression(
        torch.from_numpy(feats), torch.from_numpy(targets), torch.from_numpy(q), l1
    ).numpy()
    for i in range(b):
        design = np.hstack([np.ones((n, 1)), feats[i]])

        def objective(beta):
            return pinball(targets[i] - design @ beta, q[i]) + l1 * np.abs(beta[1:]).sum()

        reference = quantile_regression(feats[i], targets[i], q[i], l1)
        assert objective(fast[i]) == pytest.approx(objective(reference), rel=1e-8, abs=1e-8)
        if l1 > 0 and n >= 10:
            np.testing.assert_allclose(fast[i], reference, atol=1e-6)


def test_erm_batched_solver_orders_as_one_lp_per_environment():
    task = make_task("newsvendor")
    envs = task.sample_envs(8, gen(0))
    fast = rollout(task, envs, make_policy("erm", task), 30, gen(1), gen(2))
    reference = rollout(task, envs, make_policy("erm", task, solver="highs"), 30, gen(1), gen(2))
    torch.testing.assert_close(fast.actions, reference.actions, atol=1e-4, rtol=0)


def test_erm_with_the_cvxpy_solver_orders_as_with_highs():
    task = make_task("newsvendor")
    envs = task.sample_envs(3, gen(0))
    fast = rollout(task, envs, make_policy("erm", task), 12, gen(1), gen(2))
    reference = rollout(task, envs, make_policy("erm", task, solver="cvxpy"), 12, gen(1), gen(2))
    torch.testing.assert_close(reference.actions, fast.actions, atol=1e-4, rtol=0)
    with pytest.raises(OMGPTError, match="solver"):
        make_policy("erm", task, solver="simplex")


def test_erm_predicts_the_critical_quantile():
    """Demand 1 + 2X~ + U(0, 4): its 1/(1+h) quantile at X~ = 1 is 3 + 4/(1+h) -- 5 for h = 1, 4 for h = 3."""
    task = make_task("newsvendor", dim=1)
    erm = start(make_policy("erm", task), task, batch=2, horizon=401)
    g, n = gen(7), 400
    feats = 3 * torch.rand(n, generator=g)
    h = torch.tensor([1.0, 3.0])
    for b in range(2):
        erm.xs[b, :n] = torch.stack([h[b].expand(n), feats], dim=-1)
        erm.observations[b, :n, 0] = 1 + 2 * feats + 4 * torch.rand(n, generator=g)
    order = erm.act(n, torch.tensor([[1.0, 1.0], [3.0, 1.0]]))
    assert order.shape == (2, 1)
    torch.testing.assert_close(order[:, 0], torch.tensor([5.0, 4.0]), atol=0.25, rtol=0)


@pytest.mark.parametrize(("name", "high"), [("erm", 3.0), ("erm-lp", 1.0)])
def test_erm_cold_start_uses_the_fai_initial_guess(name, high):
    task = make_task("newsvendor")
    erm = start(make_policy(name, task), task, batch=64, horizon=5)
    x = torch.cat([torch.ones(64, 1), torch.ones(64, 4)], dim=-1)
    order = erm.act(0, x)
    torch.testing.assert_close(order[:, 0], erm.w0.sum(-1))
    assert ((erm.w0 >= 0) & (erm.w0 <= high)).all() and erm.w0.max() > 0.9 * high  # fai's / fai-paper's start


def test_penalised_quantile_regression_picks_the_moderate_fit_with_few_samples():
    """Two points of equal demand 5 at X~ = (1, 0) and (0, 1), three coefficients. Every interpolating
    fit has zero pinball loss; the L1 penalty makes the flat one, ``β = (5, 0, 0)``, the unique optimum."""
    feats, y = np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([5.0, 5.0])
    np.testing.assert_allclose(quantile_regression(feats, y, 0.5, l1=1.0), [5.0, 0.0, 0.0], atol=1e-9)
    beta = quantile_regression(feats, y, 0.5, l1=0.0)  # some interpolating vertex
    np.testing.assert_allclose(beta[0] + feats @ beta[1:], y, atol=1e-9)


@pytest.mark.slow
def test_penalised_erm_is_far_better_than_the_exact_lp_with_few_samples():
    """With 2-5 samples (up to d + 1 = 5 coefficients) the exact LP's interpolating vertex orders far
    from ``a*``; the penalised ERM does not (benchmarks/erm_cold_start.py: 4.0-4.7 against 2.3-3.4)."""
    task = make_task("newsvendor")
    envs = task.sample_envs(200, gen(0))
    subopt = {
        name: rollout(task, envs, make_policy(name, task), 6, gen(1), gen(2)).suboptimality[:, 2:6].mean()
        for name in ("erm", "erm-lp")
    }
    assert subopt["erm"] < 0.85 * subopt["erm-lp"]


class ConstantOrder(Policy):
    """A trivial baseline: always order the prior's mean demand."""

    def act(self, t, x):
        return torch.full((x.shape[0], 1), 12.0)


@pytest.mark.slow
def test_erm_regret_is_sublinear_and_beats_a_constant_order():
    task, batch, horizon = make_task("newsvendor"), 32, 60
    regrets = {}
    for name, policy in (("erm", make_policy("erm", task)), ("constant", ConstantOrder(task))):
        history = rollout(task, task.sample_envs(batch, gen(11)), policy, horizon, gen(12), gen(13))
        regrets[name] = history.regrets.mean(0)  # (T,)
    erm = regrets["erm"]
    first, second = erm[: horizon // 2].sum(), erm[horizon // 2 :].sum()
    assert second < 0.25 * first
    assert erm.sum() < 0.5 * regrets["constant"].sum()


# --------------------------------------------------------------------------------------------------
# ILSE / CILS
def play(policy, steps):
    """Feed ``(x, a, O)`` triples through ``act``/``observe`` (the actions ``act`` returns are ignored)."""
    for t, (x, a, o) in enumerate(steps):
        policy.act(t, x)
        policy.observe(t, a, o)


def test_ilse_ridge_estimate_and_price_match_numpy():
    task = make_task("pricing", dim=2)
    batch, t = 3, 4
    g = gen(21)
    xs = 2.5 * torch.rand(t, batch, 2, generator=g)
    prices = 2 * torch.rand(t, batch, 1, generator=g)
    alpha, beta = torch.tensor([1.0, 1.2]), torch.tensor([0.4, 0.7])
    demand = (xs * alpha).sum(-1, keepdim=True) - (xs * beta).sum(-1, keepdim=True) * prices
    obs = demand + 0.3 * torch.randn(t, batch, 1, generator=g)
    ilse = start(make_policy("ilse", task), task, batch, horizon=t + 1)
    play(ilse, zip(xs, prices, obs))

    x_now = torch.tensor([[1.0, 2.0], [0.5, 0.5], [2.0, 1.0]])
    price = ilse.act(t, x_now)
    alpha_hat, beta_hat = ilse.estimate()
    for b in range(batch):
        z = torch.cat([xs[:, b], prices[:, b] * xs[:, b]], dim=-1).double().numpy()  # (t, 2d)
        theta = np.linalg.solve(z.T @ z + 0.2**2 * np.eye(4), z.T @ obs[:, b, 0].double().numpy())
        np.testing.assert_allclose(alpha_hat[b].numpy(), theta[:2], rtol=1e-6)
        np.testing.assert_allclose(beta_hat[b].numpy(), -theta[2:], rtol=1e-6)
        slope = -theta[2:] @ x_now[b].double().numpy()
        if slope > 0:
            expected = theta[:2] @ x_now[b].double().numpy() / (2 * slope)
            assert price[b, 0].item() == pytest.approx(float(np.clip(expected, 0, 30)), rel=1e-5)
        else:  # no interior maximum: the opening price range
            assert 0.5 <= price[b, 0].item() <= 2.0


def test_ilse_falls_back_to_the_opening_price_when_demand_seems_to_rise_with_price():
    task = make_task("pricing", dim=1)
    ilse = start(make_policy("ilse", task), task, batch=1, horizon=4)
    one = torch.ones(1, 1)
    play(ilse, [(one, p * one, p * one) for p in (1.0, 2.0, 3.0)])  # O = a: estimated β̂ < 0
    assert ilse.estimate()[1].item() < 0
    assert 0.5 <= ilse.act(3, one).item() <= 2.0


def test_cold_start_is_a_uniform_price():
    task = make_task("pricing")
    for name in ("ilse", "cils"):
        price = start(make_policy(name, task), task, batch=256, horizon=2).act(0, torch.ones(256, 6))
        assert price.shape == (256, 1)
        assert 0.5 <= price.min() and price.max() <= 2.0
        assert 1.1 < price.mean() < 1.4  # U[0.5, 2] has mean 1.25


def test_cils_perturbs_only_prices_close_to_the_average():
    """Past prices 1, 2, 3 -> ā = 2; decide's t = 3 is the paper's t = 4, radius 4^{-1/4}/10 ≈ 0.0707."""
    task = make_task("pricing", dim=1)
    cils = start(make_policy("cils", task), task, batch=4, horizon=4)
    cils.actions[:, :3, 0] = torch.tensor([1.0, 2.0, 3.0])
    greedy = torch.tensor([[2.05], [1.97], [2.5], [2.0]])
    cils.greedy_price = lambda x: greedy  # isolate the CILS rule from the ridge fit
    radius = 4**-0.25 / 10
    price = cils.act(3, torch.ones(4, 1))
    torch.testing.assert_close(price[:, 0], torch.tensor([2 + radius, 2 - radius, 2.5, 2 + radius]))


def test_pricing_benchmarks_have_positive_finite_regret_and_the_oracle_none():
    task = make_task("pricing")
    totals = {}
    for name in ("ilse", "cils", "oracle"):
        history = rollout(task, task.sample_envs(32, gen(31)), make_policy(name, task), 60, gen(32), gen(33))
        assert torch.isfinite(history.actions).all()
        totals[name] = history.cumulative_regret()[:, -1]  # (B,)
    assert (totals["oracle"].abs() < 1e-4).all()
    for name in ("ilse", "cils"):
        assert torch.isfinite(totals[name]).all() and (totals[name] > 0).all()


def test_benchmarks_refuse_the_wrong_task():
    with pytest.raises(OMGPTError):
        make_policy("erm", make_task("pricing"))
    with pytest.raises(OMGPTError):
        make_policy("ilse", make_task("newsvendor"))
