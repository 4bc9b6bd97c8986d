"""``omgpt bench``: run the speed benchmarks of ``benchmarks/`` and print their four ratios.

    omgpt bench [--quick] [--device cpu] [--threads 1] [--json FILE]

1. KV cache: cached rollout vs re-encoding the history each step (``benchmarks/kv_cache.py``).
2. Data generation: batched rollouts vs a per-environment Python loop (``benchmarks/datagen.py``).
3. Streaming data: a training step fed by the streaming DataModule vs the same step on a fixed
   in-memory batch, both under a Lightning Trainer (``benchmarks/streaming.py``).
4. Lightning overhead: the module's training step under a Trainer vs a bare PyTorch loop on the
   same model and batches (``benchmarks/lightning_overhead.py``).

Every ratio is measured in this one run (results of record: ``benchmarks/RESULTS.md``). ``--quick``
uses smaller sizes (well under 3 minutes on a 2-core CPU); ``--smoke`` the smallest (seconds: it only
checks that everything runs). The helpers the benchmark scripts share are library code
(:mod:`omgpt.timing`): a script never imports the command that runs it.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from typing import Optional

import torch

from omgpt.commands.args import Device, PositiveInt
from omgpt.errors import OMGPTError
from omgpt.files import write_json, writable_file
from omgpt.resources import BENCHMARKS
from omgpt.timing import machine, quiet_lightning


def load_benchmark(name: str):
    """``benchmarks/<name>.py`` as a module (``benchmarks/`` is a folder of scripts, not a package; a
    regular install ships it as ``omgpt/_benchmarks``, see :mod:`omgpt.resources`)."""
    path = BENCHMARKS / f"{name}.py"
    if not path.is_file():
        raise OMGPTError(f"{path} not found: this installation of omgpt lacks its benchmark scripts")
    spec = importlib.util.spec_from_file_location(f"omgpt_benchmarks_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------------------------------
PLANS = {  # mode: the size of each benchmark
    "full": {"kv": dict(sizes=("tiny", "demo", "paper"), batch=256, horizon=100, paper_batch=16, repeats=2),
             "datagen": dict(tasks=("newsvendor", "pricing"), batch=1024, horizon=100, loop_envs=16),
             "stream": dict(steps=60, repeats=3, workers=(0, 1)),
             "lightning": dict(steps=60, repeats=3)},
    "quick": {"kv": dict(sizes=("tiny", "demo"), batch=128, horizon=100, paper_batch=None, repeats=1),
              "datagen": dict(tasks=("newsvendor",), batch=1024, horizon=100, loop_envs=8),
              "stream": dict(steps=30, repeats=2, workers=(0, 1)),
              "lightning": dict(steps=30, repeats=2)},
    "smoke": {"kv": dict(sizes=("tiny",), batch=8, horizon=12, paper_batch=None, repeats=1),
              "datagen": dict(tasks=("newsvendor",), batch=64, horizon=12, loop_envs=2),
              "stream": dict(steps=6, repeats=1, workers=(0,), batch_size=8, horizon=12),
              "lightning": dict(steps=6, repeats=1, batch_size=8, horizon=12)},
}  # fmt: skip


def measure_datagen(datagen, name: str, batch: int, horizon: int, loop_envs: int) -> dict:
    """``benchmarks/datagen.py``'s measurement for one task: histories/s batched and one at a time."""
    import inspect

    from omgpt.tasks import TASKS, make_task

    takes_horizon = "horizon" in inspect.signature(TASKS[name].cls.__init__).parameters
    task = make_task(name, **({"horizon": horizon} if takes_horizon else {}))
    batched = datagen.histories_per_second(task, batch, batch, horizon)
    looped = datagen.histories_per_second(task, loop_envs, 1, horizon)
    return {
        "task": name,
        "batch": batch,
        "horizon": horizon,
        "batched": batched,
        "looped": looped,
        "speedup": batched / looped,
    }


def run(mode: str = "quick", device: str = "cpu", threads: int = 1) -> dict:
    """Run the four benchmarks at ``mode``'s sizes; returns every measurement and the four ratios."""
    plan = PLANS[mode]
    torch.set_num_threads(threads)
    quiet_lightning()
    out: dict = {"mode": mode, "device": device, "threads": threads, "machine": machine()}
    print(f"omgpt bench ({mode}) on {out['machine']}; {device}, {threads} torch thread(s)\n", flush=True)

    kv = load_benchmark("kv_cache")
    print("1. KV-cached rollout vs full recompute (newsvendor, ModelPolicy use_cache True / False)")
    out["kv_cache"] = []
    for size in plan["kv"]["sizes"]:
        batch = (
            plan["kv"]["paper_batch"]
            if size == "paper" and plan["kv"]["paper_batch"] and not device.startswith("cuda")
            else plan["kv"]["batch"]
        )
        out["kv_cache"].append(kv.measure(size, batch, plan["kv"]["horizon"], device, plan["kv"]["repeats"]))
        print("   " + kv.report(out["kv_cache"][-1]), flush=True)

    datagen = load_benchmark("datagen")
    p = plan["datagen"]
    print(
        f"\n2. Batched data generation vs a per-environment loop (noisy-oracle, B = {p['batch']}, T = {p['horizon']})"
    )
    out["datagen"] = []
    for name in p["tasks"]:
        r = measure_datagen(datagen, name, p["batch"], p["horizon"], p["loop_envs"])
        out["datagen"].append(r)
        print(
            f"   {name:<12} batched {r['batched']:>9.0f} histories/s   per-env loop {r['looped']:>7.1f}/s   speed-up {r['speedup']:>6.0f}x",
            flush=True,
        )

    streaming = load_benchmark("streaming")
    p = plan["stream"]
    print(
        f"\n3. Training step on the streaming DataModule vs on a fixed in-memory batch (demo scale, Trainer, {p['steps']} steps)"
    )
    out["streaming"] = []
    for workers in p["workers"]:
        r = streaming.measure(p["steps"], workers, p["repeats"], device, p.get("batch_size"), p.get("horizon"))
        out["streaming"].append(r)
        print("   " + streaming.report(r), flush=True)

    overhead = load_benchmark("lightning_overhead")
    p = plan["lightning"]
    print(
        f"\n4. The module's training step under a Lightning Trainer vs a bare PyTorch loop (demo scale, {p['steps']} steps)"
    )
    out["lightning"] = overhead.measure(p["steps"], p["repeats"], device, p.get("batch_size"), p.get("horizon"))
    print("   " + overhead.report(out["lightning"]), flush=True)

    kv_main = next((r for r in out["kv_cache"] if r["size"] == "demo"), out["kv_cache"][-1])
    stream0 = out["streaming"][0]
    out["ratios"] = {
        "kv_cache_speedup": kv_main["speedup"],
        "datagen_speedup": out["datagen"][0]["speedup"],
        "streaming_step_ratio": stream0["ratio"],
        "lightning_step_ratio": out["lightning"]["ratio"],
    }
    print("\nthe four ratios, measured in this run:")
    print(
        f"   KV cache        {kv_main['speedup']:>7.1f}x faster than full recompute ({kv_main['size']} model, B = {kv_main['batch']}, T = {kv_main['horizon']}; actions differ by <= {kv_main['max_abs_diff']:.0e})"
    )
    print(
        f"   data generation {out['datagen'][0]['speedup']:>7.0f}x faster batched than per environment ({out['datagen'][0]['task']})"
    )
    extra = "".join(f"; {r['workers']} worker(s): {r['ratio']:.2f}" for r in out["streaming"][1:])
    print(
        f"   streaming data  {stream0['ratio']:>7.2f}x the fixed-batch step time ({stream0['workers']} workers{extra}; wanted <= 1.1)"
    )
    print(f"   Lightning       {out['lightning']['ratio']:>7.2f}x the bare PyTorch step time")
    return out


def bench_command(
    quick: bool = False,
    smoke: bool = False,
    device: Device = "cpu",
    threads: PositiveInt = 1,
    json: Optional[str] = None,
) -> int:
    """Speed benchmarks: KV cache, data generation, streaming data, Lightning overhead.

    Args:
        quick: smaller sizes: well under 3 minutes on a 2-core CPU
        smoke: the smallest sizes: seconds, only checks that everything runs
        device: torch device for the model benchmarks, e.g. cuda
        threads: torch intra-op threads on CPU (default 1: steadier timings)
        json: also write every measurement to this JSON file
    """
    if quick and smoke:
        raise OMGPTError("omgpt bench: --quick and --smoke exclude each other")
    if json:
        writable_file(json, "--json")  # now, not after the whole run
    start = time.perf_counter()
    results = run("smoke" if smoke else "quick" if quick else "full", device, threads)
    print(f"\n(total {time.perf_counter() - start:.0f} s)")
    if json:
        write_json(results, json, indent=1)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``omgpt bench`` (also ``python -m omgpt.commands.bench``): :func:`bench_command` behind jsonargparse."""
    from omgpt.commands.args import command  # errors: one line, exit code 2

    return command(bench_command, "omgpt bench")(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
