"""Demand prediction's retrain, judged on validation: each stored model's observation head against ridge.

    python -m tools.demand_retrain [--runs 100] [--seed 10003] [--json FILE]

The lever study (benchmarks/RESULTS.md, demand-single) found f~ in the early phase the best lever per
CPU-minute for the head, on its validation curves at 60 epochs. Demand prediction's two models were
retrained with it over 280 epochs; this plays both recipes' models on the three panels of
``omgpt experiment demand-prediction`` with validation environments (``--seed``, a validation seed: the
choice between the models is made here, never on the test seed), and prints each head's mean squared
error after ``T - 1`` samples over ridge's on the same samples (lower is better; below 1 beats ridge).
Each model is read at the checkpoint the run store ships (``model.ckpt``: the checkpoint rule keeps the
lowest validation regret UCB, a property of the actions, not of the head; its ``done.json`` read and
checked as the experiment reads it, :func:`omgpt.commands.store.read_record`) and, where its run folder is
on this machine, at the end of its schedule (``run/checkpoints/last.ckpt``).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from omgpt.entry import Integer, OutputFile, Seed, entry_point, script_parser
from omgpt.files import write_json

ROOT = Path(__file__).resolve().parents[1]

# The retrain's models (f~, 280 epochs), keys of results/models; the config's CPU scale names the kept
# ones (random prices in [0, 3], 60 epochs), and its panels are the ones played here.
RETRAIN = {"single-type": "pricing-6fdc9a58d4", "two-types": "pricing-306ab85e72"}


def head_over_ridge(ckpt: Path, options: dict, runs: int, seed: int) -> dict:
    """The head's and ridge's MSE after ``T - 1`` samples on ``runs`` environments of ``seed``."""
    from omgpt.analysis.report import final_demand_errors
    from omgpt.commands.evaluate import run_demand_prediction

    with tempfile.TemporaryDirectory() as scratch:
        summary = run_demand_prediction(str(ckpt), options, runs, None, None, seed, scratch, progress=False)
    head, ridge = final_demand_errors({"demand_prediction": summary})
    return {"samples": summary["n"][-1], "head": head, "ridge": ridge, "ratio": head / ridge}


@entry_point
def main(argv: list[str] | None = None) -> int:
    p = script_parser(__file__, __doc__)
    p.add_argument("--runs", type=Integer(2, 100_000), default=100, help="validation environments per panel")
    p.add_argument("--seed", type=Seed("validation"), default=10003, help="a validation seed")
    p.add_argument("--json", type=OutputFile(), default=None, help="write the table here")
    args = p.parse_args(argv)
    from omgpt.commands.experiment import experiment_keys, load_experiment
    from omgpt.commands.store import read_record

    exp = load_experiment("demand-prediction", "cpu")
    recipes = {"cpu-recipe": experiment_keys(exp, []), "retrain": RETRAIN}
    for keys in recipes.values():  # every stored model checked before any is played
        for name in {panel.model for panel in exp.panels}:
            folder = ROOT / "results" / "models" / keys[name]
            if (folder / "model.ckpt").is_file():
                read_record(folder, exp.models[name].task, exp.models[name].task_options)
    rows = []
    for recipe, keys in recipes.items():
        for panel in exp.panels:
            folder = ROOT / "results" / "models" / keys[panel.model]
            for point, ckpt in (("kept", folder / "model.ckpt"), ("last", folder / "run/checkpoints/last.ckpt")):
                if ckpt.is_file():
                    row = {"recipe": recipe, "panel": panel.title, "key": keys[panel.model], "checkpoint": point}
                    rows.append({**row, **head_over_ridge(ckpt, panel.task_options, args.runs, args.seed)})
                    print(f"{recipe:>10} {panel.title:<26} {point:<4} head / ridge {rows[-1]['ratio']:.2f}", flush=True)
    if args.json:
        write_json({"runs": args.runs, "seed": args.seed, "rows": rows}, args.json, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
