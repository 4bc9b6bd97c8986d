"""tools/rekey_models.py: after a config refactor, the store's models move to the keys today's configs
give them (parents before children), and every record naming an old key names the new one."""

from __future__ import annotations

import json
from pathlib import Path

from omgpt.commands.experiment.models import _init_arguments, run_key
from tools import rekey_models


def record(folder: Path, command: str, **extra) -> None:
    folder.mkdir(parents=True)
    (folder / "done.json").write_text(json.dumps({"task": "newsvendor", "command": command, **extra}))


def test_a_refactored_config_moves_parent_and_child_and_rewrites_their_records(tmp_path):
    config = tmp_path / "scale.yaml"
    config.write_text("model:\n  n_layer: 2\n")
    args = ["--config", str(config), "--model.task", "newsvendor", "--model.horizon", "10"]
    parent = run_key("newsvendor", args)
    child = run_key("newsvendor", args + _init_arguments(parent))
    store = tmp_path / "models"
    record(store / parent, "omgpt fit " + " ".join(args))
    record(
        store / child,
        f"omgpt fit {' '.join(args)} --model.finetune.init_from {store / parent / 'model.ckpt'}",
        init_from=parent,
    )
    assert rekey_models.new_keys(store) == {}  # the configs as they were: every model where it belongs

    config.write_text("model:\n  network:\n    n_layer: 2\n  optim:\n    lr: 0.001\n")  # another text, another key
    moved = rekey_models.new_keys(store)
    new_parent = run_key("newsvendor", args)
    assert moved == {parent: new_parent, child: run_key("newsvendor", args + _init_arguments(new_parent))}

    results = tmp_path / "results"
    results.mkdir()
    (results / "experiment.json").write_text(json.dumps({"models": {"a": {"key": parent}, "b": {"key": child}}}))
    (results / "notes.csv").write_text(parent)  # not a JSON, Markdown, text or Python file: left alone
    assert rekey_models.rewrite_references(moved, roots=[results]) == [results / "experiment.json"]
    keys = json.loads((results / "experiment.json").read_text())["models"]
    assert keys == {"a": {"key": moved[parent]}, "b": {"key": moved[child]}}
    assert (results / "notes.csv").read_text() == parent
