"""Loop 4 of the black-box tests of ``loaders.DataLoader`` under the loops real training code writes:
user samplers, datasets and collate functions.
(public API only; the oracle: the stock DataLoader for drop-in promises, the uninterrupted run for resume).
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    ConcatDataset,
    DistributedSampler,
    SequentialSampler,
    Subset,
    SubsetRandomSampler,
    WeightedRandomSampler,
)
from torch.utils.data import DataLoader as StockLoader

from loaders import DataLoader
from tests.loaders.helpers import EPOCHS, N_SAMPLES, WORKER_SETUPS, RangeDataset, flat

Pair = namedtuple("Pair", ["x", "name"])  # module level: batches of it travel from worker processes


# ---------------------------------------------------------------------------------------------
# 4. user samplers, datasets and collate functions: same batches as stock
# ---------------------------------------------------------------------------------------------

class PairsBatchSampler(BatchSampler):
    """A user's BatchSampler subclass: batches of (i, n-1-i)."""

    def __init__(self, n: int) -> None:
        super().__init__(SequentialSampler(range(n)), batch_size=2, drop_last=False)
        self.n = n

    def __iter__(self):  # type: ignore[override]
        for i in range(self.n // 2):
            yield [i, self.n - 1 - i]

    def __len__(self) -> int:
        return self.n // 2


def assert_same_batches(ours: Any, stock: Any) -> None:
    def norm(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return ("T", x.dtype, x.tolist())
        if isinstance(x, dict):
            return {k: norm(v) for k, v in x.items()}
        if isinstance(x, tuple) and hasattr(x, "_fields"):
            return (type(x).__name__, tuple(norm(v) for v in x))
        if isinstance(x, (list, tuple)):
            return type(x)(norm(v) for v in x)
        return x
    assert norm(ours) == norm(stock)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_user_batch_sampler_subclass(num_workers: int) -> None:
    ours_l = DataLoader(RangeDataset(), batch_sampler=PairsBatchSampler(N_SAMPLES), num_workers=num_workers)
    stock_l = StockLoader(RangeDataset(), batch_sampler=PairsBatchSampler(N_SAMPLES), num_workers=num_workers)
    assert flat(list(ours_l)) == flat(list(stock_l)) == [[0, 9], [1, 8], [2, 7], [3, 6], [4, 5]]
    assert len(ours_l) == len(stock_l)
    ours_l.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_weighted_random_sampler_with_generator(num_workers: int) -> None:
    weights = [0.1] * 5 + [1.0] * 5

    def run(cls: Any) -> list[Any]:
        sampler = WeightedRandomSampler(weights, num_samples=8, generator=torch.Generator().manual_seed(7))
        loader = cls(RangeDataset(), batch_size=4, sampler=sampler, num_workers=num_workers)
        return [flat(list(loader)) for _ in range(EPOCHS)]

    assert run(DataLoader) == run(StockLoader)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_subset_random_sampler(num_workers: int) -> None:
    def run(cls: Any) -> list[Any]:
        torch.manual_seed(5)
        sampler = SubsetRandomSampler([1, 3, 5, 7, 9], generator=torch.Generator().manual_seed(3))
        loader = cls(RangeDataset(), batch_size=2, sampler=sampler, num_workers=num_workers)
        return [flat(list(loader)) for _ in range(EPOCHS)]

    assert run(DataLoader) == run(StockLoader)


def test_user_calls_set_epoch_on_their_own_distributed_sampler() -> None:
    def run(cls: Any) -> list[Any]:
        sampler = DistributedSampler(RangeDataset(), num_replicas=2, rank=1, shuffle=True, seed=11)
        loader = cls(RangeDataset(), batch_size=2, sampler=sampler, num_workers=0)
        out = []
        for epoch in (0, 5, 2):
            sampler.set_epoch(epoch)
            out.append(flat(list(loader)))
        return out

    assert run(DataLoader) == run(StockLoader)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_subset_and_concat_dataset(num_workers: int) -> None:
    def run(cls: Any) -> list[Any]:
        data = ConcatDataset([Subset(RangeDataset(), [9, 2, 4]), RangeDataset(3)])
        loader = cls(data, batch_size=2, shuffle=False, num_workers=num_workers)
        return flat(list(loader))

    assert run(DataLoader) == run(StockLoader) == [[9, 2], [4, 0], [1, 2]]


def collate_dict(samples: list[torch.Tensor]) -> dict[str, Any]:
    return {"x": torch.stack(samples), "ids": [int(s) for s in samples]}


def collate_named(samples: list[torch.Tensor]) -> Pair:
    return Pair(torch.stack(samples), [f"s{int(s)}" for s in samples])


def collate_strings(samples: list[torch.Tensor]) -> list[str]:
    return [f"sample-{int(s)}" for s in samples]


@pytest.mark.parametrize("collate", [collate_dict, collate_named, collate_strings])
@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_user_collate_fn_outputs_arrive_unchanged(collate: Callable[..., Any], num_workers: int,
                                                  worker_type: str) -> None:
    ours_l = DataLoader(RangeDataset(), batch_size=4, collate_fn=collate, num_workers=num_workers,
                        worker_type=worker_type)
    stock_l = StockLoader(RangeDataset(), batch_size=4, collate_fn=collate, num_workers=num_workers)
    ours, stock = list(ours_l), list(stock_l)
    assert_same_batches(ours, stock)
    assert [type(b) for b in ours] == [type(b) for b in stock]
    ours_l.close()


class NamedDataset(RangeDataset):
    def __getitem__(self, index: int) -> Pair:  # type: ignore[override]
        return Pair(torch.tensor(index), f"s{index}")


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_default_collate_of_namedtuples_and_strings(num_workers: int, worker_type: str) -> None:
    ours_l = DataLoader(NamedDataset(), batch_size=4, num_workers=num_workers, worker_type=worker_type)
    stock_l = StockLoader(NamedDataset(), batch_size=4, num_workers=num_workers)
    ours, stock = list(ours_l), list(stock_l)
    assert_same_batches(ours, stock)
    assert all(type(b) is Pair for b in ours)
    ours_l.close()


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_batch_size_none_yields_single_samples(num_workers: int, worker_type: str) -> None:
    ours_l = DataLoader(RangeDataset(), batch_size=None, shuffle=False, num_workers=num_workers,
                        worker_type=worker_type)
    stock_l = StockLoader(RangeDataset(), batch_size=None, shuffle=False, num_workers=num_workers)
    ours, stock = list(ours_l), list(stock_l)
    assert_same_batches(ours, stock)
    assert len(ours_l) == len(stock_l) == N_SAMPLES
    ours_l.close()
