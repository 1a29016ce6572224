"""The terminal progress line of a run: one line, redrawn in place on stderr when it is a terminal."""

from __future__ import annotations

import sys
import time
from typing import Protocol, TextIO

from dataprep.formats.manifest import Totals


class ProgressSink(Protocol):
    """Where a write loop reports its counts (this run's own work): the terminal line, or a writer's slot."""

    def update(self, done: int, rejected: int, nbytes: int, *, force: bool = False) -> None: ...

    def close(self) -> None: ...


class ProgressLine:
    """A single-line progress display on a terminal (stderr); silent when not a TTY."""

    def __init__(self, total: int | None, *, stream: TextIO | None = None, enabled: bool | None = None,
                 interval_s: float = 0.25) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total = total
        self.interval_s = interval_s
        self.start = time.monotonic()
        self._last = 0.0

    def update(self, done: int, rejected: int, nbytes: int, *, force: bool = False) -> None:
        elapsed = self._due(force)
        if elapsed is None:
            return
        of_total = f"/{self.total:,}" if self.total is not None else ""
        self._redraw(f"{done:,}{of_total} inputs  {done / elapsed:,.0f} samples/s  "
                     f"{nbytes / elapsed / 1e6:,.1f} MB/s  rejects {rejected:,}   ")

    def ranges(self, done: int, total: int, totals: Totals, *, force: bool = False) -> None:
        """The line of a range-parallel run: ranges completed across the cluster, and their samples."""
        elapsed = self._due(force)
        if elapsed is None:
            return
        self._redraw(f"ranges {done:,}/{total:,}  samples {totals.samples_kept:,}  rejects {totals.rejected:,}  "
                     f"inputs {totals.inputs_seen:,}  {totals.inputs_seen / elapsed:,.0f} inputs/s   ")

    def writers(self, phase: str, ranges_done: int, ranges: int, done: int, rejected: int, nbytes: int, *,
                force: bool = False) -> None:
        """The line of a run on writer processes: ``phase`` ("writing", "finding duplicates"), ranges
        finished of ``ranges``, and the inputs, rejects and shard bytes of every writer together."""
        elapsed = self._due(force)
        if elapsed is None:
            return
        self._redraw(f"{phase}: ranges {ranges_done:,}/{ranges:,}  {done:,} inputs  {done / elapsed:,.0f} samples/s  "
                     f"{nbytes / elapsed / 1e6:,.1f} MB/s  rejects {rejected:,}   ")

    def _due(self, force: bool) -> float | None:
        """Seconds since the start when the line is to be redrawn now (enabled, and forced or not drawn
        recently), else None."""
        if not self.enabled:
            return None
        now = time.monotonic()
        if not force and now - self._last < self.interval_s:
            return None
        self._last = now
        return max(now - self.start, 1e-9)

    def _redraw(self, line: str) -> None:
        self.stream.write("\r" + line)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
