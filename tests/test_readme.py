"""The README's two commands are the ones the project has, and they work."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DEMO_COMMAND = "./setup.sh && .venv/bin/omgpt demo"
TEST_COMMAND = "./setup.sh && .venv/bin/python -m pytest -q"


def test_readme_names_the_two_commands_and_ci_runs_the_test_one():
    block = re.search(r"## The two commands.*?```bash\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == [DEMO_COMMAND, TEST_COMMAND]
    ci = (ROOT / ".ci/run").read_text()
    assert TEST_COMMAND in ci


def test_every_command_and_config_the_readme_mentions_exists():
    from omgpt.commands.cli import COMMANDS, LIGHTNING_COMMANDS

    for sub in set(re.findall(r"omgpt (\w+)", README)):
        if sub in ("fit", "validate", "test", "evaluate", "demo", "experiment"):
            assert sub in COMMANDS or sub in LIGHTNING_COMMANDS, sub
    for path in set(re.findall(r"(?<![\w/])((?:tests/)?configs/[\w/.-]+\.yaml)", README)):
        assert (ROOT / path).is_file(), path
    for path in (ROOT / "configs").rglob("*.yaml"):  # every shipped config parses
        assert isinstance(yaml.safe_load(path.read_text()), dict), path


def test_the_readmes_result_tables_are_the_ones_results_json_gives():
    """Generated blocks (<!-- table:NAME -->) hold exactly what tools.readme_tables builds from results/."""
    from tools import readme_tables

    assert "<!-- table:recipe -->" in README
    assert readme_tables.render(README) == README, "run: python -m tools.readme_tables"


@pytest.mark.slow
def test_setup_is_idempotent_and_the_demo_command_runs(tmp_path):
    """Run the README's set-up (a no-op when already set up) and the demo with a tiny budget."""
    setup = subprocess.run(["./setup.sh"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert setup.returncode == 0, setup.stderr[-2000:]
    omgpt = ROOT / ".venv/bin/omgpt"
    out = tmp_path / "demo"
    done = subprocess.run(
        [str(omgpt), "demo", "--max-steps", "3", "--runs", "4", "--out", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "evaluate/summary.json").read_text())
    assert {"omgpt", "alg-star", "erm", "fai", "oracle"} <= set(summary["policies"])
    assert "figure:" in done.stdout and "beat" in done.stdout and "Bayes-optimal alg-star" in done.stdout
    assert "the demo took" in done.stdout and "CPU-s" in done.stdout  # wall-clock and CPU time, apart


def test_an_experiment_row_counts_the_panels_where_omgpt_beats_the_best_benchmark():
    from tools.readme_tables import panel_cell

    def panel(title, **finals):
        return {"title": title, "benchmarks": ["erm", "fai"], "models_compared": [k for k in finals if k not in ("erm", "fai")],
                "policies": {k: {"final_regret": {"mean": v}} for k, v in finals.items()}}

    assert panel_cell(panel("won", omgpt=3.0, erm=5.0, fai=4.0)) == ("won: **3** vs fai 4", True)
    assert panel_cell(panel("lost", omgpt=4.5, erm=5.0, fai=4.0)) == ("lost: 4.5 vs fai 4", False)
    lstm = panel_cell(panel("models", transformer=3.0, **{"lstm-5": 4.2}, erm=5.0, fai=4.0))
    assert lstm == ("models: transformer **3**, lstm-5 4.2 vs fai 4", True)  # the first model compared decides
    head = {"title": "dp", "demand_prediction": {"methods": {"omgpt": {"mse": [2.0, 0.5]}, "ridge": {"mse": [1.0, 0.1]}}}}
    assert panel_cell(head) == ("dp: MSE after 2 samples 0.5 vs ridge 0.1", False)


def test_the_cost_table_counts_a_shared_model_once_and_adds_up_training_and_evaluation(tmp_path, monkeypatch):
    import json

    from tools import readme_tables

    def experiment(name, models, seconds, evaluation=None):
        result = {"name": name, "scale": "cpu", "panels": [{"horizon": 100}], "seconds": seconds,
                  "models": {key: {"key": key, "train_seconds": train} for key, train in models.items()}}
        if evaluation is not None:
            result["evaluation_seconds"] = evaluation
        (tmp_path / "results" / name).mkdir(parents=True)
        (tmp_path / "results" / name / "experiment.json").write_text(json.dumps(result))

    experiment("a", {"m1": 600.0, "pretrained/p": 1200.0}, seconds=2000.0, evaluation=120.0)
    experiment("b", {"m1": 600.0, "m2": 2400.0}, seconds=240.0)  # no evaluation_seconds: its total
    experiment("c", {"old": 60.0}, seconds=100.0)  # its model is not in the store: an older scale's run
    # the store's record counts, in CPU seconds where it has them (m2 shared a core: 2,400 s of wall-clock)
    for key, record in (("m1", {"train_seconds": 600.0}), ("m2", {"train_seconds": 2400.0, "cpu_seconds": 1800.0})):
        (tmp_path / "results" / "models" / key).mkdir(parents=True)
        (tmp_path / "results" / "models" / key / "done.json").write_text(json.dumps(record))
    monkeypatch.setattr(readme_tables, "ROOT", tmp_path)
    rows = readme_tables.cost_table().splitlines()
    assert rows[2] == "| `a` | cpu, 100 | 2 (1) | 30 | 2 |"
    assert rows[3] == "| `b` | cpu, 100 | 2 (0) | 30 | 4 |"  # m1 already counted under a
    assert rows[4].startswith("| `c` | cpu, 100 | 1 | not counted")
    assert rows[5] == "| **all counted** | | 3 distinct | **60** | **6** |"
    # 3,600 s training + 360 s evaluation = 1.1 core-hours; 1,800 + 360 s = 0.6 hours with two lanes
    assert rows[7].startswith("In all 1.1 core-hours;") and "about 0.6 hours" in rows[7] and "not yet counted (c)" in rows[7]
