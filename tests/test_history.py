"""What a History records and what derives from it: per-step rewards in the state each step was
played in, :func:`replay` along a recorded history, and the one token builder :func:`tokens_at`."""

from __future__ import annotations

import pytest
import torch

from omgpt.commands.experiment import optimal_reward
from omgpt.policies import make_policy
from omgpt.rollout import replay, rollout, tokens_at
from omgpt.tasks import make_episode_task, make_task

STATEFUL = ["newsvendor-nonperishable", "newsvendor-nonperishable-censored", "queueing", "revenue"]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("name", STATEFUL + ["pricing", "mab"])
def test_rewards_are_those_of_the_state_each_step_was_played_in(name):
    """Replaying the episode's states by hand (start, then ``step`` with the recorded actions and
    observations) gives back the recorded rewards and optimal rewards at every step, and the regret is
    their difference; the experiment's optimal cumulative reward is their sum."""
    horizon = 12
    task = make_episode_task(name, {}, horizon)
    envs = task.sample_envs(16, gen(0))
    h = rollout(task, envs, make_policy("random", task), horizon, gen(1), gen(2))
    state = task.start(envs, gen(1))  # no task draws randomness when it starts an episode
    for t in range(horizon):
        x, a, o = h.contexts[:, t], h.actions[:, t], h.observations[:, t]
        torch.testing.assert_close(h.rewards[:, t], task.expected_reward(state, x, a, t).float())
        torch.testing.assert_close(
            h.optimal_rewards[:, t], task.optimal_reward(state, x, t, h.optimal_actions[:, t]).float()
        )
        task.step(state, x, a, o, t)
    torch.testing.assert_close(h.regrets, h.optimal_rewards - h.rewards, atol=1e-5, rtol=0)
    torch.testing.assert_close(
        optimal_reward(h) - h.rewards.double().sum(1), h.regrets.double().sum(1), atol=1e-4, rtol=1e-6
    )


def test_rewards_recomputed_from_the_final_state_are_wrong_on_revenue_management():
    """The bug the recorded rewards fix: ``History.envs`` holds the episode's final state, so rewards
    recomputed from it after the fact use the last budget for every step -- on revenue management a
    request that fitted when it arrived counts as rejected once the budget has run out."""
    horizon = 50
    task = make_episode_task("revenue", {}, horizon)
    h = rollout(task, task.sample_envs(32, gen(0)), make_policy("oracle", task), horizon, gen(1), gen(2))
    stale = torch.stack([task.expected_reward(h.envs, h.contexts[:, t], h.actions[:, t], t) for t in range(horizon)], 1)
    assert (stale != h.rewards).any()  # from the final state: wrong
    assert (h.rewards.sum(1) > stale.sum(1)).any()


def test_replaying_a_policy_on_its_own_history_reproduces_its_actions():
    task = make_task("pricing", pool_size=4)
    envs = task.sample_envs(6, gen(0))
    h = rollout(task, envs, make_policy("alg-star", task), 10, gen(1), gen(2))
    actions, probed = replay(make_policy("alg-star", task), h, gen(2), probe=lambda policy, t, x: policy.posterior())
    torch.testing.assert_close(actions, h.actions)
    assert len(probed) == 10 and probed[0].shape == (6, 4)
    torch.testing.assert_close(
        probed[0], torch.full((6, 4), 0.25, dtype=torch.float64)
    )  # the prior before any observation


def test_replay_feeds_the_recorded_history_not_the_policys_own_actions():
    task = make_task("newsvendor")
    envs = task.sample_envs(5, gen(0))
    h = rollout(task, envs, make_policy("random", task), 8, gen(1), gen(2))
    actions, _ = replay(make_policy("oracle", task), h, gen(3))
    torch.testing.assert_close(actions, h.optimal_actions)  # the oracle's a* along the random policy's history


def test_tokens_at_is_the_windowed_slice_of_the_whole_history():
    task = make_task("pricing")
    h = rollout(task, task.sample_envs(3, gen(0)), make_policy("random", task), 9, gen(1), gen(2))
    feats, acts = h.tokens()
    assert torch.equal(feats[:, 0, : task.obs_dim], torch.zeros(3, task.obs_dim))  # O_0 = 0
    assert torch.equal(feats[:, 1:, : task.obs_dim], h.observations[:, :-1])
    for t in range(9):
        for window in (None, 1, 4, 20):
            f, a = tokens_at(h.contexts, h.actions, h.observations, t, window)
            lo = 0 if window is None else max(0, t + 1 - window)
            assert torch.equal(f, feats[:, lo : t + 1]) and torch.equal(a, acts[:, lo : t + 1])
            restarted, _ = tokens_at(h.contexts, h.actions, h.observations, t, window, restart=True)
            assert torch.equal(restarted[:, 1:], f[:, 1:]) and torch.equal(
                restarted[:, 0, task.obs_dim :], f[:, 0, task.obs_dim :]
            )
            assert torch.equal(
                restarted[:, 0, : task.obs_dim], torch.zeros(3, task.obs_dim) if lo > 0 else f[:, 0, : task.obs_dim]
            )
    # O_t itself is never read at step t: a policy builds its tokens before it observes
    later = h.observations.clone()
    later[:, 4:] = float("nan")
    assert torch.equal(tokens_at(h.contexts, h.actions, later, 4, 3)[0], feats[:, 2:5])
