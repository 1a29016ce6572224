"""``TokenStream``: what the grid sampler and the loader's token batch source read of a token stream.

A token stream is a ``TokenDataset`` or a ``Mixture``: item k of epoch e is its global
sequence k of that epoch. An index that carries its epoch (``loaders.read.sample_index.SampleIndex``,
the one index type of every dataset) reads that epoch whatever the dataset copy's ``set_epoch``
said, under the mixture schedule ``ScheduleSegment`` it carries (after a resume; None: the epoch's
own schedule from its start). Samplers and batch sources hand out such indices, so the epoch
and the resume travel with the work to every copy of the dataset (threads, worker processes,
persistent ones) instead of living in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from loaders.read.sample_index import SampleIndex
from loaders.read.topology import Topology
from loaders.tokens.mixture_state import ScheduleSegment
from loaders.tokens.window import WindowFields

__all__ = ["TokenStream"]


class TokenStream(Protocol):
    """What the grid sampler and the loader's token batch source read of a ``TokenDataset`` or ``Mixture``."""

    topology: Topology | None

    def __getitem__(self, item: int | SampleIndex) -> WindowFields: ...

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

