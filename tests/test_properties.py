"""Property-based invariants of every task (hypothesis): ``a*`` lies in ``A``, projection lands in
``A``, no action beats the oracle in expectation, finite pools draw only pool members."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.tasks import TASKS, make_task

# Tasks whose per-step regret is a pseudo-regret r(X_t, a*_t) - r(X_t, a_t) given the state the
# policy is in (queueing and revenue define regret against the optimal *policy*, docs/paper-gaps.md §4).
MYOPIC = sorted(n for n in TASKS if n not in ("queueing", "revenue"))
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def in_action_set(task, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Whether each row of ``a`` lies in the task's (state-dependent) action set, up to 1e-5."""
    return torch.isclose(task.project(a, x), a, atol=1e-5).all(-1)


def midway_state(task, seed: int, t: int):
    """Environments, the step-``t`` context and the state after ``t`` steps of the random policy."""
    g = torch.Generator().manual_seed(seed)
    envs = task.start(task.sample_envs(16, g), g)
    policy = make_policy("random", task)
    policy.reset(envs, t + 1, torch.Generator().manual_seed(seed + 1))
    for s in range(t):
        x = task.sample_context(envs, s, g)
        a = task.project(policy.act(s, x), x)
        task.step(envs, x, a, task.observe(envs, x, a, s, g), s)
    return envs, task.sample_context(envs, t, g), policy


def options_for(name: str) -> dict:
    return (
        {"horizon": 20}
        if name in ("queueing", "revenue", "newsvendor-nonstationary", "newsvendor-nonstationary-censored")
        else {}
    )


@SETTINGS
@given(name=st.sampled_from(sorted(TASKS)), seed=st.integers(0, 10_000), t=st.integers(0, 15))
def test_optimal_action_lies_in_the_action_set(name, seed, t):
    task = make_task(name, **options_for(name))
    envs, x, _ = midway_state(task, seed, t)
    assert in_action_set(task, task.optimal_action(envs, x, t), x).all()


@SETTINGS
@given(name=st.sampled_from(sorted(TASKS)), seed=st.integers(0, 10_000), scale=st.floats(0.1, 1e3))
def test_projection_lands_in_the_action_set_and_fixes_its_points(name, seed, scale):
    task = make_task(name, **options_for(name))
    envs, x, _ = midway_state(task, seed, 3)
    wild = scale * torch.randn(x.shape[0], task.action_dim, generator=torch.Generator().manual_seed(seed))
    projected = task.project(wild, x)
    assert in_action_set(task, projected, x).all()
    assert torch.allclose(task.project(projected, x), projected, atol=1e-5), "projection is idempotent"


@SETTINGS
@given(name=st.sampled_from(MYOPIC), seed=st.integers(0, 10_000), t=st.integers(0, 15))
def test_no_action_beats_the_oracle_in_expectation(name, seed, t):
    task = make_task(name, **options_for(name))
    envs, x, policy = midway_state(task, seed, t)
    for _ in range(5):  # random feasible actions, plus the noisy oracle's
        a = task.project(policy.act(t, x), x)
        assert (task.regret(envs, x, a, t) >= -1e-4).all()
    assert torch.allclose(task.regret(envs, x, task.optimal_action(envs, x, t), t), torch.zeros(16), atol=1e-5)


@SETTINGS
@given(name=st.sampled_from(sorted(n for n in TASKS if TASKS[n].cls.poolable)), seed=st.integers(0, 10_000))
def test_finite_pools_draw_only_pool_members(name, seed):
    task = make_task(name, pool_size=3, pool_seed=seed, **options_for(name))
    drawn = task.sample_envs(32, torch.Generator().manual_seed(seed + 7))
    for key, values in drawn.items():
        if key in task.observed_params:  # shown in the context: drawn from the full prior (tests/test_pools.py)
            continue
        pool, rows = task.pool[key].reshape(3, -1), values.reshape(32, -1)
        assert (rows[:, None, :] == pool[None]).all(-1).any(-1).all(), key


@pytest.mark.parametrize("name", MYOPIC)
def test_oracle_has_the_lowest_regret_over_a_rollout(name):
    task = make_task(name, **options_for(name))
    envs = task.sample_envs(32, torch.Generator().manual_seed(0))
    regrets = {}
    for policy in ("oracle", "noisy-oracle", "random"):
        h = rollout(
            task,
            envs,
            make_policy(policy, task),
            20,
            torch.Generator().manual_seed(1),
            torch.Generator().manual_seed(2),
        )
        regrets[policy] = h.cumulative_regret()[:, -1]
    assert (regrets["oracle"].abs() < 1e-4).all()
    assert (regrets["noisy-oracle"] >= -1e-4).all() and (regrets["random"] >= -1e-4).all()
    assert regrets["random"].mean() > regrets["noisy-oracle"].mean() > 0
