"""The global batch grid: every rank the same batches, disjoint and complete, resumable on another (B, W)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loaders.errors import ConfigError
from loaders.tokens.distribution import GlobalGrid, GlobalPosition, resume_grid

counts = st.integers(0, 500)
batch_sizes = st.integers(1, 9)
world_sizes = st.integers(1, 8)


@settings(max_examples=200, deadline=None)
@given(n=counts, b=batch_sizes, w=world_sizes)
def test_ranks_split_each_global_batch_disjointly_and_drop_only_the_last_partial(n: int, b: int, w: int) -> None:
    grid = GlobalGrid(n, b, w)
    read = []
    for g in range(grid.num_batches):
        rows = [list(grid.rows(g, r)) for r in range(w)]
        assert all(len(r) == b for r in rows)
        flat = [s for r in rows for s in r]
        assert flat == list(range(g * b * w, (g + 1) * b * w))
        read.extend(flat)
        assert grid.position(g + 1) == (g + 1) * b * w and grid.batch_at(flat[-1]) == (g, b * w - 1)
    assert read == list(range(n - grid.dropped))
    assert 0 <= grid.dropped < b * w


def _read(start: GlobalPosition, n: int, b: int, w: int) -> tuple[int, list[list[int]]]:
    """(epoch, the global batches as sets of sequences) a job of (b, w) reads from ``start``."""
    epoch, grid, first = resume_grid(start, n, b, w)
    return epoch, [sorted(s for r in range(w) for s in grid.rows(g, r)) for g in range(first, grid.num_batches)]


@settings(max_examples=200, deadline=None)
@given(n=counts, b=batch_sizes, w=world_sizes, b2=batch_sizes, w2=world_sizes, stop=st.integers(0, 100))
def test_resume_on_any_grid_continues_from_the_same_sequence(n: int, b: int, w: int, b2: int, w2: int,
                                                             stop: int) -> None:
    grid = GlobalGrid(n, b, w)
    done = min(stop, grid.num_batches)
    position = GlobalPosition(5, grid.position(done))
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
@given(n=counts, b=batch_sizes, w=world_sizes, b2=batch_sizes, w2=world_sizes, b3=batch_sizes, w3=world_sizes,
       stops=st.tuples(st.integers(0, 60), st.integers(0, 60)))
def test_a_resumed_job_resumes_again_on_a_third_grid(n: int, b: int, w: int, b2: int, w2: int, b3: int, w3: int,
                                                       stops: tuple[int, int]) -> None:
    """(B, W) -> (B2, W2) -> (B3, W3): the sequences read stay one contiguous run from 0, and back on a global
    batch of B W after the middle job the grid is the middle job's own (its origin kept)."""
    first = GlobalGrid(n, b, w)
    saved = GlobalPosition(0, first.position(min(stops[0], first.num_batches)))
    _, middle, start = resume_grid(saved, n, b2, w2)
    again = GlobalPosition(0, middle.position(min(start + stops[1], middle.num_batches)))
    epoch, batches = _read(again, n, b3, w3)
    flat = [s for batch in batches for s in batch]
    assert epoch == 0 and flat == list(range(again.sequence, again.sequence + len(flat)))
    if b3 * w3 == b2 * w2:
        assert resume_grid(again, n, b3, w3).grid.origin == middle.origin


def test_resume_grid_refuses_a_position_past_the_epoch() -> None:
    with pytest.raises(ConfigError, match="global position 11 is past the epoch's 10 sequences"):
        resume_grid(GlobalPosition(0, 11), 10, 2, 2)
    start = resume_grid(GlobalPosition(0, 9), 10, 2, 2)  # less than one global batch left: nothing of this epoch
    assert start.batch == start.grid.num_batches == 2 and start.grid.origin == 1


def test_arguments_are_checked() -> None:
    with pytest.raises(ConfigError, match="'batch_size' must be a positive int"):
        GlobalGrid(10, 0, 1)
    with pytest.raises(ConfigError, match="'origin' must be <= num_sequences=10"):
        GlobalGrid(10, 1, 1, origin=11)
    grid = GlobalGrid(10, 2, 2)
    with pytest.raises(IndexError, match=r"global batch 2 outside \[0, 2\)"):
        grid.rows(2, 0)
    with pytest.raises(IndexError, match=r"rank 2 outside"):
        grid.rows(0, 2)
    with pytest.raises(IndexError, match="precedes"):
        GlobalGrid(10, 2, 2, origin=3).batch_at(1)
