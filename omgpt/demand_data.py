"""Real demand tables for the data-driven tasks (``newsvendor-data``): loading, checking, encoding and
splitting, with no leakage from the parts a model is tested on into what it is trained on.

A *demand table* has one row per (series, date): the series' id (one or more columns: bakery's store
and product), the date, the realised demand, and any number of feature columns known on that day
(weekday, holidays, weather, promotions). Two sources:

* ``dataset="bakery"`` or ``"yaz"``: the CSV files shipped by ``ddop`` 0.7.6 (BSD-3; installed by
  ``setup.sh`` with ``--no-deps``: its metadata pins scikit-learn 0.23 and TensorFlow, which the data do
  not need). The files are read from the installed package's data folder; ``ddop``'s own loaders are
  never imported (``ddop.datasets`` imports scikit-learn), and nothing is downloaded.
* ``csv=PATH``: any table, with options naming its series, date and demand columns; every other column
  is a feature unless dropped.

Encoding. Text columns (and the columns named ``categorical``) are one-hot encoded on the levels seen
in the training part (a level first seen later encodes as all zeros); numeric columns are
standardised with the training part's mean and standard deviation. Every user error -- a missing
column, a non-numeric value in a numeric column, missing or negative demand, a duplicated date, a
series too short for one window, an unknown dataset, an empty ``csv=`` -- is one :class:`OMGPTError` line.

Checked as data, before anything is built (each refusal names the column and the file's row):

* Every value -- demand and numeric features -- is finite and at most ``MAX_VALUE`` (10^12) in size:
  beyond that it is a unit or parsing error (a day's demand of a trillion units), and float32 features
  and levels would lose the other rows' precision (one 1e300 value makes a standard deviation of inf
  and its whole column zeros).
* A series' dates are consecutive days: the task reads row ``t + 1`` as the day after row ``t``, so a
  gap (a closed week left out of the file) is refused, naming the series and the dates; fill it in the
  file (with the demand of the missing days, 0 if the store was closed).
* A text column with more than ``MAX_LEVELS`` (64) distinct values is not a category (an id, free
  text) and is refused; a column named ``categorical`` may have up to ``MAX_CATEGORICAL_LEVELS``
  (1,000) levels, and the one-hot's memory is estimated before it is built.
* Levels (the look-back mean) are computed series by series: one series' values never enter another's.

Splits (:class:`DemandData`), with the training part's statistics only:

* ``split="series"``: whole groups of series (bakery: whole stores, so a test store is never seen in
  training) go to train / validation / test, drawn by ``split_seed``. The parts share the calendar:
  this measures generalisation to unseen stores over the same period, not to the future.
* ``split="time"``: every series, cut by date: training windows end before ``validation_from``,
  validation windows lie in ``[validation_from, test_from)``, test windows in ``[test_from,
  test_until)``. Validation and test windows' look-back days may lie in the earlier parts: those are
  the past, known when the window starts. ``origin`` rolls the cut back (rolling-origin evaluation):
  origin ``k`` moves all three parts ``k`` test periods (``test_share`` of the date range each) earlier,
  so its test period is a date range no other origin tests on, with its own training and validation
  days before it; the days after its test period belong to no part (a model of origin ``k`` never sees
  them). Origin 0 is the plain split, its test period the table's last dates.

Either way no test window shares a decision day with a training or validation window.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from omgpt.errors import OMGPTError

PARTS = ("train", "validation", "test")
SPLITS = ("series", "time")
MAX_LEVELS = 64  # a text column with more distinct values is not a category (an id, free text): refused
MAX_CATEGORICAL_LEVELS = 1000  # a column named categorical: more levels is a one-hot no model learns from
MAX_VALUE = 1e12  # demand and numeric features beyond this size are unit or parsing errors: refused
WEEKDAYS = 7


@dataclass(frozen=True)
class DatasetSpec:
    """How a ``ddop`` data set becomes a demand table: its files, and the roles of its columns.

    ``targets``: the target file holds one demand column per series (yaz: one per dish), melted into
    a series column of that name; ``None``: one ``demand`` column in long form (bakery).
    ``drop``: columns left out: the ``weekday`` labels (every table gets its weekday from the date:
    bakery's labels are one day off their dates -- 2016-01-02, a Saturday, is labelled FRI) and
    ``year`` (a trend proxy that a time split can only extrapolate). ``categorical``: columns one-hot
    encoded, series columns included: the product is a feature too (a held-out store sells the same
    three products)."""

    data: str
    target: str
    series: tuple[str, ...]
    group: tuple[str, ...]
    drop: tuple[str, ...] = ("weekday", "year")
    targets: str | None = None
    categorical: tuple[str, ...] = ("product",)


DATASETS = {
    # 35 stores x 3 products x 1,215 days (2016-01-02 .. 2019-04-30); held out by whole stores
    "bakery": DatasetSpec("bakery_data.csv", "bakery_target.csv", series=("store", "product"), group=("store",)),
    # one restaurant, 7 dishes x 765 days (2013-10-04 .. 2015-11-07)
    "yaz": DatasetSpec("yaz_data.csv", "yaz_target.csv", series=("product",), group=("product",), targets="product"),
}


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: the cached encodings are keyed by it
class DemandTable:
    """A checked demand table, sorted by series then date.

    Attributes:
        series: series id per row (``"2/101"``: the series columns' values joined by ``/``), ``(N,)``.
        groups: the id of the group the row's series is held out with (series split), ``(N,)``.
        dates: ``datetime64[D]`` per row, strictly increasing within a series, ``(N,)``.
        demand: realised demand, finite and non-negative, ``(N,)`` float64.
        numeric: the numeric feature columns, ``{name: (N,) float64}``.
        categorical: the categorical feature columns, ``{name: (N,) str}``.
        source: what was read (``"bakery"``, a path), for messages.
    """

    series: np.ndarray
    groups: np.ndarray
    dates: np.ndarray
    demand: np.ndarray
    numeric: dict
    categorical: dict
    source: str


# --------------------------------------------------------------------------------------------------
# Loading and checking.
def _names(value) -> tuple[str, ...]:
    """``"a,b"`` or ``["a", "b"]`` -> ``("a", "b")``; ``None`` -> ``()``."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return tuple(str(v) for v in value)


def ddop_file(name: str) -> Path:
    """A CSV file of the installed ``ddop`` package's data folder (its ``__init__`` is empty: importing
    the package imports nothing else)."""
    import importlib.resources

    try:
        return Path(importlib.resources.files("ddop")) / "datasets" / "data" / name
    except ModuleNotFoundError:
        raise OMGPTError(
            "the ddop data sets need the ddop package: pip install --no-deps ddop==0.7.6 (setup.sh installs it)"
        ) from None


def _read_csv(path, what: str):
    import pandas as pd

    try:
        return pd.read_csv(path)
    except FileNotFoundError:
        raise OMGPTError(f"{what}: no such file") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise OMGPTError(
            f"{what}: not a readable CSV table ({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''})"
        ) from None


def _ddop_frame(name: str):
    import pandas as pd

    if name not in DATASETS:
        raise OMGPTError(f"unknown dataset {name!r}; available: {', '.join(sorted(DATASETS))} (or --option csv=PATH)")
    spec = DATASETS[name]
    data, target = (_read_csv(ddop_file(f), f"dataset {name!r} ({f})") for f in (spec.data, spec.target))
    if spec.targets is None:
        return pd.concat([data, target], axis=1)
    wide = pd.concat([data, target], axis=1)
    return wide.melt(
        id_vars=list(data.columns), value_vars=list(target.columns), var_name=spec.targets, value_name="demand"
    )


def load_table(
    dataset: str | None = None,
    csv: str | None = None,
    series=None,
    date: str = "date",
    demand: str = "demand",
    drop=None,
    categorical=None,
    group=None,
) -> DemandTable:
    """Read and check a demand table: ``dataset`` (a ``ddop`` data set, which fixes the column roles)
    or ``csv`` (a path; ``series``, ``date``, ``demand`` name its columns, ``drop`` columns to ignore,
    ``categorical`` numeric columns to one-hot encode -- a series column named there is a feature too --
    and ``group`` the columns whose values the series split holds out together, default the series
    columns). Cached per source and options (the
    file's modification time included), since every part of a run builds its task."""
    if (dataset is None) == (csv is None):
        raise OMGPTError(
            "a demand table is one of --option dataset=NAME ("
            + ", ".join(sorted(DATASETS))
            + ") or --option csv=PATH, not both"
        )
    if csv is not None and not str(csv).strip():
        raise OMGPTError(
            "--option csv= is empty; give the path of a CSV table (or leave csv out for --option dataset=NAME)"
        )
    if dataset is not None:
        if dataset not in DATASETS:
            raise OMGPTError(
                f"unknown dataset {dataset!r}; available: {', '.join(sorted(DATASETS))} (or --option csv=PATH)"
            )
        spec = DATASETS[dataset]
        roles = (
            spec.series,
            "date",
            "demand",
            spec.drop + _names(drop),
            spec.categorical + _names(categorical),
            spec.group,
        )
        return _load(("dataset", dataset), *roles)
    path = os.path.abspath(csv)
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        raise OMGPTError(f"csv {csv}: no such file") from None
    return _load(("csv", path, stamp), _names(series), date, demand, _names(drop), _names(categorical), _names(group))


@functools.lru_cache(maxsize=8)
def _load(
    source: tuple, series: tuple, date: str, demand: str, drop: tuple, categorical: tuple, group: tuple
) -> DemandTable:
    import pandas as pd

    what = f"dataset {source[1]!r}" if source[0] == "dataset" else f"csv {source[1]}"
    frame = _ddop_frame(source[1]) if source[0] == "dataset" else _read_csv(source[1], what)
    named = {
        "series": series,
        "date": (date,),
        "demand": (demand,),
        "drop": drop,
        "categorical": categorical,
        "group": group,
    }
    for role, columns in named.items():
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            hint = f"name it with --option {role}=COLUMN" if role in ("date", "demand") else f"fix --option {role}="
            raise OMGPTError(
                f"{what}: no {role} column {missing[0]!r} (columns: {', '.join(map(str, frame.columns))}); {hint}"
            )
    if len(frame) == 0:
        raise OMGPTError(f"{what}: the table has no rows")

    values = pd.to_numeric(frame[demand], errors="coerce")
    bad = values.isna() & frame[demand].notna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise OMGPTError(
            f"{what}: demand column {demand!r} holds a non-numeric value {frame[demand].iloc[i]!r} (row {i + 2} of the file)"
        )
    _refuse_rows(what, f"demand column {demand!r}", values.isna().to_numpy(), "missing values")
    _refuse_rows(what, f"demand column {demand!r}", ~np.isfinite(values.to_numpy(dtype=float)), "non-finite values")
    _refuse_rows(what, f"demand column {demand!r}", values.to_numpy(dtype=float) < 0, "negative values")
    _refuse_rows(
        what,
        f"demand column {demand!r}",
        values.to_numpy(dtype=float) > MAX_VALUE,
        f"values above {MAX_VALUE:.0e} (a unit or parsing error?)",
    )
    dates = pd.to_datetime(frame[date], errors="coerce")
    _refuse_rows(what, f"date column {date!r}", dates.isna().to_numpy(), "values that are not dates")

    ids = frame[list(series)].astype(str).agg("/".join, axis=1) if series else pd.Series("all", index=frame.index)
    group_cols = group or series
    groups = frame[list(group_cols)].astype(str).agg("/".join, axis=1) if group_cols else ids
    order = np.lexsort((dates.to_numpy(), ids.to_numpy()))
    ids, groups, dates = (
        ids.to_numpy()[order],
        groups.to_numpy()[order],
        dates.to_numpy().astype("datetime64[D]")[order],
    )
    same = (ids[1:] == ids[:-1]) & (dates[1:] == dates[:-1])
    if same.any():
        i = int(np.flatnonzero(same)[0])
        raise OMGPTError(f"{what}: series {ids[i]!r} has two rows for {dates[i]}; one row per series and date")
    gap = (ids[1:] == ids[:-1]) & (dates[1:] - dates[:-1] > np.timedelta64(1, "D"))
    if gap.any():
        i = int(np.flatnonzero(gap)[0])
        missing = int((dates[i + 1] - dates[i]).astype(int)) - 1
        raise OMGPTError(
            f"{what}: series {ids[i]!r} jumps from {dates[i]} to {dates[i + 1]} ({missing} missing days; {int(gap.sum())} gaps "
            f"in all); rows are read as consecutive days: add the missing dates to the file (demand 0 where closed)"
        )

    numeric, categorical_out = {}, {}
    used = set(series) | {date, demand} | set(drop) | set(group)
    for column in frame.columns:
        if column in used and column not in categorical:
            continue
        col = frame[column].iloc[order]
        if col.isna().any():
            i = int(np.flatnonzero(frame[column].isna().to_numpy())[0])
            raise OMGPTError(
                f"{what}: feature column {column!r} has missing values (first in row {i + 2} of the file); fill or drop it (--option drop={column})"
            )
        if column in categorical or not _numeric_kind(col):
            levels = col.astype(str).to_numpy()
            if column in categorical and len(set(levels)) > MAX_CATEGORICAL_LEVELS:  # before the one-hot is built
                raise OMGPTError(
                    f"{what}: categorical column {column!r} has {len(set(levels))} levels, too many to one-hot encode "
                    f"(at most {MAX_CATEGORICAL_LEVELS}); leave it out of --option categorical= or drop it"
                )
            if column not in categorical:
                parsed = pd.to_numeric(col, errors="coerce")
                if parsed.notna().mean() >= 0.5:  # a numeric column with stray text: a data error, not a category
                    i = int(np.flatnonzero(parsed.isna().to_numpy())[0])
                    raise OMGPTError(
                        f"{what}: feature column {column!r} is numeric but holds the non-numeric value {col.iloc[i]!r}; fix it or drop the column (--option drop={column})"
                    )
                if len(set(levels)) > MAX_LEVELS:
                    raise OMGPTError(
                        f"{what}: feature column {column!r} has {len(set(levels))} distinct text values, too many to one-hot encode (at most {MAX_LEVELS}); drop it (--option drop={column})"
                    )
            categorical_out[str(column)] = levels
        else:
            raw = frame[column].to_numpy(dtype=float)
            _refuse_rows(what, f"feature column {column!r}", ~np.isfinite(raw), "non-finite values")
            _refuse_rows(
                what,
                f"feature column {column!r}",
                np.abs(raw) > MAX_VALUE,
                f"values beyond ±{MAX_VALUE:.0e} (a unit or parsing error?)",
            )
            numeric[str(column)] = raw[order]
    return DemandTable(ids, groups, dates, values.to_numpy(dtype=float)[order], numeric, categorical_out, what)


def _numeric_kind(col) -> bool:
    import pandas as pd

    return pd.api.types.is_bool_dtype(col) or pd.api.types.is_numeric_dtype(col)


def _refuse_rows(what: str, column: str, bad: np.ndarray, kind: str) -> None:
    if bad.any():
        raise OMGPTError(
            f"{what}: {column} has {int(bad.sum())} {kind} (first in row {int(np.flatnonzero(bad)[0]) + 2} of the file)"
        )


# --------------------------------------------------------------------------------------------------
# Encoding and splitting.
class DemandData:
    """A demand table encoded and split, as tensors the task gathers from.

    Rows are the table's (sorted by series, then date); a window is named by the row of its first
    day. Everything the encoding learns -- the one-hot levels, the numeric columns' means and
    standard deviations, the location and scale of the log demand level -- comes from the training
    part's rows alone.

    Attributes:
        demand: ``(N,)`` float64 realised demand.
        features: ``(N, F)`` float32 encoded features (one-hot, then standardised numeric columns).
        feature_names: ``F`` names (``month=JAN``, ``temperature``).
        weekday: ``(N,)`` int64 day of the week of the date (Monday 0).
        series_index: ``(N,)`` int64 index into ``series_names``.
        position: ``(N,)`` int64 day number within its series (0 = its first row).
        lookback_mean: ``(N,)`` float64 mean demand of the ``lookback`` rows before the row in its series
            (NaN where the series has fewer before it).
        part: ``(N,)`` int64 the part the row's day belongs to (``PARTS`` index; -1: after the test
            period of a rolled-back time split, in no part).
        validation_from, test_from, test_until: the time split's dates, the last one exclusive (``None``
            in the series split).
        origin: the time split's rolling origin (0: the plain split).
    """

    def __init__(
        self,
        table: DemandTable,
        split: str = "series",
        lookback: int = 28,
        validation_share: float = 0.15,
        test_share: float = 0.15,
        split_seed: int = 0,
        origin: int = 0,
    ):
        if split not in SPLITS:
            raise OMGPTError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        check_origin(origin, split)
        self.table, self.split, self.lookback, self.origin = table, split, lookback, int(origin)
        names, self.series_index = np.unique(table.series, return_inverse=True)
        self.series_names = tuple(names)
        starts = np.r_[0, np.flatnonzero(table.series[1:] != table.series[:-1]) + 1]
        self.series_rows = np.diff(np.r_[starts, len(table.series)])  # rows per series, in series order
        self.position = np.arange(len(table.series)) - np.repeat(starts, self.series_rows)
        self.demand = table.demand
        self.weekday = ((table.dates.astype("int64") + 3) % WEEKDAYS).astype(np.int64)  # 1970-01-01 was a Thursday
        self.lookback_mean = self._lookback_mean()
        self.validation_from = self.test_from = self.test_until = None
        self.part = (
            self._time_parts(validation_share, test_share)
            if split == "time"
            else self._series_parts(validation_share, test_share, split_seed)
        )
        train = self.part == 0
        self.features, self.feature_names = self._encode(train)
        scales = self.lookback_mean[train & (self.lookback_mean > 0)]
        logs = np.log(scales) if len(scales) else np.zeros(1)
        self.log_scale_loc, self.log_scale_std = float(logs.mean()), float(logs.std()) or 1.0

    def _lookback_mean(self) -> np.ndarray:
        """Mean demand of the ``lookback`` rows before each row within its series (NaN before that),
        series by series: no running sum crosses from one series into the next."""
        import pandas as pd

        demand = pd.Series(self.demand)
        return (
            demand.groupby(self.series_index)
            .transform(lambda s: s.shift(1).rolling(self.lookback).mean())
            .to_numpy(dtype=float, copy=True)
        )

    def _series_parts(self, validation_share: float, test_share: float, seed: int) -> np.ndarray:
        groups = np.unique(self.table.groups)
        if len(groups) < 3:
            raise OMGPTError(
                f"{self.table.source}: the series split needs at least 3 groups of series (train, validation, test), "
                f"the table has {len(groups)}; use --option split=time"
            )
        order = np.random.default_rng(seed).permutation(len(groups))
        n_test, n_val = series_counts(len(groups), validation_share, test_share)
        part_of = np.zeros(len(groups), dtype=np.int64)
        part_of[order[:n_test]], part_of[order[n_test : n_test + n_val]] = 2, 1
        return part_of[np.searchsorted(groups, self.table.groups)]

    def _time_parts(self, validation_share: float, test_share: float) -> np.ndarray:
        dates = self.table.dates
        first, last = dates.min(), dates.max()
        span = (last - first).astype(int) + 1
        test_from = int(round((1 - test_share) * span))  # days after the first date
        back = self.origin * (span - test_from)  # whole test periods
        validation_from = int(round((1 - test_share - validation_share) * span)) - back
        if validation_from <= 0:
            raise OMGPTError(
                f"{self.table.source}: origin {self.origin} rolls the time split back {back} days, before the table's first "
                f"date ({first}): no training days are left; use a smaller --option origin or smaller shares"
            )
        day = np.timedelta64(1, "D")
        self.validation_from = first + validation_from * day
        self.test_from, self.test_until = first + (test_from - back) * day, last + (1 - back) * day
        part = np.where(dates >= self.test_from, 2, np.where(dates >= self.validation_from, 1, 0))
        return np.where(dates >= self.test_until, -1, part)

    def _encode(self, train: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
        from omgpt import checks

        width = sum(len(set(levels[train])) for levels in self.table.categorical.values()) + len(self.table.numeric)
        checks.memory(
            4 * len(self.demand) * width,
            f"{self.table.source}: the encoded features ({len(self.demand)} rows x {width} columns)",
        )
        columns, names = [], []
        for name, levels in self.table.categorical.items():
            for level in sorted(set(levels[train])):
                columns.append((levels == level).astype(np.float32))
                names.append(f"{name}={level}")
        for name, values in self.table.numeric.items():
            mean, std = values[train].mean(), values[train].std()
            columns.append(((values - mean) / (std if std > 0 else 1.0)).astype(np.float32))
            names.append(name)
        features = np.stack(columns, axis=1) if columns else np.zeros((len(self.demand), 0), np.float32)
        return features, tuple(names)

    def windows(self, part: str, horizon: int, stride: int = 1, need_level: bool = True) -> np.ndarray:
        """The first rows of the windows of ``part``: ``horizon`` consecutive days of one series whose
        every day is in the part, with ``lookback`` days before it in the series and positive demand
        among them (the level is unknown otherwise: a store before it opened), starting every
        ``stride`` days from the part's first possible start in each series."""
        p = PARTS.index(part)
        n = len(self.demand)
        in_part = np.r_[(self.part == p).astype(np.int64), 0]
        run = np.convolve(in_part, np.ones(horizon, dtype=np.int64), "full")[
            horizon - 1 : horizon - 1 + n
        ]  # days in part from each row
        rows_left = np.repeat(self.series_rows, self.series_rows) - self.position
        ok = (run == horizon) & (rows_left >= horizon) & (self.position >= self.lookback)
        ok &= (self.lookback_mean > 0) if need_level else True
        if not ok.any():
            return np.zeros(0, dtype=np.int64)
        first = ok & ~np.r_[False, ok[:-1]]  # the first start of each run of possible starts
        run_id = np.cumsum(first)
        run_start = np.flatnonzero(first)[np.maximum(run_id - 1, 0)]
        keep = ok & ((np.arange(n) - run_start) % stride == 0)
        return np.flatnonzero(keep)

    def no_window(self, part: str, horizon: int) -> str:
        """Why ``part`` has no window of ``horizon`` days (:meth:`windows` is empty), for the error."""
        where = f"{self.table.source}: the {part} part"
        if not (self.part == PARTS.index(part)).any():
            return f"{where} has no rows ({self.describe()}); use other shares"
        if len(self.windows(part, horizon, need_level=False)) == 0:
            return (
                f"{where} has no {horizon} consecutive days of one series after {self.lookback} look-back days "
                f"({self.describe()}); use a shorter --horizon, a shorter --option lookback or other shares"
            )
        return (
            f"{where}: every window of {horizon} days has {self.lookback} look-back days without demand, so no level "
            f"to measure it in (a series before it opened); the part's series sold nothing before its windows"
        )

    def check_lengths(self, horizon: int) -> None:
        """Every series must hold at least one window: ``lookback + horizon`` days."""
        need = self.lookback + horizon
        short = np.flatnonzero(self.series_rows < need)
        if len(short):
            s = short[0]
            raise OMGPTError(
                f"{self.table.source}: series {self.series_names[s]!r} has {self.series_rows[s]} days, fewer than lookback "
                f"({self.lookback}) + horizon ({horizon}) = {need}; drop it, or use a shorter --horizon or --option lookback"
            )

    def describe(self) -> str:
        """One line: the table and its split (for logs and reports)."""
        counts = [int((self.part == p).sum()) for p in range(3)]
        split = (
            f"time split at {self.validation_from} (validation) and {self.test_from} (test)"
            + (
                f", origin {self.origin}: test until {self.test_until}, {int((self.part < 0).sum())} later rows unused"
                if self.origin
                else ""
            )
            if self.split == "time"
            else f"series split by {len(np.unique(self.table.groups))} groups"
        )
        return (
            f"{self.table.source}: {len(self.series_names)} series, {len(self.demand)} rows, {len(self.feature_names)} encoded features; "
            f"{split}; rows train/validation/test {counts[0]}/{counts[1]}/{counts[2]}"
        )


def series_counts(groups: int, validation_share: float, test_share: float) -> tuple[int, int]:
    """The series split's numbers of test and validation groups among ``groups`` (at least one each,
    and one left to train on); the split's seed draws which."""
    n_test = min(groups - 2, max(1, round(test_share * groups)))
    return n_test, min(groups - 1 - n_test, max(1, round(validation_share * groups)))


def check_origin(origin, split: str) -> None:
    """``origin`` is a whole number of test periods >= 0, and rolls only the time split back."""
    if isinstance(origin, bool) or not isinstance(origin, (int, np.integer)) or origin < 0:
        raise OMGPTError(f"origin must be an integer >= 0 (test periods to roll the time split back), got {origin!r}")
    if origin and split != "time":
        raise OMGPTError(
            f"origin {origin} rolls the time split back; split={split} has no cut by date (use --option split=time, "
            "or split_seed to redraw the held-out series)"
        )


def demand_data(
    source: dict,
    split: str,
    lookback: int,
    validation_share: float,
    test_share: float,
    split_seed: int,
    origin: int = 0,
) -> DemandData:
    """:class:`DemandData` of the table :func:`load_table` ``(**source)`` reads, cached: a run builds
    its task many times (model, data, validation, every policy) and each must see the same encoding."""
    check_origin(origin, split)  # before the table is read
    return _encoded(load_table(**source), split, lookback, validation_share, test_share, split_seed, int(origin))


@functools.lru_cache(maxsize=8)
def _encoded(
    table: DemandTable,
    split: str,
    lookback: int,
    validation_share: float,
    test_share: float,
    split_seed: int,
    origin: int = 0,
) -> DemandData:
    return DemandData(table, split, lookback, validation_share, test_share, split_seed, origin)


def masked_quantile(values: Tensor, q: Tensor, mask: Tensor | None = None) -> Tensor:
    """The ``q``-quantile of each row's values ``(B, n)`` (only where ``mask (B, n)`` is true), ``q (B,)``:
    the smallest value ``v`` with at least a share ``q`` of the row's values ``<= v`` (the inverted
    empirical CDF) -- exactly a minimiser of the row's summed pinball loss at ``q``, i.e. the order
    SAA places. A row without values gives NaN."""
    if values.shape[-1] == 0:
        return values.new_full((values.shape[0],), math.nan)
    if mask is not None:
        values = torch.where(mask, values, torch.full_like(values, math.inf))
    ordered = values.sort(dim=-1).values
    count = values.shape[-1] if mask is None else mask.sum(-1)
    count = torch.as_tensor(count, device=values.device).expand(values.shape[0])
    k = (torch.ceil(q.to(ordered.dtype) * count) - 1).clamp(min=0).long().clamp(max=values.shape[-1] - 1)
    out = ordered.gather(-1, k[:, None])[:, 0]
    return torch.where(count > 0, out, torch.full_like(out, math.nan))
