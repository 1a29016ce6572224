"""worker_choice: the worker-type rule (pure), what can be sent to a spawned worker, and the loader under
spawn and forkserver (issue 20: a dataset class defined in a function must not fail where stock works)."""

from __future__ import annotations

import multiprocessing
import pickle
import re
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data

from loaders import DataLoader
from loaders.errors import ConfigError
from loaders.loader.worker_choice import (
    MAX_THREAD_WORKERS,
    Unsendable,
    WorkerInputs,
    WorkerType,
    choose_workers,
    unsendable_part,
)
from loaders.read.transforms import CenterCropDecode, Compose, DecodeLabel, RandomResizedCropDecode
from tests.loaders.helpers import RangeDataset, default_start_method

AUTO, THREAD, PROCESS = WorkerType.AUTO, WorkerType.THREAD, WorkerType.PROCESS
LOCAL = Unsendable("dataset", "main.<locals>.Local", AttributeError("Can't pickle local object"))


def inputs(**changes: Any) -> WorkerInputs:
    """A map-style dataset of ours (releases the GIL), 2 default workers, fork; ``changes`` applied."""
    base = WorkerInputs(requested=AUTO, iterable=False, releases_gil=True, num_workers=2, workers_given=False,
                        has_mp_context=False, start_method="fork")
    return replace(base, **changes)


# ---------------------------------------------------------------- the rule


@pytest.mark.parametrize(("changes", "expected"), [
    ({}, THREAD),
    ({"num_workers": MAX_THREAD_WORKERS}, THREAD),
    ({"num_workers": MAX_THREAD_WORKERS + 1}, PROCESS),  # threads stop scaling past 4 (RESULTS §8)
    ({"num_workers": 16, "workers_given": True}, PROCESS),
    ({"releases_gil": False}, PROCESS),  # a user's own transform: not known to release the GIL
    ({"releases_gil": False, "num_workers": 1}, PROCESS),
    ({"iterable": True}, PROCESS),
    ({"has_mp_context": True}, PROCESS),
    ({"requested": THREAD, "num_workers": 16, "releases_gil": False}, THREAD),
    ({"requested": PROCESS, "num_workers": 1}, PROCESS),
    ({"num_workers": 0}, THREAD),
    ({"releases_gil": False, "light_items": True, "num_workers": 16}, THREAD),  # tokens: pickling costs more
    ({"releases_gil": False, "light_items": True, "iterable": True}, PROCESS),
    ({"releases_gil": False, "light_items": True, "requested": PROCESS}, PROCESS),
], ids=lambda value: str(value))
def test_auto_picks_threads_only_for_few_workers_whose_work_releases_the_gil(changes: dict[str, Any],
                                                                              expected: WorkerType) -> None:
    for method in ("fork", "forkserver", "spawn"):  # a sendable dataset: the start method changes nothing
        choice = choose_workers(inputs(start_method=method, **changes))
        assert choice.worker_type is expected and choice.warning is None
        assert choice.num_workers == changes.get("num_workers", 2)


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
@pytest.mark.parametrize("changes", [
    {"releases_gil": False},  # processes by the rule, not asked for
    {"releases_gil": True, "num_workers": 8, "workers_given": True},  # processes by the count, threads allowed
], ids=["gil-bound-default-workers", "gil-free-8-workers-given"])
def test_an_unsendable_dataset_falls_back_to_threads_with_a_warning_saying_why_and_how(
        method: str, changes: dict[str, Any]) -> None:
    choice = choose_workers(inputs(start_method=method, unsendable=LOCAL, **changes))
    assert choice.worker_type is THREAD and choice.num_workers == changes.get("num_workers", 2)
    assert choice.warning is not None
    for part in ("main.<locals>.Local", f"'{method}' start method", "thread workers instead",
                 "define it at module level", "multiprocessing_context='fork'"):
        assert part in choice.warning


def test_an_unsendable_iterable_the_user_did_not_give_workers_for_is_read_in_the_main_process() -> None:
    choice = choose_workers(inputs(iterable=True, start_method="spawn", unsendable=LOCAL))
    assert (choice.worker_type, choice.num_workers) == (PROCESS, 0)
    assert choice.warning is not None and "main process" in choice.warning


@pytest.mark.parametrize("changes", [
    {"requested": PROCESS},
    {"has_mp_context": True},
    {"workers_given": True, "releases_gil": False},  # an explicit num_workers on a dataset that needs processes
    {"workers_given": True, "iterable": True},
], ids=["worker_type-process", "multiprocessing_context", "num_workers-given", "iterable-num_workers-given"])
def test_processes_asked_for_but_unsendable_stay_processes_with_a_note_naming_the_class_and_start_method(
        changes: dict[str, Any]) -> None:
    """As stock: nothing is refused at construction; starting the workers fails (torch's warning and pickle's
    error, tests/loaders/loader/test_worker_init.py), and this note names the part and the fix."""
    choice = choose_workers(inputs(start_method="forkserver", unsendable=LOCAL, **changes))
    assert (choice.worker_type, choice.warning) == (PROCESS, None)
    assert choice.start_note is not None
    assert "worker processes cannot be started: the dataset main.<locals>.Local cannot be pickled" in choice.start_note
    assert "'forkserver' start method" in choice.start_note and "define it at module level" in choice.start_note
    assert ("worker_type='thread'" in choice.start_note) is not changes.get("iterable", False)


def test_fork_sends_nothing_by_pickling_so_an_unsendable_dataset_keeps_processes() -> None:
    choice = choose_workers(inputs(releases_gil=False, unsendable=LOCAL))
    assert choice.worker_type is PROCESS and choice.warning is None


@pytest.mark.parametrize(("changes", "match"), [
    ({"requested": THREAD, "iterable": True}, "needs a map-style dataset"),
    ({"requested": THREAD, "has_mp_context": True}, "applies to worker processes"),
])
def test_thread_workers_refuse_what_only_processes_do(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        choose_workers(inputs(**changes))


# ---------------------------------------------------------------- what a dataset declares


def user_crop(sample: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    return sample  # a user's own (PIL) transform taking rng: not known to release the GIL


class DeclaredTransform:
    releases_gil = True  # a user's transform may declare it

    def __call__(self, sample: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        return sample


@pytest.mark.parametrize(("transform", "releases"), [
    (None, True),
    (RandomResizedCropDecode(32), True),
    (Compose([CenterCropDecode(32), DecodeLabel()]), True),
    (user_crop, False),
    (Compose([RandomResizedCropDecode(32), user_crop]), False),
    (DeclaredTransform(), True),
], ids=["none", "ours", "compose-ours", "user", "compose-with-user", "user-declared"])
def test_only_transforms_known_to_release_the_gil_make_a_shard_dataset_use_threads(
        image_shards: Path, transform: Any, releases: bool) -> None:
    from loaders import ShardDataset

    dataset = ShardDataset(image_shards, transform=transform)
    assert dataset.releases_gil is releases
    loader = DataLoader(dataset, batch_size=2, num_workers=2)
    assert loader.worker_type is (THREAD if releases else PROCESS)
    loader.close()


# ---------------------------------------------------------------- sendability and the start method


class HoldsSpawnPrimitives(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """As PyTorch's own tests build them: a lock and a shared value, a large tensor."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.count, self.barrier = context.Value("i", 0), context.Semaphore(0)
        self.data = torch.zeros(1 << 20)

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        return index


def test_unsendable_part_names_the_first_part_pickle_cannot_send() -> None:
    class Local(RangeDataset):
        pass

    dataset = HoldsSpawnPrimitives()
    assert unsendable_part([("dataset", dataset), ("worker_init_fn", None)]) is None
    assert not dataset.data.is_shared()  # probing does not move tensors to shared memory, as sending would
    found = unsendable_part([("dataset", RangeDataset(4)), ("collate_fn", lambda batch: batch),
                             ("worker_init_fn", Local(2))])
    assert found is not None and (found.part, found.type_name) == ("collate_fn", "function")
    assert "cannot be pickled" in str(found) and isinstance(found.error, (AttributeError, pickle.PicklingError))


def test_start_method_reads_the_default_without_fixing_it() -> None:
    code = ("import multiprocessing as mp; from loaders.loader.worker_choice import start_method; "
            "m = start_method(None); assert mp.get_start_method(allow_none=True) is None; "
            "mp.set_start_method('spawn'); print(m, start_method(None), start_method('forkserver'), "
            "start_method(mp.get_context('fork')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parents[3])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [multiprocessing.get_all_start_methods()[0], "spawn", "forkserver", "fork"]


# ---------------------------------------------------------------- the loader under spawn and forkserver


def test_a_dataset_class_defined_in_a_function_loads_with_threads_and_one_warning(pickling_start_method: str) -> None:
    class TestDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]  # as in PyTorch's test_numpy
        def __getitem__(self, i: int) -> np.ndarray:
            return np.ones((2, 3, 4)) * i

        def __len__(self) -> int:
            return 40

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = DataLoader(TestDataset(), batch_size=12)
        batches = list(loader)
        batches += list(loader)
    loader.close()
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "the dataset " in messages[0] and "TestDataset cannot be pickled" in messages[0]
    assert f"'{pickling_start_method}' start method" in messages[0]
    assert loader.worker_type is THREAD
    assert [tuple(b.shape) for b in batches] == [(12, 2, 3, 4)] * 3 + [(4, 2, 3, 4)] + [(12, 2, 3, 4)] * 3 + [
        (4, 2, 3, 4)]
    assert batches[0].dtype == torch.float64 and batches[0][5].eq(5).all()


def test_processes_asked_for_with_a_dataset_defined_in_a_function_fail_as_stock_does_with_a_clear_note(
        pickling_start_method: str) -> None:
    class Local(RangeDataset):
        pass

    stock = torch.utils.data.DataLoader(Local(8), batch_size=2, num_workers=2)
    with pytest.warns(UserWarning, match="Got pickle error when attempting to start a worker Process"), \
            pytest.raises((AttributeError, pickle.PicklingError)) as expected:
        next(iter(stock))
    for asked in ({"num_workers": 2}, {"worker_type": "process"}):
        loader = DataLoader(Local(8), batch_size=2, **asked)  # as stock: nothing refused here
        with pytest.warns(UserWarning, match="Got pickle error when attempting to start a worker Process"), \
                pytest.raises(expected.type) as info:
            next(iter(loader))
        note = " ".join(getattr(info.value, "__notes__", []))
        assert re.search(rf"the dataset .*Local cannot be pickled .*'{pickling_start_method}' start method", note)
        loader.close()


def test_a_collate_fn_defined_in_a_function_falls_back_to_threads_too(pickling_start_method: str) -> None:
    def collate(batch: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack(batch) + 1

    with pytest.warns(UserWarning, match="the collate_fn function cannot be pickled"):
        loader = DataLoader(RangeDataset(6), batch_size=3, collate_fn=collate)
    assert [b.tolist() for b in loader] == [[1, 2, 3], [4, 5, 6]]
    loader.close()


def test_a_module_level_dataset_still_gets_worker_processes_under_spawn() -> None:
    with default_start_method("spawn"), warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        loader = DataLoader(RangeDataset(8), batch_size=2, num_workers=2)
        assert loader.worker_type is PROCESS
        assert sorted(int(x) for batch in loader for x in batch) == list(range(8))
        loader.close()
