"""Output helpers shared by every ``tools`` program: tables, the JSON report, progress, plots, checks.

A JSON report is ``{"version", "tool", "argv", "machine": {...}, "results": {...}}``; the
machine block says where the numbers were taken (host, CPU, cores, memory, versions).
Progress goes to stderr and only when stderr is a terminal, so piped output stays clean.
Plots need matplotlib (the optional ``plot`` extra); ``require_plot`` fails before a long
measurement rather than after it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

REPORT_VERSION = 1
_PROGRESS_INTERVAL_S = 0.2  # redraw at most 5 times a second: cheap enough to call per item


class ToolError(Exception):
    """A problem a tools program reports in one line on stderr, then exits with status 2."""


class PlotUnavailable(ToolError):
    """``--plot`` was requested but matplotlib is not installed."""


def add_output_args(parser: argparse.ArgumentParser, *, plot: str | None = "a PNG plot") -> None:
    """Add the output options every tool shares: ``--json [PATH]`` and, unless ``plot`` is
    None, ``--plot PATH``. A bare ``--json`` (or ``--json -``) prints the JSON report to
    stdout instead of the table."""
    parser.add_argument("--json", nargs="?", const="-", metavar="PATH",
                        help="write the JSON report to PATH (no PATH or '-': stdout, instead of the table)")
    if plot is not None:
        parser.add_argument("--plot", metavar="PATH", help=f"save {plot} to PATH (needs matplotlib)")


def machine_info() -> dict[str, Any]:
    """Where a measurement ran: host, CPU model, cores usable by this process, RAM, versions."""
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cores_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cores_total": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "pillow": _version("Pillow-SIMD") or _version("Pillow"),
    }


def report_document(tool: str, results: Mapping[str, Any], argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The JSON report of ``tool``: version, tool, argv (defaults to ``sys.argv``), machine, results."""
    return {
        "version": REPORT_VERSION,
        "tool": tool,
        "argv": list(sys.argv if argv is None else argv),
        "machine": machine_info(),
        "results": dict(results),
    }


def write_json(path: str, doc: Mapping[str, Any]) -> None:
    """Write ``doc`` as indented JSON to ``path`` atomically, or to stdout when ``path`` is '-'."""
    text = json.dumps(doc, indent=2, sort_keys=False) + "\n"
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        # Imported here so that tools.profile.malloc, which imports this module, needs only the stdlib.
        from dataprep.formats.durable import atomic_write_bytes

        atomic_write_bytes(path, text.encode("utf-8"))


def emit(tool: str, text: str, results: Mapping[str, Any], json_path: str | None,
         argv: Sequence[str] | None) -> None:
    """A program's output: the table on stdout (unless ``json_path`` is '-', which keeps
    stdout pure JSON), then the JSON report to ``json_path`` when given.

    argv: the arguments given to ``main`` (None: the process's own ``sys.argv``), recorded
    after the tool's name.
    """
    if json_path != "-":
        print(text)
    if json_path:
        write_json(json_path, report_document(tool, results, sys.argv if argv is None else [tool, *argv]))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None) -> str:
    """Aligned plain-text table; numbers right-aligned, text left-aligned, None shown as '-'.

    Put units in the headers ("MiB/s", "seconds"): cells hold bare numbers.
    """
    cells = [[_format_cell(v) for v in row] for row in rows]
    numeric = [all(isinstance(row[j], (int, float)) or row[j] is None for row in rows) for j in range(len(headers))]
    widths = [max([len(h)] + [len(r[j]) for r in cells]) for j, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    out = [title] if title else []
    out += [line(list(headers)), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)


def _format_cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.1f}"


class Progress:
    """A one-line progress indicator on a terminal's stderr; silent when stderr is not a TTY.

    Use as a context manager; ``update`` is cheap enough to call once per item.
    """

    def __init__(self, label: str, total: int | None = None, *, stream: TextIO | None = None) -> None:
        self._label = label
        self._total = total
        self._stream = sys.stderr if stream is None else stream
        self._enabled = self._stream.isatty()
        self._last_draw = 0.0
        self._drawn = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, done: int, note: str = "") -> None:
        """Show ``done`` items (of ``total`` if known); redraws at most every 0.2 s."""
        if not self._enabled:
            return
        now = time.monotonic()
        if now - self._last_draw < _PROGRESS_INTERVAL_S:
            return
        self._last_draw = now
        of = f"/{self._total:,}" if self._total else ""
        self._stream.write(f"\r\x1b[K{self._label}: {done:,}{of} {note}")
        self._stream.flush()
        self._drawn = True

    def close(self) -> None:
        """Erase the progress line so the next output starts on a clean line."""
        if self._drawn:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._drawn = False


def process_cpu_s() -> float:
    """CPU seconds (user + system) of this process and of its children reaped so far."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def machine_busy_s() -> float | None:
    """CPU seconds all cores have been busy since boot (/proc/stat), None where unavailable."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            ticks = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def check_int(name: str, value: object, minimum: int) -> int:
    """``value`` if it is an int >= ``minimum`` (bools refused), else ``ToolError`` naming it and what it got."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = {0: "a non-negative int", 1: "a positive int"}.get(minimum, f"an int >= {minimum}")
        raise ToolError(f"{name!r} must be {kind} (got {value!r} that is a {type(value).__name__})")
    return value


def int_list(option: str, text: str, *, minimum: int = 0) -> list[int]:
    """``"4,8,16"`` -> [4, 8, 16]; ``ToolError`` naming ``option`` unless every item is an int >= ``minimum``."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError as err:
        raise ToolError(f"{option} must be comma-separated ints >= {minimum}, e.g. 4,8,16 (got {text!r})") from err
    if any(v < minimum for v in values):
        raise ToolError(f"{option} must be comma-separated ints >= {minimum}, e.g. 4,8,16 (got {text!r})")
    return values


def require_plot() -> None:
    """Raise ``PlotUnavailable`` unless matplotlib can be imported; call before measuring."""
    try:
        import matplotlib  # noqa: F401  (only probing that it is installed)
    except ImportError as err:
        hint = "pip install 'shardfeed[plot]'"
        raise PlotUnavailable(f"--plot needs matplotlib, which is not installed ({hint})") from err


def bar_plot(path: str | os.PathLike[str], labels: Sequence[str], values: Sequence[float], *, ylabel: str,
             title: str) -> None:
    """Save a horizontal bar chart as PNG (one bar per label); raises ``PlotUnavailable``."""
    require_plot()
    import matplotlib

    matplotlib.use("Agg")  # no display needed; must precede the pyplot import
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.5 * len(labels) + 1.5))
    ax.barh(list(labels), list(values))
    ax.invert_yaxis()  # first label on top, in table order
    ax.set_xlabel(ylabel)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(Path(path), dpi=120)
    plt.close(fig)


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("model name", "Model", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass  # not Linux: fall back to what the platform module knows
    return platform.processor() or None


def _memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass  # not Linux or an unexpected format: report unknown rather than fail the run
    return None


def _version(distribution: str) -> str | None:
    # Read the installed metadata instead of importing: importing torch costs seconds.
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
