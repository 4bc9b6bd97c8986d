"""KV-cached rollout vs re-encoding the whole history at every step (``ModelPolicy(use_cache=...)``).

    python benchmarks/kv_cache.py [--sizes tiny,demo,paper] [--layouts paper,compact] [--batch 256]
        [--horizon 100] [--device cpu]

For each model size, plays the same ``B`` newsvendor environments for ``T`` steps with the same
seeds twice -- decoding the new tokens of each step through the KV cache, and re-running the model
over the whole history at every step -- and prints both wall times, the speed-up and the largest
difference between the two runs' actions, measured in this one run, for each token layout (paper:
two tokens per step, ``2t-1`` re-encoded; compact: one, ``t`` re-encoded).

Why the speed-up grows with the model and with ``T``: the cached rollout feeds ``2T`` tokens through
the network, the re-encoding one ``Σ_t (2t-1) = T²`` (plus attention, cubic in ``T``), so when the
arithmetic dominates the ratio approaches ``T/2`` (50 at ``T = 100``) and beyond. Both do the same
number of Python-level steps and kernel launches, so for a model small enough that those fixed
costs dominate (a 2-layer, 32-dim GPT on a CPU) the ratio is smaller.
"""

from __future__ import annotations

import sys
import time

import torch

from omgpt.model import GPT, ModelConfig
from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.tasks import make_task
from omgpt.entry import Device, Integer, Names, entry_point, script_parser

SIZES = {  # name: (n_layer, n_head, n_embd)
    "tiny": (2, 2, 32),
    "demo": (4, 4, 64),  # configs/demo.yaml
    "paper": (12, 16, 256),  # the paper's, configs/newsvendor.yaml
}


def play(task, model, envs, horizon: int, use_cache: bool, device: str):
    """One timed rollout; returns ``(seconds, actions)``."""
    policy = make_policy("omgpt", task, model=model, use_cache=use_cache)
    g_task = torch.Generator(device=device).manual_seed(1)
    g_policy = torch.Generator(device=device).manual_seed(2)
    sync(device)
    start = time.perf_counter()
    history = rollout(task, envs, policy, horizon, g_task, g_policy)
    sync(device)
    return time.perf_counter() - start, history.actions


def sync(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def measure(
    size: str,
    batch: int,
    horizon: int,
    device: str = "cpu",
    repeats: int = 1,
    task_name: str = "newsvendor",
    layout: str = "paper",
) -> dict:
    """Times both rollouts ``repeats`` times, alternating, and keeps each one's fastest run (the least
    disturbed by other work on the machine)."""
    n_layer, n_head, n_embd = SIZES[size]
    task = make_task(task_name)
    torch.manual_seed(0)
    cfg = ModelConfig(
        feature_dim=task.feature_dim,
        action_dim=task.action_dim,
        n_layer=n_layer,
        n_head=n_head,
        n_embd=n_embd,
        dropout=0.0,
        max_steps=horizon,
        layout=layout,
    )
    model = GPT(cfg, task.scaling()).to(device).eval()
    envs = {k: v.to(device) for k, v in task.sample_envs(batch, torch.Generator().manual_seed(0)).items()}
    play(task, model, {k: v[: min(batch, 8)] for k, v in envs.items()}, min(horizon, 5), True, device)  # warm-up
    cached, full = [], []
    for _ in range(repeats):
        seconds, a_cached = play(task, model, envs, horizon, True, device)
        cached.append(seconds)
        seconds, a_full = play(task, model, envs, horizon, False, device)
        full.append(seconds)
    return {
        "size": size,
        "layout": layout,
        "layers": n_layer,
        "heads": n_head,
        "dims": n_embd,
        "params": model.num_params(),
        "batch": batch,
        "horizon": horizon,
        "device": str(device),
        "cached_s": min(cached),
        "full_s": min(full),
        "speedup": min(full) / min(cached),
        "max_abs_diff": float((a_cached - a_full).abs().max()),
    }


def report(r: dict) -> str:
    return (
        f"{r['size']:<6} {r['layout']:<8} {r['layers']:>2}L/{r['heads']:>2}H/{r['dims']:>3}d {r['params'] / 1e6:>6.2f}M  B={r['batch']:<4} T={r['horizon']:<4}"
        f" cached {r['cached_s']:>8.2f}s  full recompute {r['full_s']:>8.2f}s  speed-up {r['speedup']:>6.1f}x"
        f"  max|a_cached - a_full| {r['max_abs_diff']:.1e}"
    )


@entry_point
def main(argv: list[str] | None = None) -> list[dict]:
    p = script_parser(__file__, __doc__)
    p.add_argument(
        "--sizes", type=Names(SIZES), default="tiny,demo,paper", help=f"comma-separated, from {', '.join(SIZES)}"
    )
    p.add_argument(
        "--layouts",
        type=Names(["paper", "compact", "transition"]),
        default="paper",
        help="comma-separated token layouts: paper, compact, transition",
    )
    p.add_argument("--batch", type=Integer(1, 1_000_000), default=256)
    p.add_argument("--horizon", type=Integer(1, 100_000), default=100)
    p.add_argument(
        "--paper-batch",
        type=Integer(1, 1_000_000),
        help="batch for the paper size only (its full recompute takes ~30 min on a 2-core CPU at B=256)",
    )
    p.add_argument("--repeats", type=Integer(1, 1000), default=1)
    p.add_argument("--device", type=Device(), default="cpu")
    p.add_argument("--threads", type=Integer(1, 256), default=1, help="torch intra-op threads (CPU)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    print(f"KV-cached rollout vs full recompute, newsvendor, {a.device}, {a.threads} thread(s)")
    results = []
    for size in a.sizes.split(","):
        batch = a.paper_batch if size == "paper" and a.paper_batch else a.batch
        for layout in a.layouts.split(","):
            results.append(measure(size, batch, a.horizon, a.device, a.repeats, layout=layout))
            print(report(results[-1]), flush=True)
    return results


if __name__ == "__main__":
    sys.exit(main())
