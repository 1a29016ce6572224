"""``GlobalSource``: the one batch source that reads a dataset by global position (samples and token sequences).

The loader's seam (``loaders.loader.batch_source``): a dataset's ``batch_source(request)``
returns a ``PositionedData``, what its global positions index and how (a sample dataset's
order, ``loaders.read.sample_positions.SampleOrder``; a token stream's sequences,
``loaders.tokens.loader_source.StreamPositions``), and the loader reads it through this
source. Position p of an epoch on this rank is global batch p of the epoch's
``loaders.read.grid.GlobalGrid`` (the data's ``deal`` and ``tail`` rules): every rank has the
same number of batches. Each job's indices are the data's (``job``): the grid, the epoch and
a mixture's schedule segment travel with the work to every copy of the dataset.

State (under the data's ``key``, ``"samples"`` or ``"tokens"``, version 2), plain values::

    {"version": 2, "epoch": 3, "global_position": 4096, "batch_size": 8, "world_size": 4, "rank": 1,
     "data": <the data's stream_state(epoch, global_position, segment)>}

``global_position`` counts the epoch's positions consumed by all ranks together (``origin +
position x B x W`` from the owner, ``Progress``, when the state is written), so a state saved
on any rank resumes every rank of a job of any (B', W'): ``resume_point`` gives position
``global_position // B'W'`` on the grid that begins there (origin ``global_position mod B'W'``),
for that epoch's run only (``Resumed``: the one resume rule). With B'W' = B W those are the
uninterrupted run's global batches; else the positions from there on, nothing lost or
repeated. ``"data"`` is checked by the data (``resume``), which refuses other data naming what
differs. Older states are read through ``upgrade_state``: a loader state of version 3 (this
document's version 1: ``"order"`` beside ``"data"`` for samples, ``"sequence"`` and ``"stream"`` for
tokens) and of version 2 (a sample dataset's per-rank batches under ``"plan"``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from loaders.errors import ConfigError
from loaders.loader.batch_source import KEY_SAMPLER, Job, SourceRequest, ahead_positions, state_count
from loaders.loader.progress import (KEY_AHEAD, KEY_BATCH_POSITION, KEY_DATASET_LEN, KEY_PLAN, LOADER_STATE_VERSION,
                                     Where)
from loaders.read.grid import Deal, GlobalGrid, Tail
from loaders.read.sample_positions import KEY_SAMPLES
from loaders.state_keys import (KEY_BATCH_SIZE, KEY_DATA, KEY_EPOCH, KEY_GLOBAL_POSITION, KEY_NUM_SAMPLES,
                                KEY_ORDER, KEY_RANK, KEY_VERSION, KEY_WORLD_SIZE)

__all__ = ["NEST_KEYS", "SOURCE_VERSION", "GlobalSource", "PositionedData", "Resumed", "upgrade_state"]

SOURCE_VERSION = 2  # 2: one document for samples and tokens (1: "global_position" + "order" or "sequence" + "stream")
V1_STREAM, V1_SEQUENCE = "stream", "sequence"  # a token stream's document of version 1 (now "data", "global_position")
NEST_KEYS = (KEY_VERSION, KEY_EPOCH, KEY_GLOBAL_POSITION, KEY_BATCH_SIZE, KEY_WORLD_SIZE, KEY_RANK, KEY_DATA)


@runtime_checkable
class PositionedData(Protocol):
    """What ``GlobalSource`` reads by global position: what the positions index, how they are dealt, the checks.

    key: the source's key in the loader's state. rank, world_size: this rank of the job.
    deal, tail: the grid's rules (``loaders.read.grid``). A ``segment`` is a mixture's schedule
    segment under which a resumed epoch is read (None: the epoch's own; samples have none).
    """

    key: str
    rank: int
    world_size: int
    deal: Deal
    tail: Tail

    def epoch_length(self, epoch: int, segment: Any = None) -> int:
        """Global positions of ``epoch`` (all ranks)."""
        ...

    def indices(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """What global ``positions`` of ``epoch`` hold (int64, same shape): samples of the order, or sequences."""
        ...

    def job(self, epoch: int, rows: np.ndarray, grid: GlobalGrid, segment: Any) -> Sequence[Any]:
        """One batch's dataset indices from its ``rows`` (``indices``' values, int64)."""
        ...

    def stream_state(self, epoch: int, sequence: int, segment: Any = None) -> dict[str, Any]:
        """Plain values a later job checks the data against (the state's ``"data"``)."""
        ...

    def resume(self, state: Any, *, quiet: bool = False) -> Any:
        """Check a ``stream_state`` (ConfigError naming what differs); the segment to read on with."""
        ...

    def order_digest(self, start: int, stop: int, epoch: int | None = None, segment: Any = None) -> str:
        """sha256 (hex) of which data global positions ``[start, stop)`` of ``epoch`` hold."""
        ...


@dataclass(frozen=True)
class Resumed:
    """A loaded state: the run of ``epoch`` that begins at global position ``begin``, under ``segment``."""

    epoch: int
    begin: int
    segment: Any = None


class GlobalSource:
    """The batches of ``data`` on this rank, by global position (see the module docstring).

    request: the loader's batching (``batch_size`` None: rows of one) and the owner of (epoch, position).
    """

    identifies_data = True  # the data checks itself: the loader does not compare dataset_len

    def __init__(self, data: PositionedData, request: SourceRequest) -> None:
        self.data = data
        self.key = data.key
        self.batch_size = request.batch_size or 1
        self.rank, self.world_size = data.rank, data.world_size
        self._owner = request.owner
        self._resumed: Resumed | None = None  # set by load_state_dict, for the run of its epoch it resumed
        self._share: tuple[int, GlobalGrid, np.ndarray] | None = None  # (epoch, grid, this rank's indices)

    def _from(self, epoch: int, where: Where) -> Resumed:
        """Where the run of ``epoch`` seen from the owner at ``where`` begins: a loaded state's point for the run
        it resumed (not for a new run of that epoch, about to begin), else the epoch's start."""
        resumed = self._resumed
        new_run = where.epoch == epoch and not where.begun
        if resumed is not None and resumed.epoch == epoch and not new_run:
            return resumed
        return Resumed(epoch, 0)

    def grid(self, where: Where) -> tuple[GlobalGrid, Any]:
        """The grid ``where.epoch`` is read on, and the segment its indices carry."""
        start = self._from(where.epoch, where)
        return self._grid(where.epoch, start.begin, start.segment), start.segment

    def _grid(self, epoch: int, begin: int, segment: Any) -> GlobalGrid:
        data = self.data
        return GlobalGrid(data.epoch_length(epoch, segment), self.batch_size, self.world_size, begin,
                          deal=data.deal, tail=data.tail)

    def num_batches(self) -> int:
        """This rank's batches of the epoch being read (the same on every rank)."""
        return self.grid(self._owner.where())[0].num_batches

    def num_samples(self) -> int:
        grid = self.grid(self._owner.where())[0]
        return grid.num_full * self.batch_size + grid.tail_rows

    def jobs(self, where: Where, *, primary: bool) -> Iterator[Job]:
        """The epoch's jobs from ``where.position`` on, leaving out ``where.ahead``; a detached pass (not
        ``primary``) reads the epoch from its start, as a fresh run of it."""
        if not primary:
            where = Where(where.epoch)
        elif not where.begun:
            self._resumed = None  # a new run of an epoch: a loaded state's grid no longer applies
        grid, segment = self.grid(where)
        return self._jobs(where, grid, segment, self._rank_share(where.epoch, grid))

    def _rank_share(self, epoch: int, grid: GlobalGrid) -> np.ndarray:
        """This rank's indices over the whole grid, in reading order (kept for the epoch and grid)."""
        if self._share is None or self._share[:2] != (epoch, grid):
            self._share = (epoch, grid, self.data.indices(epoch, grid.rank_positions(self.rank)))
        return self._share[2]

    def _jobs(self, where: Where, grid: GlobalGrid, segment: Any, mine: np.ndarray) -> Iterator[Job]:
        size, full, tail = self.batch_size, grid.num_full, grid.tail_rows
        for position in range(where.position, grid.num_batches):
            if position not in where.ahead:
                rows = mine[position * size:position * size + (size if position < full else tail)]
                yield Job(where.epoch, position, self.data.job(where.epoch, rows, grid, segment))

    # ------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """The global position of the owner's (epoch, position), with the data's state there."""
        where = self._owner.where()
        grid, segment = self.grid(where)
        position = grid.position_after(min(where.position, grid.num_batches))
        return {KEY_VERSION: SOURCE_VERSION, KEY_EPOCH: where.epoch, KEY_GLOBAL_POSITION: position,
                KEY_BATCH_SIZE: self.batch_size, KEY_WORLD_SIZE: self.world_size, KEY_RANK: self.rank,
                KEY_DATA: self.data.stream_state(where.epoch, position, segment)}

    def _read(self, nest: object, *, quiet: bool) -> Resumed:
        """A saved nest checked against the data: the run it resumes."""
        if not isinstance(nest, Mapping) or nest.get(KEY_VERSION) != SOURCE_VERSION:
            got = nest.get(KEY_VERSION) if isinstance(nest, Mapping) else type(nest).__name__
            raise ConfigError(f"DataLoader state {self.key!r} must be a global-position state of version "
                              f"{SOURCE_VERSION} (got version {got!r}); hint: load it with the DataLoader itself, "
                              "which reads older versions")
        missing = [key for key in NEST_KEYS if key not in nest]
        if missing:
            raise ConfigError(f"DataLoader state {self.key!r} lacks {missing} (got keys {sorted(nest)})")
        epoch = state_count(self.key, nest, KEY_EPOCH)
        position = state_count(self.key, nest, KEY_GLOBAL_POSITION)
        segment = self.data.resume(nest[KEY_DATA], quiet=quiet)
        length = self.data.epoch_length(epoch, segment)
        if position > length:
            raise ConfigError(f"DataLoader state {self.key!r}: global position {position} is past the {length} "
                              f"positions of epoch {epoch}")
        return Resumed(epoch, position, segment)

    def resume_point(self, state: Mapping[str, Any]) -> Where:
        """This loader's (epoch, position) for the saved global position, on its own (B, W)."""
        nest = state[self.key]
        start = self._read(nest, quiet=True)
        if state[KEY_EPOCH] != start.epoch:
            raise ConfigError(f"DataLoader state: epoch {state[KEY_EPOCH]!r} but {self.key!r} epoch "
                              f"{start.epoch} (an inconsistent state)")
        first = self._grid(start.epoch, start.begin, start.segment).first_batch
        ahead = ahead_positions(self.key, state[KEY_AHEAD], nest, (self.rank, self.batch_size, self.world_size),
                                any_rank=True)
        return Where(start.epoch, first, ahead, begun=True)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Read the saved epoch from its global position, on this loader's grid, for that epoch's run only."""
        self._resumed = self._read(state, quiet=False)

    def upgrade_state(self, state: Mapping[str, Any]) -> Mapping[str, Any]:
        """A loader state of an older version in this version's shape (``upgrade_state``); others as they are."""
        return upgrade_state(state, self.key, self.data.epoch_length(0))

    # ------------------------------------------------------------ the order digest

    def order_digest(self, start: int, stop: int, epoch: int | None = None) -> str:
        """sha256 (hex) of which data global positions ``[start, stop)`` of ``epoch`` (default: the one being
        read) hold, as this loader reads them: the same on every rank and topology."""
        where = self._owner.where()
        epoch = where.epoch if epoch is None else epoch
        return self.data.order_digest(start, stop, epoch, self._from(epoch, where).segment)


# ------------------------------------------------------------ older states

def upgrade_state(state: Mapping[str, Any], key: str, num_positions: int) -> Mapping[str, Any]:
    """A loader state of version 3 or 2 holding a global-position source's state (under ``key``; version 2: a
    sample dataset's per-rank batches under ``"plan"``) in the shape of ``LOADER_STATE_VERSION``; any other state
    as it is."""
    if not isinstance(state, Mapping):
        return state
    version = state.get(KEY_VERSION)
    if version == 3 and isinstance(state.get(key), Mapping):
        return {**state, KEY_VERSION: LOADER_STATE_VERSION, key: _nest_from_version_1(state[key])}
    if version == 2 and key == KEY_SAMPLES and key not in state \
            and isinstance(state.get(KEY_PLAN), Mapping):
        nest = _nest_from_plan(state, num_positions)
        kept = {name: value for name, value in state.items() if name != KEY_PLAN}
        return {**kept, KEY_VERSION: LOADER_STATE_VERSION, key: nest}
    return state


def _nest_from_version_1(nest: Mapping[str, Any]) -> Mapping[str, Any]:
    """A source document of version 1 as version 2: the position under one name, what it indexes under one."""
    if nest.get(KEY_VERSION) != 1:
        return nest  # refused by the source, naming the version
    if V1_STREAM in nest:  # a token stream's
        data, position = nest[V1_STREAM], nest.get(V1_SEQUENCE)
    else:  # a sample dataset's: the order's parameters joined what it indexes
        saved = nest.get(KEY_DATA)
        data, position = {**(saved if isinstance(saved, Mapping) else {}), KEY_ORDER: nest.get(KEY_ORDER)}, \
            nest.get(KEY_GLOBAL_POSITION)
    kept = {name: nest.get(name) for name in (KEY_EPOCH, KEY_BATCH_SIZE, KEY_WORLD_SIZE, KEY_RANK)}
    return {**kept, KEY_VERSION: SOURCE_VERSION, KEY_GLOBAL_POSITION: position, KEY_DATA: data}


def _nest_from_plan(state: Mapping[str, Any], num_positions: int) -> dict[str, Any]:
    """A version-2 state's ``"plan"`` (DistributedSampler's split: global positions ``[0, position x B x W)``)
    as a source document; ConfigError when it is a user's sampler's, which global positions cannot read."""
    nest = state[KEY_PLAN]
    world_size, batch_size = nest.get(KEY_WORLD_SIZE), state.get(KEY_BATCH_SIZE) or 1
    if nest.get(KEY_SAMPLER) is not None or not isinstance(world_size, int) or not isinstance(batch_size, int):
        raise ConfigError(f"DataLoader state of version {state.get(KEY_VERSION)}: its {KEY_PLAN!r} {dict(nest)!r} is "
                          "not this dataset's own order (a sampler's state, or no world size); it cannot be read "
                          "by global position; hint: resume it with the sampler it was saved with")
    position = state.get(KEY_BATCH_POSITION)
    consumed = min(position * batch_size * world_size, num_positions) if isinstance(position, int) else 0
    return {KEY_VERSION: SOURCE_VERSION, KEY_EPOCH: state.get(KEY_EPOCH), KEY_GLOBAL_POSITION: consumed,
            KEY_BATCH_SIZE: batch_size, KEY_WORLD_SIZE: world_size,
            KEY_RANK: None,  # not recorded then: the rank split and order are the same
            KEY_DATA: {KEY_NUM_SAMPLES: state.get(KEY_DATASET_LEN), KEY_ORDER: None}}
