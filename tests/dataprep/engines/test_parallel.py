from __future__ import annotations

import faulthandler
import os
import signal
import threading
import time

import pytest

from dataprep.errors import WorkerCrashError
from dataprep.engines.parallel import InFlight, describe_exit, run_forked, threaded_ordered_map


def _die_on(ctx: int, x: int) -> int:
    if x == ctx:
        os._exit(3)  # what a segfaulting decoder looks like
    return x


# ----------------------------------------------------------------------------- threads


def _square_slowly(ctx: object, x: int) -> int:
    if x == ctx:
        raise ValueError(f"bad input {x}")
    time.sleep(0.001 * (x % 3))  # finish out of order
    return x * x


def test_threaded_results_in_order_with_positions_marked_while_running():
    seen_marked: list[list[int]] = []
    in_flight = InFlight(8)

    def square(ctx: object, x: int) -> int:
        seen_marked.append(in_flight.positions())
        return _square_slowly(ctx, x)

    results = list(threaded_ordered_map(square, range(50), context=None, workers=3, window=8, first_position=100,
                                        in_flight=in_flight))
    assert results == [x * x for x in range(50)]
    assert all(p for p in seen_marked) and all(100 <= p < 150 for marked in seen_marked for p in marked)
    assert in_flight.positions() == []  # every mark was cleared


def test_threaded_map_consumes_input_lazily_and_stops_early():
    consumed: list[int] = []

    def source():
        for x in range(10_000):
            consumed.append(x)
            yield x

    it = threaded_ordered_map(_square_slowly, source(), context=None, workers=2, window=6)
    assert next(it) == 0
    assert len(consumed) <= 6 + 1  # the window, plus the refill after the first result
    it.close()
    assert len(consumed) <= 7


def test_threaded_map_raises_at_the_failing_items_turn():
    got: list[int] = []
    with pytest.raises(ValueError, match="bad input 7"):
        for r in threaded_ordered_map(_square_slowly, range(20), context=7, workers=2, window=4):
            got.append(r)
    assert got == [x * x for x in range(7)]


def test_threaded_map_refuses_an_in_flight_smaller_than_its_window():
    with pytest.raises(ValueError, match="fewer than the window"):
        next(threaded_ordered_map(_square_slowly, range(3), context=None, workers=2, window=8, in_flight=InFlight(4)))


def test_in_flight_marks_are_visible_to_the_parent_after_the_child_dies():
    in_flight = InFlight(4)

    def mark_and_die() -> None:
        in_flight.mark(41)
        in_flight.mark(42)
        in_flight.clear(41)
        os._exit(9)

    forked = run_forked(mark_and_die)
    assert forked.died and forked.exit_status == 9
    assert in_flight.positions() == [42]


# ----------------------------------------------------------------------------- run_forked


class _Unpicklable(Exception):
    def __init__(self, a: int, b: int) -> None:
        super().__init__(a)  # args do not match __init__: pickle cannot rebuild it
        self.lock = threading.Lock()


def _raise_unpicklable() -> None:
    raise _Unpicklable(1, 2)


def test_run_forked_returns_values_raises_errors_and_reports_deaths():
    assert run_forked(pow, 2, 10).result() == 1024
    assert run_forked(os.getpid).result() != os.getpid()
    with pytest.raises(ZeroDivisionError):
        run_forked(divmod, 1, 0).result()
    crash = WorkerCrashError("died", [1, "a"])
    failed = run_forked(_raise, crash)
    assert isinstance(failed.error, WorkerCrashError) and failed.error.items == [1, "a"] and str(failed.error) == "died"
    died = run_forked(_die_on, 5, 5)
    assert died.died and died.exit_status == 3
    with pytest.raises(WorkerCrashError, match="exit status 3"):
        died.result()
    unsent = run_forked(_raise_unpicklable)
    assert isinstance(unsent.error, RuntimeError) and "_Unpicklable" in str(unsent.error)


def _raise(err: BaseException) -> None:
    raise err


def test_run_forked_reports_a_signal_as_negative_exit_status():
    died = run_forked(_kill_self, signal.SIGSEGV)
    assert died.died and died.exit_status == -signal.SIGSEGV
    assert describe_exit(died.exit_status) == "killed by signal 11"


def _kill_self(sig: int) -> None:
    faulthandler.disable()  # pytest's handler would print the child's stack
    os.kill(os.getpid(), sig)
