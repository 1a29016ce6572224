"""process_workers: torch's worker processes behind run(jobs, epoch): the dataset wrappers, epochs, failures, exit."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import torch
import torch.utils.data

from loaders.errors import SampleError, WorkerError
from loaders.loader.batch_outcome import CollateGuard
from loaders.loader.collate import default_collate
from loaders.loader.fetch import Fetched
from loaders.loader.process_workers import GuardedDataset, IndexBatch, ProcessWorkers
from loaders.loader.worker_start import WorkerInit
from tests.loaders.helpers import jobs


class Numbers(torch.utils.data.Dataset):
    def __init__(self, size: int, bad: frozenset[int] = frozenset()) -> None:
        self.size, self.bad, self.tag = size, bad, "main"

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        if index in self.bad:
            raise SampleError(f"bad {index}", shard="x.tar", key=f"k{index}", offset=index)
        return index


def test_guarded_dataset_forwards_attributes_and_pickles() -> None:
    inner = Numbers(5)
    guarded = GuardedDataset(inner, skip_errors=False, seed=1)
    guarded.tag = "worker"
    assert inner.tag == "worker" and guarded.size == 5 and len(guarded) == 5 and guarded[3] == 3
    copy = pickle.loads(pickle.dumps(guarded))
    assert copy.tag == "worker" and copy.seed == 1 and copy.dataset.size == 5


def test_guarded_dataset_returns_fetched_with_portable_failure() -> None:
    guarded = GuardedDataset(Numbers(5, frozenset({2})), skip_errors=False, seed=0)
    fetched = guarded.__getitems__(IndexBatch([1, 2], epoch=0, position=7))
    assert isinstance(fetched, Fetched) and fetched.position == 7 and fetched.failed_index == 2
    assert isinstance(fetched.failure, SampleError) and fetched.failure.__notes__


def process_workers(dataset: Any, **stock: Any) -> ProcessWorkers:
    options = {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 2, **stock}
    return ProcessWorkers(dataset, collate=CollateGuard(default_collate, True), stock=options,
                          init=WorkerInit(seed=0), skip_errors=False)


def test_process_workers_serve_several_epochs_in_order() -> None:
    workers = process_workers(Numbers(8))
    for epoch in range(2):
        outcomes = list(workers.run(jobs(4, epoch=epoch), epoch))
        assert [o.position for o in outcomes] == [0, 1, 2, 3] and {o.epoch for o in outcomes} == {epoch}
        assert [o.batch.tolist() for o in outcomes] == [job.indices for job in jobs(4)]
        assert {o.worker_id for o in outcomes} == {0, 1}
    workers.close()
    with pytest.raises(WorkerError, match="closed"):
        next(workers.run(jobs(1), 2))


class Failing(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    def __iter__(self) -> Any:
        yield 1
        raise ValueError("stream broke")


def test_an_iterable_datasets_exception_keeps_its_class_and_names_the_worker() -> None:
    workers = process_workers(Failing(), num_workers=1, batch_size=2, persistent_workers=False)
    with pytest.raises(ValueError, match="stream broke") as info:
        list(workers.run(None, 0))
    assert "raised in process worker 0" in info.value.__notes__
