"""Figures of the data-driven newsvendor (``newsvendor-data``): one held-out series' realised demand
against each policy's orders, and the per-day cost of each policy.

Both read the histories :func:`omgpt.evaluation.evaluate_policies` returns for a data task: demand and
orders are in units of the window's *level* (its mean daily demand before the window), multiplied back
by ``envs["level"]`` to show the series' own units; the regret of a day is its newsvendor cost (the
clairvoyant order costs nothing).
"""
from __future__ import annotations

from pathlib import Path

import torch

from omgpt.files import save_figure
from omgpt.rollout import History


def series_orders(histories: dict[str, History], index: int) -> dict:
    """The ``index``-th environment's demand and every policy's orders, in the series' own units, and
    each policy's mean cost per day on that window (level units times the level: the series' units)."""
    first = next(iter(histories.values()))
    level = float(first.envs["level"][index])
    out = {"demand": (first.observations[index, :, 0] * level).tolist(), "level": level, "orders": {}, "cost_per_day": {}}
    for name, h in histories.items():
        if not torch.equal(h.envs["row"][index], first.envs["row"][index]):
            raise ValueError(f"{name}'s environment {index} is another window than {next(iter(histories))}'s: "
                             f"play the policies on the same environments (common random numbers)")
        out["orders"][name] = (h.actions[index, :, 0] * level).tolist()
        out["cost_per_day"][name] = float(h.regrets[index].mean()) * level
    return out


def plot_series_orders(histories: dict[str, History], index: int, path: str | Path, title: str = "") -> dict:
    """Draw :func:`series_orders` and return it."""
    data = series_orders(histories, index)
    draw_series_orders(data, path, title)
    return data


def draw_series_orders(data: dict, path: str | Path, title: str = "") -> Path:
    """The demand of :func:`series_orders`'s window as bars, one line of orders per policy (also drawn
    again from an ``experiment.json`` by the ``real-demand`` experiment)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    days = range(1, len(data["demand"]) + 1)
    fig, ax = plt.subplots(figsize=(11, 4))
    ax.bar(days, data["demand"], color="0.82", label="demand", width=1.0)
    for name, orders in data["orders"].items():
        ax.plot(days, orders, lw=2.2 if name == "omgpt" else 1.0, label=f"{name} ({data['cost_per_day'][name]:.2f}/day)")
    ax.set(xlabel="day of the window", ylabel="units", title=title)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return Path(path)
