"""Seeds of independent random streams, derived from integer keys.

Every generator in the project that must not repeat another -- DDP ranks, DataLoader workers, epochs,
evaluation batches, the window slices of training -- is seeded by :func:`stream_seed` of the keys
that tell it apart, so two streams share a seed only if they share every key.
"""
from __future__ import annotations

import numpy as np


def stream_seed(*keys: int) -> int:
    """A well-mixed 63-bit seed from integer keys (seed, epoch, rank, worker, ...)."""
    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1, np.uint64)[0] >> 1)


# --------------------------------------------------------------------------------------------------
# The evaluation protocol (SPEC §7): every choice -- a checkpoint, a model's depth or steps, a recipe,
# a benchmark's tuned constants -- is made on environments drawn from a VALIDATION seed; every reported
# number comes from a TEST seed. The two ranges are disjoint, so a number on a test seed is never one
# something was chosen on. (Training data come from the fit's own seed through other stream keys.)
TEST_SEEDS = range(0, 10_000)  # omgpt evaluate, omgpt experiment, reference-model cards
VALIDATION_SEEDS = range(10_000, 20_000)  # OMGPTModule's val_seed, omgpt tune
CARD_SEED = 2  # reference cards' test environments (seed 1 was the one the pricing model was chosen on)
TUNING_SEED = 10_001  # omgpt tune's default validation environments
# (The default val_seed of a fit, 10,000, is the first validation seed.)


def _check(seed: int, allowed: range, kind: str, other: str, what: str) -> int:
    from omgpt.errors import OMGPTError

    if int(seed) not in allowed:
        raise OMGPTError(f"{what} {seed} is not a {kind} seed: {kind} seeds are {allowed.start}-{allowed.stop - 1} "
                         f"({other}; SPEC §7 keeps choices and reported numbers on disjoint seeds)")
    return int(seed)


def check_test_seed(seed: int, what: str = "seed") -> int:
    """``seed`` if it is a test seed (every reported number), else :class:`OMGPTError`."""
    return _check(seed, TEST_SEEDS, "test", "reported numbers", what)


def check_validation_seed(seed: int, what: str = "seed") -> int:
    """``seed`` if it is a validation seed (every choice: checkpoints, tuning), else :class:`OMGPTError`."""
    return _check(seed, VALIDATION_SEEDS, "validation", "checkpoint selection, tuning and every other choice", what)
