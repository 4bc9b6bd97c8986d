"""ResumableCheckpoint: Lightning's ModelCheckpoint with ``last.ckpt`` written at every validation again.

Since Lightning 2.6 ``save_last=True`` writes ``last.ckpt`` only at a step where a top-k checkpoint was
also saved. With ``monitor`` and ``save_top_k=1`` (configs/trainer/callback/checkpoint.yaml: the
authors' rule, lowest mean + one sd of validation regret) that is only when validation improves, so
``last.ckpt`` stayed at the best epoch: a run resumed from it silently re-trained every epoch since,
and a finished run's ``last.ckpt`` was not its end (seen on a 6,000-step fit whose ``last.ckpt`` held
epoch 50 of 60). This subclass writes it after every validation, as before 2.6; everything else is
Lightning's."""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint


class ResumableCheckpoint(ModelCheckpoint):
    """``lightning.pytorch.callbacks.ModelCheckpoint``, with ``save_last`` meaning the latest state."""

    @property
    def state_key(self) -> str:
        # Lightning's own key (the class name is in it), so a checkpoint keeps its best score across
        # this subclass's name
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        # skipped where Lightning saved at this step already (a new best: last.ckpt went with it)
        if (
            self.save_last
            and not self._should_skip_saving_checkpoint(trainer)
            and not self._should_save_on_train_epoch_end(trainer)
        ):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if (
            self.save_last
            and not self._should_skip_saving_checkpoint(trainer)
            and self._should_save_on_train_epoch_end(trainer)
        ):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
