"""``alg-star``, the posterior oracle: exact posteriors on small pools against numpy, identification of
the true environment, the particle version, its fallbacks and errors, and ``omgpt evaluate``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from omgpt.commands.cli import cli_main
from omgpt.errors import OMGPTError
from omgpt.policies import make_policy, policies_for
from omgpt.policies.alg_star import AlgStar, weighted_median
from omgpt.rollout import rollout
from omgpt.tasks import make_task


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def play(task, policy, runs: int, horizon: int, seed: int = 0):
    envs = task.sample_envs(runs, gen(seed))
    return rollout(task, envs, policy, horizon, gen(seed + 1), gen(seed + 2))


# --------------------------------------------------------------------------------------------------
# The exact posterior over a pool, recomputed with numpy from the played history.
def numpy_log_likelihood(task, pool: dict, x: np.ndarray, a: np.ndarray, o: np.ndarray) -> np.ndarray:
    """``Σ_t log P(O_t | γ_i, X_t, a_t)`` for every run and pool environment, ``(B, N)``, by hand."""
    p = {k: v.numpy().astype(np.float64) for k, v in pool.items()}
    o = o[..., 0]  # (B, T)
    if task.name.startswith("newsvendor"):
        m = np.einsum("btd,nd->btn", x[..., 1:], p["w"])  # (B, T, N) demand floors wᵀX~
        e = p["eps_bar"][None, None]
        rest = o[..., None] - m
        exact = np.where((rest >= -1e-3) & (rest <= e + 1e-3), -np.log(e), -np.inf)
        if task.censored:
            tail = np.clip((m + e + 1e-3 - a[..., :1]) / e, 0, 1)
            with np.errstate(divide="ignore"):
                exact = np.where((o >= a[..., 0])[..., None], np.log(tail), exact)
        return exact.sum(1)
    if task.name == "mab":
        mean = np.einsum("bta,na->btn", a, p["r"])
    elif task.name == "linear-bandit":
        mean = np.einsum("bta,na->btn", a, p["w"])
    else:  # pricing
        mean = np.einsum("btd,nd->btn", x, p["alpha"]) - np.einsum("btd,nd->btn", x, p["beta"]) * a[..., :1]
    return (-((o[..., None] - mean) ** 2) / (2 * task.noise_std**2)).sum(1)


@pytest.mark.parametrize("name", ["mab", "linear-bandit", "pricing", "newsvendor", "newsvendor-censored"])
def test_log_posterior_on_a_pool_matches_numpy(name):
    task = make_task(name, pool_size=4)
    policy = make_policy("alg-star", task)
    h = play(task, policy, runs=6, horizon=5)
    ll = numpy_log_likelihood(
        task, task.pool, h.contexts.double().numpy(), h.actions.double().numpy(), h.observations.double().numpy()
    )
    expected = ll - np.logaddexp.reduce(ll, axis=1, keepdims=True)
    got = policy.log_posterior().numpy()
    assert got.shape == (6, 4)
    assert (np.isinf(got) == np.isinf(expected)).all()
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-4, atol=1e-4)
    true = (h.envs[next(iter(h.envs))][:, None] == task.pool[next(iter(task.pool))][None]).flatten(2).all(-1)
    assert np.isfinite(got[true.numpy()]).all()  # the true environment is never ruled out


def test_gaussian_likelihood_is_the_correct_one_not_the_papers():
    """One step on a 2-environment pricing pool: log-odds ``-[(O-μ1)² - (O-μ2)²] / (2σ²)``; the paper's
    formula would give twice that."""
    task = make_task("pricing", pool_size=2, dim=1)
    policy = make_policy("alg-star", task)
    envs = {k: v[:1] for k, v in task.pool.items()}
    policy.reset(envs, 1, gen(0))
    x, o = torch.tensor([[2.0]]), torch.tensor([[1.0]])
    a = policy.act(0, x)
    policy.observe(0, a, o)
    mu = 2.0 * task.pool["alpha"][:, 0] - 2.0 * task.pool["beta"][:, 0] * a[0, 0]
    log_odds = -((1.0 - mu[0]) ** 2 - (1.0 - mu[1]) ** 2) / (2 * 0.2**2)  # σ = 0.2, the default std
    lp = policy.log_posterior()[0]
    assert float(lp[0] - lp[1]) == pytest.approx(float(log_odds), rel=1e-5)


# --------------------------------------------------------------------------------------------------
# Identification of the true environment on 4-pools.
def test_newsvendor_pool_identifies_the_true_environment():
    task = make_task("newsvendor", pool_size=4)
    h = play(task, make_policy("alg-star", task), runs=40, horizon=30)
    late = (h.actions[:, -10:] - h.optimal_actions[:, -10:]).abs().amax(dim=(1, 2)) < 1e-4  # (B,)
    assert late.float().mean() >= 0.9


def test_pricing_pool_regret_is_near_the_oracle_late():
    task = make_task("pricing", pool_size=4)
    h = play(task, make_policy("alg-star", task), runs=40, horizon=30)
    assert h.regrets[:, -10:].mean() < 1e-3
    assert h.regrets[:, :3].mean() > h.regrets[:, -10:].mean()  # it learned


def test_mab_pool_posterior_sampling_concentrates_on_the_best_arm():
    task = make_task("mab", pool_size=4)
    policy = make_policy("alg-star", task)
    h = play(task, policy, runs=40, horizon=40)
    best = h.optimal_actions[:, -10:].argmax(-1)
    assert (h.actions[:, -10:].argmax(-1) == best).float().mean() >= 0.95
    assert policy.log_posterior().exp().amax(-1).mean() > 0.95  # the posterior is nearly a point mass


@pytest.mark.parametrize(
    "name, options",
    [
        ("linear-bandit", {}),
        ("pricing", {"demand_types": "mixed"}),
        ("pricing-square", {}),
        ("newsvendor-censored", {}),
        ("newsvendor-nonstationary", {}),
        ("newsvendor-nonperishable-censored", {}),
    ],
)
def test_variants_on_a_pool_end_near_the_oracle(name, options):
    task = make_task(name, pool_size=4, **options)
    h = play(task, make_policy("alg-star", task), runs=20, horizon=30)
    assert torch.isfinite(h.actions).all()
    assert h.regrets[:, -10:].mean() < 0.05


# --------------------------------------------------------------------------------------------------
# Particles (no pool), decisions, fallbacks, errors.
def test_particles_are_drawn_per_episode_and_reproducible():
    task = make_task("pricing")
    a = play(task, make_policy("alg-star", task, particles=64), runs=8, horizon=10)
    b = play(task, make_policy("alg-star", task, particles=64), runs=8, horizon=10)
    assert torch.equal(a.actions, b.actions)
    policy = make_policy("alg-star", task, particles=64)
    play(task, policy, runs=8, horizon=1)
    assert policy.candidates["alpha"].shape == (8 * 64, 6)  # B × N candidates, each episode its own
    assert not torch.equal(policy.candidates["alpha"][:64], policy.candidates["alpha"][64:128])


def test_particle_pricing_regret_shrinks_with_more_particles():
    """Coarse and fast; the 4096-vs-16384 study is ``benchmarks/alg_star_particles.py``."""
    task = make_task("pricing")
    few = play(task, make_policy("alg-star", task, particles=16), runs=20, horizon=20).regrets.sum(1).mean()
    many = play(task, make_policy("alg-star", task, particles=1024), runs=20, horizon=20).regrets.sum(1).mean()
    assert many < few


def test_rejuvenated_particles_match_the_conjugate_bandit_posterior():
    """Gaussian prior and noise: the exact posterior of each arm is Gaussian, precision ``1 + n_a/σ²``,
    mean ``(Σ O_a / σ²) / precision``. Resample-move must reproduce it (an unplayed arm keeps N(0, 1))."""
    task = make_task("mab", n_arms=3)
    policy = make_policy("alg-star", task, particles=4096)
    envs = {"r": torch.tensor([[1.0, -0.5, 0.3], [0.2, 0.8, -1.0]])}
    policy.reset(envs, 13, gen(0))
    arms = [0] * 10 + [1] * 3
    g = gen(1)
    for t, arm in enumerate(arms):
        policy.act(t, torch.zeros(2, 0))
        a = task.one_hot(torch.tensor([arm, arm]))
        policy.observe(t, a, task.observe(envs, torch.zeros(2, 0), a, t, g))
    assert (policy.rejuvenations > 0).all()
    o, var = policy.observations[..., 0].double(), task.noise_std**2
    p = policy.log_posterior().exp()  # (2, N)
    r = policy.candidates["r"].reshape(2, 4096, 3).double()
    mean = (p[..., None] * r).sum(1)
    sd = (p[..., None] * (r - mean[:, None]) ** 2).sum(1).sqrt()
    for a, n in [(0, 10), (1, 3), (2, 0)]:
        played = torch.tensor(arms) == a
        precision = 1 + n / var
        exact_mean = o[:, played].sum(1) / var / precision
        assert torch.allclose(mean[:, a], exact_mean, atol=0.08 if n else 0.15), (a, mean[:, a], exact_mean)
        assert torch.allclose(sd[:, a], torch.full((2,), precision**-0.5, dtype=torch.float64), rtol=0.25), (
            a,
            sd[:, a],
        )


def test_pricing_prior_density_matches_the_in_domain_shift_draws():
    """``log_prior`` of the in-domain shift (a random sub-interval per environment) against a histogram."""
    task = make_task("pricing", dim=1, id_shift=0.5)
    draws = task.sample_prior(200_000, gen(0))["alpha"][:, 0]
    hist, edges = np.histogram(draws.numpy(), bins=10, range=(0.5, 1.5), density=True)
    mids = torch.tensor((edges[:-1] + edges[1:]) / 2, dtype=torch.float32)
    cands = {"alpha": mids[:, None], "beta": torch.full((10, 1), 0.55)}
    density = task.log_prior(cands).exp().numpy()
    density = density / density.sum() * 10  # normalise over the unit range
    np.testing.assert_allclose(density, hist, atol=0.1)
    outside = {"alpha": torch.tensor([[1.6]]), "beta": torch.tensor([[0.5]])}
    assert task.log_prior(outside).item() == -np.inf


def test_plain_importance_sampling_keeps_its_particles():
    task = make_task("pricing")
    policy = make_policy("alg-star", task, particles=64, rejuvenate=False)
    play(task, policy, runs=4, horizon=1)
    first = policy.candidates["alpha"].clone()
    h = play(task, policy, runs=4, horizon=15)
    assert (policy.rejuvenations == 0).all() and torch.isfinite(h.actions).all()
    assert torch.equal(first, task.sample_prior(4 * 64, gen(2))["alpha"])  # drawn at reset with the policy generator


@pytest.mark.parametrize(
    "name, options",
    [
        ("mab", {}),
        ("linear-bandit", {}),
        ("pricing", {"demand_types": "mixed", "id_shift": 0.3}),
        ("pricing-square", {"ood_shift": 0.5}),
        ("newsvendor-nonstationary-censored", {}),
        ("newsvendor-nonperishable", {"demand_types": "mixed"}),
    ],
)
def test_particles_rejuvenate_on_every_task(name, options):
    task = make_task(name, **options)
    policy = make_policy("alg-star", task, particles=128, sampler="smc")
    h = play(task, policy, runs=4, horizon=12)
    assert torch.isfinite(h.actions).all() and torch.isfinite(h.regrets).all()
    assert (policy.rejuvenations > 0).any() and 0 < policy.acceptance_rate < 1
    assert torch.isfinite(task.log_prior(policy.candidates)).all()  # moves never leave the prior's support
    if name == "linear-bandit":
        assert torch.allclose(policy.candidates["w"].norm(dim=-1), torch.ones(4 * 128), atol=1e-5)


def test_newsvendor_particle_degeneracy_keeps_the_previous_weights():
    task = make_task("newsvendor")
    for rejuvenate in (False, True):
        policy = make_policy(
            "alg-star", task, particles=2, rejuvenate=rejuvenate, sampler="smc"
        )  # far too few particles
        h = play(task, policy, runs=10, horizon=30)
        assert torch.isfinite(h.actions).all()
        assert torch.isfinite(policy.log_w).any(-1).all()  # no episode lost all its weight
        assert torch.isfinite(policy.log_posterior()).any(-1).all()
        if not rejuvenate:
            assert (~policy.used).any()  # some observations ruled out both particles and were ignored


def test_weighted_median_follows_the_paper():
    values = torch.tensor([[3.0, 1.0, 2.0, 4.0], [1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]])
    log_w = torch.log(torch.tensor([[0.25] * 4, [0.1, 0.3, 0.5, 0.1], [0.1, 0.1, 0.2, 0.6]])).double()
    assert weighted_median(values, log_w).tolist() == [2.0, 3.0, 4.0]


def test_decision_option_and_cold_start():
    task = make_task("pricing", pool_size=4)
    policy = make_policy("alg-star", task, decision="median")
    envs = task.sample_envs(3, gen(0))
    policy.reset(envs, 5, gen(1))
    x = task.sample_context(envs, 0, gen(2))
    a_star = task.optimal_action(
        {k: v.repeat(3, *[1] * (v.dim() - 1)) for k, v in task.pool.items()}, x.repeat_interleave(4, 0), 0
    )
    expected = a_star.reshape(3, 4).sort(-1).values[:, 1]  # uniform prior over 4: the second smallest
    assert torch.allclose(policy.act(0, x)[:, 0], expected)
    mean = make_policy("alg-star", task)  # pricing default: posterior averaging
    mean.reset(envs, 5, gen(1))
    assert torch.allclose(mean.act(0, x)[:, 0], a_star.reshape(3, 4).mean(-1))


def test_tasks_without_a_likelihood_raise():
    for name in ("revenue",):
        task = make_task(name)
        assert "alg-star" not in policies_for(task)
        with pytest.raises(OMGPTError, match="alg-star"):
            make_policy("alg-star", task)
        with pytest.raises(OMGPTError, match="likelihood"):
            AlgStar(task)
    with pytest.raises(OMGPTError, match="decision"):
        make_policy("alg-star", make_task("pricing"), decision="mode")
    with pytest.raises(OMGPTError, match="particles"):
        make_policy("alg-star", make_task("pricing"), particles=0)


def test_cli_evaluate_with_alg_star(tmp_path):
    out = tmp_path / "a"
    args = [
        "evaluate",
        "--task",
        "pricing",
        "--option",
        "pool_size=4",
        "--policies",
        "alg-star,oracle",
        "--runs",
        "8",
        "--horizon",
        "30",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert cli_main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["policies"]) == {"alg-star", "oracle"}
    assert 0 < summary["policies"]["alg-star"]["final_regret"]["mean"] < 2.0


def test_particle_benchmark_script_runs(capsys):
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "alg_star_particles.py"
    spec = importlib.util.spec_from_file_location("alg_star_particles", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.main(["--runs", "4", "--horizon", "5", "--particles", "16", "--factor", "2", "--batch", "4"])
    out = capsys.readouterr().out
    assert "ratio default / 2x" in out
    script.main(["--speed", "--tasks", "pricing", "--runs", "2", "--horizon", "4", "--particles", "16", "--batch", "2"])
    out = capsys.readouterr().out
    assert (
        "likelihood 'history' (reference) vs 'stats'" in out and "pricing:" in out and "paired difference +0.000" in out
    )
    script.main(["--speed", "--erm", "--runs", "2", "--horizon", "4", "--batch", "2"])
    out = capsys.readouterr().out
    assert "solver 'highs' (reference) vs 'ipm'" in out and "newsvendor:" in out


def test_profile_script_names_where_the_time_goes(capsys):
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "alg_star_profile.py"
    spec = importlib.util.spec_from_file_location("alg_star_profile", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.main(
        [
            "--task",
            "newsvendor",
            "--batch",
            "2",
            "--horizon",
            "6",
            "--particles",
            "32",
            "--sort",
            "cumulative",
            "--top",
            "40",
        ]
    )
    out = capsys.readouterr().out
    assert "alg-star on newsvendor: 2 episodes, T = 6" in out and "_resample_move" in out and "decide" in out


def test_posterior_mean_on_the_linear_bandit_is_put_back_on_the_unit_sphere():
    """Two equally likely pool members ``w = e_1`` and ``w = e_2``: the average of their ``a*`` is
    ``(1/2, 1/2)``, inside the ball; the posterior-expected reward is maximised by its direction."""
    task = make_task("linear-bandit", pool_size=2)
    task._pool = {"w": torch.tensor([[1.0, 0.0], [0.0, 1.0]])}
    policy = make_policy("alg-star", task, decision="mean")
    policy.reset({"w": task.pool["w"][:1]}, 1, gen(0))
    a = policy.act(0, torch.zeros(1, 0))
    torch.testing.assert_close(a, torch.tensor([[2**-0.5, 2**-0.5]]))


# --------------------------------------------------------------------------------------------------
# The likelihood statistics against the reference that replays the history.
EVERY_TASK_WITH_ALG_STAR = [
    ("mab", {}),
    ("linear-bandit", {}),
    ("pricing", {}),
    ("pricing-square", {"ood_shift": 0.5}),
    ("pricing", {"demand_types": "mixed", "id_shift": 0.3}),
    ("pricing", {"noise_std": 0.0}),
    ("newsvendor", {}),
    ("newsvendor-censored", {}),
    ("newsvendor-square", {}),
    ("newsvendor-square-censored", {}),
    ("newsvendor", {"demand_types": "mixed"}),
    ("newsvendor-nonstationary", {}),
    ("newsvendor-nonstationary-censored", {}),
    ("newsvendor-nonperishable", {"demand_types": "mixed"}),
    ("newsvendor-nonperishable-censored", {}),
]


def test_the_list_covers_every_task_with_alg_star():
    from omgpt.tasks.registry import TASKS

    # the built-in tasks (tests/test_example_task.py registers the example's in the same process)
    tasks = {
        name: make_task(name) for name, factory in TASKS.items() if factory.cls.__module__.startswith("omgpt.tasks.")
    }
    # the tasks whose alg-star moves particles (queueing's posterior is exact over six rates: no moves)
    particles = {name for name, task in tasks.items() if task.has_likelihood and not task.candidates(1, 2, gen(0))[2]}
    assert particles == {name for name, _ in EVERY_TASK_WITH_ALG_STAR}
    assert all(tasks[name].has_likelihood_stats for name in particles)


@pytest.mark.parametrize("name, options", EVERY_TASK_WITH_ALG_STAR)
def test_likelihood_from_stats_is_the_sum_over_the_history(name, options):
    """Random candidates (some ruled out) against a played history with some steps ignored: the
    statistics give the sum of the per-step log-likelihoods over the used steps."""
    task = make_task(name, **options)
    h = play(task, make_policy("random", task), runs=3, horizon=9)
    n = 64
    cands = task.sample_prior(3 * n, gen(5))
    used = torch.rand(3, 9, generator=gen(6)) < 0.7
    stats, expected = None, torch.zeros(3 * n, dtype=torch.float64)
    for t in range(9):
        x, a, o = (v[:, t] for v in (h.contexts, h.actions, h.observations))
        stats = task.likelihood_stats(stats, x, a, o, t, used[:, t])
        rows = lambda v: v.repeat_interleave(n, 0).double()  # noqa: E731 -- episode i's rows i N .. (i+1) N - 1
        ll = task.log_likelihood(
            {k: v.double() if v.is_floating_point() else v for k, v in cands.items()}, rows(x), rows(a), rows(o), t
        )
        expected += torch.where(used[:, t].repeat_interleave(n), ll, 0.0)
    got = task.likelihood_from_stats(cands, stats)
    assert got.dtype == torch.float64 and got.shape == (3 * n,)
    assert (torch.isinf(got) == torch.isinf(expected)).all()
    finite = torch.isfinite(expected)
    assert finite.any()
    torch.testing.assert_close(got[finite], expected[finite], rtol=1e-9, atol=1e-7)


@pytest.mark.parametrize("name, options", EVERY_TASK_WITH_ALG_STAR)
def test_stats_and_history_likelihoods_give_the_same_rollout(name, options):
    """The same generators: the same particles, weights, Metropolis-Hastings decisions and actions."""
    task = make_task(name, **options)
    runs = {}
    for likelihood in ("history", "stats"):
        policy = make_policy("alg-star", task, particles=128, likelihood=likelihood, sampler="smc")
        runs[likelihood] = policy, play(task, policy, runs=3, horizon=15)
    (ref, h_ref), (fast, h_fast) = runs["history"], runs["stats"]
    assert (ref.rejuvenations > 0).all() and ref.likelihood == "history" and fast.likelihood == "stats"
    torch.testing.assert_close(h_fast.actions, h_ref.actions, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(fast.log_w, ref.log_w, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(fast.log_lik, ref.log_lik, rtol=1e-9, atol=1e-7)
    assert fast.acceptance_rate == ref.acceptance_rate


def test_likelihood_option_is_checked():
    with pytest.raises(OMGPTError, match="likelihood must be one of"):
        make_policy("alg-star", make_task("pricing"), likelihood="fast")
