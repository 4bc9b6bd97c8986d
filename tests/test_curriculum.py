"""The horizon curriculum: the authors' schedule (docs/paper-gaps.md §6), what real Lightning fits train on, and resume."""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from omgpt.callbacks import Curriculum
from omgpt.datamodules import HistoryDataModule, HorizonCurriculum
from omgpt.commands.cli import cli_main
from omgpt.module import OMGPTModule

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def paper_horizon(m: int, target: int = 100) -> int:
    """The authors' formula (docs/paper-gaps.md §6), written out independently of the schedule: ``m`` is the
    1-based iteration, the curriculum ends at ``m = 100``."""
    return 20 * (((m - 1) // 10) % 5 + 1) if m <= 100 else target


# --------------------------------------------------------------------------------------------------
def test_paper_schedule_for_all_130_iterations():
    cb = HorizonCurriculum(stage_epochs=10, restart_epochs=[50], full_from_epoch=100)
    got = [cb.horizon_at(epoch, 100) for epoch in range(130)]
    expected = [paper_horizon(epoch + 1) for epoch in range(130)]
    assert got == expected
    # Spot checks: 20 -> 100 in stages of exactly 10 iterations (m = 1..10 at 20, m = 11 the first
    # at 40), a restart at m = 51.
    assert got[:10] == [20] * 10 and got[10] == 40 and got[40:50] == [100] * 10
    assert got[50:60] == [20] * 10 and got[60] == 40 and got[90:100] == [100] * 10 and got[100:] == [100] * 30


def test_schedule_generalises_to_other_targets():
    cb = HorizonCurriculum(stage_epochs=10, restart_epochs=[50], full_from_epoch=100)
    got = [cb.horizon_at(epoch, 50) for epoch in range(130)]
    assert sorted(set(got)) == [10, 20, 30, 40, 50]
    assert got == [paper_horizon(epoch + 1) // 2 for epoch in range(130)]  # the paper's, halved
    # Explicit start/step and no restarts: a single rise, then the target.
    cb = HorizonCurriculum(stage_epochs=2, start=5, step=10)
    assert [cb.horizon_at(e, 30) for e in range(8)] == [5, 5, 15, 15, 25, 25, 30, 30]


# --------------------------------------------------------------------------------------------------
# Through the CLI, with the shipped configs.
def test_cli_fit_trains_on_the_scheduled_horizons(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything written relative to the cwd stays in tmp_path
    monkeypatch.setattr(sys, "argv", ["omgpt"])  # LightningCLI warns when both args and sys.argv are given
    callbacks = tmp_path / "callbacks.yaml"
    callbacks.write_text(
        "data:\n"
        "  algorithm1: {curriculum: {stage_epochs: 1, restart_epochs: [], full_from_epoch: null}, mixed: null}\n"
        "trainer:\n"
        "  callbacks:\n"
        "    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
        f"      init_args: {{dirpath: {tmp_path / 'ckpt'}, save_last: true}}\n"
        "    - class_path: omgpt.callbacks.Curriculum\n"
    )
    rc = cli_main(
        [
            "fit",
            "--config", str(CONFIGS / "newsvendor.yaml"),
            "--config", str(CONFIGS / "scale/tiny.yaml"),
            "--config", str(callbacks),
            "--trainer.max_epochs", "3",
            "--trainer.limit_val_batches", "0",
            "--trainer.enable_progress_bar", "false",
            "--trainer.enable_model_summary", "false",
            "--trainer.logger.init_args.save_dir", str(tmp_path / "logs"),
            "--data.batches_per_epoch", "2",
        ]
    )  # fmt: skip
    assert rc == 0
    assert (tmp_path / "ckpt" / "last.ckpt").is_file()
    (metrics,) = (tmp_path / "logs").rglob("metrics.csv")
    seen = {}
    for row in csv.DictReader(metrics.open()):
        if row.get("train/horizon"):
            seen[int(row["epoch"])] = float(row["train/horizon"])
    assert seen == {e: float(min(100, 20 * (e + 1))) for e in range(3)}  # stage_epochs 1, target 100: 20, 40, 60


# --------------------------------------------------------------------------------------------------
# Directly with a Trainer, recording every batch.
class HorizonRecorder(Callback):
    def __init__(self):
        self.seen: dict[int, list[int]] = defaultdict(list)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.seen[trainer.current_epoch].append(batch["features"].shape[1])


TARGET = 30  # levels of ⌈30/5⌉ = 6: epoch e trains on min(30, 6 + 6e) with stage_epochs = 1


def scheduled(epoch: int) -> int:
    return min(TARGET, 6 * (epoch + 1))


def fit(ckpt_dir: Path, max_epochs: int, validate: bool, ckpt_path: str | None = None):
    L.seed_everything(0, verbose=False)
    recorder = HorizonRecorder()
    module = OMGPTModule(
        task="newsvendor",
        horizon=TARGET,
        network=dict(n_layer=2, n_head=2, n_embd=16),
    )
    data = HistoryDataModule(
        task="newsvendor",
        horizon=TARGET,
        batch_size=4,
        batches_per_epoch=2,
        chunk=2,
        val_runs=4,
        val_batch_size=4,
        algorithm1={"curriculum": {"stage_epochs": 1}},
    )
    trainer = L.Trainer(
        max_epochs=max_epochs,
        accelerator="cpu",
        reload_dataloaders_every_n_epochs=1,
        limit_val_batches=1 if validate else 0,
        num_sanity_val_steps=0,
        callbacks=[recorder, Curriculum(), ModelCheckpoint(dirpath=ckpt_dir, save_last=True)],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, datamodule=data, ckpt_path=ckpt_path)
    return recorder.seen


@pytest.mark.parametrize("validate", [False, True], ids=["no-val", "with-val"])
def test_resume_continues_the_schedule(tmp_path, validate):
    seen = fit(tmp_path / "first", max_epochs=2, validate=validate)
    assert dict(seen) == {0: [scheduled(0)] * 2, 1: [scheduled(1)] * 2}  # 12, 18: epoch 0 included

    last = tmp_path / "first" / "last.ckpt"
    ckpt = torch.load(last, map_location="cpu", weights_only=True)
    assert ckpt["epoch"] == 1  # no curriculum state in it: the horizon is a function of the epoch

    resumed = fit(tmp_path / "resumed", max_epochs=4, validate=validate, ckpt_path=str(last))
    # The resumed run goes on where the first stopped: epoch 2 trains on 24 (not epoch 0's 12).
    assert dict(resumed) == {2: [scheduled(2)] * 2, 3: [scheduled(3)] * 2}, dict(resumed)
