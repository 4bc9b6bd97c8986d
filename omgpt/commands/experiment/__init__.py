"""``omgpt experiment NAME``: one paper figure, end to end, from one config.

The package: :mod:`~omgpt.commands.experiment.config` (the typed experiment configs, parsed by jsonargparse), :mod:`~omgpt.commands.experiment.models`
(the content-addressed model store), :mod:`~omgpt.commands.experiment.panels` (evaluations and their numbers),
:mod:`~omgpt.commands.experiment.report` (``report.md``); this module runs the whole.

An experiment (``configs/experiments/NAME.yaml``) names the **models** it needs -- each one
``omgpt fit`` run: a task, its options, a horizon and extra fit arguments -- and the **panels** it
draws -- each an evaluation of one or more of those models and the benchmarks on a test task
(possibly shifted, longer, or of another demand type than the model was trained on). Running it:

1. trains every model that is not trained yet (``--jobs N`` at once, each in its own ``omgpt fit``
   process), in a content-addressed folder ``MODELS_DIR/<task>-<hash of its fit arguments>``: a model
   is trained once and shared by every experiment that asks for the same run (the main results'
   pricing model is also the distribution-shift and the LSTM comparison's transformer); an
   interrupted fit resumes from its ``last.ckpt``;
2. evaluates every panel on ``runs`` fresh test environments (common random numbers across policies,
   as ``omgpt evaluate``), OMGPT acting with the checkpoint of best validation regret;
3. writes ``OUT/experiment.json`` (every number, the curves included), the figures as PNG, and
   ``OUT/report.md`` (the paper's claim, the command, tables, figures, per-panel verdicts).

Scales. Every experiment runs at two scales with the same command: ``--scale paper`` (the paper's
model and Algorithm 1: ``configs/scale/paper.yaml`` on the defaults of ``configs/base.yaml``; for
GPUs) and ``--scale cpu`` (``configs/scale/cpu.yaml``: minutes per model on one CPU core). Any
mapping in an experiment config may hold ``cpu:`` / ``paper:`` keys whose contents override its
siblings at that scale (e.g. ``cpu: {pretrained: pricing}``: a shipped reference model stands in for
the CPU-scale training of a model).

Figure kinds (``figure:`` in the config): ``curves`` (the paper's regret / suboptimality rows, mean
with a 90% band, final regret in the legend), ``advantage`` (reward improvement rate of OMGPT over
the best benchmark on a grid), ``alg-star-match`` (``TF - Alg*`` along the model's own histories:
sample paths and histograms) and ``demand-prediction`` (observation head vs ridge regression).
"""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from omgpt.errors import OMGPTError
from omgpt.commands.experiment.config import FIGURES, SCALES, at_scale, available, load_experiment, parse_policies
from omgpt.commands.experiment.models import ROOT, _shown, best_checkpoint, fit_arguments, model_key, run_key, train_all, train_model
from omgpt.commands.experiment.panels import alg_star_match, demand_prediction_panel, evaluate_panel, optimal_reward, verdict
from omgpt.commands.experiment.report import headline, report, summary_lines
from omgpt.files import output_folder, write_json, write_text

EXPERIMENT_FILES = ("experiment.json", "report.md", "*.png")  # what a report folder holds

__all__ = [
    "FIGURES", "SCALES", "alg_star_match", "at_scale", "available", "best_checkpoint", "demand_prediction_panel",
    "evaluate_panel", "fit_arguments", "headline", "load_experiment", "model_key", "optimal_reward", "parse_policies", "report",
    "run_all", "run_experiment", "run_key", "summary_lines", "train_all", "train_model", "tune_missing", "verdict",
]


def run_experiment(
    name: str,
    scale: str = "cpu",
    out: str | None = None,
    models_dir: str | None = None,
    jobs: int = 1,
    runs: int | None = None,
    horizon: int | None = None,
    fit_configs: list[str] | None = None,
    seed: int = 0,
    device: str | None = None,
    train_only: bool = False,
) -> dict | None:
    exp = load_experiment(name, scale, horizon)
    fit_configs = [str(Path(c).resolve()) for c in fit_configs or []]
    for cfg in fit_configs:
        if not Path(cfg).is_file():
            raise OMGPTError(f"--fit-config {cfg}: no such file")
    out_dir = Path(out or ROOT / "results" / (name if scale == "cpu" else f"{name}-{scale}"))
    models_path = Path(models_dir or default_models_dir(scale, quick=bool(fit_configs) or horizon is not None))
    runs = runs or exp.get("runs", 100)
    device = device or "cpu"  # rollouts of 100 runs are small; the scipy-based benchmarks want CPU tensors
    command = _command(name, scale, out, models_dir, runs if runs != exp.get("runs", 100) else None, horizon, fit_configs, seed, device)
    print(f"omgpt experiment {name} ({exp['title']}), scale {scale}: {len(exp['models'])} model(s), {len(exp['panels'])} panel(s)")
    start = time.perf_counter()
    if train_only:
        train_all(exp, models_path, fit_configs, jobs)
        return None
    # The report folder is built aside and replaces OUT only when complete; its temporary folder is
    # made before the training, so an unwritable OUT fails now and not hours later.
    quick = bool(fit_configs) or horizon is not None
    with output_folder(out_dir, EXPERIMENT_FILES, "omgpt experiment") as folder, tunings_beside(models_path if quick else None):
        records = train_all(exp, models_path, fit_configs, jobs)
        tune_missing(exp)
        evaluation_start = time.perf_counter()
        kind = exp.get("figure", "curves")
        panels = []
        for panel in exp["panels"]:
            print(f"  evaluating {panel['title']} ({panel['task']} {panel['task_options'] or ''}, horizon {panel['horizon']}, {runs} runs)", flush=True)
            if kind == "demand-prediction":
                panels.append({"title": panel["title"], "task": panel["task"], "task_options": panel["task_options"], "horizon": panel["horizon"],
                               "model": panel["model"], "demand_prediction": demand_prediction_panel(panel, records, runs, seed, device)})
                continue
            numbers, histories = evaluate_panel(panel, records, runs, seed, device, rewards=kind == "advantage")
            numbers["figure_file"] = panel["figure_file"]
            if kind == "alg-star-match":
                numbers["alg_star_match"] = alg_star_match(panel, histories["omgpt"], seed)
            panels.append(numbers)
        result = {"name": name, "title": exp["title"], "source": exp.get("source", ""), "claim": exp.get("claim", ""),
                  "scale": scale, "runs": runs, "seed": seed, "command": command, "figure": kind,
                  "models": {n: {**r, "ckpt": _shown(Path(r["ckpt"]))} for n, r in records.items()}, "panels": panels, "seconds": round(time.perf_counter() - start, 1),
                  "evaluation_seconds": round(time.perf_counter() - evaluation_start, 1)}
        from omgpt.analysis.experiment_figures import draw

        result["figures"] = draw(result, folder)
        write_json(result, folder / "experiment.json", indent=1)
        write_text(folder / "report.md", report(result))
    print(summary_lines(result))
    print(f"wrote {_shown(out_dir / 'report.md')}, {_shown(out_dir / 'experiment.json')} and {len(result['figures'])} figure(s)")
    return result


@contextlib.contextmanager
def tunings_beside(models_path: Path | None):
    """A quick run (``--horizon``, ``--fit-config``) keeps its tunings in ``MODELS-tuned/`` (its horizons
    are never the shipped ones), so it never writes into ``configs/tuned/``."""
    from omgpt.tuning import FOLDER_VARIABLE

    if models_path is None:
        yield
        return
    before = os.environ.get(FOLDER_VARIABLE)
    os.environ[FOLDER_VARIABLE] = str(models_path.parent / f"{models_path.name}-tuned")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(FOLDER_VARIABLE, None)
        else:
            os.environ[FOLDER_VARIABLE] = before


def tune_missing(exp: dict) -> None:
    """Tune every ``-tuned`` benchmark whose setting -- the prior of a panel's model at the panel's
    horizon -- has no tuning yet (:func:`omgpt.commands.tune.ensure_tuned`)."""
    from omgpt.commands.tune import ensure_tuned

    for panel in exp["panels"]:
        model = exp["models"][panel["model"]]
        ensure_tuned(model["task"], model["task_options"], panel["horizon"], panel["policies"], log=lambda line: print(f"    {line}", flush=True))


def default_models_dir(scale: str, quick: bool) -> Path:
    """Where models are stored unless ``--models-dir`` says: the CPU-scale models behind ``results/`` in
    ``results/models`` (committed: a finished model is ~1 MB, and the store survives the machine, so
    training can be spread over sessions and every report's models are in the repository); quick runs
    and the paper scale in ``runs/experiments/models``."""
    return ROOT / ("runs/experiments/models" if quick or scale != "cpu" else "results/models")


def run_all(scale: str = "cpu", models_dir: str | None = None, jobs: int = 1, runs: int | None = None,
            seed: int = 0, device: str | None = None, train_only: bool = False) -> None:
    """``omgpt experiment --all``: every experiment into ``results/NAME``. The models of all of them are
    trained first, each once, in one pool of ``jobs`` workers (experiment by experiment, a worker would
    idle while the last model of each trains); then every experiment evaluates with its trained models."""
    names = list(available())
    models = {}
    for name in names:
        exp = load_experiment(name, scale)
        for label, model in exp["models"].items():
            models.setdefault(model_key(model, scale, []), (f"{name}/{label}", model))
    print(f"omgpt experiment --all, scale {scale}: {len(names)} experiments, {len(models)} distinct models")
    start = time.perf_counter()
    train_all({"models": dict(models.values()), "scale": scale}, Path(models_dir or default_models_dir(scale, quick=False)), [], jobs)
    if not train_only:
        for name in names:
            run_experiment(name, scale, None, models_dir, jobs, runs, None, [], seed, device)
    print(f"omgpt experiment --all: {(time.perf_counter() - start) / 60:.1f} minutes")


def _command(name, scale, out, models_dir, runs, horizon, fit_configs, seed, device) -> str:
    """The command line that reproduces this run (defaults left out)."""
    parts = ["omgpt experiment", name, "--scale", scale]
    parts += ["--out", str(out)] if out else []
    parts += ["--models-dir", str(models_dir)] if models_dir else []
    parts += ["--runs", str(runs)] if runs else []
    parts += ["--horizon", str(horizon)] if horizon else []
    parts += [f"--fit-config {_shown(Path(c))}" for c in fit_configs]
    parts += ["--seed", str(seed)] if seed else []
    parts += ["--device", device] if device != "cpu" else []
    return " ".join(parts)
