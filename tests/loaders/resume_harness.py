"""One resume harness for every stateful part (sampler, dataset, DataLoader).

A part is *Stateful* when it has ``state_dict()`` and ``load_state_dict(state)``. The
test supplies ``make`` (a fresh instance) and ``consume`` (a finite run over it, e.g. a
few epochs, that continues from wherever a loaded state left off). The harness checks
that stopping after k items, saving, restoring into a fresh instance and running on
yields exactly the items of the uninterrupted run.

Typical stop points come from ``standard_stops``: the start, mid-epoch, both sides of
the epoch boundary, just before the end and the end.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any, Protocol, TypeVar

import numpy as np
import torch


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
