"""Pre-trained reference models: train one with the CPU recipe, ship its weights and a card.

    python -m tools.reference_models train NAME [--minutes 90] [--runs-dir runs/pretrained]
    python -m tools.reference_models card NAME [--runs 1000] [--seed 2] [--runs-dir runs/pretrained]
    python -m tools.reference_models retest NAME [--runs 1000] [--seed 2] [--replication-seed 3]
    python -m tools.reference_models render NAME     # redraw a shipped card from its card.json

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
the test table, and a 10-run spot check that ``tests/test_pretrained.py`` reproduces. ``retest``
evaluates a shipped ``model.ckpt`` again (a new protocol, new benchmarks) without its training run.

The test (SPEC §7) is on ``--runs`` (1,000) fresh environments of a test seed that chose nothing
(:data:`omgpt.seeding.CARD_SEED`; seed 1, the old cards', is where the pricing model's depth and length
were chosen), against every benchmark in its paper and tuned variants. ``card.json``'s top-level
``ratio_to_alg_star`` is OMGPT's mean final regret over ``alg-star``'s on the same environments with a
paired bootstrap 90% interval; ``replication`` repeats it on another test seed, and the two intervals
must overlap (``tests/test_pretrained.py``).
"""
from __future__ import annotations

import argparse
import json
import csv
import os
import subprocess
import sys
from pathlib import Path

from tools.recipe import validation_points
from omgpt.analysis.report import interval
from omgpt.errors import OMGPTError
from omgpt.files import export_weights, read_checkpoint, save_figure, write_json, write_text
from omgpt.seeding import CARD_SEED

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


def check_test_arguments(runs: int, seed: int, replication_seed: int | None = None) -> None:
    """Every argument checked before anything is written (a bad one must not touch a shipped model)."""
    from omgpt import seeding

    if runs < 2:
        raise SystemExit(f"omgpt: error: --runs must be at least 2 (a paired interval needs two environments), got {runs}")
    seeding.check_test_seed(seed, "--seed")
    if replication_seed is not None:
        seeding.check_test_seed(replication_seed, "--replication-seed")
        if replication_seed == seed:
            raise SystemExit("omgpt: error: --replication-seed must differ from --seed")


def card_policies(task) -> list[str]:
    """OMGPT, ``alg-star`` (where the task has a likelihood), every benchmark of the task with its tuned
    variant, and the oracle."""
    from omgpt.policies import policies_for
    from omgpt.policies.tuned import with_tuned_variants

    return ["omgpt", *(["alg-star"] if "alg-star" in policies_for(task) else []), *with_tuned_variants(list(task.benchmarks)), "oracle"]


def test_model(name: str, model_ckpt: Path, horizon: int, runs: int, seed: int, replication_seed: int | None) -> tuple[dict, dict, dict | None]:
    """The card's test, spot check and replication of the model at ``model_ckpt``."""
    from omgpt.commands.evaluate import run_evaluation
    from omgpt.model import load_model
    from omgpt.commands.tune import ensure_tuned

    task = load_model(model_ckpt).task
    policies = card_policies(task)
    ensure_tuned(task.name, task.options(), horizon, policies)
    out = ROOT / "pretrained" / name
    summary = run_evaluation(task.name, {}, policies, str(model_ckpt), runs, None, None, seed, str(out / "test"), progress=False)
    spot = run_evaluation(task.name, {}, ["omgpt"], str(model_ckpt), SPOT_RUNS, None, None, SPOT_SEED, str(out / "spot"), progress=False)
    spot = {"runs": SPOT_RUNS, "seed": SPOT_SEED, "final_regret_mean": spot["policies"]["omgpt"]["final_regret"]["mean"]}
    replication = None
    if replication_seed is not None and "alg-star" in policies:
        again = run_evaluation(task.name, {}, ["omgpt", "alg-star"], str(model_ckpt), runs, None, None, replication_seed,
                               str(out / "replication"), progress=False)
        replication = {**again["policies"]["omgpt"]["ratio_to_alg_star"], "seed": replication_seed}
    return summary, spot, replication


def with_test(info: dict, summary: dict, spot: dict, replication: dict | None) -> dict:
    """The card's record with a new test: the summary, the spot check, and the top-level paired ratio."""
    info = {**info, "test": summary, "spot_check": spot}
    ratio = summary["policies"]["omgpt"].get("ratio_to_alg_star")
    info["ratio_to_alg_star"] = None if ratio is None else {**ratio, "seed": summary["seed"]}
    info["replication"] = replication
    return info


def card(name: str, runs_dir: Path, runs: int, seed: int, replication_seed: int | None = None) -> None:
    check_test_arguments(runs, seed, replication_seed)
    folder = run_dir(name, runs_dir)
    kept = sorted(p for p in (folder / "checkpoints").glob("*.ckpt") if p.name != "last.ckpt")
    if not kept:
        raise SystemExit(f"omgpt: error: {folder} has no kept checkpoint; train {name} first")
    out = ROOT / "pretrained" / name
    model_ckpt = export_weights(kept[-1], out / "model.ckpt")
    from omgpt.model import load_model

    _, task, hparams = load_model(model_ckpt)
    horizon = hparams["horizon"]
    curve = validation_curve(folder)
    info = {"name": name, "task": task.name, "horizon": horizon,
            "command": "omgpt " + " ".join(fit_args(name, Path("runs/pretrained"))),
            "kept_checkpoint": kept[-1].name, "steps": read_checkpoint(model_ckpt).get("global_step"),
            "cpu_minutes": curve[-1]["minutes"] if curve else None, "wall_minutes": wall_minutes(folder), "validation": curve}
    write_card(with_test(info, *test_model(name, model_ckpt, horizon, runs, seed, replication_seed)), out)
    print(f"wrote {out / 'model.ckpt'} ({(out / 'model.ckpt').stat().st_size / 1e6:.1f} MB), {out / 'card.md'}")


def retest(name: str, runs: int, seed: int, replication_seed: int | None) -> None:
    """Test a shipped model again (its training run need not be here): card.json keeps its training
    record and gets the new test."""
    check_test_arguments(runs, seed, replication_seed)
    out = ROOT / "pretrained" / name
    if not (out / "card.json").is_file() or not (out / "model.ckpt").is_file():
        raise SystemExit(f"omgpt: error: no shipped model pretrained/{name} (available: {', '.join(available())})")
    info = json.loads((out / "card.json").read_text())
    write_card(with_test(info, *test_model(name, out / "model.ckpt", info["horizon"], runs, seed, replication_seed)), out)
    print(f"wrote {out / 'card.md'}")


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
             f"## Test: {summary['runs']} fresh environments (test seed {summary['seed']})", "",
             "| policy | final regret | 90% CI | × alg-star [paired 90% CI] | \\|a − a*\\| at T |", "|---|---|---|---|---|"]
    for pol, s in rows:
        q = s.get("ratio_to_alg_star")
        if q:
            ratio = "undefined" if q["mean"] is None else f"{q['mean']:.2f} {interval(q['ci90'])}"
        else:  # a card written before the paired ratio
            ratio = f"{s['final_regret']['mean'] / star:.2f}" if star and pol != "alg-star" else "—"
        lines.append(f"| {pol} | {s['final_regret']['mean']:.2f} | {interval(s['final_regret']['ci90'])} | {ratio} | {s['final_suboptimality']['mean']:.3f} |")
    rep = info.get("replication")
    if rep and info.get("ratio_to_alg_star"):
        lines += ["", f"Replication on {rep['runs']} other fresh environments (test seed {rep['seed']}): OMGPT / alg-star "
                      f"{rep['mean']:.2f} {interval(rep['ci90'])}, against {info['ratio_to_alg_star']['mean']:.2f} "
                      f"{interval(info['ratio_to_alg_star']['ci90'])} above."]
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
    p = argparse.ArgumentParser(prog="python -m tools.reference_models", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("name")
    t.add_argument("--minutes", type=float, default=90)
    t.add_argument("--runs-dir", default="runs/pretrained")
    c = sub.add_parser("card")
    c.add_argument("name")
    c.add_argument("--runs", type=int, default=1000)
    c.add_argument("--seed", type=int, default=CARD_SEED)
    c.add_argument("--replication-seed", type=int, default=CARD_SEED + 1)
    c.add_argument("--runs-dir", default="runs/pretrained")
    e = sub.add_parser("retest", help="test a shipped model again (new protocol or benchmarks), keeping its training record")
    e.add_argument("name")
    e.add_argument("--runs", type=int, default=1000)
    e.add_argument("--seed", type=int, default=CARD_SEED)
    e.add_argument("--replication-seed", type=int, default=CARD_SEED + 1)
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
    try:
        if args.cmd == "retest":
            retest(args.name, args.runs, args.seed, args.replication_seed)
        else:
            card(args.name, ROOT / args.runs_dir, args.runs, args.seed, args.replication_seed)
    except OMGPTError as e:
        raise SystemExit(f"omgpt: error: {e}") from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
