"""``omgpt evaluate``: roll out OMGPT and the benchmarks on the same fresh test environments.

Every policy faces the same environments, contexts and observation noise (common random numbers:
the task's generator is seeded per batch of runs, independently of the policy), so the differences
between curves come from decisions alone. Test environments come from their own seed, never from
the training stream.
"""
from __future__ import annotations

import torch
from tqdm.auto import tqdm

from analysis.report import write_report
from datamodules.history import stream_seed
from omgpt.errors import OMGPTError
from omgpt.policies import make_policy
from omgpt.rollout import History, rollout
from omgpt.tasks import TASKS, Task, make_episode_task, make_task


def evaluate_policies(
    task: Task,
    policies: dict[str, dict],
    runs: int,
    horizon: int,
    seed: int = 0,
    batch_size: int = 50,
    device: str | torch.device = "cpu",
    progress: bool = True,
) -> dict[str, History]:
    """Roll out each policy (``name -> options``) on ``runs`` test environments for ``horizon`` steps.

    Returns one :class:`History` per policy with all runs concatenated (on the CPU).
    """
    env_gen = torch.Generator(device=device).manual_seed(stream_seed(seed, 0))
    envs = task.sample_envs(runs, env_gen)
    chunks = [(lo, min(runs, lo + batch_size)) for lo in range(0, runs, batch_size)]
    results: dict[str, list[History]] = {name: [] for name in policies}
    bar = tqdm(total=len(policies) * runs, desc="evaluate", unit="run", disable=not progress)
    for name, options in policies.items():
        policy = make_policy(name, task, **options)
        bar.set_postfix_str(name)
        for i, (lo, hi) in enumerate(chunks):
            part = {k: v[lo:hi] for k, v in envs.items()}
            task_gen = torch.Generator(device=device).manual_seed(stream_seed(seed, 1, i))
            policy_gen = torch.Generator(device=device).manual_seed(stream_seed(seed, 2, i))
            results[name].append(rollout(task, part, policy, horizon, task_gen, policy_gen).to("cpu"))
            bar.update(hi - lo)
    bar.close()
    return {name: _concat(parts) for name, parts in results.items()}


def _concat(parts: list[History]) -> History:
    fields = ("contexts", "actions", "observations", "optimal_actions", "regrets", "suboptimality")
    joined = {f: torch.cat([getattr(p, f) for p in parts]) for f in fields}
    envs = {k: torch.cat([p.envs[k] for p in parts]) for k in parts[0].envs}
    return History(**joined, envs=envs)


def resolve_task_and_model(task_name: str | None, task_options: dict, ckpt: str | None, device: str):
    """``(task name, task options, trained model or None, default horizon)``; a checkpoint supplies
    its task and options (``task_options`` override them) and is checked against ``task_name``."""
    if ckpt is None:
        if task_name is None:
            raise OMGPTError("--task is required when no --ckpt is given")
        if task_name not in TASKS:
            make_task(task_name)  # raises the "unknown task" error
        return task_name, task_options, None, task_options.get("horizon", TASKS[task_name].cls.horizon)
    from omgpt.module import load_module

    module = load_module(ckpt, map_location=device)
    trained_on = module.hparams.task
    if task_name is not None and task_name != trained_on:
        raise OMGPTError(f"checkpoint {ckpt} was trained on task {trained_on!r}, not {task_name!r}")
    options = {**(module.hparams.task_options or {}), **task_options}
    return trained_on, options, module.model.to(device), module.hparams.horizon


def run_evaluation(
    task_name: str | None,
    task_options: dict,
    policies: list[str],
    ckpt: str | None,
    runs: int,
    horizon: int | None,
    window: int | None,
    seed: int,
    out: str,
    batch_size: int = 50,
    device: str = "cpu",
    progress: bool = True,
) -> dict:
    """What ``omgpt evaluate`` does: evaluate, print the table, write summary.json/curves.csv/regret.png."""
    if not policies:
        raise OMGPTError("--policies is empty")
    if len(set(policies)) != len(policies):
        raise OMGPTError(f"--policies names a policy twice: {','.join(policies)}")
    if "omgpt" in policies and ckpt is None:
        raise OMGPTError("policy 'omgpt' needs --ckpt PATH (a checkpoint written by omgpt fit)")
    task_name, task_options, model, default_horizon = resolve_task_and_model(task_name, task_options, ckpt, device)
    horizon = horizon or default_horizon
    task = make_episode_task(task_name, task_options, horizon)
    if model is not None and (task.feature_dim, task.action_dim) != (model.cfg.feature_dim, model.cfg.action_dim):
        raise OMGPTError(f"task options {task_options} change the token sizes the checkpoint was trained with")
    if model is not None and horizon > model.cfg.max_steps and (window is None or window > model.cfg.max_steps):
        raise OMGPTError(f"--horizon {horizon} exceeds the {model.cfg.max_steps} steps the model was trained for; pass --window <= {model.cfg.max_steps}")
    specs = {name: ({"model": model, "window": window} if name == "omgpt" else {}) for name in policies}
    for name in specs:  # fail on unknown / inapplicable names before any rollout starts
        make_policy(name, task, **specs[name])
    histories = evaluate_policies(task, specs, runs, horizon, seed, batch_size, device, progress)
    return write_report(histories, task=task.name, horizon=horizon, runs=runs, seed=seed, out=out)
