"""Algorithm 1's mixed phase: train on the model's own rollouts (paper appendix B.2)."""

from __future__ import annotations

import copy

import torch
from lightning.pytorch.callbacks import Callback

from omgpt.datamodules.history import SelfRollouts, history_batch, require_history_datamodule
from omgpt.seeding import Stream, stream_seed
from omgpt.policies import make_policy
from omgpt.rollout import rollout


class SelfRolloutRefresh(Callback):
    """From epoch ``start_epoch`` on, every epoch trains on histories the current model played.

    The histories a model sees at test time are its own; histories of ``f~`` are not (their actions
    are near-optimal by construction, and leak the environment -- docs/recipe.md, "What makes in-context
    learning arrive"). So, as the paper's Algorithm 1, each epoch of the mixed phase rolls out the
    current model (eval mode, no grad, the one rollout loop with the KV cache) on ``rollouts``
    freshly sampled environments per rank, mixes them with ``f~`` histories so that those make up
    ``kappa`` of the epoch's set, and trains ``batches_per_epoch`` batches drawn from it (paper:
    ``start_epoch=50``, 10x64 rollouts, ``kappa=1/3``, 50 batches of 64).

    Rollouts are generated when Lightning asks the datamodule for the epoch's train dataloader (see
    ``HistoryDataModule``), i.e. with the weights at the end of the previous epoch, on the seed
    ``(seed, epoch, rank)`` -- each rank plays its own environments. They are a pure function of those
    weights and that seed, so the checkpoint keeps the weights they were played with (the same on
    every rank; only rank 0's callback state is saved, so saving rank 0's rollouts would hand them to
    every rank): a run resumed mid-epoch replays each rank's own set with them, exactly; resumed at an
    epoch boundary it plays the next epoch's from the restored weights, as the uninterrupted run did.

    Args:
        start_epoch: first epoch of the mixed phase (0-based; the paper's ``M0 = 50`` iterations).
        rollouts: model-played histories per epoch and rank (paper: 640).
        kappa: share of ``f~`` histories in the epoch's training set (paper: 1/3).
        batches_per_epoch: batches per epoch in the mixed phase (paper: 50); ``None`` keeps the
            datamodule's. (A cosine schedule sized by ``estimated_stepping_batches`` assumes the
            datamodule's count for every epoch.)
        rollout_batch: environments rolled out together.
    """

    def __init__(
        self,
        start_epoch: int = 50,
        rollouts: int = 640,
        kappa: float = 1 / 3,
        batches_per_epoch: int | None = 50,
        rollout_batch: int = 320,
    ):
        if not 0 <= kappa < 1:
            raise ValueError(f"kappa must be in [0, 1), got {kappa}")
        if rollouts < 1 or start_epoch < 0:
            raise ValueError("rollouts must be >= 1 and start_epoch >= 0")
        self.start_epoch, self.rollouts, self.kappa = start_epoch, rollouts, kappa
        self.batches_per_epoch, self.rollout_batch = batches_per_epoch, rollout_batch
        self.epoch: int | None = None  # the epoch self.histories were played for
        self.histories: dict[str, torch.Tensor] | None = None
        self.weights: dict[str, torch.Tensor] | None = None  # the model's weights when they were played
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
            replay = self.weights if self.epoch == epoch else None  # resumed mid-epoch: the epoch's weights
            self.histories, self.epoch = self._play(epoch, replay), epoch
        return SelfRollouts(self.histories, self.kappa, self.batches_per_epoch)

    @torch.no_grad()
    def _play(self, epoch: int, weights: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        trainer = self._trainer
        module, dm = trainer.lightning_module, trainer.datamodule
        model, task = module.model, module.task
        if weights is None:
            self.weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        else:
            model = copy.deepcopy(model)
            model.load_state_dict(weights)
        was_training = model.training
        g = torch.Generator(device=module.device).manual_seed(
            stream_seed(Stream.SELF_ROLLOUT, dm.hparams.seed, epoch, trainer.global_rank)
        )
        policy = make_policy("omgpt", task, model=model, window=module.hparams.get("window"))
        parts = []
        for lo in range(0, self.rollouts, self.rollout_batch):
            envs = task.sample_envs(min(self.rollout_batch, self.rollouts - lo), g)
            parts.append(history_batch(rollout(task, envs, policy, dm.horizon, g).to("cpu")))
        model.clear_cache()
        model.train(was_training)
        return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "weights": self.weights}

    def load_state_dict(self, state_dict: dict) -> None:
        self.epoch, self.weights = state_dict["epoch"], state_dict.get("weights")
        self.histories = state_dict.get("histories")  # only in checkpoints written before the weights were kept
