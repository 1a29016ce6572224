"""Pure: the global batch grid, which sequences rank r reads in global batch g, for any (B, W).

A global batch is ``B x W`` sequences (``batch_size`` per rank x ``world_size`` ranks) of one
epoch's stream (a ``TokenDataset``'s packed sequences or a ``Mixture``'s positions). The grid
starts at an ``origin`` (0 for a fresh epoch; the position of a resume, which may be taken on
another (B, W)): global batch g holds sequences ``origin + g B W + [0, B W)``, and rank r's
rows are the contiguous ``origin + g B W + r B + [0, B)``. The epoch's last incomplete global
batch is dropped, so every rank reads the same number of batches (no DDP hang); the
undelivered part of an epoch is that remainder (< B W sequences) plus the packing tail.

The global position that survives a change of (B, W) is ``(epoch, sequence)``: sequences
``[0, sequence)`` of ``epoch`` consumed by all ranks together. With the same B W a resume reads
exactly the batches the uninterrupted run would have (the grid from the origin coincides with
the one from 0); with another it continues from the same sequence, nothing lost or repeated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from loaders.errors import ConfigError
from loaders.tokens.arguments import check_int

__all__ = ["GlobalGrid", "GlobalPosition", "GridStart", "resume_grid"]


class GlobalPosition(NamedTuple):
    """Where a job is in the data, whatever its topology: sequences ``[0, sequence)`` of ``epoch`` consumed."""

    epoch: int
    sequence: int


@dataclass(frozen=True)
class GlobalGrid:
    """One epoch's global batches: ``num_sequences`` in the epoch, ``batch_size`` per rank, ``world_size`` ranks.

    ``origin``: the sequence where global batch 0 starts (0, or a resume position).
    """

    num_sequences: int
    batch_size: int
    world_size: int
    origin: int = 0

    def __post_init__(self) -> None:
        check_int("num_sequences", self.num_sequences, 0)
        check_int("batch_size", self.batch_size, 1)
        check_int("world_size", self.world_size, 1)
        check_int("origin", self.origin, 0)
        if self.origin > self.num_sequences:
            raise ConfigError(f"'origin' must be <= num_sequences={self.num_sequences} (got {self.origin})")

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.world_size

    @property
    def num_batches(self) -> int:
        """Global batches from the origin to the epoch's end; the last incomplete one is dropped."""
        return (self.num_sequences - self.origin) // self.global_batch_size

    @property
    def dropped(self) -> int:
        """Sequences at the epoch's end that no rank reads (< global_batch_size)."""
        return self.num_sequences - self.origin - self.num_batches * self.global_batch_size

    def position(self, batch: int) -> int:
        """The sequence position after global batches ``[0, batch)`` (0 <= batch <= num_batches)."""
        if not 0 <= batch <= self.num_batches:
            raise IndexError(f"global batch {batch} outside [0, {self.num_batches}]")
        return self.origin + batch * self.global_batch_size

    def batch_at(self, sequence: int) -> tuple[int, int]:
        """(global batch, offset in it) that holds ``sequence`` (>= origin) on this grid."""
        if sequence < self.origin:
            raise IndexError(f"sequence {sequence} precedes the grid's origin {self.origin}")
        return divmod(sequence - self.origin, self.global_batch_size)

    def rows(self, batch: int, rank: int) -> range:
        """The global sequences rank ``rank`` reads in global batch ``batch``: B contiguous positions."""
        if not 0 <= batch < self.num_batches:
            raise IndexError(f"global batch {batch} outside [0, {self.num_batches})")
        if not 0 <= rank < self.world_size:
            raise IndexError(f"rank {rank} outside [0, {self.world_size})")
        start = self.origin + batch * self.global_batch_size + rank * self.batch_size
        return range(start, start + self.batch_size)


class GridStart(NamedTuple):
    """Where a job starts reading: ``epoch``, its ``grid`` and the first global ``batch`` of it to read."""

    epoch: int
    grid: GlobalGrid
    batch: int


def resume_grid(position: GlobalPosition, num_sequences: int, batch_size: int, world_size: int) -> GridStart:
    """The grid a job of (batch_size, world_size) reads from ``position`` on.

    Aligned (``sequence`` a multiple of B W): the epoch's own grid from origin 0, from batch
    ``sequence / (B W)``, so batch numbers match the uninterrupted run's. Otherwise a grid whose
    origin is ``sequence``, from batch 0. When less than one global batch is left, the next
    epoch from its start.
    """
    grid = GlobalGrid(num_sequences, batch_size, world_size)
    check_int("sequence", position.sequence, 0)
    check_int("epoch", position.epoch, 0)
    if position.sequence + grid.global_batch_size > num_sequences:
        return GridStart(position.epoch + 1, grid, 0)
    batch, offset = grid.batch_at(position.sequence)
    if offset == 0:
        return GridStart(position.epoch, grid, batch)
    return GridStart(position.epoch, GlobalGrid(num_sequences, batch_size, world_size, position.sequence), 0)
