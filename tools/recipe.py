"""The CPU training-recipe study: one lever at a time on the demo's setting, against wall-clock time.

    python -m tools.recipe run VARIANT [VARIANT ...] [--jobs 2] [--runs-dir runs/recipe]
    python -m tools.recipe report [--runs-dir runs/recipe] [--out results/recipe]

A variant is ``configs/recipe/<VARIANT>.yaml``, a config layered on ``configs/recipe/baseline.yaml`` (the
demo as it was when the study began, frozen there so that the study stays reproducible as the demo
moves on) that changes one thing (its first comment line says which lever). The ``pricing-*`` variants
also move the study to its second task, contextual pricing (``d = 6``): each is compared with the
variants of its own task and with ``alg-star`` on its task's validation episodes. ``run`` trains each as
``omgpt fit --config configs/recipe/baseline.yaml --config configs/recipe/VARIANT.yaml`` (the command the
report quotes) with the run store (:mod:`omgpt.commands.store`: one CPU thread, resumed from the run's
``last.ckpt`` when interrupted), ``--jobs`` at a time. ``report`` reads every finished run's
validation curve -- ``val/regret`` (mean final regret on the 128 validation environments) and
``val/suboptimality`` (the mean action error ``|a - a*|`` at ``t = T``) against the training time
``time/cpu_minutes``: the process's CPU time, which with one thread is the wall-clock the run takes on
an idle core of this machine, whatever else shared the machine meanwhile -- and writes ``report.md``, ``recipe.json``, ``curves.png`` and a
copy of each run's metrics (``metrics/VARIANT.csv``, so the report redraws from committed data).
Validation environments are fixed and shared by all variants; they are not the test environments any
claim is made on (``omgpt evaluate`` draws fresh ones). Every argument is checked before anything is
written: an error is one line, ``omgpt: error: ...``, exit code 2.
"""

from __future__ import annotations

import sys
import csv
import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from omgpt.commands.store import fit, metric_rows, validation_points
from omgpt.errors import OMGPTError
from omgpt.files import save_figure, writable_file, write_json, write_text
from omgpt.entry import InputFolder, Integer, Jobs, Name, OutputFolder, entry_point, script_parser

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ROOT / "configs" / "recipe"


def fit_command(variant: str, runs_dir: Path) -> list[str]:
    layers = ["--config", "configs/recipe/baseline.yaml"] + (
        ["--config", f"configs/recipe/{variant}.yaml"] if variant != "baseline" else []
    )
    return [
        "omgpt",
        "fit",
        *layers,
        "--trainer.logger.init_args.save_dir",
        str(runs_dir),
        "--trainer.logger.init_args.name",
        variant,
        "--trainer.logger.init_args.version",
        "0",
        "--trainer.enable_progress_bar",
        "false",
    ]


def run_dir(variant: str, runs_dir: Path) -> Path:
    """Where a variant's fit logs (one folder, so that an interrupted fit resumes in it)."""
    return runs_dir / variant / "version_0"


def check_variants(variants: list[str]) -> None:
    unknown = [v for v in variants if v not in available()]
    if unknown:
        raise OMGPTError(f"no variant {', '.join(map(repr, unknown))}; available: {', '.join(available())}")


def train(variant: str, runs_dir: Path, nice: int = 0) -> str:
    """Train one variant to its end (resumed if interrupted); returns how it went, for the summary."""
    try:
        fit(
            fit_command(variant, runs_dir)[2:],
            run_dir(variant, runs_dir),
            runs_dir / f"{variant}.log",
            f"variant {variant!r}",
            nice,
        )
    except OMGPTError as e:  # one variant's failure does not stop the others
        return f"failed: {e}"
    return "done"


def finished(log: Path) -> bool:
    """Only runs that trained to their end are reported: Lightning says so in the fit's log."""
    return log.is_file() and "`Trainer.fit` stopped" in log.read_text(errors="replace")


def available() -> list[str]:
    return sorted(p.stem for p in VARIANTS.glob("*.yaml"))


def lever(variant: str) -> str:
    """The variant config's first comment line: which lever it moves."""
    first = (VARIANTS / f"{variant}.yaml").read_text().splitlines()[0]
    return first.lstrip("# ").strip()


def task_of(variant: str) -> tuple[str, dict]:
    """The task (and its options) a variant trains on: its own ``model.task`` or the baseline's."""
    import yaml

    model = {}
    for name in ("baseline", variant):
        model.update(yaml.safe_load((VARIANTS / f"{name}.yaml").read_text()).get("model") or {})
    return model["task"], model.get("task_options") or {}


def metrics_csv(rows: list[dict]) -> str:
    """A run's metrics as one CSV, as Lightning's logger writes it (sorted columns, empty where a row
    has no value): a resumed run's parts joined, a single part unchanged."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=sorted({key for row in rows for key in row}))
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def bayes_on_validation(
    task_name: str = "newsvendor",
    task_options: dict | None = None,
    runs: int = 128,
    batch: int = 128,
    val_seed: int = 10_000,
) -> dict:
    """``alg-star`` on the study's validation episodes of a task (T = 50, the module's validation
    environments and seeds): the Bayes-optimal level each of its variants' curves aims at. With the
    resample-move particles (``sampler="smc"``), which ``results/recipe/recipe.json`` was measured with
    (alg-star's default is ``"auto"`` since 2026-11-28)."""
    import torch

    from omgpt.module import validation_envs, validation_rollout
    from omgpt.policies import make_policy
    from omgpt.tasks import make_task

    task, horizon = make_task(task_name, **(task_options or {})), 50
    envs = validation_envs(task, runs, val_seed)
    regret, subopt = [], []
    for lo in range(0, runs, batch):
        idx = torch.arange(lo, min(runs, lo + batch))
        history = validation_rollout(task, envs, idx, make_policy("alg-star", task, sampler="smc"), horizon, val_seed)
        regret.append(history.cumulative_regret()[:, -1])
        subopt.append(history.suboptimality[:, -1])
    return {"regret": round(float(torch.cat(regret).mean()), 3), "subopt": round(float(torch.cat(subopt).mean()), 4)}


def report(runs_dir: Path, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = {
        v: rows for v in available() if finished(runs_dir / f"{v}.log") and (rows := metric_rows(run_dir(v, runs_dir)))
    }
    if not ran and not list(out.glob("metrics/*.csv")):
        raise OMGPTError(f"nothing to report: no finished run in {runs_dir} and no metrics in {out / 'metrics'}")
    writable_file(out / "report.md", "--out")  # an unwritable --out fails before any file is written
    results = {}
    for variant in available():
        if variant in ran:  # keep a copy beside the report, so that it redraws from committed data
            write_text(out / "metrics" / f"{variant}.csv", metrics_csv(ran[variant]))
        if (out / "metrics" / f"{variant}.csv").is_file():
            curve = [
                q
                for q in validation_points(metric_rows(out / "metrics" / f"{variant}.csv"))
                if q["minutes"] is not None
            ]
            if curve:
                results[variant] = {
                    "lever": lever(variant),
                    "command": " ".join(fit_command(variant, Path("runs/recipe"))),
                    "curve": curve,
                    "best_regret": min(p["regret"] for p in curve),
                    "final": curve[-1],
                }
    specs = {variant: task_of(variant) for variant in results}  # (task, options), each config read once
    for variant, r in results.items():
        r["task"] = specs[variant][0]
    options = dict(specs.values())
    tasks = sorted(options, key=lambda t: (t != "newsvendor", t))
    stars = {t: bayes_on_validation(t, options[t]) for t in tasks}
    fig, axes = plt.subplots(len(tasks), 2, figsize=(13, 4.8 * len(tasks)), squeeze=False)
    for row, task in zip(axes, tasks):
        for ax, key in zip(row, ("regret", "subopt")):
            ax.axhline(stars[task][key], color="k", ls=":", lw=1, label="alg-star (Bayes-optimal)")
        for variant, r in sorted(results.items()):
            if r["task"] != task:
                continue
            minutes, width = (
                [p["minutes"] for p in r["curve"]],
                2.5 if "baseline" in variant or "transition" in variant else 1.2,
            )
            style = "--" if "baseline" in variant else "-"  # the paper layout's starting points dashed
            for ax, key in zip(row, ("regret", "subopt")):
                ax.plot(minutes, [p[key] for p in r["curve"]], style, marker=".", label=variant, lw=width)
        row[0].set(
            xlabel="training time (minutes on one core of this machine)",
            ylabel="validation regret at T",
            yscale="log",
            title=f"{task}, T = 50",
        )
        row[1].set(
            xlabel="training time (minutes on one core of this machine)",
            ylabel="validation |a - a*| at t = T",
            yscale="log",
            title=f"{task}, T = 50",
        )
        row[0].legend(fontsize=7, ncol=2)
    fig.suptitle(
        "One lever at a time on the demo's recipe (newsvendor and censored newsvendor: the full prior; pricing: d = 6)"
    )
    fig.tight_layout()
    save_figure(fig, out / "curves.png", dpi=110)
    write_json({"alg-star": stars, "variants": results}, out / "recipe.json", indent=1)
    lines = [
        "# The CPU recipe study",
        "",
        __doc__.split("\n\n")[2].replace("\n", " "),
        "",
        "![curves](curves.png)",
        "",
        "| task | variant | lever | steps | minutes | best val. regret | final val. regret (× alg-star) | final \\|a − a*\\| at T |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for task in tasks:
        star = stars[task]
        for variant, r in sorted(
            ((v, r) for v, r in results.items() if r["task"] == task), key=lambda kv: kv[1]["final"]["regret"]
        ):
            f = r["final"]
            lines.append(
                f"| {task} | `{variant}` | {r['lever']} | {f['step']} | {f['minutes']:.1f} | {r['best_regret']:.2f} | {f['regret']:.2f} "
                f"({f['regret'] / star['regret']:.2f}×) | {f['subopt']:.3f} |"
            )
        lines.append(
            f"| {task} | `alg-star` | the Bayes-optimal policy on the same validation episodes (no training) | | | | "
            f"{star['regret']:.2f} | {star['subopt']:.3f} |"
        )
    lines += ["", "Commands (from the repository root; `python -m tools.recipe run VARIANT` runs the same):", ""]
    lines += [f"* `{v}`: `{r['command']}`" for v, r in sorted(results.items())]
    write_text(out / "report.md", "\n".join(lines) + "\n")
    print(f"wrote {out / 'report.md'}, {out / 'curves.png'} ({len(results)} variants)")


@entry_point
def main(argv: list[str] | None = None) -> int:
    p = script_parser(__file__, __doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("variants", type=Name(available), nargs="+", help=f"of: {', '.join(available())}")
    r.add_argument("--jobs", type=Jobs(), default="2")
    r.add_argument("--runs-dir", type=OutputFolder(under=ROOT), default="runs/recipe")
    r.add_argument(
        "--nice",
        type=Integer(0, 19),
        default=0,
        help="lower the runs' priority (they measure CPU time, not wall-clock)",
    )
    rep = sub.add_parser("report")
    rep.add_argument(
        "--runs-dir",
        type=InputFolder(under=ROOT),
        help="where the runs are (default runs/recipe; without it the report redraws from OUT/metrics)",
    )
    rep.add_argument("--out", type=OutputFolder(under=ROOT), default="results/recipe")
    args = p.parse_args(argv)
    if args.cmd == "run":
        check_variants(args.variants)
        runs_dir = args.runs_dir
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            outcomes = list(pool.map(lambda v: train(v, runs_dir, args.nice), args.variants))
        for v, outcome in zip(args.variants, outcomes):
            print(f"{v}: {outcome}")
        return 0 if all(o == "done" for o in outcomes) else 1
    report(args.runs_dir or ROOT / "runs/recipe", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
