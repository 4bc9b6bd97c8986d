"""A training step fed by the streaming DataModule vs the same step on a fixed in-memory batch.

    python benchmarks/streaming.py [--steps 60] [--workers 0,1] [--repeats 3] [--device cpu]

At the demo's scale (configs/demo.yaml: 4 layers, 64 dims, batch 64, T = 50, random data policy),
two Lightning fits of ``--steps`` steps each, with the same module and the same Trainer settings:

* streaming: ``HistoryDataModule`` generating fresh histories as it trains (what ``omgpt fit`` does);
* fixed: a ``DataLoader`` over ``--steps`` copies of one pre-generated batch (no generation at all).

It prints the steady-state seconds per step of both (the time between consecutive batch ends, after
two warm-up steps: fetch or generation + forward + backward + optimizer) and their ratio, measured
in this one run -- what streaming costs over having the data in memory. With ``--workers 1`` the
histories are generated in a DataLoader worker process, in parallel with the training step.
"""

from __future__ import annotations

import sys

import torch
from torch.utils.data import DataLoader

from omgpt.timing import StepTimer, demo_config, demo_module, quiet_lightning, timing_trainer
from omgpt.entry import Device, Integer, Numbers, entry_point, script_parser


def datamodule(steps: int, workers: int, batch_size: int | None = None, horizon: int | None = None):
    from omgpt.datamodules import HistoryDataModule

    cfg = demo_config()
    model, data = cfg["model"], dict(cfg["data"])
    data.update(batches_per_epoch=steps, num_workers=workers)
    if batch_size:
        data["batch_size"] = batch_size
    return HistoryDataModule(
        task=model["task"], task_options=model.get("task_options"), horizon=horizon or model["horizon"], **data
    )


def seconds_per_step(steps: int, loader_or_datamodule, device: str, horizon: int | None) -> float:
    module = demo_module(horizon)
    timer = StepTimer()
    trainer = timing_trainer(steps, device, [timer])
    if isinstance(loader_or_datamodule, DataLoader):
        trainer.fit(module, train_dataloaders=loader_or_datamodule)
    else:
        trainer.fit(module, datamodule=loader_or_datamodule)
    assert len(timer.ends) == steps, (len(timer.ends), steps)
    return timer.seconds_per_step()


def measure(
    steps: int = 60,
    workers: int = 0,
    repeats: int = 1,
    device: str = "cpu",
    batch_size: int | None = None,
    horizon: int | None = None,
) -> dict:
    """Both fits ``repeats`` times, alternating; each one's fastest run (least disturbed by other work)."""
    quiet_lightning()
    one = next(iter(datamodule(1, 0, batch_size, horizon).train_dataloader()))  # one batch, as the stream makes them
    fixed_loader = lambda: DataLoader([one] * steps, batch_size=None)  # noqa: E731
    streaming, fixed = [], []
    for _ in range(repeats):
        streaming.append(seconds_per_step(steps, datamodule(steps, workers, batch_size, horizon), device, horizon))
        fixed.append(seconds_per_step(steps, fixed_loader(), device, horizon))
    return {
        "steps": steps,
        "workers": workers,
        "batch": one["features"].shape[0],
        "horizon": one["features"].shape[1],
        "streaming_s": min(streaming),
        "fixed_s": min(fixed),
        "ratio": min(streaming) / min(fixed),
    }


def report(r: dict) -> str:
    return (
        f"B={r['batch']} T={r['horizon']}, {r['workers']} worker(s): streaming {1000 * r['streaming_s']:.1f} ms/step,"
        f" fixed batch {1000 * r['fixed_s']:.1f} ms/step, ratio {r['ratio']:.2f}"
    )


@entry_point
def main(argv: list[str] | None = None) -> list[dict]:
    p = script_parser(__file__, __doc__)
    p.add_argument("--steps", type=Integer(1, 1_000_000), default=60)
    p.add_argument(
        "--workers",
        type=Numbers(Integer(0, 256)),
        default="0,1",
        help="DataLoader workers generating histories, comma-separated",
    )
    p.add_argument("--repeats", type=Integer(1, 1000), default=3)
    p.add_argument("--device", type=Device(), default="cpu")
    p.add_argument("--threads", type=Integer(1, 256), default=1)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    print(
        f"streaming DataModule vs fixed in-memory batch, demo scale, {a.steps} steps, {a.device}, {a.threads} thread(s)"
    )
    results = []
    for workers in (int(w) for w in a.workers.split(",")):
        results.append(measure(a.steps, workers, a.repeats, a.device))
        print(report(results[-1]), flush=True)
    return results


if __name__ == "__main__":
    sys.exit(main())
