"""API parity with torch.utils.data.DataLoader: same batches, lengths and argument errors."""

from __future__ import annotations

import math
from collections import namedtuple
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data
from torch.utils.data import BatchSampler, SequentialSampler, SubsetRandomSampler

from loaders.dataloader import DataLoader
from tests.loaders.resume_harness import items_equal

Pair = namedtuple("Pair", ["image", "label"])
SIZE = 11


class Samples(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Sample i: a dict, a tuple or a namedtuple holding a uint8 image filled with i, i and a name."""

    def __init__(self, kind: str = "dict", size: int = SIZE, releases_gil: bool = False) -> None:
        self.kind, self.size, self.releases_gil = kind, size, releases_gil
        self.tag = -1  # set per worker by worker_init_fn

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Any:
        image = np.full((2, 3, 3), index, dtype=np.uint8)
        if self.kind == "tuple":
            return image, index
        if self.kind == "namedtuple":
            return Pair(image, index)
        return {"image": image, "label": index, "name": f"s{index}", "tag": self.tag}


class Stream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Yields 0..size-1, split between workers with get_worker_info (the documented pattern)."""

    def __init__(self, size: int = SIZE) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, self.size, step))


def set_tag(worker_id: int) -> None:
    info = torch.utils.data.get_worker_info()
    assert info is not None
    info.dataset.tag = 100 + worker_id


def both(dataset: Any, **kwargs: Any) -> tuple[list[Any], list[Any]]:
    """Batches of the stock loader and of ours, same arguments."""
    stock = list(torch.utils.data.DataLoader(dataset, **kwargs))
    ours_loader = DataLoader(dataset, **kwargs)
    ours = list(ours_loader)
    ours_loader.close()
    return stock, ours


def assert_same(stock: list[Any], ours: list[Any]) -> None:
    assert len(stock) == len(ours)
    for i, (want, got) in enumerate(zip(stock, ours, strict=True)):
        assert items_equal(want, got), f"batch {i}: stock {want!r}, ours {got!r}"


@pytest.mark.parametrize("kind", ["dict", "tuple", "namedtuple"])
@pytest.mark.parametrize("batch_size, drop_last", [(1, False), (4, False), (4, True), (SIZE, False), (20, True)])
def test_batches_match_stock(kind: str, batch_size: int, drop_last: bool) -> None:
    assert_same(*both(Samples(kind), batch_size=batch_size, drop_last=drop_last, num_workers=0))


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_batches_match_stock_with_workers(worker_type: str) -> None:
    stock = list(torch.utils.data.DataLoader(Samples(), batch_size=3, num_workers=0))
    ours = list(DataLoader(Samples(), batch_size=3, num_workers=2, worker_type=worker_type))
    assert_same(stock, ours)


def test_custom_sampler_batch_sampler_and_collate_fn() -> None:
    order = [5, 1, 9, 0, 3, 3]
    assert_same(*both(Samples(), sampler=order, batch_size=2, num_workers=0))
    batches = BatchSampler(SequentialSampler(range(SIZE)), batch_size=4, drop_last=False)
    assert_same(*both(Samples(), batch_sampler=batches, num_workers=0))
    assert_same(*both(Samples(), batch_sampler=[[3, 1], [2], [0, 4, 5]], num_workers=0))

    def labels(samples: list[dict[str, Any]]) -> list[int]:
        return [s["label"] for s in samples]

    assert_same(*both(Samples(), batch_size=3, collate_fn=labels, num_workers=0))


def test_batch_size_none_disables_batching() -> None:
    stock, ours = both(Samples("tuple"), batch_size=None, num_workers=0)
    assert_same(stock, ours)
    assert isinstance(ours[0][0], torch.Tensor) and ours[0][0].shape == (2, 3, 3)


def test_worker_init_fn_runs_in_each_process_worker() -> None:
    loader = DataLoader(Samples(), batch_size=2, num_workers=2, worker_type="process", worker_init_fn=set_tag)
    tags = sorted({int(t) for batch in loader for t in batch["tag"]})
    loader.close()
    assert tags == [100, 101]


def test_worker_init_fn_runs_in_each_thread_worker() -> None:
    seen: list[int] = []
    loader = DataLoader(Samples(), batch_size=2, num_workers=2, worker_type="thread", worker_init_fn=seen.append)
    list(loader)
    loader.close()
    assert sorted(seen) == [0, 1]


def test_generator_makes_the_shuffled_order_reproducible() -> None:
    def order(seed: int) -> list[int]:
        loader = DataLoader(Samples(), batch_size=4, shuffle=True, num_workers=0,
                            generator=torch.Generator().manual_seed(seed))
        return [int(i) for batch in loader for i in batch["label"]]

    assert order(0) == order(0)
    assert sorted(order(0)) == list(range(SIZE))
    assert order(0) != order(1)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_iterable_dataset_with_worker_sharding_matches_stock(num_workers: int) -> None:
    stock, ours = both(Stream(), batch_size=2, num_workers=num_workers)
    assert_same(stock, ours)
    assert sorted(int(i) for batch in ours for i in batch) == list(range(SIZE))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch_size": 4},
        {"batch_size": 4, "drop_last": True},
        {"batch_size": None},
        {"batch_sampler": [[0, 1], [2]]},
        {"sampler": SubsetRandomSampler([1, 2, 3]), "batch_size": 2},
    ],
)
def test_len_matches_stock(kwargs: dict[str, Any]) -> None:
    assert len(DataLoader(Samples(), num_workers=0, **kwargs)) == len(torch.utils.data.DataLoader(Samples(), **kwargs))


@pytest.mark.parametrize("drop_last", [False, True])
def test_len_of_iterable_dataset_with_len_matches_stock(drop_last: bool) -> None:
    ours = DataLoader(Stream(), batch_size=4, drop_last=drop_last, num_workers=0)
    assert len(ours) == len(torch.utils.data.DataLoader(Stream(), batch_size=4, drop_last=drop_last))
    assert len(ours) == (SIZE // 4 if drop_last else math.ceil(SIZE / 4))


INVALID = [
    ({"batch_sampler": [[0]], "batch_size": 2}, "map"),
    ({"batch_sampler": [[0]], "shuffle": True}, "map"),
    ({"batch_sampler": [[0]], "sampler": [0]}, "map"),
    ({"batch_sampler": [[0]], "drop_last": True}, "map"),
    ({"sampler": [0, 1], "shuffle": True}, "map"),
    ({"num_workers": -1}, "map"),
    ({"timeout": -1}, "map"),
    ({"num_workers": 0, "prefetch_factor": 2}, "map"),
    ({"num_workers": 0, "persistent_workers": True}, "map"),
    ({"num_workers": 0, "multiprocessing_context": "fork"}, "map"),
    ({"num_workers": 1, "multiprocessing_context": "no-such-method"}, "map"),
    ({"num_workers": 1, "multiprocessing_context": 3}, "map"),
    ({"batch_size": None, "drop_last": True}, "map"),
    ({"shuffle": True}, "iterable"),
    ({"sampler": [0]}, "iterable"),
    ({"batch_sampler": [[0]]}, "iterable"),
]


@pytest.mark.parametrize("kwargs, kind", INVALID)
def test_invalid_arguments_raise_what_stock_raises(kwargs: dict[str, Any], kind: str) -> None:
    dataset = Samples() if kind == "map" else Stream()
    with pytest.raises((ValueError, TypeError)) as stock:
        torch.utils.data.DataLoader(dataset, **kwargs)
    with pytest.raises(type(stock.value)) as ours:
        DataLoader(dataset, **{"num_workers": 0, **kwargs})
    assert str(ours.value) == str(stock.value)


def test_frozen_attributes_cannot_be_set_after_construction() -> None:
    loader = DataLoader(Samples(), num_workers=0)
    with pytest.raises(ValueError, match="batch_size attribute should not be set"):
        loader.batch_size = 3
    loader.timeout = 5  # not frozen in torch either
    assert loader.timeout == 5


def test_stock_attributes_are_present() -> None:
    loader = DataLoader(Samples(), batch_size=3, num_workers=0)
    stock = torch.utils.data.DataLoader(Samples(), batch_size=3)
    for name in ("batch_size", "drop_last", "num_workers", "timeout", "worker_init_fn", "prefetch_factor",
                 "pin_memory_device", "in_order", "generator", "multiprocessing_context"):
        assert getattr(loader, name) == getattr(stock, name), name
    assert isinstance(loader.sampler, SequentialSampler) and isinstance(loader.batch_sampler, BatchSampler)
    assert loader.dataset is not None and callable(loader.collate_fn)
