"""The model store of ``omgpt experiment``: every model an experiment needs is one ``omgpt fit`` run in
a content-addressed folder ``MODELS_DIR/<task>-<hash of its fit arguments and configs>``, trained once
(resumed from its ``last.ckpt`` when interrupted) and shared by every experiment that asks for it.

A finished model is ``done.json`` (its training record) and ``model.ckpt`` (the kept checkpoint's
weights and hyper-parameters, ~1 MB at the CPU scale): what an experiment reads, and all a store needs
to keep, so a store of finished models can be committed and carried to another machine; the fit's own
``run/`` folder (full checkpoints with optimizer state, logs) is only needed to resume an unfinished fit.
"""
from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from omgpt.errors import OMGPTError
from omgpt.commands.experiment.config import SCALES
from omgpt.files import export_weights, read_checkpoint, write_json
from omgpt.resources import CHECKOUT, CONFIGS

ROOT = CHECKOUT  # reports show paths relative to the repository; fits run from it
BASE_CONFIG = CONFIGS / "base.yaml"  # loaded first by every `omgpt fit` (omgpt.commands.lightning_cli.build_cli)
PRETRAINED = ROOT / "pretrained"  # the shipped reference models (tools/reference_models.py)


def fit_arguments(model: dict, scale: str, extra_configs: list[str]) -> list[str]:
    """The ``omgpt fit`` arguments of one model (without where it writes)."""
    args = ["--config", str(SCALES[scale])]
    for cfg in [*model.get("configs", []), *extra_configs]:
        args += ["--config", str(ROOT / cfg) if not Path(cfg).is_absolute() and (ROOT / cfg).is_file() else str(cfg)]
    args += ["--model.task", model["task"], "--model.task_options", json.dumps(model["task_options"], sort_keys=True)]
    args += ["--model.horizon", str(model["horizon"])]
    for key, value in sorted(model["args"].items()):
        args += [f"--{key}", json.dumps(value) if isinstance(value, (dict, list, bool)) or value is None else str(value)]
    return args


def run_key(task: str, args: list[str]) -> str:
    """``task-<hash>``: the hash covers the fit arguments (config paths relative to the repository, so
    a moved clone keeps its models) and the content of every config file, ``configs/base.yaml`` -- the
    layer every fit starts from -- included, so a changed config trains a new model instead of reusing
    a stale one. (Code changes are not hashed: delete the models folder after changing the model.)"""
    shown = [_shown(Path(a)) if i and args[i - 1] == "--config" else a for i, a in enumerate(args)]
    h = hashlib.sha1(json.dumps(shown).encode())
    configs = [BASE_CONFIG] + [Path(a) for i, a in enumerate(args) if i and args[i - 1] == "--config"]
    for cfg in configs:
        h.update(cfg.read_bytes())
    return f"{task}-{h.hexdigest()[:10]}"


def best_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint of best validation regret, else ``last.ckpt``. ModelCheckpoint keeps one, but a
    fit resumed under another spelling of its folder (relative instead of absolute) does not get its
    best-so-far back and keeps a second: the lowest ``ucb`` in the names (the checkpoint rule's
    ``epoch{epoch:03d}-ucb{val/regret_ucb:.2f}``) decides, the later epoch on a tie."""
    ckpts = run_dir / "run" / "checkpoints"
    best = sorted(p for p in ckpts.glob("*.ckpt") if p.name != "last.ckpt")
    if best:
        def ucb(p: Path) -> float:
            match = re.search(r"ucb(-?[0-9.]+)$", p.stem)
            return float(match.group(1)) if match else math.inf
        return min(reversed(best), key=ucb)
    last = ckpts / "last.ckpt"
    return last if last.is_file() else None


def model_key(model: dict, scale: str, extra_configs: list[str]) -> str:
    """What identifies a model's run: ``pretrained/NAME`` where a reference model stands in for it
    (not with extra fit configs: quick runs train), else its run folder's ``task-<hash>``."""
    if model.get("pretrained") and not extra_configs:
        return f"pretrained/{model['pretrained']}"
    return run_key(model["task"], fit_arguments(model, scale, extra_configs))


def pretrained_model(name: str, model: dict) -> dict:
    """The record of a shipped reference model (``pretrained/NAME``) standing in for a training run,
    from its card: the command, steps, CPU time and validation curve of the run that made it."""
    folder = PRETRAINED / model["pretrained"]
    if not (folder / "card.json").is_file():
        raise OMGPTError(f"model {name!r}: no reference model pretrained/{model['pretrained']} "
                         f"(python -m tools.reference_models train {model['pretrained']}, then card)")
    card = json.loads((folder / "card.json").read_text())
    hp = read_checkpoint(folder / "model.ckpt")["hyper_parameters"]
    wanted = (model["task"], model["task_options"], model["horizon"])
    shipped = (hp["task"], hp.get("task_options") or {}, hp["horizon"])
    if wanted != shipped:
        raise OMGPTError(f"model {name!r}: pretrained/{model['pretrained']} is task, options, horizon {shipped}, the experiment wants {wanted}")
    curve = card["validation"]
    print(f"  {name}: the reference model pretrained/{model['pretrained']} (step {card['steps']} of {curve[-1]['step']})")
    return {"model": name, "key": f"pretrained/{model['pretrained']}", "ckpt": str(folder / "model.ckpt"),
            "train_seconds": round(60 * card["cpu_minutes"], 1), "command": card["command"],
            "val_regret": [[p["step"], p["regret"]] for p in curve], "steps": curve[-1]["step"], "selected_by": "val/regret_ucb",
            "best_val_regret": next(p["regret"] for p in curve if p["step"] == card["steps"])}


def train_model(name: str, model: dict, scale: str, models_dir: Path, extra_configs: list[str], threads: int | None) -> dict:
    """Train one model unless its run folder already holds a finished run (or a reference model
    stands in for it); returns its record."""
    key = model_key(model, scale, extra_configs)
    if key.startswith("pretrained/"):
        return pretrained_model(name, model)
    args = fit_arguments(model, scale, extra_configs)
    run_dir = models_dir / key
    done = run_dir / "done.json"
    if done.is_file():
        record = json.loads(done.read_text())
        record["ckpt"] = str(run_dir / record["ckpt"])  # stored relative: the models folder can move
        record["command"] = _fit_command(args)
        print(f"  {name}: reusing {_shown(Path(record['ckpt']))}")
        return record
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "omgpt", "fit", *args, "--trainer.logger.init_args.save_dir", str(models_dir),
           "--trainer.logger.init_args.name", key, "--trainer.logger.init_args.version", "run"]
    last = run_dir / "run" / "checkpoints" / "last.ckpt"
    if last.is_file():  # an interrupted fit: continue it exactly (RNG, data stream, scheduler)
        cmd += ["--ckpt_path", str(last)]
        metrics = run_dir / "run" / "metrics.csv"
        if metrics.is_file():  # the CSV logger starts a fresh metrics.csv: keep the earlier part
            metrics.rename(metrics.with_name(f"metrics-part{len(list(metrics.parent.glob('metrics-part*.csv')))}.csv"))
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    print(f"  {name}: training -> {run_dir} (log: {run_dir / 'train.log'})", flush=True)
    start = time.perf_counter()
    with open(run_dir / "train.log", "a") as log:
        code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    if code != 0:
        tail = (run_dir / "train.log").read_text().strip().splitlines()[-1:] or [""]
        raise OMGPTError(f"training model {name!r} failed (exit {code}): {tail[0]} -- see {run_dir / 'train.log'}")
    ckpt = best_checkpoint(run_dir)
    if ckpt is None:
        raise OMGPTError(f"training model {name!r} wrote no checkpoint in {run_dir}")
    kept = export_weights(ckpt, run_dir / "model.ckpt")
    summary = _training_summary(run_dir)
    # this process's wall-clock, unless the run's own clock (summed over resumes) says more
    seconds = max(round(time.perf_counter() - start, 1), summary.pop("train_seconds", 0.0))
    record = {"model": name, "key": key, "ckpt": kept.name, "kept_checkpoint": ckpt.name, "train_seconds": seconds,
              "command": _fit_command(args), **summary}
    write_json(record, done)
    record["ckpt"] = str(kept)
    print(f"  {name}: trained in {record['train_seconds']:.0f} s, val/regret of the kept checkpoint {record.get('best_val_regret')}", flush=True)
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


def _training_summary(run_dir: Path) -> dict:
    """Steps trained, the validation regret curve, and the validation regret of the kept checkpoint
    (lowest ``val/regret_ucb``, the mean + one sd rule, where logged; else lowest ``val/regret``)."""
    run = run_dir / "run"
    parts = sorted(run.glob("metrics-part*.csv"), key=lambda p: int(p.stem.removeprefix("metrics-part"))) + [run / "metrics.csv"]
    by_step = {}  # a resumed fit's parts, later ones winning where they overlap: step -> (regret, ucb)
    obs_mse = {}
    clock = {}  # the module's training clocks, which a resumed fit carries on from its checkpoint
    for part in (p for p in parts if p.is_file()):
        for r in csv.DictReader(part.open()):
            for unit in ("wall", "cpu"):
                if r.get(f"time/{unit}_minutes"):
                    clock[unit] = float(r[f"time/{unit}_minutes"])
            if r.get("val/obs_mse"):  # the observation head's learning curve, where it has one
                obs_mse[int(r["step"]) + 1] = round(float(r["val/obs_mse"]), 5)
            if r.get("val/regret"):
                ucb = float(r["val/regret_ucb"]) if r.get("val/regret_ucb") else None
                by_step[int(r["step"]) + 1] = (round(float(r["val/regret"]), 4), ucb)
    if not by_step:
        return {}
    curve = [[step, v] for step, (v, _) in sorted(by_step.items())]
    kept = min(by_step.values(), key=lambda v: v[0] if v[1] is None else v[1])
    summary = {"val_regret": curve, "best_val_regret": kept[0], "steps": curve[-1][0],
               "selected_by": "val/regret" if kept[1] is None else "val/regret_ucb"}
    # every process of a resumed fit, not only the last one. CPU seconds: with one thread, what the fit
    # takes on an idle core, however many fits shared the machine while it ran.
    summary.update({key: round(60 * clock[unit], 1) for key, unit in (("train_seconds", "wall"), ("cpu_seconds", "cpu")) if unit in clock})
    if obs_mse:
        summary["val_obs_mse"] = sorted(obs_mse.items())
    return summary


def train_all(exp: dict, models_dir: Path, extra_configs: list[str], jobs: int) -> dict[str, dict]:
    names = list(exp["models"])
    threads = 1 if jobs > 1 and "OMP_NUM_THREADS" not in os.environ else None
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {n: pool.submit(train_model, n, exp["models"][n], exp["scale"], models_dir, extra_configs, threads) for n in names}
        return {n: f.result() for n, f in futures.items()}
