"""worker_stop: torch's worker processes told to stop without waiting, on the start methods that pickle."""

from __future__ import annotations

import gc
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest
import torch.utils.data

from loaders.loader.worker_stop import tell_to_stop
from tests.samples import wait_until


class SlowToStart(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Yields 0..3. Each worker waits, inside the unpickling of its arguments (before its events and
    queues are unpickled), until ``marks``/dropped exists."""

    def __init__(self, marks: Path) -> None:
        self.marks = marks

    def __iter__(self) -> Any:
        return iter(range(4))

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        (self.marks / f"waiting-{os.getpid()}").touch()
        wait_until(lambda: (self.marks / "dropped").exists(), timeout_s=300)


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_workers_still_starting_when_their_iterator_is_dropped_leave_cleanly(method: str, tmp_path: Path) -> None:
    """Under spawn and forkserver a worker unpickles its events and queues after ``start()`` returned: an
    iterator told to stop and dropped meanwhile must keep them alive until its workers are up (else they
    die with exit code 1: FileNotFoundError from a semaphore already unlinked)."""
    loader = torch.utils.data.DataLoader(SlowToStart(tmp_path), num_workers=2, batch_size=None,
                                         multiprocessing_context=multiprocessing.get_context(method))
    iterator = iter(loader)  # torch starts its workers here
    workers = list(iterator._workers)  # type: ignore[attr-defined]  # torch's multiprocessing iterator
    assert wait_until(lambda: len(list(tmp_path.glob("waiting-*"))) == 2, timeout_s=300)
    tell_to_stop(iterator)
    del iterator, loader
    gc.collect()
    (tmp_path / "dropped").touch()
    for worker in workers:
        worker.join(120)
    assert [w.exitcode for w in workers] == [0, 0]
