"""``alg-star`` of this tree against ``alg-star`` of an older commit: CPU seconds and paired regret.

    python benchmarks/alg_star_vs_commit.py [--rev REV] [--tasks newsvendor,pricing] [--runs 1000]
        [--horizon 100] [--batch 50] [--seed 7] [--arm NAME=KEY=VALUE,...] [--rev-path DIR] [--json FILE]

The yardstick is the code of a commit, not an option of today's code, so each side runs in
its own single-threaded subprocess: ``--rev``'s ``omgpt`` package (``git archive``, put first on the
``PYTHONPATH``) plays its default ``alg-star``, and this tree plays each ``--arm`` (options of
``alg-star``, e.g. ``--arm fast=sampler=gaussian``; default: one arm ``now`` with today's defaults).
Every side plays the same environments (drawn once here, from the test seed ``--seed``) with the same
contexts and noise (each batch's task and policy generators seeded here and handed to every side):
common random numbers, so the regrets are paired run by run. The sides run one after the other, each
alone on one thread (``OMP_NUM_THREADS=1``); the time is the process's CPU time of its rollouts.

Prints per task: each side's CPU seconds per 100 episodes, its speed-up over ``--rev``, its mean
cumulative regret at the horizon and the 90% interval of the paired difference side - ``--rev``.
``--json FILE`` writes the same numbers. ``--rev-path DIR`` takes the yardstick's ``omgpt`` package from
``DIR`` instead of a commit (an installed release, another checkout). Without either, the yardstick is
the commit recorded as ``rev`` in ``benchmarks/alg_star_vs_history_replay.json``, the one of the table in
``benchmarks/RESULTS.md``: the code before ``alg-star``'s likelihood statistics (4,096 resample-move
particles, the history replayed in float32 at every move).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "benchmarks" / "alg_star_vs_history_replay.json"  # its "rev": the default yardstick


def worker(spec_path: str) -> None:
    """Play one side (run in a subprocess, whichever ``omgpt`` the ``PYTHONPATH`` finds first)."""
    import torch

    from omgpt.policies import make_policy
    from omgpt.rollout import rollout
    from omgpt.tasks import make_task

    torch.set_num_threads(1)
    spec = json.loads(Path(spec_path).read_text())
    data = torch.load(spec["data"], weights_only=True)  # tensors, lists and seeds only: no file runs code
    task = make_task(spec["task"])
    policy = make_policy("alg-star", task, **spec["options"])
    regrets, seconds = [], 0.0
    for envs, (task_seed, policy_seed) in zip(data["batches"], data["seeds"]):
        task_gen, policy_gen = torch.Generator().manual_seed(task_seed), torch.Generator().manual_seed(policy_seed)
        start = time.process_time()
        history = rollout(task, envs, policy, spec["horizon"], task_gen, policy_gen)
        seconds += time.process_time() - start
        regrets += history.regrets.sum(1).double().tolist()
    Path(spec["out"]).write_text(json.dumps({"seconds": seconds, "regrets": regrets}))


def parse_arm(text: str) -> tuple[str, dict]:
    """``NAME=KEY=VALUE,KEY=VALUE`` (or ``NAME`` alone: today's defaults) -> ``(NAME, options)``."""
    name, _, rest = text.partition("=")
    options = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            from omgpt.errors import OMGPTError

            raise OMGPTError(f"--arm {text!r}: expected NAME=KEY=VALUE,...")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return name, options


def run_side(pythonpath: str, spec: dict, tmp: Path, name: str) -> dict:
    spec_path = tmp / f"{name}-{spec['task']}.json"
    spec = {**spec, "out": str(tmp / f"{name}-{spec['task']}-out.json")}
    spec_path.write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": pythonpath, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    code = f"import runpy, sys; sys.argv = ['x', '--worker', {str(spec_path)!r}]; runpy.run_path({__file__!r}, run_name='__main__')"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=tmp)
    return json.loads(Path(spec["out"]).read_text())


def main(argv: list[str] | None = None) -> int:
    """The command line, under the contract of every entry point (``omgpt.entry``). This tree's
    ``omgpt`` is imported here, not at the top: a side's worker runs this file on the yardstick's."""
    from omgpt.entry import guarded

    return guarded(lambda: compare(parser().parse_args(argv)))


def parser():
    from omgpt.entry import InputFolder, Integer, Names, OutputFile, Seed, Text, script_parser
    from omgpt.seeding import EXPERIMENT_SEED
    from omgpt.tasks import TASKS

    p = script_parser(__file__, __doc__)
    p.add_argument(
        "--rev",
        type=Text(),
        default=None,
        help=f"the commit whose alg-star is the yardstick (default: {RECORDED.name}'s)",
    )
    p.add_argument(
        "--rev-path",
        type=InputFolder(),
        default=None,
        help="instead of --rev: a folder holding the yardstick's omgpt package",
    )
    p.add_argument("--tasks", type=Names(lambda: sorted(TASKS)), default="newsvendor,pricing")
    p.add_argument("--runs", type=Integer(1, 1_000_000), default=1000)
    p.add_argument("--horizon", type=Integer(1, 100_000), default=100)
    p.add_argument(
        "--batch", type=Integer(1, 1_000_000), default=50, help="episodes rolled out at once (omgpt evaluate's default)"
    )
    p.add_argument("--seed", type=Seed("test"), default=EXPERIMENT_SEED, help="the test seed of the environments")
    p.add_argument(
        "--arm", type=Text(), action="append", default=None, help="NAME=KEY=VALUE,... alg-star options of this tree"
    )
    p.add_argument("--json", type=OutputFile(), default=None, help="also write the numbers here")
    p.check(lambda a: setattr(a, "arms", dict(parse_arm(text) for text in (a.arm or ["now"]))))
    return p


def compare(a: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    import torch

    from omgpt.seeding import Stream, stream_seed
    from omgpt.tasks import make_task

    arms = a.arms
    if a.rev is None and not a.rev_path:  # the yardstick of the recorded table
        a.rev = json.loads(RECORDED.read_text())["rev"]
    report = {"rev": a.rev, "runs": a.runs, "horizon": a.horizon, "seed": a.seed, "tasks": {}}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        old_tree = Path(a.rev_path).resolve() if a.rev_path else tmp / "rev"
        if not a.rev_path:
            old_tree.mkdir()
            archive = subprocess.run(["git", "archive", a.rev, "omgpt"], cwd=ROOT, check=True, capture_output=True)
            subprocess.run(["tar", "-x", "-C", str(old_tree)], input=archive.stdout, check=True)
        a.rev = str(a.rev_path or a.rev)
        print(
            f"alg-star of {a.rev} vs this tree; {a.runs} runs, T = {a.horizon}, batches of {a.batch}, one thread each"
        )
        for name in a.tasks.split(","):
            task = make_task(name)
            gen = torch.Generator().manual_seed(stream_seed(Stream.TEST_ENVS, a.seed))
            envs = task.sample_envs(a.runs, gen)
            chunks = range(0, a.runs, a.batch)
            data = {
                "batches": [{k: v[lo : lo + a.batch] for k, v in envs.items()} for lo in chunks],
                "seeds": [
                    (stream_seed(Stream.TEST_TASK, a.seed, i), stream_seed(Stream.TEST_POLICY, a.seed, i))
                    for i in range(len(chunks))
                ],
            }
            torch.save(data, tmp / f"{name}.pt")
            spec = {"task": name, "data": str(tmp / f"{name}.pt"), "horizon": a.horizon}
            base = run_side(str(old_tree), {**spec, "options": {}}, tmp, "rev")
            rows = {a.rev: base}
            for arm, options in arms.items():
                rows[arm] = run_side(str(ROOT), {**spec, "options": options}, tmp, arm)
            ref = torch.tensor(base["regrets"])
            out = report["tasks"][name] = {}
            for side, r in rows.items():
                regrets = torch.tensor(r["regrets"])
                diff = regrets - ref
                half = 1.645 * diff.std().item() / diff.numel() ** 0.5 if side != a.rev else 0.0
                per100 = 100 * r["seconds"] / a.runs
                out[side] = {
                    "options": {} if side == a.rev else arms[side],
                    "cpu_s_per_100": per100,
                    "speedup": 100 * base["seconds"] / a.runs / per100,
                    "regret": regrets.mean().item(),
                    "paired_diff": diff.mean().item(),
                    "paired_90": [diff.mean().item() - half, diff.mean().item() + half],
                }
                o = out[side]
                print(
                    f"  {name:<11} {side:<12} {per100:7.2f} CPU-s per 100   {o['speedup']:5.1f}x   "
                    f"regret {o['regret']:.3f}   - {a.rev} {o['paired_diff']:+.3f} "
                    f"[{o['paired_90'][0]:+.3f}, {o['paired_90'][1]:+.3f}]",
                    flush=True,
                )
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:  # one side, in its subprocess (run_side)
        worker(sys.argv[2])
    else:
        sys.exit(main())
