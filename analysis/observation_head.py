"""Demand prediction as a by-product (paper §5.1.6): OMGPT's observation head vs ridge regression.

In dynamic pricing, after ``n`` observed samples ``((X_s, a_s), O_s)``, ``s < n``, both methods predict
the demand ``O_n`` at the next context ``X_n`` and the price ``a_n`` played there:

* OMGPT reads it from its observation head at action token ``a_n`` (it sees ``H_n ∪ {a_n}``, §3.5.3);
* ridge regression (``λ = 0.1``, scikit-learn ``Ridge``) is fitted on the ``n`` samples with the
  linear-demand feature map ``z = (X, a·X)`` -- the exact form of ``D = αᵀX - βᵀX·a + ε``, which has no
  intercept, so none is fitted. With ``2d`` coefficients and few samples the problem is
  under-determined, which is why the paper uses ridge rather than least squares.

The error at ``n`` is the squared difference to the *expected* demand ``E[O_n | X_n, a_n]``
(``Task.mean_observation``: the estimation error; the noise variance would add the same constant to both methods), averaged over the
runs; ``mse_observed`` is the same against the realised, noisy demand. ``n`` runs from 1 to ``T-1``.
Square-demand environments (the paper's figures b and c) are where the linear feature map is
mis-specified: evaluate a ``demand_types=mixed`` checkpoint with ``demand_types=square``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from omgpt.analysis.report import mean_band_ci, paired_ratio
from omgpt.files import save_figure, write_json

RIDGE_LAMBDA = 0.1  # paper §5.1.6


def ridge_predictions(
    contexts: np.ndarray,
    actions: np.ndarray,
    observations: np.ndarray,
    lam: float = RIDGE_LAMBDA,
    samples: range | list[int] | None = None,
) -> np.ndarray:
    """Ridge's prediction of ``O_n`` from the first ``n`` samples, for every run and ``n = 1..T-1`` (or
    only the ``n`` in ``samples``: a learning curve's last point needs one fit per run, not ``T - 1``).

    ``contexts (B, T, d)``, ``actions (B, T, 1)``, ``observations (B, T, 1)`` -> ``(B, T)`` with column
    ``n`` the prediction after ``n`` samples (column 0, and any ``n`` not asked for, is NaN)."""
    from sklearn.linear_model import Ridge

    z = np.concatenate([contexts, actions * contexts], axis=-1)  # (B, T, 2d): the linear-demand features
    y = observations[..., 0]
    pred = np.full(y.shape, np.nan)
    for i in range(z.shape[0]):
        for n in samples or range(1, z.shape[1]):
            fit = Ridge(alpha=lam, fit_intercept=False).fit(z[i, :n], y[i, :n])
            pred[i, n] = fit.predict(z[i, n : n + 1])[0]
    return pred


DEMAND_FILES = ("demand_prediction.json", "demand_prediction.png")


def demand_report(
    predictions: dict[str, np.ndarray], expected: np.ndarray, observed: np.ndarray, meta: dict, out: str | Path
) -> dict:
    """Write ``demand_prediction.json`` and ``demand_prediction.png`` (:data:`DEMAND_FILES`) into the
    folder ``out``; return the summary.

    ``predictions``: method name -> ``(runs, T)`` predicted demand (column ``n`` after ``n`` samples);
    ``expected`` / ``observed``: the expected and realised demand, ``(runs, T)``. ``meta`` is copied
    into the JSON (task, horizon, runs, seed, ...)."""
    out = Path(out)
    ns = np.arange(1, expected.shape[1])
    methods, errors = {}, {}
    for name, pred in predictions.items():
        err = errors[name] = (pred[:, 1:] - expected[:, 1:]) ** 2
        stats = mean_band_ci(err)
        methods[name] = {
            "mse": stats["mean"].tolist(),
            "ci90": None if stats["ci90"] is None else stats["ci90"].tolist(),  # None: one run
            "mse_observed": ((pred[:, 1:] - observed[:, 1:]) ** 2).mean(0).tolist(),
        }
    summary = {
        **meta,
        "target": "expected demand E[O_n | X_n, a_n]",
        "ridge_lambda": RIDGE_LAMBDA,
        "n": ns.tolist(),
        "methods": methods,
    }
    if {"omgpt", "ridge"} <= errors.keys():  # the head against ridge after the last sample, paired by environment
        summary["head_vs_ridge"] = paired_ratio(errors["omgpt"][:, -1], errors["ridge"][:, -1])
    write_json(summary, out / "demand_prediction.json")
    plot_demand_errors(summary, out / "demand_prediction.png")
    print(format_demand_table(summary))
    return summary


def format_demand_table(summary: dict) -> str:
    ns = summary["n"]
    shown = [n for n in (1, 2, 5, 10, 20, 50, 100, 200) if n <= ns[-1]]
    shown += [ns[-1]] if ns[-1] not in shown else []
    head = f"{'n samples':<10}" + "".join(f"{name:>12}" for name in summary["methods"])
    lines = [
        f"demand prediction MSE ({summary.get('task', '')}, {summary.get('runs', '?')} runs)",
        head,
        "-" * len(head),
    ]
    for n in shown:
        lines.append(f"{n:<10}" + "".join(f"{m['mse'][n - 1]:>12.4g}" for m in summary["methods"].values()))
    return "\n".join(lines)


def plot_demand_errors(summary: dict, path: Path) -> None:
    """The paper's figure: prediction MSE against the number of observed samples, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    draw_demand_errors(ax, summary)
    ax.set_title(f"demand prediction: {summary.get('task', '')}, {summary.get('runs', '?')} runs (90% CI)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


def draw_demand_errors(ax, summary: dict) -> None:
    """Per method: the prediction MSE against the number of observed samples with its 90% CI."""
    ns = np.asarray(summary["n"])
    for name, m in summary["methods"].items():
        (line,) = ax.plot(ns, m["mse"], label=name)
        if m["ci90"] is not None:
            lo, hi = np.asarray(m["ci90"])
            ax.fill_between(ns, lo, hi, color=line.get_color(), alpha=0.2)
    ax.set(xlabel="observed samples n", ylabel="squared error vs expected demand", yscale="log")
    ax.legend()
