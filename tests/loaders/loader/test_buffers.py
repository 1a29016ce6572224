"""PinnedBufferPool: reuse by (shape, dtype), no reuse while a copy may still read, bounded size."""

from __future__ import annotations

import pytest
import torch

from loaders.errors import ConfigError, LoaderError
from loaders.loader.buffers import PinnedBufferPool


class FakeEvent:
    """A copy event the test completes by hand; counts synchronize() calls."""

    def __init__(self) -> None:
        self.done = False
        self.synchronized = 0

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.synchronized += 1
        self.done = True


def test_released_buffer_is_reused_for_the_same_key() -> None:
    pool = PinnedBufferPool(max_buffers=4, pin_memory=False)
    first = pool.acquire((2, 3), torch.uint8)
    pool.release(first)
    again = pool.acquire((2, 3), torch.uint8)
    assert again is first
    other = pool.acquire((2, 3), torch.float32)
    assert other is not first and other.dtype == torch.float32 and other.shape == (2, 3)
    assert pool.stats.hits == 1 and pool.stats.misses == 2


def test_pending_buffer_is_not_reused_until_its_event_completes() -> None:
    pool = PinnedBufferPool(max_buffers=4, pin_memory=False)
    event = FakeEvent()
    first = pool.acquire((4,), torch.uint8)
    pool.release(first, event)
    second = pool.acquire((4,), torch.uint8)
    assert second is not first  # the copy reading `first` may still run
    assert pool.num_pending == 1
    pool.release(second)
    event.done = True
    assert pool.collect() == 1
    reused = {id(pool.acquire((4,), torch.uint8)), id(pool.acquire((4,), torch.uint8))}
    assert reused == {id(first), id(second)}
    assert event.synchronized == 0  # a completed event was queried, never waited on


def test_full_pool_waits_on_the_oldest_pending_event_only() -> None:
    pool = PinnedBufferPool(max_buffers=2, pin_memory=False)
    old_event, new_event = FakeEvent(), FakeEvent()
    old = pool.acquire((4,), torch.uint8)
    new = pool.acquire((4,), torch.uint8)
    pool.release(old, old_event)
    pool.release(new, new_event)
    third = pool.acquire((4,), torch.uint8)
    assert third is old
    assert old_event.synchronized == 1 and new_event.synchronized == 0
    assert pool.num_owned == 2 and pool.stats.waits == 1


def test_full_pool_evicts_a_free_buffer_of_another_shape() -> None:
    pool = PinnedBufferPool(max_buffers=1, pin_memory=False)
    small = pool.acquire((2,), torch.uint8)
    pool.release(small)
    large = pool.acquire((8,), torch.uint8)
    assert large.shape == (8,) and pool.num_owned == 1 and pool.stats.evictions == 1


def test_all_buffers_lent_raises_with_a_hint() -> None:
    pool = PinnedBufferPool(max_buffers=1, pin_memory=False)
    pool.acquire((2,), torch.uint8)
    with pytest.raises(LoaderError, match="max_buffers"):
        pool.acquire((2,), torch.uint8)


def test_stage_copies_and_release_rejects_foreign_or_double_release() -> None:
    pool = PinnedBufferPool(pin_memory=False)
    source = torch.arange(6, dtype=torch.int16).view(2, 3)
    staged = pool.stage(source)
    assert torch.equal(staged, source) and staged.data_ptr() != source.data_ptr()
    pool.release(staged)
    with pytest.raises(LoaderError, match="not lent"):
        pool.release(staged)
    with pytest.raises(LoaderError, match="not lent"):
        pool.release(torch.zeros(3))


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "4"])
def test_max_buffers_is_validated(bad: object) -> None:
    with pytest.raises(ConfigError, match="'max_buffers' must be a positive int"):
        PinnedBufferPool(max_buffers=bad)  # type: ignore[arg-type]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pool_pins_when_cuda_is_available() -> None:
    pool = PinnedBufferPool()
    assert pool.acquire((16,), torch.uint8).is_pinned()
