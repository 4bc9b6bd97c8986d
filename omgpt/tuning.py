"""Benchmarks tuned as their authors tune them (docs/protocol.md): the constants a ``<name>-tuned`` policy plays
(the search itself is the ``omgpt tune`` command, :mod:`omgpt.commands.tune`).

A benchmark's free constants (its class's ``tunable`` grid: UCB's exploration multiplier, LinUCB's
``β`` multiplier and ridge, ERM's L1 penalty, ...) are chosen by a grid search on **validation**
environments of one *setting*: the task, its options (pool included) and the horizon -- the prior that
OMGPT is pre-trained on, at the panel's horizon. Each grid point is rolled out on the same validation
environments with common random numbers (:func:`omgpt.evaluation.evaluate_policies`), and the point of
lowest mean final regret wins. The environments come from a validation seed (:mod:`omgpt.seeding`),
disjoint from every test seed, so a reported number is never one the constants were chosen on.

One JSON file per setting, ``configs/tuned/<setting>.json`` (shipped with the configs: a ``-tuned``
policy reads it as it reads any config), holds for every tuned benchmark the chosen constants, the
paper's defaults, the grid, the validation environments (runs and seed) and the validation curve
(each point's mean final regret and its standard error). ``omgpt tune`` writes it; a policy tuned
again replaces its own entry only.
"""
from __future__ import annotations

import inspect
import itertools
import os
from pathlib import Path

from omgpt import seeding
from omgpt.errors import OMGPTError
from omgpt.records import NUMBER, MapOf, read_json
from omgpt.resources import CONFIGS, CHECKOUT

TUNED = CONFIGS / "tuned"
# Where a run reads and writes tunings instead (quick experiment runs: beside their models, so a test
# or a smoke run never writes into the shipped configs).
FOLDER_VARIABLE = "OMGPT_TUNED_DIR"


# --------------------------------------------------------------------------------------------------
# Settings and their files.
def canonical_options(task_name: str, options: dict) -> dict:
    """The task options that define a setting: ``horizon`` (a setting's own field), a data task's
    ``part`` and options equal to the task's defaults (``dim=6`` for pricing) left out, so one prior has
    one name."""
    from omgpt.tasks import TASKS

    factory = TASKS.get(task_name)
    defaults = {}
    if factory is not None:
        for klass in factory.cls.__mro__:
            if "__init__" in vars(klass):
                for name, p in inspect.signature(klass.__init__).parameters.items():
                    if p.default is not inspect.Parameter.empty:
                        defaults.setdefault(name, p.default)
        defaults.update(factory.defaults)
    # ``part`` (a data set's train / validation / test windows) names a piece of one setting, not another
    # prior: a data task's benchmarks are tuned on its validation part and played on its test part.
    return {k: v for k, v in sorted(options.items()) if k not in ("horizon", "part") and not (k in defaults and defaults[k] == v)}


def setting_key(task_name: str, options: dict, horizon: int) -> str:
    """``pricing-T100``, ``mab-pool_size=100-T100``: the file stem of a setting's tuned constants."""
    parts = [task_name] + [f"{k}={_plain(v)}" for k, v in canonical_options(task_name, options).items()] + [f"T{int(horizon)}"]
    return "-".join(parts)


def _plain(v) -> str:
    if isinstance(v, str) and ("/" in v or os.sep in v):  # a file (a user's demand table): its name and its content's hash,
        return _file_tag(v)                                # so a file name holds no folders and the same table has one key
    return f"{v:g}" if isinstance(v, float) else str(v)


def _file_tag(path: str) -> str:
    import hashlib

    try:
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        digest = hashlib.sha256(path.encode()).hexdigest()
    return f"{Path(path).stem}@{digest[:10]}"


def tuned_path(key: str, folder: Path | None = None) -> Path:
    """The file of setting ``key``: in ``folder``, else ``$OMGPT_TUNED_DIR``, else ``configs/tuned/``."""
    return Path(folder or os.environ.get(FOLDER_VARIABLE) or TUNED) / f"{key}.json"


# What a tuned-constants file must hold for a ``-tuned`` policy to play it (the rest is the record:
# the paper's constants, the grid, the validation curve, the code version).
TUNED_SCHEMA = {
    "setting": dict,
    "policies": MapOf({"constants": MapOf(NUMBER), "validation": {"seed": int}}),
}


def read_tuned(path: Path) -> dict:
    """A tuned-constants file, read by :mod:`omgpt.records` against :data:`TUNED_SCHEMA`: a missing,
    malformed or foreign file is one :class:`~omgpt.records.RecordError` line naming the file and the key."""
    data = read_json(path, TUNED_SCHEMA, what="tuned-constants file")
    for name, entry in data["policies"].items():  # tuned on validation environments, never on test ones
        seeding.check_validation_seed(entry["validation"]["seed"], f"{path}: policies.{name}.validation.seed")
    return data


def tuned_constants(policy: str, task_name: str, options: dict, horizon: int, tuned_on: str | None = None,
                    folder: Path | None = None) -> dict:
    """The constants ``policy`` was tuned to for a setting: the task's own (``task_name``, ``options``,
    ``horizon``) or, with ``tuned_on``, the setting of that key (a shifted test task plays the constants
    tuned on the prior OMGPT was trained on). No tuning: :class:`OMGPTError` with the command to run."""
    key = tuned_on or setting_key(task_name, options, horizon)
    path = tuned_path(key, folder)
    command = tune_command(task_name, options, horizon, [policy]) if tuned_on is None else f"omgpt tune for setting {key}"
    if not path.is_file():
        raise OMGPTError(f"{policy}-tuned: no tuned constants for {key} ({_shown(path)} missing); run: {command}")
    entry = read_tuned(path)["policies"].get(policy)
    if entry is None:
        raise OMGPTError(f"{policy}-tuned: {_shown(path)} has no tuning of {policy!r}; run: {command}")
    return dict(entry["constants"])


def tune_command(task_name: str, options: dict, horizon: int, policies: list[str]) -> str:
    opts = "".join(f" --option {k}={_plain(v)}" for k, v in canonical_options(task_name, options).items())
    return f"omgpt tune --task {task_name}{opts} --policies {','.join(policies)} --horizon {int(horizon)}"


def _shown(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(CHECKOUT))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------------------------------
# Grids.
def grid(tunable: dict[str, tuple]) -> list[dict]:
    """Every combination of a ``tunable`` grid, as constructor keyword arguments."""
    names = list(tunable)
    return [dict(zip(names, values)) for values in itertools.product(*(tunable[n] for n in names))]


def defaults(cls: type, names) -> dict:
    """The paper's values of the tunable constants: the constructor's defaults (``None``: derived from
    the task, e.g. ridge ``σ²``)."""
    params = inspect.signature(cls).parameters
    return {n: params[n].default for n in names}
