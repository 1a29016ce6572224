"""Loop 5 of the black-box tests of ``loaders.DataLoader`` under the loops real training code writes:
reproducibility from the global seed and generator=.
(public API only; the oracle: the stock DataLoader for drop-in promises, the uninterrupted run for resume).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader as StockLoader

from loaders import DataLoader
from tests.loaders.helpers import WORKER_SETUPS, RangeDataset, flat

# ---------------------------------------------------------------------------------------------
# 5. reproducibility from the global seed and from generator=
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_manual_seed_before_building_gives_the_same_order(num_workers: int, worker_type: str) -> None:
    def run(cls: Any) -> list[Any]:
        torch.manual_seed(0)
        loader = cls(RangeDataset(), batch_size=3, shuffle=True, num_workers=num_workers,
                     **({"worker_type": worker_type} if cls is DataLoader else {}))
        out = [flat(list(loader)) for _ in range(2)]
        if cls is DataLoader:
            loader.close()
        return out

    assert run(DataLoader) == run(DataLoader)
    assert run(StockLoader) == run(StockLoader)
    ours = run(DataLoader)
    assert ours[0] != ours[1], "a second epoch without set_epoch must be reshuffled, as stock"


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_generator_gives_the_same_order(num_workers: int, worker_type: str) -> None:
    def run() -> list[Any]:
        torch.manual_seed(int(time.time_ns() % 1000))  # the global seed must not matter
        loader = DataLoader(RangeDataset(), batch_size=3, shuffle=True, num_workers=num_workers,
                            worker_type=worker_type, generator=torch.Generator().manual_seed(1))
        out = [flat(list(loader)) for _ in range(2)]
        loader.close()
        return out

    assert run() == run()
