"""``omgpt demo`` end to end, wall-clock: on the machine as it is ("idle") and beside one busy process.

    python benchmarks/demo_wall.py [--repeats 1] [--busy matmul|spin] [--session same|own]
        [--max-steps N --runs N] [--json FILE] [--keep DIR]

The target it checks: the demo within 3 minutes on an idle 2-core machine, and within 1.5x that beside
one busy process. Each run is the README's command, ``omgpt demo`` (its own thread choice:
:mod:`omgpt.threads`), into a temporary folder, timed from the process start to its exit (imports,
training, the evaluation against every benchmark). The busy process is ``benchmarks/threads.py``'s
2-thread torch matmul loop (``--busy matmul``: a user's other torch job at torch's default threads) or
one spinning Python process (``--busy spin``: any single-threaded job). ``--session``: the busy process
runs in the demo's session (``same``, the default: both started from one script, the worst case) or in
a session of its own (``own``: a job started from another terminal, tmux pane or ssh login). Where the
kernel groups CPU time by session (Linux's autogroup, ``/proc/sys/kernel/sched_autogroup_enabled``),
each session then gets an equal share of the CPUs whatever its thread count, so a 2-thread neighbour
takes one core of two, not two thirds of the machine. The runs alternate, idle then
loaded, ``--repeats`` times, and the ratio printed is loaded / idle from this one run (the best of each).
The demo is deterministic, so every run trains the same model and prints the same numbers.

The machine's other load is not controlled: stop other jobs first (a run beside them is "loaded" twice).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from threads import BUSY, neighbour  # noqa: E402  (the same busy process as the thread study)
from omgpt.entry import Integer, OutputFile, OutputFolder, entry_point, script_parser

SPIN = "while True:\n    pass\n"


def run_demo(max_steps: int | None, runs: int | None, keep: str | None = None) -> tuple[float, str]:
    """One ``omgpt demo`` in a fresh folder (``keep``, or a temporary one): (wall seconds, its last lines)."""
    with tempfile.TemporaryDirectory() as scratch:
        out = keep or scratch
        cmd = [sys.executable, "-m", "omgpt", "demo", "--out", out]
        for flag, value in (("--max_steps", max_steps), ("--runs", runs)):
            if value is not None:
                cmd += [flag, str(value)]
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMGPT_THREADS")}
        start = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"omgpt demo failed ({done.returncode}):\n{done.stderr[-2000:]}")
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return seconds, "\n".join(lines[-4:])


@entry_point
def main(argv: list[str] | None = None) -> dict:
    p = script_parser(__file__, __doc__)
    p.add_argument("--repeats", type=Integer(1, 1000), default=1)
    p.add_argument("--busy", choices=("matmul", "spin"), default="matmul")
    p.add_argument("--session", choices=("same", "own"), default="same", help="the busy process's session")
    p.add_argument(
        "--max-steps", type=Integer(1, 10_000_000), default=None, help="a shorter demo (a smoke run of this script)"
    )
    p.add_argument(
        "--runs", type=Integer(1, 1_000_000), default=None, help="fewer test environments (a smoke run of this script)"
    )
    p.add_argument("--json", type=OutputFile(), default=None)
    p.add_argument(
        "--keep", type=OutputFolder(), default=None, help="the first idle run's output folder (else a temporary one)"
    )
    args = p.parse_args(argv)
    code = BUSY if args.busy == "matmul" else SPIN
    times: dict[str, list[float]] = {"idle": [], "loaded": []}
    tail = ""
    for _ in range(args.repeats):
        for arm in ("idle", "loaded"):
            keep = args.keep if arm == "idle" and not times["idle"] else None
            with neighbour(code if arm == "loaded" else None, own_session=args.session == "own", settle=0.0):
                seconds, tail = run_demo(args.max_steps, args.runs, keep)
            times[arm].append(seconds)
            print(f"{arm:6} {seconds:6.0f} s", flush=True)
    best = {arm: min(ts) for arm, ts in times.items()}
    ratio = best["loaded"] / best["idle"]
    print(tail)
    print(
        f"omgpt demo: {best['idle']:.0f} s idle, {best['loaded']:.0f} s beside one busy process ({args.busy}, {args.session} session): "
        f"{ratio:.2f}x  [{os.cpu_count()} CPUs]"
    )
    result = {
        "busy": args.busy,
        "session": args.session,
        "max_steps": args.max_steps,
        "runs": args.runs,
        "seconds": times,
        "ratio": ratio,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    sys.exit(main())
