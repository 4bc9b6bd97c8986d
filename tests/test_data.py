"""The pre-training data stream: seeding per (seed, epoch, rank, worker), batch counts, batch contents."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader

import omgpt.datamodules.history as history_mod
from omgpt.callbacks import Curriculum
from omgpt.datamodules import HistoryDataModule, HistoryStream
from omgpt.errors import OMGPTError
from omgpt.tasks import make_task

B, T = 4, 12


def stream(task=None, n_batches=3, seed=0, epoch=0, rank=0, horizon=T, chunk=2) -> HistoryStream:
    return HistoryStream(task or make_task("newsvendor"), B, n_batches, horizon, seed, epoch, rank, chunk)


def as_worker(monkeypatch, worker: int, n_workers: int) -> None:
    """Make ``HistoryStream.__iter__`` believe it runs in DataLoader worker ``worker`` of ``n_workers``."""
    monkeypatch.setattr(history_mod, "get_worker_info", lambda: SimpleNamespace(id=worker, num_workers=n_workers))


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def all_distinct(batches: list[dict]) -> bool:
    return not any(same(a, b) for a, b in itertools.combinations(batches, 2))


# --------------------------------------------------------------------------------------------------
def test_stream_is_reproducible_and_differs_across_seed_epoch_rank(monkeypatch):
    base = list(stream())
    assert len(base) == 3
    again = list(stream())
    assert all(same(a, b) for a, b in zip(base, again, strict=True))

    variants = {
        "seed": list(stream(seed=1)),
        "epoch": list(stream(epoch=1)),
        "rank": list(stream(rank=1)),
    }
    for key, batches in variants.items():
        assert len(batches) == 3
        assert all_distinct(base + batches), key
        # Not merely other noise: other environments (hence other contexts) altogether.
        assert not torch.equal(batches[0]["features"][..., 1:], base[0]["features"][..., 1:]), key

    # Workers: each (…, worker) is its own stream, reproducible too.
    as_worker(monkeypatch, 0, 2)
    w0 = list(stream(n_batches=4))
    as_worker(monkeypatch, 1, 2)
    w1, w1_again = list(stream(n_batches=4)), list(stream(n_batches=4))
    assert len(w0) == len(w1) == 2
    assert all_distinct(w0 + w1)
    assert all(same(a, b) for a, b in zip(w1, w1_again, strict=True))


@pytest.mark.parametrize("n_batches", [1, 3, 5])
def test_dataloader_with_two_workers_yields_exactly_n_batches(n_batches, monkeypatch):
    per_rank = []
    for rank in (0, 1):
        loader = DataLoader(stream(n_batches=n_batches, rank=rank), batch_size=None, num_workers=2)
        batches = list(loader)
        assert len(batches) == n_batches  # the same count on every rank: DDP would hang otherwise
        assert all_distinct(batches)
        per_rank.append(batches)
    assert all_distinct(per_rank[0] + per_rank[1])

    # Each worker yields its share: ceil / floor of n / 2, and the loader's batches are exactly theirs.
    shares = []
    for worker in (0, 1):
        as_worker(monkeypatch, worker, 2)
        shares.append(list(stream(n_batches=n_batches, rank=1)))
    assert [len(s) for s in shares] == [(n_batches + 1) // 2, n_batches // 2]
    expected = shares[0] + shares[1]
    assert all(any(same(b, e) for e in expected) for b in per_rank[1])


@pytest.mark.parametrize("name", ["newsvendor", "newsvendor-censored", "pricing"])
def test_batch_shapes_and_targets_are_the_optimal_actions(name):
    """A one-environment pool makes the hidden environment known, so a*_t can be recomputed (the
    newsvendor's holding cost is not pooled: it is read off the context, as the decision maker does)."""
    task = make_task(name, pool_size=1, pool_seed=3)
    env = task.sample_envs(1, torch.Generator().manual_seed(0))
    batches = list(stream(task, n_batches=3, chunk=2))  # chunk 2: one full and one partial chunk
    assert len(batches) == 3
    for batch in batches:
        d = task.obs_dim + task.context_dim
        assert batch["features"].shape == (B, T, d)
        assert batch["actions"].shape == (B, T, 1)
        assert batch["targets"].shape == (B, T, 1)
        envs = {k: v.expand(B, *v.shape[1:]) for k, v in env.items()}
        contexts = batch["features"][..., task.obs_dim :]
        if "h" in envs:
            envs["h"] = task.split_context(contexts[:, 0])[0]
        a_star = torch.stack([task.optimal_action(envs, contexts[:, t], t) for t in range(T)], dim=1)
        torch.testing.assert_close(batch["targets"], a_star, rtol=0, atol=0)
        # Actions come from the noisy oracle: within 1 of a* and inside A.
        assert (batch["actions"] - batch["targets"]).abs().max() <= 1 + 1e-5
        assert ((batch["actions"] >= 0) & (batch["actions"] <= 30)).all()
        assert torch.equal(batch["features"][:, 0, : task.obs_dim], torch.zeros(B, task.obs_dim))  # O_0 = 0
    assert all_distinct(batches)


def test_datamodule_passes_epoch_rank_and_horizon_to_the_stream():
    curriculum = {"stage_epochs": 1, "start": 4, "step": 1}  # epoch e trains on 4 + e: epoch 3 -> 7
    dm = HistoryDataModule(
        task="pricing",
        horizon=20,
        batch_size=B,
        batches_per_epoch=3,
        seed=5,
        num_workers=0,
        chunk=2,
        algorithm1={"curriculum": curriculum},
    )
    dm.trainer = SimpleNamespace(
        global_rank=1, current_epoch=3, reload_dataloaders_every_n_epochs=1, callbacks=[Curriculum()]
    )
    got = list(dm.train_dataloader())
    expected = list(HistoryStream(dm.task, B, 3, 7, 5, 3, 1, 2))
    assert len(got) == 3 and got[0]["features"].shape == (B, 7, 1 + 6)
    assert all(same(a, b) for a, b in zip(got, expected, strict=True))

    dm.trainer.reload_dataloaders_every_n_epochs = 0  # every epoch would replay epoch 0's stream
    with pytest.raises(ValueError, match="reload_dataloaders_every_n_epochs"):
        dm.train_dataloader()
    assert dm.current_horizon == 7
    with pytest.raises(OMGPTError, match="batch_size"):
        HistoryDataModule(batch_size=0)
