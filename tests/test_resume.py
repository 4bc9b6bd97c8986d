"""Fault tolerance: a fit killed with SIGKILL -- mid-epoch, or at an epoch boundary -- and resumed
from ``last.ckpt`` ends exactly where an uninterrupted run with the same seed ends. (Killed and
resumed under 2-process DDP: tests/test_ddp.py.)

Everything runs through ``python -m omgpt fit`` in subprocesses, with ``configs/trainer/fault_tolerant.yaml``
(its step interval shortened to 2). The fit is the tiny newsvendor one, streaming fresh histories
(``history_pool: null``), dropout 0.05, 3 epochs: epoch 0 has 5 batches at horizon 3; epochs 1 and
2 are Algorithm 1's mixed phase (self-rollouts, 2 batches each) at horizons 6 and 9. It is killed
twice: at step 2 (mid-epoch 0: the stream, optimizer and RNG must continue) and, after the first
resume, at step 6 (mid-epoch 1: also the curriculum stage and the epoch's self-rollout set). The
epoch-boundary test runs epochs of 1, 2 and 2 batches and kills at both kinds of boundary.

The comparison is exact (bit-identical weights, batches and validation metrics), not a tolerance:
one thread, CPU, every random stream seeded -- nothing legitimately differs between the runs.
"""

from __future__ import annotations

import pytest

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import yaml

from omgpt.module import load_module
from tests.ddp_probe import kill_when_stalled, params_hash

ROOT = Path(__file__).resolve().parents[1]
STEPS = 9  # 5 + 2 + 2


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def fault_tolerant_config(tmp: Path, every: int) -> Path:
    """The shipped configs/trainer/fault_tolerant.yaml with a shorter step interval."""
    cfg = yaml.safe_load((ROOT / "configs/trainer/fault_tolerant.yaml").read_text())
    (ckpt,) = cfg["trainer"]["callbacks+"]
    assert ckpt["class_path"].endswith("ModelCheckpoint") and ckpt["init_args"]["save_last"] is True
    ckpt["init_args"]["every_n_train_steps"] = every
    path = tmp / "fault_tolerant.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def fit_command(tmp: Path, run: str, *extra: str, every: int = 2, batches: int = 5) -> list[str]:
    """The tiny fit: epoch 0 has ``batches`` batches, epochs 1 and 2 (the mixed phase) 2 each; a
    step checkpoint every ``every`` steps."""
    return [
        sys.executable, "-m", "omgpt", "fit",
        "--config", str(ROOT / "configs/newsvendor.yaml"),
        "--config", str(ROOT / "configs/scale/tiny.yaml"),
        "--config", str(fault_tolerant_config(tmp, every)),
        "--model.horizon", "12", "--data.history_pool", "null",
        "--data.batches_per_epoch", str(batches), "--trainer.max_epochs", "3",
        "--trainer.logger.init_args.save_dir", str(tmp / run / "runs"),
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.callbacks+=tests.ddp_probe.Probe", "--trainer.callbacks.out", str(tmp / run / "probe"),
        *extra,
    ]  # fmt: skip


def start(cmd: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=log.open("w"), stderr=subprocess.STDOUT)


def kill_at(tmp: Path, run: str, step: int, *extra: str, where: str = "train", **fit) -> Path:
    """Start a fit that stalls after ``step`` (its step checkpoint written) -- at the start of the next
    step, or ``where="validation"`` in the validation that follows it -- SIGKILL it there, and return
    its last.ckpt."""
    stall = tmp / run / "stall"
    stall_args = ("--trainer.callbacks+=tests.ddp_probe.Stall", "--trainer.callbacks.out", str(stall),
                  "--trainer.callbacks.at_step", str(step), "--trainer.callbacks.where", where)  # fmt: skip
    kill_when_stalled(fit_command(tmp, run, *stall_args, *extra, **fit), tmp / f"{run}.log", stall, cwd=ROOT, env=env())
    (last,) = (tmp / run / "runs").rglob("last.ckpt")
    return last


def probe(tmp: Path, run: str) -> dict:
    return json.loads((tmp / run / "probe" / "rank0.json").read_text())


# The paper's targets, and the posterior-weighted action target with the noise-free observation target
# (their particles and expected observations must be drawn alike after a resume).
TARGETS = {
    "paper": (),
    "posterior": ("--model.target", "posterior", "--model.network.obs_head", "true", "--model.obs_target", "mean"),
}


@pytest.mark.slow
@pytest.mark.parametrize("targets", TARGETS)
def test_sigkill_mid_epoch_and_resume_end_at_the_uninterrupted_weights(tmp_path, targets):
    extra = TARGETS[targets]
    # The reference run, in parallel with the interrupted ones (two cores).
    reference = start(fit_command(tmp_path, "reference", *extra), tmp_path / "reference.log")

    first = kill_at(tmp_path, "killed1", 2, *extra)
    ckpt = torch.load(first, map_location="cpu", weights_only=True)  # a step checkpoint loads safely
    assert ckpt["global_step"] == 2 and ckpt["epoch"] == 0  # mid-epoch: 2 of epoch 0's 5 batches
    first_minutes = ckpt["trained_minutes"]
    second = kill_at(tmp_path, "killed2", 6, "--ckpt_path", str(first), *extra)
    ckpt = torch.load(second, map_location="cpu", weights_only=True)
    assert all(b > a > 0 for a, b in zip(first_minutes, ckpt["trained_minutes"]))  # the clocks went on
    assert ckpt["global_step"] == 6 and ckpt["epoch"] == 1  # mid-epoch: 1 of epoch 1's 2 batches
    load_module(str(second))  # and as a model for `omgpt evaluate`

    resumed = start(fit_command(tmp_path, "resumed", "--ckpt_path", str(second), *extra), tmp_path / "resumed.log")
    for name, proc in (("reference", reference), ("resumed", resumed)):
        assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-3000:]

    ref = probe(tmp_path, "reference")
    pieces = [probe(tmp_path, run) for run in ("killed1", "killed2", "resumed")]
    for piece, at in zip(pieces, (2, 6)):  # the killed runs had fetched the batch they stalled on
        piece["batches"] = [b for b in piece["batches"] if b["step"] < at]
    key = lambda b: (b["epoch"], b["batch_idx"])  # noqa: E731

    # Data streams, step counter, curriculum stage: the three pieces are the reference's batches,
    # each resumed piece starting exactly where the killed one stopped (no batch replayed or lost).
    assert [len(p["batches"]) for p in pieces] == [2, 4, 3]
    stitched = [b for p in pieces for b in p["batches"]]
    assert [key(b) for b in stitched] == [key(b) for b in ref["batches"]]
    assert [b["horizon"] for b in stitched] == [b["horizon"] for b in ref["batches"]] == [3] * 5 + [6] * 2 + [9] * 2
    assert [b["hash"] for b in stitched] == [b["hash"] for b in ref["batches"]], (
        "a resumed run trained on other batches"
    )
    assert pieces[-1]["global_step"] == ref["global_step"] == STEPS

    # Optimizer, LR schedule, RNG (dropout 0.05): bit-identical final weights, in memory and on disk.
    assert pieces[-1]["param_hash"] == ref["param_hash"]
    assert pieces[-1]["param_sum"] == ref["param_sum"]
    (final,) = (tmp_path / "resumed" / "runs").rglob("last.ckpt")
    assert params_hash_of(final) == ref["param_hash"]
    # last.ckpt is the latest state in every run, whichever ModelCheckpoint wrote it last -- the epoch-end
    # one (validation) or the step one -- not an older step beside a newer last-v1.ckpt.
    for run in ("reference", "resumed"):
        ckpts = sorted(p.name for p in (tmp_path / run / "runs").rglob("last*.ckpt"))
        assert ckpts == ["last.ckpt"], (run, ckpts)
    (last,) = (tmp_path / "reference" / "runs").rglob("last.ckpt")
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == STEPS
    # Validation after the resumed epochs sees the same model: the same metrics.
    assert pieces[-1]["val_logged"] == ref["val_logged"][-len(pieces[-1]["val_logged"]) :]


def params_hash_of(path: Path) -> str:
    return params_hash(load_module(str(path)))


@pytest.mark.slow
def test_sigkill_at_epoch_boundaries_with_unequal_epochs_and_resume_end_at_the_uninterrupted_weights(tmp_path):
    """Killed at both kinds of epoch boundary, with the next epoch longer (1 batch, then the mixed
    phase's 2): after the step checkpoint of the epoch's last batch, during its validation (so before
    the epoch-end checkpoint); and after the epoch-end checkpoint, before the next epoch's first step.
    The resumed runs validate each killed epoch once, train every batch of the next one and end at the
    uninterrupted run's weights."""
    fit = {"every": 1, "batches": 1}  # epochs of 1, 2, 2 batches; a step checkpoint after every step
    reference = start(fit_command(tmp_path, "reference", **fit), tmp_path / "reference.log")

    first = kill_at(tmp_path, "killed1", 1, where="validation", **fit)
    ckpt = torch.load(first, map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 1 and ckpt["epoch"] == 0  # epoch 0's last (only) batch, not yet validated
    second = kill_at(tmp_path, "killed2", 1, "--ckpt_path", str(first), **fit)
    ckpt = torch.load(second, map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 1 and ckpt["epoch"] == 0  # written after epoch 0's validation
    assert ckpt["loops"]["fit_loop"]["epoch_loop.val_loop.batch_progress"]["total"]["completed"] > 0
    third = kill_at(tmp_path, "killed3", 3, "--ckpt_path", str(second), where="validation", **fit)
    ckpt = torch.load(third, map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 3 and ckpt["epoch"] == 1  # epoch 1's last batch, not yet validated

    resumed = start(fit_command(tmp_path, "resumed", "--ckpt_path", str(third), **fit), tmp_path / "resumed.log")
    for name, proc in (("reference", reference), ("resumed", resumed)):
        assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-3000:]

    ref = probe(tmp_path, "reference")
    pieces = [probe(tmp_path, run) for run in ("killed1", "killed2", "killed3", "resumed")]
    pieces[1]["batches"] = [b for b in pieces[1]["batches"] if b["step"] < 1]  # it had fetched the batch it stalled on
    key = lambda b: (b["epoch"], b["batch_idx"], b["horizon"], b["hash"])  # noqa: E731
    assert [len(p["batches"]) for p in pieces] == [1, 0, 2, 2]
    assert [key(b) for p in pieces for b in p["batches"]] == [key(b) for b in ref["batches"]]
    assert ref["per_epoch"] == {"0": 1, "1": 2, "2": 2} and pieces[-1]["global_step"] == ref["global_step"] == 5
    assert pieces[-1]["param_hash"] == ref["param_hash"]
    (final,) = (tmp_path / "resumed" / "runs").rglob("last.ckpt")
    assert params_hash_of(final) == ref["param_hash"]
    # Each epoch is validated once, after the resume where it was killed, on the reference's weights.
    assert len(ref["val_logged"]) == 3
    assert [p["val_logged"] for p in pieces] == [[], ref["val_logged"][:1], [], ref["val_logged"][1:]]


def test_the_training_clocks_continue_across_a_resume():
    """A run's ``time/*_minutes`` (what the recipe study and the reference-model cards plot against)
    count its whole training, not the last invocation: the checkpoint carries them, the resumed fit
    starts its clocks there."""
    from omgpt.module import OMGPTModule

    module = OMGPTModule(
        task="newsvendor",
        horizon=4,
        network=dict(n_layer=1, n_head=1, n_embd=8),
    )
    module._trained_minutes = (5.0, 3.0)  # what on_load_checkpoint restores from a checkpoint
    module.on_fit_start()
    wall, cpu = module.trained_minutes()
    assert 5.0 <= wall < 5.5 and 3.0 <= cpu < 3.5
    saved: dict = {}
    module.on_save_checkpoint(saved)
    assert saved["trained_minutes"][0] >= 5.0 and saved["trained_minutes"][1] >= 3.0


def test_last_ckpt_is_the_latest_state_even_when_validation_stops_improving(tmp_path):
    """The checkpoint rule monitors validation regret with one kept file; ``last.ckpt`` must still be
    the latest state to resume from. Lightning 2.6 writes it only beside a new best, so a monitored
    metric that never improves after epoch 0 left it at step 1 of 3: callbacks.ResumableCheckpoint writes
    it after every validation."""
    import warnings

    import lightning as L

    from omgpt.callbacks import ResumableCheckpoint
    from omgpt.datamodules.history import HistoryDataModule
    from omgpt.module import OMGPTModule

    L.seed_everything(0, verbose=False)
    module = OMGPTModule(
        task="pricing",
        horizon=4,
        network=dict(n_layer=1, n_head=1, n_embd=8),
    )
    data = HistoryDataModule(task="pricing", horizon=4, batch_size=4, batches_per_epoch=1, val_runs=4, val_batch_size=4)
    # train/horizon is the same every epoch: the first value stays the best
    checkpoint = ResumableCheckpoint(
        dirpath=tmp_path,
        monitor="train/horizon",
        mode="min",
        save_last=True,
        enable_version_counter=False,
        filename="best-{epoch}",
    )
    trainer = L.Trainer(
        max_epochs=3,
        reload_dataloaders_every_n_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        callbacks=[checkpoint],
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, data)
    assert sorted(p.name for p in tmp_path.glob("*.ckpt")) == ["best-epoch=0.ckpt", "last.ckpt"]
    assert torch.load(tmp_path / "last.ckpt", map_location="cpu", weights_only=True)["global_step"] == 3
