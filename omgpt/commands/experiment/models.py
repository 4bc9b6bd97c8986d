"""The model store of ``omgpt experiment``: every model an experiment needs is one ``omgpt fit`` run in
a content-addressed folder ``MODELS_DIR/<task>-<hash of its fit arguments and configs>``, trained once
by the run store (:mod:`omgpt.commands.store`: one CPU thread, resumed from its ``last.ckpt`` when
interrupted, the checkpoint of lowest ``val/regret_ucb`` kept) and shared by every experiment that asks for it.

A finished model is ``done.json`` (its training record) and ``model.ckpt`` (the kept checkpoint's
weights and hyper-parameters, ~1 MB at the CPU scale): what an experiment reads, and all a store needs
to keep, so a store of finished models can be committed and carried to another machine; the fit's own
``run/`` folder (full checkpoints with optimizer state, logs) is only needed to resume an unfinished fit.
``done.json`` names its model's checksum, task and options: a record of another model, or of another
task than its key's, is refused (:func:`omgpt.commands.store.read_record`).

A model may start from another's weights (``init_from``: the regret fine-tuning of docs/finetune.md):
it is fitted with ``--model.finetune.init_from`` its parent's kept ``model.ckpt``, after the parent, and its key
covers the parent's key (a shipped reference model's with its weights' checksum), so a parent that
changes trains new children; the key holds no machine path.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

import yaml

from omgpt.errors import OMGPTError
from omgpt.progress import Progress
from omgpt.settings import GROUPS
from omgpt.commands.experiment.config import SCALES, Experiment, Model, dependency_order
from omgpt.commands.experiment.results import ModelRecord
from omgpt.commands.store import read_card, read_record, train
from omgpt.resources import CHECKOUT, CONFIGS

ROOT = CHECKOUT  # reports show paths relative to the repository; fits run from it
BASE_CONFIG = CONFIGS / "base.yaml"  # loaded first by every `omgpt fit` (omgpt.commands.lightning_cli.build_cli)
PRETRAINED = ROOT / "pretrained"  # the shipped reference models (tools/reference_models.py)


def fit_arguments(model: Model, scale: str, extra_configs: list[str]) -> list[str]:
    """The ``omgpt fit`` arguments of one model (without where it writes). ``extra_configs`` (a quick
    run's ``--fit-config``) come last, so they win over the model's own args too: a quick run stays quick
    when a model's recipe sets ``trainer.max_epochs``. (Without them the arguments, so the keys of the
    stored models, are what they always were.)"""
    args = ["--config", str(SCALES[scale])]
    args += _config_arguments(model.configs)
    args += ["--model.task", model.task, "--model.task_options", json.dumps(model.task_options, sort_keys=True)]
    args += ["--model.horizon", str(model.horizon)]
    for key, value in sorted(model.args.items(), key=lambda item: _key_form(f"--{item[0]}")):  # keys' order
        args += [
            f"--{key}",
            json.dumps(value) if isinstance(value, (dict, list, bool)) or value is None else str(value),
        ]
    return args + _config_arguments(extra_configs)


def _config_arguments(configs: list[str]) -> list[str]:
    """``--config PATH`` for each config, a repository-relative one resolved against the checkout."""
    args = []
    for cfg in configs:
        args += ["--config", str(ROOT / cfg) if not Path(cfg).is_absolute() and (ROOT / cfg).is_file() else str(cfg)]
    return args


def run_key(task: str, args: list[str]) -> str:
    """``task-<hash>``: the hash covers the fit arguments (config paths relative to the repository, so
    a moved clone keeps its models) and the settings of every config file, ``configs/base.yaml`` -- the
    layer every fit starts from -- included, so a changed setting trains a new model instead of reusing
    a stale one. The settings, not the bytes: a config's parsed YAML, so editing a comment keeps its
    models. (Code changes are not hashed: delete the models folder after changing the model.)"""
    shown = [_shown(Path(a)) if i and args[i - 1] == "--config" else _key_form(a) for i, a in enumerate(args)]
    h = hashlib.sha1(json.dumps(shown).encode())
    configs = [BASE_CONFIG] + [Path(a) for i, a in enumerate(args) if i and args[i - 1] == "--config"]
    for cfg in configs:
        h.update(json.dumps(_key_form(yaml.safe_load(cfg.read_text())), sort_keys=True).encode())
    return f"{task}-{h.hexdigest()[:10]}"


def _key_form(setting):
    """A fit argument or a parsed config as keys hash it: the grouped settings (``model.network``,
    ``model.optim``, ``model.finetune``) at the model's top level (``--model.optim.lr`` hashed as
    ``--model.lr``, ``model: {network: {n_layer: ...}}`` as ``model: {n_layer: ...}``), where they were
    before the groups, so that every model trained before keeps its key (tests/test_experiment.py checks
    the keys of the stored models). Only the hash keeps the old form: the stored records' commands use
    today's flags."""
    if isinstance(setting, str):
        for group in GROUPS:
            if setting.startswith(f"--model.{group}."):
                return setting.replace(f"--model.{group}.", "--model.", 1)
        return setting
    model = setting.get("model") if isinstance(setting, dict) else None
    groups = [g for g in GROUPS if isinstance(model, dict) and isinstance(model.get(g), dict)]
    if not groups:
        return setting
    grouped = {k: v for g in groups for k, v in model[g].items()}
    return {**setting, "model": {**grouped, **{k: v for k, v in model.items() if k not in groups}}}


def model_key(model: Model, scale: str, extra_configs: list[str], parent_key: str | None = None) -> str:
    """What identifies a model's run: ``pretrained/NAME`` where a reference model stands in for it
    (not with extra fit configs: quick runs train), else its run folder's ``task-<hash>``; a model that
    starts from another's weights gives that model's key as ``parent_key``, which the hash covers."""
    if model.pretrained and not extra_configs:
        return f"pretrained/{model.pretrained}"
    return run_key(model.task, fit_arguments(model, scale, extra_configs) + _init_arguments(parent_key))


def _init_arguments(parent_key: str | None) -> list[str]:
    """What a child's key hashes of its parent: the parent's key (content-addressed already), and for a
    shipped reference model -- whose key is only its name -- the checksum of its weights, so that a
    re-shipped reference model trains new children instead of reusing ones fine-tuned from the old."""
    if parent_key is None:
        return []
    if parent_key.startswith("pretrained/"):
        return ["--model.finetune.init_from", f"{parent_key}@{read_card(ROOT / parent_key)['checksum']}"]
    return ["--model.finetune.init_from", parent_key]


def experiment_keys(exp: Experiment, extra_configs: list[str]) -> dict[str, str]:
    """Every model of ``exp`` -> its key (:func:`model_key`), parents before the children whose keys
    cover theirs."""
    keys: dict[str, str] = {}
    for name in dependency_order(exp.models):
        model = exp.models[name]
        keys[name] = model_key(model, exp.scale, extra_configs, keys[model.init_from] if model.init_from else None)
    return keys


def pretrained_model(name: str, model: Model) -> ModelRecord:
    """The record of a shipped reference model (``pretrained/NAME``) standing in for a training run,
    from its card (read and checked by the run store): the command, steps, CPU time and validation
    curve of the run that made it."""
    folder = PRETRAINED / model.pretrained
    if not (folder / "card.json").exists():
        raise OMGPTError(
            f"model {name!r}: no reference model pretrained/{model.pretrained} "
            f"(python -m tools.reference_models train {model.pretrained}, then card)"
        )
    card = read_card(folder, model.task, model.task_options)
    check_model_task(folder / "model.ckpt", folder / "card.json", model)
    if card["horizon"] != model.horizon:
        raise OMGPTError(
            f"model {name!r}: pretrained/{model.pretrained} is trained at horizon {card['horizon']}, the experiment wants {model.horizon}"
        )
    curve = card["validation"]
    print(f"  {name}: the reference model pretrained/{model.pretrained} (step {card['steps']} of {curve[-1]['step']})")
    return {
        "model": name,
        "key": f"pretrained/{model.pretrained}",
        "ckpt": str(folder / "model.ckpt"),
        "train_seconds": round(60 * card["cpu_minutes"], 1),
        "command": card["command"],
        "val_regret": [[p["step"], p["regret"]] for p in curve],
        "steps": curve[-1]["step"],
        "selected_by": "val/regret_ucb",
        "best_val_regret": next(p["regret"] for p in curve if p["step"] == card["steps"]),
    }


def check_model_task(ckpt: Path, record: Path, model: Model) -> None:
    """The checkpoint behind a card or store record is of the task (and options) the record names and
    the experiment asks for: a checkpoint copied in under a re-stamped checksum, or a hand-edited
    record, would otherwise reach the evaluation as "task options {} change the token sizes"."""
    from omgpt.checkpoints import read_checkpoint

    hp = read_checkpoint(ckpt, mmap=True).get("hyper_parameters") or {}
    held = {"task": hp.get("task"), "task_options": hp.get("task_options") or {}}
    wanted = {"task": model.task, "task_options": model.task_options or {}}
    if json.dumps(held, sort_keys=True) != json.dumps(wanted, sort_keys=True):
        shown = lambda s: f"{s['task']} {json.dumps(s['task_options'], sort_keys=True)}"
        raise OMGPTError(
            f"{_shown(ckpt)} is a checkpoint of task {shown(held)}, not {shown(wanted)} as {_shown(record)} says; "
            "retrain the model or put back its own checkpoint"
        )


def train_model(
    name: str,
    model: Model,
    *,
    scale: str,
    models_dir: Path,
    extra_configs: list[str],
    parent: ModelRecord | None = None,
) -> ModelRecord:
    """Train the model ``name`` unless its folder in ``models_dir`` already holds a finished run (or a
    reference model stands in for it); returns its record. The run store (:mod:`omgpt.commands.store`)
    fits, resumes, keeps and records; this names the slot: the model's fit arguments at ``scale`` with
    ``extra_configs`` (a quick run's ``--fit-config``) layered on. ``parent``: the record of the model
    this one starts from (``init_from``), trained already: the fit starts from its kept weights."""
    key = model_key(model, scale, extra_configs, parent and parent["key"])
    if key.startswith("pretrained/"):
        return pretrained_model(name, model)
    args = fit_arguments(model, scale, extra_configs)
    info = {"model": name, "key": key}
    if parent is not None:  # relative to the repository where it is inside (fits run from there): no machine path
        args += ["--model.finetune.init_from", _shown(Path(parent["ckpt"]))]
        info["init_from"] = parent["key"]
    folder = models_dir / key
    if (folder / "done.json").exists():
        record = read_record(folder, model.task, model.task_options)
        check_model_task(Path(record["ckpt"]), folder / "done.json", model)
        record["command"] = _fit_command(args)
        print(f"  {name}: reusing {_shown(Path(record['ckpt']))}")
        return record
    print(f"  {name}: training -> {folder} (log: {folder / 'train.log'})", flush=True)
    record = train(folder, args, {**info, "command": _fit_command(args)}, f"model {name!r}")
    print(
        f"  {name}: trained in {record['train_seconds']:.0f} s, val/regret of the kept checkpoint {record['best_val_regret']}",
        flush=True,
    )
    return record


def _fit_command(args: list[str]) -> str:
    """The model's ``omgpt fit`` command as a shell line (config paths relative to the repository)."""
    return "omgpt fit " + shlex.join(_shown(Path(a)) if Path(a).is_absolute() else a for a in args)


def _shown(path: Path) -> str:
    """A path as reports print it: relative to the repository when inside it (no machine paths)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def train_all(
    models: dict[str, Model], *, scale: str, models_dir: Path, extra_configs: list[str], jobs: int
) -> dict[str, ModelRecord]:
    """Every model of ``models`` (name -> model: an experiment's, or ``--all``'s pool) trained or reused
    (:func:`train_model`), ``jobs`` fits at once, each on one CPU thread (the run store); a model that
    starts from another (``init_from``) is started once that one is done. Returns name -> record, in
    the order of ``models``; the first fit that fails stops the run (after the fits already running
    have ended)."""
    waiting, records, running = dependency_order(models), {}, {}
    progress = Progress(len(models), "models trained or reused")
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        while waiting or running:
            for name in [n for n in waiting if models[n].init_from in (None, *records)]:
                waiting.remove(name)
                parent = records.get(models[name].init_from)
                running[
                    pool.submit(
                        train_model,
                        name,
                        models[name],
                        scale=scale,
                        models_dir=models_dir,
                        extra_configs=extra_configs,
                        parent=parent,
                    )
                ] = name
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                records[running.pop(future)] = future.result()
                progress.advance()
    return {n: records[n] for n in models}
