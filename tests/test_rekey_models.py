"""tools/rekey_models.py: after a config refactor, the store's models move to the keys today's configs
give them (parents before children), and the fields naming an old key name the new one; nothing else in
the checkout is touched, and a store it cannot re-key is one line and exit 2 with nothing moved."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from omgpt.commands.experiment.models import ROOT, _init_arguments, run_key
from tools import rekey_models

COMMITTED = ROOT / "results" / "models" / "pricing-a1af405354"  # a finished model without a parent


def record(folder: Path, command: str, **extra) -> None:
    folder.mkdir(parents=True)
    (folder / "done.json").write_text(json.dumps({"task": "newsvendor", "command": command, **extra}))


def refactored_store(tmp_path: Path) -> tuple[Path, str, str, dict[str, str]]:
    """A parent and its child under one config, then that config said another way: both keys change."""
    config = tmp_path / "scale.yaml"
    config.write_text("model:\n  n_layer: 2\n")
    args = ["--config", str(config), "--model.task", "newsvendor", "--model.horizon", "10"]
    parent = run_key("newsvendor", args)
    child = run_key("newsvendor", args + _init_arguments(parent))
    store = tmp_path / "models"
    record(store / parent, "omgpt fit " + " ".join(args), key=parent)
    record(
        store / child,
        f"omgpt fit {' '.join(args)} --model.finetune.init_from {store / parent / 'model.ckpt'}",
        key=child,
        init_from=parent,
    )
    assert rekey_models.new_keys(store) == {}  # the configs as they were: every model where it belongs
    config.write_text("model:\n  network:\n    n_layer: 2\n  optim:\n    lr: 0.001\n")  # another text, another key
    new_parent = run_key("newsvendor", args)
    return store, parent, child, {parent: new_parent, child: run_key("newsvendor", args + _init_arguments(new_parent))}


def test_a_refactored_config_moves_parent_and_child_and_rewrites_their_records(tmp_path, capsys):
    store, parent, child, expected = refactored_store(tmp_path)
    assert rekey_models.new_keys(store) == expected

    assert rekey_models.main(["--models-dir", str(store)]) == 0  # the default says what it would do, and does nothing
    assert "2 model(s) would move, 2 file(s) would be rewritten" in capsys.readouterr().out
    assert sorted(d.name for d in store.iterdir()) == sorted([parent, child])

    assert rekey_models.main(["--models-dir", str(store), "--apply"]) == 0
    assert sorted(d.name for d in store.iterdir()) == sorted(expected.values())
    moved = json.loads((store / expected[child] / "done.json").read_text())
    assert moved["key"] == expected[child] and moved["init_from"] == expected[parent]
    assert f"--model.finetune.init_from {store / expected[parent] / 'model.ckpt'}" in moved["command"]
    assert json.loads((store / expected[parent] / "done.json").read_text())["key"] == expected[parent]
    assert rekey_models.new_keys(store) == {}


def test_references_are_rewritten_in_the_fields_that_hold_keys_only(tmp_path):
    store, parent, child, moved = refactored_store(tmp_path)
    results = tmp_path / "results"
    results.mkdir()
    experiment = {
        "models": {
            "a": {"key": parent, "ckpt": str(store / parent / "model.ckpt")},
            "b": {"key": child, "init_from": parent, "note": f"the child of {parent}"},  # prose in a record: kept
        },
        "elsewhere": {"ckpt": str(tmp_path / "other" / parent / "model.ckpt")},  # another store's folder: kept
    }
    (results / "experiment.json").write_text(json.dumps(experiment, indent=1) + "\n")
    (results / "report.md").write_text(f"| a | `{parent}` |\n| c | `{parent}0` |\n")  # a longer word is another key
    (results / "notes.csv").write_text(parent)  # not a file kind it reads: left alone
    changes = rekey_models.rewrite_references(moved, [results], store)
    assert sorted(changes) == [results / "experiment.json", results / "report.md"]
    assert changes[results / "report.md"] == f"| a | `{moved[parent]}` |\n| c | `{parent}0` |\n"
    new = json.loads(changes[results / "experiment.json"])
    assert new["models"]["a"] == {"key": moved[parent], "ckpt": str(store / moved[parent] / "model.ckpt")}
    assert new["models"]["b"] == {"key": moved[child], "init_from": moved[parent], "note": f"the child of {parent}"}
    assert new["elsewhere"] == experiment["elsewhere"]
    assert changes[results / "experiment.json"].startswith('{\n "models"')  # the layout it had (indent 1)
    assert (results / "experiment.json").read_text() == json.dumps(experiment, indent=1) + "\n"  # nothing written yet


def test_a_copy_under_another_name_moves_and_rewrites_nothing_in_the_checkout(tmp_path, monkeypatch, capsys):
    """A committed model copied to a store as ``tmp``: it moves to its key there; the word "tmp" that
    fills the checkout's docs, tests and results is no key (it once rewrote 748 lines in 41 files)."""
    store = tmp_path / "store"
    store.mkdir()
    shutil.copytree(COMMITTED, store / "tmp")
    assert rekey_models.rewrite_references({"tmp": COMMITTED.name}, rekey_models.REFERENCES) == {}
    written = []
    monkeypatch.setattr(rekey_models, "write_text", lambda path, text: written.append(path))
    assert rekey_models.main(["--models-dir", str(store), "--apply"]) == 0
    assert "1 model(s) moved; 0 file(s) rewritten" in capsys.readouterr().out
    assert written == [] and [d.name for d in store.iterdir()] == [COMMITTED.name]
    assert (store / COMMITTED.name / "done.json").read_bytes() == (COMMITTED / "done.json").read_bytes()


def test_a_model_that_would_move_onto_a_stored_key_is_refused_and_nothing_moves(tmp_path, capsys):
    store = tmp_path / "store"
    store.mkdir()
    shutil.copytree(COMMITTED, store / COMMITTED.name)
    shutil.copytree(COMMITTED, store / "tmp")
    assert rekey_models.main(["--models-dir", str(store), "--apply"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"tmp would move onto {COMMITTED.name}" in err and "nothing moved" in err
    assert sorted(d.name for d in store.iterdir()) == sorted([COMMITTED.name, "tmp"])


def test_the_committed_store_is_where_todays_configs_put_it(capsys):
    """The documented command on the committed store: nothing to move, so it stops at no collision."""
    assert rekey_models.main([]) == 0
    assert "0 model(s) would move, 0 file(s) would be rewritten" in capsys.readouterr().out


@pytest.mark.parametrize("loop", [{"a": "a"}, {"a": "b", "b": "a"}], ids=["itself", "each-other"])
def test_records_starting_from_each_other_are_refused(tmp_path, capsys, loop):
    store = tmp_path / "store"
    for name, parent in loop.items():
        record(store / name, "omgpt fit --model.task newsvendor", init_from=parent)
    assert rekey_models.main(["--models-dir", str(store), "--apply"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "init_from goes round a loop" in err
    assert sorted(d.name for d in store.iterdir()) == sorted(loop)


@pytest.mark.parametrize(
    "done, says",
    [
        ({"task": "newsvendor"}, "missing key 'command'"),
        (
            {"task": "newsvendor", "command": "omgpt fit --model.task 'newsvendor"},
            "key 'command': No closing quotation",
        ),
        ({"task": "newsvendor", "command": "python train.py"}, "not an 'omgpt fit' command"),
    ],
    ids=["no-command", "unbalanced-quote", "not-a-fit"],
)
def test_a_damaged_record_is_one_line_naming_it(tmp_path, capsys, done, says):
    store = tmp_path / "store"
    (store / "m").mkdir(parents=True)
    (store / "m" / "done.json").write_text(json.dumps(done))
    assert rekey_models.main(["--models-dir", str(store), "--apply"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(store / "m" / "done.json") in err and says in err
    assert [d.name for d in store.iterdir()] == ["m"]
