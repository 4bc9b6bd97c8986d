"""Context manipulation: does OMGPT perform optimal decision inference? (paper §5.3.2, Figure "pasting").

The paper writes the history as ``H_t = H~_{t-1} ∪ {X_t}`` and asks whether
``TF(H_t) = â*(X_t, γ̂(H~_{t-1}))``: infer the environment from the past, then map the current context
to an action. On the non-perishable newsvendor the context ``X_t = (I_t, h, X~_t)`` contains the
inventory ``I_t = max(0, a_{t-1} - D_{t-1})``, a deterministic function of the history (the paper's
``X_t = q(H~_{t-1})``). The experiment replaces it by ``X'_t = ε'_t ~ U[0, 10]``, independent of the
history, keeping ``γ`` and ``H~_{t-1}`` -- so the pair ``(H~_{t-1}, X'_t)`` is one the model never saw in
pre-training -- and compares, at ``t = 50`` over 1000 environments:

* (a) the change of the optimal action ``a*(X'_t, γ) - a*(X_t, γ)`` (histogram): if it is far from 0, a
  model that memorised ``H~ -> a`` would be off by that much;
* (b) ``TF(H_t) - a*(X_t, γ)`` before and ``TF(H'_t) - a*(X'_t, γ)`` after (box plots): if both stay
  near 0, the model re-derives the optimal action from the new context. The JSON also gives both on
  the environments where ``a*`` moved by more than 0.5 (``changed_before`` / ``changed_after``) next to
  the error a model that ignored the manipulation would make there (``changed_if_ignored``,
  ``a* - a*'``): with the order-up-to action most ``a*`` do not move, and those that do decide it.

What is manipulated. The paper's ``X_t = q(H~_{t-1})`` is the history-determined part of the context,
the inventory; docs/paper-gaps.md §3 words it as "replaces the context features by U[0,10] draws". ``columns``
selects: ``"state"`` (default on tasks with a state column: the inventory), ``"all"`` (every context
column, ``I``, ``h`` and ``X~``; out of the training range for ``X~ ∈ [0,3]`` and ``h ∈ [0.5,2]``), or a
list of column indices. ``a*(X'_t, γ)`` is the task's own optimal action at the new context with the
environment unchanged (so a manipulated ``h`` column does not change the true holding cost, which
is part of ``γ``).

Units. The action here is the order-up-to level (docs/paper-gaps.md §3); the paper's action is the order quantity
``max(0, q - I_t)``. ``TF - a*`` is the same in both units (both subtract ``I'_t``), but the change of
``a*`` differs: raising ``I`` moves the optimal *level* only when ``I' > q`` while it moves the optimal
*quantity* by ``-(I' - I)`` whenever ``q > I'``. Both are reported. ``TF`` is the model's raw read-out
(the paper's ``TF(H_t)``); the value after projection onto the action set ``[I'_t, 30 + I'_t]`` -- what
would be played, and which hides predictions below ``I'`` -- is reported in the JSON too.
"""

from __future__ import annotations

from omgpt.files import save_figure

from pathlib import Path

import numpy as np
import torch

from omgpt.analysis.capture import play_generators
from omgpt.errors import OMGPTError
from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.seeding import AnalysisPart, Stream, stream_seed
from omgpt.tasks.base import Task


def resolve_columns(task: Task, columns) -> list[int]:
    """``"state"`` / ``"all"`` / indices (list or ``"0,2"``) -> sorted context column indices."""
    dx, state = task.context_dim, task.state_dims
    if dx == 0:
        raise OMGPTError(f"task {task.name!r} has no context to manipulate")
    if columns is None:
        columns = "state" if state else "all"
    if columns == "state":
        if not state:
            raise OMGPTError(f"task {task.name!r} has no state column in its context; use columns='all' or indices")
        return list(range(state))
    if columns == "all":
        return list(range(dx))
    if isinstance(columns, str):
        try:
            columns = [int(c) for c in columns.split(",") if c.strip()]
        except ValueError:
            raise OMGPTError(f"columns must be 'state', 'all' or comma-separated indices, got {columns!r}") from None
    cols = sorted(set(int(c) for c in columns))
    if not cols or cols[0] < 0 or cols[-1] >= dx:
        raise OMGPTError(f"context columns must lie in 0..{dx - 1}, got {cols}")
    return cols


def _stats(x: np.ndarray) -> dict:
    q = np.percentile(x, [5, 25, 50, 75, 95])
    return {
        "mean": float(x.mean()),
        "mean_abs": float(np.abs(x).mean()),
        "p5": q[0],
        "q1": q[1],
        "median": q[2],
        "q3": q[3],
        "p95": q[4],
    }


@torch.no_grad()
def manipulate(
    model,
    task: Task,
    n: int = 1000,
    step: int = 50,
    low: float = 0.0,
    high: float = 10.0,
    columns="state",
    policy: str = "omgpt",
    seed: int = 0,
    batch_size: int = 250,
) -> dict:
    """Run the experiment on ``n`` fresh environments at 1-based step ``step``; returns arrays and stats.

    The histories up to ``X_step`` are played by ``policy`` (default the model itself); the model is
    then read out teacher-forced on the original and on the manipulated last context.
    """
    if n < 2:
        raise OMGPTError(f"need at least 2 environments, got {n}")
    if not 1 <= step <= model.cfg.max_steps:
        raise OMGPTError(f"step must be in 1..{model.cfg.max_steps} (the model's horizon), got {step}")
    if not high > low:
        raise OMGPTError(f"need low < high for the manipulated context, got [{low}, {high}]")
    if task.discrete or task.action_dim != 1:
        raise OMGPTError("the manipulation experiment needs a task with a scalar continuous action")
    cols = resolve_columns(task, columns)
    model.eval()
    device = next(model.parameters()).device
    g_env = torch.Generator(device=device).manual_seed(
        stream_seed(Stream.ANALYSIS_ENVS, seed, AnalysisPart.MANIPULATION)
    )
    envs_all = task.sample_envs(n, g_env)
    out = {k: [] for k in ("a_star", "a_star_new", "tf", "tf_new", "tf_proj", "tf_new_proj", "state", "state_new")}
    s = task.state_dims
    for lo in range(0, n, batch_size):
        envs = {k: v[lo : lo + batch_size] for k, v in envs_all.items()}
        g, policy_g = play_generators(seed, AnalysisPart.MANIPULATION, lo, device)
        options = {"model": model} if policy == "omgpt" else {}
        history = rollout(task, envs, make_policy(policy, task, **options), step, g, policy_g)
        model.clear_cache()
        feats, acts = history.tokens()
        x = history.contexts[:, -1]
        x_new = x.clone()
        x_new[:, cols] = low + (high - low) * torch.rand(len(x), len(cols), generator=g, device=device)
        feats_new = feats.clone()
        feats_new[:, -1, task.obs_dim + torch.tensor(cols, device=device)] = x_new[:, cols]
        tf = model(feats, acts)[:, -1].float()
        tf_new = model(feats_new, acts)[:, -1].float()
        out["a_star"].append(history.optimal_actions[:, -1])
        out["a_star_new"].append(task.optimal_action(history.envs, x_new, step - 1))
        out["tf"].append(tf)
        out["tf_new"].append(tf_new)
        out["tf_proj"].append(task.project(tf, x))
        out["tf_new_proj"].append(task.project(tf_new, x_new))
        out["state"].append(x[:, :s].sum(-1) if s else torch.zeros(len(x), device=device))
        out["state_new"].append(x_new[:, :s].sum(-1) if s else torch.zeros(len(x), device=device))
    arr = {k: torch.cat(v).reshape(n, -1)[:, 0].double().cpu().numpy() for k, v in out.items()}
    change = arr["a_star_new"] - arr["a_star"]
    before, after = arr["tf"] - arr["a_star"], arr["tf_new"] - arr["a_star_new"]
    result = {
        "task": task.name,
        "task_options": task.options(),
        "n": n,
        "step": step,
        "low": low,
        "high": high,
        "columns": cols,
        "policy": policy,
        "seed": seed,
        "optimal_change": _stats(change),
        "fraction_changed": float((np.abs(change) > 0.5).mean()),
        "tf_minus_a_star_before": _stats(before),
        "tf_minus_a_star_after": _stats(after),
        # Where the manipulation moved a* (the informative cases: the model must follow the new context).
        "changed_before": _stats(before[np.abs(change) > 0.5]) if (np.abs(change) > 0.5).any() else None,
        "changed_after": _stats(after[np.abs(change) > 0.5]) if (np.abs(change) > 0.5).any() else None,
        "changed_if_ignored": _stats(-change[np.abs(change) > 0.5]) if (np.abs(change) > 0.5).any() else None,
        "projected_before": _stats(arr["tf_proj"] - arr["a_star"]),
        "projected_after": _stats(arr["tf_new_proj"] - arr["a_star_new"]),
        "arrays": {"optimal_change": change, "before": before, "after": after},
    }
    if s:  # the paper's action: the order quantity, level minus inventory
        qchange = (arr["a_star_new"] - arr["state_new"]) - (arr["a_star"] - arr["state"])
        result["optimal_quantity_change"] = _stats(qchange)
        result["fraction_quantity_changed"] = float((np.abs(qchange) > 0.5).mean())
        result["arrays"]["optimal_quantity_change"] = qchange
    return result


def plot_manipulation(result: dict, path: str | Path, title: str | None = None) -> Path:
    """(a) histogram of the optimal-action change; (b) box plots of TF - a* before / after."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arrays = result["arrays"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    axes[0].hist(arrays["optimal_change"], bins=40, alpha=0.7, label="order-up-to level (this code's action)")
    if "optimal_quantity_change" in arrays:
        axes[0].hist(arrays["optimal_quantity_change"], bins=40, alpha=0.5, label="order quantity (paper's action)")
    axes[0].axvline(0, color="k", lw=0.8)
    axes[0].set_xlabel("a*(X'_t) - a*(X_t)")
    axes[0].set_ylabel("environments")
    axes[0].set_title("(a) optimal action change", fontsize=9)
    axes[0].legend(fontsize=7)
    axes[1].boxplot([arrays["before"], arrays["after"]], showfliers=False)
    axes[1].set_xticks([1, 2], ["before", "after"])
    axes[1].axhline(0, color="k", lw=0.8)
    axes[1].set_ylabel("TF(H_t) - a*_t")
    axes[1].set_title("(b) model minus optimal action (whiskers 1.5 IQR)", fontsize=9)
    fig.suptitle(
        title
        or f"Context manipulation at t = {result['step']} ({result['task']}, {result['n']} environments, columns {result['columns']} ~ U[{result['low']:g}, {result['high']:g}])",
        fontsize=10,
    )
    fig.tight_layout()
    return save_figure(fig, path)
