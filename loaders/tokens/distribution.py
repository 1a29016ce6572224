"""Pure: the global batch grid, which sequences rank r reads in global batch g, for any (B, W).

A global batch is ``B x W`` sequences (``batch_size`` per rank x ``world_size`` ranks) of one
epoch's stream (a ``TokenDataset``'s packed sequences or a ``Mixture``'s positions). The grid
starts at an ``origin`` (0 for a fresh epoch): global batch g holds sequences
``origin + g B W + [0, B W)``, and rank r's rows are the contiguous ``origin + g B W + r B + [0, B)``.
The epoch's last incomplete global batch is dropped, so every rank reads the same number of
batches (no DDP hang); the undelivered part of an epoch is that remainder (< B W sequences)
plus the packing tail.

The global position that survives a change of (B, W) is ``(epoch, sequence)``: sequences
``[0, sequence)`` of ``epoch`` consumed by all ranks together. A job of (B, W) resuming there
reads the grid whose origin is ``sequence mod B W`` from its global batch ``sequence // (B W)``
on (``resume_grid``): with the same B W that is exactly the uninterrupted run's grid and
batches (a resumed job's own grid included); with another, the sequences from ``sequence`` on,
nothing lost or repeated. Batch numbers stay those of a full epoch, shifted by the origin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from loaders.errors import ConfigError
from loaders.validate import check_int

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
    """Where a job starts reading: ``epoch``, its ``grid`` and the first global ``batch`` of it to read
    (``grid.num_batches`` when nothing of the epoch is left)."""

    epoch: int
    grid: GlobalGrid
    batch: int


def resume_grid(position: GlobalPosition, num_sequences: int, batch_size: int, world_size: int) -> GridStart:
    """The grid a job of (batch_size, world_size) reads ``position.epoch`` on with, from ``position`` on.

    The grid's origin is ``sequence mod B W`` and the first batch ``sequence // (B W)``: aligned
    positions (a multiple of B W) give the epoch's own grid from origin 0, so batch numbers
    match the uninterrupted run's. Less than one global batch left: the first batch is
    ``grid.num_batches`` (nothing more of this epoch; the rest is the epoch's dropped remainder).
    """
    check_int("sequence", position.sequence, 0)
    check_int("epoch", position.epoch, 0)
    if position.sequence > num_sequences:
        raise ConfigError(f"global position {position.sequence} is past the epoch's {num_sequences} sequences")
    global_batch = check_int("batch_size", batch_size, 1) * check_int("world_size", world_size, 1)
    batch, origin = divmod(position.sequence, global_batch)
    return GridStart(position.epoch, GlobalGrid(num_sequences, batch_size, world_size, origin), batch)
