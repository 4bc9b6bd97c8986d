"""The sequence model: cached decoding equals re-encoding, teacher forcing equals the rollout, and
causality -- for every backbone, token layout and position encoding -- and the KV cache's contract."""

from __future__ import annotations

import pytest
import torch

from omgpt.model import ModelConfig, build_model
from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.tasks import Scaling, make_task

TOL = 1e-5  # fp32
# (backbone, layout, pos_encoding): every combination a user can build.
VARIANTS = [
    ("gpt", "paper", "learned"),
    ("gpt", "paper", "rope"),
    ("gpt", "paper", "none"),
    ("gpt", "compact", "learned"),
    ("gpt", "compact", "rope"),
    ("gpt", "compact", "none"),
    ("gpt", "transition", "learned"),
    ("gpt", "transition", "rope"),
    ("lstm", "paper", "learned"),
    ("lstm", "compact", "learned"),
    ("lstm", "transition", "learned"),
]
IDS = ["-".join(v) for v in VARIANTS]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def tiny_model(task, variant=VARIANTS[0], max_steps: int = 40, action_loc: float = 15.0, seed: int = 0):
    """2 layers, 2 heads, 16 dims, dropout 0.1. Weights are redrawn with std 0.2 (LSTM 0.3, instead of
    GPT-2's 0.02) so that the predictions depend strongly on the position and on the whole history --
    with the default init the output is nearly constant and a broken cache could go unnoticed."""
    backbone, layout, pos = variant
    torch.manual_seed(seed)
    s = task.scaling()
    scaling = Scaling(s.feature_loc, s.feature_scale, (action_loc,), (15.0,))
    cfg = ModelConfig(
        feature_dim=task.feature_dim,
        action_dim=task.action_dim,
        n_layer=2,
        n_head=2,
        n_embd=16,
        dropout=0.1,
        max_steps=max_steps,
        backbone=backbone,
        layout=layout,
        pos_encoding=pos,
    )
    model = build_model(cfg, scaling)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3 if backbone == "lstm" else 0.2)
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

    def close(self):
        self.policy.close()

    def actions(self) -> torch.Tensor:
        return torch.stack(self.raw, dim=1)  # (B, T, action_dim)


def play(task, model, horizon, batch=16, seed=0, **options):
    envs = task.sample_envs(batch, gen(seed))
    policy = Recording(make_policy("omgpt", task, model=model, **options))
    history = rollout(task, envs, policy, horizon, gen(seed + 1), gen(seed + 2))
    return history, policy.actions()


# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
@pytest.mark.parametrize("name", ["newsvendor-censored", "pricing"])
def test_cached_decoding_equals_full_recompute(name, variant):
    task, T = make_task(name), 30
    model = tiny_model(task, variant, max_steps=T)
    cached, raw_cached = play(task, model, T)
    model.train()
    full, raw_full = play(task, model, T, use_cache=False)
    assert not model.training
    assert (raw_cached - raw_full).abs().max() <= TOL
    assert (cached.actions - full.actions).abs().max() <= TOL
    # A real check: the actions vary over time within an episode, not just across environments.
    assert raw_cached.std(dim=1).mean() > 0.1


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_windowed_cache_equals_explicit_windowed_recompute(variant):
    """W = 10 on a 40-step episode with a 30-step model: cached for t < W, re-encoded after."""
    task, T, W = make_task("pricing"), 40, 10
    model = tiny_model(task, variant, max_steps=30)
    history, raw = play(task, model, T, window=W)
    model.eval()
    explicit = []
    with torch.no_grad():
        for t in range(T):
            feats, acts = history.truncate(t + 1).tokens(window=W, restart=True)  # the last min(W, t+1) steps
            assert feats.shape[1] == min(W, t + 1)
            assert (t < W) or not feats[:, 0, : task.obs_dim].any()  # a window restarts: no observation before it
            explicit.append(model(feats, acts)[:, -1])
    explicit = torch.stack(explicit, dim=1)
    assert (explicit - raw).abs().max() <= TOL
    # ... and the policy's own uncached path agrees too.
    _, raw_full = play(task, model, T, window=W, use_cache=False)
    assert (raw_full - raw).abs().max() <= TOL
    # The window matters: at t = W (11 steps seen) the whole-history prediction differs.
    with torch.no_grad():
        whole = model(*history.truncate(W + 1).tokens())[:, -1]
    assert (whole - raw[:, W]).abs().mean() > 1e-4


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_teacher_forced_forward_equals_the_rollout_before_projection(variant):
    """The action offset is set so the median raw decision is 30: the projection binds on about half of
    them, and the teacher-forced pass on the recorded history (whose actions are projected, as the
    policy saw them) must reproduce the *unprojected* decisions."""
    task, T = make_task("newsvendor-censored"), 30
    model = tiny_model(task, variant, max_steps=T, action_loc=27.0)
    _, raw = play(task, model, T)
    model.action_loc += 30.0 - raw.median()
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


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_causality(variant):
    task, T = make_task("pricing"), 20
    model = tiny_model(task, variant, max_steps=T).eval()
    g = gen(3)
    feats, acts = torch.randn(3, T, task.feature_dim, generator=g), torch.randn(3, T, 1, generator=g)
    with torch.no_grad():
        base = model(feats, acts)
        for t in (0, 7, T - 1):
            f2, a2 = feats.clone(), acts.clone()
            f2[:, t + 1 :] += torch.randn(f2[:, t + 1 :].shape, generator=g)
            a2[:, t:] += torch.randn(a2[:, t:].shape, generator=g)  # a_t comes after the decision at t
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


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_the_cache_contract(variant):
    """litgpt's contract: decoding needs a started cache for the same batch, the cache never enters a
    checkpoint, and every rollout releases it."""
    task = make_task("pricing")
    model = tiny_model(task, variant, max_steps=8).eval()
    f, a = torch.randn(4, task.feature_dim), torch.randn(4, 1)
    with torch.no_grad():
        with pytest.raises(RuntimeError, match="start_cache"):
            model.decode(0, f, None)
        model.start_cache(4, 8)
        model.decode(0, f, None)
        with pytest.raises(RuntimeError, match="batch of 4"):
            model.decode(1, f[:3], a[:3], f[:3])
        assert not any("cache" in k or "rope" in k for k in model.state_dict())
        with pytest.raises(ValueError, match="1..8"):
            model.start_cache(4, 9)
    play(task, model, 5, batch=4)
    assert all(getattr(m, "k_cache", None) is None for m in model.modules())
    assert getattr(model, "batch_size", None) is None  # the LSTM's state, likewise released


def test_positions_are_what_the_encodings_say():
    """Which position parameters and buffers each encoding has; impossible combinations are refused."""
    task = make_task("pricing")
    for pos, table in (("learned", True), ("rope", False), ("none", False)):
        model = tiny_model(task, ("gpt", "compact", pos), max_steps=8)
        assert (model.pos_emb is not None) == table
        assert (model.rope_cos is not None) == (pos == "rope")
    with pytest.raises(ValueError, match="pos_encoding"):
        build_model(ModelConfig(feature_dim=task.feature_dim, action_dim=1, backbone="lstm", pos_encoding="rope"))


def test_a_transition_token_holds_the_whole_last_transition():
    """Token ``t`` of the transition layout reads ``X_{t-1}`` itself (the compact token only through
    attention); its first token, like the compact one's, has no previous step, and decoding a later
    step without the previous feature token is refused."""
    task = make_task("pricing")
    feats, acts = torch.rand(2, 5, task.feature_dim), torch.rand(2, 5, 1)
    moved = feats.clone()
    moved[:, 2, task.obs_dim :] += 1.0  # X_2
    for layout, reads_prev in (("compact", False), ("transition", True)):
        model = tiny_model(task, ("gpt", layout, "learned"), max_steps=8)
        before, after = model.tokens(feats, acts), model.tokens(moved, acts)
        assert torch.equal(before[:, :2], after[:, :2]) and not torch.equal(before[:, 2], after[:, 2])
        assert torch.equal(before[:, 3], after[:, 3]) != reads_prev
        assert torch.equal(before[:, 4], after[:, 4])
    model.start_cache(2, 8)
    model.decode(0, feats[:, 0], None)
    with pytest.raises(ValueError, match="previous step's feature token"):
        model.decode(1, feats[:, 1], acts[:, 0])


def test_history_longer_than_max_steps_needs_a_window():
    task = make_task("newsvendor")
    model = tiny_model(task, max_steps=40).eval()
    with torch.no_grad():
        model(torch.zeros(2, 40, task.feature_dim), torch.zeros(2, 40, 1))  # exactly max_steps is fine
        with pytest.raises(ValueError, match="max_steps"):
            model(torch.zeros(2, 41, task.feature_dim), torch.zeros(2, 41, 1))
    envs = task.sample_envs(2, gen(0))
    with pytest.raises(ValueError, match="max_steps"):
        rollout(task, envs, make_policy("omgpt", task, model=model), 41, gen(1))
    history = rollout(task, envs, make_policy("omgpt", task, model=model, window=40), 41, gen(1))
    assert history.horizon == 41


# --------------------------------------------------------------------------------------------------
# The observation head (paper §3.5.3), for both backbones.
import warnings  # noqa: E402

from omgpt.datamodules.history import HistoryStream  # noqa: E402
from omgpt.module import OMGPTModule  # noqa: E402

BACKBONES = ["gpt", "lstm"]


def pricing_batch(task, batch=16, horizon=16, seed=0) -> dict:
    return next(iter(HistoryStream(task, batch_size=batch, n_batches=1, horizon=horizon, seed=seed, epoch=0, rank=0)))


def quiet_training_step(module, batch) -> torch.Tensor:
    with warnings.catch_warnings():  # self.log without a trainer only warns
        warnings.simplefilter("ignore")
        return module.training_step(batch, 0)


@pytest.mark.parametrize("backbone", BACKBONES)
def test_obs_head_off_adds_nothing_and_leaves_the_loss_unchanged(backbone):
    task = make_task("pricing")
    cfg = dict(
        feature_dim=task.feature_dim,
        action_dim=1,
        n_layer=2,
        n_head=2,
        n_embd=16,
        max_steps=16,
        backbone=backbone,
        obs_dim=task.obs_dim,
    )
    torch.manual_seed(0)
    plain = build_model(ModelConfig(**cfg), task.scaling())
    torch.manual_seed(0)
    with_obs = build_model(ModelConfig(**cfg, obs_head=True), task.scaling())
    assert plain.obs_head is None and not any("obs" in k for k in plain.state_dict())
    extra = set(with_obs.state_dict()) - set(plain.state_dict())
    assert extra == {"obs_head.weight", "obs_head.bias"}
    # The head is drawn aside: every shared weight gets the same initial draw.
    assert all(torch.equal(v, with_obs.state_dict()[k]) for k, v in plain.state_dict().items())
    with pytest.raises(ValueError, match="no observation head"):
        plain.predict_observations(torch.zeros(1, 3, task.feature_dim), torch.zeros(1, 3, 1))

    torch.manual_seed(0)
    module = OMGPTModule(
        task="pricing",
        horizon=16,
        network=dict(n_layer=2, n_head=2, n_embd=16, backbone=backbone),
    ).eval()
    batch = pricing_batch(module.task)
    with torch.no_grad():
        expected = module.loss(module.model(batch["features"], batch["actions"]), batch["targets"])
        assert quiet_training_step(module, batch) == expected


@pytest.mark.parametrize("backbone,layout", [(b, "paper") for b in BACKBONES] + [("gpt", "transition")])
def test_obs_head_learns_its_loss_term(backbone, layout):
    """A few optimisation steps of ``l + l'`` on a fixed pricing batch cut ``l'`` substantially, and
    ``training_step`` returns exactly ``l + w·l'`` with ``l'`` against the next feature token's O."""
    torch.manual_seed(0)
    module = OMGPTModule(
        task="pricing",
        horizon=16,
        network=dict(n_layer=2, n_head=2, n_embd=16, dropout=0.0, backbone=backbone, obs_head=True, layout=layout),
        obs_loss_weight=0.5,
    )
    batch = pricing_batch(module.task)
    model, obs_dim = module.model, module.task.obs_dim

    def losses():
        pred, obs = model(batch["features"], batch["actions"], observations=True)
        return module.loss(pred, batch["targets"]), module.obs_loss(obs, batch["features"], batch.get("observations"))

    with torch.no_grad():
        action_loss, obs_loss = losses()
        pred, obs = model(batch["features"], batch["actions"], observations=True)
        # l' by hand: Ô_t against O_t = features[:, t+1, :obs_dim], in the feature scaling of O.
        by_hand = (
            ((obs[:, :-1] - batch["features"][:, 1:, :obs_dim]) / module.task.scaling().feature_scale[0]).pow(2).mean()
        )
        torch.testing.assert_close(module.obs_loss(obs, batch["features"]), by_hand)
        torch.testing.assert_close(quiet_training_step(module, batch), action_loss + 0.5 * obs_loss)
    first = obs_loss.item()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(40):
        opt.zero_grad()
        quiet_training_step(module, batch).backward()
        opt.step()
    with torch.no_grad():
        assert losses()[1].item() < 0.5 * first


@pytest.mark.parametrize(
    "backbone,layout", [(b, "paper") for b in BACKBONES] + [("gpt", "compact"), ("gpt", "transition")]
)
def test_observation_predictions_sit_at_the_action_tokens(backbone, layout):
    """Ô_t sees the history up to a_t: it depends on a_t and (O_{t-1}, X_t), never on (O_t, X_{t+1})
    -- which holds O_t itself -- or anything later; the action read-out is the same as without it. In
    the one-token layouts a_t reaches Ô_t through the head's quadratic, never through the tokens, so
    the action read-out at t still does not see a_t."""
    task, T = make_task("pricing"), 12
    torch.manual_seed(1)
    model = build_model(
        ModelConfig(
            feature_dim=task.feature_dim,
            action_dim=1,
            n_layer=2,
            n_head=2,
            n_embd=16,
            max_steps=T,
            backbone=backbone,
            obs_dim=1,
            obs_head=True,
            layout=layout,
        ),
        task.scaling(),
    )
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    model.eval()
    g = gen(4)
    feats, acts = 3 * torch.randn(3, T, task.feature_dim, generator=g), 3 * torch.randn(3, T, 1, generator=g)
    with torch.no_grad():
        pred, obs = model(feats, acts, observations=True)
        assert obs.shape == (3, T, 1)
        torch.testing.assert_close(model(feats, acts), pred, rtol=0, atol=0)
        torch.testing.assert_close(model.predict_observations(feats, acts), obs, rtol=0, atol=0)
        for t in (0, 5, T - 2):
            f2, a2 = feats.clone(), acts.clone()
            f2[:, t + 1 :] += torch.randn(f2[:, t + 1 :].shape, generator=g)  # O_t onwards
            a2[:, t + 1 :] += torch.randn(a2[:, t + 1 :].shape, generator=g)
            assert (model.predict_observations(f2, a2)[:, : t + 1] - obs[:, : t + 1]).abs().max() <= 1e-6
            assert (model.predict_observations(f2, a2)[:, t + 1 :] - obs[:, t + 1 :]).abs().min() > 0
            a3 = acts.clone()
            a3[:, t] += 1.0  # the price played at t changes the predicted demand at t ...
            changed = model.predict_observations(feats, a3)
            assert (changed[:, t] - obs[:, t]).abs().min() > 1e-4
            torch.testing.assert_close(changed[:, :t], obs[:, :t], rtol=0, atol=1e-6)  # ... and nothing before it
            torch.testing.assert_close(model(feats, a3)[:, : t + 1], pred[:, : t + 1], rtol=0, atol=1e-6)  # nor a*_t


def test_one_token_layouts_read_the_observation_as_a_quadratic_in_the_action():
    """Token t does not hold a_t, so the head gives the coefficients of a quadratic in it: Ô_t at four
    equally spaced prices has a zero third difference (and a non-zero second: not merely linear)."""
    task, T = make_task("pricing"), 6
    torch.manual_seed(2)
    model = (
        build_model(
            ModelConfig(
                feature_dim=task.feature_dim,
                action_dim=1,
                n_layer=1,
                n_head=1,
                n_embd=8,
                max_steps=T,
                obs_dim=1,
                obs_head=True,
                layout="transition",
            ),
            task.scaling(),
        )
        .double()
        .eval()
    )
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
        feats, acts = torch.rand(2, T, task.feature_dim, dtype=torch.float64), torch.rand(2, T, 1, dtype=torch.float64)
        obs = []
        for k in range(4):
            a = acts.clone()
            a[:, -1] = 1.0 + 0.5 * k
            obs.append(model.predict_observations(feats, a)[:, -1, 0])
    second = obs[2] - 2 * obs[1] + obs[0]
    third = obs[3] - 3 * obs[2] + 3 * obs[1] - obs[0]
    assert third.abs().max() < 1e-9 and second.abs().min() > 1e-4


def test_obs_loss_uses_the_batch_observations_when_it_carries_them():
    """O_t sits in feature token t+1, so without ``observations`` the last action token has no target;
    with them (``History.observations``) every action token is trained, on the same values."""
    module = OMGPTModule(
        task="pricing",
        horizon=10,
        network=dict(n_layer=1, n_head=1, n_embd=8, obs_head=True),
    )
    task = module.task
    history = rollout(task, task.sample_envs(4, gen(0)), make_policy("noisy-oracle", task), 10, gen(1))
    features, obs = history.features(), history.observations
    assert torch.equal(features[:, 1:, : task.obs_dim], obs[:, :-1])
    pred = torch.randn(4, 10, 1, generator=gen(2))
    scale = module.model.obs_scale
    torch.testing.assert_close(module.obs_loss(pred, features), ((pred[:, :-1] - obs[:, :-1]) / scale).pow(2).mean())
    torch.testing.assert_close(module.obs_loss(pred, features, obs), ((pred - obs) / scale).pow(2).mean())
    batch = {"features": features, "actions": history.actions, "targets": history.optimal_actions, "observations": obs}
    module.eval()  # no dropout: the same function twice
    with torch.no_grad():
        pred, out = module.model(features, history.actions, observations=True)
        expected = module.loss(pred, batch["targets"]) + module.obs_loss(out, features, obs)
        torch.testing.assert_close(quiet_training_step(module, batch), expected)


def test_validation_logs_the_observation_heads_error_after_t_minus_1_samples(tmp_path):
    """``val/obs_mse``: on the validation rollouts, the head's squared error against the expected
    demand at the last step -- the number demand prediction's report reads after T-1 samples --
    recomputed here by hand from the same validation episodes."""
    import lightning as L

    from omgpt.datamodules.history import HistoryDataModule
    from omgpt.commands.evaluate import observation_predictions
    from omgpt.module import validation_envs, validation_rollout
    from omgpt.rollout import mean_observations

    L.seed_everything(0, verbose=False)
    module = OMGPTModule(
        task="pricing",
        horizon=6,
        network=dict(n_layer=1, n_head=1, n_embd=8, obs_head=True, layout="transition"),
    )
    data = HistoryDataModule(task="pricing", horizon=6, batch_size=4, batches_per_epoch=1, val_runs=8, val_batch_size=8)
    trainer = L.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.validate(module, data, verbose=False)
    logged = float(trainer.callback_metrics["val/obs_mse"])
    task = module.task
    envs = validation_envs(task, 8, module.hparams.val_seed)
    history = validation_rollout(
        task, envs, torch.arange(8), make_policy("omgpt", task, model=module.model), 6, module.hparams.val_seed
    )
    by_hand = (observation_predictions(module.model, history) - mean_observations(task, history)).pow(2)[:, -1].mean()
    assert logged == pytest.approx(float(by_hand), rel=1e-5) and logged > 0
    assert (
        OMGPTModule(
            task="pricing",
            horizon=6,
            network=dict(n_layer=1, n_head=1, n_embd=8),
        ).val_obs
        is None
    )  # no head, no metric
