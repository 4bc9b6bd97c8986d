"""Algorithm 1's mixed phase: train on the model's own rollouts (paper appendix B.2)."""
from __future__ import annotations

import torch
from lightning.pytorch.callbacks import Callback

from datamodules.history import SelfRollouts, history_batch, require_history_datamodule, stream_seed
from omgpt.policies import make_policy
from omgpt.rollout import rollout

ROLLOUT_KEY = 0x5E1F  # stream_seed key of the self-rollout environments


class SelfRolloutRefresh(Callback):
    """From epoch ``start_epoch`` on, every epoch trains on histories the current model played.

    The histories a model sees at test time are its own; histories of ``f~`` are not (their actions
    are near-optimal by construction, and leak the environment -- README, "What makes in-context
    learning arrive"). So, as the paper's Algorithm 1, each epoch of the mixed phase rolls out the
    current model (eval mode, no grad, the one rollout loop with the KV cache) on ``rollouts``
    freshly sampled environments per rank, mixes them with ``f~`` histories so that those make up
    ``kappa`` of the epoch's set, and trains ``batches_per_epoch`` batches drawn from it (paper:
    ``start_epoch=50``, 10x64 rollouts, ``kappa=1/3``, 50 batches of 64).

    Rollouts are generated when Lightning asks the datamodule for the epoch's train dataloader (see
    ``HistoryDataModule``), i.e. with the weights at the end of the previous epoch, on the seed
    ``(seed, epoch, rank)`` -- each rank plays its own environments. The epoch's rollouts are kept in
    this callback's state, so a run resumed mid-epoch trains on exactly the same set; resumed at an
    epoch boundary it regenerates them from the restored weights and seed, which gives the same set.

    Args:
        start_epoch: first epoch of the mixed phase (0-based; the paper's ``M0 = 50`` iterations).
        rollouts: model-played histories per epoch and rank (paper: 640).
        kappa: share of ``f~`` histories in the epoch's training set (paper: 1/3).
        batches_per_epoch: batches per epoch in the mixed phase (paper: 50); ``None`` keeps the
            datamodule's. (A cosine schedule sized by ``estimated_stepping_batches`` assumes the
            datamodule's count for every epoch.)
        rollout_batch: environments rolled out together.
    """

    def __init__(self, start_epoch: int = 50, rollouts: int = 640, kappa: float = 1 / 3, batches_per_epoch: int | None = 50, rollout_batch: int = 320):
        if not 0 <= kappa < 1:
            raise ValueError(f"kappa must be in [0, 1), got {kappa}")
        if rollouts < 1 or start_epoch < 0:
            raise ValueError("rollouts must be >= 1 and start_epoch >= 0")
        self.start_epoch, self.rollouts, self.kappa = start_epoch, rollouts, kappa
        self.batches_per_epoch, self.rollout_batch = batches_per_epoch, rollout_batch
        self.epoch: int | None = None  # the epoch self.histories were played for
        self.histories: dict[str, torch.Tensor] | None = None
        self._trainer = None

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit":
            return
        require_history_datamodule(trainer, "SelfRolloutRefresh").rollout_provider = self.for_epoch
        self._trainer = trainer

    def for_epoch(self, epoch: int) -> SelfRollouts | None:
        """The epoch's self-rollouts (played now, with the current weights, unless already held)."""
        if epoch < self.start_epoch:
            return None
        if self.epoch != epoch or self.histories is None:
            self.histories, self.epoch = self._play(epoch), epoch
        return SelfRollouts(self.histories, self.kappa, self.batches_per_epoch)

    @torch.no_grad()
    def _play(self, epoch: int) -> dict[str, torch.Tensor]:
        trainer = self._trainer
        module, dm = trainer.lightning_module, trainer.datamodule
        model, task = module.model, module.task
        was_training = model.training
        g = torch.Generator(device=module.device).manual_seed(stream_seed(dm.hparams.seed, ROLLOUT_KEY, epoch, trainer.global_rank))
        policy = make_policy("omgpt", task, model=model, window=module.hparams.get("window"))
        parts = []
        for lo in range(0, self.rollouts, self.rollout_batch):
            envs = task.sample_envs(min(self.rollout_batch, self.rollouts - lo), g)
            parts.append(history_batch(rollout(task, envs, policy, dm.horizon, g).to("cpu")))
        model.clear_cache()
        model.train(was_training)
        return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "histories": self.histories}

    def load_state_dict(self, state_dict: dict) -> None:
        self.epoch, self.histories = state_dict["epoch"], state_dict["histories"]
