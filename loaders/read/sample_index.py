"""What every dataset's items are addressed by: ``SampleIndex`` (index, epoch; the grid, a mixture's segment).

Samplers and batch sources hand ``SampleIndex`` values to ``dataset[...]`` (image, Parquet and
token datasets alike), so what a read depends on travels with the work to every copy of the
dataset (threads, worker processes, persistent ones) instead of living in it. One meaning per
field, whatever the dataset:

- ``index``: the item of the epoch: a sample dataset's global sample index, a token stream's
  global sequence (a ``Mixture``'s global position);
- ``epoch``: the epoch it is read in (it keys the order, the packing and per-sample randomness);
- ``grid``: the epoch's ``loaders.read.grid.GlobalGrid`` when it is read by global position (the
  node cache plans a sample dataset's shards from it), else None;
- ``segment``: the mixture schedule (``loaders.tokens.mixture_state.ScheduleSegment``) a ``Mixture``
  reads under after a resume, else None (the epoch's own schedule from its start).

Every dataset also takes a plain int (read in the dataset copy's own ``epoch``); ``resolve_item``
is the one rule for both.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Any

import numpy as np

from loaders.read.grid import GlobalGrid

__all__ = ["SampleIndex", "resolve_item"]


@dataclass(frozen=True, slots=True, repr=False)
class SampleIndex:
    """Item ``index`` of ``epoch``, on ``grid`` (read by global position) under ``segment`` (module docstring).

    Datasets key per-sample randomness by (seed, epoch, index), e.g. with
    ``loaders.read.order.sample_rng``.
    """

    index: int
    epoch: int
    _: KW_ONLY
    grid: GlobalGrid | None = None
    segment: Any = None  # a loaders.tokens ScheduleSegment: that package sits above this one

    def __repr__(self) -> str:  # messages list a batch's indices: its grid and segment are the same for all
        return f"SampleIndex(index={self.index}, epoch={self.epoch})"


def resolve_item(item: object, epoch: int) -> tuple[int, int, Any]:
    """(index, epoch, segment) of a dataset item: a ``SampleIndex``, or a plain int read in ``epoch`` (segment None);
    TypeError for anything else (a bool included)."""
    if isinstance(item, SampleIndex):
        return int(item.index), int(item.epoch), item.segment
    if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
        return int(item), epoch, None
    raise TypeError(f"index must be an int or SampleIndex (got {item!r} that is a {type(item).__name__})")
