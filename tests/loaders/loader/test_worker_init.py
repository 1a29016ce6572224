"""worker_init_fn as stock handles it (issue 29): where an unpicklable one fails, and what it means in threads.

Under spawn and forkserver (Python 3.14's Linux default) a ``worker_init_fn`` defined in a
function cannot be pickled. Stock builds the loader, then the first ``iter(loader)`` warns
("Got pickle error when attempting to start a worker Process. ...") and raises pickle's
error; ours does the same, the same warning and an error of the same type, with a note
naming the part and the fix. Thread workers run a ``worker_init_fn`` too, inside the
training process: the loader says so once.
"""

from __future__ import annotations

import pickle
import threading
import warnings
from typing import Any

import pytest
import torch
import torch.utils.data

from loaders import DataLoader
from tests.loaders.helpers import Pictures, RangeDataset, default_start_method

STOCK_WARNING = "Got pickle error when attempting to start a worker Process"


def _first_batch(loader: Any) -> tuple[type[BaseException], list[str], list[str]]:
    """The error of ``next(iter(loader))`` (its type and notes) and the warnings given meanwhile."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises((AttributeError, TypeError, pickle.PicklingError)) as info:
            next(iter(loader))
    return info.type, list(getattr(info.value, "__notes__", [])), [str(w.message) for w in caught]


@pytest.mark.parametrize("persistent_workers", [False, True])
@pytest.mark.parametrize("how", ["default", "context"])
def test_a_worker_init_fn_defined_in_a_function_fails_at_the_first_batch_as_stock_does(
        pickling_start_method: str, how: str, persistent_workers: bool) -> None:
    def init_fn(worker_id: int) -> None:  # a function of a function: pickle cannot find it
        torch.manual_seed(12345)

    options: dict[str, Any] = {"batch_size": 2, "num_workers": 2, "worker_init_fn": init_fn,
                               "persistent_workers": persistent_workers}
    if how == "context":
        options["multiprocessing_context"] = pickling_start_method
    stock_error, _, stock_warnings = _first_batch(torch.utils.data.DataLoader(RangeDataset(4), **options))
    loader = DataLoader(RangeDataset(4), **options)  # no error here, as stock
    error, notes, given = _first_batch(loader)
    assert error is stock_error
    assert [m for m in given if STOCK_WARNING in m] == [m for m in stock_warnings if STOCK_WARNING in m] != []
    assert len(notes) == 1
    assert "worker processes cannot be started: the worker_init_fn function cannot be pickled" in notes[0]
    assert f"'{pickling_start_method}' start method" in notes[0] and "define it at module level" in notes[0]
    loader.close()


def test_a_module_level_worker_init_fn_runs_in_worker_processes_under_forkserver() -> None:
    with default_start_method("forkserver"), warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = DataLoader(RangeDataset(4), batch_size=2, num_workers=2, worker_init_fn=_seed_12345)
        assert [b.tolist() for b in loader] == [[0, 1], [2, 3]]
        loader.close()


def _seed_12345(worker_id: int) -> None:
    torch.manual_seed(12345)


@pytest.mark.parametrize("persistent_workers", [False, True])
def test_in_thread_workers_a_worker_init_fn_runs_once_per_thread_and_the_loader_says_so_once(
        persistent_workers: bool) -> None:
    ran: list[tuple[int, int]] = []

    def init_fn(worker_id: int) -> None:
        ran.append((worker_id, threading.get_ident()))

    loader = DataLoader(Pictures(8, side=4), batch_size=2, num_workers=2, worker_type="thread",
                        worker_init_fn=init_fn, persistent_workers=persistent_workers)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for epoch in range(2):
            loader.set_epoch(epoch)
            assert sum(len(batch["label"]) for batch in loader) == 8
    loader.close()
    messages = [str(w.message) for w in caught if "worker_init_fn" in str(w.message)]
    assert len(messages) == 1, messages
    assert "init_fn runs in each of the 2 thread workers, inside the training process" in messages[0]
    assert "worker_type='process'" in messages[0] and caught[0].filename == __file__
    assert sorted(worker for worker, _ in ran) == ([0, 1] if persistent_workers else [0, 0, 1, 1])
    assert threading.get_ident() not in {thread for _, thread in ran}  # the worker threads, not this one


def test_an_unpicklable_worker_init_fn_nobody_asked_processes_for_is_run_by_threads_and_both_are_said(
        pickling_start_method: str) -> None:
    def init_fn(worker_id: int) -> None:
        pass

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = DataLoader(RangeDataset(4), batch_size=2, worker_init_fn=init_fn)  # num_workers not given
        assert [b.tolist() for b in loader] == [[0, 1], [2, 3]]
    loader.close()
    messages = [str(w.message) for w in caught]
    assert loader.worker_type == "thread"
    assert any("the worker_init_fn function cannot be pickled" in m for m in messages)
    assert sum("inside the training process" in m for m in messages) == 1
