"""One training step of the demo's model beside another process: CPU time against wall-clock.

    python benchmarks/step_beside.py [--threads 1] [--steps 40] [--neighbours none,spin,matmul1,matmul2,matmul2-own]

Where does the demo's time go when something else runs? Each neighbour is started, given a second to
reach its loop, and a fresh process then times ``--steps`` training steps of the demo's network
(``configs/demo.yaml``; forward, loss, backward, AdamW on one pre-generated batch) on ``--threads``
intra-op threads (OpenMP's passive wait, as the ``omgpt`` command sets it):

* ``none``: nothing beside it;
* ``spin``: one spinning Python process (any single-threaded job);
* ``matmul1`` / ``matmul2``: a torch matmul loop on one / two threads (a user's other torch job;
  ``matmul2`` is ``benchmarks/threads.py``'s busy process), started from this process's session;
* ``matmul2-own``: the two-thread loop in a session of its own (``setsid``: a job started from another
  terminal), which Linux's autogroup schedules as a group against this session.

CPU-ms per step is the work; wall-ms over CPU-ms is the share of a core the step got. On two CPUs a
one-thread step beside ``matmul2`` gets two thirds of a core (three runnable threads, time shared per
thread), and beside ``matmul2-own`` a whole one. Measured results: ``benchmarks/RESULTS.md``, "The demo's
heads and length".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from step_cost import demo_step  # noqa: E402  (the same step as the step-cost study)
from threads import BUSY, neighbour  # noqa: E402  (the same two-thread busy process as the thread study)
from omgpt.entry import Integer, Names, entry_point, script_parser

NEIGHBOURS = {
    "none": None,
    "spin": ("while True:\n    pass\n", False),
    "matmul1": (BUSY.replace("set_num_threads(2)", "set_num_threads(1)"), False),
    "matmul2": (BUSY, False),
    "matmul2-own": (BUSY, True),
}


def child(threads: int, steps: int) -> None:
    """In the timed process: ``steps`` demo training steps; prints ``{"cpu_ms": ..., "wall_ms": ...}``."""
    import torch

    from omgpt.timing import demo_config

    torch.set_num_threads(threads)
    cfg = demo_config()
    step = demo_step(cfg, cfg["data"]["batch_size"])
    for _ in range(5):
        step()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(steps):
        step()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(json.dumps({"cpu_ms": 1000 * cpu / steps, "wall_ms": 1000 * wall / steps}))


@entry_point
def main(argv: list[str] | None = None) -> dict:
    p = script_parser(__file__, __doc__)
    p.add_argument("--threads", type=Integer(1, 256), default=1)
    p.add_argument("--steps", type=Integer(1, 1_000_000), default=40)
    p.add_argument(
        "--neighbours",
        type=Names(NEIGHBOURS),
        default=",".join(NEIGHBOURS),
        help=f"comma-separated among {list(NEIGHBOURS)}",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.threads, args.steps)
        return {}
    names = args.neighbours.split(",")
    if bad := [n for n in names if n not in NEIGHBOURS]:
        p.error(f"unknown neighbour(s) {bad}: choose among {list(NEIGHBOURS)}")
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    results = {}
    print(f"{'beside':12} {'CPU-ms/step':>11} {'wall-ms/step':>12} {'wall / CPU':>10}   ({args.threads} thread(s))")
    for name in names:
        code, own_session = NEIGHBOURS[name] or (None, False)
        cmd = [sys.executable, __file__, "--child", "--threads", str(args.threads), "--steps", str(args.steps)]
        with neighbour(code, own_session):
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
        r = results[name] = json.loads(out.strip().splitlines()[-1])
        print(f"{name:12} {r['cpu_ms']:11.1f} {r['wall_ms']:12.1f} {r['wall_ms'] / r['cpu_ms']:10.2f}", flush=True)
    return results


if __name__ == "__main__":
    sys.exit(main())
