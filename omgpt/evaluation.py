"""Rolling out policies on test environments: the one evaluation loop behind ``omgpt evaluate``, the
experiments, the demo, the reference-model cards and the benchmark tuning.

Every policy faces the same environments, contexts and observation noise (common random numbers:
the task's generator is seeded per batch of runs, independently of the policy), so the differences
between curves come from decisions alone. The environments come from ``seed`` alone: a test seed for
reported numbers, a validation seed for choices (:mod:`omgpt.seeding`).
"""
from __future__ import annotations

import torch
from tqdm.auto import tqdm

from omgpt import checks
from omgpt.policies import make_policy
from omgpt.policies.tuned import plays_as_base
from omgpt.rollout import History, rollout
from omgpt.seeding import evaluation_streams, stream_seed
from omgpt.tasks import Task


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
    one = task.sample_envs(1, torch.Generator(device=device).manual_seed(0))
    checks.memory(runs * sum(v.element_size() * v.numel() for v in one.values()), f"drawing {runs} test environments", device)
    checks.memory(len(policies) * checks.history_bytes(task, runs, horizon), f"keeping {len(policies)} policies' histories of {runs} runs x {horizon} steps")
    env_stream, task_stream, policy_stream = evaluation_streams(seed)
    env_gen = torch.Generator(device=device).manual_seed(stream_seed(env_stream, seed))
    envs = task.sample_envs(runs, env_gen)
    chunks = [(lo, min(runs, lo + batch_size)) for lo in range(0, runs, batch_size)]
    results: dict[str, list[History]] = {name: [] for name in policies}
    bar = tqdm(total=len(policies) * runs, desc="evaluate", unit="run", disable=not progress)
    for name, options in policies.items():
        policy = make_policy(name, task, horizon, **options)
        base = name.removesuffix("-tuned")
        if base != name and results.get(base) and policies.get(base) == {} and plays_as_base(policy):
            results[name] = results[base]  # the tuned constants are the paper's: the same rollout, bit for bit
            bar.update(runs)
            continue
        bar.set_postfix_str(name)
        for i, (lo, hi) in enumerate(chunks):
            part = {k: v[lo:hi] for k, v in envs.items()}
            task_gen = torch.Generator(device=device).manual_seed(stream_seed(task_stream, seed, i))
            policy_gen = torch.Generator(device=device).manual_seed(stream_seed(policy_stream, seed, i))
            history = rollout(task, part, policy, horizon, task_gen, policy_gen).to("cpu")
            # A NaN here (a diverged checkpoint, an option the task cannot use) would be averaged
            # into the report as a number, or written as invalid JSON: refuse it.
            checks.finite(f"policy {name!r} on task {task.name!r} {task.options() or ''}".rstrip(), actions=history.actions,
                          observations=history.observations, regrets=history.regrets)
            results[name].append(history)
            bar.update(hi - lo)
    bar.close()
    return {name: History.cat(parts) for name, parts in results.items()}
