"""Epochs and positions as training loops use them (issue 11, behaviours 1-4, 6-8, 10).

Each test breaks the promise the way a user's loop would: the idiomatic
``set_epoch`` loop after a resume, a user's DistributedSampler, an infinite sampler, a
sampler with its own state, datasets with ``set_epoch`` under default arguments, the
training loop's RNGs, a second ``iter()``, and two ranks augmenting their batch k.
"""

from __future__ import annotations

import pickle
import random
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data
from torch.utils.data import DistributedSampler, SequentialSampler

from loaders import DataLoader, ShardDataset
from loaders.augment import Augment, ColorJitter, RandomHorizontalFlip, RandomResizedCrop
from loaders.errors import ConfigError
from loaders.loader.epoch_sync import EpochSync
from tests.loaders.helpers import Pictures
from tests.loaders.resume_harness import check_resume, items_equal

SIZE = 14


def augment() -> Augment:
    return Augment([RandomResizedCrop(6), RandomHorizontalFlip(), ColorJitter(0.4, 0.4)], seed=3, channels_last=False)


# ---------------------------------------------------------------- 1. resume, then the idiomatic set_epoch loop


def idiomatic(loader: DataLoader[Any], first_epoch: int, epochs: int) -> Iterator[tuple[Any, dict[str, Any]]]:
    """``for epoch in range(start, N): loader.set_epoch(epoch); for batch in loader: ...``, with the state
    after each."""
    for epoch in range(first_epoch, epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            yield batch, loader.state_dict()


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("workers", [{"num_workers": 0}, {"num_workers": 2, "worker_type": "thread"}])
@pytest.mark.parametrize("stop", [3, 6])  # mid-epoch 0, mid-epoch 1 (5 batches per epoch)
def test_resume_then_set_epoch_of_the_same_epoch_yields_exactly_the_rest(
        shuffle: bool, workers: dict[str, Any], stop: int) -> None:
    def make() -> DataLoader[Any]:
        return DataLoader(Pictures(SIZE, side=8), batch_size=3, shuffle=shuffle, seed=8, device="cpu",
                          device_transform=augment(), persistent_workers=False, **workers)

    full = list(idiomatic(make(), 0, 2))
    saved = full[stop - 1][1]
    resumed = make()
    resumed.load_state_dict(saved)
    rest = list(idiomatic(resumed, saved["epoch"], 2))
    assert len(rest) == len(full) - stop
    for (want, want_state), (got, got_state) in zip(full[stop:], rest, strict=True):
        assert got["label"].tolist() == want["label"].tolist()
        assert torch.equal(got["image"], want["image"])  # device augmentation of the same batch
        assert got_state == want_state


# ---------------------------------------------------------------- 2. a user's sampler keeps its own epoch


def test_a_users_distributed_sampler_keeps_the_epoch_the_user_set() -> None:
    def order(make: Any) -> list[int]:
        sampler = DistributedSampler(Pictures(SIZE, side=8), num_replicas=2, rank=0, shuffle=True, seed=3)
        sampler.set_epoch(5)
        loader = make(Pictures(SIZE, side=8), sampler=sampler, batch_size=2, num_workers=0)
        labels = [i for batch in loader for i in batch["label"].tolist()]
        assert sampler.epoch == 5
        return labels

    assert order(DataLoader) == order(torch.utils.data.DataLoader)


# ---------------------------------------------------------------- 3. infinite samplers


class Endless(torch.utils.data.Sampler[int]):
    """The detectron2 / mmengine InfiniteSampler shape: cycles forever; counts what it handed out."""

    def __init__(self, size: int) -> None:
        self.size, self.pulled = size, 0

    def __iter__(self) -> Iterator[int]:
        while True:
            for index in range(self.size):
                self.pulled += 1
                if self.pulled > 10_000:
                    raise AssertionError("the loader listed the sampler far ahead of what it reads")
                yield index


@pytest.mark.parametrize("workers", [{"num_workers": 0}, {"num_workers": 2, "worker_type": "thread"},
                                     {"num_workers": 2, "worker_type": "process"}])
def test_an_infinite_sampler_gives_its_first_batch_at_once_with_bounded_lookahead(workers: dict[str, Any]) -> None:
    sampler = Endless(SIZE)
    with DataLoader(Pictures(SIZE, side=8), sampler=sampler, batch_size=4, **workers) as loader:
        iterator = iter(loader)
        first = [next(iterator)["label"].tolist() for _ in range(30)]
        assert first[0] == [0, 1, 2, 3] and first[4] == [2, 3, 4, 5]  # wraps around like the sampler
        assert sampler.pulled <= 4 * (30 + 2 * 2 + 2)  # what was read, plus the workers' lookahead
        with pytest.raises(TypeError):
            len(loader)  # as the stock loader: the sampler has no length


# ---------------------------------------------------------------- 4. a sampler with its own state


class SeededSampler(torch.utils.data.Sampler[int]):
    """A new permutation per pass from its own generator; its state is that generator (no advance())."""

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.generator = size, torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        return iter(torch.randperm(self.size, generator=self.generator).tolist())

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])


def consume(loader: DataLoader[Any]) -> Iterator[list[int]]:
    while loader.epoch < 2:
        for batch in loader:
            yield batch["label"].tolist()


@pytest.mark.parametrize("stop", [2, 5, 7])
def test_a_sampler_with_state_but_no_skip_ahead_resumes_exactly(stop: int) -> None:
    def make() -> DataLoader[Any]:
        return DataLoader(Pictures(SIZE, side=8), sampler=SeededSampler(SIZE, 4), batch_size=3, num_workers=0)

    check_resume(make, consume, stop)


class SelfResuming(torch.utils.data.Sampler[int]):
    """torchdata's StatefulDistributedSampler shape: its state is how far it got, and it skips that itself."""

    def __init__(self, size: int) -> None:
        self.size, self.yielded, self.next_yielded = size, 0, 0

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        self.yielded, self.next_yielded = self.next_yielded, 0
        for index in range(self.yielded, self.size):
            self.yielded += 1
            yield index

    def state_dict(self) -> dict[str, int]:
        return {"yielded": self.yielded}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.next_yielded = state["yielded"]


def test_a_sampler_that_resumes_itself_is_exact_or_refused_never_a_short_epoch() -> None:
    def make() -> DataLoader[Any]:
        return DataLoader(Pictures(SIZE, side=8), sampler=SelfResuming(SIZE), batch_size=3, num_workers=0)

    check_resume(make, consume, 2)  # saved in epoch 0: exact
    loader = make()
    iterator = consume(loader)
    for _ in range(7):  # into epoch 1
        next(iterator)
    resumed = make()
    resumed.load_state_dict(loader.state_dict())
    with pytest.raises(ConfigError,
                       match="SelfResuming yielded 0 batches after load_state_dict where 3 of its 5 remained"):
        list(resumed)


# ---------------------------------------------------------------- 6. the epoch reaches the workers


class EpochTagged(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Sample i -> (i, the epoch this copy of the dataset was last told)."""

    def __init__(self) -> None:
        self.epoch = -1

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> tuple[int, int]:
        return index, self.epoch


class EpochStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Yields 100 * epoch + i, split between workers with get_worker_info."""

    def __init__(self) -> None:
        self.epoch = -1

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(100 * self.epoch + start, 100 * self.epoch + 6, step))


# Whoever sets the epoch (the user on the dataset, as stock scripts do, or on the loader), every
# worker sees it, with the default persistent workers too; unset, the dataset keeps its own.
SET_BY = ["dataset", "loader"]


def _set_epoch(by: str, loader: DataLoader[Any], dataset: Any, epoch: int) -> None:
    (dataset if by == "dataset" else loader).set_epoch(epoch)


@pytest.mark.parametrize("by", SET_BY)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_default_persistent_process_workers_see_every_epoch_of_a_map_dataset(num_workers: int, by: str) -> None:
    dataset = EpochTagged()
    with DataLoader(dataset, batch_size=2, num_workers=num_workers, worker_type="process") as loader:  # persistent
        for epoch in (3, 4, 9):
            _set_epoch(by, loader, dataset, epoch)
            assert {int(e) for _, epochs in loader for e in epochs} == {epoch}


@pytest.mark.parametrize("by", SET_BY)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_default_persistent_process_workers_see_every_epoch_of_an_iterable_dataset(num_workers: int, by: str) -> None:
    dataset = EpochStream()
    with DataLoader(dataset, batch_size=2, num_workers=num_workers) as loader:
        for epoch in (3, 4, 9):
            _set_epoch(by, loader, dataset, epoch)
            assert sorted(int(i) for batch in loader for i in batch) == [100 * epoch + i for i in range(6)]


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_a_dataset_whose_epoch_nobody_sets_keeps_its_own_like_stock(worker_type: str) -> None:
    with DataLoader(EpochTagged(), batch_size=2, num_workers=2, worker_type=worker_type) as loader:
        for _ in range(2):
            assert {int(e) for _, epochs in loader for e in epochs} == {-1}


def test_persistent_worker_processes_are_kept_once_the_loader_sets_the_epoch() -> None:
    dataset = EpochTagged()
    with DataLoader(dataset, batch_size=2, num_workers=2, worker_type="process") as loader:
        pids = []
        for epoch in range(3):
            loader.set_epoch(epoch)
            list(loader)
            pids.append(sorted(p.pid for p in loader.pool.shared.handles))  # type: ignore[union-attr]
        assert pids[0] == pids[1] == pids[2]


# ---------------------------------------------------------------- 7. the training loop's RNGs are its own


def draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.rand()), float(torch.rand(()))


def reseed() -> None:
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.mark.parametrize("workers", [{"num_workers": 0}, {"num_workers": 2, "worker_type": "thread"}])
def test_reading_samples_never_reseeds_the_training_loops_rngs(image_shards: Any, workers: dict[str, Any]) -> None:
    dataset = ShardDataset(image_shards, fields=("cls",), transform=lambda sample: sample)  # takes no rng
    loader = DataLoader(dataset, batch_size=4, seed=1, **workers)
    reseed()
    expected = [draws() for _ in range(len(loader))]
    reseed()
    got = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # threads: "not reproducible" (the transform takes no rng)
        for _ in loader:
            got.append(draws())
    assert got == expected
    loader.close()


# ---------------------------------------------------------------- 8. a second iter()


def labels(batches: Any) -> list[list[int]]:
    return [batch["label"].tolist() for batch in batches]


def test_a_peek_inside_the_loop_does_not_end_the_outer_epoch() -> None:
    loader = DataLoader(Pictures(SIZE, side=8), batch_size=3, shuffle=True, seed=2, num_workers=2, worker_type="thread")
    expected = labels(DataLoader(Pictures(SIZE, side=8), batch_size=3, shuffle=True, seed=2, num_workers=0))
    outer, peeks = [], []
    for batch in loader:
        outer.append(batch["label"].tolist())
        peeks.append(next(iter(loader))["label"].tolist())
    assert outer == expected and peeks == [expected[0]] * len(expected)
    assert loader.epoch == 1 and loader.state_dict()["position"] == 0
    loader.close()


def test_zip_of_a_loader_with_itself_runs_the_whole_epoch() -> None:
    loader = DataLoader(Pictures(SIZE, side=8), batch_size=3, num_workers=0)
    pairs = [(a["label"].tolist(), b["label"].tolist()) for a, b in zip(loader, loader)]
    one_pass = labels(DataLoader(Pictures(SIZE, side=8), batch_size=3, num_workers=0))
    assert [a for a, _ in pairs] == [b for _, b in pairs] == one_pass


@pytest.mark.parametrize("sampler", ["ours", "stateful"])
@pytest.mark.parametrize("workers", [{"num_workers": 0}, {"num_workers": 2, "worker_type": "process"}])
def test_a_shape_probe_after_load_state_dict_keeps_the_resumed_epoch(workers: dict[str, Any], sampler: str) -> None:
    def make() -> DataLoader[Any]:
        if sampler == "ours":
            return DataLoader(Pictures(SIZE, side=8), batch_size=3, shuffle=True, seed=6, **workers)
        return DataLoader(Pictures(SIZE, side=8), sampler=SeededSampler(SIZE, 6), batch_size=3, **workers)

    full = labels(make())
    saved = make()
    iterator = iter(saved)
    next(iterator), next(iterator)
    state = saved.state_dict()
    saved.close()
    resumed = make()
    resumed.load_state_dict(state)
    probe = next(iter(resumed))  # e.g. building the model from a batch's shape
    assert probe["image"].shape == (3, 8, 8, 3)
    assert labels(resumed) == full[2:]
    resumed.close()


# ---------------------------------------------------------------- 10. device augmentation differs per rank


def test_ranks_do_not_apply_the_same_augmentation_to_their_batch_k(monkeypatch: pytest.MonkeyPatch) -> None:
    def images(rank: int) -> list[torch.Tensor]:
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        dataset = Pictures(SIZE, side=8)
        loader = DataLoader(dataset, sampler=SequentialSampler(dataset), batch_size=3, num_workers=0, seed=1,
                            device="cpu", device_transform=augment())
        return [batch["image"] for batch in loader]

    rank0, rank1 = images(0), images(1)
    assert not any(torch.equal(a, b) for a, b in zip(rank0, rank1, strict=True))
    assert all(items_equal(a, b) for a, b in zip(rank0, images(0), strict=True))  # and each is reproducible


# ---------------------------------------------------------------- the state is the nest of the stages' states


def test_the_state_nests_each_stateful_stage_under_its_key() -> None:
    from loaders.loader.batch_plan import BatchPlan
    from loaders.loader.progress import KEY_PLAN, LOADER_STATE_KEYS
    from loaders.loader.stage import Stage

    loader = DataLoader(Pictures(SIZE, side=8), sampler=SeededSampler(SIZE, 1), batch_size=3, num_workers=0)
    stages = [loader._chain.source]  # the stateful stage; the skip count is the owner's (Progress)
    assert all(isinstance(stage, Stage) for stage in stages)
    assert [type(stage) for stage in stages] == [BatchPlan]
    assert [stage.key for stage in stages] == [KEY_PLAN]
    state = loader.state_dict()
    assert set(state) == set(LOADER_STATE_KEYS) and state["version"] == 4
    assert set(state["plan"]) == {"sampler", "world_size"} and set(state["failures"]) == {"epoch", "skipped"}


def test_a_state_of_a_given_shard_sampler_from_another_world_size_is_refused(image_shards: Any) -> None:
    """A sampler the user gives keeps stock semantics: positions count this rank's batches of its split, so
    another world size cannot resume them (without a sampler the loader reads by global position and can:
    tests/loaders/loader/test_elastic_samples.py)."""
    from loaders import Topology

    def make(world_size: int) -> DataLoader[Any]:
        dataset = ShardDataset(image_shards, fields=("cls",), topology=Topology(rank=0, world_size=world_size))
        return DataLoader(dataset, sampler=dataset.default_sampler(shuffle=True, seed=3), batch_size=4,
                          num_workers=0, seed=3)

    saved = make(2)
    iterator = iter(saved)
    next(iterator)
    state = saved.state_dict()
    assert state["plan"]["world_size"] == 2
    with pytest.raises(ConfigError, match="world_size: expected 4 .* got 2; resume with the same number of ranks"):
        make(4).load_state_dict(state)


def test_a_transform_without_rng_in_thread_workers_is_said_to_be_unreproducible(
        image_shards: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("loaders.read.datasets._warned_threads", False)
    dataset = ShardDataset(image_shards, fields=("cls",), transform=lambda sample: sample)
    with DataLoader(dataset, batch_size=4, num_workers=2, worker_type="thread") as loader, \
            pytest.warns(UserWarning, match="not reseeded, so it is not reproducible"):
        next(iter(loader))


@pytest.mark.parametrize("by", SET_BY)
def test_spawned_worker_processes_see_every_epoch_too(by: str) -> None:
    dataset = EpochTagged()
    with DataLoader(dataset, batch_size=3, num_workers=1, worker_type="process",
                    multiprocessing_context="spawn") as loader:
        for epoch in (2, 5):
            _set_epoch(by, loader, dataset, epoch)
            assert {int(e) for _, epochs in loader for e in epochs} == {epoch}


def test_a_copy_of_the_epoch_sync_keeps_whether_the_loader_drives() -> None:
    sync = EpochSync(EpochTagged())
    sync.drive()
    copy = pickle.loads(pickle.dumps(sync))  # a plain pickle: no shared memory outside process start-up
    assert not copy.user_owned and sync.user_owned is False
    assert EpochSync(EpochTagged()).user_owned and not EpochSync(object()).user_owned


class Unversioned(EpochTagged):
    """A set_epoch whose effect the loader cannot read back (no ``epoch`` attribute)."""

    def __init__(self) -> None:
        self.tag = -1

    def set_epoch(self, epoch: int) -> None:
        self.tag = epoch

    def __getitem__(self, index: int) -> tuple[int, int]:
        return index, self.tag


def test_worker_processes_restart_only_when_the_users_dataset_epoch_may_have_changed() -> None:
    def pids_per_pass(dataset: Any, calls: list[int | None]) -> list[list[int]]:
        seen = []
        with DataLoader(dataset, batch_size=2, num_workers=2, worker_type="process") as loader:
            for epoch in calls:
                if epoch is not None:
                    dataset.set_epoch(epoch)
                assert {int(e) for _, epochs in loader for e in epochs} == {-1 if epoch is None else epoch}
                seen.append(sorted(p.pid for p in loader.pool.shared.handles))  # type: ignore[union-attr]
        return seen

    first, same, changed, same_again = pids_per_pass(EpochTagged(), [3, 3, 4, 4])
    assert first == same != changed == same_again  # the dataset's epoch shows whether its copies are stale
    first, second = pids_per_pass(Unversioned(), [5, 5])
    assert first != second  # nothing to compare: a new pass may follow a call
