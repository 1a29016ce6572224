"""DevicePrefetcher: order, nesting, transform, depth, staging-buffer reuse, close, errors."""

from __future__ import annotations

import contextlib
from collections import OrderedDict, namedtuple
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

import loaders.loader.prefetch as prefetch
from loaders.errors import ConfigError
from loaders.loader.buffers import PinnedBufferPool
from loaders.loader.prefetch import DevicePrefetcher, map_tensors, to_device

Pair = namedtuple("Pair", ["image", "label"])
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def make_batches(count: int) -> list[dict[str, Any]]:
    return [
        {"image": torch.full((2, 4, 4, 3), k, dtype=torch.uint8), "label": torch.tensor([k, k + 1]), "step": k}
        for k in range(count)
    ]


class CountingSource:
    """An iterator that records how many batches were pulled and whether it was closed."""

    def __init__(self, count: int, fail_at: int | None = None) -> None:
        self.batches = make_batches(count)
        self.pulled = 0
        self.closed = False
        self.fail_at = fail_at
        self.error = ValueError(f"source broke at {fail_at}")

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        if self.pulled == self.fail_at:
            raise self.error
        if self.pulled == len(self.batches):
            raise StopIteration
        self.pulled += 1
        return self.batches[self.pulled - 1]

    def close(self) -> None:
        self.closed = True


class PendingEvent:
    """A host event that stays 'in flight' until the test completes it."""

    def __init__(self) -> None:
        self.done = False

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.done = True


def test_order_and_values_preserved_and_copies_are_independent() -> None:
    batches = make_batches(5)
    out = list(DevicePrefetcher(batches, "cpu", stage=True))  # the CUDA path's staging, on the CPU
    assert [b["step"] for b in out] == list(range(5))
    for got, sent in zip(out, batches):
        assert torch.equal(got["image"], sent["image"]) and torch.equal(got["label"], sent["label"])
        assert got["image"].data_ptr() != sent["image"].data_ptr()


def test_nested_structures_keep_their_types_and_non_tensor_leaves_pass_through() -> None:
    marker, array = object(), np.arange(3)
    batch = OrderedDict(
        pair=Pair(torch.ones(2, 2), torch.tensor([1, 2])),
        items=[torch.zeros(3), ("text", 7, None)],
        meta={"marker": marker, "array": array},
    )
    (out,) = list(DevicePrefetcher([batch], "cpu"))
    assert type(out) is OrderedDict and type(out["pair"]) is Pair
    assert torch.equal(out["pair"].label, torch.tensor([1, 2])) and torch.equal(out["items"][0], torch.zeros(3))
    assert out["items"][1] == ("text", 7, None)
    assert out["meta"]["marker"] is marker and out["meta"]["array"] is array


def test_map_tensors_visits_every_tensor_once() -> None:
    seen: list[torch.Tensor] = []
    map_tensors({"a": [torch.zeros(1), (torch.ones(1),)], "b": "x"}, seen.append)
    assert len(seen) == 2


def test_transform_runs_on_the_copied_batch_in_order() -> None:
    calls: list[int] = []

    def transform(batch: dict[str, Any]) -> dict[str, Any]:
        calls.append(batch["step"])
        return {**batch, "image": batch["image"].float() * 2}

    out = list(to_device(make_batches(3), "cpu", transform=transform))
    assert calls == [0, 1, 2]
    assert all(b["image"].dtype == torch.float32 and b["image"].max().item() == 2 * b["step"] for b in out)


def test_augment_as_transform_yields_model_ready_batches() -> None:
    from loaders.augment import Augment, RandomHorizontalFlip

    batches = [{"image": torch.randint(0, 256, (2, 8, 8, 3), dtype=torch.uint8), "label": torch.tensor([0, 1])}] * 3
    augment = Augment([RandomHorizontalFlip()], out_dtype=torch.bfloat16)
    out = list(DevicePrefetcher(batches, "cpu", transform=augment))
    assert all(b["image"].dtype == torch.bfloat16 and b["image"].shape == (2, 3, 8, 8) for b in out)
    assert all(b["image"].is_contiguous(memory_format=torch.channels_last) for b in out)
    fresh = Augment([RandomHorizontalFlip()], out_dtype=torch.bfloat16)
    assert all(torch.equal(b["image"], fresh(batches[k], batch_index=k)["image"]) for k, b in enumerate(out))


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_source_is_pulled_at_most_depth_ahead(depth: int) -> None:
    source = CountingSource(6)
    for k, batch in enumerate(DevicePrefetcher(source, "cpu", depth=depth)):
        assert batch["step"] == k
        assert source.pulled == min(k + 1 + depth, 6)


def test_staging_buffers_are_reused_once_their_copy_completed() -> None:
    pool = PinnedBufferPool(max_buffers=4, pin_memory=False)
    out = list(DevicePrefetcher(make_batches(6), "cpu", pool=pool, stage=True))
    # Two pageable tensors per batch: two allocations, every later staging reuses them.
    assert pool.stats.misses == 2 and pool.stats.hits == 10
    assert [int(b["image"][0, 0, 0, 0]) for b in out] == list(range(6))  # reuse never leaked into outputs


def test_staging_buffer_is_not_reused_while_its_copy_is_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[PendingEvent] = []

    def record(self: object) -> PendingEvent:
        events.append(PendingEvent())
        return events[-1]

    monkeypatch.setattr(prefetch._HostStreams, "record", record)
    monkeypatch.setattr(prefetch._HostStreams, "hand_over", lambda self, event, tensors: None)
    pool = PinnedBufferPool(max_buffers=4, pin_memory=False)
    batches = [{"image": torch.full((3,), k)} for k in range(4)]
    iterator = iter(DevicePrefetcher(batches, "cpu", depth=1, pool=pool, stage=True))
    first = next(iterator)  # batches 0 and 1 staged, both copies still "in flight"
    assert pool.stats.hits == 0 and pool.num_pending == 2
    events[0].done = True  # the first event recorded marks the end of batch 0's staging copy
    second = next(iterator)  # staging batch 2 may now reuse batch 0's buffer, not batch 1's
    assert pool.stats.hits == 1 and pool.stats.waits == 0
    assert [int(first["image"][0]), int(second["image"][0])] == [0, 1]


def test_batch_with_more_tensors_than_the_pool_holds() -> None:
    pool = PinnedBufferPool(max_buffers=2, pin_memory=False)
    batch = {f"field{i}": torch.full((4,), i) for i in range(5)}
    (out,) = list(DevicePrefetcher([batch], "cpu", pool=pool, stage=True))
    assert all(torch.equal(out[key], batch[key]) for key in batch)
    assert pool.num_owned <= 2


def test_early_break_closes_the_source() -> None:
    source = CountingSource(10)
    for batch in DevicePrefetcher(source, "cpu"):
        if batch["step"] == 1:
            break
    assert source.closed and source.pulled == 4


def test_close_and_context_manager_close_the_source() -> None:
    source = CountingSource(10)
    with DevicePrefetcher(source, "cpu") as prefetcher:
        next(iter(prefetcher))
    assert source.closed
    never_iterated = CountingSource(3)
    DevicePrefetcher(never_iterated, "cpu").close()
    assert never_iterated.closed and never_iterated.pulled == 0


@pytest.mark.parametrize("depth", [0, 2])
def test_source_exception_surfaces_after_the_earlier_batches(depth: int) -> None:
    source = CountingSource(10, fail_at=3)
    received: list[int] = []
    with pytest.raises(ValueError) as caught:
        for batch in DevicePrefetcher(source, "cpu", depth=depth):
            received.append(batch["step"])
    assert received == [0, 1, 2]
    assert caught.value is source.error
    assert source.closed


def test_transform_exception_surfaces_at_its_batch() -> None:
    def transform(batch: dict[str, Any]) -> dict[str, Any]:
        if batch["step"] == 2:
            raise RuntimeError("augment failed on step 2")
        return batch

    received: list[int] = []
    with pytest.raises(RuntimeError, match="step 2"):
        for batch in DevicePrefetcher(make_batches(5), "cpu", transform=transform):
            received.append(batch["step"])
    assert received == [0, 1]


def test_reiterating_an_iterable_source_restarts_it() -> None:
    prefetcher = DevicePrefetcher(make_batches(3), "cpu")
    assert [b["step"] for b in prefetcher] == [0, 1, 2]
    assert [b["step"] for b in prefetcher] == [0, 1, 2]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"depth": -1}, "'depth' must be a non-negative int"),
        ({"depth": 1.5}, "'depth' must be a non-negative int"),
        ({"transform": 3}, "'transform' must be callable"),
    ],
)
def test_bad_arguments_raise_config_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DevicePrefetcher([], "cpu", **kwargs)


def test_bad_device_raises_config_error() -> None:
    with pytest.raises(ConfigError, match="'device'"):
        DevicePrefetcher([], "no-such-device")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            DevicePrefetcher([], "cuda")


@pytest.mark.gpu
@needs_cuda
def test_cuda_pageable_inputs_are_staged_and_pinned_ones_copied_directly() -> None:
    pool = PinnedBufferPool(max_buffers=4)
    pageable = {"image": torch.arange(64, dtype=torch.uint8)}
    pinned = {"image": torch.arange(64, dtype=torch.uint8).pin_memory()}
    out = list(DevicePrefetcher([pageable, pinned], "cuda", pool=pool))
    assert pool.stats.misses == 1  # only the pageable tensor went through the pool
    assert all(b["image"].is_cuda and torch.equal(b["image"].cpu(), pageable["image"]) for b in out)


@pytest.mark.gpu
@needs_cuda
def test_cuda_transform_runs_on_the_side_stream_and_the_consumer_waits_for_it() -> None:
    consumer = torch.cuda.current_stream()
    streams: list[torch.cuda.Stream] = []

    def slow_transform(batch: torch.Tensor) -> torch.Tensor:
        streams.append(torch.cuda.current_stream())
        torch.cuda._sleep(50_000_000)  # keeps the copy stream busy: a missing wait reads zeros
        return batch.float() + 1

    batches = [torch.full((256, 256), k, dtype=torch.uint8) for k in range(4)]
    sums = [b.sum() for b in DevicePrefetcher(batches, "cuda", transform=slow_transform)]
    assert all(s != consumer for s in streams)
    assert [int(s) for s in sums] == [(k + 1) * 256 * 256 for k in range(4)]


class ScopeRecordingStreams(prefetch._HostStreams):
    """Host streams noting where ``wait_for_consumer`` is called: inside ``copy_scope`` the
    current CUDA stream is the copy stream, so a wait there would order nothing."""

    def __init__(self) -> None:
        self.in_scope = False
        self.waits: list[tuple[bool, list[int]]] = []

    @contextlib.contextmanager
    def copy_scope(self) -> Iterator[None]:
        self.in_scope = True
        try:
            yield
        finally:
            self.in_scope = False

    def wait_for_consumer(self, tensors: list[torch.Tensor]) -> None:
        self.waits.append((self.in_scope, [t.data_ptr() for t in tensors]))


def test_inputs_already_on_the_device_make_the_copy_stream_wait_outside_its_scope() -> None:
    batches = [{"image": torch.full((2,), k), "nested": [torch.zeros(1)], "step": k} for k in range(3)]
    prefetcher = DevicePrefetcher(batches, "cpu")
    streams = ScopeRecordingStreams()
    prefetcher._streams = streams  # what __iter__ would create: CUDA streams on a GPU
    assert [b["step"] for b in prefetcher] == [0, 1, 2]
    assert streams.waits == [
        (False, [b["image"].data_ptr(), b["nested"][0].data_ptr()]) for b in batches
    ]


@pytest.mark.gpu
@needs_cuda
def test_cuda_inputs_written_on_the_consumer_stream_are_read_after_that_write() -> None:
    def source() -> Iterator[torch.Tensor]:
        for k in range(4):
            torch.cuda._sleep(50_000_000)  # the consumer's stream is busy; the fill comes after
            yield torch.full((256, 256), float(k), device="cuda")

    sums = [b.sum() for b in DevicePrefetcher(source(), "cuda", transform=lambda batch: batch + 1)]
    assert [int(s) for s in sums] == [(k + 1) * 256 * 256 for k in range(4)]


def test_cpu_target_passes_cpu_tensors_through_without_copies() -> None:
    batches = make_batches(3)
    out = list(DevicePrefetcher(batches, "cpu"))
    for got, sent in zip(out, batches):
        assert got["image"].data_ptr() == sent["image"].data_ptr()
