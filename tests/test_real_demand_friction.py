"""Issue 67's friction items on real demand (``newsvendor-data``), each with the test that fails without
its fix: the recommended fit configs (1), tuned files keyed by what the tuning read (2), ``omgpt
evaluate`` playing each test window once (3), the tuning's warnings (4), ``dnn-newsvendor`` trained by
steps (5), ``erm-linear`` the same in every process (6), ``omgpt tune --help`` (7) and the fit's
progress bar (8)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from omgpt.policies import newsvendor_features as nf

ROOT = Path(__file__).resolve().parents[1]


def pinball(x, y, beta, q):
    r = y - beta[0] - x @ beta[1:]
    return np.maximum(q * r, (q - 1) * r).sum()


def collinear_rows(n: int = 3000, seed: int = 0):
    """Inputs as the feature-based methods read them: a weekday one-hot (summing to the intercept),
    seven lags and their float32 mean (the lags' linear combination up to rounding), three other
    columns; standardised. The demand depends on the weekday and the first lag."""
    rng = np.random.default_rng(seed)
    day = np.arange(n) % 7
    lags = rng.gamma(3, 1 / 3, size=(n, 7)).astype(np.float32)
    x = np.c_[np.eye(7)[day], lags, lags.mean(1, dtype=np.float32), rng.normal(size=(n, 3))]
    x = x.astype(np.float32).astype(np.float64)
    x = (x - x.mean(0)) / x.std(0)
    return x, 1 + 0.3 * day + lags[:, 0] + rng.gamma(2, 0.5, n)


# --------------------------------------------------------------------------------------------------
# 6. erm-linear: the same fit in every process.
def test_the_linear_rule_drops_dependent_columns_and_reaches_the_lp_optimum():
    from omgpt.lp import quantile_regression

    x, y = collinear_rows()
    keep = nf.independent_columns(x)
    assert keep.sum() == x.shape[1] - 2 and not keep[6] and not keep[14], "the last weekday, the lags' mean"
    beta = nf.fit_linear(x, y, 0.75)
    assert np.abs(beta).max() < 100 and beta[1 + 6] == beta[1 + 14] == 0.0
    reference = quantile_regression(x[:, keep], y, 0.75, 0.0)  # HiGHS on the independent columns
    assert pinball(x, y, beta, 0.75) == pytest.approx(pinball(x[:, keep], y, reference, 0.75), rel=1e-7)


FIT = """
import sys, numpy as np
from omgpt.policies.newsvendor_features import fit_linear
data = np.load(sys.argv[1])
beta = fit_linear(data["x"], data["y"], 0.75)
np.save(sys.argv[2], beta[0] + data["x"] @ beta[1:])
"""


def test_the_linear_rule_orders_alike_in_two_processes_on_one_thread_and_two(tmp_path):
    """On bakery the fit differed between processes of one and two threads by up to 2.9 levels (costs
    49.59 against 49.65): with the dependent columns the normal equations were singular."""
    x, y = collinear_rows()
    np.savez(tmp_path / "rows.npz", x=x, y=y)
    orders = []
    for threads in (1, 2):
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
        out = tmp_path / f"orders{threads}.npy"
        subprocess.run(
            [sys.executable, "-c", FIT, str(tmp_path / "rows.npz"), str(out)], env=env, check=True, timeout=300
        )
        orders.append(np.load(out))
    assert np.abs(orders[0] - orders[1]).max() < 1e-7


# --------------------------------------------------------------------------------------------------
# 5. dnn-newsvendor: trained by steps on a small table.
def test_the_default_network_takes_enough_steps_on_a_small_table():
    """3,000 training rows: 10 passes in batches of 1,024 were 30 Adam steps, and the network's loss
    2.4x the unconditional quantile's; the default now takes nf.MIN_STEPS steps."""
    import torch

    rng = np.random.default_rng(0)
    x, xt = rng.normal(size=(3000, 20)), rng.normal(size=(2000, 20))
    y, yt = (np.exp(0.4 * z[:, 0] + 0.2 * z[:, 1] + 0.3 * rng.normal(size=len(z))) for z in (x, xt))
    net = nf.fit_network(x, y, 0.75, width=32)
    with torch.no_grad():
        ours = net(torch.as_tensor(xt, dtype=torch.float32)).double().numpy()
    loss = lambda r: np.maximum(0.75 * r, -0.25 * r).mean()  # noqa: E731
    assert loss(yt - ours) < 0.8 * loss(yt - np.quantile(y, 0.75))
    assert nf.default_epochs(3000) * 3 >= nf.MIN_STEPS
    assert nf.default_epochs(77_700) == 10, "bakery's series split trains the 10 passes it was measured at"


# --------------------------------------------------------------------------------------------------
# 8. The fit's progress bar shows the metric that keeps the checkpoint.
@pytest.mark.parametrize("monitor", ["val/scaled_cost", None])
def test_the_progress_bar_shows_the_checkpoint_s_metric(tmp_path, monitor):
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    from datamodules.history import HistoryDataModule
    from omgpt.module import OMGPTModule
    from tests.test_real_data import write_table

    options = dict(
        csv=str(write_table(tmp_path / "t.csv")),
        series="shop",
        date="day",
        demand="sales",
        lookback=7,
        critical_ratio=[0.5, 0.9],
    )
    module = OMGPTModule(
        task="newsvendor-data", task_options=options, horizon=14, network=dict(n_layer=1, n_head=1, n_embd=8)
    )
    data = HistoryDataModule(
        task="newsvendor-data",
        task_options=options,
        horizon=14,
        batch_size=4,
        batches_per_epoch=2,
        val_runs=4,
        val_batch_size=4,
        data_policy="random",
        algorithm1={"curriculum": None, "mixed": None},
    )
    callbacks = [ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor=monitor, mode="min")]
    trainer = L.Trainer(
        max_epochs=1,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        reload_dataloaders_every_n_epochs=1,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, data)
    shown = {k for k in trainer.progress_bar_metrics if k.startswith("val/")}
    assert shown == {monitor or "val/regret"}, shown


# --------------------------------------------------------------------------------------------------
# 3. omgpt evaluate plays each window of a data task's part once.
def table_options(path) -> list[str]:
    pairs = dict(csv=path, series="shop", date="day", demand="sales", horizon=14, lookback=7, critical_ratio=0.75)
    return [a for k, v in pairs.items() for a in ("--option", f"{k}={v}")]


def test_evaluate_plays_each_test_window_once_and_refuses_more_runs(tmp_path, capsys):
    import json

    from omgpt.commands.cli import cli_main
    from tests.test_real_data import task_of, write_table

    table = write_table(tmp_path / "t.csv")
    windows = task_of(table, part="test").windows
    base = ["evaluate", "--task", "newsvendor-data", *table_options(table), "--option", "part=test"]
    base += ["--policies", "saa", "--no-progress"]
    assert cli_main([*base, "--out", str(tmp_path / "all")]) == 0
    out = capsys.readouterr().out
    assert f"the test part's {windows} windows, each played once" in out
    assert json.loads((tmp_path / "all" / "summary.json").read_text())["runs"] == windows
    assert cli_main([*base, "--runs", str(windows + 1), "--out", str(tmp_path / "more")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--runs {windows + 1} is more than the test part's {windows} windows" in err
    assert not (tmp_path / "more").exists()
    assert cli_main([*base, "--runs", "2", "--out", str(tmp_path / "two")]) == 0
    assert f"2 of the test part's {windows} windows" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------
# 7. omgpt tune --help names the tunable benchmarks.
def test_tune_help_lists_each_task_s_tunable_benchmarks(capsys, tmp_path):
    from omgpt.commands.cli import cli_main
    from omgpt.commands.tune import tunable_policies
    from tests.test_real_data import task_of, write_table

    with pytest.raises(SystemExit) as done:
        cli_main(["tune", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")  # the help's lines wrapped at hyphens
    data = tunable_policies(task_of(write_table(tmp_path / "t.csv")))
    assert len(data) == 11 and f"newsvendor-data: {', '.join(data)};" in text
    assert "mab: ts, ucb;" in text and "erm, fai" in text


# --------------------------------------------------------------------------------------------------
# 4. The tuning says when a tuned constant should not be trusted.
def test_a_lead_within_two_paired_standard_errors_is_a_warning():
    import torch

    from omgpt.commands.tune import paired_se, tuning_warnings

    a = torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 10.0]], dtype=torch.float64)
    assert paired_se(a, a) == 0.0
    shifted = a + torch.tensor([[0.1, 0.0], [-0.1, 0.0], [0.3, 0.0]], dtype=torch.float64)
    assert paired_se(a, shifted) > 0
    warn = lambda lead, se, is_paper=False, runs=100: tuning_warnings(
        {"k": 1}, {}, {}, {"lead": lead, "se": se}, is_paper, runs
    )  # noqa: E731
    assert len(warn(0.01, 0.01)) == 1 and "cannot tell them apart" in warn(0.01, 0.01)[0]
    assert warn(-0.01, 0.01), "the paper's constants better than the whole grid"
    assert warn(0.05, 0.01) == [] and warn(0.0, 0.0, is_paper=True) == []
    assert "only 7 validation environments" in warn(0.05, 0.01, runs=7)[0]


def test_tune_warns_of_range_ends_and_a_small_validation_part_in_its_log_and_file(tmp_path):
    """Demand doubles on promotion days: the cost-fitted linear rule fits it best unpenalised (l1 = 0,
    the end of its range), on the one validation shop's few windows."""
    from omgpt.commands.tune import run_tuning
    from tests.test_real_data import write_table

    table = write_table(tmp_path / "t.csv", days=200, demand=lambda s, d, promo: (10 + 2 * s) * (1 + promo))
    options = dict(csv=str(table), series="shop", date="day", demand="sales", lookback=7, critical_ratio=0.75)
    lines: list[str] = []
    content = run_tuning(
        "newsvendor-data", options, ["saa", "erm-linear"], horizon=14, folder=tmp_path / "tuned", log=lines.append
    )
    assert "validation windows, each played once" in lines[0]
    windows = int(lines[0].split(": ")[1].split()[0])
    for name, entry in content["policies"].items():
        warnings = entry["warnings"]
        assert f"only {windows} validation environments (under 30)" in warnings[-1]
        for k, side in entry["at_limit"].items():
            assert any(w.startswith(f"{k} = ") and f"the {side} end of its range" in w for w in warnings)
        assert {"lead", "se"} <= set(entry["versus_paper"])
        assert [line.split(": WARNING: ", 1)[1] for line in lines if f" {name}-tuned: WARNING: " in line] == warnings
    assert content["policies"]["erm-linear"]["at_limit"] == {"l1": "low"}
    assert content["policies"]["erm-linear"]["warnings"][0].startswith("l1 = 0 is the low end of its range")


# --------------------------------------------------------------------------------------------------
# 2. Tuned constants keyed by what the tuning read, not by the test share.
def test_tuned_constants_are_keyed_by_the_parts_the_tuning_read_not_by_the_test_share(tmp_path, monkeypatch):
    """The time split of 205 days: test_share 0.25 and 0.252 cut the test part a day apart and the
    training and validation parts alike (one tuning serves both); 0.253 moves the training cut."""
    from omgpt.commands.tune import run_tuning
    from omgpt.errors import OMGPTError
    from omgpt.policies import make_policy
    from omgpt.tuning import setting_key
    from tests.test_real_data import task_of, write_table

    table = write_table(tmp_path / "t.csv", days=205)
    tasks = {
        s: task_of(table, split="time", test_share=s, part="test", critical_ratio=0.75) for s in (0.25, 0.252, 0.253)
    }
    assert tasks[0.25].data.test_from != tasks[0.252].data.test_from
    assert tasks[0.25].data.validation_from == tasks[0.252].data.validation_from
    keys = {s: setting_key("newsvendor-data", t.options(), 14) for s, t in tasks.items()}
    assert keys[0.25] == keys[0.252] != keys[0.253]
    assert "test_share" not in keys[0.25] and "-validation=2021-05-07..2021-06-03-T14" in keys[0.25]
    options = {k: v for k, v in tasks[0.25].options().items() if k not in ("part", "horizon")}
    run_tuning("newsvendor-data", options, ["saa"], horizon=14, folder=tmp_path / "tuned", log=lambda line: None)
    monkeypatch.setenv("OMGPT_TUNED_DIR", str(tmp_path / "tuned"))
    make_policy("saa-tuned", tasks[0.252], 14)  # the same tuning
    with pytest.raises(
        OMGPTError,
        match=r"no tuned constants for \S+-validation=2021-05-06\.\.\S+ .*; run: omgpt tune .* --option csv=\S+/t\.csv .*test_share=0.253",
    ):
        make_policy("saa-tuned", tasks[0.253], 14)


def test_shares_that_cut_the_default_parts_keep_the_default_name(tmp_path):
    """20 shops in the series split: 0.15 and 0.16 both hold out 3 test and 3 validation shops."""
    from omgpt.tuning import setting_key
    from tests.test_real_data import task_of, write_table

    table = write_table(tmp_path / "t.csv", shops=20, days=40)
    key = lambda **shares: setting_key("newsvendor-data", task_of(table, group="shop", **shares).options(), 14)  # noqa: E731
    assert key() == key(test_share=0.16) == key(test_share=0.16, validation_share=0.14)
    assert "share" not in key() and "groups" not in key()
    assert key(test_share=0.25).endswith("-test_groups=5-validation_groups=3-T14")
    time = lambda **shares: key(split="time", **shares)  # noqa: E731
    assert time() == time(test_share=0.15) and time().endswith("-split=time-T14")


def test_every_committed_tuned_file_and_experiment_panel_still_finds_its_tuning():
    from omgpt.commands.experiment.config import available, load_experiment
    from omgpt.tuning import TUNED, read_tuned, tuned_path

    files = sorted(TUNED.glob("*.json"))
    assert len(files) > 40
    for path in files:
        read_tuned(path)  # its setting's key is its name
    for name in available():
        for panel in load_experiment(name, "cpu").panels:
            if any(p.endswith("-tuned") for p in panel.policies):
                assert tuned_path(panel.tuned_on).is_file(), (name, panel.title, panel.tuned_on)


# --------------------------------------------------------------------------------------------------
# 1 and 7. docs/real-demand.md: one fit config per split kind, the shipped tables, the tunable benchmarks.
def test_the_docs_recommend_one_fit_config_per_split_and_name_the_tables_and_benchmarks(tmp_path):
    import yaml

    from omgpt.commands.tune import tunable_policies
    from omgpt.demand_data import DATASETS
    from tests.test_real_data import task_of, write_table

    text = (ROOT / "docs/real-demand.md").read_text()
    own = text[text.index("**Your own table, no code change.**") :]
    configs = {}
    for line in own[own.index("**Which fit config for a new table.**") :].splitlines():
        if line.startswith("| `split="):
            split, config = line.split("`")[1].removeprefix("split="), line.split("`")[3]
            configs[split] = config
    assert configs == {"series": "configs/pretrained/bakery.yaml", "time": "configs/pretrained/bakery-time.yaml"}
    for split, config in configs.items():
        assert yaml.safe_load((ROOT / config).read_text())["model"]["task_options"]["split"] == split
    for name in DATASETS:
        assert f"`--option dataset={name}`" in own
    hint = " ".join(own[own.index("(`--policies` of `tune`") :].split("\n\n")[0].split())
    tuned = own.split("omgpt tune --task newsvendor-data $SID --horizon 100 --policies ")[1].split()[0].split(",")
    others = set(tunable_policies(task_of(write_table(tmp_path / "t.csv")))) - set(tuned)
    assert len(others) == 9 and all(f"`{name}`" in hint for name in others), (others, hint)


def test_the_configs_validate_on_every_bakery_validation_window_once():
    """The docs: val_runs 165 and 105 are bakery's validation windows (a new table sets its own)."""
    pytest.importorskip("ddop")
    import yaml

    from omgpt.tasks import make_task

    for config in ("bakery.yaml", "bakery-time.yaml"):
        cfg = yaml.safe_load((ROOT / "configs/pretrained" / config).read_text())
        options = {**cfg["model"]["task_options"], "part": "validation"}
        windows = make_task("newsvendor-data", horizon=cfg["model"]["horizon"], **options).windows
        assert cfg["data"]["val_runs"] == windows, (config, windows)
