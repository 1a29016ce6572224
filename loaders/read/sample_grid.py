"""Pure: an epoch's order read by global position, for any batch size B and world size W.

The epoch's order (``loaders.read.order.epoch_order``, a permutation of the dataset's
samples) is cut into *global batches* of ``B x W`` order positions, from an ``origin``:
global batch g holds positions ``origin + g B W + [0, B W)``, and rank r's rows of it are
every W-th, ``origin + g B W + r + W j`` for ``j < B``. From origin 0 that is exactly how
``DistributedSampler`` + ``BatchSampler`` deal an epoch (rank r's batch g), so a fresh epoch
reads the same batches as before global positions existed. The epoch's last global batch of
``R < B W`` positions is dropped with ``drop_last``; otherwise it is dealt the same way,
padded to a multiple of W with the epoch's first positions (DistributedSampler's rule), so
that every rank reads ``ceil(R / W)`` rows of it: every rank has the same number of batches.

The *global position* p counts the order positions ``[0, p)`` consumed by all ranks
together; it survives any change of (B, W). A run of the epoch that begins at p reads the
grid whose origin is ``p mod B W`` from its global batch ``p // B W`` on (``SampleGrid.begin``):
with the same ``B W`` those are the uninterrupted run's batches, with the same numbers;
with another, the positions from p on, nothing lost or repeated (bar the padding).

``GridIndex`` is the dataset index a job of such a grid reads with: the sample, its epoch
and the grid, so that every copy of the dataset (threads, worker processes started before a
resume) knows the order it is read in and can plan its shard cache from it. ``order_digest``
is the sha256 of which samples a range of global positions holds; ``data_identity`` names
the data those positions index (the manifest's shards).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from dataprep.formats.manifest import ShardInfo
from loaders.errors import ConfigError
from loaders.validate import check_int

__all__ = ["GridIndex", "SampleGrid", "data_identity", "order_digest"]

_DIGEST_TAG = b"shardfeed-sample-order-v1\n"


@dataclass(frozen=True, slots=True)
class SampleGrid:
    """How a job of ``world_size`` ranks x ``batch_size`` rows reads one epoch of ``num_samples`` positions.

    begin: the global position this run of the epoch begins at (0, or a resume's); the grid's
    origin is ``begin mod B W`` and its first batch ``begin // B W``. drop_last: the epoch's
    last incomplete global batch is dropped (else padded and dealt, see the module docstring).
    """

    num_samples: int
    batch_size: int
    world_size: int
    drop_last: bool = False
    begin: int = 0

    def __post_init__(self) -> None:
        check_int("num_samples", self.num_samples, 0)
        check_int("batch_size", self.batch_size, 1)
        check_int("world_size", self.world_size, 1)
        check_int("begin", self.begin, 0)
        if self.begin > self.num_samples:
            raise ConfigError(f"global position {self.begin} is past the epoch's {self.num_samples} samples")

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.world_size

    @property
    def origin(self) -> int:
        """The order position where global batch 0 of this grid starts (< B W)."""
        return self.begin % self.global_batch_size

    @property
    def first_batch(self) -> int:
        """The first global batch this run reads (== ``num_batches`` when nothing of the epoch is left)."""
        return self.begin // self.global_batch_size

    @property
    def num_full(self) -> int:
        """Complete global batches from the origin to the epoch's end."""
        return (self.num_samples - self.origin) // self.global_batch_size

    @property
    def tail(self) -> int:
        """Positions after the last complete global batch (< B W): dropped, or a last padded batch."""
        return self.num_samples - self.origin - self.num_full * self.global_batch_size

    @property
    def tail_rows(self) -> int:
        """Rows of the last, incomplete global batch on every rank (0 when there is none or it is dropped)."""
        return 0 if self.drop_last else -(-self.tail // self.world_size)

    @property
    def num_batches(self) -> int:
        """Global batches of this grid, counted from its origin (the same on every rank)."""
        return self.num_full + (1 if self.tail_rows else 0)

    def rows_in(self, batch: int) -> int:
        """Rows every rank reads in global batch ``batch``."""
        return self.batch_size if batch < self.num_full else self.tail_rows

    def position_after(self, batch: int) -> int:
        """The global position once global batches ``[0, batch)`` of this grid are consumed."""
        if not 0 <= batch <= self.num_batches:
            raise IndexError(f"global batch {batch} outside [0, {self.num_batches}]")
        return min(self.origin + batch * self.global_batch_size, self.num_samples)

    def rows(self, batch: int, rank: int) -> np.ndarray:
        """Order positions rank ``rank`` reads in global batch ``batch`` (int64 [rows_in(batch)])."""
        if not 0 <= batch < self.num_batches:
            raise IndexError(f"global batch {batch} outside [0, {self.num_batches})")
        return self.rank_positions(rank, batch, batch + 1)

    def rank_positions(self, rank: int, first: int = 0, stop: int | None = None) -> np.ndarray:
        """Order positions rank ``rank`` reads in global batches ``[first, stop)`` (default: all), in reading
        order (int64). Padding positions (past the epoch's end) wrap to the epoch's start."""
        if not 0 <= rank < self.world_size:
            raise IndexError(f"rank {rank} outside [0, {self.world_size})")
        stop = self.num_batches if stop is None else min(stop, self.num_batches)
        full = np.arange(first, min(stop, self.num_full), dtype=np.int64)
        within = rank + self.world_size * np.arange(self.batch_size, dtype=np.int64)
        parts = [(self.origin + full[:, None] * self.global_batch_size + within[None, :]).reshape(-1)]
        if first <= self.num_full < stop:
            start = self.origin + self.num_full * self.global_batch_size + rank
            parts.append(start + self.world_size * np.arange(self.tail_rows, dtype=np.int64))
        positions = np.concatenate(parts)
        return positions % self.num_samples if self.tail_rows else positions

    def fresh(self) -> SampleGrid:
        """The same job's grid for a run of an epoch from its start."""
        return replace(self, begin=0)


class GridIndex(NamedTuple):
    """A dataset index read by global position: the sample, the epoch it is read in, and the epoch's grid."""

    # The glossary's name; it hides tuple.index(), which nothing here needs.
    index: int  # type: ignore[assignment]  # the field shadows tuple.index on purpose
    epoch: int
    grid: SampleGrid

    def __repr__(self) -> str:  # messages list indices: the grid is the same for all of a batch's
        return f"GridIndex(index={self.index}, epoch={self.epoch})"


def data_identity(shards: Sequence[ShardInfo]) -> str:
    """sha256 (hex) of the shards global positions index: each one's name, samples, bytes and sha256, in order."""
    rows = [[s.name, s.num_samples, s.bytes, s.sha256] for s in shards]
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()


def order_digest(order: np.ndarray, start: int, stop: int, *, epoch: int, data: str) -> str:
    """sha256 (hex) of which samples global positions ``[start, stop)`` of ``order`` (epoch ``epoch``) hold.

    Over the data's identity, the epoch and the sample indices (int64, little-endian): equal
    digests mean the same samples of the same data in the same order.
    """
    check_int("start", start, 0)
    check_int("stop", stop, 0)
    if not start <= stop <= order.size:
        raise IndexError(f"global positions [{start}, {stop}) outside the epoch's {order.size} samples")
    digest = hashlib.sha256(_DIGEST_TAG + f"{data}\n{epoch}\n".encode())
    digest.update(np.ascontiguousarray(order[start:stop], dtype="<i8").tobytes())
    return digest.hexdigest()
