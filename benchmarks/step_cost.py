"""CPU cost of one training step of the demo's model: batch sizes, bf16 autocast, the attention kernel,
``torch.compile`` -- the throughput side of ``benchmarks/time_to_quality.py``, interleaved in one process.

    python benchmarks/step_cost.py [--batches 32,64] [--steps 20] [--repeats 3] [--threads 1] [--no-compile]
        [--variants fp32,heads=2,fused,no-attention,no-gelu]

At the demo's size (configs/demo.yaml: 4 layers, 64 dims, transition layout, T = 50) one step --
forward, the task loss, backward, AdamW -- on one pre-generated batch, for every batch size and variant:

* ``fp32``: what ``omgpt fit`` runs (``F.scaled_dot_product_attention`` picks its fused flash kernel);
* ``sdpa-math``: the same with attention through PyTorch's reference (math) path;
* ``bf16``: under ``torch.autocast("cpu", torch.bfloat16)``, what ``--trainer.precision bf16-mixed`` does;
* ``compiled``: ``model.compile()`` (its compilation time is printed apart, not in the step);
* ``heads=N``: the network with ``N`` attention heads (same width, same parameters' count);
* ``fused``: AdamW with ``fused=True`` (one kernel for the update instead of the ``foreach`` ops);
* ``no-attention`` / ``no-gelu``: ablations, not models -- attention returns its values unmixed, or
  the MLP's GELU is the identity -- so that the difference to ``fp32`` is that part's cost in a step.

``--variants`` picks among them (default: fp32, sdpa-math, bf16, compiled).

The clock is the process's CPU time with ``--threads`` intra-op threads (1: CPU time is then what the
step takes on an idle core). The variants take turns, ``--repeats`` rounds of ``--steps`` timed steps
each (after three warm-up steps), so a neighbour's load falls on all of them alike; each cell is the
median over every timed step, and the ratio is against ``fp32`` at the same batch size, from this run.
Data generation is not in the step (it is ~2% of it: ``benchmarks/streaming.py``).
"""

from __future__ import annotations

import sys
import contextlib
import statistics
import time
import types

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from omgpt.timing import demo_config, machine
from omgpt.entry import Integer, Numbers, Text, entry_point, script_parser


@contextlib.contextmanager
def without(part: str):
    """``omgpt.model``'s attention (``"attention"``) or GELU (``"gelu"``) replaced by the identity."""
    import omgpt.model

    real = omgpt.model.F
    fake = types.SimpleNamespace(**{k: getattr(real, k) for k in dir(real) if not k.startswith("__")})
    if part == "attention":
        fake.scaled_dot_product_attention = lambda q, k, v, **_: v
    else:
        fake.gelu = lambda x: x
    omgpt.model.F = fake
    try:
        yield
    finally:
        omgpt.model.F = real


def step_fn(module, batch: dict, variant: str):
    """One training step of ``module`` on ``batch`` in ``variant``'s way."""
    opt = torch.optim.AdamW(module.model.parameters(), lr=1e-3, fused=True if variant == "fused" else None)

    def step() -> None:
        autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=variant == "bf16")
        kernel = sdpa_kernel(SDPBackend.MATH) if variant == "sdpa-math" else contextlib.nullcontext()
        if variant.startswith("no-"):
            kernel = without(variant[3:])
        with autocast, kernel:
            loss = module.loss(module.model(batch["features"], batch["actions"]), batch["targets"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def demo_step(cfg: dict, batch_size: int, variant: str = "fp32"):
    """One training step of the demo's network (``cfg``: ``configs/demo.yaml``'s; ``heads=N`` overrides
    its heads) on one fixed batch of ``batch_size`` histories, in ``variant``'s way (seed 0)."""
    from omgpt.datamodules.history import HistoryStream
    from omgpt.module import OMGPTModule

    torch.manual_seed(0)
    model_cfg = cfg["model"]
    if variant.startswith("heads="):
        model_cfg = {**model_cfg, "network": {**model_cfg["network"], "n_head": int(variant[6:])}}
    module = OMGPTModule(**model_cfg)
    stream = HistoryStream(
        module.task, batch_size=batch_size, n_batches=1, horizon=module.hparams.horizon,
        seed=0, epoch=0, rank=0, policy=cfg["data"]["data_policy"],
    )  # fmt: skip
    if variant == "compiled":
        module.model.compile()
    return step_fn(module, next(iter(stream)), variant)


@entry_point
def main(argv: list[str] | None = None) -> None:
    p = script_parser(__file__, __doc__)
    p.add_argument("--batches", type=Numbers(Integer(1, 100_000)), default="32,64", help="batch sizes, comma-separated")
    p.add_argument("--steps", type=Integer(1, 1_000_000), default=20, help="timed steps per variant and round")
    p.add_argument("--repeats", type=Integer(1, 1000), default=3, help="rounds (the variants take turns)")
    p.add_argument("--threads", type=Integer(1, 256), default=1)
    p.add_argument("--no-compile", action="store_true", help="leave out the compiled variant")
    p.add_argument(
        "--variants",
        type=Text(),
        default=None,
        help="comma-separated (see above; default fp32,sdpa-math,bf16,compiled)",
    )
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = demo_config()
    if args.variants:
        variants = args.variants.split(",")
        known = {"fp32", "sdpa-math", "bf16", "compiled", "fused", "no-attention", "no-gelu"}
        bad = [v for v in variants if v not in known and not (v.startswith("heads=") and v[6:].isdigit())]
        if bad or "fp32" not in variants:
            p.error(f"unknown variant(s) {bad} or no fp32 (the reference) in --variants")
    else:
        variants = ["fp32", "sdpa-math", "bf16"] + ([] if args.no_compile else ["compiled"])
    steps, times, compile_s = {}, {}, {}
    for b in map(int, args.batches.split(",")):
        for v in variants:
            steps[b, v], times[b, v] = demo_step(cfg, b, v), []
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
        f"{machine()}; {args.threads} thread(s); demo model {cfg['model']['network']['n_layer']}L/{cfg['model']['network']['n_embd']}d/"
        f"{cfg['model']['network']['n_head']} heads, "
        f"{cfg['model']['network']['layout']} layout, T = {cfg['model']['horizon']}; {args.repeats} x {args.steps} steps per cell"
    )
    print(f"{'batch':>5} {'variant':12} {'CPU-ms/step':>11} {'histories/CPU-s':>15} {'vs fp32':>8}")
    for (b, v), ts in times.items():
        ms = 1000 * statistics.median(ts)
        base = 1000 * statistics.median(times[b, "fp32"])
        print(f"{b:5d} {v:12} {ms:11.1f} {b / ms * 1000:15.0f} {base / ms:7.2f}x")
    for b, s in compile_s.items():
        print(f"compilation and warm-up at batch {b}: {s:.1f} CPU-s")


if __name__ == "__main__":
    sys.exit(main())
