"""The newsvendor on real demand (``newsvendor-data``): every environment is one series of a demand
table over a window of ``T`` consecutive days (:mod:`omgpt.demand_data`: ``ddop``'s bakery or yaz, or
any CSV).

Each day the decision maker orders ``a_t``, then sees the day's demand ``d_t`` and pays
``h (a_t - d_t)^+ + l (d_t - a_t)^+`` with ``h = 1 - q`` and ``l = q`` for the critical ratio
``q = l / (h + l)`` (option ``critical_ratio``): the pinball loss at ``q``, whose minimiser is the
``q``-quantile of demand. (Only the ratio matters for every comparison; fixing ``h + l = 1`` makes a
cost the pinball loss itself.)

Units. Demand is divided by the series' *level* ``s``: its mean daily demand over the ``lookback``
days before the window (default 28), which the decision maker knows when the window starts. So
``O_t = d_t / s``, orders are in the same units, and a cost of 0.1 per day is a tenth of the series'
usual daily demand -- comparable across series whose demand differs 500-fold (bakery: 1.3 to 652).
Windows whose look-back has no demand (a store before it opened) have no level and are skipped.

The context ``X_t`` holds only what is known before day ``t``'s demand (tested): the critical ratio
``q``; ``log s`` standardised with the training part's level statistics; two summaries of the
look-back in the units of ``s``: its ``q``-quantile (what SAA on the look-back orders) and the mean of
its days on ``t``'s weekday; day ``t``'s weekday (one-hot, from the date); and the table's features of
day ``t`` (one-hot and standardised with the training part's statistics). No demand of the window
enters ``X_t``: the window's demands reach the decision maker only as observations.

There is no ``a*`` on real data. :meth:`optimal_action` is the hindsight-optimal order, the realised
demand itself (cost 0; within ``A``, which holds every bakery day: ``ACTION_HIGH``), so the regret of a step is the cost paid: "regret" on this task is the cost
per day against a clairvoyant. The reward is the realised one (no model to take an expectation
under). OMGPT is therefore pre-trained on the task's own cost of its order against the realised
demand (``target: cost``, :meth:`outcome_cost`): its minimiser given the history is the Bayes order
under the empirical prior over the training part's windows; imitating the hindsight order with an
absolute loss would learn the median instead, so that target is refused.

Parts and splits (``part``, ``split``; :class:`~omgpt.demand_data.DemandData`): ``sample_envs`` draws
windows of the part -- a fresh random permutation of all of them per call, cycled when more are asked
for, so ``--runs K`` with ``K`` the part's window count plays each once. Training windows start on
every day (``stride`` 1); validation and test windows are disjoint (``stride`` = ``T``). A model's
checkpoint is chosen on the validation part (:meth:`validation_task`); ``omgpt evaluate`` needs
``--option part=test``.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from omgpt import demand_data as dd
from omgpt.errors import OMGPTError
from omgpt.tasks.base import Envs, Scaling, Task
from omgpt.tasks.registry import make_task, register

DEFAULT_CRITICAL_RATIO = 0.75  # l / (h + l): understocking costs three times overstocking
# Orders up to 200 levels. Measured (tests/test_real_data.py, test_every_bakery_day_fits_the_action_range):
# over every window of 100 days of bakery -- every start, in every part of every split -- the largest
# day is 177.3 times its window's level (a series reopening after a closure: level 0.32); 99.99% of
# windows stay below 135. A bound of 50 cut such days, so their regret was not their cost.
ACTION_HIGH = 200.0
# Context columns before the table's own features.
Q, LOG_LEVEL, LOOKBACK_QUANTILE, LOOKBACK_WEEKDAY, WEEKDAY = 0, 1, 2, 3, 4
LEADING = WEEKDAY + dd.WEEKDAYS


@register("newsvendor-data")
class NewsvendorData(Task):
    """Args:
    dataset: a ``ddop`` data set: ``bakery`` (the default when no ``csv`` is given) or ``yaz``.
    csv: a CSV demand table, one row per series and date.
    series, date, demand: its series id columns (comma-separated; none: one series), date and demand columns.
    drop: columns to ignore (comma-separated); categorical: numeric columns to one-hot encode.
    group: columns whose values the series split holds out together (default: the series columns;
        bakery: the store).
    split: ``series`` (held-out groups of series) or ``time`` (held-out later dates).
    part: ``train``, ``validation`` or ``test``: the windows environments are drawn from.
    critical_ratio: ``q = l / (h + l)``, or a range ``[lo, hi]`` from which each environment draws
        ``q ~ U[lo, hi]`` (one model for every ratio in it; ``q`` is in the context, and an
        evaluation fixes it with ``--option critical_ratio=0.9``).
    horizon: ``T``, the window length in days.
    lookback: days before a window that set its level and summaries.
    stride: days between window starts (default: 1 for ``train``, ``T`` for the others).
    validation_share, test_share: shares of the groups (series split) or of the date range (time split).
    split_seed: seed of the series split's draw of groups.
    origin: the time split's rolling origin: ``k`` moves the validation and test periods ``k`` test
        periods earlier (their own training days before them, the days after the test period unused;
        :class:`~omgpt.demand_data.DemandData`). 0: the plain split.
    """

    loss = "l1"  # unused: the target is the cost (see the module docstring)
    default_target = "cost"
    has_optimal_action = False
    poolable = False  # the part's windows are the finite set; their contexts are their own
    obs_dim = 1
    action_dim = 1
    action_low, action_high = 0.0, ACTION_HIGH
    default_horizon: ClassVar[int] = 100
    benchmarks = (  # the practitioner's, then the feature-based methods of the literature (newsvendor_features.py)
        "saa",
        "saa-weekday",
        "qr",
        "fai-data",
        "gbm",
        "wsaa-rf",
        "wsaa-knn",
        "wsaa-tree",
        "wsaa-kernel",
        "erm-linear",
        "dnn-newsvendor",
    )
    tuning_metric: ClassVar[str] = (
        "scaled_cost"  # what omgpt tune minimises here (tuning_score); an entry tuned otherwise is stale
    )
    evaluation_options = ("part", "critical_ratio")

    def __init__(
        self,
        dataset: str | None = None,
        csv: str | None = None,
        series: str | None = None,
        date: str = "date",
        demand: str = "demand",
        drop: str | None = None,
        categorical: str | None = None,
        group: str | None = None,
        split: str = "series",
        part: str = "train",
        critical_ratio: float | list[float] = DEFAULT_CRITICAL_RATIO,
        horizon: int = 100,
        lookback: int = 28,
        stride: int | None = None,
        validation_share: float = 0.15,
        test_share: float = 0.15,
        split_seed: int = 0,
        origin: int = 0,
        **pool,
    ):
        if part not in dd.PARTS:
            raise OMGPTError(f"part must be one of {', '.join(dd.PARTS)}, got {part!r}")
        if not (0 < validation_share and 0 < test_share and validation_share + test_share < 1):
            raise OMGPTError(
                f"validation_share and test_share must be positive with a sum below 1, got {validation_share} and {test_share}"
            )
        for name, value, low in (("horizon", horizon, 1), ("lookback", lookback, dd.WEEKDAYS), ("stride", stride, 1)):
            if value is not None and int(value) < low:
                raise OMGPTError(f"{name} must be an integer >= {low}, got {value}")
        self.part, self.horizon, self.lookback = part, int(horizon), int(lookback)
        self.q_range = ratio_range(critical_ratio)
        self.stride = int(stride) if stride is not None else (1 if part == "train" else self.horizon)
        source = table_source(dataset, csv, series, date, demand, drop, categorical, group)
        self.data = dd.demand_data(
            source, split, self.lookback, float(validation_share), float(test_share), int(split_seed), origin
        )
        self.data.check_lengths(self.horizon)
        self.starts = torch.from_numpy(self.data.windows(part, self.horizon, self.stride))
        if len(self.starts) == 0:
            raise OMGPTError(self.data.no_window(part, self.horizon))
        self.context_dim = LEADING + self.data.features.shape[1]
        self._tensors: dict[str, dict[str, Tensor]] = {}
        super().__init__(**pool)

    @classmethod
    def setting_options(cls, options: dict, horizon: int) -> dict:
        """The options that name a setting's tuned constants (:func:`omgpt.tuning.setting_key`; the
        options that differ from the defaults): keyed by what the tuning reads -- the training part and
        the validation windows -- not by the shares that cut them. Shares that cut the same parts as the
        defaults' (at the same origin) are left out; others are replaced by what they cut: the series
        split's numbers of test and validation groups (``test_groups``, ``validation_groups``: with the
        seed, which groups), the time split's first validation day and the last day of its validation
        windows (``validation=FIRST..LAST``: the training part ends before FIRST; it fixes the origin,
        which is left out). So ``test_share`` 0.25 and 0.251, which on a table cut the same windows,
        share one file, and one that moves a window has its own."""
        if not {"validation_share", "test_share"} & options.keys():
            return options
        defaults = _defaults(cls)
        full = {**defaults, **options}
        given = _tuned_parts(full, horizon, full["validation_share"], full["test_share"])
        rest = {k: v for k, v in options.items() if k not in ("validation_share", "test_share")}
        if given == _tuned_parts(full, horizon, defaults["validation_share"], defaults["test_share"]):
            return rest
        if full["split"] == "time":
            return {**{k: v for k, v in rest.items() if k != "origin"}, "validation": f"{given[0]}..{given[1]}"}
        return {**rest, "test_groups": given[0], "validation_groups": given[1]}

    # ----------------------------------------------------------------------------------------------
    def tensors(self, device) -> dict[str, Tensor]:
        """The table's columns as tensors on ``device`` (made once per device)."""
        key = str(device)
        if key not in self._tensors:
            d = self.data
            self._tensors[key] = {
                "demand": torch.as_tensor(d.demand, dtype=torch.float32, device=device),
                "features": torch.as_tensor(d.features, device=device),
                "weekday": torch.as_tensor(d.weekday, device=device),
            }
        return self._tensors[key]

    @property
    def windows(self) -> int:
        """How many windows the part has (``--runs`` this many plays each once)."""
        return len(self.starts)

    def sample_prior(self, n: int, generator: torch.Generator) -> Envs:
        device = generator.device
        k = len(self.starts)
        order = torch.cat([torch.randperm(k, generator=generator, device=device) for _ in range(-(-n // k))])[:n]
        row = self.starts.to(device)[order]
        level = torch.as_tensor(self.data.lookback_mean, dtype=torch.float32, device=device)[row]
        lo, hi = self.q_range
        q = lo + (hi - lo) * torch.rand(n, generator=generator, device=device)
        series = torch.as_tensor(self.data.series_index, device=device)[row]
        return {"row": row, "series": series, "level": level, "q": q}

    def lookback_demand(self, envs: Envs) -> tuple[Tensor, Tensor]:
        """What is known before the window: the ``lookback`` days' demands in units of the level and
        their weekdays, each ``(B, lookback)``, oldest first. Public information (benchmarks that
        use raw past demand start from it; OMGPT sees its summaries in ``X_t``)."""
        data = self.tensors(envs["row"].device)
        rows = envs["row"][:, None] - self.lookback + torch.arange(self.lookback, device=envs["row"].device)
        return data["demand"][rows] / envs["level"][:, None], data["weekday"][rows]

    def sample_context(self, envs: Envs, t: int, generator: torch.Generator) -> Tensor:
        self._check_day(t)
        data = self.tensors(envs["row"].device)
        rows = envs["row"] + t
        past, past_weekday = self.lookback_demand(envs)  # days before the window only
        weekday = data["weekday"][rows]
        same = past_weekday == weekday[:, None]
        same_mean = (past * same).sum(-1) / same.sum(-1).clamp(min=1)
        same_mean = torch.where(same.any(-1), same_mean, torch.ones_like(same_mean))  # no such day: the level
        log_level = (envs["level"].log() - self.data.log_scale_loc) / self.data.log_scale_std
        leading = torch.stack([envs["q"], log_level, dd.masked_quantile(past, envs["q"]), same_mean], dim=-1)
        onehot = torch.nn.functional.one_hot(weekday, dd.WEEKDAYS).to(leading.dtype)
        return torch.cat([leading, onehot, data["features"][rows]], dim=-1)

    def _check_day(self, t: int) -> None:
        if not 0 <= t < self.horizon:  # past the window the rows are another window's, or another series'
            raise ValueError(
                f"day {t} is outside the task's windows of {self.horizon} days (make the task with horizon={t + 1} or more)"
            )

    def demand(self, envs: Envs, t: int) -> Tensor:
        """Day ``t``'s realised demand in units of the level, ``(B, 1)``."""
        self._check_day(t)
        return (self.tensors(envs["row"].device)["demand"][envs["row"] + t] / envs["level"])[:, None]

    def observe(self, envs: Envs, x: Tensor, a: Tensor, t: int, generator: torch.Generator) -> Tensor:
        return self.demand(envs, t)

    def optimal_action(self, envs: Envs, x: Tensor, t: int) -> Tensor:
        """The hindsight-optimal order: the realised demand (projected onto ``A``, which holds every day
        of bakery; on a day whose demand exceeds ``ACTION_HIGH`` levels the regret is the cost above
        the clairvoyant's, not the whole cost)."""
        return self.project(self.demand(envs, t), x)

    def outcome_cost(self, a: Tensor, o: Tensor, x: Tensor) -> Tensor:
        """``(1 - q)(a - o)^+ + q (o - a)^+``, ``q = x[..., 0]``: the pinball loss at the critical ratio."""
        q, short = x[..., Q], (o - a)[..., 0]
        return torch.where(short > 0, q * short, (q - 1) * short)

    def expected_reward(self, envs: Envs, x: Tensor, a: Tensor, t: int) -> Tensor:
        """Minus the realised cost of ``a`` (real data have no model to average over)."""
        return -self.outcome_cost(a, self.demand(envs, t), x)

    @staticmethod
    def check_evaluation_options(given: dict) -> None:
        """``omgpt evaluate`` names the part it scores, and never the training part: a checkpoint's own
        options say ``part: train`` (what it was trained on), and scoring there would be silent."""
        part = given.get("part")
        if part is None:
            raise OMGPTError(
                "evaluating newsvendor-data needs --option part=test (or part=validation): the windows it scores"
            )
        if part == "train":
            raise OMGPTError(
                "--option part=train: the training windows are what the model was fitted on; evaluate on part=test or part=validation"
            )

    def window_totals(self, history) -> tuple[Tensor, Tensor]:
        """Each window's total cost and total demand in the series' own units (level units times the
        level), ``(B,)`` each, float64. Their sums' ratio over a set of windows is the **scaled pinball
        loss**, cost per unit demanded (:func:`scaled_cost`): the headline metric, the checkpoint's and
        the tuning's (the per-window mean in level units is ruled by a few windows whose level is tiny)."""
        level = history.envs["level"].double()
        cost = self.outcome_cost(history.actions, history.observations, history.contexts).double().sum(-1)
        return cost * level, history.observations[..., 0].double().sum(-1) * level

    def tuning_score(self, history) -> dict:
        """What ``omgpt tune`` minimises on this task's validation windows: the scaled cost (total cost
        over total demand, :meth:`window_totals`) with its standard error by linearisation over windows
        (``se ≈ sqrt(Σ_w (C_w - R D_w)²) / Σ_w D_w``), in the place of the per-window mean final regret."""
        cost, demand = self.window_totals(history)
        ratio = scaled_cost(cost, demand)
        return {
            "mean": ratio,
            "se": float((cost - ratio * demand).pow(2).sum().sqrt() / demand.sum()),
            "metric": self.tuning_metric,
        }

    def test_options(self) -> dict:
        """The test windows, at the default critical ratio where the model was trained on it (bakery's
        range [0.5, 0.9]), else at the middle of its range; the experiment's panels name q explicitly."""
        lo, hi = self.q_range
        q = DEFAULT_CRITICAL_RATIO if lo <= DEFAULT_CRITICAL_RATIO <= hi else round((lo + hi) / 2, 4)
        return {"part": "test", "critical_ratio": q}

    def validation_task(self) -> Task:
        """The same table, split and options with ``part="validation"``: a model trained on the
        training windows is validated (and its checkpoint chosen) on the validation windows, and the
        benchmarks are tuned there (``omgpt tune``), whichever part they are then played on."""
        if self.part == "validation":
            return self
        return make_task(self.name, **{**self.options(), "part": "validation"})

    # Measured on bakery's training windows (series split, q = 0.75, 4,096 windows x 100 days): demand
    # in units of the level has mean 1.03 and sd 1.3 (a heavy upper tail; most days lie within 1 ± 0.8),
    # the look-back 0.75-quantile mean 1.25, sd 0.16, the same-weekday look-back mean 1.0, sd 0.43;
    # the log level is standardised and the table's features encoded already.
    def scaling(self) -> Scaling:
        lo, hi = self.q_range
        q_loc, q_scale = (lo + hi) / 2, max((hi - lo) / 3.5, 0.1)
        features = self.context_dim - LEADING
        return Scaling(
            feature_loc=(1.0, q_loc, 0.0, 1.2, 1.0) + (0.0,) * (dd.WEEKDAYS + features),
            feature_scale=(0.8, q_scale, 1.0, 0.4, 0.45) + (1.0,) * (dd.WEEKDAYS + features),
            action_loc=(1.0,),
            action_scale=(0.8,),
        )


def table_source(dataset, csv, series, date, demand, drop, categorical, group) -> dict:
    """The table options as :func:`omgpt.demand_data.load_table` reads them (bakery when none is named)."""
    dataset = "bakery" if dataset is None and csv is None else dataset
    return dict(
        dataset=dataset,
        csv=csv,
        series=series,
        date=date,
        demand=demand,
        drop=drop,
        categorical=categorical,
        group=group,
    )


def _defaults(cls) -> dict:
    import inspect

    return {n: p.default for n, p in inspect.signature(cls.__init__).parameters.items() if p.default is not p.empty}


def _tuned_parts(options: dict, horizon: int, validation_share: float, test_share: float) -> tuple:
    """What a tuning of ``options`` reads, cut by these shares (:meth:`NewsvendorData.setting_options`):
    the series split's (test, validation) group counts, the time split's first validation day and
    the last day of its validation windows."""
    o = options
    source = table_source(
        *(o[k] for k in ("dataset", "csv", "series", "date", "demand", "drop", "categorical", "group"))
    )
    if o["split"] != "time":
        groups = len(set(dd.load_table(**source).groups))
        return dd.series_counts(groups, float(validation_share), float(test_share))
    data = dd.demand_data(
        source,
        "time",
        int(o["lookback"]),
        float(validation_share),
        float(test_share),
        int(o["split_seed"]),
        o["origin"],
    )
    starts = data.windows("validation", horizon, int(o["stride"] or horizon))
    last = data.table.dates[starts].max() + np.timedelta64(horizon - 1, "D") if len(starts) else None
    return str(data.validation_from), str(last)


def ratio_range(value) -> tuple[float, float]:
    """``critical_ratio`` as ``(lo, hi)``: a number ``q`` is ``(q, q)``; a pair ``[lo, hi]`` a range."""
    pair = list(value) if isinstance(value, (list, tuple)) else [value, value]
    try:
        lo, hi = (float(v) for v in pair)
    except (TypeError, ValueError):
        lo = hi = float("nan")
    if len(pair) != 2 or not (0 < lo <= hi < 1):
        raise OMGPTError(f"critical_ratio must be a number in (0, 1) or a range [lo, hi] within it, got {value!r}")
    return lo, hi


def scaled_cost(cost: Tensor, demand: Tensor) -> float:
    """Total cost over total demand of windows (:meth:`NewsvendorData.window_totals`): the scaled
    pinball loss."""
    return float(cost.sum() / demand.sum())


def window_demands(task: NewsvendorData, envs: Envs, horizon: int) -> Tensor:
    """Every day's demand of the windows ``envs`` in units of their levels, ``(B, horizon)`` (for
    hindsight yardsticks and plots: never for a decision)."""
    return torch.cat([task.demand(envs, t) for t in range(horizon)], dim=-1)
