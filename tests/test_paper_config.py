"""The paper scale's optimisation and checkpoint rule are the authors' (docs/paper-gaps.md §6), as the CLI resolves them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from omgpt.commands.cli import cli_main
from omgpt.module import OMGPTModule

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def resolved(capsys, *args: str) -> dict:
    """The config LightningCLI resolves for ``omgpt fit ARGS`` (``--print_config``: no training)."""
    try:
        cli_main(["fit", *args, "--print_config"])
    except SystemExit as e:  # LightningCLI exits after printing
        assert e.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


def checkpoint_monitors(config: dict) -> list[str]:
    return [
        c["init_args"]["monitor"]
        for c in config["trainer"]["callbacks"]
        if c["class_path"].endswith("Checkpoint") and c["init_args"].get("monitor")
    ]


def test_paper_scale_warms_up_clips_and_keeps_the_mean_plus_sd_checkpoint(capsys):
    config = resolved(
        capsys, "--config", str(CONFIGS / "newsvendor.yaml"), "--config", str(CONFIGS / "scale/paper.yaml")
    )
    assert config["model"]["optim"]["warmup_steps"] == 1000 and config["model"]["optim"]["schedule"] == "constant"
    assert config["model"]["optim"]["lr"] == pytest.approx(1e-4)
    assert config["trainer"]["gradient_clip_val"] == pytest.approx(0.25)
    assert checkpoint_monitors(config) == ["val/regret_ucb"]


@pytest.mark.parametrize("layer", ["scale/cpu.yaml", "demo.yaml"])
def test_cpu_scale_and_demo_keep_their_measured_schedule(capsys, layer):
    config = resolved(capsys, "--config", str(CONFIGS / "newsvendor.yaml"), "--config", str(CONFIGS / layer))
    assert config["model"]["optim"]["warmup_steps"] == 100 and config["model"]["optim"]["schedule"] == "cosine"
    assert config["trainer"]["gradient_clip_val"] is None
    assert checkpoint_monitors(config) == ["val/regret_ucb"]


PAPER = {"curriculum": {"stage_epochs": 10, "restart_epochs": [50], "full_from_epoch": 100}, "mixed": 50}


@pytest.mark.parametrize(
    "layers, callbacks, algorithm1",
    [
        (
            ["newsvendor.yaml"],
            ["ResumableCheckpoint", "LearningRateMonitor", "Curriculum", "SelfRolloutRefresh"],
            PAPER,
        ),
        (
            ["newsvendor.yaml", "scale/paper.yaml"],
            ["ResumableCheckpoint", "LearningRateMonitor", "Curriculum", "SelfRolloutRefresh"],
            PAPER,
        ),
        (["demo.yaml"], ["ResumableCheckpoint", "LearningRateMonitor"], {"curriculum": None, "mixed": None}),
        (
            ["newsvendor.yaml", "scale/cpu.yaml"],
            ["ResumableCheckpoint", "LearningRateMonitor", "SelfRolloutRefresh"],
            {"curriculum": None, "mixed": 15},
        ),
        (["pretrained/newsvendor.yaml"], ["ResumableCheckpoint"], {"curriculum": None, "mixed": None}),
        (["pretrained/pricing.yaml"], ["ResumableCheckpoint", "SelfRolloutRefresh"], {"curriculum": None, "mixed": 20}),
    ],
)
def test_print_config_shows_each_configs_callbacks_and_algorithm1(capsys, layers, callbacks, algorithm1):
    """The demo, the CPU scale and the reference models replace base.yaml's callbacks with their own, and
    say their own Algorithm 1 (the paper's curriculum and mixed phase from epoch 50 in base.yaml), each
    part with the callback that applies it."""
    config = resolved(capsys, *[a for layer in layers for a in ("--config", str(CONFIGS / layer))])
    assert [c["class_path"].rsplit(".", 1)[-1] for c in config["trainer"]["callbacks"]] == callbacks
    assert checkpoint_monitors(config) == ["val/regret_ucb"]
    schedule = config["data"]["algorithm1"]
    curriculum, mixed = schedule["curriculum"], schedule["mixed"]
    want = algorithm1["curriculum"]
    assert (curriculum is None) == (want is None) and all(curriculum[k] == v for k, v in (want or {}).items())
    assert (mixed and mixed["start_epoch"]) == algorithm1["mixed"]


@pytest.mark.parametrize("layers", [["pricing_mixed.yaml"], ["pricing_mixed.yaml", "nonperishable.yaml"]])
def test_the_interpretability_configs_resolve_with_their_recipe(capsys, layers):
    """tools/interpretability_train.py's configs live beside their results, outside configs/, so no
    other test resolves them: a settings rename (model.lr -> model.optim.lr) once left them unusable."""
    folder = CONFIGS.parent / "results" / "interpretability"
    config = resolved(capsys, *[a for layer in layers for a in ("--config", str(folder / layer))])
    assert config["model"]["optim"]["lr"] == pytest.approx(1e-3) and config["model"]["optim"]["schedule"] == "cosine"
    # every epoch's checkpoint kept (the training-OOD map compares them), and the mixed phase applied
    assert [c["class_path"].rsplit(".", 1)[-1] for c in config["trainer"]["callbacks"]] == [
        "ModelCheckpoint",
        "SelfRolloutRefresh",
    ]
    assert config["data"]["algorithm1"]["mixed"]["start_epoch"] == 15


def test_shared_callback_blocks_are_written_once():
    """The checkpoint rule and the learning-rate monitor live in configs/trainer/callback/; configs list them by path."""

    def holding(text: str) -> list[str]:
        return sorted(str(p.relative_to(CONFIGS)) for p in CONFIGS.rglob("*.yaml") if text in p.read_text())

    assert holding("monitor: val/regret_ucb") == ["trainer/callback/checkpoint.yaml"]
    assert holding("LearningRateMonitor") == ["trainer/callback/lr_monitor.yaml"]


def test_no_config_folder_shadows_a_project_package():
    """jsonargparse enters a config's folder to read the files it lists by relative path; a Python started
    with '' on sys.path (a notebook, ``python -c``) then imports ``configs/callbacks/`` as a namespace
    package named ``callbacks`` instead of the project's, and every ``callbacks.X`` class path fails."""
    packages = {p.parent.name for p in CONFIGS.parent.glob("*/__init__.py")}
    folders = {p.name for p in CONFIGS.rglob("*") if p.is_dir()}
    assert packages >= {"callbacks", "omgpt", "datamodules"} and not folders & packages


def test_warm_up_is_linear_over_1000_steps_then_constant():
    module = OMGPTModule(
        task="newsvendor",
        horizon=4,
        network=dict(n_layer=1, n_head=1, n_embd=8),
        optim=dict(lr=1e-4, warmup_steps=1000),
    )
    module.trainer = SimpleNamespace(estimated_stepping_batches=1500)  # what configure_optimizers reads
    opt = module.configure_optimizers()
    scheduler = opt["lr_scheduler"]["scheduler"]
    lrs = []
    for _ in range(1500):
        lrs.append(scheduler.get_last_lr()[0])
        opt["optimizer"].step()
        scheduler.step()
    assert lrs[0] == pytest.approx(1e-7) and lrs[499] == pytest.approx(5e-5) and lrs[999] == pytest.approx(1e-4)
    assert lrs[1000:] == pytest.approx([1e-4] * 500)


def test_val_regret_ucb_is_the_mean_plus_one_standard_deviation():
    from omgpt.metrics import MeanCurve

    curve = MeanCurve(2)
    finals = torch.tensor([1.0, 2.0, 6.0])  # mean 3, population sd sqrt(14/3)
    curve.update(torch.stack([finals / 2, finals], dim=1))
    mean, sd = curve.compute()[-1], curve.std()[-1]
    assert float(mean + sd) == pytest.approx(3.0 + (14 / 3) ** 0.5)
