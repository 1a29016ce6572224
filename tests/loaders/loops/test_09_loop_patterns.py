"""Loop 9 of the black-box tests of ``loaders.DataLoader`` under the loops real training code writes:
more loop patterns.
(public API only; the oracle: the stock DataLoader for drop-in promises, the uninterrupted run for resume).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader as StockLoader

from loaders import DataLoader
from tests.loaders.helpers import WORKER_SETUPS, RangeDataset, assert_loop_like_stock, flat, make_loader, uninterrupted

# ---------------------------------------------------------------------------------------------
# 9. more loop patterns: the checkpoint goes through torch.save / torch.load (weights_only, the
#    default since torch 2.6), a peek inside the loop, zip(loader, loader), KeyboardInterrupt
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
@pytest.mark.parametrize("shuffle", [False, True])
def test_state_survives_torch_save_and_default_torch_load(shuffle: bool, num_workers: int, worker_type: str) -> None:
    import io

    full = uninterrupted(lambda: make_loader(shuffle, num_workers, worker_type, False))
    first = make_loader(shuffle, num_workers, worker_type, False)
    first.set_epoch(0)
    it = iter(first)
    head = [next(it).tolist(), next(it).tolist()]
    buf = io.BytesIO()
    torch.save({"loader": first.state_dict(), "step": 2}, buf)
    first.close()
    buf.seek(0)
    ckpt = torch.load(buf)  # weights_only=True by default: only plain containers, tensors, numbers
    second = make_loader(shuffle, num_workers, worker_type, False)
    second.load_state_dict(ckpt["loader"])
    second.set_epoch(0)
    assert head + flat(list(second)) == full[0]
    second.close()


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_peek_inside_the_loop_matches_stock(num_workers: int, worker_type: str) -> None:
    def run(loader: Any) -> tuple[list[Any], list[Any]]:
        outer, peeks = [], []
        for batch in loader:
            outer.append(batch.tolist())
            peeks.append(next(iter(loader)).tolist())
        return outer, peeks

    assert_loop_like_stock(run, num_workers, worker_type)


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_zip_loader_with_itself_matches_stock(num_workers: int, worker_type: str) -> None:
    assert_loop_like_stock(lambda loader: [(a.tolist(), b.tolist()) for a, b in zip(loader, loader)],
                           num_workers, worker_type)


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_keyboard_interrupt_in_the_loop_then_the_next_epoch_is_whole(num_workers: int, worker_type: str) -> None:
    loader = DataLoader(RangeDataset(), batch_size=2, shuffle=False, num_workers=num_workers,
                        worker_type=worker_type)
    with pytest.raises(KeyboardInterrupt):
        for i, _ in enumerate(loader):
            if i == 2:
                raise KeyboardInterrupt
    stock = StockLoader(RangeDataset(), batch_size=2, shuffle=False, num_workers=num_workers)
    assert flat(list(loader)) == flat(list(stock))
    loader.close()


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
@pytest.mark.parametrize("set_epoch_first", [False, True])
def test_shape_probe_after_resume_either_side_of_set_epoch(set_epoch_first: bool, num_workers: int,
                                                           worker_type: str) -> None:
    """The restarted script loads the state, probes one batch for shapes, then runs its epoch loop."""
    full = uninterrupted(lambda: make_loader(False, num_workers, worker_type, False))
    first = make_loader(False, num_workers, worker_type, False)
    first.set_epoch(0)
    it = iter(first)
    head = [next(it).tolist()]
    state = first.state_dict()
    first.close()
    second = make_loader(False, num_workers, worker_type, False)
    second.load_state_dict(state)
    if set_epoch_first:
        second.set_epoch(0)
    next(iter(second))
    second.set_epoch(0)
    rest = flat(list(second))
    second.close()
    assert head + rest == full[0]
