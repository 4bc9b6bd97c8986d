"""Linear probing of OMGPT's hidden states, layer by layer (paper §5.3, "Optimal Decision Prediction
Aligns with Environment Inference").

At the feature token of ``X_t`` (paper: ``X_100``) of ``n_train`` histories (paper: 1024) a linear probe
is fitted on each layer's embedding and scored on ``n_test`` fresh histories (paper: 256), half with
linear and half with square demand:

* ``type`` -- demand type (linear / square), logistic regression; error = misclassification rate
  divided by the majority-class rate (0.5 on balanced sets), so 1 = chance, 0 = perfect;
* ``params`` -- the environment's parameters (pricing: ``α``, ``β``, 12 numbers at ``d = 6``), ridge
  regression; error = held-out mean squared error divided by the test variance, averaged over the
  parameters (``1 - R²``), so 1 = no better than the mean, 0 = perfect;
* ``action`` -- the optimal action ``a*_t``, ridge regression, same normalised error;
* ``demand_at_x`` (pricing, an addition to the paper) -- the demand function at the probed context,
  intercept ``αᵀX_t`` and slope ``βᵀX_t``: the two numbers ``a*_t`` depends on. Unlike the twelve
  parameters, they stay identifiable from histories whose prices barely vary (the model's own).

Embeddings are standardised (fitted on the training set) before each probe; the ridge penalty is
chosen by efficient leave-one-out on the training set (``RidgeCV``), the logistic one is fixed
(``C = 1``). The paper's figure shows each curve min-max scaled to ``[0, 1]`` across layers "for
comparison"; :func:`plot_probes` draws both that and the unscaled normalised errors above, which
compare across curves and against chance. As a reference, ``model_error`` is the normalised error of
the model's own read-out of ``a*_t`` (what the final layer feeds the action head); a result may also
carry ``reference_errors`` ``{target: error}`` (e.g. Bayes estimates from the same histories), drawn as
stars right of the last layer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from omgpt.analysis.capture import Collected, collect
from omgpt.errors import OMGPTError
from omgpt.files import save_figure
from omgpt.seeding import AnalysisPart

RIDGE_ALPHAS = np.logspace(-3, 4, 15)
PROBE_TARGETS = ("type", "params", "action", "demand_at_x")
TARGET_LABELS = {
    "type": "demand type (logistic)",
    "params": "demand parameters (ridge)",
    "action": "optimal action (ridge)",
    "demand_at_x": "demand intercept, slope at X_t (ridge)",
}


def _as_np(x) -> np.ndarray:
    return x.detach().cpu().double().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=float)


def normalised_mse(pred: np.ndarray, target: np.ndarray) -> float:
    """Mean over target columns of ``MSE / Var(target)`` (``1 - R²``); constant columns are skipped."""
    pred, target = pred.reshape(len(pred), -1), target.reshape(len(target), -1)
    var = target.var(axis=0)
    keep = var > 1e-12
    if not keep.any():
        return float("nan")
    return float((((pred - target) ** 2).mean(axis=0)[keep] / var[keep]).mean())


def probe_regression(x_train, y_train, x_test, y_test) -> float:
    """Held-out normalised MSE of a standardised ridge probe (penalty by leave-one-out)."""
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    y_train, y_test = _as_np(y_train), _as_np(y_test)
    probe = make_pipeline(StandardScaler(), RidgeCV(alphas=RIDGE_ALPHAS))
    probe.fit(_as_np(x_train), y_train.reshape(len(y_train), -1))
    return normalised_mse(probe.predict(_as_np(x_test)), y_test)


def probe_classification(x_train, y_train, x_test, y_test, C: float = 1.0) -> float:
    """Held-out misclassification rate of a standardised logistic probe, divided by the error of
    always predicting the training set's majority class (1 = chance level, 0 = perfect)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    y_train, y_test = _as_np(y_train).astype(int).ravel(), _as_np(y_test).astype(int).ravel()
    majority = np.bincount(y_train).argmax()
    base = float((y_test != majority).mean())
    if len(np.unique(y_train)) < 2:
        return 1.0
    probe = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=2000))
    probe.fit(_as_np(x_train), y_train)
    err = float((probe.predict(_as_np(x_test)) != y_test).mean())
    return err / base if base > 0 else err


def probe_layers(train_hidden, train_y, test_hidden, test_y, kind: str) -> list[float]:
    """One probe per layer: ``*_hidden`` ``(L+1, N, D)``; ``kind`` ``"classification"`` or ``"regression"``."""
    fit = {"classification": probe_classification, "regression": probe_regression}[kind]
    return [fit(train_hidden[k], train_y, test_hidden[k], test_y) for k in range(len(train_hidden))]


def minmax(curve: list[float]) -> list[float]:
    """The paper's scaling of a curve to ``[0, 1]`` across layers."""
    c = np.asarray(curve, dtype=float)
    span = c.max() - c.min()
    return [0.0] * len(c) if span <= 0 else list(((c - c.min()) / span).tolist())


def targets_of(data: Collected) -> dict[str, tuple[str, torch.Tensor]]:
    """What can be probed on these histories: ``{name: (kind, values)}``."""
    out = {}
    if data.hidden_type is not None:
        out["type"] = ("classification", data.types())
    if data.params.shape[1]:
        out["params"] = ("regression", data.params)
    out["action"] = ("regression", data.optimal_action)
    if data.demand_at_x is not None:
        out["demand_at_x"] = ("regression", data.demand_at_x)
    return out


def probe_collected(train: Collected, test: Collected) -> dict:
    """Per-layer normalised held-out errors for every target of :func:`targets_of`."""
    train_t, test_t = targets_of(train), targets_of(test)
    errors = {
        name: probe_layers(train.hidden, y, test.hidden, test_t[name][1], kind) for name, (kind, y) in train_t.items()
    }
    return {
        "layers": list(range(train.hidden.shape[0])),
        "errors": errors,
        "minmax": {name: minmax(c) for name, c in errors.items()},
        "model_error": normalised_mse(_as_np(test.prediction), _as_np(test.optimal_action)),
        "param_names": [[n, w] for n, w in train.param_names],
    }


def run_probes(
    model,
    task,
    n_train: int = 1024,
    n_test: int = 256,
    step: int = 100,
    policy: str = "omgpt",
    seed: int = 0,
    batch_size: int = 256,
    policy_options: dict | None = None,
) -> dict:
    """The paper's experiment: probes trained on ``n_train`` histories and scored on ``n_test`` fresh
    ones (another part of ``seed``'s analysis streams), at the feature token of ``X_step``, histories played by ``policy``."""
    if n_train < 8 or n_test < 4:
        raise OMGPTError(f"need at least 8 training and 4 test histories for a probe, got {n_train} and {n_test}")
    common = dict(seed=seed, batch_size=batch_size, policy_options=policy_options)
    train = collect(model, task, n_train, step, policy, part=AnalysisPart.PROBE_FIT, **common)
    test = collect(model, task, n_test, step, policy, part=AnalysisPart.PROBE_TEST, **common)
    result = probe_collected(train, test)
    result.update(
        task=task.name, task_options=task.options(), step=step, policy=policy, n_train=n_train, n_test=n_test, seed=seed
    )
    return result


def plot_probes(result: dict, path: str | Path, title: str | None = None) -> Path:
    """Two panels: the normalised held-out errors (1 = chance / the mean) and the paper's min-max scaling."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = {
        "type": dict(color="tab:blue", ls=":", marker="o"),
        "params": dict(color="tab:green", ls="--", marker="s"),
        "action": dict(color="tab:red", ls="-", marker="^"),
        "demand_at_x": dict(color="tab:olive", ls="-.", marker="d"),
    }
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    layers = result["layers"]
    for name, curve in result["errors"].items():
        style = styles.get(name, {})
        axes[0].plot(layers, curve, label=TARGET_LABELS.get(name, name), **style)
        axes[1].plot(layers, result["minmax"][name], label=TARGET_LABELS.get(name, name), **style)
    if result.get("model_error") is not None and np.isfinite(result["model_error"]):
        axes[0].axhline(result["model_error"], color="tab:red", alpha=0.4, lw=1, label="model's read-out of a*")
    for i, (name, value) in enumerate((result.get("reference_errors") or {}).items()):  # optional: e.g. Bayes estimates
        color = styles.get(name, {}).get("color", "grey")
        axes[0].plot(
            [layers[-1] + 0.15],
            [value],
            marker="*",
            ms=10,
            color=color,
            ls="none",
            label="reference (Bayes)" if i == 0 else None,
        )
    axes[0].axhline(1.0, color="grey", lw=0.8, ls="-.")
    axes[0].set_ylabel("held-out error (1 = chance / mean)")
    axes[0].set_ylim(bottom=0)
    axes[1].set_ylabel("min-max scaled (paper)")
    for ax in axes:
        ax.set_xlabel("layer (0 = input embedding)")
        ax.set_xticks(layers)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="best", framealpha=0.85)
    step = result.get("step")
    fig.suptitle(
        title
        or f"Linear probes at X_{step} ({result.get('task', '')}, {result.get('n_train')} train / {result.get('n_test')} test histories)"
    )
    fig.tight_layout()
    return save_figure(fig, path)
