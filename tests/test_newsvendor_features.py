"""The feature-based newsvendor methods on real demand (``omgpt/policies/newsvendor_features.py``):
weighted SAA against ``ddop``'s own estimators (its source files loaded without the package
``__init__``, which imports TensorFlow), the cost-fitted linear rule against the reference LP, the
policies on a small table, the time split's rolling origins, and the one-line errors."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from omgpt import demand_data as dd
from omgpt.errors import OMGPTError
from omgpt.evaluation import evaluate_policies
from omgpt.policies import make_policy
from omgpt.policies import newsvendor_features as nf
from omgpt.tasks import make_task
from tests.test_real_data import task_of, write_table

METHODS = ("wsaa-rf", "wsaa-knn", "wsaa-tree", "wsaa-kernel", "erm-linear", "dnn-newsvendor")


# --------------------------------------------------------------------------------------------------
# ddop's estimators, loaded from their source files.
@pytest.fixture(scope="module")
def ddop_weighted():
    """``ddop/newsvendor/_WeightedNewsvendor.py`` imported under a stand-in ``ddop.newsvendor`` package
    (the real ``__init__`` imports the deep-learning estimator, hence TensorFlow), with the two things
    scikit-learn has changed since ddop 0.7.6 patched in: ``BaseEstimator._validate_data`` (removed)
    and the criterion name ``"mse"`` (now ``"squared_error"``, passed explicitly below)."""
    ddop = pytest.importorskip("ddop")
    from sklearn.utils.validation import check_array

    root = Path(ddop.__file__).parent
    names = ("ddop.newsvendor", "ddop.metrics", "ddop.metrics._costs", "ddop.newsvendor._base")
    saved = {k: sys.modules.get(k) for k in (*names, "ddop.newsvendor._WeightedNewsvendor")}
    for package in ("newsvendor", "metrics"):  # their __init__s import TensorFlow (and each other)
        stub = types.ModuleType(f"ddop.{package}")
        stub.__path__ = [str(root / package)]
        sys.modules[f"ddop.{package}"] = stub
    try:
        module = importlib.import_module("ddop.newsvendor._WeightedNewsvendor")
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v

    def validate(self, X, y, multi_output=True):
        return check_array(X), np.asarray(y, dtype=float)

    module.BaseWeightedNewsvendor._validate_data = validate
    return module


def small_table(n: int = 80, d: int = 3, seed: int = 0):
    """Training rows sorted by demand (both sides fit on the same row order: a forest's bootstrap
    draws row indices) and test rows."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = np.exp(0.5 * x[:, 0] + 0.3 * rng.normal(size=n)) * 10
    xs, ys = nf.sorted_rows(x, y)
    return xs, ys, rng.normal(size=(25, d))


CU, CO = 3.0, 1.0  # q = 0.75
Q = CU / (CU + CO)


def test_weighted_saa_orders_equal_ddops(ddop_weighted):
    x, y, test = small_table()
    q = np.full(len(test), Q)
    cases = [
        (
            ddop_weighted.RandomForestWeightedNewsvendor(
                cu=CU,
                co=CO,
                criterion="squared_error",
                n_estimators=20,
                min_samples_leaf=4,
                max_features=0.5,
                random_state=0,
            ),
            nf.fit_forest(x, y, 20, 4, 0.5, random_state=0),
        ),
        (
            ddop_weighted.DecisionTreeWeightedNewsvendor(
                cu=CU, co=CO, criterion="squared_error", min_samples_leaf=5, random_state=0
            ),
            nf.fit_tree(x, y, 5, random_state=0),
        ),
        (ddop_weighted.KNeighborsWeightedNewsvendor(cu=CU, co=CO, n_neighbors=7), nf.NeighbourWeights(x, y, 7)),
        (ddop_weighted.GaussianWeightedNewsvendor(cu=CU, co=CO, kernel_bandwidth=0.8), nf.KernelWeights(x, y, 0.8)),
    ]
    for theirs, ours in cases:
        expected = theirs.fit(x, y).predict(test)[:, 0]
        np.testing.assert_allclose(ours.predict(test, q), expected, rtol=1e-12, err_msg=type(theirs).__name__)
        # and the weights themselves, where ddop exposes them per test row
        if hasattr(ours, "weights"):
            w = ours.weights(test).toarray()
            ref = np.stack([theirs._calc_weights(row) for row in test]).reshape(w.shape)
            np.testing.assert_allclose(w, ref, atol=1e-12, err_msg=type(theirs).__name__)


def test_the_kernel_weights_never_underflow_where_ddops_fall_back_to_mpmath(ddop_weighted):
    x, y, _ = small_table()
    far = x[:3] + 40.0  # every kernel value exp(-0.5 (d/h)^2) underflows to 0 in float64
    theirs = ddop_weighted.GaussianWeightedNewsvendor(cu=CU, co=CO, kernel_bandwidth=0.5).fit(x, y)
    ours = nf.KernelWeights(x, y, 0.5).predict(far, np.full(3, Q))
    np.testing.assert_allclose(ours, theirs.predict(far)[:, 0], rtol=1e-12)


def test_weighted_quantile_is_the_smallest_demand_reaching_q():
    y = np.array([1.0, 2.0, 3.0, 4.0])
    w = np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.0, 0.0, 0.5], [0.0, 0.0, 0.0, 2.0]])
    np.testing.assert_array_equal(nf.weighted_quantile(w, y, np.array([0.3, 0.5, 0.1])), [2.0, 1.0, 4.0])
    from scipy import sparse

    np.testing.assert_array_equal(
        nf.weighted_quantile(sparse.csr_matrix(w), y, np.array([0.3, 0.5, 0.1])), [2.0, 1.0, 4.0]
    )


def test_the_linear_rule_reaches_the_reference_lp_optimum():
    """ddop's LinearRegressionNewsvendor states the LP with PuLP (not installed); the same LP (Ban &
    Rudin's ERM, summed rather than averaged: the same minimiser) solved by cvxpy is the reference."""
    pytest.importorskip("cvxpy")
    from omgpt.lp import quantile_regression

    x, y, _ = small_table(n=120, d=4, seed=1)

    def cost(beta):
        r = y - beta[0] - x @ beta[1:]
        return np.maximum(Q * r, (Q - 1) * r).sum()

    for l1 in (0.0, 5.0):
        ours, ref = nf.fit_linear(x, y, Q, l1), quantile_regression(x, y, Q, l1)
        assert cost(ours) + l1 * np.abs(ours[1:]).sum() == pytest.approx(
            cost(ref) + l1 * np.abs(ref[1:]).sum(), rel=1e-7
        )


def test_the_network_lowers_the_pinball_loss_and_is_reproducible():
    x, y, _ = small_table(n=400, d=3, seed=2)
    y = y / 10  # level units, as the task's demands
    first, again = (nf.fit_network(x, y, Q, width=16, epochs=500) for _ in range(2))
    with torch.no_grad():
        pred = first(torch.as_tensor(x, dtype=torch.float32)).double().numpy()
        np.testing.assert_array_equal(pred, again(torch.as_tensor(x, dtype=torch.float32)).double().numpy())
    r0, r = y - np.quantile(y, Q), y - pred
    loss = lambda r: np.maximum(Q * r, (Q - 1) * r).mean()  # noqa: E731
    assert loss(r) < loss(r0)  # below the unconditional quantile: the features are used


# --------------------------------------------------------------------------------------------------
# The policies on a small table.
@pytest.fixture(scope="module")
def promo_table(tmp_path_factory):
    """Six shops whose demand doubles on promotion days: every feature-based method should see it."""
    path = tmp_path_factory.mktemp("features") / "t.csv"
    return write_table(path, shops=6, days=90, demand=lambda s, d, promo: (10 + 2 * s) * (1 + promo))


@pytest.mark.parametrize("method", METHODS)
def test_every_method_plays_a_window_and_beats_saa_on_promotions(promo_table, method):
    task = task_of(promo_table, part="test", critical_ratio=0.75, group="shop", test_share=0.34, validation_share=0.33)
    options = {"dnn-newsvendor": {"epochs": 400, "width": 16}, "wsaa-rf": {"n_estimators": 10, "min_samples_leaf": 5}}
    played = evaluate_policies(
        task, {"saa": {}, method: options.get(method, {})}, task.windows, task.horizon, 0, progress=False
    )
    saa, ours = (task.tuning_score(played[k])["mean"] for k in ("saa", method))
    assert np.isfinite(ours) and ours < saa, (method, ours, saa)


@pytest.mark.parametrize(
    "method, options, message",
    [
        ("wsaa-knn", {"k": 0}, "k must be"),
        ("wsaa-rf", {"n_estimators": 2.5}, "n_estimators"),
        ("wsaa-kernel", {"bandwidth": -1}, "bandwidth"),
        ("erm-linear", {"l1": -1}, "l1"),
        ("dnn-newsvendor", {"epochs": 0}, "epochs"),
        ("wsaa-tree", {"max_rows": 3}, "max_rows"),
    ],
)
def test_bad_constants_are_one_line(promo_table, method, options, message):
    task = task_of(promo_table, part="test", critical_ratio=0.75, group="shop", test_share=0.34, validation_share=0.33)
    with pytest.raises(OMGPTError, match=message) as e:
        make_policy(method, task, task.horizon, **options)
    assert "\n" not in str(e.value)


def test_a_ratio_range_and_too_many_neighbours_are_one_line(promo_table):
    task = task_of(
        promo_table, part="test", critical_ratio=[0.5, 0.9], group="shop", test_share=0.34, validation_share=0.33
    )
    with pytest.raises(OMGPTError, match="one critical ratio"):
        make_policy("wsaa-knn", task, task.horizon)
    task = task_of(promo_table, part="test", critical_ratio=0.75, group="shop", test_share=0.34, validation_share=0.33)
    with pytest.raises(OMGPTError, match="training days; use a smaller k"):
        evaluate_policies(task, {"wsaa-knn": {"k": 10**6}}, 2, task.horizon, 0, progress=False)


def test_a_fit_that_cannot_fit_in_memory_refuses_with_the_subsample_option(promo_table, monkeypatch):
    import omgpt.machine

    task = task_of(promo_table, part="test", critical_ratio=0.75, group="shop", test_share=0.34, validation_share=0.33)
    monkeypatch.setattr(omgpt.machine, "free_memory", lambda dev="cpu": 1000.0)
    with pytest.raises(OMGPTError, match=r"needs about .* GiB of memory.*max_rows=") as e:
        evaluate_policies(task, {"wsaa-kernel": {}}, 2, task.horizon, 0, progress=False)
    assert "\n" not in str(e.value)
    monkeypatch.undo()
    played = evaluate_policies(task, {"wsaa-kernel": {"max_rows": 50}}, 2, task.horizon, 0, progress=False)
    assert torch.isfinite(played["wsaa-kernel"].actions).all()


# --------------------------------------------------------------------------------------------------
# Rolling origins of the time split.
def test_rolling_origins_test_on_disjoint_earlier_periods_with_training_before(tmp_path):
    path = write_table(tmp_path / "t.csv", shops=3, days=200)
    seen = []
    for origin in range(3):
        data = task_of(path, split="time", part="test", origin=origin).data
        dates = data.table.dates
        test = dates[data.part == 2]
        assert dates[data.part == 0].max() < data.validation_from <= dates[data.part == 1].min()
        assert dates[data.part == 1].max() < data.test_from == test.min()
        assert test.max() < data.test_until
        assert (dates[data.part == -1] >= data.test_until).all()  # after the test period: in no part
        seen.append((test.min(), test.max()))
    assert seen[0][0] > seen[1][1] and seen[1][0] > seen[2][1]  # each origin's test period earlier, disjoint
    base = task_of(path, split="time", part="test").data
    assert (base.part >= 0).all() and base.test_until == base.table.dates.max() + np.timedelta64(1, "D")


@pytest.mark.parametrize(
    "options, message",
    [
        ({"split": "series", "origin": 1}, "rolls the time split back; split=series"),
        ({"split": "time", "origin": -1}, "origin must be an integer >= 0"),
        ({"split": "time", "origin": 50}, "no training days are left"),
    ],
)
def test_a_bad_origin_is_one_line(tmp_path, options, message):
    path = write_table(tmp_path / "t.csv", shops=3, days=200)
    with pytest.raises(OMGPTError, match=message) as e:
        task_of(path, part="test", **options)
    assert "\n" not in str(e.value)


def test_origin_zero_is_the_plain_time_split():
    plain = make_task("newsvendor-data", dataset="bakery", split="time", part="test")
    zero = make_task("newsvendor-data", dataset="bakery", split="time", part="test", origin=0)
    assert torch.equal(plain.starts, zero.starts) and plain.data.test_from == zero.data.test_from
    assert dd.check_origin(0, "series") is None


def test_rolling_origins_pool_into_one_cost_and_one_cluster_interval():
    from omgpt.commands.experiment.kinds.real_demand import pool_origins

    rng = np.random.default_rng(0)

    def cells(origin, weeks0):
        demand = rng.uniform(1, 5, size=(4, 14))
        return {
            "cost": {"omgpt": 0.1 * demand, "saa": 0.2 * demand, "gbm": 0.15 * demand},
            "demand": demand,
            "level": np.ones(4),
            "group": np.array(["a", "b", "a", "c"]),
            "block": weeks0 + np.arange(14)[None, :].repeat(4, 0) // 7,
            "origin": origin,
        }

    origins = [cells(1, 100), cells(2, 50), cells(3, 0)]
    pooled = pool_origins(origins, seed=6)
    total = sum(c["demand"].sum() for c in origins)
    assert pooled["origins"] == [1, 2, 3] and pooled["windows"] == 12
    assert pooled["costs"]["omgpt"]["scaled_cost"]["mean"] == pytest.approx(0.1)
    assert pooled["costs"]["gbm"]["scaled_cost"]["mean"] == pytest.approx(
        sum(c["cost"]["gbm"].sum() for c in origins) / total
    )
    ratio = pooled["costs"]["omgpt"]["ratio_to"]["gbm"]
    assert ratio["mean"] == pytest.approx(2 / 3) and ratio["ci90"] == pytest.approx([2 / 3, 2 / 3])  # paired draws


def test_a_tuned_variant_at_the_default_constants_plays_as_its_base(promo_table, tmp_path, monkeypatch):
    """The evaluation reuses the base's rollout where the tuned constants are the defaults
    (omgpt.policies.tuned.plays_as_base reads every tunable constant as an attribute)."""
    from omgpt.policies.tuned import plays_as_base

    task = task_of(promo_table, part="test", critical_ratio=0.75, group="shop", test_share=0.34, validation_share=0.33)
    for method in METHODS:
        cls = type(make_policy(method, task, task.horizon))
        tuned = type(f"{cls.__name__}Tuned", (cls,), {})
        policy = tuned(task)
        policy.constants = {k: getattr(policy, k) for k in cls.tunable}
        assert plays_as_base(policy), method
