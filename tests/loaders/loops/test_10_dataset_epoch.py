"""Loop 10 of the black-box tests of ``loaders.DataLoader`` under the loops real training code writes:
a dataset with its own set_epoch.
(public API only; the oracle: the stock DataLoader for drop-in promises, the uninterrupted run for resume).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader as StockLoader

from loaders import DataLoader
from tests.loaders.helpers import N_SAMPLES, WORKER_SETUPS, RangeDataset

# ---------------------------------------------------------------------------------------------
# 10. a map-style dataset with its own set_epoch (curriculum, per-epoch augmentation strength)
# ---------------------------------------------------------------------------------------------

class EpochAwareDataset(RangeDataset):
    """Sample i is ``tensor([i, epoch])``; the epoch is set by ``set_epoch``."""

    def __init__(self, n: int = N_SAMPLES) -> None:
        super().__init__(n)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index, self.epoch])


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_loader_set_epoch_reaches_a_dataset_with_set_epoch(num_workers: int, worker_type: str) -> None:
    loader = DataLoader(EpochAwareDataset(), batch_size=5, num_workers=num_workers, worker_type=worker_type)
    for epoch in (0, 1, 4):
        loader.set_epoch(epoch)
        seen = {int(row[1]) for b in loader for row in b}
        assert seen == {epoch}
    loader.close()


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_user_call_to_dataset_set_epoch_is_kept_like_stock(num_workers: int, worker_type: str) -> None:
    """Stock code calls the dataset's set_epoch itself (non-persistent workers copy it each epoch)."""
    def run(cls: Any) -> list[set[int]]:
        data = EpochAwareDataset()
        extra = {"worker_type": worker_type} if cls is DataLoader else {}
        loader = cls(data, batch_size=5, num_workers=num_workers, persistent_workers=False, **extra)
        out = []
        for epoch in (3, 7):
            data.set_epoch(epoch)
            out.append({int(row[1]) for b in loader for row in b})
        return out

    assert run(StockLoader) == [{3}, {7}]
    assert run(DataLoader) == run(StockLoader)
