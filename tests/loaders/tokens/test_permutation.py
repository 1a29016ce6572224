"""The epoch permutation: a bijection on [0, n), a function of (seed, epoch) only, O(1) state."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loaders.errors import ConfigError
from loaders.tokens.permutation import FeistelPermutation, epoch_permutation
from tests.loaders.tokens.strategies import epochs, seeds, sizes


@settings(max_examples=200, deadline=None)
@given(size=sizes, seed=seeds, epoch=epochs)
def test_is_a_bijection_on_range(size: int, seed: int, epoch: int) -> None:
    values = epoch_permutation(size, seed, epoch)(np.arange(size))
    assert values.dtype == np.int64
    assert np.array_equal(np.sort(values), np.arange(size))


@settings(max_examples=100, deadline=None)
@given(size=st.integers(min_value=1, max_value=5000), seed=seeds, epoch=epochs, data=st.data())
def test_function_of_seed_and_epoch_only(size: int, seed: int, epoch: int, data: st.DataObject) -> None:
    """Any subset, in any order, any number of times, in a fresh object or a pickled one: the same values."""
    perm = epoch_permutation(size, seed, epoch)
    full = perm(np.arange(size))
    picks = np.array(data.draw(st.lists(st.integers(0, size - 1), max_size=50)), dtype=np.int64)
    assert np.array_equal(epoch_permutation(size, seed, epoch)(picks), full[picks])
    assert np.array_equal(pickle.loads(pickle.dumps(perm))(picks[::-1]), full[picks[::-1]])


def test_seeds_and_epochs_give_different_orders() -> None:
    n = 1000
    orders = {tuple(epoch_permutation(n, seed, epoch)(np.arange(n)).tolist()) for seed in (0, 1) for epoch in (0, 1, 2)}
    assert len(orders) == 6
    assert tuple(range(n)) not in orders  # not the identity


def test_shuffles_well_enough() -> None:
    """Neighbours are not kept together: the order is not a shifted or blocked identity."""
    n = 100_000
    values = epoch_permutation(n, 7, 0)(np.arange(n))
    steps = np.abs(np.diff(values))
    assert np.median(steps) > n / 10
    first_half = np.count_nonzero(values[: n // 2] < n // 2)
    assert abs(first_half - n // 4) < n // 100


def test_scalar_and_shape_are_kept() -> None:
    perm = FeistelPermutation(10, 3)
    assert perm(np.arange(10).reshape(2, 5)).shape == (2, 5)
    assert perm(4).shape == ()


def test_out_of_range_positions_and_bad_arguments() -> None:
    perm = FeistelPermutation(10, 3)
    with pytest.raises(IndexError, match=r"\[0, 10\)"):
        perm(np.array([3, 10]))
    with pytest.raises(IndexError):
        perm(-1)
    with pytest.raises(ConfigError, match="'size'"):
        FeistelPermutation(-1, 0)
    with pytest.raises(ConfigError, match="'epoch'"):
        epoch_permutation(10, 0, -1)
    with pytest.raises(ConfigError, match="'seed'"):
        epoch_permutation(10, True, 0)
