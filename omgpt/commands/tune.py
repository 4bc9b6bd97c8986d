"""``omgpt tune``: choose each benchmark's free constants on validation environments (SPEC §7).

For each benchmark, every point of its ``tunable`` grid (and the paper's own constants, for the record)
is rolled out on the same ``runs`` validation environments of the setting with common random numbers,
and the point of lowest mean final regret is kept. The environments come from a validation seed: a
test seed is refused, so no reported number is ever one the constants were chosen on. The result
goes to ``configs/tuned/<setting>.json`` (:mod:`omgpt.tuning`), which ``<name>-tuned`` reads.
"""
from __future__ import annotations

import time
from pathlib import Path

from omgpt import seeding
from omgpt.errors import OMGPTError
from omgpt.evaluation import evaluate_policies
from omgpt.files import write_json
from omgpt.policies import POLICIES, make_policy
from omgpt.resources import code_version
from omgpt.tasks import make_episode_task
from omgpt.tuning import defaults, grid, read_tuned, setting_key, tuned_path

VALIDATION_RUNS = 200  # validation environments per grid point (the mean final regret to about ±5%)


def tunable_policies(task) -> list[str]:
    """The benchmarks with free constants that apply to ``task`` (what ``--policies all`` tunes)."""
    return sorted(n for n, (cls, applies) in POLICIES.items() if cls.tunable and not n.endswith("-tuned") and applies(task))


def run_tuning(task_name: str, task_options: dict, policies: list[str] | None, horizon: int, runs: int = VALIDATION_RUNS,
               seed: int = seeding.TUNING_SEED, device: str = "cpu", folder: Path | None = None, log=print) -> dict:
    """Tune ``policies`` (default: every tunable benchmark of the task) for the setting and write its
    file, merged with the policies already tuned there. Returns the file's content."""
    seeding.check_validation_seed(seed, "--seed")
    if runs < 2:
        raise OMGPTError(f"--runs must be at least 2 (a standard error needs two environments), got {runs}")
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
            raise OMGPTError(f"policy {name!r} has no free constants to tune; tunable for {task_name!r}: {', '.join(tunable_policies(task))}")
        make_policy(name, task)  # applies to the task?
    key = setting_key(task_name, task.options(), horizon)
    path = tuned_path(key, folder)
    content = read_tuned(path) if path.is_file() else {"setting": {"task": task_name, "task_options": {}, "horizon": horizon}, "policies": {}}
    content["setting"] = {"task": task_name, "task_options": {k: v for k, v in task.options().items() if k not in ("horizon", "part")}, "horizon": horizon}
    for name in policies:
        cls = POLICIES[name][0]
        started = time.perf_counter()
        curve = [{"constants": c, "final_regret": _validation_regret(task, name, c, runs, horizon, seed, device)} for c in grid(cls.tunable)]
        paper_constants = defaults(cls, cls.tunable)
        on_grid = [p["final_regret"] for p in curve if p["constants"] == paper_constants]
        paper = on_grid[0] if on_grid else _validation_regret(task, name, {}, runs, horizon, seed, device)
        best = min(curve, key=lambda p: p["final_regret"]["mean"])
        content["policies"][name] = {
            "constants": best["constants"],
            "paper": {"constants": paper_constants, "final_regret": paper},
            "grid": {k: list(v) for k, v in cls.tunable.items()},
            "validation": {"runs": runs, "seed": seed},
            "curve": curve,
            "seconds": round(time.perf_counter() - started, 1),
            "code_version": code_version(),  # per policy: a file's entries may be tuned by different code
        }
        edge = [k for k, v in best["constants"].items() if len(cls.tunable[k]) > 1 and v in (min(cls.tunable[k]), max(cls.tunable[k]))]
        log(f"{key}: {name}-tuned = {best['constants']}: {best['final_regret']['mean']:.2f} "
            f"(paper's constants {paper['mean']:.2f}) on {runs} validation environments, {time.perf_counter() - started:.0f} s"
            + (f"; {', '.join(edge)} at the grid's edge" if edge else ""))
    content["policies"] = dict(sorted(content["policies"].items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(content, path)
    log(f"wrote {path}")
    return content


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
    missing = [n for n in names if n not in (read_tuned(path)["policies"] if path.is_file() else {})]
    if missing:
        log(f"tuning {', '.join(missing)} for {path.stem} on validation environments (omgpt tune)")
        run_tuning(task_name, task_options, missing, horizon, log=log)
