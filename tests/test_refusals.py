"""Issue 68: a refused input changes nothing, and a resumed fit keeps its whole log.

* ``omgpt fit --ckpt_path last`` with a setting the checkpoint was not trained with is one line and exit
  2, and leaves the run's config.yaml and metrics.csv byte for byte as they were;
* a resumed fit's metrics.csv holds every row of the run, the earlier processes' included.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from omgpt.commands.cli import cli_main
from tests.test_safety import fit_args, one_line_error

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
