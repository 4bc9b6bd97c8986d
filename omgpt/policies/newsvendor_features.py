"""The data-driven newsvendor's feature-based methods on real demand (``newsvendor-data``): the ones
its literature measures itself against, and the estimators ``ddop`` ships (docs/real-demand.md).

Each is fitted offline, once per process and setting, on the training part's days with the inputs of
the global gradient-boosted benchmark (``gbm``, :func:`~omgpt.policies.newsvendor_data.part_days`):
the context ``X_t`` without ``q`` (the table's features, weekday, the level and the look-back's
summaries) and lagged demand in level units (the last week, the same weekday's last four weeks, the
means of the last 7, 14 and 28 days). Every input column is standardised with the training days' mean
and standard deviation (a lag never known in training is dropped, one sometimes missing is filled with
its mean), so distances weigh the columns alike. On each test day the method orders, in level units:

* ``wsaa-rf``, ``wsaa-knn``, ``wsaa-tree``, ``wsaa-kernel`` -- weighted SAA (Bertsimas & Kallus, "From
  predictive to prescriptive analytics", 2020): the ``q``-quantile of the training days' demands
  weighted by how alike their inputs are to today's, ``w_i(x)`` -- a forest's leaf co-membership
  averaged over its trees (``1/T Σ_t 1[i ∈ L_t(x)] / |L_t(x)|``, the leaves counted on the training
  rows), a single tree's, ``1/k`` for the ``k`` nearest neighbours, or a Gaussian kernel
  ``exp(-½ (‖x - x_i‖ / h)²)`` normalised; the order is the smallest training demand whose cumulative
  weight (in demand order) reaches ``q``, as ``ddop``'s ``BaseWeightedNewsvendor._findQ`` finds it
  (tested against ``ddop``'s own estimators).
* ``erm-linear`` -- the big-data newsvendor's linear decision rule (Ban & Rudin 2019): the order
  ``β₀ + βᵀx`` of least total newsvendor cost on the training days, an LP (HiGHS; an L1 penalty ``l1``
  on the slopes, in units of the summed pinball loss; ``l1 = 0`` is ``ddop``'s
  ``LinearRegressionNewsvendor``).
* ``dnn-newsvendor`` -- a neural network fitted on the newsvendor cost (Oroojlooyjadid, Snyder & Takáč
  2020; ``ddop``'s ``DeepLearningNewsvendor``): a two-hidden-layer ReLU MLP trained with Adam on the
  pinball loss at ``q``.

None learns within a window (the window's own days enter only through the lags). Every one has a
``tunable`` grid, tuned on the validation windows on the scaled cost (``omgpt tune``; a winner on an
edge widens the grid). A method whose fit or weights would not fit in memory refuses with its
estimate and the option ``max_rows`` that fits it on a random subsample of the training days.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from torch import Tensor

from omgpt import checks
from omgpt.errors import OMGPTError
from omgpt.policies.base import register_policy
from omgpt.policies.newsvendor_data import PastDemand, gbm_inputs, part_days
from omgpt.tasks.newsvendor_data import Q, NewsvendorData
from omgpt.tuning import Grid

CHUNK_BYTES = 2**27  # the kernel's working block of distances (rows at a time)


# --------------------------------------------------------------------------------------------------
# The training days, and the weighted quantile.
class Rows:
    """Training inputs ``x (N, d)`` and demands ``y (N,)``, the rows sorted by demand (so every weight
    vector's cumulative sum in column order is the weighted empirical CDF), and the standardisation
    that maps a day's raw inputs to ``x``'s columns."""

    def __init__(self, inputs: np.ndarray, targets: np.ndarray, max_rows: int | None = None):
        if max_rows is not None and max_rows < len(targets):
            keep = np.sort(np.random.default_rng(0).choice(len(targets), max_rows, replace=False))
            inputs, targets = inputs[keep], targets[keep]
        self.columns = ~np.isnan(inputs).all(0)
        x = inputs[:, self.columns]
        self.mean = np.nanmean(x, 0)
        x = np.where(np.isnan(x), self.mean, x)
        sd = x.std(0)
        self.sd = np.where(sd > 0, sd, 1.0)
        order = np.argsort(targets, kind="stable")
        self.x, self.y = ((x - self.mean) / self.sd)[order], targets[order]

    def standardise(self, inputs: np.ndarray) -> np.ndarray:
        x = inputs[:, self.columns]
        return (np.where(np.isnan(x), self.mean, x) - self.mean) / self.sd


def sorted_rows(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``x`` and ``y`` with the rows in demand order (stable), as the weighted quantile reads them."""
    order = np.argsort(y, kind="stable")
    return np.asarray(x, dtype=np.float64)[order], np.asarray(y, dtype=np.float64)[order]


def weighted_quantile(weights, y: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Per row of ``weights`` ``(B, N)`` (dense, or a scipy CSR matrix; columns in the order of ``y``,
    ascending), the smallest ``y`` whose cumulative normalised weight reaches ``q`` (``ddop``'s
    ``_findQ``: exactly a minimiser of the weighted pinball loss)."""
    out = np.empty(weights.shape[0])
    dense = isinstance(weights, np.ndarray)
    if not dense:
        weights.sort_indices()
    for i in range(weights.shape[0]):
        if dense:
            w, idx = weights[i], None
        else:
            lo, hi = weights.indptr[i], weights.indptr[i + 1]
            w, idx = weights.data[lo:hi], weights.indices[lo:hi]
        cum = np.cumsum(w / w.sum())
        k = int(np.argmax(cum >= q[i])) if cum[-1] >= q[i] else len(cum) - 1  # rounding: the last
        out[i] = y[k if idx is None else idx[k]]
    return out


def _refuse_memory(nbytes: float, what: str, name: str, rows: int) -> None:
    """Refuse, before building it, work estimated to need more memory than is free: the estimate and
    the option that subsamples."""
    from omgpt.machine import free_memory

    free = free_memory("cpu")
    if free is not None and nbytes > free:
        fit = max(1000, int(rows * free / nbytes / 2))
        raise OMGPTError(
            f"{name}: {what} needs about {nbytes / 2**30:.1f} GiB of memory, more than the {free / 2**30:.1f} GiB free; "
            f"fit it on a subsample of the {rows} training days with max_rows={fit} (make_policy({name!r}, task, max_rows=...))"
        )


# --------------------------------------------------------------------------------------------------
# The estimators, on arrays (what the ddop-equivalence tests compare).
class LeafWeights:
    """Weighted SAA's tree weights (Bertsimas & Kallus): training row ``i`` gets
    ``1/T Σ_t 1[i ∈ L_t(x)] / |L_t(x)|``, the leaves of a fitted ``estimator`` (a forest or one tree,
    ``apply`` giving each row's leaf per tree) counted on the training rows ``x``. Held as one sparse
    matrix of (tree, leaf) -> training rows, so a batch's weights are one sparse product."""

    def __init__(self, estimator, x: np.ndarray, y: np.ndarray):
        from scipy import sparse

        self.estimator, self.y = estimator, y
        leaves = estimator.apply(x).reshape(len(x), -1)  # (N, T)
        n, trees = leaves.shape
        self.lookup, rows, cols, values, offset = [], [], [], [], 0
        for t in range(trees):
            ids, inverse, counts = np.unique(leaves[:, t], return_inverse=True, return_counts=True)
            table = np.full(int(leaves[:, t].max()) + 1, -1, dtype=np.int64)
            table[ids] = offset + np.arange(len(ids))
            self.lookup.append(table)
            rows.append(offset + inverse)
            cols.append(np.arange(n))
            values.append(1.0 / (trees * counts[inverse]))
            offset += len(ids)
        self.membership = sparse.csr_matrix(
            (np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))), shape=(offset, n)
        )

    def weights(self, x: np.ndarray):
        from scipy import sparse

        leaves = self.estimator.apply(x).reshape(len(x), -1)
        hit = np.stack([self.lookup[t][leaves[:, t]] for t in range(leaves.shape[1])], axis=1)  # (B, T)
        pick = sparse.csr_matrix(
            (np.ones(hit.size), (np.repeat(np.arange(len(x)), hit.shape[1]), hit.ravel())),
            shape=(len(x), self.membership.shape[0]),
        )
        return pick @ self.membership

    def predict(self, x: np.ndarray, q: np.ndarray) -> np.ndarray:
        return weighted_quantile(self.weights(x), self.y, q)


def fit_forest(
    x,
    y,
    n_estimators: int,
    min_samples_leaf: int,
    max_features: float = 1.0,
    max_samples: float | None = None,
    random_state: int = 0,
) -> LeafWeights:
    """``wsaa-rf``'s weights on ``x``, ``y`` sorted by :func:`sorted_rows` (scikit-learn's forest; each
    tree grown on a bootstrap sample of ``max_samples`` of the rows, all of them by default)."""
    from sklearn.ensemble import RandomForestRegressor

    forest = RandomForestRegressor(
        n_estimators=n_estimators,
        min_samples_leaf=min_samples_leaf,
        max_features=max_features,
        max_samples=max_samples,
        random_state=random_state,
        n_jobs=1,
    )
    return LeafWeights(forest.fit(x, y), x, y)


def fit_tree(x, y, min_samples_leaf: int, max_depth: int | None = None, random_state: int = 0) -> LeafWeights:
    """``wsaa-tree``'s weights: one regression tree's leaves."""
    from sklearn.tree import DecisionTreeRegressor

    tree = DecisionTreeRegressor(min_samples_leaf=min_samples_leaf, max_depth=max_depth, random_state=random_state)
    return LeafWeights(tree.fit(x, y), x, y)


class NeighbourWeights:
    """``wsaa-knn``: weight ``1/k`` on each of the ``k`` nearest training rows (Euclidean)."""

    def __init__(self, x, y, k: int):
        from sklearn.neighbors import NearestNeighbors

        if k > len(y):
            raise OMGPTError(f"wsaa-knn: k = {k} neighbours, but only {len(y)} training days; use a smaller k")
        self.model, self.y, self.k = NearestNeighbors(n_neighbors=k).fit(x), y, k

    def weights(self, x):
        from scipy import sparse

        idx = self.model.kneighbors(x, return_distance=False)
        return sparse.csr_matrix(
            (np.full(idx.size, 1.0 / self.k), (np.repeat(np.arange(len(x)), self.k), idx.ravel())),
            shape=(len(x), len(self.y)),
        )

    def predict(self, x, q):
        return weighted_quantile(self.weights(x), self.y, q)


class KernelWeights:
    """``wsaa-kernel``: the Gaussian kernel ``exp(-½ (‖x - x_i‖ / h)²)`` on every training row,
    normalised (computed relative to the nearest row's, so a far day never underflows to all zeros:
    the same normalised weights as ``ddop``'s, which falls back to mpmath there). The distances are
    computed a block of days at a time (:data:`CHUNK_BYTES`)."""

    def __init__(self, x, y, bandwidth: float):
        self.x, self.y, self.h = x, y, float(bandwidth)
        self.sq = (x * x).sum(1)

    def predict(self, x, q):
        out = np.empty(len(x))
        step = max(1, int(CHUNK_BYTES // (8 * 3 * len(self.y))))
        for lo in range(0, len(x), step):
            b = x[lo : lo + step]
            d2 = np.maximum((b * b).sum(1)[:, None] + self.sq[None, :] - 2 * b @ self.x.T, 0.0)
            w = np.exp(-0.5 * (d2 - d2.min(1, keepdims=True)) / self.h**2)
            out[lo : lo + step] = weighted_quantile(w, self.y, q[lo : lo + step])
        return out


def fit_linear(x, y, q: float, l1: float = 0.0) -> np.ndarray:
    """``erm-linear``: ``argmin_{β₀, β} Σ_i ρ_q(y_i - β₀ - βᵀx_i) + l1 ‖β‖₁``, the LP of
    :func:`omgpt.lp.quantile_regression` (ddop states it as ``min Σ cu·u_i + co·o_i`` over the under-
    and overage of each row, the same LP up to the scale ``cu + co``), solved by the batched Frisch-Newton
    interior point method of the synthetic newsvendor's ERM
    (:func:`~omgpt.policies.newsvendor.batched_quantile_regression`: ``O(n d²)`` a step, seconds on
    bakery's ~78,000 training days where HiGHS's simplex ran past 8 minutes). Returns ``(β₀, β)``.

    The same fit in every process. The inputs hold exact linear dependences: each one-hot group
    (weekday, month, product) sums to the intercept, and the 7-day mean is the mean of the seven lags.
    With them the interior point method's normal equations are singular, its slopes grew to ~10^6
    and the point it stopped at depended on rounding, so on the thread count: on bakery one thread
    and two gave orders up to 2.9 levels apart and training costs 2·10^-4 apart (two processes:
    49.59 against 49.65). So the columns within float32 rounding of the span of the intercept and the
    columns before them (:func:`independent_columns`) get slope 0 -- the same orders in exact
    arithmetic; the system is then regular, its slopes of order 1, and one thread or two agree to
    ~10^-9 levels (the last bits of MKL's sums, which vary even between two runs on one thread count)."""
    from omgpt.policies.newsvendor import batched_quantile_regression

    keep = independent_columns(x)
    beta = batched_quantile_regression(
        torch.as_tensor(x[:, keep], dtype=torch.float64)[None],
        torch.as_tensor(y, dtype=torch.float64)[None],
        torch.tensor([float(q)]),
        float(l1),
        tol=1e-9,
    )[0].numpy()
    out = np.zeros(1 + x.shape[1])
    out[np.r_[True, keep]] = beta
    return out


# The inputs are float32 (the task's features and demands), so a column whose part outside the span of
# the others is below this share of the largest column norm is rounding, not information.
DEPENDENT = 1e-6


def independent_columns(x: np.ndarray) -> np.ndarray:
    """Which columns of ``x`` ``(n, d)`` are not (within float32 rounding, :data:`DEPENDENT`) linear
    combinations of an intercept and the columns before them: the diagonal of the R of ``[1, x]``'s
    QR decomposition, column by column, is the norm of each column's part outside that span."""
    r = np.abs(np.diag(np.linalg.qr(np.c_[np.ones(len(x)), x], mode="r")))
    r = np.r_[r, np.zeros(1 + x.shape[1] - len(r))]  # fewer rows than columns: the rest are dependent
    return r[1:] > DEPENDENT * r.max()


class Network(torch.nn.Module):
    """``dnn-newsvendor``'s MLP: ``d -> width -> width -> 1``, ReLU."""

    def __init__(self, d: int, width: int):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(d, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, 1),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)[:, 0]


BATCH = 1024  # dnn-newsvendor's rows per Adam step
# Without given passes, dnn-newsvendor trains 10 passes and at least MIN_STEPS Adam steps: the 760 steps of
# 10 passes on bakery's 77,700 training days (76 batches a pass), where that default was measured. Passes
# alone are a unit of data, not of optimisation: on a table of 3,000 rows 10 passes are 30 steps, and the
# untrained network ordered at 2.5x SAA's cost (at 30 steps a pinball loss 2.4x the unconditional
# quantile's on a 3,000-row test table; at 760 steps 0.62x).
MIN_STEPS = 760
DEFAULT_PASSES = 10


def default_epochs(rows: int, batch: int = BATCH) -> int:
    """The passes over ``rows`` training days of a fit given none: :data:`DEFAULT_PASSES`, or as many
    as :data:`MIN_STEPS` steps take on a small table."""
    return max(DEFAULT_PASSES, math.ceil(MIN_STEPS / math.ceil(rows / batch)))


def fit_network(
    x, y, q: float, width: int, epochs: int | None = None, lr: float = 1e-3, batch: int = BATCH, seed: int = 0
) -> Network:
    """Adam on the mean pinball loss at ``q`` over shuffled mini-batches of the training rows, in
    float32, the initial weights and the shuffles from ``seed``; ``epochs`` passes (``None``:
    :func:`default_epochs`). (Batches of 1,024 rather than 256: on bakery's ~78,000 training days an
    epoch of 256-row batches in float64 took ~12 s on a loaded core, so the tuning grid's 20-epoch
    fits ran minutes each.)"""
    epochs = default_epochs(len(y), batch) if epochs is None else epochs
    with torch.inference_mode(False), torch.enable_grad():  # fitted inside a rollout, which records no graph
        return _fit_network(x, y, q, width, epochs, lr, batch, seed)


def _fit_network(x, y, q, width, epochs, lr, batch, seed) -> Network:
    g = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = Network(x.shape[1], width)
    xs, ys = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    for _ in range(epochs):
        for idx in torch.randperm(len(ys), generator=g).split(batch):
            r = ys[idx] - net(xs[idx])
            loss = torch.maximum(q * r, (q - 1) * r).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return net.eval()


# --------------------------------------------------------------------------------------------------
# The policies.
@functools.lru_cache(maxsize=4)
def training_rows(task_name: str, options: tuple, horizon: int, q: float, max_rows: int | None) -> Rows:
    """A setting's training days as these methods read them (:func:`part_days`, the gbm's inputs)."""
    days = part_days(task_name, options, horizon, q)
    return Rows(days["inputs"], days["targets"], max_rows)


@functools.lru_cache(maxsize=8)
def fitted(method: str, task_name: str, options: tuple, horizon: int, q: float, constants: tuple):
    """The fitted method at ``q`` for a setting and constants (once per process)."""
    kw = dict(constants)
    rows = training_rows(task_name, options, horizon, q, kw.pop("max_rows"))
    x, y = rows.x, rows.y
    if method == "wsaa-rf":
        model = fit_forest(x, y, kw["n_estimators"], kw["min_samples_leaf"], kw["max_features"], kw["max_samples"])
    elif method == "wsaa-tree":
        model = fit_tree(x, y, kw["min_samples_leaf"])
    elif method == "wsaa-knn":
        model = NeighbourWeights(x, y, kw["k"])
    elif method == "wsaa-kernel":
        model = KernelWeights(x, y, kw["bandwidth"])
    elif method == "erm-linear":
        beta = fit_linear(x, y, q, kw["l1"])
        model = lambda z, q_: beta[0] + z @ beta[1:]  # noqa: E731
    else:
        net = fit_network(x, y, q, kw["width"], kw["epochs"])

        def model(z, q_):
            with torch.no_grad():
                return net(torch.as_tensor(z, dtype=torch.float32)).double().numpy()

    return rows, (model.predict if hasattr(model, "predict") else model)


class FeatureNewsvendor(PastDemand):
    """What the feature-based methods share: one fit per ``q`` on the training days, the gbm's inputs
    standardised, the order predicted each day (see the module docstring).

    Args:
        max_rows: fit on a random subsample of this many training days (default: all of them).
    """

    method = ""  # the estimator :func:`fitted` fits (the class's registered name; its -tuned variant shares it)

    def __init__(self, task, max_rows: int | None = None, **constants):
        super().__init__(task)
        lo, hi = task.q_range
        if lo != hi:  # one fit per q
            raise OMGPTError(
                f"{self.name} is fitted at one critical ratio; the task draws q from [{lo:g}, {hi:g}]: "
                f"evaluate with --option critical_ratio=Q"
            )
        self.max_rows = None if max_rows is None else checks.number("max_rows", max_rows, integer=True, low=10)
        self.values = constants
        for name, value in constants.items():  # as attributes too: a -tuned variant compares them (plays_as_base)
            setattr(self, name, value)

    def key(self) -> tuple:
        return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in self.task.options().items()))

    def memory(self, rows: int, d: int) -> float:
        """Bytes the fit and a day's weights need beyond the training rows (estimated)."""
        return 0.0

    def model(self, q: float):
        key = self.key()
        days = training_rows(self.task.name, key, self.task.horizon, q, self.max_rows)
        _refuse_memory(
            self.memory(len(days.y), days.x.shape[1]), f"its fit on {len(days.y)} training days", self.name, len(days.y)
        )
        constants = tuple(sorted({**self.values, "max_rows": self.max_rows}.items()))
        return fitted(self.method, self.task.name, key, self.task.horizon, q, constants)

    def decide(self, t: int, x: Tensor) -> Tensor:
        seen, _ = self.demands(t)
        inputs, q = gbm_inputs(x, seen), x[:, Q].double().cpu().numpy()
        orders = np.empty(self.batch)
        for level in np.unique(q):
            at = q == level
            rows, predict = self.model(float(level))
            orders[at] = predict(rows.standardise(inputs[at]), q[at])
        return torch.as_tensor(orders, dtype=x.dtype, device=x.device)[:, None]


@register_policy("wsaa-rf", tasks=(NewsvendorData,))
class ForestSAA(FeatureNewsvendor):
    """Weighted SAA with random-forest weights (Bertsimas & Kallus 2020; ``ddop``'s
    ``RandomForestWeightedNewsvendor``): leaf co-membership averaged over the forest's trees.

    Args:
        n_estimators: trees. min_samples_leaf: the fewest training days in a leaf.
        max_features: the share of input columns tried at each split (a third: Breiman's choice for
            regression). max_samples: the share of the training days each tree's bootstrap draws (a
            quarter: 4x faster fits on bakery's ~78,000 days; the leaves are still counted on every
            training day). max_rows: see :class:`FeatureNewsvendor`.
    """

    method = "wsaa-rf"
    tunable = {"n_estimators": Grid(25, 50, lowest=1), "min_samples_leaf": Grid(10, 40, 160, lowest=1)}
    widen = "line"

    def __init__(
        self,
        task,
        n_estimators: int = 50,
        min_samples_leaf: int = 40,
        max_features: float = 0.33,
        max_samples: float = 0.25,
        max_rows=None,
    ):
        super().__init__(
            task,
            max_rows,
            n_estimators=checks.number("n_estimators", n_estimators, integer=True, low=1),
            min_samples_leaf=checks.number("min_samples_leaf", min_samples_leaf, integer=True, low=1),
            max_features=checks.number("max_features", max_features, low=0, low_open=True, high=1),
            max_samples=checks.number("max_samples", max_samples, low=0, low_open=True, high=1),
        )

    def memory(self, rows, d):
        # nodes of a tree: fewer than 2 rows / min_samples_leaf, ~100 bytes each; the leaf matrix 16 bytes a row per tree
        trees = self.values["n_estimators"]
        return trees * (2 * rows / self.values["min_samples_leaf"] * 100 + 24 * rows)


@register_policy("wsaa-tree", tasks=(NewsvendorData,))
class TreeSAA(FeatureNewsvendor):
    """Weighted SAA with one regression tree's weights (``ddop``'s ``DecisionTreeWeightedNewsvendor``).

    Args:
        min_samples_leaf: the fewest training days in a leaf. max_rows: see :class:`FeatureNewsvendor`.
    """

    method = "wsaa-tree"
    tunable = {"min_samples_leaf": Grid(10, 40, 160, lowest=1)}

    def __init__(self, task, min_samples_leaf: int = 40, max_rows=None):
        super().__init__(
            task, max_rows, min_samples_leaf=checks.number("min_samples_leaf", min_samples_leaf, integer=True, low=1)
        )


@register_policy("wsaa-knn", tasks=(NewsvendorData,))
class NeighbourSAA(FeatureNewsvendor):
    """Weighted SAA with ``k``-nearest-neighbour weights (``ddop``'s ``KNeighborsWeightedNewsvendor``).

    Args:
        k: neighbours. max_rows: see :class:`FeatureNewsvendor`.
    """

    method = "wsaa-knn"
    tunable = {"k": Grid(10, 40, 160, lowest=1)}

    def __init__(self, task, k: int = 40, max_rows=None):
        super().__init__(task, max_rows, k=checks.number("k", k, integer=True, low=1))


@register_policy("wsaa-kernel", tasks=(NewsvendorData,))
class KernelSAA(FeatureNewsvendor):
    """Weighted SAA with Gaussian-kernel weights (``ddop``'s ``GaussianWeightedNewsvendor``).

    Args:
        bandwidth: ``h``, in units of the standardised inputs' distance. max_rows: see
            :class:`FeatureNewsvendor`.
    """

    method = "wsaa-kernel"
    tunable = {"bandwidth": (0.5, 1.0, 2.0)}

    def __init__(self, task, bandwidth: float = 1.0, max_rows=None):
        super().__init__(task, max_rows, bandwidth=checks.number("bandwidth", bandwidth, low=0, low_open=True))

    def memory(self, rows, d):
        # the smallest block of distances: one day against every training day, three float64 copies
        return 8.0 * 3 * rows


@register_policy("erm-linear", tasks=(NewsvendorData,))
class LinearERM(FeatureNewsvendor):
    """The big-data newsvendor's cost-fitted linear rule (Ban & Rudin 2019; ``ddop``'s
    ``LinearRegressionNewsvendor`` at ``l1 = 0``): an LP on the training days.

    Args:
        l1: L1 penalty on the slopes (summed-cost units). max_rows: see :class:`FeatureNewsvendor`.
    """

    method = "erm-linear"
    tunable = {"l1": Grid(0.0, 10.0, 100.0, 1000.0, lowest=0.0)}

    def __init__(self, task, l1: float = 0.0, max_rows=None):
        super().__init__(task, max_rows, l1=checks.number("l1", l1, low=0))

    def memory(self, rows, d):
        # the interior point method's float64 copies of the (rows, 1 + d) data and ~12 vectors of rows
        return 8.0 * rows * (3 * (d + 1) + 12)


@register_policy("dnn-newsvendor", tasks=(NewsvendorData,))
class NetworkNewsvendor(FeatureNewsvendor):
    """A neural network fitted on the newsvendor cost (Oroojlooyjadid, Snyder & Takáč 2020; ``ddop``'s
    ``DeepLearningNewsvendor``): two hidden ReLU layers of ``width``, Adam (1e-3, batches of 1,024) on
    the pinball loss at ``q`` for ``epochs`` passes over the training days.

    Args:
        width: hidden units per layer. epochs: passes (default: 10, and on a small table as many as
            :data:`MIN_STEPS` Adam steps take, :func:`default_epochs`). max_rows: see
            :class:`FeatureNewsvendor`.
    """

    method = "dnn-newsvendor"
    # widened one constant at a time and bounded at 320 epochs (a fit there takes ~3 minutes on bakery's
    # training days; in float64 on batches of 256, a cross widening ran one setting's tuning past 13 minutes)
    tunable = {"width": Grid(16, 64, lowest=4, highest=256), "epochs": Grid(5, 20, lowest=1, highest=320)}
    widen = "line"

    def __init__(self, task, width: int = 32, epochs: int | None = None, max_rows=None):
        super().__init__(
            task,
            max_rows,
            width=checks.number("width", width, integer=True, low=1),
            epochs=checks.number("epochs", epochs, integer=True, low=1, none=True),
        )
