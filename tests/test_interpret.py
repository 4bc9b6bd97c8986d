"""Interpretability (issue #7): hidden-state capture, probes, t-SNE, context manipulation, the
EmbeddingProbe callback, the probe / tsne / manipulate commands and the notebook, on tiny checkpoints."""

from __future__ import annotations

import json
import os
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import torch

from omgpt.analysis.capture import capture, collect, feature_position, record_hidden, run_from_layer
from omgpt.analysis.probing import probe_layers
from omgpt.commands.cli import cli_main
from omgpt.module import load_module

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs/scale/tiny.yaml")
HORIZON = 12


def _fit(tmp: Path, config: str, *extra: str) -> Path:
    args = [
        "fit",
        "--config",
        str(ROOT / "configs" / config),
        "--config",
        TINY,
        "--model.horizon",
        str(HORIZON),
        "--trainer.logger.init_args.save_dir",
        str(tmp / "runs"),
        "--trainer.enable_progress_bar",
        "false",
        *extra,
    ]
    assert cli_main(args) == 0
    (ckpt,) = sorted((tmp / "runs").rglob("last.ckpt"))
    return ckpt


@pytest.fixture(scope="module")
def pricing_ckpt(tmp_path_factory) -> Path:
    """A tiny OMGPT pre-trained (for seconds) on pricing with two demand types."""
    return _fit(tmp_path_factory.mktemp("pricing"), "pricing.yaml", "--model.task_options", "{demand_types: mixed}")


@pytest.fixture(scope="module")
def nonperishable_ckpt(tmp_path_factory) -> Path:
    return _fit(tmp_path_factory.mktemp("nonperishable"), "newsvendor.yaml", "--model.task", "newsvendor-nonperishable")


def _tokens(module, n=5, seed=0):
    task = module.task
    g = torch.Generator().manual_seed(seed)
    from omgpt.policies import make_policy
    from omgpt.rollout import rollout

    h = rollout(task, task.sample_envs(n, g), make_policy("noisy-oracle", task), HORIZON, g)
    return h.tokens()


# --------------------------------------------------------------------------------------------------
def test_captured_states_reproduce_the_output(pricing_ckpt):
    model = load_module(str(pricing_ckpt)).model.eval()
    features, actions = _tokens(load_module(str(pricing_ckpt)))
    with torch.no_grad():
        reference = model(features, actions)
    hidden, output = capture(model, features, actions)
    assert hidden.shape == (model.cfg.n_layer + 1, len(features), 2 * HORIZON, model.cfg.n_embd)
    assert torch.equal(output, reference), "the hooks must not change the model's output"
    for k in range(model.cfg.n_layer + 1):  # layer k's states, finished by blocks k.. and the read-out
        torch.testing.assert_close(run_from_layer(model, hidden[k], k), reference, atol=1e-5, rtol=1e-5)
    # Layer 0 is the input embedding with positions; the hooks are gone afterwards.
    pos = torch.arange(2 * HORIZON)
    emb = torch.stack([model.embed_features(features), model.embed_actions(actions)], 2).reshape(
        len(features), 2 * HORIZON, -1
    )
    torch.testing.assert_close(hidden[0], emb + model.pos_emb(pos))
    assert all(not b._forward_hooks and not b._forward_pre_hooks for b in model.blocks)
    # Selected positions: the feature token of X_t sits at 2(t-1).
    sel, _ = capture(model, features, actions, [feature_position(HORIZON)])
    torch.testing.assert_close(sel[:, :, 0], hidden[:, :, 2 * (HORIZON - 1)])


@pytest.mark.parametrize("layout,pos", [("compact", "rope"), ("transition", "learned"), ("transition", "rope")])
def test_capture_follows_the_one_token_layouts(layout, pos):
    """In the compact and transition layouts step t's one token sits at t-1; captured states finish to
    the model's output (with the rotary tables of a rope model), and collect probes that token."""
    from omgpt.module import OMGPTModule

    torch.manual_seed(0)
    module = OMGPTModule(
        task="pricing",
        horizon=HORIZON,
        network=dict(n_layer=2, n_head=2, n_embd=16, layout=layout, pos_encoding=pos),
    )
    model = module.model.eval()
    with torch.no_grad():
        for p in model.parameters():  # away from the near-constant output of the default init
            p.normal_(0.0, 0.2)
    features, actions = _tokens(module)
    hidden, output = capture(model, features, actions)
    assert hidden.shape == (3, len(features), HORIZON, 16) and feature_position(HORIZON, layout) == HORIZON - 1
    for k in range(3):
        torch.testing.assert_close(run_from_layer(model, hidden[k], k), output, atol=1e-5, rtol=1e-5)
    data = collect(model, module.task, 4, 5, seed=1, batch_size=4)
    replay = collect(model, module.task, 4, 5, seed=1, batch_size=4, keep_history=True).history
    at_step, _ = capture(model, *replay.tokens(), [feature_position(5, layout)])
    torch.testing.assert_close(data.hidden, at_step[:, :, 0])


def test_collect_labels_and_balance(pricing_ckpt):
    module = load_module(str(pricing_ckpt))
    data = collect(module.model, module.task, 10, 6, seed=3, batch_size=4)
    assert data.hidden.shape == (module.model.cfg.n_layer + 1, 10, module.model.cfg.n_embd)
    assert data.labels["square"].sum() == 5, "half linear, half square, as the paper's probing sets"
    assert [n for n, _ in data.param_names] == ["alpha", "beta"] and data.params.shape == (10, 12)
    again = collect(module.model, module.task, 10, 6, seed=3, batch_size=4)
    assert torch.equal(again.hidden, data.hidden), "seeded: the same histories again"
    other = collect(module.model, module.task, 10, 6, seed=3, batch_size=10)
    assert torch.equal(other.params, data.params), "the environments depend on the seed alone"


def test_probe_decodes_a_planted_feature_and_not_noise():
    rng = np.random.default_rng(0)
    n_train, n_test, d = 300, 200, 32
    x = rng.normal(size=(2, n_train + n_test, d))  # layer 0: noise; layer 1: carries the targets
    w = rng.normal(size=d)
    x[1] = rng.normal(size=(n_train + n_test, d))
    y_reg = x[1] @ w
    y_cls = (y_reg > 0).astype(int)
    tr, te = slice(0, n_train), slice(n_train, None)
    reg = probe_layers(x[:, tr], y_reg[tr], x[:, te], y_reg[te], "regression")
    cls = probe_layers(x[:, tr], y_cls[tr], x[:, te], y_cls[te], "classification")
    assert reg[1] < 0.01 and cls[1] < 0.15, (reg, cls)  # planted: near-zero error
    assert reg[0] > 0.9 and cls[0] > 0.7, (reg, cls)  # noise: chance level (1 = chance)


def test_capture_refuses_a_model_without_blocks():
    from omgpt.errors import OMGPTError

    with pytest.raises(OMGPTError, match="transformer backbone"):
        with record_hidden(torch.nn.Linear(2, 2)):
            pass


# --------------------------------------------------------------------------------------------------
def test_probe_and_tsne_commands(pricing_ckpt, tmp_path, capsys):
    out = tmp_path / "probe"
    assert (
        cli_main(
            [
                "probe",
                "--ckpt",
                str(pricing_ckpt),
                "--n-train",
                "48",
                "--n-test",
                "24",
                "--step",
                "10",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads((out / "probe.json").read_text())
    assert set(result["errors"]) == {"type", "params", "action", "demand_at_x"} and result["step"] == 10
    assert all(len(c) == 3 for c in result["errors"].values())  # tiny: 2 layers + the input embedding
    assert all(0 <= v <= 1 for c in result["minmax"].values() for v in c)
    assert (out / "probe.png").stat().st_size > 10_000
    assert "normalised held-out error" in capsys.readouterr().out

    out = tmp_path / "tsne"
    assert cli_main(["tsne", "--ckpt", str(pricing_ckpt), "--samples", "40", "--out", str(out)]) == 0
    result = json.loads((out / "tsne.json").read_text())
    assert result["label"] == "type" and result["layers"] == [0, 1, 2] and len(result["coords"]["0"]) == 40
    assert (out / "tsne.png").stat().st_size > 10_000

    out = tmp_path / "ood"
    first = pricing_ckpt.parent / "epoch000.ckpt" if (pricing_ckpt.parent / "epoch000.ckpt").exists() else pricing_ckpt
    assert (
        cli_main(
            [
                "tsne-training",
                "--ckpt",
                str(first),
                "--ckpt",
                str(pricing_ckpt),
                "--sequences",
                "8",
                "--steps",
                "6",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads((out / "training_ood.json").read_text())
    assert result["groups"][-1] == "Alg*" and len(result["names"]) == 8 * len(result["groups"])
    assert result["distance_to_alg_star"]["Alg*"] == 0.0
    assert (out / "training_ood.png").stat().st_size > 10_000


def test_manipulate_command(nonperishable_ckpt, tmp_path):
    out = tmp_path / "manip"
    assert (
        cli_main(["manipulate", "--ckpt", str(nonperishable_ckpt), "--n", "60", "--step", "50", "--out", str(out)]) == 0
    )
    result = json.loads((out / "manipulation.json").read_text())
    assert result["step"] == HORIZON and result["columns"] == [0]  # capped at the horizon; the inventory
    assert {"optimal_change", "tf_minus_a_star_before", "tf_minus_a_star_after", "optimal_quantity_change"} <= set(
        result
    )
    assert result["fraction_quantity_changed"] > 0.5, "U[0,10] inventories move the optimal order quantity"
    assert (out / "manipulation.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    "args, message",
    [
        (["probe", "--ckpt", "/no/such.ckpt"], "checkpoint not found"),
        (["probe", "--ckpt", "{pricing}", "--step", "99"], "--step must be in 1..12"),
        (["probe", "--ckpt", "{pricing}", "--n-train", "4"], "at least 8 training"),
        (["tsne", "--ckpt", "{pricing}", "--ckpt", "{pricing}"], "exactly one --ckpt"),
        (["tsne", "--ckpt", "{pricing}", "--label", "colour"], "--label must be"),
        (["tsne", "--ckpt", "{pricing}", "--layers", "0,7"], "--layers must lie in 0..2"),
        (["tsne", "--ckpt", "{nonperishable}", "--label", "type"], "mixed demand types"),
        (["tsne-training", "--ckpt", "{pricing}", "--ckpt", "{nonperishable}"], "trained on different tasks"),
        (["manipulate", "--ckpt", "{nonperishable}", "--columns", "9"], "context columns must lie in"),
        (["manipulate", "--ckpt", "{pricing}", "--columns", "state"], "no state column"),
        (["manipulate", "--ckpt", "{pricing}", "--low", "3", "--high", "1"], "low < high"),
        # the analyses report numbers: a burned test seed, or a validation seed, is refused
        (["probe", "--ckpt", "{pricing}", "--seed", "0"], "burned test seed"),
        (["tsne", "--ckpt", "{pricing}", "--seed", "1"], "burned test seed"),
        (["tsne-training", "--ckpt", "{pricing}", "--seed", "0"], "burned test seed"),
        (["manipulate", "--ckpt", "{nonperishable}", "--seed", "10000"], "not a test seed"),
        (["probe"], "required"),
    ],
)
def test_commands_reject_bad_input(args, message, pricing_ckpt, nonperishable_ckpt, capsys, tmp_path):
    args = [a.format(pricing=pricing_ckpt, nonperishable=nonperishable_ckpt) for a in args] + ["--out", str(tmp_path)]
    assert cli_main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("omgpt: error:") and message in err[0], err


# --------------------------------------------------------------------------------------------------
def test_the_probing_config_writes_figures_and_accuracies_into_the_run_folder(tmp_path, monkeypatch):
    """The shipped layer ``configs/trainer/callback/probing.yaml``, appended to a tiny fit as its comment
    says, probes every 5 epochs: the run folder gets the t-SNE grid, the probes' figure and their held-out
    errors per layer, and metrics.csv the same errors."""
    import csv

    monkeypatch.setattr("sys.argv", ["omgpt"])  # LightningCLI warns when both args and sys.argv are given
    configs = ROOT / "configs"
    args = [
        "fit", "--config", str(configs / "newsvendor.yaml"), "--config", str(configs / "scale/tiny.yaml"),
        "--trainer.callbacks+", str(configs / "trainer/callback/probing.yaml"),
        "--trainer.max_epochs", "5", "--model.horizon", "12", "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", str(tmp_path), "--trainer.logger.init_args.name", "run",
    ]  # fmt: skip
    assert cli_main(args) == 0
    run = tmp_path / "run" / "version_0"
    assert sorted(p.name for p in (run / "probes").iterdir()) == ["epoch004"]  # every 5 epochs
    folder = run / "probes" / "epoch004"
    assert {"tsne.png", "probe.png", "probe.json"} <= {p.name for p in folder.iterdir()}
    result = json.loads((folder / "probe.json").read_text())
    n_layers = 2 + 1  # the embedding and each of tiny's two blocks
    assert result["n_train"] == 256 and result["n_test"] == 128 and result["epoch"] == 4
    assert set(result["errors"]) == {"params", "action"}  # the newsvendor's hidden parameters and a*
    assert all(len(curve) == n_layers and all(np.isfinite(curve)) for curve in result["errors"].values())
    with open(run / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("probe/action/layer0")]
    assert len(rows) == 1 and float(rows[0]["probe/action/layer0"]) == pytest.approx(result["errors"]["action"][0])


def test_embedding_probe_callback_logs_and_saves(tmp_path):
    import lightning as L
    from lightning.pytorch.loggers import CSVLogger

    from omgpt.callbacks.probing import EmbeddingProbe
    from omgpt.datamodules import HistoryDataModule
    from omgpt.module import OMGPTModule

    opts = {"demand_types": "mixed"}
    module = OMGPTModule(
        "pricing",
        opts,
        horizon=8,
        network=dict(n_layer=2, n_head=2, n_embd=16),
    )
    data = HistoryDataModule(
        "pricing", opts, horizon=8, batch_size=8, batches_per_epoch=2, val_runs=8, val_batch_size=8
    )
    probe = EmbeddingProbe(every_n_epochs=2, n_train=24, n_test=16, tsne_samples=16)
    trainer = L.Trainer(
        max_epochs=2,
        callbacks=[probe],
        logger=CSVLogger(tmp_path),
        reload_dataloaders_every_n_epochs=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
    )
    collectives = []  # no collective may run inside the rank-0-only probe (it would stall DDP)
    for name in ("broadcast", "barrier", "reduce", "all_gather"):
        original = getattr(trainer.strategy, name)
        setattr(
            trainer.strategy,
            name,
            lambda *a, _n=name, _f=original, **k: (collectives.append((_n, probe.busy)), _f(*a, **k))[1],
        )
    run_probe = probe.probe

    def watched(*args, **kwargs):
        probe.busy = True
        try:
            return run_probe(*args, **kwargs)
        finally:
            probe.busy = False

    probe.busy, probe.probe = False, watched
    trainer.fit(module, data)
    assert not [c for c in collectives if c[1]], f"collective calls inside the probe: {collectives}"
    run = Path(trainer.log_dir)
    assert not (run / "probes" / "epoch000").exists(), "every 2 epochs: nothing after the first"
    folder = run / "probes" / "epoch001"
    result = json.loads((folder / "probe.json").read_text())
    assert set(result["errors"]) == {"type", "params", "action", "demand_at_x"} and len(result["tsne_knn"]) == 3
    for figure in ("probe.png", "tsne.png"):  # drawn figures, not empty files
        image = matplotlib.image.imread(folder / figure)
        assert image.shape[0] > 100 and image[..., :3].std() > 0.01, figure
    assert module.model.training, "the model is back in training mode"
    header = (run / "metrics.csv").read_text().splitlines()[0]
    assert "probe/action/layer0" in header and "probe/type/layer2" in header


DDP_SCRIPT = """
import sys
import lightning as L
from lightning.pytorch.loggers import CSVLogger
from omgpt.callbacks.probing import EmbeddingProbe
from omgpt.datamodules import HistoryDataModule
from omgpt.module import OMGPTModule

if __name__ == "__main__":
    opts = {"demand_types": "mixed"}
    module = OMGPTModule("pricing", opts, horizon=6, network=dict(n_layer=1, n_head=2, n_embd=8))
    data = HistoryDataModule("pricing", opts, horizon=6, batch_size=4, batches_per_epoch=2, val_runs=4, val_batch_size=2)
    trainer = L.Trainer(max_epochs=2, callbacks=[EmbeddingProbe(every_n_epochs=1, n_train=16, n_test=8, tsne=False)],
                        logger=CSVLogger(sys.argv[1]), reload_dataloaders_every_n_epochs=1, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, accelerator="cpu", devices=2, strategy="ddp")
    trainer.fit(module, data)
    # one file per rank: two ranks printing at once interleave their lines on the shared stdout
    with open(f"{sys.argv[1]}/checksum{trainer.global_rank}", "w") as f:
        f.write(repr(sum(float(p.double().sum()) for p in module.parameters())))
"""


@pytest.mark.slow
def test_embedding_probe_under_ddp_does_not_stall(tmp_path):
    """Two CPU ranks (gloo): the rank-0-only probe must make no collective call (``trainer.log_dir``
    broadcasts -- calling it from rank 0 alone deadlocked), and the ranks stay in sync."""
    import subprocess
    import sys

    script = tmp_path / "ddp_probe_run.py"
    script.write_text(DDP_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "logs")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    sums = {p.name[-1]: p.read_text() for p in (tmp_path / "logs").glob("checksum*")}
    assert set(sums) == {"0", "1"} and sums["0"] == sums["1"], sums
    folders = sorted(p.parent.name for p in (tmp_path / "logs").rglob("probe.json"))
    assert folders == ["epoch000", "epoch001"], folders


@pytest.mark.slow
def test_notebook_runs(pricing_ckpt, nonperishable_ckpt, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "analysis/notebooks/interpretability.ipynb", as_version=4)
    env = {
        "OMGPT_NOTEBOOK_CKPT": str(pricing_ckpt),
        "OMGPT_NOTEBOOK_MANIPULATION_CKPT": str(nonperishable_ckpt),
        "OMGPT_NOTEBOOK_OUT": str(tmp_path),
        "OMGPT_NOTEBOOK_QUICK": "1",
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        nbclient.NotebookClient(
            nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(ROOT)}}
        ).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    for name in ("probe.png", "tsne.png", "training_ood.png", "manipulation.png"):  # drawn, not empty files
        image = matplotlib.image.imread(tmp_path / name)
        assert image.shape[0] > 100 and image[..., :3].std() > 0.01, name
    probe = json.loads((tmp_path / "probe.json").read_text())  # the probe's errors, finite, for every target
    assert probe["errors"] and all(
        np.isfinite(v).all() for v in (np.asarray(x, dtype=float) for x in probe["errors"].values())
    ), probe["errors"]
    probed = tmp_path / "tiny" / "probing"  # section 6: the probing callback's output in its run folder
    assert {p.name for p in probed.rglob("probes/epoch004/*")} >= {"probe.json", "probe.png", "tsne.png"}
