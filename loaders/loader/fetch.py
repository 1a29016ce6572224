"""Reading one batch's samples, failures set aside (never raised): ``fetch_samples`` -> ``Fetched``.

``fetch_samples`` reads ``dataset[i]`` (or ``__getitems__``) for a batch's indices and
returns a ``Fetched``: the samples, the ``Skip``s (``on_error="skip"``) or the first
failure, with the batch's epoch and position. With ``plan_decode`` (``decode="device"``) it
reads inside ``loaders.read.decode_plan.planning()``: decode transforms hand on decode plans.
Messages about them: ``loaders.loader.messages``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loaders.loader.messages import describe_error
from loaders.loader.stage_timing import BatchTiming
from loaders.read.decode_plan import planning
from loaders.stage_clock import collect_parts

__all__ = ["Fetched", "Skip", "fetch_samples"]


@dataclass(frozen=True, slots=True)
class Skip:
    """A sample dropped by ``on_error="skip"``: its index and what went wrong (``describe_error``)."""

    index: Any
    error: str


@dataclass(slots=True, kw_only=True)
class Fetched:
    """The samples read for one batch; ``failure`` set (and ``samples`` partial) when reading raised."""

    epoch: int
    position: int  # -1: a batch of an iterable dataset (unnumbered)
    indices: list[Any]
    samples: list[Any] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    failure: BaseException | None = None
    failed_index: Any = None
    timing: BatchTiming = field(default_factory=BatchTiming)  # the dataset's part (``loaders.stage_clock``)


def fetch_samples(dataset: Any, indices: Sequence[Any], *, epoch: int, position: int, skip_errors: bool,
                  plan_decode: bool = False) -> Fetched:
    """Read ``dataset[i]`` for each index (``__getitems__`` when defined), catching failures.

    With ``skip_errors`` a failing sample becomes a ``Skip`` (a failing ``__getitems__``
    is retried sample by sample to find which ones fail); without it the first failure
    stops the batch and is returned in ``failure``. ``plan_decode``: read inside
    ``planning()`` (images as decode plans). Never raises ``Exception``. ``timing``: wall and CPU
    seconds in the dataset, and the parts it reported.
    """
    wall, cpu = time.perf_counter(), time.thread_time()
    with planning(plan_decode), collect_parts() as parts:
        fetched = _fetch(dataset, indices, epoch=epoch, position=position, skip_errors=skip_errors)
    timing = fetched.timing
    timing.dataset_s, timing.cpu_s = time.perf_counter() - wall, time.thread_time() - cpu
    timing.read_s, timing.decode_s = parts.get("read", 0.0), parts.get("decode", 0.0)
    timing.transform_s = parts.get("transform", 0.0)
    return fetched


def _fetch(dataset: Any, indices: Sequence[Any], *, epoch: int, position: int, skip_errors: bool) -> Fetched:
    fetched = Fetched(epoch=epoch, position=position, indices=list(indices))
    getitems = getattr(dataset, "__getitems__", None)
    if callable(getitems):
        try:
            fetched.samples = list(getitems(fetched.indices))
            return fetched
        except Exception as err:  # noqa: BLE001 - the dataset's own error, handed to the consumer
            if not skip_errors:
                fetched.failure = err
                return fetched
    for index in fetched.indices:
        try:
            fetched.samples.append(dataset[index])
        except Exception as err:  # noqa: BLE001 - the dataset's own error, handed to the consumer
            if not skip_errors:
                fetched.failure, fetched.failed_index = err, index
                return fetched
            fetched.skips.append(Skip(index, describe_error(err)))
    return fetched
