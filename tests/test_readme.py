"""The README and the docs/ pages: the two commands are the ones the project has and they work, every
command, config and file they name exists, every link resolves, and their generated tables are what
``results/`` says."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from omgpt.errors import OMGPTError

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PAGES = {
    path: path.read_text()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "RESULTS.md"]
}
DEMO_COMMAND = "./setup.sh && .venv/bin/omgpt demo"
TEST_COMMAND = "./setup.sh && .venv/bin/python -m pytest -q"


def test_readme_names_the_two_commands_and_ci_runs_the_test_one():
    block = re.search(r"## The two commands.*?```bash\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == [DEMO_COMMAND, TEST_COMMAND]
    ci = (ROOT / ".ci/run").read_text()
    assert TEST_COMMAND in ci


def test_the_readme_is_short_and_links_every_docs_page():
    assert (ROOT / "README.md").stat().st_size <= 20_000, "README.md over 20 KB: move the detail to a docs/ page"
    for path in PAGES:
        if path.parent.name == "docs":
            assert f"](docs/{path.name})" in README, f"README.md does not link docs/{path.name}"


def test_every_command_config_and_file_the_pages_mention_exists():
    from omgpt.commands.cli import COMMANDS, LIGHTNING_COMMANDS

    for path, text in PAGES.items():
        for sub in re.findall(r"(?:^|[\s`(/])omgpt ([a-z][\w-]*)", text, re.M):
            assert sub in COMMANDS or sub in LIGHTNING_COMMANDS, (path.name, f"omgpt {sub}")
        for module in re.findall(r"python -m (tools\.[a-z_]+)", text):
            assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), (path.name, module)
        # every file named in full: configs, scripts, notebooks, modules (a capitalised NAME is a placeholder)
        for name in re.findall(
            r"(?<![\w/.<-])((?:configs|tests|omgpt|tools|benchmarks|examples|analysis|callbacks|datamodules)"
            r"/[\w/.-]*\.(?:yaml|py|ipynb))",
            text,
        ):
            assert re.search(r"\b[A-Z]{2,}\b", name) or (ROOT / name).is_file(), (path.name, name)
    for path in (ROOT / "configs").rglob("*.yaml"):  # every shipped config parses
        assert isinstance(yaml.safe_load(path.read_text()), dict), path


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    prose = re.sub(r"```.*?```", "", text, flags=re.S)  # a '# comment' in a code block is no heading
    return {_anchor(h) for h in re.findall(r"^#{1,6} (.*)$", prose, re.M)}


def test_every_relative_link_in_the_pages_resolves():
    for path, text in PAGES.items():
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            assert linked.exists(), (path.name, target)
            assert linked.is_relative_to(ROOT), (path.name, target)  # the repository cites its own files
            if anchor:
                assert anchor in _anchors(linked.read_text()), (path.name, target)


def test_the_anchor_of_a_heading_is_githubs():
    assert _anchor("The main job: `omgpt demo`") == "the-main-job-omgpt-demo"
    assert (
        _anchor("The CPU recipe: what keeps OMGPT learning in context (measured)")
        == "the-cpu-recipe-what-keeps-omgpt-learning-in-context-measured"
    )


def test_the_pages_result_tables_are_the_ones_results_json_gives():
    """Generated blocks (<!-- table:NAME -->) hold exactly what tools.readme_tables builds from results/,
    each in one page, with links relative to that page."""
    from tools import readme_tables

    assert set(readme_tables.pages()) == set(PAGES)
    for name in readme_tables.TABLES:
        assert sum(f"<!-- table:{name} -->" in text for text in PAGES.values()) == 1, name
    for path, text in PAGES.items():
        assert readme_tables.render(text, path) == text, f"{path.name}: run python -m tools.readme_tables"
    assert "<!-- table:summary -->" in README and "<!-- table:experiments -->" in PAGES[ROOT / "docs" / "results.md"]


def test_a_table_in_a_docs_page_links_relative_to_it():
    from tools import readme_tables

    block = "<!-- table:pretrained -->\n<!-- /table:pretrained -->"
    assert "](pretrained/newsvendor/card.md)" in readme_tables.render(block, ROOT / "README.md")
    in_docs = readme_tables.render(block, ROOT / "docs" / "x.md")
    assert "](../pretrained/newsvendor/card.md)" in in_docs and "](pretrained/" not in in_docs


@pytest.mark.slow
def test_setup_is_idempotent_and_the_demo_command_runs(tmp_path):
    """Run the README's set-up (a no-op when already set up) and the demo with a tiny budget."""
    setup = subprocess.run(["./setup.sh"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert setup.returncode == 0, setup.stderr[-2000:]
    omgpt = ROOT / ".venv/bin/omgpt"
    out = tmp_path / "demo"
    done = subprocess.run(
        [str(omgpt), "demo", "--max-steps", "3", "--runs", "4", "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "evaluate/summary.json").read_text())
    assert {"omgpt", "alg-star", "erm", "fai", "oracle"} <= set(summary["policies"])
    assert "figure:" in done.stdout and "beat" in done.stdout and "Bayes-optimal alg-star" in done.stdout
    assert "the demo took" in done.stdout and "CPU-s" in done.stdout  # wall-clock and CPU time, apart


def test_an_experiment_row_gives_each_panels_three_state_verdict():
    """A panel's cell shows its paired verdict (below / level / behind, and its runs) and bolds OMGPT only
    where the interval lies wholly below the best benchmark: a lower mean whose interval holds the null
    is *level*, not a win."""
    from tools.readme_tables import _state_words, panel_cell

    def panel(title, states=None, **finals):
        numbers = {
            "title": title,
            "benchmarks": ["erm", "fai"],
            "models_compared": [k for k in finals if k not in ("erm", "fai")],
            "policies": {k: {"final_regret": {"mean": v}} for k, v in finals.items()},
            "best_benchmark": {"name": "fai"},
        }
        if states:
            numbers["vs_best"] = {k: {"state": v, "runs": 1200} for k, v in states.items()}
        return numbers

    assert panel_cell(panel("won", {"omgpt": "below"}, omgpt=3.0, erm=5.0, fai=4.0)) == (
        "won: **3** vs fai 4 (below, 1,200 runs)",
        "below",
    )
    assert panel_cell(panel("close", {"omgpt": "level"}, omgpt=3.9, erm=5.0, fai=4.0)) == (
        "close: 3.9 vs fai 4 (level, 1,200 runs)",
        "level",
    )
    assert panel_cell(panel("old", omgpt=3.0, erm=5.0, fai=4.0)) == ("old: 3 vs fai 4 (no paired interval)", None)
    lstm = panel_cell(
        panel(
            "models", {"transformer": "below", "lstm-5": "level"}, transformer=3.0, **{"lstm-5": 4.2}, erm=5.0, fai=4.0
        )
    )
    assert lstm[1] == "below" and lstm[0].startswith("models: transformer **3**, lstm-5 4.2 vs fai 4")
    head = {
        "title": "dp",
        "demand_prediction": {
            "methods": {"omgpt": {"mse": [2.0, 0.5]}, "ridge": {"mse": [1.0, 0.1]}},
            "head_vs_ridge": {"mean": 5.0, "ci90": [4.0, 6.5], "runs": 100},
        },
    }
    assert panel_cell(head) == ("dp: MSE after 2 samples 0.5 vs ridge 0.1 (behind)", "behind")
    # beyond-alg-star: the model its validation selection kept decides, not the supervised one
    tuned = panel("rl", {"omgpt": "behind", "omgpt-rl": "below"}, omgpt=4.5, **{"omgpt-rl": 3.5}, erm=5.0, fai=4.0)
    assert panel_cell({**tuned, "finetuning": {"selection": {"kept": "omgpt-rl"}}})[1] == "below"
    assert panel_cell({**tuned, "finetuning": {"selection": {"kept": "omgpt"}}})[1] == "behind"
    # real demand: the headline metric (cost per unit demanded) and its cluster interval decide
    real = panel("stores", omgpt=3.0, erm=5.0, fai=4.0)
    real["costs"] = {k: {"scaled_cost": {"mean": v}} for k, v in {"omgpt": 0.1057, "erm": 0.2, "fai": 0.1048}.items()}
    real["costs"]["omgpt"]["ratio_to"] = {"fai": {"mean": 1.01, "ci90": [0.95, 1.07]}}
    assert panel_cell(real) == ("stores: 0.1057 vs fai 0.1048", "level")
    real["title"] = "Held-out stores (split 3), q = 0.5"
    assert panel_cell(real)[0] == "stores split 3, q 0.5: 0.1057 vs fai 0.1048"
    real["title"] = "Later dates (origin 3), q = 0.9"
    pooled = {k: {"scaled_cost": {"mean": v}} for k, v in {"omgpt": 0.09, "erm": 0.2, "fai": 0.1}.items()}
    pooled["omgpt"]["ratio_to"] = {"fai": {"mean": 0.9, "ci90": [0.8, 1.01]}}
    real["pooled"] = {"origins": [1, 2, 3], "costs": pooled}
    assert panel_cell(real)[0] == (
        "dates origin 3, q 0.9: 0.1057 vs fai 0.1048 (origins pooled: 0.0900 vs fai 0.1000, 0.90× [0.80, 1.01])"
    )
    assert _state_words(["below", "level", None, "level"]) == "1 below / 2 level / 0 behind"


def test_an_inline_number_is_written_from_its_json_and_a_stale_one_fails_the_check(tmp_path, monkeypatch):
    """<!-- n:FILE:PATH|FORMAT -->: render writes the value its JSON holds, so a page whose number has
    drifted differs from its render (the --check); a value that no longer exists is one line naming it."""
    from tools import readme_tables

    (tmp_path / "r.json").write_text(
        json.dumps({"panels": [{"title": "Queueing control", "ratio": {"mean": 1.074, "ci90": [0.92, 1.288]}}]})
    )
    monkeypatch.setattr(readme_tables, "ROOT", tmp_path)
    monkeypatch.setattr(readme_tables, "_JSON", {})
    page = tmp_path / "page.md"
    stale = "OMGPT at <!-- n:r.json:panels/title=Queueing control/ratio|x-ci -->1.12× [0.98, 1.34]<!-- /n --> alg-star."
    fresh = readme_tables.render_values(stale, page)
    assert (
        fresh
        == "OMGPT at <!-- n:r.json:panels/title=Queueing control/ratio|x-ci -->1.07× [0.92, 1.29]<!-- /n --> alg-star."
    )
    assert readme_tables.render_values(fresh, page) == fresh
    with pytest.raises(OMGPTError, match=r"page.md: <!-- n:r.json:panels/title=Revenue/ratio\|x -->: no such value"):
        readme_tables.render_values("<!-- n:r.json:panels/title=Revenue/ratio|x -->1<!-- /n -->", page)


# Pages written before inline values, and how many result numbers their prose still holds that no test
# checks: the counts may only fall (a page not listed holds none). README.md and docs/pretrained.md are
# not listed: every result number there is generated.
PROSE_DEBT = {
    "docs/agent-gymnasium.md": 6,
    "docs/cli.md": 2,
    "docs/finetune.md": 57,
    "docs/paper-gaps.md": 2,
    "docs/protocol.md": 4,
    "docs/real-demand.md": 98,
    "docs/recipe.md": 112,
    "docs/tasks-and-policies.md": 8,
    "docs/tuning.md": 3,
}


def test_no_page_adds_a_result_number_that_no_json_backs():
    """A ratio, an interval or a number of two or more decimals in README.md's or docs/'s prose sits in a
    generated block or an inline value (checked against its JSON by the test above), except the debt of
    pages written before inline values, which may only shrink. main 5fabcf3's docs/pretrained.md, with
    the queueing card's stale 5.31 / 5.92 / 6.65, fails it."""
    from tools.readme_tables import free_numbers

    for path, text in PAGES.items():
        name = path.relative_to(ROOT).as_posix()
        if name.startswith("benchmarks/"):
            continue  # the speed results page: each claim is its script's printed ratio
        found = free_numbers(text)
        assert len(found) <= PROSE_DEBT.get(name, 0), f"{name}: result numbers no JSON backs: {found[:8]}"
    stale = "certainty equivalence (`ce`, 5.31) is below both `alg-star` (5.92; 0.90× [0.76, 1.02]) and OMGPT (6.65)"
    assert free_numbers(stale) == ["5.31", "5.92", "0.90×", "[0.76, 1.02]", "6.65"]


def report(name: str, panels: list[dict], models: dict[str, str], kind: str = "curves") -> dict:
    """An ``experiment.json`` of ``panels`` that ``read_report`` takes (every field it checks, filled in)."""
    return {
        "name": name, "title": name, "source": "", "claim": "", "command": "", "scale": "cpu", "runs": 2,
        "seed": 6, "seconds": 1.0, "kind": kind, "figures": [], "panels": panels,
        "models": {model: {"key": key, "command": "omgpt fit"} for model, key in models.items()},
    }  # fmt: skip


def regret_panel(title: str, model: str, finals: dict[str, float], ratio: float) -> dict:
    """A regret panel of horizon 2 with these mean final regrets and OMGPT's ratio to alg-star."""
    curve = {"mean": [0.0, 1.0], "band90": [[0.0, 0.0], [1.0, 1.0]]}
    policies = {
        k: {
            "final_regret": {"mean": v, "ci90": [v, v], "band90": [v, v]},
            "final_suboptimality": {"mean": 0.1},
            "curves": {"regret": curve, "suboptimality": curve},
        }
        for k, v in finals.items()
    }
    policies["omgpt"]["ratio_to_alg_star"] = {"mean": ratio, "ci90": [ratio - 0.1, ratio + 0.1]}
    return {"title": title, "task": "newsvendor", "task_options": {}, "horizon": 2, "model": model,
            "benchmarks": ["erm"], "models_compared": ["omgpt"], "policies": policies}  # fmt: skip


def head_panel(title: str, model: str) -> dict:
    """A demand-prediction panel: the head's MSE 0.5 and ridge's 0.1 after the last sample."""
    methods = {"omgpt": {"mse": [2.0, 0.5]}, "ridge": {"mse": [1.0, 0.1]}}
    return {"title": title, "task": "pricing", "task_options": {}, "horizon": 2, "model": model,
            "demand_prediction": {"n": [1, 2], "methods": methods}}  # fmt: skip


def test_a_retrained_panel_keeps_the_previous_recipes_number_beside_the_new_one(tmp_path, monkeypatch):
    import json

    from tools import keep_previous, readme_tables

    def panel(title, model, omgpt, star, ratio):
        return regret_panel(title, model, {"omgpt": omgpt, "alg-star": star, "erm": 9.0}, ratio)

    panels = [panel("Pool", "pool", 6.0, 2.0, 3.1), panel("Easy", "easy", 2.2, 2.0, 1.1)]
    panels.append(panel("Card", "card", 3.9, 2.7, 1.45))  # a reference model: its key is only its name
    before = report("x", panels, {"pool": "pool-old", "easy": "easy-same", "card": "pretrained/card"})
    heads = report(
        "y",
        [head_panel("Two types, square", "two"), head_panel("Two types, linear", "two")],
        {"two": "two-old"},
        kind="demand-prediction",
    )
    card = tmp_path / "pretrained" / "card" / "card.json"
    card.parent.mkdir(parents=True)
    card.write_text(json.dumps({"checksum": "sha256:old"}))
    for result in (before, heads):
        (tmp_path / "results" / result["name"]).mkdir(parents=True)
        (tmp_path / "results" / result["name"] / "experiment.json").write_text(json.dumps(result))
    monkeypatch.setattr(keep_previous, "ROOT", tmp_path)
    assert keep_previous.main(["x", "--recipe", "CPU recipe"]) == 0
    assert keep_previous.main(["y", "--recipe", "CPU recipe"]) == 0
    kept = (tmp_path / "results" / "previous-recipe" / "x.json").read_text()
    assert keep_previous.main(["x", "--recipe", "second"]) == 2  # the first recipe's numbers are never replaced
    assert (tmp_path / "results" / "previous-recipe" / "x.json").read_text() == kept
    assert (
        readme_tables.previous_cell(before, tmp_path / "results" / "previous-recipe" / "x.json") == ""
    )  # nothing retrained
    # re-run: the pool model and the head's model retrained, the reference model re-shipped (same key, new
    # weights), the easy one not
    after = {**before, "models": {**before["models"], "pool": {"key": "pool-new"}}}
    card.write_text(json.dumps({"checksum": "sha256:new"}))
    cell = readme_tables.previous_cell(after, tmp_path / "results" / "previous-recipe" / "x.json")
    assert cell == "CPU recipe: pool: 6, 3.10× [3.00, 3.20] alg-star; card: 3.9, 1.45× [1.35, 1.55] alg-star"
    heads_after = {**heads, "models": {"two": {"key": "two-new"}}}
    cell = readme_tables.previous_cell(heads_after, tmp_path / "results" / "previous-recipe" / "y.json")
    assert cell == "CPU recipe: two (Two types, square): 0.5 vs ridge 0.1; two (Two types, linear): 0.5 vs ridge 0.1"
    assert readme_tables.previous_cell(before, tmp_path / "results" / "x" / "none.json") == ""


def test_the_cost_table_counts_a_shared_model_once_and_adds_up_training_and_evaluation(tmp_path, monkeypatch):
    import json

    from tools import readme_tables

    def experiment(name, models, seconds, evaluation=None):
        result = {
            "name": name,
            "scale": "cpu",
            "panels": [{"horizon": 100}],
            "seconds": seconds,
            "models": {key: {"key": key, "train_seconds": train} for key, train in models.items()},
        }
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
    assert (
        rows[7].startswith("In all 1.1 core-hours;")
        and "about 0.6 hours" in rows[7]
        and "not yet counted (c)" in rows[7]
    )


def test_the_own_table_example_is_the_script_that_measured_it():
    """docs/real-demand.md's Store Item Demand commands are lines of tools/sid_example.sh, the script
    whose run wrote results/sid-example/summary.json (the numbers the page quotes)."""
    page = (ROOT / "docs/real-demand.md").read_text()
    script = (ROOT / "tools/sid_example.sh").read_text().splitlines()
    block = re.search(r"```bash\n(.*?)```", page, re.S).group(1)
    lines = [line.rstrip() for line in block.splitlines() if line.strip()]
    assert lines and all(line in script for line in lines), [line for line in lines if line not in script]
    summary = json.loads((ROOT / "results/sid-example/summary.json").read_text())
    assert "real_demand" in summary  # written by today's omgpt evaluate: the clustered intervals


def test_the_steps_law_is_fitted_with_a_bootstrap_interval():
    """Hand-computed: a curve lying exactly on excess = 4 (t / 10)^-1/2 over alg-star -> b = 1/2 with a
    zero-width interval, excess 1 (2x) at 10 * 4**2 = 160 minutes, 0.5 (1.5x) at 640, 0.25 (1.25x) at
    2,560; fewer than three points fit nothing; a curve that does not fall cannot tell."""
    from tools.readme_tables import _minutes_cell, steps_law

    def arm(name, minutes, ratio_at, held=None):
        points = [{"cpu_s": 60 * t, "ratio": ratio_at(t)} for t in minutes]
        record = {"arm": name, "points": points}
        if held is not None:  # the held-out ratio, not the last validation point, is what a regret arm is judged by
            record["holdout"] = {"ratio_to_alg_star": {"mean": held, "ci90": None}}
        return record

    law_curve = lambda t: 1 + 4 * (t / 10) ** -0.5  # noqa: E731
    recipe = arm("cpu-recipe", [5, 10], law_curve, held=law_curve(10))
    record = {"metric": "regret", "targets": [2, 1.5, 1.25], "arms": [recipe]}
    assert steps_law(record) is None  # the steps arm has not run
    record["arms"].append(arm("steps-x4", [10, 20, 30, 40], law_curve, held=law_curve(40)))
    law = steps_law(record)
    assert law["points"] == 3  # the recipe's end and the steps arm's last half
    assert law["exponent"] == pytest.approx(0.5) and law["exponent_ci90"] == pytest.approx([0.5, 0.5])
    assert law["two_schedules"] == pytest.approx(0.5)
    minutes = [law["minutes"][k]["minutes"] for k in ("2", "1.5", "1.25")]
    assert minutes == pytest.approx([160, 640, 2560])
    assert _minutes_cell(law["minutes"]["2"]) == "160 [160, 160]"
    short = {**record, "arms": [recipe, arm("steps-x4", [10, 40], law_curve, held=law_curve(40))]}
    assert steps_law(short)["exponent"] is None  # two points: no fit
    flat = {
        "metric": "regret",
        "targets": [2],
        "arms": [recipe, arm("steps-x4", [10, 20, 30, 40], lambda t: 5 + (t - 10) / 30, held=6.0)],
    }
    assert _minutes_cell(steps_law(flat)["minutes"]["2"]).startswith("cannot tell")
