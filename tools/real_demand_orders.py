"""One test window's orders on real demand: OMGPT against the feature-based benchmarks, with the demand.

    OMP_NUM_THREADS=1 python -m tools.real_demand_orders [--model series0] [--q 0.75] [--seed 7]
        [--window 0 | --worst] [--out results/real-demand-orders]

``--model`` is a model of the real-demand experiment (``configs/experiments/real-demand.yaml``): a
held-out-store split (``series0``-``series4``) or a rolling origin (``time1``-``time3``), read from the
model store (``results/models``) under the experiment's key. Every test window of that model's test
part at critical ratio ``--q`` is played once by OMGPT, weighted SAA with random-forest weights, the
gradient-boosted model and the network fitted on the cost, each tuned on that part's validation windows
(common windows; docs/real-demand.md, "What wins, and why"). The figure (``orders.png``) shows one
window: ``--window N`` (its index in the order test seed ``--seed`` plays them), or ``--worst``, the
window where OMGPT's cost most exceeds the best of the others'. ``summary.json`` holds each policy's
cost per unit demanded over all of the part's windows with its cluster interval and OMGPT's paired
ratio to each (the experiment's metric), and the window shown. Every argument is checked before any
work: an error is one line, exit code 2.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from omgpt.entry import Integer, Name, OutputFolder, Real, Seed, entry_point, script_parser
from omgpt.errors import OMGPTError

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ("omgpt", "wsaa-rf-tuned", "gbm-tuned", "dnn-newsvendor-tuned")
MODELS = ("series0", "series1", "series2", "series3", "series4", "time1", "time2", "time3")


def model_of(name: str) -> tuple[Path, dict]:
    """The real-demand experiment's model ``name``: its stored checkpoint and its training options. The
    store's record is read as the experiment reads it (:func:`omgpt.commands.store.read_record`): a model
    of another task or options than the slot's, or a model file not the recorded one, is refused."""
    from omgpt.commands.experiment.config import load_experiment
    from omgpt.commands.experiment.models import experiment_keys
    from omgpt.commands.store import read_record

    exp = load_experiment("real-demand", "cpu")
    if name not in exp.models:
        raise OMGPTError(f"--model {name}: not a model of the real-demand experiment ({', '.join(exp.models)})")
    model, folder = exp.models[name], ROOT / "results" / "models" / experiment_keys(exp, [])[name]
    if not (folder / "done.json").is_file():
        raise OMGPTError(
            f"--model {name}: not trained yet ({folder} has no done.json): omgpt experiment real-demand --train-only"
        )
    try:
        record = read_record(folder, model.task, model.task_options)
    except OMGPTError as e:
        raise OMGPTError(f"--model {name}: {e}") from None
    return Path(record["ckpt"]), dict(model.task_options)


def worst_window(histories: dict) -> int:
    """The window where OMGPT's cost most exceeds the lowest of the other policies' costs."""
    import torch

    cost = {name: h.cumulative_regret()[:, -1] for name, h in histories.items()}
    others = torch.stack([c for name, c in cost.items() if name != "omgpt"]).min(0).values
    return int((cost["omgpt"] - others).argmax())


@entry_point
def main(argv: list[str] | None = None) -> int:
    p = script_parser(__file__, __doc__)
    p.add_argument("--model", type=Name(MODELS), default="series0", help="the experiment's model (its test part)")
    p.add_argument("--q", type=Real(0.5, 0.9), default=0.75, help="the critical ratio (the models train on [0.5, 0.9])")
    p.add_argument(
        "--seed", type=Seed("test"), default=6, help="a test seed that chose nothing (it orders the windows)"
    )
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--window", type=Integer(0, 100_000), default=0, help="the window drawn: its index")
    shown.add_argument("--worst", action="store_true", help="draw the window of OMGPT's largest excess cost")
    p.add_argument("--out", type=OutputFolder(), default=ROOT / "results" / "real-demand-orders")
    args = p.parse_args(argv)
    ckpt, options = model_of(args.model)

    from omgpt.analysis.newsvendor_data import cluster_bootstrap, plot_series_orders, window_cells
    from omgpt.evaluation import evaluate_policies
    from omgpt.files import write_json
    from omgpt.model import load_model
    from omgpt.tasks import make_task

    options |= {"part": "test", "critical_ratio": args.q}
    task = make_task("newsvendor-data", **options)
    if not args.worst and args.window >= task.windows:
        raise OMGPTError(f"--window {args.window}: the test part has {task.windows} windows (0-{task.windows - 1})")
    model = load_model(str(ckpt), map_location="cpu").model
    specs = {"omgpt": {"model": model, "window": None}}  # the model plays the horizon it was trained for
    specs |= {name: {} for name in POLICIES if name != "omgpt"}
    histories = evaluate_policies(task, specs, task.windows, task.horizon, args.seed, progress=False)
    index = worst_window(histories) if args.worst else args.window
    first = next(iter(histories.values()))
    store = task.data.table.groups[int(first.envs["row"][index])]
    what = "held-out store" if options.get("split") != "time" else f"store (origin {options.get('origin', 0)})"
    title = f"{args.model}: {what} {store}, q = {args.q}: test window {index}"
    args.out.mkdir(parents=True, exist_ok=True)
    window = plot_series_orders(histories, index, args.out / "orders.png", title)
    dates = task.data.split == "time"
    costs = cluster_bootstrap(window_cells(task, histories), "gbm-tuned", dates, versus="omgpt", seed=args.seed)
    write_json(
        {
            "command": "python -m tools.real_demand_orders " + shlex.join(argv if argv is not None else sys.argv[1:]),
            "model": args.model,
            "ckpt": str(ckpt.relative_to(ROOT)),
            "task_options": options,
            "windows": task.windows,
            "store": str(store),
            "window_index": index,
            "window": window,
            "costs": costs,
        },
        args.out / "summary.json",
        indent=1,
    )
    for name, c in sorted(costs.items(), key=lambda kv: kv[1]["scaled_cost"]["mean"]):
        lo, hi = c["scaled_cost"]["ci90"]
        print(f"{name:<22} {c['scaled_cost']['mean']:.4f} [{lo:.4f}, {hi:.4f}]")
    for name, r in costs["omgpt"]["ratio_to"].items():
        print(f"omgpt / {name}: {r['mean']:.3f} [{r['ci90'][0]:.3f}, {r['ci90'][1]:.3f}]")
    print(f"wrote {args.out / 'orders.png'} and {args.out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
