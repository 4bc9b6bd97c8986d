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
