"""Drop-in use: installed globally, child interpreters that must exit cleanly (issue 11, behaviours 11
and 12), torch's worker info."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.utils.data

from loaders import DataLoader
from tests.loaders.helpers import is_alive
from tests.samples import wait_until

ROOT = Path(__file__).resolve().parents[3]


def run_script(tmp_path: Path, source: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout_s,
                          cwd=ROOT, env=_env())


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


_GLOBAL_INSTALL = """
import torch
import torch.utils.data
import loaders

class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 10
    def __getitem__(self, i):
        return i * i

torch.utils.data.DataLoader = loaders.DataLoader   # speeds up code we do not own
loader = torch.utils.data.DataLoader(Squares(), batch_size=4, num_workers=2, worker_type="process")
assert isinstance(loader, loaders.DataLoader)
print([b.tolist() for b in loader])
loader.close()
"""


def test_installing_it_as_torchs_dataloader_does_not_recurse(tmp_path: Path) -> None:
    proc = run_script(tmp_path, _GLOBAL_INSTALL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[[0, 1, 4, 9], [16, 25, 36, 49], [64, 81]]"


_MANY_LOADERS = """
import os, sys, threading, time
import torch
import torch.utils.data
from loaders import DataLoader

PIDS = sys.argv[1]

def note_pid(worker_id):
    with open(PIDS, "a") as f:
        f.write(f"{os.getpid()}\\n")

class Items(torch.utils.data.Dataset):
    def __init__(self, bad=-1, hang=-1):
        self.bad, self.hang = bad, hang
    def __len__(self):
        return 64
    def __getitem__(self, i):
        if i == self.hang:
            time.sleep(60)
        if i == self.bad:
            raise ValueError(f"bad sample {i}")
        return i

class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(64))

kept = []  # loaders still referenced when the interpreter exits
def make(dataset, **kwargs):
    loader = DataLoader(dataset, batch_size=4, num_workers=2, worker_init_fn=note_pid, **kwargs)
    kept.append(loader)
    return loader

for worker_type in ("process", "thread"):
    for persistent in (True, False):
        loader = make(Items(), worker_type=worker_type, persistent_workers=persistent)
        for step, _ in enumerate(loader):  # an early break
            if step == 2:
                break
        next(iter(loader))                    # a probe
        try:
            list(make(Items(bad=9), worker_type=worker_type, persistent_workers=persistent))
        except Exception:
            pass
    try:
        list(make(Items(hang=5), worker_type=worker_type, timeout=0.5))
    except Exception as err:
        assert "timed out" in str(err), err
it = iter(make(Stream()))
next(it)
print("done", flush=True)
"""


@pytest.mark.slow
def test_no_worker_outlives_its_loaders_and_the_interpreter_exits_promptly(tmp_path: Path) -> None:
    """Promptly: though a worker of each kind hangs in a sample for 60 s (the whole run's liveness limit 120 s:
    with the hanging ones waited for, it would not end in time)."""
    pids = tmp_path / "pids.txt"
    script = tmp_path / "many.py"
    script.write_text(textwrap.dedent(_MANY_LOADERS))
    proc = subprocess.run([sys.executable, str(script), str(pids)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=_env())
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr[-3000:]
    workers = {int(line) for line in pids.read_text().split()}
    assert len(workers) >= 10  # the process workers really started
    assert wait_until(lambda: not any(is_alive(pid) for pid in workers)), "worker processes outlived the interpreter"


_AT_EXIT = """
import atexit, threading

def report():
    ours = sorted(t.name for t in threading.enumerate() if t.name.startswith(("loaders-", "shardfeed-")))
    print("alive at exit:", ours, flush=True)

atexit.register(report)  # registered first, so it runs after every exit hook of loaders

import time
import torch
import torch.utils.data
from loaders import DataLoader

entered, release = threading.Event(), threading.Event()

class Items(torch.utils.data.Dataset):
    def __init__(self, hang=-1, slow=-1):
        self.hang, self.slow = hang, slow
    def __len__(self):
        return 64
    def __getitem__(self, i):
        if i == self.hang:
            time.sleep(120)  # never returns before the process ends
        if i == self.slow:
            entered.set()
            release.wait()
        return torch.full((256,), i)

kept = []
for worker_type in ("process", "thread"):  # one worker of each kind stuck in a sample (either thread)
    loader = DataLoader(Items(hang=0), batch_size=4, num_workers=2, worker_type=worker_type, timeout=0.5)
    kept.append(loader)
    try:
        list(loader)
    except Exception as err:
        assert "timed out" in str(err), err
busy = iter(DataLoader(Items(slow=12), batch_size=4, num_workers=2, worker_type="thread"))
next(busy)  # threads building the next batches, one inside a sample
entered.wait()
atexit.register(release.set)  # runs before the hooks of loaders: that sample ends during the exit
print("done", flush=True)
"""


@pytest.mark.slow
def test_at_exit_only_a_worker_thread_stuck_in_a_sample_is_left_running(tmp_path: Path) -> None:
    """A thread of ours still running while the interpreter finalises may free a tensor there, and the process
    aborts (exit code -6, "terminate called without an active exception"): every thread that can end has ended
    before finalisation: the reaper of stopped worker processes, idle thread workers, one leaving a sample."""
    proc = run_script(tmp_path, _AT_EXIT, timeout_s=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done, alive = proc.stdout.split("\n")[:2]
    assert done == "done", proc.stdout
    assert alive in {"alive at exit: ['loaders-worker-0']", "alive at exit: ['loaders-worker-1']"}, proc.stdout


class _Items:
    """A map-style dataset of ints (a plain class: torch accepts any object with __getitem__ and __len__)."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> int:
        return index


@pytest.mark.parametrize("persistent", [False, True])
def test_worker_processes_end_with_their_iterator_or_loader(persistent: bool) -> None:
    from loaders import DataLoader

    loader = DataLoader(_Items(), batch_size=4, num_workers=2, worker_type="process", persistent_workers=persistent)
    iterator = iter(loader)
    next(iterator)
    processes = iterator._workers
    assert len(processes) == 2 and all(p.is_alive() for p in processes)
    del iterator  # an early break
    if persistent:
        assert all(p.is_alive() for p in processes)  # kept for the next epoch...
        del loader  # ...until the loader goes
    assert wait_until(lambda: not any(p.is_alive() for p in processes))


class SeedReport(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> tuple[int, int]:
        info = torch.utils.data.get_worker_info()
        return info.seed, torch.initial_seed()


class Shardable(torch.utils.data.IterableDataset):
    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        return iter(range(info.id, 6, info.num_workers))  # the usual per-worker split


def mark_dataset_copy(worker_id: int) -> None:
    info = torch.utils.data.get_worker_info()
    assert isinstance(info.dataset, (SeedReport, Shardable)), type(info.dataset)
    info.dataset.marked_by = worker_id


def test_worker_info_shows_the_users_dataset_copy() -> None:
    """torch's worker_init_fn idiom: get_worker_info().dataset is this worker's copy of the user's dataset."""
    dataset = SeedReport()
    loader = DataLoader(dataset, batch_size=2, num_workers=2, worker_type="process", worker_init_fn=mark_dataset_copy)
    assert len(list(loader)) == 4
    assert not hasattr(dataset, "marked_by")  # only the workers' copies were marked
    stream = DataLoader(Shardable(), batch_size=None, num_workers=2, worker_init_fn=mark_dataset_copy)
    assert sorted(int(x) for x in stream) == list(range(6))


@pytest.mark.parametrize("persistent", [False, True])
def test_worker_info_seed_is_the_seed_torch_runs_with_in_every_epoch(persistent: bool) -> None:
    """As torch promises: code seeding other libraries from get_worker_info().seed gets the seed in use."""
    loader = DataLoader(SeedReport(), batch_size=2, num_workers=2, worker_type="process", seed=5,
                        persistent_workers=persistent)
    seeds_by_epoch = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        pairs = [(int(a), int(b)) for info_seeds, torch_seeds in loader for a, b in zip(info_seeds, torch_seeds)]
        assert all(info == used for info, used in pairs), pairs
        seeds_by_epoch.append({used for _, used in pairs})
    assert seeds_by_epoch[0].isdisjoint(seeds_by_epoch[1])  # workers draw new numbers each epoch
    loader.close()
