"""The recipe study's variants are one-lever configs that the CLI accepts, and its report reads runs."""

from __future__ import annotations

import json

import pytest

from tools import recipe
from omgpt.commands.cli import cli_main


@pytest.mark.parametrize("variant", recipe.available())
def test_every_variant_parses_on_the_demo_config(variant, capsys):
    try:
        code = cli_main(["fit", *recipe.fit_command(variant, recipe.ROOT / "runs/recipe")[2:], "--print_config"])
    except SystemExit as e:  # LightningCLI exits after printing
        code = e.code
    assert code in (0, None)
    assert "seed_everything" in capsys.readouterr().out
    assert recipe.lever(variant)  # says which lever it moves


def test_report_plots_validation_against_cpu_time(tmp_path, monkeypatch):
    monkeypatch.setattr(recipe, "bayes_on_validation", lambda *task: {"regret": 10.0, "subopt": 0.2})  # measured below
    runs = tmp_path / "runs"
    for variant, regrets in (("baseline", [30.0, 25.0]), ("compact", [28.0, 20.0])):
        log = runs / variant / "version_0"
        log.mkdir(parents=True)
        rows = ["step,time/cpu_minutes,time/wall_minutes,val/regret,val/suboptimality,train/loss"]
        rows += [f"{99 + 100 * i},{1.5 * (i + 1)},{2.0 * (i + 1)},{r},{r / 20}," for i, r in enumerate(regrets)]
        rows += ["150,,,,,0.3"]  # a training row: not a validation point
        (log / "metrics.csv").write_text("\n".join(rows) + "\n")
        (runs / f"{variant}.log").write_text("`Trainer.fit` stopped: `max_epochs=2` reached.\n")
    unfinished = runs / "compact-rope" / "version_0"  # still training: never reported
    unfinished.mkdir(parents=True)
    (unfinished / "metrics.csv").write_text("step,time/cpu_minutes,val/regret,val/suboptimality\n99,1.0,1.0,0.1\n")
    recipe.report(runs, tmp_path / "out")
    data = json.loads((tmp_path / "out" / "recipe.json").read_text())
    variants = data["variants"]
    assert variants["compact"]["final"] == {"step": 200, "minutes": 3.0, "regret": 20.0, "subopt": 1.0}
    assert variants["baseline"]["best_regret"] == 25.0 and "compact-rope" not in variants
    rows = [
        line
        for line in (tmp_path / "out" / "report.md").read_text().splitlines()
        if line.startswith("| newsvendor | `")
    ]
    assert [row.split("`")[1] for row in rows] == ["compact", "baseline", "alg-star"]  # sorted by final regret
    assert "20.00 (2.00×)" in rows[0] and data["alg-star"] == {"newsvendor": {"regret": 10.0, "subopt": 0.2}}
    assert variants["compact"]["task"] == "newsvendor"
    assert (tmp_path / "out" / "curves.png").stat().st_size > 0


def test_a_pricing_variant_trains_on_pricing_and_the_rest_on_the_baselines_task():
    assert recipe.task_of("compact") == ("newsvendor", {})
    pricing = [v for v in recipe.available() if v.startswith("pricing-")]
    assert pricing and all(recipe.task_of(v) == ("pricing", {"dim": 6}) for v in pricing)


def test_the_bayes_reference_plays_the_modules_validation_episodes():
    """alg-star on the study's validation episodes: the module's own validation environments and
    seeds (the same histories a model's val/regret is measured on), deterministic, and far below a
    random policy on the very same episodes."""
    import torch

    from omgpt.module import validation_envs, validation_rollout
    from omgpt.policies import make_policy
    from omgpt.tasks import make_task

    task = make_task("newsvendor")
    envs = validation_envs(task, 8, 10_000)
    assert torch.equal(envs["w"], validation_envs(task, 8, 10_000)["w"])
    idx = torch.arange(8)
    star = (
        validation_rollout(task, envs, idx, make_policy("alg-star", task), 20, 10_000).cumulative_regret()[:, -1].mean()
    )
    rand = (
        validation_rollout(task, envs, idx, make_policy("random", task), 20, 10_000).cumulative_regret()[:, -1].mean()
    )
    assert 0 < star < rand / 5
