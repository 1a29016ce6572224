"""What the long phases of a run report while they work (walking RAW, planning, mirroring RAW from object storage):
the ``PhaseProgress`` protocol, a silent one, a counting wrapper and the ETA text.

The terminal line of ``dataprep shard`` (``dataprep.engines.progress.ProgressLine``) implements
the protocol, so walking, planning, mirroring and writing share one line on stderr; the phases
take the protocol, defaulting to ``SILENT``, and never know where it is drawn. It lives at the
bottom of ``dataprep`` since ``inputs`` (the mirror) and ``plan`` (the walk, the plan) report to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol, TypeVar

__all__ = ["SILENT", "PhaseProgress", "counted", "eta_text"]

T = TypeVar("T")


class PhaseProgress(Protocol):
    """Counts of one phase at a time: ``begin``, ``advance`` as items are done, ``end``; ``enabled``: whether it
    draws anything (False: callers may skip counting)."""

    enabled: bool

    def begin(self, phase: str, total: int | None = None, unit: str = "files") -> None:
        """A phase starts (``phase``: "walking RAW"; ``total``: items expected, None when unknown)."""
        ...

    def advance(self, count: int = 1, nbytes: int = 0) -> None:
        """``count`` more items done (``nbytes``: their bytes, 0 when not counted)."""
        ...

    def end(self) -> None:
        """The phase is over (its final counts drawn)."""
        ...


class _Silent:
    """A ``PhaseProgress`` that reports nothing."""

    enabled = False

    def begin(self, phase: str, total: int | None = None, unit: str = "files") -> None:
        pass

    def advance(self, count: int = 1, nbytes: int = 0) -> None:
        pass

    def end(self) -> None:
        pass


SILENT: PhaseProgress = _Silent()


def counted(items: Iterable[T], progress: PhaseProgress) -> Iterator[T]:
    """``items``, one ``progress.advance()`` per item taken (``items`` as they are when ``progress`` draws nothing:
    a walk of 10^8 entries pays nothing for a silent line)."""
    return _counting(items, progress) if progress.enabled else iter(items)


def _counting(items: Iterable[T], progress: PhaseProgress) -> Iterator[T]:
    for item in items:
        progress.advance()
        yield item


def eta_text(done: float, total: float | None, elapsed_s: float) -> str:
    """``"ETA 1:05"`` (or ``"ETA 2:03:04"``) at the rate so far; ``""`` when the total is unknown, nothing is
    done yet or everything is."""
    if total is None or done <= 0 or done >= total or elapsed_s <= 0:
        return ""
    left_s = round(elapsed_s * (total - done) / done)
    hours, rest = divmod(left_s, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"ETA {hours}:{minutes:02d}:{seconds:02d}" if hours else f"ETA {minutes}:{seconds:02d}"
