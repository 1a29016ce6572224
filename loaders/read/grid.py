"""Pure: an epoch read by global position, for any batch size B and world size W (samples and token sequences).

An epoch is a sequence of ``num_positions`` *global positions* (a sample dataset's order, a
token stream's packed sequences), cut into *global batches* of ``B x W`` positions from an
``origin``: global batch g holds positions ``origin + g B W + [0, B W)``. Two rules are
parameters, as Mosaic Streaming's ``get_partitions(algo, ...)`` takes its algorithm:

- ``Deal``, how a global batch is dealt to ranks: ``STRIDED``, rank r reads every W-th,
  ``origin + g B W + r + W j`` (``DistributedSampler`` + ``BatchSampler``: from origin 0 a
  fresh epoch reads exactly their batches); ``CONTIGUOUS``, rank r reads
  ``origin + g B W + r B + [0, B)`` (Megatron's split of packed sequences);
- ``Tail``, what becomes of the last ``R < B W`` positions: ``DROP``ped (no rank reads them),
  or ``PAD``ded to a multiple of W with the run's first positions (DistributedSampler's rule:
  the epoch's first for a fresh run, those from ``begin`` on for a resumed one, never a
  position an earlier run delivered) and dealt, ``ceil(R / W)`` rows per rank.

Every rank reads the same number of batches (no DDP hang). The global position p counts
positions ``[0, p)`` consumed by all ranks together; it survives any change of (B, W). A run
that begins at p (``begin``) reads the grid whose origin is ``p mod B W`` from its global batch
``p // B W`` on: with the same ``B W`` the uninterrupted run's batches, with the same numbers;
with another, the positions from p on, nothing lost or repeated (bar the padding).

A dataset item read on such a grid is a ``loaders.read.sample_index.SampleIndex`` that carries
it (every copy of a sample dataset plans its shard cache from it); ``GlobalPosition``,
``GridStart`` and ``resume_grid`` name a token job's point and grid; ``order_digest`` is the
sha256 of which indices a range of global positions holds, ``data_identity`` names the shards
a sample dataset's positions index.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from dataprep.formats.manifest import ShardInfo
from loaders.errors import ConfigError
from loaders.validate import check_int

__all__ = ["Deal", "GlobalGrid", "GlobalPosition", "GridStart", "OrderDigest", "Tail", "data_identity", "order_digest",
           "resume_grid"]

_DIGEST_TAG = b"shardfeed-sample-order-v1\n"


class Deal(enum.StrEnum):
    """How a global batch's B x W positions are dealt to the W ranks (see the module docstring)."""

    STRIDED = "strided"
    CONTIGUOUS = "contiguous"


class Tail(enum.StrEnum):
    """What becomes of an epoch's last, incomplete global batch (see the module docstring)."""

    PAD = "pad"
    DROP = "drop"


@dataclass(frozen=True, slots=True)
class GlobalGrid:
    """How a job of ``world_size`` ranks x ``batch_size`` rows reads one epoch of ``num_positions`` positions.

    begin: the global position this run of the epoch begins at (0, or a resume's); the grid's
    origin is ``begin mod B W`` and its first batch ``begin // B W``. deal, tail: the rules.
    """

    num_positions: int
    batch_size: int
    world_size: int
    begin: int = 0
    deal: Deal = Deal.STRIDED
    tail: Tail = Tail.PAD

    def __post_init__(self) -> None:
        check_int("num_positions", self.num_positions, 0)
        check_int("batch_size", self.batch_size, 1)
        check_int("world_size", self.world_size, 1)
        check_int("begin", self.begin, 0)
        if self.begin > self.num_positions:
            raise ConfigError(f"global position {self.begin} is past the epoch's {self.num_positions} positions")

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.world_size

    @property
    def origin(self) -> int:
        """The position where global batch 0 of this grid starts (< B W)."""
        return self.begin % self.global_batch_size

    @property
    def first_batch(self) -> int:
        """The first global batch this run reads (== ``num_batches`` when nothing of the epoch is left)."""
        return self.begin // self.global_batch_size

    @property
    def num_full(self) -> int:
        """Complete global batches from the origin to the epoch's end."""
        return (self.num_positions - self.origin) // self.global_batch_size

    @property
    def remainder(self) -> int:
        """Positions after the last complete global batch (< B W): dropped, or a last padded batch."""
        return self.num_positions - self.origin - self.num_full * self.global_batch_size

    @property
    def dropped(self) -> int:
        """Positions at the epoch's end that no rank reads (the remainder with ``Tail.DROP``, else 0)."""
        return self.remainder if self.tail is Tail.DROP else 0

    @property
    def tail_rows(self) -> int:
        """Rows of the last, incomplete global batch on every rank (0 when there is none or it is dropped)."""
        return 0 if self.tail is Tail.DROP else -(-self.remainder // self.world_size)

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
        return min(self.origin + batch * self.global_batch_size, self.num_positions)

    def rows(self, batch: int, rank: int) -> np.ndarray:
        """Positions rank ``rank`` reads in global batch ``batch`` (int64 [rows_in(batch)])."""
        if not 0 <= batch < self.num_batches:
            raise IndexError(f"global batch {batch} outside [0, {self.num_batches})")
        return self.rank_positions(rank, batch, batch + 1)

    def rank_positions(self, rank: int, first: int = 0, stop: int | None = None) -> np.ndarray:
        """Positions rank ``rank`` reads in global batches ``[first, stop)`` (default: all), in reading order
        (int64). Padding positions (past the epoch's end) wrap to this run's first position, ``begin``."""
        if not 0 <= rank < self.world_size:
            raise IndexError(f"rank {rank} outside [0, {self.world_size})")
        stop = self.num_batches if stop is None else min(stop, self.num_batches)
        full = np.arange(first, min(stop, self.num_full), dtype=np.int64)
        parts = [(self.origin + full[:, None] * self.global_batch_size
                  + self._dealt(rank, self.batch_size)[None, :]).reshape(-1)]
        if first <= self.num_full < stop:
            start = self.origin + self.num_full * self.global_batch_size
            parts.append(start + self._dealt(rank, self.tail_rows))
        positions = np.concatenate(parts)
        if self.tail_rows:  # padding wraps to this run's first positions, never to an earlier run's
            past = positions >= self.num_positions
            positions[past] = self.begin + (positions[past] - self.num_positions) % (self.num_positions - self.begin)
        return positions

    def _dealt(self, rank: int, rows: int) -> np.ndarray:
        """Offsets in a global batch of ``rows`` rows per rank that rank ``rank`` reads (int64 [rows])."""
        if self.deal is Deal.STRIDED:
            return rank + self.world_size * np.arange(rows, dtype=np.int64)
        return rank * rows + np.arange(rows, dtype=np.int64)

    def fresh(self) -> GlobalGrid:
        """The same job's grid for a run of an epoch from its start."""
        return replace(self, begin=0)


class GlobalPosition(NamedTuple):
    """Where a job is in the data, whatever its topology: positions ``[0, sequence)`` of ``epoch`` consumed."""

    epoch: int
    sequence: int


class GridStart(NamedTuple):
    """Where a job starts reading: ``epoch``, its ``grid`` and the first global ``batch`` of it to read
    (``grid.num_batches`` when nothing of the epoch is left)."""

    epoch: int
    grid: GlobalGrid
    batch: int


def resume_grid(position: GlobalPosition, num_sequences: int, batch_size: int, world_size: int) -> GridStart:
    """The token grid (``Deal.CONTIGUOUS``, ``Tail.DROP``) a job of (batch_size, world_size) reads
    ``position.epoch`` on from ``position`` on: its first batch is ``sequence // (B W)``."""
    check_int("epoch", position.epoch, 0)
    grid = GlobalGrid(num_sequences, batch_size, world_size, check_int("sequence", position.sequence, 0),
                      deal=Deal.CONTIGUOUS, tail=Tail.DROP)
    return GridStart(position.epoch, grid, grid.first_batch)


def data_identity(shards: Sequence[ShardInfo]) -> str:
    """sha256 (hex) of the shards global positions index: each one's name, samples, bytes and sha256, in order."""
    rows = [[s.name, s.num_samples, s.bytes, s.sha256] for s in shards]
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()


def order_digest(order: np.ndarray, start: int, stop: int, *, epoch: int, data: str) -> str:
    """sha256 (hex) of which indices global positions ``[start, stop)`` of ``order`` (epoch ``epoch``) hold.

    Over the data's identity, the epoch and the indices (int64, little-endian): equal digests
    mean the same samples (or sequences) of the same data in the same order.
    """
    check_int("start", start, 0)
    check_int("stop", stop, 0)
    if not start <= stop <= order.size:
        raise IndexError(f"global positions [{start}, {stop}) outside the epoch's {order.size} samples")
    digest = OrderDigest(_DIGEST_TAG + f"{data}\n{epoch}\n".encode(), ("index",))
    digest.update(order[start:stop, None])
    return digest.hexdigest()


class OrderDigest:
    """The one order digest: an incremental sha256 of a ``tag``, then rows of int64s (little-endian) named
    ``fields``, in order, so that it does not depend on how a range is chunked (``update(rows)``: int64
    [m, len(fields)]; ``hexdigest()``). A sample dataset's rows are its indices (``order_digest``); a token
    stream's, its sequences' segments (``loaders.tokens.digest``)."""

    def __init__(self, tag: bytes, fields: tuple[str, ...]) -> None:
        self._hash = hashlib.sha256(tag)
        self.fields = fields
        self.rows = 0

    def update(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype="<i8")
        if rows.ndim != 2 or rows.shape[1] != len(self.fields):
            raise ValueError(f"digest rows must be int64 [m, {len(self.fields)}] {self.fields} (got {rows.shape})")
        self._hash.update(rows.tobytes())
        self.rows += rows.shape[0]

    def hexdigest(self) -> str:
        return self._hash.hexdigest()
