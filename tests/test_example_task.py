"""The "add your own decision problem" example (examples/logit_pricing.py): a task that is not in the
paper, in one file, trains, evaluates against oracle / random / alg-star, and runs from the command
line -- without touching any other file."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import binom

from omgpt.commands.cli import cli_main
from omgpt.commands.evaluate import run_evaluation
from omgpt.policies import make_policy, policies_for
from omgpt.rollout import replay, rollout
from omgpt.seeding import EXPERIMENT_SEED
from omgpt.tasks import TASKS, make_task

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "logit_pricing.py"


@pytest.fixture(scope="module", autouse=True)
def example():
    """Import the example once (registering a task name twice raises)."""
    if "logit-pricing" in TASKS:  # imported before, under whatever name (tests/test_envs.py: examples.logit_pricing)
        return sys.modules[TASKS["logit-pricing"].cls.__module__]
    spec = importlib.util.spec_from_file_location("logit_pricing_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_the_optimal_price_beats_every_price_on_a_grid():
    task = make_task("logit-pricing")
    envs = task.sample_envs(512, gen(0))
    x = task.sample_context(envs, 0, gen(1))
    best = task.expected_reward(envs, x, task.optimal_action(envs, x, 0), 0)
    grid = torch.linspace(task.action_low, task.action_high, 4001)
    on_grid = torch.stack([task.expected_reward(envs, x, p.expand(512, 1), 0) for p in grid], 1).max(1).values
    assert (best >= on_grid - 1e-4).all() and (best <= on_grid + 1e-3).all()


def test_the_likelihood_is_the_simulators_binomial():
    """For one observation, ``log_likelihood`` across candidates is scipy's binomial log-pmf up to a
    constant (the binomial coefficient), and the simulator's buyers have the binomial's mean."""
    task = make_task("logit-pricing")
    cands = task.sample_envs(64, gen(2))
    x, a = task.sample_context(cands, 0, gen(3))[:1].expand(64, -1), torch.full((64, 1), 1.5)
    for buyers in (0.0, 3.0, 10.0):
        o = torch.full((64, 1), buyers)
        q = torch.sigmoid(task.utility(cands, x, a)).double().numpy()
        expected = binom.logpmf(buyers, task.customers, q)
        got = task.log_likelihood(cands, x, a, o, 0).double().numpy()
        np.testing.assert_allclose(got - got[0], expected - expected[0], atol=1e-4)
    draws = torch.stack([task.observe(cands, x, a, 0, gen(10 + i))[:, 0] for i in range(400)]).mean(0)
    torch.testing.assert_close(draws, task.mean_observation(cands, x, a, 0)[:, 0], atol=0.5, rtol=0)


def test_alg_stars_posterior_concentrates_on_the_true_pool_member():
    """On a pool of 4, after 150 random prices (informative: they vary), the posterior has moved from
    the prior's 1/4 to most of its mass on the environment that generated the history (two members of
    this pool buy alike at most prices, so not all of it)."""
    task = make_task("logit-pricing", pool_size=4)
    assert "alg-star" in policies_for(task)
    envs = task.sample_envs(16, gen(0))
    history = rollout(task, envs, make_policy("random", task), 150, gen(1), gen(2))
    alg = make_policy("alg-star", task)
    replay(alg, history, gen(3))
    truth = (envs["beta"][:, None] == task.pool["beta"][None]).float().argmax(-1)
    assert alg.posterior()[torch.arange(16), truth].mean() > 0.6


def test_it_trains_tiny_and_evaluates_against_oracle_random_and_alg_star(tmp_path):
    assert (
        cli_main(
            [
                "fit",
                "--config",
                str(ROOT / "configs/scale/tiny.yaml"),
                "--model.task",
                "logit-pricing",
                "--model.horizon",
                "12",
                "--trainer.logger.init_args.save_dir",
                str(tmp_path / "runs"),
                "--trainer.enable_progress_bar",
                "false",
            ]
        )
        == 0
    )
    (ckpt,) = (tmp_path / "runs").rglob("last.ckpt")
    summary = run_evaluation(
        None,
        {},
        ["omgpt", "oracle", "random", "alg-star"],
        str(ckpt),
        runs=16,
        horizon=12,
        window=None,
        seed=EXPERIMENT_SEED,
        out=str(tmp_path / "eval"),
        progress=False,
    )
    final = {name: p["final_regret"]["mean"] for name, p in summary["policies"].items()}
    assert summary["task"] == "logit-pricing" and np.isfinite(final["omgpt"])
    assert abs(final["oracle"]) < 1e-4
    assert 0 < final["alg-star"] < final["random"]


@pytest.mark.slow
def test_the_example_file_is_the_command_line(tmp_path):
    out = tmp_path / "eval"
    done = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE),
            "evaluate",
            "--task",
            "logit-pricing",
            "--policies",
            "oracle,random",
            "--runs",
            "4",
            "--horizon",
            "5",
            "--out",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert set(json.loads((out / "summary.json").read_text())["policies"]) == {"oracle", "random"}
