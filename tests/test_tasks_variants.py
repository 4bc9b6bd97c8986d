"""Task variants the experiments need (docs/paper-gaps.md §3): square / mixed demand, pricing prior shifts and context
sizes, the non-stationary and the non-perishable newsvendor -- against closed forms, grids, Monte Carlo,
hand-computed dynamics, and the evaluate CLI."""

from __future__ import annotations

import json
import math

import pytest
import torch

from omgpt.commands.cli import cli_main
from omgpt.errors import OMGPTError
from omgpt.policies import Policy, make_policy
from omgpt.rollout import rollout
from omgpt.tasks import TASKS, make_task
from omgpt.tasks.newsvendor import SQUARE_SCALE_PER_DIM


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def repeat(envs: dict, n: int) -> dict:
    """``n`` copies of a one-environment batch."""
    return {k: v.expand(n, *v.shape[1:]).clone() for k, v in envs.items()}


VARIANT_NAMES = [
    "newsvendor-square",
    "newsvendor-square-censored",
    "newsvendor-nonstationary",
    "newsvendor-nonstationary-censored",
    "newsvendor-nonperishable",
    "newsvendor-nonperishable-censored",
    "pricing-square",
]
# (name, options): every variant, including the option-only ones.
VARIANTS = [(name, {}) for name in VARIANT_NAMES] + [
    ("newsvendor", {"demand_types": "mixed"}),
    ("newsvendor-censored", {"demand_types": "mixed"}),
    ("newsvendor-nonperishable", {"demand_types": "mixed"}),
    ("pricing", {"demand_types": "mixed"}),
    ("pricing", {"ood_shift": 0.5}),
    ("pricing", {"id_shift": 0.3, "noise_std": 0.3}),
    ("pricing-square", {"dim": 20}),
]
IDS = [f"{n}{''.join(f'-{k}={v}' for k, v in o.items())}" for n, o in VARIANTS]


def test_variant_names_are_registered_and_fixed_options_are_refused():
    for name in VARIANT_NAMES:
        assert name in TASKS
    with pytest.raises(OMGPTError, match="fixed"):
        make_task("newsvendor-square", demand_types="linear")
    with pytest.raises(OMGPTError, match="fixed"):
        make_task("pricing-square", demand_types="mixed")
    with pytest.raises(OMGPTError, match="demand_types"):
        make_task("pricing", demand_types="cubic")
    with pytest.raises(OMGPTError, match="id_shift"):
        make_task("pricing", id_shift=1.0)
    assert make_task("newsvendor-nonperishable").context_dim == 6  # (I, h, X~)
    assert make_task("newsvendor-nonstationary", horizon=20).horizon == 20


def states(task, envs: dict, x: torch.Tensor, g: torch.Generator) -> tuple[dict, torch.Tensor]:
    """For the non-perishable task: random inventories ``I ~ U[0, 20]`` put in ``envs`` and ``x``."""
    if getattr(task, "state_dims", 0) == 0:
        return envs, x
    inventory = 20 * torch.rand(x.shape[0], generator=g)
    inventory[:3] = torch.tensor([0.0, 0.5, 35.0])  # empty, a little, more than any demand quantile
    return {**envs, "inventory": inventory}, torch.cat([inventory[:, None], x[:, 1:]], dim=-1)


# --------------------------------------------------------------------------------------------------
# a*: closed forms and grid maximisation of the expected reward
def test_pricing_square_by_hand():
    task = make_task("pricing-square", dim=2)
    envs = {"alpha": torch.tensor([[1.0, 0.5], [1.5, 1.5]]), "beta": torch.tensor([[0.5, 0.25], [0.05, 0.05]])}
    x = torch.tensor([[2.0, 2.0], [2.5, 2.5]])  # αᵀX = 3, 7.5;  βᵀX = 1.5, 0.25
    a_star = task.optimal_action(envs, x, 0)
    torch.testing.assert_close(a_star, torch.tensor([[math.sqrt(3 / 4.5)], [math.sqrt(7.5 / 0.75)]]))
    a = torch.tensor([[1.0], [2.0]])  # a (αᵀX - βᵀX a²): 1·(3 - 1.5) = 1.5;  2·(7.5 - 0.25·4) = 13
    torch.testing.assert_close(task.expected_reward(envs, x, a, 0), torch.tensor([1.5, 13.0]))
    # The mixed task follows each environment's own type.
    mixed = make_task("pricing", dim=2, demand_types="mixed")
    typed = {**envs, "square": torch.tensor([True, False])}
    torch.testing.assert_close(mixed.optimal_action(typed, x, 0), torch.tensor([[math.sqrt(3 / 4.5)], [15.0]]))
    torch.testing.assert_close(mixed.expected_reward(typed, x, a, 0), torch.tensor([1.5, 2.0 * (7.5 - 0.5)]))


def test_newsvendor_square_by_hand():
    task = make_task("newsvendor-square")
    s = SQUARE_SCALE_PER_DIM * 4
    assert s == 16.0
    envs = {
        "w": torch.tensor([[1.0, 0.5, 0.0, 2.0], [3.0, 3.0, 3.0, 3.0]]),
        "eps_bar": torch.tensor([4.0, 2.0]),
        "h": torch.tensor([1.0, 2.0]),
    }
    x = torch.tensor([[1.0, 1.0, 2.0, 0.0, 2.5], [2.0, 1.0, 1.0, 1.0, 1.0]])  # wᵀX~ = 7, 12
    # (7)²/16 + 4/2 = 5.0625;  144/16 + 2/3 = 9.6667
    torch.testing.assert_close(task.optimal_action(envs, x, 0), torch.tensor([[49 / 16 + 2.0], [9.0 + 2 / 3]]))
    torch.testing.assert_close(task.mean_demand_floor(envs, x), torch.tensor([49 / 16, 9.0]))
    # The clipped fraction the docstring states (0.44% with s = 16): between 0.2% and 0.8%.
    many = task.sample_envs(200_000, gen(0))
    q = task.mean_demand_floor(many, task.sample_context(many, 0, gen(1))) + many["eps_bar"] / (1 + many["h"])
    assert 0.002 < (q > 30).float().mean().item() < 0.008


@pytest.mark.parametrize(("name", "options"), VARIANTS, ids=IDS)
def test_optimal_action_maximises_expected_reward_on_a_grid(name, options):
    task = make_task(name, **options)
    g = gen(1)
    envs = task.sample_envs(16, g)
    x = task.sample_context(envs, 0, g)
    envs, x = states(task, envs, x, g)
    b = x.shape[0]
    low = x[:, 0] if name.startswith("newsvendor-nonperishable") else torch.zeros(b)  # the action set [low, low + 30]
    grid = torch.linspace(0.0, 30.0, 3001)  # spacing 0.01
    for t in (0, 7, 19):  # before and after the change points of the non-stationary variant
        a_star = task.optimal_action(envs, x, t)[:, 0]
        assert ((a_star >= low) & (a_star <= low + 30)).all()
        levels = low[:, None] + grid[None, :]  # (B, G)
        rewards = torch.stack(
            [task.expected_reward(envs, x, levels[:, i : i + 1], t) for i in range(grid.numel())], dim=1
        )
        best_on_grid = levels[torch.arange(b), rewards.argmax(dim=1)]
        assert (best_on_grid - a_star).abs().max() <= 0.01 + 1e-4
        assert (rewards.max(dim=1).values <= task.expected_reward(envs, x, a_star[:, None], t) + 1e-4).all()


def test_nonperishable_optimum_is_the_quantile_clipped_to_the_state_action_set():
    task = make_task("newsvendor-nonperishable")
    envs = {
        "w": torch.tensor([[1.0, 0.5, 0.0, 2.0]]).expand(3, 4),
        "eps_bar": torch.full((3,), 4.0),
        "h": torch.ones(3),
    }
    feats = torch.tensor([1.0, 2.0, 0.0, 0.5])  # wᵀX~ = 3, quantile 3 + 4/2 = 5
    inventory = torch.tensor([0.0, 2.0, 8.0])
    x = torch.cat([inventory[:, None], torch.ones(3, 1), feats.expand(3, 4)], dim=-1)
    torch.testing.assert_close(task.optimal_action(envs, x, 0), torch.tensor([[5.0], [5.0], [8.0]]))  # max(I, 5)
    torch.testing.assert_close(
        task.project(torch.tensor([[-3.0], [40.0], [20.0]]), x), torch.tensor([[0.0], [32.0], [20.0]])
    )


# --------------------------------------------------------------------------------------------------
# Expected reward vs Monte Carlo
@pytest.mark.parametrize("price", [0.4, 1.0, 2.0])
def test_pricing_square_expected_revenue_matches_monte_carlo(price):
    task = make_task("pricing-square", dim=2, noise_std=0.3)
    env = {"alpha": torch.tensor([[1.0, 0.5]]), "beta": torch.tensor([[0.5, 0.25]])}
    x = torch.tensor([[2.0, 2.0]])  # αᵀX = 3, βᵀX = 1.5
    n = 200_000
    demand = task.observe(repeat(env, n), x.expand(n, -1), torch.full((n, 1), price), 0, gen(2))[:, 0].double()
    noise = demand - (3.0 - 1.5 * price**2)
    assert abs(noise.mean().item()) < 0.01 and noise.std().item() == pytest.approx(0.3, rel=0.01)
    closed = task.expected_reward(env, x, torch.tensor([[price]]), 0).item()
    assert closed == pytest.approx((price * demand).mean().item(), abs=0.01)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("newsvendor-square", {}),
        ("newsvendor", {"demand_types": "mixed"}),
        ("newsvendor-nonstationary", {}),
        ("newsvendor-nonperishable", {}),
    ],
)
@pytest.mark.parametrize("order", [4.0, 11.0, 20.0])
def test_newsvendor_variant_expected_reward_matches_monte_carlo(name, options, order):
    task = make_task(name, lost_sale_cost=1.3, **options)
    g = gen(3)
    env = task.sample_envs(2, g)
    x = task.sample_context(env, 0, g)
    if "square" in env:
        env["square"] = torch.tensor([True, False])
    if "tau" in env:
        env["tau"] = torch.tensor([5, 5])
    n = 100_000
    for t in (0, 9):  # the non-stationary w changes between these
        for i in range(2):
            one = {k: v[i : i + 1] for k, v in env.items()}
            xi = x[i : i + 1]
            demand = task.observe(repeat(one, n), xi.expand(n, -1), torch.full((n, 1), order), t, gen(4 + t))[
                :, 0
            ].double()
            cost = one["h"].item() * (order - demand).clamp(min=0) + 1.3 * (demand - order).clamp(min=0)
            closed = task.expected_reward(one, xi, torch.tensor([[order]]), t).item()
            assert closed == pytest.approx(-cost.mean().item(), rel=0.01, abs=0.01)


# --------------------------------------------------------------------------------------------------
# Prior shifts (paper §5.1.4)
def test_out_of_domain_shift_moves_both_ranges():
    for mu in (0.1, 0.5, 1.0):
        task = make_task("pricing", ood_shift=mu)
        envs = task.sample_envs(20_000, gen(5))
        alpha, beta = envs["alpha"], envs["beta"]
        assert alpha.min() >= 0.5 + mu and alpha.max() <= 1.5 + mu
        assert beta.min() >= 0.05 + mu and beta.max() <= 1.05 + mu
        assert alpha.min() < 0.5 + mu + 1e-3 and alpha.max() > 1.5 + mu - 1e-3  # fills the whole range
        assert beta.min() < 0.05 + mu + 1e-3 and beta.max() > 1.05 + mu - 1e-3
        assert task.scaling() == make_task("pricing").scaling()  # test-time shifts keep the model's scaling
    # No shift: exactly the draws of the unshifted prior.
    base, zero = (
        make_task("pricing").sample_envs(8, gen(6)),
        make_task("pricing", ood_shift=0.0, id_shift=0.0).sample_envs(8, gen(6)),
    )
    assert all(torch.equal(base[k], zero[k]) for k in base)


@pytest.mark.parametrize("mu", [0.1, 0.3, 0.6])
def test_in_domain_shift_draws_each_environment_from_a_random_subinterval(mu):
    task = make_task("pricing", dim=20, id_shift=mu)
    envs = task.sample_envs(20_000, gen(7))
    for key, (lo, hi) in (("alpha", (0.5, 1.5)), ("beta", (0.05, 1.05))):
        p = envs[key]
        assert p.min() >= lo and p.max() <= hi  # inside the original range ...
        assert p.min() < lo + 2e-3 and p.max() > hi - 2e-3  # ... which the sub-intervals still cover
        spread = p.max(dim=1).values - p.min(dim=1).values  # per environment: within one interval of length 1 - μ
        assert spread.max() <= 1 - mu + 1e-6 and spread.max() > 1 - mu - 0.02
        # The sub-interval is random per environment: its position (the smallest coordinate) spreads
        # over [lo, lo + μ]; with 20 coordinates the per-env minimum sits near its κ.
        kappa = p.min(dim=1).values
        assert kappa.min() < lo + 0.01 and kappa.max() > lo + mu - 0.02
    assert task.scaling() == make_task("pricing", dim=20).scaling()


# --------------------------------------------------------------------------------------------------
# Mixed demand types
@pytest.mark.parametrize("family", ["newsvendor", "pricing"])
def test_mixed_types_are_half_square_and_everything_follows_each_type(family):
    mixed = make_task(family, demand_types="mixed")
    linear = make_task(family)
    square = make_task(f"{family}-square")
    envs = mixed.sample_envs(4000, gen(8))
    assert envs["square"].dtype == torch.bool
    frac = envs["square"].float().mean().item()
    assert 0.46 < frac < 0.54
    # The non-type parameters are those of the linear prior (the same seed gives the same draws).
    plain = linear.sample_envs(4000, gen(8))
    assert all(torch.equal(plain[k], envs[k]) for k in plain)

    x = mixed.sample_context(envs, 0, gen(9))
    a = linear.sample_action(4000, gen(10))
    sq = envs["square"]
    for method in ("optimal_action", "expected_reward"):
        args = (envs, x, 0) if method == "optimal_action" else (envs, x, a, 0)
        got = getattr(mixed, method)(*args)
        torch.testing.assert_close(got[sq], getattr(square, method)(*args)[sq], rtol=0, atol=0)
        torch.testing.assert_close(got[~sq], getattr(linear, method)(*args)[~sq], rtol=0, atol=0)
    # Observations (common random numbers): each environment's demand is that of its own type.
    o = mixed.observe(envs, x, a, 0, gen(11))
    torch.testing.assert_close(o[sq], square.observe(envs, x, a, 0, gen(11))[sq], rtol=0, atol=0)
    torch.testing.assert_close(o[~sq], linear.observe(envs, x, a, 0, gen(11))[~sq], rtol=0, atol=0)


def test_mixed_types_survive_a_finite_pool_and_a_rollout():
    task = make_task("pricing", demand_types="mixed", pool_size=16, pool_seed=3)
    envs = task.sample_envs(500, gen(12))
    types = torch.unique(torch.cat([envs["alpha"], envs["square"][:, None].float()], dim=1), dim=0)
    assert types.shape[0] == 16  # the type is part of each pooled environment
    h = rollout(task, envs, make_policy("oracle", task), 10, gen(13), gen(14))
    assert torch.equal(h.regrets, torch.zeros(500, 10)) and torch.equal(h.envs["square"], envs["square"])


# --------------------------------------------------------------------------------------------------
# Non-stationary newsvendor
@pytest.mark.parametrize("censored", [False, True])
def test_nonstationary_w_changes_exactly_once_at_tau(censored):
    T = 20
    task = make_task("newsvendor-nonstationary-censored" if censored else "newsvendor-nonstationary", horizon=T)
    envs = task.sample_envs(512, gen(15))
    tau = envs["tau"]
    assert tau.dtype == torch.int64 and tau.min() == 1 and tau.max() == T
    assert set(tau.tolist()) == set(range(1, T + 1))  # τ ~ U{1..T}: every value appears
    assert not torch.equal(envs["w"], envs["w_after"])

    h = rollout(task, envs, make_policy("oracle", task), T, gen(16), gen(17))
    assert torch.equal(h.regrets, torch.zeros(512, T))
    feats = h.contexts[..., 1:]  # (B, T, d)
    shift = (envs["eps_bar"] / (1 + envs["h"]))[:, None]  # (B, 1)
    before = ((envs["w"][:, None] * feats).sum(-1) + shift).clamp(0, 30)  # a* with w_1, (B, T)
    after = ((envs["w_after"][:, None] * feats).sum(-1) + shift).clamp(0, 30)
    steps = torch.arange(1, T + 1)[None, :]  # 1-based
    use_after = steps > tau[:, None]  # w_{τ+1} = … = w_T
    expected = torch.where(use_after, after, before)
    torch.testing.assert_close(h.optimal_actions[..., 0], expected)
    # Exactly one change: "a* is the w_1 one" holds up to τ and fails after it (where the two differ).
    differ = (after - before).abs() > 1e-3
    matches_before = (h.optimal_actions[..., 0] - before).abs() < 1e-4
    assert matches_before[~use_after].all()
    assert not (matches_before & use_after & differ).any()
    if not censored:  # demand floor follows the same w_t: D_t - w_tᵀX~_t in [0, ε̄]
        w_t = torch.where(use_after[..., None], envs["w_after"][:, None], envs["w"][:, None])
        eps = h.observations[..., 0] - (w_t * feats).sum(-1)
        assert (eps >= -1e-4).all() and (eps <= envs["eps_bar"][:, None] + 1e-4).all()


# --------------------------------------------------------------------------------------------------
# Non-perishable newsvendor
class Scripted(Policy):
    """Plays fixed order-up-to levels (before the rollout's projection)."""

    def __init__(self, task, levels):
        super().__init__(task)
        self.levels = levels

    def act(self, t, x):
        return torch.full((x.shape[0], 1), self.levels[t])


@pytest.mark.parametrize("censored", [False, True])
def test_nonperishable_inventory_dynamics_by_hand(censored):
    task = make_task("newsvendor-nonperishable-censored" if censored else "newsvendor-nonperishable")
    # w = 0: demand D = ε ~ U(0, 1), so the stock moves by less than one unit per period.
    env = {"w": torch.zeros(1, 4), "eps_bar": torch.tensor([1.0]), "h": torch.tensor([0.7])}
    uncensored = make_task("newsvendor-nonperishable")
    h = rollout(task, env, Scripted(task, [10.0, 5.0, 50.0]), 3, gen(18), gen(19))
    demand = rollout(uncensored, env, Scripted(uncensored, [10.0, 5.0, 50.0]), 3, gen(18), gen(19)).observations[
        0, :, 0
    ]
    assert ((demand > 0) & (demand < 1)).all()
    inv = h.contexts[0, :, 0]
    a = h.actions[0, :, 0]
    # t = 1: I_1 = 0, level 10 is feasible.  I_2 = 10 - D_1.
    assert inv[0] == 0 and a[0] == 10.0
    torch.testing.assert_close(inv[1], 10.0 - demand[0])
    # t = 2: level 5 < I_2 is projected up to I_2 (order nothing).  I_3 = I_2 - D_2.
    torch.testing.assert_close(a[1], inv[1])
    torch.testing.assert_close(inv[2], inv[1] - demand[1])
    # t = 3: level 50 > I_3 + 30 is projected down to I_3 + 30.  I_4 = I_3 + 30 - D_3.
    torch.testing.assert_close(a[2], inv[2] + 30.0)
    torch.testing.assert_close(h.envs["inventory"][0], inv[2] + 30.0 - demand[2])
    assert torch.equal(h.contexts[0, :, 1], torch.full((3,), 0.7))  # (I, h, X~)
    if censored:
        torch.testing.assert_close(h.observations[0, :, 0], torch.minimum(demand, a))
    # The stock carried over is charged the holding cost: the reward of step 2 (order nothing) is
    # -(h E(I_2 - D)) with D ~ U(0, 1) far below the stock.
    torch.testing.assert_close(h.regrets[0, 1], torch.tensor(0.0), atol=1e-5, rtol=0)  # a* = max(I_2, q) = I_2


@pytest.mark.parametrize("name", ["newsvendor-nonperishable", "newsvendor-nonperishable-censored"])
def test_nonperishable_rollouts_stay_in_the_state_action_set(name):
    task = make_task(name, pool_size=8)
    envs = task.sample_envs(64, gen(20))
    assert "inventory" not in envs  # state is added by start(), not pooled
    for policy in ("oracle", "noisy-oracle", "random"):
        h = rollout(task, envs, make_policy(policy, task), 30, gen(21), gen(22))
        inv = h.contexts[..., 0]
        assert (inv[:, 0] == 0).all() and (inv >= 0).all()
        a = h.actions[..., 0]
        assert ((a >= inv) & (a <= inv + 30)).all()
        demand_or_sales = h.observations[..., 0]
        torch.testing.assert_close(inv[:, 1:], (a[:, :-1] - demand_or_sales[:, :-1]).clamp(min=0))
        assert h.regrets.min() >= -1e-4
        if policy == "oracle":
            assert torch.equal(h.regrets, torch.zeros(64, 30))
        if policy == "random":
            assert (inv > 1).any()  # random orders leave real stock behind
    assert "inventory" not in envs  # the caller's envs are untouched


# --------------------------------------------------------------------------------------------------
# Every variant: pool, context sizes, scaling, rollouts
@pytest.mark.parametrize(
    ("name", "options"),
    VARIANTS
    + [("pricing", {"dim": d}) for d in (4, 10, 20)]
    + [("pricing-square", {"dim": 4}), ("pricing-square", {"dim": 10})],
    ids=IDS + ["pricing-dim4", "pricing-dim10", "pricing-dim20", "pricing-square-dim4", "pricing-square-dim10"],
)
def test_every_variant_rolls_out_with_a_pool_and_unit_scale_inputs(name, options):
    pooled = make_task(name, pool_size=4, **options)
    envs = pooled.sample_envs(64, gen(23))
    oracle = rollout(pooled, envs, make_policy("oracle", pooled), 30, gen(24), gen(25))
    assert torch.equal(oracle.regrets, torch.zeros(64, 30))
    noisy = rollout(pooled, envs, make_policy("noisy-oracle", pooled), 30, gen(24), gen(25))
    assert noisy.regrets.sum() > 0 and noisy.regrets.min() >= -1e-4

    # Scaling: model inputs ~ zero mean, unit sd under the pre-training prior (shifts are test-time
    # options and must not change the scaling).
    prior = {k: v for k, v in options.items() if k not in ("ood_shift", "id_shift", "noise_std")}
    task = make_task(name, **prior)
    s = task.scaling()
    assert s == pooled.scaling()
    assert len(s.feature_loc) == len(s.feature_scale) == task.feature_dim
    noisy = rollout(task, task.sample_envs(256, gen(26)), make_policy("noisy-oracle", task), 40, gen(27), gen(28))
    f = (noisy.features()[:, 1:] - torch.tensor(s.feature_loc)) / torch.tensor(s.feature_scale)
    f = f.reshape(-1, task.feature_dim)
    assert (f.mean(0).abs() < 0.35).all() and ((f.std(0) > 0.6) & (f.std(0) < 1.5)).all()
    # Action tokens: the scale is a*'s spread (the read-out's target), so the noisy oracle's early
    # ±1 perturbations make the played prices up to ~2x wider in units of it (linear pricing, d = 4).
    act = (noisy.actions - torch.tensor(s.action_loc)) / torch.tensor(s.action_scale)
    assert act.mean().abs() < 0.35 and 0.3 < act.std() < 2.0


@pytest.mark.parametrize("name", VARIANT_NAMES)
def test_evaluate_cli_on_every_variant(name, tmp_path):
    out = tmp_path / name
    args = [
        "evaluate",
        "--task",
        name,
        "--policies",
        "oracle,noisy-oracle",
        "--runs",
        "8",
        "--horizon",
        "20",
        "--out",
        str(out),
        "--no-progress",
    ]
    if "nonstationary" in name:
        args += ["--option", "horizon=20"]
    assert cli_main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policies"]["oracle"]["final_regret"]["mean"] == 0.0
    assert summary["policies"]["noisy-oracle"]["final_regret"]["mean"] > 0
