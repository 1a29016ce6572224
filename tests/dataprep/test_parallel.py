from __future__ import annotations

import os

import pytest

from dataprep.parallel import ordered_map


def _square_with_pid(ctx: int, x: int) -> tuple[int, int]:
    if x == ctx:
        raise ValueError(f"bad input {x}")
    return x * x, os.getpid()


@pytest.mark.parametrize("workers", [1, 2])
def test_results_in_order(workers):
    results = list(ordered_map(_square_with_pid, range(100), context=-1, workers=workers, chunk_size=3))
    assert [r[0] for r in results] == [x * x for x in range(100)]
    if workers > 1:
        assert os.getpid() not in {pid for _, pid in results}


def test_input_is_consumed_lazily():
    consumed = []

    def source():
        for x in range(10_000):
            consumed.append(x)
            yield x

    it = ordered_map(_square_with_pid, source(), context=-1, workers=2, chunk_size=4, window_per_worker=2)
    next(it)
    # at most window (2 workers x 2) chunks of 4, plus the refill after the first result
    assert len(consumed) <= (2 * 2 + 1) * 4 + 4
    it.close()


def test_worker_exception_propagates():
    with pytest.raises(ValueError, match="bad input 7"):
        list(ordered_map(_square_with_pid, range(20), context=7, workers=2, chunk_size=2))


def _die_on(ctx: int, x: int) -> int:
    if x == ctx:
        os._exit(3)  # what a segfaulting decoder looks like to the pool
    return x


def test_worker_death_without_on_crash_names_the_lost_inputs():
    from dataprep.errors import WorkerCrashError

    with pytest.raises(WorkerCrashError) as exc:
        list(ordered_map(_die_on, range(40), context=13, workers=2, chunk_size=4))
    assert 13 in exc.value.items
    assert "worker process died" in str(exc.value)


def test_worker_death_isolates_the_culprit_and_goes_on():
    results = list(ordered_map(_die_on, range(60), context=13, workers=2, chunk_size=4,
                               on_crash=lambda item, status: ("crashed", item, status)))
    assert results[13] == ("crashed", 13, 3)
    assert results[:13] + results[14:] == [x for x in range(60) if x != 13]
