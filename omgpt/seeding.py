"""Seeds of independent random streams, one domain per use of randomness.

Every generator in the project that must not repeat another -- a fit's training histories (per epoch,
DDP rank and DataLoader worker), its validation environments, the test environments of an evaluation,
the benchmarks' tuning environments, the self-rollouts, the ``f~`` pool -- is seeded by
:func:`stream_seed` of a :class:`Stream` domain and the integer keys that tell its draws apart.

Two streams share a seed only if they share their domain AND every key: the keys are encoded with
their count and in fixed 64-bit words before ``numpy.random.SeedSequence`` mixes them. (SeedSequence
alone pads its entropy with zeros, so ``(s)``, ``(s, 0)`` and ``(s, 0, 0, 0)`` would be one seed.)

PyTorch's CPU generator keeps only the low 32 bits of a seed (``manual_seed(s)`` and
``manual_seed(s + 2**32)`` draw alike), so those 32 bits are laid out to keep streams apart where it
matters, not left to a hash: the low 5 bits are the domain (streams of different domains -- training
data and test environments, an episode's environments and its noise -- never coincide), the next 27
an invertible mix of the keys where they fit a fixed layout (one key below ``2**26``: a seed; two keys
below ``2**15`` and ``2**11``: a seed and a chunk), so that within such a domain every seed of the
test and validation ranges has its own stream. Longer keys (a fit's seed, epoch, rank, worker) take
27 bits of the hash there. The high 31 bits are the hash's (CUDA's generator keeps all 64).
"""

from __future__ import annotations

import enum

import numpy as np

_WORD = 2**32
_DOMAIN_BITS = 5
_FIELD_BITS = 32 - _DOMAIN_BITS
_FIELD = 2**_FIELD_BITS - 1


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
    # Regret fine-tuning's own rollouts, each draw on its own stream (one seed for the environments
    # and the task noise made the noise repeat the environments' draws: the first context held ``w``).
    REGRET_ENVS = 15  # the environments rolled out: (global seed, step, rank)
    REGRET_HEAD = 16  # the stochastic head's draws: (global seed, step, rank, group member)
    REGRET_TASK = 17  # their contexts and noise, common to a group's rollouts: (global seed, step, rank)
    POSTERIOR_TARGETS = 18  # model.target posterior's particles: (global seed, step, batch index, rank)
    # The interpretability analyses (probes, t-SNE, manipulation, the training-OOD map): their own
    # environments, apart from evaluate's on the same seed; one AnalysisPart per data set of an analysis.
    ANALYSIS_ENVS = 19  # (seed, part)
    ANALYSIS_TASK = 20  # their contexts and noise: (seed, part, first environment of the batch)
    ANALYSIS_POLICY = 21  # the policies' own draws: (seed, part, first environment of the batch)


class AnalysisPart(enum.IntEnum):
    """The data sets of the interpretability analyses, a key of the ANALYSIS streams: one seed gives
    each its own environments (a probe is scored on environments it was not fitted on)."""

    PROBE_FIT = 0
    PROBE_TEST = 1
    TSNE = 2
    MANIPULATION = 3
    TRAINING_OOD = 4
    REFERENCE = 5  # a reference estimator's own draws (Alg*'s particles, fed a probe's test histories)


assert max(Stream) < 2**_DOMAIN_BITS, "a domain must fit the seed's low bits (stream_seed)"


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


def _packed(keys: tuple[int, ...]) -> int | None:
    """The keys in 26 bits plus a layout bit, where they fit one of the two layouts; else ``None``."""
    if len(keys) == 1 and 0 <= keys[0] < 2**26:
        return int(keys[0])
    if len(keys) == 2 and 0 <= keys[0] < 2**15 and 0 <= keys[1] < 2**11:
        return 2**26 | int(keys[0]) << 11 | int(keys[1])
    return None


def _mix(x: int) -> int:
    """A bijection of ``[0, 2**27)`` that spreads nearby keys apart (odd multipliers and xor-shifts are
    invertible modulo a power of two)."""
    for mult in (0x5BD1E99, 0x3C6EF35):
        x = (x * mult) & _FIELD
        x ^= x >> 13
    return x


def stream_seed(domain: Stream, *keys: int) -> int:
    """A 63-bit seed for the stream ``domain`` with integer ``keys`` (seed, epoch, rank, ...), laid out
    for the 32 bits torch's CPU generator keeps (module docstring): the domain, then the keys."""
    domain = Stream(domain)
    h = int(np.random.SeedSequence(stream_entropy(domain, *keys)).generate_state(1, np.uint64)[0] >> 1)
    packed = _packed(tuple(int(k) for k in keys))
    field = _mix(packed) if packed is not None else (h >> _DOMAIN_BITS) & _FIELD
    return (h >> 32) << 32 | field << _DOMAIN_BITS | int(domain)


def torch_bits(seed: int) -> int:
    """What a CPU ``torch.Generator`` keeps of ``seed``: its low 32 bits."""
    return int(seed) & (_WORD - 1)


# --------------------------------------------------------------------------------------------------
# The evaluation protocol (docs/protocol.md): every choice -- a checkpoint, a model's
# depth or steps, a recipe, a benchmark's tuned constants -- is made on environments drawn from a
# VALIDATION seed; every reported number comes from a TEST seed. The two ranges are disjoint, so a
# number on a test seed is never one something was chosen on; the streams' domains keep both apart
# from the training data whatever the seeds.
TEST_SEEDS = range(0, 10_000)  # omgpt evaluate, omgpt experiment, reference-model cards
VALIDATION_SEEDS = range(10_000, 20_000)  # OMGPTModule's val_seed, omgpt tune
# Test seeds something was once chosen on: refused, so no reported number comes from them again.
BURNED_SEEDS = {
    0: "the demo's batch size, alg-star's collapsed-sampler repair (its episode 43) and beyond-alg-star's "
    "model-selection rule were chosen on it",
    1: "the pricing reference model's depth and length were chosen on it",
    2: "the old reference cards' ratios on it (1.19x, 1.26x, 1.45x alg-star) chose which cards to retrain, and it "
    "judged whether the retrained cards met their goal",
    6: "the experiments' pool models, demand prediction's heads and the fine-tuned children were retrained "
    "because of their numbers on it, and their recipes were compared on it",
}
EXPERIMENT_SEED = 7  # the default test seed of omgpt evaluate and omgpt experiment (6 until it was burned)
CARD_SEED = 8  # reference cards' test environments (replication: CARD_SEED + 1; 2 and 3 until 2 was burned)
DEMO_SEED = 5  # omgpt demo's test environments; seed 4 holds its 200-environment check (results/demo/test200)
TUNING_SEED = 10_001  # omgpt tune's default validation environments
PILOT_SEED = 10_004  # the validation environments that size an experiment panel's test runs
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
