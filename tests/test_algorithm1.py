"""Algorithm 1: the f~ pool, the mixed phase's self-rollouts and κ mixture, and resume."""

from __future__ import annotations

from types import SimpleNamespace

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from omgpt.callbacks import Curriculum, SelfRolloutRefresh
from omgpt.datamodules import Algorithm1Schedule, HistoryDataModule, HorizonCurriculum, MixedPhase
from omgpt.errors import OMGPTError
from omgpt.module import OMGPTModule

T = 12


def applying(dm: HistoryDataModule) -> list:
    """The callbacks that apply the parts of ``dm``'s schedule (as a config lists them)."""
    parts = (("curriculum", Curriculum()), ("mixed", SelfRolloutRefresh()))
    return [callback for part, callback in parts if getattr(dm.schedule, part) is not None]


def datamodule(rank: int = 0, epoch: int = 0, module=None, **kw) -> HistoryDataModule:
    dm = HistoryDataModule(task="pricing", horizon=T, batch_size=32, batches_per_epoch=50, seed=3, **kw)
    dm.trainer = SimpleNamespace(
        global_rank=rank,
        current_epoch=epoch,
        reload_dataloaders_every_n_epochs=1,
        lightning_module=module,
        callbacks=applying(dm),
    )
    return dm


def fake_rollouts(n: int) -> dict[str, torch.Tensor]:
    return {
        "features": torch.full((n, T, 7), 9.0),
        "actions": torch.full((n, T, 1), 9.0),
        "targets": torch.full((n, T, 1), 9.0),
    }


def test_the_schedule_says_each_epochs_horizon_and_mix():
    schedule = Algorithm1Schedule.of(
        {"curriculum": {"stage_epochs": 2, "restart_epochs": [6]}, "mixed": {"start_epoch": 4, "kappa": 0.25}}
    )
    assert [schedule.horizon_at(e, 10) for e in range(9)] == [2, 2, 4, 4, 6, 6, 2, 2, 4]
    assert [schedule.mix_at(e) is not None for e in range(6)] == [False] * 4 + [True] * 2
    assert schedule.mix_at(5) == MixedPhase(start_epoch=4, kappa=0.25)
    assert Algorithm1Schedule().horizon_at(3, 10) == 10 and Algorithm1Schedule().mix_at(99) is None
    assert schedule.curriculum == HorizonCurriculum(stage_epochs=2, restart_epochs=[6])
    with pytest.raises(OMGPTError, match="data.algorithm1.mixed: .*'kapa'"):
        Algorithm1Schedule.of({"mixed": {"kapa": 0.5}})
    with pytest.raises(OMGPTError, match="data.algorithm1.mixed.kappa must be"):
        Algorithm1Schedule.of({"mixed": {"kappa": 1.0}})


def test_pool_is_identical_on_every_rank_and_batches_sample_it():
    a, b = datamodule(rank=0, history_pool=100), datamodule(rank=1, history_pool=100)
    a.setup("fit"), b.setup("fit")
    assert all(torch.equal(a.pool[k], b.pool[k]) for k in a.pool)
    batch_a, batch_b = next(iter(a.train_dataloader())), next(iter(b.train_dataloader()))
    assert not torch.equal(batch_a["features"], batch_b["features"]), "ranks draw different rows"
    rows = a.pool["features"].flatten(1)
    assert (batch_a["features"].flatten(1)[:, None] == rows[None]).all(-1).any(-1).all(), "every row is a pool row"


@pytest.mark.parametrize("kappa, pool", [(1 / 3, None), (1 / 3, 200), (0.5, 200)])
def test_mixed_phase_keeps_the_kappa_proportion(kappa, pool):
    dm = datamodule(
        epoch=7, history_pool=pool, algorithm1={"mixed": {"start_epoch": 5, "kappa": kappa, "batches_per_epoch": 40}}
    )
    dm.setup("fit")
    dm._self_rollouts = lambda phase, epoch: fake_rollouts(60)  # what the model would have played
    batches = list(dm.train_dataloader())
    assert len(batches) == 40  # the mixed phase's batch count
    own = torch.cat([b["self_rollout"] for b in batches]).float()
    assert own.mean().item() == pytest.approx(1 - kappa, abs=0.05)  # 1280 draws
    for b in batches:  # flags match content: the fake rollouts are all 9s, f~ histories are not
        assert torch.equal(b["self_rollout"], (b["features"] == 9.0).all(-1).all(-1))
    dm.trainer.current_epoch = 4  # early phase: no self-rollouts at all
    assert not torch.cat([b["self_rollout"] for b in dm.train_dataloader()]).any()


def tiny_module() -> OMGPTModule:
    torch.manual_seed(0)
    return OMGPTModule(
        task="pricing",
        horizon=T,
        network=dict(n_layer=2, n_head=2, n_embd=16),
    )


def test_self_rollouts_are_played_by_the_model_not_the_oracle():
    module = tiny_module()
    dm = datamodule(module=module, algorithm1={"mixed": {"start_epoch": 1, "rollouts": 24, "rollout_batch": 10}})
    module.model.train()
    phase = dm.schedule.mix_at(1)
    assert dm.schedule.mix_at(0) is None and phase is not None
    h = dm._self_rollouts(phase, 1)
    assert h["features"].shape == (24, T, 7) and module.model.training, "train mode restored"
    with torch.no_grad():
        module.model.eval()
        predicted = module.task.project(module.model(h["features"], h["actions"]))
    torch.testing.assert_close(h["actions"], predicted, atol=1e-5, rtol=0)  # the model's own decisions
    assert (h["actions"] - h["targets"]).abs().mean() > 0.05, "an untrained model is not the oracle"
    assert dm._self_rollouts(phase, 1) is h  # held for the epoch, not played again


class WeightsAtEnd(Callback):
    def on_train_end(self, trainer, pl_module):
        self.weights = {k: v.clone() for k, v in pl_module.state_dict().items()}


def fit(tmp, max_epochs: int, ckpt_path=None):
    L.seed_everything(0, verbose=False)
    module = OMGPTModule(
        task="pricing",
        horizon=T,
        network=dict(n_layer=2, n_head=2, n_embd=16, dropout=0.1),
    )
    data = HistoryDataModule(
        task="pricing",
        horizon=T,
        batch_size=8,
        batches_per_epoch=3,
        history_pool=40,
        val_runs=8,
        val_batch_size=8,
        algorithm1={
            "curriculum": {"stage_epochs": 1},
            "mixed": {"start_epoch": 1, "rollouts": 12, "batches_per_epoch": 2},
        },
    )
    end = WeightsAtEnd()
    trainer = L.Trainer(
        max_epochs=max_epochs,
        accelerator="cpu",
        reload_dataloaders_every_n_epochs=1,
        num_sanity_val_steps=0,
        callbacks=[
            ModelCheckpoint(dirpath=tmp, save_last=True),
            Curriculum(),
            SelfRolloutRefresh(),
            end,
        ],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, datamodule=data, ckpt_path=ckpt_path)
    return end.weights, trainer


def test_resume_continues_pool_mixed_phase_curriculum_and_rng(tmp_path):
    """Stopped after epoch 1 (in the mixed phase) and resumed: the same final weights as one run."""
    straight, _ = fit(tmp_path / "a", max_epochs=3)
    fit(tmp_path / "b", max_epochs=2)
    resumed, trainer = fit(tmp_path / "c", max_epochs=3, ckpt_path=str(tmp_path / "b" / "last.ckpt"))
    assert trainer.global_step == 3 + 2 + 2
    for k in straight:
        torch.testing.assert_close(resumed[k], straight[k], rtol=0, atol=0, msg=k)
