"""The evaluation protocol (docs/protocol.md): tuned benchmarks read their constants from their files, the
tuning chooses on validation seeds only, validation and test seeds never meet, and the paired ratio
to ``alg-star`` is the bootstrap it says it is."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from omgpt.analysis.report import BOOTSTRAP_SAMPLES, paired_ratio
from omgpt import seeding, tuning
from omgpt.commands.cli import cli_main
from omgpt.errors import OMGPTError
from omgpt.evaluation import evaluate_policies
from omgpt.policies import POLICIES, make_policy
from omgpt.resources import CHECKOUT, CONFIGS
from omgpt.rollout import rollout
from omgpt.tasks import make_task
from omgpt.commands.tune import run_tuning


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture
def tuned_dir(tmp_path, monkeypatch):
    """An empty folder of tuned constants in place of configs/tuned."""
    monkeypatch.setattr(tuning, "TUNED", tmp_path)
    return tmp_path


def write_tuning(
    folder: Path, task: str, options: dict, horizon: int, constants: dict[str, dict], seed: int = 10_001
) -> Path:
    """A tuned file as ``omgpt tune`` writes it (the parts a ``-tuned`` policy reads)."""
    policies = {name: {"constants": c, "validation": {"runs": 2, "seed": seed}} for name, c in constants.items()}
    path = folder / f"{tuning.setting_key(task, options, horizon)}.json"
    path.write_text(
        json.dumps({"setting": {"task": task, "task_options": options, "horizon": horizon}, "policies": policies})
    )
    return path


# --------------------------------------------------------------------------------------------------
# Tuned variants
def test_every_benchmark_with_constants_has_a_tuned_variant():
    tunable = {n for n, (cls, _) in POLICIES.items() if cls.tunable}
    assert {"ucb", "ts", "linucb", "lints", "ilse", "cils", "ts-pricing", "erm", "fai"} <= tunable
    assert all(f"{n}-tuned" in POLICIES for n in tunable)
    assert "erm-lp-tuned" not in POLICIES and "fai-paper-tuned" not in POLICIES  # the paper-text variants stay fixed


def test_setting_keys_name_one_prior_once():
    assert tuning.setting_key("pricing", {"dim": 6}, 100) == tuning.setting_key("pricing", {}, 100) == "pricing-T100"
    assert tuning.setting_key("queueing", {"horizon": 100}, 100) == "queueing-T100"
    assert (
        tuning.setting_key("newsvendor", {"pool_size": 16, "demand_types": "mixed"}, 200)
        == "newsvendor-demand_types=mixed-pool_size=16-T200"
    )


def test_a_tuned_policy_reads_its_constants_from_its_file(tuned_dir):
    task = make_task("mab", n_arms=5)
    write_tuning(tuned_dir, "mab", {"n_arms": 5}, 20, {"ucb": {"explore": 0.123}, "ts": {"explore": 0.4}})
    ucb = make_policy("ucb-tuned", task, horizon=20)
    assert ucb.explore == 0.123 and ucb.constants == {"explore": 0.123}
    assert make_policy("ts-tuned", task, horizon=20).explore == 0.4
    envs = task.sample_envs(30, gen(0))
    tuned = rollout(task, envs, ucb, 20, gen(1), gen(2))
    by_hand = rollout(task, envs, make_policy("ucb", task, explore=0.123), 20, gen(1), gen(2))
    assert torch.equal(tuned.actions, by_hand.actions)
    # another horizon is another setting: not tuned
    with pytest.raises(OMGPTError, match="omgpt tune --task mab --option n_arms=5 --policies ucb --horizon 30"):
        make_policy("ucb-tuned", task, horizon=30)
    with pytest.raises(OMGPTError, match="horizon"):
        make_policy("ucb-tuned", task)
    # tuned_on reads another setting's file (a shifted panel plays the unshifted prior's constants)
    assert make_policy("ucb-tuned", make_task("mab"), horizon=50, tuned_on="mab-n_arms=5-T20").explore == 0.123


def test_linear_pricing_and_newsvendor_constants_reach_the_algorithms(tuned_dir):
    write_tuning(tuned_dir, "linear-bandit", {}, 10, {"linucb": {"explore": 0.05, "ridge": 1.0}})
    lin = make_policy("linucb-tuned", make_task("linear-bandit"), horizon=10)
    lin.reset(make_task("linear-bandit").sample_envs(2, gen(0)), 10, gen(1))
    torch.testing.assert_close(lin.gram[0], torch.eye(2, dtype=torch.float64))
    assert lin.beta == pytest.approx(0.05 * math.sqrt(2 * math.log(10)))
    write_tuning(tuned_dir, "pricing", {}, 10, {"cils": {"ridge": 0.2, "radius": 0.3}})
    cils = make_policy("cils-tuned", make_task("pricing"), horizon=10)
    assert (cils.ridge, cils.radius) == (0.2, 0.3)
    write_tuning(tuned_dir, "newsvendor", {}, 10, {"fai": {"step_scale": 2.0, "initial_high": 1.0}, "erm": {"l1": 0.1}})
    fai = make_policy("fai-tuned", make_task("newsvendor"), horizon=10)
    assert (fai.step_scale, fai.initial_high, fai.schedule) == (2.0, 1.0, "authors")
    assert make_policy("erm-tuned", make_task("newsvendor"), horizon=10).l1 == 0.1


@pytest.mark.parametrize(
    "content, match",
    [
        ("{not json", "not valid JSON .*the tuned-constants file is damaged"),
        ("[]", "expected a mapping, got list"),
        (
            '{"setting": %s, "policies": {"ucb": {"constants": {"explore": "x"}, "validation": {"seed": 10001}}}}',
            "policies.ucb.constants.explore",
        ),
        (
            '{"setting": %s, "policies": {"ucb": {"constants": {"explore": 0.5}}}}',
            "missing key 'policies.ucb.validation'",
        ),
        (
            '{"setting": %s, "policies": {"ucb": {"constants": {"explore": 0.5}, "validation": {"seed": 12}}}}',
            "not a validation seed",
        ),
        # a file that would silently play the paper's defaults, or another setting's constants
        (
            '{"setting": %s, "policies": {"ucb": {"constants": {}, "validation": {"seed": 10001}}}}',
            "policies.ucb.constants is empty",
        ),
        (
            '{"setting": {"task": "linear-bandit", "task_options": {}, "horizon": 20}, "policies": {"ucb": {"constants": {"explore": 0.5}, '
            '"validation": {"seed": 10001}}}}',
            "is setting linear-bandit-T20, not the file's name mab-T20",
        ),
        (
            '{"setting": {"task": "mab", "task_options": {}, "horizon": 30}, "policies": {"ucb": {"constants": {"explore": 0.5}, '
            '"validation": {"seed": 10001}}}}',
            "is setting mab-T30, not the file's name mab-T20",
        ),
        (
            '{"setting": {}, "policies": {"ucb": {"constants": {"explore": 0.5}, "validation": {"seed": 10001}}}}',
            "missing key 'setting.task'",
        ),
        (
            '{"setting": %s, "policies": {"ucb": {"constants": {"explore": 0.5, "beta": 2}, "validation": {"seed": 10001}}}}',
            "gives beta, not constants of ucb",
        ),
    ],
)
def test_a_bad_tuned_file_is_one_line_naming_the_file_and_key(tuned_dir, content, match):
    if "%s" in content:
        content = content % '{"task": "mab", "task_options": {}, "horizon": 20}'
    (tuned_dir / "mab-T20.json").write_text(content)
    with pytest.raises(OMGPTError, match=match) as e:
        make_policy("ucb-tuned", make_task("mab"), horizon=20)
    assert "mab-T20.json" in str(e.value) and "\n" not in str(e.value)


def test_evaluate_without_a_tuning_exits_2_before_any_rollout(tuned_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert (
        cli_main(
            [
                "evaluate",
                "--task",
                "mab",
                "--policies",
                "ucb,ucb-tuned",
                "--runs",
                "4",
                "--horizon",
                "9",
                "--out",
                str(out),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "omgpt tune --task mab --policies ucb --horizon 9" in err
    assert not out.exists()


def test_noise_aware_variants_are_the_textbook_formulas():
    task = make_task("mab", noise_std=0.3)
    envs = task.sample_envs(20, gen(0))
    a = rollout(task, envs, make_policy("ucb-noise", task), 15, gen(1), gen(2))
    b = rollout(task, envs, make_policy("ucb", task, explore=0.3), 15, gen(1), gen(2))
    assert torch.equal(a.actions, b.actions)
    ts = make_policy("ts-noise", task)
    ts.reset(envs, 15, gen(3))
    ts.observe(0, task.one_hot(torch.zeros(20, dtype=torch.long)), torch.full((20, 1), 2.0))
    torch.testing.assert_close(ts.means()[:, 0], torch.full((20,), 1.0, dtype=torch.float64))  # S/(n+1) = 2/2
    torch.testing.assert_close(
        ts.variances()[:, :2], torch.tensor([[0.09 / 2, 0.09]], dtype=torch.float64).expand(20, 2)
    )


# --------------------------------------------------------------------------------------------------
# The search
def test_tuning_picks_the_lowest_validation_regret_and_records_the_curve(tuned_dir, monkeypatch):
    from omgpt.policies.bandit import UCB

    monkeypatch.setattr(UCB, "tunable", {"explore": (0.05, 0.5, 3.0)})
    content = run_tuning("mab", {"n_arms": 5}, ["ucb"], horizon=30, runs=40, seed=10_500, log=lambda line: None)
    entry = content["policies"]["ucb"]
    means = {p["constants"]["explore"]: p["final_regret"]["mean"] for p in entry["curve"]}
    assert entry["constants"] == {"explore": min(means, key=means.get)}
    assert entry["validation"] == {"runs": 40, "seed": 10_500} and entry["grid"] == {"explore": [0.05, 0.5, 3.0]}
    # each point is the mean final regret on the validation environments of that seed
    task = make_task("mab", n_arms=5)
    again = evaluate_policies(task, {"ucb": {"explore": 3.0}}, 40, 30, 10_500, progress=False)["ucb"]
    assert means[3.0] == pytest.approx(float(again.cumulative_regret()[:, -1].double().mean()))
    assert entry["paper"]["constants"] == {"explore": 1.0}
    # the file is what the tuned policy reads; tuning another policy keeps this one
    assert make_policy("ucb-tuned", task, horizon=30).explore == entry["constants"]["explore"]
    monkeypatch.setattr(POLICIES["ts"][0], "tunable", {"explore": (0.3,)})
    run_tuning("mab", {"n_arms": 5}, ["ts"], horizon=30, runs=10, seed=10_500, log=lambda line: None)
    saved = json.loads((tuned_dir / "mab-n_arms=5-T30.json").read_text())
    assert set(saved["policies"]) == {"ts", "ucb"} and saved["policies"]["ucb"] == json.loads(json.dumps(entry))


def test_tuning_refuses_test_seeds_and_untunable_policies(tuned_dir):
    with pytest.raises(OMGPTError, match="not a validation seed"):
        run_tuning("mab", {}, ["ucb"], horizon=10, runs=4, seed=12)
    with pytest.raises(OMGPTError, match="no free constants"):
        run_tuning("mab", {}, ["ucb-noise"], horizon=10, runs=4)
    with pytest.raises(OMGPTError, match="does not apply"):
        run_tuning("mab", {}, ["erm"], horizon=10, runs=4)
    assert not list(tuned_dir.iterdir())


# --------------------------------------------------------------------------------------------------
# Seeds: what chooses never sees what is reported
def test_validation_and_test_seed_ranges_are_disjoint():
    assert not set(seeding.TEST_SEEDS) & set(seeding.VALIDATION_SEEDS)
    assert seeding.TUNING_SEED in seeding.VALIDATION_SEEDS and seeding.CARD_SEED in seeding.TEST_SEEDS
    assert seeding.CARD_SEED + 1 in seeding.TEST_SEEDS  # the cards' replication seed


def test_no_code_path_chooses_on_a_test_seed(tmp_path, capsys):
    """Every chooser refuses a test seed, every reporter a validation seed, and every shipped default
    and record keeps to its range."""
    import inspect

    from omgpt.module import OMGPTModule

    with pytest.raises(OMGPTError, match="not a validation seed"):
        OMGPTModule(task="mab", horizon=5, val_seed=3)
    assert inspect.signature(OMGPTModule).parameters["val_seed"].default in seeding.VALIDATION_SEEDS
    for path in CONFIGS.rglob("*.yaml"):  # no shipped fit config asks for a test seed (none sets one today)
        text = yaml.safe_load(path.read_text()) or {}
        seed = (text.get("model") or {}).get("val_seed") if isinstance(text, dict) else None
        assert seed is None or seed in seeding.VALIDATION_SEEDS, path
    # What every shipped model was actually chosen on: the val_seed its checkpoint records (the configs
    # above set none, so that loop alone would pass whatever the fits used).
    from omgpt.checkpoints import read_checkpoint

    models = sorted(CHECKOUT.glob("pretrained/*/model.ckpt")) + sorted(CHECKOUT.glob("results/models/*/model.ckpt"))
    assert len(models) >= 7
    for path in models:
        assert read_checkpoint(path, mmap=True)["hyper_parameters"]["val_seed"] in seeding.VALIDATION_SEEDS, path
    for path in (CONFIGS / "tuned").glob("*.json"):  # every shipped tuning was chosen on validation seeds
        for entry in tuning.read_tuned(path)["policies"].values():
            assert entry["validation"]["seed"] in seeding.VALIDATION_SEEDS, path
    assert (
        cli_main(
            [
                "evaluate",
                "--task",
                "mab",
                "--policies",
                "ucb",
                "--runs",
                "2",
                "--horizon",
                "3",
                "--seed",
                "10000",
                "--out",
                str(tmp_path / "e"),
            ]
        )
        == 2
    )
    assert "not a test seed" in capsys.readouterr().err
    replications = 0
    for card in (CHECKOUT / "pretrained").glob("*/card.json"):  # every reported card number is on test seeds
        info = json.loads(card.read_text())
        assert info["test"]["seed"] in seeding.TEST_SEEDS, card
        if info.get("replication") is not None:  # a replication must say its seed: one without is of unknown origin
            assert "seed" in info["replication"] and info["replication"]["seed"] in seeding.TEST_SEEDS, card
            replications += 1
    assert replications >= 1
    for result in (CHECKOUT / "results").glob("*/experiment.json"):
        assert json.loads(result.read_text())["seed"] in seeding.TEST_SEEDS, result


# --------------------------------------------------------------------------------------------------
# The paired ratio
def test_paired_ratio_against_hand_built_cases():
    ref = np.array([1.0, 2.0, 3.0, 10.0])
    exact = paired_ratio(2 * ref, ref)  # every resample keeps the ratio: the interval is the point
    assert exact["mean"] == pytest.approx(2.0) and exact["ci90"] == pytest.approx([2.0, 2.0]) and exact["runs"] == 4
    values = np.array([3.0, 1.0, 4.0, 1.0, 5.0])
    reference = np.array([2.0, 1.0, 2.0, 2.0, 1.0])
    got = paired_ratio(values, reference, seed=7)
    assert got["mean"] == pytest.approx(14.0 / 8.0)
    idx = np.random.default_rng(7).integers(0, 5, size=(BOOTSTRAP_SAMPLES, 5))  # the same indices for both
    ratios = [values[i].sum() / reference[i].sum() for i in idx]
    assert got["ci90"] == pytest.approx(list(np.percentile(ratios, [5, 95])))
    # pairing matters: common noise cancels, so the interval is much narrower than an unpaired one
    rng = np.random.default_rng(0)
    shared = rng.exponential(10.0, 500)
    paired = paired_ratio(1.2 * shared + rng.normal(0, 0.1, 500), shared)
    assert paired["ci90"][0] > 1.15 and paired["ci90"][1] < 1.25
    assert paired_ratio(np.ones(3), np.zeros(3))["mean"] is None  # no ratio to zero regret
    assert paired_ratio(np.ones(1), np.ones(1))["ci90"] is None
    # a reference whose resampled mean can fall to <= 0 (queueing's regret): the interval is open above
    noisy = paired_ratio(np.full(10, 2.0), np.array([10.0, -9.0] * 5 + [0.0] * 0) + 0.1)
    assert noisy["mean"] == pytest.approx(2.0 / 0.6) and noisy["ci90"][1] is None and noisy["ci90"][0] > 0


def test_a_tuning_that_keeps_the_papers_constants_reuses_the_base_rollout(tuned_dir, monkeypatch):
    """``ucb-tuned`` at UCB's own ``explore`` plays exactly as ``ucb``: the evaluation reuses that rollout
    (no rollout of its own: counted), and it is the very rollout a separate run of the tuned policy gives."""
    import omgpt.evaluation

    task = make_task("mab", n_arms=4)
    write_tuning(tuned_dir, "mab", {"n_arms": 4}, 12, {"ucb": {"explore": 1.0}, "ts": {"explore": 0.5}})
    from omgpt.policies.tuned import plays_as_base

    assert plays_as_base(make_policy("ucb-tuned", task, 12)) and not plays_as_base(make_policy("ts-tuned", task, 12))
    played = []
    real = omgpt.evaluation.rollout
    monkeypatch.setattr(
        omgpt.evaluation,
        "rollout",
        lambda task, envs, policy, *a, **k: played.append(type(policy).__name__) or real(task, envs, policy, *a, **k),
    )
    both = evaluate_policies(
        task, {"ucb": {}, "ucb-tuned": {}, "ts": {}, "ts-tuned": {}}, 20, 12, seed=3, batch_size=10, progress=False
    )
    assert (
        played == ["UCB"] * 2 + ["GaussianTS"] * 2 + ["GaussianTSTuned"] * 2
    )  # two batches each; ucb-tuned none: reused
    alone = evaluate_policies(task, {"ucb-tuned": {}}, 20, 12, seed=3, batch_size=10, progress=False)["ucb-tuned"]
    assert played[6:] == ["UCBTuned"] * 2  # alone it has no base to reuse
    assert torch.equal(alone.actions, both["ucb-tuned"].actions) and torch.equal(
        alone.regrets, both["ucb-tuned"].regrets
    )
    assert torch.equal(both["ucb-tuned"].actions, both["ucb"].actions)
    assert not torch.equal(both["ts-tuned"].actions, both["ts"].actions)


# --------------------------------------------------------------------------------------------------
# Grids that admit their limits
def test_a_grids_end_extends_geometrically_within_the_constants_range():
    from omgpt.policies.newsvendor_data import ALL

    assert tuning.extension((0.01, 0.03, 0.1), "low") == ([0.00333, 0.00111, 0.00037], False)
    assert tuning.extension((0.01, 0.03, 0.1), "high") == ([0.333, 1.11, 3.7], False)
    days = tuning.Grid(14, 28, 56, ALL, highest=ALL)
    assert tuning.extension(days, "low") == ([7, 4, 2], False) and tuning.extension(days, "high") == ([], True)
    assert tuning.extension(tuning.Grid(2, 4, 8, ALL, highest=ALL), "low") == ([1], True)  # integers stop at 1
    assert tuning.extension((0.0, 0.1, 2.0), "low") == ([], True)  # a penalty at 0 has nothing below it
    assert tuning.extension((0.0, 3.0), "high") == (
        [9.0, 27.0, 81.0],
        False,
    )  # from 0 there is no geometric step: x3 (ZERO_STEP)
    assert tuning.extension(tuning.Grid(7, 31, lowest=2), "low") == ([2], True)
    assert tuning.extension((0.3,), "low") == ([], False)  # one value: held fixed


def test_a_winner_on_a_grids_end_widens_the_grid_up_to_the_bound(tuned_dir, monkeypatch):
    """UCB's exploration from a grid far above its optimum: the winner sits on the low end, the grid
    grows past it by the end's own ratio (only the new points are rolled out, on the same validation
    environments), and after WIDEN_STEPS steps the file says the search was bounded there. With the
    range ending on the way, the winner is at the range's end instead: not bounded."""
    from omgpt.policies.bandit import UCB

    monkeypatch.setattr(UCB, "tunable", {"explore": (20.0, 40.0)})
    lines = []
    entry = run_tuning("mab", {"n_arms": 5}, ["ucb"], horizon=30, runs=40, seed=10_500, log=lines.append)["policies"][
        "ucb"
    ]
    assert tuning.WIDEN_STEPS == 3
    assert entry["searched"] == {"explore": [2.5, 5.0, 10.0, 20.0, 40.0]} and entry["grid"] == {"explore": [20.0, 40.0]}
    assert entry["constants"] == {"explore": 2.5} and entry["bounded"] == {"explore": "low"} and entry["at_limit"] == {}
    assert [p["constants"]["explore"] for p in entry["curve"]] == [2.5, 5.0, 10.0, 20.0, 40.0]  # each point once
    assert entry["final_regret"] == entry["curve"][0]["final_regret"] and entry["widen_steps"] == 3
    assert "BOUNDED: explore on the low end after 3 widening steps" in lines[0]
    saved = json.loads((tuned_dir / "mab-n_arms=5-T30.json").read_text())["policies"]["ucb"]
    assert saved["bounded"] == {"explore": "low"}
    monkeypatch.setattr(UCB, "tunable", {"explore": tuning.Grid(20.0, 40.0, lowest=8.0)})
    entry = run_tuning("mab", {"n_arms": 5}, ["ucb"], horizon=30, runs=40, seed=10_500, log=lines.append)["policies"][
        "ucb"
    ]
    assert entry["searched"] == {"explore": [8.0, 10.0, 20.0, 40.0]}
    assert entry["constants"] == {"explore": 8.0} and entry["bounded"] == {} and entry["at_limit"] == {"explore": "low"}


def test_line_widening_adds_one_point_per_new_value(tuned_dir, monkeypatch):
    """A policy that widens along the line (``widen = "line"``, gbm's: four expensive constants) tries
    each new value with the winner's other constants only: one rolled-out point per value past an end,
    where the cross would add the other constants' whole grid; the file records the mode."""
    from omgpt.policies.bandit import LinUCB

    monkeypatch.setattr(LinUCB, "tunable", {"explore": (20.0, 40.0), "ridge": (0.1, 1.0)})
    monkeypatch.setattr(LinUCB, "widen", "line")
    entry = run_tuning("linear-bandit", {}, ["linucb"], horizon=20, runs=20, seed=10_500, log=lambda line: None)[
        "policies"
    ]["linucb"]
    added = sum(len(entry["searched"][k]) - len(entry["grid"][k]) for k in entry["grid"])
    assert added > 0 and entry["widen"] == "line"
    assert len(entry["curve"]) == 4 + added  # the 2 x 2 grid, then one point per new value
    for point in entry["curve"]:  # every point off the declared grid differs from it in one constant
        off = [k for k, v in point["constants"].items() if v not in entry["grid"][k]]
        assert len(off) <= 1, point


def test_the_readme_tuning_table_flags_a_bounded_constant(tuned_dir, monkeypatch):
    from tools import readme_tables

    entry = {
        "constants": {"radius": 0.00037},
        "final_regret": {"mean": 1.0, "se": 0.1},
        "paper": {"final_regret": {"mean": 2.0}},
        "bounded": {"radius": "low"},
        "at_limit": {},
        "widen_steps": 3,
        "validation": {"runs": 2, "seed": 10_001},
        "curve": [],
    }
    assert "**bounded**: radius at the low end after 3 widening steps" in readme_tables.edge_cell(entry)
    assert (
        readme_tables.edge_cell({**entry, "bounded": {}, "at_limit": {"l1": "low"}}) == "l1 at the low end of its range"
    )
    assert readme_tables.edge_cell({**entry, "bounded": {}}) == "—"
    del entry["bounded"]
    assert "not checked" in readme_tables.edge_cell(entry)


# --------------------------------------------------------------------------------------------------
# tune refuses bad input before it works, and two tunings of one setting both land
def test_tune_validates_its_policies_as_evaluate_does(tuned_dir, capsys):
    for policies, message in (
        (["erm,erm"], "names a policy twice"),
        ([","], "--policies is empty"),
        (["ucb,ucb"], "names a policy twice"),
    ):
        assert cli_main(["tune", "--task", "mab", "--policies", *policies, "--horizon", "5", "--runs", "2"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and message in err, err
    assert not list(tuned_dir.iterdir())


def test_tune_checks_its_file_can_be_written_before_it_tunes(tmp_path, monkeypatch, capsys):
    import omgpt.commands.tune

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(tuning.FOLDER_VARIABLE, str(blocker / "tuned"))  # a folder inside a file: cannot be made
    monkeypatch.setattr(
        omgpt.commands.tune, "evaluate_policies", lambda *a, **k: pytest.fail("rolled out before the check")
    )
    assert cli_main(["tune", "--task", "mab", "--policies", "ucb", "--horizon", "5", "--runs", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cannot write the tuned-constants file" in err


CONCURRENT = """
import sys, time
from pathlib import Path
from omgpt.commands.tune import run_tuning
folder, policy = Path(sys.argv[1]), sys.argv[2]
(folder / f"ready-{policy}").touch()
while not (folder / "go").exists():
    time.sleep(0.01)
run_tuning("mab", {"n_arms": 5}, [policy], horizon=30, runs=40, seed=10_500, folder=folder, log=lambda line: None)
"""


@pytest.mark.slow  # two processes importing torch: a minute on a shared machine
def test_two_concurrent_tunings_of_one_setting_both_land(tmp_path):
    """ucb and ts tuned at once, in two processes, into one setting's file: the file ends with both
    (read, merge and write under the file's lock), not with whichever wrote last."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT, str(tmp_path), p], env=env) for p in ("ucb", "ts")]
    import time

    deadline = time.monotonic() + 300
    while not all((tmp_path / f"ready-{p}").exists() for p in ("ucb", "ts")):  # both imported and waiting
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.05)
    (tmp_path / "go").touch()  # then both start at once: each reads the file before the other writes it
    assert [p.wait(timeout=600) for p in procs] == [0, 0]
    saved = tuning.read_tuned(tmp_path / "mab-n_arms=5-T30.json")
    assert set(saved["policies"]) == {"ucb", "ts"}
    assert not [
        p.name for p in tmp_path.iterdir() if not p.name.startswith(("go", "ready-", "mab-n_arms=5-T30.json"))
    ]  # no lock or temp file left


# --------------------------------------------------------------------------------------------------
# The best benchmark is chosen on validation
def test_a_panels_best_benchmark_is_chosen_on_validation_regret_never_on_test(tuned_dir):
    from omgpt.analysis.report import best_benchmark
    from omgpt.commands.experiment.config import Panel
    from omgpt.commands.experiment.panels import best_on_validation, verdict
    from omgpt.commands.tune import _validation_regret

    quiet = dict(horizon=30, seed=10_500, log=lambda line: None)
    entries = run_tuning("mab", {"n_arms": 5}, ["ucb"], runs=40, **quiet)["policies"]
    entries = run_tuning("mab", {"n_arms": 5}, ["ts"], runs=30, **quiet)[
        "policies"
    ]  # other environments: not comparable
    panel = Panel(
        title="p",
        model="m",
        policies=["omgpt", "ucb", "ucb-tuned", "ts-tuned", "ucb-noise"],
        task="mab",
        task_options={"n_arms": 5},
        horizon=30,
        tuned_task="mab",
        tuned_options={"n_arms": 5},
        tuned_on="mab-n_arms=5-T30",
    )
    chosen = best_on_validation(
        panel, {"ucb": "ucb", "ucb-tuned": "ucb-tuned", "ts-tuned": "ts-tuned", "ucb-noise": "ucb-noise"}
    )
    val = chosen["validation_regret"]
    assert chosen["environments"] == {"setting": "mab-n_arms=5-T30", "runs": 40, "seed": 10_500}
    assert (
        val["ucb-tuned"] == entries["ucb"]["final_regret"] and val["ucb"] == entries["ucb"]["paper"]["final_regret"]
    )  # as recorded
    assert chosen["rolled_out"] == ["ts-tuned", "ucb-noise"]  # tuned on 30 environments; no free constants
    task = make_task("mab", n_arms=5)
    assert val["ucb-noise"] == _validation_regret(task, "ucb-noise", {}, 40, 30, 10_500, "cpu")
    assert val["ts-tuned"] == _validation_regret(
        task, "ts-tuned", {"tuned_on": "mab-n_arms=5-T30"}, 40, 30, 10_500, "cpu"
    )
    assert chosen["name"] == min(val, key=lambda k: val[k]["mean"])
    # the test numbers favour another benchmark: the verdict still measures OMGPT against the chosen one
    other = next(k for k in val if k != chosen["name"])
    test = {k: 10.0 for k in val} | {other: 1.0, chosen["name"]: 5.0, "omgpt": 3.0}
    numbers = {
        "benchmarks": list(val),
        "models_compared": ["omgpt"],
        "best_benchmark": chosen,
        "policies": {k: {"final_regret": {"mean": v}} for k, v in test.items()},
        "vs_best": {
            "omgpt": {
                "against": chosen["name"],
                "statistic": "ratio",
                "mean": 0.6,
                "ci90": [0.5, 0.7],
                "runs": 40,
                "state": "below",
            }
        },
    }
    assert best_benchmark(numbers) == (chosen["name"], 5.0)
    assert verdict(numbers).startswith(f"OMGPT 3.00 is below the best benchmark ({chosen['name']} 5.00): paired ratio")


def test_an_entry_tuned_on_another_metric_than_the_tasks_is_stale(tuned_dir, monkeypatch):
    """Real demand is tuned on the scaled cost: an entry of its setting tuned on the mean final regret
    (every entry written before the task had its own metric) is refused by the ``-tuned`` policy with the
    command that tunes it again, and ``ensure_tuned`` (what experiments call) tunes it again instead of
    playing it; an entry on the scaled cost is played."""
    from omgpt.commands import tune

    options, horizon = {"dataset": "bakery", "split": "time"}, 100
    task = make_task("newsvendor-data", **options)
    key = tuning.setting_key("newsvendor-data", task.options(), horizon)
    record = {"validation": {"runs": 2, "seed": 10_001}}
    content = {
        "setting": {"task": "newsvendor-data", "task_options": task.options(), "horizon": horizon},
        "policies": {
            "saa": {**record, "constants": {"days": 28}, "final_regret": {"mean": 9.0, "se": 1.0}},
            "qr": {
                **record,
                "constants": {"l1": 1.0},
                "final_regret": {"mean": 0.1, "se": 0.01, "metric": "scaled_cost"},
            },
        },
    }
    (tuned_dir / f"{key}.json").write_text(json.dumps(content))
    with pytest.raises(
        OMGPTError, match="tuned saa on the mean final regret, not on scaled_cost.*tune it again: omgpt tune"
    ):
        tuning.tuned_constants("saa", "newsvendor-data", task.options(), horizon)
    assert tuning.tuned_constants("qr", "newsvendor-data", task.options(), horizon) == {"l1": 1.0}
    tuned = []
    monkeypatch.setattr(
        tune, "run_tuning", lambda task_name, task_options, policies, horizon, log=print: tuned.append(policies)
    )
    tune.ensure_tuned("newsvendor-data", options, horizon, ["saa-tuned", "qr-tuned"], log=lambda *a: None)
    assert tuned == [["saa"]]
    # a prior's entries have no metric (the mean final regret), as its task: not stale
    assert tuning.tuning_metric("pricing") is None and tuning.tuning_metric("newsvendor-data") == "scaled_cost"
