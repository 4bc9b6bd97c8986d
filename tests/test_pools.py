"""Finite pools fix the hidden parameters only: no context feature may identify the pool member.

A decision maker that can tell the pool member from what it is *shown* at t = 1 gets for free what the
Bayes-optimal ``alg-star`` has to infer from observations (the 4-environment newsvendor pool once
pooled the holding cost ``h``, the first context feature). docs/paper-gaps.md §6: whatever the context shows is
drawn as in the full prior, every episode.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.model_selection import cross_val_score
from sklearn.tree import DecisionTreeClassifier

from omgpt.tasks import make_episode_task
from omgpt.tasks.registry import TASKS
from omgpt.tasks.newsvendor import Newsvendor

POOL, EPISODES = 4, 1200


def member_index(task, envs) -> np.ndarray:
    """Which pool member each episode plays, matched on the hidden (pooled) parameters."""
    hidden = [k for k in task.pool if k not in task.observed_params]
    match = torch.ones(EPISODES, POOL, dtype=torch.bool)
    for k in hidden:
        a, b = envs[k].reshape(EPISODES, 1, -1), task.pool[k].reshape(1, POOL, -1)
        match &= (a == b).all(-1)
    assert match.any(-1).all(), "every episode plays a pool member"
    return match.float().argmax(-1).numpy()


def first_contexts(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Context ``X_1`` of ``EPISODES`` episodes of a 4-member pool, and the member each one plays."""
    task = make_episode_task(name, {"pool_size": POOL}, horizon=10)
    g = torch.Generator().manual_seed(0)
    envs = task.sample_envs(EPISODES, g)
    x = task.sample_context(task.start(envs, g), 0, g)
    return x.double().numpy(), member_index(task, envs)


def identification_accuracy(x: np.ndarray, member: np.ndarray) -> float:
    """Cross-validated accuracy of a decision tree that guesses the member from the context."""
    if x.shape[1] == 0:
        x = np.zeros((len(member), 1))
    tree = DecisionTreeClassifier(max_depth=6, random_state=0)
    return float(cross_val_score(tree, x, member, cv=3).mean())


@pytest.mark.parametrize("name", sorted(n for n in TASKS if TASKS[n].cls.poolable))
def test_no_context_feature_identifies_the_pool_member(name):
    x, member = first_contexts(name)
    chance = np.bincount(member).max() / len(member)
    assert identification_accuracy(x, member) < chance + 0.08


def test_the_check_catches_a_pooled_context_parameter(monkeypatch):
    # The old newsvendor pool fixed h, the first context feature: the tree then reads the member off X_1.
    monkeypatch.setattr(Newsvendor, "observed_params", ())
    x, member = first_contexts("newsvendor")
    assert identification_accuracy(x, member) > 0.95
