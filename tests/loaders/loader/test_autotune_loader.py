"""DataLoader(autotune=...): the default, explicit values respected, the same batches in the same order as fixed
settings while workers change mid-epoch (threads and processes, every start method), exact resume that starts
tuned, old states. The controller acts on counts of waits, not on timing bounds: a dataset that sleeps under a
loop that does not wait for anything else waits nearly all of its time."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset, IterableDataset

from loaders import ConfigError, DataLoader, cpus_available
from loaders.loader.tuner import KEY_TUNED


class Waits(Dataset[torch.Tensor]):
    """Reads that wait ``sleep_s`` each; the item is its index and a keyed draw (same wherever it is read)."""

    def __init__(self, n: int, sleep_s: float = 0.004) -> None:
        self.n, self.sleep_s = n, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.sleep_s)
        draw = torch.randint(0, 1000, (1,), generator=torch.Generator().manual_seed(index))
        return torch.cat([torch.tensor([index]), draw])


class Stream(IterableDataset[int]):
    def __iter__(self) -> Any:
        return iter(range(4))


def read(loader: DataLoader[Any], limit: int | None = None) -> list[list[int]]:
    batches = []
    for batch in loader:
        batches.append(batch[:, 0].tolist() + batch[:, 1].tolist())
        if limit is not None and len(batches) == limit:
            break
    return batches


def test_autotune_is_on_by_default_and_off_for_explicit_values() -> None:
    assert DataLoader(Waits(8), batch_size=2).stats().autotune
    assert not DataLoader(Waits(8), batch_size=2, num_workers=2).stats().autotune
    assert not DataLoader(Waits(8), batch_size=2, num_workers=2, prefetch_factor=2).stats().autotune
    assert DataLoader(Waits(8), batch_size=2, num_workers=2, autotune=True).stats().autotune
    assert not DataLoader(Stream(), batch_size=2).stats().autotune
    with pytest.raises(ConfigError, match="map-style"):
        DataLoader(Stream(), batch_size=2, autotune=True)


def test_fixed_settings_never_change() -> None:
    loader: DataLoader[Any] = DataLoader(Waits(96), batch_size=2, num_workers=1, worker_type="thread")
    read(loader)
    stats = loader.stats()
    assert stats.tuning == () and stats.workers == 1 and KEY_TUNED not in loader.state_dict()


def test_thread_workers_grow_mid_epoch_and_keep_the_order() -> None:
    fixed = read(DataLoader(Waits(192), batch_size=2, shuffle=True, seed=3, num_workers=1, worker_type="thread",
                            autotune=False))
    tuned_loader: DataLoader[Any] = DataLoader(Waits(192), batch_size=2, shuffle=True, seed=3, num_workers=1,
                                               worker_type="thread", autotune=True)
    assert read(tuned_loader) == fixed
    stats = tuned_loader.stats()
    assert stats.workers > 1 and stats.tuning and stats.tuning[0].knob == "num_workers"
    assert all(d.old != d.new and d.why for d in stats.tuning)


class Busy(Waits):
    """Items that keep a core busy ``sleep_s`` (CPU-bound: the controller grows processes only to the CPUs)."""

    def __getitem__(self, index: int) -> torch.Tensor:
        end = time.thread_time() + self.sleep_s
        while time.thread_time() < end:
            pass
        return torch.tensor([index, index % 7])


# Under the start methods that start a fresh interpreter per worker, CPU-bound items: one change (1 -> 2
# workers, the CPUs of this machine or fewer), few process start-ups. The reference order: the main process.
@pytest.mark.parametrize(("method", "dataset"), [("fork", Waits(96, 0.01)), ("forkserver", Busy(48, 0.01)),
                                                 ("spawn", Busy(48, 0.01))], ids=["fork", "forkserver", "spawn"])
def test_process_workers_grow_mid_epoch_and_keep_the_order(method: str, dataset: Waits) -> None:
    # worker_type="process" given: the controller keeps processes and adds more of them.
    reference = read(DataLoader(dataset, batch_size=2, shuffle=True, seed=5, num_workers=0, autotune=False))
    tuned_loader: DataLoader[Any] = DataLoader(dataset, batch_size=2, shuffle=True, seed=5, num_workers=1,
                                               worker_type="process", multiprocessing_context=method, autotune=True)
    assert read(tuned_loader) == reference
    stats = tuned_loader.stats()
    if cpus_available() > 1:  # grown mid-epoch; on a busy machine the trial may not pay and be undone later
        first = stats.tuning[0]
        assert (first.knob, first.old) == ("num_workers", 1) and int(first.new) > 1 and stats.worker_type == "process"
    assert stats.stages["dataset"] >= 2 * 0.01  # the workers' timings travelled back from the processes


def test_exact_resume_starts_tuned() -> None:
    def make() -> DataLoader[Any]:
        return DataLoader(Waits(192), batch_size=2, shuffle=True, seed=7, num_workers=1, worker_type="thread",
                          autotune=True)

    whole = read(make())
    first = make()
    head = read(first, limit=60)
    state = first.state_dict()
    assert state[KEY_TUNED]["num_workers"] > 1  # it tuned within 60 batches
    resumed = make()
    resumed.load_state_dict(state)
    assert resumed.stats().workers == state[KEY_TUNED]["num_workers"]
    assert "resumed" in resumed.stats().tuning[0].why
    assert head + read(resumed) == whole


def test_a_state_without_tuned_knobs_loads_and_a_malformed_one_is_refused() -> None:
    saver: DataLoader[Any] = DataLoader(Waits(16, 0.0), batch_size=2, num_workers=0, autotune=False)
    read(saver, limit=3)
    old = saver.state_dict()
    assert KEY_TUNED not in old
    loader: DataLoader[Any] = DataLoader(Waits(16, 0.0), batch_size=2, num_workers=0, autotune=True)
    loader.load_state_dict(old)
    assert len(read(loader)) == 5
    with pytest.raises(ConfigError, match=KEY_TUNED):
        loader.load_state_dict({**old, KEY_TUNED: {"num_workers": -1, "worker_type": "thread", "prefetch_factor": 2}})


def test_a_slow_step_releases_idle_workers() -> None:
    loader: DataLoader[Any] = DataLoader(Waits(120, 0.0), batch_size=2, num_workers=4, worker_type="thread",
                                         autotune=True)
    for _ in loader:
        time.sleep(0.05)  # the step sets the pace: the workers idle
    cuts = [d for d in loader.stats().tuning if "step sets the pace" in d.why]
    assert cuts and cuts[0].knob == "num_workers" and cuts[0].old == 4 and int(cuts[0].new) < 4


class Threads(Dataset[torch.Tensor]):
    """Each item: its index and the intra-op threads of the process that read it."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index, torch.get_num_threads()])


def test_tuned_threads_per_worker_reach_the_worker_processes_and_travel_in_the_state() -> None:
    def make() -> DataLoader[Any]:
        return DataLoader(Threads(), batch_size=2, num_workers=1, worker_type="process", autotune=True)

    state = make().state_dict()
    assert state[KEY_TUNED]["threads_per_worker"] == 1
    loader = make()
    loader.load_state_dict({**state, KEY_TUNED: {**state[KEY_TUNED], "threads_per_worker": 2}})
    rows = [row for batch in loader for row in batch.tolist()]
    assert rows == [[index, 2] for index in range(8)]  # the same items, read by workers of 2 threads each
    stats = loader.stats()
    assert stats.threads_per_worker == 2 and [d.knob for d in stats.tuning] == ["threads_per_worker"]
    assert loader.state_dict()[KEY_TUNED]["threads_per_worker"] == 2
    with pytest.raises(ConfigError, match="threads_per_worker"):
        loader.load_state_dict({**state, KEY_TUNED: {**state[KEY_TUNED], "threads_per_worker": 0}})
