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

Sources today: ``BatchPlan`` (the sampler or batch sampler cut into batches, key "plan")
and ``IterableSource`` (an IterableDataset's own order). A dataset supplies its own source
with a ``batch_source(request)`` method (``SourceRequest``), used when the user gives no
sampler or batch sampler: ``make_source`` chooses.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from loaders.state_keys import KEY_BATCH_SIZE, KEY_EPOCH, KEY_RANK, KEY_WORLD_SIZE
from loaders.errors import ConfigError
from loaders.loader.progress import KEY_AHEAD, KEY_PLAN, KEY_BATCH_POSITION, Where, expect
from loaders.loader.stage import Position, Stage

__all__ = ["BatchSource", "IterableSource", "Job", "SourceRequest", "ahead_positions", "length_or_none", "state_count"]

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
