"""Pre-trained reference models: train one with the CPU recipe, ship its weights and a card.

    python -m analysis.reference_models train NAME [--minutes 90] [--runs-dir runs/pretrained]
    python -m analysis.reference_models card NAME [--runs 200] [--seed 1] [--runs-dir runs/pretrained]
    python -m analysis.reference_models render NAME     # redraw a shipped card from its card.json

A reference model is ``configs/pretrained/NAME.yaml``: the task, its horizon, its length in epochs and
the CPU recipe written out in full (a shipped model's command must not drift with the scale configs'
defaults). ``train`` fits it on one CPU thread, resuming from
the run's ``last.ckpt`` when one exists (so a budget can be spent across sessions); the config's
``max_epochs`` sets its length (the cosine schedule is laid out over it) and ``--minutes`` of
wall-clock (Lightning's ``max_time``, counted across resumes) is only a safety cap. ``card`` takes the checkpoint the run kept (lowest
``val/regret_ucb``), writes ``pretrained/NAME/model.ckpt`` -- weights and hyper-parameters only, no
optimizer state, so it stays small -- evaluates it on ``--runs`` fresh test environments against
``alg-star`` (where the task has a likelihood), every benchmark of the task and the oracle, and writes
``pretrained/NAME/card.md`` and ``card.json``: the command, steps, wall-clock, the validation curve,
the test table, and a 10-run spot check that ``tests/test_pretrained.py`` reproduces.
"""
from __future__ import annotations

import argparse
import json
import csv
import os
import subprocess
import sys
from pathlib import Path

from analysis.recipe import validation_points
from omgpt.files import export_weights, read_checkpoint, save_figure, write_json, write_text

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs" / "pretrained"
SPOT_RUNS, SPOT_SEED = 10, 7  # the card's reproducible spot check


def fit_args(name: str, runs_dir: Path) -> list[str]:
    return ["fit", "--config", f"configs/pretrained/{name}.yaml", "--trainer.logger.init_args.save_dir", str(runs_dir),
            "--trainer.logger.init_args.name", name, "--trainer.logger.init_args.version", "0",
            "--trainer.enable_progress_bar", "false"]


def run_dir(name: str, runs_dir: Path) -> Path:
    return runs_dir / name / "version_0"


def train(name: str, runs_dir: Path, minutes: float) -> int:
    if not (CONFIGS / f"{name}.yaml").is_file():
        raise SystemExit(f"omgpt: error: no reference model {name!r}; available: {', '.join(available())}")
    hours, mins = divmod(int(minutes), 60)
    args = fit_args(name, runs_dir) + ["--trainer.max_time", f"00:{hours:02d}:{mins:02d}:00"]
    last = run_dir(name, runs_dir) / "checkpoints" / "last.ckpt"
    if last.is_file():
        args += ["--ckpt_path", str(last)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs_dir.mkdir(parents=True, exist_ok=True)
    with open(runs_dir / f"{name}.log", "a") as log:
        return subprocess.call([sys.executable, "-m", "omgpt", *args], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def available() -> list[str]:
    return sorted(p.stem for p in CONFIGS.glob("*.yaml"))


def validation_curve(folder: Path) -> list[dict]:
    """Validation points of every CSV log of the run (a resumed fit's earlier parts first)."""
    return [q for metrics in sorted(folder.glob("metrics*.csv")) for q in validation_points(metrics)]


def wall_minutes(folder: Path) -> float | None:
    """The run's wall-clock training minutes at its last validation (carried across resumes)."""
    last = None
    for metrics in sorted(folder.glob("metrics*.csv")):
        for row in csv.DictReader(metrics.open()):
            last = float(row["time/wall_minutes"]) if row.get("time/wall_minutes") else last
    return None if last is None else round(last, 1)


def card(name: str, runs_dir: Path, runs: int, seed: int) -> None:
    from omgpt.evaluate import run_evaluation
    from omgpt.module import load_module
    from omgpt.policies import policies_for

    folder = run_dir(name, runs_dir)
    kept = sorted(p for p in (folder / "checkpoints").glob("*.ckpt") if p.name != "last.ckpt")
    if not kept:
        raise SystemExit(f"omgpt: error: {folder} has no kept checkpoint; train {name} first")
    out = ROOT / "pretrained" / name
    model_ckpt = export_weights(kept[-1], out / "model.ckpt")
    module = load_module(str(model_ckpt))
    task = module.task
    policies = ["omgpt", *(["alg-star"] if "alg-star" in policies_for(task) else []), *task.benchmarks, "oracle"]
    summary = run_evaluation(task.name, {}, policies, str(model_ckpt), runs, None, None, seed, str(out / "test"), progress=False)
    spot = run_evaluation(task.name, {}, ["omgpt"], str(model_ckpt), SPOT_RUNS, None, None, SPOT_SEED, str(out / "spot"), progress=False)
    curve = validation_curve(folder)
    info = {"name": name, "task": task.name, "horizon": module.hparams.horizon, "command": "omgpt " + " ".join(fit_args(name, Path("runs/pretrained"))),
            "kept_checkpoint": kept[-1].name, "steps": read_checkpoint(model_ckpt).get("global_step"),
            "cpu_minutes": curve[-1]["minutes"] if curve else None, "wall_minutes": wall_minutes(folder), "validation": curve,
            "test": summary, "spot_check": {"runs": SPOT_RUNS, "seed": SPOT_SEED,
                                            "final_regret_mean": spot["policies"]["omgpt"]["final_regret"]["mean"]}}
    write_card(info, out)
    print(f"wrote {out / 'model.ckpt'} ({(out / 'model.ckpt').stat().st_size / 1e6:.1f} MB), {out / 'card.md'}")


def write_card(info: dict, out: Path) -> None:
    """``card.json``, ``card.md`` and ``validation.png`` from the card's record alone (``render`` redraws
    a shipped card after a format change without evaluating again)."""
    name, summary, curve = info["name"], info["test"], info["validation"]
    write_json(info, out / "card.json", indent=1)
    rows = sorted(summary["policies"].items(), key=lambda kv: kv[1]["final_regret"]["mean"])
    star = summary["policies"].get("alg-star", {}).get("final_regret", {}).get("mean")
    trained = curve[-1]["step"] if curve else info["steps"]
    lines = [f"# Reference model `{name}`", "", f"Task `{info['task']}`, horizon {info['horizon']}; trained with",
             "", f"    {info['command']}", "",
             f"{trained} steps trained in {info['cpu_minutes']} CPU-minutes of one thread (the wall-clock on an idle core of the "
             f"2-core CPU machine; {info['wall_minutes']} minutes of wall-clock as it ran, sharing the machine); "
             f"the model is the checkpoint the run kept, `{info['kept_checkpoint']}` at step {info['steps']} "
             "(lowest validation mean + one sd of regret).", "",
             f"## Test: {summary['runs']} fresh environments (seed {summary['seed']})", "",
             "| policy | final regret | 90% CI | × alg-star | \\|a − a*\\| at T |", "|---|---|---|---|---|"]
    for pol, s in rows:
        ratio = f"{s['final_regret']['mean'] / star:.2f}" if star else "—"
        lo, hi = s["final_regret"]["ci90"]
        lines.append(f"| {pol} | {s['final_regret']['mean']:.2f} | [{lo:.2f}, {hi:.2f}] | {ratio} | {s['final_suboptimality']['mean']:.3f} |")
    plot_validation(curve, name, out / "validation.png")
    lines += ["", "## Validation curve (the run's fixed validation environments, never the test ones)", "",
              "![validation](validation.png)", "", "| step | CPU-minutes | regret | \\|a − a*\\| at T |", "|---|---|---|---|"]
    lines += [f"| {p['step']} | {p['minutes']} | {p['regret']:.2f} | {p['subopt']:.3f} |" for p in curve]
    policies = ",".join(summary["policies"])
    lines += ["", f"Reproduce the test: `omgpt evaluate --ckpt pretrained/{name} --policies {policies} --runs {summary['runs']} --seed {summary['seed']}`"]
    write_text(out / "card.md", "\n".join(lines) + "\n")


def plot_validation(curve: list[dict], name: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    minutes = [p["minutes"] for p in curve]
    left.plot(minutes, [p["regret"] for p in curve], marker=".")
    right.plot(minutes, [p["subopt"] for p in curve], marker=".")
    left.set(xlabel="training time (CPU-minutes, one core)", ylabel="validation regret at T", yscale="log", title=name)
    right.set(xlabel="training time (CPU-minutes, one core)", ylabel="validation |a - a*| at t = T", yscale="log")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.reference_models", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("name")
    t.add_argument("--minutes", type=float, default=90)
    t.add_argument("--runs-dir", default="runs/pretrained")
    c = sub.add_parser("card")
    c.add_argument("name")
    c.add_argument("--runs", type=int, default=200)
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("--runs-dir", default="runs/pretrained")
    r = sub.add_parser("render", help="rewrite a shipped card's card.md and figure from its card.json")
    r.add_argument("name")
    args = p.parse_args(argv)
    if args.cmd == "train":
        return train(args.name, ROOT / args.runs_dir, args.minutes)
    if args.cmd == "render":
        out = ROOT / "pretrained" / args.name
        if not (out / "card.json").is_file():
            raise SystemExit(f"omgpt: error: no shipped card pretrained/{args.name}/card.json")
        write_card(json.loads((out / "card.json").read_text()), out)
        return 0
    card(args.name, ROOT / args.runs_dir, args.runs, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
