"""Command line: ``omgpt fit|validate`` (LightningCLI) and ``omgpt evaluate|demo|experiment|bench|
probe|tsne|manipulate``.

Errors a user can cause end with one line on stderr and exit code 2, never a traceback: every value is
checked by :mod:`omgpt.checks` before the work starts, every file is written by :mod:`omgpt.files`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jsonargparse import ArgumentError
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import ArgsType, LightningCLI

from omgpt import checks
from omgpt.errors import OMGPTError
from omgpt.files import SafeCheckpointIO, read_checkpoint

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
LIGHTNING_COMMANDS = ("fit", "validate")  # no `test`: the module has no test step; `omgpt evaluate` tests
CKPT_ALIASES = ("last", "best", "hpc", "registry")  # --ckpt_path values Lightning resolves inside fit


class OMGPTCLI(LightningCLI):
    """LightningCLI whose user errors (config typos, unknown task, bad option) become :class:`OMGPTError`."""

    def add_arguments_to_parser(self, parser) -> None:
        # One source of truth for the task and horizon: the model's, fed to the data.
        parser.link_arguments("model.task", "data.task")
        parser.link_arguments("model.task_options", "data.task_options")
        parser.link_arguments("model.horizon", "data.horizon")

    def parse_arguments(self, parser, args) -> None:
        try:
            super().parse_arguments(parser, args)
        except ArgumentError as e:
            raise OMGPTError(_clean(str(e))) from None
        command = self.config.get("subcommand")
        if not command:
            return
        config = self.config[command]
        if config.get("seed_everything") not in (None, True, False):  # Lightning's own check ends in a traceback
            checks.seed("seed_everything", config.get("seed_everything"))
        ckpt = config.get("ckpt_path")
        if ckpt and ckpt not in CKPT_ALIASES:
            # Before LightningCLI copies the checkpoint's hyper-parameters over the config: a setting
            # that differs would otherwise be silently replaced. (The aliases are resolved only inside
            # fit; OMGPTModule.on_load_checkpoint checks them there.)
            from omgpt.module import check_resumable

            check_resumable(read_checkpoint(ckpt, mmap=True), config["model"].as_dict(), ckpt)

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except OMGPTError:
            raise
        except (ValueError, TypeError, KeyError, ImportError, MisconfigurationException) as e:  # a bad value reaching a constructor
            raise OMGPTError(_clean(str(e))) from None
        # Every checkpoint this trainer writes or reads -- step and epoch-end saves, the --ckpt_path
        # file and the last/best/hpc aliases -- goes through the atomic writer and the safe reader.
        if type(self.trainer.strategy.checkpoint_io) is not TorchCheckpointIO:
            raise OMGPTError("omgpt fit saves and loads checkpoints with its own CheckpointIO; remove the --trainer.plugins checkpoint IO")
        self.trainer.strategy.checkpoint_io = SafeCheckpointIO()

    # LightningCLI runs a subcommand through the CLI's method of that name when there is one.
    def fit(self, **kwargs) -> None:
        _resolving_aliases(self.trainer.fit, **kwargs)

    def validate(self, **kwargs) -> None:
        _resolving_aliases(self.trainer.validate, **kwargs)


def _resolving_aliases(run, **kwargs) -> None:
    """Lightning resolves a ``--ckpt_path`` alias inside fit and raises a ValueError when it names no
    checkpoint (``best`` in a new process, ``hpc`` without an HPC checkpoint): one line instead."""
    try:
        run(**kwargs)
    except ValueError as e:
        if kwargs.get("ckpt_path") in CKPT_ALIASES and "ckpt_path=" in str(e):
            raise OMGPTError(str(e).replace("`", "")) from None
        raise


def build_cli(args: ArgsType = None) -> OMGPTCLI:
    """Run ``omgpt fit|validate|test`` with ``configs/base.yaml`` (trainer, logger, callbacks) as the
    first config layer. Returns the CLI object (its ``trainer`` holds the checkpoint paths)."""
    from datamodules import HistoryDataModule
    from omgpt.module import OMGPTModule

    base = CONFIGS / "base.yaml"
    defaults = {"default_config_files": [str(base)]} if base.is_file() else {}
    parser_kwargs = {cmd: {**defaults, "exit_on_error": False} for cmd in LIGHTNING_COMMANDS}
    parser_kwargs["exit_on_error"] = False
    return OMGPTCLI(
        OMGPTModule,
        HistoryDataModule,
        args=args,
        parser_kwargs=parser_kwargs,
        save_config_kwargs={"overwrite": True},
        seed_everything_default=0,
    )


# --------------------------------------------------------------------------------------------------
def _task_options(pairs: list[str]) -> dict:
    """``["pool_size=4", "censored=true"]`` -> ``{"pool_size": 4, "censored": True}`` (YAML scalars)."""
    import yaml

    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise OMGPTError(f"--option expects KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        try:
            out[key.strip()] = yaml.safe_load(value)  # the values themselves are checked by make_task
        except yaml.YAMLError:
            raise OMGPTError(f"--option {pair!r}: the value is not valid YAML") from None
    return out


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit code 2 (argparse's default prints the usage too)
        raise OMGPTError(f"{self.prog}: {message}")


def evaluate_command(argv: list[str]) -> int:
    from omgpt.evaluate import run_demand_prediction, run_evaluation

    p = _Parser(prog="omgpt evaluate", description="Roll out policies on fresh test environments and report regret.")
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
            ckpt=a.ckpt, task_options=_task_options(a.option), runs=a.runs, horizon=a.horizon, window=a.window,
            seed=a.seed, out=a.out, policy=a.policies or "omgpt", batch_size=a.batch_size, device=a.device,
            progress=not a.no_progress, task_name=a.task,
        )
        return 0
    if not a.policies:
        raise OMGPTError("omgpt evaluate: --policies is required (e.g. --policies omgpt,oracle,erm,fai)")
    policies = [name.strip() for name in a.policies.split(",") if name.strip()]
    run_evaluation(
        task_name=a.task, task_options=_task_options(a.option), policies=policies, ckpt=a.ckpt, runs=a.runs,
        horizon=a.horizon, window=a.window, seed=a.seed, out=a.out, batch_size=a.batch_size, device=a.device,
        progress=not a.no_progress,
    )
    return 0


def demo_command(argv: list[str]) -> int:
    from omgpt.demo import run_demo

    p = _Parser(prog="omgpt demo", description="Pre-train a small OMGPT on CPU and compare it with the benchmarks.")
    p.add_argument("--out", default="runs/demo", help="output folder")
    p.add_argument("--max-steps", type=checks.positive_int, help="override the demo's training steps (for quick checks)")
    p.add_argument("--runs", type=checks.positive_int, default=100, help="test environments (default 100)")
    p.add_argument("--seed", type=checks.seed_arg, default=0, help="seed of the test environments")
    a = p.parse_args(argv)
    return run_demo(out=a.out, max_steps=a.max_steps, runs=a.runs, seed=a.seed)


def experiment_command(argv: list[str]) -> int:
    from omgpt.experiment import available, run_experiment

    p = _Parser(prog="omgpt experiment", description="Run one of the paper's experiments end to end: train, evaluate, draw, report.")
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
        return _error(_clean(str(e)))
    except OMGPTError as e:
        return _error(str(e) or type(e).__name__)
    except OSError as e:  # a file or folder the command cannot read or write (permissions, disk full, ...)
        return _error(f"{e.strerror or e}: {e.filename}" if e.filename else str(e))


def _error(message: str) -> int:
    lines = message.strip().splitlines()
    print(f"omgpt: error: {lines[0] if lines else message}", file=sys.stderr)
    return 2


def _clean(message: str) -> str:
    """jsonargparse nests messages ('Problem with given class_path ...:\\n  - ...'): keep the informative line."""
    lines = [l.strip(" -") for l in str(message).splitlines() if l.strip()]
    for line in reversed(lines):
        if "omgpt" in line.lower() or "unknown task" in line or "no option" in line:
            return line
    if len(lines) > 1 and lines[0].startswith("Parser key"):  # 'Parser key "model.n_layer":' + why, below
        i = next((i for i, l in enumerate(lines) if l.startswith(("Problem with given class_path", "Expected"))), 1)
        why = " ".join(lines[i : i + 2]) if lines[i].startswith("Problem") else lines[i]
        return f"{lines[0][len('Parser key'):].strip(' :').strip(chr(34))}: {why}"
    if lines and lines[0].startswith("Problems parsing config"):  # YAML syntax: keep where and what
        return "; ".join(l.replace('in "<unicode string>", ', "") for l in lines)
    return lines[0] if lines else "invalid arguments"


def main() -> None:
    sys.exit(cli_main())


if __name__ == "__main__":
    main()
