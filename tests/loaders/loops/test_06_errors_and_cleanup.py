"""Loop 6 of the black-box tests of ``loaders.DataLoader`` under the loops real training code writes:
exceptions, timeouts, breaks, cleanup.
(public API only; the oracle: the stock DataLoader for drop-in promises, the uninterrupted run for resume).
"""

from __future__ import annotations

import gc
import multiprocessing
import threading
from typing import Any

import pytest
from torch.utils.data import DataLoader as StockLoader

from loaders import DataLoader
from tests.loaders.helpers import (N_SAMPLES, WORKER_SETUPS, BlockedDataset, KeyErrorDataset, RangeDataset,
                                   children_of_self)
from tests.samples import wait_until

# ---------------------------------------------------------------------------------------------
# 6. exceptions, timeouts, breaks, cleanup
# ---------------------------------------------------------------------------------------------

def drain_with_errors(loader: Any) -> tuple[list[list[int]], list[type[BaseException]]]:
    got, errors = [], []
    it = iter(loader)
    for _ in range(20):
        try:
            got.append(next(it).tolist())
        except StopIteration:
            break
        except Exception as err:  # noqa: BLE001 (the class is what is checked)
            errors.append(type(err))
    return got, errors


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_key_error_in_dataset_is_a_key_error_and_the_epoch_goes_on(num_workers: int, worker_type: str) -> None:
    ours_l = DataLoader(KeyErrorDataset(), batch_size=2, shuffle=False, num_workers=num_workers,
                        worker_type=worker_type)
    stock_l = StockLoader(KeyErrorDataset(), batch_size=2, shuffle=False, num_workers=num_workers)
    ours_got, ours_err = drain_with_errors(ours_l)
    stock_got, stock_err = drain_with_errors(stock_l)
    assert stock_err == [KeyError] and stock_got == [[0, 1], [2, 3], [6, 7], [8, 9]]
    assert len(ours_err) == 1 and issubclass(ours_err[0], KeyError)
    assert ours_got == stock_got
    ours_l.close()


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_timeout_with_a_slow_dataset_raises_runtime_error(worker_type: str) -> None:
    """The timeout ends the wait, not the sample: no sample can be read until ``release`` is set."""
    events: Any = multiprocessing if worker_type == "process" else threading
    release = events.Event()
    loader = DataLoader(BlockedDataset(release, events.Event(), 4), batch_size=1, num_workers=1,
                        worker_type=worker_type, timeout=0.2, persistent_workers=False)
    received = []
    with pytest.raises(RuntimeError):
        for batch in loader:
            received.append(batch)
    assert received == [] and not release.is_set()  # raised while the first sample was still blocked
    if worker_type == "thread":
        release.set()  # the thread finishes its sample and exits (a failed pass stopped the processes)
    loader.close()


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_break_then_a_new_epoch_is_whole(num_workers: int, worker_type: str) -> None:
    loader = DataLoader(RangeDataset(), batch_size=2, shuffle=True, num_workers=num_workers,
                        worker_type=worker_type, seed=3)
    loader.set_epoch(0)
    for i, _ in enumerate(loader):
        if i == 2:
            break  # KeyboardInterrupt handled by the user's loop, or a max_steps stop
    loader.set_epoch(1)
    got = sorted(x for b in loader for x in b.tolist())
    assert got == list(range(N_SAMPLES))
    loader.close()


def del_loader_inside_the_loop(worker_type: str) -> None:
    """A loop that drops its loader (persistent workers) at its second batch: ``del loader``, ``break``."""
    loader = DataLoader(RangeDataset(), batch_size=2, num_workers=2, worker_type=worker_type,
                        persistent_workers=True)
    for i, _ in enumerate(loader):
        if i == 1:
            del loader
            break
    gc.collect()


def test_del_loader_inside_the_loop_leaves_no_worker_process() -> None:
    before = children_of_self()
    del_loader_inside_the_loop("process")
    assert wait_until(lambda: children_of_self() <= before), children_of_self() - before


def test_del_loader_inside_the_loop_leaves_no_worker_thread() -> None:
    before = set(threading.enumerate())
    del_loader_inside_the_loop("thread")
    assert wait_until(lambda: set(threading.enumerate()) <= before), set(threading.enumerate()) - before
