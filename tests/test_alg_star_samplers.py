"""alg-star's structured samplers (``omgpt.policies.alg_star_samplers``): their weights are the exact
posterior's, recomputed here from the task's reference likelihood; the choice of sampler is checked."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy import integrate

from omgpt.errors import OMGPTError
from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.tasks import make_task
from omgpt.tasks.newsvendor import FEASIBILITY_TOL


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def play(task, policy, runs: int, horizon: int, seed: int = 0):
    envs = task.sample_envs(runs, gen(seed))
    return rollout(task, envs, policy, horizon, gen(seed + 1), gen(seed + 2))


def history_log_likelihood(task, cands: dict, history, b: int, used: torch.Tensor | None = None) -> torch.Tensor:
    """``Σ_s log P(O_s | γ, X_s, a_s)`` of episode ``b`` of ``history`` for candidates ``cands``
    ``(M, ...)``, summed with the task's reference :meth:`log_likelihood` in float64, ``(M,)``."""
    m = next(iter(cands.values())).shape[0]
    total = torch.zeros(m, dtype=torch.float64)
    for s in range(history.contexts.shape[1]):
        if used is not None and not used[s]:
            continue
        x, a, o = (v[b, s].double().expand(m, -1) for v in (history.contexts, history.actions, history.observations))
        total += task.log_likelihood(cands, x, a, o, s)
    return total


# --------------------------------------------------------------------------------------------------
# The newsvendor's noise width, integrated out in closed form.
@pytest.mark.parametrize("n", [0, 1, 2, 5, 60])
@pytest.mark.parametrize("high", [0.5, 3.7, 9.5])
def test_eps_bar_marginal_and_conditional_match_numerical_integration(n, high):
    task = make_task("newsvendor")
    c = max(1.0, high - FEASIBILITY_TOL)
    exact, _ = integrate.quad(lambda e: e**-n, c, 10.0, epsabs=0, epsrel=1e-12)
    t = lambda v: torch.tensor([v], dtype=torch.float64)  # noqa: E731
    got = task.eps_bar_log_marginal(t(0.2), t(high), t(float(n))).item()
    assert got == pytest.approx(math.log(exact), rel=1e-9, abs=1e-9)
    for u in (0.1, 0.5, 0.9):  # the conditional's u-quantile: the CDF there is u
        q = task.eps_bar_conditional(t(high), t(float(n)), t(u)).item()
        assert c <= q <= 10.0
        assert integrate.quad(lambda e: e**-n, c, q, epsabs=0, epsrel=1e-12)[0] / exact == pytest.approx(u, abs=1e-9)


def test_eps_bar_marginal_rules_out_negative_and_too_large_residuals():
    task = make_task("newsvendor")
    t = lambda *v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    out = task.eps_bar_log_marginal(t(-0.01, -0.0005, 0.0, 0.0), t(5.0, 5.0, 10.5, 10.0), t(3.0, 3.0, 3.0, 3.0))
    assert out[0] == -math.inf and math.isfinite(out[1]) and out[2] == -math.inf and math.isfinite(out[3])


def test_collapsed_weights_are_the_exact_marginal_posterior_of_w():
    """Without resampling (``ess_threshold=0``) a particle's log-weight is the log of
    ``∫ P(history | w, ε̄) dε̄`` over the prior of ``ε̄`` (up to a constant per episode), which is
    integrated here numerically from the reference likelihood."""
    task = make_task("newsvendor")
    policy = make_policy("alg-star", task, sampler="collapsed", particles=512, ess_threshold=0.0)
    history = play(task, policy, runs=2, horizon=4, seed=3)
    s = policy.structured
    assert s.rejuvenations.sum() == 0
    for b in range(2):
        log_w = s.log_w[b]
        finite = torch.isfinite(log_w).nonzero()[:, 0]
        assert 5 <= finite.numel() < 512  # the history rules some particles out, not all
        idx = torch.cat([finite[:6], (~torch.isfinite(log_w)).nonzero()[:2, 0]])
        ref = []
        for i in idx.tolist():
            w = s.w[b, i].double()[None]

            def lik(e: float) -> float:
                cands = {
                    "w": w,
                    "eps_bar": torch.tensor([e], dtype=torch.float64),
                    "h": torch.ones(1, dtype=torch.float64),
                }  # h: read off the context
                return math.exp(history_log_likelihood(task, cands, history, b, s.used[b]).item())

            # the largest residual, recomputed from the history: where the integrand starts
            residuals = history.observations[b, :, 0].double() - history.contexts[b, :, 1:].double() @ w[0]
            assert s.high[b, i].item() == pytest.approx(residuals.max().item(), abs=1e-5)
            c = max(1.0, residuals.max().item() - FEASIBILITY_TOL)
            ref.append(
                math.log(integrate.quad(lik, c, 10.0, epsrel=1e-10)[0]) if c < 10 and lik(9.999) > 0 else -math.inf
            )
        ref = torch.tensor(ref, dtype=torch.float64)
        got = log_w[idx]
        assert torch.equal(torch.isfinite(got), torch.isfinite(ref))
        k = torch.isfinite(got)
        diff = got[k] - ref[k]
        assert (diff - diff[0]).abs().max() < 1e-4  # float32 residuals in the reference likelihood


@pytest.mark.parametrize("options", [{}, {"demand_types": "square"}])
def test_index_bounds_hold_the_true_environment(options):
    """``index_bounds`` of observations drawn from an environment contain that environment's ``wᵀX~``."""
    task = make_task("newsvendor", **options)
    envs = task.sample_envs(200, gen(1))
    x = task.sample_context(envs, 0, gen(2))
    features = task.split_context(x)[1]
    o = task.observe(envs, x, torch.zeros(200, 1), 0, gen(3))[:, 0]
    lower, upper = task.index_bounds(o)
    index = (envs["w"] * features).sum(-1)
    assert (index >= lower - 1e-4).all() and (index <= upper + 1e-4).all()
    assert (upper - lower).min() > 0


def test_collapsed_sampler_repairs_particles_that_no_observation_explains():
    """Particles moved where the environment is not: the first observation rules every one out. The
    episode is re-seeded in the largest ball inside the likelihood's support (an LP), so every particle
    that carries weight explains the whole history, and the observation counts."""
    task = make_task("newsvendor")
    policy = make_policy("alg-star", task, sampler="collapsed", particles=64)
    envs = task.sample_envs(1, gen(4))
    policy.reset(envs, 8, gen(5))
    s = policy.structured
    s.w[:] = torch.tensor([[3.0, 3.0, 3.0, 3.0]])  # every demand floor far above any observation
    task_gen = gen(6)
    for t in range(8):
        x = task.sample_context(envs, t, task_gen)
        a = policy.act(t, x)
        policy.observe(t, a, task.observe(envs, x, a, t, task_gen))
        if t == 0:
            assert s.repairs.tolist() == [1] and bool(s.used[0, 0])
    weighted = torch.isfinite(s.log_w[0])
    assert weighted.any()
    x, o = s.features[0][s.used[0]].double(), s.obs[0][s.used[0]].double()
    residuals = o[None] - s.w[0][weighted].double() @ x.T
    assert residuals.min() >= -FEASIBILITY_TOL - 1e-4 and residuals.max() <= 10 + FEASIBILITY_TOL + 1e-4
    assert s.used[0].all()  # no observation was ignored


def test_collapsed_sampler_learns_the_environment():
    """Late in the episode its orders are near the oracle's: regret per step falls by an order of magnitude."""
    task = make_task("newsvendor")
    regrets = play(task, make_policy("alg-star", task, sampler="collapsed"), runs=20, horizon=60, seed=7).regrets
    assert regrets[:, 50:].mean() < 0.1 * regrets[:, :5].mean()


# --------------------------------------------------------------------------------------------------
# Pricing: importance sampling from the Gaussian posterior and the prior box.
def test_gaussian_sampler_weights_are_target_over_proposal():
    """Every point's log-weight is ``log(1{box} · likelihood) - log(mixture density)`` up to one
    constant per episode: the likelihood summed with the task's reference one, the mixture's Gaussian
    (mean and precision of the regression under the surrogate prior) recomputed here with numpy."""
    task = make_task("pricing", dim=2)
    policy = make_policy("alg-star", task, sampler="gaussian", particles=400)
    history = play(task, policy, runs=2, horizon=6, seed=5)
    s = policy.structured
    cands, log_w = s.posterior(None)
    lo, hi = (v.double().numpy() for v in task.prior_box())
    mean0, var0 = (lo + hi) / 2, (hi - lo) ** 2 / 12
    sigma2 = task.noise_std**2
    for b in range(2):
        x, a, o = (v[b].double().numpy() for v in (history.contexts, history.actions, history.observations))
        phi = np.concatenate([x, -a[:, :1] * x], axis=1)  # demand = αᵀx - βᵀx a
        precision = phi.T @ phi / sigma2 + np.diag(1 / var0)
        mean = np.linalg.solve(precision, phi.T @ o[:, 0] / sigma2 + mean0 / var0)
        rows = {k: v.reshape(2, -1, *v.shape[1:])[b] for k, v in cands.items()}
        theta = torch.cat([rows["alpha"], rows["beta"]], dim=-1).double().numpy()
        log_lik = history_log_likelihood(task, {k: v.double() for k, v in rows.items()}, history, b).numpy()
        d = theta - mean
        p = theta.shape[1]
        log_gauss = -0.5 * np.einsum("np,pq,nq->n", d, precision, d) + 0.5 * np.linalg.slogdet(precision)[1]
        log_gauss -= 0.5 * p * math.log(2 * math.pi)
        share = s.n_box / s.n
        log_mix = np.logaddexp(math.log(share) - np.log(hi - lo).sum(), math.log(1 - share) + log_gauss)
        inside = ((theta >= lo) & (theta <= hi)).all(1)
        ref = np.where(inside, log_lik - log_mix, -np.inf)
        got = log_w[b].numpy()
        assert np.array_equal(np.isfinite(got), np.isfinite(ref))
        k = ref > ref.max() - 30  # every point with a weight that counts (float32 points: rounding in the rest)
        diff = got[k] - ref[k]
        assert k.sum() > 20 and np.abs(diff - diff[0]).max() < 1e-3
        # the Gaussian part is distributed as N(mean, precision⁻¹)
        gauss = theta[s.n_box :]
        assert np.abs(gauss.mean(0) - mean).max() < 4 * np.sqrt(np.diag(np.linalg.inv(precision)).max() / len(gauss))


def test_gaussian_points_have_the_posterior_covariance():
    task = make_task("pricing", dim=2)
    policy = make_policy("alg-star", task, sampler="gaussian", particles=40_000)
    play(task, policy, runs=1, horizon=8, seed=2)
    cands, _ = policy.structured.posterior(None)
    theta = torch.cat([cands["alpha"], cands["beta"]], dim=-1).double()[policy.structured.n_box :]
    s = policy.structured
    precision = s.xtx[0] / s.noise_var + torch.diag(1 / s.var0)
    cov = torch.linalg.inv(precision)
    emp = torch.cov(theta.T)
    assert ((emp - cov).abs() / cov.diagonal().sqrt().outer(cov.diagonal().sqrt())).max() < 0.05


def test_gaussian_sampler_learns_the_environment():
    """Its regret per step falls as the default sampler's does (0.115 -> 0.012 here; "smc" 0.117 -> 0.013)."""
    task = make_task("pricing")
    regrets = play(task, make_policy("alg-star", task, sampler="gaussian"), runs=20, horizon=60, seed=7).regrets
    assert regrets[:, 50:].mean() < 0.2 * regrets[:, :5].mean()


# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, options, expected",
    [
        ("pricing", {}, "gaussian"),
        ("pricing-square", {}, "gaussian"),
        ("pricing", {"ood_shift": 0.5}, "gaussian"),
        ("pricing", {"id_shift": 0.2}, "smc"),  # its prior is a mixture over sub-boxes
        ("pricing", {"demand_types": "mixed"}, "smc"),
        ("pricing", {"pool_size": 4}, "smc"),  # a pool's posterior is exact already
        ("newsvendor", {}, "collapsed"),
        ("newsvendor-square", {}, "collapsed"),
        ("newsvendor-nonperishable", {}, "collapsed"),  # the state is in the context; the likelihood is the same
        ("newsvendor-censored", {}, "smc"),
        ("newsvendor", {"nonstationary": True}, "smc"),
        ("mab", {}, "smc"),
    ],
)
def test_auto_picks_the_structured_sampler_where_it_applies(name, options, expected):
    task = make_task(name, **options)
    policy = make_policy("alg-star", task, sampler="auto")
    assert policy.sampler == expected
    assert policy.particles == {"gaussian": 512, "collapsed": 384, "smc": 4096}[expected]
    actions = play(task, policy, runs=2, horizon=3).actions
    assert torch.isfinite(actions).all()


def test_sampler_option_is_checked():
    with pytest.raises(OMGPTError, match="sampler must be one of auto, smc, gaussian, collapsed"):
        make_policy("alg-star", make_task("pricing"), sampler="mcmc")
    with pytest.raises(OMGPTError, match="'collapsed' sampler does not apply to task 'pricing'"):
        make_policy("alg-star", make_task("pricing"), sampler="collapsed")
    with pytest.raises(OMGPTError, match="'gaussian' sampler does not apply to task 'newsvendor-censored'"):
        make_policy("alg-star", make_task("newsvendor-censored"), sampler="gaussian")
    with pytest.raises(OMGPTError, match="rejuvenate and likelihood are options of sampler='smc', not of 'collapsed'"):
        make_policy("alg-star", make_task("newsvendor"), sampler="collapsed", rejuvenate=False)
    with pytest.raises(OMGPTError, match="not of 'gaussian'"):
        make_policy("alg-star", make_task("pricing"), sampler="gaussian", likelihood="history")
    with pytest.raises(OMGPTError, match="particles >= 2, got 1"):
        make_policy("alg-star", make_task("pricing"), sampler="auto", particles=1)
    assert make_policy("alg-star", make_task("pricing")).sampler == "gaussian"  # the default is "auto"
    # "auto" keeps the particles where an option of theirs is asked for
    assert make_policy("alg-star", make_task("newsvendor"), rejuvenate=False).sampler == "smc"
    assert make_policy("alg-star", make_task("pricing"), likelihood="history").sampler == "smc"


def test_cli_evaluate_picks_the_sampler_and_records_it(tmp_path, capsys):
    from omgpt.commands.cli import cli_main

    def evaluate(out: str, *extra: str) -> int:
        base = ["evaluate", "--task", "newsvendor", "--runs", "4", "--horizon", "5", "--no-progress"]
        return cli_main([*base, "--out", str(tmp_path / out), *extra])

    assert evaluate("a", "--policies", "alg-star,fai") == 0  # the default, "auto"
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["alg_star_sampler"] == "collapsed" and set(summary["policies"]) == {"alg-star", "fai"}
    assert evaluate("b", "--policies", "alg-star,fai", "--alg_star_sampler", "smc") == 0
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["alg_star_sampler"] == "smc"
    assert evaluate("e", "--policies", "fai,oracle") == 0  # no alg-star played: nothing recorded
    assert "alg_star_sampler" not in json.loads((tmp_path / "e" / "summary.json").read_text())
    capsys.readouterr()
    assert evaluate("c", "--policies", "alg-star", "--alg_star_sampler", "gaussian") == 2
    assert evaluate("d", "--policies", "fai", "--alg_star_sampler", "auto") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "'gaussian' sampler does not apply to task 'newsvendor'" in err[0]
    assert "--alg_star_sampler applies to alg-star, and --policies fai has none" in err[-1]
    assert not (tmp_path / "c").exists() and not (tmp_path / "d").exists()


def test_alg_star_vs_commit_script_pairs_the_sides(tmp_path, capsys):
    """The yardstick and this tree play the same episodes: this tree against itself differs by 0."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("alg_star_vs_commit", root / "benchmarks" / "alg_star_vs_commit.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "r.json"
    args = ["--rev-path", str(root), "--tasks", "newsvendor", "--runs", "4", "--horizon", "5", "--batch", "2"]
    script.main([*args, "--arm", "same", "--arm", "smc=sampler=smc", "--json", str(out)])
    rows = json.loads(out.read_text())["tasks"]["newsvendor"]
    assert rows["same"]["paired_diff"] == 0.0 and rows["same"]["regret"] == rows[str(root)]["regret"]
    assert rows["smc"]["options"] == {"sampler": "smc"} and rows["smc"]["cpu_s_per_100"] > 0
    assert rows["smc"]["regret"] != rows["same"]["regret"]  # the arm's options reached alg-star
    assert "newsvendor" in capsys.readouterr().out


def test_repair_script_plays_the_three_arms_and_restores_the_repair(capsys):
    import importlib.util
    from pathlib import Path

    from omgpt.policies.alg_star_samplers import CollapsedNoiseSampler

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "alg_star_repair.py"
    spec = importlib.util.spec_from_file_location("alg_star_repair", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    repair = CollapsedNoiseSampler._repair
    means = script.main.__wrapped__(["--runs", "4", "--horizon", "6", "--seed", "10007", "--top", "2"])
    assert set(means) == {"collapsed, repair", "collapsed, no repair", "smc"}
    assert all(math.isfinite(v) and v >= 0 for v in means.values())
    assert CollapsedNoiseSampler._repair is repair and "repair - smc" in capsys.readouterr().out
