"""The clock a dataset reports the parts of its own ``__getitem__`` with: ``timed_stage("read" | "decode" |
"transform")``, collected per batch by the loader (``collect_parts``).

It lives below every folder of ``loaders`` (``tools/review/layers.py``) so that the code doing the work
reports it where it runs: the shard datasets time their reads and transforms (``loaders.read.datasets``),
the JPEG decoders their decodes (``loaders.read.decode``), a user's dataset whatever it likes; the loader
collects the parts of each batch on the thread that builds it (``loaders.loader.fetch``) and carries them
back in its ``BatchTiming`` (``loaders.loader.stage_timing``).

Stages are exclusive: a stage timed inside another counts once, as the inner one (a decode inside the
transform that calls it is "decode", the rest of that transform "transform"), so the parts of a batch add up
to at most its dataset time. Outside a batch being collected (a dataset used on its own) a stage costs one
thread-local lookup and reads no clock. Seconds are ``time.perf_counter`` wall time.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import ParamSpec, TypeVar

from loaders.errors import ConfigError

__all__ = ["DATASET_PARTS", "collect_parts", "timed_stage"]

DATASET_PARTS = ("read", "decode", "transform")  # what a dataset may report of its own __getitem__

_P = ParamSpec("_P")
_R = TypeVar("_R")


class _Clock(threading.local):
    """Per thread: the parts being collected (None: no batch is) and the seconds already counted by stages
    nested in the innermost open one."""

    parts: dict[str, float] | None = None
    nested_s: float = 0.0


_clock = _Clock()


@contextlib.contextmanager
def collect_parts() -> Iterator[dict[str, float]]:
    """Collect what ``timed_stage`` reports on this thread while the block runs (a dict part -> seconds)."""
    previous, previous_nested = _clock.parts, _clock.nested_s
    parts: dict[str, float] = {}
    _clock.parts, _clock.nested_s = parts, 0.0
    try:
        yield parts
    finally:
        _clock.parts, _clock.nested_s = previous, previous_nested


class timed_stage:  # noqa: N801 - used as a function: ``with timed_stage("read"):``, ``@timed_stage("decode")``
    """Count the block's (or the decorated function's) wall time as ``name`` of the batch being built,
    less what stages nested in it counted.

    ``with timed_stage("read"): data = fetch(key)`` in a dataset's ``__getitem__``; ``@timed_stage("decode")``
    on a function. ``name``: one of ``DATASET_PARTS`` (ConfigError otherwise).
    """

    __slots__ = ("_name", "_parts", "_outer_nested_s", "_start")

    def __init__(self, name: str) -> None:
        if name not in DATASET_PARTS:
            raise ConfigError(f"timed_stage: the stage must be one of {DATASET_PARTS} (got {name!r})")
        self._name = name
        self._parts: dict[str, float] | None = None
        self._outer_nested_s = 0.0
        self._start = 0.0

    def __enter__(self) -> None:
        clock = _clock
        self._parts = parts = clock.parts
        if parts is not None:
            self._outer_nested_s, clock.nested_s = clock.nested_s, 0.0
            self._start = time.perf_counter()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        parts = self._parts
        if parts is None:
            return
        elapsed = time.perf_counter() - self._start
        clock = _clock
        parts[self._name] = parts.get(self._name, 0.0) + elapsed - clock.nested_s
        clock.nested_s = self._outer_nested_s + elapsed

    def __call__(self, function: Callable[_P, _R]) -> Callable[_P, _R]:
        name = self._name

        @functools.wraps(function)
        def timed(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            with timed_stage(name):
                return function(*args, **kwargs)

        return timed
