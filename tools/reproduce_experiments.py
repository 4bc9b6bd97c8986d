"""Re-run the evaluation of committed experiments and check every number against ``results/NAME/experiment.json``:

    OMP_NUM_THREADS=1 python -m tools.reproduce_experiments [--check] [NAME ...]

Each experiment is evaluated again with the models its ``experiment.json`` names (``results/models/KEY``
or ``pretrained/NAME``: no training, no tuning), at its runs, seed and panels. A number reproduces when
it equals the committed one to 7 significant digits (:data:`REL_TOL`; the reports print 2-4); a key
the committed record lacks (a field added since) is not compared. ``--check`` only checks what needs
no evaluation: the checkpoints, the panels and the tuned constants are the committed run's. Exit code 1
if anything differs. About 13 minutes for all nine paper experiments on one CPU thread.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from pathlib import Path

from omgpt.commands.experiment import (
    ROOT,
    Experiment,
    ExperimentResult,
    ModelRecord,
    available,
    evaluate_panels,
    kind_of,
    load_experiment,
    parse_policies,
)
from omgpt.files import write_json
from omgpt.errors import OMGPTError
from omgpt.tuning import tuned_constants
from omgpt.entry import Name, entry_point, script_parser

# Not 1e-9: the last bits of a float sum differ between BLAS builds and runs, and the batched quantile
# regression (``qr`` on real demand) returns a point of the optimal face where a window's LP optimum is
# not unique, which those bits move. Measured: two runs of `real-demand` at one commit differed by 1e-9
# to 8e-9 (relative) in qr's numbers, and in nothing else.
REL_TOL = 1e-7


def differences(fresh, committed, path: str = "") -> list[str]:
    """Where ``fresh`` differs from ``committed`` (keys only ``fresh`` has are new fields, not compared;
    nor is the ``code_version`` a panel records: the commit that ran it, not a number)."""
    if isinstance(committed, dict) and isinstance(fresh, dict):
        return [
            d
            for k in committed
            if k != "code_version"
            for d in (differences(fresh[k], committed[k], f"{path}/{k}") if k in fresh else [f"{path}/{k}: missing"])
        ]
    if isinstance(committed, list) and isinstance(fresh, list):
        if len(fresh) != len(committed):
            return [f"{path}: {len(fresh)} items, committed {len(committed)}"]
        return [d for i, (a, b) in enumerate(zip(fresh, committed)) for d in differences(a, b, f"{path}[{i}]")]
    if isinstance(committed, float) and isinstance(fresh, (int, float)):
        return (
            []
            if math.isclose(fresh, committed, rel_tol=REL_TOL, abs_tol=1e-12)
            else [f"{path}: {fresh!r}, committed {committed!r}"]
        )
    return [] if fresh == committed else [f"{path}: {fresh!r}, committed {committed!r}"]


def problems_before_evaluating(
    name: str, committed: ExperimentResult, exp: Experiment, records: dict[str, ModelRecord]
) -> list[str]:
    """What makes a re-evaluation of the committed run pointless: a missing checkpoint, or a config whose
    panels, policies or tuned constants are no longer the committed run's."""
    problems = [f"no checkpoint {r['ckpt']}" for r in records.values() if not Path(r["ckpt"]).is_file()]
    if [p.title for p in exp.panels] != [p["title"] for p in committed["panels"]]:
        problems.append("the config's panels are not the committed run's")
    for panel, old in zip(exp.panels, committed["panels"]):
        if "policies" not in old:
            continue
        labels = sorted(old["policies"])
        if sorted(parse_policies(panel.policies, panel.model)) != labels:
            problems.append(f"{panel.title}: the config's policies are not the committed run's")
        now = {
            k: tuned_constants(k.removesuffix("-tuned"), "", {}, panel.horizon, panel.tuned_on)
            for k in labels
            if k.endswith("-tuned")
        }
        if now != old.get("tuned_constants", {}):
            problems.append(f"{panel.title}: tuned constants changed since the committed run")
    return problems


@entry_point
def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__file__, __doc__)
    parser.add_argument(
        "names",
        type=Name(available),
        nargs="*",
        help="experiments (default: every one with a committed experiment.json)",
    )
    parser.add_argument("--check", action="store_true", help="only check what needs no evaluation")
    args = parser.parse_args(argv)
    names = args.names or [n for n in available() if (ROOT / "results" / n / "experiment.json").is_file()]
    for name in names:  # every name checked before anything runs
        if not (ROOT / "results" / name / "experiment.json").is_file():
            raise OMGPTError(f"no committed results/{name}/experiment.json; experiments: {', '.join(available())}")
    bad = 0
    for name in names:
        committed = json.loads((ROOT / "results" / name / "experiment.json").read_text())
        exp = load_experiment(name, committed["scale"])
        records = {n: {**r, "ckpt": str(ROOT / r["ckpt"])} for n, r in committed["models"].items()}
        problems = problems_before_evaluating(name, committed, exp, records)
        if args.check or problems:
            print(f"{name}: {'; '.join(problems) or 'ready to re-evaluate'}", flush=True)
            bad += bool(problems)
            continue
        start = time.perf_counter()
        panels, _, _ = evaluate_panels(
            exp, kind=kind_of(exp), models=records, runs=committed["runs"], seed=committed["seed"], device="cpu"
        )
        with tempfile.TemporaryDirectory() as scratch:  # the panels as experiment.json holds them
            fresh = json.loads(write_json(panels, Path(scratch) / "panels.json").read_text())
        found = [
            d
            for p, old in zip(fresh, committed["panels"])
            for d in differences(p, old, p["title"])
            if not d.split("/")[-1].startswith("ckpt")
        ]  # a model's path names the machine it ran on
        bad += bool(found)
        print(
            f"{name}: {'every number reproduces' if not found else 'DIFFERS: ' + '; '.join(found[:5])} "
            f"({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
