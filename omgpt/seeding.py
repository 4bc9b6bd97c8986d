"""Seeds of independent random streams, one domain per use of randomness.

Every generator in the project that must not repeat another -- a fit's training histories (per epoch,
DDP rank and DataLoader worker), its validation environments, the test environments of an evaluation,
the benchmarks' tuning environments, the self-rollouts, the ``f~`` pool -- is seeded by
:func:`stream_seed` of a :class:`Stream` domain and the integer keys that tell its draws apart.

Two streams share a seed only if they share their domain AND every key: the keys are encoded with
their count and in fixed 64-bit words before ``numpy.random.SeedSequence`` mixes them. (SeedSequence
alone pads its entropy with zeros, so ``(s)``, ``(s, 0)`` and ``(s, 0, 0, 0)`` were one seed: a fit's
epoch-0 histories with ``data.seed = 0`` were the test environments of ``omgpt evaluate --seed 0``.)
"""

from __future__ import annotations

import enum

import numpy as np

_WORD = 2**32


class Stream(enum.IntEnum):
    """The domains of randomness. A new use of randomness gets a new member (never reuse a number:
    the value is part of every seed, so renumbering changes every stream)."""

    TRAINING = 1  # a fit's generated histories: (data.seed, epoch, rank, worker)
    F_TILDE_POOL = 2  # the fixed pool of f~ histories: (data.seed,)
    MIXED_PHASE = 3  # the mixed phase's draws from that pool: (data.seed, epoch, rank)
    LOADER = 4  # the DataLoader's own generator: (data.seed, epoch, rank)
    SELF_ROLLOUT = 5  # the environments the model plays in the mixed phase: (data.seed, epoch, rank)
    WINDOW_SLICE = 6  # where a context window cuts a training batch: (global seed, step, batch, rank)
    VALIDATION_ENVS = 7  # a fit's fixed validation environments: (val_seed,)
    VALIDATION_PLAY = 8  # their contexts and noise: (val_seed, first environment of the batch)
    TEST_ENVS = 9  # evaluate's environments: (seed,)
    TEST_TASK = 10  # their contexts and noise: (seed, chunk)
    TEST_POLICY = 11  # the policies' own randomness: (seed, chunk)
    TUNING_ENVS = 12  # a benchmark's tuning environments (evaluate_policies on a validation seed): (seed,)
    TUNING_TASK = 13  # (seed, chunk)
    TUNING_POLICY = 14  # (seed, chunk)
    REGRET_ROLLOUT = 15  # regret fine-tuning's own rollouts: (global seed, step, rank)
    REGRET_HEAD = 16  # the stochastic head's draws in them: (that rollout's seed, group member)


def stream_entropy(domain: Stream, *keys: int) -> list[int]:
    """The words ``stream_seed`` mixes: the domain, the number of keys, then each key as two 32-bit
    words. Injective: distinct ``(domain, keys)`` give distinct lists, whatever SeedSequence pads."""
    words = [int(Stream(domain)), len(keys)]
    for k in keys:
        k = int(k)
        if not 0 <= k < _WORD * _WORD:
            raise ValueError(f"stream keys are integers in [0, 2**64); got {k}")
        words += [k % _WORD, k // _WORD]
    return words


def stream_seed(domain: Stream, *keys: int) -> int:
    """A well-mixed 63-bit seed for the stream ``domain`` with integer ``keys`` (seed, epoch, rank, ...)."""
    return int(np.random.SeedSequence(stream_entropy(domain, *keys)).generate_state(1, np.uint64)[0] >> 1)


# --------------------------------------------------------------------------------------------------
# The evaluation protocol (docs/protocol.md): every choice -- a checkpoint, a model's
# depth or steps, a recipe, a benchmark's tuned constants -- is made on environments drawn from a
# VALIDATION seed; every reported number comes from a TEST seed. The two ranges are disjoint, so a
# number on a test seed is never one something was chosen on; the streams' domains keep both apart
# from the training data whatever the seeds.
TEST_SEEDS = range(0, 10_000)  # omgpt evaluate, omgpt experiment, reference-model cards
VALIDATION_SEEDS = range(10_000, 20_000)  # OMGPTModule's val_seed, omgpt tune
# Test seeds something was once chosen on: refused, so no reported number comes from them again.
BURNED_SEEDS = {1: "the pricing reference model's depth and length were chosen on it"}
CARD_SEED = 2  # reference cards' test environments (replication: CARD_SEED + 1)
# omgpt demo's test environments. Not seed 0: the demo's recipe was kept over batch 32 by comparing the two
# on seed 0's first 100 demo environments (benchmarks/RESULTS.md, "Time to quality"), so those chose
# something; seed 4 holds the 200-environment check (results/demo/test200).
DEMO_SEED = 5
TUNING_SEED = 10_001  # omgpt tune's default validation environments
# (The default val_seed of a fit, 10,000, is the first validation seed.)


def evaluation_streams(seed: int) -> tuple[Stream, Stream, Stream]:
    """The (environments, task, policy) domains of an evaluation on ``seed``: a validation seed is a
    choice (tuning), anything else a measurement (test)."""
    if int(seed) in VALIDATION_SEEDS:
        return Stream.TUNING_ENVS, Stream.TUNING_TASK, Stream.TUNING_POLICY
    return Stream.TEST_ENVS, Stream.TEST_TASK, Stream.TEST_POLICY


def _check(seed: int, allowed: range, kind: str, other: str, what: str) -> int:
    from omgpt.errors import OMGPTError

    if int(seed) not in allowed:
        raise OMGPTError(
            f"{what} {seed} is not a {kind} seed: {kind} seeds are {allowed.start}-{allowed.stop - 1} "
            f"({other}; choices and reported numbers stay on disjoint seeds)"
        )
    return int(seed)


def check_test_seed(seed: int, what: str = "seed") -> int:
    """``seed`` if it is a test seed (every reported number) not burned, else :class:`OMGPTError`."""
    from omgpt.errors import OMGPTError

    seed = _check(seed, TEST_SEEDS, "test", "reported numbers", what)
    if seed in BURNED_SEEDS:
        raise OMGPTError(f"{what} {seed} is a burned test seed ({BURNED_SEEDS[seed]}): take another test seed")
    return seed


def check_validation_seed(seed: int, what: str = "seed") -> int:
    """``seed`` if it is a validation seed (every choice: checkpoints, tuning), else :class:`OMGPTError`."""
    return _check(seed, VALIDATION_SEEDS, "validation", "checkpoint selection, tuning and every other choice", what)
