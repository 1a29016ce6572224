"""Pure: which shards each rank of a node opens during an epoch, in order, and what a cache must hold for it.

A ``ReadPlan`` holds what draws a rank's samples (the parameters of ``ShardSampler``:
num_samples, seed, mode, block_size, drop_last, world_size). ``shard_uses`` maps each
rank's samples of an epoch (``DistributedSampler``'s split of the order, or, read by global
position, the rows of a ``GlobalGrid``: any batch size, world size and resume point) to
the shards holding them and drops consecutive repeats: the
shard-use sequence the node cache plans from (``loaders.cache.ShardCache.plan``), one
stream per rank (``stream_name``). ``node_ranks`` lists the ranks sharing this node (torchrun
places ranks ``node * local_world_size + local_rank``). ``working_set_bytes`` is what an
order keeps reading at once: a cache smaller than that downloads shards again and again.
Every function here is a pure function of its arguments (no state, no environment).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from loaders.read.order import OrderMode, epoch_order, rank_indices
from loaders.read.grid import GlobalGrid
from loaders.read.topology import Topology

__all__ = ["ReadPlan", "node_ranks", "shard_uses", "stream_name", "stream_rank", "working_set_bytes"]



@dataclass(frozen=True)
class ReadPlan:
    """How every rank's samples are drawn (``ShardSampler``'s parameters, the mode already resolved:
    SEQUENTIAL when not shuffling)."""

    num_samples: int
    seed: int
    mode: OrderMode
    block_size: int
    drop_last: bool
    world_size: int


def stream_name(dataset: str, rank: int) -> str:
    """The cache stream of rank ``rank`` reading ``dataset`` (a short tag): every reader of that rank's order."""
    return f"{dataset}:rank{rank}"


def stream_rank(dataset: str, stream: str) -> int | None:
    """The rank a stream of ``dataset`` stands for (None: another dataset's stream, or not a rank's)."""
    found = re.fullmatch(rf"{re.escape(dataset)}:rank(\d+)", stream)
    return int(found.group(1)) if found else None


def node_ranks(topology: Topology) -> range:
    """The global ranks on this node: ``local_world_size`` consecutive ranks holding ``topology.rank``."""
    first = topology.rank - topology.local_rank
    return range(first, first + topology.local_world_size)


def shard_uses(plan: ReadPlan, shard_starts: np.ndarray, epoch: int, ranks: Iterable[int],
               grid: GlobalGrid | None = None) -> dict[int, np.ndarray]:
    """Per rank, the shards it opens during ``epoch`` in order (int64 shard numbers, consecutive repeats dropped).

    ``shard_starts``: int64 [num_shards + 1], each shard's first sample, then the total
    (``Manifest.shard_starts``). ``grid``: the epoch is read by global position on it, from
    its first batch (a resumed run: only what is left); None: ``DistributedSampler``'s split
    of the whole epoch. The epoch's order is drawn once for all ranks.
    """
    order = epoch_order(plan.num_samples, seed=plan.seed, epoch=epoch, mode=plan.mode, block_size=plan.block_size)
    found: dict[int, np.ndarray] = {}
    for rank in ranks:
        if grid is not None:
            samples = order[grid.rank_positions(rank, grid.first_batch)]
        else:
            samples = rank_indices(order, rank=rank, world_size=plan.world_size, drop_last=plan.drop_last)
        mine = np.searchsorted(shard_starts, samples, side="right").astype(np.int64) - 1
        if mine.size == 0:
            found[rank] = mine
            continue
        starts = np.flatnonzero(np.concatenate([[True], mine[1:] != mine[:-1]]))
        found[rank] = mine[starts]
    return found


def working_set_bytes(mode: OrderMode, block_size: int, shard_samples: Sequence[int],
                      shard_bytes: Sequence[int]) -> int:
    """Bytes of shards an order reads from at once: the whole dataset for GLOBAL; for BLOCKS the shards one
    block can span (a block of consecutive samples crosses at most ``ceil((block_size - 1) / smallest) + 1``
    shards); for SEQUENTIAL two shards (the one read and the next)."""
    if not shard_bytes:
        return 0
    largest = max(shard_bytes)
    if mode is OrderMode.GLOBAL:
        return int(sum(shard_bytes))
    if mode is OrderMode.SEQUENTIAL:
        return 2 * largest
    smallest = max(1, min((n for n in shard_samples if n > 0), default=1))
    spans = min(len(shard_bytes), math.ceil((block_size - 1) / smallest) + 1)
    return spans * largest
