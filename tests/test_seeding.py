"""Random streams cannot coincide: every use of randomness has its own domain, and keys are encoded so
that ``(s)``, ``(s, 0)`` and ``(s, 0, 0)`` differ (numpy's SeedSequence alone pads keys with zeros).
Uniqueness is checked in the bits torch's CPU generator keeps of a seed (its low 32), not in the
63-bit value: two seeds equal there draw the same stream."""

import itertools

import pytest
import torch

from omgpt import seeding
from omgpt.errors import OMGPTError
from omgpt.seeding import Stream, stream_entropy, stream_seed, torch_bits
from omgpt.tasks import make_task

# Every domain with the key shapes it is used with and the ranges its keys take in practice:
# seeds (data.seed / val_seed / evaluation seed), epochs, ranks, workers, chunks, batch indices.
SEEDS = list(range(0, 40)) + list(range(9_990, 10_010)) + list(range(19_990, 20_000))
SMALL = range(0, 4)
PARTS = [int(p) for p in seeding.AnalysisPart]
BATCH_STARTS = [0, 256, 512, 768]  # an analysis's batches start at multiples of its batch size
DOMAIN_KEYS = {
    Stream.TRAINING: [SEEDS, SMALL, SMALL, SMALL],
    Stream.F_TILDE_POOL: [SEEDS],
    Stream.MIXED_PHASE: [SEEDS, SMALL, SMALL],
    Stream.LOADER: [SEEDS, SMALL, SMALL],
    Stream.SELF_ROLLOUT: [SEEDS, SMALL, SMALL],
    Stream.WINDOW_SLICE: [SEEDS, SMALL, SMALL, SMALL],
    Stream.VALIDATION_ENVS: [SEEDS],
    Stream.VALIDATION_PLAY: [SEEDS, SMALL],
    Stream.TEST_ENVS: [SEEDS],
    Stream.TEST_TASK: [SEEDS, SMALL],
    Stream.TEST_POLICY: [SEEDS, SMALL],
    Stream.TUNING_ENVS: [SEEDS],
    Stream.TUNING_TASK: [SEEDS, SMALL],
    Stream.TUNING_POLICY: [SEEDS, SMALL],
    Stream.REGRET_ENVS: [SEEDS, SMALL, SMALL],
    Stream.REGRET_TASK: [SEEDS, SMALL, SMALL],
    Stream.REGRET_HEAD: [SEEDS, SMALL, SMALL, SMALL],
    Stream.POSTERIOR_TARGETS: [SEEDS, SMALL, SMALL, SMALL],
    Stream.ANALYSIS_ENVS: [SEEDS, PARTS],
    Stream.ANALYSIS_TASK: [SEEDS, PARTS, BATCH_STARTS],
    Stream.ANALYSIS_POLICY: [SEEDS, PARTS, BATCH_STARTS],
}
# the domains keyed by one evaluation or validation seed, or by such a seed and a chunk: injective in
# torch's bits over every test and validation seed
ALL_SEEDS = range(seeding.TEST_SEEDS.start, seeding.VALIDATION_SEEDS.stop)


def test_every_domain_is_enumerated():
    assert set(DOMAIN_KEYS) == set(Stream)
    assert len({int(d) for d in Stream}) == len(Stream)  # no two members share a number


def test_torch_keeps_the_low_32_bits_of_a_seed():
    """Why the tests below check torch_bits: seeds equal in their low 32 bits draw alike."""
    s = stream_seed(Stream.TEST_ENVS, 7)
    draw = lambda seed: torch.rand(8, generator=torch.Generator().manual_seed(seed))  # noqa: E731
    assert torch.equal(draw(s), draw(torch_bits(s))) and torch.equal(draw(s), draw(s ^ (5 << 40)))


def test_no_two_streams_share_torch_bits():
    """Every (domain, keys) in the ranges used gives its own stream in the 32 bits torch keeps."""
    seen: dict[int, tuple] = {}
    for domain, ranges in DOMAIN_KEYS.items():
        for keys in itertools.product(*ranges):
            s = torch_bits(stream_seed(domain, *keys))
            assert s not in seen, f"{domain.name}{keys} and {seen[s]} share torch's seed {s}"
            seen[s] = (domain.name, keys)
    assert len(seen) == sum(len(list(itertools.product(*r))) for r in DOMAIN_KEYS.values())


def test_streams_of_different_domains_never_share_torch_bits():
    """The domain is in the low bits: a training stream can never be a test stream, whatever the keys
    (here the 32-bit collision a 63-bit hash had: a fit's data.seed 48, epoch 595 drew the
    environments of test seed 6,406)."""
    for domain in Stream:
        for keys in [(0,), (6_406,), (48, 595, 0, 0), (2**40, 3), (1, 2, 3)]:
            assert torch_bits(stream_seed(domain, *keys)) % 32 == int(domain)
    train = torch.Generator().manual_seed(stream_seed(Stream.TRAINING, 48, 595, 0, 0))
    test = torch.Generator().manual_seed(stream_seed(Stream.TEST_ENVS, 6_406))
    assert not torch.equal(torch.rand(16, generator=train), torch.rand(16, generator=test))


@pytest.mark.parametrize("domain", [Stream.TEST_ENVS, Stream.VALIDATION_ENVS, Stream.TUNING_ENVS, Stream.F_TILDE_POOL])
def test_every_seed_has_its_own_environments(domain):
    """Over all 20,000 test and validation seeds, no two seeds draw the same environments."""
    bits = {torch_bits(stream_seed(domain, s)) for s in ALL_SEEDS}
    assert len(bits) == len(ALL_SEEDS)


@pytest.mark.parametrize("domain", [Stream.TEST_TASK, Stream.TEST_POLICY, Stream.VALIDATION_PLAY, Stream.TUNING_TASK])
def test_every_seed_and_chunk_has_its_own_noise(domain):
    bits = {torch_bits(stream_seed(domain, s, c)) for s in ALL_SEEDS for c in range(8)}
    assert len(bits) == 8 * len(ALL_SEEDS)


def test_the_encoding_is_injective_whatever_the_padding():
    """The words mixed are distinct for distinct keys -- including keys that differ by trailing zeros
    or by a key at or above 2**32 (SeedSequence splits a large int into 32-bit words)."""
    cases = [(), (0,), (0, 0), (0, 0, 0), (5,), (5, 0), (0, 1), (2**32,), (0, 1, 0), (1, 0), (2**32 + 1,), (1, 1)]
    words = [tuple(stream_entropy(Stream.TRAINING, *c)) for c in cases]
    assert len(set(words)) == len(cases)
    padded = [w + (0,) * (12 - len(w)) for w in words]  # what SeedSequence's zero padding could make equal
    assert len(set(padded)) == len(cases)
    assert stream_seed(Stream.TEST_ENVS, 3) != stream_seed(Stream.TEST_ENVS, 3, 0)
    with pytest.raises(ValueError):
        stream_entropy(Stream.TRAINING, -1)
    with pytest.raises(ValueError):
        stream_entropy(Stream.TRAINING, 2**64)


@pytest.mark.parametrize("name,param", [("mab", "r"), ("newsvendor", "w"), ("pricing", "alpha"), ("queueing", "lam")])
def test_training_histories_are_not_the_test_environments(name, param):
    """The review's measurement: a fit's epoch-0 stream with data.seed 0 drew the environments of
    ``omgpt evaluate --seed 0`` (100 of 100 equal in their first parameter). Now none coincide."""
    task = make_task(name)
    train = task.sample_envs(100, torch.Generator().manual_seed(stream_seed(Stream.TRAINING, 0, 0, 0, 0)))
    test = task.sample_envs(100, torch.Generator().manual_seed(stream_seed(Stream.TEST_ENVS, 0)))
    same = torch.isclose(train[param].reshape(100, -1)[:, 0], test[param].reshape(100, -1)[:, 0])
    # continuous parameters never coincide; queueing's arrival rate takes one of six values, so a
    # sixth match by chance
    assert same.sum() <= (35 if name == "queueing" else 0)


def test_evaluation_streams_follow_the_seed_range():
    assert seeding.evaluation_streams(0)[0] is Stream.TEST_ENVS
    assert seeding.evaluation_streams(seeding.TUNING_SEED)[0] is Stream.TUNING_ENVS


@pytest.mark.parametrize("seed", [0, 1])
def test_burned_test_seed_is_refused(seed):
    with pytest.raises(OMGPTError, match="burned"):
        seeding.check_test_seed(seed, "--seed")
    assert seeding.check_test_seed(seeding.CARD_SEED) == seeding.CARD_SEED
    for seed in (seeding.CARD_SEED, seeding.CARD_SEED + 1, seeding.DEMO_SEED, seeding.EXPERIMENT_SEED):
        assert seeding.check_test_seed(seed) == seed
