"""process_workers: torch's worker processes behind run(jobs, epoch): the dataset wrappers, epochs, failures, exit."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import re
import signal
import threading
import time
from multiprocessing import resource_sharer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data

from loaders import DataLoader
from loaders.errors import SampleError, WorkerError, WorkerLostError
from loaders.loader.batch_outcome import CollateGuard
from loaders.loader.collate import default_collate
from loaders.loader.fetch import Fetched
from loaders.loader.process_workers import GuardedDataset, IndexBatch, ProcessWorkers
from loaders.loader.worker_start import WorkerInit
from tests.loaders.helpers import default_start_method, jobs
from tests.samples import wait_until


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


# ---------------------------------------------------------------- a worker dying while its batch is received

_DROPPED = threading.Event()  # in worker 0: its resource sharer dropped a receiver's request


class _DropsFirstRequest(resource_sharer._ResourceSharer):
    """Worker 0's resource sharer (which hands a batch's shared-memory descriptors to the receiver): it
    closes the first request unread, as a worker exiting under it does (the receiver gets ECONNRESET)."""

    def _serve(self) -> None:
        conn = self._listener.accept()
        conn.poll(60)  # the receiver's request has arrived: closing now resets the receiver's connection
        conn.close()
        _DROPPED.set()


def _drop_in_worker_0(worker_id: int) -> None:
    if worker_id == 0:
        resource_sharer._resource_sharer = _DropsFirstRequest()


class DiesAfterItsBatchIsLost(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Sample i -> uint8 [2, 2] filled with i. Worker 0 reads batch 0 (sent, then lost in transit) and
    batch 2: on sample 4 it exits, once the receiver of batch 0 has been reset."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> np.ndarray:
        if index == 4:
            _DROPPED.wait(60)
            # Still alive when the receiver's own liveness check runs, as a worker that is only
            # exiting: torch then re-raises the reset as it came (the case of issue 20).
            time.sleep(1.0)
            os._exit(3)
        return np.full((2, 2), index, dtype=np.uint8)


def test_a_worker_that_dies_while_its_batch_is_received_is_reported_with_its_batch() -> None:
    loader = DataLoader(DiesAfterItsBatchIsLost(), batch_size=2, num_workers=2, worker_init_fn=_drop_in_worker_0)
    with pytest.raises(WorkerLostError) as info:
        list(loader)
    loader.close()
    assert re.match(r"process worker 0 failed while reading batch 2 \(indices \[4, 5\]\): RuntimeError: "
                    r"DataLoader worker \(pid\(s\) \d+\) exited unexpectedly$", str(info.value)), str(info.value)
    # Reported as torch reports a dead worker; the reset it caused is noted (unless a starved machine let the
    # worker finish exiting before the receiver's own liveness check, which then reported the death itself).
    notes = getattr(info.value, "__notes__", [])
    assert not notes or any("could not be received: ConnectionResetError" in note for note in notes), notes


class Counting(torch.utils.data.IterableDataset):  # type: ignore[type-arg]  # at module level: spawn pickles it
    def __iter__(self) -> Any:
        return iter(range(12))


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_workers_of_a_dropped_loader_leave_on_their_own_with_exit_code_zero(method: str) -> None:
    """As under torch's shutdown (PyTorch's test_iterable_style_dataset under forkserver): a loader
    dropped with persistent workers tells them to stop; they are not killed."""
    with default_start_method(method):
        loader = DataLoader(Counting(), num_workers=2, batch_size=None, persistent_workers=True)
        iterator = iter(loader)
        assert sorted(iterator) == sorted(list(range(12)) * 2)
        workers = iterator._workers
        assert len(workers) == 2 and all(w.exitcode is None for w in workers)
        del iterator, loader
        for worker in workers:
            worker.join(60)
        assert [w.exitcode for w in workers] == [0, 0]


class Stuck(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Item 0 at once; any other item marks ``marks``/<index> and never returns (it ignores any stop signal)."""

    def __init__(self, marks: Path) -> None:
        self.marks = marks

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        if index > 0:
            (self.marks / str(index)).touch()
            time.sleep(600)
        return index


def test_a_worker_that_does_not_leave_when_told_is_terminated(tmp_path: Path) -> None:
    # forkserver: torch's workers exit 0 on a SIGTERM from their parent, which here is not this process
    stopping = multiprocessing.get_context("forkserver")
    loader = DataLoader(Stuck(tmp_path), num_workers=2, batch_size=1, persistent_workers=True,
                        multiprocessing_context=stopping)
    iterator = iter(loader)
    assert next(iterator).tolist() == [0]
    assert wait_until(lambda: len(os.listdir(tmp_path)) == 2, timeout_s=300)  # both workers inside an item
    workers = list(iterator._workers)
    del iterator, loader
    for worker in workers:
        worker.join(60)
    assert [w.exitcode for w in workers] == [-signal.SIGTERM] * 2
