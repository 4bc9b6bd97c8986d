"""Pre-training data generation speed: batched rollouts vs a per-environment Python loop, per task.

    python benchmarks/datagen.py [--batch 1024] [--horizon 100] [--loop-envs 16] [--tasks a,b]

For every task, times the noisy-oracle rollout of ``--batch`` environments at once (what the
DataModule does) and the same rollout done one environment at a time for ``--loop-envs``
environments, and prints histories/s for both and their ratio, measured in this one run.
"""

from __future__ import annotations

import sys
import inspect
import time

import torch

from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.tasks import TASKS, make_task
from omgpt.entry import Integer, Names, entry_point, script_parser


def histories_per_second(task, n_envs: int, batch: int, horizon: int, seed: int = 0) -> float:
    """Noisy-oracle histories per second when ``n_envs`` environments are rolled out ``batch`` at a time."""
    g = torch.Generator().manual_seed(seed)
    policy = make_policy("noisy-oracle", task)
    envs = task.sample_envs(n_envs, g)
    rollout(task, {k: v[:batch] for k, v in envs.items()}, policy, min(horizon, 5), g)  # warm-up
    start = time.perf_counter()
    for lo in range(0, n_envs, batch):
        rollout(task, {k: v[lo : lo + batch] for k, v in envs.items()}, policy, horizon, g)
    return n_envs / (time.perf_counter() - start)


@entry_point
def main(argv: list[str] | None = None) -> None:
    p = script_parser(__file__, __doc__)
    p.add_argument("--batch", type=Integer(1, 1_000_000), default=1024)
    p.add_argument("--horizon", type=Integer(1, 100_000), default=100)
    p.add_argument("--loop-envs", type=Integer(1, 1_000_000), default=16, help="environments timed one at a time")
    p.add_argument("--tasks", type=Names(lambda: sorted(TASKS)), default=",".join(sorted(TASKS)))
    p.add_argument("--threads", type=Integer(1, 256), default=1, help="torch intra-op threads")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    print(f"noisy-oracle rollouts, T = {a.horizon}, {a.threads} thread(s)")
    print(f"{'task':<36} {'batched (B=' + str(a.batch) + ')':>18} {'per-env loop':>14} {'speed-up':>9}")
    for name in a.tasks.split(","):
        takes_horizon = "horizon" in inspect.signature(TASKS[name].cls.__init__).parameters
        options = {"horizon": a.horizon} if takes_horizon else {}
        task = make_task(name, **options)
        batched = histories_per_second(task, a.batch, a.batch, a.horizon)
        looped = histories_per_second(task, a.loop_envs, 1, a.horizon)
        print(f"{name:<36} {batched:>14.0f}/s {looped:>12.1f}/s {batched / looped:>8.0f}x")


if __name__ == "__main__":
    sys.exit(main())
