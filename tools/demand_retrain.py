"""Demand prediction's retrain, judged on validation: each stored model's observation head against ridge.

    python -m tools.demand_retrain [--runs 100] [--seed 10003] [--json FILE]

The lever study (benchmarks/RESULTS.md, demand-single) found f~ in the early phase the best lever per
CPU-minute for the head, on its validation curves at 60 epochs. Demand prediction's two models were
retrained with it over 280 epochs; this plays both recipes' models on the three panels of
``omgpt experiment demand-prediction`` with validation environments (``--seed``, a validation seed: the
choice between the models is made here, never on the test seed), and prints each head's mean squared
error after ``T - 1`` samples over ridge's on the same samples (lower is better; below 1 beats ridge).
Each model is read at the checkpoint the run store ships (``model.ckpt``: the checkpoint rule keeps the
lowest validation regret UCB, a property of the actions, not of the head) and, where its run folder is on
this machine, at the end of its schedule (``run/checkpoints/last.ckpt``).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from omgpt.entry import Integer, OutputFile, Seed, entry_point, script_parser
from omgpt.files import write_json

ROOT = Path(__file__).resolve().parents[1]

# The models of configs/experiments/demand-prediction.yaml's CPU scale: the CPU recipe (random prices in
# [0, 3], 60 epochs) and the retrain (f~, 280 epochs), keys of results/models.
MODELS = {
    "cpu-recipe": {"single-type": "pricing-a1af405354", "two-types": "pricing-e62674581b"},
    "retrain": {"single-type": "pricing-6fdc9a58d4", "two-types": "pricing-306ab85e72"},
}
PANELS = {  # the experiment's panels: model slot, task options over the checkpoint's
    "single type": ("single-type", {}),
    "two types, linear": ("two-types", {"demand_types": "linear"}),
    "two types, square": ("two-types", {"demand_types": "square"}),
}


def head_over_ridge(ckpt: Path, options: dict, runs: int, seed: int) -> dict:
    """The head's and ridge's MSE after ``T - 1`` samples on ``runs`` environments of ``seed``."""
    from omgpt.commands.evaluate import run_demand_prediction

    with tempfile.TemporaryDirectory() as scratch:
        s = run_demand_prediction(str(ckpt), options, runs, None, None, seed, scratch, progress=False)
    i = len(s["n"]) - 1  # the last sample count, T - 1
    head, ridge = s["methods"]["omgpt"]["mse"][i], s["methods"]["ridge"]["mse"][i]
    return {"samples": s["n"][i], "head": head, "ridge": ridge, "ratio": head / ridge}


@entry_point
def main(argv: list[str] | None = None) -> int:
    p = script_parser(__file__, __doc__)
    p.add_argument("--runs", type=Integer(2, 100_000), default=100, help="validation environments per panel")
    p.add_argument("--seed", type=Seed("validation"), default=10003, help="a validation seed")
    p.add_argument("--json", type=OutputFile(), default=None, help="write the table here")
    args = p.parse_args(argv)
    rows = []
    for recipe, slots in MODELS.items():
        for panel, (slot, options) in PANELS.items():
            folder = ROOT / "results" / "models" / slots[slot]
            for point, ckpt in (("kept", folder / "model.ckpt"), ("last", folder / "run/checkpoints/last.ckpt")):
                if ckpt.is_file():
                    row = {"recipe": recipe, "panel": panel, "key": slots[slot], "checkpoint": point}
                    rows.append({**row, **head_over_ridge(ckpt, options, args.runs, args.seed)})
                    print(f"{recipe:>10} {panel:<18} {point:<4} head / ridge {rows[-1]['ratio']:.2f}", flush=True)
    if args.json:
        write_json({"runs": args.runs, "seed": args.seed, "rows": rows}, args.json, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
