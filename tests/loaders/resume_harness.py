"""One resume harness for every stateful part (sampler, dataset, DataLoader).

A part is *Stateful* when it has ``state_dict()`` and ``load_state_dict(state)``. The
test supplies ``make`` (a fresh instance) and ``consume`` (a finite run over it, e.g. a
few epochs, that continues from wherever a loaded state left off). The harness checks
that stopping after k items, saving, restoring into a fresh instance and running on
yields exactly the items of the uninterrupted run.

Typical stop points come from ``standard_stops``: the start, mid-epoch, both sides of
the epoch boundary, just before the end and the end.

``check_elastic_resume`` is the loader's contract for every dataset kind read by global
position (``DatasetKind``: image tar, Parquet, token dataset, mixture): a job of W ranks x B
rows stops mid-epoch or at the epoch's end, one rank's state goes through ``torch.save``, and a
job of other workers, ranks or batch size resumes it: the rest of the epoch from the saved
global position, nothing delivered twice, then the next epoch whole (torchdata's
``run_test_save_load_state`` is the model).
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import islice
from typing import Any, Protocol, TypeVar

import numpy as np
import torch

from loaders import DataLoader, Topology


class Stateful(Protocol):
    def state_dict(self) -> Mapping[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


S = TypeVar("S", bound=Stateful)
T = TypeVar("T")


def items_equal(a: object, b: object) -> bool:
    """Deep equality that understands tensors and arrays inside tuples, lists and dicts."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype \
            and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype \
            and np.array_equal(a, b)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(items_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(items_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def standard_stops(total: int, epoch_len: int) -> list[int]:
    """Stop points in [0, total]: 0, 1, mid-epoch, both sides of the first epoch boundary, total-1, total."""
    points = {0, 1, epoch_len // 2, epoch_len - 1, epoch_len, epoch_len + 1, total - 1, total}
    return sorted(p for p in points if 0 <= p <= total)


def _close(iterator: Iterator[Any]) -> None:
    close = getattr(iterator, "close", None)
    if callable(close):
        close()  # lets a DataLoader iterator shut its workers down


def check_resume(
    make: Callable[[], S],
    consume: Callable[[S], Iterator[T]],
    stop_at: int,
    *,
    make_resumed: Callable[[], S] | None = None,
    same: Callable[[object, object], bool] = items_equal,
) -> None:
    """Stop after ``stop_at`` items, save, restore into a fresh instance, finish; compare with one run.

    ``make_resumed`` builds the instance that is restored (default ``make``), e.g. with a
    different ``num_workers``. Raises AssertionError naming the first differing item.
    """
    check_resume_chain(make, consume, [stop_at], make_resumed=make_resumed, same=same)


def check_resume_chain(
    make: Callable[[], S],
    consume: Callable[[S], Iterator[T]],
    stops: Sequence[int],
    *,
    make_resumed: Callable[[], S] | None = None,
    same: Callable[[object, object], bool] = items_equal,
) -> None:
    """Like ``check_resume`` with several interruptions: ``stops`` are cumulative item counts.

    E.g. ``[3, 7]``: stop after 3 items, resume, stop after 4 more, resume, run to the end.
    The state is pickled and unpickled on the way, as a checkpoint would be.
    """
    expected = list(consume(make()))
    if list(stops) != sorted(stops) or any(not 0 <= s <= len(expected) for s in stops):
        raise ValueError(f"stops must be non-decreasing within [0, {len(expected)}] (got {list(stops)})")
    build_resumed = make if make_resumed is None else make_resumed
    got: list[T] = []
    instance = make()
    for stop in stops:
        iterator = consume(instance)
        got.extend(islice(iterator, stop - len(got)))
        assert len(got) == stop, f"run ended after {len(got)} items, before the stop at {stop}"
        state = pickle.loads(pickle.dumps(instance.state_dict()))  # saved before shutdown, like a checkpoint
        _close(iterator)
        instance = build_resumed()
        instance.load_state_dict(state)
    got.extend(consume(instance))
    _assert_same(expected, got, list(stops), same)


def _assert_same(expected: list[T], got: list[T], stops: list[int], same: Callable[[object, object], bool]) -> None:
    for i, (want, have) in enumerate(zip(expected, got, strict=False)):
        if not same(want, have):
            raise AssertionError(f"item {i} differs after resuming at {stops}: expected {want!r}, got {have!r}")
    if len(expected) != len(got):
        raise AssertionError(
            f"resumed run (stops {stops}) gave {len(got)} items, the uninterrupted run {len(expected)}"
        )


# ---------------------------------------------------------------- the loader's contract, for every dataset kind

Job = tuple[int, int, int, str]  # world size, rows per rank, workers per rank, worker type
SEED = 11


@dataclass(frozen=True)
class DatasetKind:
    """A dataset kind under the resume contract, as a training job sees it.

    make: the dataset as rank ``topology.rank`` of ``topology.world_size`` sees it. ids: the global
    positions' names of a batch's rows, read in ``epoch`` (a sample's index, a sequence's number).
    order: the epoch's positions' names in order, all ranks together. pads: the epoch's last
    incomplete global batch is padded with the run's first positions (else it is dropped).
    """

    make: Callable[[Topology], Any]
    ids: Callable[[int, Any], list[int]]
    order: Callable[[int], list[int]]
    pads: bool


def expected_steps(order: Sequence[int], start: int, global_batch: int, world_size: int, *,
                   pads: bool) -> list[list[int]]:
    """``order`` from ``start`` cut into global batches (each sorted); the last, shorter one padded to a multiple
    of ``world_size`` with the run's first positions, ``order[start:]``, or dropped."""
    found = [list(order[first:first + global_batch]) for first in range(start, len(order), global_batch)]
    if found and len(found[-1]) < global_batch:
        run = list(order[start:])
        if pads:
            found[-1] += [run[k % len(run)] for k in range(-len(found[-1]) % world_size)]
        else:
            found.pop()
    return [sorted(step) for step in found]


def job_loaders(kind: DatasetKind, job: Job) -> list[DataLoader[Any]]:
    """One ``loaders.DataLoader`` per rank of ``job`` (seed ``SEED``, shuffled)."""
    world_size, batch_size, num_workers, worker_type = job
    return [DataLoader(kind.make(Topology(rank=rank, world_size=world_size)), batch_size=batch_size,
                       num_workers=num_workers, worker_type=worker_type, seed=SEED, shuffle=True)
            for rank in range(world_size)]


def job_steps(ids: Callable[[Any], list[int]], batches_per_rank: Sequence[Iterable[Any]],
              count: int | None = None) -> list[list[int]]:
    """Each step's global batch (sorted ``ids`` of its rows) from each rank's batches (``count`` steps from each
    rank's iterator, a job stopped mid-epoch; else all); every rank must yield as many."""
    per_rank = []
    for batches in batches_per_rank:
        taken = [batch for _, batch in zip(range(count), batches)] if count is not None else list(batches)
        per_rank.append([ids(batch) for batch in taken])
    assert len({len(rows) for rows in per_rank}) == 1, f"ranks yielded {[len(r) for r in per_rank]} batches"
    return [sorted(s for rows in step for s in rows) for step in zip(*per_rank)]


def end_jobs(loaders: Iterable[DataLoader[Any]]) -> None:
    """Stop each loader and let go of its dataset's files (a job that ends)."""
    for loader in loaders:
        loader.close()
        close = getattr(loader.dataset, "close", None)
        if callable(close):
            close()


def check_elastic_resume(kind: DatasetKind, saved: Job, stop: int | None, resumed: Job) -> None:
    """The contract: the ``saved`` job reads ``stop`` steps of epoch 0 (None: all of it) and its last rank's state
    goes through ``torch.save`` / ``torch.load(weights_only=True)``; every rank of the ``resumed`` job loads it
    and reads the rest of epoch 0 from the saved global position (nothing of the first steps again, nothing
    lost bar the tail rule), then epoch 1 whole. With the same global batch that is the uninterrupted run's."""
    order = kind.order(0)
    loaders = job_loaders(kind, saved)
    global_batch = saved[0] * saved[1]
    head = job_steps(partial(kind.ids, 0), [iter(loader) for loader in loaders], count=stop)
    assert head == expected_steps(order, 0, global_batch, saved[0], pads=kind.pads)[:len(head)]
    buffer = io.BytesIO()
    torch.save(loaders[-1].state_dict(), buffer)
    end_jobs(loaders)
    state = torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
    consumed = min(len(head) * global_batch, len(order)) if stop is not None else len(order)
    loaders = job_loaders(kind, resumed)
    for loader in loaders:
        loader.load_state_dict(state)
    world_size, global_batch = resumed[0], resumed[0] * resumed[1]
    if consumed < len(order) and stop is not None:
        rest = job_steps(partial(kind.ids, 0), loaders)
        assert rest == expected_steps(order, consumed, global_batch, world_size, pads=kind.pads)
        assert not {s for step in head for s in step} & {s for step in rest for s in step}
    assert {loader.epoch for loader in loaders} == {1}
    expected = expected_steps(kind.order(1), 0, global_batch, world_size, pads=kind.pads)
    assert job_steps(partial(kind.ids, 1), loaders) == expected
    end_jobs(loaders)
