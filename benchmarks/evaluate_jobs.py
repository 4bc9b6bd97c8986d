"""``omgpt evaluate --jobs N``: wall-clock of an evaluation in one process against N worker processes.

    python benchmarks/evaluate_jobs.py [--quick] [--jobs 2] [--runs 100] [--horizon 50] [--batch-size 25]
        [--policies omgpt,alg-star,erm,fai,oracle] [--repeats 1]

The demo's evaluation (newsvendor, T = 50: OMGPT -- here the demo's model freshly initialised, which
costs the same as a trained one --, alg-star, the paper's benchmarks and the oracle) through
:func:`omgpt.evaluation.evaluate_policies` with ``jobs=1`` (this process, one thread) and
``jobs=N`` (N worker processes, one thread each, start-up included: forked on a Linux CPU run), alternating, ``--repeats``
times. It prints each arm's best wall-clock seconds and their ratio, measured in this one run, and
checks that both arms returned the same histories bit for bit. Wall-clock is the measure here: the
point is using more cores, so the speed-up is bounded by the cores that are free (2 on the project's
machine; less when other work runs). ``--quick``: 40 runs in batches of 10, without alg-star.
"""

from __future__ import annotations

import sys
import time
from dataclasses import fields

import torch

from omgpt.evaluation import evaluate_policies
from omgpt.policies import POLICIES
from omgpt.tasks import make_episode_task
from omgpt.timing import demo_config, demo_module
from omgpt.entry import Integer, Jobs, Names, entry_point, script_parser


def timed(task, specs, runs, horizon, batch_size, jobs):
    start = time.perf_counter()
    histories = evaluate_policies(task, specs, runs, horizon, seed=0, batch_size=batch_size, progress=False, jobs=jobs)
    return time.perf_counter() - start, histories


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(getattr(a[n], f.name), getattr(b[n], f.name)) for n in a for f in fields(a[n]) if f.name != "envs"
    )


@entry_point
def main(argv: list[str] | None = None) -> dict:
    p = script_parser(__file__, __doc__)
    p.add_argument("--quick", action="store_true", help="40 runs in batches of 10, without alg-star")
    p.add_argument("--jobs", type=Jobs(), default=2)
    p.add_argument("--runs", type=Integer(1, 1_000_000), default=100)
    p.add_argument("--horizon", type=Integer(1, 100_000), default=50)
    p.add_argument("--batch-size", type=Integer(1, 1_000_000), default=25)
    p.add_argument("--policies", type=Names(lambda: sorted(POLICIES)), default="omgpt,alg-star,erm,fai,oracle")
    p.add_argument("--repeats", type=Integer(1, 1000), default=1)
    a = p.parse_args(argv)
    if a.quick:
        a.runs, a.batch_size, a.policies = 40, 10, ",".join(n for n in a.policies.split(",") if n != "alg-star")
    torch.set_num_threads(1)
    cfg = demo_config()["model"]
    task = make_episode_task(cfg["task"], cfg.get("task_options") or {}, a.horizon)
    specs = {n: ({"model": demo_module().model} if n == "omgpt" else {}) for n in a.policies.split(",")}
    print(
        f"evaluate_policies on {task.name}, {a.runs} runs x T = {a.horizon} in batches of {a.batch_size}, "
        f"policies {a.policies}: jobs=1 vs jobs={a.jobs}",
        flush=True,
    )
    best = {1: float("inf"), a.jobs: float("inf")}
    for r in range(a.repeats):
        for jobs in (1, a.jobs):
            seconds, histories = timed(task, specs, a.runs, a.horizon, a.batch_size, jobs)
            if jobs == 1:
                reference = histories
            elif not same(reference, histories):
                raise SystemExit(f"jobs={jobs} returned other histories than jobs=1")
            best[jobs] = min(best[jobs], seconds)
            print(f"  repeat {r + 1}: jobs={jobs}: {seconds:.1f} s", flush=True)
    ratio = best[1] / best[a.jobs]
    print(f"jobs=1 {best[1]:.1f} s, jobs={a.jobs} {best[a.jobs]:.1f} s: speed-up {ratio:.2f}x (histories identical)")
    return {"seconds": best, "speedup": ratio}


if __name__ == "__main__":
    sys.exit(main())
