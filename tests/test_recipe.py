"""The recipe study's variants are one-lever configs that the CLI accepts, and its report reads runs."""
from __future__ import annotations

import json

import pytest

from analysis import recipe
from omgpt.cli import cli_main


@pytest.mark.parametrize("variant", recipe.available())
def test_every_variant_parses_on_the_demo_config(variant, capsys):
    try:
        code = cli_main(["fit", *recipe.fit_command(variant, recipe.ROOT / "runs/recipe")[2:], "--print_config"])
    except SystemExit as e:  # LightningCLI exits after printing
        code = e.code
    assert code in (0, None)
    assert "seed_everything" in capsys.readouterr().out
    assert recipe.lever(variant)  # says which lever it moves


def test_report_plots_validation_against_cpu_time(tmp_path):
    runs = tmp_path / "runs"
    for variant, regrets in (("baseline", [30.0, 25.0]), ("compact", [28.0, 20.0])):
        log = runs / variant / "version_0"
        log.mkdir(parents=True)
        rows = ["step,time/cpu_minutes,time/wall_minutes,val/regret,val/suboptimality,train/loss"]
        rows += [f"{99 + 100 * i},{1.5 * (i + 1)},{2.0 * (i + 1)},{r},{r / 20},"  for i, r in enumerate(regrets)]
        rows += ["150,,,,,0.3"]  # a training row: not a validation point
        (log / "metrics.csv").write_text("\n".join(rows) + "\n")
        (runs / f"{variant}.log").write_text("`Trainer.fit` stopped: `max_epochs=2` reached.\n")
    unfinished = runs / "compact-rope" / "version_0"  # still training: never reported
    unfinished.mkdir(parents=True)
    (unfinished / "metrics.csv").write_text("step,time/cpu_minutes,val/regret,val/suboptimality\n99,1.0,1.0,0.1\n")
    recipe.report(runs, tmp_path / "out")
    data = json.loads((tmp_path / "out" / "recipe.json").read_text())
    assert data["compact"]["final"] == {"step": 200, "minutes": 3.0, "regret": 20.0, "subopt": 1.0}
    assert data["baseline"]["best_regret"] == 25.0 and "compact-rope" not in data
    rows = [line for line in (tmp_path / "out" / "report.md").read_text().splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == ["compact", "baseline"]  # sorted by final regret
    assert (tmp_path / "out" / "curves.png").stat().st_size > 0
