"""Every seed the loaders derive, from one key derivation: ``derive_seed(domain, *keys)``.

A seed is a pure function of the user's seed and the position it is for, tagged by a
domain so that streams for different purposes never coincide:

=================  ==========================================  =======================
domain             keys                                        used by
=================  ==========================================  =======================
``SAMPLE``         (seed, epoch, sample index)                 ``sample_seed``, datasets
``WORKER``         (seed, epoch, rank, worker_id)              worker processes' RNGs
``BATCH``          (seed, epoch, batch position, rank)         device augmentation
=================  ==========================================  =======================

(the epoch permutation is drawn by ``loaders.read.order.epoch_rng``, a numpy SeedSequence
keyed by (seed, epoch) in its own domain). The base seed itself comes from
``resolve_seed``: given, else the same on every rank, else drawn like torch draws it.

Every function here is pure but ``draw_seed`` (which draws from a torch generator). Seeding
a worker process's global RNGs from ``worker_seed`` is ``loaders.loader.worker_start.seed_worker``:
the training loop's global ``random`` / numpy / torch generators are never touched in its own process.
"""

from __future__ import annotations

import operator
from typing import SupportsIndex

import torch

from loaders.validate import check_int

__all__ = [
    "DOMAIN_BATCH",
    "DOMAIN_SAMPLE",
    "DOMAIN_WORKER",
    "batch_seed",
    "derive_seed",
    "draw_seed",
    "resolve_seed",
    "sample_seed",
    "worker_seed",
]

DOMAIN_SAMPLE = 0x5346_5341_4D50_4C31  # "SFSAMPL1"
DOMAIN_WORKER = 0x5346_574B_5345_4544  # "SFWKSEED"
DOMAIN_BATCH = 0x5346_4241_5443_4831  # "SFBATCH1"

# The seed every rank uses when none is given in a distributed job (DistributedSampler's).
DISTRIBUTED_DEFAULT_SEED = 0

_MASK64 = (1 << 64) - 1
_GOLDEN_GAMMA = 0x9E37_79B9_7F4A_7C15  # splitmix64 increment: odd, so adding it is a bijection


def _mix64(z: int) -> int:
    """The splitmix64 finaliser (Stafford's Mix13): a bijection on 64-bit ints with full avalanche."""
    z = ((z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB) & _MASK64
    return z ^ (z >> 31)


def derive_seed(domain: int, seed: SupportsIndex, *keys: SupportsIndex) -> int:
    """A 64-bit seed (an int in [0, 2^64)) for ``keys`` under ``seed`` in ``domain``.

    Chained splitmix64 steps, ~1 µs per key in pure Python. For fixed earlier keys each
    step is a bijection of the next key (no two sample indices of an epoch share a
    seed); the finaliser avalanches, so neighbouring keys give unrelated seeds; across
    different prefixes two keys collide with probability ~2^-64. Arguments are ints
    (numpy ints too) taken modulo 2^64.
    """
    h = _mix64((operator.index(seed) ^ domain) & _MASK64)
    for key in keys:
        h = _mix64(((h ^ operator.index(key)) + _GOLDEN_GAMMA) & _MASK64)
    return h


def sample_seed(seed: SupportsIndex, epoch: SupportsIndex, index: SupportsIndex) -> int:
    """The seed of sample ``index``'s randomness in ``epoch`` (see ``derive_seed``)."""
    return derive_seed(DOMAIN_SAMPLE, seed, epoch, index)


def batch_seed(seed: int, epoch: int, batch_index: int, rank: int = 0) -> int:
    """The seed of batch ``batch_index``'s device augmentation in ``epoch`` on ``rank``."""
    return derive_seed(DOMAIN_BATCH, seed, epoch, batch_index, rank)


def worker_seed(seed: int, epoch: int, worker_id: int, rank: int = 0) -> int:
    """The 64-bit seed of worker ``worker_id`` of ``rank`` in ``epoch``; pure, distinct per key."""
    keys = [check_int(name, value, 0) for name, value in
            (("seed", seed), ("epoch", epoch), ("rank", rank), ("worker_id", worker_id))]
    return derive_seed(DOMAIN_WORKER, *keys)


def draw_seed(generator: torch.Generator | None) -> int:
    """A non-negative 63-bit seed from ``generator`` (torch's default one when None), as torch draws its base seed."""
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


def resolve_seed(seed: int | None, generator: torch.Generator | None, *, world_size: int) -> int:
    """The loader's base seed: ``seed`` if given; in a distributed job the same on every rank; else drawn.

    Ranks seed torch differently (``torch.manual_seed(base + rank)`` is common), so a seed
    drawn per rank would shuffle each rank's share differently and ranks would overlap.
    Without ``seed`` a distributed job uses ``DISTRIBUTED_DEFAULT_SEED``, as
    ``DistributedSampler`` does; pass ``seed=`` for another order.
    """
    if seed is not None:
        return seed
    if world_size > 1:
        return DISTRIBUTED_DEFAULT_SEED
    return draw_seed(generator)
