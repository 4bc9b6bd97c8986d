"""Benchmarks tuned as their authors tune them (docs/protocol.md): the constants a ``<name>-tuned`` policy plays
(the search itself is the ``omgpt tune`` command, :mod:`omgpt.commands.tune`).

A benchmark's free constants (its class's ``tunable`` grid: UCB's exploration multiplier, LinUCB's
``β`` multiplier and ridge, ERM's L1 penalty, ...) are chosen by a grid search on **validation**
environments of one *setting*: the task, its options (pool included) and the horizon -- the prior that
OMGPT is pre-trained on, at the panel's horizon. Each grid point is rolled out on the same validation
environments with common random numbers (:func:`omgpt.evaluation.evaluate_policies`), and the point of
lowest mean final regret wins. The environments come from a validation seed (:mod:`omgpt.seeding`),
disjoint from every test seed, so a reported number is never one the constants were chosen on.

A winner on an end of its grid may not be the best constant: the grid is widened past that end by the
end's own geometric step (:func:`extension`) and the new points are tuned, again and again, at most
:data:`WIDEN_STEPS` steps past each end, never past the constant's range (:class:`Grid`: ``lowest``,
``highest``; an integer constant stays >= 1; a constant at 0, e.g. an L1 penalty, has nothing below
it). A winner still on an end after that is *bounded*: the file says so, and so do the tuning table
(docs/protocol.md) and ``omgpt tune``'s log.

One JSON file per setting, ``configs/tuned/<setting>.json`` (shipped with the configs: a ``-tuned``
policy reads it as it reads any config), holds for every tuned benchmark:

* ``constants`` and ``final_regret``: the chosen constants and their validation regret (mean, s.e.);
* ``paper``: the paper's constants and their validation regret (an experiment picks its best
  benchmark, paper or tuned, on these two numbers, never on test numbers);
* ``grid``: the declared grid; ``searched``: the values tried per constant after widening;
* ``bounded``: ``{constant: "low" | "high"}`` where the winner is on an end of ``searched`` that the
  widening bound stopped (the optimum may lie further out); ``at_limit``: the same where the end is the
  constant's range's own (nothing lies further out); ``widen_steps``: the bound it was tuned under;
  ``widen``: ``"cross"`` (a new value is tried with every value of the other constants) or ``"line"``
  (with the winner's values only: ``Policy.widen``, for a grid of several expensive constants);
* ``validation`` (runs and seed) and ``curve`` (every point's mean final regret and standard error).

``omgpt tune`` writes it under a lock (read, merge, atomic write: two tunings of one setting at once
both land); a policy tuned again replaces its own entry only.
"""

from __future__ import annotations

import inspect
import itertools
import os
from pathlib import Path

from omgpt import seeding
from omgpt.errors import OMGPTError
from omgpt.records import NUMBER, MapOf, RecordError, read_json
from omgpt.resources import CONFIGS, CHECKOUT

TUNED = CONFIGS / "tuned"
# Where a run reads and writes tunings instead (quick experiment runs: beside their models, so a test
# or a smoke run never writes into the shipped configs).
FOLDER_VARIABLE = "OMGPT_TUNED_DIR"


# --------------------------------------------------------------------------------------------------
# Settings and their files.
def canonical_options(task_name: str, options: dict, horizon: int | None = None) -> dict:
    """The task options that define a setting: ``horizon`` (a setting's own field), a data task's
    ``part`` and options equal to the task's defaults (``dim=6`` for pricing) left out, so one prior has
    one name. With ``horizon``, a task with a ``setting_options`` hook names them as its tuning reads
    them (real demand: the parts its shares cut, not the shares:
    :meth:`~omgpt.tasks.newsvendor_data.NewsvendorData.setting_options`)."""
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
    given = {
        k: v
        for k, v in sorted(options.items())
        if k not in ("horizon", "part") and not (k in defaults and defaults[k] == v)
    }
    resolve = getattr(factory.cls, "setting_options", None) if factory is not None else None
    return dict(sorted(resolve(given, int(horizon)).items())) if resolve and horizon is not None else given


def setting_key(task_name: str, options: dict, horizon: int) -> str:
    """``pricing-T100``, ``mab-pool_size=100-T100``: the file stem of a setting's tuned constants."""
    parts = (
        [task_name]
        + [f"{k}={_plain(v)}" for k, v in canonical_options(task_name, options, horizon).items()]
        + [f"T{int(horizon)}"]
    )
    return "-".join(parts)


def _plain(v) -> str:
    if isinstance(v, str) and (
        "/" in v or os.sep in v
    ):  # a file (a user's demand table): its name and its content's hash,
        return _file_tag(v)  # so a file name holds no folders and the same table has one key
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
    "setting": {"task": str, "task_options": dict, "horizon": int},
    "policies": MapOf({"constants": MapOf(NUMBER), "validation": {"seed": int}}),
}


def read_tuned(path: Path) -> dict:
    """A tuned-constants file, read by :mod:`omgpt.records` against :data:`TUNED_SCHEMA` and checked
    against its own name: its ``setting`` must give back the file's setting key (a file copied or
    renamed to another setting, or naming another task, would play constants tuned for something
    else), and every policy's constants must be non-empty (``{}`` would silently play the paper's
    defaults). A missing, malformed or foreign file is one :class:`~omgpt.records.RecordError` line
    naming the file and the key."""
    path = Path(path)
    data = read_json(path, TUNED_SCHEMA, what="tuned-constants file")
    setting = data["setting"]
    try:
        key = setting_key(setting["task"], setting["task_options"], setting["horizon"])
    except (TypeError, ValueError):
        key = None
    if key != path.stem:
        raise RecordError(
            f"{path}: setting (task {setting['task']!r}, options {setting['task_options']}, horizon "
            f"{setting['horizon']}) is setting {key}, not the file's name {path.stem}; the file belongs to another setting"
        )
    for name, entry in data["policies"].items():  # tuned on validation environments, never on test ones
        if not entry["constants"]:
            raise RecordError(
                f"{path}: policies.{name}.constants is empty; tune it again: {tune_command(setting['task'], setting['task_options'], setting['horizon'], [name])}"
            )
        seeding.check_validation_seed(entry["validation"]["seed"], f"{path}: policies.{name}.validation.seed")
    return data


def tuned_constants(
    policy: str,
    task_name: str,
    options: dict,
    horizon: int,
    tuned_on: str | None = None,
    folder: Path | None = None,
    names: tuple[str, ...] | None = None,
) -> dict:
    """The constants ``policy`` was tuned to for a setting: the task's own (``task_name``, ``options``,
    ``horizon``) or, with ``tuned_on``, the setting of that key (a shifted test task plays the constants
    tuned on the prior OMGPT was trained on). No tuning: :class:`OMGPTError` with the command to run;
    so is a constant not among ``names`` (the benchmark's tunable ones: a file tuned for another version
    of it)."""
    key = tuned_on or setting_key(task_name, options, horizon)
    path = tuned_path(key, folder)
    command = (
        tune_command(task_name, options, horizon, [policy]) if tuned_on is None else f"omgpt tune for setting {key}"
    )
    if not path.is_file():
        raise OMGPTError(f"{policy}-tuned: no tuned constants for {key} ({_shown(path)} missing); run: {command}")
    data = read_tuned(path)
    if tuned_on is None and data["setting"]["task"] != task_name:  # (the key check makes this one a safeguard)
        raise OMGPTError(
            f"{policy}-tuned: {_shown(path)} was tuned for task {data['setting']['task']!r}, not {task_name!r}"
        )
    entry = data["policies"].get(policy)
    if entry is None:
        raise OMGPTError(f"{policy}-tuned: {_shown(path)} has no tuning of {policy!r}; run: {command}")
    wanted = tuning_metric(data["setting"]["task"])
    if entry_metric(entry) != wanted:
        raise OMGPTError(
            f"{policy}-tuned: {_shown(path)} tuned {policy} on {entry_metric(entry) or 'the mean final regret'}, not on "
            f"{wanted or 'the mean final regret'}, the task's metric; tune it again: {command}"
        )
    unknown = sorted(set(entry["constants"]) - set(names)) if names is not None else []
    if unknown:
        raise OMGPTError(
            f"{policy}-tuned: {_shown(path)} gives {', '.join(unknown)}, not constants of {policy} ({', '.join(names)}); "
            f"tune it again: {command}"
        )
    return dict(entry["constants"])


def tuning_metric(task_name: str) -> str | None:
    """What a setting of ``task_name`` is tuned on: its task's ``tuning_metric`` (real demand: the scaled
    cost), or ``None``, the mean final regret."""
    from omgpt.tasks import TASKS

    factory = TASKS.get(task_name)
    return getattr(factory.cls, "tuning_metric", None) if factory is not None else None


def entry_metric(entry: dict) -> str | None:
    """The metric a tuned file's entry was tuned on (``None``: the mean final regret, and every entry
    written before a task had its own metric)."""
    return (entry.get("final_regret") or {}).get("metric")


def tune_command(task_name: str, options: dict, horizon: int, policies: list[str]) -> str:
    """The ``omgpt tune`` line that tunes ``policies`` for the setting: its options as given (a table's
    path, not the key's tag of it; the shares, not the parts they cut)."""
    opts = "".join(
        f" --option {k}={v:g}" if isinstance(v, float) else f" --option {k}={v}"
        for k, v in canonical_options(task_name, options).items()
    )
    return f"omgpt tune --task {task_name}{opts} --policies {','.join(policies)} --horizon {int(horizon)}"


def _shown(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(CHECKOUT))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------------------------------
# Grids.
WIDEN_STEPS = 3  # at most this many steps past each end of a declared grid (a x3 grid: 27x further out)
ZERO_STEP = 3.0  # the widening ratio past the upper end of a grid whose other values are 0


class Grid(tuple):
    """A ``tunable`` constant's declared values with the range a widening may reach: ``lowest`` and
    ``highest`` (inclusive; ``None``: no end but the sign). A plain tuple is a grid with no declared
    range: a positive constant then widens geometrically without end, an integer one down to 1.
    ``Grid(14, 28, 56, ALL, highest=ALL)``: SAA's window never goes past "every day seen"."""

    def __new__(cls, *values, lowest=None, highest=None):
        grid = super().__new__(cls, values)
        grid.lowest, grid.highest = lowest, highest
        return grid


def extension(values: tuple, side: str) -> tuple[list, bool]:
    """The values past the ``side`` (``"low"`` / ``"high"``) end of a declared grid, nearest first: the
    end's own geometric step (the ratio of the two values at that end) continued :data:`WIDEN_STEPS`
    times, rounded to 3 significant digits (to integers for an integer grid). Stops at the constant's
    range: returns ``(values, reaches_limit)``, ``reaches_limit`` True where the range ends within
    the steps (a winner on the last value then sits on the range's own end, not on the search's)."""
    ordered = sorted(values)
    if len(ordered) < 2:  # one value: a constant held fixed, not tuned
        return [], False
    integer = all(isinstance(v, int) for v in ordered)
    limit = getattr(values, "lowest" if side == "low" else "highest", None)
    if limit is None and side == "low":
        limit = 1 if integer else 0  # positive constants: a geometric step never reaches 0, an integer one stops at 1
    end, inner = (ordered[0], ordered[1]) if side == "low" else (ordered[-1], ordered[-2])
    if end == limit or end <= 0:  # already on the range's end (0: a penalty switched off)
        return [], True
    # a grid that starts at 0 (a penalty switched off, e.g. gbm's L2 (0, 3)) has no geometric step at
    # its upper end: it widens by ZERO_STEP, the usual ratio of the project's grids
    ratio = end / inner if inner > 0 else ZERO_STEP
    out = []
    for k in range(1, WIDEN_STEPS + 1):
        value = end * ratio**k
        value = round(value) if integer else float(f"{value:.3g}")
        if limit is not None and (value <= limit if side == "low" else value >= limit):
            if limit not in out and limit != end:
                out.append(limit)
            return out, True
        out.append(value)
    return out, False


def grid(tunable: dict[str, tuple]) -> list[dict]:
    """Every combination of a ``tunable`` grid, as constructor keyword arguments."""
    names = list(tunable)
    return [dict(zip(names, values)) for values in itertools.product(*(tunable[n] for n in names))]


def defaults(cls: type, names) -> dict:
    """The paper's values of the tunable constants: the constructor's defaults (``None``: derived from
    the task, e.g. ridge ``σ²``)."""
    params = inspect.signature(cls).parameters
    return {n: params[n].default for n in names}
