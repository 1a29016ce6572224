"""``StreamPositions``: what a token stream's global positions index, for the loader's global-position source.

A ``TokenDataset`` or ``Mixture`` returns one from ``batch_source(request)`` (the loader's seam,
``loaders.loader.batch_source``); the loader reads it through its one ``GlobalSource``
(``loaders.loader.global_source``), as it reads a sample dataset. Global position p of an
epoch is packed sequence (or mixture position) p; a global batch is dealt
``Deal.CONTIGUOUS`` (rank r reads ``origin + g B W + r B + [0, B)``) and the last incomplete
one is always ``DROP``-ped, so every rank reads the same number of batches. A job's indices
are ``SampleIndex(sequence, epoch, segment=segment)``: the epoch and a resumed mixture's schedule
segment travel with the work to every copy of the dataset (threads, worker processes,
persistent ones), which keep none. The state's ``"data"`` is the stream's ``stream_state``: its
data (``describe()``) for a ``TokenDataset``, the mixture's cursors, weights, exhaustion and
schedule segment for a ``Mixture``; other data, seq_len, seed or tokenizer are refused naming
what differs, and a mixture's changed weights take effect from the saved position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from loaders.read.grid import Deal, GlobalGrid, Tail
from loaders.read.topology import Topology
from loaders.read.sample_index import SampleIndex
from loaders.tokens.stream import TokenStream

__all__ = ["KEY_TOKENS", "StreamPositions"]

KEY_TOKENS = "tokens"  # the source's key in the loader's state


class StreamPositions:
    """The global positions of ``stream`` (a ``TokenDataset`` or ``Mixture``) on this rank (its ``topology``, else
    the detected one). The stream's own methods give the epoch's length, its state, the checks and the digest."""

    key = KEY_TOKENS
    deal = Deal.CONTIGUOUS
    tail = Tail.DROP

    def __init__(self, stream: TokenStream) -> None:
        self.stream = stream
        topology = stream.topology or Topology.detect()
        self.rank, self.world_size = topology.rank, topology.world_size

    def epoch_length(self, epoch: int, segment: Any = None) -> int:
        return self.stream.epoch_length(epoch, segment)

    def indices(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        return positions  # position p is sequence p

    def job(self, epoch: int, rows: np.ndarray, grid: GlobalGrid, segment: Any) -> Sequence[Any]:
        return [SampleIndex(sequence, epoch, segment=segment) for sequence in rows.tolist()]

    def stream_state(self, epoch: int, sequence: int, segment: Any = None) -> dict[str, Any]:
        return self.stream.stream_state(epoch, sequence, segment)

    def resume(self, state: Any, *, quiet: bool = False) -> Any:
        return self.stream.resume(state, quiet=quiet)

    def order_digest(self, start: int, stop: int, epoch: int | None = None, segment: Any = None) -> str:
        return self.stream.order_digest(start, stop, epoch, segment)
