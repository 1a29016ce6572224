"""The first stage: the sampler's order cut into batches of indices, lazily, one ``Job`` at a time.

Nothing lists the epoch up front: a job is made when the workers ask for one, so the
first batch of an infinite sampler (detectron2 / mmengine ``InfiniteSampler``) arrives
at once and memory stays flat; the workers bound how far ahead jobs are requested.

Where the order comes from:

- a ``BatchSampler`` over a ``ShardSampler``: numpy slices of the rank's order for the
  epoch (``ShardSampler.indices``), no per-sample Python objects;
- any other sampler or batch sampler: iterated, the first ``start`` batches dropped
  (indices only: no sample is read) when an epoch resumes.

Epoch and position are given to ``jobs`` by the loader (their one owner) and travel
with each job. A sampler the loader created follows the loader's epoch (its
``set_epoch`` is called here); a sampler the user gave keeps its own (never called).

Resume state (``state_dict``): ``{"sampler": <the sampler's state_dict() taken when
the epoch began, or None>, "world_size": <of a ShardSampler's rank split, or None>}``.
Taken before the epoch draws its order, so restoring it and dropping the consumed
batches replays the epoch exactly; a sampler that instead resumes itself from that
state is caught (it yields fewer batches than its length) and reported, never a
silently short epoch. A state from another world size is refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

from torch.utils.data import BatchSampler, DistributedSampler, SequentialSampler

from loaders.errors import ConfigError
from loaders.read.sampler import SampleBatch, ShardSampler

__all__ = ["KEY_SAMPLER", "KEY_WORLD_SIZE", "BatchPlan", "Job", "has_state", "is_deterministic", "length_or_none"]

KEY_SAMPLER = "sampler"
KEY_WORLD_SIZE = "world_size"  # of a ShardSampler's split: positions count this rank's batches


@dataclass(frozen=True, slots=True)
class Job:
    """One batch to build: its epoch, its position in the epoch and the sampler's indices."""

    epoch: int
    position: int
    indices: Sequence[Any]


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


def length_or_none(sized: Any) -> int | None:
    """``len(sized)`` (a dataset, a sampler), or None when it has no length."""
    try:
        return len(sized)
    except (TypeError, NotImplementedError):
        return None


class BatchPlan:
    """The batches of an epoch as ``Job``s, from the loader's sampler and batch sampler.

    sampler, batch_sampler: as torch's DataLoader holds them (batch_sampler None when
    batching is off). owned: the loader created the sampler, so it follows the loader's
    epoch. Constructing iterates nothing.
    """

    key = "plan"

    def __init__(self, sampler: Any, batch_sampler: Any, *, owned: bool) -> None:
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.owned = owned
        self._epoch_state: Any = None  # the sampler's state when epoch _state_epoch began
        self._state_epoch: int | None = None
        self._loaded = False  # _epoch_state came from load_state_dict: the next epoch pass restores it

    @property
    def stateful_part(self) -> Any:
        """The sampler whose order is saved: a given batch sampler with state, else the sampler."""
        if self.batch_sampler is not None and not isinstance(self.batch_sampler, BatchSampler):
            return self.batch_sampler
        return self.sampler

    def num_batches(self) -> int | None:
        """Batches in a full epoch, or None when the sampler has no length (infinite, or unknown)."""
        return length_or_none(self.batch_sampler if self.batch_sampler is not None else self.sampler)

    def jobs(self, epoch: int, start: int = 0, received: frozenset[int] = frozenset(), *,
             detached: bool = False) -> Iterator[Job]:
        """The jobs of ``epoch`` from position ``start`` on, leaving out positions already ``received``.

        detached: a second pass beside the loader's own (a peek): no snapshot or restore of state.
        """
        if self.owned:  # ours: follows the loader's epoch, its order needs no saved state
            set_epoch = getattr(self.sampler, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(epoch)
            resumed = False
        else:
            resumed = False if detached else self._begin_epoch(epoch)
        if self._is_shard_batches():
            return self._shard_jobs(epoch, start, received)
        return self._listed_jobs(epoch, start, received, resumed)

    def _begin_epoch(self, epoch: int) -> bool:
        """Snapshot a user's stateful sampler as the epoch begins, or restore a loaded snapshot; True if restored."""
        part = self.stateful_part
        resumed, self._loaded = self._loaded, False
        if not has_state(part):
            return False
        if resumed:
            part.load_state_dict(self._epoch_state)
        else:
            self._epoch_state = part.state_dict()
        self._state_epoch = epoch
        return resumed

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

    def restart_epoch(self, epoch: int) -> None:
        """The next pass reads ``epoch`` again from where its last pass began (that pass was only a probe)."""
        if self._state_epoch == epoch and self._epoch_state is not None:
            self._loaded = True

    def check_resumable(self) -> None:
        """ConfigError unless a mid-epoch position in this order can be found again."""
        if self.owned or self._is_shard_batches():
            return
        part = self.stateful_part
        if not is_deterministic(part):
            raise ConfigError(f"cannot resume mid-epoch with {type(part).__name__}: its order is not reproducible; "
                              "use shuffle=True (a seeded, resumable order), SequentialSampler, or a sampler "
                              "with state_dict()/load_state_dict()")

    def state_dict(self, epoch: int) -> dict[str, Any]:
        """``{"sampler": state, "world_size": n}``: the sampler's state when ``epoch`` (the loader's) began.

        sampler: None when the order needs none (ours); before ``epoch`` has begun, the
        sampler's state now. world_size: of a ShardSampler's rank split, else None.
        """
        return {KEY_SAMPLER: self._sampler_state(epoch), KEY_WORLD_SIZE: self._world_size()}

    def _sampler_state(self, epoch: int) -> Any:
        part = self.stateful_part
        if self.owned or not has_state(part):
            return None
        if self._state_epoch == epoch or self._loaded:
            return self._epoch_state
        return part.state_dict()

    def _world_size(self) -> int | None:
        return self.batch_sampler.sampler.topology.world_size if self._is_shard_batches() else None

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the sampler's epoch-start state at the next epoch pass (the resumed one).

        ConfigError when the rank split has another world size: a position counts this
        rank's batches, which another split does not have.
        """
        if not isinstance(state, Mapping) or KEY_SAMPLER not in state:
            raise ConfigError(f"DataLoader state 'plan' must be a mapping with {KEY_SAMPLER!r} (got {state!r})")
        world_size = self._world_size()
        if state.get(KEY_WORLD_SIZE) != world_size:
            raise ConfigError(f"DataLoader state 'plan' world_size: expected {world_size} (this loader), got "
                              f"{state.get(KEY_WORLD_SIZE)!r}; resume with the same number of ranks")
        self._epoch_state, self._state_epoch = state[KEY_SAMPLER], None
        self._loaded = self._epoch_state is not None and has_state(self.stateful_part)
