"""Fine-tuning on regret: the measurements of docs/finetune.md ("First measured attempt").

    python -m benchmarks.finetune_regret compare CKPT [CKPT ...] --policies alg-star lints-tuned [--runs 256] [--seed 10002]
        [--versus CKPT_OR_POLICY ...]
    python -m benchmarks.finetune_regret curve RUN_DIR [RUN_DIR ...] [--out figure.png]
    python -m benchmarks.finetune_regret gradients CKPT [--batch 32] [--feedback 1 0.8 0.5 0]

``compare`` plays each checkpoint (the supervised model first, then fine-tuned ones) and each named
policy on the same ``--runs`` environments of a VALIDATION seed (never a test seed: these numbers
choose; the reported test numbers come from ``omgpt experiment beyond-alg-star`` later), on common
random numbers, and prints every policy's mean final regret with a bootstrap 90% interval and its
paired differences from the ``--versus`` rows (default: the first checkpoint; the same environments
resampled for both) and its paired ratio to ``alg-star`` when it played. Use another
validation seed than the fit's ``val_seed`` (10,000) so that the comparison is not made on the
environments the checkpoint was chosen on.

``curve`` prints (and with ``--out`` draws) validation regret against CPU-minutes of fine-tuning from
the runs' metrics.csv.

``gradients`` measures the pathwise gradient's consistency: for three independent batches of
``--batch`` environments, the gradient of their mean cumulative regret at each ``--feedback``
(``feedback_grad``: the share of gradient through each read of the history), its norm and the cosine
similarities between the batches (near 1: the batches agree on a direction; near 0 or negative: the
estimate is noise), and the CPU-seconds of one gradient.
"""

from __future__ import annotations

import sys
import csv
import time
from pathlib import Path

import numpy as np
import torch

from analysis.report import BOOTSTRAP_SAMPLES, paired_ratio
from omgpt.model import load_model
from omgpt.module import validation_envs, validation_rollout
from omgpt.policies import POLICIES, make_policy
from omgpt.rollout import rollout
from omgpt.entry import (
    Checkpoint,
    InputFolder,
    Integer,
    Name,
    OutputFile,
    Real,
    Seed,
    Text,
    entry_point,
    script_parser,
)


def final_regrets(task, envs, policy, horizon: int, seed: int, batch: int = 128) -> np.ndarray:
    """Each environment's cumulative regret at the horizon, played as validation plays it (batch by
    batch, each batch on its own seed: common random numbers for every policy)."""
    runs = next(iter(envs.values())).shape[0]
    out = [validation_rollout(task, envs, torch.arange(i, min(i + batch, runs)), policy, horizon, seed).regrets.sum(1)
           for i in range(0, runs, batch)]  # fmt: skip
    return torch.cat(out).double().numpy()


def bootstrap90(values: np.ndarray) -> list[float]:
    idx = np.random.default_rng(0).integers(0, len(values), size=(BOOTSTRAP_SAMPLES, len(values)))
    return [float(v) for v in np.percentile(values[idx].mean(axis=1), [5, 95])]


def compare(ckpts: list[str], policies: list[str], runs: int, seed: int, versus: list[str] | None = None) -> None:
    models = [load_model(c) for c in ckpts]
    task, horizon = models[0].task, models[0].hparams["horizon"]
    envs = validation_envs(task, runs, seed)
    played = {}
    for path, (model, _, _) in zip(ckpts, models):
        start = time.process_time()
        played[path] = final_regrets(task, envs, make_policy("omgpt", task, model=model), horizon, seed)
        print(f"  played {path} in {time.process_time() - start:.1f} CPU-s", flush=True)
    for name in policies:
        start = time.process_time()
        played[name] = final_regrets(task, envs, make_policy(name, task, horizon=horizon), horizon, seed)
        print(f"  played {name} in {time.process_time() - start:.1f} CPU-s", flush=True)
    versus = versus or [ckpts[0]]
    print(f"\n{task.name} {task.options()} T={horizon}: {runs} environments of validation seed {seed}")
    print(
        f"{'policy':<60} {'regret':>7} {'90% CI':>16}"
        + "".join(f"   - {Path(v).name[:24]} [paired 90% CI]" for v in versus)
        + ("   / alg-star [paired 90% CI]" if "alg-star" in played else "")
    )
    for name, values in played.items():
        lo, hi = bootstrap90(values)
        row = f"{name[-60:]:<60} {values.mean():7.3f} [{lo:6.3f}, {hi:6.3f}]"
        for v in versus:
            diff = values - played[v]
            dlo, dhi = bootstrap90(diff)
            row += f"   {diff.mean():+7.3f} [{dlo:+.3f}, {dhi:+.3f}]"
        if "alg-star" in played:
            ratio = paired_ratio(values, played["alg-star"])
            ci = ratio["ci90"] or [float("nan")] * 2
            row += f"   {ratio['mean'] if ratio['mean'] is not None else float('nan'):6.3f} [{ci[0]:.3f}, {ci[1] if ci[1] is not None else float('inf'):.3f}]"
        print(row)


def curve(runs: list[str], out: str | None) -> None:
    series = {}
    for run in runs:
        rows = list(csv.DictReader(open(Path(run) / "metrics.csv")))
        points = [
            (float(r["time/cpu_minutes"]), float(r["val/regret"]), int(r["step"])) for r in rows if r.get("val/regret")
        ]
        series[run] = points
        print(run)
        for cpu, regret, step in points:
            print(f"  step {step:5d}  {cpu:6.2f} CPU-min  val/regret {regret:.3f}")
    if out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for run, points in series.items():
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=Path(run).parent.name)
        ax.set_xlabel("CPU-minutes of fine-tuning (one thread)")
        ax.set_ylabel("validation regret at T")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out, dpi=120)
        print(f"wrote {out}")


def gradients(ckpt: str, batch: int, feedbacks: list[float]) -> None:
    model, task, hparams = load_model(ckpt)
    params = list(model.parameters())
    for feedback in feedbacks:
        grads, seconds = [], []
        for seed in (1, 2, 3):
            g = torch.Generator().manual_seed(seed)
            start = time.process_time()
            policy = make_policy("omgpt", task, model=model, differentiable=True, feedback_grad=feedback)
            history = rollout(task, task.sample_envs(batch, g), policy, hparams["horizon"], g, differentiable=True)
            grads.append(torch.cat([d.flatten() for d in torch.autograd.grad(history.regrets.sum(1).mean(), params)]))
            seconds.append(time.process_time() - start)
        cos = [float(grads[i] @ grads[j] / grads[i].norm() / grads[j].norm()) for i, j in ((0, 1), (0, 2), (1, 2))]
        print(
            f"feedback_grad {feedback}: norms {[round(float(d.norm()), 1) for d in grads]}, cosines {[round(c, 2) for c in cos]}, "
            f"{np.mean(seconds):.2f} CPU-s per gradient of {batch} rollouts"
        )


@entry_point
def main(argv: list[str] | None = None) -> None:
    torch.set_num_threads(1)
    parser = script_parser(__file__, __doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compare")
    p.add_argument("ckpts", type=Checkpoint(), nargs="+")
    p.add_argument("--policies", type=Name(lambda: sorted(POLICIES)), nargs="*", default=["alg-star"])
    p.add_argument("--runs", type=Integer(1, 1_000_000), default=256)
    p.add_argument("--seed", type=Seed("validation"), default=10_002)
    p.add_argument(
        "--versus",
        type=Text(),
        nargs="*",
        help="the rows to take paired differences from (default: the first checkpoint)",
    )
    p = sub.add_parser("curve")
    p.add_argument("runs", type=InputFolder(), nargs="+")
    p.add_argument("--out", type=OutputFile())
    p = sub.add_parser("gradients")
    p.add_argument("ckpt", type=Checkpoint())
    p.add_argument("--batch", type=Integer(1, 1_000_000), default=32)
    p.add_argument("--feedback", type=Real(0, 1), nargs="+", default=[1.0, 0.8, 0.5, 0.0])
    args = parser.parse_args(argv)
    if args.command == "compare":
        compare(args.ckpts, args.policies, args.runs, args.seed, args.versus)
    elif args.command == "curve":
        curve(args.runs, args.out)
    else:
        gradients(args.ckpt, args.batch, args.feedback)


if __name__ == "__main__":
    sys.exit(main())
