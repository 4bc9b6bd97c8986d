"""Where ``alg-star``'s CPU time goes: cProfile of one batch of episodes (default 50 x T = 100, one thread).

    python benchmarks/alg_star_profile.py [--task pricing] [--batch 50] [--horizon 100] [--top 18]
        [--likelihood stats] [--particles 4096] [--moves 2] [--sort tottime]

Prints the functions sorted by their own time (``tottime``). cProfile sees torch ops as the built-in
methods that call them, so the table says which tensor op costs and ``_resample_move`` / ``observe`` /
``decide`` (cumulative) say in which part of a step.
"""

from __future__ import annotations

import sys
import cProfile
import pstats

import torch

from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.seeding import EXPERIMENT_SEED, Stream, stream_seed
from omgpt.tasks import TASKS, make_task
from omgpt.entry import Integer, Name, Seed, Text, entry_point, script_parser


@entry_point
def main(argv: list[str] | None = None) -> None:
    p = script_parser(__file__, __doc__)
    p.add_argument("--task", type=Name(lambda: sorted(TASKS)), default="pricing")
    p.add_argument("--batch", type=Integer(1, 1_000_000), default=50)
    p.add_argument("--horizon", type=Integer(1, 100_000), default=100)
    p.add_argument("--likelihood", type=Name(["stats", "history"]), default="stats")
    p.add_argument("--particles", type=Integer(1, 10_000_000), default=4096)
    p.add_argument("--moves", type=Integer(0, 1000), default=2)
    p.add_argument("--top", type=Integer(1, 1_000_000), default=18)
    p.add_argument("--sort", type=Text(), default="tottime", help="pstats order: tottime (own time) or cumulative")
    p.add_argument("--seed", type=Seed("test"), default=EXPERIMENT_SEED)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    task = make_task(a.task)
    envs = task.sample_envs(a.batch, torch.Generator().manual_seed(stream_seed(Stream.TEST_ENVS, a.seed)))
    policy = make_policy("alg-star", task, particles=a.particles, moves=a.moves, likelihood=a.likelihood, sampler="smc")
    task_gen = torch.Generator().manual_seed(stream_seed(Stream.TEST_TASK, a.seed, 0))
    policy_gen = torch.Generator().manual_seed(stream_seed(Stream.TEST_POLICY, a.seed, 0))
    profile = cProfile.Profile()
    profile.enable()
    rollout(task, envs, policy, a.horizon, task_gen, policy_gen)
    profile.disable()
    print(
        f"alg-star on {a.task}: {a.batch} episodes, T = {a.horizon}, likelihood={a.likelihood!r}, {a.particles} particles, {a.moves} moves, one thread; "
        f"rejuvenations per episode {policy.rejuvenations.double().mean():.1f}"
    )
    pstats.Stats(profile).sort_stats(a.sort).print_stats(a.top)


if __name__ == "__main__":
    sys.exit(main())
