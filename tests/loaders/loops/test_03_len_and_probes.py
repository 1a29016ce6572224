"""Loop 3 of the black-box tests of ``loaders.DataLoader`` under the loops real training code writes:
len, enumerate, early break, shape probe.
(public API only; the oracle: the stock DataLoader for drop-in promises, the uninterrupted run for resume).
"""

from __future__ import annotations

from typing import Any

import pytest
from torch.utils.data import DataLoader as StockLoader

from loaders import DataLoader
from tests.loaders.helpers import (
    EPOCHS,
    N_SAMPLES,
    WORKER_SETUPS,
    RangeDataset,
    assert_loop_like_stock,
    flat,
    make_loader,
    uninterrupted,
)

# ---------------------------------------------------------------------------------------------
# 3. len, enumerate, early break, shape probe
# ---------------------------------------------------------------------------------------------

def test_len_is_the_full_epoch_during_and_after_resume() -> None:
    loader = DataLoader(RangeDataset(), batch_size=3, shuffle=True, num_workers=0, seed=0)
    stock_len = len(StockLoader(RangeDataset(), batch_size=3, shuffle=True))
    assert len(loader) == stock_len == 4
    it = iter(loader)
    next(it)
    next(it)
    assert len(loader) == stock_len
    state = loader.state_dict()
    resumed = DataLoader(RangeDataset(), batch_size=3, shuffle=True, num_workers=0, seed=0)
    resumed.load_state_dict(state)
    assert len(resumed) == stock_len
    rest = list(resumed)
    assert len(rest) == 2
    assert len(resumed) == stock_len


def test_enumerate_after_resume_starts_at_zero_with_the_next_batch() -> None:
    loader = DataLoader(RangeDataset(), batch_size=2, shuffle=False, num_workers=0, seed=0)
    it = iter(loader)
    next(it)
    next(it)
    resumed = DataLoader(RangeDataset(), batch_size=2, shuffle=False, num_workers=0, seed=0)
    resumed.load_state_dict(loader.state_dict())
    pairs = [(i, b.tolist()) for i, b in enumerate(resumed)]
    assert pairs == [(0, [4, 5]), (1, [6, 7]), (2, [8, 9])]


@pytest.mark.parametrize("max_steps", [1, 2])
@pytest.mark.parametrize("call_set_epoch", [False, True])
@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_max_steps_per_epoch_loop_matches_stock(max_steps: int, call_set_epoch: bool, num_workers: int,
                                                 worker_type: str) -> None:
    """A loop that breaks after ``max_steps`` batches every epoch: stock restarts the epoch each time."""
    def run(loader: Any) -> list[list[list[int]]]:
        out = []
        for epoch in range(EPOCHS):
            if call_set_epoch and hasattr(loader, "set_epoch"):
                loader.set_epoch(epoch)
            got = []
            for step, batch in enumerate(loader):
                got.append(batch.tolist())
                if step + 1 >= max_steps:
                    break
            out.append(got)
        return out

    assert_loop_like_stock(run, num_workers, worker_type)


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_shape_probe_before_training_keeps_every_epoch_whole(num_workers: int, worker_type: str) -> None:
    loader = DataLoader(RangeDataset(), batch_size=3, shuffle=True, num_workers=num_workers,
                        worker_type=worker_type, seed=0)
    probe = next(iter(loader))
    assert probe.shape == (3,)
    for epoch in range(EPOCHS):
        loader.set_epoch(epoch)
        got = sorted(x for b in loader for x in b.tolist())
        assert got == list(range(N_SAMPLES))
    loader.close()


def test_shape_probe_after_resume_does_not_drop_the_resumed_epoch() -> None:
    full = uninterrupted(lambda: make_loader(True, 0, "thread", False))
    first = make_loader(True, 0, "thread", False)
    first.set_epoch(0)
    it = iter(first)
    head = [next(it).tolist(), next(it).tolist()]
    state = first.state_dict()
    second = make_loader(True, 0, "thread", False)
    second.load_state_dict(state)
    next(iter(second))  # shape inference in the restarted script
    second.set_epoch(0)
    assert head + flat(list(second)) == full[0]
