"""Compare training runs: validation regret against optimisation steps, from Lightning's CSV logs.

    python -m omgpt.analysis.training_curves --run noisy-oracle=runs/G/version_0 --run random=runs/demo/train/version_0 \\
        --reference ERM=49.65 --reference FAI=75.50 --out results/data_policy

writes ``curves.json`` (every run's (step, val/regret) points) and ``val_regret.png``.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from omgpt.files import save_figure, write_json


def read_val_curve(run_dir: str | Path, metric: str = "val/regret") -> list[tuple[int, float]]:
    """``(step, value)`` pairs of ``metric`` from ``run_dir/metrics.csv``."""
    with open(Path(run_dir) / "metrics.csv") as f:
        return [(int(r["step"]), float(r[metric])) for r in csv.DictReader(f) if r.get(metric)]


def plot_curves(
    curves: dict[str, list[tuple[int, float]]], references: dict[str, float], path: Path, title: str
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, points in curves.items():
        steps, values = zip(*points)
        ax.plot(steps, values, marker="o", ms=3, label=f"{name} (last {values[-1]:.1f})")
    for name, value in references.items():
        ax.axhline(value, ls="--", lw=1, color="grey")
        ax.text(0, value, f" {name} {value:.1f}", va="bottom", fontsize=8, color="grey")
    ax.set(xlabel="training step", ylabel="validation regret at T (mean)", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", action="append", required=True, metavar="LABEL=RUN_DIR")
    p.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="LABEL=VALUE",
        help="horizontal line, e.g. a benchmark's regret",
    )
    p.add_argument("--title", default="validation regret during pre-training")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    curves = {label: read_val_curve(d) for label, d in (r.split("=", 1) for r in a.run)}
    refs = {label: float(v) for label, v in (r.split("=", 1) for r in a.reference)}
    out = Path(a.out)
    write_json({"runs": curves, "references": refs}, out / "curves.json", indent=1)
    plot_curves(curves, refs, out / "val_regret.png", a.title)
    print(f"wrote {out / 'curves.json'} and {out / 'val_regret.png'}")


if __name__ == "__main__":
    main()
