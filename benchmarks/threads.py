"""Training steps/s by intra-op thread count and OpenMP wait policy, idle and beside a busy process.

    python benchmarks/threads.py [--quick] [--seconds 15] [--repeats 2] [--workloads demo,fit]
        [--configs 1,2,2-passive,2-active] [--json FILE]

Why: on a 2-core machine two intra-op threads at libgomp's default (spinning) wait stall whenever
anything else runs (the demo: ~17 steps/s alone, 0.65-2.4 steps/s beside another job). This script
measures it, so that the default thread choice (:mod:`omgpt.threads`) rests on a number.

Workloads (each a real training loop: histories generated in the process, forward, loss, backward,
AdamW, under a Lightning Trainer with validation, logger and checkpoints off):

* ``demo``: ``configs/demo.yaml`` (4 layers, 64 dims, transition layout, batch 64, T = 50);
* ``fit``: an experiment's CPU-scale fit, ``configs/newsvendor.yaml`` + ``configs/scale/cpu.yaml``
  (the same model at T = 100).

Configurations: ``N`` intra-op threads with the OpenMP wait policy unset (libgomp's default),
``N-passive`` / ``N-active`` with ``OMP_WAIT_POLICY`` set, ``N-spinK`` with the policy unset and
``GOMP_SPINCOUNT=K`` (libgomp spins K iterations before a thread sleeps: 300,000 unset, 0 passive). Each configuration runs in its own
subprocess (the wait policy is read once, when OpenMP starts), for ``--seconds`` of training after
two warm-up steps, twice: on the machine as it is ("idle") and beside one busy process this script
starts -- a 2-thread torch matmul loop, as a user's other torch job would be ("loaded"). The runs are
interleaved (every configuration idle then loaded, repeated ``--repeats`` times; each cell keeps its
best repeat, the least disturbed by whatever else runs), so every ratio printed comes from this one
run. ``--quick``: 6 s per run, one repeat (16 runs: about 4 minutes on a quiet 2-core machine; 36
minutes on the shared one at load 8-14, where the collapsing configurations take 30 s a step).

The machine's other load is not controlled: say what else ran when quoting the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from omgpt.entry import Integer, Names, OutputFile, Real, Text, entry_point, script_parser

WORKLOADS = {"demo": ["demo.yaml"], "fit": ["newsvendor.yaml", "scale/cpu.yaml"]}
BUSY = (
    "import torch\ntorch.set_num_threads(2)\na = torch.randn(512, 512)\n"
    "while True:\n    a = (a @ a).clamp_(-1, 1)\n"
)  # a user's other torch job, default threads on 2 cores


@contextmanager
def neighbour(code: str | None, own_session: bool = False, settle: float = 1.0, env: dict | None = None):
    """Run the block beside a Python process running ``code`` (``None``: beside nothing), started in
    this session or a session of its own, given ``settle`` seconds to reach its loop, killed after."""
    if code is None:
        yield
        return
    busy = subprocess.Popen([sys.executable, "-c", code], start_new_session=own_session, env=env)
    try:
        time.sleep(settle)
        yield
    finally:
        busy.kill()
        busy.wait()


def child(workload: str, seconds: float) -> None:
    """In the subprocess: train ``workload`` for ``seconds`` and print ``{"steps_per_s": ...}``."""
    import torch
    import yaml
    from lightning.pytorch.callbacks import Callback

    from omgpt.datamodules import HistoryDataModule
    from omgpt.module import OMGPTModule
    from omgpt.resources import CONFIGS
    from omgpt.timing import StepTimer, quiet_lightning, timing_trainer

    quiet_lightning()
    model, data = {}, {}
    for name in WORKLOADS[workload]:  # the later config's keys win, as with repeated --config
        cfg = yaml.safe_load((CONFIGS / name).read_text())
        model.update(cfg.get("model") or {})
        data.update(cfg.get("data") or {})
    data["batches_per_epoch"] = 100_000  # stopped by time below
    data["algorithm1"] = (
        None  # one epoch of the early phase is timed: no curriculum, no mixed phase (nor their callbacks)
    )

    class Budget(Callback):
        def on_train_batch_end(self, trainer, *args):
            if len(timer.ends) > 2 and timer.ends[-1] - timer.ends[2] > seconds:
                trainer.should_stop = True

    torch.manual_seed(0)
    module = OMGPTModule(**model)
    dm = HistoryDataModule(task=model["task"], task_options=model.get("task_options"), horizon=model["horizon"], **data)
    timer = StepTimer()
    timing_trainer(100_000, "cpu", [timer, Budget()]).fit(module, datamodule=dm)
    print(
        json.dumps(
            {"steps_per_s": 1 / timer.seconds_per_step(), "steps": len(timer.ends), "threads": torch.get_num_threads()}
        )
    )


def run_config(workload: str, config: str, seconds: float) -> float:
    threads, _, policy = config.partition("-")
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "PYTHONWARNINGS": "ignore"}
    env.pop("OMP_WAIT_POLICY", None)
    env.pop("GOMP_SPINCOUNT", None)
    if policy.startswith("spin"):  # libgomp spins this many iterations before it sleeps (unset: 300,000)
        env["GOMP_SPINCOUNT"] = policy.removeprefix("spin")
    elif policy:
        env["OMP_WAIT_POLICY"] = policy.upper()
    out = subprocess.run(
        [sys.executable, __file__, "--child", workload, "--seconds", str(seconds)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["threads"] == int(threads), result
    return result["steps_per_s"]


@entry_point
def main(argv: list[str] | None = None) -> dict:
    p = script_parser(__file__, __doc__)
    p.add_argument("--quick", action="store_true", help="6 s per run, one repeat")
    p.add_argument("--seconds", type=Real(0, 86_400, low_open=True), default=15.0, help="timed training per run")
    p.add_argument("--repeats", type=Integer(1, 1000), default=2)
    p.add_argument("--workloads", type=Names(["demo", "fit"]), default="demo,fit")
    p.add_argument("--configs", type=Text(), default="1,2,2-passive,2-active")
    p.add_argument("--json", type=OutputFile(), help="also write the results here")
    p.add_argument("--child", type=Text(), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        child(a.child, a.seconds)
        return {}
    seconds, repeats = (6.0, 1) if a.quick else (a.seconds, a.repeats)
    workloads, configs = a.workloads.split(","), a.configs.split(",")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"training steps/s, {seconds:.0f} s per run, best of {repeats}; {cpus} usable CPUs; "
        f"load average before: {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    best: dict = {}
    for r in range(repeats):
        for workload in workloads:
            for config in configs:
                for load in ("idle", "loaded"):
                    code = BUSY if load == "loaded" else None
                    with neighbour(code, env={**os.environ, "OMP_NUM_THREADS": "2"}):
                        sps = run_config(workload, config, seconds)
                    key = (workload, config, load)
                    best[key] = max(best.get(key, 0.0), sps)
                    print(f"  repeat {r + 1}: {workload:<5} {config:<10} {load:<6} {sps:6.2f} steps/s", flush=True)
    base = configs[0]
    print(
        f"\n{'workload':<9}{'config':<12}{'idle':>8}{'loaded':>9}{'loaded/idle':>13}{'idle vs ' + base:>14}{'loaded vs ' + base:>16}"
    )
    for workload in workloads:
        for config in configs:
            idle, loaded = best[workload, config, "idle"], best[workload, config, "loaded"]
            print(
                f"{workload:<9}{config:<12}{idle:8.2f}{loaded:9.2f}{loaded / idle:13.2f}"
                f"{idle / best[workload, base, 'idle']:14.2f}{loaded / best[workload, base, 'loaded']:16.2f}"
            )
    result = {
        "seconds": seconds,
        "repeats": repeats,
        "cpus": cpus,
        "steps_per_s": {f"{w}/{c}/{l}": v for (w, c, l), v in best.items()},
    }
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    sys.exit(main())
