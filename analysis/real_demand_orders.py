"""One held-out store's orders on real demand: OMGPT, weighted SAA (random-forest weights) and the
gradient-boosted model over one test window, with the demand (docs/real-demand.md, "What wins, and
why"). Every test window of the panel is played by each policy (common windows); the figure shows one
of them, and ``summary.json`` holds each policy's cost per unit demanded over all of the panel's windows
with its cluster interval and OMGPT's paired ratio to each (the experiment's metric).

    OMP_NUM_THREADS=1 python analysis/real_demand_orders.py [--split-seed 0] [--q 0.75] [--seed 6] [--window 0]
        [--ckpt results/models/newsvendor-data-c9761374bb/model.ckpt] [--out results/real-demand-orders]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

POLICIES = ("omgpt", "wsaa-rf-tuned", "gbm-tuned")
SERIES_MODELS = {  # the real-demand experiment's models of the series split (results/models)
    0: "newsvendor-data-c9761374bb",
    1: "newsvendor-data-5cfca4a4fb",
    2: "newsvendor-data-092272ee1a",
    3: "newsvendor-data-9b7b65a25c",
    4: "newsvendor-data-09c5d36d54",
}


def main() -> None:
    from omgpt.analysis.newsvendor_data import cluster_bootstrap, plot_series_orders, window_cells
    from omgpt.evaluation import evaluate_policies
    from omgpt.model import load_model
    from omgpt.seeding import check_test_seed
    from omgpt.tasks import make_task

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--q", type=float, default=0.75)
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--window", type=int, default=0)
    parser.add_argument("--ckpt")
    parser.add_argument("--out", default="results/real-demand-orders")
    args = parser.parse_args()
    check_test_seed(args.seed)
    ckpt = args.ckpt or f"results/models/{SERIES_MODELS[args.split_seed]}/model.ckpt"
    options = {"dataset": "bakery", "split_seed": args.split_seed, "part": "test", "critical_ratio": args.q}
    task = make_task("newsvendor-data", **options)
    model = load_model(ckpt, map_location="cpu").model
    specs = {"omgpt": {"model": model, "window": None}}  # the model plays the horizon it was trained for
    specs |= {p: {} for p in POLICIES if p != "omgpt"}
    histories = {
        name: evaluate_policies(task, {name: o}, task.windows, task.horizon, args.seed, progress=False)[name]
        for name, o in specs.items()
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    first = next(iter(histories.values()))
    store = task.data.table.groups[int(first.envs["row"][args.window])]
    title = f"Held-out store {store} (split {args.split_seed}), q = {args.q}: one test window"
    shown = plot_series_orders(histories, args.window, out / "orders.png", title)
    costs = cluster_bootstrap(window_cells(task, histories), "gbm-tuned", False, versus="omgpt", seed=args.seed)
    summary = {
        "command": "python analysis/real_demand_orders.py "
        + f"--split-seed {args.split_seed} --q {args.q} --seed {args.seed} --window {args.window}",
        "ckpt": ckpt,
        "task_options": options,
        "windows": task.windows,
        "store": str(store),
        "window": shown,
        "costs": costs,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    for name, c in sorted(costs.items(), key=lambda kv: kv[1]["scaled_cost"]["mean"]):
        lo, hi = c["scaled_cost"]["ci90"]
        print(f"{name:<16} {c['scaled_cost']['mean']:.4f} [{lo:.4f}, {hi:.4f}]")
    for name, r in costs["omgpt"]["ratio_to"].items():
        print(f"omgpt / {name}: {r['mean']:.3f} [{r['ci90'][0]:.3f}, {r['ci90'][1]:.3f}]")
    print(f"wrote {out / 'orders.png'} and {out / 'summary.json'}")


if __name__ == "__main__":
    main()
