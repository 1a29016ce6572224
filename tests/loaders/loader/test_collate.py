"""collate: default_collate (uint8 kept, one preallocated tensor, torch parity), where batches live, pinning."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data
from hypothesis import given, settings
from hypothesis import strategies as st

from loaders.errors import BatchShapeError, SampleError
from loaders.loader.batch_outcome import collate_outcome
from loaders.loader.collate import default_collate, stack_into
from loaders.loader.fetch import Fetched
from loaders.loader.pinning import PinAfter
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


def test_different_shapes_raise_what_torch_raises_naming_the_sample() -> None:
    samples = [np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4, 3), np.uint8), np.zeros((5, 4, 3), np.uint8)]
    with pytest.raises(RuntimeError):
        torch.utils.data.default_collate(samples)
    with pytest.raises(BatchShapeError, match=r"sample 2 of the batch has shape \(5, 4, 3\)") as info:
        default_collate(samples)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, SampleError)


@pytest.mark.parametrize("samples", [
    [torch.tensor([1, 2]), torch.tensor([0.5, 1.5])],  # mixed dtypes: torch promotes
    [np.array([1, 2], dtype=np.int32), np.array([0.5, 1.5], dtype=np.float64)],
    [torch.ones(2, requires_grad=True), torch.zeros(2, requires_grad=True)],  # autograd inputs: no out=
], ids=["mixed-tensors", "mixed-arrays", "requires-grad"])
def test_accepts_what_torch_default_collate_accepts(samples: list[Any]) -> None:
    expected = torch.utils.data.default_collate(samples)
    got = default_collate(samples)
    assert got.dtype == expected.dtype and torch.equal(got.detach(), expected.detach())
    assert got.requires_grad == expected.requires_grad


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
    fetched = Fetched(epoch=0, position=0, indices=[0], samples=[images(1)[0]])
    outcome = collate_outcome(fetched, default_collate, auto_collation=True, worker_id=0)
    assert outcome.pin_memory().batch.is_pinned()
