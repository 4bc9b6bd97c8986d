"""Streams freshly generated pre-training histories (paper §3.3.1, Algorithm 1's early phase).

Every batch is a new set of environments from the prior, played by a data policy through the one
rollout loop: the paper's noisy oracle ``f~`` by default, or any policy that needs no model (e.g.
``random``, whose actions leak nothing about the environment; see ``omgpt.policies.oracle``). Nothing is stored: the stream is infinite in principle and an epoch is simply
``batches_per_epoch`` batches of it.

Seeding (Lightning does not shard an ``IterableDataset``, and ``seed_everything`` does not seed the
main process's generation when ``num_workers=0``): each (seed, epoch, rank, worker) gets its own
``torch.Generator`` from ``numpy.random.SeedSequence``, so DDP ranks and DataLoader workers never
repeat each other, epochs never repeat, and every rank yields exactly ``batches_per_epoch`` batches
(unequal counts would hang DDP at the epoch's end).
"""
from __future__ import annotations

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from omgpt.errors import OMGPTError
from omgpt.policies import make_policy
from omgpt.rollout import History, rollout
from omgpt.tasks import Task, make_episode_task


def stream_seed(*keys: int) -> int:
    """A well-mixed 63-bit seed from integer keys (seed, epoch, rank, worker, ...)."""
    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1, np.uint64)[0] >> 1)


def history_batch(history: History) -> dict[str, torch.Tensor]:
    """What a training step consumes: tokens and targets, ``(B, T, ·)`` each."""
    features, actions = history.tokens()
    return {"features": features, "actions": actions, "targets": history.optimal_actions}


class HistoryStream(IterableDataset):
    """``n_batches`` batches of histories played by ``policy`` for one (epoch, rank), split over workers.

    Yields whole batches (use ``DataLoader(batch_size=None)``): generation is batched over
    environments, so building the batch here is what makes it cheap. ``chunk`` batches are rolled
    out at once to amortise the per-step Python overhead of the rollout loop.
    """

    def __init__(self, task: Task, batch_size: int, n_batches: int, horizon: int, seed: int, epoch: int, rank: int, chunk: int = 4, policy: str = "noisy-oracle", policy_options: dict | None = None):
        self.task, self.batch_size, self.n_batches, self.horizon = task, batch_size, n_batches, horizon
        self.policy, self.policy_options = policy, policy_options or {}
        self.seed, self.epoch, self.rank, self.chunk = seed, epoch, rank, max(1, chunk)

    def __len__(self) -> int:
        return self.n_batches

    def __iter__(self):
        info = get_worker_info()
        worker, n_workers = (0, 1) if info is None else (info.id, info.num_workers)
        mine = self.n_batches // n_workers + (worker < self.n_batches % n_workers)
        g = torch.Generator().manual_seed(stream_seed(self.seed, self.epoch, self.rank, worker))
        policy = make_policy(self.policy, self.task, **self.policy_options)
        done = 0
        while done < mine:
            k = min(self.chunk, mine - done)
            envs = self.task.sample_envs(k * self.batch_size, g)
            batch = history_batch(rollout(self.task, envs, policy, self.horizon, g))
            for i in range(k):
                yield {key: v[i * self.batch_size : (i + 1) * self.batch_size] for key, v in batch.items()}
            done += k


class ValidationSeeds(Dataset):
    """Indices of the fixed validation environments; the module rolls them out (online evaluation)."""

    def __init__(self, runs: int):
        self.runs = runs

    def __len__(self) -> int:
        return self.runs

    def __getitem__(self, i: int) -> int:
        return i


class HistoryDataModule(L.LightningDataModule):
    """Pre-training data for OMGPT.

    Args:
        task: task name (linked from the model's ``task`` by the CLI).
        task_options: task constructor options (linked from the model).
        horizon: target horizon ``T`` (linked from the model); the curriculum may train on less.
        batch_size: histories per batch, per rank (paper: 64).
        batches_per_epoch: batches per epoch, per rank (the paper's "iteration" has 1500).
        seed: root of every data stream; validation environments use a separate stream.
        num_workers: DataLoader workers generating histories in parallel.
        chunk: batches generated per rollout call (amortises per-step overhead).
        data_policy: the policy that plays the pre-training histories (paper: ``noisy-oracle``).
        data_policy_options: its options, e.g. ``{noise_scale: 2.0}``.
        val_runs: validation environments (split across ranks), rolled out online by the model.
        val_batch_size: validation environments per rollout.
    """

    def __init__(
        self,
        task: str = "newsvendor",
        task_options: dict | None = None,
        horizon: int = 100,
        batch_size: int = 64,
        batches_per_epoch: int = 200,
        seed: int = 0,
        num_workers: int = 0,
        chunk: int = 4,
        data_policy: str = "noisy-oracle",
        data_policy_options: dict | None = None,
        val_runs: int = 256,
        val_batch_size: int = 256,
    ):
        super().__init__()
        for name, value in (("horizon", horizon), ("batch_size", batch_size), ("batches_per_epoch", batches_per_epoch), ("val_runs", val_runs)):
            if value < 1:
                raise OMGPTError(f"data.{name} must be a positive integer, got {value}")
        self.save_hyperparameters()
        self.task = make_episode_task(task, task_options, horizon)
        if data_policy == "omgpt":
            raise OMGPTError("data.data_policy cannot be 'omgpt' (self-rollouts need the model); use noisy-oracle or random")
        make_policy(data_policy, self.task, **(data_policy_options or {}))  # fail now on a bad name or option
        self.horizon = horizon
        self.current_horizon = horizon  # what the curriculum trains on this epoch

    def _rank(self) -> int:
        return self.trainer.global_rank if self.trainer is not None else 0

    def _epoch(self) -> int:
        return self.trainer.current_epoch if self.trainer is not None else 0

    def train_dataloader(self) -> DataLoader:
        if self.trainer is not None and self.trainer.reload_dataloaders_every_n_epochs != 1:
            # Each epoch's stream is seeded by the epoch: without a reload every epoch would replay epoch 0.
            raise ValueError("HistoryDataModule needs trainer.reload_dataloaders_every_n_epochs=1 (set in configs/base.yaml)")
        hp = self.hparams
        stream = HistoryStream(
            self.task, hp.batch_size, hp.batches_per_epoch, self.current_horizon, hp.seed, self._epoch(), self._rank(),
            hp.chunk, hp.data_policy, hp.data_policy_options,
        )
        return DataLoader(stream, batch_size=None, num_workers=hp.num_workers, persistent_workers=False)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(ValidationSeeds(self.hparams.val_runs), batch_size=self.hparams.val_batch_size, shuffle=False)

    def state_dict(self) -> dict:
        return {"current_horizon": self.current_horizon}

    def load_state_dict(self, state_dict: dict) -> None:
        self.current_horizon = state_dict["current_horizon"]
