"""``omgpt fit|validate``: LightningCLI with ``configs/base.yaml`` as the first config layer, and user
errors (config typos, an unknown task, a bad option) turned into one-line :class:`OMGPTError` s. A run
folder (the logger's version folder: metrics, config, checkpoints) belongs to one live run at a time, and
to one run: a fit without ``--ckpt_path`` into a folder that holds a run is refused.

A command-line module: the library never imports it (``omgpt.commands.demo`` runs a fit through it).
"""

from __future__ import annotations

import csv
import math
import os
import sys

from jsonargparse import ArgumentError
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import ArgsType, LightningCLI
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from omgpt import checks
from omgpt.errors import OMGPTError
from omgpt.checkpoint_io import SafeCheckpointIO
from omgpt.checkpoints import check_resumable, check_weights, read_checkpoint
from omgpt.datamodules.algorithm1 import applying_callbacks
from omgpt.locks import holding
from omgpt.model import checkpoint_hparams
from omgpt.records import read_text
from omgpt.resources import CONFIGS

LIGHTNING_COMMANDS = ("fit", "validate")  # no `test`: the module has no test step; `omgpt evaluate` tests
CKPT_ALIASES = ("last", "best", "hpc", "registry")  # --ckpt_path values Lightning resolves inside fit


class OMGPTCLI(LightningCLI):
    """LightningCLI whose user errors (config typos, unknown task, bad option) become :class:`OMGPTError`."""

    def add_arguments_to_parser(self, parser) -> None:
        # One source of truth for the task and horizon: the model's, fed to the data.
        parser.link_arguments("model.task", "data.task")
        parser.link_arguments("model.task_options", "data.task_options")
        parser.link_arguments("model.horizon", "data.horizon")
        parser.link_arguments("model.obs_target", "data.obs_target")

    def parse_arguments(self, parser, args) -> None:
        for path in _config_files(sys.argv[1:] if args is None else args):
            read_text(path, "config file")  # a binary file: jsonargparse would end in a UnicodeDecodeError traceback
        try:
            super().parse_arguments(parser, args)
        except ArgumentError as e:
            raise OMGPTError(clean_message(str(e))) from None
        except UnicodeDecodeError:  # a binary file named inside a config (a callback's config file, ...)
            raise OMGPTError("a config file is not text (binary content)") from None
        command = self.config.get("subcommand")
        if not command:
            return
        config = self.config[command]
        _refuse_non_finite(config.as_dict().get("trainer"), "trainer")  # (the module and the data check their own)
        if config.get("seed_everything") not in (None, True, False):  # Lightning's own check ends in a traceback
            checks.seed("seed_everything", config.get("seed_everything"))
        init_from = ((config.get("model") or {}).get("finetune") or {}).get("init_from")
        if command == "fit" and init_from is not None:  # a readable checkpoint, before the trainer is built
            _init_checkpoint(init_from)
        ckpt = config.get("ckpt_path")
        if ckpt and ckpt not in CKPT_ALIASES:
            # A setting that differs from the checkpoint's is refused here, in one line. (The aliases
            # are resolved only inside fit; OMGPTModule.on_load_checkpoint checks them there.)
            trained = checkpoint_hparams(read_checkpoint(ckpt, mmap=True), ckpt)
            check_resumable(trained, config["model"].as_dict(), ckpt)

    def _parse_ckpt_path(self) -> None:
        """LightningCLI's copy of a checkpoint's hyper-parameters over the config: nothing to copy, as
        :meth:`parse_arguments` refused any that differ (and a checkpoint written before
        ``model.network`` has them in a form this version's parser does not take)."""

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except OMGPTError:
            raise
        except (
            ValueError,
            TypeError,
            KeyError,
            ImportError,
            MisconfigurationException,
        ) as e:  # a bad value reaching a constructor
            raise OMGPTError(clean_message(str(e))) from None
        # Every checkpoint this trainer writes or reads -- step and epoch-end saves, the --ckpt_path
        # file and the last/best/hpc aliases -- goes through the atomic writer and the safe reader.
        if type(self.trainer.strategy.checkpoint_io) is not TorchCheckpointIO:
            raise OMGPTError(
                "omgpt fit saves and loads checkpoints with its own CheckpointIO; remove the --trainer.plugins checkpoint IO"
            )
        self.trainer.strategy.checkpoint_io = SafeCheckpointIO()
        schedule = getattr(self.datamodule, "schedule", None)
        if schedule is not None:  # Algorithm 1's parts and their callbacks agree, before anything is written
            applying_callbacks(schedule, self.trainer.callbacks)
        init_from = self.model.finetune.init_from if hasattr(self.model, "finetune") else None
        if self.subcommand == "fit" and init_from is not None:
            # Checked now, before the fit's first hook writes config.yaml into the run folder (a refusal
            # there would leave a version_N that the retry is then told to resume). The weights are
            # read again, for the fit, in OMGPTModule.setup.
            from omgpt.module import load_init_weights

            try:
                load_init_weights(self.model, init_from)
            except OMGPTError as e:
                raise OMGPTError(
                    e if str(e).startswith("model.finetune.init_from") else f"model.finetune.init_from: {e}"
                ) from None

    # LightningCLI runs a subcommand through the CLI's method of that name when there is one.
    def fit(self, **kwargs) -> None:
        self._run(self.trainer.fit, **kwargs)

    def validate(self, **kwargs) -> None:
        self._run(self.trainer.validate, **kwargs)

    def _run(self, run, **kwargs) -> None:
        """``run(**kwargs)`` holding the run folder: two runs logging to one folder (the same explicit
        ``--trainer.logger.init_args.version``) would interleave one metrics.csv and overwrite each
        other's checkpoints. Only global rank 0 holds it: DDP's other ranks re-run this command and
        write nothing of their own there. A resume's checkpoint is checked before ``run``: inside
        it, SaveConfigCallback rewrites the folder's config.yaml before the checkpoint is loaded."""
        ckpt = kwargs.get("ckpt_path")
        if self.trainer.global_rank != 0:
            _check_alias_checkpoint(self.trainer, self.model, ckpt, run)  # every rank refuses, none waits for rank 0
            _resolving_aliases(self.trainer, run, **kwargs)
            return
        with holding(self.trainer.log_dir, "wait for it to end, or choose another --trainer.logger.init_args.version"):
            if ckpt is None:  # a fresh run: never into the folder of an earlier one
                _refuse_a_used_run_folder(self.trainer)
            else:  # a resume: into its own folder, whose metrics.csv it extends
                _check_alias_checkpoint(self.trainer, self.model, ckpt, run)
                keep_metric_rows(self.trainer)
            _resolving_aliases(self.trainer, run, **kwargs)


def _refuse_a_used_run_folder(trainer) -> None:
    """A run started without ``--ckpt_path`` whose run folder already holds a run (finished, or
    interrupted by a crash or Ctrl-C) would replace its ``last.ckpt``, ``metrics.csv`` and
    ``config.yaml`` and leave two runs' checkpoints mixed in one folder: refused, the folder untouched.
    (A logger's default version is a new ``version_N``; an explicit ``version`` can name an old one.)"""
    from pathlib import Path

    folders = [Path(trainer.log_dir)] if trainer.loggers else []
    folders += [
        Path(c.dirpath) if c.dirpath else Path(trainer.default_root_dir) / "checkpoints"
        for c in trainer.checkpoint_callbacks
        if c.dirpath or not trainer.loggers
    ]
    for folder in folders:
        held = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
        if held:
            shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
            raise OMGPTError(
                f"{folder} already holds a run ({shown}); resume it with --ckpt_path last, or start a new run in "
                f"another folder (a new --trainer.logger.init_args.version, or none for the next version_N)"
            )


def _check_alias_checkpoint(trainer, module, ckpt, run) -> None:
    """The checkpoint a ``--ckpt_path`` alias (``last``, ``best``, ``hpc``) names, resolved as fit resolves
    it and checked against this run's settings and weights now: inside fit the check
    (``OMGPTModule.on_load_checkpoint``) comes only after SaveConfigCallback has rewritten the run's
    config.yaml with the refused settings. (A checkpoint path is checked in :meth:`OMGPTCLI.parse_arguments`.)"""
    from lightning.pytorch.trainer.states import TrainerFn

    if ckpt not in ("last", "best", "hpc"):  # ("registry" downloads: left to on_load_checkpoint)
        return
    fn = TrainerFn.FITTING if run == trainer.fit else TrainerFn.VALIDATING
    try:  # Lightning's own resolution (private, pinned by lightning<3), so that it names the file fit loads
        path = trainer._checkpoint_connector._parse_ckpt_path(fn, ckpt, model_provided=True, model_connected=False)
    except ValueError as e:
        raise OMGPTError(str(e).replace("`", "")) from None
    if path is None:  # "last" with no last checkpoint: Lightning warns and starts from scratch
        return
    checkpoint = read_checkpoint(path, mmap=True)
    check_resumable(checkpoint_hparams(checkpoint, path), dict(module.hparams), str(path))
    check_weights(checkpoint, module, str(path))


def keep_metric_rows(trainer) -> None:
    """A resumed run's metrics.csv keeps the rows of its earlier processes: Lightning's CSV logger would
    delete the file when it finds it in the run folder, leaving only the resumed part. (The run store's
    fits, :mod:`omgpt.commands.store`, rely on this too.) Rank 0 only: the other ranks' CSV logger writes nothing."""
    for logger in trainer.loggers:
        if isinstance(logger, CSVLogger) and logger._experiment is None:
            logger._experiment = RowKeepingWriter(logger.log_dir)


class RowKeepingWriter(ExperimentWriter):
    """Lightning's CSV writer, appending to an existing metrics.csv under the columns it already has
    (new columns make the writer rewrite the file under a wider header, every row kept)."""

    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir)
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as f:
                self.metrics_keys = next(csv.reader(f), [])

    def _check_log_dir_exists(self) -> None:  # Lightning's deletes metrics.csv here
        pass


def _init_checkpoint(path: str) -> None:
    """``model.finetune.init_from`` names a checkpoint that reads (weights only) and holds a model's settings (a
    folder: its ``model.ckpt``); that the settings are the run's is checked once the module is built."""
    try:
        file = os.path.join(path, "model.ckpt") if os.path.isdir(path) else path
        checkpoint_hparams(read_checkpoint(file, mmap=True), file)
    except OMGPTError as e:
        raise OMGPTError(f"model.finetune.init_from: {e}") from None


def _refuse_non_finite(config, key: str = "") -> None:
    """No trainer setting is NaN or infinite (a clipping value, a callback's threshold): jsonargparse
    takes YAML's ``.nan`` and ``.inf`` for any float, and Lightning would train with it."""
    if isinstance(config, dict):
        for k, v in config.items():
            _refuse_non_finite(v, f"{key}.{k}" if key else k)
    elif isinstance(config, (list, tuple)):
        for i, v in enumerate(config):
            _refuse_non_finite(v, f"{key}[{i}]")
    elif isinstance(config, float) and not math.isfinite(config):
        raise OMGPTError(f"{key} must be a finite number, got {config}")


def _config_files(args) -> list[str]:
    """The existing files named by ``--config PATH`` / ``--config=PATH`` (jsonargparse also takes
    inline YAML there, which is no file)."""
    if not isinstance(args, (list, tuple)):
        return []
    values = [b for a, b in zip(args, args[1:]) if a == "--config"] + [
        a[len("--config=") :] for a in args if a.startswith("--config=")
    ]
    return [v for v in values if os.path.isfile(v)]


def _resolving_aliases(trainer, run, **kwargs) -> None:
    """Lightning resolves a ``--ckpt_path`` alias inside fit and raises a ValueError when it names no
    checkpoint (``best`` in a new process, ``hpc`` without an HPC checkpoint): one line instead. On
    Ctrl-C Lightning shuts the run down and calls ``sys.exit(1)``: that is an interrupt to the CLI."""
    try:
        run(**kwargs)
    except ValueError as e:
        if kwargs.get("ckpt_path") in CKPT_ALIASES and "ckpt_path=" in str(e):
            raise OMGPTError(str(e).replace("`", "")) from None
        raise
    except SystemExit:
        if trainer.interrupted:
            raise KeyboardInterrupt from None
        raise


def build_cli(args: ArgsType = None) -> OMGPTCLI:
    """Run ``omgpt fit|validate`` with ``configs/base.yaml`` (trainer, logger, callbacks) as the
    first config layer. Returns the CLI object (its ``trainer`` holds the checkpoint paths)."""
    from omgpt.datamodules import HistoryDataModule
    from omgpt.module import OMGPTModule

    parser_kwargs = {cmd: _parser_defaults() for cmd in LIGHTNING_COMMANDS}
    parser_kwargs["exit_on_error"] = False
    return OMGPTCLI(
        OMGPTModule,
        HistoryDataModule,
        args=args,
        parser_kwargs=parser_kwargs,
        save_config_kwargs={"overwrite": True},
        seed_everything_default=0,
    )


def check_fit(args: list[str]) -> dict:
    """Build what ``omgpt fit ARGS`` builds -- the module, the data, the trainer -- and fit nothing, so
    a queue of fits (a study's arms) makes every refusal their starts would make before the first one
    trains. The files a fit reads only when it starts (``init_from``, ``--ckpt_path``) are not read.
    Returns the module's hyper-parameters (plain data: what a caller checks beyond the fit's own rules)."""
    import contextlib
    import io
    import logging
    import shlex
    import warnings

    from omgpt.datamodules import HistoryDataModule
    from omgpt.module import OMGPTModule

    quiet = [logging.getLogger(f"lightning.{name}") for name in ("pytorch", "fabric")]  # no banner, no 'Seed set'
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter")  # sys.argv is the caller's
            cli = OMGPTCLI(OMGPTModule, HistoryDataModule, args=args, run=False, parser_kwargs=_parser_defaults())
    except SystemExit:  # --help, --print_config: jsonargparse prints and exits
        raise OMGPTError(f"{shlex.join(args)} prints and exits: it fits nothing") from None
    finally:
        for logger, level in zip(quiet, levels):
            logger.setLevel(level)
    return dict(cli.model.hparams)


def check_fits(fits: dict[str, list[str]]) -> dict[str, dict]:
    """:func:`check_fit` of every named fit, the first refusal as ``NAME: why``; each fit's module
    hyper-parameters."""
    built = {}
    for name, args in fits.items():
        try:
            built[name] = check_fit(args)
        except OMGPTError as e:
            raise OMGPTError(f"{name}: {e}") from None
    return built


def _parser_defaults() -> dict:
    base = CONFIGS / "base.yaml"
    return {**({"default_config_files": [str(base)]} if base.is_file() else {}), "exit_on_error": False}


def clean_message(message: str) -> str:
    """jsonargparse nests messages ('Problem with given class_path ...:\\n  - ...'): keep the informative line."""
    lines = [l.strip(" -") for l in str(message).splitlines() if l.strip()]
    for line in reversed(lines):
        if (
            line.lower().startswith("omgpt") or "unknown task" in line or "no option" in line
        ):  # an OMGPTError raised inside
            return line
    if len(lines) > 1 and lines[0].startswith("Parser key"):  # 'Parser key "model.network.n_layer":' + why, below
        i = next((i for i, l in enumerate(lines) if l.startswith(("Problem with given class_path", "Expected"))), 1)
        why = " ".join(lines[i : i + 2]) if lines[i].startswith("Problem") else lines[i]
        return f"{lines[0][len('Parser key') :].strip(' :').strip(chr(34))}: {why}"
    if lines and lines[0].startswith("Does not validate against any of the Union subtypes"):
        # an optional group (data.algorithm1.mixed: a MixedPhase or null): the group's own error, not null's
        errors = lines[lines.index("Errors:") + 1 :] if "Errors:" in lines else []
        return next((l for l in errors if not l.startswith(("Expected a", "Given value"))), lines[0])
    if lines and lines[0].startswith("Problems parsing config"):  # YAML syntax: keep where and what
        return "; ".join(l.replace('in "<unicode string>", ', "") for l in lines)
    return lines[0] if lines else "invalid arguments"


if __name__ == "__main__":
    # ``python -m omgpt.commands.lightning_cli < FITS.json``: check_fits of ``{name: [fit argument, ...]}``
    # read from stdin (how a benchmark script, a layer below the commands, checks a queue of fits); the
    # fits' hyper-parameters on stdout's last line, as JSON.
    import json

    from omgpt.entry import guarded

    sys.exit(guarded(lambda: print(json.dumps(check_fits(json.loads(sys.stdin.read())), default=str))))
