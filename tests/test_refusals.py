"""Issue 68: a refused input changes nothing, and a resumed fit keeps its whole log.

* ``omgpt fit --ckpt_path last`` with a setting the checkpoint was not trained with is one line and exit
  2, and leaves the run's config.yaml and metrics.csv byte for byte as they were;
* a resumed fit's metrics.csv holds every row of the run, the earlier processes' included;
* the tools that read a record (tools/keep_previous.py: experiment.json; tools/real_demand_orders.py and
  tools/demand_retrain.py: a stored model's done.json) refuse a damaged one in one line naming the file,
  exit 2, before writing anything.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from omgpt.commands.cli import cli_main
from tests.test_safety import fit_args, one_line_error

ROOT = Path(__file__).resolve().parents[1]
VERSION = ("--trainer.logger.init_args.version", "run")


@pytest.fixture(scope="module")
def run_of_two_epochs(tmp_path_factory) -> Path:
    """A finished tiny newsvendor fit of 2 epochs (2 layers, horizon 12); its save_dir."""
    runs = tmp_path_factory.mktemp("fit") / "runs"
    with pytest.MonkeyPatch.context() as m:
        m.setattr(sys, "argv", ["omgpt"])
        assert cli_main(fit_args(runs, *VERSION)) == 0
    return runs


def rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize(
    "change",
    [
        ("--model.network.n_layer", "3"),
        ("--model.horizon", "10"),
        ("--model.target", "posterior"),
        ("--model.network.obs_head", "true", "--model.obs_target", "mean"),
    ],
    ids=lambda c: c[-2],
)
def test_a_refused_resume_of_the_last_checkpoint_leaves_config_and_metrics_as_they_were(
    change, run_of_two_epochs, capsys, monkeypatch
):
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    folder = run_of_two_epochs / "omgpt" / "run"
    before = {name: (folder / name).read_bytes() for name in ("config.yaml", "metrics.csv")}
    args = fit_args(run_of_two_epochs, *VERSION, *change, "--trainer.max_epochs", "3", "--ckpt_path", "last")
    assert cli_main(args) == 2
    line = one_line_error(capsys)
    assert "was trained with" in line and change[-2].removeprefix("--") in line, line
    assert {name: (folder / name).read_bytes() for name in before} == before


def test_a_resumed_fit_keeps_every_row_of_metrics_csv(tmp_path, monkeypatch):
    """Fit 2 epochs, resume to 4: metrics.csv holds the first process's rows, then the resumed epochs'."""
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    runs = tmp_path / "runs"
    assert cli_main(fit_args(runs, *VERSION)) == 0
    metrics = runs / "omgpt" / "run" / "metrics.csv"
    first = rows(metrics)
    assert {r["epoch"] for r in first} == {"0", "1"}
    assert cli_main(fit_args(runs, *VERSION, "--trainer.max_epochs", "4", "--ckpt_path", "last")) == 0
    every = rows(metrics)
    assert len(every) > len(first)
    # the first process's rows, unchanged (a wider header leaves their new columns empty)
    assert [{k: v for k, v in r.items() if k in first[0]} for r in every[: len(first)]] == first
    assert {r["epoch"] for r in every[len(first) :]} == {"2", "3"}
    validated = sorted({r["epoch"] for r in every if r.get("val/regret")})
    assert validated == ["0", "1", "2", "3"]


# --------------------------------------------------------------------------------------------------
# tools/keep_previous.py: a damaged experiment.json is one line naming the file and the key, nothing kept.
def damaged_reports() -> dict:
    from tests.test_readme import regret_panel, report

    good = report("x", [regret_panel("Pool", "pool", {"omgpt": 6.0, "alg-star": 2.0, "erm": 9.0}, 3.1)], {"pool": "k"})
    oops = json.loads(json.dumps(good))
    oops["panels"][0]["policies"]["omgpt"]["final_regret"]["mean"] = "oops"
    no_omgpt = json.loads(json.dumps(good))
    no_omgpt["panels"][0]["policies"]["ours"] = no_omgpt["panels"][0]["policies"].pop("omgpt")
    no_omgpt["panels"][0]["models_compared"] = ["ours"]
    return {
        "truncated": (json.dumps(good)[:200], "not valid JSON"),
        "no panels": (json.dumps({**good, "panels": []}), "key 'panels': is empty"),
        "a final regret of 'oops'": (json.dumps(oops), "key 'panels[0].policies.omgpt.final_regret.mean': expected"),
        "a model it does not record": (json.dumps({**good, "models": {}}), "key 'panels[0].model': 'pool'"),
        "no omgpt": (json.dumps(no_omgpt), "key 'panels[0].policies': no 'omgpt' policy"),
    }


@pytest.mark.parametrize("how", list(damaged_reports()))
def test_keep_previous_refuses_a_damaged_experiment_json_and_keeps_nothing(how, tmp_path, monkeypatch, capsys):
    from tests.test_store import exit_code
    from tools import keep_previous

    text, says = damaged_reports()[how]
    (tmp_path / "results" / "x").mkdir(parents=True)
    (tmp_path / "results" / "x" / "experiment.json").write_text(text)
    monkeypatch.setattr(keep_previous, "ROOT", tmp_path)
    assert exit_code(keep_previous.main, ["x", "--recipe", "CPU recipe"]) == 2
    line = one_line_error(capsys)
    assert str(tmp_path / "results" / "x" / "experiment.json") in line and says in line, line
    assert not (tmp_path / "results" / "previous-recipe").exists()


# --------------------------------------------------------------------------------------------------
# tools/real_demand_orders.py and tools/demand_retrain.py read a stored model through its done.json.
def stored_model(root: Path, experiment: str, model: str, how: str) -> Path:
    """The store slot of ``experiment``'s ``model`` under ``root``, holding a newsvendor model: beside the
    slot's own record (``swapped``: its checksum is not the file's), or with a record of its own
    (``foreign``: of task newsvendor)."""
    from omgpt.commands.experiment import experiment_keys, load_experiment
    from omgpt.commands.store import stamp
    from omgpt.files import write_json

    key = experiment_keys(load_experiment(experiment, "cpu"), [])[model]
    folder = root / "results" / "models" / key
    folder.mkdir(parents=True)
    (folder / "model.ckpt").write_bytes((ROOT / "pretrained/newsvendor/model.ckpt").read_bytes())
    if how == "swapped":
        (folder / "done.json").write_bytes((ROOT / "results/models" / key / "done.json").read_bytes())
    else:
        record = json.loads((ROOT / "results/models" / key / "done.json").read_text())
        write_json(stamp(record, folder / "model.ckpt"), folder / "done.json")
    return folder


REFUSED_MODEL = {"swapped": "not the model", "foreign": "a model of task newsvendor"}


@pytest.mark.parametrize("how", list(REFUSED_MODEL))
def test_real_demand_orders_refuses_a_model_its_record_does_not_vouch_for(how, tmp_path, monkeypatch, capsys):
    from tests.test_store import exit_code
    from tools import real_demand_orders

    folder = stored_model(tmp_path, "real-demand", "series0", how)
    monkeypatch.setattr(real_demand_orders, "ROOT", tmp_path)
    assert exit_code(real_demand_orders.main, ["--model", "series0", "--out", str(tmp_path / "out")]) == 2
    line = one_line_error(capsys)
    assert line.startswith("omgpt: error: --model series0: ") and REFUSED_MODEL[how] in line, line
    assert str(folder) in line and not (tmp_path / "out").exists()


@pytest.mark.parametrize("how", list(REFUSED_MODEL))
def test_demand_retrain_refuses_a_model_its_record_does_not_vouch_for(how, tmp_path, monkeypatch, capsys):
    from tests.test_store import exit_code
    from tools import demand_retrain

    folder = stored_model(tmp_path, "demand-prediction", "two-types", how)
    monkeypatch.setattr(demand_retrain, "ROOT", tmp_path)
    out = tmp_path / "table.json"
    assert exit_code(demand_retrain.main, ["--runs", "2", "--json", str(out)]) == 2
    line = one_line_error(capsys)
    assert REFUSED_MODEL[how] in line and str(folder) in line, line
    assert not out.exists()


# --------------------------------------------------------------------------------------------------
# The probing callback: refused when the trainer is built, or at setup, never epochs into the fit.
@pytest.mark.parametrize(
    "settings, says",
    [
        ({"seed": -1}, "EmbeddingProbe seed -1 is not a validation seed"),
        ({"seed": 6}, "EmbeddingProbe seed 6 is not a validation seed"),  # a test seed: reported numbers only
        ({"step": 0}, "EmbeddingProbe step"),
        ({"every_n_epochs": 0}, "EmbeddingProbe every_n_epochs"),
    ],
)
def test_the_probing_callback_refuses_bad_settings_when_built(settings, says):
    from omgpt.callbacks.probing import EmbeddingProbe
    from omgpt.errors import OMGPTError

    with pytest.raises(OMGPTError, match=says):
        EmbeddingProbe(**settings)
    assert EmbeddingProbe(seed=10_000).seed == 10_000  # the first validation seed, the default


def test_a_probed_lstm_fit_is_one_line_at_setup_and_writes_no_config(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    args = ["fit", "--config", str(ROOT / "configs/lstm.yaml"), "--config", str(ROOT / "configs/scale/tiny.yaml"),
            "--trainer.logger.init_args.save_dir", str(tmp_path), "--trainer.enable_progress_bar", "false",
            "--trainer.callbacks+", str(ROOT / "configs/trainer/callback/probing.yaml")]  # fmt: skip
    assert cli_main(args) == 2
    line = one_line_error(capsys)
    assert "EmbeddingProbe" in line and "LSTM backbone" in line, line
    assert not list(tmp_path.rglob("config.yaml")) and not list(tmp_path.rglob("metrics.csv"))
