"""Queueing checkpoints trained on different targets, against ``ce`` and ``alg-star`` on test environments.

    python benchmarks/queueing_target.py --checkpoint supervised=pretrained/queueing \\
        --checkpoint bayes-action=runs/queueing-bayes/queueing/version_0/checkpoints/last.ckpt [--runs 1000] [--seed 7]

Every checkpoint and both benchmarks play the same test environments with common random numbers
(``evaluate_policies``). The script prints each one's mean final regret, each checkpoint's paired ratio to
``ce`` and to ``alg-star`` (90% paired bootstrap intervals, :func:`omgpt.analysis.report.paired_ratio`),
and the paired difference of each checkpoint to the first. ``model.target: bayes_action`` trains on the
rate of highest posterior-expected value (``docs/recipe.md``); the paper's target, ``optimal_action``, on
the candidates' optimal rate, whose squared loss's Bayes decision is their posterior mean, rounded.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omgpt.analysis.report import paired_difference, paired_ratio
from omgpt.entry import Checkpoint, Integer, Named, Seed, entry_point, script_parser
from omgpt.errors import OMGPTError
from omgpt.evaluation import evaluate_policies
from omgpt.model import load_model


ROOT = Path(__file__).resolve().parents[1]


@entry_point
def main(argv: list[str] | None = None) -> None:
    p = script_parser(__file__, __doc__)
    p.add_argument(
        "--checkpoint",
        action="append",
        type=Named(Checkpoint()),
        help="NAME=CKPT (repeatable; default: supervised=pretrained/queueing, the reference model)",
    )
    p.add_argument("--runs", type=Integer(1, 1_000_000), default=1000)
    p.add_argument("--seed", type=Seed("test"), default=6)

    @p.check
    def queueing_models(args) -> None:  # one setting for every checkpoint, before any work
        args.checkpoint = args.checkpoint or [("supervised", ROOT / "pretrained" / "queueing" / "model.ckpt")]
        args.trained = {name: load_model(path) for name, path in args.checkpoint}
        settings = {(t.task.name, t.model.cfg.max_steps) for t in args.trained.values()}
        if len(settings) != 1 or next(iter(settings))[0] != "queueing":
            raise OMGPTError(
                f"--checkpoint: every checkpoint must be a queueing model of one horizon, got {sorted(settings)}"
            )
        if len(args.trained) != len(args.checkpoint):
            raise OMGPTError("--checkpoint: each NAME once")

    args = p.parse_args(argv)
    trained = args.trained
    first = next(iter(trained.values()))
    task, horizon = first.task, first.model.cfg.max_steps
    players = {name: ("omgpt", {"model": t.model}) for name, t in trained.items()}
    players |= {"ce": ("ce", {}), "alg-star": ("alg-star", {})}
    final = {}
    for label, (name, options) in players.items():
        history = evaluate_policies(task, {name: options}, args.runs, horizon, args.seed, progress=False)[name]
        final[label] = history.cumulative_regret()[:, -1].double().numpy()
    print(f"queueing, {args.runs} test environments (seed {args.seed}), T = {horizon}: final regret")
    reference = next(iter(trained))
    for label, v in final.items():
        line = f"{label:>16}: {v.mean():6.2f}"
        if label in trained:
            for to in ("ce", "alg-star"):
                line += f"   / {to} {ratio(paired_ratio(v, final[to]))}"
            if label != reference:
                d = paired_difference(v, final[reference])
                ci = "" if d["ci90"] is None else f" [{d['ci90'][0]:+.2f}, {d['ci90'][1]:+.2f}]"
                line += f"   - {reference} {d['mean']:+.2f}{ci}"
        print(line)


def ratio(r: dict) -> str:
    """A paired ratio with its interval; none where the reference's mean regret is not positive."""
    if r["mean"] is None:
        return "n/a (its mean regret is not positive)"
    if r["ci90"] is None:
        return f"{r['mean']:.2f}x"
    hi = "inf" if r["ci90"][1] is None else f"{r['ci90'][1]:.2f}"
    return f"{r['mean']:.2f}x [{r['ci90'][0]:.2f}, {hi}]"


if __name__ == "__main__":
    sys.exit(main())
