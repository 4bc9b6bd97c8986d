"""Benchmark suites: wall time of evaluating every policy, batched vs a per-environment loop.

    python benchmarks/policies.py [--runs 100] [--horizon 100] [--loop-envs 10] [--suites pricing,newsvendor]

For each suite (the task's benchmarks, plus ``alg-star`` where the task has it, plus the oracle)
this times ``runs`` environments rolled out together (what ``omgpt evaluate`` does) and the same
policy on ``loop-envs`` environments one at a time (scaled to ``runs``), and prints both wall times
and the speed-up, measured in this one run.
"""

from __future__ import annotations

import sys
import time

import torch

from omgpt.errors import OMGPTError
from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.tasks import TASKS, make_task
from omgpt.entry import Integer, Names, entry_point, script_parser


def seconds(task, policy_name: str, envs: dict, horizon: int, batch: int) -> float:
    """Wall time of rolling out ``envs`` ``batch`` at a time."""
    n = next(iter(envs.values())).shape[0]
    policy = make_policy(policy_name, task)
    start = time.perf_counter()
    for i, lo in enumerate(range(0, n, batch)):
        part = {k: v[lo : lo + batch] for k, v in envs.items()}
        rollout(
            task, part, policy, horizon, torch.Generator().manual_seed(i), torch.Generator().manual_seed(10_000 + i)
        )
    return time.perf_counter() - start


@entry_point
def main(argv: list[str] | None = None) -> None:
    p = script_parser(__file__, __doc__)
    p.add_argument("--runs", type=Integer(1, 1_000_000), default=100)
    p.add_argument("--horizon", type=Integer(1, 100_000), default=100)
    p.add_argument(
        "--loop-envs",
        type=Integer(1, 1_000_000),
        default=10,
        help="environments timed one at a time (scaled to --runs)",
    )
    p.add_argument("--suites", type=Names(lambda: sorted(TASKS)), default="pricing,newsvendor")
    p.add_argument("--threads", type=Integer(1, 256), default=1)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    print(
        f"{a.runs} runs x T = {a.horizon}, {a.threads} thread(s); per-env loop timed on {a.loop_envs} envs and scaled"
    )
    print(f"{'suite':<11} {'policy':<11} {'batched':>9} {'per-env loop':>13} {'speed-up':>9}")
    for suite in a.suites.split(","):
        task = make_task(suite)
        envs = task.sample_envs(a.runs, torch.Generator().manual_seed(0))
        names = [*task.benchmarks, "alg-star", "oracle"]
        total = 0.0
        for name in names:
            try:
                batched = seconds(task, name, envs, a.horizon, a.runs)
            except OMGPTError as e:  # e.g. a policy this task does not have
                print(f"{suite:<11} {name:<11} skipped: {e}")
                continue
            few = {k: v[: a.loop_envs] for k, v in envs.items()}
            looped = seconds(task, name, few, a.horizon, 1) * a.runs / a.loop_envs
            total += batched
            print(f"{suite:<11} {name:<11} {batched:>8.2f}s {looped:>12.1f}s {looped / batched:>8.1f}x")
        print(f"{suite:<11} {'all':<11} {total:>8.2f}s")


if __name__ == "__main__":
    sys.exit(main())
