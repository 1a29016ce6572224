"""The autotune controller's policy and the advice, on synthetic windows (pure: no workers, no clock)."""

from __future__ import annotations

import pytest

from loaders.loader.accounting import StatsWindow
from loaders.loader.advice import diagnose
from loaders.loader.autotune import MIN_STEPS, Controller, Knobs, Limits, apply


def window(*, wait_s: float, step_s: float, steps: int = 20, dataset_s: float = 0.1, cpu_s: float = 0.002,
           busy_s: float | None = None, built: int = 20, queued: int = 0, decode_s: float = 0.0,
           read_s: float = 0.0) -> StatsWindow:
    """A window of ``steps`` loop batches, each waiting ``wait_s`` and stepping ``step_s``."""
    stages = (("dataset", dataset_s), ("read", read_s), ("decode", decode_s), ("transform", 0.0), ("collate", 0.001),
              ("pin", 0.0), ("transfer", 0.0), ("device_decode", 0.0))
    return StatsWindow(steps=steps, wait_s=wait_s, step_s=step_s, wall_s=steps * (wait_s + step_s), samples=32 * steps,
                  built=built, stages=stages, busy_s=dataset_s if busy_s is None else busy_s, cpu_s=cpu_s,
                  queued=queued)


def step(controller: Controller, knobs: Knobs, observed: StatsWindow) -> Knobs:
    return apply(knobs, controller.decide(observed, knobs))


def test_too_few_batches_decide_nothing_unless_the_loop_waits_most_of_its_time() -> None:
    controller = Controller(Limits(cpus=8))
    knobs = Knobs(2, "thread", 2)
    assert controller.decide(window(wait_s=0.004, step_s=0.01, steps=MIN_STEPS - 1), knobs) == []  # waits 29%
    assert controller.decide(window(wait_s=0.1, step_s=0.01, steps=MIN_STEPS // 2 - 1), knobs) == []
    assert controller.decide(window(wait_s=0.1, step_s=0.01, steps=MIN_STEPS // 2), knobs)  # waits 91%: at once


def test_waiting_reads_in_processes_switch_to_threads_only_where_the_type_is_ours() -> None:
    reads_wait = window(wait_s=0.06, step_s=0.016, cpu_s=0.002, dataset_s=0.13)
    ours = Controller(Limits(cpus=2, can_switch_type=True))
    changes = ours.decide(reads_wait, Knobs(2, "process", 2))
    # pace (0.06 + 0.016) / 0.016 = 4.75: 2 x min(8, 1.5 x 4.75) -> 15 threads, at once
    assert [(c.knob, c.old, c.new) for c in changes] == [("worker_type", "process", "thread"), ("num_workers", 2, 15)]
    assert "reads wait" in changes[0].why
    theirs = Controller(Limits(cpus=2, can_switch_type=False))  # worker_type="process" given: more processes
    assert [(c.knob, c.new) for c in theirs.decide(reads_wait, Knobs(2, "process", 2))] == [("num_workers", 8)]


def test_waiting_reads_grow_thread_workers_past_the_cores_by_the_missing_pace() -> None:
    controller = Controller(Limits(cpus=2, max_threads=64))
    knobs = step(controller, Knobs(2, "thread", 2), window(wait_s=0.048, step_s=0.016))  # pace 4x
    assert knobs.num_workers == 12  # 2 x min(8, 1.5 x 4): waiting threads are cheap, so headroom
    knobs = step(controller, knobs, window(wait_s=0.008, step_s=0.016))  # faster (kept), still 33% waiting
    assert 8 < knobs.num_workers <= 64


def test_cpu_bound_work_stops_at_the_cores() -> None:
    controller = Controller(Limits(cpus=4))
    knobs = step(controller, Knobs(2, "process", 2), window(wait_s=0.1, step_s=0.01, cpu_s=0.1))
    assert knobs.num_workers == 4
    assert step(controller, knobs, window(wait_s=0.05, step_s=0.01, cpu_s=0.1, queued=3)) == knobs
    assert controller.saturated


def test_an_increase_that_does_not_pay_is_undone_and_never_retried() -> None:
    controller = Controller(Limits(cpus=16))
    before = Knobs(4, "process", 2)
    grown = step(controller, before, window(wait_s=0.05, step_s=0.01, cpu_s=0.1))
    assert grown.num_workers > 4
    same_rate = window(wait_s=0.05, step_s=0.01, cpu_s=0.1)  # batches/s unchanged: the cores are spent
    changes = controller.decide(same_rate, grown)
    assert apply(grown, changes) == before and "saturated" in changes[0].why
    assert controller.saturated
    assert apply(before, controller.decide(same_rate, before)).num_workers == 4  # the cap holds


def test_when_the_step_sets_the_pace_idle_workers_are_released_and_a_bad_cut_is_undone() -> None:
    controller = Controller(Limits(cpus=16))
    idle = window(wait_s=0.0001, step_s=0.1, busy_s=0.05)  # 8 workers, each busy 0.05 s per 0.1 s step: 6%
    knobs = step(controller, Knobs(8, "process", 2), idle)
    assert knobs.num_workers == 1  # ceil(8 x 0.0625 / 0.75)
    starved = window(wait_s=0.02, step_s=0.1, busy_s=0.05)
    assert step(controller, knobs, starved).num_workers == 8  # undone; 8 is the floor now
    assert step(controller, Knobs(8, "process", 2), idle).num_workers == 8


def test_busy_workers_are_kept_when_the_step_sets_the_pace() -> None:
    controller = Controller(Limits(cpus=16))
    busy = window(wait_s=0.0001, step_s=0.1, busy_s=0.35)  # 4 workers x 0.35 s per 0.1 s: 87% busy
    assert controller.decide(busy, Knobs(4, "process", 2)) == []


def test_a_loop_waiting_while_batches_are_ready_moves_from_processes_to_threads() -> None:
    controller = Controller(Limits(cpus=2, can_switch_type=True))
    handing_over = window(wait_s=0.006, step_s=0.05, dataset_s=0.001, cpu_s=0.001, queued=2)
    changes = controller.decide(handing_over, Knobs(2, "process", 2))
    assert [(c.knob, c.new) for c in changes] == [("worker_type", "thread")] and "receiving" in changes[0].why


def test_a_deeper_prefetch_that_does_not_pay_is_not_tried_again() -> None:
    controller = Controller(Limits(cpus=2))
    at_cap = window(wait_s=0.05, step_s=0.01, cpu_s=0.1)
    deeper = step(controller, Knobs(2, "process", 2), at_cap)
    assert deeper.prefetch_factor == 3
    back = step(controller, deeper, at_cap)  # no gain: undone
    assert back == Knobs(2, "process", 2) and controller.saturated
    assert controller.decide(at_cap, back) == []


def test_the_memory_budget_caps_batches_in_flight() -> None:
    controller = Controller(Limits(cpus=2, max_threads=64, max_in_flight=10))
    knobs = step(controller, Knobs(2, "thread", 2), window(wait_s=0.2, step_s=0.01))
    assert knobs.num_workers * knobs.prefetch_factor <= 10


def test_gil_bound_threads_at_their_cap_try_processes_once() -> None:
    controller = Controller(Limits(cpus=4, can_switch_type=True))
    gil_bound = window(wait_s=0.015, step_s=0.01, dataset_s=0.1, cpu_s=0.025)  # 4 threads share one core
    changes = controller.decide(gil_bound, Knobs(4, "thread", 2))
    assert [(c.knob, c.new) for c in changes] == [("worker_type", "process")] and "GIL" in changes[0].why
    worse = window(wait_s=0.03, step_s=0.01, dataset_s=0.1, cpu_s=0.1)
    back = apply(Knobs(4, "process", 2), controller.decide(worse, Knobs(4, "process", 2)))
    assert back.worker_type == "thread"
    assert all(c.knob != "worker_type" for c in controller.decide(gil_bound, back))


@pytest.mark.parametrize(("observed", "expected", "words"), [
    (window(wait_s=0.0001, step_s=0.1), "step", "not your bottleneck"),
    (window(wait_s=0.05, step_s=0.01, cpu_s=0.002), "dataset", "reads wait"),
    (window(wait_s=0.05, step_s=0.01, dataset_s=0.1, cpu_s=0.1, decode_s=0.08), "decode", "decode='device'"),
    (window(wait_s=0.05, step_s=0.01, cpu_s=0.1), "dataset", "cores are saturated"),
    (window(wait_s=0.05, step_s=0.01, cpu_s=0.002, read_s=0.09, decode_s=0.005), "read", "reads wait"),
    (window(wait_s=0.05, step_s=0.01, cpu_s=0.08, read_s=0.09, decode_s=0.005), "read", "the disk"),
    (window(wait_s=0.05, step_s=0.01, cpu_s=0.1, read_s=0.01, decode_s=0.08), "decode", "--resize-short"),
])
def test_advice_names_the_bottleneck_and_an_action(observed: StatsWindow, expected: str, words: str) -> None:
    bottleneck, advice = diagnose(observed, Knobs(2, "process", 2), cpus=2)
    assert bottleneck == expected
    assert any(words in sentence for sentence in advice), advice


def test_busy_workers_get_no_switch_and_no_deeper_prefetch_they_cannot_fill() -> None:
    controller = Controller(Limits(cpus=2, can_switch_type=True))
    saturated = window(wait_s=0.05, step_s=0.004, dataset_s=0.11, cpu_s=0.11, queued=1)  # 2 workers ~100% busy
    assert controller.decide(saturated, Knobs(2, "process", 2)) == []
    assert controller.saturated


def test_workers_idle_under_a_step_within_target_are_cut() -> None:
    controller = Controller(Limits(cpus=2))
    within = window(wait_s=0.002, step_s=0.05, dataset_s=0.001, cpu_s=0.001)  # the loop waits ~4%
    assert step(controller, Knobs(2, "process", 2), within).num_workers == 1


def test_a_dataset_that_releases_the_gil_keeps_its_threads() -> None:
    controller = Controller(Limits(cpus=4, can_switch_type=True, releases_gil=True))
    starved = window(wait_s=0.015, step_s=0.01, dataset_s=0.1, cpu_s=0.025)  # looks like the GIL: other load
    assert all(c.knob != "worker_type" for c in controller.decide(starved, Knobs(4, "thread", 2)))


def test_cpu_bound_processes_at_their_cap_get_the_idle_cores_as_threads_and_a_trial_that_does_not_pay_is_undone(
        ) -> None:
    limits = Limits(cpus=8, max_in_flight=4)  # the memory budget caps 2 processes x 2 prefetch below the 8 cores
    cpu_bound = window(wait_s=0.05, step_s=0.01, dataset_s=0.1, cpu_s=0.1)
    controller = Controller(limits)
    knobs = step(controller, Knobs(2, "process", 2), cpu_bound)
    assert knobs == Knobs(2, "process", 2, threads_per_worker=4)  # 2 x 4 = the 8 cores
    assert step(controller, knobs, cpu_bound) == Knobs(2, "process", 2)  # no faster: undone
    assert all(c.knob != "threads_per_worker" for c in controller.decide(cpu_bound, Knobs(2, "process", 2)))
    paying = Controller(limits)
    knobs = step(paying, Knobs(2, "process", 2), cpu_bound)
    faster = window(wait_s=0.01, step_s=0.01, dataset_s=0.05, cpu_s=0.05)  # 2x the batches/s: it stays
    assert step(paying, knobs, faster).threads_per_worker == 4


def test_threads_per_worker_never_take_workers_x_threads_above_the_cores() -> None:
    cpu_bound = window(wait_s=0.05, step_s=0.01, dataset_s=0.1, cpu_s=0.1)
    grown = step(Controller(Limits(cpus=8)), Knobs(2, "process", 2, threads_per_worker=4), cpu_bound)
    assert grown.num_workers > 2 and grown.num_workers * grown.threads_per_worker <= 8
    waiting = window(wait_s=0.05, step_s=0.01, cpu_s=0.002)  # reads that wait: more workers, never threads
    for knobs in (Knobs(1, "thread", 2), Knobs(1, "process", 2)):
        changes = Controller(Limits(cpus=8, max_threads=1)).decide(waiting, knobs)
        assert all(c.knob != "threads_per_worker" for c in changes)
