"""The bandit benchmarks (UCB, Gaussian TS, LinUCB, LinTS): formulas on hand-built histories, the
LinUCB maximisation against brute force, and their regret in rollouts."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from omgpt.commands.cli import cli_main
from omgpt.errors import OMGPTError
from omgpt.policies import make_policy, policies_for
from omgpt.policies.bandit import maximise_on_ball, ucb_objective
from omgpt.rollout import rollout
from omgpt.tasks import make_task


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def start(policy, task, batch: int, horizon: int, seed: int = 0):
    """``reset`` a policy on ``batch`` environments (learning policies only use the batch size)."""
    policy.reset(task.sample_envs(batch, gen(seed)), horizon, gen(seed + 1))
    return policy


def pull(policy, task, arms: list[int], rewards: list[float]):
    """Feed the same pulls to every environment of the batch."""
    for t, (arm, reward) in enumerate(zip(arms, rewards)):
        a = task.one_hot(torch.tensor([arm])).expand(policy.batch, -1)
        policy.observe(t, a, torch.full((policy.batch, 1), reward))


def clone(generator: torch.Generator) -> torch.Generator:
    copy = torch.Generator()
    copy.set_state(generator.get_state())
    return copy


def test_registered_for_their_tasks_only():
    assert {"ucb", "ts"} <= set(policies_for(make_task("mab")))
    assert {"linucb", "lints"} <= set(policies_for(make_task("linear-bandit")))
    with pytest.raises(OMGPTError):
        make_policy("ucb", make_task("linear-bandit"))
    with pytest.raises(OMGPTError):
        make_policy("linucb", make_task("mab"))


# --------------------------------------------------------------------------------------------------
# UCB
def test_ucb_index_on_a_hand_computed_history():
    """T = 50, sqrt(2 log 50) = 2.7971. Arm 0: rewards 1, 0.5 (mean 0.75, n = 2); arm 1: 4 pulls with
    mean 0.875; arm 2: never pulled (r̂ = 0, n = 0 -> the n = 1 bonus). Indices 2.7279, 2.2736, 2.7971.
    (Rewards exact in float32, so the index is exact to float64 rounding.)"""
    task = make_task("mab", n_arms=3)
    ucb = start(make_policy("ucb", task), task, batch=2, horizon=50)
    pull(ucb, task, [0, 1, 0, 1, 1, 1], [1.0, 0.5, 0.5, 1.25, 0.75, 1.0])
    root = math.sqrt(2 * math.log(50))
    expected = torch.tensor([0.75 + root / math.sqrt(2), 0.875 + root / 2, root], dtype=torch.float64)
    torch.testing.assert_close(ucb.index(), expected.expand(2, 3), rtol=0, atol=1e-12)
    assert torch.equal(ucb.act(6, torch.zeros(2, 0)), torch.tensor([[0.0, 0.0, 1.0]] * 2))

    pull(ucb, task, [2], [-0.25])  # arm 2's index drops to root - 0.25 = 2.5471: arm 0 now leads
    assert ucb.index()[0, 2].item() == pytest.approx(root - 0.25, abs=1e-12)
    assert ucb.act(7, torch.zeros(2, 0))[0].argmax().item() == 0


def test_ucb_cold_start_and_ties_go_to_the_lowest_arm():
    task = make_task("mab", n_arms=4)
    ucb = start(make_policy("ucb", task), task, batch=3, horizon=100)
    first = ucb.act(0, torch.zeros(3, 0))
    assert torch.equal(first, task.one_hot(torch.zeros(3, dtype=torch.long)))
    pull(ucb, task, [0], [-0.1])  # arm 0 drops below the three unpulled arms, which tie
    assert ucb.act(1, torch.zeros(3, 0))[0].argmax().item() == 1


# --------------------------------------------------------------------------------------------------
# Gaussian TS
def test_ts_samples_have_the_stated_mean_and_variance():
    """r~_a ~ N(r̂_a, sqrt(2 log T)/max(1, n_a)) with the second argument a *variance*: for n = 0, 1, 4, 25
    the sd is (2 log T)^{1/4}/sqrt(max(1, n)). (The sd reading would give variances 9.2, 9.2, 0.58, 0.015.)"""
    task, horizon, draws = make_task("mab", n_arms=4), 100, 40_000
    ts = start(make_policy("ts", task), task, batch=draws, horizon=horizon)
    pull(ts, task, [1] + [2] * 4 + [3] * 25, [0.3] + [-0.1, -0.3, -0.2, -0.2] + [1.0] * 25)
    counts = torch.tensor([0.0, 1.0, 4.0, 25.0], dtype=torch.float64)
    means = torch.tensor([0.0, 0.3, -0.2, 1.0], dtype=torch.float64)
    variances = math.sqrt(2 * math.log(horizon)) / counts.clamp(min=1)
    torch.testing.assert_close(ts.means()[0], means)
    torch.testing.assert_close(ts.variances()[0], variances)

    samples = ts.sample()  # (draws, 4)
    sd = variances.sqrt()
    assert ((samples.mean(0) - means).abs() < 4 * sd / math.sqrt(draws)).all()
    torch.testing.assert_close(samples.var(0), variances, rtol=0.03, atol=0)


def test_ts_plays_the_argmax_of_its_draw():
    task = make_task("mab", n_arms=5)
    ts = start(make_policy("ts", task), task, batch=64, horizon=30)
    pull(ts, task, [0, 1, 2], [0.5, -0.5, 1.5])
    replay = clone(ts.generator)
    actions = ts.act(3, torch.zeros(64, 0))
    ts.generator = replay
    assert torch.equal(actions, task.one_hot(ts.sample().argmax(-1)))
    assert torch.equal(actions.sum(-1), torch.ones(64))


def test_ts_cold_start_is_a_uniform_arm():
    task = make_task("mab", n_arms=4)
    ts = start(make_policy("ts", task), task, batch=4000, horizon=100)
    share = ts.act(0, torch.zeros(4000, 0)).mean(0)
    torch.testing.assert_close(share, torch.full((4,), 0.25), atol=0.03, rtol=0)


# --------------------------------------------------------------------------------------------------
# Bandit regret
SEPARATED = torch.tensor([0.0, -0.5, 1.5, 0.5, -1.0])  # best arm 2, gaps >= 1; random: 1.4 per step


def bandit_regret(name: str, batch: int = 32, horizon: int = 400):
    task = make_task("mab", n_arms=5)
    envs = {"r": SEPARATED.expand(batch, -1).clone()}
    return rollout(task, envs, make_policy(name, task), horizon, gen(31), gen(32)).regrets.mean(0)  # (T,)


@pytest.mark.parametrize(("name", "share"), [("ucb", 0.12), ("ts", 0.2)])  # measured: 0.05, 0.10
def test_bandit_regret_is_sublinear_on_a_separated_instance(name, share):
    regret, random = bandit_regret(name), bandit_regret("random")
    half = regret.shape[0] // 2
    assert random.sum() > 500  # 400 steps at 1.4
    assert regret.sum() < share * random.sum()
    assert regret[half:].sum() < 0.5 * regret[:half].sum()


# --------------------------------------------------------------------------------------------------
# LinUCB / LinTS
def feed_linear(policy, task, seed: int, steps: int, w=(0.6, -0.8)):
    """Random actions in the ball and noisy rewards of ``w``; returns the ``(steps, B, d)`` actions and
    ``(steps, B, 1)`` observations."""
    g = gen(seed)
    acts = torch.stack([task.sample_action(policy.batch, g) for _ in range(steps)])
    obs = (acts * torch.tensor(w)).sum(-1, keepdim=True) + 0.45 * torch.randn(steps, policy.batch, 1, generator=g)
    for t in range(steps):
        policy.observe(t, acts[t], obs[t])
    return acts, obs


@pytest.mark.parametrize("name", ["linucb", "lints"])
def test_ridge_estimate_matches_numpy(name):
    task = make_task("linear-bandit")
    policy = start(make_policy(name, task), task, batch=3, horizon=100)
    acts, obs = feed_linear(policy, task, seed=41, steps=7)
    for b in range(3):
        x, y = acts[:, b].double().numpy(), obs[:, b, 0].double().numpy()
        ridge = np.linalg.solve(x.T @ x + 0.2**2 * np.eye(2), x.T @ y)  # σ² = 0.04: noise std 0.2
        np.testing.assert_allclose(policy.estimate()[b].numpy(), ridge, rtol=1e-10)
        np.testing.assert_allclose(policy.gram[b].numpy(), x.T @ x + 0.2**2 * np.eye(2), rtol=1e-12)


def test_linucb_action_beats_a_fine_grid_over_the_ball():
    task, horizon = make_task("linear-bandit"), 100
    linucb = start(make_policy("linucb", task), task, batch=6, horizon=horizon)
    feed_linear(linucb, task, seed=43, steps=5)
    action = linucb.act(5, torch.zeros(6, 0)).double()
    torch.testing.assert_close(torch.linalg.vector_norm(action, dim=-1), torch.ones(6, dtype=torch.float64))

    w_hat, m = linucb.estimate(), torch.linalg.inv(linucb.gram)
    beta = math.sqrt(2 * math.log(horizon))
    theta = torch.linspace(0, 2 * math.pi, 400_001, dtype=torch.float64)
    circle = torch.stack([theta.cos(), theta.sin()], -1)  # (n, 2)
    radii = torch.tensor([0.25, 0.5, 0.75, 0.9], dtype=torch.float64)  # interior points never win
    ball = torch.cat([circle, (radii[:, None, None] * circle[::100]).reshape(-1, 2)])
    brute = ucb_objective(ball.expand(6, -1, -1), w_hat, m, beta).max(-1).values
    ours = ucb_objective(action[:, None], w_hat, m, beta)[:, 0]
    assert (ours >= brute - 1e-6).all()  # the float32 action itself; the float64 optimum is tighter:
    exact = ucb_objective(maximise_on_ball(w_hat, m, beta)[:, None], w_hat, m, beta)[:, 0]
    assert (exact >= brute - 1e-12).all() and (exact - brute < 1e-9).all()


def ascent_brute_force(w_hat, m, beta, samples: int = 100_000, keep: int = 20, steps: int = 3000):
    """Dense random points on the sphere, then ``a <- ∇f/‖∇f‖`` (monotone for convex f) from the best few."""
    b, d = w_hat.shape
    points = torch.randn(samples, d, generator=gen(0), dtype=torch.float64)
    points = points / torch.linalg.vector_norm(points, dim=-1, keepdim=True)
    values = ucb_objective(points.expand(b, -1, -1), w_hat, m, beta)
    a = points[values.topk(keep, dim=-1).indices]  # (B, keep, d)
    for _ in range(steps):
        ma = torch.matmul(a, m)
        grad = w_hat[:, None] + beta * ma / (a * ma).sum(-1, keepdim=True).sqrt()
        a = grad / torch.linalg.vector_norm(grad, dim=-1, keepdim=True)
    return torch.maximum(values.max(-1).values, ucb_objective(a, w_hat, m, beta).max(-1).values)


@pytest.mark.parametrize("d", [2, 3, 5])
def test_maximise_on_ball_random_instances(d):
    """Ridge matrices from few, anisotropic actions (so M = Σ^{-1} is ill-conditioned) and estimates
    from tiny to large."""
    g, b = gen(50 + d), 16
    acts = (
        torch.randn(b, 6, d, generator=g, dtype=torch.float64)
        * torch.rand(b, 1, d, generator=g, dtype=torch.float64) ** 2
    )
    m = torch.linalg.inv(0.2 * torch.eye(d, dtype=torch.float64) + acts.mT @ acts)
    w_hat = (
        torch.randn(b, d, generator=g, dtype=torch.float64) * torch.logspace(-4, 0.5, b, dtype=torch.float64)[:, None]
    )
    beta = math.sqrt(2 * math.log(100))
    a = maximise_on_ball(w_hat, m, beta)
    torch.testing.assert_close(torch.linalg.vector_norm(a, dim=-1), torch.ones(b, dtype=torch.float64))
    ours, brute = ucb_objective(a[:, None], w_hat, m, beta)[:, 0], ascent_brute_force(w_hat, m, beta)
    assert (ours >= brute - 1e-10).all()


def test_maximise_on_ball_hard_case():
    """ŵ orthogonal to M's top eigenvector and small: no secular root above α_max²; the maximisers are
    the two symmetric points with a top-eigenvector component (not an axis, not ŵ's direction)."""
    m = torch.diag(torch.tensor([0.5, 1.0, 4.0], dtype=torch.float64))[None]
    w_hat = torch.tensor([[0.3, 0.0, 0.0]], dtype=torch.float64)
    beta = 1.0
    a = maximise_on_ball(w_hat, m, beta)
    # α² = (0.5, 1, 4): v_1 = α_1 c_1/(4 - 0.5) = 0.0606, v_3 = ±sqrt(1 - v_1²); a ∝ (c_1 + α_1 v_1, 0, 2 v_3)
    v1 = math.sqrt(0.5) * 0.3 / 3.5
    z = torch.tensor([0.3 + math.sqrt(0.5) * v1, 0.0, 2 * math.sqrt(1 - v1**2)], dtype=torch.float64)
    torch.testing.assert_close(a[0].abs(), z / z.norm())
    assert ucb_objective(a[:, None], w_hat, m, beta)[0, 0] >= ascent_brute_force(w_hat, m, beta)[0] - 1e-12


@pytest.mark.parametrize("d", [1, 2, 3])
def test_linucb_cold_start_is_e1(d):
    task = make_task("linear-bandit", dim=d)
    first = start(make_policy("linucb", task), task, batch=3, horizon=100).act(0, torch.zeros(3, 0))
    expected = torch.zeros(3, d)
    expected[:, 0] = 1.0
    assert torch.equal(first, expected)


def test_lints_plays_the_direction_of_its_draw_with_the_stated_covariance():
    task, horizon, draws = make_task("linear-bandit"), 100, 40_000
    lints = start(make_policy("lints", task), task, batch=draws, horizon=horizon)
    g = gen(44)
    acts = task.sample_action(6, g)
    obs = (acts * torch.tensor([0.6, -0.8])).sum(-1, keepdim=True) + 0.45 * torch.randn(6, 1, generator=g)
    for t in range(6):  # the same history in every environment
        lints.observe(t, acts[t].expand(draws, -1), obs[t].expand(draws, -1))

    replay = clone(lints.generator)
    action = lints.act(6, torch.zeros(draws, 0)).double()
    lints.generator = replay
    w = lints.sample()
    torch.testing.assert_close(torch.linalg.vector_norm(action, dim=-1), torch.ones(draws, dtype=torch.float64))
    torch.testing.assert_close(action, w / torch.linalg.vector_norm(w, dim=-1, keepdim=True), rtol=0, atol=1e-6)

    # w~ ~ N(ŵ, sqrt(2 log T) Σ^{-1}): the covariance is the written one (not its square root)
    w_hat, cov = lints.estimate()[0], math.sqrt(2 * math.log(horizon)) * torch.linalg.inv(lints.gram[0])
    sd = cov.diagonal().sqrt()
    assert ((w.mean(0) - w_hat).abs() < 4 * sd / math.sqrt(draws)).all()
    torch.testing.assert_close(torch.cov(w.T), cov, rtol=0, atol=0.04 * float(cov.diagonal().max()))


def test_lints_cold_start_is_a_uniform_direction():
    task = make_task("linear-bandit")
    first = start(make_policy("lints", task), task, batch=4000, horizon=100).act(0, torch.zeros(4000, 0))
    torch.testing.assert_close(torch.linalg.vector_norm(first, dim=-1), torch.ones(4000))
    torch.testing.assert_close(first.mean(0), torch.zeros(2), atol=0.05, rtol=0)


@pytest.mark.parametrize("name", ["linucb", "lints"])
def test_linear_bandit_regret_beats_random(name):
    task, batch, horizon = make_task("linear-bandit"), 32, 100
    envs = task.sample_envs(batch, gen(61))
    regrets = {
        p: rollout(task, envs, make_policy(p, task), horizon, gen(62), gen(63)).regrets.mean(0)
        for p in (name, "random")
    }
    ours = regrets[name]
    assert regrets["random"].sum() > 80  # 1 per step: E[wᵀa] = 0 for a uniform in the ball
    assert ours.sum() < 0.3 * regrets["random"].sum()
    assert ours[horizon // 2 :].sum() < 0.75 * ours[: horizon // 2].sum()


# --------------------------------------------------------------------------------------------------
# CLI
@pytest.mark.parametrize(("task", "policies"), [("mab", "ucb,ts,oracle"), ("linear-bandit", "linucb,lints,oracle")])
def test_cli_evaluate_runs_the_bandit_benchmarks(tmp_path, task, policies):
    out = tmp_path / "m"
    args = [
        "evaluate",
        "--task",
        task,
        "--policies",
        policies,
        "--runs",
        "8",
        "--horizon",
        "30",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert cli_main(args) == 0
    assert any(out.iterdir())
