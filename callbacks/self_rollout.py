"""Algorithm 1's mixed phase as a Lightning callback: each epoch's refresh of the model's own rollouts."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from omgpt.callbacks.curriculum import check_applied
from omgpt.datamodules.algorithm1 import MixedPhase, play_self_rollouts
from omgpt.datamodules.history import concat, history_batch
from omgpt.seeding import Stream, stream_seed


class SelfRolloutRefresh(Callback):
    """Applies ``data.algorithm1.mixed`` (:class:`~omgpt.datamodules.MixedPhase`): from its start epoch,
    every epoch the current model plays ``rollouts`` fresh environments per rank, and the epoch trains on
    them mixed with data-policy histories (``kappa`` of the set).

    The settings stay in the data block (layered field by field); this callback is the switch that
    applies them (``configs/trainer/callback/self_rollout.yaml``), and plays the rollouts. Leaving it
    out while the block is set, or the reverse, is refused at the start of the fit. The datamodule asks
    it when Lightning builds the epoch's training loader (the weights at the end of the previous epoch)
    and keeps what resume needs: the epoch's rollouts and the weights they were played with, so a run
    resumed mid-epoch replays them exactly."""

    algorithm1_part = "mixed"

    def mix_at(self, datamodule, epoch: int) -> MixedPhase | None:
        """The mixed phase's settings if epoch ``epoch`` of ``datamodule`` is in it, else ``None``."""
        return datamodule.schedule.mix_at(epoch)

    def refresh(
        self, datamodule, phase: MixedPhase, epoch: int, weights: dict[str, torch.Tensor] | None = None
    ) -> dict[str, torch.Tensor]:
        """The epoch's self-rollouts as training tensors, played by the trainer's model on the stream
        ``(seed, epoch, rank)`` -- with ``weights`` instead of the model's own, where given."""
        module = datamodule.trainer.lightning_module
        g = torch.Generator(device=module.device).manual_seed(
            stream_seed(Stream.SELF_ROLLOUT, datamodule.hparams.seed, epoch, datamodule.trainer.global_rank)
        )
        played = play_self_rollouts(
            module.model, module.task, phase, datamodule.horizon, g, module.hparams.get("window"), weights
        )
        mean_of = module.task if datamodule.hparams.obs_target == "mean" else None
        return concat([history_batch(h, mean_of) for h in played])

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        check_applied(trainer, type(self).__name__)
