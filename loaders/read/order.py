"""Pure sample ordering: which sample indices a rank and worker read, in which order.

Every function here is a pure function of (num_samples, seed, epoch, rank, world_size,
worker_id, num_workers): no state, no environment, no torch. Index arrays are numpy
int64, 1-D, on the CPU.

The split is the one ``torch.utils.data.DistributedSampler`` makes, so the two agree:
permute the epoch, pad by repeating the start of the order (or drop the tail) to a
multiple of ``world_size``, and deal the result round-robin to ranks. Workers never change
a rank's sequence: they build whole batches of it, which the consumer receives in order.
"""

from __future__ import annotations

import enum
from typing import SupportsIndex

import numpy as np

from loaders.errors import ConfigError
from loaders.read.seeding import sample_seed
from loaders.validate import check_choice, check_int

__all__ = [
    "OrderMode", "epoch_order", "epoch_rng", "num_batches", "parse_mode", "rank_indices", "sample_rng",
    "sample_seed", "samples_per_rank",
]

# Domain tags separate the random streams derived from the same user seed, so the epoch
# permutation and per-sample augmentation never share random numbers.
_EPOCH_DOMAIN = 0x5346_4F52_4445_5231  # "SFORDER1"


class OrderMode(enum.StrEnum):
    """How an epoch's order is drawn.

    GLOBAL: a uniform permutation of all samples (best mixing, random reads).
    BLOCKS: blocks of ``block_size`` consecutive indices in a random order, shuffled
    within each block; consecutive indices sit in the same shard, so reads stay local.
    SEQUENTIAL: ``0 .. n-1`` (evaluation; seed and epoch ignored).
    """

    GLOBAL = "global"
    BLOCKS = "blocks"
    SEQUENTIAL = "sequential"


def parse_mode(mode: OrderMode | str) -> OrderMode:
    """``mode`` as an OrderMode; ConfigError naming the choices when it is not one."""
    return check_choice("mode", mode, OrderMode)


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """The generator that draws epoch ``epoch``'s order; seed and epoch are non-negative ints."""
    seed = check_int("seed", seed, 0)
    epoch = check_int("epoch", epoch, 0)
    return np.random.default_rng(np.random.SeedSequence([seed, epoch, _EPOCH_DOMAIN]))


def epoch_order(
    num_samples: int,
    *,
    seed: int,
    epoch: int,
    mode: OrderMode | str = OrderMode.GLOBAL,
    block_size: int = 1024,
) -> np.ndarray:
    """The order samples are read in during ``epoch``: an int64 [num_samples] permutation of ``range(num_samples)``.

    Deterministic in (num_samples, seed, epoch, mode, block_size). Vectorised: for 10^7
    samples about 0.45 s in GLOBAL mode (numpy's Fisher-Yates, bound by cache misses) and
    0.15 s in BLOCKS mode, on one core of a small cloud VM.
    """
    num_samples = check_int("num_samples", num_samples, 0)
    block_size = check_int("block_size", block_size, 1)
    mode = parse_mode(mode)
    rng = epoch_rng(seed, epoch)  # validates seed and epoch in every mode
    if mode is OrderMode.SEQUENTIAL:
        return np.arange(num_samples, dtype=np.int64)
    if mode is OrderMode.GLOBAL:
        return rng.permutation(num_samples).astype(np.int64, copy=False)
    return _block_order(num_samples, block_size, rng)


def _block_order(num_samples: int, block_size: int, rng: np.random.Generator) -> np.ndarray:
    """Blocks of consecutive indices in random order, each shuffled internally (int64 [num_samples])."""
    num_full = num_samples // block_size
    full = np.arange(num_full * block_size, dtype=np.int64).reshape(num_full, block_size)
    rng.permuted(full, axis=1, out=full)  # every row shuffled independently
    tail = rng.permutation(np.arange(num_full * block_size, num_samples, dtype=np.int64))
    block_perm = rng.permutation(num_full + (1 if tail.size else 0))
    if not tail.size:
        return full[block_perm].reshape(-1)
    # The short last block (id num_full) lands wherever the block permutation puts it.
    at = int(np.flatnonzero(block_perm == num_full)[0])
    return np.concatenate([full[block_perm[:at]].reshape(-1), tail, full[block_perm[at + 1:]].reshape(-1)])


def samples_per_rank(num_samples: int, world_size: int, drop_last: bool) -> int:
    """Samples each rank reads per epoch: floor(n / ws) with ``drop_last``, else ceil(n / ws)."""
    num_samples = check_int("num_samples", num_samples, 0)
    world_size = check_int("world_size", world_size, 1)
    return num_samples // world_size if drop_last else -(-num_samples // world_size)


def rank_indices(order: np.ndarray, *, rank: int, world_size: int, drop_last: bool) -> np.ndarray:
    """Rank ``rank``'s share of ``order`` (int64 [samples_per_rank], in reading order).

    ``drop_last``: the order is cut to ``world_size * floor(n / world_size)``, dropping
    its last ``n % world_size`` entries. Else it is extended cyclically to
    ``world_size * ceil(n / world_size)`` (the first entries repeat, more than once when
    ``world_size > n``). Rank r then takes every ``world_size``-th entry from r, like
    DistributedSampler; every rank gets the same count, so collective ops stay in step.
    """
    world_size = check_int("world_size", world_size, 1)
    rank = check_int("rank", rank, 0)
    if rank >= world_size:
        raise ConfigError(f"'rank' must be < world_size={world_size} (got {rank})")
    order = np.asarray(order)
    if order.ndim != 1 or not np.issubdtype(order.dtype, np.integer):
        raise ConfigError(f"'order' must be a 1-D integer array (got shape {order.shape}, dtype {order.dtype})")
    total = world_size * samples_per_rank(order.size, world_size, drop_last)
    sized = order[:total] if total <= order.size else np.resize(order, total)
    # A copy, not a strided view: the view would keep the whole epoch's order alive.
    return np.array(sized[rank::world_size], dtype=np.int64)


def num_batches(num_samples: int, batch_size: int, drop_last: bool) -> int:
    """Batches from ``num_samples`` samples: floor with ``drop_last`` (no short batch), else ceil."""
    num_samples = check_int("num_samples", num_samples, 0)
    batch_size = check_int("batch_size", batch_size, 1)
    return num_samples // batch_size if drop_last else -(-num_samples // batch_size)


def sample_rng(seed: SupportsIndex, epoch: SupportsIndex, index: SupportsIndex) -> np.random.Generator:
    """A PCG64 generator for sample ``index`` in ``epoch``, seeded by ``loaders.read.seeding.sample_seed``.

    Reproducible on any worker, rank or resume: the stream depends only on (seed, epoch, index).
    """
    return np.random.Generator(np.random.PCG64(sample_seed(seed, epoch, index)))
