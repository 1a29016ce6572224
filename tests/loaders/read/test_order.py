from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch.utils.data
from hypothesis import given, settings
from hypothesis import strategies as st

from loaders.errors import ConfigError
from loaders.read.order import (
    OrderMode,
    epoch_order,
    epoch_rng,
    num_batches,
    rank_indices,
    sample_rng,
    sample_seed,
    samples_per_rank,
)
from tests.loaders import strategies as sfst


def _order(case: sfst.SplitCase) -> np.ndarray:
    return epoch_order(case.num_samples, seed=case.seed, epoch=case.epoch, mode=case.mode, block_size=case.block_size)


# --- epoch_order -----------------------------------------------------------------------

@given(n=sfst.num_samples, seed=sfst.seeds, epoch=sfst.epochs, mode=sfst.modes, block_size=sfst.block_sizes)
def test_epoch_order_is_a_deterministic_int64_permutation(
    n: int, seed: int, epoch: int, mode: OrderMode, block_size: int
) -> None:
    order = epoch_order(n, seed=seed, epoch=epoch, mode=mode, block_size=block_size)
    assert order.dtype == np.int64 and order.shape == (n,)
    assert np.array_equal(np.sort(order), np.arange(n))
    again = epoch_order(n, seed=seed, epoch=epoch, mode=str(mode), block_size=block_size)
    assert np.array_equal(order, again)


@given(n=st.integers(20, 500), seed=sfst.seeds, epoch=st.integers(0, 1000),
       mode=st.sampled_from([OrderMode.GLOBAL, OrderMode.BLOCKS]), block_size=sfst.block_sizes)
def test_epoch_order_differs_between_epochs_and_seeds(
    n: int, seed: int, epoch: int, mode: OrderMode, block_size: int
) -> None:
    # n >= 20: even the most constrained BLOCKS draw has >= 20! / 20 equally likely outcomes.
    base = epoch_order(n, seed=seed, epoch=epoch, mode=mode, block_size=block_size)
    assert not np.array_equal(base, epoch_order(n, seed=seed, epoch=epoch + 1, mode=mode, block_size=block_size))
    other_seed = (seed + 1) % 2**64
    assert not np.array_equal(base, epoch_order(n, seed=other_seed, epoch=epoch, mode=mode, block_size=block_size))


def test_sequential_ignores_seed_and_epoch() -> None:
    for seed, epoch in [(0, 0), (7, 3)]:
        assert np.array_equal(epoch_order(10, seed=seed, epoch=epoch, mode="sequential"), np.arange(10))


@given(n=st.integers(1, 500), block_size=sfst.block_sizes, seed=sfst.seeds, epoch=sfst.epochs)
def test_blocks_keep_consecutive_indices_together(n: int, block_size: int, seed: int, epoch: int) -> None:
    order = epoch_order(n, seed=seed, epoch=epoch, mode=OrderMode.BLOCKS, block_size=block_size)
    block_ids = order // block_size
    # Each block occupies one contiguous run of the order, holding exactly its indices.
    run_starts = np.flatnonzero(np.diff(block_ids)) + 1
    runs = np.split(order, run_starts)
    assert len(runs) == -(-n // block_size)
    for run in runs:
        first = run[0] // block_size * block_size
        assert np.array_equal(np.sort(run), np.arange(first, min(first + block_size, n)))


def test_blocks_shuffle_within_blocks() -> None:
    order = epoch_order(4096, seed=1, epoch=0, mode="blocks", block_size=1024)
    assert not np.array_equal(np.sort(order[:1024]), order[:1024])


@pytest.mark.parametrize("mode", [OrderMode.GLOBAL, OrderMode.BLOCKS])
def test_epoch_order_large_n_is_a_permutation(mode: OrderMode) -> None:
    n = 2_000_003  # not a multiple of the block size: exercises the short last block
    order = epoch_order(n, seed=5, epoch=2, mode=mode, block_size=1000)
    assert order.shape == (n,) and order.dtype == np.int64
    assert np.all(np.bincount(order, minlength=n) == 1)


def test_epoch_rng_is_keyed_by_seed_and_epoch() -> None:
    draws = {(s, e): epoch_rng(s, e).integers(0, 2**62) for s in range(3) for e in range(3)}
    assert len(set(draws.values())) == len(draws)
    assert epoch_rng(1, 2).integers(0, 2**62) == draws[(1, 2)]


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"num_samples": -1}, "'num_samples' must be a non-negative int (got -1 that is a int)"),
        ({"num_samples": 3.0}, "'num_samples' must be a non-negative int (got 3.0 that is a float)"),
        ({"num_samples": True}, "'num_samples'"),
        ({"block_size": 0}, "'block_size' must be a positive int"),
        ({"seed": -2}, "'seed' must be a non-negative int"),
        ({"epoch": -1}, "'epoch' must be a non-negative int"),
        ({"mode": "random"}, "'mode' must be one of 'global', 'blocks', 'sequential' (got 'random')"),
    ],
)
def test_epoch_order_rejects_bad_arguments(kwargs: dict[str, object], fragment: str) -> None:
    args: dict[str, object] = {"num_samples": 10, "seed": 0, "epoch": 0} | kwargs
    num = args.pop("num_samples")
    with pytest.raises(ConfigError) as info:
        epoch_order(num, **args)  # type: ignore[arg-type]
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


# --- rank split -----------------------------------------------------------------

@settings(max_examples=300)
@given(case=sfst.split_cases())
def test_rank_split_is_disjoint_and_complete(case: sfst.SplitCase) -> None:
    n, ws = case.num_samples, case.world_size
    order = _order(case)
    per_rank = samples_per_rank(n, ws, case.drop_last)
    total = per_rank * ws
    # The order as the ranks see it: trimmed by n % ws, or extended cyclically by its first entries.
    padded = order[:total] if case.drop_last else order[np.arange(total) % max(n, 1)]
    seen_positions: list[int] = []
    values: list[int] = []
    for rank in range(ws):
        mine = rank_indices(order, rank=rank, world_size=ws, drop_last=case.drop_last)
        assert mine.dtype == np.int64 and mine.shape == (per_rank,)  # equal counts per rank
        for k in range(per_rank):
            seen_positions.append(rank + k * ws)  # interleaved, like DistributedSampler
            values.append(int(mine[k]))
    # Disjoint and complete over positions of the padded/trimmed order.
    assert sorted(seen_positions) == list(range(total))
    assert all(padded[p] == v for p, v in zip(seen_positions, values, strict=True))
    counts = Counter(values)
    if case.drop_last:
        assert set(counts) == set(order.tolist()) - set(order[total:].tolist())
        assert n - total == n % ws and set(counts.values()) <= {1}
    else:
        repeats = counts - Counter(order.tolist())
        assert set(counts) == set(order.tolist())  # every sample read at least once
        assert repeats == Counter(np.resize(order, total - n).tolist() if n else [])


@given(n=sfst.num_samples, ws=sfst.world_sizes, drop_last=st.booleans(), seed=sfst.seeds)
def test_rank_indices_match_torch_distributed_sampler(n: int, ws: int, drop_last: bool, seed: int) -> None:
    order = epoch_order(n, seed=seed, epoch=0)
    for rank in range(ws):
        ref: torch.utils.data.DistributedSampler[int] = torch.utils.data.DistributedSampler(
            range(n), num_replicas=ws, rank=rank, shuffle=False, drop_last=drop_last  # type: ignore[arg-type]
        )
        mine = rank_indices(order, rank=rank, world_size=ws, drop_last=drop_last)
        assert mine.tolist() == order[list(ref)].tolist()
        assert len(mine) == len(ref)


@given(n=sfst.num_samples, bs=sfst.batch_sizes, drop_last=st.booleans())
def test_num_batches_matches_torch_batch_sampler(n: int, bs: int, drop_last: bool) -> None:
    ref = torch.utils.data.BatchSampler(range(n), batch_size=bs, drop_last=drop_last)
    assert num_batches(n, bs, drop_last) == len(list(ref))


def test_padding_wraps_more_than_once_when_ranks_outnumber_samples() -> None:
    order = np.array([5, 3], dtype=np.int64)
    got = [rank_indices(order, rank=r, world_size=5, drop_last=False).tolist() for r in range(5)]
    assert got == [[5], [3], [5], [3], [5]]
    assert [rank_indices(order, rank=r, world_size=5, drop_last=True).size for r in range(5)] == [0] * 5


def test_empty_dataset() -> None:
    order = epoch_order(0, seed=0, epoch=0, mode="blocks")
    assert order.shape == (0,) and order.dtype == np.int64
    assert rank_indices(order, rank=1, world_size=2, drop_last=False).size == 0
    assert num_batches(0, 4, drop_last=False) == 0


def test_split_rejects_bad_arguments() -> None:
    order = np.arange(4)
    with pytest.raises(ConfigError, match=r"'rank' must be < world_size=2 \(got 2\)"):
        rank_indices(order, rank=2, world_size=2, drop_last=False)
    with pytest.raises(ConfigError, match="'world_size' must be a positive int"):
        rank_indices(order, rank=0, world_size=0, drop_last=False)
    with pytest.raises(ConfigError, match="1-D integer array"):
        rank_indices(order.reshape(2, 2), rank=0, world_size=1, drop_last=False)
    with pytest.raises(ConfigError, match="'batch_size' must be a positive int"):
        num_batches(5, 0, drop_last=False)


# --- per-sample seeds --------------------------------------------------------------------

def test_sample_seed_is_distinct_over_a_grid_of_neighbours() -> None:
    seeds = [sample_seed(s, e, i) for s in (0, 1, 2**63) for e in range(10) for i in range(1000)]
    assert len(set(seeds)) == len(seeds)
    assert all(0 <= x < 2**64 for x in seeds)


def test_sample_seed_avalanches() -> None:
    # Flipping one low bit of the index flips about half of the 64 output bits.
    flips = [bin(sample_seed(7, 1, i) ^ sample_seed(7, 1, i ^ 1)).count("1") for i in range(0, 2000, 2)]
    assert 30 <= sum(flips) / len(flips) <= 34
    assert min(flips) >= 12


def test_sample_seed_is_deterministic_and_accepts_numpy_ints() -> None:
    assert sample_seed(3, 4, 5) == sample_seed(np.int64(3), np.int64(4), np.int64(5))
    assert sample_seed(-1, 0, 0) == sample_seed(2**64 - 1, 0, 0)  # taken modulo 2^64
    with pytest.raises(TypeError):
        sample_seed(1, 2, 3.0)  # type: ignore[arg-type]  # a float index is a bug, not a seed


def test_sample_rng_is_reproducible_and_keyed() -> None:
    a = sample_rng(1, 2, 3).random(8)
    assert np.array_equal(a, sample_rng(1, 2, 3).random(8))
    for other in [(1, 2, 4), (1, 3, 3), (2, 2, 3)]:
        assert not np.array_equal(a, sample_rng(*other).random(8))
