"""loaders.stage_clock: what a stage counts, nested stages counted once, nothing outside a collected batch.
Sleeps are lower bounds; the parts are checked against the wall time around them (sums, not timings)."""

from __future__ import annotations

import threading
import time

import pytest

from loaders import ConfigError
from loaders.stage_clock import DATASET_PARTS, collect_parts, timed_stage

SLEEP_S = 0.01


@timed_stage("decode")
def decode(value: int) -> int:
    """Doubles ``value`` after a sleep (a decode that takes time)."""
    time.sleep(SLEEP_S)
    return 2 * value


def test_a_nested_stage_counts_once_as_the_inner_one() -> None:
    wall = time.perf_counter()
    with collect_parts() as parts:
        with timed_stage("transform"):
            assert decode(3) == 6  # the decorator hands the value back
        with timed_stage("read"):
            time.sleep(SLEEP_S)
    wall = time.perf_counter() - wall
    assert set(parts) == set(DATASET_PARTS)
    assert parts["decode"] >= SLEEP_S and parts["read"] >= SLEEP_S and parts["transform"] >= 0
    # Counted twice (transform including its decode), the parts would add up to more than the wall time.
    assert sum(parts.values()) <= wall


def test_a_stage_that_raises_still_counts() -> None:
    with collect_parts() as parts:
        with pytest.raises(KeyError), timed_stage("read"):
            time.sleep(SLEEP_S)
            raise KeyError("missing")
    assert parts["read"] >= SLEEP_S


def test_nothing_is_kept_outside_a_collected_batch_and_threads_are_apart() -> None:
    assert decode(1) == 2  # no batch being collected: the stage only runs the function
    seen: list[dict[str, float]] = []

    def other_thread() -> None:
        with collect_parts() as theirs:
            decode(1)
        seen.append(theirs)

    with collect_parts() as parts:
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        with collect_parts() as inner:  # a nested collection keeps its own parts, then the outer resumes
            with timed_stage("read"):
                pass
        with timed_stage("transform"):
            pass
    assert set(parts) == {"transform"} and set(inner) == {"read"} and set(seen[0]) == {"decode"}


def test_an_unknown_stage_is_refused() -> None:
    with pytest.raises(ConfigError, match="'decoding'"):
        timed_stage("decoding")
