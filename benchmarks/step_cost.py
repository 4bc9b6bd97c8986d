"""CPU cost of one training step of the demo's model: batch sizes, bf16 autocast, the attention kernel,
``torch.compile`` -- the throughput side of ``benchmarks/time_to_quality.py``, interleaved in one process.

    python benchmarks/step_cost.py [--batches 32,64] [--steps 20] [--repeats 3] [--threads 1] [--no-compile]

At the demo's size (configs/demo.yaml: 4 layers, 64 dims, transition layout, T = 50) one step --
forward, the task loss, backward, AdamW -- on one pre-generated batch, for every batch size and variant:

* ``fp32``: what ``omgpt fit`` runs (``F.scaled_dot_product_attention`` picks its fused flash kernel);
* ``sdpa-math``: the same with attention through PyTorch's reference (math) path;
* ``bf16``: under ``torch.autocast("cpu", torch.bfloat16)``, what ``--trainer.precision bf16-mixed`` does;
* ``compiled``: ``model.compile()`` (its compilation time is printed apart, not in the step).

The clock is the process's CPU time with ``--threads`` intra-op threads (1: CPU time is then what the
step takes on an idle core). The variants take turns, ``--repeats`` rounds of ``--steps`` timed steps
each (after three warm-up steps), so a neighbour's load falls on all of them alike; each cell is the
median over every timed step, and the ratio is against ``fp32`` at the same batch size, from this run.
Data generation is not in the step (it is ~2% of it: ``benchmarks/streaming.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from omgpt.timing import demo_config, machine


def step_fn(module, batch: dict, variant: str):
    """One training step of ``module`` on ``batch`` in ``variant``'s way."""
    opt = torch.optim.AdamW(module.model.parameters(), lr=1e-3)

    def step() -> None:
        autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=variant == "bf16")
        kernel = sdpa_kernel(SDPBackend.MATH) if variant == "sdpa-math" else contextlib.nullcontext()
        with autocast, kernel:
            loss = module.loss(module.model(batch["features"], batch["actions"]), batch["targets"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def main() -> None:
    from omgpt.datamodules.history import HistoryStream
    from omgpt.module import OMGPTModule

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", default="32,64", help="batch sizes, comma-separated")
    p.add_argument("--steps", type=int, default=20, help="timed steps per variant and round")
    p.add_argument("--repeats", type=int, default=3, help="rounds (the variants take turns)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-compile", action="store_true", help="leave out the compiled variant")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    cfg = demo_config()
    variants = ["fp32", "sdpa-math", "bf16"] + ([] if args.no_compile else ["compiled"])
    steps, times, compile_s = {}, {}, {}
    for b in map(int, args.batches.split(",")):
        for v in variants:
            torch.manual_seed(0)
            module = OMGPTModule(**cfg["model"])
            batch = next(
                iter(
                    HistoryStream(
                        module.task,
                        batch_size=b,
                        n_batches=1,
                        horizon=module.hparams.horizon,
                        seed=0,
                        epoch=0,
                        rank=0,
                        policy=cfg["data"]["data_policy"],
                    )
                )
            )
            if v == "compiled":
                module.model.compile()
            steps[b, v], times[b, v] = step_fn(module, batch, v), []
            start = time.process_time()
            for _ in range(3):  # warm-up (and compilation)
                steps[b, v]()
            if v == "compiled":
                compile_s[b] = time.process_time() - start
    for _ in range(args.repeats):
        for key, step in steps.items():
            for _ in range(args.steps):
                start = time.process_time()
                step()
                times[key].append(time.process_time() - start)
    print(
        f"{machine()}; {args.threads} thread(s); demo model {cfg['model']['network']['n_layer']}L/{cfg['model']['network']['n_embd']}d, "
        f"{cfg['model']['network']['layout']} layout, T = {cfg['model']['horizon']}; {args.repeats} x {args.steps} steps per cell"
    )
    print(f"{'batch':>5} {'variant':10} {'CPU-ms/step':>11} {'histories/CPU-s':>15} {'vs fp32':>8}")
    for (b, v), ts in times.items():
        ms = 1000 * statistics.median(ts)
        base = 1000 * statistics.median(times[b, "fp32"])
        print(f"{b:5d} {v:10} {ms:11.1f} {b / ms * 1000:15.0f} {base / ms:7.2f}x")
    for b, s in compile_s.items():
        print(f"compilation and warm-up at batch {b}: {s:.1f} CPU-s")


if __name__ == "__main__":
    main()
