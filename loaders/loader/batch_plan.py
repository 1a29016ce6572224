"""The sampler's batch source: the sampler's order cut into batches of indices, lazily, one ``Job`` at a time.

Nothing lists the epoch up front: a job is made when the workers ask for one, so the
first batch of an infinite sampler (detectron2 / mmengine ``InfiniteSampler``) arrives
at once and memory stays flat; the workers bound how far ahead jobs are requested.

Where the order comes from:

- a ``BatchSampler`` over a ``ShardSampler``: numpy slices of the rank's order for the
  epoch (``ShardSampler.indices``), no per-sample Python objects;
- any other sampler or batch sampler: iterated, the first ``start`` batches dropped
  (indices only: no sample is read) when an epoch resumes.

A sampler the loader created (``own_sampler``) follows the loader's epoch (its
``set_epoch`` is called here); a sampler the user gave keeps its own (never called).

State (key "plan"): ``{"sampler": <a user's stateful sampler's state_dict() taken when
the epoch being read began, else None>, "world_size": <of a ShardSampler's rank split,
or None>}``. Taken before the epoch draws its order, so restoring it and dropping the
consumed batches replays the epoch exactly; a sampler that instead resumes itself from
that state is caught (it yields fewer batches than its length) and reported, never a
silently short epoch. Positions count this rank's batches, so a state from another
world size or batch size is refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import islice
from typing import Any

import numpy as np
from torch.utils.data import BatchSampler, DistributedSampler, SequentialSampler

from loaders.errors import ConfigError
from loaders.loader.batch_source import KEY_SAMPLER, Job, length_or_none
from loaders.state_keys import KEY_BATCH_SIZE, KEY_EPOCH, KEY_WORLD_SIZE
from loaders.loader.progress import KEY_AHEAD, KEY_PLAN, KEY_BATCH_POSITION, Where, expect
from loaders.loader.stage import Position
from loaders.read.order import epoch_order
from loaders.read.grid import order_digest
from loaders.read.sampler import SampleBatch, ShardSampler
from loaders.read.topology import Topology

__all__ = ["BatchPlan", "LoaderSampler", "has_state", "is_deterministic", "own_sampler"]


def has_state(part: Any) -> bool:
    """True when ``part`` has ``state_dict()`` and ``load_state_dict()``."""
    return callable(getattr(part, "state_dict", None)) and callable(getattr(part, "load_state_dict", None))


def is_deterministic(part: Any) -> bool:
    """True when listing ``part`` again gives the same order (or it restores its own).

    A DistributedSampler's order is a function of its seed and the epoch its user sets.
    """
    if has_state(part) or isinstance(part, (SequentialSampler, DistributedSampler, range, list, tuple)):
        return True
    return isinstance(part, BatchSampler) and is_deterministic(part.sampler)


class LoaderSampler(ShardSampler):
    """The loader's shuffled sampler: plain ints, over the dataset's length as it is now (datasets may grow)."""

    yields_ints = True

    def __init__(self, dataset: Any, *, seed: int) -> None:
        super().__init__(len(dataset), shuffle=True, seed=seed, topology=Topology())
        self._dataset = dataset

    def _follow_length(self) -> None:
        size = len(self._dataset)
        if size != self._num_samples:
            self._num_samples, self._len, self._cached = size, size, None

    def __len__(self) -> int:
        self._follow_length()
        return super().__len__()

    def indices(self, epoch: int | None = None) -> Any:
        self._follow_length()
        return super().indices(epoch)

    def __iter__(self) -> Iterator[int]:  # type: ignore[override]  # plain ints, as torch's RandomSampler
        return (item.index for item in super().__iter__())


def own_sampler(dataset: Any, *, shuffle: bool, seed: int, drop_last: bool) -> Any:
    """The sampler the loader makes when the user gave none: the dataset's ``default_sampler`` (seeded,
    distributed, resumable), else ``LoaderSampler`` when shuffling, else None (torch's sequential one)."""
    make = getattr(dataset, "default_sampler", None)
    if callable(make):
        return make(shuffle=shuffle, seed=seed, drop_last=drop_last)
    return LoaderSampler(dataset, seed=seed) if shuffle else None


class BatchPlan:
    """The batches of an epoch as ``Job``s, from the loader's sampler and batch sampler (a ``BatchSource``).

    sampler, batch_sampler: as torch's DataLoader holds them (batch_sampler None when
    batching is off). owned: the loader created the sampler, so it follows the loader's
    epoch. batch_size: the loader's (a state's positions count batches of it). position:
    the owner of the epoch, read when the state is written. Constructing iterates nothing.
    """

    key = KEY_PLAN

    def __init__(self, sampler: Any, batch_sampler: Any, *, owned: bool, batch_size: int | None,
                 position: Position) -> None:
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.owned = owned
        self.batch_size = batch_size
        self._owner = position
        self._epoch_start: Any = None  # a user's stateful sampler's state when the epoch being read began

    @property
    def stateful_part(self) -> Any:
        """The sampler whose order is saved: a given batch sampler with state, else the sampler."""
        if self.batch_sampler is not None and not isinstance(self.batch_sampler, BatchSampler):
            return self.batch_sampler
        return self.sampler

    def num_batches(self) -> int | None:
        return length_or_none(self.batch_sampler if self.batch_sampler is not None else self.sampler)

    def num_samples(self) -> int | None:
        return length_or_none(self.sampler)

    def jobs(self, where: Where, *, primary: bool) -> Iterator[Job]:
        """The jobs of ``where.epoch`` from ``where.position`` on, leaving out ``where.ahead``.

        A primary pass of a user's stateful sampler snapshots the sampler as the epoch begins,
        or, when the epoch has begun already (resumed, or after a probe), restores that snapshot.
        """
        resumed = False
        if self.owned:  # ours: follows the loader's epoch, its order needs no saved state
            set_epoch = getattr(self.sampler, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(where.epoch)
        elif primary and has_state(self.stateful_part):
            resumed = where.begun and self._epoch_start is not None
            if resumed:
                self.stateful_part.load_state_dict(self._epoch_start)
            elif not where.begun:
                self._epoch_start = self.stateful_part.state_dict()
        start, received = (where.position, where.ahead) if primary else (0, frozenset[int]())
        if self._is_shard_batches():
            return self._shard_jobs(where.epoch, start, received)
        return self._listed_jobs(where.epoch, start, received, resumed)

    def _is_shard_batches(self) -> bool:
        return type(self.batch_sampler) is BatchSampler and isinstance(self.batch_sampler.sampler, ShardSampler)

    def _shard_jobs(self, epoch: int, start: int, received: frozenset[int]) -> Iterator[Job]:
        sampler: ShardSampler = self.batch_sampler.sampler
        size, drop_last = self.batch_sampler.batch_size, self.batch_sampler.drop_last
        order_epoch = epoch if self.owned else sampler.epoch  # a user's sampler keeps its own epoch
        mine = sampler.indices(order_epoch)
        stop = mine.size - mine.size % size if drop_last else mine.size
        plain = sampler.yields_ints
        for position, first in enumerate(range(0, stop, size)):
            if position >= start and position not in received:
                yield Job(epoch, position, SampleBatch(mine[first:first + size], order_epoch, plain=plain))

    def _listed_jobs(self, epoch: int, start: int, received: frozenset[int], resumed: bool) -> Iterator[Job]:
        part = self.stateful_part
        source = iter(self.batch_sampler) if self.batch_sampler is not None else ([i] for i in self.sampler)
        position = start
        for indices in islice(source, start, None):
            if position not in received:
                yield Job(epoch, position, indices if isinstance(indices, list) else list(indices))
            position += 1
        expected = self.num_batches() if resumed else None
        if expected is not None and position < expected:
            raise ConfigError(
                f"{type(part).__name__} yielded {max(0, position - start)} batches after load_state_dict where "
                f"{expected - start} of its {expected} remained: it resumes itself from its state, so the loader "
                "cannot replay the epoch it was saved in; give it advance(count) or resume at an epoch boundary")

    def state_dict(self) -> dict[str, Any]:
        """``{"sampler": state, "world_size": n}``: the sampler's state when the epoch being read began.

        sampler: None when the order needs none (ours, or a sampler without state); before
        the loader's epoch has begun, the sampler's state now. world_size: of a
        ShardSampler's rank split, else None.
        """
        part = self.stateful_part
        sampler_state = None
        if not self.owned and has_state(part):
            sampler_state = self._epoch_start if self._owner.where().begun else part.state_dict()
        return {KEY_SAMPLER: sampler_state, KEY_WORLD_SIZE: self._world_size()}

    def _world_size(self) -> int | None:
        return self.batch_sampler.sampler.topology.world_size if self._is_shard_batches() else None

    def resume_point(self, state: Mapping[str, Any]) -> Where:
        """The saved point itself: positions mean this rank's batches of this batch size, so the batch
        size and the rank split's world size must match, and a mid-epoch point needs an order that
        can be listed again."""
        expect(state, KEY_BATCH_SIZE, self.batch_size)
        nest = state[self.key]
        if not isinstance(nest, Mapping) or KEY_SAMPLER not in nest:
            raise ConfigError(f"DataLoader state {self.key!r} must be a mapping with {KEY_SAMPLER!r} (got {nest!r})")
        world_size = self._world_size()
        if nest.get(KEY_WORLD_SIZE) != world_size:
            raise ConfigError(f"DataLoader state {self.key!r} world_size: expected {world_size} (this loader), got "
                              f"{nest.get(KEY_WORLD_SIZE)!r}; resume with the same number of ranks")
        if state[KEY_BATCH_POSITION] or state[KEY_AHEAD]:
            self._check_replayable()
        ahead = frozenset(int(p) for p in state[KEY_AHEAD])
        return Where(state[KEY_EPOCH], state[KEY_BATCH_POSITION], ahead, begun=True)

    def _check_replayable(self) -> None:
        """ConfigError unless a mid-epoch position in this order can be found again."""
        if self.owned or self._is_shard_batches():
            return
        part = self.stateful_part
        if not is_deterministic(part):
            raise ConfigError(f"cannot resume mid-epoch with {type(part).__name__}: its order is not reproducible; "
                              "use shuffle=True (a seeded, resumable order), SequentialSampler, or a sampler "
                              "with state_dict()/load_state_dict()")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The sampler's epoch-start state, restored by the next primary pass (the resumed one)."""
        self._epoch_start = state[KEY_SAMPLER]

    def order_digest(self, start: int, stop: int, epoch: int | None = None) -> str:
        """sha256 (hex) of which samples positions ``[start, stop)`` of ``epoch``'s order of every rank hold
        (``loaders.read.grid.order_digest``), when the loader draws the order itself (a ShardSampler
        of its own, or the sequential order); ConfigError for a sampler the user gave."""
        epoch = self._owner.where().epoch if epoch is None else epoch
        if self.owned and isinstance(self.sampler, ShardSampler):
            plan = self.sampler.read_plan
            order = epoch_order(plan.num_samples, seed=plan.seed, epoch=epoch, mode=plan.mode,
                                block_size=plan.block_size)
        elif self.owned and type(self.sampler) is SequentialSampler:
            order = np.arange(len(self.sampler), dtype=np.int64)
        else:
            raise ConfigError(f"order_digest: the loader reads {type(self.sampler).__name__}, a sampler it did not "
                              "draw, so it knows no global positions; give no sampler, or digest your own order")
        return order_digest(order, start, stop, epoch=epoch, data="")
