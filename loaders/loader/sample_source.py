"""``SampleSource``: the batch source ``loaders.DataLoader`` reads ``ShardDataset`` / ``ParquetShardDataset`` with.

The loader's seam (``loaders.loader.batch_source``), used when the user gives no sampler and
the dataset brings a ``default_sampler`` (a ``ShardSampler``) and a ``data_identity``: the
epoch's order (global or blocks, from (seed, epoch), as the sampler draws it) is read by
*global position* on a ``loaders.read.sample_grid.SampleGrid``: global batch p holds order
positions ``origin + p B W + [0, B W)``, rank r reads every W-th of them. Position p of an
epoch on this rank is global batch p; every rank has the same number of batches. Each job's
indices are ``GridIndex(sample, epoch, grid)``: the grid travels with the work to every copy
of the dataset (threads, worker processes started before a resume), which plans its node
cache from it.

State (key ``"samples"``, version 1), plain values::

    {"version": 1, "epoch": 3, "global_position": 4096, "batch_size": 8, "world_size": 4, "rank": 1,
     "order": {"mode": "blocks", "block_size": 1024, "seed": 5},
     "data": {"digest": "<sha256 of the shards>", "num_samples": 50000}}

``global_position`` counts the epoch's order positions consumed by all ranks together
(``origin + position x B x W``, from the owner when the state is written), so a state saved
on any rank resumes every rank of a job of any (B', W'): ``resume_point`` gives position
``global_position // B'W'`` on the grid whose origin is ``global_position mod B'W'``, for that
epoch's run only. With B'W' = B W those are the uninterrupted run's global batches; else the
positions from there on, nothing lost or repeated. Other data, order mode or block size are
refused naming what differs (the seed is the loader's, checked with its state). A state of the
loader's version 2 (this source's positions under ``"plan"``, DistributedSampler's split)
is read through ``upgrade_state``: its per-rank position x B x W is the same global position.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.state_keys import KEY_BATCH_SIZE, KEY_DATA, KEY_EPOCH, KEY_RANK, KEY_VERSION, KEY_WORLD_SIZE
from loaders.errors import ConfigError
from loaders.loader.batch_source import KEY_SAMPLER, Job, ahead_positions, state_count
from loaders.loader.progress import (KEY_AHEAD, KEY_BATCH_POSITION, KEY_DATASET_LEN, KEY_PLAN, LOADER_STATE_VERSION,
                                     Where)
from loaders.loader.stage import Position
from loaders.read.order import OrderMode, epoch_order
from loaders.read.read_plan import ReadPlan
from loaders.read.sample_grid import SampleGrid, order_digest
from loaders.read.sampler import SampleBatch, ShardSampler

__all__ = ["KEY_SAMPLES", "DataId", "SampleSource", "sample_source"]

KEY_SAMPLES = "samples"  # the source's key in the loader's state
SOURCE_VERSION = 1
KEY_GLOBAL_POSITION = "global_position"  # order positions [0, global_position) of the epoch consumed by all ranks
KEY_ORDER = "order"
KEY_MODE, KEY_BLOCK_SIZE, KEY_SEED = "mode", "block_size", "seed"
KEY_DIGEST, KEY_NUM_SAMPLES = "digest", "num_samples"
NEST_KEYS = (KEY_VERSION, KEY_EPOCH, KEY_GLOBAL_POSITION, KEY_BATCH_SIZE, KEY_WORLD_SIZE, KEY_RANK, KEY_ORDER,
             KEY_DATA)


@dataclass(frozen=True)
class DataId:
    """What the global positions index: the shards' digest (``data_identity``) and the dataset's samples."""

    digest: str
    num_samples: int

    def as_state(self) -> dict[str, Any]:
        return {KEY_DIGEST: self.digest, KEY_NUM_SAMPLES: self.num_samples}


def sample_source(dataset: Any, sampler: Any, *, batch_size: int | None, owner: Position) -> SampleSource | None:
    """The dataset's reading by global position, when the loader made its sampler from the dataset's
    ``default_sampler`` (a ``ShardSampler`` of sample indices) and the dataset names its data
    (``data_identity``); else None (the sampler's own batches, ``BatchPlan``)."""
    identity = getattr(dataset, "data_identity", None)
    if not isinstance(sampler, ShardSampler) or sampler.yields_ints or not isinstance(identity, str):
        return None
    plan = sampler.read_plan
    return SampleSource(plan, rank=sampler.topology.rank, batch_size=batch_size,
                        data=DataId(identity, plan.num_samples), owner=owner)



class SampleSource:
    """The batches of a sample dataset on this rank, by global position (see the module docstring).

    plan: the order's parameters and the job's world size and ``drop_last`` (the loader's
    ``ShardSampler.read_plan``). rank: this rank. batch_size: rows per rank (None: rows of
    one, no batching). data: what the positions index. owner: the loader's ``Progress``.
    """

    key = KEY_SAMPLES
    identifies_data = True  # checks the data itself: the loader does not compare dataset_len

    def __init__(self, plan: ReadPlan, *, rank: int, batch_size: int | None, data: DataId, owner: Position) -> None:
        self.plan = plan
        self.rank = rank
        self.batch_size = batch_size or 1
        self.data = data
        self._owner = owner
        self._resumed: tuple[int, int] | None = None  # (epoch, global position) of a loaded state, that run only
        self._share: tuple[int, SampleGrid, np.ndarray] | None = None  # (epoch, grid, this rank's samples)

    @property
    def world_size(self) -> int:
        return self.plan.world_size

    def grid(self, where: Where) -> SampleGrid:
        """The grid ``where.epoch`` is read on: from a loaded state's position for the run it resumed (not for a
        new run of that epoch, about to begin), else from the epoch's start."""
        resumed = self._resumed
        begin = 0
        if resumed is not None and resumed[0] == where.epoch and where.begun:
            begin = resumed[1]
        return SampleGrid(self.plan.num_samples, self.batch_size, self.world_size, self.plan.drop_last, begin)

    def num_batches(self) -> int:
        """This rank's batches of the epoch being read (the same on every rank)."""
        return self.grid(self._owner.where()).num_batches

    def num_samples(self) -> int:
        grid = self.grid(self._owner.where())
        return grid.num_full * self.batch_size + grid.tail_rows

    def order(self, epoch: int) -> np.ndarray:
        """The epoch's order of every rank: sample indices, int64 [num_samples]."""
        plan = self.plan
        return epoch_order(plan.num_samples, seed=plan.seed, epoch=epoch, mode=plan.mode, block_size=plan.block_size)

    def jobs(self, where: Where, *, primary: bool) -> Iterator[Job]:
        """The epoch's jobs from ``where.position`` on, leaving out ``where.ahead``; a detached pass (not
        ``primary``) reads the epoch from its start, as a fresh run of it."""
        if not primary:
            where = Where(where.epoch)
        elif not where.begun:
            self._resumed = None  # a new run of an epoch: a loaded state's grid no longer applies
        grid = self.grid(where)
        return self._jobs(where, grid, self._rank_samples(where.epoch, grid))

    def _rank_samples(self, epoch: int, grid: SampleGrid) -> np.ndarray:
        """This rank's samples over the whole grid, in reading order (kept for the epoch and grid)."""
        if self._share is None or self._share[:2] != (epoch, grid):
            self._share = (epoch, grid, self.order(epoch)[grid.rank_positions(self.rank)])
        return self._share[2]

    def _jobs(self, where: Where, grid: SampleGrid, mine: np.ndarray) -> Iterator[Job]:
        size, full, tail = self.batch_size, grid.num_full, grid.tail_rows
        for position in range(where.position, grid.num_batches):
            if position not in where.ahead:
                rows = mine[position * size:position * size + (size if position < full else tail)]
                yield Job(where.epoch, position, SampleBatch(rows, where.epoch, grid=grid))

    # ------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """The global position of the owner's (epoch, position), with what it indexes and how it is ordered."""
        where = self._owner.where()
        grid = self.grid(where)
        return {KEY_VERSION: SOURCE_VERSION, KEY_EPOCH: where.epoch,
                KEY_GLOBAL_POSITION: grid.position_after(min(where.position, grid.num_batches)),
                KEY_BATCH_SIZE: self.batch_size, KEY_WORLD_SIZE: self.world_size, KEY_RANK: self.rank,
                KEY_ORDER: {KEY_MODE: self.plan.mode.value, KEY_BLOCK_SIZE: self.plan.block_size,
                            KEY_SEED: self.plan.seed},
                KEY_DATA: self.data.as_state()}

    def _read(self, nest: object) -> tuple[int, int]:
        """A saved nest checked against this loader's data and order: (epoch, global position)."""
        if not isinstance(nest, Mapping) or nest.get(KEY_VERSION) != SOURCE_VERSION:
            got = nest.get(KEY_VERSION) if isinstance(nest, Mapping) else type(nest).__name__
            raise ConfigError(f"DataLoader state {KEY_SAMPLES!r} must be a sample dataset's state of version "
                              f"{SOURCE_VERSION} (got {got!r})")
        missing = [key for key in NEST_KEYS if key not in nest]
        if missing:
            raise ConfigError(f"DataLoader state {KEY_SAMPLES!r} lacks {missing} (got keys {sorted(nest)})")
        differences = self._differences(nest)
        if differences:
            raise ConfigError(f"DataLoader state {KEY_SAMPLES!r} was saved reading other data or another order: "
                              f"{'; '.join(differences)}. Resume with the dataset and order it was saved with")
        epoch = state_count(KEY_SAMPLES, nest, KEY_EPOCH)
        position = state_count(KEY_SAMPLES, nest, KEY_GLOBAL_POSITION)
        if position > self.plan.num_samples:
            raise ConfigError(f"DataLoader state {KEY_SAMPLES!r}: global position {position} is past the "
                              f"{self.plan.num_samples} samples of epoch {epoch}")
        return epoch, position

    def _differences(self, nest: Mapping[str, Any]) -> list[str]:
        """What differs between the saved data and order and this loader's ('what: saved x, now y')."""
        found = []
        data, order = nest[KEY_DATA], nest[KEY_ORDER]
        if isinstance(data, Mapping):
            now = self.data.as_state()
            for key in (KEY_NUM_SAMPLES, KEY_DIGEST):
                if data.get(key) is not None and data.get(key) != now[key]:
                    found.append(f"data {key}: saved {data.get(key)!r}, now {now[key]!r}")
        if isinstance(order, Mapping):
            if order.get(KEY_MODE) != self.plan.mode.value:
                found.append(f"order mode: saved {order.get(KEY_MODE)!r}, now {self.plan.mode.value!r}")
            elif self.plan.mode is OrderMode.BLOCKS and order.get(KEY_BLOCK_SIZE) != self.plan.block_size:
                found.append(f"block_size: saved {order.get(KEY_BLOCK_SIZE)!r}, now {self.plan.block_size}")
        return found

    def resume_point(self, state: Mapping[str, Any]) -> Where:
        """This loader's (epoch, position) for the saved global position, on its own (B, W)."""
        nest = state[self.key]
        epoch, position = self._read(nest)
        if state[KEY_EPOCH] != epoch:
            raise ConfigError(f"DataLoader state: epoch {state[KEY_EPOCH]!r} but {KEY_SAMPLES!r} epoch "
                              f"{epoch} (an inconsistent state)")
        grid = SampleGrid(self.plan.num_samples, self.batch_size, self.world_size, self.plan.drop_last, position)
        return Where(epoch, grid.first_batch, self._ahead(state[KEY_AHEAD], nest), begun=True)

    def _ahead(self, ahead: object, nest: Mapping[str, Any]) -> frozenset[int]:
        """Positions handed over out of order: this rank's, meaningful on the same rank, B and W only."""
        return ahead_positions(KEY_SAMPLES, ahead, nest, (self.rank, self.batch_size, self.world_size), any_rank=True)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Read the saved epoch from its global position, on this loader's grid, for that epoch's run only."""
        self._resumed = self._read(state)

    def upgrade_state(self, state: Mapping[str, Any]) -> Mapping[str, Any]:
        """A loader state of version ``LOADER_STATE_VERSION - 1`` with this dataset's positions under ``"plan"``
        (``DistributedSampler``'s split, which covers global positions ``[0, position x B x W)``) as a state
        of this version; any other state as it is."""
        if not isinstance(state, Mapping) or state.get(KEY_VERSION) != LOADER_STATE_VERSION - 1 or self.key in state:
            return state
        nest = state.get(KEY_PLAN)
        if not isinstance(nest, Mapping):
            return state
        world_size, batch_size = nest.get(KEY_WORLD_SIZE), state.get(KEY_BATCH_SIZE) or 1
        if nest.get(KEY_SAMPLER) is not None or not isinstance(world_size, int) or not isinstance(batch_size, int):
            old = LOADER_STATE_VERSION - 1
            raise ConfigError(f"DataLoader state of version {old}: its {KEY_PLAN!r} {dict(nest)!r} is "
                              "not this dataset's own order (a sampler's state, or no world size); it cannot be read "
                              "by global position")
        position = state.get(KEY_BATCH_POSITION)
        consumed = min(position * batch_size * world_size, self.plan.num_samples) if isinstance(position, int) else 0
        samples = {KEY_VERSION: SOURCE_VERSION, KEY_EPOCH: state.get(KEY_EPOCH),
                   KEY_GLOBAL_POSITION: consumed, KEY_BATCH_SIZE: batch_size, KEY_WORLD_SIZE: world_size,
                   KEY_RANK: None, KEY_ORDER: None,  # not recorded then: the rank split and order are the same
                   KEY_DATA: {KEY_NUM_SAMPLES: state.get(KEY_DATASET_LEN)}}
        upgraded = {key: value for key, value in state.items() if key != KEY_PLAN}
        return {**upgraded, KEY_VERSION: LOADER_STATE_VERSION, self.key: samples}

    # ------------------------------------------------------------ the order digest

    def order_digest(self, start: int, stop: int, epoch: int | None = None) -> str:
        """sha256 (hex) of which samples global positions ``[start, stop)`` of ``epoch`` (default: the one being
        read) hold (``loaders.read.sample_grid.order_digest``): the same on every rank and topology."""
        epoch = self._owner.where().epoch if epoch is None else epoch
        return order_digest(self.order(epoch), start, stop, epoch=epoch, data=self.data.digest)
