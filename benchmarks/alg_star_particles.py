"""Is ``alg-star``'s default particle count enough? Its regret against a set ``--factor`` times larger.
With ``--speed``: how much faster its likelihood statistics make it than replaying the history.

    python benchmarks/alg_star_particles.py [--task pricing] [--runs 500] [--horizon 100]
        [--particles 4096] [--factor 4] [--batch 50] [--seed 0] [--device cpu] [--threads 1]
        [--no-rejuvenate]
    python benchmarks/alg_star_particles.py --speed [--tasks newsvendor,pricing] [--runs 100] ...
    python benchmarks/alg_star_particles.py --speed --erm [--tasks newsvendor] [--runs 100] ...

``--speed`` plays the same environments, contexts and noise (common random numbers) with
``likelihood="history"`` (the rejuvenation moves sum the likelihood over the past steps: the reference,
an ``O(T²)`` episode) and ``likelihood="stats"`` (from the task's running statistics), the two arms
interleaved batch by batch in this one process, and prints for each task the CPU seconds (process
time; single-threaded with ``--threads 1``) per 100 episodes of each, their ratio, each arm's mean
cumulative regret and a 90% interval of the paired difference. ``--speed --erm`` does the same for
ERM: ``solver="highs"`` (one LP per environment and step, the reference) against ``solver="ipm"`` (every
environment's LP of a step at once).

Without a finite pool ``alg-star`` weights ``particles`` environments drawn from the prior. Both
particle counts play the same test environments with the same contexts and noise (common random
numbers, as ``omgpt evaluate``); the script prints each one's mean cumulative regret at the horizon
with its standard error, the ratio default / larger, and a 95% interval of the paired difference.
``--no-rejuvenate`` studies plain importance sampling (``rejuvenate=False``) instead of the default
resample-move particles; ``--sampler gaussian`` / ``collapsed`` a structured sampler's particle count.

Measured (2-core CPU, one thread, ``--runs 500``; the default command):
4096 particles 4.591 ± 0.180, 16384 particles 4.558 ± 0.180, ratio 1.007, paired difference 0.033
(95% interval -0.079 .. 0.146). With ``--no-rejuvenate``: 7.888 ± 0.330 against 6.954 ± 0.276, ratio 1.134.
"""

from __future__ import annotations

import sys
import time

import torch

from omgpt.seeding import EXPERIMENT_SEED, Stream, stream_seed
from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.tasks import TASKS, make_task
from omgpt.entry import Device, Integer, Name, Names, Seed, entry_point, script_parser


def batch_regrets(task, envs, policy, horizon: int, seed: int, i: int, device: str) -> torch.Tensor:
    """Cumulative regret at ``horizon`` of ``policy`` on batch ``i`` of the runs (its own seeds)."""
    task_gen = torch.Generator(device=device).manual_seed(stream_seed(Stream.TEST_TASK, seed, i))
    policy_gen = torch.Generator(device=device).manual_seed(stream_seed(Stream.TEST_POLICY, seed, i))
    return rollout(task, envs, policy, horizon, task_gen, policy_gen).regrets.sum(1).cpu().double()


def batches(envs, batch: int):
    """``(i, the i-th batch of envs)`` over the runs."""
    runs = next(iter(envs.values())).shape[0]
    for i, lo in enumerate(range(0, runs, batch)):
        yield i, {k: v[lo : lo + batch] for k, v in envs.items()}


def cumulative_regrets(
    task, envs, particles: int, horizon: int, batch: int, seed: int, device: str, rejuvenate: bool = True, sampler="smc"
) -> torch.Tensor:
    """Cumulative regret at ``horizon`` of ``alg-star`` with ``particles``, one value per run, ``(runs,)``."""
    policy = make_policy("alg-star", task, particles=particles, rejuvenate=rejuvenate, sampler=sampler)
    return torch.cat([batch_regrets(task, part, policy, horizon, seed, i, device) for i, part in batches(envs, batch)])


def paired(before: torch.Tensor, after: torch.Tensor, z: float = 1.645) -> str:
    """Means of two paired samples and a (90% by default) interval of the mean difference."""
    diff = after - before
    half = z * diff.std() / diff.numel() ** 0.5
    return (
        f"regret {before.mean():.3f} -> {after.mean():.3f}, ratio {after.mean() / before.mean():.3f}, "
        f"paired difference {diff.mean():+.3f} (90% interval {diff.mean() - half:+.3f} .. {diff.mean() + half:+.3f})"
    )


def speed(a) -> None:
    """``--speed``: the reference arm against the fast one, interleaved batch by batch."""
    if a.erm:
        policy, option, (before, after), what = (
            "erm",
            "solver",
            ("highs", "ipm"),
            "erm: solver 'highs' (reference) vs 'ipm'",
        )
    else:
        policy, option, (before, after) = "alg-star", "likelihood", ("history", "stats")
        what = f"alg-star, {a.particles} particles: likelihood 'history' (reference) vs 'stats'"
    # CPU seconds on a CPU (what one core costs, whatever else runs); wall seconds on a GPU, whose work the
    # process clock does not see.
    gpu = torch.device(a.device).type != "cpu"
    clock = time.perf_counter if gpu else time.process_time
    unit = "wall seconds" if gpu else "CPU seconds (process time)"
    print(f"{what}; {a.runs} runs, T = {a.horizon}, batches of {a.batch}, {a.threads} thread(s); {unit}")
    for name in a.tasks.split(","):
        task = make_task(name)
        envs = task.sample_envs(
            a.runs, torch.Generator(device=a.device).manual_seed(stream_seed(Stream.TEST_ENVS, a.seed))
        )
        sizes = {} if a.erm else {"particles": a.particles, "sampler": "smc"}  # the particles' two likelihoods
        arms = {arm: make_policy(policy, task, **sizes, **{option: arm}) for arm in (before, after)}
        seconds, regrets = {arm: 0.0 for arm in arms}, {arm: [] for arm in arms}
        for i, part in batches(envs, a.batch):
            for arm, played in arms.items():
                start = clock()
                regrets[arm].append(batch_regrets(task, part, played, a.horizon, a.seed, i, a.device).cpu())
                seconds[arm] += clock() - start
        per100 = {arm: 100 * s / a.runs for arm, s in seconds.items()}
        print(
            f"  {name}: {per100[before]:.1f} s -> {per100[after]:.1f} s per 100 episodes "
            f"({per100[before] / per100[after]:.1f}x faster); {paired(torch.cat(regrets[before]), torch.cat(regrets[after]))}"
        )


@entry_point
def main(argv: list[str] | None = None) -> None:
    p = script_parser(__file__, __doc__)
    p.add_argument("--task", type=Name(lambda: sorted(TASKS)), default="pricing")
    p.add_argument("--runs", type=Integer(1, 1_000_000), default=500)
    p.add_argument("--horizon", type=Integer(1, 100_000), default=100)
    p.add_argument("--particles", type=Integer(1, 10_000_000), default=4096, help="the default particle count")
    p.add_argument("--factor", type=Integer(1, 1000), default=4, help="the larger set has factor x particles")
    p.add_argument(
        "--batch", type=Integer(1, 1_000_000), default=50, help="runs rolled out at once (omgpt evaluate's default)"
    )
    p.add_argument("--seed", type=Seed("test"), default=EXPERIMENT_SEED)
    p.add_argument("--device", type=Device(), default="cpu")
    p.add_argument("--threads", type=Integer(1, 256), default=1, help="torch intra-op threads")
    p.add_argument("--no-rejuvenate", action="store_true", help="plain importance sampling from the prior")
    p.add_argument(
        "--sampler",
        type=Name(["smc", "gaussian", "collapsed", "auto"]),
        default="smc",
        help="alg-star's sampler (smc, gaussian, collapsed, auto)",
    )
    p.add_argument("--speed", action="store_true", help="time likelihood='history' against 'stats' instead")
    p.add_argument(
        "--tasks",
        type=Names(lambda: sorted(TASKS)),
        default=None,
        help="--speed: the tasks to time (default newsvendor,pricing; --erm: newsvendor)",
    )
    p.add_argument("--erm", action="store_true", help="--speed: time ERM's solvers instead of alg-star's likelihoods")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.speed:
        a.tasks = a.tasks or ("newsvendor" if a.erm else "newsvendor,pricing")
        return speed(a)
    task = make_task(a.task)
    envs = task.sample_envs(a.runs, torch.Generator(device=a.device).manual_seed(stream_seed(Stream.TEST_ENVS, a.seed)))
    kind = "plain importance sampling" if a.no_rejuvenate else "resample-move particles"
    kind = kind if a.sampler == "smc" else f"sampler {a.sampler!r}"
    print(f"alg-star ({kind}) on {a.task}: {a.runs} runs, T = {a.horizon}, cumulative regret at T (mean ± s.e.)")
    regrets = {}
    for n in (a.particles, a.factor * a.particles):
        start = time.perf_counter()
        regrets[n] = r = cumulative_regrets(
            task, envs, n, a.horizon, a.batch, a.seed, a.device, not a.no_rejuvenate, a.sampler
        )
        print(
            f"  particles = {n:>6}: {r.mean():8.3f} ± {r.std() / r.numel() ** 0.5:.3f}   ({time.perf_counter() - start:.1f} s)"
        )
    small, large = regrets[a.particles], regrets[a.factor * a.particles]
    diff = small - large
    half = 1.96 * diff.std() / diff.numel() ** 0.5
    print(f"  ratio default / {a.factor}x = {small.mean() / large.mean():.3f}")
    print(
        f"  paired difference = {diff.mean():.3f} (95% interval {diff.mean() - half:.3f} .. {diff.mean() + half:.3f})"
    )


if __name__ == "__main__":
    sys.exit(main())
