"""The batch source seam: a dataset that brings its own source, whose state is a global position.

The source here is a small one of the tests' own, shaped like the token datasets of issue 21:
global batch g holds the sequences [g * B * W, (g + 1) * B * W), rank r reads its B rows of
it, and the state counts sequences consumed across all ranks, so that a state saved on 4
ranks resumes on 2 (with the same global batch B x W). It plugs in through
``dataset.batch_source(request)``; the loader counts per-rank positions and the source
translates them both ways (``state_dict`` reads the owner, ``resume_point`` reads a state).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import torch

from loaders import DataLoader
from loaders.errors import ConfigError
from loaders.loader.batch_source import BatchSource, Job, SourceRequest
from loaders.loader.progress import Where
from loaders.state_keys import KEY_EPOCH
from loaders.loader.stage import Position

SEQUENCES = 96  # global: every rank's dataset has them all
KEY_GLOBAL = "global"


class GlobalSource:
    """Rank ``rank`` of ``world_size``: position p is global batch p; state = sequences consumed (all ranks)."""

    key = KEY_GLOBAL

    def __init__(self, request: SourceRequest, rank: int, world_size: int) -> None:
        assert request.batch_size is not None
        self.batch_size, self.rank, self.world_size = request.batch_size, rank, world_size
        self.owner = request.owner

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    def num_batches(self) -> int:
        return SEQUENCES // self.global_batch  # the last incomplete global batch is dropped on every rank

    def num_samples(self) -> int:
        return self.num_batches() * self.batch_size

    def jobs(self, where: Where, *, primary: bool) -> Iterator[Job]:
        start = where.position if primary else 0
        for position in range(start, self.num_batches()):
            if position not in where.ahead or not primary:
                first = position * self.global_batch + self.rank * self.batch_size
                yield Job(where.epoch, position, list(range(first, first + self.batch_size)))

    def state_dict(self) -> dict[str, Any]:
        where: Where = self.owner.where()
        return {"epoch": where.epoch, "sequences": where.position * self.global_batch}

    def resume_point(self, state: Mapping[str, Any]) -> Where:
        nest = state[self.key]
        if nest["sequences"] % self.global_batch:
            raise ConfigError(f"DataLoader state {self.key!r}: {nest['sequences']} sequences consumed is not a "
                              f"whole number of global batches of {self.global_batch}")
        return Where(nest["epoch"], nest["sequences"] // self.global_batch, begun=True)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None  # all of it is in the loader's position (resume_point)


class Sequences(torch.utils.data.Dataset[int]):
    """Sequence i is i; the dataset supplies its batch source (no sampler)."""

    releases_gil = True

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size

    def __len__(self) -> int:
        return SEQUENCES

    def __getitem__(self, index: int) -> int:
        return index

    def batch_source(self, request: SourceRequest) -> GlobalSource:
        return GlobalSource(request, self.rank, self.world_size)


def loaders_for(world_size: int, batch_size: int, num_workers: int = 0) -> list[DataLoader[Any]]:
    """One loader per rank of a job of ``world_size`` (thread workers when ``num_workers``)."""
    return [DataLoader(Sequences(rank, world_size), batch_size=batch_size, num_workers=num_workers, seed=0)
            for rank in range(world_size)]


def global_batches(loaders: list[DataLoader[Any]], iterators: list[Iterator[Any]] | None = None,
                   count: int | None = None) -> list[list[int]]:
    """Each step's global batch: the union of the ranks' batches (sorted)."""
    iterators = iterators or [iter(loader) for loader in loaders]
    steps = []
    for batches in zip(*iterators):
        steps.append(sorted(i for batch in batches for i in batch.tolist()))
        if count is not None and len(steps) == count:
            break
    return steps


def test_a_datasets_own_source_is_the_loaders_and_its_state_nests_under_its_key() -> None:
    (loader,) = loaders_for(1, 4)
    assert isinstance(loader._chain.source, GlobalSource) and isinstance(loader._chain.source, BatchSource)
    assert len(loader) == SEQUENCES // 4
    iterator = iter(loader)
    next(iterator), next(iterator)
    state = loader.state_dict()
    assert state[KEY_GLOBAL] == {"epoch": 0, "sequences": 8} and state[KEY_EPOCH] == 0
    assert "plan" not in state


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_state_saved_on_four_ranks_resumes_on_two_with_the_same_global_batches(num_workers: int) -> None:
    full = global_batches(loaders_for(4, 2))
    saved_on = loaders_for(4, 2)
    iterators = [iter(loader) for loader in saved_on]
    head = global_batches(saved_on, iterators, count=5)
    state = saved_on[3].state_dict()  # any rank's: the position is global
    resumed = loaders_for(2, 4, num_workers)
    for loader in resumed:
        loader.load_state_dict(state)
    assert head + global_batches(resumed) == full


def test_the_source_refuses_a_state_it_cannot_translate() -> None:
    saved_on = loaders_for(1, 3)
    iterator = iter(saved_on[0])
    next(iterator)
    state = saved_on[0].state_dict()  # 3 sequences: not a whole global batch of 4
    with pytest.raises(ConfigError, match="3 sequences consumed is not a whole number of global batches of 4"):
        loaders_for(2, 2)[0].load_state_dict(state)


class Position0:
    """A Position that says epoch 0, position 0."""

    def where(self) -> Where:
        return Where(0)


def test_the_protocols_describe_the_source() -> None:
    position: Position = Position0()
    source = GlobalSource(SourceRequest(batch_size=2, drop_last=True, shuffle=False, seed=0, owner=position), 1, 2)
    assert isinstance(source, BatchSource)
    assert [job.indices for job in source.jobs(Where(0, 22), primary=True)] == [[90, 91], [94, 95]]
