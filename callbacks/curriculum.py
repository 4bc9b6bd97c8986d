"""Algorithm 1's horizon curriculum as a Lightning callback."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import Callback

from omgpt.datamodules.algorithm1 import applying_callbacks
from omgpt.errors import OMGPTError


class Curriculum(Callback):
    """Applies ``data.algorithm1.curriculum`` (:class:`~omgpt.datamodules.HorizonCurriculum`): every
    epoch's training histories are truncated to the stage's horizon ``T~`` (the module logs it as
    ``train/horizon``).

    The settings stay in the data block, where later configs layer on them field by field; this
    callback is the switch that applies them (``configs/trainer/callback/curriculum.yaml``). Leaving it
    out of ``trainer.callbacks`` while the block is set, or the reverse, is refused at the start of the
    fit. The datamodule asks it for the horizon when Lightning builds the epoch's training loader: the
    one moment the epoch number is right on a fresh, a resumed and a DDP fit alike (Lightning builds
    epoch 0's loader before ``on_fit_start`` and prefetches a batch before ``on_train_epoch_start``)."""

    algorithm1_part = "curriculum"

    def horizon_at(self, datamodule, epoch: int) -> int:
        """The horizon epoch ``epoch`` of ``datamodule`` trains on."""
        return datamodule.schedule.curriculum.horizon_at(epoch, datamodule.horizon)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        check_applied(trainer, type(self).__name__)


def check_applied(trainer: L.Trainer, name: str) -> None:
    """An Algorithm 1 callback needs the history datamodule, whose schedule has its part."""
    schedule = getattr(trainer.datamodule, "schedule", None)
    if schedule is None:
        raise OMGPTError(f"{name} applies a part of Algorithm 1 to omgpt's HistoryDataModule; this fit has none")
    applying_callbacks(schedule, trainer.callbacks)
