"""Planning 10^8 inputs in bounded memory: peak RSS, time and disk of the planner: ``python -m tools.bench.plan_bench``.

Feeds ``dataprep.plan.plan_build.make_run_plan`` a generated listing of ``--entries``
entries (default 10^8) for each layout of ``--layouts``; no file is made:
``SyntheticListing`` is a ``PlanInput`` whose sizes and contents are functions of the
names. Each layout is planned in a child process of its own, so that its peak RSS
(``VmHWM``) is its own; the child reports its RSS before planning (imports done), the
peak, the time, and the disk of the state folder (sampled every second: the plan's files
and the scratch ``plan-spill/``, at their largest, and the plan alone at the end).

Listings (entry i; ``--classes`` folders, names sorted as a walk gives them):

- image-folder: ``cKKKK/IIIIIIIIII.jpg``, one input per entry;
- grouped: ``gKKKK/IIIIIIIIII.jpg`` and ``.txt``, one input per two entries;
- table: ``pKKKK/IIIIIIIIII.jsonl`` (``--schema`` given: no row is read), one input per file;
- text: ``pKKKK/IIIIIIIIII.txt``, one input per file.

Media content: every ``--duplicate-every``-th image is a copy of the one before it (same
size, same bytes); the others have sizes of their own (``--distinct-sizes`` > 0 makes
sizes repeat, so that heads are compared). Bytes per input: the peak's growth over the
RSS before planning, over the inputs planned.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.common.report import ToolError, add_output_args, check_int, emit, format_table

LAYOUTS = ("image-folder", "grouped", "table", "text")
_MTIME_NS = 1_700_000_000 * 10**9
_ROOT = "/synthetic-raw"


@dataclass(frozen=True)
class SyntheticListing:
    """A ``PlanInput`` (``dataprep.plan.plan_input``) of ``entries`` generated entries of ``layout`` (module doc)."""

    layout: str
    entries: int
    classes: int = 1000
    duplicate_every: int = 100
    distinct_sizes: int = 0

    @property
    def single_file(self) -> bool:
        return False

    def items(self) -> Iterator[Any]:
        from dataprep.inputs.walk import RawFile

        per_folder = -(-self.entries // self.classes)
        folder, suffixes = {"image-folder": ("c", (".jpg",)), "grouped": ("g", (".jpg", ".txt")),
                            "table": ("p", (".jsonl",)), "text": ("p", (".txt",))}[self.layout]
        step = len(suffixes)
        for first in range(0, self.entries - step + 1, step):
            i = first // step
            rel_stem = f"{folder}{first // per_folder:04d}/{i:010d}"
            for suffix in suffixes:
                rel = rel_stem + suffix
                yield RawFile(rel, f"{_ROOT}/{rel}", self._size(i), _MTIME_NS)

    def exclusion(self) -> Callable[[str], bool] | None:
        return None

    def _content(self, i: int) -> int:
        every = self.duplicate_every
        return i - 1 if every and i % every == every - 1 else i

    def _size(self, i: int) -> int:
        content = self._content(i)
        return 1024 + (content % self.distinct_sizes if self.distinct_sizes else content)

    def size(self, path: str) -> int:
        return self._size(_number(path))

    def digest(self, path: str, limit: int | None) -> bytes | None:
        return hashlib.blake2b(self._content(_number(path)).to_bytes(8, "little"), digest_size=20).digest()


def _number(path: str) -> int:
    """i of a generated path (``.../IIIIIIIIII.ext``)."""
    return int(path.rpartition("/")[2].partition(".")[0])


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _folder_bytes(folder: Path) -> int:
    total = 0
    for parent, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.stat(os.path.join(parent, name)).st_size
            except OSError:
                pass  # removed while walked
    return total


class _DiskSampler:
    """The largest size of a folder, sampled every ``interval_s`` on a thread of its own (a context manager)."""

    def __init__(self, folder: Path, interval_s: float = 1.0) -> None:
        self.folder, self.interval_s, self.peak_bytes = folder, interval_s, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="disk-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak_bytes = max(self.peak_bytes, _folder_bytes(self.folder))

    def __enter__(self) -> _DiskSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def plan_child(listing: SyntheticListing, folder: Path) -> dict[str, Any]:
    """Plan ``listing`` into ``folder`` in this process: what the parent reports (module doc)."""
    from dataprep.clean.options import TableOptions
    from dataprep.inputs.raw_source import RawSource
    from dataprep.inputs.sources import Layout, LayoutChoice
    from dataprep.plan.plan_build import make_run_plan
    from dataprep.plan.run_plan import PlanOptions

    layout = Layout(listing.layout)
    options = PlanOptions(raw=RawSource(Path(_ROOT)), range_bytes=4 * 2**30,
                          table=TableOptions(schema={"text": "string"}))
    folder.mkdir(parents=True, exist_ok=True)
    baseline_kib, load_before = _status_kib("VmRSS"), os.getloadavg()[0]
    started = time.perf_counter()
    with _DiskSampler(folder) as disk:
        plan = make_run_plan(options, LayoutChoice(layout, "plan_bench"), folder, {"bench": "plan_bench"},
                             source=listing)
    seconds = time.perf_counter() - started
    peak_kib = _status_kib("VmHWM")
    inputs = len(plan)
    return {"layout": listing.layout, "entries": listing.entries, "inputs": inputs, "seconds": seconds,
            "baseline_rss_bytes": baseline_kib * 1024, "peak_rss_bytes": peak_kib * 1024,
            "growth_bytes": (peak_kib - baseline_kib) * 1024,
            "bytes_per_input": (peak_kib - baseline_kib) * 1024 / max(inputs, 1),
            "disk_peak_bytes": max(disk.peak_bytes, _folder_bytes(folder)), "plan_bytes": _folder_bytes(folder),
            "duplicates": len(plan.replaced_index), "ranges": plan.num_ranges,
            "load_average_before": load_before, "load_average_after": os.getloadavg()[0]}


def measure(layout: str, entries: int, folder: Path, *, duplicate_every: int = 100, distinct_sizes: int = 0,
            classes: int = 1000) -> dict[str, Any]:
    """Plan a listing of ``entries`` of ``layout`` in a child process (its own VmHWM); its report."""
    command = [sys.executable, "-m", "tools.bench.plan_bench", "--child", layout, "--entries", str(entries),
               "--dir", os.fspath(folder), "--duplicate-every", str(duplicate_every),
               "--distinct-sizes", str(distinct_sizes), "--classes", str(classes)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    if done.returncode != 0:
        raise ToolError(f"planning {layout} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.plan_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=10**8, help="listing entries per layout (default 10^8)")
    parser.add_argument("--layouts", default="image-folder,text",
                        help=f"comma-separated, of {', '.join(LAYOUTS)} (default image-folder,text)")
    parser.add_argument("--classes", type=int, default=1000, help="class folders (folders of files) (default 1000)")
    parser.add_argument("--duplicate-every", type=int, default=100,
                        help="every Nth image copies the one before it; 0: none (default 100)")
    parser.add_argument("--distinct-sizes", type=int, default=0,
                        help="media sizes repeat with this period; 0: each image its own size (default 0)")
    parser.add_argument("--dir", type=Path, default=None, help="where the plans are built (default: a temp dir)")
    parser.add_argument("--child", choices=LAYOUTS, help=argparse.SUPPRESS)
    add_output_args(parser, plot=None)
    args = parser.parse_args(argv)
    check_int("--entries", args.entries, 2)
    check_int("--classes", args.classes, 1)
    check_int("--duplicate-every", args.duplicate_every, 0)
    check_int("--distinct-sizes", args.distinct_sizes, 0)
    args.layout_list = [name.strip() for name in args.layouts.split(",") if name.strip()]
    unknown = sorted(set(args.layout_list) - set(LAYOUTS))
    if unknown or not args.layout_list:
        raise ToolError(f"--layouts {args.layouts!r}: expected names of {', '.join(LAYOUTS)}")
    return args


def _render(results: dict[str, Any]) -> str:
    mib, gib = 2**20, 2**30
    rows = [[r["layout"], r["entries"], r["inputs"], r["seconds"], r["inputs"] / max(r["seconds"], 1e-9),
             r["baseline_rss_bytes"] / mib, r["peak_rss_bytes"] / mib, r["growth_bytes"] / mib, r["bytes_per_input"],
             16, r["disk_peak_bytes"] / gib, r["plan_bytes"] / gib] for r in results["layouts"]]
    table = format_table(["layout", "entries", "inputs", "s", "inputs/s", "RSS before MiB", "peak RSS MiB",
                          "growth MiB", "bytes/input", "target", "disk peak GiB", "plan GiB"], rows,
                         title="planning a generated listing (one child process per layout; peak = VmHWM)")
    loads = ", ".join(f"{r['layout']} {r['load_average_before']:.2f}->{r['load_average_after']:.2f}"
                      for r in results["layouts"])
    return f"{table}\n\nnote: load average (1 min) before -> after each layout: {loads}"


def main(argv: list[str] | None = None) -> int:
    try:
        args = _arguments(argv)
        if args.child:
            listing = SyntheticListing(args.child, args.entries, args.classes, args.duplicate_every,
                                       args.distinct_sizes)
            print(json.dumps(plan_child(listing, args.dir)))
            return 0
        results = run(args)
    except ToolError as err:
        print(f"plan_bench: {err}", file=sys.stderr)
        return 2
    emit("plan_bench", _render(results), results, args.json, argv)
    return 0


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Each layout planned in a child process, one after the other, each in a folder removed after it."""
    results: dict[str, Any] = {"entries": args.entries, "duplicate_every": args.duplicate_every,
                               "distinct_sizes": args.distinct_sizes, "classes": args.classes, "layouts": []}
    for layout in args.layout_list:
        with tempfile.TemporaryDirectory(prefix="plan_bench-", dir=args.dir) as tmp:
            results["layouts"].append(measure(layout, args.entries, Path(tmp) / "state",
                                              duplicate_every=args.duplicate_every,
                                              distinct_sizes=args.distinct_sizes, classes=args.classes))
    return results


if __name__ == "__main__":
    sys.exit(main())
