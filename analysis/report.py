"""Evaluation reports: the summary.json / curves.csv / regret.png contract of ``omgpt evaluate``.

Statistics over runs, as SPEC §4 asks: the mean curve, a 90% band (5th-95th percentile across runs,
what the paper shades) and a bootstrap 90% confidence interval of the mean.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from omgpt.rollout import History

BOOTSTRAP_SAMPLES = 2000


def mean_band_ci(values: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    """``values (runs, T)`` -> per-step ``mean``, ``band90`` (lo, hi) and bootstrap ``ci90`` (lo, hi)."""
    rng = np.random.default_rng(seed)
    runs = values.shape[0]
    idx = rng.integers(0, runs, size=(BOOTSTRAP_SAMPLES, runs))
    boot_means = values[idx].mean(axis=1)  # (samples, T)
    return {
        "mean": values.mean(axis=0),
        "band90": np.percentile(values, [5, 95], axis=0),
        "ci90": np.percentile(boot_means, [5, 95], axis=0),
    }


def summarise(histories: dict[str, History]) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Per policy: statistics of the cumulative regret and of the per-step action suboptimality."""
    return {
        name: {
            "regret": mean_band_ci(h.cumulative_regret().double().numpy()),
            "suboptimality": mean_band_ci(h.suboptimality.double().numpy()),
        }
        for name, h in histories.items()
    }


def write_report(histories: dict[str, History], task: str, horizon: int, runs: int, seed: int, out: str | Path, title: str | None = None) -> dict:
    """Write ``summary.json``, ``curves.csv`` and ``regret.png`` into ``out``, print the table, return the summary."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stats = summarise(histories)
    summary = {
        "task": task,
        "horizon": horizon,
        "runs": runs,
        "seed": seed,
        "policies": {
            name: {
                "final_regret": {
                    "mean": float(s["regret"]["mean"][-1]),
                    "ci90": [float(v) for v in s["regret"]["ci90"][:, -1]],
                    "band90": [float(v) for v in s["regret"]["band90"][:, -1]],
                },
                "final_suboptimality": {"mean": float(s["suboptimality"]["mean"][-1])},
            }
            for name, s in stats.items()
        },
    }
    _atomic_write(out / "summary.json", json.dumps(summary, indent=2))
    _write_curves(stats, out / "curves.csv")
    plot_regret(stats, out / "regret.png", title or f"{task}: {runs} runs")
    print(format_table(summary))
    print(f"wrote {out / 'summary.json'}, {out / 'curves.csv'}, {out / 'regret.png'}")
    return summary


def format_table(summary: dict) -> str:
    """A plain-text table sorted by mean final regret (best first)."""
    rows = sorted(summary["policies"].items(), key=lambda kv: kv[1]["final_regret"]["mean"])
    width = max(6, *(len(name) for name, _ in rows))
    head = f"{'policy':<{width}}  {'final regret':>12}  {'90% CI of mean':>18}  {'90% band':>18}  {'|a - a*| at T':>13}"
    lines = [f"{summary['task']}, horizon {summary['horizon']}, {summary['runs']} runs (seed {summary['seed']})", head, "-" * len(head)]
    for name, p in rows:
        r = p["final_regret"]
        ci, band = r["ci90"], r["band90"]
        lines.append(
            f"{name:<{width}}  {r['mean']:>12.2f}  {f'[{ci[0]:.2f}, {ci[1]:.2f}]':>18}  "
            f"{f'[{band[0]:.2f}, {band[1]:.2f}]':>18}  {p['final_suboptimality']['mean']:>13.3f}"
        )
    return "\n".join(lines)


def _write_curves(stats: dict, path: Path) -> None:
    """Long format: one row per (policy, step) with mean / band / CI of regret and suboptimality."""
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as f:
        w = csv.writer(f)
        cols = [f"{m}_{k}" for m in ("regret", "suboptimality") for k in ("mean", "band05", "band95", "ci05", "ci95")]
        w.writerow(["policy", "step", *cols])
        for name, s in stats.items():
            horizon = len(s["regret"]["mean"])
            for t in range(horizon):
                row = []
                for m in ("regret", "suboptimality"):
                    st = s[m]
                    row += [st["mean"][t], st["band90"][0, t], st["band90"][1, t], st["ci90"][0, t], st["ci90"][1, t]]
                w.writerow([name, t + 1, *(f"{v:.6g}" for v in row)])
    tmp.replace(path)


def plot_regret(stats: dict, path: Path, title: str) -> None:
    """The paper's figure: cumulative regret and action suboptimality, mean with a 90% band, final
    regret in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_r, ax_s) = plt.subplots(1, 2, figsize=(11, 4))
    draw_curves(ax_r, stats, "regret")
    draw_curves(ax_s, stats, "suboptimality")
    ax_r.set_title(title)
    ax_s.set_title("action suboptimality")
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)


def draw_curves(ax, stats: dict, key: str) -> None:
    """One panel of the paper's figures: per policy the mean of ``key`` (``"regret"``: cumulative
    regret, ``"suboptimality"``: ``|a_t - a*_t|``) over steps with its 90% band; the regret legend
    carries each policy's mean final regret. ``stats``: policy -> key -> ``{"mean", "band90"}``."""
    for name, s in stats.items():
        mean, band = np.asarray(s[key]["mean"]), np.asarray(s[key]["band90"])
        steps = np.arange(1, len(mean) + 1)
        label = f"{name} ({mean[-1]:.1f})" if key == "regret" else name
        (line,) = ax.plot(steps, mean, label=label)
        ax.fill_between(steps, band[0], band[1], color=line.get_color(), alpha=0.15)
    if key == "regret":
        ax.set(xlabel="t", ylabel="cumulative regret")
        ax.legend(fontsize=8)
    else:
        ax.set(xlabel="t", ylabel="action suboptimality |a_t - a*_t|")
        ax.set_yscale("symlog", linthresh=0.1)


def save_figure(fig, path: str | Path) -> Path:
    """Save a matplotlib figure as PNG (creating its folder) and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _atomic_write(path: Path, text: str) -> None:
    """Write via a temporary file so an interrupted run never leaves a half-written report."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
