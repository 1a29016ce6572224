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
    if b2 * w2 == b * w:  # the same global batch: exactly the uninterrupted run's remaining batches
        assert epoch == 5 or done == grid.num_batches
        if epoch == 5:
            assert batches == uninterrupted[done:]
            assert resume_grid(position, n, b2, w2).batch == done
    elif epoch == 5:  # another: from the same sequence on, nothing lost or repeated
        flat = [s for batch in batches for s in batch]
        assert flat == list(range(position.sequence, position.sequence + len(flat)))
        assert n - position.sequence - len(flat) < b2 * w2
    else:
        assert n - position.sequence < b2 * w2 and batches == _read(GlobalPosition(6, 0), n, b2, w2)[1]


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
