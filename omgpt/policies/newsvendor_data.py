"""The data-driven newsvendor methods a practitioner would use on real demand (``newsvendor-data``):
the state of practice OMGPT is measured against (docs/real-demand.md; Huber et al. 2019).

Every method orders in the task's units (demand divided by the series' level) at the critical ratio
``q`` read off the context, and knows what a practitioner knows when a window starts: the context
``X_t`` and the ``lookback`` days of demand before the window (``task.lookback_demand``, public
information; OMGPT sees it only through ``X_t``'s summaries, so the raw-demand benchmarks have more of
it than OMGPT has).

* ``saa`` -- sample average approximation: the ``q``-quantile of the last ``days`` demands (look-back
  and window so far), the exact minimiser of their summed pinball loss.
* ``saa-weekday`` -- the same over the last ``weeks`` days that fell on today's weekday.
* ``qr`` -- online feature quantile regression (ERM, Ban & Rudin 2019) on the window's past
  ``(X_s, O_s)``, with an L1 penalty on the slopes (:func:`omgpt.policies.newsvendor.quantile_regression`);
  before it has ``min_samples`` days it orders the look-back quantile.
* ``fai-data`` -- FAI (Ding et al. 2024) on standardised features: online subgradient steps on the
  pinball loss over order rules ``a = (look-back quantile) + wᵀ(1, X)``, ``w_0 = 0``.
* ``gbm`` -- a global gradient-boosted quantile model (scikit-learn's ``HistGradientBoostingRegressor``,
  quantile loss at ``q``) trained offline on the training part's windows -- the series OMGPT is trained
  on -- with ``X_t`` plus lagged demand; it does not learn within the window.
* ``hindsight-linear`` -- **not a policy**: a yardstick. The linear quantile rule fitted on the test
  window's own days, demands included, i.e. the best linear order rule in hindsight.

Each with free constants has a ``tunable`` grid and a ``-tuned`` variant, tuned on validation windows.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import Tensor

from omgpt import checks
from omgpt.demand_data import WEEKDAYS, masked_quantile
from omgpt.errors import OMGPTError
from omgpt.policies.base import HistoryPolicy, Policy, register_policy
from omgpt.policies.newsvendor import batched_quantile_regression, quantile_regression
from omgpt.rollout import rollout
from omgpt.tasks.newsvendor_data import LOOKBACK_QUANTILE, Q, WEEKDAY, NewsvendorData, window_demands
from omgpt.tuning import Grid

ALL = 1000  # "every day seen" for the windows' lengths (look-back + window days never reach it)


def weekday_of(x: Tensor) -> Tensor:
    """The weekday index of contexts ``x`` ``(..., context_dim)`` (its one-hot columns), ``(...)``."""
    return x[..., WEEKDAY : WEEKDAY + WEEKDAYS].argmax(-1)


def regressors(x: Tensor) -> Tensor:
    """The context without the critical-ratio column (a constant within a window)."""
    return torch.cat([x[..., :Q], x[..., Q + 1 :]], dim=-1)


class PastDemand(HistoryPolicy):
    """A history policy that also holds the look-back demands, ``(B, lookback)`` in level units.

    Played by an :class:`~omgpt.agent.Agent` given no ``envs`` (no window of the data set: a
    practitioner's own series), the look-back is empty and the policy starts from the window's own
    days; until it has seen any it orders the context's look-back quantile, which ``X_t`` carries."""

    def reset(self, envs, horizon, generator):
        super().reset(envs, horizon, generator)
        if "row" in envs:
            past, weekday = self.task.lookback_demand(envs)
        else:
            past, weekday = torch.zeros(self.batch, 0), torch.zeros(self.batch, 0, dtype=torch.long)
        self.past, self.past_weekday = past.to(self.device), weekday.to(self.device)

    def demands(self, t: int) -> tuple[Tensor, Tensor]:
        """Every demand seen before day ``t``, oldest first, and its weekday, each ``(B, lookback + t)``."""
        seen = torch.cat([self.past, self.observations[:, :t, 0]], dim=1)
        return seen, torch.cat([self.past_weekday, weekday_of(self.xs[:, :t])], dim=1)


def last(mask: Tensor, k: int) -> Tensor:
    """``mask (B, n)`` keeping only each row's last ``k`` true entries."""
    from_end = mask.flip(-1).cumsum(-1).flip(-1)
    return mask & (from_end <= k)


@register_policy("saa", tasks=(NewsvendorData,))
class SAA(PastDemand):
    """Sample average approximation: the ``q``-quantile of the last ``days`` demands seen.

    Args:
        days: how many of the most recent days (look-back included) form the sample (1000: all).
    """

    tunable = {"days": Grid(14, 28, 56, ALL, highest=ALL)}  # nothing past every day seen

    def __init__(self, task, days: int = ALL):
        super().__init__(task)
        self.days = checks.number("days", days, integer=True, low=1)

    def decide(self, t: int, x: Tensor) -> Tensor:
        seen, _ = self.demands(t)
        return or_lookback(masked_quantile(seen[:, -self.days :], x[:, Q]), x)[:, None]


@register_policy("saa-weekday", tasks=(NewsvendorData,))
class WeekdaySAA(PastDemand):
    """SAA on the days that fell on today's weekday: the ``q``-quantile of the last ``weeks`` of them
    (all days when none has, which cannot happen with a look-back of a week or more of daily rows).

    Args:
        weeks: how many of the most recent same-weekday days form the sample (1000: all).
    """

    tunable = {"weeks": Grid(2, 4, 8, ALL, highest=ALL)}

    def __init__(self, task, weeks: int = ALL):
        super().__init__(task)
        self.weeks = checks.number("weeks", weeks, integer=True, low=1)

    def decide(self, t: int, x: Tensor) -> Tensor:
        seen, weekday = self.demands(t)
        same = last(weekday == weekday_of(x)[:, None], self.weeks)
        q = x[:, Q]
        return or_lookback(torch.where(same.any(-1), masked_quantile(seen, q, same), masked_quantile(seen, q)), x)[
            :, None
        ]


def or_lookback(orders: Tensor, x: Tensor) -> Tensor:
    """``orders``, or the context's look-back quantile where no demand was seen (NaN)."""
    return torch.where(orders.isnan(), x[:, LOOKBACK_QUANTILE], orders)


@register_policy("qr", tasks=(NewsvendorData,))
class OnlineQR(HistoryPolicy):
    """Online feature quantile regression (ERM): at day ``t`` the linear quantile regression at ``q`` of
    the window's past demands on their contexts (L1 penalty ``l1`` on the slopes, in units of the
    summed pinball loss), evaluated at ``X_t``; before ``min_samples`` days, the look-back quantile.

    Every window's regression of a day is solved at once by the batched interior point method of the
    synthetic newsvendor's ERM (:func:`~omgpt.policies.newsvendor.batched_quantile_regression`, same
    optimal objective as HiGHS, tested); ``solver="highs"`` solves one HiGHS LP per window and day
    instead. Where the optimum is not unique (a week of days and ~40 regressors) the two return
    different optimal points, so their orders differ although their fits are equally good.

    Args:
        l1: L1 penalty on the slopes.
        min_samples: days of the window seen before the regression is trusted.
        solver: ``"ipm"`` (default) or ``"highs"``.
    """

    tunable = {"l1": (0.03, 0.1, 0.3, 1.0, 3.0)}

    def __init__(self, task, l1: float = 0.3, min_samples: int = 7, solver: str = "ipm"):
        super().__init__(task)
        self.l1 = checks.number("l1", l1, low=0)
        self.min_samples = checks.number("min_samples", min_samples, integer=True, low=1)
        if solver not in ("ipm", "highs"):
            raise OMGPTError(f"unknown solver {solver!r}; choose ipm or highs")
        self.solver = solver

    def decide(self, t: int, x: Tensor) -> Tensor:
        if t < self.min_samples:
            return x[:, LOOKBACK_QUANTILE, None]
        if self.solver == "ipm":
            beta = batched_quantile_regression(
                regressors(self.xs[:, :t]), self.observations[:, :t, 0], x[:, Q], self.l1
            )
            return (beta[:, 0] + (beta[:, 1:] * regressors(x).double()).sum(-1)).to(x.dtype)[:, None]
        past = regressors(self.xs[:, :t]).double().cpu().numpy()  # (B, t, d)
        demand = self.observations[:, :t, 0].double().cpu().numpy()  # (B, t)
        now, q = regressors(x).double().cpu().numpy(), x[:, Q].double().cpu().numpy()
        orders = np.empty(self.batch)
        for i in range(self.batch):
            beta = quantile_regression(past[i], demand[i], q[i], self.l1)
            orders[i] = beta[0] + beta[1:] @ now[i]
        return torch.as_tensor(orders, dtype=x.dtype, device=x.device)[:, None]


@register_policy("fai-data", tasks=(NewsvendorData,))
class FAIData(HistoryPolicy):
    """FAI (feature-based adaptive inventory, Ding et al. 2024) on real data: online subgradient descent
    on the pinball loss over order rules ``a_t = b_t + w_tᵀ z_t``, ``z_t = (1, X_t)`` without ``q``, and
    ``b_t`` the context's look-back quantile (so ``w_0 = 0`` starts from SAA on the look-back)::

        w_{t+1} = w_t - η_t g_t z_t,   g_t = 1 - q if a_t > O_t (leftover) else -q,   η_t = step_scale / √(t+1)

    The task's features are standardised, so one step size serves every column (the synthetic
    newsvendor's FAI, :class:`omgpt.policies.newsvendor.FAI`, assumes non-negative raw features).

    Args:
        step_scale: the step-size multiplier.
    """

    tunable = {"step_scale": (0.003, 0.01, 0.03, 0.1, 0.3)}

    def __init__(self, task, step_scale: float = 0.03):
        super().__init__(task)
        self.step_scale = checks.number("step_scale", step_scale, low=0)

    def reset(self, envs, horizon, generator):
        super().reset(envs, horizon, generator)
        self.weights = torch.zeros(self.batch, self.task.context_dim, device=self.device)  # (B, 1 + d)

    @staticmethod
    def z(x: Tensor) -> Tensor:
        return torch.cat([torch.ones_like(x[..., :1]), regressors(x)], dim=-1)

    def decide(self, t: int, x: Tensor) -> Tensor:
        if t > 0:
            prev = self.xs[:, t - 1]
            leftover = self.actions[:, t - 1, 0] > self.observations[:, t - 1, 0]
            slope = torch.where(leftover, 1 - prev[:, Q], -prev[:, Q])
            self.weights = self.weights - (self.step_scale / t**0.5) * slope[:, None] * self.z(prev)
        return (x[:, LOOKBACK_QUANTILE] + (self.weights * self.z(x)).sum(-1))[:, None]


# --------------------------------------------------------------------------------------------------
# The global model, trained offline.
LAGS = (1, 2, 3, 4, 5, 6, 7, 14, 21, 28)  # days back: the last week, and the same weekday 1-4 weeks back
MEANS = (7, 14, 28)  # rolling means over the last days
HELD_OUT = 0.1  # the share of the training windows held out for early stopping


def lag_features(seen: Tensor) -> Tensor:
    """Lagged demand as practitioners build it, from the demands seen before the day ``(B, n)``,
    oldest first (the look-back, then the window's own days so far, as an online global model has
    them): ``O_{t-k}`` for each of ``LAGS`` (the last days; lags 7-28 are the same weekday's last four
    weeks) and the means of the last ``MEANS`` days; NaN (missing, to the boosting) beyond what was
    seen. ``(B, len(LAGS) + len(MEANS))``."""
    short = max(max(LAGS), max(MEANS)) - seen.shape[1]
    if short > 0:
        seen = torch.cat([seen.new_full((seen.shape[0], short), float("nan")), seen], dim=1)
    return torch.cat([seen[:, [-k for k in LAGS]], *(seen[:, -k:].nanmean(-1, keepdim=True) for k in MEANS)], dim=-1)


def gbm_inputs(x: Tensor, seen: Tensor) -> np.ndarray:
    """The global model's inputs at one day: the context without ``q``, then the lags."""
    return torch.cat([regressors(x), lag_features(seen)], dim=-1).double().cpu().numpy()


def part_days(task_name: str, options: tuple, horizon: int, q: float, part: str = "train") -> dict[str, np.ndarray]:
    """A part's days as the global model sees them: its windows tiled without overlap (the training
    part: every training day once), each day's inputs built exactly as the policy builds them when it
    plays the window (the look-back supplies the lags of a window's first days), ``inputs``, the day's
    demand in level units (``targets``) and the window's ``level``, rows day-major (day t of every
    window, then day t + 1); and ``held``, the rows held out for early stopping -- whole windows: a
    random ``HELD_OUT`` share of the part's groups (stores) in the series split, the latest ``HELD_OUT``
    of the windows by date in the time split, so the stopping point is chosen as the model is tested
    (on unseen stores, on later days), never on rows of a window it trains on."""
    from omgpt.tasks import make_task

    task = make_task(
        task_name, **{**dict(options), "part": part, "stride": horizon, "horizon": horizon, "critical_ratio": q}
    )
    g = torch.Generator().manual_seed(0)
    envs = task.sample_envs(task.windows, g)
    history = rollout(task, envs, make_policy_free(task), horizon, g)  # the actions are irrelevant: demand is exogenous
    past, _ = task.lookback_demand(envs)
    seen = torch.cat([past, history.observations[..., 0]], dim=1)
    inputs = np.concatenate([gbm_inputs(history.contexts[:, t], seen[:, : task.lookback + t]) for t in range(horizon)])
    targets = history.observations[..., 0].T.reshape(-1).double().numpy()
    rows, table = envs["row"].numpy(), task.data.table
    groups = np.unique(table.groups[rows])
    if task.data.split == "series" and len(groups) > 1:
        chosen = np.random.default_rng(0).choice(groups, max(1, round(HELD_OUT * len(groups))), replace=False)
        held = np.isin(table.groups[rows], chosen)
    else:  # the time split (or a single group): the latest windows
        starts = table.dates[rows].astype("int64")
        held = starts >= np.quantile(starts, 1 - HELD_OUT)
        held = held if (~held).any() else starts > starts.min()
    level = envs["level"].double().numpy()
    return {"inputs": inputs, "targets": targets, "level": np.tile(level, horizon), "held": np.tile(held, horizon)}


class Bins:
    """Each input column's bin edges, found once per setting by scikit-learn's rule: the midpoints
    between distinct known values where there are fewer than ``BINS``, else ``BINS - 2`` weighted
    quantiles of the known values; value ``v`` falls in bin ``i`` when ``edges[i - 1] < v <= edges[i]``.

    The boosting is fitted on the bin codes. scikit-learn bins its inputs at every fit, and with sample
    weights its binning computes a weighted percentile per edge: 9.7 of 13.3 CPU-s of one fit on the
    bakery's 71,000 training days (cProfile), spent again by each of the 64 tuned configurations on the
    same rows. On codes (fewer than ``BINS`` distinct values) its binning is a sort, and where a column
    has fewer than ``BINS`` distinct values its trees are exactly those it grows on the raw values
    (tested)."""

    def __init__(self, inputs: np.ndarray, weights: np.ndarray):
        self.edges = []
        for column in inputs.T:
            known = ~np.isnan(column) & (weights > 0)
            values, w = column[known], weights[known]
            distinct = np.unique(values)
            if len(distinct) < BINS:
                self.edges.append((distinct[:-1] + distinct[1:]) / 2)
                continue
            order = np.argsort(values, kind="stable")
            cumulative = np.cumsum(w[order])
            at = np.searchsorted(cumulative, cumulative[-1] * np.arange(1, BINS - 1) / (BINS - 1))
            self.edges.append(np.unique(values[order][np.minimum(at, len(values) - 1)]))

    def codes(self, inputs: np.ndarray) -> np.ndarray:
        """The bin of each value, as floats (NaN stays NaN: the boosting's missing-value bin)."""
        out = np.full(inputs.shape, np.nan)
        for j, edges in enumerate(self.edges):
            known = ~np.isnan(inputs[:, j])
            out[known, j] = np.searchsorted(edges, inputs[known, j], side="left")
        return out


BINS = 256  # scikit-learn's most: 255 bins of known values (max_bins) and one for missing values


class FittedGBM:
    """A fitted boosting and what it reads: the input columns ever known in training, binned."""

    def __init__(self, model, columns: np.ndarray, bins: Bins):
        self.model, self.columns, self.bins = model, columns, bins

    def predict(self, inputs: np.ndarray) -> np.ndarray:
        return self.model.predict(self.bins.codes(inputs[:, self.columns]))


@functools.lru_cache(maxsize=4)
def binned_days(task_name: str, options: tuple, horizon: int, q: float) -> dict:
    """A setting's training days (:func:`part_days`), their never-known lag columns dropped
    (a lag longer than every look-back: scikit-learn cannot bin an all-missing column) and binned once
    for every configuration (:class:`Bins`)."""
    days = part_days(task_name, options, horizon, q)
    inputs, held, level = days["inputs"], days["held"], days["level"]
    columns = ~np.isnan(inputs[~held]).all(0)
    bins = Bins(inputs[~held][:, columns], level[~held])
    return {**days, "codes": bins.codes(inputs[:, columns]), "columns": columns, "bins": bins}


@functools.lru_cache(maxsize=8)
def fitted_gbm(
    task_name: str,
    options: tuple,
    horizon: int,
    q: float,
    learning_rate: float,
    max_leaf_nodes: int,
    min_samples_leaf: int,
    l2_regularization: float,
) -> FittedGBM:
    """The global quantile model at ``q`` for a setting, fitted once per process on the training part
    (:func:`part_days`, binned by :func:`binned_days`), boosting up to ``MAX_ITER`` rounds and stopped
    early when the held-out training windows' pinball loss has not improved for 20 rounds."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    days = binned_days(task_name, options, horizon, q)
    codes, targets, held, level = days["codes"], days["targets"], days["held"], days["level"]
    model = HistGradientBoostingRegressor(
        loss="quantile",
        quantile=q,
        learning_rate=learning_rate,
        max_leaf_nodes=max_leaf_nodes,
        min_samples_leaf=min_samples_leaf,
        l2_regularization=l2_regularization,
        max_iter=MAX_ITER,
        max_bins=BINS - 1,
        early_stopping=True,
        n_iter_no_change=20,
        scoring="loss",
        random_state=0,
    )
    # Each day weighted by its window's level: the loss in level units times the level is the cost in the
    # series' own units, so the boosting and its stopping rule minimise the headline metric (total cost
    # over total demand). Unweighted, a held-out window of a tiny level rules the stopping: measured at
    # q = 0.75 (series split 0), its held-out loss was lowest at round 13 while the validation part's
    # scaled cost fell until round 300 (0.101 at 13, 0.0755 at 300); weighted, both fall together.
    model.fit(
        codes[~held],
        targets[~held],
        sample_weight=level[~held],
        X_val=codes[held],
        y_val=targets[held],
        sample_weight_val=level[held],
    )
    return FittedGBM(model, days["columns"], days["bins"])


MAX_ITER = 3000


def make_policy_free(task) -> Policy:
    """A policy that orders nothing (plays the training windows to read their contexts and demands)."""
    zero = Policy(task)
    zero.act = lambda t, x: torch.zeros(x.shape[0], 1, device=x.device)
    return zero


@register_policy("gbm", tasks=(NewsvendorData,))
class GlobalGBM(PastDemand):
    """A global gradient-boosted quantile model (Huber et al. 2019's machine-learned quantile model):
    one ``HistGradientBoostingRegressor(loss="quantile")`` at ``q``, trained offline on every day of the
    training part's series, on the context ``X_t`` plus lagged demand (:func:`lag_features`: the last
    seven days, the same weekday's last four weeks, the means of the last 7, 14 and 28 days, the
    window's own past days included); it orders its prediction and does not refit within the window.
    Fitted once per process and setting (seconds to a minute); windows with another ``q`` get their own
    model.

    Args:
        learning_rate, max_leaf_nodes, min_samples_leaf, l2_regularization: the boosting's; it runs up
            to ``MAX_ITER`` (3,000) rounds, stopped early on held-out training windows
            (:func:`part_days`). ``tunable``: 64 configurations, searched on the validation windows
            per critical ratio (``omgpt tune``).
    """

    tunable = {
        "learning_rate": (0.02, 0.05, 0.1, 0.2),
        "max_leaf_nodes": Grid(7, 15, 31, 63, lowest=2),  # scikit-learn needs 2 leaves
        "min_samples_leaf": (20, 200),
        "l2_regularization": (0.0, 3.0),
    }
    # Past an end, one fit per new value (the others at the winner's): crossed with the other three
    # constants' 16 points, each widening step of the learning rate alone cost ~16 fits of up to 3,000
    # rounds (the first real-demand tuning ran 13 CPU-minutes without finishing one setting).
    widen = "line"

    def __init__(
        self,
        task,
        learning_rate: float = 0.1,
        max_leaf_nodes: int = 31,
        min_samples_leaf: int = 20,
        l2_regularization: float = 0.0,
    ):
        super().__init__(task)
        lo, hi = task.q_range
        if lo != hi:  # one model per q: a range would fit one per window
            raise OMGPTError(
                f"gbm is fitted at one critical ratio; the task draws q from [{lo:g}, {hi:g}]: "
                f"evaluate with --option critical_ratio=Q"
            )
        self.learning_rate = checks.number("learning_rate", learning_rate, low=0, low_open=True)
        self.max_leaf_nodes = checks.number("max_leaf_nodes", max_leaf_nodes, integer=True, low=2)
        self.min_samples_leaf = checks.number("min_samples_leaf", min_samples_leaf, integer=True, low=1)
        self.l2_regularization = checks.number("l2_regularization", l2_regularization, low=0)

    def model(self, q: float) -> FittedGBM:
        """The fitted boosting at ``q`` (fitted once per process and setting)."""
        options = tuple(
            sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in self.task.options().items())
        )  # a cache key
        return fitted_gbm(
            self.task.name,
            options,
            self.task.horizon,
            q,
            float(self.learning_rate),
            int(self.max_leaf_nodes),
            int(self.min_samples_leaf),
            float(self.l2_regularization),
        )

    def decide(self, t: int, x: Tensor) -> Tensor:
        seen, _ = self.demands(t)
        inputs, q = gbm_inputs(x, seen), x[:, Q].double().cpu().numpy()
        orders = np.empty(self.batch)
        for level in np.unique(q):
            rows = q == level
            orders[rows] = self.model(float(level)).predict(inputs[rows])
        return torch.as_tensor(orders, dtype=x.dtype, device=x.device)[:, None]


@register_policy("hindsight-linear", tasks=(NewsvendorData,))
class HindsightLinear(Policy):
    """NOT A POLICY -- a yardstick: the linear order rule ``β₀ + βᵀX_t`` with the least total cost on the
    window itself, i.e. the unpenalised quantile regression at ``q`` of the window's own demands on
    its contexts, fitted when the window starts, with its future. No decision maker can play it; it
    shows how far the features alone could carry a linear rule (in-sample, so it flatters)."""

    def reset(self, envs, horizon, generator):
        super().reset(envs, horizon, generator)
        task = self.task
        xs = torch.stack(
            [task.sample_context(envs, t, generator) for t in range(horizon)], dim=1
        )  # contexts ignore the generator
        demand = window_demands(task, envs, horizon)
        features, y, q = (
            regressors(xs).double().cpu().numpy(),
            demand.double().cpu().numpy(),
            xs[:, 0, Q].double().cpu().numpy(),
        )
        self.beta = torch.as_tensor(
            np.stack([quantile_regression(features[i], y[i], q[i]) for i in range(self.batch)]), device=self.device
        )

    def act(self, t: int, x: Tensor) -> Tensor:
        return (self.beta[:, 0] + (self.beta[:, 1:] * regressors(x).double()).sum(-1)).to(x.dtype)[:, None]
