"""``omgpt evaluate`` and ``omgpt demand-prediction``: roll out OMGPT and the benchmarks on the same fresh test environments
(:func:`omgpt.evaluation.evaluate_policies`: common random numbers), from a test seed only
(:mod:`omgpt.seeding`: validation seeds are for choices, never for reported numbers).

:func:`run_demand_prediction` (``omgpt demand-prediction``) is the paper's demand-prediction study
(§5.1.6): a checkpoint's observation head against ridge regression, per number of observed samples.
"""

from __future__ import annotations

from pathlib import Path

import torch

from omgpt.analysis.observation_head import DEMAND_FILES, demand_report, ridge_predictions
from omgpt.analysis.newsvendor_data import evaluation_costs, format_costs
from omgpt.analysis.report import BOOTSTRAP_SAMPLES, REPORT_FILES, write_report
from omgpt import checks, seeding
from omgpt.errors import OMGPTError
from omgpt.evaluation import evaluate_policies
from omgpt.files import output_folder
from omgpt.model import load_model
from omgpt.policies import make_policy
from omgpt.resources import code_version
from omgpt.rollout import History, mean_observations
from omgpt.tasks import TASKS, Task, make_episode_task, make_task


def resolve_task_and_model(task_name: str | None, task_options: dict, ckpt: str | None, device: str):
    """``(task name, task options, trained model or None, default horizon)``; a checkpoint supplies
    its task and options (``task_options`` override them) and is checked against ``task_name``."""
    if ckpt is None:
        if task_name is None:
            raise OMGPTError("--task is required when no --ckpt is given")
        if task_name not in TASKS:
            make_task(task_name)  # raises the "unknown task" error
        return task_name, task_options, None, task_options.get("horizon", TASKS[task_name].cls.default_horizon)
    model, _, hparams = load_model(ckpt, map_location=device)
    trained_on = hparams["task"]
    if task_name is not None and task_name != trained_on:
        raise OMGPTError(f"checkpoint {ckpt} was trained on task {trained_on!r}, not {task_name!r}")
    options = {**(hparams.get("task_options") or {}), **task_options}
    return trained_on, options, model, hparams["horizon"]


def check_token_sizes(task: Task, task_options: dict, model) -> None:
    """A model reads and writes tokens of its training task's sizes: test-task options may shift the
    environments (noise, shifts, demand types) but not change ``feature_dim`` / ``action_dim``."""
    if (task.feature_dim, task.action_dim) != (model.cfg.feature_dim, model.cfg.action_dim):
        raise OMGPTError(f"task options {task_options} change the token sizes the checkpoint was trained with")


def omgpt_options(task: Task, task_options: dict, model, horizon: int, window: int | None = None) -> dict:
    """The ``omgpt`` policy's options for ``model`` playing ``horizon`` steps of ``task``. Past the
    length it was trained for, the context window defaults to that length (the paper's horizon
    generalisation: act on the last ``W`` steps)."""
    check_token_sizes(task, task_options, model)
    if window is None and horizon > model.cfg.max_steps:
        window = model.cfg.max_steps
    if window is not None and window > model.cfg.max_steps:
        raise OMGPTError(f"--window {window} exceeds the {model.cfg.max_steps} steps the model was trained for")
    return {"model": model, "window": window}


DEFAULT_RUNS = 100  # test environments of a prior (a data task's part plays each of its windows once)


def run_evaluation(
    task_name: str | None,
    task_options: dict,
    policies: list[str],
    ckpt: str | None,
    runs: int | None,
    horizon: int | None,
    window: int | None,
    seed: int,
    out: str,
    batch_size: int = 50,
    device: str = "cpu",
    progress: bool = True,
    force: bool = False,
    jobs: int = 1,
    alg_star_sampler: str | None = None,
) -> dict:
    """What ``omgpt evaluate`` does: evaluate, print the table, write summary.json/curves.csv/regret.png.
    Work estimated past :data:`omgpt.checks.MAX_LOOP_STEPS` is refused unless ``force``; work estimated
    past the free memory (the histories, the report's curves and bootstrap) is refused always.
    ``alg_star_sampler``: ``alg-star``'s posterior sampler (:class:`~omgpt.policies.alg_star.AlgStar`;
    default ``"auto"``); the one that played is recorded in summary.json as ``alg_star_sampler``.

    ``runs``: test environments, default :data:`DEFAULT_RUNS`. A data task's part is a finite set of
    windows (real demand): by default each is played once, and ``runs`` beyond that count is refused
    rather than capped or cycled: a window played again is the same demand again, so its copies add
    nothing while the interval over runs counts them as independent draws (seven windows at 100 runs:
    each ~14 times, the 90% interval sqrt(100 / 7) = 3.8x too narrow), and an explicit number the
    command cannot honour is better refused than silently changed. Fewer runs play a random subset
    of the windows; either way one line says what is played."""
    if not policies:
        raise OMGPTError("--policies is empty")
    if len(set(policies)) != len(policies):
        raise OMGPTError(f"--policies names a policy twice: {','.join(policies)}")
    if "omgpt" in policies and ckpt is None:
        raise OMGPTError("policy 'omgpt' needs --ckpt PATH (a checkpoint written by omgpt fit)")
    if window is not None and "omgpt" not in policies:  # the benchmarks read the whole history
        raise OMGPTError(f"--window applies to the omgpt policy only, and --policies {','.join(policies)} has none")
    if alg_star_sampler is not None and not alg_star_sampler.strip():  # not silently "auto"
        raise OMGPTError("--alg_star_sampler is empty: name a sampler (auto, smc, gaussian, collapsed) or leave it out")
    if alg_star_sampler is not None and "alg-star" not in policies:
        raise OMGPTError(f"--alg_star_sampler applies to alg-star, and --policies {','.join(policies)} has none")
    seeding.check_test_seed(seed, "--seed")
    given = task_options  # what the user named, before a checkpoint's own options fill in the rest
    task_name, task_options, model, default_horizon = resolve_task_and_model(task_name, task_options, ckpt, device)
    check = getattr(TASKS[task_name].cls, "check_evaluation_options", None)  # data tasks: an explicit, held-out part
    if check is not None:
        check(given)
    horizon = horizon or default_horizon
    task = make_episode_task(task_name, task_options, horizon)
    runs = _runs(task, runs)
    gpt_options = omgpt_options(task, task_options, model, horizon, window) if model is not None else {}
    if model is not None and window is None and gpt_options["window"] is not None:
        print(
            f"omgpt evaluate: horizon {horizon} > the model's {gpt_options['window']} steps; using context window {gpt_options['window']}"
        )
    specs = {name: (gpt_options if name == "omgpt" else {}) for name in policies}
    sampler = None
    if "alg-star" in policies:  # "auto" resolved here, so the summary names the sampler that played
        sampler = make_policy("alg-star", task, horizon, sampler=alg_star_sampler or "auto").sampler
        specs["alg-star"] = {"sampler": sampler}
    for name in specs:  # fail on unknown / inapplicable names (and missing tunings) before any rollout starts
        make_policy(name, task, horizon, **specs[name])
    what = f"evaluating {len(policies)} policies on {runs} runs x {horizon} steps"
    checks.memory(
        len(policies) * checks.history_bytes(task, runs, horizon)
        + checks.report_bytes(runs, horizon, BOOTSTRAP_SAMPLES),
        what,
    )
    checks.rollout_time(checks.loop_steps(len(policies), runs, horizon, batch_size), what, force)
    with output_folder(out, REPORT_FILES, "omgpt evaluate") as folder:
        histories = evaluate_policies(task, specs, runs, horizon, seed, batch_size, device, progress, jobs)
        real = getattr(task, "data", None) is not None  # real demand: its headline metric, clustered intervals
        extra = {}
        if real:
            extra["real_demand"] = evaluation_costs(task, histories, seed)
        if sampler is not None:
            extra["alg_star_sampler"] = sampler
        summary = write_report(
            histories,
            task=task.name,
            horizon=horizon,
            runs=runs,
            seed=seed,
            out=folder,
            task_options=task.options(),
            stream={"batch_size": batch_size, "device": torch.device(device).type},
            extra=extra or None,
        )
        if real:
            print(format_costs(summary["real_demand"]))
    print(f"wrote {', '.join(str(Path(out) / f) for f in REPORT_FILES)}")
    return summary


def _runs(task: Task, runs: int | None) -> int:
    """The runs to play (:func:`run_evaluation`): a data task's windows each once, or ``runs``."""
    windows = getattr(task, "windows", None)  # a data task's part: its finite set of windows
    if windows is None:
        return DEFAULT_RUNS if runs is None else runs
    where = f"the {task.part} part's {windows} windows"
    if runs is not None and runs > windows:
        raise OMGPTError(
            f"--runs {runs} is more than {where}: a window played again adds no information and narrows the "
            f"interval falsely; leave --runs out to play each window once"
        )
    if runs is None or runs == windows:
        print(f"omgpt evaluate: {where}, each played once")
        return windows
    print(f"omgpt evaluate: {runs} of {where}, drawn at random, each played once (leave --runs out for all)")
    return runs


@torch.no_grad()
def observation_predictions(model, history: History, window: int | None = None, batch_size: int = 256) -> torch.Tensor:
    """The observation head's ``Ô_t`` at every action token of ``history``, ``(B, T, obs_dim)`` on the
    CPU, each from the last ``min(W, t+1)`` steps as the windowed model sees them (read as a history of
    their own, :func:`~omgpt.rollout.tokens_at`; the whole history without a window)."""
    device = next(model.parameters()).device
    model.eval()
    T = history.horizon
    W = min(window or T, T)
    out = []
    for lo in range(0, history.contexts.shape[0], batch_size):
        part = history.apply(lambda v: v[lo : lo + batch_size].to(device))
        # one pass predicts every step of the first window; each later step needs its own window
        preds = [model.predict_observations(*part.tokens(t=W - 1))]
        preds += [model.predict_observations(*part.tokens(W, t, restart=True))[:, -1:] for t in range(W, T)]
        out.append(torch.cat(preds, dim=1).float().cpu())
    return torch.cat(out)


def run_demand_prediction(
    ckpt: str,
    task_options: dict,
    runs: int,
    horizon: int | None,
    window: int | None,
    seed: int,
    out: str,
    policy: str = "omgpt",
    batch_size: int = 50,
    device: str = "cpu",
    progress: bool = True,
    task_name: str | None = None,
    force: bool = False,
    jobs: int = 1,
) -> dict:
    """Demand prediction as a by-product (paper §5.1.6): roll out ``policy`` (default: the checkpoint's
    model itself) on fresh pricing environments, then compare the model's observation-head prediction
    of the demand at the played price after ``n`` samples with ridge regression on the same samples,
    per ``n``. Writes ``demand_prediction.json`` / ``.png`` into ``out`` (see
    :mod:`analysis.observation_head`). Needs a pricing checkpoint trained with ``obs_head``;
    ``task_name``, if given, must be the checkpoint's task (``task_options`` override its options, e.g.
    ``demand_types=square`` for a mixed-demand checkpoint)."""
    if ckpt is None:
        raise OMGPTError(
            "demand prediction needs --ckpt PATH (a pricing checkpoint trained with --model.network.obs_head true)"
        )
    task_name, task_options, model, default_horizon = resolve_task_and_model(task_name, task_options, ckpt, device)
    if not model.cfg.obs_head:
        raise OMGPTError(f"checkpoint {ckpt} has no observation head; pre-train with --model.network.obs_head true")
    horizon = horizon or default_horizon
    task = make_episode_task(task_name, task_options, horizon)
    if task.discrete or (task.obs_dim, task.action_dim) != (1, 1) or task.context_dim == 0:
        raise OMGPTError(
            f"demand prediction needs a scalar observation, a scalar continuous action and a context (as pricing); "
            f"checkpoint {ckpt} was trained on {task_name!r}"
        )
    check_token_sizes(task, task_options, model)
    if horizon < 2:
        raise OMGPTError("demand prediction needs --horizon >= 2 (one sample to learn from, one to predict)")
    if horizon > model.cfg.max_steps and (window is None or window > model.cfg.max_steps):
        raise OMGPTError(
            f"--horizon {horizon} exceeds the {model.cfg.max_steps} steps the model was trained for; pass --window <= {model.cfg.max_steps}"
        )
    options = {"model": model, "window": window} if policy == "omgpt" else {}
    make_policy(policy, task, **options)  # an unknown or inapplicable name fails before any rollout
    what = f"demand prediction on {runs} runs x {horizon} steps"
    checks.memory(
        checks.history_bytes(task, runs, horizon) + checks.report_bytes(runs, horizon, BOOTSTRAP_SAMPLES), what
    )
    checks.rollout_time(checks.loop_steps(1, runs, horizon, batch_size), what, force)
    with output_folder(out, DEMAND_FILES, "omgpt demand-prediction") as folder:
        history = evaluate_policies(task, {policy: options}, runs, horizon, seed, batch_size, device, progress, jobs)[
            policy
        ]
        predictions = {
            "omgpt": observation_predictions(model, history, window)[..., 0].double().numpy(),
            "ridge": ridge_predictions(
                history.contexts.double().numpy(),
                history.actions.double().numpy(),
                history.observations.double().numpy(),
            ),
        }
        meta = {
            "task": task_name,
            "task_options": task_options,
            "horizon": horizon,
            "runs": runs,
            "seed": seed,
            "batch_size": batch_size,
            "device": torch.device(device).type,
            "policy": policy,
            "window": window,
            "ckpt": str(ckpt),
            "code_version": code_version(),
        }
        expected = mean_observations(task, history)[..., 0].double().numpy()
        summary = demand_report(predictions, expected, history.observations[..., 0].double().numpy(), meta, folder)
    print(f"wrote {', '.join(str(Path(out) / f) for f in DEMAND_FILES)}")
    return summary
