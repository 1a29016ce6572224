"""The seam where a pass's batches come from: the ``BatchSource`` protocol, ``Job``, and the choice of source.

A batch source is the first stage of a pass (``loaders.loader.epoch_pass``) and a stage with
state (``loaders.loader.stage``). For each pass it yields ``Job``s (epoch, position,
indices), lazily, from the ``Where`` the owner of the epoch (``Progress``) gives it.
Positions count this rank's batches of the epoch, 0, 1, 2, ...: the loader's resume state
holds how many were handed over. A source owns the meaning of those positions:

- ``state_dict()`` reads the owner (the ``Position`` it was built with) and writes what a
  later job needs to find the same batches again: a sampler's state (``BatchPlan``), or a
  *global* position (sequences consumed across all ranks) that holds on any topology;
- ``resume_point(state)`` reads a whole checked loader state (its own nest under its
  ``key`` included) and says where this loader continues: the saved per-rank point, or one
  translated from the global position for this topology (a state saved on 4 ranks resumes
  on 2); it refuses a state it cannot honour (ConfigError naming what differs);
- ``load_state_dict(nest)`` takes its nest once the loader has accepted the state.

Sources today: ``BatchPlan`` (the sampler or batch sampler cut into batches, key "plan"),
``IterableSource`` (an IterableDataset's own order) and ``GlobalSource``
(``loaders.loader.global_source``: a dataset read by global position). A dataset supplies its
own with a ``batch_source(request)`` method (``SourceRequest``), used when the user gives no
sampler or batch sampler: it returns a ``BatchSource``, or a ``PositionedData`` (what its global
positions index: a sample dataset's order, a token stream), which the loader reads through
``GlobalSource``. The dataset hooks the loader reads are declared in ``DatasetHooks``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from loaders.state_keys import KEY_BATCH_SIZE, KEY_EPOCH, KEY_RANK, KEY_WORLD_SIZE
from loaders.errors import ConfigError
from loaders.loader.progress import KEY_AHEAD, KEY_PLAN, KEY_BATCH_POSITION, Where, expect
from loaders.loader.stage import Position, Stage

__all__ = ["DATASET_HOOKS", "BatchSource", "DatasetHooks", "IterableSource", "Job", "SourceRequest", "ahead_positions",
           "length_or_none", "state_count"]

KEY_SAMPLER = "sampler"


@dataclass(frozen=True, slots=True)
class Job:
    """One batch to build: its epoch, its position in the epoch and the dataset indices it reads."""

    epoch: int
    position: int
    indices: Sequence[Any]


@runtime_checkable
class BatchSource(Stage, Protocol):
    """Where a pass's batches come from (see the module docstring)."""

    def num_batches(self) -> int | None:
        """Batches of a full epoch on this rank; None when unknown (an infinite sampler, an iterable)."""
        ...

    def num_samples(self) -> int | None:
        """Samples of a full epoch on this rank (what a fractional ``max_skips`` counts); None when unknown."""
        ...

    def jobs(self, where: Where, *, primary: bool) -> Iterator[Job] | None:
        """The jobs of ``where.epoch`` from ``where.position`` on, leaving out ``where.ahead``; lazily.

        primary: the loader's own pass (a detached pass, beside it, reads from the epoch's start and
        must not move the source's state). None: the dataset reads in its own order (an iterable).
        """
        ...

    def resume_point(self, state: Mapping[str, Any]) -> Where:
        """Where a loader restored from the checked ``state`` continues; ConfigError if it cannot."""
        ...


@dataclass(frozen=True, slots=True)
class SourceRequest:
    """What the loader tells a dataset's ``batch_source(request)``: its batching and the owner to read."""

    batch_size: int | None
    drop_last: bool
    shuffle: bool
    seed: int
    owner: Position  # the loader's Progress, as the source reads it when it writes its state


class DatasetHooks(Protocol):
    """What ``loaders.DataLoader`` reads of a map-style dataset beyond ``__getitem__`` / ``__len__``: every hook is
    optional, read by name where it is used (``DATASET_HOOKS``), and declared here, in one place.

    ``loaders.ShardDataset``, ``ParquetShardDataset``, ``TokenDataset`` and ``Mixture`` declare the ones they need.
    """

    topology: Any  # a ``loaders.read.topology.Topology``: the rank and world size it is read on (else detected)
    releases_gil: bool  # its per-sample work runs without the GIL: thread workers (``worker_choice``)
    light_items: bool  # an item costs less than pickling it out of a process: thread workers at any count
    can_defer_decode: bool  # its JPEGs may decode on the device (``loaders.batch_decode``)
    epoch: int  # the epoch its plain int indices read (what a worker's copy is checked against)

    def batch_source(self, request: SourceRequest) -> Any:
        """Its own batches given no sampler: a ``BatchSource``, or a ``PositionedData`` read by global position."""
        ...

    def default_sampler(self, shuffle: bool, seed: int, drop_last: bool) -> Any:
        """The sampler the loader uses given none (seeded, distributed, resumable)."""
        ...

    def default_collate_fn(self, samples: list[Any]) -> Any:
        """Its batches' collate when the user gives none (with batching)."""
        ...

    def set_epoch(self, epoch: int) -> None:
        """The epoch it is read in, called where its samples are read (``loaders.loader.epoch_sync``)."""
        ...

    def __getitems__(self, indices: Sequence[Any]) -> list[Any]:
        """A batch's samples in one call (torch's protocol)."""
        ...


DATASET_HOOKS = ("topology", "releases_gil", "light_items", "can_defer_decode", "epoch", "batch_source",
                 "default_sampler", "default_collate_fn", "set_epoch", "__getitems__")


def length_or_none(sized: Any) -> int | None:
    """``len(sized)`` (a dataset, a sampler), or None when it has no length."""
    try:
        return len(sized)
    except (TypeError, NotImplementedError):
        return None


def state_count(source_key: str, nest: Mapping[str, Any], key: str) -> int:
    """``nest[key]`` of a source's saved state (under ``source_key``), checked to be a non-negative int."""
    value = nest.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"DataLoader state {source_key!r} {key!r} must be a non-negative int (got {value!r})")
    return value


def ahead_positions(source_key: str, ahead: object, nest: Mapping[str, Any], now: tuple[int, int, int], *,
                    any_rank: bool = False) -> frozenset[int]:
    """A global-position source's batches handed over out of order (``in_order=False``): this rank's positions.

    They mean something only on the (rank, batch size, world size) ``now`` they were saved on
    (``any_rank``: a saved rank of None matches any); elsewhere the state is refused.
    """
    if not ahead:
        return frozenset()
    saved = (nest[KEY_RANK], nest[KEY_BATCH_SIZE], nest[KEY_WORLD_SIZE])
    same = (saved[0] == now[0] or (any_rank and saved[0] is None)) and saved[1:] == now[1:]
    if not same or not isinstance(ahead, (list, tuple)):
        raise ConfigError(f"DataLoader state {source_key!r}: batches {ahead!r} were handed over out of order "
                          f"(in_order=False) on rank {saved[0]} of {saved[2]} with batch size {saved[1]}; this "
                          f"loader is rank {now[0]} of {now[2]} with batch size {now[1]}; "
                          "hint: resume such a state on the same rank and batch size, or save with in_order=True")
    return frozenset(int(p) for p in ahead)


class IterableSource:
    """The batches of an IterableDataset: its own order, read as torch reads it (no jobs, no positions to
    replay). Its state says so; a mid-epoch resume is refused, an epoch boundary is fine."""

    key = KEY_PLAN

    def __init__(self, batch_size: int | None) -> None:
        self.batch_size = batch_size

    def num_batches(self) -> int | None:
        return None  # what the dataset yields decides; len(loader) is torch's estimate from len(dataset)

    def num_samples(self) -> int | None:
        return None

    def jobs(self, where: Where, *, primary: bool) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {KEY_SAMPLER: None, KEY_WORLD_SIZE: None}

    def resume_point(self, state: Mapping[str, Any]) -> Where:
        expect(state, KEY_BATCH_SIZE, self.batch_size)
        if state[KEY_BATCH_POSITION] or state[KEY_AHEAD]:
            raise ConfigError("cannot resume an IterableDataset mid-epoch: the loader does not know its order; "
                              "resume at an epoch boundary or make the dataset resume itself")
        return Where(state[KEY_EPOCH], begun=True)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None  # nothing of its own: the dataset's order is the dataset's
