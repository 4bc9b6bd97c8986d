"""The collapsed sampler's repair, on and off, against ``smc``: paired regret on one seed's episodes.

    python benchmarks/alg_star_repair.py [--runs 1000] [--seed 10007] [--horizon 100] [--top 6]

``alg-star``'s collapsed sampler (the uncensored newsvendor's default) re-seeds an episode whose new
observation no particle explains (:meth:`~omgpt.policies.alg_star_samplers.CollapsedNoiseSampler._repair`);
without the repair it ignores that observation. This script plays the same episodes (common random
numbers, ``omgpt evaluate``'s loop, one thread) with the repair, without it (patched out here) and
with ``sampler="smc"``, and prints each arm's mean cumulative regret at the horizon with its standard
error, the paired differences, and the episodes where the arms differ most (the repair's wins and
losses). Use a validation seed (10,000 and up): the test seeds are for reported numbers.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

import omgpt.policies.alg_star_samplers as samplers
from omgpt.evaluation import evaluate_policies
from omgpt.tasks import make_task
from omgpt.entry import Integer, Seed, entry_point, script_parser


def regrets(task, options: dict, runs: int, horizon: int, seed: int, repair: bool = True) -> np.ndarray:
    """Cumulative regret at ``horizon`` per episode of ``alg-star`` with ``options``."""
    original = samplers.CollapsedNoiseSampler._repair
    if not repair:
        samplers.CollapsedNoiseSampler._repair = lambda self, rows, t: None  # the observation is ignored
    try:
        history = evaluate_policies(task, {"alg-star": options}, runs, horizon, seed, 50, "cpu", False, 1)["alg-star"]
    finally:
        samplers.CollapsedNoiseSampler._repair = original
    return history.cumulative_regret()[:, -1].double().numpy()


@entry_point
def main(argv: list[str] | None = None) -> dict:
    p = script_parser(__file__, __doc__)
    p.add_argument("--runs", type=Integer(1, 1_000_000), default=1000)
    p.add_argument("--seed", type=Seed("validation"), default=10_007)
    p.add_argument("--horizon", type=Integer(1, 100_000), default=100)
    p.add_argument(
        "--top", type=Integer(1, 1_000_000), default=6, help="episodes to list where the repair changes most"
    )
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    task = make_task("newsvendor")
    arms = {
        "collapsed, repair": regrets(task, {"sampler": "collapsed"}, a.runs, a.horizon, a.seed),
        "collapsed, no repair": regrets(task, {"sampler": "collapsed"}, a.runs, a.horizon, a.seed, repair=False),
        "smc": regrets(task, {"sampler": "smc"}, a.runs, a.horizon, a.seed),
    }
    se = lambda r: r.std() / np.sqrt(len(r))  # noqa: E731
    print(f"newsvendor, {a.runs} episodes of seed {a.seed}, T = {a.horizon}: cumulative regret at T")
    for name, r in arms.items():
        print(f"  {name:22} {r.mean():7.3f} ± {se(r):.3f}   largest {r.max():6.1f}")
    fix, off, smc = arms.values()
    for name, d in (("repair - no repair", fix - off), ("repair - smc", fix - smc)):
        print(f"  {name:22} {d.mean():+7.3f} ± {se(d):.3f}")
    print("  episodes where the repair changes most (repair / no repair / smc):")
    for i in np.argsort(-np.abs(fix - off))[: a.top]:
        print(f"    {i:5d}  {fix[i]:6.1f} {off[i]:6.1f} {smc[i]:6.1f}")
    return {name: float(r.mean()) for name, r in arms.items()}


if __name__ == "__main__":
    sys.exit(main())
