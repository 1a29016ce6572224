"""The batch source seam: a dataset that brings its own data read by global position, resumable on any topology.

The data here is the tests' own, as small as ``PositionedData`` allows: sequence i is i, dealt
contiguously (rank r reads its B rows of each global batch), the last incomplete global
batch dropped. It plugs in through ``dataset.batch_source(request)``; the loader reads it
through its one ``GlobalSource``, whose state counts sequences consumed across all ranks, so
that a state saved on 4 ranks resumes on 2.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from loaders import DataLoader
from loaders.errors import ConfigError
from loaders.loader.batch_source import DATASET_HOOKS, BatchSource, DatasetHooks, SourceRequest
from loaders.loader.global_source import GlobalSource, PositionedData
from loaders.loader.progress import Where
from loaders.loader.stage import Position
from loaders.read.grid import Deal, GlobalGrid, Tail
from loaders.state_keys import KEY_EPOCH

SEQUENCES = 96  # global: every rank's dataset has them all
KEY_GLOBAL = "global"


class Positions:
    """Rank ``rank`` of ``world_size`` reading sequences 0..SEQUENCES-1; ``name`` is what its state checks."""

    key, deal, tail = KEY_GLOBAL, Deal.CONTIGUOUS, Tail.DROP

    def __init__(self, rank: int, world_size: int, name: str = "numbers") -> None:
        self.rank, self.world_size, self.name = rank, world_size, name

    def epoch_length(self, epoch: int, segment: Any = None) -> int:
        return SEQUENCES

    def indices(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        return positions

    def job(self, epoch: int, rows: np.ndarray, grid: GlobalGrid, segment: Any) -> Sequence[Any]:
        return rows.tolist()

    def stream_state(self, epoch: int, sequence: int, segment: Any = None) -> dict[str, Any]:
        return {"name": self.name}

    def resume(self, state: Any, *, quiet: bool = False) -> None:
        if state != self.stream_state(0, 0):
            raise ConfigError(f"saved over {state!r}, this is {self.name!r}")

    def order_digest(self, start: int, stop: int, epoch: int | None = None, segment: Any = None) -> str:
        return f"{self.name}:{epoch}:{start}:{stop}"


class Sequences(torch.utils.data.Dataset[int]):
    """Sequence i is i; the dataset supplies its batch source (no sampler)."""

    releases_gil = True

    def __init__(self, rank: int, world_size: int, name: str = "numbers") -> None:
        self.rank, self.world_size, self.name = rank, world_size, name

    def __len__(self) -> int:
        return SEQUENCES

    def __getitem__(self, index: int) -> int:
        return index

    def batch_source(self, request: SourceRequest) -> Positions:
        return Positions(self.rank, self.world_size, self.name)


def loaders_for(world_size: int, batch_size: int, num_workers: int = 0, name: str = "numbers") -> list[DataLoader[Any]]:
    """One loader per rank of a job of ``world_size`` (thread workers when ``num_workers``)."""
    return [DataLoader(Sequences(rank, world_size, name), batch_size=batch_size, num_workers=num_workers, seed=0)
            for rank in range(world_size)]


def global_batches(loaders: list[DataLoader[Any]], iterators: Sequence[Iterator[Any]] | None = None,
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
    assert isinstance(Positions(0, 1), PositionedData) and len(loader) == SEQUENCES // 4
    iterator = iter(loader)
    next(iterator), next(iterator)
    state = loader.state_dict()
    assert state[KEY_GLOBAL] == {"version": 2, "epoch": 0, "global_position": 8, "batch_size": 4, "world_size": 1,
                                 "rank": 0, "data": {"name": "numbers"}} and state[KEY_EPOCH] == 0
    assert loader.order_digest(3, 9) == "numbers:0:3:9"
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


def test_a_position_that_is_not_a_whole_global_batch_resumes_and_other_data_is_refused() -> None:
    saved_on = loaders_for(1, 3)
    iterator = iter(saved_on[0])
    next(iterator)
    state = saved_on[0].state_dict()  # 3 sequences: not a whole global batch of 4
    resumed = loaders_for(2, 2)
    for loader in resumed:
        loader.load_state_dict(state)
    assert global_batches(resumed) == [list(range(first, first + 4)) for first in range(3, SEQUENCES - 4, 4)]
    with pytest.raises(ConfigError, match="saved over {'name': 'numbers'}, this is 'letters'"):
        loaders_for(2, 2, name="letters")[0].load_state_dict(state)


class Position0:
    """A Position that says epoch 0, position 0."""

    def where(self) -> Where:
        return Where(0)


def test_the_protocols_describe_the_source() -> None:
    position: Position = Position0()
    source = GlobalSource(Positions(1, 2), SourceRequest(batch_size=2, drop_last=True, shuffle=False, seed=0,
                                                         owner=position))
    assert isinstance(source, BatchSource)
    assert [job.indices for job in source.jobs(Where(0, 22), primary=True)] == [[90, 91], [94, 95]]


def test_every_dataset_hook_the_loader_reads_is_declared_in_one_protocol() -> None:
    """The names the loader's modules read off a dataset with ``getattr`` are the ones ``DatasetHooks`` declares."""
    read = set()
    for module in Path(__file__).parents[3].joinpath("loaders", "loader").glob("*.py"):
        read |= set(re.findall(r'getattr\((?:self\.|loader\.)?_?dataset, "(\w+)"', module.read_text()))
    read.discard("dataset")  # a wrapper's inner dataset (torch's Subset), not a hook
    declared = set(DatasetHooks.__annotations__) | {name for name in vars(DatasetHooks) if not name.startswith("_")}
    assert read <= set(DATASET_HOOKS) == declared | {"__getitems__"}, sorted(read - set(DATASET_HOOKS))
