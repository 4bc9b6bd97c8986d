"""Compare training runs: validation regret against optimisation steps, from Lightning's CSV logs.

    python -m omgpt.analysis.training_curves --run noisy-oracle=runs/G/version_0 --run random=runs/demo/train/version_0 \\
        --reference ERM=49.65 --reference FAI=75.50 --out results/data_policy

writes ``curves.json`` (every run's (step, val/regret) points) and ``val_regret.png``.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from omgpt.entry import InputFolder, Named, OutputFolder, Real, Text, entry_point, script_parser
from omgpt.errors import OMGPTError
from omgpt.files import save_figure, write_json


def read_val_curve(run_dir: str | Path, metric: str = "val/regret") -> list[tuple[int, float]]:
    """``(step, value)`` pairs of ``metric`` from ``run_dir/metrics.csv`` (a folder without one, or one
    that logged no ``metric``, is one line)."""
    path = Path(run_dir) / "metrics.csv"
    try:
        with open(path) as f:
            points = [(int(r["step"]), float(r[metric])) for r in csv.DictReader(f) if r.get(metric)]
    except OSError as err:
        raise OMGPTError(f"{run_dir}: no Lightning CSV log ({path}: {err.strerror})") from None
    except (KeyError, ValueError) as err:
        raise OMGPTError(f"{path}: not a Lightning CSV log ({err})") from None
    if not points:
        raise OMGPTError(f"{path}: no {metric} logged (a run that never validated)")
    return points


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


@entry_point
def main(argv: list[str] | None = None) -> int:
    p = script_parser(__file__, __doc__)
    p.add_argument("--run", type=Named(InputFolder()), action="append", required=True, metavar="LABEL=RUN_DIR")
    p.add_argument(
        "--reference",
        type=Named(Real()),
        action="append",
        default=[],
        metavar="LABEL=VALUE",
        help="horizontal line, e.g. a benchmark's regret",
    )
    p.add_argument("--title", type=Text(), default="validation regret during pre-training")
    p.add_argument("--out", type=OutputFolder(), required=True)
    a = p.parse_args(argv)
    curves = {label: read_val_curve(d) for label, d in a.run}
    refs = dict(a.reference)
    write_json({"runs": curves, "references": refs}, a.out / "curves.json", indent=1)
    plot_curves(curves, refs, a.out / "val_regret.png", a.title)
    print(f"wrote {a.out / 'curves.json'} and {a.out / 'val_regret.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
