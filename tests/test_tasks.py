"""Tasks (newsvendor, pricing), the task registry, and the rollout loop against hand-computed cases."""

from __future__ import annotations

import pytest
import torch

from omgpt.errors import OMGPTError
from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.tasks import make_task


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def repeat(envs: dict, n: int) -> dict:
    """``n`` copies of a one-environment batch."""
    return {k: v.expand(n, *v.shape[1:]).clone() for k, v in envs.items()}


# --------------------------------------------------------------------------------------------------
# Newsvendor
def nv_envs() -> tuple[dict, torch.Tensor, torch.Tensor]:
    """Four hand-built environments, their contexts (h, X~) and the quantile wᵀX~ + ε̄/(1+h), clipped."""
    envs = {
        "w": torch.tensor([[1.0, 0.5, 0.0, 2.0], [3.0, 3.0, 3.0, 3.0], [3.0, 3.0, 3.0, 3.0], [-5.0, 0.0, 0.0, 0.0]]),
        "eps_bar": torch.tensor([4.0, 9.0, 2.0, 3.0]),
        "h": torch.tensor([1.0, 0.5, 2.0, 1.0]),
    }
    x = torch.tensor(
        [
            [1.0, 1.0, 2.0, 0.0, 0.5],  # 1 + 1 + 0 + 1 = 3, + 4/2 = 5
            [0.5, 1.0, 1.0, 1.0, 1.0],  # 12 + 9/1.5 = 18
            [2.0, 3.0, 3.0, 3.0, 3.0],  # 36 + 2/3 -> clipped to 30
            [1.0, 3.0, 0.0, 0.0, 0.0],  # -15 + 1.5 -> clipped to 0
        ]
    )
    return envs, x, torch.tensor([[5.0], [18.0], [30.0], [0.0]])


def test_newsvendor_optimal_action_is_the_clipped_critical_quantile():
    task = make_task("newsvendor")
    envs, x, expected = nv_envs()
    a_star = task.optimal_action(envs, x, 0)
    assert a_star.shape == (4, 1)
    torch.testing.assert_close(a_star, expected)
    # The censored variant has the same optimum (censoring changes what is seen, not the cost).
    torch.testing.assert_close(make_task("newsvendor-censored").optimal_action(envs, x, 0), expected)


@pytest.mark.parametrize("name", ["newsvendor", "pricing"])
def test_optimal_action_maximises_expected_reward_on_a_grid(name):
    task = make_task(name)
    g = gen(1)
    envs = task.sample_envs(12, g)
    x = task.sample_context(envs, 0, g)
    if name == "newsvendor":  # add the hand-built ones, two of which have a clipped optimum
        hand, hand_x, _ = nv_envs()
        envs = {k: torch.cat([v, hand[k]]) for k, v in envs.items()}
        x = torch.cat([x, hand_x])
    b = x.shape[0]
    grid = torch.linspace(0.0, 30.0, 3001)  # spacing 0.01
    rewards = torch.stack([task.expected_reward(envs, x, a.expand(b, 1), 0) for a in grid], dim=1)  # (B, G)
    best_on_grid = grid[rewards.argmax(dim=1)]
    a_star = task.optimal_action(envs, x, 0)[:, 0]
    assert (best_on_grid - a_star).abs().max() <= 0.01 + 1e-5
    # ... and no grid point beats a* (up to float rounding).
    assert (rewards.max(dim=1).values <= task.expected_reward(envs, x, a_star[:, None], 0) + 1e-4).all()


@pytest.mark.parametrize("lost_sale_cost", [1.0, 1.7])
@pytest.mark.parametrize("order", [4.0, 12.0, 20.0])  # below m = 10, inside [m, m+e] = [10, 16], above
def test_newsvendor_expected_reward_matches_monte_carlo(order, lost_sale_cost):
    task = make_task("newsvendor", lost_sale_cost=lost_sale_cost)
    env = {"w": torch.tensor([[1.0, 2.0, 0.5, 1.0]]), "eps_bar": torch.tensor([6.0]), "h": torch.tensor([0.8])}
    x = torch.tensor([[0.8, 3.0, 3.0, 2.0, 0.0]])  # m = wᵀX~ = 3 + 6 + 1 + 0 = 10, e = 6: D ~ U[10, 16]
    assert task.mean_demand_floor(env, x).item() == pytest.approx(10.0)

    n = 200_000
    envs, xs, a = repeat(env, n), x.expand(n, -1), torch.full((n, 1), order)
    demand = task.observe(envs, xs, a, 0, gen(2))[:, 0].double()  # uncensored: O = D
    assert demand.min() >= 10.0 and demand.max() <= 16.0
    cost = 0.8 * (order - demand).clamp(min=0) + lost_sale_cost * (demand - order).clamp(min=0)
    closed_form = task.expected_reward(env, x, torch.tensor([[order]]), 0).item()
    assert closed_form == pytest.approx(-cost.mean().item(), rel=0.01)


def test_censored_observation_is_sales_of_the_same_demand():
    envs, x, _ = nv_envs()
    envs, x = repeat({k: v[:1] for k, v in envs.items()}, 64), x[:1].expand(64, -1)  # demand in [3, 7]
    a = torch.linspace(2.0, 8.0, 64)[:, None]
    demand = make_task("newsvendor").observe(envs, x, a, 0, gen(3))
    sales = make_task("newsvendor-censored").observe(envs, x, a, 0, gen(3))
    assert ((demand >= 3.0) & (demand <= 7.0)).all()
    torch.testing.assert_close(sales, torch.minimum(demand, a), rtol=0, atol=0)
    binds = sales < demand
    assert binds.any() and (~binds).any()  # both regimes are exercised
    assert (sales[binds] == a[binds]).all()


# --------------------------------------------------------------------------------------------------
# Pricing
def pricing_case():
    task = make_task("pricing", dim=2)
    envs = {"alpha": torch.tensor([[1.0, 0.5], [1.5, 1.5]]), "beta": torch.tensor([[0.5, 0.25], [0.05, 0.05]])}
    x = torch.tensor([[2.0, 2.0], [2.5, 2.5]])  # αᵀX = 3, 7.5;  βᵀX = 1.5, 0.25
    return task, envs, x


def test_pricing_optimal_price_revenue_and_regret_by_hand():
    task, envs, x = pricing_case()
    torch.testing.assert_close(task.optimal_action(envs, x, 0), torch.tensor([[1.0], [15.0]]))  # 3/3, 7.5/0.5
    a = torch.tensor([[2.0], [10.0]])
    # a (αᵀX - βᵀX a): 2·(3 - 3) = 0;  10·(7.5 - 2.5) = 50.
    torch.testing.assert_close(task.expected_reward(envs, x, a, 0), torch.tensor([0.0, 50.0]))
    # βᵀX (a - a*)²: 1.5·1 = 1.5;  0.25·25 = 6.25 (and r(a*) = 1.5, 56.25).
    torch.testing.assert_close(task.regret(envs, x, a, 0), torch.tensor([1.5, 6.25]))
    torch.testing.assert_close(task.suboptimality(envs, x, a, 0), torch.tensor([1.0, 5.0]))


@pytest.mark.parametrize("noise_std", [None, 0.5])
def test_pricing_observation_noise_has_the_stated_standard_deviation(noise_std):
    task = make_task("pricing", dim=2) if noise_std is None else make_task("pricing", dim=2, noise_std=noise_std)
    noise_std = noise_std or 0.2  # the default is the authors' standard deviation 0.2 (docs/paper-gaps.md §6)
    _, envs, x = pricing_case()
    n = 100_000
    envs, xs, a = repeat({k: v[:1] for k, v in envs.items()}, n), x[:1].expand(n, -1), torch.full((n, 1), 1.2)
    demand = task.observe(envs, xs, a, 0, gen(4))[:, 0].double()
    noise = demand - (3.0 - 1.5 * 1.2)
    assert abs(noise.mean().item()) < 0.01
    assert noise.std().item() == pytest.approx(noise_std, rel=0.01)


# --------------------------------------------------------------------------------------------------
# Registry
def test_unknown_task_names_the_available_ones():
    with pytest.raises(OMGPTError, match="nope") as err:
        make_task("nope")
    for name in ("newsvendor", "newsvendor-censored", "pricing"):
        assert name in str(err.value)


def test_unknown_option_names_the_valid_ones():
    with pytest.raises(OMGPTError, match="bogus") as err:
        make_task("pricing", bogus=1)
    for option in ("dim", "noise_std", "pool_size", "pool_seed"):
        assert option in str(err.value)
    with pytest.raises(OMGPTError, match="noise_std"):
        make_task("newsvendor", noise_std=0.1)  # a pricing option is not a newsvendor option
    with pytest.raises(OMGPTError, match="pool"):
        make_task("pricing", pool=3)  # the name of the constructors' **kwargs is not an option


def test_capability_flags_follow_the_methods_a_task_implements():
    from omgpt.tasks import TASKS

    revenue = TASKS["revenue"].cls
    assert not any(getattr(revenue, flag) for flag in revenue.CAPABILITIES)

    class RevenueWithLikelihood(revenue):  # a task that adds one method gains that capability, only that one
        def log_likelihood(self, candidates, x, a, o, t):
            return torch.zeros(x.shape[0])

    assert RevenueWithLikelihood.has_likelihood and not RevenueWithLikelihood.has_likelihood_stats
    assert not RevenueWithLikelihood.has_outcome_cost and not RevenueWithLikelihood.has_mean_observation
    # A flag a task states for its instances (the newsvendor's outcome cost: not when censored, not with
    # carried stock) holds in its subclasses too, instead of being recomputed from the method.
    newsvendor = TASKS["newsvendor"].cls

    class MyNewsvendor(newsvendor):
        pass

    assert MyNewsvendor().has_outcome_cost and not MyNewsvendor(censored=True).has_outcome_cost
    assert make_task("newsvendor").has_outcome_cost and not make_task("newsvendor-nonperishable").has_outcome_cost
    assert (
        make_task("pricing").has_likelihood_stats
        and make_task("queueing").has_likelihood
        and not make_task("queueing").has_likelihood_stats
    )


def test_horizon_is_the_instance_episode_horizon_and_default_horizon_the_papers():
    from omgpt.tasks import TASKS

    assert make_task("queueing", horizon=30).horizon == 30 and make_task("queueing").horizon == 100
    assert make_task("pricing").horizon == TASKS["pricing"].cls.default_horizon == 100
    assert make_task("revenue").horizon == TASKS["revenue"].cls.default_horizon == 50
    with pytest.raises(TypeError, match="default_horizon"):  # the old spelling would shadow the instance's horizon

        class Old(TASKS["pricing"].cls):
            horizon = 50


def test_finite_pool_is_the_whole_prior_and_is_reproducible():
    def drawn(task, seed):
        return torch.unique(task.sample_envs(2000, gen(seed))["w"], dim=0)

    a, b = make_task("newsvendor", pool_size=4, pool_seed=7), make_task("newsvendor-censored", pool_size=4, pool_seed=7)
    rows = drawn(a, 0)
    assert rows.shape == (4, 4)  # 2000 draws, exactly the 4 pool environments (each drawn)
    torch.testing.assert_close(drawn(a, 1), rows, rtol=0, atol=0)
    torch.testing.assert_close(drawn(b, 2), rows, rtol=0, atol=0)  # same pool_seed -> same pool
    other = drawn(make_task("newsvendor", pool_size=4, pool_seed=8), 0)
    assert not torch.equal(other, rows)
    # Contexts stay random even with a one-environment pool.
    one = make_task("pricing", pool_size=1)
    envs = one.sample_envs(8, gen(0))
    assert torch.unique(envs["alpha"], dim=0).shape[0] == 1
    assert torch.unique(one.sample_context(envs, 0, gen(1)), dim=0).shape[0] == 8
    with pytest.raises(OMGPTError):
        make_task("pricing", pool_size=0)


@pytest.mark.parametrize(
    ("name", "dim", "context_dim"), [("newsvendor", 6, 7), ("newsvendor-censored", 2, 3), ("pricing", 10, 10)]
)
def test_dim_option_resizes_contexts(name, dim, context_dim):
    task = make_task(name, dim=dim)
    assert (task.context_dim, task.feature_dim) == (context_dim, context_dim + 1)
    assert len(task.scaling().feature_loc) == task.feature_dim
    history = rollout(task, task.sample_envs(3, gen(0)), make_policy("oracle", task), 5, gen(1))
    assert history.contexts.shape == (3, 5, context_dim)
    assert history.features().shape == (3, 5, context_dim + 1)
    assert history.regrets.abs().max() == 0


# --------------------------------------------------------------------------------------------------
# Rollout
TASKS = ["newsvendor", "newsvendor-censored", "pricing"]


@pytest.mark.parametrize("name", TASKS)
def test_oracle_has_exactly_zero_regret_and_noisy_oracle_positive(name):
    task = make_task(name)
    envs = task.sample_envs(64, gen(0))
    oracle = rollout(task, envs, make_policy("oracle", task), 30, gen(1), gen(2))
    assert torch.equal(oracle.regrets, torch.zeros(64, 30))
    assert torch.equal(oracle.actions, oracle.optimal_actions)

    noisy = rollout(task, envs, make_policy("noisy-oracle", task), 30, gen(1), gen(2))
    assert noisy.regrets.sum() > 0
    assert noisy.regrets.min() >= -1e-4  # pseudo-regret is never negative
    assert ((noisy.actions >= 0) & (noisy.actions <= 30)).all()  # projected onto A
    assert (noisy.suboptimality <= 1 + 1e-5).all()  # |ε'| <= 1 before projection
    # ε' = 0 w.p. max(0, 1 - 2/√t): always noisy for t <= 4, rarely late on.
    late, early = (noisy.suboptimality[:, 20:] > 0).float().mean(), (noisy.suboptimality[:, :4] > 0).float().mean()
    assert early > 0.95 and late < 0.6


@pytest.mark.parametrize("name", TASKS)
def test_common_random_numbers_across_policies(name):
    task = make_task(name)
    envs = task.sample_envs(16, gen(0))
    h1 = rollout(task, envs, make_policy("oracle", task), 25, gen(5), gen(6))
    h2 = rollout(task, envs, make_policy("noisy-oracle", task), 25, gen(5), gen(6))
    assert not torch.equal(h1.actions, h2.actions)
    torch.testing.assert_close(h1.contexts, h2.contexts, rtol=0, atol=0)
    torch.testing.assert_close(h1.optimal_actions, h2.optimal_actions, rtol=0, atol=0)
    if name == "newsvendor":  # the same demand shocks: identical demand
        torch.testing.assert_close(h1.observations, h2.observations, rtol=0, atol=0)
    elif name == "pricing":  # the same noise: demands differ only by the slope times the price gap
        slope = (envs["beta"][:, None] * h1.contexts).sum(-1, keepdim=True)
        torch.testing.assert_close(h1.observations - h2.observations, -slope * (h1.actions - h2.actions))
    # The same seeds replay the same episode.
    h3 = rollout(task, envs, make_policy("noisy-oracle", task), 25, gen(5), gen(6))
    torch.testing.assert_close(h2.actions, h3.actions, rtol=0, atol=0)


def test_history_features_and_windowed_tokens():
    task = make_task("newsvendor")
    h = rollout(task, task.sample_envs(4, gen(0)), make_policy("noisy-oracle", task), 12, gen(1))
    f = h.features()
    assert f.shape == (4, 12, 1 + 5)
    assert torch.equal(f[:, 0, :1], torch.zeros(4, 1))  # O_0 = 0
    assert torch.equal(f[:, 1:, :1], h.observations[:, :-1])  # O_{t-1} sits with X_t
    assert torch.equal(f[:, :, 1:], h.contexts)
    assert (h.observations > 0).all()  # so O_0 = 0 is not an accident of the data

    feats, acts = h.tokens()
    assert torch.equal(feats, f) and torch.equal(acts, h.actions)
    feats, acts = h.tokens(window=5)
    assert torch.equal(feats, f[:, 7:]) and torch.equal(acts, h.actions[:, 7:])
    assert torch.equal(feats[:, 0, :1], h.observations[:, 6])  # the step before the window
    feats, acts = h.tokens(window=50)
    assert torch.equal(feats, f) and torch.equal(acts, h.actions)

    cut = h.truncate(3)
    assert cut.horizon == 3 and torch.equal(cut.features(), f[:, :3])
    torch.testing.assert_close(h.cumulative_regret()[:, -1], h.regrets.sum(1))
