"""thread_workers: the thread pool's order, bounds, failures, liveness and shutdown; inline workers."""

from __future__ import annotations

import gc
import threading

import pytest

from loaders.errors import WorkerError
from loaders.loader.batch_outcome import BatchOutcome
from loaders.loader.batch_source import Job
from loaders.loader.thread_workers import ThreadWorkers
from tests.loaders.helpers import jobs, loader_threads


def echo(worker_id: int, job: Job) -> BatchOutcome:
    indices = list(job.indices)
    return BatchOutcome(epoch=job.epoch, position=job.position, worker_id=worker_id, indices=indices,
                        batch=(worker_id, indices), num_samples=len(indices))


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
    ran_by: dict[int, int] = {}  # job position -> the thread that ran it (threads share one inbox)

    def broken(worker_id: int, job: Job) -> BatchOutcome:
        ran_by[job.position] = worker_id
        raise KeyError("bug")

    with ThreadWorkers(broken, num_workers=2, max_in_flight=2) as pool:
        outcome = next(pool.run(jobs(2)))
    assert isinstance(outcome.failure, KeyError) and outcome.position == 0
    assert outcome.worker_id == ran_by[0]


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
    with pytest.raises(WorkerError, match=r"timed out after 0\.3 seconds: thread worker [01] produced nothing "
                                          r"while reading batch 1 \(indices \[2, 3\]\)"):
        next(run)
    release.set()
    pool.close()
    assert not loader_threads()


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
    assert len(loader_threads()) == 2
    pool.close()
    assert not loader_threads()
    assert [o.position for o in pool.run(jobs(2))] == [0, 1]  # restarts on demand
    pool.close()


def test_garbage_collected_pool_stops_its_threads() -> None:
    pool = ThreadWorkers(echo, num_workers=2, max_in_flight=2)
    list(pool.run(jobs(2)))
    threads = loader_threads()
    del pool
    gc.collect()
    for thread in threads:
        thread.join(timeout=10)
    assert not any(t.is_alive() for t in threads)


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
