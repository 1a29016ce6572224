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

from loaders.loader.dataloader import DataLoader
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


def test_stock_attributes_are_present() -> None:
    loader = DataLoader(Samples(), batch_size=3, num_workers=0)
    stock = torch.utils.data.DataLoader(Samples(), batch_size=3)
    for name in ("batch_size", "drop_last", "num_workers", "timeout", "worker_init_fn", "prefetch_factor",
                 "pin_memory_device", "in_order", "generator", "multiprocessing_context"):
        assert getattr(loader, name) == getattr(stock, name), name
    assert isinstance(loader.sampler, SequentialSampler) and isinstance(loader.batch_sampler, BatchSampler)
    assert loader.dataset is not None and callable(loader.collate_fn)


def test_is_a_torch_dataloader_and_generic_in_its_batch_type() -> None:
    loader = DataLoader(Samples(), num_workers=0)
    assert isinstance(loader, torch.utils.data.DataLoader)
    alias = DataLoader[int]  # annotations written for torch's loader keep working
    assert alias.__origin__ is DataLoader and alias.__args__ == (int,)


def test_stock_attributes_read_back_as_given() -> None:
    dataset, generator = Samples(), torch.Generator()
    loader = DataLoader(dataset, batch_size=3, num_workers=1, pin_memory=False, drop_last=True, timeout=7.5,
                        worker_init_fn=set_tag, multiprocessing_context="spawn", generator=generator,
                        prefetch_factor=4, persistent_workers=False, pin_memory_device="", in_order=False)
    assert loader.dataset is dataset and loader.generator is generator and loader.worker_init_fn is set_tag
    assert (loader.batch_size, loader.drop_last, loader.num_workers, loader.timeout) == (3, True, 1, 7.5)
    assert loader.prefetch_factor == 4 and loader.pin_memory_device == ""
    assert not (loader.persistent_workers or loader.pin_memory or loader.in_order)
    assert loader.multiprocessing_context is torch.multiprocessing.get_context("spawn")
    assert isinstance(loader.batch_sampler, BatchSampler) and loader.batch_sampler.sampler is loader.sampler


def test_resolved_defaults_read_back_as_what_the_loader_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("loaders.loader.settings.default_num_workers", lambda topology: 2)
    loader = DataLoader(Samples(releases_gil=True), batch_size=2)
    assert (loader.num_workers, loader.persistent_workers, loader.prefetch_factor) == (2, True, 2)
    assert loader.pin_memory is torch.cuda.is_available()
    iterator = iter(loader)
    next(iterator)
    workers = iterator._workers
    assert len(workers) == loader.num_workers  # as many workers as it says
    list(iterator)
    assert all(worker.is_alive() for worker in workers)  # persistent: they outlive the epoch
    next(iter(loader))
    assert iter(loader)._workers == workers  # and serve the next one
    loader.close()


def test_own_shuffled_sampler_is_what_torch_holds() -> None:
    loader = DataLoader(Samples(), batch_size=4, shuffle=True, num_workers=0, seed=3)
    assert not isinstance(loader.sampler, torch.utils.data.RandomSampler)  # ours: seeded and resumable
    assert loader.batch_sampler.sampler is loader.sampler
    order = [int(i) for batch in loader for i in batch["label"]]
    assert order == [int(i) for batch in loader.batch_sampler for i in batch]


def test_the_samplers_it_installs_stay_frozen_like_stocks() -> None:
    loader = DataLoader(Samples(), batch_size=3, shuffle=True, seed=2, num_workers=0)
    order = [int(i) for batch in loader for i in batch["label"]]
    for name, value in (("sampler", [0]), ("batch_sampler", [[0]]), ("batch_size", 4)):
        with pytest.raises(ValueError) as raised:
            setattr(loader, name, value)
        assert str(raised.value) == f"{name} attribute should not be set after DataLoader is initialized"
    loader.timeout = 5  # not frozen in torch either
    loader.set_epoch(0)
    assert [int(i) for batch in loader for i in batch["label"]] == order


def describe(loader: torch.utils.data.DataLoader) -> tuple[int, int, int | None]:  # type: ignore[type-arg]
    """A function written for torch's loader: dataset size, sampler size, batch size."""
    return len(loader.dataset), len(loader.sampler), loader.batch_size  # type: ignore[arg-type]


def test_code_written_for_torch_loader_accepts_ours() -> None:
    ours = DataLoader(Samples(), batch_size=4, shuffle=True, num_workers=0)
    assert describe(ours) == describe(torch.utils.data.DataLoader(Samples(), batch_size=4, shuffle=True))
    assert describe(ours) == (SIZE, SIZE, 4)


def test_torch_iterator_machinery_is_never_used() -> None:
    loader = DataLoader(Samples(), batch_size=4, num_workers=0)
    with pytest.raises(TypeError, match="iterates with its own workers"):
        torch.utils.data.DataLoader.__iter__(loader)
    assert loader._iterator is None
    assert len(list(loader)) == len(loader) == math.ceil(SIZE / 4)


class NestedNamedTuples(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Samples of a namedtuple class defined in a class body: pickle cannot find it by name."""

    Sample = namedtuple("Sample", ["x", "label"])  # qualname "Sample", found nowhere by that name

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> Any:
        return self.Sample(torch.full((2,), index), str(index))


def test_a_batch_worker_processes_cannot_send_is_an_error_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    from loaders.errors import UnsendableBatchError

    with pytest.raises(UnsendableBatchError, match="cannot be sent to the main process"):
        list(DataLoader(NestedNamedTuples(), batch_size=2, num_workers=2, worker_type="process", timeout=30))
    # Workers the user did not ask for: the batches are built in the main process instead, with a warning.
    monkeypatch.setattr("loaders.loader.settings.default_num_workers", lambda topology: 2)
    with pytest.warns(UserWarning, match="reading in the main process instead"):
        ours = list(DataLoader(NestedNamedTuples(), batch_size=2, worker_type="process"))
    assert_same(list(torch.utils.data.DataLoader(NestedNamedTuples(), batch_size=2)), ours)
