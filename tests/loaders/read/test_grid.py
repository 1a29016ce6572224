"""The pure grid: global batches of B x W positions, every rank the same batches, any resume point, both deals and
both tails (a sample dataset's strided and padded, a token stream's contiguous and dropped)."""

from __future__ import annotations

import dataclasses
import pickle
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loaders.errors import ConfigError
from loaders.read.order import OrderMode, epoch_order, rank_indices
from loaders.read.read_plan import ReadPlan, shard_uses
from loaders.read.grid import Deal, GlobalGrid, GlobalPosition, Tail, order_digest, resume_grid
from loaders.read.sample_index import SampleIndex
from loaders.read.sampler import SampleBatch
from tests.loaders.strategies import batch_sizes, modes, num_samples, world_sizes


@st.composite
def grids(draw: st.DrawFn) -> GlobalGrid:
    n = draw(num_samples.filter(lambda v: v > 0))
    return GlobalGrid(n, draw(batch_sizes), draw(world_sizes), draw(st.integers(0, n)),
                      deal=draw(st.sampled_from(Deal)), tail=draw(st.sampled_from(Tail)))


@given(grids())
def test_a_run_reads_each_position_from_its_beginning_once_bar_the_tail(grid: GlobalGrid) -> None:
    """From ``begin`` on, every global batch holds the next B x W positions; the tail is dropped or padded with
    the run's first positions (from ``begin``: never one an earlier run read); every rank reads the same number
    of batches and rows per batch."""
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
    expected = Counter(range(grid.begin, full_end if grid.tail is Tail.DROP else grid.num_positions))
    padding = read - expected
    assert expected - read == Counter()  # nothing lost
    assert sum(padding.values()) < grid.world_size  # the run's first positions again
    assert set(padding) <= set(range(grid.begin, grid.begin + grid.world_size))
    if grid.num_batches > grid.first_batch:
        assert grid.position_after(grid.num_batches) in (full_end, grid.num_positions)


@given(num_samples.filter(lambda v: v > 0), batch_sizes, world_sizes, st.booleans())
def test_a_fresh_grid_deals_as_distributed_sampler_and_batch_sampler_do(n: int, batch_size: int, world_size: int,
                                                                       drop_last: bool) -> None:
    order = np.arange(n, dtype=np.int64)
    grid = GlobalGrid(n, batch_size, world_size, tail=Tail.DROP if drop_last else Tail.PAD)
    for rank in range(world_size):
        mine = rank_indices(order, rank=rank, world_size=world_size, drop_last=drop_last)
        stop = mine.size - mine.size % batch_size if drop_last else mine.size
        expected = [mine[i:i + batch_size].tolist() for i in range(0, stop, batch_size)]
        assert [grid.rows(b, rank).tolist() for b in range(grid.num_batches)] == expected


@given(grids(), batch_sizes, world_sizes, st.data())
def test_the_same_global_batch_resumes_on_the_same_batches(grid: GlobalGrid, batch_size: int, world_size: int,
                                                           data: st.DataObject) -> None:
    """A state saved after any whole global batch resumes a job of the same B x W on the rows the uninterrupted
    run reads (the same rows per rank for the same B and W; the same positions per global batch for another split
    of B x W), and a job of another B' x W' on every position from there on, none before it."""
    saved_batch = data.draw(st.integers(grid.first_batch, grid.num_full), label="saved after global batch")
    saved_at = grid.position_after(saved_batch)
    resumed = GlobalGrid(grid.num_positions, grid.batch_size, grid.world_size, saved_at, deal=grid.deal, tail=grid.tail)
    one_rank = GlobalGrid(grid.num_positions, grid.global_batch_size, 1, saved_at, deal=grid.deal, tail=grid.tail)
    assert resumed.num_batches == one_rank.num_batches == grid.num_batches
    for batch in range(saved_batch, grid.num_full):  # full batches: the uninterrupted run's rows
        uninterrupted = [grid.rows(batch, rank).tolist() for rank in range(grid.world_size)]
        assert [resumed.rows(batch, rank).tolist() for rank in range(grid.world_size)] == uninterrupted
        assert sorted(one_rank.rows(batch, 0).tolist()) == sorted(p for rows in uninterrupted for p in rows)
    if grid.num_batches > grid.num_full:  # the tail: its positions, padded from each run's own start
        tail_start = grid.position_after(grid.num_full)
        for run in (grid, resumed):
            tail = {p for r in range(grid.world_size) for p in run.rows(grid.num_full, r).tolist()}
            assert set(range(tail_start, grid.num_positions)) <= tail and min(tail) >= run.begin
    other = GlobalGrid(grid.num_positions, batch_size, world_size, saved_at, deal=grid.deal, tail=grid.tail)
    read = Counter(p for r in range(world_size) for p in other.rank_positions(r, other.first_batch).tolist())
    assert min(read, default=saved_at) >= saved_at  # nothing the first run had delivered
    assert set(range(saved_at, grid.num_positions - other.dropped)) <= set(read)


def test_positions_past_the_epoch_are_refused_and_the_index_pickles_with_its_grid() -> None:
    with pytest.raises(ConfigError, match="global position 11 is past the epoch's 10 positions"):
        GlobalGrid(10, 2, 2, begin=11)
    grid = GlobalGrid(10, 2, 2, begin=4)
    index = SampleIndex(3, 1, grid=grid, segment=("a", 2))
    copy = pickle.loads(pickle.dumps(index))
    assert copy == index and copy.grid == grid and copy.segment == ("a", 2)
    assert repr(index) == "SampleIndex(index=3, epoch=1)"  # messages list a batch's indices: not its grid
    assert index != SampleIndex(3, 1, grid=grid.fresh(), segment=("a", 2)) != SampleIndex(3, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        index.epoch = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        SampleIndex(3, 1, grid)  # type: ignore[misc]  # grid and segment are named
    batch = SampleBatch(np.array([5, 7]), 1, grid=grid)
    assert list(batch) == [SampleIndex(5, 1, grid=grid), SampleIndex(7, 1, grid=grid)] and batch[1:][0].grid == grid


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
    tail = Tail.DROP if drop_last else Tail.PAD
    grid = GlobalGrid(n, batch_size, world_size, data.draw(st.integers(0, n)), tail=tail)
    uses = shard_uses(plan, starts, 2, range(world_size), grid)
    order = epoch_order(n, seed=3, epoch=2, mode=mode, block_size=block_size)
    shard_of = np.repeat(np.arange(len(counts)), counts)
    for rank in range(world_size):
        samples = [order[p] for b in range(grid.first_batch, grid.num_batches) for p in grid.rows(b, rank)]
        shards = [int(shard_of[i]) for i in samples]
        assert uses[rank].tolist() == [s for k, s in enumerate(shards) if k == 0 or shards[k - 1] != s]


# ---------------------------------------------------------------- a token stream's grid (contiguous, tail dropped)

counts = st.integers(0, 500)
token_batch_sizes = st.integers(1, 9)


def token_grid(n: int, b: int, w: int) -> GlobalGrid:
    return resume_grid(GlobalPosition(0, 0), n, b, w).grid


@settings(max_examples=200, deadline=None)
@given(n=counts, b=token_batch_sizes, w=world_sizes)
def test_ranks_split_each_global_batch_disjointly_and_drop_only_the_last_partial(n: int, b: int, w: int) -> None:
    grid = token_grid(n, b, w)
    assert (grid.deal, grid.tail) == (Deal.CONTIGUOUS, Tail.DROP)
    read = []
    for g in range(grid.num_batches):
        rows = [grid.rows(g, r).tolist() for r in range(w)]
        assert all(len(r) == b for r in rows)
        flat = [s for r in rows for s in r]
        assert flat == list(range(g * b * w, (g + 1) * b * w))
        read.extend(flat)
        assert grid.position_after(g + 1) == (g + 1) * b * w
    assert read == list(range(n - grid.dropped))
    assert 0 <= grid.dropped < b * w


def _read(start: GlobalPosition, n: int, b: int, w: int) -> tuple[int, list[list[int]]]:
    """(epoch, the global batches as sets of sequences) a job of (b, w) reads from ``start``."""
    epoch, grid, first = resume_grid(start, n, b, w)
    return epoch, [sorted(s for r in range(w) for s in grid.rows(g, r).tolist())
                   for g in range(first, grid.num_batches)]


@settings(max_examples=200, deadline=None)
@given(n=counts, b=token_batch_sizes, w=world_sizes, b2=token_batch_sizes, w2=world_sizes, stop=st.integers(0, 100))
def test_resume_on_any_grid_continues_from_the_same_sequence(n: int, b: int, w: int, b2: int, w2: int,
                                                             stop: int) -> None:
    grid = token_grid(n, b, w)
    done = min(stop, grid.num_batches)
    position = GlobalPosition(5, grid.position_after(done))
    epoch, batches = _read(position, n, b2, w2)
    uninterrupted = _read(GlobalPosition(5, 0), n, b, w)[1]
    assert epoch == 5  # the rest of this epoch, whatever is left of it
    if b2 * w2 == b * w:  # the same global batch: exactly the uninterrupted run's remaining batches
        assert batches == uninterrupted[done:]
        assert resume_grid(position, n, b2, w2).batch == done
    flat = [s for batch in batches for s in batch]  # any global batch: from the same sequence on, nothing lost
    assert flat == list(range(position.sequence, position.sequence + len(flat)))
    assert n - position.sequence - len(flat) < b2 * w2  # only the epoch's last incomplete global batch dropped


@settings(max_examples=200, deadline=None)
@given(n=counts, b=token_batch_sizes, w=world_sizes, b2=token_batch_sizes, w2=world_sizes, b3=token_batch_sizes,
       w3=world_sizes, stops=st.tuples(st.integers(0, 60), st.integers(0, 60)))
def test_a_resumed_job_resumes_again_on_a_third_grid(n: int, b: int, w: int, b2: int, w2: int, b3: int, w3: int,
                                                       stops: tuple[int, int]) -> None:
    """(B, W) -> (B2, W2) -> (B3, W3): the sequences read stay one contiguous run from 0, and back on a global
    batch of B W after the middle job the grid is the middle job's own (its origin kept)."""
    first = token_grid(n, b, w)
    saved = GlobalPosition(0, first.position_after(min(stops[0], first.num_batches)))
    _, middle, start = resume_grid(saved, n, b2, w2)
    again = GlobalPosition(0, middle.position_after(min(start + stops[1], middle.num_batches)))
    epoch, batches = _read(again, n, b3, w3)
    flat = [s for batch in batches for s in batch]
    assert epoch == 0 and flat == list(range(again.sequence, again.sequence + len(flat)))
    if b3 * w3 == b2 * w2:
        assert resume_grid(again, n, b3, w3).grid.origin == middle.origin


def test_resume_grid_refuses_a_position_past_the_epoch_and_arguments_are_checked() -> None:
    with pytest.raises(ConfigError, match="global position 11 is past the epoch's 10 positions"):
        resume_grid(GlobalPosition(0, 11), 10, 2, 2)
    start = resume_grid(GlobalPosition(0, 9), 10, 2, 2)  # less than one global batch left: nothing of this epoch
    assert start.batch == start.grid.num_batches == 2 and start.grid.origin == 1
    with pytest.raises(ConfigError, match="'batch_size' must be a positive int"):
        GlobalGrid(10, 0, 1)
    grid = token_grid(10, 2, 2)
    with pytest.raises(IndexError, match=r"global batch 2 outside \[0, 2\)"):
        grid.rows(2, 0)
    with pytest.raises(IndexError, match=r"rank 2 outside"):
        grid.rows(0, 2)
