"""Thompson sampling for pricing (``ts-pricing``) and the Adaptive Allocation algorithm (``ada``, the
paper's algorithm 4) on hand-computed cases, in rollouts and through the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from omgpt import lp
from omgpt.commands.cli import cli_main
from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.tasks import make_task


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------------------------------
# TS for pricing
def ts_on_fixed_history(batch: int, seed: int = 0):
    """``batch`` copies of one 4-step history at ``d = 2`` (true α = (1, 1.2), β = (0.4, 0.7)), fed
    through ``act``/``observe``; returns the policy and the history as numpy arrays."""
    task = make_task("pricing", dim=2)
    g = gen(41)
    xs = 2.5 * torch.rand(4, 2, generator=g)
    prices = 0.5 + 1.5 * torch.rand(4, 1, generator=g)
    obs = (xs @ torch.tensor([1.0, 1.2]) - (xs @ torch.tensor([0.4, 0.7])) * prices[:, 0])[:, None]
    obs = obs + 0.45 * torch.randn(4, 1, generator=g)
    ts = make_policy("ts-pricing", task)
    ts.reset(task.sample_envs(batch, gen(seed)), 6, gen(seed + 1))
    for t in range(4):
        ts.act(t, xs[t].expand(batch, 2))
        ts.observe(t, prices[t].expand(batch, 1), obs[t].expand(batch, 1))
    return ts, xs.double().numpy(), prices.double().numpy(), obs.double().numpy()


def ts_formula(xs, prices, obs, x_now, noise_std=0.2):
    """The appendix's sampling law at ``x_now`` in numpy: the mean ``(α̂ᵀX, β̂ᵀX)`` and the covariance
    of ``(α~, β~)``: ``D Mᵀ Σ^{-1} M D``, ``D = diag(1, -1)`` (the ridge estimates ``(α, -β)``)."""
    z = np.hstack([xs, prices * xs])  # (t, 2d)
    gram = z.T @ z + noise_std**2 * np.eye(z.shape[1])
    theta = np.linalg.solve(gram, z.T @ obs[:, 0])  # (α̂, -β̂)
    d = xs.shape[1]
    m = np.zeros((2 * d, 2))
    m[:d, 0], m[d:, 1] = x_now, x_now
    flip = np.diag([1.0, -1.0])
    return flip @ (m.T @ theta), flip @ (m.T @ np.linalg.solve(gram, m)) @ flip, m.T @ np.linalg.solve(gram, m)


def test_ts_samples_follow_the_appendix_law():
    n = 40_000
    ts, xs, prices, obs = ts_on_fixed_history(n)
    x_now = np.array([1.3, 0.8])
    alpha, beta = ts.sample_parameters(torch.tensor(x_now, dtype=torch.float32).expand(n, 2))
    draws = torch.stack([alpha, beta], dim=-1).numpy()  # (n, 2)
    mean, cov, cov_regression = ts_formula(xs, prices, obs, x_now)

    sd = np.sqrt(np.diag(cov))
    np.testing.assert_array_less(np.abs(draws.mean(0) - mean), 5 * sd / np.sqrt(n))  # 5 standard errors
    emp = np.cov(draws.T)
    # sd of a sample covariance entry: sqrt((c_ii c_jj + c_ij²)/n)
    se = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / n)
    np.testing.assert_array_less(np.abs(emp - cov), 5 * se)
    # The off-diagonal term is far from 0, so its sign is tested: (α~, β~) correlate the opposite way
    # to (α~, -β~), whose covariance is the paper's Mᵀ Σ^{-1} M.
    assert abs(cov[0, 1]) > 20 * se[0, 1] and np.sign(cov[0, 1]) == -np.sign(cov_regression[0, 1])
    assert cov[0, 1] > 0  # a higher intercept goes with a steeper slope


def test_ts_price_is_the_sampled_optimum_or_the_opening_price():
    n = 4000
    ts, *_ = ts_on_fixed_history(n, seed=3)
    x_now = torch.tensor([1.3, 0.8]).expand(n, 2)
    state = ts.generator.get_state()
    price = ts.act(4, x_now)[:, 0].double()
    ts.generator.set_state(state)  # replay the same draws
    alpha, beta = ts.sample_parameters(x_now)
    ok = beta > 0
    assert 0.05 < ok.double().mean() < 0.95, "the history should exercise both branches"
    expected = (alpha / (2 * beta)).clamp(0, 30)
    torch.testing.assert_close(price[ok], expected[ok], rtol=1e-5, atol=1e-5)
    assert ((price[~ok] >= 0.5) & (price[~ok] <= 2.0)).all()
    assert (price >= 0).all() and (price <= 30).all()


def test_ts_cold_start_is_the_ilse_opening_price():
    task = make_task("pricing")
    prices = {}
    for name in ("ilse", "ts-pricing"):
        policy = make_policy(name, task)
        policy.reset(task.sample_envs(256, gen(0)), 2, gen(1))
        prices[name] = policy.act(0, torch.ones(256, 6))
    torch.testing.assert_close(prices["ts-pricing"], prices["ilse"])
    assert 0.5 <= prices["ts-pricing"].min() and prices["ts-pricing"].max() <= 2.0


def test_ts_regret_is_finite_positive_and_beats_random_and_is_reproducible():
    task = make_task("pricing")
    totals, played = {}, []
    for name in ("ts-pricing", "ts-pricing", "random"):
        history = rollout(task, task.sample_envs(32, gen(31)), make_policy(name, task), 60, gen(32), gen(33))
        assert torch.isfinite(history.actions).all()
        totals[name] = history.cumulative_regret()[:, -1]
        if name == "ts-pricing":
            played.append(history.actions)
    torch.testing.assert_close(played[0], played[1], rtol=0, atol=0)
    ts = totals["ts-pricing"]
    assert torch.isfinite(ts).all() and (ts > 0).all()
    assert ts.mean() < 0.1 * totals["random"].mean()


# --------------------------------------------------------------------------------------------------
# Ada
def type_context(envs, k: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Contexts ``(r~^k, A~^k, b)`` for arriving types ``k`` ``(B,)`` and per-period budgets ``b`` ``(B, J)``."""
    rows = torch.arange(k.shape[0])
    return torch.cat([envs["r"][rows, k, None], envs["A"][rows, k], b], dim=-1).float()


def test_ada_accepts_the_first_request():
    task = make_task("revenue")
    envs = task.start(task.sample_envs(16, gen(0)), gen(1))
    ada = make_policy("ada", task)
    ada.reset(envs, task.horizon, gen(2))
    x = type_context(envs, torch.randint(3, (16,), generator=gen(3)), torch.ones(16, 3))
    assert (ada.act(0, x) == 1).all()


def reference_ada_lp(r, a, freq, b):
    """Ada's LP ``max Σ_k f_k r_k y_k  s.t.  Σ_k f_k A_k y_k ≤ b,  0 ≤ y ≤ 1`` by the cvxpy reference."""
    return lp.box_lp(freq * r, (freq[:, None] * a).T, b, np.ones_like(r))[0]


def test_ada_resolves_the_lp_with_empirical_frequencies():
    """Arrivals 0, 0, 1, 2, 0, 1, 0 (counts 4, 2, 1 after 7 periods), then one of each type with a
    tight budget: Ada plays the arriving type's entry of the LP solved with frequencies (4, 2, 1)/7."""
    task = make_task("revenue", horizon=10)
    batch = 6
    envs = task.sample_envs(batch, gen(5))
    # Only the type table goes in: Ada must not need the arrival probabilities or the budget state.
    table = {"r": envs["r"], "A": envs["A"]}
    ada = make_policy("ada", task)
    ada.reset(table, task.horizon, gen(6))
    for t, k in enumerate((0, 0, 1, 2, 0, 1, 0)):
        x = type_context(envs, torch.full((batch,), k), torch.ones(batch, 3))
        a = ada.act(t, x)
        ada.observe(t, a, torch.cat([x[:, :4], torch.ones(batch, 1)], dim=-1))
    torch.testing.assert_close(ada.counts, torch.tensor([[4.0, 2.0, 1.0]]).expand(batch, 3).double())

    arriving = torch.tensor([0, 1, 2, 0, 1, 2])
    b = 0.3 + 0.8 * torch.rand(batch, 3, generator=gen(7))  # tight: the LP is not all-accept
    counts = ada.counts.clone()
    played = ada.act(7, type_context(envs, arriving, b))[:, 0]
    freq = np.array([4.0, 2.0, 1.0]) / 7
    fractional = 0
    for i in range(batch):
        r, a = envs["r"][i].double().numpy(), envs["A"][i].double().numpy()
        y = reference_ada_lp(r, a, freq, b[i].double().numpy())
        assert played[i].item() == pytest.approx(y[arriving[i]], abs=1e-5)
        fractional += int(((y > 1e-6) & (y < 1 - 1e-6)).any())
    assert fractional >= batch // 2, "the budgets should bind"
    assert torch.equal(ada.counts, counts), "act does not count the arrival (observe does)"


def test_ada_accepts_a_type_it_has_not_seen():
    task = make_task("revenue", horizon=10)
    envs = task.sample_envs(4, gen(8))
    ada = make_policy("ada", task)
    ada.reset(envs, task.horizon, gen(9))
    for t in range(3):  # only type 0 so far
        x = type_context(envs, torch.zeros(4, dtype=torch.long), torch.ones(4, 3))
        ada.observe(t, ada.act(t, x), torch.cat([x[:, :4], torch.ones(4, 1)], dim=-1))
    tight = torch.full((4, 3), 0.2)
    assert (ada.act(3, type_context(envs, torch.full((4,), 2), tight)) == 1).all()
    assert (ada.act(3, type_context(envs, torch.zeros(4, dtype=torch.long), tight)) < 1).all()


def test_ada_in_rollouts_beats_random_and_respects_the_hindsight_bound():
    task = make_task("revenue", horizon=30)
    totals = {}
    for name in ("ada", "random"):
        policy = make_policy(name, task)
        history = rollout(task, task.sample_envs(64, gen(51)), policy, 30, gen(52), gen(53))
        totals[name] = history.cumulative_regret()[:, -1]
        collected = (history.observations[..., 0] * history.observations[..., -1]).double().sum(1)  # Σ r~ y
        assert (collected <= history.envs["bound"] + 1e-4).all()
        if name == "ada":
            # Arrivals are counted from the contexts, and they match the task's own count.
            torch.testing.assert_close(policy.counts, history.envs["counts"])
            assert (history.actions[:, 0] == 1).all()
    assert totals["ada"].mean() < 0.5 * totals["random"].mean()


# --------------------------------------------------------------------------------------------------
# CLI
@pytest.mark.parametrize(
    ("task", "policies", "options"),
    [
        ("pricing", "ilse,cils,ts-pricing,oracle", []),
        ("revenue", "ada,random,oracle", ["--option", "horizon=30"]),
    ],
)
def test_cli_evaluates_the_benchmarks(task, policies, options, tmp_path):
    out = tmp_path / task
    args = ["evaluate", "--task", task, *options, "--policies", policies, "--runs", "8", "--horizon", "30"]
    assert cli_main([*args, "--out", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["policies"]) == set(policies.split(","))
    for p in summary["policies"].values():
        assert np.isfinite(p["final_regret"]["mean"])
