"""``GridSampler``: this rank's rows of each global batch (``loaders.tokens.distribution``), as ``SampleIndex``.

For any DataLoader over a ``TokenDataset`` or ``Mixture`` in a distributed job::

    sampler = GridSampler(dataset, batch_size=B)          # topology: the dataset's, else detected
    loader = torch.utils.data.DataLoader(dataset, batch_size=B, sampler=sampler, collate_fn=dataset.collate)
    for epoch in range(E):
        sampler.set_epoch(epoch)
        for batch in loader: ...

Each index carries its epoch, so worker copies of the dataset never read a stale one. Every
rank yields the same number of indices (the last incomplete global batch is dropped), and
``start=GlobalPosition(epoch, sequence)`` begins there (a resume on any B x W).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import torch.utils.data

from loaders.tokens.arguments import check_int
from loaders.read.sampler import SampleIndex
from loaders.read.topology import Topology
from loaders.tokens.distribution import GlobalGrid, GlobalPosition, GridStart, resume_grid

__all__ = ["GridSampler"]


class EpochDataset(Protocol):
    """What the sampler needs of a dataset: its length in each epoch and its topology."""

    topology: Topology | None

    def epoch_length(self, epoch: int) -> int: ...


class GridSampler(torch.utils.data.Sampler[SampleIndex]):
    """Yields rank ``topology.rank``'s ``SampleIndex(sequence, epoch)`` for every global batch of the epoch."""

    def __init__(self, dataset: EpochDataset, batch_size: int, *, topology: Topology | None = None,
                 start: GlobalPosition | None = None) -> None:
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.dataset = dataset
        self.topology = topology or dataset.topology or Topology.detect()
        self.start = start
        self.epoch = start.epoch if start is not None else 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = check_int("epoch", epoch, 0)

    def plan(self) -> GridStart:
        """The epoch's grid and first batch: from ``start`` in its epoch, else from the beginning."""
        length = self.dataset.epoch_length(self.epoch)
        if self.start is not None and self.start.epoch == self.epoch:
            begin = resume_grid(self.start, length, self.batch_size, self.topology.world_size)
            if begin.epoch == self.epoch:
                return begin
            return GridStart(self.epoch, GlobalGrid(0, self.batch_size, self.topology.world_size), 0)
        return GridStart(self.epoch, GlobalGrid(length, self.batch_size, self.topology.world_size), 0)

    def __iter__(self) -> Iterator[SampleIndex]:
        epoch, grid, first = self.plan()
        for batch in range(first, grid.num_batches):
            for sequence in grid.rows(batch, self.topology.rank):
                yield SampleIndex(sequence, epoch)

    def __len__(self) -> int:
        _, grid, first = self.plan()
        return (grid.num_batches - first) * self.batch_size
