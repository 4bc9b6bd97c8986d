"""Command line: ``omgpt fit|validate`` (LightningCLI, :mod:`omgpt.commands.lightning_cli`) and ``omgpt evaluate|
demand-prediction|demo|tune|experiment|bench|probe|tsne|tsne-training|manipulate``.

Errors a user can cause end with one line on stderr and exit code 2, never a traceback: every value is
checked by :mod:`omgpt.checks` before the work starts, every file is written by :mod:`omgpt.files`.
Every other command is a typed function (here, :mod:`omgpt.commands.bench`, :mod:`omgpt.commands.interpret`) whose
signature and docstring jsonargparse -- LightningCLI's parser -- turns into its parser and ``--help``
(:func:`omgpt.commands.args.command`); ``omgpt --help`` lists each with its docstring's first line.
This module sits on top: it dispatches to the commands; nothing imports it but the entry point (the
commands share :mod:`omgpt.commands.args` and :mod:`omgpt.commands.lightning_cli`).
"""

from __future__ import annotations

import importlib
import signal
import sys
from typing import Any, Callable, Literal, Optional

from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import ArgsType

from omgpt import threads
from omgpt.commands.args import (
    CheckpointPath,
    Device,
    Jobs,
    OutputDir,
    PositiveInt,
    Seed,
    command,
    flags,
    read_config,
    summary,
    task_options,
)
from omgpt.entry import guarded
from omgpt.errors import OMGPTError
from omgpt.seeding import DEMO_SEED, EXPERIMENT_SEED
from omgpt.commands.lightning_cli import LIGHTNING_COMMANDS, build_cli, clean_message


def evaluate(
    task: Optional[str] = None,
    option: Optional[list[str]] = None,
    policies: Optional[str] = None,
    ckpt: Optional[CheckpointPath] = None,
    runs: Optional[PositiveInt] = None,
    horizon: Optional[PositiveInt] = None,
    window: Optional[PositiveInt] = None,
    seed: Seed = EXPERIMENT_SEED,
    out: OutputDir = "runs/evaluate",
    batch_size: PositiveInt = 50,
    device: Device = "cpu",
    no_progress: bool = False,
    force: bool = False,
    jobs: Jobs = 1,
    alg_star_sampler: Optional[str] = None,
) -> None:
    """Roll out OMGPT and benchmarks on test environments, write summary.json / curves.csv / regret.png.

    Args:
        task: task name (default: the checkpoint's task)
        option: task option KEY=VALUE, repeatable
        policies: comma-separated policy names, e.g. omgpt,oracle,erm,fai
        ckpt: checkpoint of a trained OMGPT (needed for the omgpt policy)
        runs: test environments (a 90% CI needs >= 2; default 100, and on a data task every window of its part once: more than its windows is refused)
        horizon: steps per run (default: the checkpoint's or the task's horizon)
        window: OMGPT context window W (default: whole history)
        seed: seed of the test environments and their noise
        out: output folder (summary.json, curves.csv, regret.png), written as a whole
        batch_size: runs rolled out together
        device: torch device, e.g. cuda
        no_progress: hide the progress bar
        force: run work estimated past a million steps of the rollout loop (policies x batches x horizon)
        jobs: processes playing the policies' batches of runs at once, one torch thread each (the same numbers as one process)
        alg_star_sampler: alg-star's posterior sampler: auto (default: the task's structured sampler where one applies -- pricing, the uncensored newsvendor -- else smc), smc, gaussian, collapsed
    """
    from omgpt.commands.evaluate import run_evaluation

    if not policies:
        raise OMGPTError("omgpt evaluate: --policies is required (e.g. --policies omgpt,oracle,erm,fai)")
    run_evaluation(
        task_name=task,
        task_options=task_options(option),
        policies=[n.strip() for n in policies.split(",") if n.strip()],
        ckpt=ckpt,
        runs=runs,
        horizon=horizon,
        window=window,
        seed=seed,
        out=out,
        batch_size=batch_size,
        device=device,
        progress=not no_progress,
        force=force,
        jobs=jobs,
        alg_star_sampler=alg_star_sampler,
    )


def demand_prediction(
    ckpt: CheckpointPath,
    task: Optional[str] = None,
    option: Optional[list[str]] = None,
    policy: str = "omgpt",
    runs: PositiveInt = 100,
    horizon: Optional[PositiveInt] = None,
    window: Optional[PositiveInt] = None,
    seed: Seed = EXPERIMENT_SEED,
    out: OutputDir = "runs/demand-prediction",
    batch_size: PositiveInt = 50,
    device: Device = "cpu",
    no_progress: bool = False,
    force: bool = False,
    jobs: Jobs = 1,
) -> None:
    """The observation head's demand predictions against ridge regression on the same samples (paper §5.1.6).

    Args:
        ckpt: checkpoint of an OMGPT pre-trained with --model.network.obs_head true (pricing)
        task: task name, which must be the checkpoint's (default: the checkpoint's task)
        option: task option override KEY=VALUE, repeatable (e.g. demand_types=square for a mixed-demand checkpoint)
        policy: who plays the histories both predictors learn from (default: the model itself)
        runs: test environments
        horizon: steps per run (default: the checkpoint's horizon)
        window: OMGPT context window W (default: whole history)
        seed: seed of the test environments and their noise
        out: output folder (demand_prediction.json, demand_prediction.png), written as a whole
        batch_size: runs rolled out together
        device: torch device, e.g. cuda
        no_progress: hide the progress bar
        force: run work estimated past a million steps of the rollout loop (batches x horizon)
        jobs: processes playing the batches of runs at once, one torch thread each (the same numbers as one process)
    """
    from omgpt.commands.evaluate import run_demand_prediction

    run_demand_prediction(
        ckpt=ckpt,
        task_options=task_options(option),
        runs=runs,
        horizon=horizon,
        window=window,
        seed=seed,
        out=out,
        policy=policy,
        batch_size=batch_size,
        device=device,
        progress=not no_progress,
        task_name=task,
        force=force,
        jobs=jobs,
    )


def demo(
    out: OutputDir = "runs/demo",
    max_steps: Optional[PositiveInt] = None,
    runs: PositiveInt = 100,
    seed: Seed = DEMO_SEED,
) -> int:
    """The embedded default: pre-train a small OMGPT on CPU and show it beating the benchmarks.

    Args:
        out: output folder
        max_steps: override the demo's training steps (for quick checks)
        runs: test environments
        seed: seed of the test environments (not 0: the demo's recipe was chosen on it; omgpt.seeding.DEMO_SEED)
    """
    from omgpt.commands.demo import run_demo

    return run_demo(out=out, max_steps=max_steps, runs=runs, seed=seed)


def tune(
    task: str,
    option: Optional[list[str]] = None,
    policies: Optional[str] = None,
    horizon: Optional[PositiveInt] = None,
    runs: PositiveInt = 200,
    seed: Seed = 10_001,
    force: bool = False,
) -> None:
    """Tune the benchmarks' free constants on validation environments; <name>-tuned plays them.

    Args:
        task: task name
        option: task option KEY=VALUE, repeatable (the prior OMGPT is trained on: pool, dims, demand types)
        policies: comma-separated benchmarks (default: every tunable benchmark of the task), e.g. ucb,ts
        horizon: steps per run (default: the task's horizon)
        runs: validation environments per grid point (a data task: at most this many of its validation windows, each once)
        seed: validation seed of the environments (10000-19999; test seeds are refused)
        force: run work estimated past a million steps of the rollout loop (grid points x batches x horizon)
    """
    from omgpt.tasks import TASKS, make_task
    from omgpt.commands.tune import run_tuning

    if task not in TASKS:
        make_task(task)  # the "unknown task" error
    options = task_options(option)
    names = (
        None if policies is None else [n.strip() for n in policies.split(",") if n.strip()]
    )  # "," is empty, not "all"
    horizon = horizon or options.get("horizon", TASKS[task].cls.default_horizon)
    _check_tuning_work(task, options, names, horizon, runs, force)
    run_tuning(task, options, names, horizon, runs, seed)


TUNE_POLICIES = "(default: every tunable benchmark of the task), e.g. ucb,ts"


def documented_tune() -> Callable[..., Any]:
    """``tune``, its ``--policies`` help naming each task's tunable benchmarks, read off the policy
    registry when the command is built (a new benchmark is listed without an edit here)."""
    from omgpt.commands.tune import tunable_listing

    if TUNE_POLICIES in tune.__doc__:  # once per process
        tune.__doc__ = tune.__doc__.replace(
            TUNE_POLICIES, f"(default: every tunable benchmark of the task); tunable: {tunable_listing()}"
        )
    return tune


def _check_tuning_work(
    task_name: str, options: dict, names: list[str] | None, horizon: int, runs: int, force: bool
) -> None:
    """``omgpt tune``'s time and memory, estimated before it tunes: every grid point (and the paper's
    constants) of every policy is one rollout of ``runs`` validation environments."""
    from omgpt import checks
    from omgpt.commands.tune import tunable_policies
    from omgpt.evaluation import BATCH_SIZE
    from omgpt.policies import POLICIES
    from omgpt.tasks import make_episode_task
    from omgpt.tuning import grid

    task = make_episode_task(task_name, options, horizon)
    tunable = [
        POLICIES[n][0].tunable for n in names or tunable_policies(task) if n in POLICIES and POLICIES[n][0].tunable
    ]
    points = sum(len(grid(t)) + 1 for t in tunable)
    what = f"tuning {len(tunable)} policies ({points} rollouts) on {runs} runs x {horizon} steps"
    checks.memory(checks.history_bytes(task, runs, horizon), what)
    checks.rollout_time(checks.loop_steps(points, runs, horizon, BATCH_SIZE), what, force)


@flags(list_experiments="list", all_experiments="all")
def experiment(
    name: Optional[str] = None,
    list_experiments: bool = False,
    all_experiments: bool = False,
    scale: Literal["cpu", "paper"] = "cpu",
    out: Optional[OutputDir] = None,
    models_dir: Optional[OutputDir] = None,
    jobs: Jobs = 1,
    runs: Optional[PositiveInt] = None,
    horizon: Optional[PositiveInt] = None,
    fit_config: Optional[list[str]] = None,
    seed: Seed = EXPERIMENT_SEED,
    device: Device = "cpu",
    train_only: bool = False,
    redraw: bool = False,
) -> None:
    """One paper figure end to end: train, evaluate, draw, report (omgpt experiment --list).

    Args:
        name: experiment name (see --list)
        list_experiments: list the experiments and exit
        all_experiments: every experiment, each into results/NAME (the models they share trained once)
        scale: cpu: minutes per model on one core; paper: the paper's model and Algorithm 1 (GPUs)
        out: report folder (default results/NAME; results/NAME-paper at paper scale)
        models_dir: trained models, shared across experiments (default: results/models at the CPU scale, else runs/experiments/models)
        jobs: models trained at once, one process each (one CPU thread each when > 1), and panels evaluated at once
        runs: test runs per panel (default: the experiment's, 100)
        horizon: override every model's training horizon (quick runs)
        fit_config: a config layered on every model's fit, repeatable
        seed: seed of the test environments
        device: evaluation device (training uses the trainer's accelerator)
        train_only: train the models and stop
        redraw: draw the figures and write report.md again from OUT/experiment.json (nothing re-run)
    """
    from omgpt.commands.experiment import available, redraw_experiment, report_folder, run_all, run_experiment
    from omgpt.commands.experiment.config import catalogue

    if list_experiments:
        titles, errors = catalogue()
        for key, title in titles.items():
            print(f"{key:<26} {title}")
        if errors:  # the good ones listed; the first bad file named (one line, exit 2)
            raise OMGPTError(f"{errors[0]}" + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
        return
    for path in fit_config or []:  # now, not in every model's fit process after the first ones have trained
        read_config(path, "--fit-config")
    if all_experiments:
        if name or out or horizon or fit_config:
            raise OMGPTError(
                "omgpt experiment --all: runs every experiment at its own settings; give no name, --out, --horizon or --fit-config"
            )
        if redraw:  # every report in results/ drawn again
            for each in available():
                if (report_folder(each, scale, None) / "experiment.json").is_file():
                    redraw_experiment(each, scale=scale)
                else:  # configured, not run yet: nothing to draw
                    print(f"{each}: no report yet (omgpt experiment {each})")
        else:
            run_all(
                scale=scale,
                models_dir=models_dir,
                jobs=jobs,
                runs=runs,
                seed=seed,
                device=device,
                train_only=train_only,
            )
        return
    if not name:
        raise OMGPTError("omgpt experiment: name an experiment (omgpt experiment --list), or --all")
    if redraw:
        redraw_experiment(name, scale=scale, out=out)
        return
    run_experiment(
        name,
        scale=scale,
        out=out,
        models_dir=models_dir,
        jobs=jobs,
        runs=runs,
        horizon=horizon,
        fit_configs=fit_config or [],
        seed=seed,
        device=device,
        train_only=train_only,
    )


def _imported(module: str, attr: str) -> Callable[[], Callable[..., Any]]:
    """A command function imported on use (bench and the interpretability commands pull in heavy modules)."""
    return lambda: getattr(importlib.import_module(module), attr)


# Every command but LightningCLI's: its function (resolved on use) and its positional parameters.
FUNCTIONS: dict[str, tuple[Callable[[], Callable[..., Any]], tuple[str, ...]]] = {
    "evaluate": (lambda: evaluate, ()),
    "demand-prediction": (lambda: demand_prediction, ()),
    "demo": (lambda: demo, ()),
    "tune": (documented_tune, ()),
    "experiment": (lambda: experiment, ("name",)),
    "bench": (_imported("omgpt.commands.bench", "bench_command"), ()),
    **{
        n: (_imported("omgpt.commands.interpret", f"{n.replace('-', '_')}_command"), ())
        for n in ("probe", "tsne", "tsne-training", "manipulate")
    },
}
COMMANDS = {
    name: (lambda argv, name=name: command(FUNCTIONS[name][0](), f"omgpt {name}", FUNCTIONS[name][1])(argv))
    for name in FUNCTIONS
}
LIGHTNING_SUMMARIES = {
    "fit": "Pre-train OMGPT (LightningCLI: omgpt fit --config configs/newsvendor.yaml).",
    "validate": "Online validation of a checkpoint on the validation environments (LightningCLI).",
}


def usage() -> str:
    """``omgpt`` alone or ``omgpt --help``: each command with the first line of its function's
    docstring (``omgpt COMMAND --help``: its options, from the same docstring)."""
    summaries = {**LIGHTNING_SUMMARIES, **{name: summary(get()) for name, (get, _) in FUNCTIONS.items()}}
    lines = [f"usage: omgpt {{{','.join(summaries)}}} ...", ""]
    width = max(10, *map(len, summaries))
    lines += [f"  {name:<{width}} {text}" for name, text in summaries.items()]
    return "\n".join(
        lines
        + [
            "",
            "omgpt COMMAND --help lists the options of a command.",
            f"{', '.join(THREADED)} also take --threads N (torch threads; or {threads.ENV}=N).",
        ]
    )


THREADED = (
    "fit",
    "validate",
    "demo",
    "evaluate",
    "demand-prediction",
    "tune",
    "experiment",
)  # take --threads N (omgpt.threads)
MOVED = {  # (command, option) -> the command it became: its old spelling is one line naming the new one
    (
        "evaluate",
        "--demand-prediction",
    ): "is now its own command: omgpt demand-prediction (one --policy, not --policies)",
    (
        "tsne",
        "--mode",
    ): "is gone: omgpt tsne maps one checkpoint's layers; omgpt tsne-training compares several checkpoints' histories",
}


def cli_main(args: ArgsType = None) -> int:
    """Entry point callable from tests and notebooks: ``cli_main(["fit", "--config", ...])``. Runs the
    command under the contract every entry point shares (:func:`omgpt.entry.guarded`)."""
    argv = list(sys.argv[1:] if args is None else args)
    import omgpt

    if (
        signal.getsignal(signal.SIGINT) is omgpt._interrupted_while_starting
    ):  # the imports are done: Ctrl-C is a KeyboardInterrupt again
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return guarded(lambda: _run(argv, from_sys_argv=args is None))


def _run(argv: list[str], from_sys_argv: bool) -> int:
    try:
        return _dispatch(argv, from_sys_argv)
    except MisconfigurationException as e:  # Lightning's word for a bad trainer setting, found inside fit
        raise OMGPTError(clean_message(str(e))) from None


def _dispatch(argv: list[str], from_sys_argv: bool) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] in THREADED:  # one torch-thread choice for every command that trains or evaluates
        argv, count = threads.split_argv(argv)
        if from_sys_argv:
            sys.argv[1:] = argv  # LightningCLI reads the command line itself
        # not over a listing, nor into --print_config's YAML (`omgpt fit ... --print_config > run.yaml`)
        listing = {"-h", "--help", "--list"} & set(argv) or any(a.startswith("--print_config") for a in argv)
        threads.configure(count, announce=not listing)
    _refuse_moved(argv)
    if argv[0] in COMMANDS:
        return COMMANDS[argv[0]](argv[1:])
    if argv[0] not in LIGHTNING_COMMANDS:
        raise OMGPTError(f"unknown command {argv[0]!r}; choose from {', '.join(LIGHTNING_COMMANDS + tuple(COMMANDS))}")
    build_cli(None if from_sys_argv else argv)
    return 0


def _refuse_moved(argv: list[str]) -> None:
    for token in argv[1:]:
        option = token.partition("=")[0].replace("_", "-")
        if (argv[0], option) in MOVED:
            raise OMGPTError(f"omgpt {argv[0]} {option} {MOVED[argv[0], option]}")


def main() -> None:
    sys.exit(cli_main())


if __name__ == "__main__":
    main()
