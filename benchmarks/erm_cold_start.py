"""ERM with few samples: the exact quantile-regression LP against L1-penalised fits.

    python benchmarks/erm_cold_start.py [--runs 200] [--horizon 100] [--l1 0,0.3,1,3] [--seed 0]

With ``t ≤ d + 1`` past samples the unpenalised LP (``l1 = 0``) interpolates them with an extreme
vertex; a penalty ``l1·‖slopes‖₁`` on the summed pinball loss picks a moderate fit instead (see
``omgpt.policies.newsvendor``). Every variant plays the same test environments of the full
newsvendor prior with common random numbers and the same first order (``w~_0 ~ U[0,3]^d``), so the
curves differ only by the fit. Prints the mean ``|a - a*|`` at steps 1-10 and the mean final
cumulative regret (with its standard error) per ``l1``.

Measured (2-core CPU, one thread, the default command): see ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import sys

import torch

from omgpt.seeding import EXPERIMENT_SEED, Stream, stream_seed
from omgpt.policies.newsvendor import ERM
from omgpt.rollout import rollout
from omgpt.tasks import make_task
from omgpt.entry import Integer, Numbers, Real, Seed, entry_point, script_parser


@entry_point
def main(argv: list[str] | None = None) -> None:
    p = script_parser(__file__, __doc__)
    p.add_argument("--runs", type=Integer(1, 1_000_000), default=200)
    p.add_argument("--horizon", type=Integer(1, 100_000), default=100)
    p.add_argument("--l1", type=Numbers(Real(0, 1e6)), default="0,0.3,1,3", help="comma-separated penalties to compare")
    p.add_argument("--seed", type=Seed("test"), default=EXPERIMENT_SEED)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    task = make_task("newsvendor")
    envs = task.sample_envs(args.runs, torch.Generator().manual_seed(stream_seed(Stream.TEST_ENVS, args.seed)))
    print(f"newsvendor, full prior, {args.runs} runs, horizon {args.horizon}")
    print(f"{'l1':>5}  " + "  ".join(f"t={t:<3d}" for t in range(1, 11)) + "   final regret")
    for l1 in (float(v) for v in args.l1.split(",")):
        history = rollout(
            task,
            envs,
            ERM(task, l1=l1),
            args.horizon,
            torch.Generator().manual_seed(stream_seed(Stream.TEST_TASK, args.seed, 0)),
            torch.Generator().manual_seed(stream_seed(Stream.TEST_POLICY, args.seed, 0)),
        )
        early = history.suboptimality[:, :10].mean(0)
        final = history.cumulative_regret()[:, -1]
        sem = final.std() / args.runs**0.5
        print(f"{l1:5.2g}  " + "  ".join(f"{v:5.2f}" for v in early.tolist()) + f"   {final.mean():.2f} ± {sem:.2f}")


if __name__ == "__main__":
    sys.exit(main())
