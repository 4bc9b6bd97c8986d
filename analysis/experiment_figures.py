"""The figures of ``omgpt experiment``, drawn from the numbers of its ``experiment.json`` alone (so
``omgpt experiment NAME --redraw`` redraws them without re-running anything). Plain drawing helpers:
which of them an experiment draws is its kind's choice (``omgpt.commands.experiment.kinds``).

* :func:`curves_figure`: the paper's layout -- one column per panel, cumulative regret on top (final
  regret in the legend) and action suboptimality below, mean with a 90% band.
* :func:`advantage_figure`: the reward improvement rate of OMGPT over the best benchmark on a grid
  (layers x context dimension), as a heat map; :func:`scaling_figure`: the same study as scaling curves.
* :func:`alg_star_match_figures`: sample paths of ``a*``, OMGPT and ``Alg*`` on one test environment,
  and the distribution of ``TF(H_t) - Alg*(H_t)`` per pool (a histogram; a scatter for 2-D actions).
* :func:`demand_prediction_figure`: prediction error against the number of observed samples, OMGPT vs
  ridge; :func:`obs_learning_curve_figure`: the observation head's error against training steps.
* :func:`finetuning_figure`: validation regret against CPU-minutes of fine-tuning on regret, per
  setting, from the supervised model's validation regret.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from omgpt.analysis.observation_head import draw_demand_errors
from omgpt.analysis.report import draw_curves, final_demand_errors
from omgpt.files import save_figure


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def curves_figure(panels: list[dict], path: Path, max_cols: int = 4) -> Path:
    """Regret (top) and suboptimality (bottom) per panel; more than ``max_cols`` panels wrap."""
    plt = _plt()
    cols = min(len(panels), max_cols)
    blocks = -(-len(panels) // cols)
    fig, axes = plt.subplots(2 * blocks, cols, figsize=(4.2 * cols, 6.4 * blocks), squeeze=False)
    for i, panel in enumerate(panels):
        r, c = 2 * (i // cols), i % cols
        stats = {label: p["curves"] for label, p in panel["policies"].items()}
        draw_curves(axes[r, c], stats, "regret")
        draw_curves(axes[r + 1, c], stats, "suboptimality")
        axes[r, c].set_title(panel["title"], fontsize=10)
        if panel.get("window"):  # horizon generalisation: where the model's trained horizon ends
            for ax in (axes[r, c], axes[r + 1, c]):
                ax.axvline(panel["window"], color="grey", ls="--", lw=0.8)
    for j in range(len(panels), blocks * cols):
        r, c = 2 * (j // cols), j % cols
        axes[r, c].axis("off")
        axes[r + 1, c].axis("off")
    fig.tight_layout()
    return save_figure(fig, path)


def improvement_rate(panel: dict) -> float:
    """``(R_omgpt - R_best) / R_best``, ``R`` = expected cumulative reward = the optimal policy's
    minus the regret, for the panel's best benchmark (paper §5.1.2; chosen on validation regret,
    :func:`omgpt.analysis.report.best_benchmark`)."""
    from omgpt.analysis.report import best_benchmark

    reward = {k: p["optimal_reward"] - p["final_regret"]["mean"] for k, p in panel["policies"].items()}
    best = reward[best_benchmark(panel)[0]]
    return (reward["omgpt"] - best) / abs(best)


def advantage_figure(panels: list[dict], path: Path) -> Path:
    plt = _plt()
    layers = sorted({p["grid"]["layers"] for p in panels})
    dims = sorted({p["grid"]["dimension"] for p in panels})
    grid = np.full((len(layers), len(dims)), np.nan)
    for p in panels:
        grid[layers.index(p["grid"]["layers"]), dims.index(p["grid"]["dimension"])] = 100 * improvement_rate(p)
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    lim = np.nanmax(np.abs(grid)) or 1.0
    im = ax.imshow(grid, cmap="RdBu", vmin=-lim, vmax=lim, origin="lower")
    for i in range(len(layers)):
        for j in range(len(dims)):
            ax.text(
                j,
                i,
                f"{grid[i, j]:+.1f}%",
                ha="center",
                va="center",
                fontsize=10,
                color="white" if abs(grid[i, j]) > 0.6 * lim else "black",
            )
    ax.set_xticks(range(len(dims)), [str(d) for d in dims])
    ax.set_yticks(range(len(layers)), [str(n) for n in layers])
    ax.set(xlabel="problem dimension (context)", ylabel="layers", title="reward improvement over the best benchmark")
    fig.colorbar(im, ax=ax, label="%")
    fig.tight_layout()
    return save_figure(fig, path)


def scaling_figure(result: dict, path: Path) -> Path:
    """The model-size study as scaling curves: per problem dimension, each depth's validation regret
    against training steps (from its training record: does regret fall with steps at a fixed depth?),
    and the test regret against depth at the steps trained (does it fall with depth?)."""
    plt = _plt()
    panels = result["panels"]
    dims = sorted({p["grid"]["dimension"] for p in panels})
    fig, axes = plt.subplots(1, len(dims) + 1, figsize=(4.2 * (len(dims) + 1), 3.8), squeeze=False)
    for ax, dim in zip(axes[0], dims):
        for p in sorted((p for p in panels if p["grid"]["dimension"] == dim), key=lambda p: p["grid"]["layers"]):
            curve = result["models"][p["model"]].get("val_regret") or []
            ax.plot([s for s, _ in curve], [v for _, v in curve], marker=".", label=f"{p['grid']['layers']} layers")
        ax.set(xlabel="training steps", ylabel="validation regret at T", yscale="log", title=f"dimension {dim}")
        ax.legend(fontsize=8)
    ax = axes[0, -1]
    for dim in dims:
        row = sorted(
            (p["grid"]["layers"], p["policies"]["omgpt"]["final_regret"]["mean"])
            for p in panels
            if p["grid"]["dimension"] == dim
        )
        ax.plot([n for n, _ in row], [r for _, r in row], marker="o", label=f"dimension {dim}")
    ax.set(xlabel="layers", ylabel="OMGPT's test regret at T", yscale="log", title="test regret against depth")
    ax.set_xticks(sorted({p["grid"]["layers"] for p in panels}))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def alg_star_match_figures(panels: list[dict], out: Path) -> list[Path]:
    plt = _plt()
    files = []
    paths = [p for p in panels if len(p["alg_star_match"]["path"]["omgpt"]) and not _is_vector(p)]
    if paths:  # sample paths of scalar actions (2-D actions have only the scatter below)
        files.append(_sample_paths(paths, out / "sample_paths.png"))
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.3 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        diff = np.asarray(panel["alg_star_match"]["diff"])
        if diff.shape[1] == 2:
            ax.scatter(diff[:, 0], diff[:, 1], s=2, alpha=0.3)
            ax.set(xlabel="TF - Alg* (1st coordinate)", ylabel="2nd coordinate")
        else:
            ax.hist(diff[:, 0], bins=60, color="tab:blue", alpha=0.8)
            ax.set(
                xlabel="TF - Alg*"
                + (" (reward; Alg*: expected over its draw)" if panel["alg_star_match"]["discrete"] else ""),
                ylabel="count",
            )
        ax.set_title(f"{panel['title']}\nmean |TF - Alg*| = {panel['alg_star_match']['mean_abs_diff']:.3f}", fontsize=9)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    files.append(save_figure(fig, out / "tf_minus_alg_star.png"))
    return files


def _sample_paths(paths: list[dict], path_png: Path) -> Path:
    plt = _plt()
    cols = min(3, len(paths))
    rows = -(-len(paths) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.4 * rows), squeeze=False)
    for ax in list(axes.flat)[len(paths) :]:
        ax.axis("off")
    for ax, panel in zip(axes.flat, paths):
        path = panel["alg_star_match"]["path"]
        steps = np.arange(1, len(path["omgpt"]) + 1)
        style = {
            "optimal": dict(color="black", ls=":", label="a* (optimal)"),
            "omgpt": dict(label="TF (OMGPT)", marker="o", ms=3),
            "alg-star": dict(label="Alg*", marker="x", ms=4),
        }
        for key, kw in style.items():
            ax.plot(steps, path[key], drawstyle="steps-mid" if panel["alg_star_match"]["discrete"] else "default", **kw)
        ax.set(xlabel="t", ylabel="arm" if panel["alg_star_match"]["discrete"] else "action", title=panel["title"])
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path_png)


def _is_vector(panel: dict) -> bool:
    return np.asarray(panel["alg_star_match"]["diff"]).shape[1] > 1


def demand_prediction_figure(panels: list[dict], path: Path) -> Path:
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        draw_demand_errors(ax, panel["demand_prediction"])
        ax.set_title(panel["title"], fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


def obs_learning_curve_figure(result: dict, path: Path) -> Path:
    """Each model's observation-head error after T-1 samples (validation rollouts) against training
    steps, with ridge's on the test panels it serves as dashed lines."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, rec in ((n, r) for n, r in result["models"].items() if r.get("val_obs_mse")):
        curve = np.asarray(rec["val_obs_mse"], dtype=float)
        (line,) = ax.plot(curve[:, 0], curve[:, 1], marker=".", label=f"{name}: observation head")
        for j, panel in enumerate(p for p in result["panels"] if p["model"] == name):
            ax.axhline(
                final_demand_errors(panel)[1],
                color=line.get_color(),
                ls=("--", ":", "-.")[j % 3],
                lw=1,
                label=f"ridge, {panel['title']}",
            )
    T = result["panels"][0]["horizon"]
    ax.set(
        xlabel="training steps",
        ylabel=f"demand MSE after {T - 1} samples",
        xscale="log",
        yscale="log",
        title="the observation head's learning curve",
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def finetuning_figure(panels: list[dict], path: Path, max_cols: int = 3) -> Path:
    """Per panel (``panel["finetuning"]``, :mod:`omgpt.commands.experiment.kinds.beyond_alg_star`): the
    fine-tuned model's validation regret against CPU-minutes of fine-tuning (its validation steps at
    its mean CPU-seconds per step), starting at 0 from the supervised model's validation regret (its
    kept checkpoint's, on its own fit's validation environments); the kept checkpoint's validation regret
    dotted."""
    plt = _plt()
    cols = min(len(panels), max_cols)
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.2 * rows), squeeze=False)
    for i, panel in enumerate(panels):
        ax = axes[i // cols, i % cols]
        sup, ft = panel["finetuning"]["supervised"], panel["finetuning"]["finetuned"]
        per_step = ft["seconds"] / ft["steps"] / 60
        curve = np.asarray(ft["val_regret"], dtype=float)
        ax.plot(
            [0.0, *curve[:, 0] * per_step],
            [sup["best_val_regret"], *curve[:, 1]],
            marker=".",
            color="C3",
            label=ft["label"],
        )
        ax.plot([0.0], [sup["best_val_regret"]], marker="o", color="C0", ls="", label=f"supervised ({sup['label']})")
        ax.axhline(ft["best_val_regret"], color="C3", ls=":", lw=1, label="kept checkpoint")
        ax.set(xlabel="CPU-minutes of fine-tuning", ylabel="validation regret" if i % cols == 0 else None)
        ax.set_title(panel["title"], fontsize=9)
        ax.legend(fontsize=6)
    for j in range(len(panels), rows * cols):
        axes[j // cols, j % cols].axis("off")
    fig.tight_layout()
    return save_figure(fig, path)
