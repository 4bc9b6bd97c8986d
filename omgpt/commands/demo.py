"""``omgpt demo``: the embedded default job.

Pre-trains a small OMGPT on CPU with ``configs/demo.yaml`` (through the same LightningCLI as
``omgpt fit``), then evaluates it against every benchmark of the task, the Bayes-optimal ``alg-star``
(which knows the prior: the bar OMGPT aims at, not a benchmark) and the oracle on 100 fresh test
environments, prints the table and writes the figure. Every benchmark plays twice: with the paper's
constants and with those tuned on validation environments (``<name>-tuned``, tuned first if the
setting has no tuning yet). See the README for the numbers it printed and docs/recipe.md for the task choice.
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from omgpt.commands.lightning_cli import build_cli
from omgpt.resources import CONFIGS
from omgpt.errors import OMGPTError
from omgpt.seeding import DEMO_SEED
from omgpt.commands.evaluate import run_evaluation
from omgpt.analysis.report import interval
from omgpt.policies import policies_for
from omgpt.policies.tuned import with_tuned_variants
from omgpt.commands.tune import ensure_tuned
from omgpt.tasks import make_task


def run_demo(out: str = "runs/demo", max_steps: int | None = None, runs: int = 100, seed: int = DEMO_SEED) -> int:
    config = CONFIGS / "demo.yaml"
    cfg = yaml.safe_load(config.read_text())
    task = make_task(cfg["model"]["task"], **(cfg["model"].get("task_options") or {}))
    out_dir = Path(out)
    print(
        f"omgpt demo: pre-training OMGPT on {task.name} {cfg['model'].get('task_options') or ''} "
        f"(horizon {cfg['model']['horizon']}) with {config}; run folder {out_dir / 'train'}"
    )
    args = [
        "fit",
        "--config",
        str(config),
        "--trainer.logger.init_args.save_dir",
        str(out_dir),
        "--trainer.logger.init_args.name",
        "train",
    ]
    if max_steps is not None:
        args += ["--trainer.max_steps", str(max_steps)]
    start, start_cpu = time.perf_counter(), time.process_time()
    cli = build_cli(args)
    train_s, train_cpu = time.perf_counter() - start, time.process_time() - start_cpu
    ckpt = cli.trainer.checkpoint_callback.best_model_path or cli.trainer.checkpoint_callback.last_model_path
    if not ckpt:
        raise OMGPTError("training wrote no checkpoint")
    steps = cli.trainer.global_step
    print(
        f"trained {steps} steps in {train_s:.0f} s, {train_cpu:.0f} CPU-s ({steps / train_s:.1f} steps/s); checkpoint {ckpt}"
    )

    benchmarks = with_tuned_variants(list(task.benchmarks))  # the paper's constants and the tuned ones
    bayes = ["alg-star"] if "alg-star" in policies_for(task) else []
    horizon = cfg["model"]["horizon"]
    ensure_tuned(task.name, cfg["model"].get("task_options") or {}, horizon, benchmarks)
    summary = run_evaluation(
        task_name=task.name,
        task_options={},
        policies=["omgpt", *bayes, *benchmarks, "oracle"],
        ckpt=ckpt,
        runs=runs,
        horizon=None,
        window=None,
        seed=seed,
        out=str(out_dir / "evaluate"),
    )
    final = {name: p["final_regret"]["mean"] for name, p in summary["policies"].items()}
    best_benchmark = min(benchmarks, key=final.get)
    verdict = "beats" if final["omgpt"] < final[best_benchmark] else "does NOT beat"
    print(
        f"\nOMGPT {verdict} every benchmark on mean final regret: {final['omgpt']:.2f} vs "
        f"best benchmark {best_benchmark} {final[best_benchmark]:.2f} (oracle {final['oracle']:.2f})."
    )
    ratio = summary["policies"]["omgpt"].get("ratio_to_alg_star") or {}
    if ratio.get("mean") is not None:
        print(
            f"Against the Bayes-optimal alg-star ({final['alg-star']:.2f}): {ratio['mean']:.2f}x its regret "
            f"(paired 90% CI {interval(ratio['ci90'])} over the {runs} test environments)."
        )
    print(f"figure: {out_dir / 'evaluate' / 'regret.png'}   numbers: {out_dir / 'evaluate' / 'summary.json'}")
    # CPU time besides the wall-clock: on a shared machine the wall-clock says more about the neighbours
    print(
        f"the demo took {time.perf_counter() - start:.0f} s ({time.process_time() - start_cpu:.0f} CPU-s of this process), "
        f"training {train_s:.0f} s"
    )
    return 0
