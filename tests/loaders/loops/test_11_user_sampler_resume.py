"""Loop 11 of the black-box tests of ``loaders.DataLoader`` under the loops real training code writes:
resume with a user's sampler.
(public API only; the oracle: the stock DataLoader for drop-in promises, the uninterrupted run for resume).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import SequentialSampler, WeightedRandomSampler

from loaders import DataLoader
from tests.loaders.helpers import N_SAMPLES, WORKER_SETUPS, RangeDataset, flat

# ---------------------------------------------------------------------------------------------
# 11. resume with a user's sampler: exact where its order is reproducible, else a clear refusal
# ---------------------------------------------------------------------------------------------

def make_weighted() -> DataLoader[Any]:
    sampler = WeightedRandomSampler([1.0] * N_SAMPLES, num_samples=N_SAMPLES,
                                    generator=torch.Generator().manual_seed(7))
    return DataLoader(RangeDataset(), batch_size=3, sampler=sampler, num_workers=0)


def test_mid_epoch_resume_with_a_stateless_random_sampler_is_refused_clearly() -> None:
    first = make_weighted()
    it = iter(first)
    next(it)
    state = first.state_dict()
    with pytest.raises(ValueError, match="WeightedRandomSampler"):
        make_weighted().load_state_dict(state)


def test_epoch_boundary_resume_with_a_stateless_random_sampler_is_accepted() -> None:
    first = make_weighted()
    list(first)
    state = first.state_dict()
    second = make_weighted()
    second.load_state_dict(state)  # nothing to skip: the next epoch starts from its first batch
    assert sum(len(b) for b in second) == N_SAMPLES


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_resume_with_a_user_sequential_sampler_is_exact(num_workers: int, worker_type: str) -> None:
    def make() -> DataLoader[Any]:
        return DataLoader(RangeDataset(), batch_size=3, sampler=SequentialSampler(range(N_SAMPLES)),
                          num_workers=num_workers, worker_type=worker_type)
    first = make()
    it = iter(first)
    head = [next(it).tolist(), next(it).tolist()]
    state = first.state_dict()
    first.close()
    second = make()
    second.load_state_dict(state)
    assert head + flat(list(second)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert flat(list(second)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    second.close()
