"""The pure read plan: each rank's shard-use sequence, the node's ranks, what an order keeps in reach."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from loaders.read.order import OrderMode, epoch_order, rank_indices
from loaders.read.read_plan import ReadPlan, node_ranks, shard_uses, stream_name, stream_rank, working_set_bytes
from loaders.read.topology import Topology


@given(st.lists(st.integers(0, 9), min_size=1, max_size=12), st.sampled_from(list(OrderMode)), st.integers(1, 16),
       st.integers(1, 4), st.booleans(), st.integers(0, 3))
def test_shard_uses_are_the_shards_of_each_ranks_samples_without_repeats(counts: list[int], mode: OrderMode,
                                                                         block_size: int, world_size: int,
                                                                         drop_last: bool, epoch: int) -> None:
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    plan = ReadPlan(num_samples=int(starts[-1]), seed=3, mode=mode, block_size=block_size, drop_last=drop_last,
                    world_size=world_size)
    uses = shard_uses(plan, starts, epoch, range(world_size))
    order = epoch_order(plan.num_samples, seed=3, epoch=epoch, mode=mode, block_size=block_size)
    shard_of = np.repeat(np.arange(len(counts)), counts)
    for rank in range(world_size):
        shards = [int(shard_of[i]) for i in rank_indices(order, rank=rank, world_size=world_size, drop_last=drop_last)]
        expected = [s for k, s in enumerate(shards) if k == 0 or shards[k - 1] != s]
        assert uses[rank].tolist() == expected


def test_the_node_is_the_local_ranks_around_this_one() -> None:
    assert list(node_ranks(Topology(rank=5, world_size=8, local_rank=1, local_world_size=4))) == [4, 5, 6, 7]
    assert list(node_ranks(Topology(rank=3, world_size=4))) == [3]  # RANK / WORLD_SIZE only: itself
    assert stream_rank("ab12", stream_name("ab12", 7)) == 7
    assert stream_rank("ab12", stream_name("cd34", 7)) is None and stream_rank("ab12", "ab12:rank") is None


def test_the_working_set_is_the_dataset_for_a_global_order_and_a_blocks_span_otherwise() -> None:
    counts, sizes = [10, 10, 10, 10], [100, 300, 100, 100]
    assert working_set_bytes(OrderMode.GLOBAL, 10, counts, sizes) == 600
    assert working_set_bytes(OrderMode.BLOCKS, 10, counts, sizes) == 2 * 300  # a block crosses at most one border
    assert working_set_bytes(OrderMode.BLOCKS, 1, counts, sizes) == 300
    assert working_set_bytes(OrderMode.BLOCKS, 25, counts, sizes) == 4 * 300
    assert working_set_bytes(OrderMode.SEQUENTIAL, 10, counts, sizes) == 600
    assert working_set_bytes(OrderMode.BLOCKS, 10, [], []) == 0
