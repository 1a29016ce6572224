"""Loop 2 of the black-box tests of ``loaders.DataLoader`` under the loops real training code writes:
resume variants.
(public API only; the oracle: the stock DataLoader for drop-in promises, the uninterrupted run for resume).
"""

from __future__ import annotations

import pytest

from tests.loaders.helpers import EPOCHS, make_loader

# ---------------------------------------------------------------------------------------------
# 2. resume variants: another worker setup on restart, a second checkpoint in the resumed run
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("saved_with,resumed_with", [((2, "process"), (0, "thread")), ((0, "thread"), (2, "thread")),
                                                     ((2, "thread"), (2, "process"))])
def test_resume_with_another_worker_setup_and_a_second_checkpoint(
        saved_with: tuple[int, str], resumed_with: tuple[int, str]) -> None:
    full_loader = make_loader(True, 0, "thread", True)
    full, full_states = [], []
    for epoch in range(EPOCHS):
        full_loader.set_epoch(epoch)
        for batch in full_loader:
            full.append(batch.tolist())
            full_states.append(full_loader.state_dict())
    assert len(full) == EPOCHS * 3

    first = make_loader(True, *saved_with, True)
    got = []
    first.set_epoch(0)
    for batch in first:
        got.append(batch.tolist())
        if len(got) == 2:
            state = first.state_dict()
            break
    first.close()
    second = make_loader(True, *resumed_with, True)
    second.load_state_dict(state)
    states = []
    for epoch in range(0, EPOCHS):
        second.set_epoch(epoch)
        for batch in second:
            got.append(batch.tolist())
            states.append(second.state_dict())
    second.close()
    assert got == full
    # a checkpoint taken later in the resumed run equals the uninterrupted run's at that step
    assert states[2] == full_states[2 + 2]
