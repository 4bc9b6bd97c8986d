"""t-SNE figures: the embeddings of every layer (paper §5.3, Figure "probe_tSNE") and the model-generated
histories across training checkpoints against ``Alg*`` (paper appendix B, Figure "train_OOD" (b)).

Layer grid (:func:`tsne_layers`): each layer's embedding of one feature token (paper: ``X_100`` of 500
test histories, half linear and half square demand) is mapped to 2-D by scikit-learn's ``TSNE``
(independently per layer, same seed) and coloured by a label -- the demand type, or a continuous
quantity such as ``a*_t``. To put a number on "well separated", every panel also reports the
leave-one-out accuracy of a 10-nearest-neighbour classifier *in the 2-D map* (categorical labels;
0.5 = chance for two balanced types) or its ``R²`` (continuous labels).

Training-OOD map (:func:`training_ood`): ``n_seq`` environments (paper: 30) are played for ``steps``
steps (paper: 20) by the model of every checkpoint -- the same environments, the same shared context
sequence ``X_1..X_steps`` for every environment, and the same noise draws (common random numbers) --
and by ``Alg*`` where the task has one. Each history becomes one point: its first ``steps`` actions and
observations stacked, in the model's normalised units (the task's :class:`~omgpt.tasks.base.Scaling`,
so prices and demands weigh alike). One t-SNE of all points, coloured by checkpoint. Because the
histories are paired (same environment and noise), the JSON also reports each checkpoint's mean
Euclidean distance to ``Alg*``'s history of the same environment in the stacked space, which does
not depend on t-SNE's layout.
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

KNN = 10


def tsne_2d(x: np.ndarray, perplexity: float = 30.0, seed: int = 0) -> np.ndarray:
    """2-D t-SNE of ``x (N, D)``; the perplexity is capped below ``N`` as scikit-learn requires."""
    from sklearn.manifold import TSNE

    x = np.asarray(x, dtype=np.float64)
    if len(x) < 4:
        raise OMGPTError(f"t-SNE needs at least 4 points, got {len(x)}")
    perplexity = float(min(perplexity, max(1.0, (len(x) - 1) / 3)))
    return TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed, max_iter=1000).fit_transform(x)


def knn_score(coords: np.ndarray, labels: np.ndarray, categorical: bool) -> float:
    """Leave-one-out 10-NN accuracy (categorical: majority vote of the 10 nearest other points) or
    ``R²`` (continuous: their mean) of the labels in ``coords``."""
    from sklearn.neighbors import NearestNeighbors

    labels = np.asarray(labels)
    k = max(1, min(KNN, len(coords) - 1))
    idx = NearestNeighbors(n_neighbors=k + 1).fit(coords).kneighbors(coords, return_distance=False)
    neighbours = labels[idx[:, 1:]]  # drop the point itself (distance 0, first)
    if categorical:
        votes = np.array([np.bincount(row.astype(int)).argmax() for row in neighbours])
        return float((votes == labels.astype(int)).mean())
    pred = neighbours.mean(axis=1)
    var = labels.var()
    return float(1 - ((pred - labels) ** 2).mean() / var) if var > 0 else float("nan")


def tsne_layers(
    hidden, labels, categorical: bool = True, layers: list[int] | None = None, perplexity: float = 30.0, seed: int = 0
) -> dict:
    """t-SNE of ``hidden (L+1, N, D)`` per layer; returns ``{"layers", "coords" (list of (N, 2)), "knn"}``."""
    hidden = hidden.detach().cpu().numpy() if isinstance(hidden, torch.Tensor) else np.asarray(hidden)
    labels = labels.detach().cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    labels = labels.reshape(len(labels), -1)[:, 0]
    layers = list(range(len(hidden))) if layers is None else list(layers)
    bad = [k for k in layers if not 0 <= k < len(hidden)]
    if bad:
        raise OMGPTError(f"layers {bad} out of range: the model has layers 0..{len(hidden) - 1}")
    coords = [tsne_2d(hidden[k], perplexity, seed) for k in layers]
    knn = [knn_score(c, labels.astype(int) if categorical else labels, categorical) for c in coords]
    return {"layers": layers, "coords": coords, "knn": knn, "labels": labels, "categorical": categorical}


def plot_tsne_layers(
    result: dict,
    path: str | Path,
    label_name: str = "label",
    class_names: dict | None = None,
    title: str | None = None,
    ncols: int = 3,
) -> Path:
    """The grid figure: one panel per layer, points coloured by the label, kNN score in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(result["layers"])
    ncols = min(ncols, n)
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols, 3.1 * nrows), squeeze=False)
    labels = result["labels"]
    score_name = "10-NN acc." if result["categorical"] else "10-NN R²"
    for ax, layer, xy, score in zip(axes.flat, result["layers"], result["coords"], result["knn"]):
        if result["categorical"]:
            for value in np.unique(labels):
                m = labels == value
                name = (class_names or {}).get(value, f"{label_name}={value}")
                ax.scatter(xy[m, 0], xy[m, 1], s=6, alpha=0.7, label=name)
        else:
            sc = ax.scatter(xy[:, 0], xy[:, 1], s=6, c=labels, cmap="viridis")
        ax.set_title(f"layer {layer}  ({score_name} {score:.2f})", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in axes.flat[n:]:
        ax.axis("off")
    if result["categorical"]:
        axes.flat[0].legend(fontsize=7, markerscale=2)
    else:
        fig.colorbar(sc, ax=axes, shrink=0.6, label=label_name)
    fig.suptitle(title or f"t-SNE of each layer's embedding, coloured by {label_name}", fontsize=10)
    if result["categorical"]:
        fig.tight_layout()
    return save_figure(fig, path)


# --------------------------------------------------------------------------------------------------
class SharedContexts:
    """A view of ``task`` whose contexts are one fixed sequence ``(T, context_dim)`` for every
    environment (state columns -- e.g. the non-perishable inventory -- still come from each episode)."""

    def __init__(self, task: Task, contexts: torch.Tensor):
        self._task, self._contexts = task, contexts

    def __getattr__(self, name):
        return getattr(self._task, name)

    def sample_context(self, envs, t, generator):
        x = self._task.sample_context(envs, t, generator)
        s = self._task.state_dims
        x = x.clone()
        x[:, s:] = self._contexts[t, s:].to(x)
        return x


def _stack(history, task: Task, steps: int) -> np.ndarray:
    """First ``steps`` actions and observations of every history, in the model's normalised units."""
    sc = task.scaling()
    a = (history.actions[:, :steps] - torch.tensor(sc.action_loc)) / torch.tensor(sc.action_scale)
    o_loc, o_scale = torch.tensor(sc.feature_loc[: task.obs_dim]), torch.tensor(sc.feature_scale[: task.obs_dim])
    o = (history.observations[:, :steps] - o_loc) / o_scale
    return torch.cat([a, o], dim=-1).reshape(len(a), -1).double().numpy()


@torch.no_grad()
def training_ood(
    models: list[tuple[str, torch.nn.Module]],
    task: Task,
    n_seq: int = 30,
    steps: int = 20,
    seed: int = 0,
    alg_star: bool = True,
    alg_star_options: dict | None = None,
    perplexity: float = 30.0,
) -> dict:
    """Histories of every ``(name, GPT)`` in ``models`` (and of ``Alg*``) on shared environments,
    contexts and noise; returns points, their t-SNE, group names and distances to ``Alg*``."""
    if not models:
        raise OMGPTError("training_ood needs at least one checkpoint")
    if n_seq < 2:
        raise OMGPTError(f"need at least 2 sequences per checkpoint, got {n_seq}")
    steps = min(steps, min(m.cfg.max_steps for _, m in models))
    g = torch.Generator().manual_seed(stream_seed(Stream.ANALYSIS_ENVS, seed, AnalysisPart.TRAINING_OOD))
    envs = task.sample_envs(n_seq, g)
    first = task.start({k: v[:1] for k, v in envs.items()}, g)  # stateful tasks: their initial state too
    contexts = torch.stack([task.sample_context(first, t, g)[0] for t in range(steps)])
    shared = SharedContexts(task, contexts)
    groups: list[tuple[str, object]] = [(name, ("omgpt", {"model": m})) for name, m in models]
    notes = []
    if alg_star:
        try:
            make_policy("alg-star", task, **(alg_star_options or {}))
            groups.append(("Alg*", ("alg-star", dict(alg_star_options or {}))))
        except OMGPTError as e:  # no alg-star policy for this task (or none in this checkout)
            notes.append(f"Alg* skipped: {e}")
    points, names, histories = [], [], {}
    for name, (policy, options) in groups:
        if policy == "omgpt":
            options["model"].eval()
        run_g, pol_g = play_generators(seed, AnalysisPart.TRAINING_OOD, 0)  # the same noise for every group
        h = rollout(shared, envs, make_policy(policy, task, **options), steps, run_g, pol_g)
        if policy == "omgpt":
            options["model"].clear_cache()
        histories[name] = h
        points.append(_stack(h, task, steps))
        names += [name] * n_seq
    x = np.concatenate(points)
    coords = tsne_2d(x, perplexity, seed)
    dist, subopt = {}, {}
    for name, h in histories.items():
        subopt[name] = float(h.suboptimality.mean())
    if "Alg*" in histories:
        ref = _stack(histories["Alg*"], task, steps)
        for name, pts in zip((n for n, _ in groups), points):
            dist[name] = float(np.linalg.norm(pts - ref, axis=1).mean())
    return {
        "groups": [n for n, _ in groups],
        "names": names,
        "points": x,
        "coords": coords,
        "steps": steps,
        "n_seq": n_seq,
        "distance_to_alg_star": dist,
        "mean_suboptimality": subopt,
        "notes": notes,
    }


def plot_training_ood(result: dict, path: str | Path, title: str | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5))
    names = np.array(result["names"])
    ckpts = [g for g in result["groups"] if g != "Alg*"]
    cmap = plt.get_cmap("viridis")
    for i, g in enumerate(ckpts):
        m = names == g
        ax.scatter(
            result["coords"][m, 0],
            result["coords"][m, 1],
            s=14,
            color=cmap(i / max(1, len(ckpts) - 1)),
            label=g,
            alpha=0.8,
        )
    if "Alg*" in result["groups"]:
        m = names == "Alg*"
        ax.scatter(result["coords"][m, 0], result["coords"][m, 1], s=40, marker="*", color="red", label="Alg*")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.legend(fontsize=7, loc="best")
    ax.set_title(
        title or f"t-SNE of the first {result['steps']} actions + observations, {result['n_seq']} sequences each",
        fontsize=9,
    )
    fig.tight_layout()
    return save_figure(fig, path)
