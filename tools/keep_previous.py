"""Keep an experiment's headline numbers before its models are retrained by another recipe, so that the
README's experiments table can show the old number beside the new one.

    python -m tools.keep_previous NAME --recipe "what trained the models" [--force]

Run it before the re-run (and, for a reference model, before its new ``card`` replaces the shipped one).
Reads ``results/NAME/experiment.json`` (as it stands, before the re-run) and writes
``results/previous-recipe/NAME.json`` (not in the report's folder, which a re-run replaces whole): per panel its model's store key and OMGPT's headline against its
reference -- the mean final regret and its paired ratio to ``alg-star`` where the panel has one, the
observation head's final MSE against ridge's on demand prediction, and a reference model's checksum.
``tools.readme_tables`` lists, for every panel whose model has changed since (its store key, or a reference
model's checksum), the previous number. An existing record is kept unless ``--force`` (a second re-run
must not overwrite the first recipe's numbers with the second's).
"""

from __future__ import annotations

import sys
from pathlib import Path

from omgpt.analysis.report import final_demand_errors, final_regrets
from omgpt.entry import Name, Text, entry_point, script_parser
from omgpt.errors import OMGPTError
from omgpt.files import write_json
from omgpt.records import RecordError, read_json

ROOT = Path(__file__).resolve().parents[1]


def previous_path(name: str) -> Path:
    """Where an experiment's previous recipe's numbers are kept."""
    return ROOT / "results" / "previous-recipe" / f"{name}.json"


def recorded() -> list[str]:
    """The experiments with a record in ``results/``."""
    return sorted(p.parent.name for p in (ROOT / "results").glob("*/experiment.json"))


def model_identity(key: str) -> dict:
    """What tells a model's versions apart: a store key hashes its whole recipe, but a reference model's key
    (``pretrained/NAME``) is only its name, so a re-shipped one is told apart by its card's checksum."""
    if not key.startswith("pretrained/"):
        return {"key": key}
    return {"key": key, "checksum": read_json(ROOT / key / "card.json", {"checksum": str}, "model card")["checksum"]}


def read_experiment(name: str) -> dict:
    """``results/NAME/experiment.json``, checked before anything is drawn from it: the report's own
    checks (:func:`omgpt.commands.experiment.read_report`: its skeleton, every number finite, each panel
    against its kind), then what :func:`previous_record` reads of each panel -- its model among the
    report's, and a regret panel's ``omgpt`` (and ``alg-star``, where OMGPT has a ratio to it)."""
    from omgpt.commands.experiment import read_report

    path = ROOT / "results" / name / "experiment.json"
    result = read_report(path, name)
    for i, panel in enumerate(result["panels"]):
        key = f"panels[{i}]"
        if panel["model"] not in result["models"]:
            raise RecordError(f"{path}: key '{key}.model': {panel['model']!r} is not one of the report's models")
        policies = panel.get("policies")
        if policies is None:  # a demand-prediction or real-demand panel (their kinds' schemas hold the rest)
            continue
        if "omgpt" not in policies:
            raise RecordError(f"{path}: key '{key}.policies': no 'omgpt' policy")
        if policies["omgpt"].get("ratio_to_alg_star") and "alg-star" not in policies:
            raise RecordError(f"{path}: key '{key}.policies': a ratio to alg-star, but no 'alg-star' policy")
    return result


def headline(panel: dict) -> dict:
    """One panel's OMGPT number against its reference (``alg-star``, or ridge on demand prediction)."""
    if "demand_prediction" in panel:  # two means, no paired ratio: both numbers, as the report gives them
        ours, ridge = final_demand_errors(panel)
        return {"metric": "obs-mse", "omgpt": ours, "reference": "ridge", "reference_value": ridge}
    finals = final_regrets(panel)
    out = {"metric": "regret", "omgpt": finals["omgpt"]}
    q = panel["policies"]["omgpt"].get("ratio_to_alg_star")  # a ratio only with its paired interval
    if q:
        out |= {
            "reference": "alg-star",
            "reference_value": finals["alg-star"],
            "ratio": q["mean"],
            "ratio_ci90": q["ci90"],
        }
    return out


def previous_record(result: dict, recipe: str) -> dict:
    """The kept record's content, from an experiment's record."""
    if "costs" in result["panels"][0]:
        raise OMGPTError(f"{result['name']}: real demand's panels have no single headline to keep")
    return {
        "experiment": result["name"],
        "recipe": recipe,
        "seed": result["seed"],
        "code_version": result.get("code_version"),
        "panels": [
            {
                "title": p["title"],
                "model": p["model"],
                **model_identity(result["models"][p["model"]]["key"]),
                **headline(p),
            }
            for p in result["panels"]
        ],
    }


@entry_point
def main(argv: list[str] | None = None) -> int:
    p = script_parser(__file__, __doc__)
    p.add_argument("name", type=Name(recorded), help="the experiment (results/NAME/experiment.json)")
    p.add_argument("--recipe", type=Text(), required=True, help="what trained its current models, in a few words")
    p.add_argument("--force", action="store_true", help="overwrite an existing record of the previous recipe")
    args = p.parse_args(argv)
    out = previous_path(args.name)
    if out.exists() and not args.force:
        raise OMGPTError(f"{out.relative_to(ROOT)} exists (the first recipe's numbers); --force replaces it")
    write_json(previous_record(read_experiment(args.name), args.recipe), out)
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
