"""The pure sample grid: global batches of B x W order positions, every rank the same batches, any resume point."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loaders.errors import ConfigError
from loaders.read.order import OrderMode, epoch_order, rank_indices
from loaders.read.read_plan import ReadPlan, shard_uses
from loaders.read.sample_grid import GridIndex, SampleGrid, order_digest
from loaders.read.sampler import SampleBatch
from tests.loaders.strategies import batch_sizes, modes, num_samples, world_sizes


@st.composite
def grids(draw: st.DrawFn) -> SampleGrid:
    n = draw(num_samples.filter(lambda v: v > 0))
    return SampleGrid(n, draw(batch_sizes), draw(world_sizes), draw(st.booleans()), draw(st.integers(0, n)))


@given(grids())
def test_a_run_reads_each_position_from_its_beginning_once_bar_the_tail(grid: SampleGrid) -> None:
    """From ``begin`` on, every global batch holds the next B x W positions; the tail is dropped or padded with
    the epoch's first positions; every rank reads the same number of batches and rows per batch."""
    per_rank = [grid.rank_positions(r, grid.first_batch) for r in range(grid.world_size)]
    assert len({p.size for p in per_rank}) == 1
    read: Counter[int] = Counter()
    for batch in range(grid.first_batch, grid.num_batches):
        rows = [grid.rows(batch, r) for r in range(grid.world_size)]
        assert {r.size for r in rows} == {grid.rows_in(batch)}
        union = np.concatenate(rows)
        start = grid.position_after(batch)
        if batch < grid.num_full:
            assert sorted(union.tolist()) == list(range(start, start + grid.global_batch_size))
        read.update(union.tolist())
    full_end = grid.origin + grid.num_full * grid.global_batch_size
    expected = Counter(range(grid.begin, full_end if grid.drop_last else grid.num_samples))
    padding = read - expected
    assert expected - read == Counter()  # nothing lost
    assert sum(padding.values()) < grid.world_size and set(padding) <= set(range(grid.world_size))  # the first again
    if grid.num_batches > grid.first_batch:
        assert grid.position_after(grid.num_batches) in (full_end, grid.num_samples)


@given(num_samples.filter(lambda v: v > 0), batch_sizes, world_sizes, st.booleans())
def test_a_fresh_grid_deals_as_distributed_sampler_and_batch_sampler_do(n: int, batch_size: int, world_size: int,
                                                                       drop_last: bool) -> None:
    order = np.arange(n, dtype=np.int64)
    grid = SampleGrid(n, batch_size, world_size, drop_last)
    for rank in range(world_size):
        mine = rank_indices(order, rank=rank, world_size=world_size, drop_last=drop_last)
        stop = mine.size - mine.size % batch_size if drop_last else mine.size
        expected = [mine[i:i + batch_size].tolist() for i in range(0, stop, batch_size)]
        assert [grid.rows(b, rank).tolist() for b in range(grid.num_batches)] == expected


@given(grids(), batch_sizes, world_sizes)
def test_the_same_global_batch_resumes_on_the_same_batches(grid: SampleGrid, batch_size: int, world_size: int) -> None:
    """A state at a batch boundary of one job resumes a job of the same B x W on the same global batches."""
    saved_at = grid.position_after(grid.first_batch)
    same = SampleGrid(grid.num_samples, grid.global_batch_size, 1, grid.drop_last, saved_at)
    assert (same.origin, same.first_batch, same.num_full) == (grid.origin, grid.first_batch, grid.num_full)
    other = SampleGrid(grid.num_samples, batch_size, world_size, grid.drop_last, saved_at)
    assert other.position_after(other.first_batch) == saved_at


def test_positions_past_the_epoch_are_refused_and_the_index_pickles_with_its_grid() -> None:
    with pytest.raises(ConfigError, match="global position 11 is past the epoch's 10 samples"):
        SampleGrid(10, 2, 2, begin=11)
    grid = SampleGrid(10, 2, 2, begin=4)
    index = GridIndex(3, 1, grid)
    assert pickle.loads(pickle.dumps(index)) == index and repr(index) == "GridIndex(index=3, epoch=1)"
    batch = SampleBatch(np.array([5, 7]), 1, grid=grid)
    assert list(batch) == [GridIndex(5, 1, grid), GridIndex(7, 1, grid)] and batch[1:][0].grid == grid


def test_the_order_digest_names_the_samples_epoch_and_data() -> None:
    order = epoch_order(50, seed=1, epoch=0)
    digest = order_digest(order, 5, 20, epoch=0, data="a")
    assert digest == order_digest(order.copy(), 5, 20, epoch=0, data="a")
    others = [order_digest(order, 5, 21, epoch=0, data="a"), order_digest(order, 5, 20, epoch=1, data="a"),
              order_digest(order, 5, 20, epoch=0, data="b"), order_digest(order[::-1], 5, 20, epoch=0, data="a")]
    assert len({digest, *others}) == 5
    with pytest.raises(IndexError, match=r"global positions \[5, 51\) outside the epoch's 50 samples"):
        order_digest(order, 5, 51, epoch=0, data="a")


@given(st.lists(st.integers(0, 9), min_size=1, max_size=12), modes, st.integers(1, 16), world_sizes, batch_sizes,
       st.booleans(), st.data())
def test_shard_uses_on_a_grid_are_the_shards_each_rank_reads_from_the_resume_point(
        counts: list[int], mode: OrderMode, block_size: int, world_size: int, batch_size: int, drop_last: bool,
        data: st.DataObject) -> None:
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(starts[-1])
    plan = ReadPlan(num_samples=n, seed=3, mode=mode, block_size=block_size, drop_last=drop_last,
                    world_size=world_size)
    grid = SampleGrid(n, batch_size, world_size, drop_last, data.draw(st.integers(0, n)))
    uses = shard_uses(plan, starts, 2, range(world_size), grid)
    order = epoch_order(n, seed=3, epoch=2, mode=mode, block_size=block_size)
    shard_of = np.repeat(np.arange(len(counts)), counts)
    for rank in range(world_size):
        samples = [order[p] for b in range(grid.first_batch, grid.num_batches) for p in grid.rows(b, rank)]
        shards = [int(shard_of[i]) for i in samples]
        assert uses[rank].tolist() == [s for k, s in enumerate(shards) if k == 0 or shards[k - 1] != s]
