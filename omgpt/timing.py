"""Timing helpers shared by the speed benchmarks (``benchmarks/*.py``, run by ``omgpt bench``): a step
timer, the demo's module and a bare timing Trainer, quiet logs, and a one-line machine description.

Library code: the benchmark scripts import it, and the ``bench`` command runs the scripts, so no script
imports the command that runs it.
"""

from __future__ import annotations

import os
import platform
import time

import torch
import yaml
from lightning.pytorch.callbacks import Callback

from omgpt.resources import CONFIGS


class StepTimer(Callback):
    """Wall-clock time at the end of every training batch. The interval between two ends covers one
    whole step: fetching (or generating) the batch, forward, backward, optimizer, and the hooks."""

    def __init__(self):
        self.ends: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.ends.append(time.perf_counter())

    def seconds_per_step(self, warmup: int = 2) -> float:
        ends = self.ends[warmup:]
        if len(ends) < 2:
            raise ValueError("time at least warmup + 2 steps")
        return (ends[-1] - ends[0]) / (len(ends) - 1)


def demo_config() -> dict:
    """``configs/demo.yaml``: the model and data settings the demo trains with."""
    return yaml.safe_load((CONFIGS / "demo.yaml").read_text())


def demo_module(horizon: int | None = None, seed: int = 0):
    """A freshly initialised ``OMGPTModule`` with the demo's settings (``horizon`` overridden if given)."""
    from omgpt.module import OMGPTModule

    torch.manual_seed(seed)
    model = demo_config()["model"]
    return OMGPTModule(**{**model, "horizon": horizon or model["horizon"]})


def timing_trainer(steps: int, device: str = "cpu", callbacks: list | None = None):
    """A Trainer doing nothing but ``steps`` training steps: no validation, logger, checkpoints or
    progress bar (the same for every Trainer-based measurement)."""
    import lightning as L

    return L.Trainer(
        max_epochs=1, limit_train_batches=steps, limit_val_batches=0, num_sanity_val_steps=0,
        reload_dataloaders_every_n_epochs=1, accelerator="gpu" if str(device).startswith("cuda") else "cpu", devices=1,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=callbacks or [],
    )  # fmt: skip


def quiet_lightning() -> None:
    """Lightning's info lines and warnings would bury the benchmark tables."""
    import logging
    import warnings

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    warnings.filterwarnings("ignore", message=".*self.log.*")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return f"{cpu}, {os.cpu_count()} cores{gpu}; torch {torch.__version__}, Python {platform.python_version()}"
