"""Real demand (issue 27): the demand-table loader, its encoding and splits, the ``newsvendor-data``
task, learning without an oracle (``target: cost``), the data-driven benchmarks, and the one-line
errors -- on small tables the tests write."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from omgpt import demand_data as dd
from omgpt.commands.cli import cli_main
from omgpt.errors import OMGPTError
from omgpt.evaluation import evaluate_policies
from omgpt.module import OMGPTModule, check_target
from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.tasks import make_task
from omgpt.tasks.newsvendor_data import LEADING, LOOKBACK_QUANTILE, LOOKBACK_WEEKDAY, Q, WEEKDAY, window_demands

ROOT = Path(__file__).resolve().parents[1]
START = pd.Timestamp("2021-01-04")  # a Monday


def write_table(path: Path, shops: int = 6, days: int = 80, demand=None, extra: dict | None = None) -> Path:
    """A long demand table: ``shops`` series of ``days`` consecutive days. Demand is a known function
    of the shop, the weekday and a promotion flag unless ``demand(shop, day, promo)`` is given;
    ``weather`` is a text column (a category), ``temp`` a numeric one."""
    rows = []
    for s in range(shops):
        for d in range(days):
            promo = int((d // 5 + s) % 3 == 0)
            value = demand(s, d, promo) if demand else (10 + 5 * s) * (1 + 0.1 * (d % 7)) + 20 * promo
            rows.append(
                {
                    "shop": f"s{s}",
                    "day": (START + pd.Timedelta(days=d)).date().isoformat(),
                    "sales": value,
                    "promo": promo,
                    "weather": ["sun", "rain"][d % 2],
                    "temp": float(d % 11),
                }
            )
    frame = pd.DataFrame(rows)
    for column, values in (extra or {}).items():
        frame[column] = values
    frame.to_csv(path, index=False)
    return path


def task_of(path: Path, **options):
    base = dict(csv=str(path), series="shop", date="day", demand="sales", horizon=14, lookback=7)
    return make_task("newsvendor-data", **{**base, **options})


@pytest.fixture
def table(tmp_path) -> Path:
    return write_table(tmp_path / "sales.csv")


# --------------------------------------------------------------------------------------------------
# Loading and encoding.
def test_the_table_is_read_sorted_and_encoded_with_training_statistics(table):
    task = task_of(table)
    data = task.data
    assert data.series_names == tuple(f"s{s}" for s in range(6)) and len(data.demand) == 6 * 80
    assert data.feature_names == ("weather=rain", "weather=sun", "promo", "temp")
    shops = task_of(table, categorical="shop,promo").data
    train_shops = sorted(set(shops.table.series[shops.part == 0]))
    assert shops.feature_names[:6] == (*(f"shop={s}" for s in train_shops), "promo=0", "promo=1"), (
        "a series column named categorical, on training levels"
    )
    assert len(train_shops) == 4 and (shops.features[shops.part == 2, :4] == 0).all(), (
        "a held-out shop's own level is unseen: zeros"
    )
    raw = pd.read_csv(table).sort_values(["shop", "day"])
    train = data.part == 0
    for j, column in ((2, "promo"), (3, "temp")):
        values = raw[column].to_numpy(float)
        expected = (values - values[train].mean()) / values[train].std()
        np.testing.assert_allclose(data.features[:, j], expected, rtol=1e-5, atol=1e-5)
    assert set(np.unique(data.features[:, :2].sum(1))) == {1.0}  # one level each
    # the weekday comes from the date: START is a Monday
    assert data.weekday[0] == 0 and data.weekday[6] == 6
    # a series split holds out whole groups: 6 shops -> 4 / 1 / 1
    assert [len(set(data.table.series[data.part == p])) for p in range(3)] == [4, 1, 1]


def test_a_level_first_seen_outside_training_encodes_as_zeros(tmp_path):
    days = 80
    weather = ["sun"] * (6 * days)
    table = write_table(tmp_path / "t.csv", extra={"weather": weather})
    frame = pd.read_csv(table)
    task = task_of(table)
    test_shop = task.data.series_names[int(task.data.series_index[task.data.part == 2][0])]
    frame.loc[frame.shop == test_shop, "weather"] = "snow"
    frame.to_csv(tmp_path / "u.csv", index=False)
    data = task_of(tmp_path / "u.csv").data
    assert data.feature_names[:1] == ("weather=sun",)
    assert (data.features[data.part == 2, 0] == 0).all() and (data.features[data.part == 0, 0] == 1).all()


def test_series_split_windows_are_disjoint_and_stay_in_their_part(table):
    seen = {}
    for part in dd.PARTS:
        task = task_of(table, part=part)
        rows = task.starts.numpy()[:, None] + np.arange(-task.lookback, task.horizon)
        assert (task.data.series_index[rows] == task.data.series_index[rows[:, :1]]).all(), (
            "a window stays in one series"
        )
        days = rows[:, task.lookback :]
        assert (task.data.part[days] == dd.PARTS.index(part)).all()
        seen[part] = set(days.ravel())
        if part != "train":  # disjoint windows: every day at most once
            assert len(seen[part]) == days.size
    assert not seen["test"] & (seen["train"] | seen["validation"]) and not seen["validation"] & seen["train"]


def test_time_split_trains_before_the_cut_and_tests_after(table):
    tasks = {part: task_of(table, split="time", part=part, horizon=10) for part in dd.PARTS}
    data = tasks["train"].data
    v, t = data.validation_from, data.test_from
    assert v < t
    dates = data.table.dates
    span = {
        p: (dates[task.starts.numpy()].min(), dates[task.starts.numpy() + task.horizon - 1].max())
        for p, task in tasks.items()
    }
    assert span["train"][1] < v <= span["validation"][0] and span["validation"][1] < t <= span["test"][0]
    # the statistics are the training rows': standardised features have mean 0 there
    assert abs(data.features[data.part == 0, 3].mean()) < 1e-5
    assert abs(data.features[:, 3].mean()) > 1e-3
    with pytest.raises(
        OMGPTError, match="the validation part has no 14 consecutive days of one series after 7 look-back days"
    ):
        task_of(table, split="time", part="validation")


def test_no_demand_of_the_window_or_after_enters_the_context(table, tmp_path):
    """Change every demand of a test series from its window's first day on: its contexts stay the same
    (they use the look-back and the training statistics only), its observations change."""
    task = task_of(table, part="test")
    start = int(task.starts[0])
    frame = pd.read_csv(table).sort_values(["shop", "day"]).reset_index(drop=True)
    series = task.data.series_names[int(task.data.series_index[start])]
    first = task.data.table.dates[start]
    later = (frame.shop == series) & (pd.to_datetime(frame.day).to_numpy().astype("datetime64[D]") >= first)
    frame.loc[later, "sales"] = frame.loc[later, "sales"] * 3 + 7
    frame.to_csv(tmp_path / "changed.csv", index=False)
    changed = task_of(tmp_path / "changed.csv", part="test")
    assert int(changed.starts[0]) == start
    g = torch.Generator().manual_seed(0)
    envs = {k: v[:1] for k, v in task.sample_envs(task.windows, g).items()}
    envs = {
        **envs,
        "row": torch.tensor([start]),
        "series": task.data.series_index[[start]],
        "level": torch.tensor([float(task.data.lookback_mean[start])]),
    }
    for t in range(task.horizon):
        torch.testing.assert_close(task.sample_context(envs, t, g), changed.sample_context(envs, t, g))
    assert not torch.equal(window_demands(task, envs, task.horizon), window_demands(changed, envs, task.horizon))


def test_the_context_and_the_units_by_hand(table):
    task = task_of(table, part="test", critical_ratio=0.75)
    row = int(task.starts[0])
    envs = {
        "row": torch.tensor([row]),
        "series": torch.tensor([0]),
        "level": torch.tensor([float(task.data.lookback_mean[row])]),
        "q": torch.tensor([0.75]),
    }
    past = task.data.demand[row - 7 : row]
    level = past.mean()
    assert envs["level"].item() == pytest.approx(level)
    x = task.sample_context(envs, 3, torch.Generator())[0]
    assert x[Q] == pytest.approx(0.75)
    ranked = np.sort(past / level)
    assert x[LOOKBACK_QUANTILE] == pytest.approx(ranked[math.ceil(0.75 * 7) - 1], rel=1e-5)  # inverted CDF
    weekday = task.data.weekday[row + 3]
    same = [d / level for d, w in zip(past, task.data.weekday[row - 7 : row]) if w == weekday]
    assert len(same) == 1 and x[LOOKBACK_WEEKDAY] == pytest.approx(same[0], rel=1e-5)
    assert x[WEEKDAY : WEEKDAY + 7].argmax() == weekday and x.shape[0] == LEADING + 4
    # observation, hindsight a*, reward and regret: all in units of the level
    d = task.data.demand[row + 3] / level
    a = torch.tensor([[d + 0.5]])
    assert task.observe(envs, x[None], a, 3, None).item() == pytest.approx(d, rel=1e-6)
    assert task.optimal_action(envs, x[None], 3).item() == pytest.approx(d, rel=1e-6)
    assert task.expected_reward(envs, x[None], a, 3).item() == pytest.approx(-0.25 * 0.5, rel=1e-5)
    assert task.regret(envs, x[None], a, 3).item() == pytest.approx(0.25 * 0.5, rel=1e-5), "regret = the cost paid"
    short = torch.tensor([[d - 0.5]])
    assert task.regret(envs, x[None], short, 3).item() == pytest.approx(0.75 * 0.5, rel=1e-5)


def test_windows_are_drawn_without_replacement_and_the_ratio_range(table):
    task = task_of(table, part="test", critical_ratio=[0.5, 0.9])
    envs = task.sample_envs(task.windows, torch.Generator().manual_seed(1))
    assert sorted(envs["row"].tolist()) == sorted(task.starts.tolist()), "--runs = the window count plays each once"
    many = task.sample_envs(500, torch.Generator().manual_seed(1))
    assert 0.5 <= many["q"].min() and many["q"].max() <= 0.9 and many["q"].std() > 0.05
    # the validation windows validate a fit and tune the benchmarks, whichever part a task was built on
    assert task.validation_task().part == "validation" and task_of(table).validation_task().part == "validation"
    validation = task_of(table, part="validation")
    assert validation.validation_task() is validation


# --------------------------------------------------------------------------------------------------
# Learning without an oracle.
def test_cost_loss_value_and_gradient_by_hand(table):
    task = task_of(table)
    q = torch.tensor([[0.75, 0.75], [0.5, 0.5]])  # (B, T)
    contexts = torch.zeros(2, 2, task.context_dim)
    contexts[..., Q] = q
    obs = torch.tensor([[[1.0], [2.0]], [[1.0], [0.5]]])
    pred = torch.tensor([[[1.5], [1.0]], [[1.0], [0.0]]], requires_grad=True)
    scale = torch.tensor([0.8])
    loss = task.cost_loss(pred, obs, contexts, scale)
    # over 0.5 at q .75 -> .25*.5; short 1 at q .75 -> .75; exact -> 0; short .5 at q .5 -> .25
    assert loss.item() == pytest.approx((0.125 + 0.75 + 0.0 + 0.25) / 4 / 0.8)
    loss.backward()
    expected = torch.tensor([[[0.25], [-0.75]], [[0.5 - 1 + 0.5], [-0.5]]]) / 4 / 0.8
    expected[1, 0, 0] = 0.5 / 4 / 0.8  # a tie (a = o) takes the overage side's slope 1 - q
    torch.testing.assert_close(pred.grad, expected)


def test_the_module_trains_on_the_cost_where_asked_and_refuses_where_it_cannot(table):
    module = OMGPTModule(task="newsvendor", horizon=6, network=dict(n_layer=1, n_head=1, n_embd=8), target="cost")
    assert (
        module.target == "cost"
        and OMGPTModule(
            task="newsvendor",
            horizon=6,
            network=dict(n_layer=1, n_head=1, n_embd=8),
        ).target
        == "optimal_action"
    )
    history = rollout(
        module.task,
        module.task.sample_envs(3, torch.Generator().manual_seed(0)),
        make_policy("random", module.task),
        6,
        torch.Generator().manual_seed(1),
    )
    features, actions = history.tokens()
    batch = {
        "features": features,
        "actions": actions,
        "targets": history.optimal_actions,
        "observations": history.observations,
    }
    pred = history.optimal_actions + 0.3
    h = history.contexts[..., 0]  # the synthetic newsvendor's holding cost
    over = (pred - history.observations)[..., 0]
    by_hand = torch.where(over > 0, h * over, -over).mean() / module.model.action_scale.mean()
    torch.testing.assert_close(module.target_loss(pred, batch), by_hand)
    with pytest.raises(OMGPTError, match="no outcome cost"):
        check_target(make_task("newsvendor-censored"), "cost")
    with pytest.raises(OMGPTError, match="no optimal action to imitate"):
        check_target(task_of(table), "optimal_action")
    assert check_target(task_of(table), None) == "cost"


@pytest.mark.slow
def test_a_tiny_fit_on_a_table_then_evaluate_on_its_test_windows(table, tmp_path):
    args = [
        "fit",
        "--config",
        str(ROOT / "configs/pretrained/bakery.yaml"),
        "--model.task_options",
        f'{{csv: "{table}", series: shop, date: day, demand: sales, lookback: 7, critical_ratio: [0.5, 0.9]}}',
        "--model.horizon",
        "14",
        "--model.network.n_layer",
        "1",
        "--model.network.n_head",
        "1",
        "--model.network.n_embd",
        "8",
        "--data.batch_size",
        "4",
        "--data.batches_per_epoch",
        "2",
        "--data.val_runs",
        "4",
        "--data.val_batch_size",
        "4",
        "--trainer.max_epochs",
        "1",
        "--trainer.default_root_dir",
        str(tmp_path),
        "--trainer.logger.init_args.save_dir",
        str(tmp_path / "runs"),
        "--trainer.enable_progress_bar",
        "false",
    ]
    assert cli_main(args) == 0
    ckpt = next((tmp_path / "runs").rglob("last.ckpt"))
    out = tmp_path / "eval"
    assert (
        cli_main(
            [
                "evaluate",
                "--ckpt",
                str(ckpt),
                "--option",
                "part=test",
                "--option",
                "critical_ratio=0.9",
                "--policies",
                "omgpt,saa",
                "--runs",
                "2",
                "--seed",
                "7",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    # the real-demand metric beside the regret table: the per-day cost in level units is the regret per
    # day (the clairvoyant order costs nothing), and OMGPT's ratio to SAA is paired on the same draws
    block = summary["real_demand"]
    assert block["reference"] == "saa" and block["clusters"] == "groups"
    for name in ("omgpt", "saa"):
        cost = block["costs"][name]
        per_day = summary["policies"][name]["final_regret"]["mean"] / summary["horizon"]
        assert cost["cost_per_day"]["mean"] == pytest.approx(per_day, rel=1e-5)
        low, high = cost["scaled_cost"]["ci90"]
        mean = cost["scaled_cost"]["mean"]
        assert (
            low - 1e-12 * abs(mean) <= mean <= high + 1e-12 * abs(mean)
        )  # (a collapsed interval: its mean's rounding)
    assert block["costs"]["saa"]["ratio_to_saa"] is None
    ours = block["costs"]["omgpt"]
    ratio = ours["scaled_cost"]["mean"] / block["costs"]["saa"]["scaled_cost"]["mean"]
    assert ours["ratio_to_saa"]["mean"] == pytest.approx(ratio) == ours["ratio_to"]["saa"]["mean"]


@pytest.mark.slow
def test_the_synthetic_cost_config_trains_on_the_cost(tmp_path):
    """configs/real/newsvendor-cost.yaml (the cost-vs-a* comparison's cost side) runs, and trains on the cost."""
    args = [
        "fit",
        "--config",
        str(ROOT / "configs/real/newsvendor-cost.yaml"),
        "--model.horizon",
        "8",
        "--model.network.n_layer",
        "1",
        "--model.network.n_head",
        "1",
        "--model.network.n_embd",
        "8",
        "--data.batch_size",
        "4",
        "--data.batches_per_epoch",
        "2",
        "--data.val_runs",
        "4",
        "--data.val_batch_size",
        "4",
        "--trainer.max_epochs",
        "1",
        "--trainer.logger.init_args.save_dir",
        str(tmp_path / "runs"),
        "--trainer.enable_progress_bar",
        "false",
    ]
    assert cli_main(args) == 0
    ckpt = torch.load(next((tmp_path / "runs").rglob("last.ckpt")), map_location="cpu", weights_only=True)
    assert ckpt["hyper_parameters"]["target"] == "cost"
    twin = (ROOT / "configs/real/newsvendor-optimal-action.yaml").read_text().splitlines()
    differ = [
        (a, b)
        for a, b in zip((ROOT / "configs/real/newsvendor-cost.yaml").read_text().splitlines(), twin)
        if a != b and not a.startswith("#")
    ]
    assert differ == [("  target: cost", "  target: optimal_action")], "the twins differ in model.target alone"


# --------------------------------------------------------------------------------------------------
# The benchmarks, on a hand-checked series.
def small_series_task(tmp_path, demand, **options):
    """Three one-shop groups of 30 days; the test shop's demand is ``demand`` (a list) and the others
    follow the same pattern scaled, windows of 5 days after a 7-day look-back, one test window."""
    path = write_table(tmp_path / "hand.csv", shops=3, days=len(demand), demand=lambda s, d, p: demand[d] * (1 + s))
    return task_of(path, **{"horizon": 5, "lookback": 7, "part": "test", "stride": 100, **options})


def play(task, name, **options):
    envs = task.sample_envs(task.windows, torch.Generator().manual_seed(0))
    return rollout(
        task, envs, make_policy(name, task, task.horizon, **options), task.horizon, torch.Generator().manual_seed(0)
    )


def test_saa_and_weekday_saa_by_hand(tmp_path):
    demand = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12] + [5] * 18
    task = small_series_task(tmp_path, demand, critical_ratio=0.75)
    assert task.windows == 1
    start = int(task.starts[0])
    pos = int(task.data.position[start])
    level = float(np.mean(np.array(demand[pos - 7 : pos])) * (1 + int(task.data.series_index[start])))
    seen = list(np.array(demand[pos - 7 : pos]) * (1 + int(task.data.series_index[start])) / level)
    history = play(task, "saa")
    for t in range(5):
        expected = np.sort(seen)[math.ceil(0.75 * len(seen)) - 1]
        assert history.actions[0, t, 0].item() == pytest.approx(expected, rel=1e-5)
        seen.append(history.observations[0, t, 0].item())
    # the last 3 days only
    three = play(task, "saa", days=3)
    obs = history.observations[0, :, 0].tolist()
    pool = [*np.array(demand[pos - 7 : pos]) / np.mean(demand[pos - 7 : pos]), *obs]
    for t in range(5):
        assert three.actions[0, t, 0].item() == pytest.approx(
            np.sort(pool[7 + t - 3 : 7 + t])[math.ceil(0.75 * 3) - 1], rel=1e-5
        )
    # weekday SAA: with a 7-day look-back and 5 window days, each day's sample is the day a week before
    weekday = play(task, "saa-weekday")
    for t in range(5):
        assert weekday.actions[0, t, 0].item() == pytest.approx(pool[t], rel=1e-5)


def test_qr_fai_and_the_hindsight_rule_by_hand(tmp_path):
    demand = [4.0] * 7 + [2.0, 6.0, 2.0, 6.0, 2.0] + [4.0] * 18
    task = small_series_task(tmp_path, demand, critical_ratio=0.75)
    x0 = play(task, "oracle").contexts[0]
    lookback_order = x0[0, LOOKBACK_QUANTILE].item()
    assert lookback_order == pytest.approx(1.0)  # a flat look-back: every quantile is the level
    qr = play(task, "qr")  # fewer than 7 window days all along: the look-back quantile
    assert torch.allclose(qr.actions[0, :, 0], x0[:, LOOKBACK_QUANTILE])
    fai = play(task, "fai-data", step_scale=0.001)
    # day 0: the look-back quantile 1; demand 0.5 leaves 0.5 over at q = .75 -> w_1 = -0.001·0.25·z_0
    z0 = torch.cat([torch.ones(1), x0[0, :Q], x0[0, Q + 1 :]])
    z1 = torch.cat([torch.ones(1), x0[1, :Q], x0[1, Q + 1 :]])
    assert fai.actions[0, 0, 0].item() == pytest.approx(1.0)
    assert fai.observations[0, 0, 0].item() == pytest.approx(0.5)  # demand 2 on a level of 4: leftover
    expected = x0[1, LOOKBACK_QUANTILE] + (-0.001 * 0.25 * z0 * z1).sum()
    assert fai.actions[0, 1, 0].item() == pytest.approx(expected.item(), rel=1e-5)
    # the hindsight rule fits the window itself: a rule can follow the demand when a feature does
    hindsight = play(task, "hindsight-linear")
    assert hindsight.regrets[0].sum() <= play(task, "saa").regrets[0].sum() + 1e-6


def test_qr_batched_solver_reaches_the_lp_optimum_of_each_window_and_day(table):
    """``qr`` solves every window's regression of a day at once (interior point, the default) and gets
    the optimal value of one HiGHS LP per window and day: the penalised pinball loss at its
    coefficients is the LP's on every window at several days. (The orders may differ where the optimum
    is not unique: this table's deterministic demand has ties.)"""
    from omgpt.policies.newsvendor import batched_quantile_regression, quantile_regression
    from omgpt.policies.newsvendor_data import regressors

    task = task_of(table, part="train", horizon=30, critical_ratio=0.75)
    played = play(task, "qr", l1=1.0)
    assert torch.isfinite(played.actions).all()
    with pytest.raises(OMGPTError, match="unknown solver"):
        make_policy("qr", task, task.horizon, solver="simplex")
    for t in (8, 20, 29):
        past, demand = regressors(played.contexts[:, :t]).double(), played.observations[:, :t, 0].double()
        beta = batched_quantile_regression(past, demand, torch.full((past.shape[0],), 0.75), 1.0).numpy()
        for i in range(0, past.shape[0], 7):
            design = np.hstack([np.ones((t, 1)), past[i].numpy()])

            def objective(b):
                r = demand[i].numpy() - design @ b
                return np.maximum(0.75 * r, -0.25 * r).sum() + 1.0 * np.abs(b[1:]).sum()

            exact = quantile_regression(past[i].numpy(), demand[i].numpy(), 0.75, 1.0)
            assert objective(beta[i]) == pytest.approx(objective(exact), rel=1e-6)  # HiGHS stops within ~1e-7


def test_the_global_model_learns_a_promotion_from_the_training_series(tmp_path):
    table = write_table(tmp_path / "promo.csv", shops=8, days=120, demand=lambda s, d, p: 10 + 30 * p + (d * 7 + s) % 3)
    task = task_of(table, part="test", horizon=20, lookback=14, critical_ratio=0.5)
    played = evaluate_policies(task, {"gbm": {}, "saa": {}, "saa-weekday": {}}, task.windows, 20, progress=False)
    cost = {name: h.regrets.sum(1).mean().item() for name, h in played.items()}
    assert cost["gbm"] < 0.5 * min(cost["saa"], cost["saa-weekday"]), cost


# --------------------------------------------------------------------------------------------------
# User errors: one line, exit code 2.
def broken(tmp_path, change) -> Path:
    table = write_table(tmp_path / "bad.csv")
    frame = pd.read_csv(table)
    change(frame)
    frame.to_csv(table, index=False)
    return table


def _nan_demand(f):
    f.loc[5, "sales"] = np.nan


def _negative_demand(f):
    f.loc[7, "sales"] = -3


def _text_in_numbers(f):
    f["temp"] = f["temp"].astype(object)
    f.loc[3, "temp"] = "warm"


def _short_series(f):
    f.drop(f[(f.shop == "s2") & (pd.to_datetime(f.day) > START + pd.Timedelta(days=10))].index, inplace=True)


ERRORS = [
    (lambda f: f.rename(columns={"sales": "units"}, inplace=True), "no demand column 'sales'"),
    (_text_in_numbers, "feature column 'temp' is numeric but holds the non-numeric value 'warm'"),
    (_nan_demand, "demand column 'sales' has 1 missing values"),
    (_negative_demand, "demand column 'sales' has 1 negative values"),
    (_short_series, "series 's2' has 11 days, fewer than lookback"),
]


@pytest.mark.parametrize(
    "change, message",
    ERRORS,
    ids=["missing-column", "non-numeric-feature", "nan-demand", "negative-demand", "short-series"],
)
def test_a_bad_table_is_one_line(tmp_path, change, message):
    with pytest.raises(OMGPTError, match=message):
        task_of(broken(tmp_path, change))


@pytest.mark.parametrize("change, message", ERRORS[:1] + ERRORS[4:], ids=["missing-column", "short-series"])
def test_a_bad_table_exits_2_through_evaluate(tmp_path, capsys, change, message):
    table = broken(tmp_path, change)
    code = cli_main(
        [
            "evaluate",
            "--task",
            "newsvendor-data",
            "--option",
            f"csv={table}",
            "--option",
            "series=shop",
            "--option",
            "date=day",
            "--option",
            "demand=sales",
            "--option",
            "lookback=7",
            "--option",
            "part=test",
            "--policies",
            "saa",
            "--runs",
            "2",
            "--horizon",
            "14",
            "--seed",
            "7",
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err


def test_unknown_dataset_and_other_option_errors(table, capsys, tmp_path):
    code = cli_main(
        [
            "evaluate",
            "--task",
            "newsvendor-data",
            "--option",
            "dataset=bakeries",
            "--option",
            "part=test",
            "--policies",
            "saa",
            "--runs",
            "2",
            "--seed",
            "7",
            "--out",
            str(tmp_path / "o"),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "unknown dataset 'bakeries'; available: bakery, yaz" in err
    for options, message in (
        (dict(part="holdout"), "part must be one of train, validation, test"),
        (dict(split="store"), "split must be one of series, time"),
        (dict(critical_ratio=1.5), "critical_ratio must be a number in"),
        (dict(critical_ratio=[0.9, 0.5]), "critical_ratio must be a number in"),
        (dict(csv=str(table) + ".missing"), "no such file"),
        (dict(categorical="colour"), "no categorical column 'colour'"),
        (dict(pool_size=4), "pool_size does not apply"),
        (dict(stride=0), "stride must be an integer >= 1"),
        (dict(lookback=3), "lookback must be an integer >= 7"),
    ):
        with pytest.raises(OMGPTError, match=message):
            task_of(table, **options)
    with pytest.raises(OMGPTError, match="not both"):
        task_of(table, dataset="bakery")


def test_a_text_column_with_too_many_values_is_refused(tmp_path):
    table = write_table(tmp_path / "ids.csv", extra={"receipt": [f"r{i}" for i in range(6 * 80)]})
    with pytest.raises(OMGPTError, match="'receipt' has 480 distinct text values"):
        task_of(table)


# --------------------------------------------------------------------------------------------------
# ddop's tables (installed by setup.sh).
@pytest.mark.slow
def test_the_ddop_tables_load_as_documented():
    pytest.importorskip("ddop")
    bakery = make_task("newsvendor-data", dataset="bakery", part="test")
    data = bakery.data
    assert len(data.series_names) == 105 and len(data.demand) == 127_575 and (data.series_rows == 1215).all()
    assert str(data.table.dates.min()) == "2016-01-02" and str(data.table.dates.max()) == "2019-04-30"
    assert "weekday=FRI" not in data.feature_names and "year" not in data.feature_names and "rain" in data.feature_names
    assert {"product=101", "product=109", "product=110"} <= set(
        data.feature_names
    ) and "store=2" not in data.feature_names
    stores = {p: {s.split("/")[0] for s in data.table.series[data.part == p]} for p in range(3)}
    assert [len(stores[p]) for p in range(3)] == [25, 5, 5] and not stores[2] & (stores[0] | stores[1])
    yaz = make_task("newsvendor-data", dataset="yaz", split="time", part="test")
    assert set(yaz.data.series_names) == {"calamari", "fish", "shrimp", "chicken", "koefte", "lamb", "steak"}
    assert yaz.windows == 7


@pytest.mark.slow
def test_the_own_csv_notebook_runs(tmp_path, monkeypatch):
    """analysis/notebooks/own_demand_csv.ipynb end to end on the table it writes: the parts, tuning on
    validation windows (into its own folder, never configs/tuned), a short fit on the training windows,
    the cost table on the test windows and the held-out series figure."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "analysis/notebooks/own_demand_csv.ipynb", as_version=4)
    monkeypatch.setenv("OMGPT_OWN_CSV_STEPS", "20")
    monkeypatch.setenv("OMGPT_OWN_CSV_OUT", str(tmp_path))
    shipped = sorted((ROOT / "configs" / "tuned").iterdir())
    nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    costs = {
        line.split(":")[0].strip(): float(line.split()[4]) for line in printed.splitlines() if "cost per day" in line
    }
    assert {"omgpt", "saa", "saa-tuned", "gbm-tuned", "hindsight-linear"} <= set(costs)
    assert all(0 < c < 10 for c in costs.values()), costs
    assert costs["hindsight-linear"] < costs["saa"], "the yardstick sees the window itself"
    assert (tmp_path / "held_out_series.png").is_file() and list((tmp_path / "tuned").glob("newsvendor-data-*.json"))
    assert sorted((ROOT / "configs" / "tuned").iterdir()) == shipped


def test_a_csv_setting_is_named_by_its_content_not_its_folders(tmp_path):
    """Tuned constants of a user's table live in ``configs/tuned/<key>.json``: the key must hold no
    folders (it once held the CSV's whole path), and one table has one key wherever it lies; the part
    (train / validation / test) is not part of the setting (benchmarks are tuned on validation windows)."""
    from omgpt.tuning import setting_key

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for folder, text in (("a", "x,date,demand\n"), ("b", "x,date,demand\n")):
        (tmp_path / folder / "t.csv").write_text(text)
    key = setting_key("newsvendor-data", {"csv": str(tmp_path / "a" / "t.csv"), "part": "test"}, 100)
    assert "/" not in key and key.startswith("newsvendor-data-csv=t@") and "part" not in key
    assert key == setting_key("newsvendor-data", {"csv": str(tmp_path / "b" / "t.csv"), "part": "validation"}, 100)
    (tmp_path / "b" / "t.csv").write_text("x,date,demand\n1,2020-01-01,3\n")
    assert key != setting_key("newsvendor-data", {"csv": str(tmp_path / "b" / "t.csv")}, 100)


def test_the_global_model_needs_one_critical_ratio_and_takes_a_model_s_options(table):
    """Evaluating a checkpoint trained on a range of q keeps the range unless ``critical_ratio`` is
    given: the global model (one fit per q) refuses a range in one line instead of fitting one model
    per window, and a fixed q given as a checkpoint's list option still works (the fit's cache key)."""
    with pytest.raises(OMGPTError, match="gbm is fitted at one critical ratio.*--option critical_ratio=Q"):
        make_policy("gbm", task_of(table, critical_ratio=[0.5, 0.9], part="test"))
    task = task_of(table, critical_ratio=[0.75, 0.75], part="test")
    history = play(task, "gbm")
    # it orders the prediction of a boosting stopped early on held-out training windows
    from omgpt.policies.newsvendor_data import MAX_ITER, gbm_inputs

    policy = make_policy("gbm", task, task.horizon)
    fitted = policy.model(0.75)
    model = fitted.model
    assert 0 < model.n_iter_ < MAX_ITER and len(model.validation_score_) == model.n_iter_ + 1
    policy.reset(history.envs, task.horizon, torch.Generator())
    seen, _ = policy.demands(0)
    by_hand = model.predict(fitted.bins.codes(gbm_inputs(history.contexts[:, 0], seen)[:, fitted.columns]))
    assert np.allclose(history.actions[:, 0, 0].numpy(), by_hand, rtol=1e-5) and np.isfinite(history.actions).all()


def test_the_boosting_on_bins_found_once_grows_the_trees_it_grows_on_raw_values():
    """``gbm`` bins its inputs once per setting (:class:`Bins`) instead of at each of its 64 tuned fits.
    Where every column has fewer than 256 distinct values (scikit-learn's exact binning: midpoints) the
    boosting on the codes is the boosting on the raw values, prediction for prediction, missing values,
    weights and early stopping included; on a column of many values the edges are weighted quantiles
    (no edge inside a range of zero-weight rows) and the codes keep the values' order."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    from omgpt.policies.newsvendor_data import BINS, Bins

    rng = np.random.default_rng(0)
    x = rng.integers(0, 200, size=(3000, 4)).astype(float) * rng.choice([0.5, 3.0, 7.25, 11.0], 4)
    x[rng.random(x.shape) < 0.1] = np.nan
    y = np.nan_to_num(x[:, 0]) * 0.01 + np.nan_to_num(x[:, 1]) * 0.002 + rng.standard_normal(3000)
    w = rng.uniform(0.1, 3.0, 3000)
    train, held = slice(0, 2500), slice(2500, None)
    bins = Bins(x[train], w[train])
    fits = [
        HistGradientBoostingRegressor(
            loss="quantile",
            quantile=0.75,
            max_iter=300,
            early_stopping=True,
            n_iter_no_change=5,
            scoring="loss",
            random_state=0,
        )
        for _ in range(2)
    ]
    fits[0].fit(x[train], y[train], sample_weight=w[train], X_val=x[held], y_val=y[held], sample_weight_val=w[held])
    codes = bins.codes(x)
    fits[1].fit(
        codes[train], y[train], sample_weight=w[train], X_val=codes[held], y_val=y[held], sample_weight_val=w[held]
    )
    assert 5 < fits[0].n_iter_ == fits[1].n_iter_ < 300
    fresh = rng.uniform(-10, 2500, size=(500, 4))  # values between and beyond the training values
    assert np.array_equal(fits[0].predict(fresh), fits[1].predict(bins.codes(fresh)))

    many = rng.standard_normal(20000)
    weight = np.where(many < 0, 0.0, 1.0)  # the negative half weighs nothing
    edges = Bins(many[:, None], weight).edges[0]
    assert len(edges) <= BINS - 2 and np.all(np.diff(edges) > 0) and edges[0] >= 0
    order = np.argsort(many)
    assert np.all(np.diff(Bins(many[:, None], np.ones_like(many)).codes(many[order, None])[:, 0]) >= 0)


# --------------------------------------------------------------------------------------------------
# Issue 31: the time split leaks nothing; QR's regression path; every bakery day fits the action range.
def test_the_time_split_leaks_nothing_of_later_days(tmp_path):
    """Changing every day from the validation cut on (demand and features) changes nothing that is
    trained on -- the training windows OMGPT sees, the global model's training rows, their lags and
    the held-out slice it stops on -- and changing the test days changes nothing of the validation
    windows (checkpoints and tuning are chosen there). Within a test window, day t's inputs (OMGPT's
    context, the global model's lags) read no day from t on."""
    from omgpt.policies.newsvendor_data import gbm_inputs, part_days

    def tables(cut_of):
        base = write_table(tmp_path / "base.csv", shops=4, days=120)
        frame = pd.read_csv(base)
        cut = cut_of(task_of(base, split="time", horizon=10).data)
        later = pd.to_datetime(frame["day"]) >= pd.Timestamp(cut)
        frame.loc[later, "sales"] = frame.loc[later, "sales"] * 3 + 7
        frame.loc[later, "temp"] = -frame.loc[later, "temp"]
        frame.to_csv(tmp_path / "changed.csv", index=False)
        return base, tmp_path / "changed.csv"

    base, changed = tables(lambda d: d.validation_from)
    a, b = (task_of(t, split="time", horizon=10, critical_ratio=0.5) for t in (base, changed))
    assert torch.equal(a.starts, b.starts)
    envs = a.sample_envs(a.windows, torch.Generator().manual_seed(0))
    x_a, x_b = (torch.stack([t.sample_context(envs, d, None) for d in range(10)], 1) for t in (a, b))
    assert torch.equal(window_demands(a, envs, 10), window_demands(b, envs, 10))
    # the features are standardised with the training rows' statistics alone: unchanged too
    assert torch.allclose(x_a, x_b)
    options = lambda t: tuple(
        sorted({**dict(csv=str(t), series="shop", date="day", demand="sales", lookback=7, split="time")}.items())
    )
    trained = [part_days("newsvendor-data", options(t), 10, 0.5) for t in (base, changed)]
    assert all(np.array_equal(trained[0][k], trained[1][k], equal_nan=True) for k in trained[0])
    base, changed = tables(lambda d: d.test_from)
    a, b = (task_of(t, split="time", horizon=10, part="validation") for t in (base, changed))
    envs = a.sample_envs(a.windows, torch.Generator().manual_seed(0))
    assert torch.equal(window_demands(a, envs, 10), window_demands(b, envs, 10))
    assert torch.allclose(*(torch.stack([t.sample_context(envs, d, None) for d in range(10)], 1) for t in (a, b)))
    # a test window's day t: the global model's inputs from the look-back and days before t only. Its
    # buffer holds the whole window -- once as it was, once with every day from t on spoiled -- so an
    # input built from day t or later would differ; reading one day further shows that it can.
    test = task_of(base, split="time", horizon=10, part="test")
    envs = test.sample_envs(test.windows, torch.Generator().manual_seed(0))
    days = window_demands(test, envs, 10)
    gbm = make_policy("gbm", test, 10)
    gbm.reset(envs, 10, torch.Generator().manual_seed(0))

    def inputs(x, filled, t):
        gbm.observations[:, :, 0] = filled
        return gbm_inputs(x, gbm.demands(t)[0])

    for t in range(10):
        spoiled = torch.cat([days[:, :t], torch.full_like(days[:, t:], 1e6)], 1)
        x = test.sample_context(envs, t, None)
        assert np.array_equal(inputs(x, days, t), inputs(x, spoiled, t), equal_nan=True)
        assert not np.array_equal(inputs(x, days, t + 1), inputs(x, spoiled, t + 1), equal_nan=True)


def test_qr_plays_its_regression_once_it_has_min_samples_days(tmp_path):
    """Past ``min_samples`` window days QR orders its quantile regression of the window's past days on
    their contexts, evaluated at today's context (before: the look-back quantile)."""
    from omgpt.policies.newsvendor import quantile_regression
    from omgpt.policies.newsvendor_data import regressors

    demand = [4.0] * 7 + [2.0, 6.0, 3.0, 7.0, 2.0, 6.0, 2.5, 6.5, 2.0, 6.0, 3.0, 7.0] + [4.0] * 11
    task = small_series_task(tmp_path, demand, critical_ratio=0.75, horizon=12)
    history = play(task, "qr", l1=0.1)
    x, o = history.contexts[0].double(), history.observations[0, :, 0].double()
    assert torch.allclose(history.actions[0, :7, 0], history.contexts[0, :7, LOOKBACK_QUANTILE])
    for t in range(7, 12):
        beta = quantile_regression(regressors(x[:t]).numpy(), o[:t].numpy(), 0.75, 0.1)
        assert history.actions[0, t, 0].item() == pytest.approx(
            beta[0] + beta[1:] @ regressors(x[t]).numpy(), rel=1e-4, abs=1e-5
        )
    assert not torch.allclose(history.actions[0, 7:, 0], history.contexts[0, 7:, LOOKBACK_QUANTILE]), (
        "the regression, not the look-back"
    )


@pytest.mark.slow
def test_every_bakery_day_fits_the_action_range():
    """ACTION_HIGH's bound, measured: over every window of 100 days of bakery -- every start, so every
    window of every part of every split -- the largest day in units of its window's level is 177.3
    (below ACTION_HIGH = 200): the hindsight order is the demand itself, and regret is the cost."""
    pytest.importorskip("ddop")
    from numpy.lib.stride_tricks import sliding_window_view

    from omgpt.tasks.newsvendor_data import ACTION_HIGH

    data = make_task("newsvendor-data", dataset="bakery", part="test").data
    largest = sliding_window_view(data.demand, 100).max(-1)
    rows_left = np.repeat(data.series_rows, data.series_rows) - data.position
    ok = (data.position >= data.lookback) & (data.lookback_mean > 0) & (rows_left >= 100)
    ratio = largest[ok[: len(largest)]] / data.lookback_mean[: len(largest)][ok[: len(largest)]]
    assert round(float(ratio.max()), 1) == 177.3 and ratio.max() < ACTION_HIGH


# --------------------------------------------------------------------------------------------------
# Issue 34: real-demand input validated as data.
def test_evaluate_on_a_data_task_names_a_held_out_part(table, tmp_path, capsys):
    base = [
        "evaluate",
        "--task",
        "newsvendor-data",
        "--option",
        f"csv={table}",
        "--option",
        "series=shop",
        "--option",
        "date=day",
        "--option",
        "demand=sales",
        "--option",
        "horizon=14",
        "--option",
        "lookback=7",
        "--policies",
        "saa",
        "--runs",
        "2",
        "--seed",
        "7",
        "--no-progress",
    ]
    for extra, message in (
        ([], "needs --option part=test"),
        (["--option", "part=train"], "--option part=train: the training windows"),
    ):
        code = cli_main([*base, *extra, "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and message in err, err
        assert not (tmp_path / "o").exists()
    assert cli_main([*base, "--option", "part=test", "--out", str(tmp_path / "o")]) == 0


def test_an_empty_csv_option_is_refused(tmp_path, capsys):
    code = cli_main(
        [
            "evaluate",
            "--task",
            "newsvendor-data",
            "--option",
            "csv=",
            "--option",
            "part=test",
            "--policies",
            "saa",
            "--runs",
            "2",
            "--seed",
            "7",
            "--out",
            str(tmp_path / "o"),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--option 'csv=': no value" in err, err
    with pytest.raises(OMGPTError, match="csv= is empty"):
        make_task("newsvendor-data", csv=" ", part="test")


def _gap(f):
    f.drop(
        f[
            (f.shop == "s3")
            & pd.to_datetime(f.day).between(START + pd.Timedelta(days=30), START + pd.Timedelta(days=59))
        ].index,
        inplace=True,
    )


def _huge_demand(f):
    f.loc[10, "sales"] = 1e17


def _huge_feature(f):
    f.loc[12, "temp"] = 1e300


def _inf_feature(f):
    f.loc[12, "temp"] = np.inf


DATA_ERRORS = [
    (_gap, r"series 's3' jumps from 2021-02-02 to 2021-03-05 \(30 missing days; 1 gaps in all\)"),
    (_huge_demand, r"demand column 'sales' has 1 values above 1e\+12 .*first in row 12 of the file"),
    (_huge_feature, r"feature column 'temp' has 1 values beyond ±1e\+12 .*first in row 14 of the file"),
    (_inf_feature, r"feature column 'temp' has 1 non-finite values \(first in row 14 of the file\)"),
]


@pytest.mark.parametrize(
    "change, message", DATA_ERRORS, ids=["date-gap", "1e17-demand", "1e300-feature", "inf-feature"]
)
def test_absurd_data_is_refused_naming_row_and_column(tmp_path, change, message):
    with pytest.raises(OMGPTError, match=message):
        task_of(broken(tmp_path, change))


def test_levels_are_computed_series_by_series(tmp_path):
    """One huge (but admitted) series leaves every other series' levels exactly as they are without it:
    no running sum crosses series (a 1e17 demand once moved other series' levels by 7.8%)."""
    small = task_of(
        write_table(tmp_path / "small.csv", demand=lambda s, d, p: 10.13 + 3.7 * s + 0.31 * (d % 7) + 0.07 * p)
    ).data
    frame = pd.read_csv(tmp_path / "small.csv")
    frame.loc[frame.shop == "s0", "sales"] *= 1e10  # s0 sorts first: its sums came before everyone's
    frame.to_csv(tmp_path / "big.csv", index=False)
    big = task_of(tmp_path / "big.csv").data
    others = big.series_index != 0
    assert np.array_equal(small.lookback_mean[others], big.lookback_mean[others], equal_nan=True)


def test_a_categorical_column_with_too_many_levels_is_refused_before_the_one_hot(tmp_path, monkeypatch):
    monkeypatch.setattr(dd, "MAX_CATEGORICAL_LEVELS", 50, raising=False)
    table = write_table(tmp_path / "codes.csv", extra={"code": np.arange(6 * 80) % 60})
    with pytest.raises(
        OMGPTError, match=r"categorical column 'code' has 60 levels, too many to one-hot encode \(at most 50\)"
    ):
        task_of(table, categorical="code")


def test_no_window_says_why(tmp_path):
    """A part whose look-backs hold no demand is told so, not told to shorten the horizon."""
    table = write_table(tmp_path / "closed.csv", demand=lambda s, d, p: 0.0 if d < 70 else 5.0)
    with pytest.raises(OMGPTError, match="look-back days without demand") as error:
        task_of(table, split="time", part="validation", horizon=5)
    assert "shorter --horizon" not in str(error.value)


# --------------------------------------------------------------------------------------------------
# Issue 31: the headline metric and its clustered intervals.
def test_the_cluster_bootstrap_resamples_stores_not_windows():
    """The scaled cost is total cost over total demand; its interval resamples whole stores (and, on
    the time split, weeks): copying every window of a store ten times -- windows that tell nothing new
    -- leaves every interval exactly as it was, where a bootstrap over windows would shrink it ~3x."""
    from omgpt.analysis.newsvendor_data import cluster_bootstrap

    rng = np.random.default_rng(0)
    W, T = 12, 14
    demand = rng.uniform(1, 20, (W, T))
    cells = {
        "cost": {"saa": demand * rng.uniform(0.1, 0.3, (W, 1)), "omgpt": demand * rng.uniform(0.05, 0.3, (W, 1))},
        "demand": demand,
        "level": demand.mean(1),
        "group": np.repeat(["a", "b", "c", "d"], 3),
        "block": np.tile(np.arange(T) // 7, (W, 1)),
    }
    out = cluster_bootstrap(cells, "saa", dates=False, versus="omgpt")
    assert out["omgpt"]["scaled_cost"]["mean"] == pytest.approx(cells["cost"]["omgpt"].sum() / demand.sum())
    assert out["omgpt"]["ratio_to_saa"]["mean"] == pytest.approx(
        cells["cost"]["omgpt"].sum() / cells["cost"]["saa"].sum()
    )
    assert out["omgpt"]["ratio_to"]["saa"] == out["omgpt"]["ratio_to_saa"] and out["saa"]["ratio_to_saa"] is None
    copies = {k: np.repeat(v, 10, axis=0) for k, v in cells.items() if k != "cost"}
    copies["cost"] = {k: np.repeat(v, 10, axis=0) for k, v in cells["cost"].items()}
    again = cluster_bootstrap(copies, "saa", dates=False, versus="omgpt")
    for name in ("saa", "omgpt"):
        assert np.allclose(again[name]["scaled_cost"]["ci90"], out[name]["scaled_cost"]["ci90"])
    lo, hi = out["omgpt"]["scaled_cost"]["ci90"]
    assert lo < out["omgpt"]["scaled_cost"]["mean"] < hi
    # on the time split the weeks are resampled too: a cost that only varies between weeks gets an interval
    by_week = dict(
        cells,
        group=np.repeat(["a"], W),
        cost={"saa": demand * (1 + cells["block"]), "omgpt": demand * (1 + cells["block"])},
    )
    assert np.ptp(cluster_bootstrap(by_week, "saa", dates=False)["saa"]["scaled_cost"]["ci90"]) == 0
    assert np.ptp(cluster_bootstrap(by_week, "saa", dates=True)["saa"]["scaled_cost"]["ci90"]) > 0.1
