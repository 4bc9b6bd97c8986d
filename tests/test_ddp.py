"""Scale with one flag: a real 2-process DDP fit (CPU, gloo) and bf16 mixed precision.

The fit is given the one flag docs/cli.md documents, ``--trainer.devices 2`` (Lightning's automatic
strategy is DDP on more than one device), and ``--trainer.accelerator cpu`` only because this machine
has no GPU. DDP re-executes the command line, so the run goes through a subprocess
(``python -m omgpt fit ... --trainer.devices 2``), with the test-only ``tests.ddp_probe.Probe``
callback writing what each rank saw to ``rank<k>.json`` (its strategy and process-group backend too).
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from omgpt.commands.cli import cli_main
from omgpt.model import GPT, ModelConfig, NetworkConfig
from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.tasks import make_task
from tests.ddp_probe import kill_when_stalled, params_hash

ROOT = Path(__file__).resolve().parents[1]
NEWSVENDOR, TINY = str(ROOT / "configs/newsvendor.yaml"), str(ROOT / "configs/scale/tiny.yaml")
VAL_RUNS = 16


ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def ddp_command(tmp: Path, *extra: str) -> list[str]:
    """A tiny 2-process fit: 2 epochs (4 batches, then 2 in the mixed phase), validation after each."""
    return [
        sys.executable, "-m", "omgpt", "fit", "--config", NEWSVENDOR, "--config", TINY,
        "--trainer.accelerator", "cpu", "--trainer.devices", "2",
        "--model.horizon", "12", "--data.val_runs", str(VAL_RUNS), "--data.val_batch_size", "4",
        "--trainer.num_sanity_val_steps", "0",
        "--trainer.logger.init_args.save_dir", str(tmp / "runs"), "--trainer.enable_progress_bar", "false",
        "--trainer.callbacks+=tests.ddp_probe.Probe", "--trainer.callbacks.out", str(tmp / "probe"), *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("ddp")
    done = subprocess.run(ddp_command(tmp), cwd=tmp, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return tmp


def ranks(tmp: Path) -> list[dict]:
    states = [json.loads((tmp / "probe" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [s["rank"] for s in states] == [0, 1] and {s["world_size"] for s in states} == {2}
    assert states[0]["pid"] != states[1]["pid"], "two processes"
    assert {(s["strategy"], s["backend"]) for s in states} == {("DDPStrategy", "gloo")}, "the one flag gave DDP"
    return states


@pytest.mark.slow
def test_ddp_ranks_see_distinct_data_in_equal_counts(ddp_run):
    r0, r1 = ranks(ddp_run)
    assert r0["per_epoch"] == r1["per_epoch"] and len(r0["per_epoch"]) == 2  # equal batch counts: no hang
    hashes = [b["hash"] for r in (r0, r1) for b in r["batches"]]
    assert len(set(hashes)) == len(hashes), "a batch was repeated within or across ranks"
    assert [b["horizon"] for b in r0["batches"]] == [b["horizon"] for b in r1["batches"]]  # same curriculum stage
    assert r0["global_step"] == r1["global_step"] == sum(r0["per_epoch"].values())


def test_ddp_weights_are_identical_across_ranks_and_in_the_checkpoint(ddp_run):
    r0, r1 = ranks(ddp_run)
    assert r0["param_hash"] == r1["param_hash"]  # bit-identical after the gradient all-reduce
    from omgpt.module import load_module

    (last,) = (ddp_run / "runs").rglob("last.ckpt")
    module = load_module(str(last))
    assert params_hash(module) == r0["param_hash"]
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == r0["global_step"]


def test_ddp_validation_is_split_across_ranks_and_reduced(ddp_run):
    r0, r1 = ranks(ddp_run)
    # Each rank rolls out half of the validation environments, together all of them, once per epoch.
    epochs = len(r0["per_epoch"])
    assert len(r0["val_indices"]) == len(r1["val_indices"]) == epochs * VAL_RUNS // 2
    for e in range(epochs):
        half = VAL_RUNS // 2
        mine = [set(r["val_indices"][e * half : (e + 1) * half]) for r in (r0, r1)]
        assert not mine[0] & mine[1] and mine[0] | mine[1] == set(range(VAL_RUNS))
    # The logged val/regret is the mean over both ranks' environments, the same on every rank.
    assert r0["val_logged"] == r1["val_logged"] and len(r0["val_logged"]) == epochs
    for e in range(epochs):
        a, b = r0["val_local"][e], r1["val_local"][e]
        assert a["count"] == b["count"] == VAL_RUNS // 2
        pooled = (a["total_last"] + b["total_last"]) / (a["count"] + b["count"])
        assert a["total_last"] / a["count"] != b["total_last"] / b["count"]  # the ranks' own means differ...
        assert r0["val_logged"][e] == pytest.approx(pooled, rel=1e-6)  # ...and the logged one pools them


def test_ddp_checkpoints_and_logs_are_written_once(ddp_run):
    r0, r1 = ranks(ddp_run)
    assert r1["saved"] == [], "rank 1 wrote a checkpoint"
    epochs = len(r0["per_epoch"])
    names = [Path(p).name for p in r0["saved"]]  # per epoch end: the top-k file and last.ckpt, once each
    assert len(names) == 2 * epochs and names.count("last.ckpt") == epochs and len(set(names)) == epochs + 1, names
    runs = sorted(p.relative_to(ddp_run / "runs") for p in (ddp_run / "runs").glob("*/*") if p.is_dir())
    assert [str(p) for p in runs] == ["omgpt/version_0"], runs  # one run folder, one logger
    ckpts = {p.name for p in (ddp_run / "runs").rglob("*.ckpt")}  # (top-k replaced the older epoch's file)
    assert "last.ckpt" in ckpts and ckpts <= set(names)
    rows = list(csv.DictReader((ddp_run / "runs/omgpt/version_0/metrics.csv").open()))
    logged = [float(r["val/regret"]) for r in rows if r.get("val/regret")]
    assert logged == pytest.approx(r0["val_logged"])


@pytest.mark.slow
def test_ddp_regret_fine_tuning_rolls_out_per_rank_and_keeps_one_model(tmp_path):
    """Regret fine-tuning (issue 33) keeps the DDP contract: each rank rolls out its own environments
    (the rank is in their stream's key), the gradients are averaged, so both ranks end at the same
    weights -- moved from the supervised ones they started from -- and only rank 0 writes checkpoints."""
    from omgpt.module import OMGPTModule

    init = tmp_path / "supervised.ckpt"
    supervised = OMGPTModule(
        task="newsvendor",
        horizon=12,
        network=dict(n_layer=2, n_head=2, n_embd=16, dropout=0.05),
    )
    torch.save({"hyper_parameters": dict(supervised.hparams), "state_dict": supervised.state_dict()}, init)
    run = tmp_path / "finetune"
    command = ddp_command(
        run,
        "--model.finetune.objective",
        "regret",
        "--model.finetune.init_from",
        str(init),
        "--model.finetune.rollout_envs",
        "4",
        "--model.optim.lr",
        "0.01",
        "--trainer.max_epochs",
        "1",
        "--data.history_pool",
        "null",
    )
    done = subprocess.run(command, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    r0, r1 = ranks(run)
    assert r0["global_step"] == r1["global_step"] == len(r0["train_regret"]) == len(r1["train_regret"]) > 0
    assert all(a != b for a, b in zip(r0["train_regret"], r1["train_regret"])), "the ranks played the same environments"
    assert r0["param_hash"] == r1["param_hash"], "the ranks ended at different weights"
    assert r0["param_hash"] != params_hash(supervised), "fine-tuning did not move the weights"
    assert r1["saved"] == [] and r0["saved"]


@pytest.mark.slow
def test_ddp_fit_killed_mid_epoch_in_the_mixed_phase_resumes_to_the_uninterrupted_weights(ddp_run, tmp_path):
    """Both ranks SIGKILLed after step 5 (epoch 1, the mixed phase: each rank trains on its own
    self-rollouts), resumed from last.ckpt: every rank trains the uninterrupted run's remaining batch
    and both end at its weights (``ddp_run`` is the uninterrupted run: checkpoints do not change
    training)."""
    from tests.test_resume import fault_tolerant_config

    killed, resumed = tmp_path / "killed", tmp_path / "resumed"
    every_step = ("--config", str(fault_tolerant_config(tmp_path, every=1)))
    stall = (
        "--trainer.callbacks+=tests.ddp_probe.Stall",
        "--trainer.callbacks.out",
        str(killed / "stall"),
        "--trainer.callbacks.at_step",
        "5",
    )
    kill_when_stalled(
        ddp_command(killed, *every_step, *stall),
        tmp_path / "killed.log",
        killed / "stall",
        ranks=2,
        cwd=tmp_path,
        env=ENV,
    )
    (last,) = (killed / "runs").rglob("last.ckpt")
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 5

    done = subprocess.run(
        ddp_command(resumed, *every_step, "--ckpt_path", str(last)),
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for ref, before, after in zip(ranks(ddp_run), ranks(killed), ranks(resumed)):
        trained = [b for b in before["batches"] if b["step"] < 5] + after["batches"]  # (it had fetched step 5's batch)
        key = lambda b: (b["epoch"], b["batch_idx"], b["horizon"], b["hash"])  # noqa: E731
        assert [key(b) for b in trained] == [key(b) for b in ref["batches"]], (
            f"rank {ref['rank']} trained on other batches"
        )
        assert after["global_step"] == ref["global_step"] == 6
        assert after["param_hash"] == ref["param_hash"], f"rank {ref['rank']} ended at other weights"
        assert after["val_logged"] == ref["val_logged"][-1:]


# --------------------------------------------------------------------------------------------------
# bf16 mixed precision
def test_bf16_mixed_fit_runs_and_validates(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    code = cli_main([
        "fit", "--config", NEWSVENDOR, "--config", TINY, "--config", str(ROOT / "configs/trainer/bf16.yaml"),
        "--trainer.accelerator", "cpu", "--model.horizon", "12",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false",
    ])  # fmt: skip
    assert code == 0
    (metrics,) = (tmp_path / "runs").rglob("metrics.csv")
    regrets = [float(r["val/regret"]) for r in csv.DictReader(metrics.open()) if r.get("val/regret")]
    assert len(regrets) == 2 and all(math.isfinite(r) and r > 0 for r in regrets)  # validation rollouts ran
    (last,) = (tmp_path / "runs").rglob("last.ckpt")
    state = torch.load(last, map_location="cpu", weights_only=True)["state_dict"]
    assert all(v.dtype == torch.float32 for k, v in state.items() if v.is_floating_point())  # fp32 master weights


def test_kv_cache_decodes_under_bf16_autocast():
    """The cache is kept in the parameters' dtype and read back in the activations' (bf16 under
    autocast): decoding works either way, gives the fp32 decisions up to bf16's precision, and the
    rollout releases the cache at its end."""
    task = make_task("newsvendor")
    torch.manual_seed(0)
    model = GPT(
        ModelConfig.build(NetworkConfig(n_layer=2, n_head=2, n_embd=16, dropout=0.0), task, max_steps=20),
        task.scaling(),
    )

    def play(autocast: bool):
        envs = task.sample_envs(8, torch.Generator().manual_seed(0))
        policy = make_policy("omgpt", task, model=model)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            history = rollout(
                task, envs, policy, 20, torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
            )
        assert all(block.attn.k_cache is None for block in model.blocks)  # released by the rollout
        return history

    history = play(autocast=True)
    assert history.actions.dtype == torch.float32 and torch.isfinite(history.actions).all()
    reference = play(autocast=False)
    # bf16 keeps ~3 significant digits: the same decisions up to that (actions in [0, 30]).
    assert (history.actions - reference.actions).abs().max() < 0.5
    model.start_cache(8, 20)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        model.decode(0, torch.zeros(8, task.feature_dim), None)
    cache = model.blocks[0].attn.k_cache
    assert cache.dtype == torch.float32 and cache.shape == (8, 2, 2 * 20, 8)  # (B, heads, max tokens, head_dim)
    model.clear_cache()
