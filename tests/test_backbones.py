"""Backbones behind one interface (GPT, LSTM), the context window in training, the scale presets, and
the demand-prediction report (paper §5.1.6) -- through the CLI where a user would go."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
import yaml

from omgpt.datamodules import HistoryDataModule
from omgpt.datamodules.history import HistoryStream
from omgpt.commands.cli import cli_main
from omgpt.errors import OMGPTError
from omgpt.commands.evaluate import run_demand_prediction
from omgpt.model import GPT, LSTM, ModelConfig, NetworkConfig, SequenceModel, build_model
from omgpt.module import OMGPTModule, load_module
from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.tasks import Scaling, make_task

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-5  # fp32


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def tiny_lstm(task, max_steps: int = 40, seed: int = 0) -> LSTM:
    """2 layers, 16 dims, dropout 0.1; weights redrawn with std 0.3 (and a wide action scale) so the
    decisions depend strongly on the history -- a broken state would not go unnoticed."""
    torch.manual_seed(seed)
    s = task.scaling()
    scaling = Scaling(s.feature_loc, s.feature_scale, (15.0,), (15.0,))
    model = build_model(
        ModelConfig.build(NetworkConfig(n_layer=2, n_embd=16, dropout=0.1, backbone="lstm"), task, max_steps),
        scaling,
    )
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.train()  # the policy must switch it to eval


def play(task, model, horizon, batch=16, seed=0, **options):
    """Roll out the omgpt policy; returns the history and the raw (unprojected) decisions."""
    envs = task.sample_envs(batch, gen(seed))
    policy = make_policy("omgpt", task, model=model, **options)
    raw = []
    act = policy.act
    policy.act = lambda t, x: raw.append(act(t, x).clone()) or raw[-1]
    history = rollout(task, envs, policy, horizon, gen(seed + 1), gen(seed + 2))
    return history, torch.stack(raw, dim=1)


# --------------------------------------------------------------------------------------------------
# One interface.
def test_both_backbones_share_the_interface_the_policy_and_module_use():
    task = make_task("pricing")
    for backbone, cls in (("gpt", GPT), ("lstm", LSTM)):
        model = build_model(
            ModelConfig(feature_dim=task.feature_dim, action_dim=1, n_layer=2, n_head=2, n_embd=16, backbone=backbone),
            task.scaling(),
        )
        assert type(model) is cls and isinstance(model, SequenceModel) and model.cfg.backbone == backbone
        for name in (
            "start_cache",
            "clear_cache",
            "decode",
            "forward",
            "read_out",
            "predict_observations",
            "optimizer_groups",
            "num_params",
        ):
            assert callable(getattr(model, name)), name
        groups = model.optimizer_groups(0.1)
        assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
        assert model.num_params() == sum(p.numel() for p in model.parameters())
    lstm = build_model(ModelConfig(feature_dim=task.feature_dim, action_dim=1, n_layer=5, n_embd=16, backbone="lstm"))
    assert lstm.lstm.num_layers == 5 and not hasattr(lstm, "pos_emb")  # the recurrence orders the tokens
    with pytest.raises(ValueError, match="backbone"):
        ModelConfig(feature_dim=task.feature_dim, action_dim=1, backbone="rnn")
    with pytest.raises(OMGPTError, match="backbone"):
        OMGPTModule(task="pricing", horizon=8, network=dict(backbone="rnn"))
    OMGPTModule(
        task="pricing",
        horizon=8,
        network=dict(backbone="lstm", n_embd=18, n_head=4),
    )  # n_head is the GPT's concern


# Cached = uncached decoding, windows, teacher forcing and causality for the LSTM: tests/test_model.py
# (parametrised over every backbone, layout and position encoding).


def test_lstm_decoding_is_sequential_and_causal():
    task, T = make_task("pricing"), 12
    model = tiny_lstm(task, max_steps=T).eval()
    f, a = torch.randn(2, T, task.feature_dim, generator=gen(0)), torch.randn(2, T, 1, generator=gen(1))
    with torch.no_grad():
        base = model(f, a)
        f2, a2 = f.clone(), a.clone()
        f2[:, 6:] += 1.0
        a2[:, 5:] += 1.0
        out = model(f2, a2)
        assert (out[:, :6] - base[:, :6]).abs().max() <= 1e-6 and (out[:, 6:] - base[:, 6:]).abs().min() > 0
        model.start_cache(2, T)
        model.decode(0, f[:, 0], None)
        with pytest.raises(RuntimeError, match="sequential"):
            model.decode(2, f[:, 2], a[:, 1])  # skipped step 1
    model.clear_cache()
    assert model.state is None


# --------------------------------------------------------------------------------------------------
# The context window in training (paper §3.5.1).
def test_window_slice_is_a_contiguous_resumable_window():
    module = OMGPTModule(
        task="pricing",
        horizon=16,
        window=8,
        network=dict(n_layer=2, n_head=2, n_embd=16),
    )
    assert module.model.cfg.max_steps == 8 and module.model.pos_emb.num_embeddings == 16
    batch = next(iter(HistoryStream(module.task, batch_size=4, n_batches=1, horizon=16, seed=0, epoch=0, rank=0)))
    batch["self_rollout"] = torch.zeros(4, dtype=torch.bool)  # per-row tensors pass through
    starts = set()
    for step in range(12):
        cut = module.window_slice(batch, step)
        assert cut["features"].shape[1] == cut["actions"].shape[1] == cut["targets"].shape[1] == 8
        assert cut["self_rollout"] is batch["self_rollout"]
        s = int(torch.nonzero((batch["actions"][0] == cut["actions"][0, 0]).all(-1))[0])
        for k in ("features", "actions", "targets"):
            expected = batch[k][:, s : s + 8].clone()
            if k == "features" and s > 0:  # a slice is a history of its own: no observation before it
                expected[:, 0, : module.task.obs_dim] = 0.0
            assert torch.equal(cut[k], expected)
        assert all(torch.equal(v, module.window_slice(batch, step)[k]) for k, v in cut.items())  # deterministic
        starts.add(s)
    assert len(starts) > 3  # the start moves from batch to batch
    short = {k: v[:, :8] for k, v in batch.items() if v.dim() > 1}
    assert module.window_slice(short, 0) is short  # histories within the window are left whole


def test_trained_with_a_window_acts_beyond_its_training_horizon(tmp_path):
    """A GPT trained with W = 8 on 16-step histories sees 8-step windows in training, validates at
    T = 16, and plays T = 24 with the window -- cached and re-encoded decisions agree beyond W."""
    L.seed_everything(0, verbose=False)
    module = OMGPTModule(
        task="pricing", horizon=16, window=8, network=dict(n_layer=2, n_head=2, n_embd=16), optim={"lr": 1e-3}
    )
    data = HistoryDataModule(
        task="pricing", horizon=16, batch_size=8, batches_per_epoch=3, val_runs=8, val_batch_size=8
    )
    seen = []
    module.model.register_forward_pre_hook(lambda m, args: seen.append(args[0].shape[1]) if m.training else None)
    trainer = L.Trainer(
        max_epochs=1,
        reload_dataloaders_every_n_epochs=1,
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
        trainer.fit(module, data)
    assert seen == [8, 8, 8]
    assert np.isfinite(float(trainer.callback_metrics["val/regret"]))  # validated at T = 16 through the window
    task = make_task("pricing")
    cached, raw = play(task, module.model, 24, window=8)
    assert cached.horizon == 24 and torch.isfinite(raw).all()
    with torch.no_grad():  # redraw the weights so the decisions depend strongly on the window's content
        for p in module.model.parameters():
            p.normal_(0.0, 0.2)
    _, raw = play(task, module.model, 24, window=8)
    _, raw_full = play(task, module.model, 24, window=8, use_cache=False)
    assert (raw - raw_full).abs().max() <= TOL and raw[:, 8:].std(dim=1).mean() > 0.01
    with pytest.raises(ValueError, match="max_steps"):
        play(task, module.model, 24)


# --------------------------------------------------------------------------------------------------
# Configs.
@pytest.mark.parametrize(
    "configs, backbone, n_layer",
    [
        (["pricing.yaml", "scale/gpt4.yaml"], "gpt", 4),
        (["pricing.yaml", "scale/gpt8.yaml"], "gpt", 8),
        (["pricing.yaml", "scale/gpt12.yaml"], "gpt", 12),
        (["pricing.yaml", "scale/lstm5.yaml"], "lstm", 5),
        (["pricing.yaml", "scale/lstm12.yaml"], "lstm", 12),
        (["lstm.yaml"], "lstm", 5),
    ],
)
def test_scale_presets_build_the_paper_models(configs, backbone, n_layer):
    hp = {}
    for c in configs:
        hp.update(yaml.safe_load((ROOT / "configs" / c).read_text())["model"])
    module = OMGPTModule(**hp)
    cfg = module.model.cfg
    assert (cfg.backbone, cfg.n_layer, cfg.n_embd) == (backbone, n_layer, 256) and module.task.name == "pricing"
    if backbone == "gpt":
        assert cfg.n_head == 16


# --------------------------------------------------------------------------------------------------
# The LSTM through the CLI, with the observation head, and the demand-prediction report.
@pytest.fixture(scope="module")
def lstm_obs_ckpt(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("lstm")
    code = cli_main(
        [
            "fit",
            "--config",
            str(ROOT / "configs/pricing.yaml"),
            "--config",
            str(ROOT / "configs/scale/tiny.yaml"),
            "--model.network.backbone",
            "lstm",
            "--model.network.obs_head",
            "true",
            "--model.horizon",
            "12",
            "--trainer.logger.init_args.save_dir",
            str(tmp / "runs"),
            "--trainer.log_every_n_steps",
            "1",
            "--trainer.enable_progress_bar",
            "false",
        ]
    )
    assert code == 0
    (ckpt,) = (tmp / "runs").rglob("last.ckpt")
    return ckpt


def test_lstm_fits_through_the_cli_loads_and_evaluates(lstm_obs_ckpt, tmp_path):
    module = load_module(str(lstm_obs_ckpt))
    assert (
        isinstance(module.model, LSTM)
        and module.hparams.network["backbone"] == "lstm"
        and module.model.obs_head is not None
    )
    metrics = (lstm_obs_ckpt.parents[1] / "metrics.csv").read_text().splitlines()
    header, rows = metrics[0].split(","), [line.split(",") for line in metrics[1:]]
    col = header.index("train/obs_loss")
    assert any(r[col] and np.isfinite(float(r[col])) for r in rows)
    out = tmp_path / "eval"
    assert (
        cli_main(
            [
                "evaluate",
                "--policies",
                "omgpt,oracle",
                "--ckpt",
                str(lstm_obs_ckpt),
                "--runs",
                "4",
                "--horizon",
                "12",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["task"] == "pricing" and np.isfinite(summary["policies"]["omgpt"]["final_regret"]["mean"])


def test_demand_prediction_report(lstm_obs_ckpt, tmp_path):
    out = tmp_path / "demand"
    summary = run_demand_prediction(
        str(lstm_obs_ckpt), {}, runs=6, horizon=12, window=None, seed=1, out=str(out), progress=False
    )
    saved = json.loads((out / "demand_prediction.json").read_text())
    assert saved == json.loads(json.dumps(summary))
    assert saved["n"] == list(range(1, 12)) and saved["ridge_lambda"] == 0.1 and saved["runs"] == 6
    for method in ("omgpt", "ridge"):
        m = saved["methods"][method]
        assert len(m["mse"]) == 11 and all(np.isfinite(m["mse"])) and all(v >= 0 for v in m["mse"])
        assert all(lo <= mid <= hi for lo, mid, hi in zip(m["ci90"][0], m["mse"], m["ci90"][1]))
    assert (out / "demand_prediction.png").stat().st_size > 10_000
    # Window: past max_steps the head reads the last W steps.
    windowed = run_demand_prediction(
        str(lstm_obs_ckpt), {}, runs=2, horizon=16, window=6, seed=1, out=str(tmp_path / "w"), progress=False
    )
    assert len(windowed["methods"]["omgpt"]["mse"]) == 15


def _fake_ckpt(path: Path, obs_head: bool = False, **hparams) -> str:
    module = OMGPTModule(network=dict(n_layer=1, n_head=1, n_embd=8, obs_head=obs_head), horizon=8, **hparams)
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}, path)
    return str(path)


def test_demand_prediction_needs_an_obs_head_and_a_scalar_observation(tmp_path, capsys):
    plain = _fake_ckpt(tmp_path / "plain.ckpt", task="pricing")
    with pytest.raises(OMGPTError, match="no observation head"):
        run_demand_prediction(plain, {}, runs=2, horizon=8, window=None, seed=0, out=str(tmp_path / "x"))
    bandit = _fake_ckpt(tmp_path / "mab.ckpt", task="mab", obs_head=True)  # discrete arms, no context
    with pytest.raises(OMGPTError, match="scalar observation"):
        run_demand_prediction(bandit, {}, runs=2, horizon=8, window=None, seed=0, out=str(tmp_path / "x"))
    assert not (tmp_path / "x").exists()
    # any task with a scalar observation in a context has a mean observation to predict: the newsvendor's demand
    newsvendor = _fake_ckpt(tmp_path / "nv.ckpt", task="newsvendor", obs_head=True)
    summary = run_demand_prediction(newsvendor, {}, runs=2, horizon=8, window=None, seed=0, out=str(tmp_path / "x"))
    assert len(summary["methods"]["ridge"]["mse"]) == 7


def test_ridge_baseline_recovers_linear_demand():
    """Noise-free linear demand with d = 2: after enough samples ridge (λ = 0.1) predicts it closely,
    and matches the closed form (ZᵀZ + λI)⁻¹Zᵀy."""
    from omgpt.analysis.observation_head import ridge_predictions

    rng = np.random.default_rng(0)
    x, a = rng.uniform(0, 2.5, (3, 30, 2)), rng.uniform(0, 3, (3, 30, 1))
    alpha, beta = rng.uniform(0.5, 1.5, (3, 1, 2)), rng.uniform(0.05, 1.05, (3, 1, 2))
    demand = ((alpha * x).sum(-1) - (beta * x).sum(-1) * a[..., 0])[..., None]
    pred = ridge_predictions(x, a, demand)
    assert np.isnan(pred[:, 0]).all()
    assert np.abs(pred[:, 20:] - demand[:, 20:, 0]).max() < 0.05
    z = np.concatenate([x, a * x], axis=-1)
    n = 3
    w = np.linalg.solve(z[0, :n].T @ z[0, :n] + 0.1 * np.eye(4), z[0, :n].T @ demand[0, :n, 0])
    assert pred[0, n] == pytest.approx(z[0, n] @ w, rel=1e-6)
    # asked for some sample counts only (time_to_quality's last point), those columns are the same fits
    some = ridge_predictions(x, a, demand, samples=[3, 29])
    np.testing.assert_array_equal(some[:, [3, 29]], pred[:, [3, 29]])
    assert np.isnan(np.delete(some, [3, 29], axis=1)).all()
