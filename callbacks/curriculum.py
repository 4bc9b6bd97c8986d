"""The paper's horizon curriculum (appendix B.2), generalised to any target horizon."""
from __future__ import annotations

import math

import lightning as L
from lightning.pytorch.callbacks import Callback


class HorizonCurriculum(Callback):
    """Train on histories truncated to a horizon ``T~`` that rises to the target ``T`` in stages.

    The paper prints ``T~ = 20·(m%10+1)`` for iterations ``m ≤ 50`` and ``20·(m%10-4)`` for
    ``51 ≤ m ≤ 100``, which leave ``[20, 100]``; the evident intent (SPEC §2) is ``⌊m/10⌋``::

        T~(m) = clamp(start + step · (⌊m/S⌋ - ⌊p/S⌋), start, T)      m = epoch + 1

    where ``S`` is ``stage_epochs`` and ``p`` the epoch at which the current phase began (0, then each
    of ``restart_epochs``); from ``full_from_epoch`` on, ``T~ = T``. By default ``start = step = ⌈T/5⌉``
    so any target is reached in five levels, as the paper's 20, 40, …, 100. The paper's own setting is
    ``stage_epochs=10, restart_epochs=[50], full_from_epoch=100`` with one epoch per iteration.

    The horizon is written into the datamodule (``current_horizon``) at setup and at the end of every
    epoch, which is before Lightning builds the next epoch's train dataloader (built, and one batch
    prefetched, before ``on_train_epoch_start``). Needs ``reload_dataloaders_every_n_epochs=1``.
    The stage is saved in checkpoints: Lightning restores the loops (and so ``current_epoch``) only
    after ``on_fit_start``, so a resumed run takes its horizon from the restored state.
    """

    def __init__(
        self,
        stage_epochs: int = 10,
        restart_epochs: list[int] | None = None,
        full_from_epoch: int | None = None,
        start: int | None = None,
        step: int | None = None,
    ):
        if stage_epochs < 1:
            raise ValueError(f"stage_epochs must be >= 1, got {stage_epochs}")
        self.stage_epochs = stage_epochs
        self.restart_epochs = sorted(restart_epochs or [])
        self.full_from_epoch = full_from_epoch
        self.start, self.step = start, step
        self.horizon: int | None = None

    def horizon_at(self, epoch: int, target: int) -> int:
        """``T~`` for 0-based ``epoch`` when the target horizon is ``target``."""
        if self.full_from_epoch is not None and epoch >= self.full_from_epoch:
            return target
        m, S = epoch + 1, self.stage_epochs
        phase_start = max([0] + [r for r in self.restart_epochs if r <= epoch])
        start = self.start or math.ceil(target / 5)
        step = self.step or math.ceil(target / 5)
        return max(1, min(target, start + step * (m // S - phase_start // S)))

    def _set(self, trainer: L.Trainer, epoch: int) -> None:
        dm = trainer.datamodule
        self.horizon = self.horizon_at(epoch, dm.horizon)
        dm.current_horizon = self.horizon

    def setup(self, trainer, pl_module, stage: str) -> None:
        # `setup` runs before `configure_optimizers`, whose `estimated_stepping_batches` already builds
        # epoch 0's train dataloader: the first stage must be in place by then. On resume Lightning
        # restores this callback's and the datamodule's state right after, and the loader is rebuilt.
        if stage != "fit":
            return
        if trainer.datamodule is None or not hasattr(trainer.datamodule, "current_horizon"):
            raise ValueError("HorizonCurriculum needs a HistoryDataModule (datamodules.HistoryDataModule)")
        if trainer.reload_dataloaders_every_n_epochs != 1:
            raise ValueError("HorizonCurriculum needs trainer.reload_dataloaders_every_n_epochs=1 to change the horizon per epoch")
        self._set(trainer, trainer.current_epoch)

    def on_fit_start(self, trainer, pl_module) -> None:
        trainer.datamodule.current_horizon = self.horizon  # the restored stage when resuming

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        pl_module.log("curriculum/horizon", float(trainer.datamodule.current_horizon), on_step=False, on_epoch=True, sync_dist=True)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._set(trainer, trainer.current_epoch + 1)

    def state_dict(self) -> dict:
        return {"horizon": self.horizon, "stage_epochs": self.stage_epochs, "restart_epochs": self.restart_epochs}

    def load_state_dict(self, state_dict: dict) -> None:
        self.horizon = state_dict["horizon"]
