"""Rolling out policies on test environments: the one evaluation loop behind ``omgpt evaluate``, the
experiments, the demo, the reference-model cards and the benchmark tuning.

Every policy faces the same environments, contexts and observation noise (common random numbers:
the task's generator is seeded per batch of runs, independently of the policy), so the differences
between curves come from decisions alone. The environments come from ``seed`` alone: a test seed for
reported numbers, a validation seed for choices (:mod:`omgpt.seeding`).

The work is a list of independent units, one per (policy, batch of runs): a unit's generators are a
pure function of ``(seed, batch index)``, so the units can be played in any order and in any process.
``jobs > 1`` plays them in that many worker processes (one torch thread each) with the same numbers
as one process playing them in turn, at one thread (``benchmarks/evaluate_jobs.py`` measures the
speed-up).
"""

from __future__ import annotations

import multiprocessing
import signal
import sys

import torch
from tqdm.auto import tqdm

from omgpt import checks
from omgpt.errors import OMGPTError
from omgpt.policies import make_policy
from omgpt.policies.tuned import plays_as_base
from omgpt.rollout import History, rollout
from omgpt.seeding import EXPERIMENT_SEED, evaluation_streams, stream_seed
from omgpt.tasks import Task


BATCH_SIZE = 50  # runs rolled out together, by default


def evaluate_policies(
    task: Task,
    policies: dict[str, dict],
    runs: int,
    horizon: int,
    seed: int = EXPERIMENT_SEED,
    batch_size: int = BATCH_SIZE,
    device: str | torch.device = "cpu",
    progress: bool = True,
    jobs: int = 1,
) -> dict[str, History]:
    """Roll out each policy (``name -> options``) on ``runs`` test environments for ``horizon`` steps,
    in ``jobs`` processes (1: in this one).

    Returns one :class:`History` per policy with all runs concatenated (on the CPU).
    """
    if int(jobs) < 1:
        raise OMGPTError(f"jobs must be at least 1, got {jobs}")
    one = task.sample_envs(1, torch.Generator(device=device).manual_seed(0))
    checks.memory(
        runs * sum(v.element_size() * v.numel() for v in one.values()), f"drawing {runs} test environments", device
    )
    checks.memory(
        len(policies) * checks.history_bytes(task, runs, horizon),
        f"keeping {len(policies)} policies' histories of {runs} runs x {horizon} steps",
    )
    env_gen = torch.Generator(device=device).manual_seed(stream_seed(evaluation_streams(seed)[0], seed))
    envs = task.sample_envs(runs, env_gen)
    chunks = [(lo, min(runs, lo + batch_size)) for lo in range(0, runs, batch_size)]
    made = {name: make_policy(name, task, horizon, **options) for name, options in policies.items()}
    order = list(made)
    same_as = {}  # a -tuned policy whose constants are the paper's plays its base's rollout, bit for bit
    for name in order:
        base = name.removesuffix("-tuned")
        if base != name and base in order[: order.index(name)] and policies[base] == {} and plays_as_base(made[name]):
            same_as[name] = base
    # (a copy of each batch: a worker is sent that batch, not the storage of all the runs' environments)
    units = [
        (name, i, {k: v[lo:hi].clone() for k, v in envs.items()})
        for name in made
        if name not in same_as
        for i, (lo, hi) in enumerate(chunks)
    ]
    results: dict[str, list[History | None]] = {name: [None] * len(chunks) for name in made if name not in same_as}
    bar = tqdm(total=len(policies) * runs, desc="evaluate", unit="run", disable=not progress)
    bar.update(len(same_as) * runs)
    context = (task, {name: policies[name] for name in results}, horizon, seed, device)
    if jobs == 1:
        _set_worker(*context, policies=made)
        played = (_play(unit) for unit in units)
    else:
        pool = multiprocessing.get_context(_start_method(device)).Pool(min(jobs, len(units)), _init_worker, context)
        played = pool.imap_unordered(_play, units)
    try:
        for name, i, history in played:
            results[name][i] = history
            bar.set_postfix_str(name)
            bar.update(history.regrets.shape[0])
    finally:
        if jobs > 1:
            pool.terminate()  # at once: on an error or Ctrl-C, no unit goes on playing in the background
            pool.join()
        _worker.clear()
    bar.close()
    joined = {name: History.cat(parts) for name, parts in results.items()}
    return {name: joined[same_as.get(name, name)] for name in policies}


def _start_method(device) -> str:
    """Fork on a Linux CPU run: the workers start at once with the task and the policies' models
    already in memory (a spawned worker spends seconds importing torch and omgpt first), and -- as
    torch's DataLoader workers do -- run one thread, so the parent's OpenMP pool is never touched.
    Spawn elsewhere: CUDA cannot be used in a forked child, and macOS's system libraries are not fork-safe."""
    cpu = torch.device(device).type == "cpu"
    return "fork" if cpu and sys.platform == "linux" else "spawn"


# What a worker process needs to play units: the task, the policies (made once per process), the seed.
_worker: dict = {}


def _set_worker(
    task: Task, specs: dict[str, dict], horizon: int, seed: int, device, policies: dict | None = None
) -> None:
    _worker.update(task=task, specs=specs, horizon=horizon, seed=seed, device=device, policies=dict(policies or {}))


def _init_worker(*context) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle (it terminates the pool)
    torch.set_num_threads(1)  # the workers share the machine's cores between them
    _set_worker(*context)


def _play(unit: tuple[str, int, dict]) -> tuple[str, int, History]:
    """One unit: policy ``name`` on the ``i``-th batch of environments, with that batch's generators."""
    name, i, part = unit
    task, horizon, seed, device = _worker["task"], _worker["horizon"], _worker["seed"], _worker["device"]
    if name not in _worker["policies"]:
        _worker["policies"][name] = make_policy(name, task, horizon, **_worker["specs"][name])
    _, task_stream, policy_stream = evaluation_streams(seed)
    task_gen = torch.Generator(device=device).manual_seed(stream_seed(task_stream, seed, i))
    policy_gen = torch.Generator(device=device).manual_seed(stream_seed(policy_stream, seed, i))
    history = rollout(task, part, _worker["policies"][name], horizon, task_gen, policy_gen).to("cpu")
    # A NaN here (a diverged checkpoint, an option the task cannot use) would be averaged
    # into the report as a number, or written as invalid JSON: refuse it.
    checks.finite(
        f"policy {name!r} on task {task.name!r} {task.options() or ''}".rstrip(),
        actions=history.actions,
        observations=history.observations,
        regrets=history.regrets,
    )
    return name, i, history
