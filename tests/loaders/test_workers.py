"""workers: thread pool order, bounds, failures, liveness, shutdown; process glue."""

from __future__ import annotations

import gc
import pickle
import threading
from typing import Any

import pytest
import torch
import torch.utils.data

from loaders.loader.collate import default_collate
from loaders.errors import SampleError, WorkerError
from loaders.loader.fetch import Fetched
from loaders.loader.worker_start import WorkerInit
from loaders.loader.batch_outcome import BatchOutcome, CollateGuard
from loaders.loader.batch_source import Job
from loaders.loader.process_workers import GuardedDataset, IndexBatch, ProcessWorkers
from loaders.loader.thread_workers import ThreadWorkers


def jobs(count: int, size: int = 2, epoch: int = 0) -> list[Job]:
    return [Job(epoch, b, list(range(b * size, (b + 1) * size))) for b in range(count)]


def echo(worker_id: int, job: Job) -> BatchOutcome:
    indices = list(job.indices)
    return BatchOutcome(epoch=job.epoch, position=job.position, worker_id=worker_id, indices=indices,
                        batch=(worker_id, indices), num_samples=len(indices))


def pool_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("loaders-worker-")]


def test_batches_come_back_in_order_and_a_free_thread_takes_the_next_batch() -> None:
    release = threading.Event()
    built: list[int] = []

    def slow_first(worker_id: int, job: Job) -> BatchOutcome:
        if job.position == 0:
            release.wait(30)  # held until the other thread has built 1, 2 and 3
        built.append(job.position)
        if job.position == 3:
            release.set()
        return echo(worker_id, job)

    with ThreadWorkers(slow_first, num_workers=2, max_in_flight=4) as pool:
        outcomes = list(pool.run(jobs(10)))
    assert [o.position for o in outcomes] == list(range(10))
    assert [o.batch[1] for o in outcomes] == [job.indices for job in jobs(10)]
    # A fixed batch -> thread assignment would leave batch 2 queued behind the held batch 0.
    assert built[:3] == [1, 2, 3]
    assert {o.batch[0] for o in outcomes[1:4]} == {outcomes[1].batch[0]} != {outcomes[0].batch[0]}


def test_out_of_order_delivery_yields_every_batch_once() -> None:
    release = threading.Event()

    def slow_first(worker_id: int, job: Job) -> BatchOutcome:
        if job.position == 0:
            release.wait(10)
        return echo(worker_id, job)

    with ThreadWorkers(slow_first, num_workers=2, max_in_flight=4, in_order=False) as pool:
        run = pool.run(jobs(6))
        first = next(run)
        release.set()
        rest = list(run)
    assert first.position != 0  # batch 0 was held back, others went ahead
    assert sorted(o.position for o in [first, *rest]) == list(range(6))


def test_at_most_max_in_flight_batches_are_requested_ahead() -> None:
    started: list[int] = []

    def record(worker_id: int, job: Job) -> BatchOutcome:
        started.append(job.position)
        return echo(worker_id, job)

    with ThreadWorkers(record, num_workers=2, max_in_flight=3) as pool:
        run = pool.run(jobs(20))
        next(run)
        assert len(started) <= 3
        next(run)
        assert len(started) <= 4
        run.close()


def test_exception_in_work_becomes_the_outcome_failure() -> None:
    def broken(worker_id: int, job: Job) -> BatchOutcome:
        raise KeyError("bug")

    with ThreadWorkers(broken, num_workers=2, max_in_flight=2) as pool:
        outcome = next(pool.run(jobs(2)))
    assert isinstance(outcome.failure, KeyError) and outcome.worker_id == 0


def test_init_runs_once_per_thread_and_its_failure_reaches_the_consumer() -> None:
    seen: list[int] = []
    with ThreadWorkers(echo, num_workers=2, max_in_flight=2, init=seen.append) as pool:
        list(pool.run(jobs(4)))
        list(pool.run(jobs(4)))
    assert sorted(seen) == [0, 1]

    def failing_init(worker_id: int) -> None:
        raise RuntimeError(f"init {worker_id} failed")

    with ThreadWorkers(echo, num_workers=1, max_in_flight=1, init=failing_init) as pool:
        outcome = next(pool.run(jobs(1)))
    assert isinstance(outcome.failure, RuntimeError) and "init 0 failed" in str(outcome.failure)


def test_timeout_names_worker_batch_and_indices() -> None:
    release = threading.Event()

    def hang(worker_id: int, job: Job) -> BatchOutcome:
        if job.position == 1:
            release.wait(30)
        return echo(worker_id, job)

    pool = ThreadWorkers(hang, num_workers=2, max_in_flight=2, timeout_s=0.3)
    run = pool.run(jobs(3))
    assert next(run).position == 0
    with pytest.raises(WorkerError, match=r"timed out after 0\.3 seconds: thread worker [01] produced nothing while reading batch 1 "
                                          r"\(indices \[2, 3\]\)"):
        next(run)
    release.set()
    pool.close()
    assert not pool_threads()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_thread_is_detected() -> None:
    def exit_thread(worker_id: int, job: Job) -> BatchOutcome:
        raise SystemExit  # not an Exception: ends the thread without an outcome

    with ThreadWorkers(exit_thread, num_workers=1, max_in_flight=1) as pool, \
            pytest.raises(WorkerError, match=r"thread worker 0 died .* batch 0"):
        list(pool.run(jobs(2)))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_thread_holding_a_batch_is_named_while_the_other_lives_on() -> None:
    def exit_on_batch_1(worker_id: int, job: Job) -> BatchOutcome:
        if job.position == 1:
            raise SystemExit  # ends this thread; the other keeps taking batches
        return echo(worker_id, job)

    with ThreadWorkers(exit_on_batch_1, num_workers=2, max_in_flight=2) as pool:
        run = pool.run(jobs(6))
        assert next(run).position == 0
        with pytest.raises(WorkerError, match=r"thread worker [01] died .* batch 1 \(indices \[2, 3\]\)"):
            next(run)


def test_abandoned_run_is_ignored_by_the_next_and_close_joins_threads() -> None:
    pool = ThreadWorkers(echo, num_workers=2, max_in_flight=4)
    run = pool.run(jobs(10))
    next(run)
    run.close()
    assert [o.position for o in pool.run(jobs(3))] == [0, 1, 2]
    assert len(pool_threads()) == 2
    pool.close()
    assert not pool_threads()
    assert [o.position for o in pool.run(jobs(2))] == [0, 1]  # restarts on demand
    pool.close()


def test_garbage_collected_pool_stops_its_threads() -> None:
    pool = ThreadWorkers(echo, num_workers=2, max_in_flight=2)
    list(pool.run(jobs(2)))
    threads = pool_threads()
    del pool
    gc.collect()
    for thread in threads:
        thread.join(timeout=10)
    assert not any(t.is_alive() for t in threads)


# ---------------------------------------------------------------- process glue


class Numbers(torch.utils.data.Dataset):
    def __init__(self, size: int, bad: frozenset[int] = frozenset()) -> None:
        self.size, self.bad, self.tag = size, bad, "main"

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        if index in self.bad:
            raise SampleError(f"bad {index}", shard="x.tar", key=f"k{index}", offset=index)
        return index


def test_guarded_dataset_forwards_attributes_and_pickles() -> None:
    inner = Numbers(5)
    guarded = GuardedDataset(inner, skip_errors=False, seed=1)
    guarded.tag = "worker"
    assert inner.tag == "worker" and guarded.size == 5 and len(guarded) == 5 and guarded[3] == 3
    copy = pickle.loads(pickle.dumps(guarded))
    assert copy.tag == "worker" and copy.seed == 1 and copy.dataset.size == 5


def test_guarded_dataset_returns_fetched_with_portable_failure() -> None:
    guarded = GuardedDataset(Numbers(5, frozenset({2})), skip_errors=False, seed=0)
    fetched = guarded.__getitems__(IndexBatch([1, 2], epoch=0, position=7))
    assert isinstance(fetched, Fetched) and fetched.position == 7 and fetched.failed_index == 2
    assert isinstance(fetched.failure, SampleError) and fetched.failure.__notes__


def process_workers(dataset: Any, **stock: Any) -> ProcessWorkers:
    options = {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 2, **stock}
    return ProcessWorkers(dataset, collate=CollateGuard(default_collate, True), stock=options,
                          init=WorkerInit(seed=0), skip_errors=False)


def test_process_workers_serve_several_epochs_in_order() -> None:
    workers = process_workers(Numbers(8))
    for epoch in range(2):
        outcomes = list(workers.run(jobs(4, epoch=epoch), epoch))
        assert [o.position for o in outcomes] == [0, 1, 2, 3] and {o.epoch for o in outcomes} == {epoch}
        assert [o.batch.tolist() for o in outcomes] == [job.indices for job in jobs(4)]
        assert {o.worker_id for o in outcomes} == {0, 1}
    workers.close()
    with pytest.raises(WorkerError, match="closed"):
        next(workers.run(jobs(1), 2))


class Failing(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    def __iter__(self) -> Any:
        yield 1
        raise ValueError("stream broke")


def test_an_iterable_datasets_exception_keeps_its_class_and_names_the_worker() -> None:
    workers = process_workers(Failing(), num_workers=1, batch_size=2, persistent_workers=False)
    with pytest.raises(ValueError, match="stream broke") as info:
        list(workers.run(None, 0))
    assert "raised in process worker 0" in info.value.__notes__


_EXIT_SCRIPT = """
import torch
from loaders import DataLoader

class Slow(torch.utils.data.Dataset):
    releases_gil = True
    def __len__(self):
        return 4096
    def __getitem__(self, i):
        return torch.full((64, 64, 3), i % 251, dtype=torch.uint8).clone()

loader = DataLoader(Slow(), batch_size=32, num_workers=2, worker_type="thread")
next(iter(loader))   # abandoned: threads keep building batches ahead
del loader
"""


def test_interpreter_exit_with_busy_thread_workers_is_clean(tmp_path):
    """Daemon threads still inside torch at finalisation made libstdc++ abort (exit 134)."""
    import subprocess
    import sys

    script = tmp_path / "exit.py"
    script.write_text(_EXIT_SCRIPT)
    for _ in range(3):
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "terminate called" not in proc.stderr
