"""Hypothesis strategies shared by the loaders tests (one place, as STYLE.md asks)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from loaders.read.order import OrderMode

num_samples = st.integers(min_value=0, max_value=500)
world_sizes = st.integers(min_value=1, max_value=8)
worker_counts = st.integers(min_value=1, max_value=6)
batch_sizes = st.integers(min_value=1, max_value=17)
seeds = st.integers(min_value=0, max_value=2**64 - 1)
epochs = st.integers(min_value=0, max_value=10_000)
modes = st.sampled_from(list(OrderMode))
block_sizes = st.integers(min_value=1, max_value=64)


@dataclass(frozen=True)
class SplitCase:
    """One configuration of the rank x worker split."""

    num_samples: int
    world_size: int
    num_workers: int
    batch_size: int
    drop_last: bool
    seed: int
    epoch: int
    mode: OrderMode
    block_size: int


@st.composite
def split_cases(draw: st.DrawFn) -> SplitCase:
    """A random (num_samples, world_size, num_workers, batch_size, drop_last, seed, epoch, mode, block_size)."""
    return SplitCase(
        num_samples=draw(num_samples),
        world_size=draw(world_sizes),
        num_workers=draw(worker_counts),
        batch_size=draw(batch_sizes),
        drop_last=draw(st.booleans()),
        seed=draw(seeds),
        epoch=draw(epochs),
        mode=draw(modes),
        block_size=draw(block_sizes),
    )
