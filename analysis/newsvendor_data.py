"""Figures of the data-driven newsvendor (``newsvendor-data``): one held-out series' realised demand
against each policy's orders, and the per-day cost of each policy.

Both read the histories :func:`omgpt.evaluation.evaluate_policies` returns for a data task: demand and
orders are in units of the window's *level* (its mean daily demand before the window), multiplied back
by ``envs["level"]`` to show the series' own units; the regret of a day is its newsvendor cost (the
clairvoyant order costs nothing).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from omgpt.files import save_figure
from omgpt.rollout import History


def series_orders(histories: dict[str, History], index: int) -> dict:
    """The ``index``-th environment's demand and every policy's orders, in the series' own units, and
    each policy's mean cost per day on that window (level units times the level: the series' units)."""
    first = next(iter(histories.values()))
    level = float(first.envs["level"][index])
    out = {
        "demand": (first.observations[index, :, 0] * level).tolist(),
        "level": level,
        "orders": {},
        "cost_per_day": {},
    }
    for name, h in histories.items():
        if not torch.equal(h.envs["row"][index], first.envs["row"][index]):
            raise ValueError(
                f"{name}'s environment {index} is another window than {next(iter(histories))}'s: "
                f"play the policies on the same environments (common random numbers)"
            )
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
        ax.plot(
            days, orders, lw=2.2 if name == "omgpt" else 1.0, label=f"{name} ({data['cost_per_day'][name]:.2f}/day)"
        )
    ax.set(xlabel="day of the window", ylabel="units", title=title)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return Path(path)


# --------------------------------------------------------------------------------------------------
# The headline metric and its clustered intervals.
BLOCK_DAYS = 7  # the time split's date blocks: a week, so each block holds every weekday once


def window_cells(task, histories: dict[str, History]) -> dict:
    """What the cluster bootstrap needs from one panel's histories (the same windows for every policy):
    each policy's cost per window and day and the demand, in the series' own units ``(W, T)``; each
    window's cluster -- its group (bakery: store) -- and each day's date block (``BLOCK_DAYS`` days
    counted from the earliest day played)."""
    first = next(iter(histories.values()))
    for name, h in histories.items():
        if not torch.equal(h.envs["row"], first.envs["row"]):
            raise ValueError(
                f"{name} played other windows than {next(iter(histories))}: play every policy on the same windows"
            )
    level = first.envs["level"].double()[:, None]
    cost = {
        name: task.outcome_cost(h.actions, h.observations, h.contexts).double() * level for name, h in histories.items()
    }
    demand = first.observations[..., 0].double() * level
    rows = first.envs["row"].numpy()[:, None] + np.arange(first.horizon)
    days = task.data.table.dates[rows].astype("int64")
    return {
        "cost": {k: v.numpy() for k, v in cost.items()},
        "demand": demand.numpy(),
        "level": level[:, 0].numpy(),
        "group": task.data.table.groups[rows[:, 0]],
        "block": (days - days.min()) // BLOCK_DAYS,
    }


def cluster_bootstrap(
    cells: dict, reference: str, dates: bool, versus: str | None = None, draws: int = 2000, seed: int = 0
) -> dict:
    """Every policy's scaled cost (total cost over total demand) and mean cost per day (in units of
    each window's level), each with a 90% cluster-bootstrap interval, and the paired ratio of its
    scaled cost to ``reference``'s on the same draws; ``versus`` (OMGPT) also gets its ratio to every
    other policy (``ratio_to``).

    The draws resample whole clusters, not windows: the windows' groups (stores) with replacement;
    with ``dates`` also the date blocks, independently (a two-way bootstrap: every window of a drawn
    store, every day of a drawn week; a cell's weight is the product of its store's and its block's
    multiplicities). Windows of one store share its customers, and one week's days share its weather
    and holidays across every series: resampling windows one by one would treat them as independent
    and give intervals far narrower than a handful of stores can support."""
    rng = np.random.default_rng(seed)
    groups, window_group = np.unique(cells["group"], return_inverse=True)
    blocks, day_block = np.unique(cells["block"], return_inverse=True)
    W, B = len(cells["group"]), len(blocks)
    store = rng.multinomial(len(groups), np.full(len(groups), 1 / len(groups)), size=draws)[
        :, window_group
    ]  # (draws, W)
    week = rng.multinomial(B, np.full(B, 1 / B), size=draws) if dates else np.ones((draws, B))  # (draws, B)
    one_hot = np.zeros((W, cells["demand"].shape[1], B))
    np.put_along_axis(one_hot, day_block.reshape(W, -1)[..., None], 1.0, axis=-1)

    def by_block(values):  # (W, T) -> (W, B): each window's sum over each date block
        return np.einsum("wt,wtb->wb", values, one_hot)

    def drawn(values):  # the statistic sum(weight * values) for every draw, (draws,)
        return np.einsum("dw,wb,db->d", store, by_block(values), week)

    demand, days = drawn(cells["demand"]), drawn(np.ones_like(cells["demand"]))
    ref = drawn(cells["cost"][reference])
    out = {}
    for name, cost in cells["cost"].items():
        total = drawn(cost)
        per_level = cost / cells["level"][:, None]  # the secondary metric: cost per day in units of the window's level
        out[name] = {
            "scaled_cost": {"mean": float(cost.sum() / cells["demand"].sum()), "ci90": _percentiles(total / demand)},
            "cost_per_day": {"mean": float(per_level.mean()), "ci90": _percentiles(drawn(per_level) / days)},
            "ratio_to_" + reference: None
            if name == reference
            else {"mean": float(cost.sum() / cells["cost"][reference].sum()), "ci90": _percentiles(total / ref)},
        }
    if versus in cells["cost"]:
        ours = drawn(cells["cost"][versus])
        out[versus]["ratio_to"] = {
            name: {"mean": float(cells["cost"][versus].sum() / cost.sum()), "ci90": _percentiles(ours / drawn(cost))}
            for name, cost in cells["cost"].items()
            if name != versus
        }
    return out


def _percentiles(values: np.ndarray) -> list[float]:
    return [float(v) for v in np.percentile(values, [5, 95])]


def evaluation_costs(task, histories: dict[str, History], seed: int) -> dict:
    """What ``omgpt evaluate`` adds to a data task's ``summary.json``: the headline metric of the
    ``real-demand`` experiment -- every policy's cost per unit demanded and mean cost per day, their
    90% cluster-bootstrap intervals, and the paired ratios (to SAA when it played, else to the first
    policy; OMGPT's to every other policy) -- so that a table of one's own gets the same intervals."""
    reference = "saa" if "saa" in histories else next(iter(histories))
    dates = task.data.split == "time"
    cells = window_cells(task, histories)
    return {
        "metric": "scaled_cost: total cost over total demand (cost per unit demanded)",
        "clusters": "groups and weeks" if dates else "groups",
        "groups": int(len(np.unique(cells["group"]))),
        "reference": reference,
        "costs": cluster_bootstrap(cells, reference, dates, versus="omgpt", seed=seed),
    }


def format_costs(block: dict) -> str:
    """:func:`evaluation_costs` as a table, best first."""
    ref = block["reference"]
    costs = sorted(block["costs"].items(), key=lambda kv: kv[1]["scaled_cost"]["mean"])
    lines = [
        f"cost per unit demanded [90% cluster-bootstrap CI over {block['groups']} {block['clusters']}], "
        f"paired ratio to {ref}:",
        f"{'policy':<24} {'scaled cost':>28} {'/ ' + ref:>26}",
    ]
    for name, c in costs:
        s, r = c["scaled_cost"], c["ratio_to_" + ref]
        ratio = "1" if r is None else f"{r['mean']:.3f} [{r['ci90'][0]:.3f}, {r['ci90'][1]:.3f}]"
        lines.append(f"{name:<24} {s['mean']:.4f} [{s['ci90'][0]:.4f}, {s['ci90'][1]:.4f}]{ratio:>28}")
    return "\n".join(lines)
