"""``omgpt tune``: choose each benchmark's free constants on validation environments (docs/protocol.md).

For each benchmark, every point of its ``tunable`` grid (and the paper's own constants, for the record)
is rolled out on the same ``runs`` validation environments of the setting with common random numbers,
and the point of lowest mean final regret is kept. A winner on an end of its grid widens the grid past
that end (:func:`omgpt.tuning.extension`) and the new points are tuned, up to
:data:`omgpt.tuning.WIDEN_STEPS` steps; a winner still on an end is recorded as ``bounded``. The
environments come from a validation seed: a test seed is refused, so no reported number is ever one
the constants were chosen on. The result goes to ``configs/tuned/<setting>.json``, read, merged and
written under the file's lock, which ``<name>-tuned`` reads.
"""

from __future__ import annotations

import time
from pathlib import Path

from omgpt import seeding
from omgpt.errors import OMGPTError
from omgpt.evaluation import evaluate_policies
from omgpt.files import writable_file, write_json
from omgpt.locks import holding
from omgpt.policies import POLICIES, make_policy
from omgpt.resources import code_version
from omgpt.tasks import make_episode_task
from omgpt.tuning import (
    WIDEN_STEPS,
    defaults,
    entry_metric,
    extension,
    grid,
    read_tuned,
    setting_key,
    tuned_path,
    tuning_metric,
)

VALIDATION_RUNS = 200  # validation environments per grid point (the mean final regret to about ±5%)


def tunable_policies(task) -> list[str]:
    """The benchmarks with free constants that apply to ``task`` (what ``--policies all`` tunes)."""
    return sorted(
        n for n, (cls, applies) in POLICIES.items() if cls.tunable and not n.endswith("-tuned") and applies(task)
    )


def tunable_listing() -> str:
    """Every task's tunable benchmarks, tasks with the same ones together (``omgpt tune --help``):
    ``mab: ts, ucb; newsvendor, newsvendor-censored: erm, fai; ...``. Each benchmark applies by its
    task's class, so an instance made without options (``__new__``: no table read, no prior drawn)
    tells which apply."""
    from omgpt.tasks import TASKS

    groups: dict[tuple[str, ...], list[str]] = {}
    for name, factory in sorted(TASKS.items()):
        names = tuple(tunable_policies(factory.cls.__new__(factory.cls)))
        if names:
            groups.setdefault(names, []).append(name)
    return "; ".join(f"{', '.join(tasks)}: {', '.join(names)}" for names, tasks in groups.items())


def run_tuning(
    task_name: str,
    task_options: dict,
    policies: list[str] | None,
    horizon: int,
    runs: int = VALIDATION_RUNS,
    seed: int = seeding.TUNING_SEED,
    device: str = "cpu",
    folder: Path | None = None,
    log=print,
) -> dict:
    """Tune ``policies`` (``None``: every tunable benchmark of the task) for the setting and write its
    file, merged with the policies already tuned there. Returns the file's content."""
    seeding.check_validation_seed(seed, "--seed")
    if runs < 2:
        raise OMGPTError(f"--runs must be at least 2 (a standard error needs two environments), got {runs}")
    if policies is not None and not policies:
        raise OMGPTError("--policies is empty (leave it out to tune every tunable benchmark of the task)")
    if policies is not None and len(set(policies)) != len(policies):
        raise OMGPTError(f"--policies names a policy twice: {','.join(policies)}")
    # A data task is tuned on its validation windows whatever part was named (its test windows choose
    # nothing); a prior's validation task is itself, kept apart from the test by the validation seed.
    task = make_episode_task(task_name, task_options, horizon).validation_task()
    windows = getattr(task, "windows", None)
    if windows is not None and runs > windows:
        log(f"{task_name}: {windows} validation windows, each played once (not --runs {runs})")
        runs = windows
    policies = policies or tunable_policies(task)
    for name in policies:  # every name checked before any rollout
        if name not in POLICIES:
            make_policy(name, task)  # the "unknown policy" error
        if not POLICIES[name][0].tunable:
            raise OMGPTError(
                f"policy {name!r} has no free constants to tune; tunable for {task_name!r}: {', '.join(tunable_policies(task))}"
            )
        make_policy(name, task)  # applies to the task?
    key = setting_key(task_name, task.options(), horizon)
    path = tuned_path(key, folder)
    # Before the work, not after it: a folder that cannot be written, or a file there that cannot be
    # merged into (damaged, another setting's), is refused now.
    writable_file(path, "the tuned-constants file")
    if path.is_file():
        read_tuned(path)
    setting = {
        "task": task_name,
        "task_options": {k: v for k, v in task.options().items() if k not in ("horizon", "part")},
        "horizon": horizon,
    }
    from omgpt.progress import Progress

    progress = Progress(len(policies), f"benchmarks tuned on {key}")
    for name in policies:  # each benchmark's entry written when it is done: an interrupted run keeps them
        entry = _tune_one(task, name, runs, horizon, seed, device, key, log)
        # Read, merge and write under the file's lock: a tuning of another policy of this setting that
        # finished meanwhile is in the file read here, so neither result is lost.
        with holding(path, "", wait=True):
            content = read_tuned(path) if path.is_file() else {"policies": {}}
            content = {"setting": setting, "policies": dict(sorted({**content["policies"], name: entry}.items()))}
            write_json(content, path)
        log(f"wrote {name} to {path}")
        progress.advance()
    return content


def _tune_one(task, name: str, runs: int, horizon: int, seed: int, device: str, key: str, log) -> dict:
    """One benchmark's entry of the tuned file: its grid searched, widened past every end a winner sits
    on (:func:`omgpt.tuning.extension`), until the winner is inside the grid or the widening bound or
    the constant's range is reached."""
    cls = POLICIES[name][0]
    started, cpu_started = time.perf_counter(), time.process_time()
    searched = {k: sorted(v) for k, v in cls.tunable.items()}
    further = {(k, side): extension(v, side) for k, v in cls.tunable.items() for side in ("low", "high")}
    taken = {(k, side): 0 for k in cls.tunable for side in ("low", "high")}  # extension values added so far
    regrets: dict[tuple, dict] = {}  # constants (as a tuple of items) -> validation regret
    points = grid(searched)
    while True:
        for c in points:  # only the new points: the environments are the same for every point
            if tuple(c.items()) not in regrets:
                regrets[tuple(c.items())] = _validation_regret(task, name, c, runs, horizon, seed, device)
        best = dict(min(regrets, key=lambda c: regrets[c]["mean"]))
        ends = _ends(best, searched)
        grown = [(k, side) for k, side in ends if taken[k, side] < len(further[k, side][0])]
        if not grown:
            break
        for k, side in grown:
            value = further[k, side][0][taken[k, side]]
            searched[k] = sorted([*searched[k], value])
            taken[k, side] += 1
        # "cross": the new values with every value of the other constants; "line": with the winner's
        # (one point per new value: a grid of four expensive constants, gbm's, cannot afford the cross)
        points = (
            grid(searched)
            if cls.widen == "cross"
            else [{**best, k: searched[k][0 if side == "low" else -1]} for k, side in grown]
        )
    curve = [
        {"constants": dict(c), "final_regret": regrets[c]} for c in sorted(regrets, key=lambda c: [v for _, v in c])
    ]
    paper_constants = defaults(cls, cls.tunable)
    paper = regrets.get(tuple(paper_constants.items())) or _validation_regret(
        task, name, {}, runs, horizon, seed, device
    )
    bounded = {k: side for k, side in ends if not further[k, side][1]}
    at_limit = {k: side for k, side in ends if further[k, side][1]}
    seconds = time.perf_counter() - started
    widened = {k: v for k, v in searched.items() if len(v) > len(cls.tunable[k])}
    log(
        f"{key}: {name}-tuned = {best}: {regrets[tuple(best.items())]['mean']:.2f} (paper's constants {paper['mean']:.2f}) "
        f"on {runs} validation environments, {len(regrets)} points, {seconds:.0f} s"
        + (f"; widened {', '.join(f'{k} to {v[0]:g}..{v[-1]:g}' for k, v in widened.items())}" if widened else "")
        + (
            f"; BOUNDED: {', '.join(f'{k} on the {side} end after {WIDEN_STEPS} widening steps' for k, side in bounded.items())}"
            if bounded
            else ""
        )
        + (f"; {', '.join(f'{k} on the {side} end of its range' for k, side in at_limit.items())}" if at_limit else "")
    )
    return {
        "constants": best,
        "final_regret": regrets[tuple(best.items())],
        "paper": {"constants": paper_constants, "final_regret": paper},
        "grid": {k: list(v) for k, v in cls.tunable.items()},
        "searched": searched,
        "bounded": bounded,
        "at_limit": at_limit,
        "widen_steps": WIDEN_STEPS,
        "widen": cls.widen,
        "validation": {"runs": runs, "seed": seed},
        "curve": curve,
        "seconds": round(seconds, 1),
        "cpu_seconds": round(
            time.process_time() - cpu_started, 1
        ),  # on one thread: the time on an idle core (tools/retune's estimate)
        "code_version": code_version(),  # per policy: a file's entries may be tuned by different code
    }


def _ends(constants: dict, searched: dict[str, list]) -> list[tuple[str, str]]:
    """``(constant, "low" | "high")`` for every constant of ``constants`` on an end of its searched values
    (a constant with one value is held fixed, not tuned: it has no end)."""
    return [
        (k, side)
        for k, v in constants.items()
        if len(searched[k]) > 1
        for side, end in (("low", searched[k][0]), ("high", searched[k][-1]))
        if v == end
    ]


def _validation_regret(task, name: str, constants: dict, runs: int, horizon: int, seed: int, device: str) -> dict:
    history = evaluate_policies(task, {name: constants}, runs, horizon, seed, device=device, progress=False)[name]
    if hasattr(task, "tuning_score"):  # a task's own headline metric (real demand: the scaled cost)
        return task.tuning_score(history)
    final = history.cumulative_regret()[:, -1].double()
    return {"mean": float(final.mean()), "se": float(final.std() / len(final) ** 0.5)}


def ensure_tuned(task_name: str, task_options: dict, horizon: int, policies: list[str], log=print) -> None:
    """Tune every ``<name>-tuned`` of ``policies`` whose setting has no tuning yet (the experiments and
    the demo: like an untrained model, a missing tuning is made once and then read)."""
    names = sorted({p.removesuffix("-tuned") for p in policies if p.endswith("-tuned")})
    if not names:
        return
    task = make_episode_task(task_name, task_options, horizon)
    path = tuned_path(setting_key(task_name, task.options(), horizon))
    entries = read_tuned(path)["policies"] if path.is_file() else {}
    # (an entry tuned on another metric than the task's -- real demand's before the scaled cost -- is stale)
    missing = [n for n in names if n not in entries or entry_metric(entries[n]) != tuning_metric(task_name)]
    if missing:
        log(f"tuning {', '.join(missing)} for {path.stem} on validation environments (omgpt tune)")
        run_tuning(task_name, task_options, missing, horizon, log=log)
