"""``GridSampler``: this rank's rows of each global batch (``loaders.read.grid``), as ``SampleIndex``.

For any DataLoader over a ``TokenDataset`` or ``Mixture`` in a distributed job::

    sampler = GridSampler(dataset, batch_size=B)          # topology: the dataset's, else detected
    loader = torch.utils.data.DataLoader(dataset, batch_size=B, sampler=sampler,
                                         collate_fn=dataset.default_collate_fn)
    for epoch in range(E):
        sampler.set_epoch(epoch)
        for batch in loader: ...

Each index carries its epoch (and a resumed mixture's schedule segment), so worker copies of
the dataset never read a stale one. Every rank yields the same number of indices (the last
incomplete global batch is dropped), and ``start=GlobalPosition(epoch, sequence)`` begins
there (a resume on any B x W; ``segment``: what ``Mixture.resume(state)`` returned).
``loaders.DataLoader`` needs no sampler: it reads the same grid and keeps the position itself.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch.utils.data

from loaders.read.sample_index import SampleIndex
from loaders.read.topology import Topology
from loaders.validate import check_int
from loaders.read.grid import GlobalPosition, GridStart, resume_grid
from loaders.tokens.mixture_state import ScheduleSegment
from loaders.tokens.stream import TokenStream

__all__ = ["GridSampler"]


class GridSampler(torch.utils.data.Sampler[SampleIndex]):
    """Yields rank ``topology.rank``'s ``SampleIndex(sequence, epoch)`` for every global batch of the epoch."""

    def __init__(self, dataset: TokenStream, batch_size: int, *, topology: Topology | None = None,
                 start: GlobalPosition | None = None, segment: ScheduleSegment | None = None) -> None:
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.dataset = dataset
        self.topology = topology or dataset.topology or Topology.detect()
        self.start = start
        self.segment = segment if start is not None else None
        self.epoch = start.epoch if start is not None else 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = check_int("epoch", epoch, 0)

    def plan(self) -> GridStart:
        """The epoch's grid and first batch: from ``start`` in its epoch, else from the beginning."""
        world_size = self.topology.world_size
        if self.start is not None and self.start.epoch == self.epoch:
            length = self.dataset.epoch_length(self.epoch, self.segment)
            return resume_grid(self.start, length, self.batch_size, world_size)
        return resume_grid(GlobalPosition(self.epoch, 0), self.dataset.epoch_length(self.epoch), self.batch_size,
                           world_size)

    def __iter__(self) -> Iterator[SampleIndex]:
        epoch, grid, first = self.plan()
        segment = self.segment if self.start is not None and self.start.epoch == epoch else None
        for batch in range(first, grid.num_batches):
            for sequence in grid.rows(batch, self.topology.rank).tolist():
                yield SampleIndex(sequence, epoch, segment=segment)

    def __len__(self) -> int:
        _, grid, first = self.plan()
        return (grid.num_batches - first) * self.batch_size
