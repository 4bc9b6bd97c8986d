"""Command line: ``omgpt fit|validate`` (LightningCLI, :mod:`omgpt.lightning_cli`) and ``omgpt evaluate|
demo|experiment|bench|probe|tsne|manipulate``.

Errors a user can cause end with one line on stderr and exit code 2, never a traceback: every value is
checked by :mod:`omgpt.checks` before the work starts, every file is written by :mod:`omgpt.files`.
This module sits on top: it dispatches to the commands; nothing imports it but the entry point (the
commands share :mod:`omgpt.cli_args` and :mod:`omgpt.lightning_cli`).
"""
from __future__ import annotations

import sys

from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import ArgsType

from omgpt import checks
from omgpt.cli_args import Parser, task_options
from omgpt.errors import OMGPTError
from omgpt.lightning_cli import LIGHTNING_COMMANDS, build_cli, clean_message


def evaluate_command(argv: list[str]) -> int:
    from omgpt.evaluate import run_demand_prediction, run_evaluation

    p = Parser(prog="omgpt evaluate", description="Roll out policies on fresh test environments and report regret.")
    p.add_argument("--task", help="task name (default: the checkpoint's task)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="task option, repeatable")
    p.add_argument("--policies", help="comma-separated policy names, e.g. omgpt,oracle,erm,fai")
    p.add_argument("--ckpt", help="checkpoint of a trained OMGPT (needed for the omgpt policy)")
    p.add_argument("--runs", type=checks.positive_int, default=100, help="test environments (default 100; a 90%% CI needs >= 2)")
    p.add_argument("--horizon", type=checks.positive_int, help="steps per run (default: the checkpoint's or the task's horizon)")
    p.add_argument("--window", type=checks.positive_int, help="OMGPT context window W (default: whole history)")
    p.add_argument("--seed", type=checks.seed_arg, default=0, help="seed of the test environments and their noise")
    p.add_argument("--out", default="runs/evaluate", help="output folder (summary.json, curves.csv, regret.png), written as a whole")
    p.add_argument("--batch-size", type=checks.positive_int, default=50, help="runs rolled out together")
    p.add_argument("--device", type=checks.device_arg, default="cpu", help="torch device, e.g. cuda")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--demand-prediction", action="store_true",
                   help="instead: the observation head's demand predictions vs ridge regression (pricing, §5.1.6)")
    a = p.parse_args(argv)
    if a.demand_prediction:
        run_demand_prediction(
            ckpt=a.ckpt, task_options=task_options(a.option), runs=a.runs, horizon=a.horizon, window=a.window,
            seed=a.seed, out=a.out, policy=a.policies or "omgpt", batch_size=a.batch_size, device=a.device,
            progress=not a.no_progress, task_name=a.task,
        )
        return 0
    if not a.policies:
        raise OMGPTError("omgpt evaluate: --policies is required (e.g. --policies omgpt,oracle,erm,fai)")
    policies = [name.strip() for name in a.policies.split(",") if name.strip()]
    run_evaluation(
        task_name=a.task, task_options=task_options(a.option), policies=policies, ckpt=a.ckpt, runs=a.runs,
        horizon=a.horizon, window=a.window, seed=a.seed, out=a.out, batch_size=a.batch_size, device=a.device,
        progress=not a.no_progress,
    )
    return 0


def demo_command(argv: list[str]) -> int:
    from omgpt.demo import run_demo

    p = Parser(prog="omgpt demo", description="Pre-train a small OMGPT on CPU and compare it with the benchmarks.")
    p.add_argument("--out", default="runs/demo", help="output folder")
    p.add_argument("--max-steps", type=checks.positive_int, help="override the demo's training steps (for quick checks)")
    p.add_argument("--runs", type=checks.positive_int, default=100, help="test environments (default 100)")
    p.add_argument("--seed", type=checks.seed_arg, default=0, help="seed of the test environments")
    a = p.parse_args(argv)
    return run_demo(out=a.out, max_steps=a.max_steps, runs=a.runs, seed=a.seed)


def experiment_command(argv: list[str]) -> int:
    from omgpt.experiment import available, run_experiment

    p = Parser(prog="omgpt experiment", description="Run one of the paper's experiments end to end: train, evaluate, draw, report.")
    p.add_argument("name", nargs="?", help="experiment name (see --list)")
    p.add_argument("--list", action="store_true", help="list the experiments and exit")
    p.add_argument("--scale", default="cpu", choices=("cpu", "paper"), help="cpu: minutes per model on one core; paper: the paper's model and Algorithm 1 (GPUs)")
    p.add_argument("--out", help="report folder (default results/NAME; results/NAME-paper at paper scale)")
    p.add_argument("--models-dir", help="trained models, shared across experiments (default runs/experiments/models)")
    p.add_argument("--jobs", type=checks.positive_int, default=1, help="models trained at once, one process each (one CPU thread each when > 1)")
    p.add_argument("--runs", type=checks.positive_int, help="test runs per panel (default: the experiment's, 100)")
    p.add_argument("--horizon", type=checks.positive_int, help="override every model's training horizon (quick runs)")
    p.add_argument("--fit-config", action="append", default=[], metavar="YAML", help="a config layered on every model's fit (repeatable)")
    p.add_argument("--seed", type=checks.seed_arg, default=0, help="seed of the test environments")
    p.add_argument("--device", type=checks.device_arg, default="cpu", help="evaluation device (training uses the trainer's accelerator)")
    p.add_argument("--train-only", action="store_true", help="train the models and stop")
    a = p.parse_args(argv)
    if a.list:
        for name, title in available().items():
            print(f"{name:<26} {title}")
        return 0
    if not a.name:
        raise OMGPTError("omgpt experiment: name an experiment (omgpt experiment --list)")
    run_experiment(a.name, a.scale, a.out, a.models_dir, a.jobs, a.runs, a.horizon, a.fit_config, a.seed, a.device, a.train_only)
    return 0


def _interpret(name: str):
    """``omgpt probe|tsne|manipulate``: implemented in ``omgpt.interpret`` (imported on use)."""

    def command(argv: list[str]) -> int:
        from omgpt import interpret

        return getattr(interpret, f"{name}_command")(argv)

    return command


def bench_command(argv: list[str]) -> int:
    from omgpt.bench import main as bench_main

    return bench_main(argv)


COMMANDS = {"evaluate": evaluate_command, "demo": demo_command, "experiment": experiment_command, "bench": bench_command, **{n: _interpret(n) for n in ("probe", "tsne", "manipulate")}}

USAGE = """usage: omgpt {fit,validate,evaluate,demo,experiment,probe,tsne,manipulate,bench} ...

  fit        pre-train OMGPT (LightningCLI: omgpt fit --config configs/newsvendor.yaml)
  validate   online validation of a checkpoint on the validation environments (LightningCLI)
  evaluate   roll out OMGPT and benchmarks on test environments, write summary.json / curves.csv / regret.png
  demo       the embedded default: pre-train a small OMGPT on CPU and show it beating the benchmarks
  experiment one paper figure end to end: train, evaluate, draw, report (omgpt experiment --list)
  bench      the speed benchmarks: KV cache, batched data generation, streaming data, Lightning overhead
  probe      linear probes of every layer's embedding of a checkpoint (probe.png / probe.json)
  tsne       t-SNE of every layer, or of histories across checkpoints vs Alg* (tsne.png / tsne.json)
  manipulate context manipulation: optimal decision inference (manipulation.png / manipulation.json)
"""


def cli_main(args: ArgsType = None) -> int:
    """Entry point callable from tests and notebooks: ``cli_main(["fit", "--config", ...])``."""
    argv = list(sys.argv[1:] if args is None else args)
    try:
        if not argv or argv[0] in ("-h", "--help"):
            print(USAGE)
            return 0 if argv else 2
        if argv[0] in COMMANDS:
            return COMMANDS[argv[0]](argv[1:])
        if argv[0] not in LIGHTNING_COMMANDS:
            raise OMGPTError(f"unknown command {argv[0]!r}; choose from {', '.join(LIGHTNING_COMMANDS + tuple(COMMANDS))}")
        build_cli(None if args is None else argv)
        return 0
    except FloatingPointError as e:  # OMGPTModule stops before a non-finite update reaches the weights
        return _error(f"{e}; training stopped (lower the learning rate?); checkpoints written before it are unchanged")
    except MisconfigurationException as e:  # Lightning's word for a bad trainer setting, found inside fit
        return _error(clean_message(str(e)))
    except OMGPTError as e:
        return _error(str(e) or type(e).__name__)
    except OSError as e:  # a file or folder the command cannot read or write (permissions, disk full, ...)
        return _error(f"{e.strerror or e}: {e.filename}" if e.filename else str(e))


def _error(message: str) -> int:
    lines = message.strip().splitlines()
    print(f"omgpt: error: {lines[0] if lines else message}", file=sys.stderr)
    return 2


def main() -> None:
    sys.exit(cli_main())


if __name__ == "__main__":
    main()
