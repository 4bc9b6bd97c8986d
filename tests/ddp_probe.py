"""Test-only callbacks: :class:`Probe` writes what each rank saw to ``<out>/rank<k>.json``;
:class:`Stall` blocks a fit at a known step so that a test can SIGKILL it there.

Used by tests/test_ddp.py (a 2-process gloo run) and tests/test_resume.py (killed and resumed fits),
added to a subprocess fit with ``--trainer.callbacks+=tests.ddp_probe.Probe --trainer.callbacks.out
DIR``; ``PYTHONPATH`` is the repository root, so ``tests`` imports in the re-executed DDP processes.

Per rank it records: a hash of every training batch (in order, with its epoch and horizon), the
batch count per epoch, the global step, a checksum and exact hash of the final parameters, the
rank's *local* validation sums (before torchmetrics reduces them across ranks), the validation
environment indices it rolled out, and the ``val/regret`` Lightning logged (after reduction).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback


def tensor_hash(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def params_hash(module: torch.nn.Module) -> str:
    return tensor_hash(*(p.float() for p in module.state_dict().values() if p.is_floating_point()))


class Probe(Callback):
    """Records, per rank, the batches, counts, weights and validation sums of a fit (see module doc)."""

    def __init__(self, out: str):
        self.out = Path(out)
        self.batches: list[dict] = []
        self.per_epoch: dict[int, int] = defaultdict(int)
        self.val_local: list[dict] = []
        self.val_indices: list[int] = []
        self.val_logged: list[float] = []
        self.saved: list[str] = []
        self.train_regret: list[float] = []  # regret fine-tuning: this rank's own rollouts' regret per step

    def setup(self, trainer, pl_module, stage):
        # Record the checkpoint files this rank actually writes (Lightning writes on global rank 0 only).
        io = trainer.strategy.checkpoint_io
        save = io.save_checkpoint

        def recording_save(checkpoint, path, *args, **kwargs):
            self.saved.append(str(path))
            return save(checkpoint, path, *args, **kwargs)

        io.save_checkpoint = recording_save

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        epoch = trainer.current_epoch
        self.batches.append(
            {
                "epoch": epoch,
                "batch_idx": batch_idx,
                "step": trainer.global_step,
                "horizon": int(batch["features"].shape[1]),
                "hash": tensor_hash(batch["features"], batch["actions"], batch["targets"]),
            }
        )
        self.per_epoch[epoch] += 1

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if "train/regret" in trainer.callback_metrics:  # logged without sync_dist: the rank's own value
            self.train_regret.append(float(trainer.callback_metrics["train/regret"]))

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if not trainer.sanity_checking:
            self.val_indices += [int(i) for i in batch.cpu()]

    def on_validation_epoch_end(self, trainer, pl_module):
        # Callbacks run before the module's hook: the metric still holds this rank's own sums.
        if not trainer.sanity_checking:
            m = pl_module.val_regret
            self.val_local.append({"total_last": float(m.total[-1]), "count": int(m.count)})

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking and "val/regret" in trainer.callback_metrics:
            self.val_logged.append(float(trainer.callback_metrics["val/regret"]))

    def on_fit_end(self, trainer, pl_module):
        self.dump(trainer, pl_module)

    def dump(self, trainer, pl_module) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        state = {
            "rank": trainer.global_rank,
            "world_size": trainer.world_size,
            "strategy": type(trainer.strategy).__name__,
            "backend": torch.distributed.get_backend() if torch.distributed.is_initialized() else None,
            "pid": os.getpid(),
            "global_step": trainer.global_step,
            "batches": self.batches,
            "per_epoch": {str(k): v for k, v in sorted(self.per_epoch.items())},
            "param_sum": float(sum(p.detach().double().sum() for p in pl_module.parameters())),
            "param_hash": params_hash(pl_module),
            "val_local": self.val_local,
            "val_indices": self.val_indices,
            "val_logged": self.val_logged,
            "saved": self.saved,
            "train_regret": self.train_regret,
        }
        (self.out / f"rank{trainer.global_rank}.json").write_text(json.dumps(state, indent=1))


class Stall(Callback):
    """Blocks the fit once ``global_step == at_step`` (whose step checkpoint has been written by then:
    checkpoint callbacks run last in ``on_train_batch_end``), after touching ``<out>/stalled<rank>`` --
    so a test can SIGKILL the process (:func:`kill_when_stalled`) at a known point: ``where="train"`` at the start of the next step
    (mid-epoch), ``where="validation"`` at the start of the validation that follows the step (an
    epoch's last batch: killed at the epoch boundary, before the epoch-end checkpoint)."""

    def __init__(self, out: str, at_step: int = -1, where: str = "train"):
        if where not in ("train", "validation"):
            raise ValueError(f"where must be 'train' or 'validation', got {where!r}")
        self.out, self.at_step, self.where = Path(out), at_step, where

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.where == "train" and trainer.global_step == self.at_step:
            self.stall(trainer, pl_module)

    def on_validation_start(self, trainer, pl_module):
        if self.where == "validation" and trainer.global_step == self.at_step and not trainer.sanity_checking:
            self.stall(trainer, pl_module)

    def stall(self, trainer, pl_module) -> None:
        for cb in trainer.callbacks:  # keep what the probe saw so far: this process will not end
            if isinstance(cb, Probe):
                cb.dump(trainer, pl_module)
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / f"stalled{trainer.global_rank}").write_text(str(trainer.global_step))
        import time

        while True:
            time.sleep(1)


class Poison(Callback):
    """At the start of step ``at_step``: record the sha256 of every checkpoint on disk in
    ``<out>/before.json``, then set one weight to NaN -- the step's loss is then non-finite."""

    def __init__(self, out: str, at_step: int):
        self.out, self.at_step = Path(out), at_step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.at_step:
            ckpts = Path(trainer.checkpoint_callback.dirpath).glob("*.ckpt")
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "before.json").write_text(json.dumps({str(p): file_hash(p) for p in ckpts}))
            with torch.no_grad():
                next(pl_module.parameters()).view(-1)[0] = float("nan")


def file_hash(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def kill_when_stalled(cmd: list[str], log: Path, stall: Path, ranks: int = 1, **popen) -> None:
    """Run ``cmd`` (a fit with :class:`Stall` writing into ``stall``) until every one of its ``ranks``
    processes has stalled, then SIGKILL its whole process group (a DDP fit's ranks included)."""
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True, **popen)
    try:
        deadline = time.monotonic() + 180
        while not all((stall / f"stalled{r}").exists() for r in range(ranks)):
            assert proc.poll() is None, f"{cmd} ended before it stalled:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{cmd} did not stall:\n{log.read_text()[-3000:]}"
            time.sleep(0.2)
    finally:  # never leave a stalled fit behind
        os.killpg(proc.pid, signal.SIGKILL)
        returncode = proc.wait(timeout=30)
    assert returncode == -signal.SIGKILL
