"""The global gradient-boosted quantile model (``gbm``) at its strongest, and scikit-learn's histogram
boosting against LightGBM's quantile objective at equal tuning (the numbers: benchmarks/RESULTS.md):

    OMP_NUM_THREADS=1 python -m benchmarks.gbm_search [--split series|time] [--split-seed 0] [--q 0.75 ...]

For each critical ratio, both libraries fit every configuration of ``gbm``'s grid (``GlobalGBM.tunable``:
learning rate x leaves x minimum samples per leaf x L2, 64 points) on the same rows -- the training
part's days with the lagged-demand features the policy builds (``part_days``), each day weighted by its
window's level -- boosting up to ``MAX_ITER`` rounds with early stopping (20 rounds) on the same
held-out training windows. Each configuration is scored on the validation windows by the headline
metric, the scaled cost (total cost over total demand); the best of each library is then scored once
on the test windows. The ``gbm`` policy orders exactly these predictions (it does not learn within a
window), so no rollout is needed. Printed: both libraries' chosen configuration, validation and test
scaled cost, LightGBM / scikit-learn on test, and the CPU seconds of each library's 64 fits (process
time, one thread, the two libraries interleaved configuration by configuration in this one process).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from omgpt.policies.newsvendor_data import MAX_ITER, GlobalGBM, part_days
from omgpt.tuning import grid
from omgpt.entry import Integer, Real, Seed, entry_point, script_parser


def scaled_cost(pred: np.ndarray, days: dict, q: float) -> float:
    """Total pinball cost over total demand (each day in its window's level units times the level)."""
    short = days["targets"] - pred
    cost = np.where(short > 0, q * short, (q - 1) * short) * days["level"]
    return float(cost.sum() / (days["targets"] * days["level"]).sum())


def fit_sklearn(train: dict, q: float, c: dict):
    from sklearn.ensemble import HistGradientBoostingRegressor

    held = train["held"]
    model = HistGradientBoostingRegressor(
        loss="quantile",
        quantile=q,
        max_iter=MAX_ITER,
        early_stopping=True,
        n_iter_no_change=20,
        scoring="loss",
        random_state=0,
        **c,
    )
    model.fit(
        train["inputs"][~held],
        train["targets"][~held],
        sample_weight=train["level"][~held],
        X_val=train["inputs"][held],
        y_val=train["targets"][held],
        sample_weight_val=train["level"][held],
    )
    return model.predict, model.n_iter_


def fit_lightgbm(train: dict, q: float, c: dict):
    import lightgbm

    held = train["held"]
    model = lightgbm.LGBMRegressor(
        objective="quantile",
        alpha=q,
        n_estimators=MAX_ITER,
        learning_rate=c["learning_rate"],
        num_leaves=c["max_leaf_nodes"],
        min_child_samples=c["min_samples_leaf"],
        reg_lambda=c["l2_regularization"],
        n_jobs=1,
        random_state=0,
        verbose=-1,
    )
    model.fit(
        train["inputs"][~held],
        train["targets"][~held],
        sample_weight=train["level"][~held],
        eval_X=(train["inputs"][held],),
        eval_y=(train["targets"][held],),
        eval_sample_weight=[train["level"][held]],
        eval_metric="quantile",
        callbacks=[lightgbm.early_stopping(20, verbose=False)],
    )
    return (lambda x: model.predict(x, num_iteration=model.best_iteration_)), model.best_iteration_


LIBRARIES = {"scikit-learn": fit_sklearn, "lightgbm": fit_lightgbm}


@entry_point
def main(argv: list[str] | None = None) -> None:
    parser = script_parser(__file__, __doc__)
    parser.add_argument("--split", default="series", choices=("series", "time"))
    parser.add_argument("--split-seed", type=Seed(), default=0)
    parser.add_argument("--q", type=Real(0, 1, low_open=True, high_open=True), nargs="+", default=[0.75])
    parser.add_argument("--libraries", nargs="+", default=list(LIBRARIES), choices=list(LIBRARIES))
    parser.add_argument(
        "--configs",
        type=Integer(1, 10_000),
        default=None,
        help="a random subset of this many grid points (seeded; default: all 64)",
    )
    args = parser.parse_args(argv)
    options = {
        "dataset": "bakery",
        "split": args.split,
        **({"split_seed": args.split_seed} if args.split == "series" else {}),
    }
    key = tuple(sorted(options.items()))
    configs = grid(GlobalGBM.tunable)
    default = {"learning_rate": 0.1, "max_leaf_nodes": 31, "min_samples_leaf": 20, "l2_regularization": 0.0}
    if args.configs:  # a quicker look: the paper-default point and a seeded random subset of the rest
        rest = [c for c in configs if c != default]
        configs = [default] + [
            rest[i] for i in np.random.default_rng(0).choice(len(rest), args.configs - 1, replace=False)
        ]
    print(
        f"bakery, {args.split} split{f' {args.split_seed}' if args.split == 'series' else ''}: {len(configs)} configurations per library, "
        f"up to {MAX_ITER} rounds, early stopping on held-out training windows; scored by cost per unit demanded"
    )
    for q in args.q:
        train, validation, test = (
            part_days("newsvendor-data", key, 100, q, part) for part in ("train", "validation", "test")
        )
        results = {name: [] for name in args.libraries}
        seconds = dict.fromkeys(args.libraries, 0.0)
        for c in configs:  # the libraries interleaved: each configuration fitted by both in turn
            for name in args.libraries:
                start = time.process_time()
                predict, rounds = LIBRARIES[name](train, q, c)
                seconds[name] += time.process_time() - start
                results[name].append((scaled_cost(predict(validation["inputs"]), validation, q), c, rounds, predict))
        print(f"\nq = {q}:")
        best = {}
        for name in args.libraries:
            val, c, rounds, predict = min(results[name], key=lambda r: r[0])
            best[name] = scaled_cost(predict(test["inputs"]), test, q)
            at_default = results[name][configs.index(default)][0]
            print(
                f"  {name:>12}: best {c} ({rounds} rounds): validation {val:.4f} (the default constants {at_default:.4f}), "
                f"test {best[name]:.4f}; {seconds[name]:.0f} CPU s for {len(configs)} fits"
            )
        if len(best) == 2:
            print(f"  lightgbm / scikit-learn on test: {best['lightgbm'] / best['scikit-learn']:.3f}")


if __name__ == "__main__":
    sys.exit(main())
