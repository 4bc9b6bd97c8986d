"""``omgpt experiment NAME``: one paper figure, end to end, from one config.

The package: :mod:`~omgpt.commands.experiment.config` (the typed experiment configs, parsed by
jsonargparse, and the resolved experiment's records :class:`Experiment`, :class:`Model` and
:class:`Panel`), :mod:`~omgpt.commands.experiment.results` (the typed numbers of ``experiment.json``,
:class:`ExperimentResult` and :class:`PanelResult`, with their schemas), :mod:`~omgpt.commands.experiment.models`
(the content-addressed model store), :mod:`~omgpt.commands.experiment.panels` (evaluations and their
numbers), :mod:`~omgpt.commands.experiment.registry` (the experiment kinds: what differs between
experiments) and their plug-ins in :mod:`~omgpt.commands.experiment.kinds`,
:mod:`~omgpt.commands.experiment.report` (``report.md``); this module runs the whole.

An experiment (``configs/experiments/NAME.yaml``) names the **models** it needs -- each one
``omgpt fit`` run: a task, its options, a horizon and extra fit arguments -- and the **panels** it
draws -- each an evaluation of one or more of those models and the benchmarks on a test task
(possibly shifted, longer, or of another demand type than the model was trained on). Running it:

1. trains every model that is not trained yet (``--jobs N`` at once, each in its own ``omgpt fit``
   process), in a content-addressed folder ``MODELS_DIR/<task>-<hash of its fit arguments>``: a model
   is trained once and shared by every experiment that asks for the same run (the main results'
   pricing model is also the distribution-shift and the LSTM comparison's transformer); an
   interrupted fit resumes from its ``last.ckpt``; a model that starts from another's weights
   (``init_from``, e.g. a regret fine-tuning) is trained after it;
2. evaluates every panel on ``runs`` fresh test environments (common random numbers across policies,
   as ``omgpt evaluate``), OMGPT acting with the checkpoint of best validation regret; ``--jobs N``
   panels at once, each kept as soon as it is done in a content-addressed panel store
   (:mod:`~omgpt.commands.experiment.panel_store`), so an interrupted evaluation resumes;
3. writes ``OUT/experiment.json`` (every number, the curves included), the figures as PNG, and
   ``OUT/report.md`` (the paper's claim, the command, tables, figures, per-panel verdicts).

``omgpt experiment NAME --redraw`` draws the figures and writes ``report.md`` again from
``OUT/experiment.json`` alone (after a change to a figure or to the report; nothing is re-run).

Scales. Every experiment runs at two scales with the same command: ``--scale paper`` (the paper's
model and Algorithm 1: ``configs/scale/paper.yaml`` on the defaults of ``configs/base.yaml``; for
GPUs) and ``--scale cpu`` (``configs/scale/cpu.yaml``: minutes per model on one CPU core). Any
mapping in an experiment config may hold ``cpu:`` / ``paper:`` keys whose contents override its
siblings at that scale (e.g. ``cpu: {pretrained: pricing}``: a shipped reference model stands in for
the CPU-scale training of a model).

Experiment kinds. What differs between experiments -- how a panel is evaluated, which figures are
drawn, each panel's headline, the checks of the paper's claim beyond the per-panel verdicts, a report
section of its own -- is one plug-in, a subclass of :class:`~omgpt.commands.experiment.registry.Kind`
in ``kinds/``: ``curves`` (regret curves, one figure per panel ``figure_file``), ``prior-benefit``,
``advantage`` and ``model-size`` (reward improvement rate on a grid), ``alg-star-match`` (``TF - Alg*``
along the model's own histories), ``demand-prediction`` (observation head vs ridge regression),
``real-demand`` and ``beyond-alg-star`` (supervised against regret-fine-tuned OMGPT). An
experiment runs the kind registered under its own name, else the one its config's ``kind:`` names.

Adding an experiment kind: write ``omgpt/commands/experiment/kinds/<name>.py`` holding a subclass of
``Kind`` with ``name = "NAME"`` (the experiment's name), decorated with ``@register``, that overrides
what differs from the plain regret comparison -- ``evaluate`` (a resolved :class:`Panel` in, its numbers
out: a :class:`PanelResult`; ``self.rollout`` gives the regret numbers, a :class:`RegretPanel`, and every
policy's history to measure more on), ``figures`` (drawing helpers from
``omgpt.analysis.experiment_figures``), ``headline``, ``claims``, ``sections`` -- and
``configs/experiments/NAME.yaml``. Nothing else is edited: every module of ``kinds/`` is imported
when the kinds are first looked up (``tests/test_experiment.py`` runs such a kind, written in the test).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from pathlib import Path

from omgpt import seeding
from omgpt.errors import OMGPTError
from omgpt.resources import code_version
from omgpt.commands.experiment.config import (
    KIND_NAMES,
    SCALES,
    Experiment,
    Model,
    Panel,
    at_scale,
    available,
    dependency_order,
    load_experiment,
    parse_policies,
)
from omgpt.commands.experiment.models import (
    ROOT,
    _shown,
    experiment_keys,
    fit_arguments,
    model_key,
    run_key,
    train_all,
    train_model,
)
from omgpt.commands.experiment.panel_store import panel_store
from omgpt.commands.experiment.panels import evaluate_panel, optimal_reward, verdict
from omgpt.commands.experiment.registry import Kind, all_kinds, draw, kind_of, register
from omgpt.commands.experiment.report import report, summary_lines
from omgpt.commands.experiment.results import REPORT, ExperimentResult, ModelRecord, PanelResult, RegretPanel
from omgpt.files import output_folder, write_json, write_text
from omgpt.records import RecordError

EXPERIMENT_FILES = ("experiment.json", "report.md", "*.png")  # what a report folder holds

__all__ = [
    "KIND_NAMES",
    "SCALES",
    "Experiment",
    "ExperimentResult",
    "Kind",
    "Model",
    "ModelRecord",
    "Panel",
    "PanelResult",
    "RegretPanel",
    "all_kinds",
    "at_scale",
    "available",
    "dependency_order",
    "draw",
    "evaluate_panel",
    "evaluate_panels",
    "experiment_keys",
    "fit_arguments",
    "kind_of",
    "load_experiment",
    "model_key",
    "optimal_reward",
    "parse_policies",
    "redraw_experiment",
    "register",
    "report_folder",
    "report",
    "run_all",
    "run_experiment",
    "run_key",
    "summary_lines",
    "train_all",
    "train_model",
    "tune_missing",
    "verdict",
]


def run_experiment(
    name: str,
    *,
    scale: str = "cpu",
    out: str | None = None,
    models_dir: str | None = None,
    jobs: int = 1,
    runs: int | None = None,
    horizon: int | None = None,
    fit_configs: list[str] | None = None,
    seed: int = seeding.EXPERIMENT_SEED,
    device: str | None = None,
    train_only: bool = False,
) -> ExperimentResult | None:
    """``omgpt experiment NAME``: train the models of experiment ``name`` at ``scale`` (or reuse them),
    evaluate its panels, draw its figures and write its report folder; returns what ``experiment.json``
    holds (``None`` with ``train_only``: the models are trained and nothing else is done).

    Args:
        name: the experiment, ``configs/experiments/NAME.yaml``
        scale: ``cpu`` or ``paper`` (:data:`SCALES`)
        out: the report folder (default :func:`report_folder`), replaced whole once the report is complete
        models_dir: the model store (default :func:`default_models_dir`)
        jobs: models trained at once, and panels evaluated at once (each in its own process)
        runs: test environments per panel (default: the experiment's ``runs``)
        horizon: every model's training horizon (a quick run; its models train and its tunings go beside them)
        fit_configs: config files layered on every model's fit (a quick run too)
        seed: the test environments' seed
        device: the evaluation's torch device (default: CPU; training uses the trainer's accelerator)
        train_only: train the models and stop

    Everything that can be checked before the training is (the config, the kind's needs of it, the
    ``fit_configs``, a writable ``out``): a mistake is one :class:`OMGPTError` line, not hours later.
    """
    seeding.check_test_seed(seed, "--seed")
    exp = load_experiment(name, scale, horizon=horizon)
    fit_configs = [str(Path(c).resolve()) for c in fit_configs or []]
    for cfg in fit_configs:
        if not Path(cfg).is_file():
            raise OMGPTError(f"--fit-config {cfg}: no such file")
    kind = kind_of(
        exp
    )  # an experiment without a kind, or a config its kind cannot report on, fails now, not after its training
    kind.check_settings(exp)
    kind.check_config(exp)
    out_dir = report_folder(name, scale, out)
    quick = bool(fit_configs) or horizon is not None
    models_path = Path(models_dir or default_models_dir(scale, quick=quick))
    sized = runs is None  # --runs plays that many everywhere (a quick run); else the config's sizing
    runs = runs or exp.runs
    device = device or "cpu"  # rollouts of 100 runs are small; the scipy-based benchmarks want CPU tensors
    command = _command(
        name,
        scale=scale,
        out=out,
        models_dir=models_dir,
        runs=runs if runs != exp.runs else None,
        horizon=horizon,
        fit_configs=fit_configs,
        seed=seed,
        device=device,
    )
    print(
        f"omgpt experiment {name} ({exp.title}), scale {scale}: {len(exp.models)} model(s), {len(exp.panels)} panel(s)"
    )
    start = time.perf_counter()
    train = dict(scale=scale, models_dir=models_path, extra_configs=fit_configs, jobs=jobs)
    if train_only:
        train_all(exp.models, **train)
        return None
    # The report folder is built aside and replaces OUT only when complete; its temporary folder is
    # made before the training, so an unwritable OUT fails now and not hours later.
    with (
        output_folder(out_dir, EXPERIMENT_FILES, "omgpt experiment") as folder,
        tunings_beside(models_path if quick else None),
    ):
        records = train_all(exp.models, **train)
        tune_missing(exp)
        panels, evaluation_seconds, untimed = evaluate_panels(
            exp,
            kind=kind,
            models=records,
            runs=runs,
            seed=seed,
            device=device,
            jobs=jobs,
            store=panel_store(models_path, default_models_dir(scale, quick=False)),
            sized=sized,
        )
        result = ExperimentResult(
            name=name,
            title=exp.title,
            source=exp.source,
            claim=exp.claim,
            scale=scale,
            runs=runs,
            seed=seed,
            command=command,
            kind=kind.name,
            settings=exp.settings,
            models={n: {**r, "ckpt": _shown(Path(r["ckpt"]))} for n, r in records.items()},
            panels=panels,
            seconds=round(time.perf_counter() - start, 1),
            # the panels' own evaluation times, wherever and whenever they ran (the panel store)
            evaluation_seconds=round(evaluation_seconds, 1),
            **({"untimed_panels": untimed} if untimed else {}),
            code_version=code_version(),
            figures=[],
        )
        result["figures"] = draw(result, folder)
        write_json(result, folder / "experiment.json", indent=1)
        write_text(folder / "report.md", report(result))
    print(summary_lines(result))
    print(
        f"wrote {_shown(out_dir / 'report.md')}, {_shown(out_dir / 'experiment.json')} and {len(result['figures'])} figure(s)"
    )
    return result


def evaluate_panels(
    exp: Experiment,
    *,
    kind: Kind,
    models: dict[str, ModelRecord],
    runs: int,
    seed: int,
    device: str,
    jobs: int = 1,
    store: Path | None = None,
    sized: bool = True,
) -> tuple[list[PanelResult], float, int]:
    """Every panel of ``exp`` evaluated by ``kind`` (:meth:`Kind.evaluate_with_state`) with the trained
    ``models`` (name -> record, its ``ckpt`` included) on ``runs`` test environments of ``seed``, on
    ``device``, then finished by the kind (:meth:`Kind.finish`). With a ``store``
    (:mod:`~omgpt.commands.experiment.panel_store`) a panel evaluated before under identical inputs is
    read back and every new one is kept as soon as it is done; ``jobs`` panels are evaluated at once,
    each in its own process. Returns the panels, the seconds their evaluations took (a stored panel's as
    recorded when it was evaluated), and how many stored panels have no recorded time. ``sized``: each
    panel plays the runs its kind sizes it to (:meth:`Kind.size`: at least ``runs``, at most the
    experiment's ``max_runs``; the record is the panel's ``sizing``), else ``runs``."""
    from omgpt.commands.experiment.panel_store import panel_key, read_panel, write_panel
    from omgpt.progress import Progress

    sizings = [kind.size(p, models, floor=runs, cap=exp.max_runs, device=device) if sized else None for p in exp.panels]
    for panel, sizing in zip(exp.panels, sizings):
        if sizing:
            print(f"  {panel.title}: {sizing['runs']:,} test runs (needed {sizing['needed']:,})", flush=True)
    counts = [s["runs"] if s else runs for s in sizings]
    keys = [panel_key(exp, kind, p, models, n, seed, device) for p, n in zip(exp.panels, counts)]
    done = {i: entry for i, key in enumerate(keys) if store and (entry := read_panel(store, key)) is not None}
    if done:
        print(
            f"  {len(done)} of {len(keys)} panel(s) evaluated before under the same inputs, read from {_shown(store)}"
        )
    todo = [i for i in range(len(keys)) if i not in done]
    progress = Progress(len(todo), "panels evaluated") if todo else None

    def keep(i: int, entry: tuple[PanelResult, object, float]) -> None:
        done[i] = entry
        if store:
            write_panel(store, keys[i], *entry, title=exp.panels[i].title)
        progress.advance()

    if jobs > 1 and len(todo) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        workers = min(jobs, len(todo))
        with ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"), initializer=_one_share, initargs=(workers,)
        ) as pool:
            futures = {pool.submit(_evaluate_one, exp, i, models, counts[i], seed, device): i for i in todo}
            for future in as_completed(futures):
                keep(futures[future], future.result())
    else:
        for i in todo:
            keep(i, _evaluate_one(exp, i, models, counts[i], seed, device, kind))
    entries = [done[i] for i in range(len(keys))]
    for (numbers, _, _), sizing, panel in zip(entries, sizings, exp.panels):
        if sizing:
            numbers["sizing"] = sizing
        numbers.pop("note", None)  # the config's note as it is now (the panel key leaves it out)
        if panel.note:
            numbers["note"] = panel.note
    panels = kind.finish([e[0] for e in entries], [e[1] for e in entries], seed=seed)
    return panels, sum(e[2] or 0.0 for e in entries), sum(e[2] is None for e in entries)


def _one_share(workers: int) -> None:
    """A panel worker's intra-op threads: its share of the machine, never more than the user allows."""
    import torch

    torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 1) // workers)))


def _evaluate_one(
    exp: Experiment, i: int, models: dict, runs: int, seed: int, device: str, kind: Kind | None = None
) -> tuple[PanelResult, object, float]:
    panel = exp.panels[i]
    print(
        f"  evaluating {panel.title} ({panel.task} {panel.task_options or ''}, horizon {panel.horizon}, {runs} runs)",
        flush=True,
    )
    start = time.perf_counter()
    result, state = (kind or kind_of(exp)).evaluate_with_state(panel, models, runs=runs, seed=seed, device=device)
    return result, state, round(time.perf_counter() - start, 1)


def report_folder(name: str, scale: str, out: str | None) -> Path:
    """``--out``, else ``results/NAME`` (``results/NAME-SCALE`` at another scale than the CPU's)."""
    return Path(out or ROOT / "results" / (name if scale == "cpu" else f"{name}-{scale}"))


def redraw_experiment(name: str, *, scale: str = "cpu", out: str | None = None) -> ExperimentResult:
    """``omgpt experiment NAME --redraw``: the figures and ``report.md`` of a finished report folder
    (``out``, default :func:`report_folder` at ``scale``) drawn again from its ``experiment.json`` alone
    (nothing trained or evaluated; the record is written back as it was read). The folder is rebuilt
    aside and replaces the old one only when complete; a record that does not check out
    (:func:`read_report`) is one line and changes nothing."""
    folder = report_folder(name, scale, out)
    result = read_report(folder / "experiment.json", name)
    with output_folder(folder, EXPERIMENT_FILES, "omgpt experiment --redraw") as stage:
        try:
            result["figures"] = draw(result, stage)
            write_json(result, stage / "experiment.json", indent=1)
            write_text(stage / "report.md", report(result))
        except OMGPTError:
            raise
        except (
            KeyError,
            TypeError,
            ValueError,
            IndexError,
            ZeroDivisionError,
        ) as e:  # a kind's own field the checks do not know
            raise RecordError(
                f"{folder / 'experiment.json'}: cannot be drawn ({type(e).__name__}: {e}); "
                f"the experiment report is damaged, or written by another version"
            ) from None
    print(
        f"redrew {_shown(folder / 'report.md')} and {len(result['figures'])} figure(s) from {_shown(folder / 'experiment.json')}"
    )
    return result


def read_report(path: Path, name: str) -> ExperimentResult:
    """``experiment.json`` of experiment ``name``, checked through :mod:`omgpt.records` before anything is
    drawn from it: the report's skeleton, every number finite, and each panel against its kind's
    :attr:`~omgpt.commands.experiment.registry.Kind.panel_schema` and
    :meth:`~omgpt.commands.experiment.registry.Kind.check_panel`."""
    from omgpt.records import check, check_finite, read_json

    result = check_finite(read_json(path, REPORT, what="experiment report"), path)
    if result["name"] != name:
        raise OMGPTError(f"{path}: the report of experiment {result['name']!r}, not {name!r}")
    kind = kind_of(result)
    for i, panel in enumerate(result["panels"]):
        check(panel, kind.panel_schema, path, f"panels[{i}]")
        kind.check_panel(panel, path, f"panels[{i}]")
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


def tune_missing(exp: Experiment) -> None:
    """Tune every ``-tuned`` benchmark whose setting -- the prior of a panel's model at the panel's
    horizon -- has no tuning yet (:func:`omgpt.commands.tune.ensure_tuned`)."""
    from omgpt.commands.tune import ensure_tuned

    for panel in exp.panels:
        ensure_tuned(
            panel.tuned_task,
            panel.tuned_options,
            panel.horizon,
            panel.policies,
            log=lambda line: print(f"    {line}", flush=True),
        )


def default_models_dir(scale: str, quick: bool) -> Path:
    """Where models are stored unless ``--models-dir`` says: the CPU-scale models behind ``results/`` in
    ``results/models`` (committed: a finished model is ~1 MB, and the store survives the machine, so
    training can be spread over sessions and every report's models are in the repository); quick runs
    and the paper scale in ``runs/experiments/models``."""
    return ROOT / ("runs/experiments/models" if quick or scale != "cpu" else "results/models")


def run_all(
    *,
    scale: str = "cpu",
    models_dir: str | None = None,
    jobs: int = 1,
    runs: int | None = None,
    seed: int = seeding.EXPERIMENT_SEED,
    device: str | None = None,
    train_only: bool = False,
) -> None:
    """``omgpt experiment --all``: every experiment into ``results/NAME``. The models of all of them are
    trained first, each once, in one pool of ``jobs`` workers (experiment by experiment, a worker would
    idle while the last model of each trains); then every experiment evaluates with its trained models
    (:func:`run_experiment`, the other arguments as there)."""
    seeding.check_test_seed(seed, "--seed")
    names = list(available())
    models: dict[
        str, tuple[str, Model]
    ] = {}  # key -> (label, model): each distinct model once, a child naming its parent's label here
    for name in names:
        exp = load_experiment(name, scale)
        kind_of(exp).check_settings(exp)  # before hours of training, as run_experiment checks
        kind_of(exp).check_config(exp)
        keys = experiment_keys(exp, [])
        for label in dependency_order(exp.models):
            model = exp.models[label]
            if model.init_from:
                model = dataclasses.replace(model, init_from=models[keys[model.init_from]][0])
            models.setdefault(keys[label], (f"{name}/{label}", model))
    print(f"omgpt experiment --all, scale {scale}: {len(names)} experiments, {len(models)} distinct models")
    start = time.perf_counter()
    train_all(
        dict(models.values()),
        scale=scale,
        models_dir=Path(models_dir or default_models_dir(scale, quick=False)),
        extra_configs=[],
        jobs=jobs,
    )
    if not train_only:
        for name in names:
            run_experiment(name, scale=scale, models_dir=models_dir, jobs=jobs, runs=runs, seed=seed, device=device)
    print(f"omgpt experiment --all: {(time.perf_counter() - start) / 60:.1f} minutes")


def _command(
    name: str,
    *,
    scale: str,
    out: str | None,
    models_dir: str | None,
    runs: int | None,
    horizon: int | None,
    fit_configs: list[str],
    seed: int,
    device: str,
) -> str:
    """The command line that reproduces this run (defaults left out)."""
    parts = ["omgpt experiment", name, "--scale", scale]
    parts += ["--out", str(out)] if out else []
    parts += ["--models-dir", str(models_dir)] if models_dir else []
    parts += ["--runs", str(runs)] if runs else []
    parts += ["--horizon", str(horizon)] if horizon else []
    parts += [f"--fit-config {_shown(Path(c))}" for c in fit_configs]
    parts += ["--seed", str(seed)] if seed != seeding.EXPERIMENT_SEED else []
    parts += ["--device", device] if device != "cpu" else []
    return " ".join(parts)
