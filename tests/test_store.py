"""The run store (``omgpt.commands.store``): one rule keeps a run's checkpoint; store records and model
cards guard themselves (schema, checksum, task and options, their own folder); the tools check every
argument before they write. Every test works on copies in ``tmp_path``: never on ``pretrained/`` or
``results/`` themselves."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from omgpt.commands import store
from omgpt.commands.cli import cli_main
from omgpt.commands.experiment import Model, load_experiment, model_key
from omgpt.checkpoints import read_checkpoint
from omgpt.records import RecordError
from tools import recipe, reference_models

ROOT = Path(__file__).resolve().parents[1]
RECORDS = sorted((ROOT / "results" / "models").glob("*/done.json"))
CARDS = sorted((ROOT / "pretrained").glob("*/card.json"))
NONSTATIONARY = ROOT / "results/models/newsvendor-nonstationary-171e41dcea"  # misspecification's two models
TWO_TYPES = ROOT / "results/models/newsvendor-6869493698"


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("omgpt: error: "), err
    return err[0]


def exit_code(main, argv: list[str]) -> int:
    """A tool's exit code, whether it returns it or raises SystemExit (a message: code 1)."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def copy_slot(source: Path, folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in ("done.json", "model.ckpt"):
        shutil.copy(source / name, folder / name)
    return folder


# --------------------------------------------------------------------------------------------------
# The kept checkpoint: one rule, on validation only.
def tiny_checkpoint(path: Path, step: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "state_dict": {"w": torch.full((2,), float(step))},
            "hyper_parameters": {"task": "newsvendor", "horizon": 6},
            "global_step": step,
            "optimizer_states": [{}],
        },
        path,
    )


def test_the_store_keeps_the_lowest_ucb_of_a_resumed_run_and_records_its_validation(tmp_path):
    """A hand-written resumed run (the committed records' metrics are not in the repository): two
    processes' logs and two kept checkpoints, as a resume under another spelling of the folder leaves.
    The store keeps the lowest val/regret_ucb (step 200), not the last file by name (step 300), exports
    its weights only, and records its validation regret and every process's time."""
    run = tmp_path / "run"
    header = "epoch,step,time/cpu_minutes,time/wall_minutes,val/regret,val/regret_ucb,val/suboptimality\n"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics-part0.csv").write_text(header + "0,99,1.0,1.5,5.0,6.0,0.5\n1,199,2.0,3.0,4.0,4.5,0.4\n")
    (run / "metrics.csv").write_text(header + "2,299,3.0,4.5,3.0,4.6,0.3\n")  # resumed: lower regret, higher ucb
    tiny_checkpoint(run / "checkpoints" / "epoch001-ucb4.50.ckpt", 200)
    tiny_checkpoint(run / "checkpoints" / "epoch002-ucb4.60.ckpt", 300)
    tiny_checkpoint(run / "checkpoints" / "last.ckpt", 300)
    kept, step = store.keep(run, tmp_path / "model.ckpt")
    assert (kept.name, step) == ("epoch001-ucb4.50.ckpt", 200)
    assert set(read_checkpoint(tmp_path / "model.ckpt")) == {"state_dict", "hyper_parameters", "global_step"}
    rows = store.metric_rows(run)
    summary = store.training_summary(rows, step)
    assert summary["best_val_regret"] == 4.0 and summary["steps"] == 300 and summary["selected_by"] == "val/regret_ucb"
    assert summary["train_seconds"] == 270.0 and summary["cpu_seconds"] == 180.0
    assert [p["step"] for p in store.validation_points(rows)] == [100, 200, 300]  # a card's curve, every part
    with pytest.raises(Exception, match="step 250 has no validation"):
        store.training_summary(rows, 250)


@pytest.mark.parametrize("done", RECORDS + CARDS, ids=lambda p: p.parent.name)
def test_each_committed_record_and_card_names_the_checkpoint_it_ships(done):
    """Each committed record and card names its kept checkpoint (``epochNNN-ucbX``), and three things
    written apart agree with that name: the shipped weights' own step (``model.ckpt``'s global_step,
    written by Lightning) is the end of epoch NNN on the record's validation curve (one validation per
    epoch, the curve's first point ending epoch 0); the record's regret at that step is the validation
    regret it reports; and X, an upper confidence bound of that regret, is not below it. (Which of a
    run's checkpoints the rule keeps is tested above on a resumed run: the committed runs' other
    checkpoints are not in the repository.)"""
    record = json.loads(done.read_text())
    epoch, tag, ucb = store.KEPT_NAME.fullmatch(Path(record["kept_checkpoint"]).stem).groups()
    step = read_checkpoint(done.parent / "model.ckpt")["global_step"]
    curve = (
        {p["step"]: p["regret"] for p in record["validation"]}
        if done.name == "card.json"
        else dict(map(tuple, record["val_regret"]))
    )
    steps = sorted(curve)
    assert step == steps[int(epoch)] == (int(epoch) + 1) * steps[0], (step, epoch)
    if done.name == "card.json":
        assert record["steps"] == step
    else:
        assert curve[step] == record["best_val_regret"]
    if tag == "ucb":  # (a scaled-cost tag names the validation cost itself, not a bound of the regret)
        assert float(ucb) >= curve[step] - 0.01  # (the name rounds to 2 decimals)


def test_a_resumed_runs_metrics_are_read_in_the_order_written(tmp_path):
    for i in (0, 1, 2, 10):  # metrics-part10 is after metrics-part2, whatever the names' sort says
        (tmp_path / f"metrics-part{i}.csv").write_text(f"step\n{i}\n")
    (tmp_path / "metrics.csv").write_text("step\n99\n")
    assert [r["step"] for r in store.metric_rows(tmp_path)] == ["0", "1", "2", "10", "99"]


def test_a_fit_resumes_from_last_ckpt_on_one_thread_keeping_its_earlier_metrics(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(store.subprocess, "call", lambda cmd, **kw: calls.append((cmd, kw)) or 0)
    run = tmp_path / "run"
    assert store.fit(["--config", "x.yaml"], run, tmp_path / "fit.log", "x") >= 0
    ((cmd, kw),) = calls
    assert (
        cmd[1:4] == ["-m", "omgpt", "fit"]
        and "--ckpt_path" not in cmd
        and kw["env"]["OMP_NUM_THREADS"] == kw["env"]["OMGPT_THREADS"] == "1"
    )
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").touch()
    (run / "metrics-part0.csv").write_text("step\n1\n")
    (run / "metrics.csv").write_text("step\n2\n")
    store.fit(["--config", "x.yaml"], run, tmp_path / "fit.log", "x")
    assert calls[-1][0][-2:] == ["--ckpt_path", str(run / "checkpoints" / "last.ckpt")]
    # metrics.csv stays for the resumed fit to append to (omgpt fit keeps its rows: tests/test_refusals.py)
    assert (run / "metrics.csv").read_text() == "step\n2\n" and not (run / "metrics-part1.csv").exists()
    assert [r["step"] for r in store.metric_rows(run)] == ["1", "2"]
    monkeypatch.setattr(store.subprocess, "call", lambda cmd, stdout, **kw: (stdout.write("boom\n"), 3)[1])
    with pytest.raises(Exception, match=r"^training x failed \(exit 3\): boom -- see "):
        store.fit([], run, tmp_path / "fit.log", "x")


# --------------------------------------------------------------------------------------------------
# Store records (done.json).
def test_every_committed_record_and_card_reads_and_names_its_model():
    for done in RECORDS:
        record = store.read_record(done.parent)
        hp = read_checkpoint(record["ckpt"])["hyper_parameters"]
        assert (record["task"], record["task_options"]) == (hp["task"], hp.get("task_options") or {})
    for card in CARDS:
        assert (
            store.read_card(card.parent)["task"]
            == read_checkpoint(card.parent / "model.ckpt")["hyper_parameters"]["task"]
        )


def slot(name: str) -> tuple[Model, str]:
    model = load_experiment("misspecification", "cpu").models[name]
    return model, model_key(model, "cpu", [])


def test_a_record_reused_by_an_experiment_must_be_of_its_slots_task_and_options(tmp_path, capsys):
    """A non-stationary model (its done.json and model.ckpt) under the two-types key is refused, by the
    store and by ``omgpt experiment`` (exit 2, one line), before any training or evaluation."""
    from omgpt.commands.experiment.models import train_model

    (_, ns_key), (two_types, tt_key) = slot("nonstationary"), slot("two-types")
    models = tmp_path / "models"
    copy_slot(NONSTATIONARY, models / ns_key)
    copy_slot(TWO_TYPES, models / tt_key)
    assert (
        train_model("two-types", two_types, scale="cpu", models_dir=models, extra_configs=[])["best_val_regret"]
        == 15.5092
    )  # the right one is reused
    shutil.rmtree(models / tt_key)
    copy_slot(NONSTATIONARY, models / tt_key)
    with pytest.raises(RecordError, match="a model of task newsvendor-nonstationary {}, not the task newsvendor"):
        train_model("two-types", two_types, scale="cpu", models_dir=models, extra_configs=[])
    capsys.readouterr()
    before = snapshot(models)
    assert (
        cli_main(["experiment", "misspecification", "--models-dir", str(models), "--out", str(tmp_path / "out")]) == 2
    )
    assert "done.json: a model of task newsvendor-nonstationary" in one_line_error(capsys)
    assert snapshot(models) == before and not (tmp_path / "out").exists()


def test_a_record_refuses_a_model_file_it_was_not_written_for(tmp_path):
    folder = copy_slot(TWO_TYPES, tmp_path / "slot")
    shutil.copy(NONSTATIONARY / "model.ckpt", folder / "model.ckpt")  # swapped
    with pytest.raises(RecordError, match=r"model.ckpt: not the model .*done.json was written for") as e:
        store.read_record(folder, "newsvendor", {"demand_types": "mixed"})
    assert "\n" not in str(e.value)


def test_a_record_refuses_a_ckpt_outside_its_own_folder(tmp_path):
    """A record pointing at another folder's model (an absolute path, or up and out), even with that
    model's checksum: the store only serves the model beside its record."""
    folder = copy_slot(TWO_TYPES, tmp_path / "slot")
    record = json.loads((folder / "done.json").read_text())
    foreign = NONSTATIONARY / "model.ckpt"
    for ckpt in (str(foreign), "../other/model.ckpt"):
        shutil.rmtree(tmp_path / "other", ignore_errors=True)
        copy_slot(NONSTATIONARY, tmp_path / "other")
        (folder / "done.json").write_text(
            json.dumps({**record, "ckpt": ckpt, "checksum": store.records.checksum(foreign)})
        )
        with pytest.raises(RecordError, match=r"done.json: key 'ckpt': .* is not a file of the record's own folder"):
            store.read_record(folder)


@pytest.mark.parametrize("content, says", [
    (None, "not valid JSON"),  # truncated
    (b"{}", "missing key 'model'"),
    (b"[]", "expected a mapping, got list"),
    (b"\x80\x81\x00\xff" * 8, "binary content"),
    ("no checksum", "missing key 'checksum'"),  # written before records held one
    ("steps as text", "key 'steps': expected int"),
])  # fmt: skip
def test_a_malformed_record_is_one_line_naming_its_file_and_key(content, says, tmp_path):
    folder = copy_slot(TWO_TYPES, tmp_path / "slot")
    record = json.loads((folder / "done.json").read_text())
    if content is None:
        content = (folder / "done.json").read_bytes()[:200]
    elif content == "no checksum":
        content = json.dumps({k: v for k, v in record.items() if k != "checksum"}).encode()
    elif content == "steps as text":
        content = json.dumps({**record, "steps": "3000"}).encode()
    (folder / "done.json").write_bytes(content)
    with pytest.raises(RecordError) as e:
        store.read_record(folder, "newsvendor", {"demand_types": "mixed"})
    assert str(e.value).startswith(str(folder / "done.json")) and says in str(e.value) and "\n" not in str(e.value)


# --------------------------------------------------------------------------------------------------
# Model cards (card.json).
def break_card(card: Path, how: str) -> None:
    info = json.loads(card.read_text())
    if how == "truncated":
        card.write_text(card.read_text()[:300])
    elif how == "empty mapping":
        card.write_text("{}")
    elif how == "steps off the curve":
        card.write_text(json.dumps({**info, "steps": info["steps"] + 1}))
    elif how == "empty curve":
        card.write_text(json.dumps({**info, "validation": []}))
    elif how == "swapped model":
        shutil.copy(ROOT / "pretrained/newsvendor-censored/model.ckpt", card.parent / "model.ckpt")
    elif how == "interval of one number":
        info["previous"]["ratio_to_alg_star"]["ci90"] = [1.1]
        card.write_text(json.dumps(info))
    elif how.startswith(("provenance", "adopted_from")):  # "provenance a number": the key, then its value
        key, value = how.split(maxsplit=1)
        card.write_text(json.dumps({**info, key: {"a number": 3, "a list": ["why"], "a string": "x"}[value]}))


BROKEN = {
    "truncated": "not valid JSON",
    "empty mapping": "missing key",
    "steps off the curve": "is not on its validation curve",
    "empty curve": "key 'validation': is empty",
    "swapped model": "not the model",
    "interval of one number": "key 'previous.ratio_to_alg_star.ci90': expected a list of 2 items",
    "provenance a number": "key 'provenance': expected str",
    "provenance a list": "key 'provenance': expected str",
    "adopted_from a string": "key 'adopted_from': expected a mapping",
}


def pretrained_copy(
    tmp_path: Path, names=("newsvendor", "newsvendor-censored"), files=("card.json", "model.ckpt")
) -> Path:
    for name in names:
        (tmp_path / "pretrained" / name).mkdir(parents=True)
        for f in files:
            shutil.copy(ROOT / "pretrained" / name / f, tmp_path / "pretrained" / name / f)
    return tmp_path / "pretrained"


@pytest.mark.parametrize("how", BROKEN)
def test_a_broken_card_stops_the_experiment_that_reads_it_with_one_line(how, tmp_path, monkeypatch, capsys):
    """``omgpt experiment horizon-generalisation`` stands the shipped models in (their cards say what
    they are): a broken card is exit 2 and one line, not a StopIteration or IndexError."""
    import omgpt.commands.experiment.models as models

    monkeypatch.setattr(models, "PRETRAINED", pretrained_copy(tmp_path))
    break_card(tmp_path / "pretrained/newsvendor/card.json", how)
    args = [
        "experiment",
        "horizon-generalisation",
        "--models-dir",
        str(tmp_path / "models"),
        "--out",
        str(tmp_path / "out"),
    ]
    assert cli_main(args) == 2
    assert BROKEN[how] in one_line_error(capsys)
    assert not (tmp_path / "out").exists() and not (tmp_path / "models").exists()


@pytest.mark.parametrize("how", BROKEN)
def test_render_refuses_a_broken_card_and_changes_nothing(how, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(reference_models, "PRETRAINED", pretrained_copy(tmp_path, ("newsvendor",)))
    folder = tmp_path / "pretrained/newsvendor"
    break_card(folder / "card.json", how)
    before = snapshot(folder)
    assert exit_code(reference_models.main, ["render", "newsvendor"]) == 2
    assert BROKEN[how] in one_line_error(capsys)
    assert snapshot(folder) == before


@pytest.mark.parametrize("how", BROKEN)
def test_the_readmes_table_of_reference_models_refuses_a_broken_card_in_one_line(how, tmp_path, monkeypatch):
    """``python -m tools.readme_tables --check`` reads every shipped card: a broken one is one line naming
    the file and the key (exit 2), not an IndexError or TypeError from the table."""
    from tools import readme_tables

    pretrained_copy(tmp_path, ("newsvendor",))
    monkeypatch.setattr(readme_tables, "ROOT", tmp_path)
    break_card(tmp_path / "pretrained/newsvendor/card.json", how)
    with pytest.raises(RecordError) as e:
        readme_tables.pretrained_table()
    assert BROKEN[how] in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith(str(tmp_path / "pretrained/newsvendor")), e.value


@pytest.mark.parametrize("name", ["newsvendor", "linear-bandit-100-rl"])  # a trained and an adopted model's card
def test_render_redraws_a_shipped_card_as_committed(name, tmp_path, monkeypatch):
    """The checksum, task and options added to the committed cards change nothing a card shows."""
    monkeypatch.setattr(reference_models, "PRETRAINED", pretrained_copy(tmp_path, (name,)))
    assert reference_models.main(["render", name]) == 0
    folder = tmp_path / "pretrained" / name
    assert (folder / "card.md").read_text() == (ROOT / "pretrained" / name / "card.md").read_text()
    assert (folder / "card.json").read_text() == (ROOT / "pretrained" / name / "card.json").read_text()


def test_a_retrained_reference_model_keeps_the_replaced_models_number_on_its_card(tmp_path, monkeypatch):
    """A retrained reference model's card shows the number of the model it replaced (the experiments
    table's previous-recipe column, for the cards); carding the same model again keeps that record,
    and the next retrain's card names the model it replaced, not the one before."""
    shipped = pretrained_copy(tmp_path, ("newsvendor",))
    monkeypatch.setattr(reference_models, "PRETRAINED", shipped)
    card_json = shipped / "newsvendor" / "card.json"
    old = json.loads(card_json.read_text())
    canned = (old["test"], old["spot_check"], old["replication"])  # the card's test, not a 1,000-run evaluation
    monkeypatch.setattr(reference_models, "test_model", lambda *args: canned)
    training = ("name", "horizon", "command", "kept_checkpoint", "steps", "wall_minutes", "validation")
    info = {k: old[k] for k in training}

    def retrain(step: int, cpu_minutes: float) -> dict:
        tiny_checkpoint(tmp_path / f"model-{step}.ckpt", step)
        info["cpu_minutes"] = cpu_minutes
        reference_models.ship("newsvendor", info, tmp_path / f"model-{step}.ckpt", 1000, 8, 9)
        return store.read_card(shipped / "newsvendor")  # checked, "previous" included

    first = retrain(200, 99.0)
    trained = 28_000  # the shipped newsvendor model: 280 epochs of 100 steps, its last one kept
    assert first["previous"] == {
        "steps": trained, "cpu_minutes": old["cpu_minutes"], "runs": 1000, "seed": 8,
        "final_regret": old["test"]["policies"]["omgpt"]["final_regret"]["mean"],
        "ratio_to_alg_star": old["ratio_to_alg_star"],
    }  # fmt: skip
    ratio = old["ratio_to_alg_star"]
    assert (
        f"The model this one replaced: OMGPT / alg-star {ratio['mean']:.2f} [{ratio['ci90'][0]:.2f}, "
        f"{ratio['ci90'][1]:.2f}] on 1,000 test environments (seed 8), 28,000 steps in "
        f"{old['cpu_minutes']:.0f} CPU-minutes."
    ) in (shipped / "newsvendor" / "card.md").read_text()
    assert retrain(200, 99.0)["previous"] == first["previous"]  # the same model carded again
    assert retrain(300, 120.0)["previous"]["cpu_minutes"] == 99.0  # the model it replaced


# --------------------------------------------------------------------------------------------------
# The tools check every argument before they write.
@pytest.mark.parametrize(
    "bad", [["--runs", "0"], ["--runs", "-5"], ["--seed", "10000"], ["--seed", "2", "--replication-seed", "2"]]
)
def test_card_with_a_bad_argument_leaves_the_shipped_model_alone(bad, tmp_path, monkeypatch, capsys):
    """On a copy of pretrained/newsvendor, beside a finished run whose kept checkpoint differs from the
    shipped model: a bad argument is exit 2 and one line, and no file changes."""
    shipped = pretrained_copy(tmp_path, ("newsvendor",), ("card.json", "card.md", "model.ckpt"))
    monkeypatch.setattr(reference_models, "PRETRAINED", shipped)
    run = tmp_path / "runs" / "newsvendor" / "version_0"
    tiny_checkpoint(run / "checkpoints" / "epoch001-ucb4.50.ckpt", 200)
    (run / "metrics.csv").write_text(
        "epoch,step,time/cpu_minutes,val/regret,val/regret_ucb,val/suboptimality\n1,199,2.0,4.0,4.5,0.4\n"
    )
    before = snapshot(tmp_path)
    assert exit_code(reference_models.main, ["card", "newsvendor", *bad, "--runs-dir", str(tmp_path / "runs")]) == 2
    one_line_error(capsys)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("argv", [
    ["train", "nope"], ["card", "nope"], ["retest", "nope"], ["render", "nope"], ["render", "../results"],
    ["train", "newsvendor", "--runs-dir", "/proc/x"], ["train", "newsvendor", "--minutes", "0", "--runs-dir", "/proc/x"],
    ["adopt", "x-rl", "no-such-key"], ["adopt", "newsvendor", "linear-bandit-89e7f34ce8"], ["adopt", "../x", "linear-bandit-89e7f34ce8"], ["adopt", "..", "linear-bandit-89e7f34ce8"],
    ["adopt", "x-rl", "linear-bandit-89e7f34ce8", "--runs", "0"], ["adopt", "x-rl", "linear-bandit-89e7f34ce8", "--seed", "1"],
    ["train", "linear-bandit-100-rl"],
])  # fmt: skip
def test_reference_models_refuses_bad_arguments_with_exit_2(argv, capsys):
    assert exit_code(reference_models.main, argv) == 2
    one_line_error(capsys)


@pytest.mark.parametrize(
    "argv", [["report", "--out", "/proc/x"], ["report", "--runs-dir", "/nonexistent", "--out", "TMP"], ["run", "nope"]]
)
def test_recipe_refuses_bad_arguments_with_exit_2(argv, tmp_path, capsys):
    argv = [str(tmp_path / "out") if a == "TMP" else a for a in argv]
    assert exit_code(recipe.main, argv) == 2
    one_line_error(capsys)
    assert not (tmp_path / "out").exists()


def test_recipe_run_checks_every_variant_before_training_any(tmp_path, monkeypatch, capsys):
    trained = []
    monkeypatch.setattr(recipe, "fit", lambda *args, **kw: trained.append(args))
    assert exit_code(recipe.main, ["run", "baseline", "nope", "--runs-dir", str(tmp_path)]) == 2
    assert "variants: must be one of baseline" in one_line_error(capsys) and trained == []
    assert recipe.main(["run", "baseline", "--runs-dir", str(tmp_path), "--jobs", "1"]) == 0
    ((args, run, log, what, nice),) = trained
    assert run == tmp_path / "baseline" / "version_0" and args[:2] == ["--config", "configs/recipe/baseline.yaml"]
    assert re.search(
        r"--trainer.logger.init_args.version 0\b", " ".join(args)
    )  # one folder: an interrupted run resumes
