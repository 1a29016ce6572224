"""collate: default_collate (uint8 kept, one preallocated tensor, torch parity) and per-batch reading."""

from __future__ import annotations

import pickle
from collections import namedtuple
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data
from hypothesis import given, settings
from hypothesis import strategies as st

from loaders.collate import (
    BatchBuilder,
    CollateGuard,
    Fetched,
    PinAfter,
    collate_outcome,
    default_collate,
    fetch_samples,
    portable_error,
    raise_failure,
    stack_into,
)
from loaders.errors import SampleError, WorkerError
from tests.loaders.resume_harness import items_equal

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
Pair = namedtuple("Pair", ["image", "label"])


def images(count: int, shape: tuple[int, ...] = (4, 5, 3)) -> list[np.ndarray]:
    return [np.full(shape, 10 * i, dtype=np.uint8) + np.arange(shape[-1], dtype=np.uint8) for i in range(count)]


def test_uint8_images_stay_uint8_in_one_bhwc_tensor() -> None:
    samples = images(3)
    batch = default_collate(samples)
    assert batch.dtype == torch.uint8
    assert batch.shape == (3, 4, 5, 3)
    assert batch.is_contiguous()
    assert np.array_equal(batch.numpy(), np.stack(samples))


@pytest.mark.parametrize(
    "samples",
    [
        [{"image": a, "label": i, "name": f"s{i}", "raw": b"x", "score": 0.5 * i} for i, a in enumerate(images(3))],
        [(a, i) for i, a in enumerate(images(2))],
        [Pair(a, i) for i, a in enumerate(images(2))],
        [[np.float32(i), np.arange(3, dtype=np.int16)] for i in range(4)],
        [torch.arange(6).reshape(2, 3) * i for i in range(3)],
        [{"nested": {"v": np.ones(2, dtype=np.float64) * i}} for i in range(2)],
    ],
    ids=["dict", "tuple", "namedtuple", "list", "tensors", "nested-dict"],
)
def test_same_result_as_torch_default_collate(samples: list[Any]) -> None:
    assert items_equal(default_collate(samples), torch.utils.data.default_collate(samples))


def test_ints_become_int64_and_strings_stay_lists() -> None:
    batch = default_collate([{"label": 3, "key": "a"}, {"label": 7, "key": "b"}])
    assert batch["label"].dtype == torch.int64
    assert batch["label"].tolist() == [3, 7]
    assert batch["key"] == ["a", "b"]


def test_different_shapes_raise_sample_error_naming_the_sample() -> None:
    samples = [np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4, 3), np.uint8), np.zeros((5, 4, 3), np.uint8)]
    with pytest.raises(SampleError, match=r"sample 2 of the batch has shape \(5, 4, 3\)"):
        default_collate(samples)


def test_string_arrays_fail_like_torch() -> None:
    samples = [np.array(["a"]), np.array(["b"])]
    with pytest.raises(TypeError):
        torch.utils.data.default_collate(samples)
    with pytest.raises(TypeError):
        default_collate(samples)


def test_batch_lives_in_shared_memory_inside_a_worker_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.utils.data, "get_worker_info", object)
    batch = stack_into(images(2))
    assert batch.is_shared()
    assert np.array_equal(batch.numpy(), np.stack(images(2)))


@given(
    count=st.integers(1, 5),
    shape=st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple),
    dtype=st.sampled_from([np.uint8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64, np.bool_]),
)
@settings(max_examples=40, deadline=None)
def test_batch_dtype_and_shape_as_declared(count: int, shape: tuple[int, ...], dtype: type) -> None:
    samples = [np.ones(shape, dtype=dtype) for _ in range(count)]
    batch = default_collate(samples)
    assert batch.shape == (count, *shape)
    assert batch.dtype == torch.from_numpy(np.empty(0, dtype=dtype)).dtype


@needs_cuda
@pytest.mark.gpu
def test_pin_memory_pins_every_tensor() -> None:
    batch = default_collate([{"image": a, "label": i} for i, a in enumerate(images(2))], pin_memory=True)
    assert batch["image"].is_pinned() and batch["image"].dtype == torch.uint8
    assert batch["label"].is_pinned()
    assert PinAfter(lambda samples: torch.zeros(len(samples)))([1, 2]).is_pinned()
    outcome = collate_outcome(Fetched(0, [0], [images(1)[0]]), default_collate, auto_collation=True, worker_id=0)
    assert outcome.pin_memory().batch.is_pinned()


# ---------------------------------------------------------------- reading one batch


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
    fetched = fetch_samples(Flaky(10, {2, 5}), [1, 2, 3, 5], position=4, skip_errors=True)
    assert fetched.samples == [1, 3]
    assert [s.index for s in fetched.skips] == [2, 5]
    assert "shard 's-000.tar', key 'k2', offset 1024" in fetched.skips[0].error
    assert fetched.failure is None and fetched.position == 4


def test_fetch_stops_at_first_failure_when_raising() -> None:
    fetched = fetch_samples(Flaky(10, {2}), [1, 2, 3], position=0, skip_errors=False)
    assert isinstance(fetched.failure, SampleError)
    assert fetched.failed_index == 2


def test_fetch_uses_getitems_and_falls_back_per_sample_to_find_failures() -> None:
    good = Flaky(10, set(), batched=True)
    assert fetch_samples(good, [0, 1], position=0, skip_errors=True).samples == [0, 1]
    assert good.batched_calls == 1
    flaky = Flaky(10, {1}, batched=True)
    fetched = fetch_samples(flaky, [0, 1, 2], position=0, skip_errors=True)
    assert fetched.samples == [0, 2] and [s.index for s in fetched.skips] == [1]


def test_collate_failure_and_all_skipped_batch_are_outcomes_not_exceptions() -> None:
    def broken(samples: list[int]) -> None:
        raise ValueError("collate broke")

    outcome = collate_outcome(Fetched(3, [0, 1], [0, 1]), broken, auto_collation=True, worker_id=1)
    assert isinstance(outcome.failure, ValueError) and outcome.batch is None
    empty = collate_outcome(Fetched(3, [0], []), default_collate, auto_collation=True, worker_id=1)
    assert empty.batch is None and empty.failure is None and empty.num_samples == 0


def test_raise_failure_names_worker_batch_indices_and_sample_context() -> None:
    builder = BatchBuilder(Flaky(10, {6}), default_collate, auto_collation=True, skip_errors=False)
    outcome = builder(2, 17, [5, 6, 7])
    with pytest.raises(WorkerError) as info:
        raise_failure(outcome, "thread")
    message = str(info.value)
    assert "thread worker 2" in message and "batch 17" in message and "[5, 6, 7]" in message
    assert "at sample 6" in message and "shard 's-000.tar', key 'k6', offset 3072" in message
    assert isinstance(info.value.__cause__, SampleError)


def test_builder_without_auto_collation_collates_the_single_sample() -> None:
    builder = BatchBuilder(Flaky(4, set()), torch.utils.data.default_convert, auto_collation=False, skip_errors=False)
    assert builder(0, 0, [3]).batch == 3


class Unpicklable(Exception):
    def __init__(self, code: int, detail: str) -> None:  # two required args: pickle cannot rebuild it
        super().__init__(f"{code}: {detail}")


def test_portable_error_keeps_context_or_falls_back_to_text() -> None:
    err = SampleError("bad", shard="a.tar", key="k", offset=7)
    restored = pickle.loads(pickle.dumps(portable_error(err)))
    assert (restored.shard, restored.key, restored.offset) == ("a.tar", "k", 7)
    assert any("raised in worker process" in note for note in restored.__notes__)
    fallback = portable_error(Unpicklable(3, "x"))
    assert type(fallback) is RuntimeError and "Unpicklable: 3: x" in str(fallback)


def test_collate_guard_wraps_iterable_samples() -> None:
    outcome = CollateGuard(default_collate, auto_collation=True)([1, 2, 3])
    assert outcome.position == -1 and outcome.batch.tolist() == [1, 2, 3] and outcome.num_samples == 3
    single = CollateGuard(torch.utils.data.default_convert, auto_collation=False)(5)
    assert single.batch == 5 and single.failure is None
