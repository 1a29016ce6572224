"""Loop 7 of the black-box tests of ``loaders.DataLoader`` under the loops real training code writes:
train and val loaders interleaved.
(public API only; the oracle: the stock DataLoader for drop-in promises, the uninterrupted run for resume).
"""

from __future__ import annotations

import pytest

from loaders import DataLoader
from tests.loaders.helpers import EPOCHS, N_SAMPLES, RangeDataset, flat

# ---------------------------------------------------------------------------------------------
# 7. train and val loaders alive at once, persistent workers, interleaved
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_train_and_val_loaders_interleaved(worker_type: str) -> None:
    data = RangeDataset()
    train = DataLoader(data, batch_size=3, shuffle=True, num_workers=2, worker_type=worker_type,
                       persistent_workers=True, seed=9)
    val = DataLoader(data, batch_size=4, shuffle=False, num_workers=2, worker_type=worker_type,
                     persistent_workers=True)
    orders = []
    for epoch in range(EPOCHS):
        train.set_epoch(epoch)
        train_seen = []
        val_mid = None
        for step, batch in enumerate(train):
            train_seen += batch.tolist()
            if step == 1:  # validation in the middle of an epoch (val_check_interval)
                val_mid = flat(list(val))
        assert sorted(train_seen) == list(range(N_SAMPLES))
        assert val_mid == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
        assert flat(list(val)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
        orders.append(train_seen)
    assert len({tuple(o) for o in orders}) == EPOCHS, "each epoch is reshuffled"
    train.close()
    val.close()
