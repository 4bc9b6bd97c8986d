"""Training throughput of the token layouts, eager and compiled, against this machine's matmul peak.

    python benchmarks/throughput.py [--steps 30] [--threads 1] [--batch 64] [--horizon 50] [--no-compile]
        [--layouts paper,compact,transition] [--size demo|paper] [--precision 32,bf16] [--device cpu] [--json FILE]

At the demo's size (configs/demo.yaml: 4 layers, 64 dims, batch 64, T = 50; ``--size paper``: the
paper's 12 layers, 16 heads, 256 dims of configs/scale/paper.yaml) one training step --
forward, the task loss, backward, AdamW -- on one pre-generated batch (no data generation: that is
``benchmarks/streaming.py``), for every combination of

* layout: ``paper`` (feature and action tokens interleaved, ``2T`` tokens), ``compact`` (one token
  per decision step, ``T`` tokens) or ``transition`` (``T`` tokens, each also embedding the previous
  step's feature token);
* ``model.compile()`` off or on (torch.compile's inductor; on CPU it emits C++);
* ``--precision``: float32, or bf16 autocast of the forward pass and loss (what the Trainer's
  ``precision: bf16-mixed`` does: weights and optimiser stay float32).

It prints the steady-state steps/s (the median of ``--steps`` timed steps after warm-up), the decisions
per second (``B·T`` predictions trained per step: what every layout has in common) and tokens per
second, the model FLOPs per step (``6·N·tokens`` for the weights plus ``12·n_layer·L²·D`` per sequence
for attention, forward and backward), and what fraction of this machine's measured peak (the best of
a few ``1024×1024`` float32 matmuls at the same thread count) that makes. The ratios in the last
column are against the eager paper layout, measured in this one run.
"""

from __future__ import annotations

import sys
import itertools
import json
import statistics
import time

import torch
import yaml

from omgpt.resources import CONFIGS
from omgpt.timing import demo_config, machine
from omgpt.entry import Device, Integer, Names, OutputFile, entry_point, script_parser


def matmul_peak_flops(device: str, size: int = 1024, repeats: int = 5) -> float:
    """The best FLOP/s of a ``size``-cube float32 matmul: what this machine's cores can do at best."""
    a, b = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def step_flops(module, batch: int, horizon: int) -> float:
    """Model FLOPs of one training step (forward + backward = 3 forward passes)."""
    cfg = module.model.cfg
    tokens = cfg.tokens_per_step * horizon
    weights = sum(p.numel() for n, p in module.model.named_parameters() if "pos_emb" not in n)
    attention = 12 * cfg.n_layer * tokens**2 * cfg.n_embd  # QKᵀ and AV, forward and backward
    return batch * (6 * weights * tokens + attention)


def seconds_per_step(module, batch: dict, steps: int, device: str, precision: str = "32") -> float:
    """Median wall-clock seconds of one training step, after three warm-up steps (compilation)."""
    opt = torch.optim.AdamW(module.model.parameters(), lr=1e-3)
    autocast = torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=precision == "bf16")
    times = []
    for i in range(steps + 3):
        start = time.perf_counter()
        with autocast:
            loss = module.loss(module.model(batch["features"], batch["actions"]), batch["targets"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


@entry_point
def main(argv: list[str] | None = None) -> None:
    from omgpt.datamodules.history import HistoryStream
    from omgpt.module import OMGPTModule

    p = script_parser(__file__, __doc__)
    p.add_argument("--steps", type=Integer(1, 1_000_000), default=30)
    p.add_argument("--threads", type=Integer(1, 256), default=1)
    p.add_argument("--batch", type=Integer(1, 1_000_000), default=64)
    p.add_argument("--horizon", type=Integer(1, 100_000), default=50)
    p.add_argument("--no-compile", action="store_true", help="skip the compiled variants")
    p.add_argument("--device", type=Device(), default="cpu")
    p.add_argument(
        "--layouts",
        type=Names(["paper", "compact", "transition"]),
        default="paper,compact,transition",
        help="comma-separated token layouts",
    )
    p.add_argument(
        "--size",
        choices=("demo", "paper"),
        default="demo",
        help="the demo's model or the paper's (configs/scale/paper.yaml)",
    )
    p.add_argument(
        "--precision",
        type=Names(["32", "bf16"]),
        default="32",
        help="comma-separated: 32 (float32) and/or bf16 (autocast)",
    )
    p.add_argument("--json", type=OutputFile(), help="also write the numbers here")
    args = p.parse_args(argv)
    precisions = args.precision.split(",")
    if set(precisions) - {"32", "bf16"}:
        p.error(f"--precision takes 32 and/or bf16, not {args.precision}")
    torch.set_num_threads(args.threads)
    cfg = demo_config()["model"]
    if args.size == "paper":
        paper = yaml.safe_load((CONFIGS / "scale" / "paper.yaml").read_text())["model"]["network"]
        cfg = {
            **cfg,
            "network": {**cfg["network"], **{k: paper[k] for k in ("n_layer", "n_head", "n_embd", "dropout")}},
        }
    peak = matmul_peak_flops(args.device)
    print(f"{machine()}; {args.threads} thread(s); float32 matmul peak {peak / 1e9:.1f} GFLOP/s")
    print(
        f"{args.size} size {cfg['network']['n_layer']}L/{cfg['network']['n_embd']}d, batch {args.batch}, T = {args.horizon}"
    )
    rows, base = [], None
    for layout, precision in itertools.product(args.layouts.split(","), precisions):
        for compiled in (False,) if args.no_compile else (False, True):
            torch.manual_seed(0)
            module = OMGPTModule(
                **{**cfg, "horizon": args.horizon, "network": {**cfg["network"], "layout": layout}}
            ).to(args.device)
            task = module.task
            batch = next(
                iter(
                    HistoryStream(
                        task, batch_size=args.batch, n_batches=1, horizon=args.horizon, seed=0, epoch=0, rank=0
                    )
                )
            )
            batch = {k: v.to(args.device) for k, v in batch.items()}
            if compiled:
                module.model.compile()
            sec = seconds_per_step(module, batch, args.steps, args.device, precision)
            flops = step_flops(module, args.batch, args.horizon)
            base = base or sec
            row = {
                "layout": layout,
                "precision": precision,
                "compiled": compiled,
                "steps_per_s": 1 / sec,
                "decisions_per_s": args.batch * args.horizon / sec,
                "tokens_per_s": args.batch * module.model.cfg.tokens_per_step * args.horizon / sec,
                "gflop_per_step": flops / 1e9,
                "peak_fraction": flops / sec / peak,
                "speedup": base / sec,
            }
            rows.append(row)
    print(
        f"{'layout':10} {'prec':5} {'compile':7} {'steps/s':>8} {'decisions/s':>12} {'tokens/s':>10} {'GFLOP/step':>10} {'of peak':>8} {'speed-up':>8}"
    )
    for r in rows:
        print(
            f"{r['layout']:10} {r['precision']:5} {str(r['compiled']):7} {r['steps_per_s']:8.2f} {r['decisions_per_s']:12.0f} {r['tokens_per_s']:10.0f} "
            f"{r['gflop_per_step']:10.3f} {r['peak_fraction']:8.1%} {r['speedup']:7.2f}x"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "machine": machine(),
                    "threads": args.threads,
                    "size": args.size,
                    "batch": args.batch,
                    "horizon": args.horizon,
                    "peak_gflops": peak / 1e9,
                    "rows": rows,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    sys.exit(main())
