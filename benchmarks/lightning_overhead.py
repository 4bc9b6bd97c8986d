"""Lightning's overhead: the module's training step under a Trainer vs a bare PyTorch loop.

    python benchmarks/lightning_overhead.py [--steps 60] [--repeats 3] [--device cpu]

At the demo's scale (configs/demo.yaml: 4 layers, 64 dims, batch 64, T = 50), the same freshly
initialised ``OMGPTModule`` trains on the same ``--steps`` pre-generated batches (one DataLoader
over a list) twice:

* Trainer: ``Trainer.fit`` with validation, logger, checkpoints and progress bar off;
* bare loop: ``module.training_step`` (the same method), ``backward``, ``AdamW.step``, the LR
  scheduler's step and ``zero_grad`` -- what Lightning's automatic optimization does, minus Lightning.

It prints the steady-state seconds per step of both (after two warm-up steps) and their ratio,
measured in this one run. The bare loop builds AdamW over the model's own parameter groups with
the module's learning rate (``configure_optimizers`` needs a Trainer for its cosine length).
"""

from __future__ import annotations

import sys
import time
import warnings

import torch
from torch.utils.data import DataLoader

from omgpt.timing import StepTimer, demo_config, demo_module, quiet_lightning, timing_trainer
from omgpt.entry import Device, Integer, entry_point, script_parser


def batches(steps: int, batch_size: int | None = None, horizon: int | None = None) -> list[dict]:
    from omgpt.datamodules import HistoryDataModule

    cfg = demo_config()
    model, data = cfg["model"], dict(cfg["data"])
    data.update(batches_per_epoch=steps)
    if batch_size:
        data["batch_size"] = batch_size
    dm = HistoryDataModule(
        task=model["task"], task_options=model.get("task_options"), horizon=horizon or model["horizon"], **data
    )
    return list(dm.train_dataloader())


def under_trainer(data: list[dict], device: str, horizon: int | None) -> float:
    timer = StepTimer()
    timing_trainer(len(data), device, [timer]).fit(
        demo_module(horizon), train_dataloaders=DataLoader(data, batch_size=None)
    )
    assert len(timer.ends) == len(data)
    return timer.seconds_per_step()


def bare_loop(data: list[dict], device: str, horizon: int | None, warmup: int = 2) -> float:
    m = demo_module(horizon).to(device).train()
    hp = m.optim
    opt = torch.optim.AdamW(m.model.optimizer_groups(hp.weight_decay), lr=hp.lr, betas=tuple(hp.betas))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    ends = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log() without a Trainer warns and returns
        for i, batch in enumerate(DataLoader(data, batch_size=None)):
            batch = {k: v.to(device) for k, v in batch.items()}
            opt.zero_grad(set_to_none=True)
            loss = m.training_step(batch, i)
            loss.backward()
            opt.step()
            sched.step()
            if str(device).startswith("cuda"):
                torch.cuda.synchronize()
            ends.append(time.perf_counter())
    ends = ends[warmup:]
    return (ends[-1] - ends[0]) / (len(ends) - 1)


def measure(
    steps: int = 60, repeats: int = 1, device: str = "cpu", batch_size: int | None = None, horizon: int | None = None
) -> dict:
    """Both loops ``repeats`` times, alternating; each one's fastest run (least disturbed by other work)."""
    quiet_lightning()
    data = batches(steps, batch_size, horizon)
    trainer_s, bare_s = [], []
    for _ in range(repeats):
        trainer_s.append(under_trainer(data, device, horizon))
        bare_s.append(bare_loop(data, device, horizon))
    return {
        "steps": steps,
        "batch": data[0]["features"].shape[0],
        "horizon": data[0]["features"].shape[1],
        "trainer_s": min(trainer_s),
        "bare_s": min(bare_s),
        "ratio": min(trainer_s) / min(bare_s),
    }


def report(r: dict) -> str:
    return (
        f"B={r['batch']} T={r['horizon']}: Trainer {1000 * r['trainer_s']:.1f} ms/step, bare PyTorch loop "
        f"{1000 * r['bare_s']:.1f} ms/step, ratio {r['ratio']:.2f}"
    )


@entry_point
def main(argv: list[str] | None = None) -> dict:
    p = script_parser(__file__, __doc__)
    p.add_argument("--steps", type=Integer(1, 1_000_000), default=60)
    p.add_argument("--repeats", type=Integer(1, 1000), default=3)
    p.add_argument("--device", type=Device(), default="cpu")
    p.add_argument("--threads", type=Integer(1, 256), default=1)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    print(f"Lightning Trainer vs bare PyTorch loop, demo scale, {a.steps} steps, {a.device}, {a.threads} thread(s)")
    r = measure(a.steps, a.repeats, a.device)
    print(report(r), flush=True)
    return r


if __name__ == "__main__":
    sys.exit(main())
