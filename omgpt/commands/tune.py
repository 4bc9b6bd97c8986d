"""``omgpt tune``: choose each benchmark's free constants on validation environments (docs/protocol.md).

For each benchmark, every point of its ``tunable`` grid (and the paper's own constants, for the record)
is rolled out on the same ``runs`` validation environments of the setting with common random numbers,
and the point of lowest mean final regret is kept. A winner on an end of its grid widens the grid past
that end (:func:`omgpt.tuning.extension`) and the new points are tuned, up to
:data:`omgpt.tuning.WIDEN_STEPS` steps; a winner still on an end is recorded as ``bounded``. The
environments come from a validation seed: a test seed is refused, so no reported number is ever one
the constants were chosen on. The result goes to ``configs/tuned/<setting>.json``, read, merged and
written under the file's lock, which ``<name>-tuned`` reads.

Warnings (a line each in the log, and the entry's ``warnings``), where a tuned constant should not be
trusted as it stands:

* a winner on an end of its range (``at_limit``: SAA's "every day", an L1 penalty of 0, leaves of one
  day) or of the widened grid (``bounded``): the most extreme value tried won;
* the winner's lead over the paper's constants below :data:`SEPARATED` standard errors of the paired
  difference on the same validation environments (``versus_paper``): the validation part cannot tell
  the two apart, and the winner of a grid is its luckiest point, so on test it may do worse (fai-data
  on bakery's later dates);
* fewer than :data:`MIN_VALIDATION` validation environments: the standard errors themselves are rough.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

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
# The tuned constants must lead the paper's by this many standard errors of their paired difference to
# be told apart: a one-sided 2.3% test for one comparison fixed in advance, lenient for the best of a
# grid (and real demand's windows of one store are correlated, which the s.e. over windows ignores).
SEPARATED = 2.0
# Fewer validation environments and a standard error measured on them is itself off by more than ±13%
# (its relative s.d. is about 1 / sqrt(2 (n - 1))): the choice and its warnings are rough.
MIN_VALIDATION = 30


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
    if windows is not None:  # (the count a fit's --data.val_runs plays each validation window once with)
        played = f"{windows} validation windows" if runs >= windows else f"{runs} of {windows} validation windows"
        log(f"{task_name}: {played}, each played once" + (f" (not --runs {runs})" if runs > windows else ""))
        runs = min(runs, windows)
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
    per_env: dict[tuple, object] = {}  # and what it is made of, per environment (_validation_rollout)
    points = grid(searched)
    while True:
        for c in points:  # only the new points: the environments are the same for every point
            point = tuple(c.items())
            if point not in regrets:
                regrets[point], per_env[point] = _validation_rollout(task, name, c, runs, horizon, seed, device)
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
    paper_point = tuple(paper_constants.items())
    if paper_point in regrets:
        paper, paper_env = regrets[paper_point], per_env[paper_point]
    else:
        paper, paper_env = _validation_rollout(task, name, {}, runs, horizon, seed, device)
    bounded = {k: side for k, side in ends if not further[k, side][1]}
    at_limit = {k: side for k, side in ends if further[k, side][1]}
    best_point = tuple(best.items())
    versus_paper = {
        "lead": paper["mean"] - regrets[best_point]["mean"],
        "se": paired_se(per_env[best_point], paper_env),
    }
    warnings = tuning_warnings(best, bounded, at_limit, versus_paper, best_point == paper_point, runs)
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
    for line in warnings:
        log(f"{key}: {name}-tuned: WARNING: {line}")
    return {
        "constants": best,
        "final_regret": regrets[tuple(best.items())],
        "paper": {"constants": paper_constants, "final_regret": paper},
        "grid": {k: list(v) for k, v in cls.tunable.items()},
        "searched": searched,
        "bounded": bounded,
        "at_limit": at_limit,
        "versus_paper": versus_paper,
        "warnings": warnings,
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
    return _validation_rollout(task, name, constants, runs, horizon, seed, device)[0]


def _validation_rollout(task, name: str, constants: dict, runs: int, horizon: int, seed: int, device: str):
    """A point's validation score (mean, s.e.) and what it is made of per environment, for paired
    differences (:func:`paired_se`): a data task's per-window (cost, demand) ``(runs, 2)``, else the
    final regrets ``(runs,)``."""
    history = evaluate_policies(task, {name: constants}, runs, horizon, seed, device=device, progress=False)[name]
    if hasattr(task, "tuning_score"):  # a task's own headline metric (real demand: the scaled cost)
        return task.tuning_score(history), torch.stack(task.window_totals(history), dim=-1)
    final = history.cumulative_regret()[:, -1].double()
    return {"mean": float(final.mean()), "se": float(final.std() / len(final) ** 0.5)}, final


def paired_se(a, b) -> float:
    """The standard error of the difference of two points' scores on the same environments
    (:func:`_validation_rollout`): of a ratio of sums (cost over demand, the demand the same for both)
    by linearisation, ``sqrt(Σ_w (ΔC_w - ΔR D_w)²) / Σ_w D_w``, or of a mean of final regrets."""
    if a.dim() == 2:
        cost, demand = a[:, 0] - b[:, 0], a[:, 1]
        return float((cost - cost.sum() / demand.sum() * demand).pow(2).sum().sqrt() / demand.sum())
    return float((a - b).std() / len(a) ** 0.5)


def tuning_warnings(
    best: dict, bounded: dict, at_limit: dict, versus_paper: dict, is_paper: bool, runs: int
) -> list[str]:
    """The entry's ``warnings`` (the module docstring), one line each."""
    out = [
        f"{k} = {best[k]:g} is the {side} end of its range: the most extreme value allowed won"
        for k, side in at_limit.items()
    ]
    out += [
        f"{k} = {best[k]:g} is the {side} end of the grid widened {WIDEN_STEPS} steps: the optimum may lie further"
        for k, side in bounded.items()
    ]
    lead, se = versus_paper["lead"], versus_paper["se"]
    if not is_paper and lead < SEPARATED * se:
        out.append(
            f"the tuned constants lead the paper's by {lead:.3g} ± {se:.2g} (paired s.e.), under {SEPARATED:g} "
            "standard errors: the validation environments cannot tell them apart, and on test the tuned may do worse"
        )
    if runs < MIN_VALIDATION:
        out.append(f"only {runs} validation environments (under {MIN_VALIDATION}): the standard errors are rough")
    return out


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
