"""The terminal progress line of a run: one line, redrawn in place on stderr when it is a terminal.

The same line shows the phases before writing (walking RAW, planning, mirroring RAW: ``ProgressLine``
is a ``dataprep.phases.PhaseProgress``), each with its counts, rate and, where its total is
known, an ETA; then the writing, with an ETA where the inputs or ranges to go are known.
"""

from __future__ import annotations

import sys
import time
from typing import Protocol, TextIO

from dataprep.formats.manifest import Totals
from dataprep.phases import eta_text


class ProgressSink(Protocol):
    """Where a write loop reports its counts (this run's own work): the terminal line, or a writer's slot."""

    def update(self, done: int, rejected: int, nbytes: int, *, force: bool = False) -> None: ...

    def close(self) -> None: ...


class ProgressLine:
    """A single-line progress display on a terminal (stderr); silent when not a TTY, unless ``enabled``."""

    def __init__(self, total: int | None, *, stream: TextIO | None = None, enabled: bool | None = None,
                 interval_s: float = 0.25) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total = total
        self.interval_s = interval_s
        self.start = time.monotonic()
        self._last = 0.0
        self._width = 0  # the longest line drawn: a shorter one is padded over it; 0: none since close()
        self._phase: tuple[str, int | None, str, float] | None = None  # name, total, unit, start
        self._phase_done = self._phase_bytes = 0

    def update(self, done: int, rejected: int, nbytes: int, *, force: bool = False) -> None:
        elapsed = self._due(force)
        if elapsed is None:
            return
        of_total = f"/{self.total:,}" if self.total is not None else ""
        self._redraw(f"{done:,}{of_total} inputs  {done / elapsed:,.0f} samples/s  "
                     f"{nbytes / elapsed / 1e6:,.1f} MB/s  rejects {rejected:,}  {eta_text(done, self.total, elapsed)}")

    def ranges(self, done: int, total: int, totals: Totals, *, force: bool = False) -> None:
        """The line of a range-parallel run: ranges completed across the cluster, and their samples."""
        elapsed = self._due(force)
        if elapsed is None:
            return
        self._redraw(f"ranges {done:,}/{total:,}  samples {totals.samples_kept:,}  rejects {totals.rejected:,}  "
                     f"inputs {totals.inputs_seen:,}  {totals.inputs_seen / elapsed:,.0f} inputs/s  "
                     f"{eta_text(done, total, elapsed)}")

    def writers(self, phase: str, ranges_done: int, ranges: int, done: int, rejected: int, nbytes: int, *,
                force: bool = False) -> None:
        """The line of a run on writer processes: ``phase`` ("writing", "finding duplicates"), ranges
        finished of ``ranges``, and the inputs, rejects and shard bytes of every writer together."""
        elapsed = self._due(force)
        if elapsed is None:
            return
        self._redraw(f"{phase}: ranges {ranges_done:,}/{ranges:,}  {done:,} inputs  {done / elapsed:,.0f} samples/s  "
                     f"{nbytes / elapsed / 1e6:,.1f} MB/s  rejects {rejected:,}  "
                     f"{eta_text(ranges_done, ranges, elapsed)}")

    def begin(self, phase: str, total: int | None = None, unit: str = "files") -> None:
        """A phase before writing starts (``dataprep.phases.PhaseProgress``): its line replaces the last one."""
        self._phase, self._phase_done, self._phase_bytes = (phase, total, unit, time.monotonic()), 0, 0
        self._draw_phase(force=True)

    def advance(self, count: int = 1, nbytes: int = 0) -> None:
        """``count`` more items (``nbytes`` bytes) of the current phase done."""
        self._phase_done += count
        self._phase_bytes += nbytes
        self._draw_phase(force=False)

    def end(self) -> None:
        """The current phase is over: its final counts drawn (the next line replaces them)."""
        self._draw_phase(force=True)
        self._phase = None
        self.start = time.monotonic()  # the writing's rates and ETA count from the last phase's end

    def _draw_phase(self, *, force: bool) -> None:
        if self._phase is None or self._due(force) is None:
            return
        name, total, unit, started = self._phase
        elapsed, done = max(time.monotonic() - started, 1e-9), self._phase_done
        of_total = f"/{total:,}" if total is not None else ""
        volume = f"{self._phase_bytes / 1e6:,.1f} MB  " if self._phase_bytes else ""
        self._redraw(f"{name}: {done:,}{of_total} {unit}  {volume}{done / elapsed:,.0f} {unit}/s  "
                     f"{eta_text(done, total, elapsed)}")

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
        self._width = max(self._width, len(line), 1)
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()

    def close(self) -> None:
        """End the line drawn (a newline), once: a second close, or one with nothing drawn, writes nothing."""
        if self.enabled and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
