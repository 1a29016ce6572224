"""Timing work on a device: mean ms per call (CUDA events or the host clock) and GPU idle between steps."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch


def synchronize(device: torch.device) -> None:
    """Wait for all work on ``device`` (a no-op off CUDA)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def host_time_ms(fn: Callable[[], object], device: torch.device, *, repeats: int, warmup: int = 2) -> float:
    """Mean milliseconds per call on the host clock, between device-wide synchronizes: for
    work that may run on streams of its own (torchvision's GPU decode)."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    start_s = time.perf_counter()
    for _ in range(repeats):
        fn()
    synchronize(device)
    return (time.perf_counter() - start_s) * 1e3 / repeats


def time_ms(fn: Callable[[], object], device: torch.device, *, repeats: int, warmup: int = 2) -> float:
    """Mean milliseconds per call after ``warmup`` untimed calls (cuDNN autotuning, first
    allocations): CUDA events on the current stream on a GPU, the host clock on the CPU.

    ``fn`` must enqueue all its GPU work on the current stream (or make it wait for its own).
    """
    if device.type != "cuda":
        return host_time_ms(fn, device, repeats=repeats, warmup=warmup)
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(device)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats


class StepTimer:
    """CUDA events around each training step on the current stream: how long that stream
    ran no step inside the timed window. A no-op on other devices (``idle_fraction`` None)."""

    def __init__(self, device: torch.device) -> None:
        self.enabled = device.type == "cuda"
        self.events: list[tuple[Any, Any]] = []

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Time the GPU work enqueued inside the ``with`` block (on the current stream)."""
        if not self.enabled:
            yield
            return
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        yield
        end.record()
        self.events.append((start, end))

    def idle_fraction(self) -> float | None:
        """1 - (sum of step times) / (first step's start to last step's end), GPU clock."""
        if not self.events:
            return None
        self.events[-1][1].synchronize()
        window_ms = self.events[0][0].elapsed_time(self.events[-1][1])
        busy_ms = sum(start.elapsed_time(end) for start, end in self.events)
        return max(0.0, 1.0 - busy_ms / window_ms) if window_ms > 0 else 0.0
