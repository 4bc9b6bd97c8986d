"""The GPT: KV-cached decoding equals re-encoding, teacher forcing equals the rollout, causality."""
from __future__ import annotations

import pytest
import torch

from omgpt.model import GPT, GPTConfig
from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.tasks import Scaling, make_task

TOL = 1e-5  # fp32


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def tiny_gpt(task, max_steps: int = 40, action_loc: float = 15.0, seed: int = 0) -> GPT:
    """2 layers, 2 heads, 16 dims, dropout 0.1. Weights are redrawn with std 0.2 (instead of GPT-2's
    0.02) so that the predictions depend strongly on the position and on the whole history -- with the
    default init the output is nearly constant and a broken cache could go unnoticed."""
    torch.manual_seed(seed)
    s = task.scaling()
    scaling = Scaling(s.feature_loc, s.feature_scale, (action_loc,), (15.0,))
    model = GPT(GPTConfig(task.feature_dim, task.action_dim, n_layer=2, n_head=2, n_embd=16, dropout=0.1, max_steps=max_steps), scaling)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model.train()  # the policy must switch it to eval, or dropout would break every comparison


class Recording:
    """Wraps a policy and keeps the actions it returns *before* the rollout projects them onto A."""

    def __init__(self, policy):
        self.policy, self.raw = policy, []

    def reset(self, envs, horizon, generator):
        self.raw = []
        self.policy.reset(envs, horizon, generator)

    def act(self, t, x):
        a = self.policy.act(t, x)
        self.raw.append(a.clone())
        return a

    def observe(self, t, actions, observations):
        self.policy.observe(t, actions, observations)

    def actions(self) -> torch.Tensor:
        return torch.stack(self.raw, dim=1)  # (B, T, action_dim)


def play(task, model, horizon, batch=16, seed=0, **options):
    envs = task.sample_envs(batch, gen(seed))
    policy = Recording(make_policy("omgpt", task, model=model, **options))
    history = rollout(task, envs, policy, horizon, gen(seed + 1), gen(seed + 2))
    return history, policy.actions()


# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["newsvendor", "newsvendor-censored", "pricing"])
def test_kv_cache_equals_full_recompute(name):
    task, T = make_task(name), 40
    model = tiny_gpt(task, max_steps=T)
    cached, raw_cached = play(task, model, T)
    model.train()
    full, raw_full = play(task, model, T, use_cache=False)
    assert not model.training
    assert (raw_cached - raw_full).abs().max() <= TOL
    assert (cached.actions - full.actions).abs().max() <= TOL
    # A real check: the actions vary over time within an episode, not just across environments.
    assert cached.actions.std(dim=1).mean() > 0.3


@pytest.mark.parametrize("name", ["newsvendor", "pricing"])
def test_windowed_cache_equals_explicit_windowed_recompute(name):
    """W = 10 on a 60-step episode with a 40-step model: cached for t < W, re-encoded after."""
    task, T, W = make_task(name), 60, 10
    model = tiny_gpt(task, max_steps=40)
    history, raw = play(task, model, T, window=W)
    model.eval()
    explicit = []
    with torch.no_grad():
        for t in range(T):
            feats, acts = history.truncate(t + 1).tokens(window=W)  # the last min(W, t+1) steps
            assert feats.shape[1] == min(W, t + 1)
            explicit.append(model(feats, acts)[:, -1])
    explicit = torch.stack(explicit, dim=1)
    assert (explicit - raw).abs().max() <= TOL
    # ... and the policy's own uncached path agrees too.
    _, raw_full = play(task, model, T, window=W, use_cache=False)
    assert (raw_full - raw).abs().max() <= TOL
    # The window matters: at t = W (11 steps seen) the whole-history prediction differs.
    with torch.no_grad():
        whole = model(*history.truncate(W + 1).tokens())[:, -1]
    assert (whole - raw[:, W]).abs().min() > 1e-4


@pytest.mark.parametrize("name", ["newsvendor-censored", "pricing"])
def test_teacher_forced_forward_equals_the_rollout_before_projection(name):
    """action_loc = 27 puts many raw decisions above 30, so the projection binds: the teacher-forced
    pass on the recorded history (whose actions are projected, as the policy saw them) must reproduce
    the *unprojected* decisions."""
    task, T = make_task(name), 40
    model = tiny_gpt(task, max_steps=T, action_loc=27.0)
    history, raw = play(task, model, T)
    assert (raw > 30).any() and (raw < 30).any()
    torch.testing.assert_close(history.actions, raw.clamp(0, 30), rtol=0, atol=0)
    with torch.no_grad():
        pred = model(history.features(), history.actions)
    assert pred.shape == raw.shape == (16, T, 1)
    assert (pred - raw).abs().max() <= TOL
    # Feeding the unprojected actions instead is a different history: the check can fail.
    with torch.no_grad():
        wrong = model(history.features(), raw)
    assert (wrong - raw).abs().max() > 1e-3


def test_causality():
    task, T = make_task("pricing"), 20
    model = tiny_gpt(task, max_steps=T).eval()
    g = gen(3)
    feats, acts = torch.randn(3, T, task.feature_dim, generator=g), torch.randn(3, T, 1, generator=g)
    with torch.no_grad():
        base = model(feats, acts)
        for t in (0, 7, T - 1):
            f2, a2 = feats.clone(), acts.clone()
            f2[:, t + 1 :] += torch.randn(f2[:, t + 1 :].shape, generator=g)
            a2[:, t:] += torch.randn(a2[:, t:].shape, generator=g)  # a_t comes after feature token t
            out = model(f2, a2)
            assert (out[:, : t + 1] - base[:, : t + 1]).abs().max() <= 1e-6
            if t + 1 < T:
                assert (out[:, t + 1 :] - base[:, t + 1 :]).abs().min() > 0
        # The past does matter: a_{t-1} and (O_{t-1}, X_t) change the prediction at t.
        a3 = acts.clone()
        a3[:, 6] += 1.0
        assert (model(feats, a3)[:, 7] - base[:, 7]).abs().min() > 1e-4
        f3 = feats.clone()
        f3[:, 7] += 1.0
        assert (model(f3, acts)[:, 7] - base[:, 7]).abs().min() > 1e-4


def test_history_longer_than_max_steps_needs_a_window():
    task = make_task("newsvendor")
    model = tiny_gpt(task, max_steps=40).eval()
    with torch.no_grad():
        model(torch.zeros(2, 40, task.feature_dim), torch.zeros(2, 40, 1))  # exactly max_steps is fine
        with pytest.raises(ValueError, match="max_steps"):
            model(torch.zeros(2, 41, task.feature_dim), torch.zeros(2, 41, 1))
    envs = task.sample_envs(2, gen(0))
    with pytest.raises(ValueError, match="max_steps"):
        rollout(task, envs, make_policy("omgpt", task, model=model), 41, gen(1))
    history = rollout(task, envs, make_policy("omgpt", task, model=model, window=40), 41, gen(1))
    assert history.horizon == 41
