"""Black-box tests of ``loaders.DataLoader`` under the loops real training code writes.

Only the public API is used. Where the promise is "drop-in", the stock
``torch.utils.data.DataLoader`` runs side by side and is the oracle; where it is a README
promise (exact resume), the uninterrupted run of the same loader is.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    ConcatDataset,
    Dataset,
    DistributedSampler,
    SequentialSampler,
    Subset,
    SubsetRandomSampler,
    WeightedRandomSampler,
)
from torch.utils.data import DataLoader as StockLoader

from loaders import DataLoader

N_SAMPLES = 10
EPOCHS = 3


class RangeDataset(Dataset[torch.Tensor]):
    """Sample i is ``tensor(i)`` (int64, shape [])."""

    def __init__(self, n: int = N_SAMPLES) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor(index)


class KeyErrorDataset(RangeDataset):
    """Raises KeyError on one index (a missing key in a user's lookup table)."""

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 5:
            raise KeyError(f"no sample {index}")
        return torch.tensor(index)


class SlowDataset(RangeDataset):
    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(1.0)
        return torch.tensor(index)


Pair = namedtuple("Pair", ["x", "name"])


def flat(batches: list[Any]) -> list[list[int]]:
    return [b.tolist() if isinstance(b, torch.Tensor) else b for b in batches]


def children_of_self() -> set[int]:
    """PIDs of this process's live child processes (from /proc, no psutil)."""
    pids: set[int] = set()
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            with open(f"/proc/{os.getpid()}/task/{task}/children", encoding="ascii") as fh:
                pids.update(int(p) for p in fh.read().split())
        except OSError:
            continue
    alive = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
                if fh.read().split(")")[-1].split()[0] != "Z":
                    alive.add(pid)
        except OSError:
            continue
    return alive


def wait_until(predicate: Callable[[], bool], seconds: float = 5.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


# ---------------------------------------------------------------------------------------------
# 1. checkpoint / resume, Lightning/HF style: a new loader object loads the state, then
#    ``for epoch in range(e, N): loader.set_epoch(epoch); for batch in loader``.
# ---------------------------------------------------------------------------------------------

WORKER_SETUPS = [(0, "thread"), (2, "thread"), (2, "process")]


def make_loader(shuffle: bool, num_workers: int, worker_type: str, drop_last: bool) -> DataLoader[Any]:
    torch.manual_seed(1234)  # the "same script, restarted" seed; no seed= and no generator=
    return DataLoader(RangeDataset(), batch_size=3, shuffle=shuffle, drop_last=drop_last,
                      num_workers=num_workers, worker_type=worker_type)


def uninterrupted(make: Callable[[], DataLoader[Any]]) -> list[list[list[int]]]:
    loader = make()
    out = []
    for epoch in range(EPOCHS):
        loader.set_epoch(epoch)
        out.append(flat(list(loader)))
    loader.close()
    return out


def assert_loop_like_stock(run: Callable[[Any], Any], num_workers: int, worker_type: str) -> None:
    """``run(loader)`` gives the same result on our loader and the stock one (batches of 3 of RangeDataset, in order)."""
    ours = DataLoader(RangeDataset(), batch_size=3, shuffle=False, num_workers=num_workers, worker_type=worker_type)
    stock = StockLoader(RangeDataset(), batch_size=3, shuffle=False, num_workers=num_workers)
    try:
        assert run(ours) == run(stock)
    finally:
        ours.close()


@pytest.mark.parametrize("save_at", ["start", "first", "second"])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
@pytest.mark.parametrize("shuffle", [False, True])
def test_resume_in_a_new_loader_gives_the_uninterrupted_batches(
        shuffle: bool, num_workers: int, worker_type: str, drop_last: bool, save_at: str) -> None:
    def make() -> DataLoader[Any]:
        return make_loader(shuffle, num_workers, worker_type, drop_last)

    full = uninterrupted(make)
    save_epoch = 1
    n_batches = len(full[save_epoch])
    stop_after = {"start": 0, "first": 1, "second": 2, "last": n_batches}[save_at]

    first = make()
    seen: list[list[list[int]]] = []
    state = None
    for epoch in range(save_epoch + 1):
        first.set_epoch(epoch)
        seen.append([])
        if epoch == save_epoch and stop_after == 0:
            state = first.state_dict()
            break
        for batch in first:
            seen[-1].append(batch.tolist())
            if epoch == save_epoch and len(seen[-1]) == stop_after:
                state = first.state_dict()  # checkpoint inside the loop, after the training step
                break
    first.close()
    assert state is not None

    second = make()  # the restarted job
    second.load_state_dict(state)
    for epoch in range(save_epoch, EPOCHS):
        second.set_epoch(epoch)
        if epoch > save_epoch:
            seen.append([])
        for batch in second:
            seen[epoch].append(batch.tolist())
    second.close()
    assert seen == full


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_checkpoint_at_the_last_batch_then_set_epoch_of_that_epoch_does_not_replay_it(
        num_workers: int, worker_type: str, shuffle: bool) -> None:
    """Boundary: the step checkpoint falls on the epoch's last batch (inside the loop).

    The restarted loop resumes at the epoch it was in (``for epoch in range(saved_epoch, N)``, the
    loop variable / Lightning's ``current_epoch``): that epoch has no batch left, the next is whole.
    """
    test_resume_in_a_new_loader_gives_the_uninterrupted_batches(shuffle, num_workers, worker_type, False, "last")


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_state_saved_after_a_finished_epoch_resumes_at_the_next(num_workers: int, worker_type: str) -> None:
    def make() -> DataLoader[Any]:
        return make_loader(True, num_workers, worker_type, False)

    full = uninterrupted(make)
    first = make()
    first.set_epoch(0)
    epoch0 = flat(list(first))
    state = first.state_dict()  # end-of-epoch checkpoint (Lightning's on_train_epoch_end)
    first.close()
    second = make()
    second.load_state_dict(state)
    rest = []
    for epoch in range(1, EPOCHS):
        second.set_epoch(epoch)
        rest.append(flat(list(second)))
    second.close()
    assert [epoch0, *rest] == full


# ---------------------------------------------------------------------------------------------
# 2. len, enumerate, early break, shape probe
# ---------------------------------------------------------------------------------------------

def test_len_is_the_full_epoch_during_and_after_resume() -> None:
    loader = DataLoader(RangeDataset(), batch_size=3, shuffle=True, num_workers=0, seed=0)
    stock_len = len(StockLoader(RangeDataset(), batch_size=3, shuffle=True))
    assert len(loader) == stock_len == 4
    it = iter(loader)
    next(it)
    next(it)
    assert len(loader) == stock_len
    state = loader.state_dict()
    resumed = DataLoader(RangeDataset(), batch_size=3, shuffle=True, num_workers=0, seed=0)
    resumed.load_state_dict(state)
    assert len(resumed) == stock_len
    rest = list(resumed)
    assert len(rest) == 2
    assert len(resumed) == stock_len


def test_enumerate_after_resume_starts_at_zero_with_the_next_batch() -> None:
    loader = DataLoader(RangeDataset(), batch_size=2, shuffle=False, num_workers=0, seed=0)
    it = iter(loader)
    next(it)
    next(it)
    resumed = DataLoader(RangeDataset(), batch_size=2, shuffle=False, num_workers=0, seed=0)
    resumed.load_state_dict(loader.state_dict())
    pairs = [(i, b.tolist()) for i, b in enumerate(resumed)]
    assert pairs == [(0, [4, 5]), (1, [6, 7]), (2, [8, 9])]


@pytest.mark.parametrize("max_steps", [1, 2])
@pytest.mark.parametrize("call_set_epoch", [False, True])
@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_max_steps_per_epoch_loop_matches_stock(max_steps: int, call_set_epoch: bool, num_workers: int,
                                                 worker_type: str) -> None:
    """A loop that breaks after ``max_steps`` batches every epoch: stock restarts the epoch each time."""
    def run(loader: Any) -> list[list[list[int]]]:
        out = []
        for epoch in range(EPOCHS):
            if call_set_epoch and hasattr(loader, "set_epoch"):
                loader.set_epoch(epoch)
            got = []
            for step, batch in enumerate(loader):
                got.append(batch.tolist())
                if step + 1 >= max_steps:
                    break
            out.append(got)
        return out

    assert_loop_like_stock(run, num_workers, worker_type)


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_shape_probe_before_training_keeps_every_epoch_whole(num_workers: int, worker_type: str) -> None:
    loader = DataLoader(RangeDataset(), batch_size=3, shuffle=True, num_workers=num_workers,
                        worker_type=worker_type, seed=0)
    probe = next(iter(loader))
    assert probe.shape == (3,)
    for epoch in range(EPOCHS):
        loader.set_epoch(epoch)
        got = sorted(x for b in loader for x in b.tolist())
        assert got == list(range(N_SAMPLES))
    loader.close()


def test_shape_probe_after_resume_does_not_drop_the_resumed_epoch() -> None:
    full = uninterrupted(lambda: make_loader(True, 0, "thread", False))
    first = make_loader(True, 0, "thread", False)
    first.set_epoch(0)
    it = iter(first)
    head = [next(it).tolist(), next(it).tolist()]
    state = first.state_dict()
    second = make_loader(True, 0, "thread", False)
    second.load_state_dict(state)
    next(iter(second))  # shape inference in the restarted script
    second.set_epoch(0)
    assert head + flat(list(second)) == full[0]


# ---------------------------------------------------------------------------------------------
# 3. user samplers, datasets and collate functions: same batches as stock
# ---------------------------------------------------------------------------------------------

class PairsBatchSampler(BatchSampler):
    """A user's BatchSampler subclass: batches of (i, n-1-i)."""

    def __init__(self, n: int) -> None:
        super().__init__(SequentialSampler(range(n)), batch_size=2, drop_last=False)
        self.n = n

    def __iter__(self):  # type: ignore[override]
        for i in range(self.n // 2):
            yield [i, self.n - 1 - i]

    def __len__(self) -> int:
        return self.n // 2


def assert_same_batches(ours: Any, stock: Any) -> None:
    def norm(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return ("T", x.dtype, x.tolist())
        if isinstance(x, dict):
            return {k: norm(v) for k, v in x.items()}
        if isinstance(x, tuple) and hasattr(x, "_fields"):
            return (type(x).__name__, tuple(norm(v) for v in x))
        if isinstance(x, (list, tuple)):
            return type(x)(norm(v) for v in x)
        return x
    assert norm(ours) == norm(stock)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_user_batch_sampler_subclass(num_workers: int) -> None:
    ours_l = DataLoader(RangeDataset(), batch_sampler=PairsBatchSampler(N_SAMPLES), num_workers=num_workers)
    stock_l = StockLoader(RangeDataset(), batch_sampler=PairsBatchSampler(N_SAMPLES), num_workers=num_workers)
    assert flat(list(ours_l)) == flat(list(stock_l)) == [[0, 9], [1, 8], [2, 7], [3, 6], [4, 5]]
    assert len(ours_l) == len(stock_l)
    ours_l.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_weighted_random_sampler_with_generator(num_workers: int) -> None:
    weights = [0.1] * 5 + [1.0] * 5

    def run(cls: Any) -> list[Any]:
        sampler = WeightedRandomSampler(weights, num_samples=8, generator=torch.Generator().manual_seed(7))
        loader = cls(RangeDataset(), batch_size=4, sampler=sampler, num_workers=num_workers)
        return [flat(list(loader)) for _ in range(EPOCHS)]

    assert run(DataLoader) == run(StockLoader)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_subset_random_sampler(num_workers: int) -> None:
    def run(cls: Any) -> list[Any]:
        torch.manual_seed(5)
        sampler = SubsetRandomSampler([1, 3, 5, 7, 9], generator=torch.Generator().manual_seed(3))
        loader = cls(RangeDataset(), batch_size=2, sampler=sampler, num_workers=num_workers)
        return [flat(list(loader)) for _ in range(EPOCHS)]

    assert run(DataLoader) == run(StockLoader)


def test_user_calls_set_epoch_on_their_own_distributed_sampler() -> None:
    def run(cls: Any) -> list[Any]:
        sampler = DistributedSampler(RangeDataset(), num_replicas=2, rank=1, shuffle=True, seed=11)
        loader = cls(RangeDataset(), batch_size=2, sampler=sampler, num_workers=0)
        out = []
        for epoch in (0, 5, 2):
            sampler.set_epoch(epoch)
            out.append(flat(list(loader)))
        return out

    assert run(DataLoader) == run(StockLoader)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_subset_and_concat_dataset(num_workers: int) -> None:
    def run(cls: Any) -> list[Any]:
        data = ConcatDataset([Subset(RangeDataset(), [9, 2, 4]), RangeDataset(3)])
        loader = cls(data, batch_size=2, shuffle=False, num_workers=num_workers)
        return flat(list(loader))

    assert run(DataLoader) == run(StockLoader) == [[9, 2], [4, 0], [1, 2]]


def collate_dict(samples: list[torch.Tensor]) -> dict[str, Any]:
    return {"x": torch.stack(samples), "ids": [int(s) for s in samples]}


def collate_named(samples: list[torch.Tensor]) -> Pair:
    return Pair(torch.stack(samples), [f"s{int(s)}" for s in samples])


def collate_strings(samples: list[torch.Tensor]) -> list[str]:
    return [f"sample-{int(s)}" for s in samples]


@pytest.mark.parametrize("collate", [collate_dict, collate_named, collate_strings])
@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_user_collate_fn_outputs_arrive_unchanged(collate: Callable[..., Any], num_workers: int,
                                                  worker_type: str) -> None:
    ours_l = DataLoader(RangeDataset(), batch_size=4, collate_fn=collate, num_workers=num_workers,
                        worker_type=worker_type)
    stock_l = StockLoader(RangeDataset(), batch_size=4, collate_fn=collate, num_workers=num_workers)
    ours, stock = list(ours_l), list(stock_l)
    assert_same_batches(ours, stock)
    assert [type(b) for b in ours] == [type(b) for b in stock]
    ours_l.close()


class NamedDataset(RangeDataset):
    def __getitem__(self, index: int) -> Pair:  # type: ignore[override]
        return Pair(torch.tensor(index), f"s{index}")


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_default_collate_of_namedtuples_and_strings(num_workers: int, worker_type: str) -> None:
    ours_l = DataLoader(NamedDataset(), batch_size=4, num_workers=num_workers, worker_type=worker_type)
    stock_l = StockLoader(NamedDataset(), batch_size=4, num_workers=num_workers)
    ours, stock = list(ours_l), list(stock_l)
    assert_same_batches(ours, stock)
    assert all(type(b) is Pair for b in ours)
    ours_l.close()


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_batch_size_none_yields_single_samples(num_workers: int, worker_type: str) -> None:
    ours_l = DataLoader(RangeDataset(), batch_size=None, shuffle=False, num_workers=num_workers,
                        worker_type=worker_type)
    stock_l = StockLoader(RangeDataset(), batch_size=None, shuffle=False, num_workers=num_workers)
    ours, stock = list(ours_l), list(stock_l)
    assert_same_batches(ours, stock)
    assert len(ours_l) == len(stock_l) == N_SAMPLES
    ours_l.close()


# ---------------------------------------------------------------------------------------------
# 4. reproducibility from the global seed and from generator=
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_manual_seed_before_building_gives_the_same_order(num_workers: int, worker_type: str) -> None:
    def run(cls: Any) -> list[Any]:
        torch.manual_seed(0)
        loader = cls(RangeDataset(), batch_size=3, shuffle=True, num_workers=num_workers,
                     **({"worker_type": worker_type} if cls is DataLoader else {}))
        out = [flat(list(loader)) for _ in range(2)]
        if cls is DataLoader:
            loader.close()
        return out

    assert run(DataLoader) == run(DataLoader)
    assert run(StockLoader) == run(StockLoader)
    ours = run(DataLoader)
    assert ours[0] != ours[1], "a second epoch without set_epoch must be reshuffled, as stock"


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_generator_gives_the_same_order(num_workers: int, worker_type: str) -> None:
    def run() -> list[Any]:
        torch.manual_seed(int(time.time_ns() % 1000))  # the global seed must not matter
        loader = DataLoader(RangeDataset(), batch_size=3, shuffle=True, num_workers=num_workers,
                            worker_type=worker_type, generator=torch.Generator().manual_seed(1))
        out = [flat(list(loader)) for _ in range(2)]
        loader.close()
        return out

    assert run() == run()


# ---------------------------------------------------------------------------------------------
# 5. exceptions, timeouts, breaks, cleanup
# ---------------------------------------------------------------------------------------------

def drain_with_errors(loader: Any) -> tuple[list[list[int]], list[type[BaseException]]]:
    got, errors = [], []
    it = iter(loader)
    for _ in range(20):
        try:
            got.append(next(it).tolist())
        except StopIteration:
            break
        except Exception as err:  # noqa: BLE001 (the class is what is checked)
            errors.append(type(err))
    return got, errors


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_key_error_in_dataset_is_a_key_error_and_the_epoch_goes_on(num_workers: int, worker_type: str) -> None:
    ours_l = DataLoader(KeyErrorDataset(), batch_size=2, shuffle=False, num_workers=num_workers,
                        worker_type=worker_type)
    stock_l = StockLoader(KeyErrorDataset(), batch_size=2, shuffle=False, num_workers=num_workers)
    ours_got, ours_err = drain_with_errors(ours_l)
    stock_got, stock_err = drain_with_errors(stock_l)
    assert stock_err == [KeyError] and stock_got == [[0, 1], [2, 3], [6, 7], [8, 9]]
    assert len(ours_err) == 1 and issubclass(ours_err[0], KeyError)
    assert ours_got == stock_got
    ours_l.close()


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_timeout_with_a_slow_dataset_raises_runtime_error(worker_type: str) -> None:
    loader = DataLoader(SlowDataset(4), batch_size=1, num_workers=1, worker_type=worker_type, timeout=0.2,
                        persistent_workers=False)
    start = time.monotonic()
    with pytest.raises(RuntimeError):
        for _ in loader:
            pass
    assert time.monotonic() - start < 1.0
    loader.close()


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_break_then_a_new_epoch_is_whole(num_workers: int, worker_type: str) -> None:
    loader = DataLoader(RangeDataset(), batch_size=2, shuffle=True, num_workers=num_workers,
                        worker_type=worker_type, seed=3)
    loader.set_epoch(0)
    for i, _ in enumerate(loader):
        if i == 2:
            break  # KeyboardInterrupt handled by the user's loop, or a max_steps stop
    loader.set_epoch(1)
    got = sorted(x for b in loader for x in b.tolist())
    assert got == list(range(N_SAMPLES))
    loader.close()


def test_del_loader_inside_the_loop_leaves_no_worker_process() -> None:
    before = children_of_self()
    loader = DataLoader(RangeDataset(), batch_size=2, num_workers=2, worker_type="process",
                        persistent_workers=True)
    for i, _ in enumerate(loader):
        if i == 1:
            del loader
            break
    gc.collect()
    assert wait_until(lambda: children_of_self() <= before), children_of_self() - before


def test_del_loader_inside_the_loop_leaves_no_worker_thread() -> None:
    before = set(threading.enumerate())
    loader = DataLoader(RangeDataset(), batch_size=2, num_workers=2, worker_type="thread",
                        persistent_workers=True)
    for i, _ in enumerate(loader):
        if i == 1:
            del loader
            break
    gc.collect()
    assert wait_until(lambda: set(threading.enumerate()) <= before), set(threading.enumerate()) - before


# ---------------------------------------------------------------------------------------------
# 6. train and val loaders alive at once, persistent workers, interleaved
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_train_and_val_loaders_interleaved(worker_type: str) -> None:
    data = RangeDataset()
    train = DataLoader(data, batch_size=3, shuffle=True, num_workers=2, worker_type=worker_type,
                       persistent_workers=True, seed=9)
    val = DataLoader(data, batch_size=4, shuffle=False, num_workers=2, worker_type=worker_type,
                     persistent_workers=True)
    orders = []
    for epoch in range(EPOCHS):
        train.set_epoch(epoch)
        train_seen = []
        val_mid = None
        for step, batch in enumerate(train):
            train_seen += batch.tolist()
            if step == 1:  # validation in the middle of an epoch (val_check_interval)
                val_mid = flat(list(val))
        assert sorted(train_seen) == list(range(N_SAMPLES))
        assert val_mid == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
        assert flat(list(val)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
        orders.append(train_seen)
    assert len({tuple(o) for o in orders}) == EPOCHS, "each epoch is reshuffled"
    train.close()
    val.close()


# ---------------------------------------------------------------------------------------------
# 1b. resume variants: another worker setup on restart, a second checkpoint in the resumed run
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("saved_with,resumed_with", [((2, "process"), (0, "thread")), ((0, "thread"), (2, "thread")),
                                                     ((2, "thread"), (2, "process"))])
def test_resume_with_another_worker_setup_and_a_second_checkpoint(
        saved_with: tuple[int, str], resumed_with: tuple[int, str]) -> None:
    full_loader = make_loader(True, 0, "thread", True)
    full, full_states = [], []
    for epoch in range(EPOCHS):
        full_loader.set_epoch(epoch)
        for batch in full_loader:
            full.append(batch.tolist())
            full_states.append(full_loader.state_dict())
    assert len(full) == EPOCHS * 3

    first = make_loader(True, *saved_with, True)
    got = []
    first.set_epoch(0)
    for batch in first:
        got.append(batch.tolist())
        if len(got) == 2:
            state = first.state_dict()
            break
    first.close()
    second = make_loader(True, *resumed_with, True)
    second.load_state_dict(state)
    states = []
    for epoch in range(0, EPOCHS):
        second.set_epoch(epoch)
        for batch in second:
            got.append(batch.tolist())
            states.append(second.state_dict())
    second.close()
    assert got == full
    # a checkpoint taken later in the resumed run equals the uninterrupted run's at that step
    assert states[2] == full_states[2 + 2]


# ---------------------------------------------------------------------------------------------
# 7. DDP with 2 gloo ranks, each script seeding torch with its own rank (no seed=), the user's own
#    DistributedSampler: disjoint, complete epochs; a resume on both ranks gives the remaining batches.
# ---------------------------------------------------------------------------------------------

DDP_SCRIPT = r"""
import json, sys, torch, torch.distributed as dist
from torch.utils.data import Dataset, DistributedSampler
rank, init, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
torch.manual_seed(100 + rank)
from loaders import DataLoader
class R(Dataset):
    def __len__(self): return 12
    def __getitem__(self, i): return torch.tensor(i)
def make():
    sampler = DistributedSampler(R(), shuffle=True)
    return sampler, DataLoader(R(), batch_size=2, sampler=sampler, num_workers=0, worker_type="thread")
sampler, loader = make()
full = []
for e in range(2):
    sampler.set_epoch(e)
    full.append([b.tolist() for b in loader])
sampler, part = make()
sampler.set_epoch(1)
it = iter(part)
head = [next(it).tolist()]
state = part.state_dict()
sampler, again = make()
again.load_state_dict(state)
sampler.set_epoch(1)
rest = [b.tolist() for b in again]
plain = DataLoader(R(), batch_size=2, shuffle=True, num_workers=0)
json.dump({"full": full, "resumed": head + rest, "plain": [b.tolist() for b in plain]}, open(out, "w"))
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_ddp_two_ranks_without_seed_are_disjoint_and_resume(tmp_path: Any) -> None:
    import json
    import subprocess
    import sys

    script = tmp_path / "rank.py"
    script.write_text(DDP_SCRIPT)
    init = f"file://{tmp_path / 'rendezvous'}"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    procs = [subprocess.Popen([sys.executable, str(script), str(r), init, str(tmp_path / f"r{r}.json")], env=env)
             for r in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    res = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(2)]
    for epoch in range(2):
        r0 = [x for b in res[0]["full"][epoch] for x in b]
        r1 = [x for b in res[1]["full"][epoch] for x in b]
        assert not set(r0) & set(r1), f"epoch {epoch}: ranks overlap"
        assert sorted(r0 + r1) == list(range(12))
    for r in range(2):
        assert res[r]["resumed"] == res[r]["full"][1]
    # no sampler given, no seed=: a plain dataset is not split (as stock), and every rank draws the same order
    assert res[0]["plain"] == res[1]["plain"]


# ---------------------------------------------------------------------------------------------
# 8. more loop patterns: the checkpoint goes through torch.save / torch.load (weights_only, the
#    default since torch 2.6), a peek inside the loop, zip(loader, loader), KeyboardInterrupt
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
@pytest.mark.parametrize("shuffle", [False, True])
def test_state_survives_torch_save_and_default_torch_load(shuffle: bool, num_workers: int, worker_type: str) -> None:
    import io

    full = uninterrupted(lambda: make_loader(shuffle, num_workers, worker_type, False))
    first = make_loader(shuffle, num_workers, worker_type, False)
    first.set_epoch(0)
    it = iter(first)
    head = [next(it).tolist(), next(it).tolist()]
    buf = io.BytesIO()
    torch.save({"loader": first.state_dict(), "step": 2}, buf)
    first.close()
    buf.seek(0)
    ckpt = torch.load(buf)  # weights_only=True by default: only plain containers, tensors, numbers
    second = make_loader(shuffle, num_workers, worker_type, False)
    second.load_state_dict(ckpt["loader"])
    second.set_epoch(0)
    assert head + flat(list(second)) == full[0]
    second.close()


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_peek_inside_the_loop_matches_stock(num_workers: int, worker_type: str) -> None:
    def run(loader: Any) -> tuple[list[Any], list[Any]]:
        outer, peeks = [], []
        for batch in loader:
            outer.append(batch.tolist())
            peeks.append(next(iter(loader)).tolist())
        return outer, peeks

    assert_loop_like_stock(run, num_workers, worker_type)


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_zip_loader_with_itself_matches_stock(num_workers: int, worker_type: str) -> None:
    assert_loop_like_stock(lambda loader: [(a.tolist(), b.tolist()) for a, b in zip(loader, loader)],
                           num_workers, worker_type)


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_keyboard_interrupt_in_the_loop_then_the_next_epoch_is_whole(num_workers: int, worker_type: str) -> None:
    loader = DataLoader(RangeDataset(), batch_size=2, shuffle=False, num_workers=num_workers,
                        worker_type=worker_type)
    with pytest.raises(KeyboardInterrupt):
        for i, _ in enumerate(loader):
            if i == 2:
                raise KeyboardInterrupt
    stock = StockLoader(RangeDataset(), batch_size=2, shuffle=False, num_workers=num_workers)
    assert flat(list(loader)) == flat(list(stock))
    loader.close()


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
@pytest.mark.parametrize("set_epoch_first", [False, True])
def test_shape_probe_after_resume_either_side_of_set_epoch(set_epoch_first: bool, num_workers: int,
                                                           worker_type: str) -> None:
    """The restarted script loads the state, probes one batch for shapes, then runs its epoch loop."""
    full = uninterrupted(lambda: make_loader(False, num_workers, worker_type, False))
    first = make_loader(False, num_workers, worker_type, False)
    first.set_epoch(0)
    it = iter(first)
    head = [next(it).tolist()]
    state = first.state_dict()
    first.close()
    second = make_loader(False, num_workers, worker_type, False)
    second.load_state_dict(state)
    if set_epoch_first:
        second.set_epoch(0)
    next(iter(second))
    second.set_epoch(0)
    rest = flat(list(second))
    second.close()
    assert head + rest == full[0]


# ---------------------------------------------------------------------------------------------
# 9. a map-style dataset with its own set_epoch (curriculum, per-epoch augmentation strength)
# ---------------------------------------------------------------------------------------------

class EpochAwareDataset(RangeDataset):
    """Sample i is ``tensor([i, epoch])``; the epoch is set by ``set_epoch``."""

    def __init__(self, n: int = N_SAMPLES) -> None:
        super().__init__(n)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index, self.epoch])


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_loader_set_epoch_reaches_a_dataset_with_set_epoch(num_workers: int, worker_type: str) -> None:
    loader = DataLoader(EpochAwareDataset(), batch_size=5, num_workers=num_workers, worker_type=worker_type)
    for epoch in (0, 1, 4):
        loader.set_epoch(epoch)
        seen = {int(row[1]) for b in loader for row in b}
        assert seen == {epoch}
    loader.close()


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_user_call_to_dataset_set_epoch_is_kept_like_stock(num_workers: int, worker_type: str) -> None:
    """Stock code calls the dataset's set_epoch itself (non-persistent workers copy it each epoch)."""
    def run(cls: Any) -> list[set[int]]:
        data = EpochAwareDataset()
        extra = {"worker_type": worker_type} if cls is DataLoader else {}
        loader = cls(data, batch_size=5, num_workers=num_workers, persistent_workers=False, **extra)
        out = []
        for epoch in (3, 7):
            data.set_epoch(epoch)
            out.append({int(row[1]) for b in loader for row in b})
        return out

    assert run(StockLoader) == [{3}, {7}]
    assert run(DataLoader) == run(StockLoader)


# ---------------------------------------------------------------------------------------------
# 10. resume with a user's sampler: exact where its order is reproducible, else a clear refusal
# ---------------------------------------------------------------------------------------------

def make_weighted() -> DataLoader[Any]:
    sampler = WeightedRandomSampler([1.0] * N_SAMPLES, num_samples=N_SAMPLES,
                                    generator=torch.Generator().manual_seed(7))
    return DataLoader(RangeDataset(), batch_size=3, sampler=sampler, num_workers=0)


def test_mid_epoch_resume_with_a_stateless_random_sampler_is_refused_clearly() -> None:
    first = make_weighted()
    it = iter(first)
    next(it)
    state = first.state_dict()
    with pytest.raises(ValueError, match="WeightedRandomSampler"):
        make_weighted().load_state_dict(state)


def test_epoch_boundary_resume_with_a_stateless_random_sampler_is_accepted() -> None:
    first = make_weighted()
    list(first)
    state = first.state_dict()
    second = make_weighted()
    second.load_state_dict(state)  # nothing to skip: the next epoch starts from its first batch
    assert sum(len(b) for b in second) == N_SAMPLES


@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_resume_with_a_user_sequential_sampler_is_exact(num_workers: int, worker_type: str) -> None:
    def make() -> DataLoader[Any]:
        return DataLoader(RangeDataset(), batch_size=3, sampler=SequentialSampler(range(N_SAMPLES)),
                          num_workers=num_workers, worker_type=worker_type)
    first = make()
    it = iter(first)
    head = [next(it).tolist(), next(it).tolist()]
    state = first.state_dict()
    first.close()
    second = make()
    second.load_state_dict(state)
    assert head + flat(list(second)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert flat(list(second)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    second.close()


# ---------------------------------------------------------------------------------------------
# 11. an IterableDataset split by its own code (get_worker_info), the HF-streaming pattern
# ---------------------------------------------------------------------------------------------

class ShardedStream(torch.utils.data.IterableDataset):
    def __iter__(self):  # type: ignore[no-untyped-def]
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(torch.tensor(i) for i in range(N_SAMPLES) if i % workers == worker)


@pytest.mark.parametrize("num_workers", [0, 2, None])
def test_iterable_dataset_split_by_worker_info_matches_stock(num_workers: int | None) -> None:
    ours_l = DataLoader(ShardedStream(), batch_size=2, num_workers=num_workers)
    stock_l = StockLoader(ShardedStream(), batch_size=2, num_workers=num_workers or 0)
    for _ in range(2):
        assert sorted(flat(list(ours_l))) == sorted(flat(list(stock_l)))
    ours_l.close()


# ---------------------------------------------------------------------------------------------
# 12. more seeding / epoch ownership in loops
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("num_workers,worker_type", WORKER_SETUPS)
def test_resume_with_generator_instead_of_manual_seed(num_workers: int, worker_type: str) -> None:
    def make() -> DataLoader[Any]:
        torch.manual_seed(int(time.time_ns() % 997))  # a restarted job need not reseed torch alike
        return DataLoader(RangeDataset(), batch_size=3, shuffle=True, num_workers=num_workers,
                          worker_type=worker_type, generator=torch.Generator().manual_seed(1))
    full = uninterrupted(make)
    first = make()
    first.set_epoch(1)
    it = iter(first)
    head = [next(it).tolist()]
    state = first.state_dict()
    first.close()
    second = make()
    second.load_state_dict(state)
    second.set_epoch(1)
    assert head + flat(list(second)) == full[1]
    second.close()


def test_loader_set_epoch_does_not_touch_the_users_sampler_epoch() -> None:
    """Lightning-style code calls both: the user's sampler.set_epoch(5) and the loader's set_epoch(0)."""
    def run(cls: Any) -> list[Any]:
        sampler = DistributedSampler(RangeDataset(), num_replicas=2, rank=0, shuffle=True, seed=4)
        loader = cls(RangeDataset(), batch_size=2, sampler=sampler, num_workers=0)
        sampler.set_epoch(5)
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(0)
        out = flat(list(loader))
        assert sampler.epoch == 5
        return out

    assert run(DataLoader) == run(StockLoader)


# ---------------------------------------------------------------------------------------------
# 13. nothing outlives the loop: a script that errs, breaks and times out, never calling close()
# ---------------------------------------------------------------------------------------------

EXIT_SCRIPT = r"""
import sys, time, torch
sys.path.insert(0, sys.argv[1])
from tests.loaders.test_user_loops import KeyErrorDataset, RangeDataset, SlowDataset
from loaders import DataLoader
keep = []
for wt in ("thread", "process"):
    loader = DataLoader(KeyErrorDataset(), batch_size=2, num_workers=2, worker_type=wt, persistent_workers=True)
    try:
        for _ in loader:
            pass
    except KeyError:
        pass
    keep.append(loader)
    train = DataLoader(RangeDataset(), batch_size=2, num_workers=2, worker_type=wt, persistent_workers=True)
    for i, _ in enumerate(train):
        if i == 1:
            break
    keep.append(train)
    slow = DataLoader(SlowDataset(4), batch_size=1, num_workers=1, worker_type=wt, timeout=0.2)
    try:
        next(iter(slow))
    except RuntimeError:
        pass
    keep.append(slow)
print("done", flush=True)
"""


@pytest.mark.slow
def test_a_script_that_never_closes_its_loaders_exits_promptly(tmp_path: Any) -> None:
    import subprocess
    import sys

    script = tmp_path / "exit.py"
    script.write_text(EXIT_SCRIPT)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(script), os.getcwd()], capture_output=True, text=True, timeout=60,
                          cwd=os.getcwd())
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "done" in proc.stdout
    assert elapsed < 10, f"interpreter took {elapsed:.1f} s to exit"


def test_no_worker_process_left_after_a_timeout() -> None:
    before = children_of_self()
    loader = DataLoader(SlowDataset(4), batch_size=1, num_workers=1, worker_type="process", timeout=0.2)
    with pytest.raises(RuntimeError):
        next(iter(loader))
    gc.collect()
    assert wait_until(lambda: children_of_self() <= before, 3.0), children_of_self() - before
    loader.close()
