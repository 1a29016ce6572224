"""Reading one batch (fetch), its outcome (batch_outcome) and the messages that say where (messages)."""

from __future__ import annotations

import pickle
import threading
from collections import namedtuple
from typing import Any

import pytest
import torch
import torch.utils.data

from loaders.errors import SampleError
from loaders.loader.batch_outcome import BatchBuilder, CollateGuard, collate_outcome, failure_error
from loaders.loader.batch_source import Job
from loaders.loader.collate import default_collate
from loaders.loader.epoch_sync import EpochSync
from loaders.loader.fetch import Fetched, fetch_samples
from loaders.loader.messages import portable_error

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
Pair = namedtuple("Pair", ["image", "label"])


class Flaky(torch.utils.data.Dataset):
    """Sample i is i; the indices in `bad` raise SampleError with full context."""

    def __init__(self, size: int, bad: set[int], *, batched: bool = False) -> None:
        self.size, self.bad, self.batched_calls = size, bad, 0
        if batched:
            self.__getitems__ = self._getitems  # type: ignore[method-assign]

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        if index in self.bad:
            raise SampleError(f"bad sample {index}", shard="s-000.tar", key=f"k{index}", offset=512 * index)
        return index

    def _getitems(self, indices: list[int]) -> list[int]:
        self.batched_calls += 1
        return [self[i] for i in indices]


def test_fetch_skips_failing_samples_and_records_why() -> None:
    fetched = fetch_samples(Flaky(10, {2, 5}), [1, 2, 3, 5], epoch=0, position=4, skip_errors=True)
    assert fetched.samples == [1, 3]
    assert [s.index for s in fetched.skips] == [2, 5]
    assert "shard 's-000.tar', key 'k2', offset 1024" in fetched.skips[0].error
    assert fetched.failure is None and fetched.position == 4


def test_fetch_stops_at_first_failure_when_raising() -> None:
    fetched = fetch_samples(Flaky(10, {2}), [1, 2, 3], epoch=0, position=0, skip_errors=False)
    assert isinstance(fetched.failure, SampleError)
    assert fetched.failed_index == 2


def test_fetch_uses_getitems_and_falls_back_per_sample_to_find_failures() -> None:
    good = Flaky(10, set(), batched=True)
    assert fetch_samples(good, [0, 1], epoch=0, position=0, skip_errors=True).samples == [0, 1]
    assert good.batched_calls == 1
    flaky = Flaky(10, {1}, batched=True)
    fetched = fetch_samples(flaky, [0, 1, 2], epoch=0, position=0, skip_errors=True)
    assert fetched.samples == [0, 2] and [s.index for s in fetched.skips] == [1]


def test_collate_failure_and_all_skipped_batch_are_outcomes_not_exceptions() -> None:
    def broken(samples: list[int]) -> None:
        raise ValueError("collate broke")

    two = Fetched(epoch=0, position=3, indices=[0, 1], samples=[0, 1])
    outcome = collate_outcome(two, broken, auto_collation=True, worker_id=1)
    assert isinstance(outcome.failure, ValueError) and outcome.batch is None
    none = Fetched(epoch=0, position=3, indices=[0], samples=[])
    empty = collate_outcome(none, default_collate, auto_collation=True, worker_id=1)
    assert empty.batch is None and empty.failure is None and empty.num_samples == 0


def builder(dataset: Any, collate: Any = default_collate, auto_collation: bool = True) -> BatchBuilder:
    return BatchBuilder(dataset, collate, auto_collation, False, EpochSync(dataset))


def test_failure_error_keeps_the_class_and_names_worker_batch_indices_and_sample() -> None:
    outcome = builder(Flaky(10, {6}))(2, Job(0, 17, [5, 6, 7]))
    err = failure_error(outcome, "thread")
    assert type(err) is SampleError
    assert err.key == "k6" and str(err) == "bad sample 6"
    note = err.__notes__[-1]
    assert "thread worker 2" in note and "batch 17" in note and "[5, 6, 7]" in note
    assert "at sample 6" in note and "shard 's-000.tar', key 'k6', offset 3072" in note
    copy = pickle.loads(pickle.dumps(err))  # it can travel on, e.g. to a parent process
    assert type(copy) is SampleError and copy.key == "k6" and copy.__notes__ == err.__notes__


def test_builder_without_auto_collation_collates_the_single_sample() -> None:
    single = builder(Flaky(4, set()), torch.utils.data.default_convert, auto_collation=False)
    assert single(0, Job(0, 0, [3])).batch == 3


class Unpicklable(Exception):
    def __init__(self, code: int, detail: str) -> None:  # two required args: pickle cannot rebuild it
        super().__init__(f"{code}: {detail}")


class OneField(Exception):
    """Holds an unpicklable attribute, but can be rebuilt from a message, as torch rebuilds worker errors."""

    def __init__(self, message: str, lock: Any = None) -> None:
        super().__init__(message)
        self.lock = lock


def test_portable_error_keeps_context_or_falls_back_to_text() -> None:
    err = SampleError("bad", shard="a.tar", key="k", offset=7)
    restored = pickle.loads(pickle.dumps(portable_error(err)))
    assert (restored.shard, restored.key, restored.offset) == ("a.tar", "k", 7)
    assert any("raised in worker process" in note for note in restored.__notes__)
    fallback = portable_error(Unpicklable(3, "x"))  # its constructor wants two arguments
    assert type(fallback) is RuntimeError and "Unpicklable: 3: x" in str(fallback)
    # pickles badly, but takes a message: its class is kept
    rebuilt = portable_error(OneField("disk full", threading.Lock()))
    assert type(rebuilt) is OneField and "disk full" in str(rebuilt)
    assert type(pickle.loads(pickle.dumps(rebuilt))) is OneField


def test_collate_guard_wraps_iterable_samples() -> None:
    outcome = CollateGuard(default_collate, auto_collation=True)([1, 2, 3])
    assert outcome.position == -1 and outcome.batch.tolist() == [1, 2, 3] and outcome.num_samples == 3
    single = CollateGuard(torch.utils.data.default_convert, auto_collation=False)(5)
    assert single.batch == 5 and single.failure is None
