"""Loop 13 of the black-box tests of ``loaders.DataLoader`` under the loops real training code writes:
seeding and epoch ownership.
(public API only; the oracle: the stock DataLoader for drop-in promises, the uninterrupted run for resume).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader as StockLoader
from torch.utils.data import DistributedSampler

from loaders import DataLoader
from tests.loaders.helpers import WORKER_SETUPS, RangeDataset, flat, uninterrupted

# ---------------------------------------------------------------------------------------------
# 13. more seeding / epoch ownership in loops
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_resume_with_generator_instead_of_manual_seed(num_workers: int, worker_type: str) -> None:
    def make() -> DataLoader[Any]:
        torch.manual_seed(int(time.time_ns() % 997))  # a restarted job need not reseed torch alike
        return DataLoader(RangeDataset(), batch_size=3, shuffle=True, num_workers=num_workers,
                          worker_type=worker_type, generator=torch.Generator().manual_seed(1))
    full = uninterrupted(make)
    first = make()
    first.set_epoch(1)
    it = iter(first)
    head = [next(it).tolist()]
    state = first.state_dict()
    first.close()
    second = make()
    second.load_state_dict(state)
    second.set_epoch(1)
    assert head + flat(list(second)) == full[1]
    second.close()


def test_loader_set_epoch_does_not_touch_the_users_sampler_epoch() -> None:
    """Lightning-style code calls both: the user's sampler.set_epoch(5) and the loader's set_epoch(0)."""
    def run(cls: Any) -> list[Any]:
        sampler = DistributedSampler(RangeDataset(), num_replicas=2, rank=0, shuffle=True, seed=4)
        loader = cls(RangeDataset(), batch_size=2, sampler=sampler, num_workers=0)
        sampler.set_epoch(5)
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(0)
        out = flat(list(loader))
        assert sampler.epoch == 5
        return out

    assert run(DataLoader) == run(StockLoader)
