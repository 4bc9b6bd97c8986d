"""The run store: the one way a model is trained and kept -- by the experiments' model store
(``results/models/KEY/``, :mod:`omgpt.commands.experiment.models`), the shipped reference models
(``pretrained/NAME/``, ``tools/reference_models.py``) and the CPU-recipe study (``tools/recipe.py``).

* :func:`fit` runs ``python -m omgpt fit ...`` in a subprocess on one CPU thread (its CPU time is then
  the wall-clock the fit takes on an idle core, however many fits share the machine), resuming from the
  run's ``checkpoints/last.ckpt`` when it has one: an interrupted fit continues exactly (RNG, data
  stream, scheduler), so a training budget can be spent across sessions.
* :func:`metric_rows` reads what the fit logged: ``metrics.csv``, which a resumed fit appends to
  (:func:`omgpt.commands.lightning_cli.keep_metric_rows`), after any ``metrics-partN.csv`` of a run
  resumed before that (the store then kept each process's part under that name).
* :func:`kept_checkpoint` is the one rule that picks the model, on validation only: of the checkpoints
  ModelCheckpoint saved (``configs/trainer/callback/checkpoint.yaml``), the lowest ``val/regret_ucb``
  (the authors' rule: mean + one sd of the validation regret), the later epoch on a tie.
  ModelCheckpoint keeps one such file, but a fit resumed under another spelling of its folder does not
  get its best-so-far back and keeps a second; then the rule still picks the lower one (never "the
  last file by name").
* :func:`keep` exports the kept checkpoint's weights (:func:`omgpt.checkpoints.export_weights`);
  :func:`train` does all of it for a store slot and writes its record, ``done.json``.

Records guard themselves. A store record (``done.json``) and a model card (``card.json``) are read only
by :func:`read_record` and :func:`read_card`, through :mod:`omgpt.records` with a schema. Each holds its
model file's checksum, task and task options (:func:`stamp`), and the reader refuses -- one
:class:`~omgpt.records.RecordError` line naming the file and the key -- a malformed file, a model file
whose checksum is not the recorded one, a record of another task or task options than the slot asks for,
a record whose ``ckpt`` is not a file of its own folder, and a card whose kept ``steps`` is not on its
validation curve. A record or card written before records held checksums is refused too (``missing key
'checksum'``): one without it would let a swapped model through unchecked. The committed ones were stamped
once (:func:`stamp_files`: the three fields added, nothing else changed); a local one is retrained
(delete its folder) or stamped the same way.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from omgpt import records, threads
from omgpt.errors import OMGPTError
from omgpt.checkpoints import export_weights, read_checkpoint
from omgpt.files import write_json
from omgpt.records import ANY, NUMBER, ListOf, MapOf, Nullable, Optional, RecordError
from omgpt.resources import CHECKOUT

ROOT = CHECKOUT  # fits run from the repository (their configs are given relative to it)

# ModelCheckpoint's file name for the checkpoints it keeps: "epoch{epoch:03d}-ucb{val/regret_ucb:.2f}"
# (configs/trainer/callback/checkpoint.yaml), or "epoch{epoch:03d}-spl{val/scaled_cost:.5f}" where a
# config selects on the task's scaled cost (real demand: configs/pretrained/bakery.yaml); the tag names
# the rule. Other files in checkpoints/ (last.ckpt, step checkpoints of configs/trainer/fault_tolerant.yaml)
# are never the kept model.
KEPT_NAME = re.compile(r"epoch(\d+)-(ucb|spl)(-?\d+(?:\.\d+)?)")
SELECTED_BY = {"ucb": "val/regret_ucb", "spl": "val/scaled_cost"}


# --------------------------------------------------------------------------------------------------
# Fits.
def fit(args: list[str], run: Path, log: Path, what: str, nice: int = 0) -> float:
    """Run ``omgpt fit ARGS`` to its end; ``ARGS`` make it log into ``run`` (its CSV logger's
    ``save_dir/name/version``). Resumes from ``run/checkpoints/last.ckpt`` when there is one; the
    fit's output is appended to ``log``. Returns this process's wall-clock seconds; a failed fit is an
    :class:`OMGPTError` naming ``what`` and the log's last line."""
    cmd = [sys.executable, "-m", "omgpt", "fit", *args]
    last = run / "checkpoints" / "last.ckpt"
    if last.is_file():  # an interrupted fit: continue it exactly (omgpt fit keeps metrics.csv's rows)
        cmd += ["--ckpt_path", str(last)]
    elif run.is_dir() and any(run.iterdir()):  # a fit that failed before its first checkpoint: kept aside, as it was
        run.rename(run.with_name(f"{run.name}-failed-{time.strftime('%Y%m%d-%H%M%S')}"))
    env = threads.child_env(1)  # fits may run side by side (experiment --jobs): one thread each
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log, "a") as out:
        code = subprocess.call(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=(lambda: os.nice(nice)) if nice else None,
        )
    if code != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        raise OMGPTError(f"training {what} failed (exit {code}): {tail[0]} -- see {log}")
    return round(time.perf_counter() - start, 1)


# --------------------------------------------------------------------------------------------------
# What a fit logged.
def _parts(run: Path) -> list[Path]:
    """``metrics-part0.csv``, ``metrics-part1.csv``, ...: the processes of a run before each resume, as
    the store kept them before ``omgpt fit`` appended to ``metrics.csv``."""
    parts = [
        (int(m.group(1)), p) for p in run.glob("metrics-part*.csv") if (m := re.fullmatch(r"metrics-part(\d+)", p.stem))
    ]
    return [p for _, p in sorted(parts)]


def metric_rows(path: Path) -> list[dict]:
    """The rows of a CSV log: of a run folder, every part in the order written (the earlier
    processes' parts, then ``metrics.csv``); of a file, that file."""
    files = [*_parts(path), path / "metrics.csv"] if path.is_dir() else [path]
    rows = []
    for file in (f for f in files if f.is_file()):
        with file.open(newline="") as f:
            rows += list(csv.DictReader(f))
    return rows


def validation_points(rows: list[dict]) -> list[dict]:
    """Validation points ``{step, minutes, regret, subopt}`` by step (a later row wins where a resumed
    fit logged a step again); ``minutes`` is the run's CPU time (``None`` in logs written before it
    was recorded). The validation curve of a card and of the recipe study."""
    points = {}
    for r in rows:
        if r.get("val/regret"):
            minutes = round(float(r["time/cpu_minutes"]), 3) if r.get("time/cpu_minutes") else None
            points[int(r["step"]) + 1] = {
                "step": int(r["step"]) + 1,
                "minutes": minutes,
                "regret": round(float(r["val/regret"]), 3),
                "subopt": round(float(r["val/suboptimality"]), 4),
            }
    return [points[step] for step in sorted(points)]


def clocks(rows: list[dict]) -> dict[str, float]:
    """The module's training clocks in minutes (``wall``, ``cpu``) at the last row that logged them:
    a resumed fit carries them on from its checkpoint, so they count every process of the run."""
    last = {}
    for r in rows:
        for unit in ("wall", "cpu"):
            if r.get(f"time/{unit}_minutes"):
                last[unit] = float(r[f"time/{unit}_minutes"])
    return last


def training_summary(rows: list[dict], kept_step: int, selected_by: str = "val/regret_ucb") -> dict:
    """A store record's training fields: the validation regret curve, the validation regret of the
    kept checkpoint (at ``kept_step``), the steps trained, the run's own clocks in seconds, and the
    observation head's curve where it has one."""
    regret, obs_mse = {}, {}
    for r in rows:
        if r.get("val/obs_mse"):
            obs_mse[int(r["step"]) + 1] = round(float(r["val/obs_mse"]), 5)
        if r.get("val/regret"):
            regret[int(r["step"]) + 1] = round(float(r["val/regret"]), 4)
    if kept_step not in regret:
        raise OMGPTError(f"the kept checkpoint's step {kept_step} has no validation in the run's metrics")
    curve = [[step, value] for step, value in sorted(regret.items())]
    summary = {
        "val_regret": curve,
        "best_val_regret": regret[kept_step],
        "steps": curve[-1][0],
        "selected_by": selected_by,
    }
    # CPU seconds: with one thread, what the fit takes on an idle core, however many fits shared the machine
    clock = clocks(rows)
    summary.update(
        {
            key: round(60 * clock[unit], 1)
            for key, unit in (("train_seconds", "wall"), ("cpu_seconds", "cpu"))
            if unit in clock
        }
    )
    if obs_mse:
        summary["val_obs_mse"] = sorted(obs_mse.items())
    return summary


# --------------------------------------------------------------------------------------------------
# The kept checkpoint.
def kept_checkpoint(run: Path) -> Path:
    """The checkpoint the run keeps: of those ModelCheckpoint saved, the lowest value of the rule its
    name carries (``val/regret_ucb``, or ``val/scaled_cost``), the later epoch on a tie."""
    saved = [
        (m.group(2), float(m.group(3)), -int(m.group(1)), p)
        for p in (run / "checkpoints").glob("*.ckpt")
        if (m := KEPT_NAME.fullmatch(p.stem))
    ]
    if not saved:
        raise OMGPTError(
            f"{run / 'checkpoints'}: no checkpoint kept by val/regret_ucb or val/scaled_cost (epochNNN-ucbX.ckpt, "
            f"epochNNN-splX.ckpt); has the fit run and validated?"
        )
    if len({tag for tag, *_ in saved}) > 1:  # two rules' files: values of different metrics do not compare
        raise OMGPTError(
            f"{run / 'checkpoints'}: checkpoints kept by two rules ({', '.join(sorted(p.name for *_, p in saved))}); keep one rule per run"
        )
    return min(s[1:] for s in saved)[2]


def keep(run: Path, model: Path) -> tuple[Path, int]:
    """Export the kept checkpoint's weights and hyper-parameters to ``model``; returns the kept
    checkpoint and its step."""
    kept = kept_checkpoint(run)
    export_weights(kept, model)
    return kept, read_checkpoint(model)["global_step"]


def train(folder: Path, args: list[str], info: dict, what: str) -> dict:
    """Train the store slot ``folder``: the fit in ``folder/run`` (resumed if interrupted), its kept
    checkpoint's weights in ``folder/model.ckpt``, and ``done.json``: ``info``, the training summary
    and the model's checksum, task and options. Returns the record, ``ckpt`` as a path."""
    run, model = folder / "run", folder / "model.ckpt"
    args = [
        *args,
        "--trainer.logger.init_args.save_dir",
        str(folder.parent),
        "--trainer.logger.init_args.name",
        folder.name,
        "--trainer.logger.init_args.version",
        run.name,
    ]
    seconds = fit(args, run, folder / "train.log", what)
    kept, step = keep(run, model)
    summary = training_summary(metric_rows(run), step, SELECTED_BY[KEPT_NAME.fullmatch(kept.stem).group(2)])
    # this process's wall-clock, unless the run's own clock (summed over resumes) says more
    seconds = max(seconds, summary.pop("train_seconds", 0.0))
    record = stamp(
        {**info, "ckpt": model.name, "kept_checkpoint": kept.name, "train_seconds": seconds, **summary}, model
    )
    write_json(record, folder / "done.json")
    return {**record, "ckpt": str(model)}


# --------------------------------------------------------------------------------------------------
# Records and cards.
NUMBER_OR_NONE = (int, float, type(None))
RECORD = {  # done.json
    "model": str, "key": str, "ckpt": str, "kept_checkpoint": str, "train_seconds": NUMBER, "command": str,
    "val_regret": ListOf(ListOf(NUMBER), nonempty=True), "best_val_regret": NUMBER, "steps": int, "selected_by": str,
    "cpu_seconds": Optional(NUMBER), "val_obs_mse": Optional(ListOf(ListOf(NUMBER))),
    "task": str, "task_options": dict, "checksum": str,
}  # fmt: skip
PAIR = ListOf(NUMBER_OR_NONE, length=2)  # a 90% interval's two ends (None: open above)
RATIO = {"mean": NUMBER_OR_NONE, "ci90": PAIR}  # OMGPT / alg-star, paired (None: undefined)
REAL_DEMAND = {  # a data task's card: the cost per unit demanded (its ratio to the reference: read_card)
    "groups": int, "clusters": str, "reference": str,
    "costs": MapOf({"scaled_cost": {"mean": NUMBER, "ci90": ListOf(NUMBER, length=2)}}),
}  # fmt: skip
ADOPTED_FROM = {  # a card of a model adopted from the run store (tools/reference_models.py adopt)
    "store_key": str, "model": str, "init_from": Nullable(str),
    "parent_steps": Optional(int), "parent_cpu_minutes": Optional(NUMBER),
}  # fmt: skip
CARD = {  # card.json
    "name": str, "task": str, "task_options": dict, "horizon": int, "command": str, "kept_checkpoint": str, "steps": int,
    "cpu_minutes": NUMBER, "wall_minutes": NUMBER_OR_NONE,
    "validation": ListOf({"step": int, "minutes": NUMBER_OR_NONE, "regret": NUMBER, "subopt": NUMBER}, nonempty=True),
    "test": {"runs": int, "seed": int, "policies": MapOf({"final_regret": {"mean": NUMBER, "ci90": PAIR},
                                                          "final_suboptimality": {"mean": NUMBER}, "ratio_to_alg_star": Optional(RATIO)}),
             "real_demand": Optional(REAL_DEMAND)},
    "spot_check": {"runs": int, "seed": int, "final_regret_mean": NUMBER, "task_options": Optional(dict)},
    "ratio_to_alg_star": Optional(ANY), "replication": Optional(ANY),  # None where the task has no alg-star; else RATIO
    "provenance": Optional(Nullable(str)), "adopted_from": Optional(ADOPTED_FROM),
    "checksum": str,
}  # fmt: skip


PREVIOUS = {  # card.json's "previous": the replaced model's training and test headline
    "steps": int, "cpu_minutes": NUMBER, "runs": int, "seed": int, "final_regret": NUMBER,
    "ratio_to_alg_star": Optional(Nullable({**RATIO, "runs": int, "seed": int})),  # None: a task without alg-star
}  # fmt: skip


def stamp(info: dict, model: Path) -> dict:
    """``info`` with what its reader checks: the model file's checksum, and its task and task options
    (from the model's own hyper-parameters)."""
    hp = read_checkpoint(model)["hyper_parameters"]
    return {
        **info,
        "task": hp["task"],
        "task_options": hp.get("task_options") or {},
        "checksum": records.checksum(model),
    }


def read_record(folder: Path, task: str | None = None, task_options: dict | None = None) -> dict:
    """The store record ``folder/done.json`` of a model of ``task`` with ``task_options`` (if given),
    checked; ``ckpt`` as a path."""
    path = folder / "done.json"
    record = records.read_json(path, RECORD, "store record")
    model = (folder / record["ckpt"]).resolve()
    if model.parent != folder.resolve():  # an absolute path, "..", a link: another folder's model
        raise RecordError(f"{path}: key 'ckpt': {record['ckpt']} is not a file of the record's own folder")
    _check_slot(path, record, task, task_options)
    records.check_checksum(model, record["checksum"], path)
    return {**record, "ckpt": str(model)}


def read_card(folder: Path, task: str | None = None, task_options: dict | None = None) -> dict:
    """The model card ``folder/card.json`` of the model ``folder/model.ckpt`` (of ``task`` with
    ``task_options``, if given), checked."""
    path = folder / "card.json"
    card = records.read_json(path, CARD, "model card")
    steps = [p["step"] for p in card["validation"]]
    if card["steps"] not in steps:
        raise RecordError(
            f"{path}: key 'steps': the kept step {card['steps']} is not on its validation curve (steps {steps[0]} to {steps[-1]})"
        )
    for key in ("ratio_to_alg_star", "replication"):
        if card.get(key) is not None:
            records.check(card[key], {**RATIO, "runs": int, "seed": int}, path, key)
    if card.get("previous") is not None:  # the model this one replaced (tools/reference_models.py)
        records.check(card["previous"], PREVIOUS, path, "previous")
    policies = card["test"]["policies"]
    if "omgpt" not in policies or not set(policies) - {"omgpt", "alg-star", "oracle"}:
        raise RecordError(f"{path}: key 'test.policies': expected omgpt and a benchmark, got {', '.join(policies)}")
    real = card["test"].get("real_demand")
    if real is not None:  # each policy's ratio to the reference (None for the reference itself)
        ratio = f"ratio_to_{real['reference']}"
        for policy, cost in real["costs"].items():
            records.check(
                cost, {ratio: Nullable({"mean": NUMBER, "ci90": PAIR})}, path, f"test.real_demand.costs.{policy}"
            )
    source = card.get("adopted_from")
    if source and source["init_from"] and not {"parent_steps", "parent_cpu_minutes"} <= set(source):
        raise RecordError(
            f"{path}: key 'adopted_from': a fine-tuned model's card names its parent's steps and CPU-minutes"
        )
    _check_slot(path, card, task, task_options)
    records.check_checksum(folder / "model.ckpt", card["checksum"], path)
    return card


def _check_slot(path: Path, record: dict, task: str | None, task_options: dict | None) -> None:
    if task is None:
        return
    wanted, held = (task, task_options or {}), (record["task"], record["task_options"])
    if held != wanted:
        raise RecordError(
            f"{path}: a model of task {held[0]} {json.dumps(held[1], sort_keys=True)}, not the task "
            f"{wanted[0]} {json.dumps(wanted[1], sort_keys=True)} asked for here; retrain it or point to the right folder"
        )


def stamp_files(paths: list[Path]) -> None:
    """One-off: add the model's checksum, task and task options to records and cards written before
    they held them (``folder/done.json`` or ``card.json`` of ``folder/model.ckpt``); every other field
    and the file's layout stay as they were."""
    for path in paths:
        info = records.read_json(path, {}, "record")
        write_json(stamp(info, path.parent / "model.ckpt"), path, indent=1 if path.name == "card.json" else 2)
