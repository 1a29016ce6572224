"""``TokenSource``: the batch source ``loaders.DataLoader`` reads a ``TokenDataset`` or ``Mixture`` with.

The loader's seam (``loaders.loader.batch_source``): a dataset's ``batch_source(request)``
returns one when the user gives no sampler. Position p of an epoch on this rank is global
batch p of the epoch's grid (``loaders.tokens.distribution``): rank r reads rows
``origin + p B W + r B + [0, B)``; every rank has the same number of batches (the last
incomplete global batch is dropped). Each job's indices are ``StreamIndex(sequence, epoch,
segment)``: the epoch and a resumed mixture's schedule segment travel with the work to
every copy of the dataset (threads, worker processes, persistent ones), which keep none.

State (key ``"tokens"``, version 1): the *global* position, plain values::

    {"version": 1, "epoch": 3, "sequence": 4096, "batch_size": 16, "world_size": 4, "rank": 2,
     "stream": <dataset.stream_state(epoch, sequence, segment)>}

``sequence`` counts the epoch's sequences consumed by all ranks together (``origin + position
x B x W``, from the owner's position when the state is written), so a state saved on any
rank resumes every rank of a job of any (B', W'): ``resume_point`` gives position
``sequence // (B' W')`` on the grid whose origin is ``sequence mod B' W'`` (``resume_grid``),
kept for that epoch only. With B' W' = B W that is exactly the uninterrupted run's batches;
otherwise the same sequences from there on, nothing lost or repeated. ``"stream"`` is the
dataset's: its data (``describe()``) for a ``TokenDataset``, the mixture's state (cursors,
weights, exhaustion, schedule segment) for a ``Mixture``; other data, seq_len, seed or
tokenizer are refused naming what differs, and a mixture's changed weights take effect
from the saved position (one log line). ``batch_size``, ``world_size`` and ``rank`` say
where it was saved; they matter only for batches handed over out of order (``in_order=False``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from loaders.state_keys import KEY_BATCH_SIZE, KEY_EPOCH, KEY_RANK, KEY_VERSION, KEY_WORLD_SIZE
from loaders.errors import ConfigError
from loaders.loader.batch_source import Job, SourceRequest, ahead_positions, state_count
from loaders.loader.progress import KEY_AHEAD, Where
from loaders.read.topology import Topology
from loaders.tokens.distribution import GlobalGrid, GlobalPosition, GridStart, resume_grid
from loaders.tokens.mixture_state import ScheduleSegment
from loaders.tokens.stream import StreamIndex, TokenStream

__all__ = [
    "KEY_SEQUENCE", "KEY_STREAM", "KEY_TOKENS", "TOKEN_SOURCE_STATE_KEYS", "TOKEN_SOURCE_STATE_VERSION", "TokenSource",
]

KEY_TOKENS = "tokens"  # the source's key in the loader's state
TOKEN_SOURCE_STATE_VERSION = 1
KEY_SEQUENCE = "sequence"  # sequences [0, sequence) of the epoch consumed by all ranks
KEY_STREAM = "stream"  # the dataset's stream_state()
TOKEN_SOURCE_STATE_KEYS = (KEY_VERSION, KEY_EPOCH, KEY_SEQUENCE, KEY_BATCH_SIZE, KEY_WORLD_SIZE, KEY_RANK, KEY_STREAM)


@dataclass(frozen=True)
class Resumed:
    """The epoch a state was loaded in: its grid's ``origin`` and the stream's schedule ``segment`` there."""

    epoch: int
    origin: int
    segment: ScheduleSegment | None



class TokenSource:
    """The batches of a token stream on this rank, by global position (see the module docstring).

    stream: the ``TokenDataset`` or ``Mixture`` (its ``topology``, else the detected one).
    request: the loader's batching and the owner of (epoch, position). ``batch_size=None``
    (no batching) reads rows of one. ``shuffle`` and ``drop_last`` change nothing: the
    order is the dataset's (documents permuted per epoch by its seed) and the last
    incomplete global batch is always dropped (every rank the same number of batches).
    """

    key = KEY_TOKENS
    identifies_data = True  # the stream checks its data: the loader does not compare dataset_len

    def __init__(self, stream: TokenStream, request: SourceRequest) -> None:
        self.stream = stream
        self.batch_size = request.batch_size or 1
        topology = stream.topology or Topology.detect()
        self.rank, self.world_size = topology.rank, topology.world_size
        self._owner = request.owner
        self._resumed: Resumed | None = None  # set by load_state_dict, for that epoch's run only

    def _segment(self, epoch: int, where: Where) -> tuple[int, ScheduleSegment | None]:
        """(grid origin, schedule segment) of ``epoch`` seen from the owner at ``where``: a loaded state's for
        the run of its epoch it resumed (not for a new run of that epoch, about to begin)."""
        resumed = self._resumed
        new_run = where.epoch == epoch and not where.begun
        if resumed is not None and resumed.epoch == epoch and not new_run:
            return resumed.origin, resumed.segment
        return 0, None

    def grid(self, where: Where) -> tuple[GlobalGrid, ScheduleSegment | None]:
        """The global batch grid of ``where.epoch`` and the segment its indices carry."""
        origin, segment = self._segment(where.epoch, where)
        length = self.stream.epoch_length(where.epoch, segment)
        return GlobalGrid(length, self.batch_size, self.world_size, origin), segment

    def num_batches(self) -> int:
        """This rank's batches of the epoch being read (the same on every rank)."""
        return self.grid(self._owner.where())[0].num_batches

    def num_samples(self) -> int:
        return self.num_batches() * self.batch_size

    def jobs(self, where: Where, *, primary: bool) -> Iterator[Job]:
        """The epoch's jobs from ``where.position`` on, leaving out ``where.ahead``; a detached pass (not
        ``primary``) reads the epoch from its start, as a fresh run of it."""
        if not primary:
            where = Where(where.epoch)
        elif not where.begun:
            self._resumed = None  # a new run of an epoch: a loaded state's grid no longer applies
        grid, segment = self.grid(where)
        return self._jobs(where, grid, segment)

    def _jobs(self, where: Where, grid: GlobalGrid, segment: ScheduleSegment | None) -> Iterator[Job]:
        for position in range(where.position, grid.num_batches):
            if position not in where.ahead:
                rows = grid.rows(position, self.rank)
                yield Job(where.epoch, position, [StreamIndex(s, where.epoch, segment) for s in rows])

    # ------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """The global position of the owner's (epoch, position), with the stream's state there."""
        where = self._owner.where()
        grid, segment = self.grid(where)
        sequence = grid.origin + where.position * grid.global_batch_size
        return {KEY_VERSION: TOKEN_SOURCE_STATE_VERSION, KEY_EPOCH: where.epoch, KEY_SEQUENCE: sequence,
                KEY_BATCH_SIZE: self.batch_size, KEY_WORLD_SIZE: self.world_size, KEY_RANK: self.rank,
                KEY_STREAM: self.stream.stream_state(where.epoch, sequence, segment)}

    def _read(self, nest: object, *, quiet: bool) -> tuple[GridStart, ScheduleSegment | None]:
        """A saved nest checked against the stream, translated to this loader's grid."""
        if not isinstance(nest, Mapping) or nest.get(KEY_VERSION) != TOKEN_SOURCE_STATE_VERSION:
            got = nest.get(KEY_VERSION) if isinstance(nest, Mapping) else type(nest).__name__
            raise ConfigError(f"DataLoader state {KEY_TOKENS!r} must be a token stream's state of version "
                              f"{TOKEN_SOURCE_STATE_VERSION} (got {got!r})")
        missing = [key for key in TOKEN_SOURCE_STATE_KEYS if key not in nest]
        if missing:
            raise ConfigError(f"DataLoader state {KEY_TOKENS!r} lacks {missing} (got keys {sorted(nest)})")
        position = GlobalPosition(state_count(KEY_TOKENS, nest, KEY_EPOCH), state_count(KEY_TOKENS, nest, KEY_SEQUENCE))
        segment = self.stream.resume(nest[KEY_STREAM], quiet=quiet)
        length = self.stream.epoch_length(position.epoch, segment)
        if position.sequence > length:
            raise ConfigError(f"DataLoader state {KEY_TOKENS!r}: sequence {position.sequence} is past the "
                              f"{length} sequences of epoch {position.epoch}")
        return resume_grid(position, length, self.batch_size, self.world_size), segment

    def resume_point(self, state: Mapping[str, Any]) -> Where:
        """This loader's (epoch, position) for the saved global position, on its own (B, W)."""
        nest = state[self.key]
        start, _ = self._read(nest, quiet=True)
        if state[KEY_EPOCH] != start.epoch:
            raise ConfigError(f"DataLoader state: epoch {state[KEY_EPOCH]!r} but {KEY_TOKENS!r} epoch "
                              f"{start.epoch} (an inconsistent state)")
        return Where(start.epoch, start.batch, self._ahead(state[KEY_AHEAD], nest), begun=True)

    def _ahead(self, ahead: object, nest: Mapping[str, Any]) -> frozenset[int]:
        """Positions handed over out of order: this rank's, meaningful on the same rank, B and W only."""
        return ahead_positions(KEY_TOKENS, ahead, nest, (self.rank, self.batch_size, self.world_size))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Read the saved epoch on the grid ``resume_point`` chose (and a mixture's segment), that epoch only."""
        start, segment = self._read(state, quiet=False)
        self._resumed = Resumed(start.epoch, start.grid.origin, segment)

    # ------------------------------------------------------------ the order digest

    def order_digest(self, start: int, stop: int, epoch: int | None = None) -> str:
        """sha256 (hex) of the data global sequences ``[start, stop)`` of ``epoch`` (default: the one being
        read) hold, as this loader reads them (``loaders.tokens.digest``)."""
        where = self._owner.where()
        epoch = where.epoch if epoch is None else epoch
        _, segment = self._segment(epoch, where)
        return self.stream.order_digest(start, stop, epoch, segment)
