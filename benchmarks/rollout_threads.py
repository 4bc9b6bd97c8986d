"""Online rollouts on one CPU thread against two: why some policies declare ``cpu_threads = 1``.

    python benchmarks/rollout_threads.py [--runs 100] [--repeats 3] [--ckpt CKPT]

A rollout plays one step of every environment at a time, so each policy's per-step work is small:
one decoded token per environment for OMGPT (its KV cache), a few hundred particles per episode for
``alg-star``'s structured samplers, one small LP per episode for ERM. A second intra-op thread then
costs a fork and a join per parallel region, more than it saves. :func:`omgpt.rollout.rollout` plays a
policy with a ``cpu_threads`` attribute on at most that many threads (:func:`omgpt.threads.at_most`).
This script times each case's rollouts with the limit and without it in one process, alternating (``--repeats`` rounds,
the best of each), with two intra-op threads configured and OpenMP's wait passive (as the ``omgpt``
command runs), and prints two threads / one thread: above 1, one thread is faster. ``smc`` (4,096
particles) is the control that keeps both threads.

Run it on an idle machine (a neighbour's load falls on both arms, but changes their ratio).
"""

from __future__ import annotations

import sys

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP, as the omgpt command

import contextlib  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from omgpt import threads  # noqa: E402
from omgpt.evaluation import evaluate_policies  # noqa: E402
from omgpt.model import load_model  # noqa: E402
from omgpt.tasks import make_task  # noqa: E402
from omgpt.entry import Checkpoint, Integer, entry_point, script_parser

ROOT = Path(__file__).resolve().parents[1]


def timed(task, spec: dict, runs: int, horizon: int, limit: bool) -> float:
    """Seconds to play ``runs`` test episodes of one policy, its thread limit honoured or not."""
    honour = threads.at_most
    if not limit:  # the rollout looks the limit up in omgpt.threads: make it a no-op
        threads.at_most = lambda n: contextlib.nullcontext()
    try:
        start = time.perf_counter()
        evaluate_policies(task, spec, runs, horizon, 5, 50, "cpu", False, 1)
        return time.perf_counter() - start
    finally:
        threads.at_most = honour


@entry_point
def main(argv: list[str] | None = None) -> dict:
    p = script_parser(__file__, __doc__)
    p.add_argument("--runs", type=Integer(1, 1_000_000), default=100)
    p.add_argument("--repeats", type=Integer(1, 1000), default=3)
    p.add_argument(
        "--ckpt",
        type=Checkpoint(),
        default=str(ROOT / "pretrained" / "newsvendor"),
        help="an OMGPT checkpoint or model folder of the newsvendor",
    )
    a = p.parse_args(argv)
    torch.set_num_threads(2)
    model = load_model(a.ckpt).model
    news, pricing = make_task("newsvendor"), make_task("pricing")
    cases = {
        "omgpt (newsvendor reference model)": (news, {"omgpt": {"model": model}}),
        "alg-star collapsed (newsvendor)": (news, {"alg-star": {"sampler": "collapsed"}}),
        "alg-star gaussian (pricing)": (pricing, {"alg-star": {"sampler": "gaussian"}}),
        "erm (newsvendor)": (news, {"erm": {}}),
        "alg-star smc (pricing; control)": (pricing, {"alg-star": {"sampler": "smc"}}),
    }
    print(f"{a.runs} episodes x T = 50, batches of 50; two intra-op threads configured, OpenMP wait passive")
    print(f"{'policy':38} {'two threads':>12} {'one thread':>11} {'two / one':>10}")
    result = {}
    for label, (task, spec) in cases.items():
        two, one = [], []
        for _ in range(a.repeats):
            two.append(timed(task, spec, a.runs, 50, False))
            one.append(timed(task, spec, a.runs, 50, True))
        result[label] = {"two": min(two), "one": min(one), "ratio": min(two) / min(one)}
        print(f"{label:38} {min(two):10.2f} s {min(one):9.2f} s {min(two) / min(one):9.2f}x", flush=True)
    return result


if __name__ == "__main__":
    sys.exit(main())
