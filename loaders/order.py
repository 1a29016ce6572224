"""Pure sample ordering: which sample indices a rank and worker read, in which order.

Every function here is a pure function of (num_samples, seed, epoch, rank, world_size,
worker_id, num_workers): no state, no environment, no torch. Index arrays are numpy
int64, 1-D, on the CPU.

The split is the one ``torch.utils.data.DistributedSampler`` makes, so the two agree:
permute the epoch, pad by repeating the start of the order (or drop the tail) to a
multiple of ``world_size``, and deal the result round-robin to ranks. Within a rank,
batch ``b`` goes to worker ``b % num_workers``, and the DataLoader consumes workers in
that same round-robin, so a rank's sample sequence never depends on ``num_workers``.
"""

from __future__ import annotations

import enum
import operator
from typing import SupportsIndex

import numpy as np

from loaders.errors import ConfigError

# Domain tags separate the random streams derived from the same user seed, so the epoch
# permutation and per-sample augmentation never share random numbers.
_EPOCH_DOMAIN = 0x5346_4F52_4445_5231  # "SFORDER1"
_SAMPLE_DOMAIN = 0x5346_5341_4D50_4C31  # "SFSAMPL1"

_MASK64 = (1 << 64) - 1
_GOLDEN_GAMMA = 0x9E37_79B9_7F4A_7C15  # splitmix64 increment: odd, so adding it is a bijection


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


def _check_int(name: str, value: object, minimum: int) -> int:
    """``value`` as an int, or ConfigError when it is not an int >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        kind = "a positive int" if minimum == 1 else "a non-negative int"
        raise ConfigError(f"{name!r} must be {kind} (got {value!r} that is a {type(value).__name__})")
    return int(value)


def parse_mode(mode: OrderMode | str) -> OrderMode:
    """``mode`` as an OrderMode; ConfigError naming the choices when it is not one."""
    try:
        return OrderMode(mode)
    except ValueError as err:
        choices = ", ".join(repr(m.value) for m in OrderMode)
        raise ConfigError(f"'mode' must be one of {choices} (got {mode!r})") from err


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """The generator that draws epoch ``epoch``'s order; seed and epoch are non-negative ints."""
    seed = _check_int("seed", seed, 0)
    epoch = _check_int("epoch", epoch, 0)
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
    num_samples = _check_int("num_samples", num_samples, 0)
    block_size = _check_int("block_size", block_size, 1)
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
    num_samples = _check_int("num_samples", num_samples, 0)
    world_size = _check_int("world_size", world_size, 1)
    return num_samples // world_size if drop_last else -(-num_samples // world_size)


def rank_indices(order: np.ndarray, *, rank: int, world_size: int, drop_last: bool) -> np.ndarray:
    """Rank ``rank``'s share of ``order`` (int64 [samples_per_rank], in reading order).

    ``drop_last``: the order is cut to ``world_size * floor(n / world_size)``, dropping
    its last ``n % world_size`` entries. Else it is extended cyclically to
    ``world_size * ceil(n / world_size)`` (the first entries repeat, more than once when
    ``world_size > n``). Rank r then takes every ``world_size``-th entry from r, like
    DistributedSampler; every rank gets the same count, so collective ops stay in step.
    """
    world_size = _check_int("world_size", world_size, 1)
    rank = _check_int("rank", rank, 0)
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
    num_samples = _check_int("num_samples", num_samples, 0)
    batch_size = _check_int("batch_size", batch_size, 1)
    return num_samples // batch_size if drop_last else -(-num_samples // batch_size)


def worker_batches(num_batches: int, *, worker_id: int, num_workers: int) -> range:
    """Batch numbers worker ``worker_id`` builds: ``b`` with ``b % num_workers == worker_id``.

    This is the DataLoader's round-robin, so consuming workers in turn reproduces batch
    order ``0, 1, 2, ...`` whatever ``num_workers`` is.
    """
    num_batches = _check_int("num_batches", num_batches, 0)
    num_workers = _check_int("num_workers", num_workers, 1)
    worker_id = _check_int("worker_id", worker_id, 0)
    if worker_id >= num_workers:
        raise ConfigError(f"'worker_id' must be < num_workers={num_workers} (got {worker_id})")
    return range(worker_id, num_batches, num_workers)


def _mix64(z: int) -> int:
    """The splitmix64 finaliser (Stafford's Mix13): a bijection on 64-bit ints with full avalanche."""
    z = ((z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB) & _MASK64
    return z ^ (z >> 31)


def sample_seed(seed: SupportsIndex, epoch: SupportsIndex, index: SupportsIndex) -> int:
    """A 64-bit seed for sample ``index``'s randomness in ``epoch`` (an int in [0, 2^64)).

    Arguments are ints (numpy ints too) taken modulo 2^64. Three chained splitmix64 steps, ~1 µs in pure Python
    (a SeedSequence costs ~5x more). Properties:

    - for fixed (seed, epoch), index -> seed is a bijection: no two samples of an epoch
      ever share a seed; likewise epoch -> seed for fixed (seed, index);
    - each step's finaliser avalanches (one flipped input bit flips each output bit with
      probability ~1/2), so neighbouring indices, epochs or seeds give unrelated seeds;
    - across different epochs or seeds, two pairs collide with probability ~2^-64.
    """
    h = _mix64((operator.index(seed) ^ _SAMPLE_DOMAIN) & _MASK64)
    h = _mix64(((h ^ operator.index(epoch)) + _GOLDEN_GAMMA) & _MASK64)
    return _mix64(((h ^ operator.index(index)) + _GOLDEN_GAMMA) & _MASK64)


def sample_rng(seed: SupportsIndex, epoch: SupportsIndex, index: SupportsIndex) -> np.random.Generator:
    """A PCG64 generator for sample ``index`` in ``epoch``, seeded by ``sample_seed``.

    Reproducible on any worker, rank or resume: the stream depends only on (seed, epoch, index).
    """
    return np.random.Generator(np.random.PCG64(sample_seed(seed, epoch, index)))
