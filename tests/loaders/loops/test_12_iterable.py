"""Loop 12 of the black-box tests of ``loaders.DataLoader`` under the loops real training code writes:
an IterableDataset split by its own code.
(public API only; the oracle: the stock DataLoader for drop-in promises, the uninterrupted run for resume).
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader as StockLoader

from loaders import DataLoader
from tests.loaders.helpers import N_SAMPLES, flat

# ---------------------------------------------------------------------------------------------
# 12. an IterableDataset split by its own code (get_worker_info), the HF-streaming pattern
# ---------------------------------------------------------------------------------------------

class ShardedStream(torch.utils.data.IterableDataset):
    def __iter__(self):  # type: ignore[no-untyped-def]
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(torch.tensor(i) for i in range(N_SAMPLES) if i % workers == worker)


@pytest.mark.parametrize("num_workers", [0, 2, None])
def test_iterable_dataset_split_by_worker_info_matches_stock(num_workers: int | None) -> None:
    ours_l = DataLoader(ShardedStream(), batch_size=2, num_workers=num_workers)
    stock_l = StockLoader(ShardedStream(), batch_size=2, num_workers=num_workers or 0)
    for _ in range(2):
        assert sorted(flat(list(ours_l))) == sorted(flat(list(stock_l)))
    ours_l.close()
