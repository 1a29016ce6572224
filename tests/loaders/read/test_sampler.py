from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pytest
import torch.utils.data
from hypothesis import given, settings
from hypothesis import strategies as st

from loaders.errors import ConfigError
from loaders.read.order import OrderMode, epoch_order, rank_indices
from loaders.read.sample_index import SampleIndex
from loaders.read.sampler import SAMPLER_STATE_VERSION, ShardSampler
from loaders.read.topology import Topology
from tests.loaders import strategies as sfst
from tests.loaders.resume_harness import check_resume, check_resume_chain, items_equal, standard_stops

NUM_EPOCHS = 3


def _sampler(n: int = 23, *, rank: int = 0, world_size: int = 1, **kwargs: Any) -> ShardSampler:
    return ShardSampler(n, topology=Topology(rank=rank, world_size=world_size), **kwargs)


def consume_samples(sampler: ShardSampler) -> Iterator[SampleIndex]:
    """A training loop over NUM_EPOCHS that consumes one sample at a time, resuming where the state says."""
    for epoch in range(sampler.epoch, NUM_EPOCHS):
        sampler.set_epoch(epoch)
        for item in sampler:
            sampler.advance(1)
            yield item


def consume_batches(batch_size: int) -> Callable[[ShardSampler], Iterator[list[SampleIndex]]]:
    """The same loop, consuming batches: position advances by a batch at a time."""
    def consume(sampler: ShardSampler) -> Iterator[list[SampleIndex]]:
        for epoch in range(sampler.epoch, NUM_EPOCHS):
            sampler.set_epoch(epoch)
            batch: list[SampleIndex] = []
            for item in sampler:
                batch.append(item)
                if len(batch) == batch_size:
                    sampler.advance(len(batch))
                    yield batch
                    batch = []
            if batch:
                sampler.advance(len(batch))
                yield batch
    return consume


# --- iteration ---------------------------------------------------------------------------

def test_yields_this_ranks_indices_as_python_ints() -> None:
    sampler = _sampler(23, rank=1, world_size=4, seed=9)
    sampler.set_epoch(2)
    items = list(sampler)
    expected = rank_indices(epoch_order(23, seed=9, epoch=2), rank=1, world_size=4, drop_last=False)
    assert items == [SampleIndex(i, 2) for i in expected.tolist()]
    assert all(type(i.index) is int and type(i.epoch) is int for i in items)
    assert len(sampler) == len(items) == 6


@settings(max_examples=50)
@given(n=sfst.num_samples, ws=sfst.world_sizes, drop_last=st.booleans(), seed=sfst.seeds,
       epoch=st.integers(0, 50), mode=sfst.modes)
def test_ranks_together_read_the_epoch(
    n: int, ws: int, drop_last: bool, seed: int, epoch: int, mode: str
) -> None:
    per_rank = []
    for rank in range(ws):
        sampler = _sampler(n, rank=rank, world_size=ws, seed=seed, mode=mode, drop_last=drop_last, block_size=8)
        sampler.set_epoch(epoch)
        per_rank.append([i.index for i in sampler])
        assert len(per_rank[-1]) == len(sampler)
    assert len({len(p) for p in per_rank}) == 1  # equal counts keep collectives in step
    seen = {i for p in per_rank for i in p}
    assert len(seen) == (n - n % ws if drop_last else n)


def test_shuffle_false_matches_distributed_sampler() -> None:
    for rank in range(3):
        ours = [i.index for i in _sampler(10, rank=rank, world_size=3, shuffle=False)]
        ref: torch.utils.data.DistributedSampler[int] = torch.utils.data.DistributedSampler(
            range(10), num_replicas=3, rank=rank, shuffle=False  # type: ignore[arg-type]
        )
        assert ours == list(ref)


def test_epochs_differ_and_are_reproducible() -> None:
    a, b = _sampler(100, seed=3), _sampler(100, seed=3)
    first = [i.index for i in a]
    a.set_epoch(1)
    second = [i.index for i in a]
    assert first != second and sorted(first) == sorted(second) == list(range(100))
    b.set_epoch(1)
    assert [i.index for i in b] == second


def test_iter_without_a_loaded_state_restarts_the_epoch() -> None:
    sampler = _sampler(10)
    it = iter(sampler)
    for _ in range(4):
        next(it)
        sampler.advance(1)
    assert sampler.position == 4
    assert len(list(sampler)) == 10 and sampler.position == 0  # like DistributedSampler


def test_works_in_a_torch_dataloader() -> None:
    class Echo(torch.utils.data.Dataset[int]):
        def __getitem__(self, item: SampleIndex) -> int:
            return item.index * 10 + item.epoch

    sampler = _sampler(7, seed=1)
    sampler.set_epoch(2)
    got = [int(x) for x in torch.utils.data.DataLoader(Echo(), sampler=sampler, batch_size=None)]
    assert got == [i.index * 10 + 2 for i in sampler]


# --- state -------------------------------------------------------------------------------

def test_state_dict_reports_consumed_samples() -> None:
    sampler = _sampler(23, rank=2, world_size=4, seed=5)
    sampler.set_epoch(1)
    it = iter(sampler)
    for _ in range(3):
        next(it)  # prefetched, not yet consumed: position does not move
    sampler.advance(2)
    assert sampler.state_dict() == {
        "version": SAMPLER_STATE_VERSION, "epoch": 1, "sample_position": 2, "seed": 5, "num_samples": 23,
        "world_size": 4,
    }
    v1 = {**{k: v for k, v in sampler.state_dict().items() if k != "sample_position"}, "version": 1, "position": 2}
    resumed = _sampler(23, rank=2, world_size=4, seed=5)
    resumed.load_state_dict(v1)  # the previous version's name of the position
    assert (resumed.epoch, resumed.position) == (1, 2) and resumed.state_dict() == sampler.state_dict()


def test_advance_past_the_epoch_end_is_an_error() -> None:
    sampler = _sampler(10, rank=0, world_size=2)
    sampler.advance(5)
    with pytest.raises(ConfigError, match=r"advance\(1\) would move position 5 past the epoch end \(5 samples"):
        sampler.advance(1)
    with pytest.raises(ConfigError, match="'count' must be a non-negative int"):
        sampler.advance(-1)


def test_loaded_state_applies_to_its_epoch_once() -> None:
    saved = _sampler(20, seed=1)
    saved.set_epoch(2)
    saved.advance(5)
    sampler = _sampler(20, seed=1)
    sampler.load_state_dict(saved.state_dict())
    assert (sampler.epoch, sampler.position) == (2, 5)
    sampler.set_epoch(2)  # the training loop re-announces the epoch: the state still applies
    assert sampler.position == 5
    saved.set_epoch(2)
    assert list(sampler) == list(saved)[5:]
    assert len(list(sampler)) == 20  # honoured once; the next pass is a full epoch


def test_set_epoch_to_another_epoch_drops_the_loaded_state() -> None:
    sampler = _sampler(20)
    sampler.load_state_dict({**_sampler(20).state_dict(), "epoch": 2, "sample_position": 5})
    sampler.set_epoch(3)
    assert sampler.position == 0
    sampler.set_epoch(2)
    assert sampler.position == 0 and len(list(sampler)) == 20


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": 3}, "sampler state version: expected 2 (or 1), got 3; hint: resume with the loaders version"),
        ({"seed": 8}, "sampler state 'seed': expected 7 (this sampler), got 8"),
        ({"num_samples": 24}, "sampler state 'num_samples': expected 23 (this sampler), got 24"),
        ({"world_size": 2}, "sampler state 'world_size': expected 4 (this sampler), got 2"),
        ({"sample_position": 7}, "sampler state 'sample_position': expected at most 6 (samples per rank), got 7"),
        ({"epoch": -1}, "'epoch' must be a non-negative int (got -1 that is a int)"),
    ],
)
def test_load_state_dict_validates(change: dict[str, int], message: str) -> None:
    sampler = _sampler(23, rank=0, world_size=4, seed=7)
    with pytest.raises(ConfigError) as info:
        sampler.load_state_dict(sampler.state_dict() | change)
    assert message in str(info.value)
    assert (sampler.epoch, sampler.position) == (0, 0)  # a rejected state changes nothing


def test_load_state_dict_names_missing_keys() -> None:
    state = _sampler(5).state_dict()
    del state["sample_position"]
    with pytest.raises(ConfigError, match="sampler state lacks 'sample_position'"):
        _sampler(5).load_state_dict(state)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_samples": -1}, "'num_samples' must be a non-negative int (got -1 that is a int)"),
        ({"seed": -1}, "'seed' must be a non-negative int"),
        ({"block_size": 0}, "'block_size' must be a positive int"),
        ({"mode": "zigzag"}, "'mode' must be one of"),
        ({"shuffle": 1}, "'shuffle' must be a bool (got 1 that is a int)"),
        ({"topology": (0, 1)}, "'topology' must be a Topology or None"),
    ],
)
def test_constructor_validates(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"num_samples": 10, "topology": Topology()} | kwargs
    with pytest.raises(ConfigError) as info:
        ShardSampler(args.pop("num_samples"), **args)
    assert message in str(info.value)


def test_topology_is_detected_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"RANK": "1", "WORLD_SIZE": "3", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "3"}.items():
        monkeypatch.setenv(name, value)
    sampler = ShardSampler(10)
    assert sampler.topology == Topology(1, 3, 1, 3) and len(sampler) == 4


# --- resume (the shared harness) ---------------------------------------------------------

@pytest.mark.parametrize(("n", "world_size", "rank", "mode", "drop_last"), [
    (23, 1, 0, "global", False),
    (23, 4, 3, "blocks", False),
    (23, 4, 1, "global", True),
    (5, 8, 6, "global", False),
    (40, 3, 2, "sequential", True),
])
def test_resume_one_sample_at_a_time(n: int, world_size: int, rank: int, mode: str, drop_last: bool) -> None:
    def make() -> ShardSampler:
        return _sampler(n, rank=rank, world_size=world_size, seed=11, mode=mode, block_size=4, drop_last=drop_last)

    epoch_len = len(make())
    for stop in standard_stops(NUM_EPOCHS * epoch_len, epoch_len):
        check_resume(make, consume_samples, stop)


def test_resume_by_batches_and_repeatedly() -> None:
    def make() -> ShardSampler:
        return _sampler(50, rank=1, world_size=2, seed=4, mode="blocks", block_size=8)

    consume = consume_batches(4)
    batches_per_epoch = -(-len(make()) // 4)
    for stop in standard_stops(NUM_EPOCHS * batches_per_epoch, batches_per_epoch):
        check_resume(make, consume, stop)
    check_resume_chain(make, consume, [2, 2, 7, batches_per_epoch + 1, NUM_EPOCHS * batches_per_epoch])


def test_resume_into_a_differently_built_but_equivalent_sampler() -> None:
    def make() -> ShardSampler:
        return _sampler(30, seed=2, mode="global")

    def make_resumed() -> ShardSampler:
        return ShardSampler(30, seed=2, mode=OrderMode.GLOBAL, topology=Topology())

    check_resume(make, consume_samples, 17, make_resumed=make_resumed)


def test_resume_of_an_empty_dataset() -> None:
    check_resume(lambda: _sampler(0), consume_samples, 0)


class _Forgetful:
    """A counter whose load_state_dict forgets the position: the harness must catch it."""

    def __init__(self) -> None:
        self.count = 0

    def state_dict(self) -> dict[str, int]:
        return {"count": self.count}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.count = 0


def _count_to_five(counter: _Forgetful) -> Iterator[int]:
    while counter.count < 5:
        counter.count += 1
        yield counter.count


def test_harness_catches_a_broken_resume() -> None:
    check_resume(_Forgetful, _count_to_five, 0)  # nothing to forget at 0
    with pytest.raises(AssertionError, match="item 2 differs after resuming at"):
        check_resume(_Forgetful, _count_to_five, 2)
    with pytest.raises(ValueError, match="stops must be non-decreasing"):
        check_resume_chain(_Forgetful, _count_to_five, [3, 1])


def test_harness_compares_arrays_and_tensors() -> None:
    assert items_equal([np.arange(3), {"x": torch.ones(2)}], [np.arange(3), {"x": torch.ones(2)}])
    assert not items_equal((torch.ones(2),), (torch.ones(2, dtype=torch.float64),))
    assert not items_equal(np.arange(3), np.arange(3).astype(np.int32))


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("resume_at", [0, 6])
def test_batches_match_batch_sampler_including_resume(drop_last, resume_at):
    from torch.utils.data import BatchSampler

    def make() -> ShardSampler:
        sampler = ShardSampler(23, shuffle=True, seed=4, topology=Topology(rank=1, world_size=2))
        sampler.set_epoch(2)
        if resume_at:
            sampler.advance(resume_at)
            state = sampler.state_dict()
            sampler = ShardSampler(23, shuffle=True, seed=4, topology=Topology(rank=1, world_size=2))
            sampler.load_state_dict(state)
        return sampler

    expected = [list(b) for b in BatchSampler(make(), 3, drop_last)]
    got = make().batches(3, drop_last)
    assert [list(b) for b in got] == expected
    assert all(isinstance(i, SampleIndex) and i.epoch == 2 for b in got for i in b)
    assert got[0][1:] == expected[0][1:]
