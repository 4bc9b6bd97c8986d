"""Evaluation reports: the summary.json / curves.csv / regret.png contract of ``omgpt evaluate``.

Statistics over runs, as docs/paper-gaps.md §4 asks: the mean curve, a 90% band (5th-95th percentile across runs,
what the paper shades) and a bootstrap 90% confidence interval of the mean.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from omgpt import checks
from omgpt.files import save_figure, write_json, write_text
from omgpt.rollout import History

BOOTSTRAP_SAMPLES = 2000


def mean_band_ci(values: np.ndarray, seed: int = 0) -> dict[str, np.ndarray | None]:
    """``values (runs, T)`` -> per-step ``mean``, ``band90`` (lo, hi) and bootstrap ``ci90`` (lo, hi).
    One run has no confidence interval of its mean (resampling it gives it back, a zero-width
    interval that would claim certainty): ``ci90`` is then ``None``."""
    runs = values.shape[0]
    ci = None
    if runs >= 2:
        idx = np.random.default_rng(seed).integers(0, runs, size=(BOOTSTRAP_SAMPLES, runs))
        ci = bootstrap_percentiles(values, idx)
    return {"mean": values.mean(axis=0), "band90": np.percentile(values, [5, 95], axis=0), "ci90": ci}


def bootstrap_percentiles(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The 5th and 95th percentiles ``(2, T)`` of the resampled means of ``values (runs, T)``, resample
    ``s`` being the runs ``idx[s]`` (``idx (samples, runs)``). In blocks of steps and of resamples of at
    most :data:`omgpt.checks.BOOTSTRAP_BYTES` each: in one piece, ``values[idx]`` is a ``(samples, runs,
    T)`` array, 15 GiB for 10,000 runs of 100 steps. Each mean is summed over the same runs in the same
    order as in one piece, so the numbers are the same, bit for bit."""
    samples, runs = idx.shape
    horizon = values.shape[1]
    steps = max(2, checks.BOOTSTRAP_BYTES // (8 * samples))  # the (samples, steps) means of one block of steps
    out = np.empty((2, horizon))
    for cols in np.array_split(np.arange(horizon), -(-horizon // steps)):
        block = values[:, cols]
        rows = max(1, checks.BOOTSTRAP_BYTES // (8 * runs * len(cols)))  # the (rows, runs, steps) resample
        means = np.concatenate([block[idx[lo : lo + rows]].mean(axis=1) for lo in range(0, samples, rows)])
        out[:, cols] = np.percentile(means, [5, 95], axis=0)
    return out


def final_regret(stats: dict) -> dict:
    """The summary's ``final_regret`` from a policy's regret statistics: the last step's mean, CI
    (``None`` for a single run) and band."""
    ci = stats["ci90"]
    return {
        "mean": float(stats["mean"][-1]),
        "ci90": None if ci is None else [float(v) for v in ci[:, -1]],
        "band90": [float(v) for v in stats["band90"][:, -1]],
    }


def paired_ratio(values: np.ndarray, reference: np.ndarray, seed: int = 0) -> dict:
    """``mean(values) / mean(reference)`` over the same environments (common random numbers: entry ``i``
    of both is environment ``i``), with a paired bootstrap 90% interval: the environments are resampled
    with replacement, the same indices for both, and the ratio of the resampled means taken. Returns
    ``{"mean", "ci90", "runs"}``. A resample whose reference mean is not positive (queueing's regret can
    be, by chance) has an unbounded ratio: where more than 5% of them are, the interval is open above
    (``hi`` is ``None``). ``mean`` is ``None`` when the reference's own mean is not positive, ``ci90``
    for a single environment."""
    values, reference = np.asarray(values, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if values.shape != reference.shape or values.ndim != 1:
        raise ValueError(f"paired_ratio needs two equal-length vectors, got {values.shape} and {reference.shape}")
    runs = len(values)
    if reference.mean() <= 0:
        return {"mean": None, "ci90": None, "runs": runs}
    ci = None
    if runs >= 2:
        idx = np.random.default_rng(seed).integers(0, runs, size=(BOOTSTRAP_SAMPLES, runs))
        ref = reference[idx].mean(axis=1)
        ratios = np.where(ref > 0, values[idx].mean(axis=1) / np.where(ref > 0, ref, 1.0), np.inf)
        if np.isfinite(ratios).all():
            ci = [float(v) for v in np.percentile(ratios, [5, 95])]
        else:  # no interpolation towards infinity: the order statistics themselves
            lo, hi = np.percentile(ratios, [5, 95], method="inverted_cdf")
            ci = [float(lo), float(hi) if np.isfinite(hi) else None]
    return {"mean": float(values.mean() / reference.mean()), "ci90": ci, "runs": runs}


def paired_difference(values: np.ndarray, reference: np.ndarray, seed: int = 0) -> dict:
    """``mean(values - reference)`` over the same environments (entry ``i`` of both is environment ``i``),
    with the paired bootstrap 90% interval of :func:`paired_ratio` (the same resampled environments for
    both, here the mean of their differences). Returns ``{"mean", "ci90", "runs"}``; ``ci90`` is ``None``
    for a single environment."""
    values, reference = np.asarray(values, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if values.shape != reference.shape or values.ndim != 1:
        raise ValueError(f"paired_difference needs two equal-length vectors, got {values.shape} and {reference.shape}")
    diff = values - reference
    ci = None
    if len(diff) >= 2:
        idx = np.random.default_rng(seed).integers(0, len(diff), size=(BOOTSTRAP_SAMPLES, len(diff)))
        ci = [float(v) for v in np.percentile(diff[idx].mean(axis=1), [5, 95])]
    return {"mean": float(diff.mean()), "ci90": ci, "runs": len(diff)}


def ratios_to_alg_star(histories: dict[str, History]) -> dict[str, dict]:
    """Every other policy's :func:`paired_ratio` of final regrets to ``alg-star``'s (empty without it)."""
    if "alg-star" not in histories:
        return {}
    reference = histories["alg-star"].cumulative_regret()[:, -1].double().numpy()
    return {
        name: paired_ratio(h.cumulative_regret()[:, -1].double().numpy(), reference)
        for name, h in histories.items()
        if name != "alg-star"
    }


def final_regrets(panel: dict) -> dict[str, float]:
    """Every policy's mean final regret on an experiment panel (``results/NAME/experiment.json``)."""
    return {k: v["final_regret"]["mean"] for k, v in panel["policies"].items()}


def best_benchmark(panel: dict) -> tuple[str, float]:
    """The panel's best benchmark and its mean final regret on test. The benchmark is the one chosen on
    validation regret (``panel["best_benchmark"]``, recorded by the experiment: every choice is made on
    validation). A panel recorded before that choice was made has none: there, as its run did, the
    benchmark of lowest test regret (:func:`best_rule` says which rule chose)."""
    finals = final_regrets(panel)
    chosen = panel.get("best_benchmark")
    best = chosen["name"] if chosen else min(panel["benchmarks"], key=finals.get)
    return best, finals[best]


def best_rule(panel: dict) -> str:
    """How :func:`best_benchmark` chose, in words for a report."""
    chosen = panel.get("best_benchmark")
    if not chosen:
        return "lowest test regret (this record predates the choice on validation: run the experiment again)"
    env = chosen["environments"]
    return f"lowest validation regret ({env['runs']} validation environments of `{env['setting']}`, seed {env['seed']})"


def final_demand_errors(panel: dict) -> tuple[float, float]:
    """A demand-prediction panel's error after its last sample: (the observation head's, ridge's)."""
    m = panel["demand_prediction"]["methods"]
    return m["omgpt"]["mse"][-1], m["ridge"]["mse"][-1]


def steps_to_reach(
    curve: list, target: float, tail: float = 0.5, seed: int = 0
) -> tuple[float | None, float, list[float | None] | None]:
    """Where a learning curve ``[(step, value), ...]`` reaches ``target`` if it goes on as it went:
    ``log value = a + b log step`` fitted to its last ``tail`` (the early steps are a transient).
    Returns ``(steps, b, ci90)``: ``steps`` is None where the fit is not falling (``b >= 0``); ``ci90`` is
    a pairs bootstrap's 90% interval of the steps over the tail's points (its upper end None where the
    resampled fits that do not fall leave it unbounded: no bound can be given), None for fewer than
    three points."""
    points = np.asarray(curve, dtype=float)
    points = points[int(len(points) * (1 - tail)) :]
    x, y = np.log(points[:, 0]), np.log(points[:, 1])
    b, a = np.polyfit(x, y, 1)
    steps = None if b >= 0 else float(np.exp((np.log(target) - a) / b))
    if len(points) < 3:
        return steps, float(b), None
    rng = np.random.default_rng(seed)
    reach = []
    for _ in range(BOOTSTRAP_SAMPLES):
        idx = rng.integers(0, len(points), len(points))
        if np.ptp(x[idx]) == 0:
            reach.append(np.inf)
            continue
        bb, aa = np.polyfit(x[idx], y[idx], 1)
        reach.append(np.exp((np.log(target) - aa) / bb) if bb < 0 else np.inf)
    lo, hi = np.percentile(np.asarray(reach), [5, 95])
    return steps, float(b), [float(lo) if np.isfinite(lo) else None, float(hi) if np.isfinite(hi) else None]


def interval(pair: list | None) -> str:
    """``[lo, hi]`` for a table (``[lo, ∞)`` when open above); ``undefined`` where there is none (one run)."""
    if pair is None:
        return "undefined"
    return f"[{pair[0]:.2f}, ∞)" if pair[1] is None else f"[{pair[0]:.2f}, {pair[1]:.2f}]"


def summarise(histories: dict[str, History]) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Per policy: statistics of the cumulative regret and of the per-step action suboptimality."""
    return {
        name: {
            "regret": mean_band_ci(h.cumulative_regret().double().numpy()),
            "suboptimality": mean_band_ci(h.suboptimality.double().numpy()),
        }
        for name, h in histories.items()
    }


REPORT_FILES = ("summary.json", "curves.csv", "regret.png")


def write_report(
    histories: dict[str, History],
    task: str,
    horizon: int,
    runs: int,
    seed: int,
    out: str | Path,
    title: str | None = None,
    task_options: dict | None = None,
    stream: dict | None = None,
    extra: dict | None = None,
) -> dict:
    """Write ``summary.json``, ``curves.csv`` and ``regret.png`` (:data:`REPORT_FILES`) into the
    folder ``out``, print the table, return the summary. With ``alg-star`` among the policies every
    other policy also gets its ``ratio_to_alg_star`` (:func:`paired_ratio`).

    ``stream`` (``{"batch_size", "device"}``) is recorded beside the seed because the seed alone does not
    name the draws: :func:`omgpt.evaluation.evaluate_policies` draws each batch's noise from its own
    generator on the device, so another batch size or device type plays the same seed with other noise
    (and a CUDA generator draws other environments too; docs/protocol.md). ``extra`` is stored beside
    the policies' numbers (a data task's clustered costs)."""
    from omgpt.resources import code_version

    out = Path(out)
    stats = summarise(histories)
    ratios = ratios_to_alg_star(histories)
    summary = {
        "task": task,
        "task_options": task_options or {},
        "horizon": horizon,
        "runs": runs,
        "seed": seed,
        **(stream or {}),
        "code_version": code_version(),
        "policies": {
            name: {
                "final_regret": final_regret(s["regret"]),
                "final_suboptimality": {"mean": float(s["suboptimality"]["mean"][-1])},
                **({"ratio_to_alg_star": ratios[name]} if name in ratios else {}),
            }
            for name, s in stats.items()
        },
        **(extra or {}),
    }
    write_json(summary, out / "summary.json")
    _write_curves(stats, out / "curves.csv")
    plot_regret(stats, out / "regret.png", title or f"{task}: {runs} runs")
    print(format_table(summary))
    return summary


def format_table(summary: dict) -> str:
    """A plain-text table sorted by mean final regret (best first)."""
    rows = sorted(summary["policies"].items(), key=lambda kv: kv[1]["final_regret"]["mean"])
    width = max(6, *(len(name) for name, _ in rows))
    with_ratio = any("ratio_to_alg_star" in p for _, p in rows)
    head = f"{'policy':<{width}}  {'final regret':>12}  {'90% CI of mean':>18}  {'90% band':>18}  {'|a - a*| at T':>13}"
    head += f"  {'/ alg-star [90% CI]':>22}" if with_ratio else ""
    options = "".join(f" {k}={v}" for k, v in summary.get("task_options", {}).items() if k != "horizon")
    lines = [
        f"{summary['task']}{options}, horizon {summary['horizon']}, {summary['runs']} runs (seed {summary['seed']})",
        head,
        "-" * len(head),
    ]
    for name, p in rows:
        r = p["final_regret"]
        line = (
            f"{name:<{width}}  {r['mean']:>12.2f}  {interval(r['ci90']):>18}  "
            f"{interval(r['band90']):>18}  {p['final_suboptimality']['mean']:>13.3f}"
        )
        if "ratio_to_alg_star" in p:
            q = p["ratio_to_alg_star"]
            line += (
                f"  {'undefined' if q['mean'] is None else format(q['mean'], '.2f') + ' ' + interval(q['ci90']):>22}"
            )
        lines.append(line)
    if summary["runs"] < 2:
        lines.append("(a 90% CI of the mean needs at least 2 runs: undefined for 1)")
    return "\n".join(lines)


def _write_curves(stats: dict, path: Path) -> None:
    """Long format: one row per (policy, step) with mean / band / CI of regret and suboptimality (the
    CI columns empty for a single run)."""
    text = io.StringIO()
    w = csv.writer(text)
    cols = [f"{m}_{k}" for m in ("regret", "suboptimality") for k in ("mean", "band05", "band95", "ci05", "ci95")]
    w.writerow(["policy", "step", *cols])
    for name, s in stats.items():
        horizon = len(s["regret"]["mean"])
        for t in range(horizon):
            row = []
            for m in ("regret", "suboptimality"):
                st = s[m]
                ci = (None, None) if st["ci90"] is None else (st["ci90"][0, t], st["ci90"][1, t])
                row += [st["mean"][t], st["band90"][0, t], st["band90"][1, t], *ci]
            w.writerow([name, t + 1, *("" if v is None else f"{v:.6g}" for v in row)])
    write_text(path, text.getvalue())


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
    save_figure(fig, path)


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
