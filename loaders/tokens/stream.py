"""What a token stream is addressed by: ``StreamIndex`` (sequence, epoch, schedule segment) and ``TokenStream``.

A token stream is a ``TokenDataset`` or a ``Mixture``: item k of epoch e is its global
sequence k of that epoch. An index that carries its epoch (``SampleIndex`` or
``StreamIndex``) reads that epoch whatever the dataset copy's ``set_epoch`` said; a
``StreamIndex`` also carries the mixture schedule ``ScheduleSegment`` in force where it reads (after
a resume; None: the epoch's own schedule from its start). Samplers and batch sources hand
out such indices, so the epoch and the resume travel with the work to every copy of the
dataset (threads, worker processes, persistent ones) instead of living in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

import numpy as np

from loaders.read.sampler import SampleIndex
from loaders.read.topology import Topology
from loaders.tokens.mixture_state import ScheduleSegment
from loaders.tokens.window import WindowFields

__all__ = ["StreamIndex", "TokenStream", "resolve_item"]


class StreamIndex(NamedTuple):
    """Global sequence ``index`` of ``epoch``, read under the schedule ``segment`` (None: the epoch's own)."""

    # The glossary's name (as SampleIndex's): it hides tuple.index(), which nothing here needs.
    index: int  # type: ignore[assignment]  # a field named like tuple.index, on purpose
    epoch: int
    segment: ScheduleSegment | None = None


class TokenStream(Protocol):
    """What the grid sampler and the loader's token batch source read of a ``TokenDataset`` or ``Mixture``."""

    topology: Topology | None

    def __getitem__(self, item: int | SampleIndex | StreamIndex) -> WindowFields: ...

    def epoch_length(self, epoch: int, segment: ScheduleSegment | None = None) -> int:
        """Global sequences of ``epoch`` (under ``segment`` when it is that epoch's)."""
        ...

    def stream_state(self, epoch: int, sequence: int, segment: ScheduleSegment | None = None) -> dict[str, Any]:
        """Plain values that let a later job check the data and continue after sequences ``[0, sequence)``."""
        ...

    def resume(self, state: Mapping[str, Any], *, quiet: bool = False) -> ScheduleSegment | None:
        """Check a ``stream_state`` against this stream (ConfigError naming what differs); the segment to read on
        with (None: the epoch's own). ``quiet``: no log line (a check before the state is accepted)."""
        ...

    def order_digest(self, start: int, stop: int, epoch: int | None = None,
                     segment: ScheduleSegment | None = None) -> str:
        """sha256 of the (source, epoch, document, offset, length) segments of sequences ``[start, stop)``."""
        ...


def resolve_item(item: object, epoch: int) -> tuple[int, int, ScheduleSegment | None]:
    """(index, epoch, segment) of a dataset item: an index that carries its epoch, or a plain int (reads ``epoch``)."""
    if isinstance(item, StreamIndex):
        return int(item.index), int(item.epoch), item.segment
    if isinstance(item, SampleIndex):
        return int(item.index), int(item.epoch), None
    if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
        return int(item), epoch, None
    raise TypeError(f"index must be an int or SampleIndex / StreamIndex (got {item!r} that is a {type(item).__name__})")
