"""Loop 1 of the black-box tests of ``loaders.DataLoader`` under the loops real training code writes:
checkpoint / resume in a new loader.
(public API only; the oracle: the stock DataLoader for drop-in promises, the uninterrupted run for resume).
"""

from __future__ import annotations

from typing import Any

import pytest

from loaders import DataLoader
from tests.loaders.helpers import EPOCHS, WORKER_SETUPS, flat, make_loader, uninterrupted

# ---------------------------------------------------------------------------------------------
# 1. checkpoint / resume, Lightning/HF style: a new loader object loads the state, then
#    ``for epoch in range(e, N): loader.set_epoch(epoch); for batch in loader``.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("save_at", ["start", "first", "second"])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
@pytest.mark.parametrize("shuffle", [False, True])
def test_resume_in_a_new_loader_gives_the_uninterrupted_batches(
        shuffle: bool, num_workers: int, worker_type: str, drop_last: bool, save_at: str) -> None:
    def make() -> DataLoader[Any]:
        return make_loader(shuffle, num_workers, worker_type, drop_last)

    full = uninterrupted(make)
    save_epoch = 1
    n_batches = len(full[save_epoch])
    stop_after = {"start": 0, "first": 1, "second": 2, "last": n_batches}[save_at]

    first = make()
    seen: list[list[list[int]]] = []
    state = None
    for epoch in range(save_epoch + 1):
        first.set_epoch(epoch)
        seen.append([])
        if epoch == save_epoch and stop_after == 0:
            state = first.state_dict()
            break
        for batch in first:
            seen[-1].append(batch.tolist())
            if epoch == save_epoch and len(seen[-1]) == stop_after:
                state = first.state_dict()  # checkpoint inside the loop, after the training step
                break
    first.close()
    assert state is not None

    second = make()  # the restarted job
    second.load_state_dict(state)
    for epoch in range(save_epoch, EPOCHS):
        second.set_epoch(epoch)
        if epoch > save_epoch:
            seen.append([])
        for batch in second:
            seen[epoch].append(batch.tolist())
    second.close()
    assert seen == full


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_checkpoint_at_the_last_batch_then_set_epoch_of_that_epoch_does_not_replay_it(
        num_workers: int, worker_type: str, shuffle: bool) -> None:
    """Boundary: the step checkpoint falls on the epoch's last batch (inside the loop).

    The restarted loop resumes at the epoch it was in (``for epoch in range(saved_epoch, N)``, the
    loop variable / Lightning's ``current_epoch``): that epoch has no batch left, the next is whole.
    """
    test_resume_in_a_new_loader_gives_the_uninterrupted_batches(shuffle, num_workers, worker_type, False, "last")


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_state_saved_after_a_finished_epoch_resumes_at_the_next(num_workers: int, worker_type: str) -> None:
    def make() -> DataLoader[Any]:
        return make_loader(True, num_workers, worker_type, False)

    full = uninterrupted(make)
    first = make()
    first.set_epoch(0)
    epoch0 = flat(list(first))
    state = first.state_dict()  # end-of-epoch checkpoint (Lightning's on_train_epoch_end)
    first.close()
    second = make()
    second.load_state_dict(state)
    rest = []
    for epoch in range(1, EPOCHS):
        second.set_epoch(epoch)
        rest.append(flat(list(second)))
    second.close()
    assert [epoch0, *rest] == full
