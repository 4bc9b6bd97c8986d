"""Fit and predict cost of the feature-based newsvendor methods on real demand
(``omgpt/policies/newsvendor_features.py``; the gbm benchmark beside them): each method in a fresh
process, on bakery's training days of one setting (series split ``--split-seed``, ``q``), timed and
with its memory: the process's peak resident set size once the training days are built (``rows``),
after the fit and after the play (``ru_maxrss``: a peak, so a method that needs less than building the
days took shows no rise).

* fit: the method fitted on the training days (the part's windows tiled, every training day once);
* predict: one pass of the validation part's windows (every window, day by day, as ``omgpt tune``
  plays each configuration), the orders and their scaled cost.

Run (one thread; the numbers in benchmarks/RESULTS.md)::

    OMP_NUM_THREADS=1 python benchmarks/feature_newsvendor_cost.py [--split-seed 0] [--q 0.75] [--methods ...]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from omgpt.entry import Integer, Name, Names, Real, entry_point, script_parser

METHODS = ("wsaa-rf", "wsaa-knn", "wsaa-tree", "wsaa-kernel", "erm-linear", "dnn-newsvendor", "gbm")


def measure(method: str, split_seed: int, q: float) -> dict:
    """Fit ``method`` at its default constants, then play the validation windows (in this process)."""
    import torch

    from omgpt.evaluation import evaluate_policies
    from omgpt.policies import make_policy
    from omgpt.tasks import make_task

    task = make_task("newsvendor-data", dataset="bakery", split_seed=split_seed, part="validation", critical_ratio=q)
    policy = make_policy(method, task, task.horizon)
    key = (task.name, tuple(sorted(task.options().items())), task.horizon, q)
    if method == "gbm":
        from omgpt.policies.newsvendor_data import binned_days

        rows = len(binned_days(*key)["targets"])
    else:
        from omgpt.policies.newsvendor_features import training_rows

        rows = len(training_rows(*key, None).y)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    policy.model(q)  # the fit (cached for the play below)
    fit = time.perf_counter() - start
    fit_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with torch.inference_mode():
        history = evaluate_policies(task, {method: {}}, task.windows, task.horizon, 10_001, progress=False)[method]
    predict = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "method": method,
        "training_days": rows,
        "validation_windows": task.windows,
        "fit_s": round(fit, 2),
        "predict_s": round(predict, 2),
        "rows_mib": round(base / 1024),
        "peak_fit_mib": round(fit_peak / 1024),
        "peak_mib": round(peak / 1024),
        "validation_scaled_cost": round(task.tuning_score(history)["mean"], 4),
    }


@entry_point
def main(argv: list[str] | None = None) -> None:
    parser = script_parser(__file__, __doc__)
    parser.add_argument("--split-seed", type=Integer(0, 4), default=0, help="the series split (0-4)")
    parser.add_argument("--q", type=Real(0, 1, low_open=True, high_open=True), default=0.75, help="the critical ratio")
    parser.add_argument("--methods", type=Names(METHODS), default=",".join(METHODS))
    parser.add_argument("--one", type=Name(METHODS), help=argparse.SUPPRESS)  # the child: one method, JSON on stdout
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.split_seed, args.q)))
        return
    print(f"bakery, series split {args.split_seed}, q = {args.q}; one process per method")
    print(
        f"{'method':<16} {'training days':>13} {'fit s':>7} {'predict s':>10} {'peak MiB: rows':>15} {'fit':>6} {'play':>6} {'val cost':>9}"
    )
    for method in args.methods.split(","):
        out = subprocess.run(
            [sys.executable, __file__, "--one", method, "--split-seed", str(args.split_seed), "--q", str(args.q)],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"{r['method']:<16} {r['training_days']:>13} {r['fit_s']:>7.1f} {r['predict_s']:>10.1f} {r['rows_mib']:>15} "
            f"{r['peak_fit_mib']:>6} {r['peak_mib']:>6} {r['validation_scaled_cost']:>9.4f}",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
