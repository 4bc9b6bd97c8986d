"""The paper's horizon curriculum (appendix B.2), generalised to any target horizon."""

from __future__ import annotations

import math

from lightning.pytorch.callbacks import Callback

from omgpt.datamodules.history import require_history_datamodule


class HorizonCurriculum(Callback):
    """Train on histories truncated to a horizon ``T~`` that rises to the target ``T`` in stages.

    The paper prints ``T~ = 20·(m%10+1)`` for iterations ``m ≤ 50`` and ``20·(m%10-4)`` for
    ``51 ≤ m ≤ 100``, which leave ``[20, 100]``; the authors' code pins the intent (docs/paper-gaps.md §6):
    ``T~ = 20·(((m-1)//10) % 5 + 1)`` for the 1-based iteration ``m`` up to the curriculum's end, then
    ``T``. With ``m = epoch + 1`` this is::

        T~(epoch) = min(start + step · ((epoch - p) // S), T)

    where ``S`` is ``stage_epochs`` and ``p`` the epoch at which the current phase began (0, then each
    of ``restart_epochs``); from ``full_from_epoch`` on, ``T~ = T``. By default ``start = step = ⌈T/5⌉``
    so any target is reached in five levels, as the paper's 20, 40, …, 100. The paper's own setting is
    ``stage_epochs=10, restart_epochs=[50], full_from_epoch=100`` with one epoch per iteration: epochs
    0-9 train at 20, 10-19 at 40, …, 40-49 at 100, 50-59 at 20 again, …, 90-99 at 100, then 100.

    The horizon is a pure function of the epoch, so the callback hands the datamodule the schedule
    and the datamodule asks it for the epoch it is building a train dataloader for. That is the one
    moment that is right in every case: Lightning builds epoch 0's loader inside
    ``configure_optimizers`` (``estimated_stepping_batches``) before ``on_fit_start``, prefetches a
    batch before ``on_train_epoch_start``, and on resume restores ``current_epoch`` only after
    ``on_fit_start`` -- pushing a horizon from any hook is too early or too late in one of those.
    A resumed run therefore trains on its epoch's stage with no state to restore; ``state_dict``
    only records the stage last trained on. Needs ``reload_dataloaders_every_n_epochs=1``.
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
        phase_start = max([0] + [r for r in self.restart_epochs if r <= epoch])
        start = self.start or math.ceil(target / 5)
        step = self.step or math.ceil(target / 5)
        return max(1, min(target, start + step * ((epoch - phase_start) // self.stage_epochs)))

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit":
            return
        dm = require_history_datamodule(trainer, "HorizonCurriculum")
        dm.horizon_schedule = lambda epoch: self.horizon_at(epoch, dm.horizon)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.horizon = trainer.datamodule.current_horizon
        pl_module.log("curriculum/horizon", float(self.horizon), on_step=False, on_epoch=True, sync_dist=True)

    def state_dict(self) -> dict:
        return {"horizon": self.horizon, "stage_epochs": self.stage_epochs, "restart_epochs": self.restart_epochs}

    def load_state_dict(self, state_dict: dict) -> None:
        self.horizon = state_dict["horizon"]
